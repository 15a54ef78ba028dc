/* kernels/check/check_cross_entropy.c — the checks of cross_entropy
 * (materialised logits) and linear_cross_entropy (fused with the lm_head,
 * chunked); registry entries in kernels/cross_entropy.cu.
 *
 * Materialised: logits ~ N(0, 2) (one shape N(0, 8): a wide row; two with a
 * logit soft-cap, N(0, 20) capped at 15 and N(0, 30) at 30) in the logits'
 * format, random targets with one ignored row, dloss = 1/N.  Rows:
 * loss (fp32) and dlogits.  Linear: h ~ N(0,1), W ~ N(0, 0.5) in the path's
 * format; rows: loss, dh (path format), dW (fp32).
 *
 * The materialised comparison is kcmp_cross_entropy (compare_cross_entropy.h,
 * shared with `ulpscope verify cross_entropy`); the linear check uses its
 * replays of the normaliser and of a dlogit.
 * Bounds replay the kernels on kval numbers: z - max rounded in fp32, expf
 * (2 ulps) and logf (1 ulp) from the CUDA C++ Programming Guide's tables,
 * the sum's longest rounding chain over the 256-thread row partition
 * (kcheck_tree_depth), lse = max + log(sum), loss = lse - z_t, then
 * dz = (expf(z - lse) - [j = t]) dloss and its store.  The online variant's
 * terms are also rescaled once per later maximum in their thread and per
 * tree level above it (at most the same depth r): each rescale adds an expf
 * (2 ulps) and a product (1/2 ulp), and the rescaling arguments add up to at
 * most the row's range, so each term carries 2(r+1) + r/2 ulps and an
 * argument error of u (|z - max| + 2 range).
 * Linear: the logits carry the matmul model's error (kmatmul_error_factor,
 * fp32 output); the backward GEMMs read the rounded dlogits (their errors
 * propagate through |W| and |h|) and add their own model's error; dW adds
 * one fp32 rounding per chunk (beta = 1).  The references for dh and dW are
 * exact sums of correctly rounded dlogits (reference/cross_entropy.h): their
 * 2^-53 sum |dz W| is added to the bound. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/check/checks.h"
#include "kernels/check/compare_cross_entropy.h"
#include "kernels/common/ktensor_io.h"
#include "kernels/cross_entropy.h"
#include "kernels/matmul.h"
#include "reference/cross_entropy.h"

static const prec_format F32 = PREC_FP32;
static const int THREADS = 256; /* the row kernel's block */

typedef struct {
    int64_t N, V;
    double sigma, softcap; /* softcap 0: none */
} ce_shape;

/* The capped shapes put most logits where tanh bends (sigma near the cap)
 * and some in its flat tail, where 1 - th^2 cancels. */
static const ce_shape ce_shapes[] = {{3, 7, 2.0, 0.0},  {5, 1000, 2.0, 0.0}, {5, 997, 20.0, 15.0},
                                     {6, 4099, 8.0, 0.0}, {4, 50304, 2.0, 0.0}, {3, 50304, 30.0, 30.0}};

/* Targets: uniform over the vocabulary, the last row ignored (-1) when N > 1. */
static void draw_targets(prec_rng *rng, int32_t *t, int64_t N, int64_t V)
{
    for (int64_t i = 0; i < N; i++) t[i] = (int32_t)(prec_rng_next(rng) % (uint64_t)V);
    if (N > 1) t[N - 1] = -1;
}

kcmp_ce_kernel kcheck_cross_entropy_kernel(kpath path, int variant, int64_t N, int64_t V)
{
    kcmp_ce_kernel k = {0};
    k.logits = kce_logits_format(path, variant);
    k.acc = F32;
    k.depth = kcheck_tree_depth(V, THREADS);
    k.online = variant == KCE_ONLINE;
    k.dloss = (double)(1.0f / (float)N);
    return k;
}

static int check_ce_shape(kcheck_ctx *ctx, kpath path, int variant, const ce_shape *s)
{
    const prec_format lf = kce_logits_format(path, variant);
    const int64_t N = s->N, V = s->V, NV = N * V;
    const float dloss = 1.0f / (float)N;
    double *z = malloc(NV * sizeof(double)), *dz = malloc(NV * sizeof(double)), *loss = malloc(N * sizeof(double));
    int32_t *t = malloc(N * sizeof(int32_t));
    ktensor L = {0}, D = {0}, Lo = {0};
    void *tdev = NULL;
    int rc = -1;
    if (!z || !dz || !loss || !t) {
        kernels_fail("cross_entropy check: out of host memory");
        goto done;
    }
    prec_rng rng;
    kcheck_rng(ctx, &rng);
    kcheck_fill_normal(&rng, z, NV, 0.0, s->sigma, lf);
    draw_targets(&rng, t, N, V);
    int64_t shp[2] = {N, V}, n1[1] = {N};
    if (ktensor_alloc(&L, lf, 2, shp) || ktensor_alloc(&D, lf, 2, shp) || ktensor_alloc(&Lo, F32, 1, n1) ||
        kdevice_alloc(&tdev, N * sizeof(int32_t), "cross_entropy targets") || ktensor_upload(&L, z) ||
        kdevice_upload(tdev, t, N * sizeof(int32_t), "cross_entropy targets"))
        goto done;
    if (kce_forward_backward(path, variant, N, V, L.data, tdev, Lo.data, D.data, dloss, (float)s->softcap) ||
        kernels_sync("cross_entropy") || ktensor_download(&D, dz) || ktensor_download(&Lo, loss))
        goto done;
    char shape_name[96];
    if (s->softcap > 0)
        snprintf(shape_name, sizeof shape_name, "N=%lld V=%lld sigma=%g softcap=%g", (long long)N, (long long)V,
                 s->sigma, s->softcap);
    else snprintf(shape_name, sizeof shape_name, "N=%lld V=%lld sigma=%g", (long long)N, (long long)V, s->sigma);
    kcmp_ce_kernel k = kcheck_cross_entropy_kernel(path, variant, N, V);
    k.softcap = (double)(float)s->softcap;
    const kcmp_ce_data d = {N, V, z, t, loss, dz};
    kcheck_acc rows[KCMP_CE_MAX_ROWS];
    int n_rows = kcmp_cross_entropy(&k, &d, shape_name, rows);
    if (n_rows < 0) {
        kernels_fail("cross_entropy check: out of host memory");
        goto done;
    }
    for (int i = 0; i < n_rows; i++) kcheck_report(ctx, &rows[i].row);
    rc = 0;
done:
    ktensor_free(&L); ktensor_free(&D); ktensor_free(&Lo);
    kdevice_free(tdev);
    free(z); free(dz); free(loss); free(t);
    return rc;
}

int kcheck_cross_entropy(kcheck_ctx *ctx, kpath path, int variant)
{
    int n = (int)(sizeof ce_shapes / sizeof ce_shapes[0]);
    if (kcheck_quick(ctx)) n = 3; /* the third is the first capped one */
    for (int i = 0; i < n; i++)
        if (check_ce_shape(ctx, path, variant, &ce_shapes[i]) != 0) return -1;
    return 0;
}

/* ---- fused linear ------------------------------------------------------------ */

typedef struct {
    int64_t N, C, V;
} lce_shape;

/* N = 130 and 300 cross chunk boundaries of chunk_128; V and C odd sizes. */
static const lce_shape lce_shapes[] = {{5, 16, 40}, {37, 64, 500}, {130, 32, 260}, {300, 24, 97}};

static int check_lce_shape(kcheck_ctx *ctx, kpath path, int variant, const lce_shape *s)
{
    const prec_format f = kcheck_path_format(path);
    const double u = prec_format_get(f)->unit_roundoff, u32 = prec_format_get(F32)->unit_roundoff;
    const int64_t N = s->N, C = s->C, V = s->V;
    const float dloss = 1.0f / (float)N;
    const int64_t R = klce_chunk_rows(variant) < N ? klce_chunk_rows(variant) : N;
    double *h = malloc(N * C * sizeof(double)), *W = malloc(V * C * sizeof(double));
    double *loss = malloc(N * sizeof(double)), *lossr = malloc(N * sizeof(double));
    double *dh = malloc(N * C * sizeof(double)), *dhr = malloc(N * C * sizeof(double));
    double *dW = malloc(V * C * sizeof(double)), *dWr = malloc(V * C * sizeof(double));
    double *dzr = malloc(N * V * sizeof(double)), *z = malloc(V * sizeof(double)), *ez = malloc(V * sizeof(double));
    kval *g = malloc(N * V * sizeof(kval));
    int32_t *t = malloc(N * sizeof(int32_t));
    ktensor H = {0}, Wt = {0}, DH = {0}, DW = {0}, Lo = {0};
    void *tdev = NULL;
    int rc = -1;
    if (!h || !W || !loss || !lossr || !dh || !dhr || !dW || !dWr || !dzr || !z || !ez || !g || !t) {
        kernels_fail("linear_cross_entropy check: out of host memory");
        goto done;
    }
    prec_rng rng;
    kcheck_rng(ctx, &rng);
    kcheck_fill_normal(&rng, h, N * C, 0.0, 1.0, f);
    kcheck_fill_normal(&rng, W, V * C, 0.0, 0.5, f);
    draw_targets(&rng, t, N, V);
    int64_t sh[2] = {N, C}, sw[2] = {V, C}, n1[1] = {N};
    if (ktensor_alloc(&H, f, 2, sh) || ktensor_alloc(&Wt, f, 2, sw) || ktensor_alloc(&DH, f, 2, sh) ||
        ktensor_alloc(&DW, F32, 2, sw) || ktensor_alloc(&Lo, F32, 1, n1) ||
        kdevice_alloc(&tdev, N * sizeof(int32_t), "linear_cross_entropy targets") || ktensor_upload(&H, h) ||
        ktensor_upload(&Wt, W) || kdevice_upload(tdev, t, N * sizeof(int32_t), "linear_cross_entropy targets"))
        goto done;
    if (klinear_ce(path, variant, N, C, V, H.data, Wt.data, tdev, Lo.data, DH.data, DW.data, dloss) ||
        kernels_sync("linear_cross_entropy") || ktensor_download(&Lo, loss) || ktensor_download(&DH, dh) ||
        ktensor_download(&DW, dW))
        goto done;
    ref_ctx rctx = REF_CTX_DEFAULT;
    ref_linear_cross_entropy(&rctx, N, C, V, h, W, t, dloss, lossr, dzr, dhr, dWr);

    char shape_name[96];
    snprintf(shape_name, sizeof shape_name, "N=%lld C=%lld V=%lld", (long long)N, (long long)C, (long long)V);
    int trunc_logits = 0, trunc_dh = 0, trunc_dw = 0;
    const double g_logits = kmatmul_error_factor(path, KMATMUL_ACC_DEFAULT, C, &trunc_logits);
    const double g_dh = kmatmul_error_factor(path, KMATMUL_ACC_DEFAULT, V, &trunc_dh);
    /* the normaliser as the materialised kernel's two-pass row (its logits' own errors come with them) */
    kcmp_ce_kernel lk = {f, F32, kcheck_tree_depth(V, THREADS), 0, dloss, 0.0};
    kcheck_acc al, adh, adw;
    kcheck_acc_init(&al, "loss", shape_name, u32);
    kcheck_acc_init(&adh, "dh", shape_name, u);
    kcheck_acc_init(&adw, "dW", shape_name, u32);
    for (int64_t i = 0; i < N; i++) {
        if (t[i] < 0) {
            if (kcheck_acc_add(&al, i, loss[i], 0.0, 0.0, 0.0, 0.0)) kcheck_acc_detail(&al, "ignored row %lld", (long long)i);
            for (int64_t j = 0; j < V; j++) g[i * V + j] = kval_exact(0.0);
            continue;
        }
        double ez_max = 0;
        for (int64_t j = 0; j < V; j++) {
            double v = 0, P = 0;
            for (int64_t c = 0; c < C; c++) {
                double pr = h[i * C + c] * W[j * C + c];
                v += pr;
                P += fabs(pr);
            }
            z[j] = v;
            ez[j] = g_logits * P + (double)C * 0x1p-150;
            ez_max = fmax(ez_max, ez[j]);
        }
        double m;
        kval lse = kcmp_ce_row_lse(&lk, z, ez, ez_max, V, &m);
        kval zt = {z[t[i]], ez[t[i]], ez[t[i]]};
        kval l = kval_sub(lse, zt, F32);
        if (trunc_logits) l.p = l.e;
        if (kcheck_acc_add(&al, i, loss[i], lossr[i], l.e, l.p, fabs(lse.v) + fabs(zt.v)))
            kcheck_acc_detail(&al, "row %lld: got %.9g ref %.17g target %d", (long long)i, loss[i], lossr[i], t[i]);
        for (int64_t j = 0; j < V; j++) g[i * V + j] = kcmp_ce_dlogit(z[j], ez[j], lse, j == t[i], NULL, dloss, f);
    }
    kcheck_acc_report(ctx, &al);
    /* dh = dz W: the rounded dz's errors through |W|, the GEMM's own model */
    for (int64_t i = 0; i < N; i++)
        for (int64_t c = 0; c < C; c++) {
            double P = 0, e = 0, p = 0;
            for (int64_t j = 0; j < V; j++) {
                const kval *gj = &g[i * V + j];
                P += fabs(gj->v * W[j * C + c]);
                e += gj->e * fabs(W[j * C + c]);
                p += gj->p * fabs(W[j * C + c]);
            }
            kval d = {dhr[i * C + c], e + g_dh * P + 0x1p-53 * P, 0.0};
            d.p = trunc_dh ? d.e : p + kval_gamma_prob(V, u32) * P + 0x1p-53 * P;
            d = kval_round(d, f);
            int64_t k = i * C + c;
            if (kcheck_acc_add(&adh, k, dh[k], dhr[k], d.e, d.p, P))
                kcheck_acc_detail(&adh, "row %lld col %lld: got %.9g ref %.17g sum|dz W| %.6g", (long long)i,
                                  (long long)c, dh[k], dhr[k], P);
        }
    kcheck_acc_report(ctx, &adh);
    /* dW = sum over chunks of dz^T h, each chunk's GEMM added in fp32 */
    for (int64_t j = 0; j < V; j++)
        for (int64_t c = 0; c < C; c++) {
            kval_sum chunks;
            kval_sum_init(&chunks);
            double Pall = 0;
            int n_chunks = 0, trunc = 0;
            for (int64_t c0 = 0; c0 < N; c0 += R, n_chunks++) {
                int64_t r = N - c0 < R ? N - c0 : R;
                double gk = kmatmul_error_factor(path, KMATMUL_ACC_DEFAULT, r, &trunc);
                double v = 0, P = 0, e = 0, p = 0;
                for (int64_t i = c0; i < c0 + r; i++) {
                    const kval *gi = &g[i * V + j];
                    v += gi->v * h[i * C + c];
                    P += fabs(gi->v * h[i * C + c]);
                    e += gi->e * fabs(h[i * C + c]);
                    p += gi->p * fabs(h[i * C + c]);
                }
                kval ck = {v, e + gk * P, 0.0};
                ck.p = trunc ? ck.e : p + kval_gamma_prob(r, u32) * P;
                kval_sum_add(&chunks, ck);
                Pall += P;
            }
            trunc_dw |= trunc;
            kval d = kval_sum_finish(&chunks, n_chunks - 1, F32);
            d.e += 0x1p-53 * Pall;
            d.p = trunc_dw ? d.e : d.p + 0x1p-53 * Pall;
            int64_t k = j * C + c;
            if (kcheck_acc_add(&adw, k, dW[k], dWr[k], d.e, d.p, Pall))
                kcheck_acc_detail(&adw, "vocab %lld col %lld: got %.9g ref %.17g over %d chunks", (long long)j,
                                  (long long)c, dW[k], dWr[k], n_chunks);
        }
    kcheck_acc_report(ctx, &adw);
    rc = 0;
done:
    ktensor_free(&H); ktensor_free(&Wt); ktensor_free(&DH); ktensor_free(&DW); ktensor_free(&Lo);
    kdevice_free(tdev);
    free(h); free(W); free(loss); free(lossr); free(dh); free(dhr); free(dW); free(dWr); free(dzr); free(z);
    free(ez); free(g); free(t);
    return rc;
}

int kcheck_linear_cross_entropy(kcheck_ctx *ctx, kpath path, int variant)
{
    int n = (int)(sizeof lce_shapes / sizeof lce_shapes[0]);
    if (kcheck_quick(ctx)) n = 2;
    for (int i = 0; i < n; i++)
        if (check_lce_shape(ctx, path, variant, &lce_shapes[i]) != 0) return -1;
    return 0;
}
