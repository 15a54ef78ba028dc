/* kernels/transpose.h — transpose-copy and transpose-add (a transposed
 * lm_head kept in sync with a tied embedding, or its gradient folded back).
 *   copy: y[j][i] = x[i][j]                      (exact)
 *   add:  y[j][i] = y[j][i] + x[i][j]            (one fp32 add, one rounding)
 * x (M, N), y (N, M), both in the path's format. */
#ifndef ULPSCOPE_KERNELS_TRANSPOSE_H
#define ULPSCOPE_KERNELS_TRANSPOSE_H

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Variants give bitwise-identical results and differ in memory access:
 * smem_tile stages 32 x 32 tiles through shared memory (coalesced reads and
 * writes); direct reads rows and writes columns (uncoalesced writes). */
typedef enum { KTRANSPOSE_SMEM_TILE = 0, KTRANSPOSE_DIRECT, KTRANSPOSE_NVARIANTS } ktranspose_variant;

int ktranspose_copy(ktensor *y, const ktensor *x, int variant);
int ktranspose_add(ktensor *y, const ktensor *x, int variant);

/* R replicas in one launch: x (R M, N) or (R, M, N), y (R N, M) or
 * (R, N, M); replica r's (M, N) -> (N, M) exactly as a single call.  The
 * single calls above are the case R = 1. */
int ktranspose_copy_replicas(int64_t replicas, ktensor *y, const ktensor *x, int variant);
int ktranspose_add_replicas(int64_t replicas, ktensor *y, const ktensor *x, int variant);

#ifdef __cplusplus
}
#endif
#endif
