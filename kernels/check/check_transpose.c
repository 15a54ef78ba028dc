/* kernels/check/check_transpose.c — transpose's check: x ~
 * N(0, 1), y0 ~ N(0, 1) in the path's format.  copy must be exact (bound 0);
 * add is one fp32 addition and one storage rounding. */
#include <math.h>
#include <stdlib.h>

#include "kernels/check/checks.h"
#include "kernels/common/ktensor_io.h"
#include "kernels/transpose.h"
#include "reference/transpose.h"

typedef struct {
    int64_t M, N;
} shape;

static const shape shapes[] = {{3, 5}, {72, 136}, {37, 768}, {1001, 65}, {257, 4099}};

static int check_shape(kcheck_ctx *ctx, const shape *s, prec_format f, int variant)
{
    const int64_t M = s->M, N = s->N, n = M * N;
    double *x = malloc(n * sizeof(double)), *y0 = malloc(n * sizeof(double)), *y = malloc(n * sizeof(double)),
           *yr = malloc(n * sizeof(double));
    ktensor tx = {0}, ty = {0}, tz = {0};
    int rc = -1;
    if (!x || !y0 || !y || !yr) {
        kernels_fail("transpose check: out of host memory");
        goto done;
    }
    prec_rng rng;
    kcheck_rng(ctx, &rng);
    kcheck_fill_normal(&rng, x, n, 0.0, 1.0, f);
    kcheck_fill_normal(&rng, y0, n, 0.0, 1.0, f);
    int64_t xs[2] = {M, N}, ys[2] = {N, M};
    if (ktensor_alloc(&tx, f, 2, xs) || ktensor_alloc(&ty, f, 2, ys) || ktensor_alloc(&tz, f, 2, ys) ||
        ktensor_upload(&tx, x) || ktensor_upload(&tz, y0) || ktranspose_copy(&ty, &tx, variant) ||
        ktranspose_add(&tz, &tx, variant) || kernels_sync("transpose"))
        goto done;
    char name[64];
    snprintf(name, sizeof name, "M=%lld N=%lld", (long long)M, (long long)N);
    ref_ctx rctx = REF_CTX_DEFAULT;
    kcheck_acc acc;
    const double u = prec_format_get(f)->unit_roundoff;
    /* copy */
    if (ktensor_download(&ty, y)) goto done;
    ref_transpose_copy(&rctx, M, N, x, yr);
    kcheck_acc_init(&acc, "copy", name, u);
    for (int64_t i = 0; i < n; i++)
        if (kcheck_acc_add(&acc, i, y[i], yr[i], 0.0, 0.0, fabs(yr[i])))
            kcheck_acc_detail(&acc, "y[%lld][%lld]: got %.9g ref %.17g", (long long)(i / M), (long long)(i % M), y[i], yr[i]);
    kcheck_acc_report(ctx, &acc);
    /* add */
    if (ktensor_download(&tz, y)) goto done;
    ref_transpose_add(&rctx, M, N, x, y0, yr);
    kcheck_acc_init(&acc, "add", name, u);
    for (int64_t i = 0; i < n; i++) {
        int64_t r = i / M, c = i % M; /* y[r][c] = y0[r][c] + x[c][r] */
        double xv = x[c * N + r];
        kval k = kval_round(kval_add(kval_exact(y0[i]), kval_exact(xv), PREC_FP32), f);
        if (kcheck_acc_add(&acc, i, y[i], yr[i], k.e, k.p, fabs(y0[i]) + fabs(xv)))
            kcheck_acc_detail(&acc, "y[%lld][%lld]: got %.9g ref %.17g y0=%.9g x=%.9g", (long long)r, (long long)c, y[i],
                              yr[i], y0[i], xv);
    }
    kcheck_acc_report(ctx, &acc);
    rc = 0;
done:
    ktensor_free(&tx); ktensor_free(&ty); ktensor_free(&tz);
    free(x); free(y0); free(y); free(yr);
    return rc;
}

int kcheck_transpose(kcheck_ctx *ctx, kpath path, int variant)
{
    const int count = kcheck_quick(ctx) ? 2 : (int)(sizeof shapes / sizeof shapes[0]);
    for (int s = 0; s < count; s++)
        if (check_shape(ctx, &shapes[s], kcheck_path_format(path), variant)) return -1;
    return 0;
}

