/* kernels/check/check_softmax.c — softmax's check.
 *
 * Inputs per shape: logits x ~ N(offset, sigma) in the path's format (the
 * offset-40 shape makes the exp2 variant's folded argument x log2(e) - m
 * log2(e) carry rounding errors of ~40 u, which its bound shows); dy ~ N(0, 1).
 * The backward is fed the forward's own y.  Bounds replay the kernel:
 * exp (check_kexp.h), the block-tree sum (kcheck_row_depth), 1/s, the
 * product, the output rounding; backward: the fma dot, dy - dot, y * (.). */
#include <math.h>
#include <stdlib.h>

#include "kernels/check/check_kexp.h"
#include "kernels/check/checks.h"
#include "kernels/common/ktensor_io.h"
#include "kernels/softmax.h"
#include "reference/softmax.h"

typedef struct {
    int64_t N, C;
    double offset, sigma;
} shape;

static const shape shapes[] = {
    {4, 7, 0, 3}, {37, 768, 0, 3}, {5, 1001, 40, 2}, {3, 50304, 0, 3}, {8, 4099, 0, 8},
};

static const prec_format F32 = PREC_FP32;

static int check_shape(kcheck_ctx *ctx, const shape *s, kpath path, int variant)
{
    const prec_format f = kcheck_path_format(path);
    const double u = prec_format_get(f)->unit_roundoff;
    const int64_t N = s->N, C = s->C, NC = N * C;
    double *x = malloc(NC * sizeof(double)), *y = malloc(NC * sizeof(double)), *yr = malloc(NC * sizeof(double));
    double *dy = malloc(NC * sizeof(double)), *dx = malloc(NC * sizeof(double)), *dxr = malloc(NC * sizeof(double));
    kval *e = malloc(C * sizeof(kval));
    ktensor tx = {0}, ty = {0}, tdy = {0}, tdx = {0};
    int rc = -1;
    if (!x || !y || !yr || !dy || !dx || !dxr || !e) {
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
    ref_ctx rctx = REF_CTX_DEFAULT;
    ref_softmax_forward(&rctx, N, C, x, yr);
    ref_softmax_backward(&rctx, N, C, y, dy, dxr); /* the backward saw the kernel's own y */

    char name[96];
    snprintf(name, sizeof name, "N=%lld C=%lld x~N(%g,%g)", (long long)N, (long long)C, s->offset, s->sigma);
    const int64_t depth = kcheck_row_depth(C, ksoftmax_row_threads(), ksoftmax_row_vec(C, f));
    kcheck_acc acc_y, acc_dx;
    kcheck_acc_init(&acc_y, "y", name, u);
    kcheck_acc_init(&acc_dx, "dx", name, u);
    for (int64_t n = 0; n < N; n++) {
        const double *xr = x + n * C;
        double m = xr[0];
        for (int64_t c = 1; c < C; c++) m = xr[c] > m ? xr[c] : m;
        kval_sum ss;
        kval_sum_init(&ss);
        for (int64_t c = 0; c < C; c++) {
            e[c] = kcheck_exp_shifted(xr[c], kval_exact(m), variant);
            kval_sum_add(&ss, e[c]);
        }
        kval inv = kval_div(kval_exact(1.0), kval_sum_finish(&ss, depth, F32), F32);
        for (int64_t c = 0; c < C; c++) {
            int64_t i = n * C + c;
            kval yy = kval_round(kval_mul(e[c], inv, F32), f);
            if (kcheck_acc_add(&acc_y, i, y[i], yr[i], yy.e, yy.p, fabs(yr[i])))
                kcheck_acc_detail(&acc_y, "row %lld col %lld: got %.9g ref %.17g x=%.9g rowmax=%.9g", (long long)n,
                                  (long long)c, y[i], yr[i], xr[c], m);
        }
        /* backward on the kernel's y */
        kval_sum dots;
        kval_sum_init(&dots);
        for (int64_t c = 0; c < C; c++) kval_sum_add(&dots, kval_exact(y[n * C + c] * dy[n * C + c]));
        kval dot = kval_sum_finish(&dots, depth, F32);
        for (int64_t c = 0; c < C; c++) {
            int64_t i = n * C + c;
            kval t = kval_sub(kval_exact(dy[i]), dot, F32);
            kval d = kval_round(kval_mul(kval_exact(y[i]), t, F32), f);
            double scale = fabs(y[i]) * (fabs(dy[i]) + fabs(dot.v));
            if (kcheck_acc_add(&acc_dx, i, dx[i], dxr[i], d.e, d.p, scale))
                kcheck_acc_detail(&acc_dx, "row %lld col %lld: got %.9g ref %.17g y=%.9g dy=%.9g", (long long)n,
                                  (long long)c, dx[i], dxr[i], y[i], dy[i]);
        }
    }
    kcheck_acc_report(ctx, &acc_y);
    kcheck_acc_report(ctx, &acc_dx);
    rc = 0;
done:
    ktensor_free(&tx); ktensor_free(&ty); ktensor_free(&tdy); ktensor_free(&tdx);
    free(x); free(y); free(yr); free(dy); free(dx); free(dxr); free(e);
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
