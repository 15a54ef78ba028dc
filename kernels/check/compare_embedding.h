/* kernels/check/compare_embedding.h — the embedding lookup (forward: out[t]
 * = table[tokens[t]]) and its backward (dtable[v] = dtable0[v] + the sum of
 * dout[t] over the tokens t with id v) against the MPFR reference
 * (reference/embedding.h), with the bound of a described kernel: what
 * `ulpscope check embedding` reports for its own kernels
 * (check_embedding.c) and what `ulpscope verify embedding` reports for a
 * kernel the user describes.
 *
 * Bounds: the forward is a gather, exact (bound 0: any difference is a
 * bug).  The backward per element of a row v hit by k tokens: the k rows
 * of dout summed in acc with the longest rounding chain depth(k), then the
 * old value added in acc (one rounding), then the storage rounding; a row
 * no token hits keeps its old value exactly. */
#ifndef ULPSCOPE_KERNELS_CHECK_COMPARE_EMBEDDING_H
#define ULPSCOPE_KERNELS_CHECK_COMPARE_EMBEDDING_H

#include "kernels/check/check.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    prec_format storage; /* table, out, dout, dtable */
    prec_format acc;     /* the backward's sums (ours: fp32) */
    /* the longest rounding chain of a sum of k rows (ours: k - 1, in token order) */
    int64_t (*depth)(int64_t k, const void *user);
    const void *depth_user;
} kcmp_embedding_kernel;

/* table (V, C), tokens (N, in [0, V)), out (N, C): the forward (NULL: no
 * forward row); dout (N, C), dtable0 (V, C; NULL: zeros) and dtable (V, C):
 * the backward (NULL: no backward row). */
typedef struct {
    int64_t V, N, C;
    const int32_t *tokens;
    const double *table, *out;
    const double *dout, *dtable0, *dtable;
} kcmp_embedding_data;

#define KCMP_EMBEDDING_MAX_ROWS 2
/* Fills rows[] (finished) in the order out, dtable for the parts given;
 * returns how many, or -1 when out of memory. */
int kcmp_embedding(const kcmp_embedding_kernel *k, const kcmp_embedding_data *d, const char *shape,
                   kcheck_acc rows[KCMP_EMBEDDING_MAX_ROWS]);

/* How `ulpscope check` describes its own kernel (check_embedding.c: links the kernels). */
kcmp_embedding_kernel kcheck_embedding_kernel(prec_format f, int variant);

#ifdef __cplusplus
}
#endif
#endif
