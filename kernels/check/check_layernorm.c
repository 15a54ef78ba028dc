/* kernels/check/check_layernorm.c — layernorm's check.
 *
 * Inputs per shape (N rows of C): x ~ N(offset, 1) (an offset of 64 makes
 * the one-pass variance lose ~12 bits to cancellation, which its bound must
 * and does show), gain ~ N(1, 0.25), bias ~ N(0, 0.5), dy ~ N(0, 1), all in
 * the path's format; eps = 1e-5f.  Outputs checked: y, mean and rstd (fp32),
 * dx, dgain, dbias.
 *
 * Bounds replay the kernel on kval numbers (check.h).  Two details:
 *  - two-pass variance: with D_k = x_k - mean^ (computed mean, exact
 *    subtraction), sum D_k^2 = sum (x_k - mean)^2 + C (mean^ - mean)^2
 *    exactly, because sum (x_k - mean) = 0; so the error of the computed
 *    mean enters only at second order, C e_mean^2, and each term carries the
 *    rounding of its subtraction, (2u + u^2) D_k^2;
 *  - Welford: the kernel's per-thread updates and its butterfly tree of
 *    pairwise combinations are replayed exactly, thread by thread;
 *  - the backward reads the mean and rstd the forward stored: their actual
 *    errors (known to the check) start its bound. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/check/checks.h"
#include "kernels/common/ktensor_io.h"
#include "kernels/layernorm.h"
#include "reference/layernorm.h"

typedef struct {
    int64_t N, C;
    double offset;
} shape;

static const shape shapes[] = {
    {4, 7, 0.0}, {37, 768, 0.0}, {6, 1001, 64.0}, {9, 4099, 0.0}, {16, 1024, 8.0},
};

static const prec_format F32 = PREC_FP32;
static double rsqrt_d(double t) { return 1.0 / sqrt(t); }

/* ---- Welford replay -------------------------------------------------------- */

typedef struct {
    double n;
    kval m, m2;
} wstate;

static wstate w_empty(void)
{
    wstate w = {0, kval_exact(0), kval_exact(0)};
    return w;
}

static void w_add(wstate *w, double x)
{
    w->n += 1;
    kval d = kval_sub(kval_exact(x), w->m, F32);
    w->m = kval_add(w->m, kval_div(d, kval_exact(w->n), F32), F32);
    kval d2 = kval_sub(kval_exact(x), w->m, F32);
    w->m2 = kval_add(w->m2, kval_mul(d, d2, F32), F32);
}

static wstate w_combine(wstate a, wstate b)
{
    if (b.n == 0) return a;
    if (a.n == 0) return b;
    wstate r;
    r.n = a.n + b.n;
    kval delta = kval_sub(b.m, a.m, F32);
    kval w = kval_round(kval_exact(b.n / r.n), F32);
    r.m = kval_add(a.m, kval_mul(delta, w, F32), F32);
    kval t = kval_div(kval_round(kval_exact(a.n * b.n), F32), kval_exact(r.n), F32);
    r.m2 = kval_add(kval_add(a.m2, b.m2, F32), kval_mul(kval_mul(delta, delta, F32), t, F32), F32);
    return r;
}

static void w_butterfly(wstate *lanes)
{
    wstate next[32];
    for (int off = 16; off > 0; off >>= 1) {
        for (int l = 0; l < 32; l++) next[l] = w_combine(lanes[l], lanes[l ^ off]);
        memcpy(lanes, next, sizeof next);
    }
}

/* The kernel's Welford for one row of C values by threads x vec. */
static wstate welford_row(const double *x, int64_t C, int threads, int vec)
{
    wstate *t = malloc(sizeof(wstate) * (size_t)threads);
    for (int i = 0; i < threads; i++) {
        t[i] = w_empty();
        for (int64_t base = (int64_t)i * vec; base < C; base += (int64_t)threads * vec)
            for (int j = 0; j < vec && base + j < C; j++) w_add(&t[i], x[base + j]);
    }
    wstate warps[32], result;
    int nw = threads / 32;
    for (int w = 0; w < nw; w++) {
        w_butterfly(t + 32 * w);
        warps[w] = t[32 * w];
    }
    for (int w = nw; w < 32; w++) warps[w] = w_empty();
    w_butterfly(warps);
    result = warps[0];
    free(t);
    return result;
}

/* ---- the check ------------------------------------------------------------- */

typedef struct {
    double *x, *g, *b, *dy, *y, *mean, *rstd, *dx, *dg, *db;
    double *yr, *meanr, *rstdr, *dxr, *dgr, *dbr;
} buffers;

#define NBUF 16
static void free_buffers(buffers *b)
{
    double **d = &b->x;
    for (int i = 0; i < NBUF; i++) free(d[i]);
}

/* A statistic the backward read: the forward's stored value, whose error
 * against the exact one is known (inflated by 2^-40 for double arithmetic). */
static kval stored_kval(double stored, double exact)
{
    double e = fabs(stored - exact) * (1.0 + 0x1p-40);
    kval k = {exact, e, e};
    return k;
}

static int run_gpu(const shape *s, prec_format f, int variant, float eps, buffers *b)
{
    int64_t nc[2] = {s->N, s->C}, c1[1] = {s->C}, n1[1] = {s->N};
    ktensor x = {0}, y = {0}, g = {0}, bi = {0}, dy = {0}, dx = {0}, dg = {0}, db = {0}, mean = {0}, rstd = {0};
    int rc = -1;
    if (ktensor_alloc(&x, f, 2, nc) || ktensor_alloc(&y, f, 2, nc) || ktensor_alloc(&dy, f, 2, nc) ||
        ktensor_alloc(&dx, f, 2, nc) || ktensor_alloc(&g, f, 1, c1) || ktensor_alloc(&bi, f, 1, c1) ||
        ktensor_alloc(&dg, f, 1, c1) || ktensor_alloc(&db, f, 1, c1) || ktensor_alloc(&mean, F32, 1, n1) ||
        ktensor_alloc(&rstd, F32, 1, n1))
        goto done;
    if (ktensor_upload(&x, b->x) || ktensor_upload(&dy, b->dy) || ktensor_upload(&g, b->g) || ktensor_upload(&bi, b->b))
        goto done;
    if (klayernorm_forward(&y, mean.data, rstd.data, &x, &g, &bi, eps, variant) ||
        klayernorm_backward(&dx, &dg, &db, &dy, &x, &g, mean.data, rstd.data, variant) || kernels_sync("layernorm"))
        goto done;
    if (ktensor_download(&y, b->y) || ktensor_download(&mean, b->mean) || ktensor_download(&rstd, b->rstd) ||
        ktensor_download(&dx, b->dx) || ktensor_download(&dg, b->dg) || ktensor_download(&db, b->db))
        goto done;
    rc = 0;
done:
    ktensor_free(&x); ktensor_free(&y); ktensor_free(&g); ktensor_free(&bi); ktensor_free(&dy);
    ktensor_free(&dx); ktensor_free(&dg); ktensor_free(&db); ktensor_free(&mean); ktensor_free(&rstd);
    return rc;
}

static int check_shape(kcheck_ctx *ctx, const shape *s, kpath path, int variant)
{
    const prec_format f = kcheck_path_format(path);
    const double u = prec_format_get(f)->unit_roundoff, u32 = prec_format_get(F32)->unit_roundoff;
    const float eps = 1e-5f;
    const int64_t N = s->N, C = s->C, NC = N * C;
    buffers b;
    memset(&b, 0, sizeof b);
    int64_t sizes[NBUF] = {NC, C, C, NC, NC, N, N, NC, C, C, NC, N, N, NC, C, C};
    double **d = &b.x;
    int ok = 1;
    for (int i = 0; i < NBUF; i++) ok &= (d[i] = malloc((size_t)sizes[i] * sizeof(double))) != NULL;
    if (!ok) {
        free_buffers(&b);
        return kernels_fail("layernorm check: out of host memory");
    }
    prec_rng rng;
    kcheck_rng(ctx, &rng);
    kcheck_fill_normal(&rng, b.x, NC, s->offset, 1.0, f);
    kcheck_fill_normal(&rng, b.g, C, 1.0, 0.25, f);
    kcheck_fill_normal(&rng, b.b, C, 0.0, 0.5, f);
    kcheck_fill_normal(&rng, b.dy, NC, 0.0, 1.0, f);
    if (run_gpu(s, f, variant, eps, &b) != 0) {
        free_buffers(&b);
        return -1;
    }
    ref_ctx rc = REF_CTX_DEFAULT;
    ref_layernorm_forward(&rc, N, C, b.x, b.g, b.b, (double)eps, b.yr, b.meanr, b.rstdr);
    ref_layernorm_backward(&rc, N, C, b.x, b.g, b.dy, (double)eps, b.dxr, b.dgr, b.dbr);

    char name[96];
    snprintf(name, sizeof name, "N=%lld C=%lld mean=%g", (long long)N, (long long)C, s->offset);
    const int threads = klayernorm_row_threads(variant), vec = klayernorm_row_vec(C, f);
    const int64_t depth = klayernorm_row_depth(C, f, variant);

    kcheck_acc acc_y, acc_m, acc_r;
    kcheck_acc_init(&acc_y, "y", name, u);
    kcheck_acc_init(&acc_m, "mean", name, u32);
    kcheck_acc_init(&acc_r, "rstd", name, u32);
    for (int64_t n = 0; n < N; n++) {
        const double *xr = b.x + n * C;
        const double mu_exact = b.meanr[n];
        kval mu, var;
        if (variant == KLAYERNORM_WELFORD) {
            wstate w = welford_row(xr, C, threads, vec);
            mu = w.m;
            var = kval_div(w.m2, kval_exact((double)C), F32);
        } else {
            kval_sum sx, sq;
            kval_sum_init(&sx);
            kval_sum_init(&sq);
            for (int64_t c = 0; c < C; c++) {
                kval_sum_add(&sx, kval_exact(xr[c]));
                kval_sum_add(&sq, kval_exact(xr[c] * xr[c]));
            }
            mu = kval_div(kval_sum_finish(&sx, depth, F32), kval_exact((double)C), F32);
            mu.v = mu_exact;
            if (variant == KLAYERNORM_ONE_PASS) {
                kval ms = kval_div(kval_sum_finish(&sq, depth, F32), kval_exact((double)C), F32);
                var = kval_sub(ms, kval_mul(mu, mu, F32), F32);
            } else {
                kval_sum sd;
                kval_sum_init(&sd);
                for (int64_t c = 0; c < C; c++) {
                    double dev = fabs(xr[c] - mu_exact);
                    kval t = {dev * dev, (dev + mu.e) * (dev + mu.e) * (2 * u32 + u32 * u32),
                              (dev + mu.p) * (dev + mu.p) * (2 * u32 + u32 * u32)};
                    kval_sum_add(&sd, t);
                }
                kval ss = kval_sum_finish(&sd, depth, F32);
                ss.e += (double)C * mu.e * mu.e;
                ss.p += (double)C * mu.p * mu.p;
                var = kval_div(ss, kval_exact((double)C), F32);
            }
        }
        mu.v = mu_exact;
        kval r = kval_monotone(kval_add(var, kval_exact((double)eps), F32), rsqrt_d, 0.0, INFINITY, 2.0, 0.0, F32);
        r.v = b.rstdr[n];
        if (kcheck_acc_add(&acc_m, n, b.mean[n], mu_exact, mu.e, mu.p, fabs(mu_exact) + 1.0 / r.v))
            kcheck_acc_detail(&acc_m, "row %lld: got %.9g ref %.17g", (long long)n, b.mean[n], mu_exact);
        if (kcheck_acc_add(&acc_r, n, b.rstd[n], b.rstdr[n], r.e, r.p, b.rstdr[n]))
            kcheck_acc_detail(&acc_r, "row %lld: got %.9g ref %.17g", (long long)n, b.rstd[n], b.rstdr[n]);
        for (int64_t c = 0; c < C; c++) {
            int64_t i = n * C + c;
            kval nrm = kval_mul(kval_sub(kval_exact(xr[c]), mu, F32), r, F32);
            kval gy = kval_mul(nrm, kval_exact(b.g[c]), F32);
            kval y = kval_round(kval_add(gy, kval_exact(b.b[c]), F32), f);
            if (kcheck_acc_add(&acc_y, i, b.y[i], b.yr[i], y.e, y.p, fabs(gy.v) + fabs(b.b[c])))
                kcheck_acc_detail(&acc_y, "row %lld col %lld: got %.9g ref %.17g x=%.9g gain=%.9g bias=%.9g mean=%.9g rstd=%.9g",
                                  (long long)n, (long long)c, b.y[i], b.yr[i], xr[c], b.g[c], b.b[c], mu_exact, b.rstdr[n]);
        }
    }
    kcheck_acc_report(ctx, &acc_y);
    kcheck_acc_report(ctx, &acc_m);
    kcheck_acc_report(ctx, &acc_r);

    /* backward: the kernel reads the mean and rstd its forward stored */
    const int bvariant = variant == KLAYERNORM_WARP_TREE || variant == KLAYERNORM_SEQUENTIAL ? variant : KLAYERNORM_TWO_PASS;
    const int64_t bdepth = klayernorm_row_depth(C, f, bvariant), cdepth = klayernorm_col_depth(N);
    kcheck_acc acc_dx;
    kcheck_acc_init(&acc_dx, "dx", name, u);
    kval *xhat = malloc((size_t)C * sizeof(kval)), *gd = malloc((size_t)C * sizeof(kval));
    kval_sum *colg = malloc((size_t)C * sizeof(kval_sum)), *colb = malloc((size_t)C * sizeof(kval_sum));
    if (!xhat || !gd || !colg || !colb) {
        free(xhat); free(gd); free(colg); free(colb);
        free_buffers(&b);
        return kernels_fail("layernorm check: out of host memory");
    }
    for (int64_t c = 0; c < C; c++) {
        kval_sum_init(&colg[c]);
        kval_sum_init(&colb[c]);
    }
    for (int64_t n = 0; n < N; n++) {
        const double *xr = b.x + n * C, *dyr = b.dy + n * C;
        const kval mu = stored_kval(b.mean[n], b.meanr[n]), r = stored_kval(b.rstd[n], b.rstdr[n]);
        kval_sum sg, sgx;
        kval_sum_init(&sg);
        kval_sum_init(&sgx);
        for (int64_t c = 0; c < C; c++) {
            xhat[c] = kval_mul(kval_sub(kval_exact(xr[c]), mu, F32), r, F32);
            gd[c] = kval_mul(kval_exact(b.g[c]), kval_exact(dyr[c]), F32);
            kval_sum_add(&sg, gd[c]);
            kval_sum_add(&sgx, kval_mul(gd[c], xhat[c], PREC_FP64)); /* fma */
            kval_sum_add(&colg[c], kval_mul(kval_exact(dyr[c]), xhat[c], PREC_FP64));
            kval_sum_add(&colb[c], kval_exact(dyr[c]));
        }
        kval a = kval_div(kval_sum_finish(&sg, bdepth, F32), kval_exact((double)C), F32);
        kval bb = kval_div(kval_sum_finish(&sgx, bdepth, F32), kval_exact((double)C), F32);
        for (int64_t c = 0; c < C; c++) {
            int64_t i = n * C + c;
            kval xb = kval_mul(xhat[c], bb, F32);
            kval inner = kval_sub(kval_sub(gd[c], a, F32), xb, F32);
            kval dx = kval_round(kval_mul(inner, r, F32), f);
            double scale = r.v * (fabs(gd[c].v) + fabs(a.v) + fabs(xb.v));
            if (kcheck_acc_add(&acc_dx, i, b.dx[i], b.dxr[i], dx.e, dx.p, scale))
                kcheck_acc_detail(&acc_dx, "row %lld col %lld: got %.9g ref %.17g x=%.9g dy=%.9g gain=%.9g",
                                  (long long)n, (long long)c, b.dx[i], b.dxr[i], xr[c], dyr[c], b.g[c]);
        }
    }
    kcheck_acc_report(ctx, &acc_dx);
    kcheck_acc acc_dg, acc_db;
    kcheck_acc_init(&acc_dg, "dgain", name, u);
    kcheck_acc_init(&acc_db, "dbias", name, u);
    for (int64_t c = 0; c < C; c++) {
        kval dg = kval_round(kval_sum_finish(&colg[c], cdepth, F32), f);
        kval db = kval_round(kval_sum_finish(&colb[c], cdepth, F32), f);
        if (kcheck_acc_add(&acc_dg, c, b.dg[c], b.dgr[c], dg.e, dg.p, colg[c].abs))
            kcheck_acc_detail(&acc_dg, "col %lld: got %.9g ref %.17g", (long long)c, b.dg[c], b.dgr[c]);
        if (kcheck_acc_add(&acc_db, c, b.db[c], b.dbr[c], db.e, db.p, colb[c].abs))
            kcheck_acc_detail(&acc_db, "col %lld: got %.9g ref %.17g", (long long)c, b.db[c], b.dbr[c]);
    }
    kcheck_acc_report(ctx, &acc_dg);
    kcheck_acc_report(ctx, &acc_db);
    free(xhat); free(gd); free(colg); free(colb);
    free_buffers(&b);
    return 0;
}

int kcheck_layernorm(kcheck_ctx *ctx, kpath path, int variant)
{
    int n = (int)(sizeof shapes / sizeof shapes[0]);
    if (kcheck_quick(ctx)) n = 3;
    for (int i = 0; i < n; i++)
        if (check_shape(ctx, &shapes[i], path, variant) != 0) return -1;
    return 0;
}
