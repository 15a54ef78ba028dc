/* kernels/check/compare_rope.h — rotary position embedding against the
 * MPFR reference (reference/rope.h), with the bound of a described kernel:
 * the bound kernels/check/check_rope.c states for its kernels, here for
 * `ulpscope trace` to judge a replayed rope (studies/trace_verdict_rows.c).
 *
 * Per pair (x1, x2) = (x[i], x[i + D/2]) of a head at position p, angle
 * theta = p base^(-2i/D): y1 = x1 cos - x2 sin, y2 = x1 sin + x2 cos (the
 * backward: sin negated), two fp32 products and their sum or difference,
 * then the rounding into the storage format.  cos and sin as the kernel
 * obtains them:
 *   table       the fp32 entries it read (krope_tables_host's), whose
 *               distance from the exact values is known here (plus 2^-48
 *               (1 + |theta|) for theta and cos, sin evaluated in double);
 *   fp32 angle  cos, sin of fl(p fl(inv_freq)) within sincos_ulps (CUDA's
 *               sincosf: 2), both 1-Lipschitz in the angle's error. */
#ifndef ULPSCOPE_KERNELS_CHECK_COMPARE_ROPE_H
#define ULPSCOPE_KERNELS_CHECK_COMPARE_ROPE_H

#include "kernels/check/check.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    prec_format storage;       /* x, y */
    int fp32_angle;            /* sincos of the fp32 angle (else the table) */
    double sincos_ulps;
    double base;               /* theta's base (10000) */
    const float *cos_t, *sin_t; /* [T, D/2]: the table the kernel read (fp32_angle: unused) */
    const float *inv_freq;     /* [D/2]: the fp32 frequencies it read (fp32_angle) */
} kcmp_rope_kernel;

/* x [N, H, D] (the backward: dy), N tokens at positions n % T; y (dx) as
 * the kernel wrote it. */
typedef struct {
    int64_t N, H, D, T;
    int backward;
    const double *x, *y;
} kcmp_rope_data;

/* Fills row (finished), named "y" or "dx"; returns 1, or -1 when out of
 * memory (or D is odd). */
int kcmp_rope(const kcmp_rope_kernel *k, const kcmp_rope_data *d, const char *shape, kcheck_acc *row);

#ifdef __cplusplus
}
#endif
#endif
