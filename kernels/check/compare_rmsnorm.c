/* kernels/check/compare_rmsnorm.c — RMSNorm's outputs against MPFR with the
 * bound of a described kernel (compare_rmsnorm.h). */
#include "kernels/check/compare_rmsnorm.h"

#include <math.h>
#include <stdlib.h>

#include "reference/rmsnorm.h"

static double rsqrt_d(double t) { return 1.0 / sqrt(t); }

/* The rstd the backward read: the stored value, whose error against the
 * exact rstd is known exactly (inflated by 2^-40 for the double arithmetic). */
static kval stored_rstd_kval(double stored, double exact)
{
    double e = fabs(stored - exact) * (1.0 + 0x1p-40);
    kval k = {exact, e, e};
    return k;
}

/* Row n of dx in the xhat order (bwd_xhat): xhat = x r, dot = sum (g dy)
 * xhat with its products rounded, dx = round((g dy - xhat (dot / C)) r). */
static void dx_row_xhat(const kcmp_rmsnorm_kernel *k, const kcmp_rmsnorm_data *d, int64_t n, kval r, const double *dxr,
                        kcheck_acc *acc_dx)
{
    const prec_format F32 = PREC_FP32;
    const int64_t C = d->C;
    const double *xr = d->x + n * C, *dyr = d->dy + n * C, *g = d->gain;
    kval_sum dots;
    kval_sum_init(&dots);
    for (int64_t c = 0; c < C; c++) {
        kval gd = g ? kval_mul(kval_exact(g[c]), kval_exact(dyr[c]), F32) : kval_exact(dyr[c]);
        kval_sum_add(&dots, kval_mul(gd, kval_mul(kval_exact(xr[c]), r, F32), F32));
    }
    kval b = kval_div(kval_sum_finish(&dots, k->bwd_depth, k->acc), kval_exact((double)C), F32);
    for (int64_t c = 0; c < C; c++) {
        int64_t i = n * C + c;
        kval gd = g ? kval_mul(kval_exact(g[c]), kval_exact(dyr[c]), F32) : kval_exact(dyr[c]);
        kval xb = kval_mul(kval_mul(kval_exact(xr[c]), r, F32), b, F32);
        kval dxk = kval_round(kval_mul(kval_sub(gd, xb, F32), r, F32), k->storage);
        double scale = r.v * (fabs(gd.v) + fabs(xb.v));
        if (kcheck_acc_add(acc_dx, i, d->dx[i], dxr[i], dxk.e, dxk.p, scale))
            kcheck_acc_detail(acc_dx, "row %lld col %lld: got %.9g ref %.17g x=%.9g dy=%.9g gain=%.9g rstd=%.9g",
                              (long long)n, (long long)c, d->dx[i], dxr[i], xr[c], dyr[c], g ? g[c] : 1.0, r.v);
    }
}

int kcmp_rmsnorm(const kcmp_rmsnorm_kernel *k, const kcmp_rmsnorm_data *d, const char *shape,
                 kcheck_acc rows[KCMP_RMSNORM_MAX_ROWS])
{
    const prec_format f = k->storage, F32 = PREC_FP32, fs = k->stats_in_storage ? f : F32;
    const double u = prec_format_get(f)->unit_roundoff;
    const int64_t N = d->N, C = d->C, NC = N * C;
    const int backward = d->dy && (d->dx || d->dgain);
    double *yr = malloc(NC * sizeof(double)), *rr = malloc(N * sizeof(double));
    double *dxr = backward ? malloc(NC * sizeof(double)) : NULL, *dgr = backward && d->gain ? malloc(C * sizeof(double)) : NULL;
    kval *r_replay = malloc(N * sizeof(kval));
    if (!yr || !rr || !r_replay || (backward && (!dxr || (d->gain && !dgr)))) {
        free(yr); free(rr); free(dxr); free(dgr); free(r_replay);
        return -1;
    }
    ref_ctx rc = REF_CTX_DEFAULT;
    ref_rmsnorm_forward(&rc, N, C, d->x, d->gain, k->eps, yr, rr);
    if (backward) ref_rmsnorm_backward(&rc, N, C, d->x, d->gain, d->dy, k->eps, dxr, dgr);
    const double *g = d->gain;
    int n_rows = 0;

    /* forward: rstd per row, then y */
    kcheck_acc *acc_y = d->y ? &rows[n_rows++] : NULL, *acc_r = d->rstd ? &rows[n_rows++] : NULL;
    if (acc_y) kcheck_acc_init(acc_y, "y", shape, u);
    if (acc_r) kcheck_acc_init(acc_r, "rstd", shape, prec_format_get(F32)->unit_roundoff);
    for (int64_t n = 0; n < N; n++) {
        const double *xr = d->x + n * C;
        kval_sum ss;
        kval_sum_init(&ss);
        for (int64_t c = 0; c < C; c++) {
            kval sq = kval_exact(xr[c] * xr[c]); /* exact in double for fp32 inputs too */
            if (k->stats_in_storage) sq = kval_round(kval_round(sq, F32), f);
            kval_sum_add(&ss, sq);
        }
        kval sum = kval_sum_finish(&ss, k->fwd_depth, k->acc);
        kval ms = kval_round(kval_div(sum, kval_exact((double)C), F32), fs);
        kval t = kval_round(kval_add(ms, kval_exact(k->eps), F32), fs);
        kval r = kval_round(kval_monotone(t, rsqrt_d, 0.0, INFINITY, k->rsqrt_ulps, 0.0, F32), fs);
        r.v = rr[n]; /* the exact rstd (the replay's double value differs from it by ~1e-16 relative) */
        r_replay[n] = r;
        if (acc_r && kcheck_acc_add(acc_r, n, d->rstd[n], rr[n], r.e, r.p, fabs(rr[n])))
            kcheck_acc_detail(acc_r, "row %lld: got %.9g ref %.17g", (long long)n, d->rstd[n], rr[n]);
        for (int64_t c = 0; acc_y && c < C; c++) {
            int64_t i = n * C + c;
            kval xn = kval_mul(kval_exact(xr[c]), r, F32);
            if (k->round_normalized) xn = kval_round(xn, f);
            kval y = g ? kval_mul(xn, kval_exact(g[c]), F32) : xn;
            y = kval_round(y, f);
            if (kcheck_acc_add(acc_y, i, d->y[i], yr[i], y.e, y.p, fabs(yr[i])))
                kcheck_acc_detail(acc_y, "row %lld col %lld: got %.9g ref %.17g x=%.9g gain=%.9g rstd=%.9g",
                                  (long long)n, (long long)c, d->y[i], yr[i], xr[c], g ? g[c] : 1.0, rr[n]);
        }
    }

    /* backward: dx = r g dy - (((dot r) r) r / C) x, dot = sum (g dy) x
     * (bwd_xhat: dx_row_xhat) */
    kcheck_acc *acc_dx = backward && d->dx ? &rows[n_rows++] : NULL;
    if (acc_dx && k->bwd_xhat) {
        kcheck_acc_init(acc_dx, "dx", shape, u);
        for (int64_t n = 0; n < N; n++)
            dx_row_xhat(k, d, n, d->rstd ? stored_rstd_kval(d->rstd[n], rr[n]) : r_replay[n], dxr, acc_dx);
    } else if (acc_dx) {
        kcheck_acc_init(acc_dx, "dx", shape, u);
        for (int64_t n = 0; n < N; n++) {
            const double *xr = d->x + n * C, *dyr = d->dy + n * C;
            kval r = d->rstd ? stored_rstd_kval(d->rstd[n], rr[n]) : r_replay[n];
            kval_sum dots;
            kval_sum_init(&dots);
            for (int64_t c = 0; c < C; c++) {
                kval gd = g ? kval_mul(kval_exact(g[c]), kval_exact(dyr[c]), F32) : kval_exact(dyr[c]);
                kval_sum_add(&dots, kval_mul(gd, kval_exact(xr[c]), PREC_FP64)); /* fma: product unrounded */
            }
            kval dot = kval_sum_finish(&dots, k->bwd_depth, k->acc);
            kval cf = kval_div(kval_mul(kval_mul(kval_mul(dot, r, F32), r, F32), r, F32), kval_exact((double)C), F32);
            for (int64_t c = 0; c < C; c++) {
                int64_t i = n * C + c;
                kval gd = g ? kval_mul(kval_exact(g[c]), kval_exact(dyr[c]), F32) : kval_exact(dyr[c]);
                kval a = kval_mul(r, gd, F32), bx = kval_mul(cf, kval_exact(xr[c]), F32);
                kval dxk = kval_round(kval_sub(a, bx, F32), f);
                double scale = fabs(a.v) + fabs(bx.v);
                if (kcheck_acc_add(acc_dx, i, d->dx[i], dxr[i], dxk.e, dxk.p, scale))
                    kcheck_acc_detail(acc_dx, "row %lld col %lld: got %.9g ref %.17g x=%.9g dy=%.9g gain=%.9g rstd=%.9g",
                                      (long long)n, (long long)c, d->dx[i], dxr[i], xr[c], dyr[c], g ? g[c] : 1.0, rr[n]);
            }
        }
    }

    kcheck_acc *acc_dg = backward && g && d->dgain ? &rows[n_rows++] : NULL;
    if (acc_dg) {
        kcheck_acc_init(acc_dg, "dgain", shape, u);
        for (int64_t c = 0; c < C; c++) {
            kval_sum col;
            kval_sum_init(&col);
            for (int64_t n = 0; n < N; n++) {
                kval r = d->rstd ? stored_rstd_kval(d->rstd[n], rr[n]) : r_replay[n];
                kval_sum_add(&col, kval_mul(kval_mul(kval_exact(d->x[n * C + c]), r, F32), kval_exact(d->dy[n * C + c]), F32));
            }
            kval dg = kval_round(kval_sum_finish(&col, k->col_depth, k->acc), f);
            if (kcheck_acc_add(acc_dg, c, d->dgain[c], dgr[c], dg.e, dg.p, col.abs))
                kcheck_acc_detail(acc_dg, "col %lld: got %.9g ref %.17g (sum over %lld rows of dy x rstd)",
                                  (long long)c, d->dgain[c], dgr[c], (long long)N);
        }
    }
    for (int i = 0; i < n_rows; i++) kcheck_acc_finish(&rows[i]);
    free(yr); free(rr); free(dxr); free(dgr); free(r_replay);
    return n_rows;
}
