/* kernels/check/check_activation.h — the check every elementwise activation shares
 * (check_gelu_tanh.c, check_gelu_erf.c, check_relu2.c for relu2 and leaky_relu2).
 *
 * Per shape (n elements, flat): x ~ N(0, x_sigma), dy ~ N(0, 1) in the
 * path's formats (fp8: x, y, g in e4m3 and dy, dx in e5m2, each with a
 * per-tensor scale amax / max_finite, as current-scaling recipes set it);
 * forward, backward (from the forward's own stored gradient branch under
 * store_grad, whose actual error starts dx's bound), compared with the MPFR
 * reference by kcmp_activation (compare_activation.h, shared with `ulpscope
 * verify`), the kernel described by kcheck_activation_kernel. */
#ifndef ULPSCOPE_KERNELS_CHECK_CHECK_ACTIVATION_H
#define ULPSCOPE_KERNELS_CHECK_CHECK_ACTIVATION_H

#include "kernels/check/check.h"
#include "kernels/check/compare_activation.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    kcmp_act_op op;
    int store_grad_variant;  /* index of the store_grad variant, or -1 */
    double x_sigma;
    int (*forward)(ktensor *y, ktensor *grad, const ktensor *x, int variant);
    int (*backward)(ktensor *dx, const ktensor *dy, const ktensor *saved, int variant);
} kact_check_desc;

int kcheck_activation(kcheck_ctx *ctx, kpath path, int variant, const kact_check_desc *d);

#ifdef __cplusplus
}
#endif
#endif
