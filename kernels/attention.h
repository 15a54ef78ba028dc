/* kernels/attention.h — causal self-attention, forward and backward.
 *
 * Shapes: q, k, v, o, dout, dq, dk, dv [BH, T, D] row-major (BH = batch x
 * heads, the [B, H, T, D] layout flattened), all in the path's format (fp32,
 * bf16, fp16); lse [BH, T] fp32, written by the forward and read by the
 * backward (the flash backward recomputes the probabilities from it).
 * D <= 128, any T; scale is usually 1/sqrt(D).  flash_mma and
 * flash_mma_exp2 also read and write heads laid out otherwise (katt_rows:
 * the trainer's [B, T, H, D] directly, no permute), with the same bits.
 *
 *   s_ij = scale q_i . k_j (j <= i),  P_ij = exp(s_ij - lse_i),
 *   lse_i = log sum_j exp(s_ij),  o_i = sum_j P_ij v_j
 *   dP_ij = dout_i . v_j,  dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik),
 *   dq_i = scale sum_j dS_ij k_j,  dk_j = scale sum_i dS_ij q_i,
 *   dv_j = sum_i P_ij dout_i
 *
 * Variants:
 *   naive       materialises the scores S and the probabilities P [BH,T,T] in
 *               the path's format (one thread per score, one warp per softmax
 *               row, one thread per output); the backward materialises dP and
 *               dS the same way
 *   flash       one warp per query row walks the keys in tiles of 32 with an
 *               online softmax (running max, rescaled sum and accumulator,
 *               all fp32; Dao et al., FlashAttention, 2022); the backward
 *               recomputes P from lse, one warp per query row for dq and one
 *               per key row for dk, dv: no atomics, deterministic
 *   flash_exp2  flash with log2(e) folded into the score scale and exp2f
 *   flash_mma   the flash algorithm on the tensor cores (bf16 and fp16 paths
 *               only; D a multiple of 8; sm_80 or newer): mma.sync m16n8k16
 *               with fp32 accumulators for q k^T, P v and every backward
 *               product, P (and dS) rounded to the path's format to enter
 *               the tensor cores; see kernels/attention_mma.cu
 *   flash_mma_exp2  flash_mma with log2(e) folded into the score scale
 * Dot products of naive and flash accumulate sequentially in fp32 with fma;
 * those of flash_mma inside the tensor cores (precision/mma.h models them);
 * expf / exp2f (2 ulps), logf / log2f (1 ulp).  No float atomics anywhere:
 * bitwise repeatable.
 *
 * Replicas: BH = R x batch x heads.  Each output row (and in the naive
 * kernels each element) is one fixed-order computation inside one head; the
 * grid only decides which block does which row, so R runs' heads stacked
 * get a single call's bits.
 *
 * Workspace: naive keeps two [BH,T,T] buffers in the path's format, flash's
 * backward one fp32 [BH,T] (sum_d dout o); they persist until
 * kattention_release().  Planted bugs: drop-term leaves the last term out of
 * every score's dot product; truncate-output truncates every store. */
#ifndef ULPSCOPE_KERNELS_ATTENTION_H
#define ULPSCOPE_KERNELS_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "kernels/registry.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    KATT_NAIVE = 0,
    KATT_FLASH,
    KATT_FLASH_EXP2,
    KATT_FLASH_MMA,
    KATT_FLASH_MMA_EXP2,
    KATT_NVARIANTS
} katt_variant;
extern const kvariant katt_variants[KATT_NVARIANTS];

#define KATT_MAX_D 128
#define KATT_TILE 32     /* keys (or queries) per tile of the flash kernels */
#define KATT_MMA_KEYS 64 /* keys per tile of flash_mma's forward: the online softmax rescales between tiles */

static inline int katt_is_mma(int variant) { return variant == KATT_FLASH_MMA || variant == KATT_FLASH_MMA_EXP2; }
static inline int katt_is_exp2(int variant) { return variant == KATT_FLASH_EXP2 || variant == KATT_FLASH_MMA_EXP2; }

/* 1 when (path, variant) runs at head dimension D (D <= 0: any D the
 * variant accepts), else 0 with the reason in why.  flash_mma exists on the
 * bf16 and fp16 paths only, for D a multiple of 8. */
int kattention_supports(kpath path, int variant, int64_t D, char *why, size_t why_len);

int kattention_forward(kpath path, int variant, int64_t BH, int64_t T, int64_t D, float scale, const void *q,
                       const void *k, const void *v, void *o, float *lse);
int kattention_backward(kpath path, int variant, int64_t BH, int64_t T, int64_t D, float scale, const void *q,
                        const void *k, const void *v, const void *o, const void *dout, const float *lse, void *dq,
                        void *dk, void *dv);

/* Where the heads' rows lie.  Head bh = b H + h (b < BH / H, h < H): its
 * row t starts at element (b T + t) ld + h D of a tensor whose rows are ld
 * elements apart (ld >= H D): ld = in for what a call reads (q, k, v, and
 * o, dout in the backward), ld = out for what it writes (o in the forward,
 * dq, dk, dv).  The [BH, T, D] layout above is H = 1, in = out = D
 * (katt_rows_packed); the trainer's [B, T, H, D], a [B T, H D] matrix, is
 * in = out = H D; column blocks of a wider matrix (dq | dk | dv in
 * [B T, 3 H D]) have the matrix's width.  lse stays [BH, T].  Only flash_mma
 * and flash_mma_exp2 take other rows than packed ones (kattention_takes_rows);
 * the arithmetic is the same, only addresses move.  (Two strides, not one a
 * tensor: see kernels/attention_mma.cu, am_rows.) */
typedef struct {
    int64_t H;
    int64_t in, out; /* row strides, elements */
} katt_rows;

static inline katt_rows katt_rows_packed(int64_t D)
{
    katt_rows r = {1, D, D};
    return r;
}
static inline int kattention_takes_rows(int variant) { return katt_is_mma(variant); }

/* As kattention_forward / kattention_backward with the heads where rows says. */
int kattention_forward_rows(kpath path, int variant, int64_t BH, int64_t T, int64_t D, const katt_rows *rows,
                            float scale, const void *q, const void *k, const void *v, void *o, float *lse);
int kattention_backward_rows(kpath path, int variant, int64_t BH, int64_t T, int64_t D, const katt_rows *rows,
                             float scale, const void *q, const void *k, const void *v, const void *o,
                             const void *dout, const float *lse, void *dq, void *dk, void *dv);
void kattention_release(void);

#ifdef __cplusplus
}
#endif
#endif
