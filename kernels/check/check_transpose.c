/* kernels/check/check_transpose.c — transpose's check: x ~
 * N(0, 1), y0 ~ N(0, 1) in the path's format.  copy must be exact (bound 0);
 * add is one fp32 addition and one storage rounding.  The comparison is
 * kcmp_transpose (compare_transpose.h, shared with `ulpscope verify`). */
#include <stdlib.h>

#include "kernels/check/checks.h"
#include "kernels/check/compare_transpose.h"
#include "kernels/common/ktensor_io.h"
#include "kernels/transpose.h"

typedef struct {
    int64_t M, N;
} shape;

static const shape shapes[] = {{3, 5}, {72, 136}, {37, 768}, {1001, 65}, {257, 4099}};

kcmp_transpose_kernel kcheck_transpose_kernel(prec_format f, int variant)
{
    (void)variant; /* the variants differ in memory access only */
    return (kcmp_transpose_kernel){f, PREC_FP32};
}

static int check_shape(kcheck_ctx *ctx, const shape *s, prec_format f, int variant)
{
    const int64_t M = s->M, N = s->N, n = M * N;
    double *x = malloc(n * sizeof(double)), *y0 = malloc(n * sizeof(double)), *y = malloc(n * sizeof(double));
    ktensor tx = {0}, ty = {0}, tz = {0};
    int rc = -1;
    if (!x || !y0 || !y) {
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
    const kcmp_transpose_kernel k = kcheck_transpose_kernel(f, variant);
    for (int add = 0; add < 2; add++) {
        if (ktensor_download(add ? &tz : &ty, y)) goto done;
        const kcmp_transpose_data d = {M, N, x, add ? y0 : NULL, y, add ? "add" : "copy"};
        kcheck_acc acc;
        if (kcmp_transpose(&k, &d, name, &acc) < 0) {
            kernels_fail("transpose check: out of host memory");
            goto done;
        }
        kcheck_report(ctx, &acc.row);
    }
    rc = 0;
done:
    ktensor_free(&tx); ktensor_free(&ty); ktensor_free(&tz);
    free(x); free(y0); free(y);
    return rc;
}

int kcheck_transpose(kcheck_ctx *ctx, kpath path, int variant)
{
    const int count = kcheck_quick(ctx) ? 2 : (int)(sizeof shapes / sizeof shapes[0]);
    for (int s = 0; s < count; s++)
        if (check_shape(ctx, &shapes[s], kcheck_path_format(path), variant)) return -1;
    return 0;
}

