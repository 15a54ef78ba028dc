/* kernels/check/check_attention.c — attention's check (registry entry in kernels/attention.cu).
 *
 * Inputs per shape: q, k, v, dout ~ N(0,1) in the path's format, scale =
 * fp32(1/sqrt(D)).  The forward runs first (rows o, lse); the backward then
 * runs on the kernel's own o and lse (rows dq, dk, dv), and its references
 * are the exact gradients (reference/attention.h), so the forward's errors
 * enter the backward's bound through o and lse.
 *
 * Bounds replay each variant's operations on kval numbers (check.h):
 *  - scores: a sequential fma chain over D (gamma_D(2^-24) sum |q k|), times
 *    the scale in fp32; naive stores them in the path's format; flash_exp2
 *    multiplies by fp32(scale log2 e), whose rounding is part of the error.
 *  - naive softmax: max (exact), z - max (fp32), expf (2 ulps), a warp sum
 *    (strided partials + butterfly: kcheck_tree_depth(n, 32)), division, the
 *    P store; o = a sequential fma chain over P v and its store.
 *  - flash: a term of tile t is rescaled once per later tile by exp(m_old -
 *    m_new) (2 ulps each, inside the fma that scales the accumulator), the
 *    rescaling arguments add up to at most the row's score range; the sum l
 *    has depth 5 (tile butterfly) + tiles, the accumulator 32 + tiles; then
 *    o = acc / l and lse = m + log l (exp2: (m + log2 l) fp32(ln 2)).
 *  - backward: naive recomputes P as the forward, stores dP, forms the row's
 *    sum P dP by a warp sum and dS = P (dP - sum) in the path's format;
 *    flash forms delta = dout . o (warp sum, with o's forward error),
 *    p = exp(s - lse) from the stored lse (its forward error), ds in fp32.
 *    dq, dk, dv are sequential fma chains over the keys (queries), times the
 *    scale, stored.
 *  - flash_mma, flash_mma_exp2: every product inside the tensor cores,
 *    bounded through the GPU's matrix-unit model (check_attention_mma.c);
 *    they exist on the bf16 and fp16 paths only (fp32: not offered).
 * expf/exp2f 2 ulps, logf/log2f 1 ulp: CUDA C++ Programming Guide,
 * "Mathematical Functions".  All fp32 roundings are to nearest; the RMS
 * verdict uses the probabilistic counterparts (kval.p). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/check/check_attention_mma.h"
#include "kernels/check/checks.h"
#include "kernels/common/ktensor_io.h"
#include "reference/attention.h"

static const prec_format F32 = PREC_FP32;

typedef struct {
    int64_t BH, T, D;
} att_shape;

/* {1, 150, 64}: three 64-row blocks and 64-key tiles (flash_mma rescales
 * twice, a ragged last block), five 32-key tiles for flash */
static const att_shape shapes[] = {{2, 17, 32}, {1, 70, 16}, {3, 33, 64}, {2, 5, 128}, {1, 150, 64}};

static double exp_d(double x) { return exp(x); }
static double exp2_d(double x) { return exp2(x); }
static double log_d(double x) { return log(x); }
static double log2_d(double x) { return log2(x); }

typedef struct {
    const double *q, *k, *v, *g; /* one head [T,D] */
    int64_t T, D;
    double scale;
    int variant;
    prec_format f;
} head;

/* Score (i, j) as the kernel holds it: natural units, or log2 units for exp2. */
static kval score(const head *h, int64_t i, int64_t j, kval c2, int store)
{
    const double u32 = prec_format_get(F32)->unit_roundoff;
    double v = 0, P = 0;
    for (int64_t d = 0; d < h->D; d++) {
        double t = h->q[i * h->D + d] * h->k[j * h->D + d];
        v += t;
        P += fabs(t);
    }
    kval dot = {v, kval_gamma(h->D, u32) * P, kval_gamma_prob(h->D, u32) * P};
    kval s = kval_mul(dot, h->variant == KATT_FLASH_EXP2 ? c2 : kval_exact(h->scale), F32);
    return store ? kval_round(s, h->f) : s;
}

/* Forward of one head: o [T,D] and lse [T] kvals (v: the kernel's exact
 * target, e/p: its bounds).  P (naive: the stored probabilities; flash: the
 * unnormalised terms) is not needed outside. */
static void forward_bounds(const head *h, kval c2, kval ln2, kval *o, kval *lse)
{
    const int64_t T = h->T, D = h->D;
    const int exp2v = h->variant == KATT_FLASH_EXP2, naive = h->variant == KATT_NAIVE;
    const double u32 = prec_format_get(F32)->unit_roundoff;
    double (*ex)(double) = exp2v ? exp2_d : exp_d;
    kval *s = malloc(T * sizeof(kval)), *w = malloc(T * sizeof(kval));
    if (!s || !w) abort();
    for (int64_t i = 0; i < T; i++) {
        double mv = -INFINITY, me = 0, mp = 0, lo = INFINITY;
        for (int64_t j = 0; j <= i; j++) {
            s[j] = score(h, i, j, c2, naive);
            if (s[j].v > mv) mv = s[j].v;
            me = fmax(me, s[j].e);
            mp = fmax(mp, s[j].p);
            lo = fmin(lo, s[j].v);
        }
        kval m = {mv, me, mp};
        if (naive) {
            kval_sum S;
            kval_sum_init(&S);
            for (int64_t j = 0; j <= i; j++) {
                w[j] = kval_monotone(kval_sub(s[j], m, F32), exp_d, -INFINITY, INFINITY, 2.0, 0.0, F32);
                kval_sum_add(&S, w[j]);
            }
            kval sum = kval_sum_finish(&S, kcheck_tree_depth(i + 1, 32), F32);
            for (int64_t j = 0; j <= i; j++) w[j] = kval_round(kval_div(w[j], sum, F32), h->f);
            lse[i] = kval_add(m, kval_monotone(sum, log_d, 0.0, INFINITY, 1.0, 0.0, F32), F32);
            for (int64_t d = 0; d < D; d++) {
                kval_sum acc;
                kval_sum_init(&acc);
                for (int64_t j = 0; j <= i; j++) kval_sum_add(&acc, kval_mul(w[j], kval_exact(h->v[j * D + d]), PREC_FP64));
                o[i * D + d] = kval_round(kval_sum_finish(&acc, i + 1, F32), h->f);
            }
            continue;
        }
        const int64_t tiles = i / KATT_TILE + 1;
        kval_sum L;
        kval_sum_init(&L);
        for (int64_t j = 0; j <= i; j++) {
            kval d = kval_sub(s[j], m, F32);
            double extra = 2 * u32 * (mv - lo); /* the rescaling arguments m_old - m_new */
            d.e += extra;
            d.p += extra;
            double rescales = (double)(tiles - 1 - j / KATT_TILE);
            w[j] = kval_monotone(d, ex, -INFINITY, INFINITY, 2.0 * (rescales + 1), 0.0, F32);
            kval_sum_add(&L, w[j]);
        }
        kval l = kval_sum_finish(&L, 5 + tiles, F32);
        if (exp2v)
            lse[i] = kval_mul(kval_add(m, kval_monotone(l, log2_d, 0.0, INFINITY, 1.0, 0.0, F32), F32), ln2, F32);
        else
            lse[i] = kval_add(m, kval_monotone(l, log_d, 0.0, INFINITY, 1.0, 0.0, F32), F32);
        for (int64_t d = 0; d < D; d++) {
            kval_sum acc;
            kval_sum_init(&acc);
            for (int64_t j = 0; j <= i; j++) kval_sum_add(&acc, kval_mul(w[j], kval_exact(h->v[j * D + d]), PREC_FP64));
            o[i * D + d] = kval_round(kval_div(kval_sum_finish(&acc, KATT_TILE + tiles, F32), l, F32), h->f);
        }
    }
    free(s);
    free(w);
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
 * the kernel forms them, from the forward's o and lse kvals. */
static void backward_terms(const head *h, kval c2, kval log2e, const kval *o, const kval *lse, kval *p, kval *ds)
{
    const int64_t T = h->T, D = h->D;
    const int naive = h->variant == KATT_NAIVE, exp2v = h->variant == KATT_FLASH_EXP2;
    if (naive) {
        /* P as the forward stores it: recompute the row's softmax bound */
        kval *s = malloc(T * sizeof(kval));
        if (!s) abort();
        for (int64_t i = 0; i < T; i++) {
            double mv = -INFINITY, me = 0, mp = 0;
            for (int64_t j = 0; j <= i; j++) {
                s[j] = score(h, i, j, c2, 1);
                if (s[j].v > mv) mv = s[j].v;
                me = fmax(me, s[j].e);
                mp = fmax(mp, s[j].p);
            }
            kval m = {mv, me, mp};
            kval_sum S;
            kval_sum_init(&S);
            for (int64_t j = 0; j <= i; j++) {
                p[i * T + j] = kval_monotone(kval_sub(s[j], m, F32), exp_d, -INFINITY, INFINITY, 2.0, 0.0, F32);
                kval_sum_add(&S, p[i * T + j]);
            }
            kval sum = kval_sum_finish(&S, kcheck_tree_depth(i + 1, 32), F32);
            kval_sum rd;
            kval_sum_init(&rd);
            for (int64_t j = 0; j <= i; j++) {
                p[i * T + j] = kval_round(kval_div(p[i * T + j], sum, F32), h->f);
                ds[i * T + j] = kval_round(dprob(h, i, j), h->f); /* dP stored */
                kval_sum_add(&rd, kval_mul(p[i * T + j], ds[i * T + j], PREC_FP64));
            }
            kval rowdot = kval_sum_finish(&rd, kcheck_tree_depth(i + 1, 32), F32);
            for (int64_t j = 0; j <= i; j++)
                ds[i * T + j] = kval_round(kval_mul(p[i * T + j], kval_sub(ds[i * T + j], rowdot, F32), F32), h->f);
        }
        free(s);
        return;
    }
    for (int64_t i = 0; i < T; i++) {
        kval_sum dl;
        kval_sum_init(&dl);
        for (int64_t d = 0; d < D; d++) kval_sum_add(&dl, kval_mul(kval_exact(h->g[i * D + d]), o[i * D + d], PREC_FP64));
        kval delta = kval_sum_finish(&dl, kcheck_tree_depth(D, 32), F32);
        kval L = exp2v ? kval_mul(lse[i], log2e, F32) : lse[i];
        for (int64_t j = 0; j <= i; j++) {
            kval s = score(h, i, j, c2, 0);
            p[i * T + j] = kval_monotone(kval_sub(s, L, F32), exp2v ? exp2_d : exp_d, -INFINITY, INFINITY, 2.0, 0.0, F32);
            ds[i * T + j] = kval_mul(p[i * T + j], kval_sub(dprob(h, i, j), delta, F32), F32);
        }
    }
}

typedef struct {
    double *q, *k, *v, *g, *o, *lse, *dq, *dk, *dv; /* inputs and kernel outputs */
    double *o_r, *lse_r, *dq_r, *dk_r, *dv_r;        /* references */
} att_buffers;

static void free_att(att_buffers *b)
{
    double **p = (double **)b;
    for (size_t i = 0; i < sizeof *b / sizeof(double *); i++) free(p[i]);
}

static int run_gpu(kpath path, int variant, const att_shape *s, float scale, att_buffers *b)
{
    const prec_format f = kcheck_path_format(path);
    int64_t shp[3] = {s->BH, s->T, s->D}, sl[2] = {s->BH, s->T};
    ktensor Q = {0}, K = {0}, V = {0}, G = {0}, O = {0}, L = {0}, DQ = {0}, DK = {0}, DV = {0};
    int rc = -1;
    if (ktensor_alloc(&Q, f, 3, shp) || ktensor_alloc(&K, f, 3, shp) || ktensor_alloc(&V, f, 3, shp) ||
        ktensor_alloc(&G, f, 3, shp) || ktensor_alloc(&O, f, 3, shp) || ktensor_alloc(&L, F32, 2, sl) ||
        ktensor_alloc(&DQ, f, 3, shp) || ktensor_alloc(&DK, f, 3, shp) || ktensor_alloc(&DV, f, 3, shp))
        goto done;
    if (ktensor_upload(&Q, b->q) || ktensor_upload(&K, b->k) || ktensor_upload(&V, b->v) || ktensor_upload(&G, b->g))
        goto done;
    if (kattention_forward(path, variant, s->BH, s->T, s->D, scale, Q.data, K.data, V.data, O.data, L.data) ||
        kattention_backward(path, variant, s->BH, s->T, s->D, scale, Q.data, K.data, V.data, O.data, G.data, L.data,
                            DQ.data, DK.data, DV.data) ||
        kernels_sync("attention"))
        goto done;
    if (ktensor_download(&O, b->o) || ktensor_download(&L, b->lse) || ktensor_download(&DQ, b->dq) ||
        ktensor_download(&DK, b->dk) || ktensor_download(&DV, b->dv))
        goto done;
    rc = 0;
done:
    ktensor_free(&Q); ktensor_free(&K); ktensor_free(&V); ktensor_free(&G); ktensor_free(&O);
    ktensor_free(&L); ktensor_free(&DQ); ktensor_free(&DK); ktensor_free(&DV);
    return rc;
}

/* The backward rows of one head of a flash_mma variant. */
static void mma_rows(const katt_mma_head *mh, kval c2, kval log2e, const kval *o, const kval *lse, const att_buffers *b,
                     int64_t off, int64_t hb, kcheck_acc *aq, kcheck_acc *ak, kcheck_acc *av)
{
    const int64_t n = mh->T * mh->D;
    const double u32 = prec_format_get(F32)->unit_roundoff;
    kval *rq = malloc(3 * n * sizeof(kval));
    double *sq = malloc(3 * n * sizeof(double));
    if (!rq || !sq) abort();
    kval *rk = rq + n, *rv = rk + n;
    double *sk = sq + n, *sv = sk + n;
    katt_mma_backward_bounds(mh, mh->exp2 ? c2 : kval_exact(mh->scale), log2e, o, lse, rq, sq, rk, sk, rv, sv);
    for (int64_t e = 0; e < n; e++) {
        const int64_t x = off + e, row = e / mh->D, d = e % mh->D;
        if (kcheck_acc_add(aq, x, b->dq[x], b->dq_r[x], rq[e].e, rq[e].p, sq[e] + u32))
            kcheck_acc_detail(aq, "head %lld row %lld d %lld: got %.9g ref %.17g", (long long)hb, (long long)row,
                              (long long)d, b->dq[x], b->dq_r[x]);
        if (kcheck_acc_add(ak, x, b->dk[x], b->dk_r[x], rk[e].e, rk[e].p, sk[e] + u32))
            kcheck_acc_detail(ak, "head %lld key %lld d %lld: got %.9g ref %.17g", (long long)hb, (long long)row,
                              (long long)d, b->dk[x], b->dk_r[x]);
        if (kcheck_acc_add(av, x, b->dv[x], b->dv_r[x], rv[e].e, rv[e].p, sv[e] + u32))
            kcheck_acc_detail(av, "head %lld key %lld d %lld: got %.9g ref %.17g", (long long)hb, (long long)row,
                              (long long)d, b->dv[x], b->dv_r[x]);
    }
    free(rq);
    free(sq);
}

static int check_shape(kcheck_ctx *ctx, kpath path, int variant, const att_shape *s, const mma_arith *mma)
{
    const prec_format f = kcheck_path_format(path);
    const double u = prec_format_get(f)->unit_roundoff, u32 = prec_format_get(F32)->unit_roundoff;
    const int64_t BH = s->BH, T = s->T, D = s->D, n = BH * T * D;
    const float scale = (float)(1.0 / sqrt((double)D));
    att_buffers b;
    double **bp = (double **)&b;
    for (size_t i = 0; i < sizeof b / sizeof(double *); i++) bp[i] = malloc(n * sizeof(double));
    kval *o = malloc(T * D * sizeof(kval)), *lse = malloc(T * sizeof(kval));
    kval *p = malloc(T * T * sizeof(kval)), *ds = malloc(T * T * sizeof(kval));
    int ok = o && lse && p && ds;
    for (size_t i = 0; i < sizeof b / sizeof(double *); i++) ok = ok && bp[i];
    if (!ok) {
        free_att(&b);
        free(o); free(lse); free(p); free(ds);
        return kernels_fail("attention check: out of host memory");
    }
    prec_rng rng;
    kcheck_rng(ctx, &rng);
    kcheck_fill_normal(&rng, b.q, n, 0.0, 1.0, f);
    kcheck_fill_normal(&rng, b.k, n, 0.0, 1.0, f);
    kcheck_fill_normal(&rng, b.v, n, 0.0, 1.0, f);
    kcheck_fill_normal(&rng, b.g, n, 0.0, 1.0, f);
    if (run_gpu(path, variant, s, scale, &b) != 0) {
        free_att(&b);
        free(o); free(lse); free(p); free(ds);
        return -1;
    }
    ref_ctx rctx = REF_CTX_DEFAULT;
    ref_attention_forward(&rctx, BH, T, D, scale, b.q, b.k, b.v, b.o_r, b.lse_r);
    ref_attention_backward(&rctx, BH, T, D, scale, b.q, b.k, b.v, b.g, b.dq_r, b.dk_r, b.dv_r);

    /* fp32 constants of the exp2 variant, exactly as the kernel forms them */
    const float c2f = scale * 1.4426950408889634f;
    const kval c2 = {scale * 1.4426950408889634074, fabs((double)c2f - scale * 1.4426950408889634074), 0.0};
    const kval ln2 = {0.69314718055994530942, fabs((double)0.6931471805599453f - 0.69314718055994530942), 0.0};
    const kval log2e = {1.4426950408889634074, fabs((double)1.4426950408889634f - 1.4426950408889634074), 0.0};
    kval c2p = c2, ln2p = ln2, log2ep = log2e;
    c2p.p = c2.e; ln2p.p = ln2.e; log2ep.p = log2e.e;

    char shape_name[96];
    snprintf(shape_name, sizeof shape_name, "BH=%lld T=%lld D=%lld", (long long)BH, (long long)T, (long long)D);
    kcheck_acc ao, al, aq, ak, av;
    kcheck_acc_init(&ao, "o", shape_name, u);
    kcheck_acc_init(&al, "lse", shape_name, u32);
    kcheck_acc_init(&aq, "dq", shape_name, u);
    kcheck_acc_init(&ak, "dk", shape_name, u);
    kcheck_acc_init(&av, "dv", shape_name, u);
    for (int64_t hb = 0; hb < BH; hb++) {
        const int64_t off = hb * T * D;
        head h = {b.q + off, b.k + off, b.v + off, b.g + off, T, D, scale, variant, f};
        katt_mma_head mh = {b.q + off, b.k + off, b.v + off, b.g + off, T, D, scale, katt_is_exp2(variant), f, mma};
        if (mma) katt_mma_forward_bounds(&mh, katt_is_exp2(variant) ? c2p : kval_exact(scale), ln2p, o, lse);
        else forward_bounds(&h, c2p, ln2p, o, lse);
        for (int64_t i = 0; i < T; i++) {
            if (kcheck_acc_add(&al, hb * T + i, b.lse[hb * T + i], b.lse_r[hb * T + i], lse[i].e, lse[i].p,
                               fabs(b.lse_r[hb * T + i]) + 1.0))
                kcheck_acc_detail(&al, "head %lld row %lld: got %.9g ref %.17g", (long long)hb, (long long)i,
                                  b.lse[hb * T + i], b.lse_r[hb * T + i]);
            for (int64_t d = 0; d < D; d++) {
                int64_t x = off + i * D + d;
                double sc = 0; /* sum_j P_ij |v_jd| ~ what o's error is proportional to */
                for (int64_t j = 0; j <= i; j++) sc = fmax(sc, fabs(b.v[off + j * D + d]));
                o[i * D + d].v = b.o_r[x];
                if (kcheck_acc_add(&ao, x, b.o[x], b.o_r[x], o[i * D + d].e, o[i * D + d].p, sc))
                    kcheck_acc_detail(&ao, "head %lld row %lld d %lld: got %.9g ref %.17g", (long long)hb,
                                      (long long)i, (long long)d, b.o[x], b.o_r[x]);
            }
            lse[i].v = b.lse_r[hb * T + i];
        }
        if (mma) {
            mma_rows(&mh, c2p, log2ep, o, lse, &b, off, hb, &aq, &ak, &av);
            continue;
        }
        backward_terms(&h, c2p, log2ep, o, lse, p, ds);
        for (int64_t i = 0; i < T; i++)
            for (int64_t d = 0; d < D; d++) {
                kval_sum acc;
                kval_sum_init(&acc);
                for (int64_t j = 0; j <= i; j++) kval_sum_add(&acc, kval_mul(ds[i * T + j], kval_exact(h.k[j * D + d]), PREC_FP64));
                kval r = kval_round(kval_mul(kval_sum_finish(&acc, i + 1, F32), kval_exact(scale), F32), f);
                int64_t x = off + i * D + d;
                if (kcheck_acc_add(&aq, x, b.dq[x], b.dq_r[x], r.e, r.p, scale * acc.abs + u32))
                    kcheck_acc_detail(&aq, "head %lld row %lld d %lld: got %.9g ref %.17g", (long long)hb,
                                      (long long)i, (long long)d, b.dq[x], b.dq_r[x]);
            }
        for (int64_t j = 0; j < T; j++)
            for (int64_t d = 0; d < D; d++) {
                kval_sum sk, sv;
                kval_sum_init(&sk);
                kval_sum_init(&sv);
                for (int64_t i = j; i < T; i++) {
                    kval_sum_add(&sk, kval_mul(ds[i * T + j], kval_exact(h.q[i * D + d]), PREC_FP64));
                    kval_sum_add(&sv, kval_mul(p[i * T + j], kval_exact(h.g[i * D + d]), PREC_FP64));
                }
                kval rk = kval_round(kval_mul(kval_sum_finish(&sk, T - j, F32), kval_exact(scale), F32), f);
                kval rv = kval_round(kval_sum_finish(&sv, T - j, F32), f);
                int64_t x = off + j * D + d;
                if (kcheck_acc_add(&ak, x, b.dk[x], b.dk_r[x], rk.e, rk.p, scale * sk.abs + u32))
                    kcheck_acc_detail(&ak, "head %lld key %lld d %lld: got %.9g ref %.17g", (long long)hb,
                                      (long long)j, (long long)d, b.dk[x], b.dk_r[x]);
                if (kcheck_acc_add(&av, x, b.dv[x], b.dv_r[x], rv.e, rv.p, sv.abs + u32))
                    kcheck_acc_detail(&av, "head %lld key %lld d %lld: got %.9g ref %.17g", (long long)hb,
                                      (long long)j, (long long)d, b.dv[x], b.dv_r[x]);
            }
    }
    kcheck_acc_report(ctx, &ao);
    kcheck_acc_report(ctx, &al);
    kcheck_acc_report(ctx, &aq);
    kcheck_acc_report(ctx, &ak);
    kcheck_acc_report(ctx, &av);
    free_att(&b);
    free(o); free(lse); free(p); free(ds);
    return 0;
}

int kcheck_attention(kcheck_ctx *ctx, kpath path, int variant)
{
    char why[256];
    if (!kattention_supports(path, variant, 0, why, sizeof why)) return kcheck_not_offered(ctx, why);
    const mma_arith *mma = NULL;
    if (katt_is_mma(variant) && !(mma = katt_mma_model(kcheck_path_format(path), why, sizeof why)))
        return kernels_fail("attention check %s/%s: %s", kpath_name(path), katt_variants[variant].name, why);
    int n = (int)(sizeof shapes / sizeof shapes[0]);
    if (kcheck_quick(ctx)) n = 2;
    for (int i = 0; i < n; i++) {
        if (!kattention_supports(path, variant, shapes[i].D, why, sizeof why))
            return kernels_fail("attention check: shape D=%lld: %s", (long long)shapes[i].D, why);
        if (check_shape(ctx, path, variant, &shapes[i], mma) != 0) return -1;
    }
    return 0;
}
