/* kernels/check/compare_activation.c — the activations' outputs against MPFR
 * with the bound of a described kernel (compare_activation.h).  The replays
 * follow kernels/gelu_tanh.cu, gelu_erf.cu, relu2.cu and leaky_relu2.cu
 * operation by operation. */
#include "kernels/check/compare_activation.h"

#include <math.h>
#include <stdlib.h>

#include "reference/gelu_erf.h"
#include "reference/gelu_tanh.h"
#include "reference/relu2.h"

static const prec_format F32 = PREC_FP32;

#define K0 0.79788456080286535587989 /* sqrt(2/pi) */
#define K1 0.044715
#define INV_SQRT2 0.70710678118654752440
#define INV_SQRT2PI 0.39894228040143267794

static double exp_d(double t) { return exp(t); }
static double tanh_d(double t) { return tanh(t); }
static double erf_d(double t) { return erf(t); }
static double phi_cdf(double t) { return 0.5 * erfc(-t * INV_SQRT2); }

/* ---- gelu_tanh: fp32 constants, tanhf or tanh.approx.f32, or expf in the sigmoid form ---- */

static kval gelu_tanh_z(kval x, prec_format a)
{
    kval x3 = kval_mul(kval_mul(x, x, a), x, a);
    return kval_mul(kval_constant(K0, a), kval_fma(kval_constant(K1, a), x3, x, a), a);
}

static kval tanh_of(kval z, kcmp_act_fn fn, double ulps, prec_format a)
{
    /* tanh.approx.f32: 2^-10.987 absolute (PTX ISA), an upper bound whether its figure is read as relative or absolute */
    if (fn == KCMP_FN_TANH_APPROX) return kval_monotone(z, tanh_d, -INFINITY, INFINITY, 0.0, exp2(-10.987), F32);
    return kval_monotone(z, tanh_d, -INFINITY, INFINITY, ulps, 0.0, a);
}

/* e^-2z as the sigmoid form computes it */
static kval sigmoid_exp(kval z, double ulps, prec_format a)
{
    return kval_monotone(kval_mul(kval_exact(-2.0), z, a), exp_d, -INFINITY, INFINITY, ulps, 0.0, a);
}

static kval gelu_tanh_f(kval x, kcmp_act_fn fn, double ulps, prec_format a)
{
    kval z = gelu_tanh_z(x, a), one = kval_exact(1.0);
    if (fn == KCMP_FN_SIGMOID) return kval_div(x, kval_add(one, sigmoid_exp(z, ulps, a), a), a);
    return kval_mul(kval_mul(kval_exact(0.5), x, a), kval_add(one, tanh_of(z, fn, ulps, a), a), a);
}

static kval gelu_tanh_df(kval x, kcmp_act_fn fn, double ulps, prec_format a)
{
    kval one = kval_exact(1.0), half = kval_exact(0.5);
    kval x2 = kval_mul(x, x, a);
    kval z = kval_mul(kval_constant(K0, a), kval_fma(kval_constant(K1, a), kval_mul(x2, x, a), x, a), a);
    kval k13 = kval_mul(kval_exact(3.0), kval_constant(K1, a), a);
    kval dz = kval_mul(kval_constant(K0, a), kval_fma(k13, x2, one, a), a);
    if (fn == KCMP_FN_SIGMOID) {
        kval s = kval_div(one, kval_add(one, sigmoid_exp(z, ulps, a), a), a);
        kval t = kval_mul(kval_mul(kval_mul(kval_exact(2.0), x, a), dz, a), s, a);
        return kval_add(s, kval_mul(t, kval_sub(one, s, a), a), a);
    }
    kval t = tanh_of(z, fn, ulps, a);
    kval h = kval_mul(half, kval_add(one, t, a), a);
    kval b = kval_mul(kval_mul(kval_mul(half, x, a), kval_sub(one, kval_mul(t, t, a), a), a), dz, a);
    return kval_add(h, b, a);
}

/* |(1 + t)/2| + |x/2 (1 - t^2) dz| with 1 + tanh z = 2 / (1 + e^-2z) and
 * 1 - tanh^2 z = 4 / (e^z + e^-z)^2, which do not cancel for large |z|. */
static double gelu_tanh_df_scale(double x)
{
    double z = K0 * (x + K1 * x * x * x), dz = K0 * (1 + 3 * K1 * x * x);
    double one_plus_t = 2.0 / (1.0 + exp(-2.0 * z)), ch = exp(z) + exp(-z);
    return 0.5 * one_plus_t + fabs(0.5 * x * dz) * 4.0 / (ch * ch);
}

/* ---- gelu_erf: erff or normcdff, expf for phi in the backward ---- */

static kval erf_part(kval x, double ulps, prec_format a)
{
    return kval_monotone(kval_mul(x, kval_constant(INV_SQRT2, a), a), erf_d, -INFINITY, INFINITY, ulps, 0.0, a);
}

static kval cdf_of(kval x, kcmp_act_fn fn, double ulps, prec_format a)
{
    if (fn == KCMP_FN_NORMCDF) return kval_monotone(x, phi_cdf, -INFINITY, INFINITY, ulps > 5.0 ? ulps : 5.0, 0.0, a);
    return kval_mul(kval_exact(0.5), kval_add(kval_exact(1.0), erf_part(x, ulps, a), a), a);
}

static kval gelu_erf_f(kval x, kcmp_act_fn fn, double ulps, prec_format a)
{
    if (fn == KCMP_FN_NORMCDF) return kval_mul(x, cdf_of(x, fn, ulps, a), a);
    return kval_mul(kval_mul(kval_exact(0.5), x, a), kval_add(kval_exact(1.0), erf_part(x, ulps, a), a), a);
}

static kval gelu_erf_df(kval x, kcmp_act_fn fn, double ulps, prec_format a)
{
    kval arg = kval_mul(kval_mul(kval_exact(-0.5), x, a), x, a);
    kval pdf = kval_mul(kval_monotone(arg, exp_d, -INFINITY, INFINITY, ulps, 0.0, a), kval_constant(INV_SQRT2PI, a), a);
    return kval_add(cdf_of(x, fn, ulps, a), kval_mul(x, pdf, a), a);
}

static double gelu_erf_df_scale(double x) { return phi_cdf(x) + fabs(x) * exp(-0.5 * x * x) * INV_SQRT2PI; }

/* ---- relu2: r = max(x, 0), y = r r, f' = 2 r; leaky_relu2: r = x > 0 ? x : x/2, f' = x > 0 ? 2x : x/2 ---- */

static kval relu_part(kval x) { return x.v > 0 ? x : kval_exact(0.0); }
static kval relu2_f(kval x, kcmp_act_fn fn, double ulps, prec_format a) { kval r = relu_part(x); return kval_mul(r, r, a); }
static kval relu2_df(kval x, kcmp_act_fn fn, double ulps, prec_format a) { return kval_mul(kval_exact(2.0), relu_part(x), a); }
static double relu2_df_scale(double x) { return x > 0 ? 2 * x : 0.0; }

static kval leaky_f(kval x, kcmp_act_fn fn, double ulps, prec_format a)
{
    kval r = x.v > 0 ? x : kval_mul(kval_exact(0.5), x, a);
    return kval_mul(r, r, a);
}
static kval leaky_df(kval x, kcmp_act_fn fn, double ulps, prec_format a)
{
    return kval_mul(kval_exact(x.v > 0 ? 2.0 : 0.5), x, a);
}
static double leaky_df_scale(double x) { return x > 0 ? 2 * x : 0.5 * fabs(x); }

typedef kval (*replay_fn)(kval x, kcmp_act_fn fn, double ulps, prec_format a);

static const struct {
    const char *name;
    replay_fn f, df;
    double (*df_scale)(double x); /* sum of the magnitudes of f'(x)'s terms: the scale dx's error is quoted against */
    void (*ref_forward)(ref_ctx *ctx, long n, const double *x, double *y);
    void (*ref_backward)(ref_ctx *ctx, long n, const double *x, const double *dy, double *dx);
    kcmp_act_fn forms[3];         /* what KCMP_FN_ANY ranges over */
    int n_forms;
} act_ops[] = {
    [KCMP_GELU_TANH] = {"gelu_tanh", gelu_tanh_f, gelu_tanh_df, gelu_tanh_df_scale, ref_gelu_tanh_forward,
                        ref_gelu_tanh_backward, {KCMP_FN_TANH, KCMP_FN_TANH_APPROX, KCMP_FN_SIGMOID}, 3},
    [KCMP_GELU_ERF] = {"gelu_erf", gelu_erf_f, gelu_erf_df, gelu_erf_df_scale, ref_gelu_erf_forward,
                       ref_gelu_erf_backward, {KCMP_FN_ERF, KCMP_FN_NORMCDF}, 2},
    [KCMP_RELU2] = {"relu2", relu2_f, relu2_df, relu2_df_scale, ref_relu2_forward, ref_relu2_backward, {KCMP_FN_NONE}, 1},
    [KCMP_LEAKY_RELU2] = {"leaky_relu2", leaky_f, leaky_df, leaky_df_scale, ref_leaky_relu2_forward,
                          ref_leaky_relu2_backward, {KCMP_FN_NONE}, 1},
};

const char *kcmp_act_name(kcmp_act_op op) { return act_ops[op].name; }

int kcmp_act_reference(kcmp_act_op op, int64_t n, const double *x, const double *dy, double *y, double *df, double *dx)
{
    double *ones = malloc((size_t)(n ? n : 1) * sizeof(double));
    if (!ones) return -1;
    for (int64_t i = 0; i < n; i++) ones[i] = 1.0;
    ref_ctx rctx = REF_CTX_DEFAULT;
    act_ops[op].ref_forward(&rctx, n, x, y);
    act_ops[op].ref_backward(&rctx, n, x, ones, df);
    act_ops[op].ref_backward(&rctx, n, x, dy, dx);
    free(ones);
    return 0;
}

/* f or f' of the kernel; KCMP_FN_ANY: a bound that holds for each of the
 * op's forms (their exact values differ only by double rounding, which the
 * bound takes in too). */
static kval replay(const kcmp_act_kernel *k, replay_fn fn, kval x)
{
    if (k->fn != KCMP_FN_ANY) return fn(x, k->fn, k->math_ulps, k->arith);
    kval r = fn(x, act_ops[k->op].forms[0], k->math_ulps, k->arith);
    for (int i = 1; i < act_ops[k->op].n_forms; i++) {
        kval o = fn(x, act_ops[k->op].forms[i], k->math_ulps, k->arith);
        double gap = fabs(o.v - r.v);
        r.e = fmax(r.e, o.e + gap);
        r.p = fmax(r.p, o.p + gap);
    }
    return r;
}

static int is_fp8(prec_format f) { return f == PREC_E4M3 || f == PREC_E5M2; }

/* The value a kernel reads: stored scale in fp32 (exact without a scale). */
static kval read_kval(double real, prec_format f, double scale)
{
    if (!is_fp8(f)) return kval_exact(real);
    kval k = kval_mul(kval_exact(real / scale), kval_exact(scale), F32);
    k.v = real;
    return k;
}

/* A value the kernel stores: divided by the scale in fp32, rounded into the
 * format, read back times the scale (exactly, on the host). */
static kval store_kval(kval y, prec_format f, double scale)
{
    if (!is_fp8(f)) return kval_round(y, f);
    kval q = kval_round(kval_div(y, kval_exact(scale), F32), f);
    kval r = {q.v * scale, q.e * scale, q.p * scale};
    return r;
}

int kcmp_activation(const kcmp_act_kernel *k, const kcmp_act_data *d, const char *shape,
                    kcheck_acc rows[KCMP_ACT_MAX_ROWS])
{
    const int64_t n = d->n;
    const int forward = d->y != NULL, stored_grad = d->g != NULL, backward = d->dy && d->dx;
    double *yref = forward ? malloc((size_t)n * sizeof(double)) : NULL;
    double *dfref = stored_grad ? malloc((size_t)n * sizeof(double)) : NULL;
    double *dxref = backward ? malloc((size_t)n * sizeof(double)) : NULL;
    double *ones = stored_grad ? malloc((size_t)n * sizeof(double)) : NULL;
    if ((forward && !yref) || (stored_grad && (!dfref || !ones)) || (backward && !dxref)) {
        free(yref); free(dfref); free(dxref); free(ones);
        return -1;
    }
    ref_ctx rctx = REF_CTX_DEFAULT;
    if (forward) act_ops[k->op].ref_forward(&rctx, n, d->x, yref);
    if (stored_grad) {
        for (int64_t i = 0; i < n; i++) ones[i] = 1.0;
        act_ops[k->op].ref_backward(&rctx, n, d->x, ones, dfref);
    }
    if (backward) act_ops[k->op].ref_backward(&rctx, n, d->x, d->dy, dxref);
    int n_rows = 0;
    if (forward) {
        kcheck_acc *acc = &rows[n_rows++];
        kcheck_acc_init(acc, "y", shape, prec_format_get(k->act)->unit_roundoff);
        for (int64_t i = 0; i < n; i++) {
            kval y = store_kval(replay(k, act_ops[k->op].f, read_kval(d->x[i], k->act, k->x_scale)), k->act, k->y_scale);
            if (kcheck_acc_add(acc, i, d->y[i], yref[i], y.e, y.p, fabs(yref[i])))
                kcheck_acc_detail(acc, "[%lld]: got %.9g ref %.17g x=%.9g", (long long)i, d->y[i], yref[i], d->x[i]);
        }
    }
    if (forward && stored_grad) {
        kcheck_acc *acc = &rows[n_rows++];
        kcheck_acc_init(acc, "grad", shape, prec_format_get(k->act)->unit_roundoff);
        for (int64_t i = 0; i < n; i++) {
            kval g = store_kval(replay(k, act_ops[k->op].df, read_kval(d->x[i], k->act, k->x_scale)), k->act, k->g_scale);
            if (kcheck_acc_add(acc, i, d->g[i], dfref[i], g.e, g.p, fabs(dfref[i])))
                kcheck_acc_detail(acc, "[%lld]: got %.9g ref %.17g x=%.9g", (long long)i, d->g[i], dfref[i], d->x[i]);
        }
    }
    if (backward) {
        kcheck_acc *acc = &rows[n_rows++];
        kcheck_acc_init(acc, "dx", shape, prec_format_get(k->grad)->unit_roundoff);
        for (int64_t i = 0; i < n; i++) {
            kval deriv;
            if (stored_grad) {
                /* the kernel read the stored g, whose actual error is known */
                double e = fabs(d->g[i] - dfref[i]) * (1.0 + 0x1p-40);
                deriv = (kval){dfref[i], e, e};
                if (is_fp8(k->act)) deriv = kval_round(deriv, F32); /* stored scale, rounded in fp32 */
            } else {
                deriv = replay(k, act_ops[k->op].df, read_kval(d->x[i], k->act, k->x_scale));
            }
            kval dx = store_kval(kval_mul(read_kval(d->dy[i], k->grad, k->dy_scale), deriv, k->arith), k->grad, k->dx_scale);
            double scale = fabs(d->dy[i]) * act_ops[k->op].df_scale(d->x[i]);
            if (kcheck_acc_add(acc, i, d->dx[i], dxref[i], dx.e, dx.p, scale))
                kcheck_acc_detail(acc, "[%lld]: got %.9g ref %.17g x=%.9g dy=%.9g", (long long)i, d->dx[i], dxref[i],
                                  d->x[i], d->dy[i]);
        }
    }
    for (int i = 0; i < n_rows; i++) kcheck_acc_finish(&rows[i]);
    free(yref); free(dfref); free(dxref); free(ones);
    return n_rows;
}
