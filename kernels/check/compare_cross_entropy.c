/* kernels/check/compare_cross_entropy.c — cross-entropy against MPFR with
 * the bound of a described kernel (compare_cross_entropy.h). */
#include "kernels/check/compare_cross_entropy.h"

#include <math.h>
#include <stdlib.h>

#include "reference/cross_entropy.h"

static const prec_format F32 = PREC_FP32;

static double exp_d(double x) { return exp(x); }
static double log_d(double x) { return log(x); }

kval kcmp_ce_row_lse(const kcmp_ce_kernel *k, const double *z, const double *ez, double ez_max, int64_t V,
                     double *m_out)
{
    double m = -INFINITY, lo = INFINITY;
    for (int64_t j = 0; j < V; j++) {
        m = fmax(m, z[j]);
        lo = fmin(lo, z[j]);
    }
    *m_out = m;
    const double u32 = prec_format_get(F32)->unit_roundoff;
    const int64_t depth = k->depth;
    kval_sum s;
    kval_sum_init(&s);
    for (int64_t j = 0; j < V; j++) {
        kval zj = {z[j], ez ? ez[j] : 0.0, ez ? ez[j] : 0.0};
        kval mk = {m, ez_max, ez_max};
        kval d = kval_sub(zj, mk, F32);
        double ulps = 2.0;
        if (k->online) {
            double extra = u32 * (fabs(z[j] - m) + 2 * (m - lo));
            d.e += extra;
            d.p += extra;
            ulps = 2.0 * (double)(depth + 1) + 0.5 * (double)depth;
        }
        kval_sum_add(&s, kval_monotone(d, exp_d, -INFINITY, INFINITY, ulps, 0.0, F32));
    }
    kval S = kval_sum_finish(&s, depth, k->acc);
    kval lg = kval_monotone(S, log_d, 0.0, INFINITY, 1.0, 0.0, F32);
    kval mk = {m, ez_max, ez_max};
    return kval_add(mk, lg, F32);
}

static double tanh_d(double x) { return tanh(x); }

kval kcmp_ce_capped(double l, double cap, kval *th)
{
    /* tanhf: 2 ulps (CUDA C++ Programming Guide; glibc's tables list 2 for x86-64) */
    *th = kval_monotone(kval_div(kval_exact(l), kval_exact(cap), F32), tanh_d, -INFINITY, INFINITY, 2.0, 0.0, F32);
    return kval_mul(kval_exact(cap), *th, F32);
}

kval kcmp_ce_dlogit(double zj, double ezj, kval lse, int is_target, const kval *th, double dloss, prec_format store)
{
    kval z = {zj, ezj, ezj};
    kval p = kval_monotone(kval_sub(z, lse, F32), exp_d, -INFINITY, INFINITY, 2.0, 0.0, F32);
    if (is_target) p = kval_sub(p, kval_exact(1.0), F32);
    if (th) p = kval_mul(p, kval_sub(kval_exact(1.0), kval_mul(*th, *th, F32), F32), F32);
    return kval_round(kval_mul(p, kval_exact(dloss), F32), store);
}

int kcmp_cross_entropy(const kcmp_ce_kernel *k, const kcmp_ce_data *d, const char *shape,
                       kcheck_acc rows[KCMP_CE_MAX_ROWS])
{
    const int64_t N = d->N, V = d->V;
    const int32_t *t = d->targets;
    const int capped = k->softcap > 0;
    double *lossr = malloc((size_t)N * sizeof(double)), *dzr = malloc((size_t)(N * V) * sizeof(double));
    /* capped: the row's logits as the kernel's sums see them, their errors, and the tanh replays */
    double *zc = capped ? malloc((size_t)V * sizeof(double)) : NULL, *ezc = capped ? malloc((size_t)V * sizeof(double)) : NULL;
    kval *th = capped ? malloc((size_t)V * sizeof(kval)) : NULL;
    if (!lossr || !dzr || (capped && (!zc || !ezc || !th))) {
        free(lossr), free(dzr), free(zc), free(ezc), free(th);
        return -1;
    }
    ref_ctx rctx = REF_CTX_DEFAULT;
    ref_cross_entropy(&rctx, N, V, d->logits, t, k->softcap, k->dloss, lossr, dzr);
    int n_rows = 0;
    kcheck_acc *al = d->loss ? &rows[n_rows++] : NULL, *ad = d->dlogits ? &rows[n_rows++] : NULL;
    if (al) kcheck_acc_init(al, "loss", shape, prec_format_get(F32)->unit_roundoff);
    if (ad) kcheck_acc_init(ad, "dlogits", shape, prec_format_get(k->logits)->unit_roundoff);
    const double *loss = d->loss, *dz = d->dlogits;
    for (int64_t i = 0; i < N; i++) {
        const double *zr = d->logits + i * V;
        if (t[i] < 0) { /* ignored: exact zeros */
            if (al && kcheck_acc_add(al, i, loss[i], 0.0, 0.0, 0.0, 0.0)) kcheck_acc_detail(al, "ignored row %lld", (long long)i);
            for (int64_t j = 0; ad && j < V; j++)
                if (kcheck_acc_add(ad, i * V + j, dz[i * V + j], 0.0, 0.0, 0.0, 0.0))
                    kcheck_acc_detail(ad, "ignored row %lld col %lld: got %.9g", (long long)i, (long long)j, dz[i * V + j]);
            continue;
        }
        double m, ez_max = 0.0;
        for (int64_t j = 0; capped && j < V; j++) {
            kval z = kcmp_ce_capped(zr[j], k->softcap, &th[j]);
            zc[j] = z.v;
            ezc[j] = z.e;
            ez_max = fmax(ez_max, z.e);
        }
        const double *zs = capped ? zc : zr;
        kval lse = kcmp_ce_row_lse(k, zs, capped ? ezc : NULL, ez_max, V, &m);
        const kval zt = {zs[t[i]], capped ? ezc[t[i]] : 0.0, capped ? ezc[t[i]] : 0.0};
        kval l = kval_sub(lse, zt, F32);
        if (al && kcheck_acc_add(al, i, loss[i], lossr[i], l.e, l.p, fabs(lse.v) + fabs(zt.v)))
            kcheck_acc_detail(al, "row %lld: got %.9g ref %.17g target %d z_t %.9g max %.9g", (long long)i, loss[i],
                              lossr[i], t[i], zt.v, m);
        for (int64_t j = 0; ad && j < V; j++) {
            kval g = kcmp_ce_dlogit(zs[j], capped ? ezc[j] : 0.0, lse, j == t[i], capped ? &th[j] : NULL, k->dloss,
                                    k->logits);
            int64_t idx = i * V + j;
            double scale = fabs(dzr[idx]) + (j == t[i] ? k->dloss : 0.0);
            if (kcheck_acc_add(ad, idx, dz[idx], dzr[idx], g.e, g.p, scale))
                kcheck_acc_detail(ad, "row %lld col %lld: got %.9g ref %.17g z %.9g target %d", (long long)i,
                                  (long long)j, dz[idx], dzr[idx], zr[j], t[i]);
        }
    }
    for (int i = 0; i < n_rows; i++) kcheck_acc_finish(&rows[i]);
    free(lossr), free(dzr), free(zc), free(ezc), free(th);
    return n_rows;
}
