/* kernels/check/compare_rope.h — rope's output (forward y, backward dx)
 * against the MPFR reference (reference/rope.h), with the bound of a
 * described kernel: what `ulpscope check rope` reports for its own kernels
 * (check_rope.c) and what `ulpscope verify rope` reports for a kernel the
 * user describes.
 *
 * Layout (reference/rope.h): x (N, H, D), token n at position n mod T,
 * half-split pairing (i with i + D/2), theta = pos base^(-2i/D).
 *
 * Bound, per pair: cos and sin as the kernel obtains them (below), then
 * x_i cos - x_{i+D/2} sin and x_i sin + x_{i+D/2} cos, two products and a
 * sum in the arithmetic's format, then the storage rounding; the backward
 * rotates by -theta.  cos and sin:
 *   table      fp32 table entries: given, their distance from the exact
 *              values; not given, within half an fp32 ulp of them (a table
 *              computed in double and rounded once).  The double computation
 *              behind the exact value is off by at most 2^-48 (1 + |theta|).
 *   fp32_angle the angle fl(pos fl(inv_freq)) formed in fp32, then sincosf
 *              (math_ulps, cos and sin 1-Lipschitz); inv_freq given: its
 *              distance from base^(-2i/D); not given: within math_ulps fp32
 *              ulps of it (a pow and a division in fp32). */
#ifndef ULPSCOPE_KERNELS_CHECK_COMPARE_ROPE_H
#define ULPSCOPE_KERNELS_CHECK_COMPARE_ROPE_H

#include "kernels/check/check.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { KCMP_ROPE_TABLE = 0, KCMP_ROPE_FP32_ANGLE } kcmp_rope_angle;

typedef struct {
    prec_format storage;   /* x, y (dy, dx) */
    prec_format arith;     /* the rotation's products and sum (ours: fp32) */
    kcmp_rope_angle angle;
    double base;           /* theta's base (10000 in most models) */
    double math_ulps;      /* fp32_angle: sincosf's error, and inv_freq's when not given (ours: 2) */
} kcmp_rope_kernel;

/* in (N, H, D): x (forward) or dy (backward); y the kernel's y or dx.
 * cos_t, sin_t (T, D/2): the table the kernel read (NULL: correctly rounded
 * entries); inv_freq (D/2): the fp32 frequencies it used (NULL: within
 * math_ulps ulps). */
typedef struct {
    int64_t N, H, D, T;
    const double *in;
    const double *cos_t, *sin_t, *inv_freq;
    const double *y;
    int backward;
} kcmp_rope_data;

/* Fills *row (finished), named "y" or "dx"; returns 1, or -1 when out of
 * memory. */
int kcmp_rope(const kcmp_rope_kernel *k, const kcmp_rope_data *d, const char *shape, kcheck_acc *row);

/* How `ulpscope check` describes its own kernel at (storage f, variant: a
 * krope_variant) with base (check_rope.c: links the kernels). */
kcmp_rope_kernel kcheck_rope_kernel(prec_format f, int variant, double base);

#ifdef __cplusplus
}
#endif
#endif
