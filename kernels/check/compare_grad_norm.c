/* kernels/check/compare_grad_norm.c — the gradient norm against MPFR with
 * the bound of a described kernel (compare_grad_norm.h). */
#include "kernels/check/compare_grad_norm.h"

#include <math.h>
#include <stdlib.h>

#include "reference/grad_norm.h"

static double sqrt_d(double t) { return sqrt(t); }

int kcmp_grad_norm(const kcmp_grad_norm_kernel *k, const kcmp_grad_norm_data *d, const char *shape, kcheck_acc *row)
{
    long *sizes = malloc((size_t)(d->count > 0 ? d->count : 1) * sizeof(long));
    if (!sizes) return -1;
    kval_sum ss;
    kval_sum_init(&ss);
    for (int t = 0; t < d->count; t++) {
        sizes[t] = (long)d->sizes[t];
        for (int64_t i = 0; i < d->sizes[t]; i++) kval_sum_add(&ss, kval_exact(d->g[t][i] * d->g[t][i]));
    }
    ref_ctx rctx = REF_CTX_DEFAULT;
    const double ref = ref_grad_norm(&rctx, d->count, sizes, d->g);
    free(sizes);
    kval sum = kval_sum_finish(&ss, k->depth, k->acc);
    kval nrm = kval_monotone(sum, sqrt_d, 0.0, INFINITY, 0.5, 0.0, PREC_FP32);
    kcheck_acc_init(row, "norm", shape, prec_format_get(PREC_FP32)->unit_roundoff);
    if (kcheck_acc_add(row, 0, d->norm, ref, nrm.e, nrm.p, ref))
        kcheck_acc_detail(row, "got %.9g ref %.17g over %d tensors", d->norm, ref, d->count);
    kcheck_acc_finish(row);
    return 1;
}
