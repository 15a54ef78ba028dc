/* tests/test_trace.c — `ulpscope trace` on the CPU backend, tiny model
 * (tests/test_train_util.h: 2 layers, width 32, 6 steps), fresh seed each run.
 *
 *  - a planted over-bound kernel (KBUG_TRUNCATE_OUTPUT at mlp.up@1 running
 *    split_k, B's variant there) is located at step 0, micro-batch 0, layer 1,
 *    slot mlp.up, and called a precision bug in B; switched on at step 3
 *    (--switch-at) it is located at step 3 (the state-hash pass);
 *  - a genuine reordering (every matmul split_k in B) is called chaos, and
 *    each replay reproduces its run bit for bit;
 *  - runs whose initial states differ by one weight ulp have no op with equal
 *    inputs and unequal outputs: nothing is blamed;
 *  - twins: a locator that blames the first differing output without
 *    checking its inputs blames an op in the perturbed-start case; a verdict
 *    that ignores the bound calls the reordering a bug;
 *  - trace files: --record of A and B, --diff finds the same site; broken and
 *    hostile files are refused with the file and line named;
 *  - optimizer.muon (modern model): polar express tall vs wide is called
 *    chaos; twins: a verdict that ignores the bound and one against the
 *    wrong reference (the input negated) do not say chaos; judged directly
 *    on a gradient where a planted truncation in the tall variant
 *    (tbackend_cpu_plant_site) provably exceeds its bound: a bug in B, in A
 *    when swapped;
 *  - attention (GPT-2 model): naive vs flash, and flash vs flash_mma (the
 *    CPU backend's H100 matrix-unit model), part at the forward and are
 *    called chaos; a planted truncation in B's kernel a bug in B, in A when
 *    swapped; the same twins;
 *  - attention's backward, judged directly on the CPU backend's kernels
 *    (naive vs flash from one forward's o and lse): chaos; a planted
 *    truncation in B's a bug in B, in A when swapped; the same twins;
 *  - rmsnorm (QK-norm warp_tree vs sequential), layernorm (two_pass vs
 *    one_pass), cross-entropy (fp32 vs bf16) and rope (table vs fp32_angle)
 *    part there and are called chaos; the same twins; a planted truncation
 *    in B's kernel a bug in B, in A when swapped; the norms' backward judged
 *    directly likewise; a large op is judged on its differing rows first. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/matmul.h"
#include "kernels/polar_express.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/layernorm.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "precision/format.h"
#include "precision/rng.h"
#include "studies/trace.h"
#include "studies/trace_tap.h"
#include "tests/test_train_util.h"
#include "tests/test_util.h"
#include "trainer/backend.h"

static void tiny_pair(trace_config *c, const char *name, const char *b_overrides)
{
    memset(c, 0, sizeof *c);
    tiny_config(&c->a, TMODEL_GPT2, "bf16", test_seed(name));
    c->b = c->a;
    if (b_overrides) tiny_set(&c->b, b_overrides);
    c->amplify_steps = 3;
    c->amplify_elems = 4096;
}

static void run_trace(const trace_config *c, trace_report *r)
{
    char err[1024];
    int rc = trace_run(c, r, err, sizeof err);
    if (rc) fail_msg("trace failed (%d): %s", rc, err);
    trace_print(stdout, c, r);
}

static void plant_mlp_up_1(trace_config *c)
{
    tbackend_cpu_plant_site(TSLOT_MLP_UP, 1, KMATMUL_SPLIT_K);
    c->planted = KBUG_TRUNCATE_OUTPUT;
}

static void assert_at_mlp_up_1(const trace_report *r, long step)
{
    assert_true(r->located);
    assert_false(r->inputs_differ);
    assert_int_equal(r->part_step, step);
    assert_int_equal(r->op_b.step, step);
    assert_int_equal(r->op_b.micro, 0);
    assert_int_equal(r->op_b.layer, 1);
    assert_int_equal(r->op_b.slot, TSLOT_MLP_UP);
    assert_string_equal(r->op_b.op, "matmul");
    assert_string_equal(r->op_b.out_name[r->out_index], "y");
}

static void test_planted_bug_located(void **state)
{
    (void)state;
    trace_config c;
    trace_report r;
    tiny_pair(&c, "test_planted_bug_located", "mlp.up@1=bf16:split_k");
    plant_mlp_up_1(&c);
    run_trace(&c, &r);
    assert_at_mlp_up_1(&r, 0);
    assert_true(r.replayed && r.replay_a_exact && r.replay_b_exact);
    assert_true(r.n_differing > 0 && r.n_diffs > 0);
    assert_int_equal(r.verdict, TRACE_VERDICT_BUG_B);
    assert_true(r.judge[0].ratio <= 1 && r.judge[1].ratio > 1);
    assert_int_equal(r.amp_steps, 3);
    trace_report_free(&r);
    /* twin check of the verdict's other side: the same plant in A is a bug in A */
    trace_config swapped = c;
    swapped.a = c.b;
    swapped.b = c.a;
    run_trace(&swapped, &r);
    assert_int_equal(r.verdict, TRACE_VERDICT_BUG_A);
    trace_report_free(&r);
    tbackend_cpu_plant_site(-1, -1, -1);
}

static void test_planted_bug_late(void **state)
{
    (void)state;
    trace_config c;
    trace_report r;
    tiny_pair(&c, "test_planted_bug_late", NULL);
    c.b.switches[0] = (tswitch){3, "mlp.up@1=bf16:split_k"};
    c.b.n_switches = 1;
    plant_mlp_up_1(&c);
    run_trace(&c, &r);
    assert_at_mlp_up_1(&r, 3);
    assert_int_equal(r.verdict, TRACE_VERDICT_BUG_B);
    trace_report_free(&r);
    tbackend_cpu_plant_site(-1, -1, -1);
}

static void test_reordering_is_chaos(void **state)
{
    (void)state;
    trace_config c;
    trace_report r;
    tiny_pair(&c, "test_reordering_is_chaos", NULL);
    /* fp32 outputs: a reordered sum shows in the last bits of some element
     * (bf16 outputs can round every difference away, and then the runs are
     * bit-identical and there is nothing to judge) */
    char err[512];
    if (tplan_init(&c.a.plan, "fp32", TMODEL_GPT2, err, sizeof err)) fail_msg("%s", err);
    c.b = c.a;
    tiny_set(&c.b, "matmul=fp32:split_k");
    c.a.steps = c.b.steps = 10;
    run_trace(&c, &r);
    assert_false(r.identical);
    assert_true(r.located);
    assert_string_equal(r.op_b.op, "matmul");
    assert_true(r.replayed && r.replay_a_exact && r.replay_b_exact);
    assert_int_equal(r.verdict, TRACE_VERDICT_CHAOS);
    assert_true(r.judge[0].ratio <= 1 && r.judge[1].ratio <= 1);
    trace_report_free(&r);
    /* twin: a verdict that ignores the bound blames one of two equally good kernels */
    c.bug = TRACE_BUG_IGNORE_BOUND;
    run_trace(&c, &r);
    print_message("twin (bound ignored): verdict %d\n", (int)r.verdict);
    assert_int_not_equal(r.verdict, TRACE_VERDICT_CHAOS);
    trace_report_free(&r);
}

/* B's first weight one ulp off (compare's null-arm perturbation, here by hand). */
static int change_first_weight(tmodel *m, void *ctx)
{
    (void)ctx;
    tbackend *be = tmodel_backend(m);
    for (int i = 0; i < tmodel_n_params(m); i++) {
        tparam *p = tmodel_param(m, i);
        if (p->layer != 0 || p->w.ndim != 2) continue;
        /* its first element times 1.5: a change no output can round away (a
         * flipped last bit did, for about one seed in 20: no op then differed) */
        double *v = malloc((size_t)ktensor_numel(&p->w) * sizeof *v);
        int rc = !v || be->download(be, &p->w, v);
        if (!rc) {
            v[0] = v[0] != 0 ? 1.5 * v[0] : 0.5;
            rc = be->upload(be, &p->w, v);
        }
        free(v);
        return rc;
    }
    return 1;
}

static void test_different_start_blames_nothing(void **state)
{
    (void)state;
    trace_config c;
    trace_report r;
    tiny_pair(&c, "test_different_start_blames_nothing", NULL);
    c.b.after_init = change_first_weight;
    run_trace(&c, &r);
    assert_int_equal(r.part_step, 0);
    assert_false(r.located);
    assert_true(r.inputs_differ);
    trace_report_free(&r);
    /* twin: the locator that skips the input check blames the first op that reads the flipped weight */
    c.bug = TRACE_BUG_NO_INPUT_CHECK;
    run_trace(&c, &r);
    assert_true(r.located && r.inputs_differ);
    trace_report_free(&r);
}

/* ---- verdicts of the other ops ---- */

static void modern_pair(trace_config *c, const char *name, const char *a_overrides, const char *b_overrides)
{
    memset(c, 0, sizeof *c);
    tiny_config(&c->a, TMODEL_MODERN, "bf16", test_seed(name));
    if (a_overrides) tiny_set(&c->a, a_overrides);
    c->a.steps = 2;
    /* no weight decay and no master copy (stochastic rounding stores the weights): a
     * parameter with a zero gradient (the zero-initialised output projections at step
     * 0) is then stored unchanged, and a planted truncation first shows where polar
     * express does work */
    c->a.weight_decay = 0;
    tiny_set(&c->a, "weights=bf16:sr,optimizer.adamw=bf16");
    c->b = c->a;
    if (b_overrides) tiny_set(&c->b, b_overrides);
    c->amplify_steps = 1;
    c->amplify_elems = 256;
}

static void assert_located_at(const trace_report *r, const char *op, tslot slot)
{
    assert_true(r->located);
    assert_false(r->inputs_differ);
    assert_string_equal(r->op_b.op, op);
    assert_int_equal(r->op_b.slot, slot);
    assert_true(r->replayed && r->replay_a_exact && r->replay_b_exact);
}

/* The verdict's twins on a chaos pair: a judge that ignores the bound, one
 * that reads the wrong reference; neither may call it chaos. */
static void assert_twins_not_chaos(trace_config *c)
{
    static const trace_bug twins[] = {TRACE_BUG_IGNORE_BOUND, TRACE_BUG_WRONG_REFERENCE};
    for (size_t i = 0; i < sizeof twins / sizeof twins[0]; i++) {
        trace_report r;
        c->bug = twins[i];
        run_trace(c, &r);
        print_message("twin %d: verdict %d\n", (int)twins[i], (int)r.verdict);
        assert_int_not_equal(r.verdict, TRACE_VERDICT_CHAOS);
        assert_int_not_equal(r.verdict, TRACE_VERDICT_NONE);
        trace_report_free(&r);
    }
    c->bug = TRACE_BUG_NONE;
}

/* B's kernel (variant `variant` of `slot`) planted to truncate its outputs:
 * located at kind/slot and called a bug in B, and in A when swapped. */
static void assert_planted_bug_in_b(trace_config *c, const char *kind, tslot slot, int variant)
{
    trace_report r;
    tbackend_cpu_plant_site(slot, -1, variant);
    c->planted = KBUG_TRUNCATE_OUTPUT;
    run_trace(c, &r);
    assert_located_at(&r, kind, slot);
    assert_int_equal(r.verdict, TRACE_VERDICT_BUG_B);
    assert_true(r.judge[0].ratio <= 1 && r.judge[1].ratio > 1);
    trace_report_free(&r);
    trace_config swapped = *c;
    swapped.a = c->b;
    swapped.b = c->a;
    run_trace(&swapped, &r);
    assert_int_equal(r.verdict, TRACE_VERDICT_BUG_A);
    trace_report_free(&r);
    tbackend_cpu_plant_site(-1, -1, -1);
}

/* attn.qkv.dgrad is one GEMM over K = 3C per layer, not three accumulating
 * ones: a reordering there (fp32, split_k) is located at that site's only
 * call, replayed bit for bit and judged chaos against the bound of K = 3C
 * with no accumulation; a planted truncation of B's dgrad (bf16) is a bug
 * in B (in A when swapped). */
static void test_qkv_dgrad_site(void **state)
{
    (void)state;
    trace_config c;
    trace_report r;
    tiny_pair(&c, "test_qkv_dgrad_site", NULL);
    char err[512];
    if (tplan_init(&c.a.plan, "fp32", TMODEL_GPT2, err, sizeof err)) fail_msg("%s", err);
    c.b = c.a;
    tiny_set(&c.b, "attn.qkv.dgrad=fp32:split_k");
    c.a.steps = c.b.steps = 10;
    run_trace(&c, &r);
    assert_located_at(&r, "matmul", TSLOT_ATTN_QKV_DGRAD);
    assert_int_equal(r.op_b.call, 0);
    print_message("verdict note: %s\n", r.verdict_note);
    char want[32];
    snprintf(want, sizeof want, "K = %d", 3 * c.a.model.n_embd);
    assert_non_null(strstr(r.verdict_note, want));
    assert_null(strstr(r.verdict_note, "epilogue"));
    assert_int_equal(r.verdict, TRACE_VERDICT_CHAOS);
    trace_report_free(&r);
    tiny_pair(&c, "test_qkv_dgrad_site planted", "attn.qkv.dgrad=bf16:split_k");
    assert_planted_bug_in_b(&c, "matmul", TSLOT_ATTN_QKV_DGRAD, KMATMUL_SPLIT_K);
}

/* Polar express tall vs wide: chaos; twins: the bound ignored, the wrong
 * reference.  (The planted truncation is judged in test_muon_planted_verdict,
 * on data where it provably exceeds its bound.) */
static void test_muon_verdicts(void **state)
{
    (void)state;
    trace_config c;
    trace_report r;
    modern_pair(&c, "test_muon_verdicts", "optimizer.muon=bf16:wide_fused", "optimizer.muon=bf16:tall_fused");
    run_trace(&c, &r);
    assert_located_at(&r, "muon", TSLOT_MUON);
    assert_int_equal(r.verdict, TRACE_VERDICT_CHAOS);
    assert_true(r.judge[0].ratio <= 1 && r.judge[1].ratio <= 1);
    trace_report_free(&r);
    assert_twins_not_chaos(&c);
}

/* Whether truncating B's polar express, on the Nesterov update u [n] (values
 * of bf16), provably exceeds the bound: stage 0 stores x0 = u / den, whose
 * bound is the rounding into bf16 (u_bf16 |x0|) plus the fp32 norm's few
 * 2^-14 relative.  Truncation stays within it for every element when 1/den
 * is within about u_bf16 of a short binary fraction (u has 8-bit
 * significands: the quotients' fractions of an ulp are then all below
 * half), which happens for about one gradient in 30; the premise is that
 * some element of the planted stage 0 is off its exact value by more than
 * 1.25 u_bf16 |x0|, measured from first principles (the exact quotient in
 * double, the kernel's stage 0 run on the CPU backend). */
static int truncation_exceeds_bound(const tsite *planted_site, const double *u, int rows, int cols)
{
    const int n = rows * cols;
    float *x = malloc((size_t)n * sizeof *x);
    assert_non_null(x);
    double ss = 0;
    for (int i = 0; i < n; i++) x[i] = (float)u[i], ss += u[i] * u[i];
    const double den = KPE_NORM_SAFETY * sqrt(ss) + KPE_NORM_EPS;
    kernels_set_planted_bug(KBUG_TRUNCATE_OUTPUT);
    assert_int_equal(tbackend_cpu_polar_express_stage(planted_site, x, rows, cols, 0), 0);
    kernels_set_planted_bug(KBUG_NONE);
    int over = 0;
    for (int i = 0; i < n && !over; i++) over = fabs(x[i] - u[i] / den) > 1.25 * 0x1p-8 * fabs(u[i] / den);
    free(x);
    return over;
}

/* Muon's verdict judged directly on a [32, 32] gradient: polar express wide
 * vs tall is chaos; a planted truncation in the tall variant a bug in it (B,
 * then A when swapped), on a gradient where the truncation provably exceeds
 * the bound (truncation_exceeds_bound: one element redrawn until it holds;
 * the count is printed); twins: the bound ignored, the wrong reference. */
static void test_muon_planted_verdict(void **state)
{
    (void)state;
    enum { R = 32, C = 32, N = R * C };
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_muon_planted_verdict"));
    tparam p;
    memset(&p, 0, sizeof p);
    p.rows = R, p.cols = C, p.blocks = 1, p.muon = 1, p.grad.format = PREC_FP32;
    const tmuon_args args = {0.02, 0.95, 0.0, 1.0, 0, 0};
    const float mu = (float)args.momentum;
    tsite wide = {TSLOT_MUON, -1, TOP_POLAR_EXPRESS, NULL, KPATH_BF16, KPE_WIDE_FUSED}, tall = wide;
    tall.variant = KPE_TALL_FUSED;
    static double grad[N], m_before[N], m_after[N], u[N];
    /* the premise's twin: a constant update, whose quotients all sit 0.98 ulps above a bf16 value of
     * significand 1.96, so truncation errs by u_bf16 |x0|: within 1.25 u_bf16 |x0|, refused */
    for (int i = 0; i < N; i++) u[i] = 0.5;
    tbackend_cpu_plant_site(TSLOT_MUON, -1, KPE_TALL_FUSED);
    assert_false(truncation_exceeds_bound(&tall, u, R, C));
    tbackend_cpu_plant_site(-1, -1, -1);
    for (int i = 0; i < N; i++) grad[i] = prec_rne(prec_rng_normal(&rng), PREC_BF16), m_before[i] = 0;
    int redraws = 0;
    for (;; redraws++) {
        /* the momentum and Nesterov update as both backends form them (trace_judge_muon rebuilds them so) */
        for (int i = 0; i < N; i++) {
            /* one rounding per statement, as there (no contraction into fma) */
            float g = (float)grad[i];
            float kept = mu * (float)m_before[i];
            float fresh = (1.0f - mu) * g;
            float m = kept + fresh;
            float look = mu * m;
            m_after[i] = m;
            u[i] = prec_rne((double)(fresh + look), PREC_BF16);
        }
        tbackend_cpu_plant_site(TSLOT_MUON, -1, KPE_TALL_FUSED);
        int premise = truncation_exceeds_bound(&tall, u, R, C);
        tbackend_cpu_plant_site(-1, -1, -1);
        if (premise) break;
        assert_true(redraws < 50); /* each redraw fails the premise with probability about 1/30 */
        const uint64_t at = prec_rng_next(&rng) % N; /* before the value, explicitly */
        grad[at] = prec_rne(prec_rng_normal(&rng), PREC_BF16);
    }
    print_message("muon: the planted truncation's premise held after %d redraw%s\n", redraws, redraws == 1 ? "" : "s");
    static const struct {
        kbug planted;
        trace_bug bug;
        int swapped;
        trace_verdict want; /* TRACE_VERDICT_NONE: anything but chaos (and a verdict) */
    } cases[] = {{KBUG_NONE, TRACE_BUG_NONE, 0, TRACE_VERDICT_CHAOS},
                 {KBUG_NONE, TRACE_BUG_IGNORE_BOUND, 0, TRACE_VERDICT_NONE},
                 {KBUG_NONE, TRACE_BUG_WRONG_REFERENCE, 0, TRACE_VERDICT_NONE},
                 {KBUG_TRUNCATE_OUTPUT, TRACE_BUG_NONE, 0, TRACE_VERDICT_BUG_B},
                 {KBUG_TRUNCATE_OUTPUT, TRACE_BUG_NONE, 1, TRACE_VERDICT_BUG_A}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        trace_report r;
        memset(&r, 0, sizeof r);
        const int sw = cases[i].swapped;
        tbackend_cpu_plant_site(TSLOT_MUON, -1, KPE_TALL_FUSED);
        kernels_set_planted_bug(cases[i].planted);
        trace_judge_muon(&r, "cpu", sw ? &tall : &wide, sw ? &wide : &tall, &p, grad, m_before, m_after, &args,
                         cases[i].bug);
        kernels_set_planted_bug(KBUG_NONE);
        tbackend_cpu_plant_site(-1, -1, -1);
        char line[512];
        print_message("muon case %zu: %s (%s)\n", i, trace_verdict_line(&r, line, sizeof line), r.verdict_note);
        if (cases[i].want == TRACE_VERDICT_NONE) {
            assert_int_not_equal(r.verdict, TRACE_VERDICT_CHAOS);
            assert_int_not_equal(r.verdict, TRACE_VERDICT_NONE);
        } else assert_int_equal(r.verdict, cases[i].want);
    }
}

/* Attention A vs B (B's variant planted_variant): chaos at the forward; a
 * planted truncation in B's kernel is a bug in B (in A when swapped);
 * twins: the bound ignored, the wrong reference. */
static void attention_pair_verdicts(const char *name, const char *a_attention, const char *b_attention,
                                    int planted_variant)
{
    trace_config c;
    trace_report r;
    tiny_pair(&c, name, b_attention);
    tiny_set(&c.a, a_attention);
    c.a.steps = c.b.steps = 2;
    c.amplify_steps = 1;
    run_trace(&c, &r);
    assert_located_at(&r, "attention_fwd", TSLOT_ATTENTION);
    assert_int_equal(r.op_b.step, 0);
    assert_int_equal(r.op_b.layer, 0);
    assert_int_equal(r.verdict, TRACE_VERDICT_CHAOS);
    assert_true(r.judge[0].ratio <= 1 && r.judge[1].ratio <= 1);
    trace_report_free(&r);
    assert_twins_not_chaos(&c);
    assert_planted_bug_in_b(&c, "attention_fwd", TSLOT_ATTENTION, planted_variant);
}

/* naive vs flash (the CPU backend's two-pass fp32 softmax) */
static void test_attention_verdicts(void **state)
{
    (void)state;
    attention_pair_verdicts("test_attention_verdicts", "attention=bf16:naive", "attention=bf16:flash", KATT_FLASH);
}

/* flash vs flash_mma (the CPU backend's model of the kernel on the H100's
 * matrix units, judged with check's tensor-core description of it) */
static void test_attention_mma_verdicts(void **state)
{
    (void)state;
    attention_pair_verdicts("test_attention_mma_verdicts", "attention=bf16:flash", "attention=bf16:flash_mma",
                            KATT_FLASH_MMA);
}

/* ---- norms and cross-entropy ---- */

/* A (the preset with a_overrides) and B (also b_overrides) on the tiny model
 * of `kind`, 2 steps. */
static void rows_pair(trace_config *c, unsigned long long seed, tmodel_kind kind, const char *preset,
                      const char *a_overrides, const char *b_overrides)
{
    memset(c, 0, sizeof *c);
    tiny_config(&c->a, kind, preset, seed);
    if (a_overrides) tiny_set(&c->a, a_overrides);
    c->a.steps = 2;
    c->b = c->a;
    tiny_set(&c->b, b_overrides);
    c->amplify_steps = 1;
    c->amplify_elems = 256;
}

/* A and B part first at op `kind` of `slot`, called chaos; the twins not. */
static void assert_chaos_at(trace_config *c, const char *kind, tslot slot)
{
    trace_report r;
    run_trace(c, &r);
    assert_located_at(&r, kind, slot);
    assert_int_equal(r.verdict, TRACE_VERDICT_CHAOS);
    assert_true(r.judge[0].ratio <= 1 && r.judge[1].ratio <= 1);
    trace_report_free(&r);
    assert_twins_not_chaos(c);
}

/* rmsnorm (modern model).  Chaos: the QK-norm warp_tree (A, the preset's) vs
 * sequential, fp32 (in bf16 the reordered sums of 16 squares round to the
 * same bits).  Planted: norm.attn block_tree (A) vs warp_tree (B) in bf16,
 * B's stores truncated: y = x rstd over 64 rows, each with its own rstd, so
 * the truncation stays within the bound only if every distinct row's rstd
 * lies within about 2^-8 of a short binary fraction (about 1 in 30 each). */
static void test_rmsnorm_verdicts(void **state)
{
    (void)state;
    trace_config c;
    const unsigned long long seed = test_seed("test_rmsnorm_verdicts");
    rows_pair(&c, seed, TMODEL_MODERN, "fp32", NULL, "norm.qk=fp32:sequential");
    assert_chaos_at(&c, "norm_fwd", TSLOT_NORM_QK);
    rows_pair(&c, seed, TMODEL_MODERN, "bf16", NULL, "norm.attn=bf16:warp_tree");
    assert_planted_bug_in_b(&c, "norm_fwd", TSLOT_NORM_ATTN, KRMSNORM_WARP_TREE);
}

/* layernorm (GPT-2 model): two_pass (A) vs one_pass (B) at norm.attn, fp32:
 * chaos; in bf16 with B's stores truncated: a bug in B (A when swapped). */
static void test_layernorm_verdicts(void **state)
{
    (void)state;
    trace_config c;
    const unsigned long long seed = test_seed("test_layernorm_verdicts");
    rows_pair(&c, seed, TMODEL_GPT2, "fp32", NULL, "norm.attn=fp32:one_pass");
    assert_chaos_at(&c, "norm_fwd", TSLOT_NORM_ATTN);
    rows_pair(&c, seed, TMODEL_GPT2, "bf16", NULL, "norm.attn=bf16:one_pass");
    assert_planted_bug_in_b(&c, "norm_fwd", TSLOT_NORM_ATTN, KLAYERNORM_ONE_PASS);
}

/* cross-entropy (GPT-2 model, fp32 logits): fp32 (A) vs bf16 (B, reading the
 * logits in bf16, storing bf16 dlogits), both within their bounds: chaos
 * (the CPU backend runs no reordered cross-entropy; dlogits' formats follow
 * the slot).  B's bf16 stores truncated (A's fp32 ones cannot be): a bug in
 * B, in A when swapped; over 16384 dlogits of generic fractions. */
static void test_cross_entropy_verdicts(void **state)
{
    (void)state;
    trace_config c;
    rows_pair(&c, test_seed("test_cross_entropy_verdicts"), TMODEL_GPT2, "fp32", NULL, "cross_entropy=bf16");
    assert_chaos_at(&c, "cross_entropy", TSLOT_CROSS_ENTROPY);
    assert_planted_bug_in_b(&c, "cross_entropy", TSLOT_CROSS_ENTROPY, KCE_TWO_PASS);
}

/* rope (modern model): table (A, the preset's) vs fp32_angle (B) in fp32:
 * chaos; in bf16 with B's stores truncated: a bug in B (A when swapped). */
static void test_rope_verdicts(void **state)
{
    (void)state;
    trace_config c;
    const unsigned long long seed = test_seed("test_rope_verdicts");
    rows_pair(&c, seed, TMODEL_MODERN, "fp32", NULL, "rope=fp32:fp32_angle");
    assert_chaos_at(&c, "rope_fwd", TSLOT_ROPE);
    rows_pair(&c, seed, TMODEL_MODERN, "bf16", NULL, "rope=bf16:fp32_angle");
    assert_planted_bug_in_b(&c, "rope_fwd", TSLOT_ROPE, KROPE_FP32_ANGLE);
}

/* A large op is judged on TRACE_JUDGE_ROWS of its rows, those where the
 * replays differ first: cross-entropy on 300 rows of 16 from the CPU
 * backend, B's copy with one dlogit of row 290 scaled by 1.5 (far over any
 * bound), is a bug in B located at that element (its index mapped back
 * from the rows judged); B equal to A is chaos.  Without a logit soft-cap
 * and with one at 3 (most logits where tanh bends): the CPU backend's
 * capped arithmetic within compare_cross_entropy.h's capped bound, and a
 * B that leaves out the cap's derivative (the uncapped gradient of the
 * capped logits) a bug in B. */
static void cpu_cross_entropy(tbackend *be, const tsite *ce, int64_t N, int64_t V, const double *z,
                              const int32_t *targets, double softcap, double dloss, double *loss, double *dz)
{
    int64_t nv[2] = {N, V}, n1[1] = {N};
    ktensor L, D, Lo;
    void *t;
    assert_int_equal(be->alloc(be, &L, PREC_BF16, 2, nv), 0);
    assert_int_equal(be->alloc(be, &D, PREC_BF16, 2, nv), 0);
    assert_int_equal(be->alloc(be, &Lo, PREC_FP32, 1, n1), 0);
    assert_int_equal(be->alloc_raw(be, &t, (size_t)N * sizeof *targets), 0);
    assert_int_equal(be->upload(be, &L, z), 0);
    assert_int_equal(be->raw_upload(be, t, targets, (size_t)N * sizeof *targets), 0);
    assert_int_equal(be->cross_entropy(be, ce, &Lo, &D, &L, t, softcap, &dloss), 0);
    assert_int_equal(be->download(be, &D, dz), 0);
    assert_int_equal(be->download(be, &Lo, loss), 0);
    be->release(be, &L), be->release(be, &D), be->release(be, &Lo), be->release_raw(be, t);
}

static void large_op_judged_on_differing_rows(double softcap)
{
    enum { N = 300, V = 16, ROW = 290, COL = 5 };
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_large_op_judged_on_differing_rows"));
    tbackend *be = tbackend_cpu_create();
    assert_non_null(be);
    static double z[N * V], zc[N * V], loss[N], unused[N], dz[2][N * V];
    static int32_t targets[N];
    for (int i = 0; i < N * V; i++) z[i] = prec_rne(2.0 * prec_rng_normal(&rng), PREC_BF16);
    for (int i = 0; i < N; i++) targets[i] = (int32_t)(prec_rng_next(&rng) % V);
    const double dloss = 1.0 / N;
    tsite ce = {TSLOT_CROSS_ENTROPY, -1, TOP_CROSS_ENTROPY, NULL, KPATH_BF16, KCE_TWO_PASS};
    cpu_cross_entropy(be, &ce, N, V, z, targets, softcap, dloss, loss, dz[0]);
    memcpy(dz[1], dz[0], sizeof dz[0]);
    const double *const out_a[2] = {loss, dz[0]}, *const out_b[2] = {loss, dz[1]};
    for (int planted = 0; planted < (softcap > 0 ? 3 : 2); planted++) {
        if (planted == 1) dz[1][ROW * V + COL] = prec_rne(1.5 * dz[0][ROW * V + COL], PREC_BF16);
        if (planted == 2) { /* the capped logits' uncapped gradient: no 1 - th^2 */
            for (int i = 0; i < N * V; i++) zc[i] = prec_rne(softcap * tanh(z[i] / softcap), PREC_BF16);
            cpu_cross_entropy(be, &ce, N, V, zc, targets, 0.0, dloss, unused, dz[1]);
        }
        trace_report r;
        memset(&r, 0, sizeof r);
        trace_judge_cross_entropy(&r, "cpu", &ce, &ce, N, V, z, targets, softcap, &dloss, out_a, out_b,
                                  TRACE_BUG_NONE);
        char line[512];
        print_message("softcap %g, %s: %s (%s)\n", softcap,
                      planted == 2 ? "no cap derivative" : planted ? "one element off" : "equal",
                      trace_verdict_line(&r, line, sizeof line), r.verdict_note);
        assert_non_null(strstr(r.verdict_note, "256 of 300 rows (those differing first)"));
        if (!planted) {
            assert_int_equal(r.verdict, TRACE_VERDICT_CHAOS);
            continue;
        }
        assert_int_equal(r.verdict, TRACE_VERDICT_BUG_B);
        assert_string_equal(r.judge[1].worst_output, "dlogits");
        if (planted == 1) assert_int_equal(r.judge[1].worst, ROW * V + COL);
    }
    be->destroy(be);
}

static void test_large_op_judged_on_differing_rows(void **state)
{
    (void)state;
    large_op_judged_on_differing_rows(0.0);
    large_op_judged_on_differing_rows(3.0);
}

/* One norm backward of the CPU backend at `at` on x, dy [N, C], gain [C]
 * (NULL: none), rstd and mean [N] (mean NULL: rmsnorm), tensors in the
 * site's storage format; planted: KBUG_TRUNCATE_OUTPUT during it.  dx
 * [N, C], dgain [C] (from zero). */
static void cpu_norm_bwd(tbackend *be, const tsite *at, kbug planted, int64_t N, int64_t C, const double *x,
                         const double *dy, const double *gain, const double *mean, const double *rstd, double *dx,
                         double *dgain)
{
    int64_t nc[2] = {N, C}, c1[1] = {C}, n1[1] = {N};
    ktensor X, DY, G, M, RS, DX, DG, DB;
    const double zeros[64] = {0};
    const prec_format f = tpath_storage(at->path);
    assert_true(C <= 64);
    assert_int_equal(be->alloc(be, &X, f, 2, nc), 0);
    assert_int_equal(be->alloc(be, &DY, f, 2, nc), 0);
    assert_int_equal(be->alloc(be, &DX, f, 2, nc), 0);
    assert_int_equal(be->alloc(be, &RS, PREC_FP32, 1, n1), 0);
    assert_int_equal(be->upload(be, &X, x), 0);
    assert_int_equal(be->upload(be, &DY, dy), 0);
    assert_int_equal(be->upload(be, &RS, rstd), 0);
    if (gain) {
        assert_int_equal(be->alloc(be, &G, f, 1, c1), 0);
        assert_int_equal(be->alloc(be, &DG, PREC_FP32, 1, c1), 0);
        assert_int_equal(be->alloc(be, &DB, PREC_FP32, 1, c1), 0);
        assert_int_equal(be->upload(be, &G, gain), 0);
        assert_int_equal(be->upload(be, &DG, zeros), 0);
        assert_int_equal(be->upload(be, &DB, zeros), 0);
    }
    if (mean) {
        assert_int_equal(be->alloc(be, &M, PREC_FP32, 1, n1), 0);
        assert_int_equal(be->upload(be, &M, mean), 0);
    }
    kernels_set_planted_bug(planted);
    int rc = be->norm_bwd(be, at, &DX, gain ? &DG : NULL, gain && mean ? &DB : NULL, &DY, &X, gain ? &G : NULL,
                          mean ? &M : NULL, &RS);
    kernels_set_planted_bug(KBUG_NONE);
    assert_int_equal(rc, 0);
    assert_int_equal(be->download(be, &DX, dx), 0);
    if (gain) assert_int_equal(be->download(be, &DG, dgain), 0);
    ktensor *all[] = {&X, &DY, &DX, &RS, gain ? &G : NULL, gain ? &DG : NULL, gain ? &DB : NULL, mean ? &M : NULL};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]) be->release(be, all[i]);
}

/* The norms' backward, judged directly (a trace parts at the forward
 * first): rmsnorm block_tree (the CPU backend's xhat order) vs warp_tree
 * (its kernel's order) with a gain, and layernorm two_pass vs one_pass, each
 * from one forward's stored statistics: chaos in fp32 (bf16 rounds the two
 * orders of rmsnorm to the same bits); twins: the bound ignored, the wrong
 * reference (dy negated); in bf16 a planted truncation in B's backward a bug
 * in B, in A when swapped. */
static void test_norm_backward_verdict(void **state)
{
    (void)state;
    enum { N = 37, C = 48 };
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_norm_backward_verdict"));
    tbackend *be = tbackend_cpu_create();
    assert_non_null(be);
    static double x[N * C], dy[N * C], y[N * C], gain[C], bias[C], mean[N], rstd[N];
    static double dx[2][N * C], dgain[2][C];
    for (int i = 0; i < N * C; i++) {
        x[i] = prec_rne(prec_rng_normal(&rng) + 0.25, PREC_BF16);
        dy[i] = prec_rne(prec_rng_normal(&rng), PREC_BF16);
    }
    for (int c = 0; c < C; c++) {
        gain[c] = prec_rne(1.0 + 0.25 * prec_rng_normal(&rng), PREC_BF16);
        bias[c] = prec_rne(0.1 * prec_rng_normal(&rng), PREC_BF16);
    }
    /* unplanted, A runs fp32 and B chaos_path_b: layernorm's variants share
     * one backward on the CPU, so there B differs in its format */
    static const struct {
        top_id op;
        int variant_a, variant_b;
        kpath chaos_path_b;
    } norms[] = {{TOP_RMSNORM, KRMSNORM_BLOCK_TREE, KRMSNORM_WARP_TREE, KPATH_FP32},
                 {TOP_LAYERNORM, KLAYERNORM_TWO_PASS, KLAYERNORM_ONE_PASS, KPATH_BF16}};
    static const struct {
        kbug planted;
        trace_bug bug;
        int swapped;
        trace_verdict want; /* TRACE_VERDICT_NONE: anything but chaos (and a verdict) */
    } cases[] = {{KBUG_NONE, TRACE_BUG_NONE, 0, TRACE_VERDICT_CHAOS},
                 {KBUG_NONE, TRACE_BUG_IGNORE_BOUND, 0, TRACE_VERDICT_NONE},
                 {KBUG_NONE, TRACE_BUG_WRONG_REFERENCE, 0, TRACE_VERDICT_NONE},
                 {KBUG_TRUNCATE_OUTPUT, TRACE_BUG_NONE, 0, TRACE_VERDICT_BUG_B},
                 {KBUG_TRUNCATE_OUTPUT, TRACE_BUG_NONE, 1, TRACE_VERDICT_BUG_A}};
    for (size_t k = 0; k < sizeof norms / sizeof norms[0]; k++) {
        const int layer = norms[k].op == TOP_LAYERNORM;
        const tslot slot = TSLOT_NORM_MLP;
        tsite a = {slot, 0, norms[k].op, NULL, KPATH_BF16, norms[k].variant_a}, b = a;
        b.variant = norms[k].variant_b;
        /* the statistics from one forward (A's; fp32, whatever the path) */
        {
            int64_t nc[2] = {N, C}, c1[1] = {C}, n1[1] = {N};
            ktensor X, Y, G, Bi, M, RS;
            assert_int_equal(be->alloc(be, &X, PREC_BF16, 2, nc), 0);
            assert_int_equal(be->alloc(be, &Y, PREC_BF16, 2, nc), 0);
            assert_int_equal(be->alloc(be, &G, PREC_BF16, 1, c1), 0);
            assert_int_equal(be->alloc(be, &Bi, PREC_BF16, 1, c1), 0);
            assert_int_equal(be->alloc(be, &M, PREC_FP32, 1, n1), 0);
            assert_int_equal(be->alloc(be, &RS, PREC_FP32, 1, n1), 0);
            assert_int_equal(be->upload(be, &X, x), 0);
            assert_int_equal(be->upload(be, &G, gain), 0);
            assert_int_equal(be->upload(be, &Bi, bias), 0);
            assert_int_equal(be->norm_fwd(be, &a, &Y, layer ? &M : NULL, &RS, &X, &G, layer ? &Bi : NULL, 1e-5), 0);
            assert_int_equal(be->download(be, &Y, y), 0);
            assert_int_equal(be->download(be, &RS, rstd), 0);
            if (layer) assert_int_equal(be->download(be, &M, mean), 0);
            ktensor *all[] = {&X, &Y, &G, &Bi, &M, &RS};
            for (size_t i = 0; i < 6; i++) be->release(be, all[i]);
        }
        tbackend_cpu_plant_site(slot, -1, norms[k].variant_b);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            a.path = cases[i].planted ? KPATH_BF16 : KPATH_FP32;
            b.path = cases[i].planted ? KPATH_BF16 : norms[k].chaos_path_b;
            cpu_norm_bwd(be, &a, KBUG_NONE, N, C, x, dy, gain, layer ? mean : NULL, rstd, dx[0], dgain[0]);
            cpu_norm_bwd(be, &b, cases[i].planted, N, C, x, dy, gain, layer ? mean : NULL, rstd, dx[1], dgain[1]);
            const int sw = cases[i].swapped;
            trace_norm_data d = {N, C, 1e-5, x, gain, NULL, dy, layer ? mean : NULL, rstd,
                                 {{dx[sw], dgain[sw], NULL}, {dx[!sw], dgain[!sw], NULL}}, 0};
            trace_report r;
            memset(&r, 0, sizeof r);
            trace_judge_norm(&r, "cpu", sw ? &b : &a, sw ? &a : &b, &d, cases[i].bug);
            char line[512];
            print_message("%s backward case %zu: %s (%s)\n", layer ? "layernorm" : "rmsnorm", i,
                          trace_verdict_line(&r, line, sizeof line), r.verdict_note);
            if (cases[i].want == TRACE_VERDICT_NONE) {
                assert_int_not_equal(r.verdict, TRACE_VERDICT_CHAOS);
                assert_int_not_equal(r.verdict, TRACE_VERDICT_NONE);
            } else assert_int_equal(r.verdict, cases[i].want);
            /* two computations, not one twice */
            if (i == 0) assert_true(memcmp(dx[0], dx[1], sizeof dx[0]) != 0);
        }
        tbackend_cpu_plant_site(-1, -1, -1);
    }
    be->destroy(be);
}

/* One backward of the CPU backend at `at` (B = 2, T = 13, H = 2, D = 8; the
 * tensors [B*T, H*D], lse [B*H*T]); planted: KBUG_TRUNCATE_OUTPUT during it. */
static void cpu_attention_bwd(tbackend *be, const tsite *at, kbug planted, const double *const in[6], double *out[3])
{
    const int B = 2, T = 13, H = 2;
    int64_t shape[2] = {B * T, 16}, lshape[1] = {B * H * T};
    ktensor t[9];
    for (int i = 0; i < 9; i++) {
        int lse = i == 5;
        assert_int_equal(be->alloc(be, &t[i], lse ? PREC_FP32 : PREC_BF16, lse ? 1 : 2, lse ? lshape : shape), 0);
        if (i < 6) assert_int_equal(be->upload(be, &t[i], in[i]), 0);
    }
    kernels_set_planted_bug(planted);
    int rc = be->attention_bwd(be, at, &t[6], &t[7], &t[8], &t[0], &t[1], &t[2], &t[3], &t[4], &t[5], B, T, H);
    kernels_set_planted_bug(KBUG_NONE);
    assert_int_equal(rc, 0);
    for (int i = 0; i < 3; i++) assert_int_equal(be->download(be, &t[6 + i], out[i]), 0);
    for (int i = 0; i < 9; i++) be->release(be, &t[i]);
}

/* The backward's verdict, judged directly: naive vs flash from one
 * forward's o and lse is chaos; a planted truncation in one side's
 * backward a bug there; twins: the bound ignored, the wrong reference. */
static void test_attention_backward_verdict(void **state)
{
    (void)state;
    const int B = 2, T = 13, H = 2, D = 8;
    const int64_t n = (int64_t)B * T * H * D;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_attention_backward_verdict"));
    tbackend *be = tbackend_cpu_create();
    assert_non_null(be);
    double *buf = calloc((size_t)(12 * n), sizeof(double));
    assert_non_null(buf);
    double *dy = buf, *q = dy + n, *k = q + n, *v = k + n, *y = v + n, *lse = y + n, *outs = lse + n;
    for (int64_t i = 0; i < 4 * n; i++) buf[i] = prec_rne(prec_rng_normal(&rng), PREC_BF16);
    tsite naive = {TSLOT_ATTENTION, 0, TOP_ATTENTION, NULL, KPATH_BF16, KATT_NAIVE};
    tsite flash = naive;
    flash.variant = KATT_FLASH;
    /* o and lse from one forward: both backwards read the same */
    {
        int64_t shape[2] = {B * T, H * D}, lshape[1] = {B * H * T};
        ktensor t[5];
        for (int i = 0; i < 5; i++) {
            assert_int_equal(be->alloc(be, &t[i], i == 4 ? PREC_FP32 : PREC_BF16, i == 4 ? 1 : 2, i == 4 ? lshape : shape), 0);
            if (i < 3) assert_int_equal(be->upload(be, &t[i], (const double *[]){q, k, v}[i]), 0);
        }
        assert_int_equal(be->attention_fwd(be, &naive, &t[3], &t[4], &t[0], &t[1], &t[2], B, T, H), 0);
        assert_int_equal(be->download(be, &t[3], y), 0);
        assert_int_equal(be->download(be, &t[4], lse), 0);
        for (int i = 0; i < 5; i++) be->release(be, &t[i]);
    }
    const double *const in[6] = {dy, q, k, v, y, lse};
    double *oa[3] = {outs, outs + n, outs + 2 * n}, *ob[3] = {outs + 3 * n, outs + 4 * n, outs + 5 * n};
    const double *const ca[3] = {oa[0], oa[1], oa[2]}, *const cb[3] = {ob[0], ob[1], ob[2]};
    cpu_attention_bwd(be, &naive, KBUG_NONE, in, oa);
    tbackend_cpu_plant_site(TSLOT_ATTENTION, -1, KATT_FLASH);
    static const struct {
        kbug planted;
        trace_bug bug;
        int swapped;
        trace_verdict want; /* TRACE_VERDICT_NONE: anything but chaos (and a verdict) */
    } cases[] = {{KBUG_NONE, TRACE_BUG_NONE, 0, TRACE_VERDICT_CHAOS},
                 {KBUG_NONE, TRACE_BUG_IGNORE_BOUND, 0, TRACE_VERDICT_NONE},
                 {KBUG_NONE, TRACE_BUG_WRONG_REFERENCE, 0, TRACE_VERDICT_NONE},
                 {KBUG_TRUNCATE_OUTPUT, TRACE_BUG_NONE, 0, TRACE_VERDICT_BUG_B},
                 {KBUG_TRUNCATE_OUTPUT, TRACE_BUG_NONE, 1, TRACE_VERDICT_BUG_A}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cpu_attention_bwd(be, &flash, cases[i].planted, in, ob);
        trace_report r;
        memset(&r, 0, sizeof r);
        const int sw = cases[i].swapped;
        trace_judge_attention(&r, "cpu", sw ? &flash : &naive, sw ? &naive : &flash, B, T, H, D, q, k, v, dy, y, lse,
                              sw ? cb : ca, sw ? ca : cb, cases[i].bug);
        char line[512];
        print_message("backward case %zu: %s (%s)\n", i, trace_verdict_line(&r, line, sizeof line), r.verdict_note);
        if (cases[i].want == TRACE_VERDICT_NONE) {
            assert_int_not_equal(r.verdict, TRACE_VERDICT_CHAOS);
            assert_int_not_equal(r.verdict, TRACE_VERDICT_NONE);
        } else assert_int_equal(r.verdict, cases[i].want);
        if (cases[i].want == TRACE_VERDICT_CHAOS) assert_true(memcmp(oa[0], ob[0], (size_t)n * sizeof(double)) != 0);
    }
    tbackend_cpu_plant_site(-1, -1, -1);
    be->destroy(be);
    free(buf);
}

/* ---- trace files ---- */

static char dir[64];

static void path_in(char *buf, size_t len, const char *name) { snprintf(buf, len, "%s/%s", dir, name); }

static void record(const ttrain_config *cfg, const char *name)
{
    char path[128], err[1024];
    path_in(path, sizeof path, name);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    int rc = trace_record(cfg, 0, "\"backend\":\"cpu\",\"device\":\"cpu\",\"seed\":1", fp, err, sizeof err);
    fclose(fp);
    if (rc) fail_msg("record failed: %s", err);
}

static void write_text(const char *name, const char *text)
{
    char path[128];
    path_in(path, sizeof path, name);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

static int diff(const char *a, const char *b, int *parted, char *out, size_t len, char *err, size_t errlen)
{
    char pa[128], pb[128];
    path_in(pa, sizeof pa, a);
    path_in(pb, sizeof pb, b);
    FILE *fp = fmemopen(out, len, "w");
    int rc = trace_diff(fp, pa, pb, parted, err, errlen);
    fclose(fp);
    return rc;
}

static void test_record_and_diff(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/ulpscope_trace_XXXXXX");
    assert_non_null(mkdtemp(dir));
    trace_config c;
    tiny_pair(&c, "test_record_and_diff", "mlp.up@1=bf16:split_k");
    plant_mlp_up_1(&c);
    kernels_set_planted_bug(KBUG_TRUNCATE_OUTPUT);
    record(&c.a, "a.trace");
    record(&c.b, "b.trace");
    record(&c.a, "a2.trace");
    kernels_set_planted_bug(KBUG_NONE);
    tbackend_cpu_plant_site(-1, -1, -1);
    char out[8192], err[1024];
    int parted;
    assert_int_equal(diff("a.trace", "b.trace", &parted, out, sizeof out, err, sizeof err), 0);
    print_message("%s", out);
    assert_true(parted);
    assert_non_null(strstr(out, "the runs part in step 0"));
    assert_non_null(strstr(out, "step 0, micro-batch 0, layer 1, slot mlp.up (matmul call 0)"));
    assert_non_null(strstr(out, "y DIFFER"));
    assert_int_equal(diff("a.trace", "a2.trace", &parted, out, sizeof out, err, sizeof err), 0);
    assert_false(parted);
    /* broken and hostile files: status 2, the file and the problem named */
    static const struct {
        const char *text, *expect;
    } bad[] = {
        {"", "empty file"},
        {"not json\n", "line 1: not JSON"},
        {"{\"record\":\"header\",\"tool\":\"compare\",\"steps\":1}\n", "not a trace file"},
        {"{\"record\":\"header\",\"tool\":\"trace\",\"steps\":1}\n", "no end record"},
        {"{\"record\":\"header\",\"tool\":\"trace\",\"steps\":99999999999}\n", "steps"},
        {"{\"record\":\"header\",\"tool\":\"trace\",\"steps\":1}\n{\"record\":\"op\",\"step\":0,\"micro\":0,"
         "\"slot\":\"nope\",\"layer\":0,\"call\":0,\"op\":\"matmul\",\"in\":[],\"out\":[\"0000000000000000\"],"
         "\"out_names\":[\"y\"]}\n",
         "line 2: op record: bad or missing \"slot (no such slot)\""},
        {"{\"record\":\"header\",\"tool\":\"trace\",\"steps\":1}\n{\"record\":\"state\",\"step\":0,\"hash\":\"xyz\","
         "\"loss\":1}\n",
         "line 2: state record: bad or missing \"hash\""},
        {"{\"record\":\"header\",\"tool\":\"trace\",\"steps\":1}\n{\"record\":\"end\",\"steps\":1}\n",
         "no state record for step 0"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text("bad.trace", bad[i].text);
        err[0] = '\0';
        int rc = diff("a.trace", "bad.trace", &parted, out, sizeof out, err, sizeof err);
        print_message("bad file %zu: %s\n", i, err);
        assert_int_equal(rc, 2);
        assert_non_null(strstr(err, "bad.trace"));
        assert_non_null(strstr(err, bad[i].expect));
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_planted_bug_located),
        cmocka_unit_test(test_planted_bug_late),
        cmocka_unit_test(test_reordering_is_chaos),
        cmocka_unit_test(test_qkv_dgrad_site),
        cmocka_unit_test(test_different_start_blames_nothing),
        cmocka_unit_test(test_record_and_diff),
        cmocka_unit_test(test_muon_verdicts),
        cmocka_unit_test(test_muon_planted_verdict),
        cmocka_unit_test(test_attention_verdicts),
        cmocka_unit_test(test_attention_mma_verdicts),
        cmocka_unit_test(test_attention_backward_verdict),
        cmocka_unit_test(test_rmsnorm_verdicts),
        cmocka_unit_test(test_layernorm_verdicts),
        cmocka_unit_test(test_cross_entropy_verdicts),
        cmocka_unit_test(test_norm_backward_verdict),
        cmocka_unit_test(test_rope_verdicts),
        cmocka_unit_test(test_large_op_judged_on_differing_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
