/* kernels/activations.h — elementwise activations, forward and backward:
 *   gelu_tanh    y = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 *   gelu_erf     y = x/2 (1 + erf(x / sqrt(2))) = x Phi(x)
 *   relu2        y = max(x, 0)^2
 *   leaky_relu2  y = (x > 0 ? x : x/2)^2          (leaky slope 0.5)
 * Backward: dx = dy f'(x).  Shapes: any; every tensor has the same number
 * of elements n and is treated as flat.
 *
 * Paths: fp32, bf16, fp16: every tensor in that format; fp8: activations
 * (x, y and the stored gradient branch) in e4m3, gradients (dy, dx) in e5m2,
 * each with its own per-tensor scale (real = stored * scale); fp32
 * arithmetic in between.
 *
 * relu2 and leaky_relu2 have two backward variants:
 *   store_preact  the forward keeps x; the backward computes f'(x) = 2x or x/2
 *                 with a branch, in fp32, and dx = dy f'(x) rounds once;
 *   store_grad    the forward also stores g = f'(x) in the activation format
 *                 (grad != NULL) and the backward is dx = dy g, branch-free;
 *                 g's own rounding is a second one.
 * Each launcher returns 0 or -1 (kernels_last_error).
 *
 * Replicas: elementwise, so R runs' tensors back to back (n = R x n_run) get
 * a single call's bits, except on the fp8 path, whose per-tensor scales are
 * one per call: R runs with scales of their own need R calls. */
#ifndef ULPSCOPE_KERNELS_ACTIVATIONS_H
#define ULPSCOPE_KERNELS_ACTIVATIONS_H

#include "kernels/kernels.h"
#include "kernels/registry.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { KGELU_TANH_TANHF = 0, KGELU_TANH_APPROX, KGELU_TANH_SIGMOID, KGELU_TANH_NVARIANTS } kgelu_tanh_variant;
typedef enum { KGELU_ERF_ERFF = 0, KGELU_ERF_NORMCDF, KGELU_ERF_NVARIANTS } kgelu_erf_variant;
typedef enum { KRELU2_STORE_PREACT = 0, KRELU2_STORE_GRAD, KRELU2_NVARIANTS } krelu2_variant;
/* relu2's and leaky_relu2's variants (relu2.cu names them for both registry
 * entries) and their shared fp8 note. */
extern const kvariant krelu2_variants[KRELU2_NVARIANTS];
#define KRELU2_FP8_NOTE                                                                                   \
    "fp8: x, y and the stored gradient branch in e4m3, dy and dx in e5m2, per-tensor scales amax/max_finite " \
    "(current scaling), fp32 math"

int kgelu_tanh_forward(ktensor *y, const ktensor *x, int variant);
int kgelu_tanh_backward(ktensor *dx, const ktensor *dy, const ktensor *x, int variant);
int kgelu_erf_forward(ktensor *y, const ktensor *x, int variant);
int kgelu_erf_backward(ktensor *dx, const ktensor *dy, const ktensor *x, int variant);
/* grad: the stored gradient branch, written under store_grad (else NULL);
 * backward's saved: x under store_preact, grad under store_grad. */
int krelu2_forward(ktensor *y, ktensor *grad, const ktensor *x, int variant);
int krelu2_backward(ktensor *dx, const ktensor *dy, const ktensor *saved, int variant);
int kleaky_relu2_forward(ktensor *y, ktensor *grad, const ktensor *x, int variant);
int kleaky_relu2_backward(ktensor *dx, const ktensor *dy, const ktensor *saved, int variant);

#ifdef __cplusplus
}
#endif
#endif
