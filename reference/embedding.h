/* reference/embedding.h — embedding lookup and its backward. */
#ifndef ULPSCOPE_REFERENCE_EMBEDDING_H
#define ULPSCOPE_REFERENCE_EMBEDDING_H

#include <stdint.h>

#include "reference/ref.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out[t][c] = table[tokens[t]][c] (exact); tokens in [0, V). */
void ref_embedding_forward(ref_ctx *ctx, long V, long C, long N, const int32_t *tokens, const double *table, double *out);
/* dtable[v][c] = dtable0[v][c] + sum_{t: tokens[t] = v} dout[t][c], correctly
 * rounded to double (rows no token hits are copied). */
void ref_embedding_backward(ref_ctx *ctx, long V, long C, long N, const int32_t *tokens, const double *dout,
                            const double *dtable0, double *dtable);

#ifdef __cplusplus
}
#endif
#endif
