/* kernels/check/compare_logsumexp.c — logsumexp's outputs against MPFR with
 * the bound of a described kernel (compare_logsumexp.h). */
#include "kernels/check/compare_logsumexp.h"

#include <math.h>
#include <stdlib.h>

#include "kernels/check/check_kexp.h"
#include "reference/logsumexp.h"

static const prec_format F32 = PREC_FP32;

int kcmp_logsumexp(const kcmp_lse_kernel *k, const kcmp_lse_data *d, const char *shape, kcheck_acc rows[KCMP_LSE_MAX_ROWS])
{
    const int64_t N = d->N, C = d->C;
    const int forward = d->forward, backward = d->dlse && d->dx;
    double *lser = malloc((size_t)N * sizeof(double));
    double *dxr = backward ? malloc((size_t)(N * C) * sizeof(double)) : NULL;
    if (!lser || (backward && !dxr)) {
        free(lser); free(dxr);
        return -1;
    }
    ref_ctx rctx = REF_CTX_DEFAULT;
    ref_logsumexp_forward(&rctx, N, C, d->x, lser);
    if (backward) ref_logsumexp_backward(&rctx, N, C, d->x, d->dlse, dxr);
    int n_rows = 0;
    kcheck_acc *acc_l = forward ? &rows[n_rows++] : NULL, *acc_dx = backward ? &rows[n_rows++] : NULL;
    if (acc_l) kcheck_acc_init(acc_l, "lse", shape, prec_format_get(F32)->unit_roundoff);
    if (acc_dx) kcheck_acc_init(acc_dx, "dx", shape, prec_format_get(k->storage)->unit_roundoff);
    for (int64_t n = 0; n < N; n++) {
        const double *xr = d->x + n * C;
        double m = xr[0];
        for (int64_t c = 1; c < C; c++) m = xr[c] > m ? xr[c] : m;
        if (forward) {
            kval_sum ss;
            kval_sum_init(&ss);
            for (int64_t c = 0; c < C; c++) kval_sum_add(&ss, kcheck_exp_shifted(xr[c], kval_exact(m), k->exp_variant));
            kval s_row = kval_sum_finish(&ss, k->depth, k->acc);
            kval l = kcheck_log_shifted(s_row, kval_exact(m), k->exp_variant);
            double lscale = fabs(m) + log(s_row.v);
            if (kcheck_acc_add(acc_l, n, d->lse[n], lser[n], l.e, l.p, lscale))
                kcheck_acc_detail(acc_l, "row %lld: got %.9g ref %.17g rowmax=%.9g", (long long)n, d->lse[n], lser[n], m);
        }
        if (backward) {
            /* the backward read the stored lse, whose error is known */
            double lerr = fabs(d->lse[n] - lser[n]) * (1.0 + 0x1p-40);
            kval lse_read = {lser[n], lerr, lerr};
            for (int64_t c = 0; c < C; c++) {
                int64_t i = n * C + c;
                kval ex = kcheck_exp_shifted(xr[c], lse_read, k->exp_variant);
                kval dd = kval_round(kval_mul(kval_exact(d->dlse[n]), ex, F32), k->storage);
                if (kcheck_acc_add(acc_dx, i, d->dx[i], dxr[i], dd.e, dd.p, fabs(dxr[i])))
                    kcheck_acc_detail(acc_dx, "row %lld col %lld: got %.9g ref %.17g x=%.9g dlse=%.9g lse=%.9g",
                                      (long long)n, (long long)c, d->dx[i], dxr[i], xr[c], d->dlse[n], d->lse[n]);
            }
        }
    }
    for (int i = 0; i < n_rows; i++) kcheck_acc_finish(&rows[i]);
    free(lser); free(dxr);
    return n_rows;
}
