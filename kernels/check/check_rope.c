/* kernels/check/check_rope.c — rope's check.  x, dy ~ N(0, 1)
 * in the path's format, base 10000.  Bounds: table variant, cos and sin are
 * the fp32 table entries, whose distance from the exact values the check
 * knows (it builds the same table with krope_tables_host; the double
 * computation behind it is off by at most 2^-48 (1 + |theta|)); fp32_angle,
 * the angle fl(pos * fl(inv_freq)) and sincosf (2 ulps), cos and sin being
 * 1-Lipschitz.  Then two products, a sum, the storage rounding.  The
 * comparison is kcmp_rope (compare_rope.h, shared with `ulpscope verify`). */
#include <stdlib.h>

#include "kernels/check/checks.h"
#include "kernels/check/compare_rope.h"
#include "kernels/common/ktensor_io.h"
#include "kernels/rope.h"

typedef struct {
    int64_t B, T, H, D;
} shape;

static const shape shapes[] = {{1, 3, 1, 2}, {2, 64, 4, 64}, {3, 37, 3, 18}, {1, 1024, 1, 16}};
static const double BASE = 10000.0;

kcmp_rope_kernel kcheck_rope_kernel(prec_format f, int variant, double base)
{
    kcmp_rope_kernel k = {f, PREC_FP32, variant == KROPE_TABLE ? KCMP_ROPE_TABLE : KCMP_ROPE_FP32_ANGLE, base, 2.0};
    return k;
}

static int check_shape(kcheck_ctx *ctx, const shape *s, prec_format f, int variant)
{
    const int64_t N = s->B * s->T, H = s->H, D = s->D, half = D / 2, n = N * H * D;
    double *x = malloc(n * sizeof(double)), *dy = malloc(n * sizeof(double)), *y = malloc(n * sizeof(double));
    float *ct = malloc(s->T * half * sizeof(float)), *st = malloc(s->T * half * sizeof(float)),
          *inv = malloc(half * sizeof(float));
    double *cos_d = malloc(s->T * half * sizeof(double)), *sin_d = malloc(s->T * half * sizeof(double)),
           *inv_d = malloc(half * sizeof(double));
    ktensor tx = {0}, ty = {0}, tdy = {0}, tdx = {0};
    float *dct = NULL, *dst = NULL, *dinv = NULL;
    int rc = -1;
    if (!x || !dy || !y || !ct || !st || !inv || !cos_d || !sin_d || !inv_d) {
        kernels_fail("rope check: out of host memory");
        goto done;
    }
    prec_rng rng;
    kcheck_rng(ctx, &rng);
    kcheck_fill_normal(&rng, x, n, 0.0, 1.0, f);
    kcheck_fill_normal(&rng, dy, n, 0.0, 1.0, f);
    krope_tables_host(ct, st, inv, s->T, D, BASE);
    for (int64_t i = 0; i < s->T * half; i++) {
        cos_d[i] = ct[i];
        sin_d[i] = st[i];
    }
    for (int64_t i = 0; i < half; i++) inv_d[i] = inv[i];
    int64_t shp[3] = {N, H, D};
    if (ktensor_alloc(&tx, f, 3, shp) || ktensor_alloc(&ty, f, 3, shp) || ktensor_alloc(&tdy, f, 3, shp) ||
        ktensor_alloc(&tdx, f, 3, shp) || ktensor_upload(&tx, x) || ktensor_upload(&tdy, dy) ||
        kdevice_alloc((void **)&dct, s->T * half * sizeof(float), "rope cos") ||
        kdevice_alloc((void **)&dst, s->T * half * sizeof(float), "rope sin") ||
        kdevice_alloc((void **)&dinv, half * sizeof(float), "rope inv_freq") ||
        kdevice_upload(dct, ct, s->T * half * sizeof(float), "rope cos") ||
        kdevice_upload(dst, st, s->T * half * sizeof(float), "rope sin") ||
        kdevice_upload(dinv, inv, half * sizeof(float), "rope inv_freq"))
        goto done;
    krope_tables tab = {dct, dst, dinv, s->T};
    if (krope_forward(&ty, &tx, &tab, variant) || krope_backward(&tdx, &tdy, &tab, variant) || kernels_sync("rope"))
        goto done;
    char name[96];
    snprintf(name, sizeof name, "B=%lld T=%lld H=%lld D=%lld", (long long)s->B, (long long)s->T, (long long)H, (long long)D);
    /* the bound takes the table (or the frequencies) the kernel read */
    const kcmp_rope_kernel k = kcheck_rope_kernel(f, variant, BASE);
    for (int pass = 0; pass < 2; pass++) {
        const int bwd = pass == 1;
        if (ktensor_download(bwd ? &tdx : &ty, y)) goto done;
        const kcmp_rope_data d = {N, H, D, s->T, bwd ? dy : x, variant == KROPE_TABLE ? cos_d : NULL,
                                  variant == KROPE_TABLE ? sin_d : NULL, variant == KROPE_TABLE ? NULL : inv_d, y, bwd};
        kcheck_acc acc;
        if (kcmp_rope(&k, &d, name, &acc) < 0) {
            kernels_fail("rope check: out of host memory");
            goto done;
        }
        kcheck_report(ctx, &acc.row);
    }
    rc = 0;
done:
    ktensor_free(&tx); ktensor_free(&ty); ktensor_free(&tdy); ktensor_free(&tdx);
    kdevice_free(dct); kdevice_free(dst); kdevice_free(dinv);
    free(x); free(dy); free(y); free(ct); free(st); free(inv); free(cos_d); free(sin_d); free(inv_d);
    return rc;
}

int kcheck_rope(kcheck_ctx *ctx, kpath path, int variant)
{
    const int count = kcheck_quick(ctx) ? 2 : (int)(sizeof shapes / sizeof shapes[0]);
    for (int i = 0; i < count; i++)
        if (check_shape(ctx, &shapes[i], kcheck_path_format(path), variant)) return -1;
    return 0;
}

