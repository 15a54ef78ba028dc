/* kernels/check/check_activation.c — see check_activation.h. */
#include "kernels/check/check_activation.h"
#include "kernels/check/checks.h"

#include <math.h>
#include <stdlib.h>

#include "kernels/activations.h"
#include "kernels/common/ktensor_io.h"

static const int64_t sizes[] = {7, 1001, 4099, 16411};

kcmp_act_kernel kcheck_activation_kernel(kcmp_act_op op, kpath path, int variant)
{
    kcmp_act_kernel k = {0};
    k.op = op;
    k.fn = KCMP_FN_NONE;
    if (op == KCMP_GELU_TANH)
        k.fn = variant == KGELU_TANH_APPROX ? KCMP_FN_TANH_APPROX : variant == KGELU_TANH_SIGMOID ? KCMP_FN_SIGMOID : KCMP_FN_TANH;
    if (op == KCMP_GELU_ERF) k.fn = variant == KGELU_ERF_NORMCDF ? KCMP_FN_NORMCDF : KCMP_FN_ERF;
    k.math_ulps = 2.0; /* tanhf, erff, expf: CUDA's figures (normcdff's 5 is compare_activation's) */
    k.arith = PREC_FP32;
    k.act = kcheck_path_format(path);
    k.grad = path == KPATH_FP8 ? PREC_E5M2 : k.act;
    k.x_scale = k.y_scale = k.g_scale = k.dy_scale = k.dx_scale = 1.0;
    return k;
}

/* A tensor's values: real (what the reference sees) and stored (what goes on
 * the device), with the per-tensor scale for fp8 formats (1 otherwise). */
typedef struct {
    prec_format f;
    double scale;
    double *real, *stored;
} vals;

static int vals_new(vals *v, prec_format f, int64_t n)
{
    v->f = f;
    v->scale = 1.0;
    v->real = malloc((size_t)n * sizeof(double));
    v->stored = malloc((size_t)n * sizeof(double));
    return v->real && v->stored ? 0 : -1;
}

static void vals_free(vals *v)
{
    free(v->real);
    free(v->stored);
}

static int is_fp8(prec_format f) { return f == PREC_E4M3 || f == PREC_E5M2; }

/* Quantise real values into the format (with a fresh scale for fp8). */
static void quantise(vals *v, const double *want, int64_t n)
{
    v->scale = is_fp8(v->f) ? kcheck_fp8_scale(want, n, v->f) : 1.0;
    for (int64_t i = 0; i < n; i++) {
        v->stored[i] = prec_rne(want[i] / v->scale, v->f);
        v->real[i] = v->stored[i] * v->scale;
    }
}

static int upload(ktensor *t, const vals *v)
{
    if (ktensor_upload(t, v->stored)) return -1;
    return is_fp8(v->f) ? ktensor_set_scale(t, (float)v->scale) : 0;
}

static int download_real(const ktensor *t, double scale, double *out, int64_t n)
{
    if (ktensor_download(t, out)) return -1;
    for (int64_t i = 0; i < n; i++) out[i] *= scale;
    return 0;
}

static int check_size(kcheck_ctx *ctx, kpath path, int variant, const kact_check_desc *d, int64_t n)
{
    const char *name = kcmp_act_name(d->op);
    kcmp_act_kernel k = kcheck_activation_kernel(d->op, path, variant);
    const int fp8 = path == KPATH_FP8, store_grad = variant == d->store_grad_variant;
    vals x, y, g, dy, dx;
    double *want = malloc((size_t)n * sizeof(double)), *yref = malloc((size_t)n * sizeof(double));
    double *dfref = malloc((size_t)n * sizeof(double)), *dxref = malloc((size_t)n * sizeof(double));
    double *y_got = malloc((size_t)n * sizeof(double)), *dx_got = malloc((size_t)n * sizeof(double));
    double *g_got = malloc((size_t)n * sizeof(double)); /* the gradient branch as stored (store_grad) */
    ktensor tx = {0}, ty = {0}, tg = {0}, tdy = {0}, tdx = {0};
    int rc = -1, ok = want && yref && dfref && dxref && y_got && dx_got && g_got;
    /* every allocation attempted (| does not short-circuit), so the cleanup frees them all */
    ok &= (vals_new(&x, k.act, n) | vals_new(&y, k.act, n) | vals_new(&g, k.act, n) | vals_new(&dy, k.grad, n) |
           vals_new(&dx, k.grad, n)) == 0;
    if (!ok) {
        kernels_fail("%s check: out of host memory", name);
        goto done;
    }
    prec_rng rng;
    kcheck_rng(ctx, &rng);
    for (int64_t i = 0; i < n; i++) want[i] = d->x_sigma * prec_rng_normal(&rng);
    quantise(&x, want, n);
    for (int64_t i = 0; i < n; i++) want[i] = prec_rng_normal(&rng);
    quantise(&dy, want, n);
    /* fp8 output scales come from the references' amax, as current scaling sets them */
    if (fp8) {
        if (kcmp_act_reference(d->op, n, x.real, dy.real, yref, dfref, dxref) != 0) {
            kernels_fail("%s check: out of host memory", name);
            goto done;
        }
        quantise(&y, yref, n);
        quantise(&g, dfref, n);
        quantise(&dx, dxref, n);
    }
    int64_t shp[1] = {n};
    if (ktensor_alloc(&tx, k.act, 1, shp) || ktensor_alloc(&ty, k.act, 1, shp) || ktensor_alloc(&tdy, k.grad, 1, shp) ||
        ktensor_alloc(&tdx, k.grad, 1, shp) || (store_grad && ktensor_alloc(&tg, k.act, 1, shp)) || upload(&tx, &x) ||
        upload(&tdy, &dy))
        goto done;
    /* output scales (fp8): set before the launch, as delayed/current scaling does */
    if (fp8 && (ktensor_set_scale(&ty, (float)y.scale) || ktensor_set_scale(&tdx, (float)dx.scale) ||
                (store_grad && ktensor_set_scale(&tg, (float)g.scale))))
        goto done;
    if (d->forward(&ty, store_grad ? &tg : NULL, &tx, variant) ||
        d->backward(&tdx, &tdy, store_grad ? &tg : &tx, variant) || kernels_sync(name) ||
        download_real(&ty, y.scale, y_got, n) || download_real(&tdx, dx.scale, dx_got, n) ||
        (store_grad && download_real(&tg, g.scale, g_got, n)))
        goto done;
    k.x_scale = x.scale;
    k.y_scale = y.scale;
    k.g_scale = g.scale;
    k.dy_scale = dy.scale;
    k.dx_scale = dx.scale;
    char shape[64];
    snprintf(shape, sizeof shape, "n=%lld", (long long)n);
    const kcmp_act_data data = {n, x.real, y_got, store_grad ? g_got : NULL, dy.real, dx_got};
    kcheck_acc rows[KCMP_ACT_MAX_ROWS];
    int n_rows = kcmp_activation(&k, &data, shape, rows);
    if (n_rows < 0) {
        kernels_fail("%s check: out of host memory", name);
        goto done;
    }
    for (int i = 0; i < n_rows; i++) kcheck_report(ctx, &rows[i].row);
    rc = 0;
done:
    ktensor_free(&tx); ktensor_free(&ty); ktensor_free(&tg); ktensor_free(&tdy); ktensor_free(&tdx);
    vals_free(&x); vals_free(&y); vals_free(&g); vals_free(&dy); vals_free(&dx);
    free(want); free(yref); free(dfref); free(dxref); free(y_got); free(dx_got); free(g_got);
    return rc;
}

int kcheck_activation(kcheck_ctx *ctx, kpath path, int variant, const kact_check_desc *d)
{
    int n = (int)(sizeof sizes / sizeof sizes[0]);
    if (kcheck_quick(ctx)) n = 2;
    for (int i = 0; i < n; i++)
        if (check_size(ctx, path, variant, d, sizes[i]) != 0) return -1;
    return 0;
}
