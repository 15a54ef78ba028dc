/* kernels/rope.h — rotary position embedding (Su et al., RoFormer,
 * arXiv:2104.09864), half-split pairing (element i pairs with i + D/2, as
 * GPT-NeoX and Hugging Face Llama lay it out).
 *
 * x, y: (N, H, D), N = batch * T tokens, token n at position n mod T;
 * theta(p, i) = p * base^(-2i/D), i < D/2:
 *   y_i = x_i cos - x_{i+D/2} sin,  y_{i+D/2} = x_i sin + x_{i+D/2} cos;
 * backward rotates by -theta.  Tensors in the path's format, fp32 math.
 * Replicas: R runs' tokens stacked (N = R x batch x T, whole sequences) keep
 * every token's position and arithmetic: a single call's bits. */
#ifndef ULPSCOPE_KERNELS_ROPE_H
#define ULPSCOPE_KERNELS_ROPE_H

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Variants:
 *   table       cos and sin from an fp32 table (T, D/2) computed in double
 *               and rounded once (krope_tables_host);
 *   fp32_angle  the angle p * inv_freq[i] formed in fp32 in the kernel and
 *               sincosf of it: the angle's rounding error grows with the
 *               position (the long-context RoPE precision problem). */
typedef enum { KROPE_TABLE = 0, KROPE_FP32_ANGLE, KROPE_NVARIANTS } krope_variant;

/* Host: cos_t, sin_t [T][D/2] = fl32(cos/sin(theta)) and inv_freq[D/2] =
 * fl32(base^(-2i/D)), all computed in double. */
void krope_tables_host(float *cos_t, float *sin_t, float *inv_freq, int64_t T, int64_t D, double base);

typedef struct {
    const float *cos_t, *sin_t; /* device [T][D/2] (table variant) */
    const float *inv_freq;      /* device [D/2] (fp32_angle variant) */
    int64_t T;                  /* positions per sequence */
} krope_tables;

int krope_forward(ktensor *y, const ktensor *x, const krope_tables *tab, int variant);
int krope_backward(ktensor *dx, const ktensor *dy, const krope_tables *tab, int variant);

#ifdef __cplusplus
}
#endif
#endif
