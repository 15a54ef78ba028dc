/* kernels/rmsnorm.h — RMSNorm forward and backward on the GPU.
 *
 * Per row of x (N, C): rstd = 1 / sqrt(mean(x^2) + eps), y = gain * x * rstd
 * (no gain: y = x * rstd).  Backward with g = gain * dy:
 *   dx = rstd g - rstd^3 x mean(g x),  dgain[c] = sum_rows dy x rstd.
 * Tensors x, y, dy, dx, gain, dgain are in the path's format (fp32, bf16 or
 * fp16); rstd is an fp32 vector (N) the forward writes and the backward
 * reads.  Accumulation is fp32. */
#ifndef ULPSCOPE_KERNELS_RMSNORM_H
#define ULPSCOPE_KERNELS_RMSNORM_H

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Variants (registry order).  The first three change the row reduction's
 * order with fp32 arithmetic throughout and one rounding of y (the
 * placement Gemma's RMSNorm uses: gain upcast, product in fp32); the last
 * two keep the block tree and move the rounding to the storage format:
 *   llama: x * rstd rounded to the storage format, then times the gain and
 *          rounded again (Hugging Face LlamaRMSNorm: weight * x.to(dtype));
 *   none:  no upcast: every elementwise step (x^2, mean, + eps, rsqrt,
 *          x * rstd, * gain) rounded to the storage format, only the sum of
 *          squares accumulated in fp32.
 * Placement affects the forward only; the backward of every variant uses
 * its own reduction order with fp32 arithmetic. */
typedef enum {
    KRMSNORM_BLOCK_TREE = 0, /* one block of 256 threads per row */
    KRMSNORM_WARP_TREE,      /* one warp per row */
    KRMSNORM_SEQUENTIAL,     /* one thread per row, left to right */
    KRMSNORM_LLAMA,
    KRMSNORM_NONE,
    KRMSNORM_NVARIANTS
} krmsnorm_variant;

/* y: (N, C); rstd: device float[N]; x: (N, C); gain: (C) or NULL. */
int krmsnorm_forward(ktensor *y, float *rstd, const ktensor *x, const ktensor *gain, float eps, int variant);
/* dx: (N, C); dgain: (C) or NULL (then gain must be NULL too or dgain is
 * skipped); dy, x: (N, C); rstd from the forward. */
int krmsnorm_backward(ktensor *dx, ktensor *dgain, const ktensor *dy, const ktensor *x, const ktensor *gain,
                      const float *rstd, int variant);

/* R replicas in one launch: x, y, dy, dx hold R x N rows of C (replica r's
 * rows r N .. r N + N - 1), rstd R x N; gain and dgain R x C, one vector per
 * replica (or NULL).  Replica r's outputs are bit for bit those of the
 * single call on its rows and gain (same kernels; dgain reduces each
 * replica's N rows in the single call's order).  The single calls above are
 * the case R = 1. */
int krmsnorm_forward_replicas(int64_t replicas, ktensor *y, float *rstd, const ktensor *x, const ktensor *gain,
                              float eps, int variant);
int krmsnorm_backward_replicas(int64_t replicas, ktensor *dx, ktensor *dgain, const ktensor *dy, const ktensor *x,
                               const ktensor *gain, const float *rstd, int variant);

/* Longest chain of fp32 roundings in a row reduction of C elements of
 * format f (the first fma's rounding included), and in dgain's column
 * reduction over N rows. */
int64_t krmsnorm_row_depth(int64_t C, prec_format f, int variant);
int64_t krmsnorm_col_depth(int64_t N);

#ifdef __cplusplus
}
#endif
#endif
