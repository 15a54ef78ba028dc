/* kernels/check/check_rope.c — rope's check.  x, dy ~ N(0, 1)
 * in the path's format, base 10000.  Bounds (kernels/check/compare_rope.h,
 * shared with `ulpscope trace`): table variant, cos and sin are the fp32
 * table entries, whose distance from the exact values the check knows (it
 * builds the same table with krope_tables_host; the double computation
 * behind it is off by at most 2^-48 (1 + |theta|)); fp32_angle, the angle
 * fl(pos * fl(inv_freq)) and sincosf (2 ulps), cos and sin being
 * 1-Lipschitz.  Then two products, a sum, the storage rounding. */
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

static int check_shape(kcheck_ctx *ctx, const shape *s, prec_format f, int variant)
{
    const int64_t N = s->B * s->T, H = s->H, D = s->D, half = D / 2, n = N * H * D;
    double *x = malloc(n * sizeof(double)), *dy = malloc(n * sizeof(double)), *y = malloc(n * sizeof(double));
    float *ct = malloc(s->T * half * sizeof(float)), *st = malloc(s->T * half * sizeof(float)),
          *inv = malloc(half * sizeof(float));
    ktensor tx = {0}, ty = {0}, tdy = {0}, tdx = {0};
    float *dct = NULL, *dst = NULL, *dinv = NULL;
    int rc = -1;
    if (!x || !dy || !y || !ct || !st || !inv) {
        kernels_fail("rope check: out of host memory");
        goto done;
    }
    prec_rng rng;
    kcheck_rng(ctx, &rng);
    kcheck_fill_normal(&rng, x, n, 0.0, 1.0, f);
    kcheck_fill_normal(&rng, dy, n, 0.0, 1.0, f);
    krope_tables_host(ct, st, inv, s->T, D, BASE);
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
    /* the kernel as compare_rope.h describes it: the table it read, or sincosf of the fp32 angle */
    const kcmp_rope_kernel k = {f, variant == KROPE_FP32_ANGLE, 2.0, BASE, ct, st, inv};
    for (int pass = 0; pass < 2; pass++) {
        const int bwd = pass == 1;
        if (ktensor_download(bwd ? &tdx : &ty, y)) goto done;
        const kcmp_rope_data d = {N, H, D, s->T, bwd, bwd ? dy : x, y};
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
    free(x); free(dy); free(y); free(ct); free(st); free(inv);
    return rc;
}

int kcheck_rope(kcheck_ctx *ctx, kpath path, int variant)
{
    const int count = kcheck_quick(ctx) ? 2 : (int)(sizeof shapes / sizeof shapes[0]);
    for (int i = 0; i < count; i++)
        if (check_shape(ctx, &shapes[i], kcheck_path_format(path), variant)) return -1;
    return 0;
}

