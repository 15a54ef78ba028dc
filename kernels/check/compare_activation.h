/* kernels/check/compare_activation.h — the elementwise activations' outputs
 * (gelu_tanh, gelu_erf, relu2, leaky_relu2; kernels/activations.h) against
 * the MPFR references, with bounds for a described kernel: what `ulpscope
 * check` reports for its own kernels (check_activation.c) and what `ulpscope
 * verify` reports for a kernel the user describes.
 *
 * The bound replays the kernel's arithmetic on kvals, per element: x as the
 * kernel read it (fp8: stored times its scale, in fp32), f(x) or f'(x) in
 * the arithmetic format with the described math function (tanhf, erff,
 * normcdff, expf within math_ulps, or tanh.approx.f32's absolute 2^-10.987),
 * constants held in that format, the store (fp8: divided by the output's
 * scale in fp32, then rounded).  The backward is dx = dy f'(x) with f'
 * computed from x, or, when the forward stored the gradient branch g (relu2's
 * store_grad), dy g: then dx's bound starts from g's actual error. */
#ifndef ULPSCOPE_KERNELS_CHECK_COMPARE_ACTIVATION_H
#define ULPSCOPE_KERNELS_CHECK_COMPARE_ACTIVATION_H

#include "kernels/check/check.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { KCMP_GELU_TANH, KCMP_GELU_ERF, KCMP_RELU2, KCMP_LEAKY_RELU2 } kcmp_act_op;

/* The formula and math function a GELU is computed with. */
typedef enum {
    KCMP_FN_TANH,        /* gelu_tanh: x/2 (1 + tanhf(z)), z = sqrt(2/pi) (x + 0.044715 x^3) */
    KCMP_FN_TANH_APPROX, /* the same with tanh.approx.f32 (2^-10.987 absolute; math_ulps does not apply) */
    KCMP_FN_SIGMOID,     /* gelu_tanh as x / (1 + expf(-2z)) */
    KCMP_FN_ERF,         /* gelu_erf: x/2 (1 + erff(x / sqrt 2)); the backward's pdf by expf */
    KCMP_FN_NORMCDF,     /* gelu_erf as x normcdff(x) (CUDA's 5 ulps, or math_ulps where larger) */
    KCMP_FN_ANY,         /* any of the op's forms: per element, the largest of their bounds */
    KCMP_FN_NONE         /* relu2 and leaky_relu2: no math function */
} kcmp_act_fn;

typedef struct {
    kcmp_act_op op;
    kcmp_act_fn fn;
    double math_ulps;     /* tanhf, erff, expf (and normcdff above 5), in ulps of arith (CUDA: 2) */
    prec_format arith;    /* the format of the kernel's arithmetic (ours: fp32) */
    prec_format act;      /* x, y and the stored gradient branch */
    prec_format grad;     /* dy and dx */
    /* fp8 formats: the per-tensor scales (real = stored scale); else 1 */
    double x_scale, y_scale, g_scale, dy_scale, dx_scale;
} kcmp_act_kernel;

/* Real values (fp8: stored times scale), flat n.  y: the forward's output;
 * g: the gradient branch f'(x) the forward stored (NULL: none); dy and dx:
 * the backward's gradients (NULL: no backward), dx computed from g when g is
 * given, else from x. */
typedef struct {
    int64_t n;
    const double *x, *y, *g, *dy, *dx;
} kcmp_act_data;

#define KCMP_ACT_MAX_ROWS 3
/* Fills rows[] (finished) in the order y, grad, dx for the parts given
 * (grad needs y's forward: x and g); returns how many, or -1 when out of
 * memory. */
int kcmp_activation(const kcmp_act_kernel *k, const kcmp_act_data *d, const char *shape,
                    kcheck_acc rows[KCMP_ACT_MAX_ROWS]);

/* The MPFR references of n elements: y = f(x), df = f'(x), dx = dy f'(x)
 * (check draws its fp8 output scales from their amax); 0, or -1 when out of
 * memory. */
int kcmp_act_reference(kcmp_act_op op, int64_t n, const double *x, const double *dy, double *y, double *df, double *dx);

/* The op's name ("gelu_tanh", ...). */
const char *kcmp_act_name(kcmp_act_op op);

/* How `ulpscope check` describes its own kernel of op at (path, variant),
 * scales 1 (check_activation.c sets the fp8 scales it draws; it links the
 * kernels). */
kcmp_act_kernel kcheck_activation_kernel(kcmp_act_op op, kpath path, int variant);

#ifdef __cplusplus
}
#endif
#endif
