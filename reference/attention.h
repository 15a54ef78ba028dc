/* reference/attention.h — MPFR reference for causal self-attention (ref.h
 * conventions), the reference of kernels/attention.cu.  q, k, v, o, dout,
 * dq, dk, dv [BH, T, D] row-major, lse [BH, T]:
 *
 *   s_ij = scale q_i . k_j (j <= i),  lse_i = log sum_j exp(s_ij),
 *   P_ij = exp(s_ij - lse_i),  o_i = sum_j P_ij v_j,
 *   dP_ij = dout_i . v_j,  dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik),
 *   dq_i = scale sum_j dS_ij k_j,  dk_j = scale sum_i dS_ij q_i,
 *   dv_j = sum_i P_ij dout_i.
 *
 * The dot products q.k and dout.v are exact (superaccumulator); the rest is
 * ball arithmetic, each head through the Ziv loop, every output correctly
 * rounded to double.  scale is the fp32 value the kernel used. */
#ifndef ULPSCOPE_REFERENCE_ATTENTION_H
#define ULPSCOPE_REFERENCE_ATTENTION_H

#include "reference/ref.h"

#ifdef __cplusplus
extern "C" {
#endif

void ref_attention_forward(ref_ctx *ctx, long BH, long T, long D, double scale, const double *q, const double *k,
                           const double *v, double *o, double *lse);
void ref_attention_backward(ref_ctx *ctx, long BH, long T, long D, double scale, const double *q, const double *k,
                            const double *v, const double *dout, double *dq, double *dk, double *dv);

#ifdef __cplusplus
}
#endif
#endif
