/* kernels/check/compare_softmax.c — softmax's outputs against MPFR with the
 * bound of a described kernel (compare_softmax.h). */
#include "kernels/check/compare_softmax.h"

#include <math.h>
#include <stdlib.h>

#include "kernels/check/check_kexp.h"
#include "reference/softmax.h"

static const prec_format F32 = PREC_FP32;

int kcmp_softmax(const kcmp_softmax_kernel *k, const kcmp_softmax_data *d, const char *shape,
                 kcheck_acc rows[KCMP_SOFTMAX_MAX_ROWS])
{
    const prec_format f = k->storage;
    const double u = prec_format_get(f)->unit_roundoff;
    const int64_t N = d->N, C = d->C, NC = N * C;
    const int forward = d->x && d->y, backward = d->y && d->dy && d->dx;
    double *yr = forward ? malloc((size_t)NC * sizeof(double)) : NULL;
    double *dxr = backward ? malloc((size_t)NC * sizeof(double)) : NULL;
    kval *e = malloc((size_t)C * sizeof(kval));
    if ((forward && !yr) || (backward && !dxr) || !e) {
        free(yr); free(dxr); free(e);
        return -1;
    }
    ref_ctx rctx = REF_CTX_DEFAULT;
    if (forward) ref_softmax_forward(&rctx, N, C, d->x, yr);
    if (backward) ref_softmax_backward(&rctx, N, C, d->y, d->dy, dxr); /* on the y the backward read */
    int n_rows = 0;
    kcheck_acc *acc_y = forward ? &rows[n_rows++] : NULL, *acc_dx = backward ? &rows[n_rows++] : NULL;
    if (acc_y) kcheck_acc_init(acc_y, "y", shape, u);
    if (acc_dx) kcheck_acc_init(acc_dx, "dx", shape, u);
    for (int64_t n = 0; n < N; n++) {
        if (forward) {
            const double *xr = d->x + n * C, *y = d->y;
            double m = xr[0];
            for (int64_t c = 1; c < C; c++) m = xr[c] > m ? xr[c] : m;
            kval_sum ss;
            kval_sum_init(&ss);
            for (int64_t c = 0; c < C; c++) {
                e[c] = kcheck_exp_shifted(xr[c], kval_exact(m), k->exp_variant);
                kval_sum_add(&ss, e[c]);
            }
            kval inv = kval_div(kval_exact(1.0), kval_sum_finish(&ss, k->fwd_depth, k->acc), F32);
            for (int64_t c = 0; c < C; c++) {
                int64_t i = n * C + c;
                kval yy = kval_round(kval_mul(e[c], inv, F32), f);
                if (kcheck_acc_add(acc_y, i, y[i], yr[i], yy.e, yy.p, fabs(yr[i])))
                    kcheck_acc_detail(acc_y, "row %lld col %lld: got %.9g ref %.17g x=%.9g rowmax=%.9g", (long long)n,
                                      (long long)c, y[i], yr[i], xr[c], m);
            }
        }
        if (backward) {
            const double *y = d->y, *dy = d->dy, *dx = d->dx;
            kval_sum dots;
            kval_sum_init(&dots);
            for (int64_t c = 0; c < C; c++) kval_sum_add(&dots, kval_exact(y[n * C + c] * dy[n * C + c]));
            kval dot = kval_sum_finish(&dots, k->bwd_depth, k->acc);
            for (int64_t c = 0; c < C; c++) {
                int64_t i = n * C + c;
                kval t = kval_sub(kval_exact(dy[i]), dot, F32);
                kval dd = kval_round(kval_mul(kval_exact(y[i]), t, F32), f);
                double scale = fabs(y[i]) * (fabs(dy[i]) + fabs(dot.v));
                if (kcheck_acc_add(acc_dx, i, dx[i], dxr[i], dd.e, dd.p, scale))
                    kcheck_acc_detail(acc_dx, "row %lld col %lld: got %.9g ref %.17g y=%.9g dy=%.9g", (long long)n,
                                      (long long)c, dx[i], dxr[i], y[i], dy[i]);
            }
        }
    }
    for (int i = 0; i < n_rows; i++) kcheck_acc_finish(&rows[i]);
    free(yr); free(dxr); free(e);
    return n_rows;
}
