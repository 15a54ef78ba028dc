/* kernels/layernorm.h — LayerNorm forward and backward on the GPU.
 *
 * Per row of x (N, C) (PyTorch's definition: biased variance, eps inside the
 * square root): mean = sum(x) / C, var = sum((x - mean)^2) / C,
 * rstd = 1 / sqrt(var + eps), y = gain (x - mean) rstd + bias.
 * Backward with xhat = (x - mean) rstd and g = gain dy:
 *   dx = rstd (g - mean(g) - xhat mean(g xhat)),
 *   dgain[c] = sum_rows dy xhat,  dbias[c] = sum_rows dy.
 * x, y, dy, dx, gain, bias, dgain, dbias are in the path's format; mean and
 * rstd are fp32 vectors (N) the forward writes and the backward reads.
 * Accumulation is fp32. */
#ifndef ULPSCOPE_KERNELS_LAYERNORM_H
#define ULPSCOPE_KERNELS_LAYERNORM_H

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Variants (registry order): how the statistics are computed, and in which
 * order rows are reduced.  The backward of every variant uses the variant's
 * reduction order (one_pass and welford: the block tree). */
typedef enum {
    KLAYERNORM_TWO_PASS = 0, /* mean, then sum((x - mean)^2); block tree */
    KLAYERNORM_ONE_PASS,     /* sum(x) and sum(x^2) together, var = E[x^2] - mean^2 (clamped at 0) */
    KLAYERNORM_WELFORD,      /* Welford's update per thread, Chan et al.'s pairwise combination over the tree */
    KLAYERNORM_WARP_TREE,    /* two passes, one warp per row */
    KLAYERNORM_SEQUENTIAL,   /* two passes, one thread per row */
    KLAYERNORM_NVARIANTS
} klayernorm_variant;

int klayernorm_forward(ktensor *y, float *mean, float *rstd, const ktensor *x, const ktensor *gain,
                       const ktensor *bias, float eps, int variant);
int klayernorm_backward(ktensor *dx, ktensor *dgain, ktensor *dbias, const ktensor *dy, const ktensor *x,
                        const ktensor *gain, const float *mean, const float *rstd, int variant);

/* R replicas in one launch: x, y, dy, dx hold R x N rows of C (replica r's
 * rows r N .. r N + N - 1), mean and rstd R x N; gain, bias, dgain, dbias
 * hold R x C, one vector per replica.  Replica r's outputs are bit for bit
 * those of the single call on its rows and vectors (same kernels; dgain and
 * dbias reduce each replica's N rows in the single call's order).  The
 * single calls above are the case R = 1. */
int klayernorm_forward_replicas(int64_t replicas, ktensor *y, float *mean, float *rstd, const ktensor *x,
                                const ktensor *gain, const ktensor *bias, float eps, int variant);
int klayernorm_backward_replicas(int64_t replicas, ktensor *dx, ktensor *dgain, ktensor *dbias, const ktensor *dy,
                                 const ktensor *x, const ktensor *gain, const float *mean, const float *rstd,
                                 int variant);

/* Threads per row (256, 32 or 1) and elements per vector access for C
 * elements of format f: the partition kreduce.cuh describes, which the
 * check replays. */
int klayernorm_row_threads(int variant);
int klayernorm_row_vec(int64_t C, prec_format f);
/* Longest rounding chain of a row sum, and of the column sums over N rows. */
int64_t klayernorm_row_depth(int64_t C, prec_format f, int variant);
int64_t klayernorm_col_depth(int64_t N);

#ifdef __cplusplus
}
#endif
#endif
