/* reference/adamw.h — MPFR reference for one AdamW step (ref.h conventions),
 * the reference of kernels/adamw.cu.  Elementwise over n elements:
 *
 *   m' = beta1 m + (1 - beta1) g          v' = beta2 v + (1 - beta2) g^2
 *   p' = p - lr ( (m'/bc1) / (sqrt(v'/bc2) + eps) + wd p ),
 *   bc1 = 1 - beta1^t, bc2 = 1 - beta2^t   (exact powers)
 *
 * Inputs are the exact values the kernel saw (p is the fp32 master where
 * there is one, the weights otherwise; hyperparameters are the fp32 values
 * passed to the kernel, as doubles).  Outputs p', m', v' are correctly
 * rounded to double.  torch.optim.AdamW's order computes the same function.
 * REF_BUG_TRUNCATE truncates the outputs (the tests' twin); there is no
 * reduction for REF_BUG_DROP_TERM to act on. */
#ifndef ULPSCOPE_REFERENCE_ADAMW_H
#define ULPSCOPE_REFERENCE_ADAMW_H

#include "reference/ref.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    double lr, beta1, beta2, eps, weight_decay;
    long step; /* t >= 1 */
} ref_adamw_hparams;

void ref_adamw(ref_ctx *ctx, long n, const double *p, const double *g, const double *m, const double *v,
               const ref_adamw_hparams *h, double *p_out, double *m_out, double *v_out);

/* 1 - beta^t as a ball at the ball's precision (exact up to its radius). */
void ref_ball_one_minus_pow(ref_ball *r, double beta, long t);

#ifdef __cplusplus
}
#endif
#endif
