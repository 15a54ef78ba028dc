/* kernels/check/check_grad_norm.c — grad_norm's check.  Each
 * case is a list of gradient tensors of different sizes and scales (the
 * spread of magnitudes a model's parameters have), in the path's format;
 * the bound replays the sum of squares with the variant's longest rounding
 * chain (kgrad_norm_depth) and sqrtf (correctly rounded).  The comparison
 * is kcmp_grad_norm (compare_grad_norm.h, shared with `ulpscope verify`). */
#include <stdlib.h>

#include "kernels/check/checks.h"
#include "kernels/check/compare_grad_norm.h"
#include "kernels/common/ktensor_io.h"
#include "kernels/grad_norm.h"

#define MAXT 4
typedef struct {
    int count;
    int64_t sizes[MAXT];
    double sigma[MAXT];
} gcase;

static const gcase cases[] = {
    {1, {7}, {1.0}},
    {3, {1001, 2305, 5}, {0.01, 1.0, 0.1}},
    {3, {65537, 4099, 1}, {0.001, 0.3, 2.0}},
    {2, {262147, 3}, {0.01, 1.0}},
};

kcmp_grad_norm_kernel kcheck_grad_norm_kernel(const int64_t *sizes, int count, int variant)
{
    kcmp_grad_norm_kernel k = {PREC_FP32, kgrad_norm_depth(sizes, count, variant)};
    return k;
}

static int check_case(kcheck_ctx *ctx, const gcase *c, prec_format f, int variant)
{
    ktensor t[MAXT] = {{0}};
    double *vals[MAXT] = {0};
    float *norm_d = NULL;
    void *ws = NULL;
    int rc = -1;
    prec_rng rng;
    kcheck_rng(ctx, &rng);
    for (int k = 0; k < c->count; k++) {
        vals[k] = malloc((size_t)c->sizes[k] * sizeof(double));
        if (!vals[k]) {
            kernels_fail("grad_norm check: out of host memory");
            goto done;
        }
        kcheck_fill_normal(&rng, vals[k], c->sizes[k], 0.0, c->sigma[k], f);
        if (ktensor_alloc(&t[k], f, 1, &c->sizes[k]) || ktensor_upload(&t[k], vals[k])) goto done;
    }
    size_t wsb = kgrad_norm_workspace(t, c->count, variant);
    if (kdevice_alloc(&ws, wsb, "grad_norm workspace") || kdevice_alloc((void **)&norm_d, sizeof(float), "grad_norm out") ||
        kdevice_fill_bytes(norm_d, 0xFF, sizeof(float), "grad_norm poison") ||
        kgrad_norm(norm_d, t, c->count, ws, wsb, variant) || kernels_sync("grad_norm"))
        goto done;
    float got_f;
    if (kdevice_download(&got_f, norm_d, sizeof got_f, "grad_norm result")) goto done;
    char name[96];
    int len = snprintf(name, sizeof name, "sizes");
    for (int k = 0; k < c->count && len < (int)sizeof name; k++)
        len += snprintf(name + len, sizeof name - len, "%s%lld", k ? "," : "=", (long long)c->sizes[k]);
    const kcmp_grad_norm_kernel kern = kcheck_grad_norm_kernel(c->sizes, c->count, variant);
    const kcmp_grad_norm_data d = {c->count, c->sizes, (const double *const *)vals, (double)got_f};
    kcheck_acc acc;
    if (kcmp_grad_norm(&kern, &d, name, &acc) < 0) {
        kernels_fail("grad_norm check: out of host memory");
        goto done;
    }
    kcheck_report(ctx, &acc.row);
    rc = 0;
done:
    for (int k = 0; k < c->count; k++) {
        ktensor_free(&t[k]);
        free(vals[k]);
    }
    kdevice_free(ws);
    kdevice_free(norm_d);
    return rc;
}

int kcheck_grad_norm(kcheck_ctx *ctx, kpath path, int variant)
{
    const int count = kcheck_quick(ctx) ? 2 : (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < count; i++)
        if (check_case(ctx, &cases[i], kcheck_path_format(path), variant)) return -1;
    return 0;
}

