/* kernels/check/check_embedding.c — embedding's check.  Tokens
 * are skewed toward small ids (floor(V u^2)) so some rows gather many
 * gradient rows; table, dout, the old dtable ~ N(0, 1) in the path's format.
 * forward: exact (bound 0).  backward: the fp32 sum of k rows in token order
 * (k - 1 roundings), plus the old value (one rounding), plus the storage
 * rounding. */
#include <math.h>
#include <stdlib.h>

#include "kernels/check/checks.h"
#include "kernels/common/ktensor_io.h"
#include "kernels/embedding.h"
#include "reference/embedding.h"

typedef struct {
    int64_t V, N, C;
} shape;

static const shape shapes[] = {{5, 7, 3}, {50, 300, 768}, {1001, 64, 129}, {257, 2048, 64}};
static const prec_format F32 = PREC_FP32;

static int check_shape(kcheck_ctx *ctx, const shape *s, prec_format f, int variant)
{
    const int64_t V = s->V, N = s->N, C = s->C;
    double *table = malloc(V * C * sizeof(double)), *dt0 = malloc(V * C * sizeof(double));
    double *dt = malloc(V * C * sizeof(double)), *dtr = malloc(V * C * sizeof(double));
    double *dout = malloc(N * C * sizeof(double)), *out = malloc(N * C * sizeof(double)), *outr = malloc(N * C * sizeof(double));
    int32_t *tok = malloc(N * sizeof(int32_t));
    int64_t *count = calloc((size_t)V, sizeof(int64_t));
    ktensor tt = {0}, tout = {0}, tdt = {0}, tdout = {0};
    int32_t *dtok = NULL;
    void *ws = NULL;
    int rc = -1;
    if (!table || !dt0 || !dt || !dtr || !dout || !out || !outr || !tok || !count) {
        kernels_fail("embedding check: out of host memory");
        goto done;
    }
    prec_rng rng;
    kcheck_rng(ctx, &rng);
    for (int64_t t = 0; t < N; t++) {
        double u = prec_rng_uniform(&rng);
        tok[t] = (int32_t)floor((double)V * u * u);
        count[tok[t]]++;
    }
    kcheck_fill_normal(&rng, table, V * C, 0.0, 1.0, f);
    kcheck_fill_normal(&rng, dt0, V * C, 0.0, 1.0, f);
    kcheck_fill_normal(&rng, dout, N * C, 0.0, 1.0, f);
    int64_t vc[2] = {V, C}, nc[2] = {N, C};
    size_t wsb = kembedding_backward_workspace(N, V, variant);
    if (ktensor_alloc(&tt, f, 2, vc) || ktensor_alloc(&tdt, f, 2, vc) || ktensor_alloc(&tout, f, 2, nc) ||
        ktensor_alloc(&tdout, f, 2, nc) || ktensor_upload(&tt, table) || ktensor_upload(&tdt, dt0) ||
        ktensor_upload(&tdout, dout) || kdevice_alloc((void **)&dtok, N * sizeof(int32_t), "embedding tokens") ||
        kdevice_upload(dtok, tok, N * sizeof(int32_t), "embedding tokens") ||
        (wsb && kdevice_alloc(&ws, wsb, "embedding workspace")) || kembedding_forward(&tout, &tt, dtok, variant) ||
        kembedding_backward(&tdt, &tdout, dtok, ws, wsb, variant) || kernels_sync("embedding") ||
        ktensor_download(&tout, out) || ktensor_download(&tdt, dt))
        goto done;
    ref_ctx rctx = REF_CTX_DEFAULT;
    ref_embedding_forward(&rctx, V, C, N, tok, table, outr);
    ref_embedding_backward(&rctx, V, C, N, tok, dout, dt0, dtr);
    char name[96];
    snprintf(name, sizeof name, "V=%lld N=%lld C=%lld", (long long)V, (long long)N, (long long)C);
    const double u = prec_format_get(f)->unit_roundoff;
    kcheck_acc acc;
    kcheck_acc_init(&acc, "out", name, u);
    for (int64_t i = 0; i < N * C; i++)
        if (kcheck_acc_add(&acc, i, out[i], outr[i], 0.0, 0.0, fabs(outr[i])))
            kcheck_acc_detail(&acc, "token %lld (id %d) col %lld: got %.9g ref %.17g", (long long)(i / C), tok[i / C],
                              (long long)(i % C), out[i], outr[i]);
    kcheck_acc_report(ctx, &acc);
    kcheck_acc_init(&acc, "dtable", name, u);
    for (int64_t v = 0; v < V; v++)
        for (int64_t c = 0; c < C; c++) {
            int64_t i = v * C + c;
            kval k = kval_exact(dt0[i]);
            double scale = fabs(dt0[i]);
            if (count[v] > 0) {
                kval_sum sum;
                kval_sum_init(&sum);
                for (int64_t t = 0; t < N; t++)
                    if (tok[t] == v) kval_sum_add(&sum, kval_exact(dout[t * C + c]));
                k = kval_round(kval_add(k, kval_sum_finish(&sum, count[v] - 1, F32), F32), f);
                scale += sum.abs;
            }
            if (kcheck_acc_add(&acc, i, dt[i], dtr[i], k.e, k.p, scale))
                kcheck_acc_detail(&acc, "row %lld col %lld (%lld tokens): got %.9g ref %.17g old=%.9g", (long long)v,
                                  (long long)c, (long long)count[v], dt[i], dtr[i], dt0[i]);
        }
    kcheck_acc_report(ctx, &acc);
    rc = 0;
done:
    ktensor_free(&tt); ktensor_free(&tout); ktensor_free(&tdt); ktensor_free(&tdout);
    kdevice_free(dtok);
    kdevice_free(ws);
    free(table); free(dt0); free(dt); free(dtr); free(dout); free(out); free(outr); free(tok); free(count);
    return rc;
}

int kcheck_embedding(kcheck_ctx *ctx, kpath path, int variant)
{
    const int n = kcheck_quick(ctx) ? 2 : (int)(sizeof shapes / sizeof shapes[0]);
    for (int i = 0; i < n; i++)
        if (check_shape(ctx, &shapes[i], kcheck_path_format(path), variant)) return -1;
    return 0;
}

