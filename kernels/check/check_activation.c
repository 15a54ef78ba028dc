/* kernels/check/check_activation.c — see check_activation.h. */
#include "kernels/check/check_activation.h"
#include "kernels/check/checks.h"

#include <math.h>
#include <stdlib.h>

#include "kernels/common/ktensor_io.h"

static const prec_format F32 = PREC_FP32;

static const int64_t sizes[] = {7, 1001, 4099, 16411};

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

/* The value a kernel reads: stored * scale in fp32 (exact without a scale). */
static kval read_kval(const vals *v, int64_t i)
{
    if (!is_fp8(v->f)) return kval_exact(v->real[i]);
    kval k = kval_mul(kval_exact(v->stored[i]), kval_exact(v->scale), F32);
    k.v = v->real[i];
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
    const int fp8 = path == KPATH_FP8, store_grad = variant == d->store_grad_variant;
    const prec_format fa = kcheck_path_format(path), fg = fp8 ? PREC_E5M2 : fa;
    vals x, y, g, dy, dx;
    double *want = malloc((size_t)n * sizeof(double)), *yref = malloc((size_t)n * sizeof(double));
    double *dfref = malloc((size_t)n * sizeof(double)), *dxref = malloc((size_t)n * sizeof(double));
    double *got = malloc((size_t)n * sizeof(double)), *ones = malloc((size_t)n * sizeof(double));
    double *g_read = malloc((size_t)n * sizeof(double)); /* the gradient branch as stored (store_grad) */
    ktensor tx = {0}, ty = {0}, tg = {0}, tdy = {0}, tdx = {0};
    int rc = -1, ok = want && yref && dfref && dxref && got && ones && g_read;
    /* every allocation attempted (| does not short-circuit), so the cleanup frees them all */
    ok &= (vals_new(&x, fa, n) | vals_new(&y, fa, n) | vals_new(&g, fa, n) | vals_new(&dy, fg, n) |
           vals_new(&dx, fg, n)) == 0;
    if (!ok) {
        kernels_fail("%s check: out of host memory", d->name);
        goto done;
    }
    prec_rng rng;
    kcheck_rng(ctx, &rng);
    ref_ctx rctx = REF_CTX_DEFAULT;
    for (int64_t i = 0; i < n; i++) want[i] = d->x_sigma * prec_rng_normal(&rng);
    quantise(&x, want, n);
    for (int64_t i = 0; i < n; i++) want[i] = prec_rng_normal(&rng);
    quantise(&dy, want, n);
    /* references first: fp8 output scales come from the outputs' amax */
    d->ref_forward(&rctx, n, x.real, yref);
    d->ref_backward(&rctx, n, x.real, dy.real, dxref);
    for (int64_t i = 0; i < n; i++) ones[i] = 1.0;
    d->ref_backward(&rctx, n, x.real, ones, dfref);
    quantise(&y, yref, n);
    quantise(&g, dfref, n);
    quantise(&dx, dxref, n);

    int64_t shp[1] = {n};
    if (ktensor_alloc(&tx, fa, 1, shp) || ktensor_alloc(&ty, fa, 1, shp) || ktensor_alloc(&tdy, fg, 1, shp) ||
        ktensor_alloc(&tdx, fg, 1, shp) || (store_grad && ktensor_alloc(&tg, fa, 1, shp)) || upload(&tx, &x) ||
        upload(&tdy, &dy))
        goto done;
    /* output scales (fp8): set before the launch, as delayed/current scaling does */
    if (fp8 && (ktensor_set_scale(&ty, (float)y.scale) || ktensor_set_scale(&tdx, (float)dx.scale) ||
                (store_grad && ktensor_set_scale(&tg, (float)g.scale))))
        goto done;
    if (d->forward(&ty, store_grad ? &tg : NULL, &tx, variant) ||
        d->backward(&tdx, &tdy, store_grad ? &tg : &tx, variant) || kernels_sync(d->name))
        goto done;

    char name[64];
    snprintf(name, sizeof name, "n=%lld", (long long)n);
    kcheck_acc acc;
    /* y */
    if (download_real(&ty, y.scale, got, n)) goto done;
    kcheck_acc_init(&acc, "y", name, prec_format_get(fa)->unit_roundoff);
    for (int64_t i = 0; i < n; i++) {
        kval k = store_kval(d->f(read_kval(&x, i), variant), fa, y.scale);
        if (kcheck_acc_add(&acc, i, got[i], yref[i], k.e, k.p, fabs(yref[i])))
            kcheck_acc_detail(&acc, "[%lld]: got %.9g ref %.17g x=%.9g", (long long)i, got[i], yref[i], x.real[i]);
    }
    kcheck_acc_report(ctx, &acc);
    /* the stored gradient branch */
    if (store_grad) {
        if (download_real(&tg, g.scale, g_read, n)) goto done;
        kcheck_acc_init(&acc, "grad", name, prec_format_get(fa)->unit_roundoff);
        for (int64_t i = 0; i < n; i++) {
            kval k = store_kval(d->df(read_kval(&x, i), variant), fa, g.scale);
            if (kcheck_acc_add(&acc, i, g_read[i], dfref[i], k.e, k.p, fabs(dfref[i])))
                kcheck_acc_detail(&acc, "[%lld]: got %.9g ref %.17g x=%.9g", (long long)i, g_read[i], dfref[i], x.real[i]);
        }
        kcheck_acc_report(ctx, &acc);
    }
    /* dx */
    if (download_real(&tdx, dx.scale, got, n)) goto done;
    kcheck_acc_init(&acc, "dx", name, prec_format_get(fg)->unit_roundoff);
    for (int64_t i = 0; i < n; i++) {
        kval xk = read_kval(&x, i);
        kval deriv = d->df(xk, variant);
        if (store_grad) {
            /* the kernel read its own stored g, whose error the check knows */
            double e = fabs(g_read[i] - dfref[i]) * (1.0 + 0x1p-40);
            deriv = (kval){dfref[i], e, e};
            if (fp8) deriv = kval_round(deriv, F32); /* stored * scale, rounded in fp32 */
        }
        kval k = store_kval(kval_mul(read_kval(&dy, i), deriv, F32), fg, dx.scale);
        double scale = fabs(dy.real[i]) * d->df_scale(x.real[i]);
        if (kcheck_acc_add(&acc, i, got[i], dxref[i], k.e, k.p, scale))
            kcheck_acc_detail(&acc, "[%lld]: got %.9g ref %.17g x=%.9g dy=%.9g", (long long)i, got[i], dxref[i],
                              x.real[i], dy.real[i]);
    }
    kcheck_acc_report(ctx, &acc);
    rc = 0;
done:
    ktensor_free(&tx); ktensor_free(&ty); ktensor_free(&tg); ktensor_free(&tdy); ktensor_free(&tdx);
    vals_free(&x); vals_free(&y); vals_free(&g); vals_free(&dy); vals_free(&dx);
    free(want); free(yref); free(dfref); free(dxref); free(got); free(ones); free(g_read);
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
