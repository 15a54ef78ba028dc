/* kernels/check/check_embedding.c — embedding's check.  Tokens
 * are skewed toward small ids (floor(V u^2)) so some rows gather many
 * gradient rows; table, dout, the old dtable ~ N(0, 1) in the path's format.
 * forward: exact (bound 0).  backward: the fp32 sum of k rows in token order
 * (k - 1 roundings), plus the old value (one rounding), plus the storage
 * rounding.  The comparison is kcmp_embedding (compare_embedding.h, shared
 * with `ulpscope verify`). */
#include <math.h>
#include <stdlib.h>

#include "kernels/check/checks.h"
#include "kernels/check/compare_embedding.h"
#include "kernels/common/ktensor_io.h"
#include "kernels/embedding.h"

typedef struct {
    int64_t V, N, C;
} shape;

static const shape shapes[] = {{5, 7, 3}, {50, 300, 768}, {1001, 64, 129}, {257, 2048, 64}};
/* every variant adds a row's k gradient rows in token order into an fp32 sum from the first: k - 1 roundings */
static int64_t token_order_depth(int64_t k, const void *user)
{
    (void)user;
    return k - 1;
}

kcmp_embedding_kernel kcheck_embedding_kernel(prec_format f, int variant)
{
    (void)variant;
    kcmp_embedding_kernel k = {f, PREC_FP32, token_order_depth, NULL};
    return k;
}

static int check_shape(kcheck_ctx *ctx, const shape *s, prec_format f, int variant)
{
    const int64_t V = s->V, N = s->N, C = s->C;
    double *table = malloc(V * C * sizeof(double)), *dt0 = malloc(V * C * sizeof(double));
    double *dt = malloc(V * C * sizeof(double));
    double *dout = malloc(N * C * sizeof(double)), *out = malloc(N * C * sizeof(double));
    int32_t *tok = malloc(N * sizeof(int32_t));
    ktensor tt = {0}, tout = {0}, tdt = {0}, tdout = {0};
    int32_t *dtok = NULL;
    void *ws = NULL;
    int rc = -1;
    if (!table || !dt0 || !dt || !dout || !out || !tok) {
        kernels_fail("embedding check: out of host memory");
        goto done;
    }
    prec_rng rng;
    kcheck_rng(ctx, &rng);
    for (int64_t t = 0; t < N; t++) {
        double u = prec_rng_uniform(&rng);
        tok[t] = (int32_t)floor((double)V * u * u);
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
    char name[96];
    snprintf(name, sizeof name, "V=%lld N=%lld C=%lld", (long long)V, (long long)N, (long long)C);
    const kcmp_embedding_kernel k = kcheck_embedding_kernel(f, variant);
    const kcmp_embedding_data d = {V, N, C, tok, table, out, dout, dt0, dt};
    kcheck_acc rows[KCMP_EMBEDDING_MAX_ROWS];
    if (kcmp_embedding(&k, &d, name, rows) < 0) {
        kernels_fail("embedding check: out of host memory");
        goto done;
    }
    for (int r = 0; r < 2; r++) kcheck_report(ctx, &rows[r].row);
    rc = 0;
done:
    ktensor_free(&tt); ktensor_free(&tout); ktensor_free(&tdt); ktensor_free(&tdout);
    kdevice_free(dtok);
    kdevice_free(ws);
    free(table); free(dt0); free(dt); free(dout); free(out); free(tok);
    return rc;
}

int kcheck_embedding(kcheck_ctx *ctx, kpath path, int variant)
{
    const int n = kcheck_quick(ctx) ? 2 : (int)(sizeof shapes / sizeof shapes[0]);
    for (int i = 0; i < n; i++)
        if (check_shape(ctx, &shapes[i], kcheck_path_format(path), variant)) return -1;
    return 0;
}

