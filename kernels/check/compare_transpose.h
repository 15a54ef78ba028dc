/* kernels/check/compare_transpose.h — transpose (y = x^T) and transpose-add
 * (y = y0 + x^T) against the MPFR reference (reference/transpose.h), with
 * the bound of a described kernel: what `ulpscope check transpose` reports
 * for its own kernels (check_transpose.c) and what `ulpscope verify
 * transpose` reports for a kernel the user describes.
 *
 * Bounds: the copy is exact (bound 0: any difference is a bug); the add is
 * one addition in the arithmetic's format, then the storage rounding. */
#ifndef ULPSCOPE_KERNELS_CHECK_COMPARE_TRANSPOSE_H
#define ULPSCOPE_KERNELS_CHECK_COMPARE_TRANSPOSE_H

#include "kernels/check/check.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    prec_format storage; /* x, y0, y */
    prec_format arith;   /* the add's addition (ours: fp32) */
} kcmp_transpose_kernel;

/* x (M, N); y0 (N, M) the add's old values (NULL: a copy); y (N, M) as the
 * kernel wrote it; output: the row's name (check's "copy" and "add",
 * verify's "y"). */
typedef struct {
    int64_t M, N;
    const double *x, *y0, *y;
    const char *output;
} kcmp_transpose_data;

/* Fills *row (finished); returns 1, or -1 when out of memory. */
int kcmp_transpose(const kcmp_transpose_kernel *k, const kcmp_transpose_data *d, const char *shape, kcheck_acc *row);

/* How `ulpscope check` describes its own kernel (check_transpose.c: links the kernels). */
kcmp_transpose_kernel kcheck_transpose_kernel(prec_format f, int variant);

#ifdef __cplusplus
}
#endif
#endif
