/* kernels/check/compare_grad_norm.h — the global gradient norm sqrt(sum_t
 * sum_i g[t][i]^2) against the MPFR reference (reference/grad_norm.h), with
 * the bound of a described kernel: what `ulpscope check grad_norm` reports
 * for its own kernels (check_grad_norm.c) and what `ulpscope verify
 * grad_norm` reports for a kernel the user describes.
 *
 * Bound: the sum of the squares in acc with the longest rounding chain
 * depth (each fma counted), sqrt correctly rounded (sqrtf: 0.5 ulp), the
 * norm in fp32.  Errors are quoted in fp32's u against the norm itself. */
#ifndef ULPSCOPE_KERNELS_CHECK_COMPARE_GRAD_NORM_H
#define ULPSCOPE_KERNELS_CHECK_COMPARE_GRAD_NORM_H

#include "kernels/check/check.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    prec_format acc; /* the sum of squares' format (ours: fp32) */
    int64_t depth;   /* its longest rounding chain */
} kcmp_grad_norm_kernel;

/* count tensors of sizes[t] elements; norm the kernel's result. */
typedef struct {
    int count;
    const int64_t *sizes;
    const double *const *g;
    double norm;
} kcmp_grad_norm_data;

/* Fills *row (finished), named "norm"; returns 1, or -1 when out of memory. */
int kcmp_grad_norm(const kcmp_grad_norm_kernel *k, const kcmp_grad_norm_data *d, const char *shape, kcheck_acc *row);

/* How `ulpscope check` describes its own kernel (variant: a kgrad_norm
 * variant) for these tensors (check_grad_norm.c: links the kernels). */
kcmp_grad_norm_kernel kcheck_grad_norm_kernel(const int64_t *sizes, int count, int variant);

#ifdef __cplusplus
}
#endif
#endif
