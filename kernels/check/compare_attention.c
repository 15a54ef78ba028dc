/* kernels/check/compare_attention.c — attention's outputs against MPFR with
 * the bound of a described kernel (compare_attention.h).
 * expf/exp2f 2 ulps, logf/log2f 1 ulp: CUDA C++ Programming Guide,
 * "Mathematical Functions" (check's kernels); trace takes the same figures
 * for the CPU backend's glibc expf and logf. */
#include "kernels/check/compare_attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/check/check_attention_mma.h"
#include "reference/attention.h"

static const prec_format F32 = PREC_FP32;

static double exp_d(double x) { return exp(x); }
static double exp2_d(double x) { return exp2(x); }
static double log_d(double x) { return log(x); }
static double log2_d(double x) { return log2(x); }

static int64_t reduce_depth(kcmp_att_reduce r, int64_t n)
{
    return r.fixed >= 0 ? r.fixed : kcheck_tree_depth(n, r.threads) + r.extra;
}

kcmp_attention_kernel kcheck_attention_kernel(prec_format f, int variant, double scale, const mma_arith *mma)
{
    const kcmp_att_reduce warp = {32, 0, -1};
    kcmp_attention_kernel k = {0};
    k.storage = f;
    k.scale = scale;
    k.exp2 = katt_is_exp2(variant);
    k.exp_ulps = 2.0;
    k.log_ulps = 1.0;
    k.sum_reduce = k.delta_reduce = warp;
    if (variant == KATT_NAIVE) {
        k.store_scores = k.store_probs = k.store_dprobs = 1;
        k.bwd_probs = KCMP_ATT_P_SOFTMAX;
        k.delta = KCMP_ATT_DELTA_PDP;
    } else {
        k.online_tile = KATT_TILE;
        k.bwd_probs = KCMP_ATT_P_FROM_LSE;
        k.delta = KCMP_ATT_DELTA_DOUT_O;
    }
    if (katt_is_mma(variant)) k.mma = mma;
    return k;
}

typedef struct {
    const kcmp_attention_kernel *k;
    const double *q, *k_, *v, *g; /* one head [T,D] */
    int64_t T, D;
} head;

/* Score (i, j) as the kernel holds it: natural units, or log2 units for exp2. */
static kval score(const head *h, int64_t i, int64_t j, kval c2, int store)
{
    const double u32 = prec_format_get(F32)->unit_roundoff;
    double v = 0, P = 0;
    for (int64_t d = 0; d < h->D; d++) {
        double t = h->q[i * h->D + d] * h->k_[j * h->D + d];
        v += t;
        P += fabs(t);
    }
    kval dot = {v, kval_gamma(h->D, u32) * P, kval_gamma_prob(h->D, u32) * P};
    kval s = kval_mul(dot, h->k->exp2 ? c2 : kval_exact(h->k->scale), F32);
    return store ? kval_round(s, h->k->storage) : s;
}

/* lse = m + log l, or (m + log2 l) fp32(ln 2) in log2 units. */
static kval log_sum(const head *h, kval m, kval l, kval ln2)
{
    if (h->k->exp2)
        return kval_mul(kval_add(m, kval_monotone(l, log2_d, 0.0, INFINITY, h->k->log_ulps, 0.0, F32), F32), ln2, F32);
    return kval_add(m, kval_monotone(l, log_d, 0.0, INFINITY, h->k->log_ulps, 0.0, F32), F32);
}

/* Row i's probabilities as a P-normalised-first forward forms them, in w[0..i]
 * (stored when store_probs); the row sum in *sum, the row maximum in *m. */
static void softmax_row(const head *h, int64_t i, kval c2, kval *s, kval *w, kval *m, kval *sum)
{
    const kcmp_attention_kernel *k = h->k;
    double (*ex)(double) = k->exp2 ? exp2_d : exp_d;
    double mv = -INFINITY, me = 0, mp = 0;
    for (int64_t j = 0; j <= i; j++) {
        s[j] = score(h, i, j, c2, k->store_scores);
        if (s[j].v > mv) mv = s[j].v;
        me = fmax(me, s[j].e);
        mp = fmax(mp, s[j].p);
    }
    kval mx = {mv, me, mp};
    kval_sum S;
    kval_sum_init(&S);
    for (int64_t j = 0; j <= i; j++) {
        w[j] = kval_monotone(kval_sub(s[j], mx, F32), ex, -INFINITY, INFINITY, k->exp_ulps, 0.0, F32);
        kval_sum_add(&S, w[j]);
    }
    *sum = kval_sum_finish(&S, reduce_depth(k->sum_reduce, i + 1), F32);
    for (int64_t j = 0; j <= i; j++) {
        w[j] = kval_div(w[j], *sum, F32);
        if (k->store_probs) w[j] = kval_round(w[j], k->storage);
    }
    *m = mx;
}

/* Forward of one head: o [T,D] and lse [T] kvals (v: the kernel's exact
 * target, e/p: its bounds). */
static int forward_bounds(const head *h, kval c2, kval ln2, kval *o, kval *lse)
{
    const kcmp_attention_kernel *k = h->k;
    const int64_t T = h->T, D = h->D;
    const double u32 = prec_format_get(F32)->unit_roundoff;
    double (*ex)(double) = k->exp2 ? exp2_d : exp_d;
    kval *s = malloc(T * sizeof(kval)), *w = malloc(T * sizeof(kval));
    if (!s || !w) {
        free(s); free(w);
        return -1;
    }
    for (int64_t i = 0; i < T; i++) {
        if (!k->online_tile) {
            kval m, sum;
            softmax_row(h, i, c2, s, w, &m, &sum);
            lse[i] = log_sum(h, m, sum, ln2);
            for (int64_t d = 0; d < D; d++) {
                kval_sum acc;
                kval_sum_init(&acc);
                for (int64_t j = 0; j <= i; j++) kval_sum_add(&acc, kval_mul(w[j], kval_exact(h->v[j * D + d]), PREC_FP64));
                o[i * D + d] = kval_round(kval_sum_finish(&acc, i + 1, F32), k->storage);
            }
            continue;
        }
        double mv = -INFINITY, me = 0, mp = 0, lo = INFINITY;
        for (int64_t j = 0; j <= i; j++) {
            s[j] = score(h, i, j, c2, k->store_scores);
            if (s[j].v > mv) mv = s[j].v;
            me = fmax(me, s[j].e);
            mp = fmax(mp, s[j].p);
            lo = fmin(lo, s[j].v);
        }
        kval m = {mv, me, mp};
        const int64_t tile = k->online_tile, tiles = i / tile + 1;
        int64_t butterfly = 0;
        while ((1ll << butterfly) < tile) butterfly++;
        kval_sum L;
        kval_sum_init(&L);
        for (int64_t j = 0; j <= i; j++) {
            kval d = kval_sub(s[j], m, F32);
            double extra = 2 * u32 * (mv - lo); /* the rescaling arguments m_old - m_new */
            d.e += extra;
            d.p += extra;
            double rescales = (double)(tiles - 1 - j / tile);
            w[j] = kval_monotone(d, ex, -INFINITY, INFINITY, k->exp_ulps * (rescales + 1), 0.0, F32);
            kval_sum_add(&L, w[j]);
        }
        kval l = kval_sum_finish(&L, butterfly + tiles, F32);
        lse[i] = log_sum(h, m, l, ln2);
        for (int64_t d = 0; d < D; d++) {
            kval_sum acc;
            kval_sum_init(&acc);
            for (int64_t j = 0; j <= i; j++) kval_sum_add(&acc, kval_mul(w[j], kval_exact(h->v[j * D + d]), PREC_FP64));
            o[i * D + d] = kval_round(kval_div(kval_sum_finish(&acc, tile + tiles, F32), l, F32), k->storage);
        }
    }
    free(s);
    free(w);
    return 0;
}

/* dP_ij = dout_i . v_j as a sequential fma chain. */
static kval dprob(const head *h, int64_t i, int64_t j)
{
    const double u32 = prec_format_get(F32)->unit_roundoff;
    double v = 0, P = 0;
    for (int64_t d = 0; d < h->D; d++) {
        double t = h->g[i * h->D + d] * h->v[j * h->D + d];
        v += t;
        P += fabs(t);
    }
    kval r = {v, kval_gamma(h->D, u32) * P, kval_gamma_prob(h->D, u32) * P};
    return r;
}

/* Backward of one head: ds [T*T] (row-major, j <= i) and p [T*T] kvals as
 * the kernel forms them, from o and lse (their .v exact, .e and .p the
 * errors the backward reads). */
static int backward_terms(const head *h, kval c2, kval log2e, const kval *o, const kval *lse, kval *p, kval *ds)
{
    const kcmp_attention_kernel *k = h->k;
    const int64_t T = h->T, D = h->D;
    double (*ex)(double) = k->exp2 ? exp2_d : exp_d;
    kval *s = malloc(T * sizeof(kval));
    if (!s) return -1;
    for (int64_t i = 0; i < T; i++) {
        kval *pi = p + i * T, *di = ds + i * T;
        if (k->bwd_probs == KCMP_ATT_P_SOFTMAX) {
            kval m, sum;
            softmax_row(h, i, c2, s, pi, &m, &sum);
        } else {
            const kval L = k->exp2 ? kval_mul(lse[i], log2e, F32) : lse[i];
            for (int64_t j = 0; j <= i; j++) {
                pi[j] = kval_monotone(kval_sub(score(h, i, j, c2, k->store_scores), L, F32), ex, -INFINITY, INFINITY,
                                      k->exp_ulps, 0.0, F32);
                if (k->store_probs) pi[j] = kval_round(pi[j], k->storage);
            }
        }
        for (int64_t j = 0; j <= i; j++) {
            di[j] = dprob(h, i, j);
            if (k->store_dprobs) di[j] = kval_round(di[j], k->storage); /* dP stored */
        }
        kval_sum dl;
        kval_sum_init(&dl);
        kval delta;
        if (k->delta == KCMP_ATT_DELTA_PDP) {
            for (int64_t j = 0; j <= i; j++) kval_sum_add(&dl, kval_mul(pi[j], di[j], PREC_FP64));
            delta = kval_sum_finish(&dl, reduce_depth(k->delta_reduce, i + 1), F32);
        } else {
            for (int64_t d = 0; d < D; d++) kval_sum_add(&dl, kval_mul(kval_exact(h->g[i * D + d]), o[i * D + d], PREC_FP64));
            delta = kval_sum_finish(&dl, reduce_depth(k->delta_reduce, D), F32);
        }
        for (int64_t j = 0; j <= i; j++) {
            di[j] = kval_mul(pi[j], kval_sub(di[j], delta, F32), F32);
            if (k->store_dprobs) di[j] = kval_round(di[j], k->storage);
        }
    }
    free(s);
    return 0;
}

/* An output the backward read, as the kval of its actual error. */
static kval read_back(double stored, double exact)
{
    double e = fabs(stored - exact) * (1.0 + 0x1p-40);
    kval r = {exact, e, e};
    return r;
}

typedef struct {
    kcheck_acc *o, *lse, *dq, *dk, *dv;
} att_rows;

/* The backward rows of one head of a tensor-core variant. */
static int mma_rows(const katt_mma_head *mh, kval sck, kval log2e, const kval *o, const kval *lse,
                    const kcmp_attention_data *dd, const double *dq_r, const double *dk_r, const double *dv_r,
                    int64_t off, int64_t hb, const att_rows *R)
{
    const int64_t n = mh->T * mh->D;
    const double u32 = prec_format_get(F32)->unit_roundoff;
    kval *rq = malloc(3 * n * sizeof(kval));
    double *sq = malloc(3 * n * sizeof(double));
    if (!rq || !sq) {
        free(rq); free(sq);
        return -1;
    }
    kval *rk = rq + n, *rv = rk + n;
    double *sk = sq + n, *sv = sk + n;
    katt_mma_backward_bounds(mh, sck, log2e, o, lse, rq, sq, rk, sk, rv, sv);
    for (int64_t e = 0; e < n; e++) {
        const int64_t x = off + e, row = e / mh->D, d = e % mh->D;
        if (R->dq && kcheck_acc_add(R->dq, x, dd->dq[x], dq_r[x], rq[e].e, rq[e].p, sq[e] + u32))
            kcheck_acc_detail(R->dq, "head %lld row %lld d %lld: got %.9g ref %.17g", (long long)hb, (long long)row,
                              (long long)d, dd->dq[x], dq_r[x]);
        if (R->dk && kcheck_acc_add(R->dk, x, dd->dk[x], dk_r[x], rk[e].e, rk[e].p, sk[e] + u32))
            kcheck_acc_detail(R->dk, "head %lld key %lld d %lld: got %.9g ref %.17g", (long long)hb, (long long)row,
                              (long long)d, dd->dk[x], dk_r[x]);
        if (R->dv && kcheck_acc_add(R->dv, x, dd->dv[x], dv_r[x], rv[e].e, rv[e].p, sv[e] + u32))
            kcheck_acc_detail(R->dv, "head %lld key %lld d %lld: got %.9g ref %.17g", (long long)hb, (long long)row,
                              (long long)d, dd->dv[x], dv_r[x]);
    }
    free(rq);
    free(sq);
    return 0;
}

int kcmp_attention(const kcmp_attention_kernel *k, const kcmp_attention_data *dd, const char *shape,
                   kcheck_acc rows[KCMP_ATTENTION_MAX_ROWS])
{
    const prec_format f = k->storage;
    const double u = prec_format_get(f)->unit_roundoff, u32 = prec_format_get(F32)->unit_roundoff;
    const int64_t BH = dd->BH, T = dd->T, D = dd->D, n = BH * T * D;
    const int fwd = dd->forward_rows && dd->o;
    const int bwd = dd->dout && (dd->dq || dd->dk || dd->dv);
    if (!fwd && !bwd) return -1;
    double *o_r = malloc(n * sizeof(double)), *lse_r = malloc(BH * T * sizeof(double));
    double *dq_r = bwd ? malloc(3 * n * sizeof(double)) : NULL;
    kval *o = malloc(T * D * sizeof(kval)), *lse = malloc(T * sizeof(kval));
    kval *p = bwd ? malloc(T * T * sizeof(kval)) : NULL, *ds = bwd ? malloc(T * T * sizeof(kval)) : NULL;
    int rc = -1;
    if (!o_r || !lse_r || (bwd && (!dq_r || !p || !ds)) || !o || !lse) goto done;
    double *dk_r = bwd ? dq_r + n : NULL, *dv_r = bwd ? dq_r + 2 * n : NULL;
    ref_ctx rctx = REF_CTX_DEFAULT;
    ref_attention_forward(&rctx, BH, T, D, k->scale, dd->q, dd->k, dd->v, o_r, lse_r);
    if (bwd) ref_attention_backward(&rctx, BH, T, D, k->scale, dd->q, dd->k, dd->v, dd->dout, dq_r, dk_r, dv_r);

    /* fp32 constants of the exp2 forms, exactly as the kernels form them */
    const float scale = (float)k->scale;
    const float c2f = scale * 1.4426950408889634f;
    const kval c2 = {scale * 1.4426950408889634074, fabs((double)c2f - scale * 1.4426950408889634074), 0.0};
    const kval ln2 = {0.69314718055994530942, fabs((double)0.6931471805599453f - 0.69314718055994530942), 0.0};
    const kval log2e = {1.4426950408889634074, fabs((double)1.4426950408889634f - 1.4426950408889634074), 0.0};
    kval c2p = c2, ln2p = ln2, log2ep = log2e;
    c2p.p = c2.e; ln2p.p = ln2.e; log2ep.p = log2e.e;

    int n_rows = 0;
    att_rows R = {0};
    if (fwd) {
        kcheck_acc_init(R.o = &rows[n_rows++], "o", shape, u);
        if (dd->lse) kcheck_acc_init(R.lse = &rows[n_rows++], "lse", shape, u32);
    }
    if (bwd && dd->dq) kcheck_acc_init(R.dq = &rows[n_rows++], "dq", shape, u);
    if (bwd && dd->dk) kcheck_acc_init(R.dk = &rows[n_rows++], "dk", shape, u);
    if (bwd && dd->dv) kcheck_acc_init(R.dv = &rows[n_rows++], "dv", shape, u);
    /* the backward reads the given o and lse with their actual errors, unless the forward is compared too */
    const int actual = !fwd && dd->o && dd->lse;
    for (int64_t hb = 0; hb < BH; hb++) {
        const int64_t off = hb * T * D;
        const double *g = dd->dout ? dd->dout + off : NULL;
        head h = {k, dd->q + off, dd->k + off, dd->v + off, g, T, D};
        katt_mma_head mh = {dd->q + off, dd->k + off, dd->v + off, g, T, D, k->scale, k->exp2, f, k->mma};
        if (k->mma) katt_mma_forward_bounds(&mh, k->exp2 ? c2p : kval_exact(k->scale), ln2p, o, lse);
        else if (forward_bounds(&h, c2p, ln2p, o, lse)) goto done;
        for (int64_t i = 0; i < T; i++) {
            const int64_t li = hb * T + i;
            if (R.lse && kcheck_acc_add(R.lse, li, dd->lse[li], lse_r[li], lse[i].e, lse[i].p, fabs(lse_r[li]) + 1.0))
                kcheck_acc_detail(R.lse, "head %lld row %lld: got %.9g ref %.17g", (long long)hb, (long long)i,
                                  dd->lse[li], lse_r[li]);
            for (int64_t d = 0; d < D; d++) {
                int64_t x = off + i * D + d;
                o[i * D + d].v = o_r[x];
                if (actual) o[i * D + d] = read_back(dd->o[x], o_r[x]);
                if (!R.o) continue;
                double sc = 0; /* sum_j P_ij |v_jd| ~ what o's error is proportional to */
                for (int64_t j = 0; j <= i; j++) sc = fmax(sc, fabs(dd->v[off + j * D + d]));
                if (kcheck_acc_add(R.o, x, dd->o[x], o_r[x], o[i * D + d].e, o[i * D + d].p, sc))
                    kcheck_acc_detail(R.o, "head %lld row %lld d %lld: got %.9g ref %.17g", (long long)hb,
                                      (long long)i, (long long)d, dd->o[x], o_r[x]);
            }
            lse[i].v = lse_r[li];
            if (actual) lse[i] = read_back(dd->lse[li], lse_r[li]);
        }
        if (!bwd) continue;
        if (k->mma) {
            if (mma_rows(&mh, k->exp2 ? c2p : kval_exact(k->scale), log2ep, o, lse, dd, dq_r, dk_r, dv_r, off, hb, &R))
                goto done;
            continue;
        }
        if (backward_terms(&h, c2p, log2ep, o, lse, p, ds)) goto done;
        for (int64_t i = 0; R.dq && i < T; i++)
            for (int64_t d = 0; d < D; d++) {
                kval_sum acc;
                kval_sum_init(&acc);
                for (int64_t j = 0; j <= i; j++) kval_sum_add(&acc, kval_mul(ds[i * T + j], kval_exact(h.k_[j * D + d]), PREC_FP64));
                kval r = kval_round(kval_mul(kval_sum_finish(&acc, i + 1, F32), kval_exact(k->scale), F32), f);
                int64_t x = off + i * D + d;
                if (kcheck_acc_add(R.dq, x, dd->dq[x], dq_r[x], r.e, r.p, k->scale * acc.abs + u32))
                    kcheck_acc_detail(R.dq, "head %lld row %lld d %lld: got %.9g ref %.17g", (long long)hb,
                                      (long long)i, (long long)d, dd->dq[x], dq_r[x]);
            }
        for (int64_t j = 0; (R.dk || R.dv) && j < T; j++)
            for (int64_t d = 0; d < D; d++) {
                kval_sum sk, sv;
                kval_sum_init(&sk);
                kval_sum_init(&sv);
                for (int64_t i = j; i < T; i++) {
                    kval_sum_add(&sk, kval_mul(ds[i * T + j], kval_exact(h.q[i * D + d]), PREC_FP64));
                    kval_sum_add(&sv, kval_mul(p[i * T + j], kval_exact(h.g[i * D + d]), PREC_FP64));
                }
                kval rk = kval_round(kval_mul(kval_sum_finish(&sk, T - j, F32), kval_exact(k->scale), F32), f);
                kval rv = kval_round(kval_sum_finish(&sv, T - j, F32), f);
                int64_t x = off + j * D + d;
                if (R.dk && kcheck_acc_add(R.dk, x, dd->dk[x], dk_r[x], rk.e, rk.p, k->scale * sk.abs + u32))
                    kcheck_acc_detail(R.dk, "head %lld key %lld d %lld: got %.9g ref %.17g", (long long)hb,
                                      (long long)j, (long long)d, dd->dk[x], dk_r[x]);
                if (R.dv && kcheck_acc_add(R.dv, x, dd->dv[x], dv_r[x], rv.e, rv.p, sv.abs + u32))
                    kcheck_acc_detail(R.dv, "head %lld key %lld d %lld: got %.9g ref %.17g", (long long)hb,
                                      (long long)j, (long long)d, dd->dv[x], dv_r[x]);
            }
    }
    for (int i = 0; i < n_rows; i++) kcheck_acc_finish(&rows[i]);
    rc = n_rows;
done:
    free(o_r); free(lse_r); free(dq_r); free(o); free(lse); free(p); free(ds);
    return rc;
}
