/* kernels/softmax.h — softmax over the last dimension, forward and backward.
 *
 * y[r][c] = exp(x[r][c] - m_r) / sum_j exp(x[r][j] - m_r), m_r = max_j x[r][j];
 * backward from the stored y and dy: dx = y (dy - sum_j y_j dy_j).
 * x, y, dy, dx (N, C) in the path's format; fp32 arithmetic; one block of
 * 256 threads per row, block-tree sums (kreduce.cuh).  Replicas: R runs'
 * rows are more rows (N = R x rows); a row's arithmetic never depends on N,
 * so each replica gets a single call's bits. */
#ifndef ULPSCOPE_KERNELS_SOFTMAX_H
#define ULPSCOPE_KERNELS_SOFTMAX_H

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Variants: how exp is computed (kernels/common/kexp.cuh); the backward has no
 * exp and is the same for all three. */
typedef enum { KSOFTMAX_EXP = 0, KSOFTMAX_EXP2, KSOFTMAX_FAST_EXP, KSOFTMAX_NVARIANTS } ksoftmax_variant;

int ksoftmax_forward(ktensor *y, const ktensor *x, int variant);
int ksoftmax_backward(ktensor *dx, const ktensor *y, const ktensor *dy, int variant);

/* Threads per row and the vector width the row partition uses. */
int ksoftmax_row_threads(void);
int ksoftmax_row_vec(int64_t C, prec_format f);

#ifdef __cplusplus
}
#endif
#endif
