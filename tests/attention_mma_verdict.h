/* tests/attention_mma_verdict.h — kcheck's verdict on one head of flash_mma
 * outputs (o, lse, dq, dk, dv, whoever computed them) against the MPFR
 * reference, with the bound the check itself uses
 * (kernels/check/check_attention_mma.h): every element within its bound,
 * the RMS within the probabilistic one.  Shared by
 * tests/test_attention_mma_bound.c (the host emulation) and
 * tests/test_train_attention_mma.c (the trainer's backends). */
#ifndef ULPSCOPE_TESTS_ATTENTION_MMA_VERDICT_H
#define ULPSCOPE_TESTS_ATTENTION_MMA_VERDICT_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/check/check.h"
#include "kernels/check/check_attention_mma.h"
#include "reference/attention.h"

typedef struct {
    int rows, failed;
    char first_fail[256];
} mma_verdicts;

static void mma_verdict_sink(void *user, const kcheck_ctx *ctx, const kcheck_row *row)
{
    (void)ctx;
    mma_verdicts *v = (mma_verdicts *)user;
    v->rows++;
    if (!row->pass && v->failed++ == 0)
        snprintf(v->first_fail, sizeof v->first_fail, "%s %.40s: ratio %.3g, %.100s", row->output, row->shape,
                 row->worst_ratio, row->worst_detail);
}

/* One head [T, D]: the inputs q, k, v, g (dout) as the implementation saw
 * them (values of f), its outputs, the arithmetic it claims (h: scale, exp2,
 * format, matrix units).  Rows into v.  bounds (may be NULL) receives the
 * per-element bounds, malloc'ed, for callers that compare two
 * implementations element by element: [0] o (T*D), [1] lse (T), [2] dq, dk,
 * dv (3 T*D, in that order).  Prints a line of max err / bound. */
static void mma_verdict_head(const katt_mma_head *h, const double *o, const double *lse, const double *dq,
                             const double *dk, const double *dv, mma_verdicts *v, kval *bounds[3])
{
    const int64_t T = h->T, D = h->D, n = T * D;
    double *o_r = malloc(n * 8), *lse_r = malloc(T * 8), *dq_r = malloc(n * 8), *dk_r = malloc(n * 8),
           *dv_r = malloc(n * 8), *sq = malloc(3 * n * 8);
    kval *ko = malloc(n * sizeof(kval)), *kl = malloc(T * sizeof(kval)), *kb = malloc(3 * n * sizeof(kval));
    if (!o_r || !lse_r || !dq_r || !dk_r || !dv_r || !sq || !ko || !kl || !kb) fail_msg("out of memory");
    ref_ctx rc = REF_CTX_DEFAULT;
    ref_attention_forward(&rc, 1, T, D, h->scale, h->q, h->k, h->v, o_r, lse_r);
    ref_attention_backward(&rc, 1, T, D, h->scale, h->q, h->k, h->v, h->g, dq_r, dk_r, dv_r);

    const double u32 = 0x1p-24, u = prec_format_get(h->f)->unit_roundoff;
    const float c2f = (float)h->scale * 1.4426950408889634f;
    const double exact_c2 = h->scale * 1.4426950408889634074, e_c2 = fabs((double)c2f - exact_c2);
    const kval c2 = {exact_c2, e_c2, e_c2};
    const double eln2 = fabs((double)0.6931471805599453f - 0.69314718055994530942),
                 elog2e = fabs((double)1.4426950408889634f - 1.4426950408889634074);
    const kval ln2 = {0.69314718055994530942, eln2, eln2}, log2e = {1.4426950408889634074, elog2e, elog2e};
    const kval sck = h->exp2 ? c2 : kval_exact(h->scale);
    katt_mma_forward_bounds(h, sck, ln2, ko, kl);

    kcheck_ctx ctx = {0};
    ctx.sink = mma_verdict_sink;
    ctx.user = v;
    char shape[96];
    snprintf(shape, sizeof shape, "T=%lld D=%lld", (long long)T, (long long)D);
    kcheck_acc ao, al, aq, ak, av;
    kcheck_acc_init(&ao, "o", shape, u);
    kcheck_acc_init(&al, "lse", shape, u32);
    for (int64_t i = 0; i < T; i++) {
        if (kcheck_acc_add(&al, i, lse[i], lse_r[i], kl[i].e, kl[i].p, fabs(lse_r[i]) + 1))
            kcheck_acc_detail(&al, "row %lld got %.9g ref %.17g", (long long)i, lse[i], lse_r[i]);
        kl[i].v = lse_r[i];
        for (int64_t d = 0; d < D; d++) {
            const int64_t x = i * D + d;
            double s = 0;
            for (int64_t j = 0; j <= i; j++) s = fmax(s, fabs(h->v[j * D + d]));
            if (kcheck_acc_add(&ao, x, o[x], o_r[x], ko[x].e, ko[x].p, s))
                kcheck_acc_detail(&ao, "row %lld d %lld got %.9g ref %.17g", (long long)i, (long long)d, o[x], o_r[x]);
            ko[x].v = o_r[x];
        }
    }
    katt_mma_backward_bounds(h, sck, log2e, ko, kl, kb, sq, kb + n, sq + n, kb + 2 * n, sq + 2 * n);
    kcheck_acc_init(&aq, "dq", shape, u);
    kcheck_acc_init(&ak, "dk", shape, u);
    kcheck_acc_init(&av, "dv", shape, u);
    for (int64_t x = 0; x < n; x++) {
        if (kcheck_acc_add(&aq, x, dq[x], dq_r[x], kb[x].e, kb[x].p, sq[x] + u32))
            kcheck_acc_detail(&aq, "[%lld] got %.9g ref %.17g", (long long)x, dq[x], dq_r[x]);
        if (kcheck_acc_add(&ak, x, dk[x], dk_r[x], kb[n + x].e, kb[n + x].p, sq[n + x] + u32))
            kcheck_acc_detail(&ak, "[%lld] got %.9g ref %.17g", (long long)x, dk[x], dk_r[x]);
        if (kcheck_acc_add(&av, x, dv[x], dv_r[x], kb[2 * n + x].e, kb[2 * n + x].p, sq[2 * n + x] + u32))
            kcheck_acc_detail(&av, "[%lld] got %.9g ref %.17g", (long long)x, dv[x], dv_r[x]);
    }
    kcheck_acc_report(&ctx, &ao);
    kcheck_acc_report(&ctx, &al);
    kcheck_acc_report(&ctx, &aq);
    kcheck_acc_report(&ctx, &ak);
    kcheck_acc_report(&ctx, &av);
    print_message("  %-6s T=%-3lld D=%-3lld o %.3g/%.3g u  dq %.3g/%.3g  dk %.3g/%.3g  dv %.3g/%.3g (max err/bound, "
                  "units of u)\n",
                  prec_format_name(h->f), (long long)T, (long long)D, ao.row.max_err_u, ao.row.max_bound_u,
                  aq.row.max_err_u, aq.row.max_bound_u, ak.row.max_err_u, ak.row.max_bound_u, av.row.max_err_u,
                  av.row.max_bound_u);
    if (bounds) {
        bounds[0] = ko;
        bounds[1] = kl;
        bounds[2] = kb;
    } else {
        free(ko); free(kl); free(kb);
    }
    free(o_r); free(lse_r); free(dq_r); free(dk_r); free(dv_r); free(sq);
}

#endif
