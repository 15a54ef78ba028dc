/* kernels/logsumexp.h — log-sum-exp over the last dimension, forward and
 * backward (the normaliser of cross-entropy).
 *
 * lse[r] = m_r + log(sum_j exp(x[r][j] - m_r)), m_r = max_j x[r][j];
 * backward from the stored lse and a per-row gradient dlse:
 *   dx[r][c] = dlse[r] exp(x[r][c] - lse[r]).
 * x, dx (N, C) in the path's format; lse, dlse fp32 vectors (N).  One block
 * per row: R runs' rows stacked (N = R x rows) get a single call's bits. */
#ifndef ULPSCOPE_KERNELS_LOGSUMEXP_H
#define ULPSCOPE_KERNELS_LOGSUMEXP_H

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Variants (kernels/common/kexp.cuh): exp: expf and logf; exp2: exp2f with log2(e)
 * folded into one fma, lse = m + log2f(s) ln2; fast_exp: __expf and __logf. */
typedef enum { KLSE_EXP = 0, KLSE_EXP2, KLSE_FAST_EXP, KLSE_NVARIANTS } klse_variant;

int klogsumexp_forward(float *lse, const ktensor *x, int variant);
int klogsumexp_backward(ktensor *dx, const ktensor *x, const float *lse, const float *dlse, int variant);

int klogsumexp_row_threads(void);
int klogsumexp_row_vec(int64_t C, prec_format f);

#ifdef __cplusplus
}
#endif
#endif
