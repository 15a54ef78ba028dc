/* kernels/check/compare_attention.h — causal self-attention's outputs
 * (forward o, lse; backward dq, dk, dv) against the MPFR reference
 * (reference/attention.h), with bounds for a described kernel: what
 * `ulpscope check attention` reports for its own kernels
 * (check_attention.c), what `ulpscope trace` reports for a replayed
 * attention slot on either backend (studies/trace_verdict.c) and what
 * `ulpscope verify attention` reports for a kernel the user describes.
 *
 * Shapes: q, k, v, o, dout, dq, dk, dv [BH, T, D] row-major; lse [BH, T]
 * (fp32 values).  Keys j <= i only.
 *
 * The bound replays the described operations on kval numbers (check.h),
 * every step in fp32 with round to nearest unless said otherwise:
 *  - scores: a sequential fma chain over D (gamma_D(2^-24) sum |q k|), times
 *    the scale (exp2: times fp32(scale log2 e), whose rounding is part of
 *    the error); store_scores rounds them into the storage format.
 *  - forward, P normalised before P v (online_tile 0): the exact row
 *    maximum m, e_j = exp(s_j - m) (exp_ulps), l = sum e (depth of
 *    sum_reduce over the row), P = e / l (store_probs: rounded into the
 *    storage format), o = a sequential fma chain over P v, rounded into the
 *    storage format; lse = m + log l (log_ulps; exp2: (m + log2 l) fp32(ln 2)).
 *  - forward online (online_tile T > 0, FlashAttention): keys in tiles of
 *    T; a term of tile t is rescaled once per later tile by exp(m_old -
 *    m_new) (exp_ulps each, inside the fma that scales the accumulator), the
 *    rescaling arguments add up to at most the row's score range; l has
 *    depth log2(T) + tiles (the tile's butterfly), the accumulator T +
 *    tiles; o = acc / l.
 *  - backward, P: recomputed as the forward computes it (bwd_probs
 *    KCMP_ATT_P_SOFTMAX: ulpscope's naive kernel), or exp(s - lse) from the
 *    stored lse (KCMP_ATT_P_FROM_LSE; with store_scores the score is
 *    rounded before, with store_probs P after).  dP = dout . v (a sequential
 *    fma chain; store_dprobs rounds it and dS into the storage format).
 *    delta: sum_j P dP (KCMP_ATT_DELTA_PDP, depth of delta_reduce over the
 *    row) or dout . o (KCMP_ATT_DELTA_DOUT_O, over D, with o's error);
 *    dS = P (dP - delta); dq, dk, dv sequential fma chains over the keys
 *    (queries), times the scale (dq, dk), rounded into the storage format.
 *  - mma (flash_mma, flash_mma_exp2): every product inside the tensor
 *    cores, bounded through the given matrix-unit model
 *    (check_attention_mma.h); the fields above but storage, scale and exp2
 *    are then not used.
 * The backward reads o and lse.  When the forward is compared in the same
 * call (forward_rows), it takes the forward's replayed bounds for them
 * (what check does: its backward runs on its own forward's outputs); a
 * backward alone takes the actual errors of the o and lse it was given
 * against the reference (exactly known, inflated by 2^-40 for the double
 * arithmetic), or the replayed bounds when they are not given.
 * The RMS verdict uses the probabilistic counterparts (kval.p); the
 * tensor-core blocks truncate, so there the worst case. */
#ifndef ULPSCOPE_KERNELS_CHECK_COMPARE_ATTENTION_H
#define ULPSCOPE_KERNELS_CHECK_COMPARE_ATTENTION_H

#include "kernels/check/check.h"
#include "precision/mma.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The longest rounding chain of a row reduction over n terms:
 * kcheck_tree_depth(n, threads) + extra (threads 1, extra 1: a sequential
 * fma chain from zero, n; threads 32, extra 0: a warp's strided partials
 * and butterfly; threads KCMP_ATT_PAIRWISE, extra 1: pairwise, ceil(log2
 * n) + 1); fixed >= 0 replaces the formula (depth fixed whatever n). */
typedef struct {
    int threads, extra;
    int64_t fixed; /* -1: by the formula */
} kcmp_att_reduce;
#define KCMP_ATT_PAIRWISE (1 << 30)

typedef enum { KCMP_ATT_P_SOFTMAX = 0, KCMP_ATT_P_FROM_LSE } kcmp_att_bwd_probs;
typedef enum { KCMP_ATT_DELTA_PDP = 0, KCMP_ATT_DELTA_DOUT_O } kcmp_att_delta;

typedef struct {
    prec_format storage;       /* q, k, v, o, dout, dq, dk, dv (lse: fp32) */
    double scale;              /* the fp32 value the kernel multiplies the scores by */
    int exp2;                  /* scores in log2 units: exp2f, lse = (m + log2 l) fp32(ln 2) */
    double exp_ulps, log_ulps; /* errors of the exponential and the logarithm, ulps of fp32 */
    int store_scores;          /* S rounded into the storage format before the softmax */
    int store_probs;           /* P rounded into the storage format */
    int store_dprobs;          /* backward: dP and dS rounded into the storage format */
    int online_tile;           /* > 0: online softmax over tiles of this many keys; 0: P normalised first */
    kcmp_att_reduce sum_reduce;   /* the softmax row sum (online_tile 0) */
    kcmp_att_bwd_probs bwd_probs;
    kcmp_att_delta delta;
    kcmp_att_reduce delta_reduce; /* the row's delta (over the keys, or over D) */
    const mma_arith *mma;      /* non-NULL: the tensor-core variants' bound (check_attention_mma.h) */
} kcmp_attention_kernel;

/* The kernel's inputs and outputs, as doubles in stored units.  Forward
 * rows (o, and lse when given) when forward_rows; backward rows for those
 * of dq, dk, dv given (they need dout).  o and lse are also what the
 * backward read. */
typedef struct {
    int64_t BH, T, D;
    const double *q, *k, *v;
    const double *o, *lse;
    int forward_rows;
    const double *dout, *dq, *dk, *dv;
} kcmp_attention_data;

#define KCMP_ATTENTION_MAX_ROWS 5
/* Fills rows[] (finished: kcheck_acc_finish) in the order o, lse, dq, dk,
 * dv for the outputs compared; returns how many, or -1 when out of memory
 * (or nothing to compare: no forward rows and no backward output). */
int kcmp_attention(const kcmp_attention_kernel *k, const kcmp_attention_data *d, const char *shape,
                   kcheck_acc rows[KCMP_ATTENTION_MAX_ROWS]);

/* How `ulpscope check` describes its own kernel at (storage f, variant):
 * naive materialises S, P, dP, dS with warp reductions and recomputes P in
 * the backward; flash and flash_exp2 rescale online over tiles of
 * KATT_TILE, delta = dout . o by a warp; flash_mma and flash_mma_exp2 take
 * the model mma (check_attention_mma.h's katt_mma_model). */
kcmp_attention_kernel kcheck_attention_kernel(prec_format f, int variant, double scale, const mma_arith *mma);

#ifdef __cplusplus
}
#endif
#endif
