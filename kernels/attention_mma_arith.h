/* kernels/attention_mma_arith.h — the arithmetic of the flash_mma kernels
 * (kernels/attention_mma.cu) on the host, operation by operation: the score
 * and product chains through the bit-accurate matrix-unit model
 * (precision/mma.h, one k16 instruction at a time with the running fp32
 * accumulator as c), the online softmax over 64-key tiles in fp32 float
 * operations, the row sum in the kernels' order (4 threads of 16 sequential
 * terms, then a butterfly), P and dS rounded into the path's format, the
 * delta warp sum; host expf/exp2f/logf/log2f stand for CUDA's (both within
 * the check's 2 and 1 ulps, not bit for bit: see the attention section of
 * README.md).  Planted bugs as the kernels plant them.
 *
 * Used by the trainer's CPU backend (attention variants flash_mma and
 * flash_mma_exp2) and by tests/test_attention_mma_bound.c (against the
 * check's bound and the MPFR reference) and tests/test_attention_mma_simt.cc
 * (bit for bit against the kernels' own source run on the host).  Built
 * with contraction off (C11 ISO mode): every float operation rounds once.
 *
 * One head: q, k, v, g (dout), o, dq, dk, dv [T, D] row-major, lse [T];
 * every input a value of the path's format. */
#ifndef ULPSCOPE_KERNELS_ATTENTION_MMA_ARITH_H
#define ULPSCOPE_KERNELS_ATTENTION_MMA_ARITH_H

#include <stdint.h>

#include "precision/format.h"
#include "precision/mma.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const mma_arith *mma; /* the matrix units: inputs f, fp32 out (mma.sync) */
    prec_format f;        /* the path's format: bf16 or fp16 */
    int exp2;             /* flash_mma_exp2 */
    int bug;              /* KBUG_NONE, KBUG_DROP_TERM or KBUG_TRUNCATE_OUTPUT (kernels.h) */
    int64_t T, D;         /* D <= KATT_MAX_D */
    float scale;
} katt_mma_arith;

/* o (stored values of f) and lse (natural log, fp32 values) of one head.
 * Returns 0, or -1 when out of memory. */
int katt_mma_arith_forward(const katt_mma_arith *e, const double *q, const double *k, const double *v, double *o,
                           double *lse);

/* sum_d g_d o_d of one row as the kernels' delta kernel forms it: 32 lanes of
 * strided fp32 fma chains, a butterfly 16 .. 1 (lane 0). */
float katt_mma_arith_delta(const double *g, const double *o, int64_t D);

/* dq, dk, dv (stored values of f) from the forward's stored o and lse.
 * Returns 0, or -1 when out of memory. */
int katt_mma_arith_backward(const katt_mma_arith *e, const double *q, const double *k, const double *v,
                            const double *g, const double *o, const double *lse, double *dq, double *dk, double *dv);

#ifdef __cplusplus
}
#endif
#endif
