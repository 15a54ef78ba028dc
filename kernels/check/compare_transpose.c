/* kernels/check/compare_transpose.c — transpose and transpose-add against
 * MPFR with the bound of a described kernel (compare_transpose.h). */
#include "kernels/check/compare_transpose.h"

#include <math.h>
#include <stdlib.h>

#include "reference/transpose.h"

int kcmp_transpose(const kcmp_transpose_kernel *k, const kcmp_transpose_data *d, const char *shape, kcheck_acc *row)
{
    const int64_t M = d->M, N = d->N, n = M * N;
    double *yr = malloc((size_t)(n ? n : 1) * sizeof(double));
    if (!yr) return -1;
    ref_ctx rctx = REF_CTX_DEFAULT;
    kcheck_acc_init(row, d->output, shape, prec_format_get(k->storage)->unit_roundoff);
    if (!d->y0) {
        ref_transpose_copy(&rctx, M, N, d->x, yr);
        for (int64_t i = 0; i < n; i++)
            if (kcheck_acc_add(row, i, d->y[i], yr[i], 0.0, 0.0, fabs(yr[i])))
                kcheck_acc_detail(row, "y[%lld][%lld]: got %.9g ref %.17g", (long long)(i / M), (long long)(i % M),
                                  d->y[i], yr[i]);
    } else {
        ref_transpose_add(&rctx, M, N, d->x, d->y0, yr);
        for (int64_t i = 0; i < n; i++) {
            int64_t r = i / M, c = i % M; /* y[r][c] = y0[r][c] + x[c][r] */
            double xv = d->x[c * N + r];
            kval e = kval_round(kval_add(kval_exact(d->y0[i]), kval_exact(xv), k->arith), k->storage);
            if (kcheck_acc_add(row, i, d->y[i], yr[i], e.e, e.p, fabs(d->y0[i]) + fabs(xv)))
                kcheck_acc_detail(row, "y[%lld][%lld]: got %.9g ref %.17g y0=%.9g x=%.9g", (long long)r, (long long)c,
                                  d->y[i], yr[i], d->y0[i], xv);
        }
    }
    kcheck_acc_finish(row);
    free(yr);
    return 1;
}
