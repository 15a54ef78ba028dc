/* tests/test_attention_mma_bound.c — the flash_mma check bound
 * (kernels/check/compare_attention_mma.c) against a CPU emulation of the kernels'
 * arithmetic, without a GPU.  The emulation follows kernels/attention_mma.cu
 * operation by operation: score and product chains through the bit-accurate
 * matrix-unit model (precision/mma.h, one mma_dot per k16 instruction with
 * the running accumulator as c), the online softmax over 64-key tiles with
 * fp32 float operations, the row sum in the kernel's order (4 threads of 16
 * sequential terms, a butterfly), P and dS rounded into the path's format,
 * the 16-key chunks past a row skipped, the delta warp sum.  Host expf and
 * logf stand for CUDA's (both within the bound's 2 and 1 ulps).  Every
 * output (o, lse, dq, dk, dv) must pass kcheck's verdict (every element
 * within its bound, RMS within the probabilistic one) against the MPFR
 * reference, for the A100 and H100 models, bf16 and fp16, flash_mma and
 * flash_mma_exp2.  Twins: the emulation with the planted drop-term bug
 * (every score loses its last term) and with truncated stores must fail. */
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
#include "precision/format.h"
#include "precision/mma.h"
#include "precision/rng.h"
#include "reference/attention.h"
#include "tests/test_util.h"

#include "tests/attention_mma_arith.h"

typedef struct {
    int rows, failed;
    char first_fail[256];
} verdicts;

static void sink(void *user, const kcheck_ctx *ctx, const kcheck_row *row)
{
    (void)ctx;
    verdicts *v = user;
    v->rows++;
    if (!row->pass && v->failed++ == 0)
        snprintf(v->first_fail, sizeof v->first_fail, "%s %.40s: ratio %.3g, %.100s", row->output, row->shape,
                 row->worst_ratio, row->worst_detail);
}

/* One head: emulate, bound, compare; rows into v. */
static void run_head(const arith_emu *e, prec_rng *rng, verdicts *v)
{
    const int64_t T = e->T, D = e->D, n = T * D;
    double *q = malloc(n * 8), *k = malloc(n * 8), *vv = malloc(n * 8), *g = malloc(n * 8), *o = malloc(n * 8),
           *lse = malloc(T * 8), *dq = malloc(n * 8), *dk = malloc(n * 8), *dv = malloc(n * 8);
    double *o_r = malloc(n * 8), *lse_r = malloc(T * 8), *dq_r = malloc(n * 8), *dk_r = malloc(n * 8),
           *dv_r = malloc(n * 8), *sq = malloc(3 * n * 8);
    kval *ko = malloc(n * sizeof(kval)), *kl = malloc(T * sizeof(kval)), *kb = malloc(3 * n * sizeof(kval));
    assert_true(q && k && vv && g && o && lse && dq && dk && dv && o_r && lse_r && dq_r && dk_r && dv_r && sq && ko &&
                kl && kb);
    kcheck_fill_normal(rng, q, n, 0, 1, e->f);
    kcheck_fill_normal(rng, k, n, 0, 1, e->f);
    kcheck_fill_normal(rng, vv, n, 0, 1, e->f);
    kcheck_fill_normal(rng, g, n, 0, 1, e->f);
    arith_forward(e, q, k, vv, o, lse);
    arith_backward(e, q, k, vv, g, o, lse, dq, dk, dv);
    ref_ctx rc = REF_CTX_DEFAULT;
    ref_attention_forward(&rc, 1, T, D, e->scale, q, k, vv, o_r, lse_r);
    ref_attention_backward(&rc, 1, T, D, e->scale, q, k, vv, g, dq_r, dk_r, dv_r);

    const double u32 = 0x1p-24, u = prec_format_get(e->f)->unit_roundoff;
    const float c2f = e->scale * 1.4426950408889634f;
    const kval c2 = {e->scale * 1.4426950408889634074, fabs((double)c2f - e->scale * 1.4426950408889634074),
                     fabs((double)c2f - e->scale * 1.4426950408889634074)};
    const double eln2 = fabs((double)0.6931471805599453f - 0.69314718055994530942),
                 elog2e = fabs((double)1.4426950408889634f - 1.4426950408889634074);
    const kval ln2 = {0.69314718055994530942, eln2, eln2}, log2e = {1.4426950408889634074, elog2e, elog2e};
    katt_mma_head h = {q, k, vv, g, T, D, e->scale, e->exp2, e->f, e->p};
    katt_mma_forward_bounds(&h, e->exp2 ? c2 : kval_exact(e->scale), ln2, ko, kl);

    kcheck_ctx ctx = {0};
    ctx.sink = sink;
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
            for (int64_t j = 0; j <= i; j++) s = fmax(s, fabs(vv[j * D + d]));
            if (kcheck_acc_add(&ao, x, o[x], o_r[x], ko[x].e, ko[x].p, s))
                kcheck_acc_detail(&ao, "row %lld d %lld got %.9g ref %.17g", (long long)i, (long long)d, o[x], o_r[x]);
            ko[x].v = o_r[x];
        }
    }
    katt_mma_backward_bounds(&h, e->exp2 ? c2 : kval_exact(e->scale), log2e, ko, kl, kb, sq, kb + n, sq + n, kb + 2 * n,
                             sq + 2 * n);
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
                  prec_format_name(e->f), (long long)T, (long long)D, ao.row.max_err_u, ao.row.max_bound_u,
                  aq.row.max_err_u, aq.row.max_bound_u, ak.row.max_err_u, ak.row.max_bound_u, av.row.max_err_u,
                  av.row.max_bound_u);
    free(q); free(k); free(vv); free(g); free(o); free(lse); free(dq); free(dk); free(dv);
    free(o_r); free(lse_r); free(dq_r); free(dk_r); free(dv_r); free(sq); free(ko); free(kl); free(kb);
}

typedef struct {
    const char *gen;
    prec_format f;
    int exp2;
    int long_shapes; /* also the multi-tile shapes (T 130: three 64-key tiles) */
} config;

static const int64_t shapes[][2] = {{70, 16}, {20, 128}, {33, 32}, {130, 64}};

/* Every config on its shapes; returns the verdicts (heads: *heads). */
static verdicts run_all(const config *cfg, int n_cfg, int bug, unsigned long long seed, int *heads)
{
    verdicts all = {0, 0, ""};
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    *heads = 0;
    for (int c = 0; c < n_cfg; c++) {
        const mma_model *m = mma_model_find(cfg[c].gen, "mma.sync", cfg[c].f, PREC_FP32);
        assert_non_null(m);
        print_message("%s %s %s%s\n", cfg[c].gen, prec_format_name(cfg[c].f), cfg[c].exp2 ? "flash_mma_exp2" : "flash_mma",
                      bug ? " (planted bug)" : "");
        const size_t n_shapes = cfg[c].long_shapes ? 4 : 3;
        for (size_t s = 0; s < n_shapes; s++) {
            arith_emu e = {&m->arith, cfg[c].f, cfg[c].exp2, bug, shapes[s][0], shapes[s][1],
                     (float)(1.0 / sqrt((double)shapes[s][1]))};
            verdicts v = {0, 0, ""};
            run_head(&e, &rng, &v);
            (*heads)++;
            all.rows += v.rows;
            if (v.failed && all.failed++ == 0) snprintf(all.first_fail, sizeof all.first_fail, "%.150s", v.first_fail);
        }
    }
    return all;
}

/* H100 (the device the project measures on) in full, A100 on the short shapes. */
static const config full[] = {
    {"h100", PREC_BF16, 0, 1}, {"h100", PREC_BF16, 1, 1}, {"h100", PREC_FP16, 0, 1}, {"h100", PREC_FP16, 1, 1},
    {"a100", PREC_BF16, 0, 0}, {"a100", PREC_FP16, 1, 0},
};
static const config twins[] = {{"h100", PREC_BF16, 0, 0}, {"a100", PREC_FP16, 1, 0}};

static void test_emulated_kernels_within_bound(void **state)
{
    (void)state;
    int heads;
    verdicts v = run_all(full, 6, KBUG_NONE, test_seed("attention_mma_bound"), &heads);
    if (v.failed) fail_msg("%d heads with a FAIL row; first: %s", v.failed, v.first_fail);
}

static void test_twin_drop_term_fails(void **state)
{
    (void)state;
    int heads;
    verdicts v = run_all(twins, 2, KBUG_DROP_TERM, test_seed("attention_mma_bound_drop"), &heads);
    print_message("drop-term: %d of %d heads with a FAIL row\n", v.failed, heads);
    assert_int_equal(v.failed, heads); /* every head */
}

static void test_twin_truncate_output_fails(void **state)
{
    (void)state;
    int heads;
    verdicts v = run_all(twins, 2, KBUG_TRUNCATE_OUTPUT, test_seed("attention_mma_bound_trunc"), &heads);
    print_message("truncate-output: %d of %d heads with a FAIL row\n", v.failed, heads);
    assert_true(v.failed > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_emulated_kernels_within_bound),
        cmocka_unit_test(test_twin_drop_term_fails),
        cmocka_unit_test(test_twin_truncate_output_fails),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
