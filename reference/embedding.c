/* reference/embedding.c — the lookup is a copy; each gradient element is a
 * sum of doubles, which ref_ball_sum (mpfr_sum) rounds once: the inputs are
 * exact, so the ball has no radius beyond that rounding and the first
 * precision decides every output (the Ziv loop is kept for uniformity). */
#include "reference/embedding.h"

#include <stdlib.h>

void ref_embedding_forward(ref_ctx *ctx, long V, long C, long N, const int32_t *tokens, const double *table, double *out)
{
    (void)ctx;
    (void)V;
    for (long t = 0; t < N; t++)
        for (long c = 0; c < C; c++) out[t * C + c] = table[(long)tokens[t] * C + c];
}

void ref_embedding_backward(ref_ctx *ctx, long V, long C, long N, const int32_t *tokens, const double *dout,
                            const double *dtable0, double *dtable)
{
    /* positions of each token, in order: a counting sort */
    long *start = calloc((size_t)V + 1, sizeof(long)), *pos = malloc((size_t)(N > 0 ? N : 1) * sizeof(long));
    long *fill = calloc((size_t)V + 1, sizeof(long));
    if (!start || !pos || !fill) abort();
    for (long t = 0; t < N; t++) start[tokens[t] + 1]++;
    for (long v = 0; v < V; v++) start[v + 1] += start[v];
    for (long t = 0; t < N; t++) pos[start[tokens[t]] + fill[tokens[t]]++] = t;
    long most = 0;
    for (long v = 0; v < V; v++)
        if (start[v + 1] - start[v] > most) most = start[v + 1] - start[v];
    mpfr_prec_t p0 = ref_first_prec(ctx);
    ref_ball *terms = ref_balls_new((size_t)most + 1, p0);
    ref_ball sum;
    ref_ball_init(&sum, p0);
    for (long v = 0; v < V; v++) {
        long k = start[v + 1] - start[v];
        for (long c = 0; c < C; c++) {
            if (k == 0) {
                dtable[v * C + c] = dtable0[v * C + c];
                continue;
            }
            mpfr_prec_t p = p0;
            for (;;) {
                ref_ball_set_d(&terms[0], dtable0[v * C + c]);
                for (long j = 0; j < k; j++) ref_ball_set_d(&terms[1 + j], dout[pos[start[v] + j] * C + c]);
                ref_ball_sum(&sum, terms, 1 + ref_terms(ctx, (size_t)k));
                if (ref_output(ctx, &sum, &dtable[v * C + c])) break;
                if (!(p = ref_next_prec(ctx, p))) {
                    ctx->unproven++;
                    break;
                }
                for (long j = 0; j <= k; j++) ref_ball_set_prec(&terms[j], p);
                ref_ball_set_prec(&sum, p);
            }
            if (p != p0) {
                for (long j = 0; j <= most; j++) ref_ball_set_prec(&terms[j], p0);
                ref_ball_set_prec(&sum, p0);
            }
        }
    }
    ref_balls_free(terms, (size_t)most + 1);
    ref_ball_clear(&sum);
    free(start);
    free(pos);
    free(fill);
}
