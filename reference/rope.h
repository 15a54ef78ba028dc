/* reference/rope.h — rotary position embedding, half-split pairing. */
#ifndef ULPSCOPE_REFERENCE_ROPE_H
#define ULPSCOPE_REFERENCE_ROPE_H

#include "reference/ref.h"

#ifdef __cplusplus
extern "C" {
#endif

/* x, y [N][H][D]; token n at position n mod T; theta = pos * base^(-2i/D):
 * y_i = x_i cos - x_{i+D/2} sin, y_{i+D/2} = x_i sin + x_{i+D/2} cos.
 * backward: the same with theta -> -theta (dy in, dx out). */
void ref_rope_forward(ref_ctx *ctx, long N, long H, long D, long T, double base, const double *x, double *y);
void ref_rope_backward(ref_ctx *ctx, long N, long H, long D, long T, double base, const double *dy, double *dx);

#ifdef __cplusplus
}
#endif
#endif
