/* kernels/cross_entropy.h — cross-entropy over the vocabulary, forward and
 * backward: from materialised logits, and fused with the lm_head matmul so
 * that the full logits tensor never exists.
 *
 * Per row i of N (targets t_i in [0, V), or negative: the row is ignored,
 * its loss and gradients 0):
 *   lse_i = log sum_j exp(z_ij),  loss_i = lse_i - z_i,t_i,
 *   dz_ij = (exp(z_ij - lse_i) - [j == t_i]) * dloss
 * dloss is the gradient of each row's loss (1/N for a mean over rows).
 * Losses are fp32 [N]; the caller reduces them (a mean is dloss-weighted).
 * Logit soft-cap (materialised only; softcap 0: none): each logit l read is
 * first z = cap tanhf(l / cap) (quotient, tanhf, product: each rounded in
 * fp32), and the gradient is ((p - [j = t]) (1 - th th)) dloss with
 * th = tanhf(l / cap) recomputed in the gradient sweep, each step rounded.
 *
 * Materialised (kce_forward_backward): logits [N,V] and dlogits [N,V] in the
 * path's format (fp32, bf16, fp16) or in fp32 (variant fp32_logits, what an
 * lm_head writing its fp32 accumulator gives); dlogits may alias logits (in
 * place) or be NULL (forward only).  One block of 256 threads per row; sums
 * in fp32 over the row partition of kernels/common/kreduce.cuh (strided partials,
 * block tree); expf (2 ulps) and logf (1 ulp).  A row small enough that two
 * blocks' copies fit in one multiprocessor's shared memory (bf16 V <= 57344
 * on an H100) is read from global memory once, into shared memory, for its
 * sweeps: where the values come from changes, not the order they are used in.
 *   two_pass     the row maximum, then sum exp(z - max)           (2 reads)
 *   online       running (max, sum) per thread, rescaled on each new max,
 *                merged over the block tree (Milakov and Gimelshein, "Online
 *                normalizer calculation for softmax", arXiv:1805.02867)
 *   fp32_logits  two_pass with fp32 logits and dlogits (on the fp32 path the
 *                same kernel as two_pass)
 *
 * Fused linear (klinear_ce): h [N,C] and W [V,C] (logits = h W^T, the
 * nn.Linear layout) in the path's format; rows in chunks of R: the chunk's
 * logits [R,V] in fp32 from kmatmul (y_fp32), the loss and dlogits as above
 * (dlogits rounded to the path's format for the backward GEMMs), then
 *   dh[chunk] = dlogits W  (path format)   and   dW += dlogits^T h[chunk]
 * with dW [V,C] fp32 accumulated over chunks (beta = 1).  Peak extra memory
 * R*V*(4 + path bytes) instead of N*V*2*(path bytes).
 *   chunk_1024 / chunk_128: R rows per chunk (changes dW's summation grouping)
 *
 * Replicas: kce_forward_backward is one block per row, so R runs' rows
 * stacked (N = R x rows) get a single call's bits; losses come back per row
 * (R x rows) and each run's mean is its caller's sum over its own rows (the
 * trainer sums a run's losses on the host, in row order, at any R).
 * klinear_ce multiplies by one W: R runs with their own W take a call each.
 *
 * Planted bugs: drop-term leaves the last vocabulary entry out of each row's
 * sum; truncate-output truncates the stores (losses and fp32 dlogits at bf16
 * precision, see kernels/common/kelem.cuh). */
#ifndef ULPSCOPE_KERNELS_CROSS_ENTROPY_H
#define ULPSCOPE_KERNELS_CROSS_ENTROPY_H

#include <stdint.h>

#include "kernels/kernels.h"
#include "kernels/registry.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { KCE_TWO_PASS = 0, KCE_ONLINE, KCE_FP32_LOGITS, KCE_NVARIANTS } kce_variant;
extern const kvariant kce_variants[KCE_NVARIANTS];

/* The format logits and dlogits have under (path, variant). */
prec_format kce_logits_format(kpath path, int variant);

int kce_forward_backward(kpath path, int variant, int64_t N, int64_t V, const void *logits, const int32_t *targets,
                         float *losses, void *dlogits, float dloss, float softcap);

typedef enum { KLCE_CHUNK_1024 = 0, KLCE_CHUNK_128, KLCE_NVARIANTS } klce_variant;
extern const kvariant klce_variants[KLCE_NVARIANTS];
int64_t klce_chunk_rows(int variant);

/* h [N,C], W [V,C] in the path's format; losses [N] fp32; dh [N,C] path
 * format (NULL: skip); dW [V,C] fp32, overwritten (NULL: skip). */
int klinear_ce(kpath path, int variant, int64_t N, int64_t C, int64_t V, const void *h, const void *W,
               const int32_t *targets, float *losses, void *dh, float *dW, float dloss);

/* Frees the chunk buffers klinear_ce keeps between calls; the bytes they
 * hold now (its only allocations besides kmatmul's workspaces). */
void klinear_ce_release(void);
size_t klinear_ce_workspace_bytes(void);

#ifdef __cplusplus
}
#endif
#endif
