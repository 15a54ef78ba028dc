/* kernels/check/check_residual.c — residual's check: a, b ~
 * N(0, 1) and N(0, 0.1) (a stream plus a smaller update) in the path's
 * format; y = round(a + b) with a + b in fp32 first: bound u32 |a + b|
 * (when fp32 rounds at all) plus the storage rounding. */
#include <math.h>
#include <stdlib.h>

#include "kernels/check/checks.h"
#include "kernels/common/ktensor_io.h"
#include "kernels/residual.h"
#include "reference/residual.h"

static const int64_t sizes[] = {7, 1001, 65537, 262147};

int kcheck_residual(kcheck_ctx *ctx, kpath path, int variant)
{
    const prec_format f = kcheck_path_format(path);
    const int count = kcheck_quick(ctx) ? 2 : (int)(sizeof sizes / sizeof sizes[0]);
    for (int s = 0; s < count; s++) {
        const int64_t n = sizes[s];
        double *a = malloc(n * sizeof(double)), *b = malloc(n * sizeof(double)), *y = malloc(n * sizeof(double)),
               *yr = malloc(n * sizeof(double));
        ktensor ta = {0}, tb = {0}, ty = {0};
        int rc = -1;
        if (!a || !b || !y || !yr) {
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
        ref_ctx rctx = REF_CTX_DEFAULT;
        ref_residual_forward(&rctx, n, a, b, yr);
        char name[64];
        snprintf(name, sizeof name, "n=%lld", (long long)n);
        kcheck_acc acc;
        kcheck_acc_init(&acc, "y", name, prec_format_get(f)->unit_roundoff);
        for (int64_t i = 0; i < n; i++) {
            kval k = kval_round(kval_add(kval_exact(a[i]), kval_exact(b[i]), PREC_FP32), f);
            if (kcheck_acc_add(&acc, i, y[i], yr[i], k.e, k.p, fabs(a[i]) + fabs(b[i])))
                kcheck_acc_detail(&acc, "[%lld]: got %.9g ref %.17g a=%.9g b=%.9g", (long long)i, y[i], yr[i], a[i], b[i]);
        }
        kcheck_acc_report(ctx, &acc);
        rc = 0;
    next:
        ktensor_free(&ta); ktensor_free(&tb); ktensor_free(&ty);
        free(a); free(b); free(y); free(yr);
        if (rc) return -1;
    }
    return 0;
}

