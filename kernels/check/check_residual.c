/* kernels/check/check_residual.c — residual's check: a, b ~
 * N(0, 1) and N(0, 0.1) (a stream plus a smaller update) in the path's
 * format; y = round(a + b) with a + b in fp32 first: bound u32 |a + b|
 * (when fp32 rounds at all) plus the storage rounding.  The comparison is
 * kcmp_residual (compare_residual.h, shared with `ulpscope verify`). */
#include <stdlib.h>

#include "kernels/check/checks.h"
#include "kernels/check/compare_residual.h"
#include "kernels/common/ktensor_io.h"
#include "kernels/residual.h"

static const int64_t sizes[] = {7, 1001, 65537, 262147};

kcmp_residual_kernel kcheck_residual_kernel(prec_format f, int variant)
{
    (void)variant; /* the variants differ in memory access only */
    return (kcmp_residual_kernel){f, PREC_FP32};
}

int kcheck_residual(kcheck_ctx *ctx, kpath path, int variant)
{
    const prec_format f = kcheck_path_format(path);
    const int count = kcheck_quick(ctx) ? 2 : (int)(sizeof sizes / sizeof sizes[0]);
    for (int s = 0; s < count; s++) {
        const int64_t n = sizes[s];
        double *a = malloc(n * sizeof(double)), *b = malloc(n * sizeof(double)), *y = malloc(n * sizeof(double));
        ktensor ta = {0}, tb = {0}, ty = {0};
        int rc = -1;
        if (!a || !b || !y) {
            kernels_fail("residual check: out of host memory");
            goto next;
        }
        prec_rng rng;
        kcheck_rng(ctx, &rng);
        kcheck_fill_normal(&rng, a, n, 0.0, 1.0, f);
        kcheck_fill_normal(&rng, b, n, 0.0, 0.1, f);
        int64_t shp[1] = {n};
        if (ktensor_alloc(&ta, f, 1, shp) || ktensor_alloc(&tb, f, 1, shp) || ktensor_alloc(&ty, f, 1, shp) ||
            ktensor_upload(&ta, a) || ktensor_upload(&tb, b) || kresidual_forward(&ty, &ta, &tb, variant) ||
            kernels_sync("residual") || ktensor_download(&ty, y))
            goto next;
        char name[64];
        snprintf(name, sizeof name, "n=%lld", (long long)n);
        const kcmp_residual_kernel k = kcheck_residual_kernel(f, variant);
        const kcmp_residual_data d = {n, a, b, y};
        kcheck_acc row;
        if (kcmp_residual(&k, &d, name, &row) < 0) {
            kernels_fail("residual check: out of host memory");
            goto next;
        }
        kcheck_report(ctx, &row.row);
        rc = 0;
    next:
        ktensor_free(&ta); ktensor_free(&tb); ktensor_free(&ty);
        free(a); free(b); free(y);
        if (rc) return -1;
    }
    return 0;
}

