/* tests/test_compare_attention.c — kernels/check/compare_attention.c gives
 * `ulpscope check attention` the rows it gave before the comparison moved
 * out of check_attention.c, bit for bit, without a GPU.
 *
 * The old comparison is kept here frozen (check_attention.c and the bound
 * calls of check_attention_mma.c as of commit e8273ab, the GPU launch and
 * the report cut off): both run on the same data, q, k, v, dout ~ N(0,1)
 * in the path's format at check's five shapes (the longest, T = 150, for
 * fp32 flash and the mma variants only: it keeps the test short), and the
 * same outputs, the
 * MPFR reference rounded into the path's format (lse: fp32) and perturbed
 * by 2 and 60 units of u times a normal draw (the second level fails most
 * rows; one o and one dq element are NaN there), for every (path, variant)
 * check runs: naive, flash, flash_exp2 on fp32, bf16, fp16; flash_mma and
 * flash_mma_exp2 on bf16 and fp16 with the A100 and H100 models.  Every
 * field of every row must be equal (doubles compared by their bits), and
 * the rows must not all pass nor all fail (the data exercise both).
 *
 * Also: a backward compared alone reads the o and lse it is given with
 * their actual errors: given the exact (reference) o and lse it bounds no
 * wider than with the forward's replayed bounds, and its rows are those
 * outputs only. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/check/check.h"
#include "kernels/check/check_attention_mma.h"
#include "kernels/check/compare_attention.h"
#include "precision/format.h"
#include "precision/mma.h"
#include "precision/rng.h"
#include "reference/attention.h"
#include "tests/test_util.h"

static const prec_format F32 = PREC_FP32;

/* ---- the comparison as check_attention.c had it (frozen) ------------------------------------ */

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

static void old_rows(int variant, prec_format f, int64_t BH, int64_t T, int64_t D, const mma_arith *mma,
                     att_buffers *bb, kcheck_acc out[5])
{
    const double u = prec_format_get(f)->unit_roundoff, u32 = prec_format_get(F32)->unit_roundoff;
    const float scale = (float)(1.0 / sqrt((double)D));
    att_buffers b = *bb;
    kval *o = malloc(T * D * sizeof(kval)), *lse = malloc(T * sizeof(kval));
    kval *p = malloc(T * T * sizeof(kval)), *ds = malloc(T * T * sizeof(kval));
    assert_true(o && lse && p && ds);
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
    kcheck_acc *all[5] = {&ao, &al, &aq, &ak, &av};
    for (int r = 0; r < 5; r++) {
        kcheck_acc_finish(all[r]);
        out[r] = *all[r];
    }
    free(o); free(lse); free(p); free(ds);
}

/* ---- the equivalence ------------------------------------------------------------------------ */

typedef struct {
    int64_t BH, T, D;
} att_shape;

static const att_shape shapes[] = {{2, 17, 32}, {1, 70, 16}, {3, 33, 64}, {2, 5, 128}, {1, 150, 64}};

static int same_double(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

static void assert_same_row(const kcheck_row *a, const kcheck_row *b, const char *what)
{
    if (strcmp(a->output, b->output) || strcmp(a->shape, b->shape) || a->n != b->n ||
        !same_double(a->max_err_u, b->max_err_u) || !same_double(a->rms_err_u, b->rms_err_u) ||
        !same_double(a->max_bound_u, b->max_bound_u) || !same_double(a->rms_bound_u, b->rms_bound_u) ||
        !same_double(a->worst_ratio, b->worst_ratio) || a->worst_index != b->worst_index ||
        strcmp(a->worst_detail, b->worst_detail) || a->nonfinite != b->nonfinite || a->pass != b->pass)
        fail_msg("%s %s %s: old err %.17g bound %.17g ratio %.17g worst %lld pass %d | new err %.17g bound %.17g "
                 "ratio %.17g worst %lld pass %d",
                 what, a->output, a->shape, a->max_err_u, a->max_bound_u, a->worst_ratio, (long long)a->worst_index,
                 a->pass, b->max_err_u, b->max_bound_u, b->worst_ratio, (long long)b->worst_index, b->pass);
}

/* y = rne(ref (1 + level u r), f), r ~ N(0,1) */
static void perturb(prec_rng *rng, const double *ref, double *y, int64_t n, double level, prec_format f)
{
    const double u = prec_format_get(f)->unit_roundoff;
    for (int64_t i = 0; i < n; i++) y[i] = prec_rne(ref[i] * (1 + level * u * prec_rng_normal(rng)), f);
}

static void rows_unchanged_by_the_refactor(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("rows_unchanged_by_the_refactor"));
    struct {
        prec_format f;
        int variant;
        const char *gen; /* mma variants: the model */
    } cases[] = {{PREC_FP32, KATT_NAIVE, NULL},           {PREC_FP32, KATT_FLASH, NULL},
                 {PREC_FP32, KATT_FLASH_EXP2, NULL},      {PREC_BF16, KATT_NAIVE, NULL},
                 {PREC_BF16, KATT_FLASH, NULL},           {PREC_BF16, KATT_FLASH_EXP2, NULL},
                 {PREC_FP16, KATT_NAIVE, NULL},           {PREC_FP16, KATT_FLASH, NULL},
                 {PREC_FP16, KATT_FLASH_EXP2, NULL},      {PREC_BF16, KATT_FLASH_MMA, "h100"},
                 {PREC_BF16, KATT_FLASH_MMA_EXP2, "a100"}, {PREC_FP16, KATT_FLASH_MMA, "a100"},
                 {PREC_FP16, KATT_FLASH_MMA_EXP2, "h100"}};
    const double levels[] = {2, 60};
    long rows = 0, passing = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            /* T = 150 (five flash tiles, three flash_mma blocks) costs most: flash and the mma variants */
            if (s == 4 && !cases[c].gen && !(cases[c].f == PREC_FP32 && cases[c].variant == KATT_FLASH)) continue;
            const prec_format f = cases[c].f;
            const int64_t BH = shapes[s].BH, T = shapes[s].T, D = shapes[s].D, n = BH * T * D;
            const mma_arith *mma = NULL;
            if (cases[c].gen) {
                const mma_model *m = mma_model_find(cases[c].gen, "mma.sync", f, PREC_FP32);
                assert_non_null(m);
                mma = &m->arith;
            }
            att_buffers b;
            double **bp = (double **)&b;
            for (size_t i = 0; i < sizeof b / sizeof(double *); i++) assert_non_null(bp[i] = malloc(n * sizeof(double)));
            double *ref[5];
            for (int i = 0; i < 5; i++) assert_non_null(ref[i] = malloc(n * sizeof(double)));
            kcheck_fill_normal(&rng, b.q, n, 0.0, 1.0, f);
            kcheck_fill_normal(&rng, b.k, n, 0.0, 1.0, f);
            kcheck_fill_normal(&rng, b.v, n, 0.0, 1.0, f);
            kcheck_fill_normal(&rng, b.g, n, 0.0, 1.0, f);
            const float scale = (float)(1.0 / sqrt((double)D));
            ref_ctx rctx = REF_CTX_DEFAULT;
            ref_attention_forward(&rctx, BH, T, D, scale, b.q, b.k, b.v, ref[0], ref[1]);
            ref_attention_backward(&rctx, BH, T, D, scale, b.q, b.k, b.v, b.g, ref[2], ref[3], ref[4]);
            for (size_t l = 0; l < sizeof levels / sizeof levels[0]; l++) {
                perturb(&rng, ref[0], b.o, n, levels[l], f);
                perturb(&rng, ref[1], b.lse, BH * T, levels[l], F32);
                perturb(&rng, ref[2], b.dq, n, levels[l], f);
                perturb(&rng, ref[3], b.dk, n, levels[l], f);
                perturb(&rng, ref[4], b.dv, n, levels[l], f);
                if (levels[l] > 10) {
                    b.o[n / 2] = NAN;
                    b.dq[n / 3] = NAN;
                }
                kcheck_acc old[5], now[KCMP_ATTENTION_MAX_ROWS];
                old_rows(cases[c].variant, f, BH, T, D, mma, &b, old);
                const kcmp_attention_kernel k = kcheck_attention_kernel(f, cases[c].variant, scale, mma);
                const kcmp_attention_data d = {BH, T, D, b.q, b.k, b.v, b.o, b.lse, 1, b.g, b.dq, b.dk, b.dv};
                char shape[96], what[96];
                snprintf(shape, sizeof shape, "BH=%lld T=%lld D=%lld", (long long)BH, (long long)T, (long long)D);
                assert_int_equal(kcmp_attention(&k, &d, shape, now), 5);
                snprintf(what, sizeof what, "%s/%s level %g", prec_format_get(f)->name,
                         katt_variants[cases[c].variant].name, levels[l]);
                for (int r = 0; r < 5; r++) {
                    assert_same_row(&old[r].row, &now[r].row, what);
                    rows++;
                    passing += now[r].row.pass;
                }
            }
            free_att(&b);
            for (int i = 0; i < 5; i++) free(ref[i]);
        }
    printf("attention rows compared: %ld (%ld pass, %ld fail), every field bit for bit equal\n", rows, passing,
           rows - passing);
    assert_true(passing > 0 && passing < rows);
}

/* A backward alone reads the given o and lse with their actual errors:
 * given the exact ones, its bound is at most the one the forward's
 * replayed bounds give, and its rows are dq, dk, dv only. */
static void backward_alone_reads_actual_errors(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("backward_alone_reads_actual_errors"));
    const int64_t BH = 2, T = 19, D = 16, n = BH * T * D;
    const prec_format f = PREC_BF16;
    double *x = malloc(10 * n * sizeof(double));
    assert_non_null(x);
    double *q = x, *k = q + n, *v = k + n, *g = v + n, *o = g + n, *lse = o + n, *dq = lse + n, *dk = dq + n, *dv = dk + n;
    kcheck_fill_normal(&rng, q, 4 * n, 0.0, 1.0, f);
    const double scale = 0.25;
    ref_ctx rctx = REF_CTX_DEFAULT;
    ref_attention_forward(&rctx, BH, T, D, scale, q, k, v, o, lse);
    ref_attention_backward(&rctx, BH, T, D, scale, q, k, v, g, dq, dk, dv);
    for (int variant = KATT_NAIVE; variant <= KATT_FLASH_EXP2; variant++) {
        const kcmp_attention_kernel kd = kcheck_attention_kernel(f, variant, scale, NULL);
        kcheck_acc with_fwd[KCMP_ATTENTION_MAX_ROWS], alone[KCMP_ATTENTION_MAX_ROWS];
        kcmp_attention_data d = {BH, T, D, q, k, v, o, lse, 1, g, dq, dk, dv};
        assert_int_equal(kcmp_attention(&kd, &d, "s", with_fwd), 5);
        d.forward_rows = 0;
        assert_int_equal(kcmp_attention(&kd, &d, "s", alone), 3);
        for (int r = 0; r < 3; r++) {
            assert_string_equal(alone[r].row.output, with_fwd[r + 2].row.output);
            assert_true(alone[r].row.max_bound_u <= with_fwd[r + 2].row.max_bound_u);
            assert_true(alone[r].row.pass);
        }
    }
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rows_unchanged_by_the_refactor),
        cmocka_unit_test(backward_alone_reads_actual_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
