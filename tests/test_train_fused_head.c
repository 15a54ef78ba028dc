/* tests/test_train_fused_head.c — the fused head (cross_entropy running
 * linear_cross_entropy: lm_head GEMM, cross-entropy, dgrad and wgrad in one
 * chunked call that never stores the logits) in the trainer.  CPU: it trains,
 * it agrees with the materialised head within the plan's own rounding (twin:
 * a planted dropped vocabulary term must not), the chunk size changes dW's
 * bits and nothing else at step 0, the logits buffers are gone from the
 * memory count, trace locates a chunk change at the fused op, bad
 * combinations are refused.  GPU (skip without one): CUDA agrees with the
 * CPU, repeats its own bits, and peaks lower than the materialised head at
 * GPT-2's vocabulary. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cross_entropy.h"
#include "studies/trace.h"
#include "test_train_util.h"
#include "test_util.h"
#include "trainer/model.h"

#define FUSED_1024 "cross_entropy=bf16:chunk_1024"
#define FUSED_128 "cross_entropy=bf16:chunk_128"

/* ---- agreement with the materialised head ------------------------------------------------- */

/* Two runs of one bf16 plan family on the same weights and batch: `base`
 * on the CPU (overrides base_set; NULL: the materialised head) and the run
 * compared with it (overrides cmp_set on backend cmp_backend).  At step 0
 * (before any update) each sits about as far from the unrounded computation
 * as the plan's own rounding takes it, which the CPU measures on these
 * inputs as |X(base) - X(fp32 plan)|; the bound on |X(compared) - X(base)|
 * is AGREE_FACTOR times that, the factor tests/test_train.c's agree()
 * measured for cuda against cpu on the bf16 plan (8; twice had failed one
 * seed in about 100 there).  planted: the compared run with the planted
 * dropped vocabulary term (the last entry left out of each row's sum, in the
 * kernel and in the CPU's fused head alike); a run it stops on a NaN
 * (status 3) disagrees as far as a run can. */
#define AGREE_FACTOR 8.0
static int agrees(tmodel_kind kind, unsigned long long seed, const char *base_set, const char *cmp_set,
                  const char *cmp_backend, int planted)
{
    ttrain_config c;
    tiny_config(&c, kind, "bf16", seed);
    c.batch = 8; /* 256 rows: two chunks of 128 */
    c.steps = 2;
    ttrain_config cb = c, cc = c, c32 = c;
    char err[512];
    if (tplan_init(&c32.plan, "fp32", kind, err, sizeof err)) fail_msg("%s", err);
    if (base_set) tiny_set(&cb, base_set);
    tiny_set(&cc, cmp_set);
    cc.backend = cmp_backend;
    ttrain_result base, ref, cmp;
    run_ok(&cb, &base);
    run_ok(&c32, &ref);
    kernels_set_planted_bug(planted ? KBUG_DROP_TERM : KBUG_NONE);
    int st = ttrain_run(&cc, &cmp);
    kernels_set_planted_bug(KBUG_NONE);
    if (st == 3 && planted) {
        print_message("%s %s (planted drop-term): %s\n", tmodel_kind_name(kind), cmp_set, cmp.error);
        ttrain_result_free(&base), ttrain_result_free(&ref), ttrain_result_free(&cmp);
        return 0;
    }
    if (st) fail_msg("%s run failed (status %d): %s", cmp_backend, st, cmp.error);
    double dl = fabs(cmp.loss[0] - base.loss[0]), bl = AGREE_FACTOR * fabs(base.loss[0] - ref.loss[0]);
    double dg = fabs(cmp.grad_norm[0] - base.grad_norm[0]), bg = AGREE_FACTOR * fabs(base.grad_norm[0] - ref.grad_norm[0]);
    print_message("%s cpu %s vs %s %s%s step 0: loss %.9f %.9f (fp32 %.9f); grad norm %.7g %.7g (fp32 %.7g)\n",
                  tmodel_kind_name(kind), base_set ? base_set : "materialised", cmp_backend, cmp_set,
                  planted ? " (planted drop-term)" : "", base.loss[0], cmp.loss[0], ref.loss[0], base.grad_norm[0],
                  cmp.grad_norm[0], ref.grad_norm[0]);
    print_message("  |loss difference| %.3g (bound %.3g), |grad norm difference| %.3g (bound %.3g)\n", dl, bl, dg, bg);
    ttrain_result_free(&base), ttrain_result_free(&ref), ttrain_result_free(&cmp);
    return dl <= bl && dg <= bg;
}

/* The fused head's arithmetic, on the CPU, is the materialised head's with
 * fp32 logits (cross_entropy=bf16:fp32_logits: the lm_head writes its fp32
 * accumulator), the dlogits read as bf16 by the two backward GEMMs (as the
 * fused op rounds them) and the wgrad's fp32 accumulator added into the fp32
 * gradients (grad_accum=fp32:gemm_fp32): with one chunk (chunk_1024, 256
 * rows) every step's loss, gradient norm and final state have the same bits.
 * That checks the wiring exactly: dh into norm.final, dW into the
 * embedding's gradient, W = E itself (modern: no transposed copy).  Twins:
 * two chunks (chunk_128: dW summed in two groups) and the planted dropped
 * term must each break it. */
static int same_as_materialised(tmodel_kind kind, const char *fused, int planted)
{
    ttrain_config c;
    tiny_config(&c, kind, "bf16", test_seed("test_cpu_same_as_materialised"));
    c.batch = 8;
    c.steps = 3;
    tiny_set(&c, "grad_accum=fp32:gemm_fp32"); /* every other wgrad the same way in both */
    ttrain_config cf = c;
    tiny_set(&c, "cross_entropy=bf16:fp32_logits");
    tiny_set(&cf, fused);
    ttrain_result a, b;
    run_ok(&c, &a);
    kernels_set_planted_bug(planted ? KBUG_DROP_TERM : KBUG_NONE);
    int st = ttrain_run(&cf, &b);
    kernels_set_planted_bug(KBUG_NONE);
    if (st) fail_msg("fused run failed (status %d): %s", st, b.error);
    int same = a.param_hash == b.param_hash && same_bits(a.final_val_loss, b.final_val_loss);
    for (long s = 0; s < c.steps; s++) same &= same_bits(a.loss[s], b.loss[s]) && same_bits(a.grad_norm[s], b.grad_norm[s]);
    print_message("%s %s%s: loss %.9f / %.9f, grad norm %.9g / %.9g at step 0: %s\n", tmodel_kind_name(kind), fused,
                  planted ? " (planted drop-term)" : "", a.loss[0], b.loss[0], a.grad_norm[0], b.grad_norm[0],
                  same ? "the same bits" : "different bits");
    ttrain_result_free(&a), ttrain_result_free(&b);
    return same;
}

static void test_cpu_same_as_materialised(void **state)
{
    (void)state;
    for (int kind = 0; kind < TMODEL_COUNT; kind++) {
        assert_true(same_as_materialised((tmodel_kind)kind, FUSED_1024, 0));
        assert_false(same_as_materialised((tmodel_kind)kind, FUSED_128, 0));
        assert_false(same_as_materialised((tmodel_kind)kind, FUSED_1024, 1));
    }
}

/* Against the materialised bf16 head (logits rounded to bf16, dW rounded
 * to bf16 before the add) with the agree() bound: printed, not checked.
 * The bound is one number measured on one batch, and here it measures the
 * wrong thing: the fused head leaves out exactly the logits' rounding, one
 * part of |bf16 - fp32|, and the other parts can cancel it (ULPSCOPE_SEED=1,
 * modern: the bf16 plan's step-0 loss 5e-6 from the fp32 plan's, the fused
 * head's 1.7e-5 from the bf16 plan's; gpt2 fails at other seeds alike).  The
 * exact test above is the CPU's check; the twin (a dropped vocabulary term,
 * 4e-3 in the loss against bounds of 1e-4) is shown for scale. */
static void test_cpu_agrees_with_materialised(void **state)
{
    (void)state;
    unsigned long long seed = test_seed("test_cpu_agrees_with_materialised");
    for (int kind = 0; kind < TMODEL_COUNT; kind++) {
        (void)agrees((tmodel_kind)kind, seed, NULL, FUSED_128, "cpu", 0);
        (void)agrees((tmodel_kind)kind, seed, NULL, FUSED_128, "cpu", 1);
    }
}

/* ---- learning ------------------------------------------------------------------------------- */

/* The mean loss over the last 8 of 40 steps sits a nat below the first 8;
 * twin: a zero learning rate does not. */
static int learns(tmodel_kind kind, double lr)
{
    ttrain_config c;
    tiny_config(&c, kind, "bf16", test_seed("test_fused_head_learns"));
    tiny_set(&c, FUSED_128);
    c.batch = 4; /* 128 rows: a chunk of 128 */
    c.steps = 40;
    c.warmup = 5;
    c.lr = lr;
    c.muon_lr = lr > 0 ? 0.02 : 0.0;
    ttrain_result r;
    run_ok(&c, &r);
    double first = 0, last = 0;
    for (int i = 0; i < 8; i++) first += r.loss[i] / 8, last += r.loss[c.steps - 8 + i] / 8;
    print_message("%s fused lr %g: loss %.3f -> %.3f, val %.3f\n", tmodel_kind_name(kind), lr, first, last,
                  r.final_val_loss);
    ttrain_result_free(&r);
    return last < first - 1.0;
}

static void test_fused_head_learns(void **state)
{
    (void)state;
    for (int kind = 0; kind < TMODEL_COUNT; kind++) {
        assert_true(learns((tmodel_kind)kind, 3e-3));
        assert_false(learns((tmodel_kind)kind, 0.0));
    }
}

/* ---- chunks ----------------------------------------------------------------------------------- */

/* 256 rows: chunk_128 sums dW over two chunk GEMMs, chunk_1024 over one.
 * Each row's logits are the same dot products in either, so the step-0 loss
 * has the same bits and the gradient (dW's grouping) does not; the same seed
 * repeats its bits.  Twin: 64 rows are one chunk in both, the same bits. */
static void chunk_pair(tmodel_kind kind, int batch, int expect_differ)
{
    unsigned long long seed = test_seed("test_chunks_change_bits");
    ttrain_config c;
    tiny_config(&c, kind, "bf16", seed);
    c.batch = batch;
    c.steps = 2;
    ttrain_config c128 = c;
    tiny_set(&c, FUSED_1024);
    tiny_set(&c128, FUSED_128);
    ttrain_result a, b, b2;
    run_ok(&c, &a);
    run_ok(&c128, &b);
    run_ok(&c128, &b2);
    print_message("%s %d rows: grad norm chunk_1024 %.9g chunk_128 %.9g; param hash %016llx %016llx\n",
                  tmodel_kind_name(kind), batch * c.seq, a.grad_norm[0], b.grad_norm[0],
                  (unsigned long long)a.param_hash, (unsigned long long)b.param_hash);
    assert_true(same_bits(a.loss[0], b.loss[0]));
    assert_int_equal(!same_bits(a.grad_norm[0], b.grad_norm[0]) || a.param_hash != b.param_hash, expect_differ);
    assert_int_equal(a.param_hash != b.param_hash, expect_differ);
    for (long s = 0; s < c.steps; s++) {
        assert_true(same_bits(b.loss[s], b2.loss[s]));
        assert_true(same_bits(b.grad_norm[s], b2.grad_norm[s]));
    }
    assert_true(b.param_hash == b2.param_hash);
    ttrain_result_free(&a), ttrain_result_free(&b), ttrain_result_free(&b2);
}

static void test_chunks_change_bits(void **state)
{
    (void)state;
    for (int kind = 0; kind < TMODEL_COUNT; kind++) {
        chunk_pair((tmodel_kind)kind, 8, 1);
        chunk_pair((tmodel_kind)kind, 2, 0);
    }
}

/* ---- memory ------------------------------------------------------------------------------------- */

/* What tmodel_measure counts for gpt2 at GPT-2's vocabulary: the fused head
 * drops logits and dlogits [BT,V] and adds its dW [V,C] fp32 and the kernel's
 * chunk buffers [R,V] (fp32 logits, path-format dlogits), exactly. */
static void test_memory_counts(void **state)
{
    (void)state;
    char err[512];
    tmodel_config mc;
    const int B = 8, T = 1024, V = 50304, C = 64;
    if (tmodel_config_init(&mc, TMODEL_GPT2, 1, C, 2, V, T, err, sizeof err)) fail_msg("%s", err);
    tbackend *be = tbackend_cpu_create();
    assert_non_null(be);
    const char *sets[] = {NULL, FUSED_1024, FUSED_128};
    size_t total[3];
    for (int i = 0; i < 3; i++) {
        tplan p;
        if (tplan_init(&p, "bf16", TMODEL_GPT2, err, sizeof err) || (sets[i] && tplan_set(&p, sets[i], err, sizeof err)))
            fail_msg("%s", err);
        tmodel_memory mem;
        if (tmodel_measure(&mc, be, &p, B, T, &mem, err, sizeof err)) fail_msg("%s", err);
        total[i] = mem.total_bytes;
        print_message("gpt2 C %d V %d, %d x %d tokens, %s: %.1f MiB counted\n", C, V, B, T, sets[i] ? sets[i] : "materialised",
                      (double)mem.total_bytes / 1048576.0);
    }
    const size_t eb = be->elem_bytes(PREC_BF16), BT = (size_t)B * T;
    for (int i = 1; i < 3; i++) {
        const size_t R = (size_t)(i == 1 ? 1024 : 128);
        const size_t expect = total[0] - 2 * BT * V * eb + (size_t)V * C * sizeof(float) + R * V * (sizeof(float) + eb);
        assert_true(total[i] == expect);
    }
    assert_true(total[2] < total[1] && total[1] < total[0]);
    be->destroy(be);
}

/* A real CPU run's peak before and after (the tiny model: the logits are a
 * small part of it, but they are gone). */
static void test_peak_bytes_cpu(void **state)
{
    (void)state;
    ttrain_config c;
    tiny_config(&c, TMODEL_GPT2, "bf16", test_seed("test_peak_bytes_cpu"));
    c.steps = 1;
    ttrain_result a, b;
    run_ok(&c, &a);
    tiny_set(&c, FUSED_1024);
    run_ok(&c, &b);
    print_message("tiny gpt2 peak_bytes: materialised %zu, fused %zu\n", a.peak_bytes, b.peak_bytes);
    assert_true(b.peak_bytes < a.peak_bytes);
    ttrain_result_free(&a), ttrain_result_free(&b);
}

/* ---- hooks -------------------------------------------------------------------------------------- */

static const thash_record *find_hash(const ttrain_result *r, tslot slot, const char *tensor)
{
    for (int i = 0; i < r->n_hashes; i++)
        if (r->hashes[i].slot == slot && strcmp(r->hashes[i].tensor, tensor) == 0) return &r->hashes[i];
    return NULL;
}

/* Hash hooks on every slot: the fused op's outputs are recorded under
 * cross_entropy (losses, dh, and the embedding's gradient after its dW is
 * added); the head's GEMM slots record nothing, as nothing of theirs runs.
 * Twin: the materialised head records logits and dlogits. */
static void test_hooks(void **state)
{
    (void)state;
    for (int fused = 0; fused < 2; fused++) {
        ttrain_config c;
        tiny_config(&c, TMODEL_GPT2, "bf16", test_seed("test_hooks"));
        c.steps = 1;
        if (fused) tiny_set(&c, FUSED_128);
        for (int s = 0; s < TSLOT_COUNT; s++) c.hash_slot[s] = c.plan.used[s];
        c.at_steps[0] = 0;
        c.n_at_steps = 1;
        ttrain_result r;
        run_ok(&c, &r);
        assert_non_null(find_hash(&r, TSLOT_CROSS_ENTROPY, "losses"));
        assert_int_equal(find_hash(&r, TSLOT_CROSS_ENTROPY, "dh") != NULL, fused);
        assert_int_equal(find_hash(&r, TSLOT_CROSS_ENTROPY, "dW") != NULL, fused);
        assert_int_equal(find_hash(&r, TSLOT_CROSS_ENTROPY, "dlogits") != NULL, !fused);
        assert_int_equal(find_hash(&r, TSLOT_LM_HEAD, "logits") != NULL, !fused);
        assert_int_equal(find_hash(&r, TSLOT_LM_HEAD_DGRAD, "dx") != NULL, !fused);
        assert_int_equal(find_hash(&r, TSLOT_LM_HEAD_WGRAD, "dW") != NULL, !fused);
        ttrain_result_free(&r);
    }
}

/* trace between chunk_1024 and chunk_128 (256 rows): the first op with equal
 * inputs and unequal outputs is the fused op's dW; no MPFR verdict (said
 * why).  Twin: the same plan on both sides locates nothing. */
static void test_trace_locates_chunking(void **state)
{
    (void)state;
    for (int same = 0; same < 2; same++) {
        trace_config c;
        memset(&c, 0, sizeof c);
        tiny_config(&c.a, TMODEL_GPT2, "bf16", test_seed("test_trace_locates_chunking"));
        c.a.batch = 8;
        c.a.steps = 2;
        tiny_set(&c.a, FUSED_1024);
        c.b = c.a;
        if (!same) tiny_set(&c.b, FUSED_128);
        c.amplify_steps = 1;
        c.amplify_elems = 256;
        trace_report r;
        char err[1024];
        if (trace_run(&c, &r, err, sizeof err)) fail_msg("trace failed: %s", err);
        trace_print(stdout, &c, &r);
        assert_int_equal(r.located, !same);
        if (!same) {
            assert_false(r.inputs_differ);
            assert_int_equal(r.op_b.step, 0);
            assert_int_equal(r.op_b.slot, TSLOT_CROSS_ENTROPY);
            assert_string_equal(r.op_b.op, "linear_cross_entropy");
            assert_string_equal(r.op_b.out_name[r.out_index], "dW");
            assert_int_equal(r.verdict, TRACE_VERDICT_NONE);
            assert_non_null(strstr(r.verdict_note, "linear_cross_entropy"));
        }
        trace_report_free(&r);
    }
}

/* ---- refusals ----------------------------------------------------------------------------------- */

/* The model's side of the rules: no soft-cap under the fused head (twin:
 * the materialised head takes one, and the fused head takes no cap). */
static void test_softcap_refused(void **state)
{
    (void)state;
    char err[512];
    ttrain_config c;
    tiny_config(&c, TMODEL_MODERN, "bf16", test_seed("test_softcap_refused"));
    c.model.softcap = 15;
    c.steps = 1;
    assert_int_equal(tmodel_check_plan(&c.model, &c.plan, err, sizeof err), 0);
    ttrain_config cf = c;
    tiny_set(&cf, FUSED_1024);
    assert_int_equal(tmodel_check_plan(&cf.model, &cf.plan, err, sizeof err), -1);
    assert_non_null(strstr(err, "soft-cap"));
    ttrain_result r;
    assert_int_equal(ttrain_run(&cf, &r), 2);
    assert_non_null(strstr(r.error, "no logit soft-cap"));
    ttrain_result_free(&r);
    cf.model.softcap = 0;
    assert_int_equal(tmodel_check_plan(&cf.model, &cf.plan, err, sizeof err), 0);
    /* a switch into the fused head mid-run is refused the same way */
    c.steps = 3;
    c.switches[0] = (tswitch){1, FUSED_128};
    c.n_switches = 1;
    assert_int_equal(ttrain_run(&c, &r), 2);
    assert_non_null(strstr(r.error, "no logit soft-cap"));
    ttrain_result_free(&r);
}

/* Switching between the materialised and the fused head mid-run: the steps
 * before the switch keep their bits, the modern model's W_lm comes back in
 * sync (a switch back gives a run that trains on). */
static void test_switch_both_ways(void **state)
{
    (void)state;
    for (int kind = 0; kind < TMODEL_COUNT; kind++) {
        ttrain_config c;
        tiny_config(&c, (tmodel_kind)kind, "bf16", test_seed("test_switch_both_ways"));
        c.steps = 4;
        ttrain_result base, sw;
        run_ok(&c, &base);
        c.switches[0] = (tswitch){1, FUSED_128};
        c.switches[1] = (tswitch){2, "cross_entropy=bf16"};
        c.n_switches = 2;
        run_ok(&c, &sw);
        assert_true(same_bits(base.loss[0], sw.loss[0]));
        for (long s = 0; s < c.steps; s++) assert_true(fabs(sw.loss[s] - base.loss[s]) < 0.05);
        ttrain_result_free(&base), ttrain_result_free(&sw);
    }
}

/* ---- GPU ------------------------------------------------------------------------------------------- */

/* CUDA's fused head against the CPU's within the plan's rounding; twin: the
 * kernel with its planted dropped term. */
static void test_gpu_agrees(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    unsigned long long seed = test_seed("test_gpu_agrees");
    for (int kind = 0; kind < TMODEL_COUNT; kind++) {
        assert_true(agrees((tmodel_kind)kind, seed, FUSED_128, FUSED_128, "cuda", 0));
        assert_true(agrees((tmodel_kind)kind, seed, FUSED_1024, FUSED_1024, "cuda", 0));
        assert_false(agrees((tmodel_kind)kind, seed, FUSED_128, FUSED_128, "cuda", 1));
    }
}

/* Same seed, same GPU: the same bits; twin: another seed. */
static void test_gpu_determinism(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    unsigned long long seed = test_seed("test_gpu_fused_determinism");
    for (int kind = 0; kind < TMODEL_COUNT; kind++) {
        ttrain_config c;
        tiny_config(&c, (tmodel_kind)kind, "bf16", seed);
        tiny_set(&c, FUSED_128);
        c.backend = "cuda";
        c.batch = 8;
        c.steps = 4;
        ttrain_result a, b, d;
        run_ok(&c, &a);
        run_ok(&c, &b);
        for (long s = 0; s < c.steps; s++) {
            assert_true(same_bits(a.loss[s], b.loss[s]));
            assert_true(same_bits(a.grad_norm[s], b.grad_norm[s]));
        }
        assert_true(a.param_hash == b.param_hash);
        c.seed = seed + 1;
        run_ok(&c, &d);
        assert_true(a.param_hash != d.param_hash);
        ttrain_result_free(&a), ttrain_result_free(&b), ttrain_result_free(&d);
    }
}

/* At vocabulary 50304 and 2048 tokens a step the logits and dlogits of the
 * materialised head are 2 x 2048 x 50304 bf16 (393 MiB); the fused head's
 * dW [V,C] fp32 and chunk buffers are far less: its peak must be lower. */
static void test_gpu_peak_bytes(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    char err[512];
    ttrain_config c;
    tiny_config(&c, TMODEL_GPT2, "bf16", test_seed("test_gpu_peak_bytes"));
    if (tmodel_config_init(&c.model, TMODEL_GPT2, 1, 64, 2, 50304, 256, err, sizeof err)) fail_msg("%s", err);
    c.backend = "cuda";
    c.batch = 8;
    c.seq = 256;
    c.steps = 1;
    ttrain_result a, b;
    run_ok(&c, &a);
    tiny_set(&c, FUSED_1024);
    run_ok(&c, &b);
    print_message("gpt2 V 50304, 2048 tokens, cuda peak_bytes: materialised %.1f MiB, fused %.1f MiB\n",
                  (double)a.peak_bytes / 1048576.0, (double)b.peak_bytes / 1048576.0);
    assert_true(b.peak_bytes < a.peak_bytes);
    ttrain_result_free(&a), ttrain_result_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_same_as_materialised),
        cmocka_unit_test(test_cpu_agrees_with_materialised),
        cmocka_unit_test(test_fused_head_learns),
        cmocka_unit_test(test_chunks_change_bits),
        cmocka_unit_test(test_memory_counts),
        cmocka_unit_test(test_peak_bytes_cpu),
        cmocka_unit_test(test_hooks),
        cmocka_unit_test(test_trace_locates_chunking),
        cmocka_unit_test(test_softcap_refused),
        cmocka_unit_test(test_switch_both_ways),
        cmocka_unit_test(test_gpu_agrees),
        cmocka_unit_test(test_gpu_determinism),
        cmocka_unit_test(test_gpu_peak_bytes),
    };
    cmocka_set_test_filter(getenv("ULPSCOPE_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
