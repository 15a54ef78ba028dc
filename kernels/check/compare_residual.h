/* kernels/check/compare_residual.h — residual's output y = a + b against the
 * MPFR reference (reference/residual.h), with the bound of a described
 * kernel: what `ulpscope check` reports for its own kernel
 * (check_residual.c) and what `ulpscope verify residual` reports for a
 * kernel the user describes.  The bound: the addition rounded in the
 * arithmetic's format, then the store into the storage format. */
#ifndef ULPSCOPE_KERNELS_CHECK_COMPARE_RESIDUAL_H
#define ULPSCOPE_KERNELS_CHECK_COMPARE_RESIDUAL_H

#include "kernels/check/check.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    prec_format storage; /* a, b, y */
    prec_format arith;   /* the addition's format (ours: fp32) */
} kcmp_residual_kernel;

/* flat n elements; y as the kernel wrote it */
typedef struct {
    int64_t n;
    const double *a, *b, *y;
} kcmp_residual_data;

/* Fills *row (finished); returns 1, or -1 when out of memory. */
int kcmp_residual(const kcmp_residual_kernel *k, const kcmp_residual_data *d, const char *shape, kcheck_acc *row);

/* How `ulpscope check` describes its own kernel (check_residual.c: links the kernels). */
kcmp_residual_kernel kcheck_residual_kernel(prec_format f, int variant);

#ifdef __cplusplus
}
#endif
#endif
