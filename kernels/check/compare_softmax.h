/* kernels/check/compare_softmax.h — softmax's outputs against the MPFR
 * reference (reference/softmax.h), with bounds for a described kernel: what
 * `ulpscope check` reports for its own kernels (check_softmax.c) and what
 * `ulpscope verify softmax` reports for a kernel the user describes.
 *
 * The bound replays, per row of C: the exact row maximum m, e_c = exp(x_c -
 * m) by the described exponential (check_kexp.h: expf, exp2f of the folded
 * argument, __expf), s = sum e (in acc, longest rounding chain fwd_depth),
 * 1/s and e/s in fp32, the output rounding; backward on the y the kernel
 * read: dot = sum y dy (fma, acc, bwd_depth), dx = round(y (dy - dot)). */
#ifndef ULPSCOPE_KERNELS_CHECK_COMPARE_SOFTMAX_H
#define ULPSCOPE_KERNELS_CHECK_COMPARE_SOFTMAX_H

#include "kernels/check/check.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    prec_format storage; /* x, y, dy, dx */
    prec_format acc;     /* the row sums' format (the GPU kernels: fp32) */
    int exp_variant;     /* KCHECK_EXP, KCHECK_EXP2, KCHECK_FAST_EXP (check_kexp.h) */
    int64_t fwd_depth;   /* sum of the exponentials */
    int64_t bwd_depth;   /* the backward's dot product */
} kcmp_softmax_kernel;

/* Forward: x (N, C) and y as the kernel wrote it.  Backward: y (the forward
 * output the backward read), dy and dx as the kernel wrote it.  Either part
 * is left out when its tensors are NULL (x or y; dy or dx). */
typedef struct {
    int64_t N, C;
    const double *x, *y, *dy, *dx;
} kcmp_softmax_data;

#define KCMP_SOFTMAX_MAX_ROWS 2
/* Fills rows[] (finished) in the order y, dx for the parts given; returns
 * how many, or -1 when out of memory. */
int kcmp_softmax(const kcmp_softmax_kernel *k, const kcmp_softmax_data *d, const char *shape,
                 kcheck_acc rows[KCMP_SOFTMAX_MAX_ROWS]);

/* How `ulpscope check` describes its own kernel at (storage f, variant) for
 * rows of C (check_softmax.c: links the kernels). */
kcmp_softmax_kernel kcheck_softmax_kernel(prec_format f, int variant, int64_t C);

#ifdef __cplusplus
}
#endif
#endif
