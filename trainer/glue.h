/* trainer/glue.h — the few GPU kernels the trainer needs around the
 * registry's ops: format conversion between slots, adding a gradient into
 * its accumulator, and counting non-finite values.  They are not plan
 * slots: a conversion is the RNE rounding the CPU backend applies at the
 * same place, so both backends round at the same points.
 *
 * Pointers are device memory; formats fp32, bf16, fp16 (and fp8 sources
 * with their scale).  Functions return 0 or -1 with kernels_last_error(). */
#ifndef ULPSCOPE_TRAINER_GLUE_H
#define ULPSCOPE_TRAINER_GLUE_H

#include <stdint.h>

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] = RNE(src[i] * src_scale) in dst_format (src_scale: device float for fp8 sources, else NULL). */
int tglue_cast(void *dst, prec_format dst_format, const void *src, prec_format src_format, const float *src_scale,
               int64_t n);
/* dst[i] = RNE(dst[i] + src[i]) in dst's format, the sum formed in fp32. */
int tglue_add(void *dst, prec_format dst_format, const void *src, prec_format src_format, int64_t n);
/* A column block of a row-major matrix: dst[r * dst_cols + col0 + c] =
 * RNE(src[r * cols + c]) in dst's format, for r < rows and c < cols. */
int tglue_copy_columns(void *dst, prec_format dst_format, int64_t dst_cols, int64_t col0, const void *src,
                       prec_format src_format, int64_t rows, int64_t cols);
/* [B,T,H,D] <-> [B,H,T,D] (to_bhtd = 1: the first into the second), with a
 * format conversion (RNE) when the formats differ, else a copy of the bits.
 * Rows of D elements move as 16-byte vectors when the formats are equal,
 * D x element size is a multiple of 16 and both pointers 16-byte aligned. */
int tglue_permute_heads(void *dst, prec_format dst_format, const void *src, prec_format src_format, int64_t B,
                        int64_t T, int64_t H, int64_t D, int to_bhtd);
/* x[i] = RNE(x[i] * s) in x's format. */
int tglue_scale(void *x, prec_format format, int64_t n, float s);
/* Muon's momentum and Nesterov step on n elements: g = grad (times
 * grad_scale, rounded into grad's format, when grad_scale != 1);
 * buf = mu buf + (1 - mu) g (fp32); u = RNE((1 - mu) g + mu buf) in u's format. */
int tglue_muon_momentum(float *buf, const void *grad, prec_format grad_format, int64_t n, float mu, float grad_scale,
                        void *u, prec_format u_format);
/* W <- W (1 - lr wd) - lr scale O, the new value formed exactly (double)
 * from the fp32 old value and fp32 step, then stored as the weights slot
 * says: into the fp32 master and its RNE image w (master != NULL), split
 * into the bf16 w (high half) and low_bits (low_bits != NULL), rounded
 * stochastically into w (sr; bits from tbackend_sr_bits(seed, i)), or
 * rounded to nearest into w. */
int tglue_weight_update(void *w, prec_format w_format, float *master, uint16_t *low_bits, int sr, uint64_t seed,
                        const void *o, prec_format o_format, int64_t n, float lr, float wd, float scale);
/* The replica forms of the two Muon kernels: R replicas' arrays back to
 * back (n elements each, replica r's at r n) in one launch, replica r with
 * rep[r] (device memory, R entries): its gradient scale (momentum), its
 * stochastic-rounding seed (update), and skip (nonzero: its arrays are not
 * touched).  Replica r's elements get the bits of the single calls on its
 * arrays: the momentum over all n elements; the update over each run of
 * `period` elements (the stochastic-rounding index restarts at every
 * multiple of period: the single call per [rows, cols] block). */
typedef struct {
    float grad_scale;
    int32_t skip;
    uint64_t seed;
} tglue_replica;
int tglue_muon_momentum_replicas(int64_t R, const tglue_replica *rep, float *buf, const void *grad,
                                 prec_format grad_format, int64_t n, float mu, void *u, prec_format u_format);
int tglue_weight_update_replicas(int64_t R, const tglue_replica *rep, void *w, prec_format w_format, float *master,
                                 uint16_t *low_bits, int sr, const void *o, prec_format o_format, int64_t n,
                                 int64_t period, float lr, float wd, float scale);
/* Number of NaN/Inf elements (host result; synchronises). */
int tglue_count_nonfinite(const void *x, prec_format format, int64_t n, int64_t *count);

#ifdef __cplusplus
}
#endif
#endif
