/* kernels/check/compare_embedding.c — the embedding lookup and its backward
 * against MPFR with the bound of a described kernel (compare_embedding.h). */
#include "kernels/check/compare_embedding.h"

#include <math.h>
#include <stdlib.h>

#include "reference/embedding.h"

int kcmp_embedding(const kcmp_embedding_kernel *k, const kcmp_embedding_data *d, const char *shape,
                   kcheck_acc rows[KCMP_EMBEDDING_MAX_ROWS])
{
    const int64_t V = d->V, N = d->N, C = d->C;
    const int forward = d->table && d->out, backward = d->dout && d->dtable;
    const double u = prec_format_get(k->storage)->unit_roundoff;
    double *outr = forward ? malloc((size_t)(N * C + 1) * sizeof(double)) : NULL;
    double *dtr = backward ? malloc((size_t)(V * C + 1) * sizeof(double)) : NULL;
    double *zeros = backward && !d->dtable0 ? calloc((size_t)(V * C + 1), sizeof(double)) : NULL;
    int64_t *count = calloc((size_t)(V + 1), sizeof(int64_t));
    if ((forward && !outr) || (backward && (!dtr || (!d->dtable0 && !zeros))) || !count) {
        free(outr); free(dtr); free(zeros); free(count);
        return -1;
    }
    const double *dt0 = d->dtable0 ? d->dtable0 : zeros;
    for (int64_t t = 0; t < N; t++) count[d->tokens[t]]++;
    ref_ctx rctx = REF_CTX_DEFAULT;
    int n_rows = 0;
    if (forward) {
        kcheck_acc *acc = &rows[n_rows++];
        ref_embedding_forward(&rctx, V, C, N, d->tokens, d->table, outr);
        kcheck_acc_init(acc, "out", shape, u);
        for (int64_t i = 0; i < N * C; i++)
            if (kcheck_acc_add(acc, i, d->out[i], outr[i], 0.0, 0.0, fabs(outr[i])))
                kcheck_acc_detail(acc, "token %lld (id %d) col %lld: got %.9g ref %.17g", (long long)(i / C),
                                  d->tokens[i / C], (long long)(i % C), d->out[i], outr[i]);
        kcheck_acc_finish(acc);
    }
    if (backward) {
        kcheck_acc *acc = &rows[n_rows++];
        ref_embedding_backward(&rctx, V, C, N, d->tokens, d->dout, dt0, dtr);
        kcheck_acc_init(acc, "dtable", shape, u);
        for (int64_t v = 0; v < V; v++)
            for (int64_t c = 0; c < C; c++) {
                int64_t i = v * C + c;
                kval e = kval_exact(dt0[i]);
                double scale = fabs(dt0[i]);
                if (count[v] > 0) {
                    kval_sum sum;
                    kval_sum_init(&sum);
                    for (int64_t t = 0; t < N; t++)
                        if (d->tokens[t] == v) kval_sum_add(&sum, kval_exact(d->dout[t * C + c]));
                    e = kval_round(kval_add(e, kval_sum_finish(&sum, k->depth(count[v], k->depth_user), k->acc), k->acc),
                                   k->storage);
                    scale += sum.abs;
                }
                if (kcheck_acc_add(acc, i, d->dtable[i], dtr[i], e.e, e.p, scale))
                    kcheck_acc_detail(acc, "row %lld col %lld (%lld tokens): got %.9g ref %.17g old=%.9g", (long long)v,
                                      (long long)c, (long long)count[v], d->dtable[i], dtr[i], dt0[i]);
            }
        kcheck_acc_finish(acc);
    }
    free(outr); free(dtr); free(zeros); free(count);
    return n_rows;
}
