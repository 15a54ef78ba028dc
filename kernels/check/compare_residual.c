/* kernels/check/compare_residual.c — residual's output against MPFR with
 * the bound of a described kernel (compare_residual.h). */
#include "kernels/check/compare_residual.h"

#include <math.h>
#include <stdlib.h>

#include "reference/residual.h"

int kcmp_residual(const kcmp_residual_kernel *k, const kcmp_residual_data *d, const char *shape, kcheck_acc *row)
{
    const int64_t n = d->n;
    double *yr = malloc((size_t)(n ? n : 1) * sizeof(double));
    if (!yr) return -1;
    ref_ctx rctx = REF_CTX_DEFAULT;
    ref_residual_forward(&rctx, n, d->a, d->b, yr);
    kcheck_acc_init(row, "y", shape, prec_format_get(k->storage)->unit_roundoff);
    for (int64_t i = 0; i < n; i++) {
        kval y = kval_round(kval_add(kval_exact(d->a[i]), kval_exact(d->b[i]), k->arith), k->storage);
        if (kcheck_acc_add(row, i, d->y[i], yr[i], y.e, y.p, fabs(d->a[i]) + fabs(d->b[i])))
            kcheck_acc_detail(row, "[%lld]: got %.9g ref %.17g a=%.9g b=%.9g", (long long)i, d->y[i], yr[i], d->a[i], d->b[i]);
    }
    kcheck_acc_finish(row);
    free(yr);
    return 1;
}
