/* kernels/check/compare_polar_express.c — one stage of polar express against
 * MPFR with the bound of a described kernel (compare_polar_express.h). */
#include "kernels/check/compare_polar_express.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/polar_express.h"
#include "reference/polar_express.h"

static const prec_format F32 = PREC_FP32;

static double sqrt_d(double x) { return sqrt(x); }

static double gemm_factor(const kcmp_pe_kernel *k, int64_t K)
{
    prec_dot_model m = k->gemm;
    m.depth = K;
    int truncating;
    return prec_dot_factor(&m, K, &truncating);
}

/* Bounds for one wide step on X [m, n] (row-major): out_e[i*n + j], and the
 * magnitude each is proportional to, out_s = sum_k |B_ik X_kj| + |a X_ij|. */
static int step_bound(const kcmp_pe_kernel *k, int64_t m, int64_t n, const double *X, double a, double b, double c,
                      double *out_e, double *out_s)
{
    const prec_format f = k->storage;
    const double u = prec_format_get(f)->unit_roundoff;
    const double gn = gemm_factor(k, n), gm = gemm_factor(k, m);
    double *A = calloc(m * m, sizeof(double)), *EA = calloc(m * m, sizeof(double));
    double *B = calloc(m * m, sizeof(double)), *EB = calloc(m * m, sizeof(double));
    if (!A || !EA || !B || !EB) {
        free(A); free(EA); free(B); free(EB);
        return -1;
    }
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < m; j++) {
            double v = 0, P = 0;
            for (int64_t q = 0; q < n; q++) {
                v += X[i * n + q] * X[j * n + q];
                P += fabs(X[i * n + q] * X[j * n + q]);
            }
            A[i * m + j] = v;
            EA[i * m + j] = gn * P + u * (fabs(v) + gn * P) + (double)n * 0x1p-150 + 0.5 * prec_format_get(f)->min_subnormal;
        }
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < m; j++) {
            double v = 0, prop = 0, P = 0;
            for (int64_t q = 0; q < m; q++) {
                double ai = A[i * m + q], aq = A[q * m + j], ei = EA[i * m + q], eq = EA[q * m + j];
                v += ai * aq;
                prop += fabs(ai) * eq + ei * fabs(aq) + ei * eq;
                P += (fabs(ai) + ei) * (fabs(aq) + eq);
            }
            kval acc = {v, prop + gm * P + (double)m * 0x1p-150, 0.0};
            kval ahat = {A[i * m + j], EA[i * m + j], 0.0};
            kval z = kval_add(kval_mul(acc, kval_exact(c), F32), kval_mul(ahat, kval_exact(b), F32), F32);
            z = kval_round(z, f);
            B[i * m + j] = z.v;
            EB[i * m + j] = z.e;
        }
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double v = 0, prop = 0, P = 0;
            for (int64_t q = 0; q < m; q++) {
                double x = fabs(X[q * n + j]);
                v += B[i * m + q] * X[q * n + j];
                prop += EB[i * m + q] * x;
                P += (fabs(B[i * m + q]) + EB[i * m + q]) * x;
            }
            kval bx = {v, prop + gm * P + (double)m * 0x1p-150, 0.0};
            kval ax = kval_mul(kval_exact(X[i * n + j]), kval_exact(a), F32);
            kval y = k->fused ? kval_add(bx, ax, F32) : kval_add(ax, kval_round(bx, f), F32);
            out_e[i * n + j] = kval_round(y, f).e;
            out_s[i * n + j] = P + fabs(a * X[i * n + j]);
        }
    free(A); free(EA); free(B); free(EB);
    return 0;
}

static int normalize_row(const kcmp_pe_kernel *k, const kcmp_pe_data *d, const char *shape, kcheck_acc *row)
{
    const prec_format f = k->storage;
    const int64_t n = d->rows * d->cols;
    const double *g = d->x;
    double *ref = malloc(n * sizeof(double));
    if (!ref) return -1;
    ref_ctx rctx = REF_CTX_DEFAULT;
    ref_polar_express_normalize(&rctx, d->rows, d->cols, g, KPE_NORM_SAFETY, KPE_NORM_EPS, ref);
    kval_sum ss;
    kval_sum_init(&ss);
    for (int64_t i = 0; i < n; i++) kval_sum_add(&ss, kval_exact(g[i] * g[i]));
    kval sum = kval_sum_finish(&ss, k->norm_depth, F32);
    kval norm = kval_monotone(sum, sqrt_d, 0.0, INFINITY, 0.5, 0.0, F32);
    const prec_format na = k->norm_arith;
    if (na != F32) norm = kval_round(norm, na);
    kval den = kval_add(kval_mul(norm, kval_exact(KPE_NORM_SAFETY), na), kval_exact(KPE_NORM_EPS), na);
    kcheck_acc_init(row, "x0", shape, prec_format_get(f)->unit_roundoff);
    for (int64_t i = 0; i < n; i++) {
        kval y = kval_round(kval_div(kval_exact(g[i]), den, na), f);
        if (kcheck_acc_add(row, i, d->y[i], ref[i], y.e, y.p, fabs(ref[i])))
            kcheck_acc_detail(row, "element %lld: got %.9g ref %.17g g %.9g", (long long)i, d->y[i], ref[i], g[i]);
    }
    kcheck_acc_finish(row);
    free(ref);
    return 1;
}

int kcmp_polar_express(const kcmp_pe_kernel *k, const kcmp_pe_data *d, const char *shape, kcheck_acc *row)
{
    if (d->step < 0 || d->step > KPE_STEPS) return -1;
    if (d->step == 0) return normalize_row(k, d, shape, row);
    const int64_t R = d->rows, C = d->cols, n = R * C;
    double *ref = malloc(n * sizeof(double)), *e = malloc(n * sizeof(double)), *sc = malloc(n * sizeof(double));
    const int tall = k->tall || k->either_form;
    double *xt = tall ? malloc(n * sizeof(double)) : NULL, *et = tall ? malloc(n * sizeof(double)) : NULL;
    double *sct = tall ? malloc(n * sizeof(double)) : NULL;
    int rc = -1;
    if (!ref || !e || !sc || (tall && (!xt || !et || !sct))) goto done;
    ref_ctx rctx = REF_CTX_DEFAULT;
    ref_polar_express_step(&rctx, R, C, d->x, d->a, d->b, d->c, ref);
    if (!k->tall || k->either_form) {
        if (step_bound(k, R, C, d->x, d->a, d->b, d->c, e, sc)) goto done;
    }
    if (k->tall || k->either_form) { /* the tall form is the wide analysis of X^T */
        for (int64_t i = 0; i < R; i++)
            for (int64_t j = 0; j < C; j++) xt[j * R + i] = d->x[i * C + j];
        if (step_bound(k, C, R, xt, d->a, d->b, d->c, et, sct)) goto done;
        for (int64_t i = 0; i < R; i++)
            for (int64_t j = 0; j < C; j++) {
                const int64_t w = i * C + j, t = j * R + i;
                if (k->either_form && e[w] >= et[t]) continue; /* the wide bound is the larger */
                e[w] = et[t];
                sc[w] = sct[t];
            }
    }
    static const char *const names[KPE_STEPS + 1] = {"x0", "x1", "x2", "x3", "x4", "x5"};
    kcheck_acc_init(row, names[d->step], shape, prec_format_get(k->storage)->unit_roundoff);
    for (int64_t i = 0; i < n; i++)
        if (kcheck_acc_add(row, i, d->y[i], ref[i], e[i], e[i], sc[i]))
            kcheck_acc_detail(row, "step %d element %lld: got %.9g ref %.17g input %.9g (a b c = %g %g %g)", d->step,
                              (long long)i, d->y[i], ref[i], d->x[i], d->a, d->b, d->c);
    kcheck_acc_finish(row);
    rc = 1;
done:
    free(ref); free(e); free(sc); free(xt); free(et); free(sct);
    return rc;
}
