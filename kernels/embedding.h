/* kernels/embedding.h — token embedding lookup and its deterministic
 * backward (no float atomics).
 *
 * forward:  out[t][c] = table[tokens[t]][c]                  (exact copy)
 * backward: dtable[v][c] += sum over t with tokens[t] = v of dout[t][c],
 *           summed in token order in fp32, then one addition to dtable's
 *           old value and one rounding into the path's format.
 * table, dtable (V, C); out, dout (N, C); tokens: device int32[N] in [0, V)
 * (out-of-range tokens give NaN rows forward and no gradient backward, and
 * never disturb another token's sum). */
#ifndef ULPSCOPE_KERNELS_EMBEDDING_H
#define ULPSCOPE_KERNELS_EMBEDDING_H

#include <stdint.h>

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Backward variants (same summation order, so the same bits):
 *   sorted     a stable radix sort of (token, position) pairs (CUB), the
 *              runs of equal tokens selected, then one warp per (distinct
 *              token, 32 columns) sums its rows in position order, one
 *              column per lane (loads of the next 32 rows issued before
 *              the current ones are added);
 *   row_owner  one block per vocabulary row scans all tokens in order: no
 *              sort, O(V N) index reads (the simple reference order). */
typedef enum { KEMBED_SORTED = 0, KEMBED_ROW_OWNER, KEMBED_NVARIANTS } kembedding_variant;

int kembedding_forward(ktensor *out, const ktensor *table, const int32_t *tokens, int variant);
/* Device workspace for the backward (0 for row_owner). */
size_t kembedding_backward_workspace(int64_t n_tokens, int64_t vocab, int variant);
int kembedding_backward(ktensor *dtable, const ktensor *dout, const int32_t *tokens, void *workspace,
                        size_t workspace_bytes, int variant);

/* R replicas in one launch: table, dtable (R * V, C) or (R, V, C), one
 * table per replica; out, dout (R * N, C); tokens int32[R * N], replica r's
 * at r N, each in [0, V) of its own table.  Replica r's out and dtable are
 * bit for bit those of the single call on its tokens and table (the sorted
 * variant sorts replica * V + token, so each token's rows are summed in the
 * single call's order).  n_tokens is N, per replica.  The single calls above
 * are the case R = 1. */
int kembedding_forward_replicas(int64_t replicas, ktensor *out, const ktensor *table, const int32_t *tokens,
                                int variant);
size_t kembedding_backward_workspace_replicas(int64_t replicas, int64_t n_tokens, int64_t vocab, int variant);
int kembedding_backward_replicas(int64_t replicas, ktensor *dtable, const ktensor *dout, const int32_t *tokens,
                                 void *workspace, size_t workspace_bytes, int variant);

#ifdef __cplusplus
}
#endif
#endif
