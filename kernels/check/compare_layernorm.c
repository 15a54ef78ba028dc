/* kernels/check/compare_layernorm.c — LayerNorm's outputs against MPFR with
 * the bound of a described kernel (compare_layernorm.h). */
#include "kernels/check/compare_layernorm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "reference/layernorm.h"

static const prec_format F32 = PREC_FP32;
static double rsqrt_d(double t) { return 1.0 / sqrt(t); }

/* ---- Welford replay (arithmetic in format f) ------------------------------- */

typedef struct {
    double n;
    kval m, m2;
} wstate;

static wstate w_empty(void)
{
    wstate w = {0, kval_exact(0), kval_exact(0)};
    return w;
}

static void w_add(wstate *w, double x, prec_format f)
{
    w->n += 1;
    kval d = kval_sub(kval_exact(x), w->m, f);
    w->m = kval_add(w->m, kval_div(d, kval_exact(w->n), f), f);
    kval d2 = kval_sub(kval_exact(x), w->m, f);
    w->m2 = kval_add(w->m2, kval_mul(d, d2, f), f);
}

static wstate w_combine(wstate a, wstate b, prec_format f)
{
    if (b.n == 0) return a;
    if (a.n == 0) return b;
    wstate r;
    r.n = a.n + b.n;
    kval delta = kval_sub(b.m, a.m, f);
    kval w = kval_round(kval_exact(b.n / r.n), f);
    r.m = kval_add(a.m, kval_mul(delta, w, f), f);
    kval t = kval_div(kval_round(kval_exact(a.n * b.n), f), kval_exact(r.n), f);
    r.m2 = kval_add(kval_add(a.m2, b.m2, f), kval_mul(kval_mul(delta, delta, f), t, f), f);
    return r;
}

static void w_butterfly(wstate *lanes, prec_format f)
{
    wstate next[32];
    for (int off = 16; off > 0; off >>= 1) {
        for (int l = 0; l < 32; l++) next[l] = w_combine(lanes[l], lanes[l ^ off], f);
        memcpy(lanes, next, sizeof next);
    }
}

/* Welford over one row of C values by threads x vec; t: room for threads states. */
static wstate welford_row(const double *x, int64_t C, int threads, int vec, prec_format f, wstate *t)
{
    if (threads == 1) {
        wstate w = w_empty();
        for (int64_t c = 0; c < C; c++) w_add(&w, x[c], f);
        return w;
    }
    for (int i = 0; i < threads; i++) {
        t[i] = w_empty();
        for (int64_t base = (int64_t)i * vec; base < C; base += (int64_t)threads * vec)
            for (int j = 0; j < vec && base + j < C; j++) w_add(&t[i], x[base + j], f);
    }
    wstate warps[32];
    int nw = threads / 32;
    for (int w = 0; w < nw; w++) {
        w_butterfly(t + 32 * w, f);
        warps[w] = t[32 * w];
    }
    for (int w = nw; w < 32; w++) warps[w] = w_empty();
    w_butterfly(warps, f);
    return warps[0];
}

/* A statistic the backward read: the forward's stored value, whose error
 * against the exact one is known (inflated by 2^-40 for double arithmetic). */
static kval stored_kval(double stored, double exact)
{
    double e = fabs(stored - exact) * (1.0 + 0x1p-40);
    kval k = {exact, e, e};
    return k;
}

int kcmp_layernorm(const kcmp_layernorm_kernel *k, const kcmp_layernorm_data *d, const char *shape,
                   kcheck_acc rows[KCMP_LAYERNORM_MAX_ROWS])
{
    const prec_format f = k->storage, acc = k->acc;
    const double u = prec_format_get(f)->unit_roundoff, u32 = prec_format_get(F32)->unit_roundoff;
    const int64_t N = d->N, C = d->C, NC = N * C;
    const int backward = d->dy && (d->dx || d->dgain || d->dbias);
    const double *g = d->gain, *bias = d->bias;
    double *yr = malloc((size_t)NC * sizeof(double)), *meanr = malloc((size_t)N * sizeof(double));
    double *rstdr = malloc((size_t)N * sizeof(double));
    double *dxr = backward ? malloc((size_t)NC * sizeof(double)) : NULL;
    double *dgr = backward ? malloc((size_t)C * sizeof(double)) : NULL, *dbr = backward ? malloc((size_t)C * sizeof(double)) : NULL;
    kval *mu_rep = malloc((size_t)N * sizeof(kval)), *r_rep = malloc((size_t)N * sizeof(kval));
    kval *xhat = malloc((size_t)C * sizeof(kval)), *gd = malloc((size_t)C * sizeof(kval));
    kval_sum *colg = malloc((size_t)C * sizeof(kval_sum)), *colb = malloc((size_t)C * sizeof(kval_sum));
    wstate *lanes = k->variance == KCMP_LN_WELFORD ? malloc((size_t)k->welford_threads * sizeof(wstate)) : NULL;
    int n_rows = -1;
    if (!yr || !meanr || !rstdr || (backward && (!dxr || !dgr || !dbr)) || !mu_rep || !r_rep || !xhat || !gd || !colg ||
        !colb || (k->variance == KCMP_LN_WELFORD && !lanes))
        goto done;
    ref_ctx rc = REF_CTX_DEFAULT;
    ref_layernorm_forward(&rc, N, C, d->x, g, bias, k->eps, yr, meanr, rstdr);
    if (backward) ref_layernorm_backward(&rc, N, C, d->x, g, d->dy, k->eps, dxr, dgr, dbr);
    n_rows = 0;

    kcheck_acc *acc_y = d->y ? &rows[n_rows++] : NULL, *acc_m = d->mean ? &rows[n_rows++] : NULL;
    kcheck_acc *acc_r = d->rstd ? &rows[n_rows++] : NULL;
    if (acc_y) kcheck_acc_init(acc_y, "y", shape, u);
    if (acc_m) kcheck_acc_init(acc_m, "mean", shape, u32);
    if (acc_r) kcheck_acc_init(acc_r, "rstd", shape, u32);
    for (int64_t n = 0; n < N; n++) {
        const double *xr = d->x + n * C;
        const double mu_exact = meanr[n];
        kval mu, var;
        if (k->variance == KCMP_LN_WELFORD) {
            wstate w = welford_row(xr, C, k->welford_threads, k->welford_vec, acc, lanes);
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
            mu = kval_div(kval_sum_finish(&sx, k->fwd_depth, acc), kval_exact((double)C), F32);
            mu.v = mu_exact;
            if (k->variance == KCMP_LN_ONE_PASS) {
                kval ms = kval_div(kval_sum_finish(&sq, k->fwd_depth, acc), kval_exact((double)C), F32);
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
                kval ss = kval_sum_finish(&sd, k->fwd_depth, acc);
                ss.e += (double)C * mu.e * mu.e;
                ss.p += (double)C * mu.p * mu.p;
                var = kval_div(ss, kval_exact((double)C), F32);
            }
        }
        mu.v = mu_exact;
        kval r = kval_monotone(kval_add(var, kval_exact(k->eps), F32), rsqrt_d, 0.0, INFINITY, k->rsqrt_ulps, 0.0, F32);
        r.v = rstdr[n];
        mu_rep[n] = mu;
        r_rep[n] = r;
        if (acc_m && kcheck_acc_add(acc_m, n, d->mean[n], mu_exact, mu.e, mu.p, fabs(mu_exact) + 1.0 / r.v))
            kcheck_acc_detail(acc_m, "row %lld: got %.9g ref %.17g", (long long)n, d->mean[n], mu_exact);
        if (acc_r && kcheck_acc_add(acc_r, n, d->rstd[n], rstdr[n], r.e, r.p, rstdr[n]))
            kcheck_acc_detail(acc_r, "row %lld: got %.9g ref %.17g", (long long)n, d->rstd[n], rstdr[n]);
        for (int64_t c = 0; acc_y && c < C; c++) {
            int64_t i = n * C + c;
            kval nrm = kval_mul(kval_sub(kval_exact(xr[c]), mu, F32), r, F32);
            kval gy = g ? kval_mul(nrm, kval_exact(g[c]), F32) : nrm;
            kval y = kval_round(bias ? kval_add(gy, kval_exact(bias[c]), F32) : gy, f);
            if (kcheck_acc_add(acc_y, i, d->y[i], yr[i], y.e, y.p, fabs(gy.v) + (bias ? fabs(bias[c]) : 0)))
                kcheck_acc_detail(acc_y, "row %lld col %lld: got %.9g ref %.17g x=%.9g gain=%.9g bias=%.9g mean=%.9g rstd=%.9g",
                                  (long long)n, (long long)c, d->y[i], yr[i], xr[c], g ? g[c] : 1.0,
                                  bias ? bias[c] : 0.0, mu_exact, rstdr[n]);
        }
    }

    if (backward) {
        kcheck_acc *acc_dx = d->dx ? &rows[n_rows++] : NULL;
        if (acc_dx) kcheck_acc_init(acc_dx, "dx", shape, u);
        for (int64_t c = 0; c < C; c++) {
            kval_sum_init(&colg[c]);
            kval_sum_init(&colb[c]);
        }
        for (int64_t n = 0; n < N; n++) {
            const double *xr = d->x + n * C, *dyr = d->dy + n * C;
            const kval mu = d->mean ? stored_kval(d->mean[n], meanr[n]) : mu_rep[n];
            const kval r = d->rstd ? stored_kval(d->rstd[n], rstdr[n]) : r_rep[n];
            kval_sum sg, sgx;
            kval_sum_init(&sg);
            kval_sum_init(&sgx);
            for (int64_t c = 0; c < C; c++) {
                xhat[c] = kval_mul(kval_sub(kval_exact(xr[c]), mu, F32), r, F32);
                gd[c] = g ? kval_mul(kval_exact(g[c]), kval_exact(dyr[c]), F32) : kval_exact(dyr[c]);
                kval_sum_add(&sg, gd[c]);
                kval_sum_add(&sgx, kval_mul(gd[c], xhat[c], PREC_FP64)); /* fma */
                kval_sum_add(&colg[c], kval_mul(kval_exact(dyr[c]), xhat[c], PREC_FP64));
                kval_sum_add(&colb[c], kval_exact(dyr[c]));
            }
            if (!acc_dx) continue;
            kval a = kval_div(kval_sum_finish(&sg, k->bwd_depth, acc), kval_exact((double)C), F32);
            kval bb = kval_div(kval_sum_finish(&sgx, k->bwd_depth, acc), kval_exact((double)C), F32);
            for (int64_t c = 0; c < C; c++) {
                int64_t i = n * C + c;
                kval xb = kval_mul(xhat[c], bb, F32);
                kval inner = kval_sub(kval_sub(gd[c], a, F32), xb, F32);
                kval dx = kval_round(kval_mul(inner, r, F32), f);
                double scale = r.v * (fabs(gd[c].v) + fabs(a.v) + fabs(xb.v));
                if (kcheck_acc_add(acc_dx, i, d->dx[i], dxr[i], dx.e, dx.p, scale))
                    kcheck_acc_detail(acc_dx, "row %lld col %lld: got %.9g ref %.17g x=%.9g dy=%.9g gain=%.9g",
                                      (long long)n, (long long)c, d->dx[i], dxr[i], xr[c], dyr[c], g ? g[c] : 1.0);
            }
        }
        kcheck_acc *acc_dg = d->dgain ? &rows[n_rows++] : NULL, *acc_db = d->dbias ? &rows[n_rows++] : NULL;
        if (acc_dg) kcheck_acc_init(acc_dg, "dgain", shape, u);
        if (acc_db) kcheck_acc_init(acc_db, "dbias", shape, u);
        for (int64_t c = 0; c < C; c++) {
            if (acc_dg) {
                kval dg = kval_round(kval_sum_finish(&colg[c], k->col_depth, acc), f);
                if (kcheck_acc_add(acc_dg, c, d->dgain[c], dgr[c], dg.e, dg.p, colg[c].abs))
                    kcheck_acc_detail(acc_dg, "col %lld: got %.9g ref %.17g", (long long)c, d->dgain[c], dgr[c]);
            }
            if (acc_db) {
                kval db = kval_round(kval_sum_finish(&colb[c], k->col_depth, acc), f);
                if (kcheck_acc_add(acc_db, c, d->dbias[c], dbr[c], db.e, db.p, colb[c].abs))
                    kcheck_acc_detail(acc_db, "col %lld: got %.9g ref %.17g", (long long)c, d->dbias[c], dbr[c]);
            }
        }
    }
    for (int i = 0; i < n_rows; i++) kcheck_acc_finish(&rows[i]);
done:
    free(yr); free(meanr); free(rstdr); free(dxr); free(dgr); free(dbr); free(mu_rep); free(r_rep);
    free(xhat); free(gd); free(colg); free(colb); free(lanes);
    return n_rows;
}
