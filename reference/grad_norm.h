/* reference/grad_norm.h — the global gradient norm. */
#ifndef ULPSCOPE_REFERENCE_GRAD_NORM_H
#define ULPSCOPE_REFERENCE_GRAD_NORM_H

#include "reference/ref.h"

#ifdef __cplusplus
extern "C" {
#endif

/* sqrt(sum_t sum_i g[t][i]^2) over count tensors of sizes[t] elements,
 * correctly rounded to double. */
double ref_grad_norm(ref_ctx *ctx, int count, const long *sizes, const double *const *g);

#ifdef __cplusplus
}
#endif
#endif
