/* kernels/check/check_softmax.c — softmax's check.
 *
 * Inputs per shape: logits x ~ N(offset, sigma) in the path's format (the
 * offset-40 shape makes the exp2 variant's folded argument x log2(e) - m
 * log2(e) carry rounding errors of ~40 u, which its bound shows); dy ~ N(0, 1).
 * The backward is fed the forward's own y.  The comparison is kcmp_softmax
 * (compare_softmax.h, shared with `ulpscope verify softmax`): the bounds
 * replay the kernel, exp (check_kexp.h), the block-tree sum
 * (kcheck_row_depth), 1/s, the product, the output rounding; backward: the
 * fma dot, dy - dot, y * (.). */
#include <math.h>
#include <stdlib.h>

#include "kernels/check/checks.h"
#include "kernels/check/compare_softmax.h"
#include "kernels/common/ktensor_io.h"
#include "kernels/softmax.h"

typedef struct {
    int64_t N, C;
    double offset, sigma;
} shape;

static const shape shapes[] = {
    {4, 7, 0, 3}, {37, 768, 0, 3}, {5, 1001, 40, 2}, {3, 50304, 0, 3}, {8, 4099, 0, 8},
};

kcmp_softmax_kernel kcheck_softmax_kernel(prec_format f, int variant, int64_t C)
{
    kcmp_softmax_kernel k = {0};
    k.storage = f;
    k.acc = PREC_FP32;
    k.exp_variant = variant; /* KSOFTMAX_* = KCHECK_* */
    k.fwd_depth = k.bwd_depth = kcheck_row_depth(C, ksoftmax_row_threads(), ksoftmax_row_vec(C, f));
    return k;
}

static int check_shape(kcheck_ctx *ctx, const shape *s, kpath path, int variant)
{
    const prec_format f = kcheck_path_format(path);
    const int64_t N = s->N, C = s->C, NC = N * C;
    double *x = malloc(NC * sizeof(double)), *y = malloc(NC * sizeof(double));
    double *dy = malloc(NC * sizeof(double)), *dx = malloc(NC * sizeof(double));
    ktensor tx = {0}, ty = {0}, tdy = {0}, tdx = {0};
    int rc = -1;
    if (!x || !y || !dy || !dx) {
        kernels_fail("softmax check: out of host memory");
        goto done;
    }
    prec_rng rng;
    kcheck_rng(ctx, &rng);
    kcheck_fill_normal(&rng, x, NC, s->offset, s->sigma, f);
    kcheck_fill_normal(&rng, dy, NC, 0.0, 1.0, f);
    int64_t nc[2] = {N, C};
    if (ktensor_alloc(&tx, f, 2, nc) || ktensor_alloc(&ty, f, 2, nc) || ktensor_alloc(&tdy, f, 2, nc) ||
        ktensor_alloc(&tdx, f, 2, nc) || ktensor_upload(&tx, x) || ktensor_upload(&tdy, dy) ||
        ksoftmax_forward(&ty, &tx, variant) || ksoftmax_backward(&tdx, &ty, &tdy, variant) ||
        kernels_sync("softmax") || ktensor_download(&ty, y) || ktensor_download(&tdx, dx))
        goto done;
    char name[96];
    snprintf(name, sizeof name, "N=%lld C=%lld x~N(%g,%g)", (long long)N, (long long)C, s->offset, s->sigma);
    const kcmp_softmax_kernel k = kcheck_softmax_kernel(f, variant, C);
    const kcmp_softmax_data d = {N, C, x, y, dy, dx}; /* the backward saw the kernel's own y */
    kcheck_acc rows[KCMP_SOFTMAX_MAX_ROWS];
    int n_rows = kcmp_softmax(&k, &d, name, rows);
    if (n_rows < 0) {
        kernels_fail("softmax check: out of host memory");
        goto done;
    }
    for (int i = 0; i < n_rows; i++) kcheck_report(ctx, &rows[i].row);
    rc = 0;
done:
    ktensor_free(&tx); ktensor_free(&ty); ktensor_free(&tdy); ktensor_free(&tdx);
    free(x); free(y); free(dy); free(dx);
    return rc;
}

int kcheck_softmax(kcheck_ctx *ctx, kpath path, int variant)
{
    int n = (int)(sizeof shapes / sizeof shapes[0]);
    if (kcheck_quick(ctx)) n = 3;
    for (int i = 0; i < n; i++)
        if (check_shape(ctx, &shapes[i], path, variant) != 0) return -1;
    return 0;
}
