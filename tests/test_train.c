/* tests/test_train.c — the trainer on the CPU backend: bit-identical
 * determinism, learning on the embedded corpus, non-finite detection that
 * names the first slot, hooks (hashes, dumps, switching slots), and
 * `ulpscope train` on the command line.  GPU: CPU and CUDA agree over the
 * first steps, same-seed CUDA runs are bit-identical. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"
#include "test_train_util.h"

static void test_determinism(void **state)
{
    (void)state;
    unsigned long long seed = test_seed("test_determinism");
    for (int kind = 0; kind < TMODEL_COUNT; kind++) {
        ttrain_config c;
        tiny_config(&c, (tmodel_kind)kind, "bf16", seed);
        c.steps = 4;
        ttrain_result a, b, d;
        run_ok(&c, &a);
        run_ok(&c, &b);
        for (long s = 0; s < c.steps; s++) {
            assert_true(same_bits(a.loss[s], b.loss[s]));
            assert_true(same_bits(a.grad_norm[s], b.grad_norm[s]));
        }
        assert_true(same_bits(a.final_val_loss, b.final_val_loss));
        assert_true(a.param_hash == b.param_hash);
        /* twin: another seed must change the trajectory */
        c.seed = seed + 1;
        run_ok(&c, &d);
        assert_false(same_bits(a.loss[c.steps - 1], d.loss[c.steps - 1]));
        assert_true(a.param_hash != d.param_hash);
        ttrain_result_free(&a), ttrain_result_free(&b), ttrain_result_free(&d);
    }
}

/* Mean of train losses over steps [from, to). */
static double mean_loss(const ttrain_result *r, long from, long to)
{
    double s = 0;
    for (long i = from; i < to; i++) s += r->loss[i];
    return s / (double)(to - from);
}

/* Learning: the mean loss over the last 8 steps sits at least `drop` nats
 * below the first 8 (uniform guessing over bytes is ln 256 = 5.55 nats).
 * The twin trains with a zero learning rate and must fail the same check. */
static void check_learns(tmodel_kind kind, const char *preset, const char *set, double lr, long steps, double drop,
                         int expect)
{
    ttrain_config c;
    tiny_config(&c, kind, preset, test_seed("test_loss_decreases"));
    if (set) tiny_set(&c, set);
    c.steps = steps;
    c.warmup = 5;
    c.lr = lr;
    c.muon_lr = lr > 0 ? 0.02 : 0.0;
    ttrain_result r;
    run_ok(&c, &r);
    double first = mean_loss(&r, 0, 8), last = mean_loss(&r, c.steps - 8, c.steps);
    print_message("%s %s%s%s lr %g: loss %.3f -> %.3f, val %.3f\n", tmodel_kind_name(kind), preset, set ? " " : "",
                  set ? set : "", lr, first, last, r.final_val_loss);
    assert_int_equal(last < first - drop, expect);
    ttrain_result_free(&r);
}

static void test_loss_decreases(void **state)
{
    (void)state;
    check_learns(TMODEL_GPT2, "bf16", NULL, 3e-3, 40, 1.0, 1);
    check_learns(TMODEL_GPT2, "bf16", NULL, 0.0, 40, 1.0, 0);
    check_learns(TMODEL_MODERN, "bf16", NULL, 3e-3, 40, 1.0, 1);
    check_learns(TMODEL_MODERN, "bf16", NULL, 0.0, 40, 1.0, 0);
    /* other storage and GEMM formats learn too (shorter runs, smaller drop) */
    check_learns(TMODEL_GPT2, "fp8", NULL, 3e-3, 20, 0.3, 1);
    check_learns(TMODEL_GPT2, "bf16", "weights=bf16:sr,optimizer.adamw=bf16", 3e-3, 20, 0.3, 1);
    check_learns(TMODEL_GPT2, "bf16", "weights=bf16:mantissa_buffer,optimizer.adamw=bf16", 3e-3, 20, 0.3, 1);
}

/* ---- non-finite detection ------------------------------------------------------------ */

typedef struct {
    const char *param;  /* parameter to plant into */
    double value;       /* +-value in a checkerboard; NaN: that value everywhere */
} plant;

static int plant_values(tmodel *m, void *ctx)
{
    const plant *pl = ctx;
    tbackend *be = tmodel_backend(m);
    for (int i = 0; i < tmodel_n_params(m); i++) {
        tparam *p = tmodel_param(m, i);
        if (strcmp(p->name, pl->param) != 0) continue;
        int64_t n = ktensor_numel(&p->w);
        double *v = malloc((size_t)n * sizeof *v);
        for (int64_t j = 0; j < n; j++) v[j] = isnan(pl->value) ? NAN : ((j + j / p->cols) % 2 ? -pl->value : pl->value);
        int rc = be->upload(be, &p->w, v);
        if (!rc && p->master.data) rc = be->upload(be, &p->master, v);
        free(v);
        return rc;
    }
    fail_msg("no parameter %s", pl->param);
    return -1;
}

static void expect_nonfinite(const char *preset, plant *pl, long step, const char *slot, int layer, const char *tensor)
{
    ttrain_config c;
    tiny_config(&c, TMODEL_GPT2, preset, test_seed("test_nonfinite"));
    c.after_init = plant_values;
    c.after_init_ctx = pl;
    ttrain_result r;
    int st = ttrain_run(&c, &r);
    if (st != 3) fail_msg("expected a non-finite stop (status 3), got %d: %s", st, r.error);
    print_message("%s\n", r.error);
    assert_int_equal(r.nonfinite, 1);
    assert_int_equal(r.nonfinite_step, step);
    assert_string_equal(r.nonfinite_slot, slot);
    assert_int_equal(r.nonfinite_layer, layer);
    assert_string_equal(r.nonfinite_tensor, tensor);
    assert_non_null(strstr(r.error, slot));
    ttrain_result_free(&r);
}

static void test_nonfinite_names_slot(void **state)
{
    (void)state;
    /* fp16 GEMM outputs overflow (max 65504) when weights of +-6e4 meet O(1) inputs */
    /* or a gain of +-6e4 meets normalised values above 1.1 */
    plant up0 = {"h0.mlp.up.w", 6e4}, gain1 = {"h1.norm.attn.g", 6e4}, nan_w = {"h1.mlp.down.w", NAN};
    expect_nonfinite("fp16", &up0, 0, "mlp.up", 0, "y");
    expect_nonfinite("fp16", &gain1, 0, "norm.attn", 1, "y");
    expect_nonfinite("bf16", &nan_w, 0, "weights", 1, "h1.mlp.down.w");
    /* twin: the same plant in a format wide enough to hold the products trains on */
    ttrain_config c;
    tiny_config(&c, TMODEL_GPT2, "fp32", test_seed("test_nonfinite"));
    c.steps = 1;
    c.after_init = plant_values;
    c.after_init_ctx = &up0;
    ttrain_result r;
    int st = ttrain_run(&c, &r);
    assert_int_equal(st, 0);
    assert_int_equal(r.nonfinite, 0);
    ttrain_result_free(&r);
}

/* fp16 with dynamic loss scaling: started at 2^30, the scaled loss gradient
 * (2^30 / 64 tokens = 2^24 per token) overflows fp16 dlogits; each step that
 * overflows
 * is skipped and the scale halved until the gradients fit, and training then
 * goes on.  Twin: started at 2^10 nothing overflows and nothing is skipped. */
static void check_scaling(double init, int expect_skips)
{
    ttrain_config c;
    tiny_config(&c, TMODEL_GPT2, "fp16", test_seed("test_loss_scaling"));
    c.steps = 30;
    c.loss_scale_init = init;
    ttrain_result r;
    run_ok(&c, &r);
    print_message("start 2^%g: %ld steps skipped, final scale %g\n", log2(init), r.skipped_steps, r.final_loss_scale);
    assert_int_equal(r.skipped_steps > 0, expect_skips);
    assert_true(r.skipped_steps < c.steps);
    assert_true(r.final_loss_scale == ldexp(init, -(int)r.skipped_steps));
    for (long s = 0; s < c.steps; s++) assert_true(isfinite(r.loss[s]));
    ttrain_result_free(&r);
}

static void test_loss_scaling(void **state)
{
    (void)state;
    check_scaling(0x1p30, 1);
    check_scaling(0x1p10, 0);
}

/* ---- hooks ----------------------------------------------------------------------------- */

static const thash_record *find_hash(const ttrain_result *r, long step, tslot slot, int layer, const char *tensor)
{
    for (int i = 0; i < r->n_hashes; i++) {
        const thash_record *h = &r->hashes[i];
        if (h->step == step && h->slot == slot && h->layer == layer && strcmp(h->tensor, tensor) == 0) return h;
    }
    return NULL;
}

static void hooked(ttrain_config *c, unsigned long long seed)
{
    tiny_config(c, TMODEL_GPT2, "bf16", seed);
    c->steps = 3;
    for (int s = 0; s < TSLOT_COUNT; s++) c->hash_slot[s] = c->plan.used[s];
    c->at_steps[0] = 0;
    c->at_steps[1] = 2;
    c->n_at_steps = 2;
}

static void test_hash_hooks(void **state)
{
    (void)state;
    unsigned long long seed = test_seed("test_hash_hooks");
    ttrain_config c;
    hooked(&c, seed);
    ttrain_result a, b;
    run_ok(&c, &a);
    run_ok(&c, &b);
    assert_true(a.n_hashes > 40);
    assert_int_equal(a.n_hashes, b.n_hashes);
    for (int i = 0; i < a.n_hashes; i++) {
        assert_true(a.hashes[i].step == 0 || a.hashes[i].step == 2); /* only at the chosen steps */
        assert_true(a.hashes[i].hash == b.hashes[i].hash);
    }
    /* every forward slot of every layer reported at both steps */
    const tslot per_layer[] = {TSLOT_NORM_ATTN, TSLOT_ATTN_QKV, TSLOT_ATTENTION, TSLOT_ATTN_OUT, TSLOT_NORM_MLP,
                               TSLOT_MLP_UP, TSLOT_ACTIVATION, TSLOT_MLP_DOWN};
    for (int l = 0; l < 2; l++)
        for (size_t k = 0; k < sizeof per_layer / sizeof per_layer[0]; k++)
            for (long s = 0; s <= 2; s += 2) {
                const char *t = per_layer[k] == TSLOT_ATTN_QKV ? "q" : "y";
                if (!find_hash(&a, s, per_layer[k], l, t)) fail_msg("no hash for %s L%d step %ld", tslot_get(per_layer[k])->name, l, s);
            }
    assert_non_null(find_hash(&a, 0, TSLOT_MLP_UP_DGRAD, 1, "dx"));
    /* the forward at step 0 and step 2 differ (the weights moved) */
    assert_true(find_hash(&a, 0, TSLOT_LM_HEAD, -1, "logits")->hash != find_hash(&a, 2, TSLOT_LM_HEAD, -1, "logits")->hash);

    /* switching one slot changes the hashes downstream of it only */
    ttrain_config c2;
    hooked(&c2, seed);
    tiny_set(&c2, "mlp.up=fp8"); /* e4m3 operands: values change from there on */
    ttrain_result s2;
    run_ok(&c2, &s2);
    int first_up = -1;
    for (int i = 0; i < a.n_hashes && first_up < 0; i++)
        if (a.hashes[i].slot == TSLOT_MLP_UP) first_up = i;
    assert_true(first_up > 5);
    for (int i = 0; i < first_up; i++) {
        assert_true(a.hashes[i].slot == s2.hashes[i].slot && a.hashes[i].layer == s2.hashes[i].layer);
        if (a.hashes[i].hash != s2.hashes[i].hash)
            fail_msg("upstream slot %s L%d %s changed", tslot_get(a.hashes[i].slot)->name, a.hashes[i].layer, a.hashes[i].tensor);
    }
    const tslot downstream[] = {TSLOT_MLP_UP, TSLOT_ACTIVATION, TSLOT_MLP_DOWN};
    for (size_t k = 0; k < 3; k++)
        assert_true(find_hash(&a, 0, downstream[k], 0, "y")->hash != find_hash(&s2, 0, downstream[k], 0, "y")->hash);
    assert_true(find_hash(&a, 0, TSLOT_LM_HEAD, -1, "logits")->hash != find_hash(&s2, 0, TSLOT_LM_HEAD, -1, "logits")->hash);
    ttrain_result_free(&a), ttrain_result_free(&b), ttrain_result_free(&s2);
}

static void test_switch_at(void **state)
{
    (void)state;
    unsigned long long seed = test_seed("test_switch_at");
    ttrain_config c;
    tiny_config(&c, TMODEL_GPT2, "bf16", seed);
    c.steps = 4;
    ttrain_result base, sw;
    run_ok(&c, &base);
    c.switches[0].step = 2;
    c.switches[0].overrides = "mlp.*=fp32,lm_head=fp8";
    c.n_switches = 1;
    run_ok(&c, &sw);
    assert_true(same_bits(base.loss[0], sw.loss[0]) && same_bits(base.loss[1], sw.loss[1]));
    assert_false(same_bits(base.loss[2], sw.loss[2]));
    ttrain_result_free(&sw);
    /* one layer's slot switched: the same, from that step on */
    c.switches[0].overrides = "mlp.up@1=fp8"; /* e4m3 operands: values change */
    run_ok(&c, &sw);
    assert_true(same_bits(base.loss[0], sw.loss[0]) && same_bits(base.loss[1], sw.loss[1]));
    assert_false(same_bits(base.loss[2], sw.loss[2]));
    /* a slot that holds state cannot switch mid-run */
    c.switches[0].overrides = "weights=bf16:mantissa_buffer";
    ttrain_result bad;
    assert_int_equal(ttrain_run(&c, &bad), 2);
    assert_non_null(strstr(bad.error, "weights"));
    ttrain_result_free(&bad);
    /* nor at a later switch: the model compares with the plan it runs (it once compared the plan with itself) */
    c.switches[0] = (tswitch){1, "mlp.*=fp32"};
    c.switches[1] = (tswitch){2, "weights=fp16"};
    c.n_switches = 2;
    assert_int_equal(ttrain_run(&c, &bad), 2);
    assert_non_null(strstr(bad.error, "switch at step 2"));
    assert_non_null(strstr(bad.error, "slot weights is fixed"));
    ttrain_result_free(&base), ttrain_result_free(&sw), ttrain_result_free(&bad);
}

static void test_dump_hook(void **state)
{
    (void)state;
    char dir[] = "/tmp/ulpscope_test_dump_XXXXXX";
    assert_non_null(mkdtemp(dir));
    ttrain_config c;
    tiny_config(&c, TMODEL_GPT2, "bf16", test_seed("test_dump_hook"));
    c.steps = 2;
    c.dump_slot[TSLOT_ATTN_QKV] = 1;
    c.hash_slot[TSLOT_ATTN_QKV] = 1;
    c.at_steps[0] = 1;
    c.n_at_steps = 1;
    c.dump_dir = dir;
    ttrain_result r;
    run_ok(&c, &r);
    char path[512];
    snprintf(path, sizeof path, "%s/step1.micro0.attn.qkv.L1.k.bin", dir);
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    unsigned char buf[2 * 32 * 32 * 2 + 16];
    size_t n = fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    assert_int_equal(n, 2 * 32 * 32 * 2); /* B*T x C bf16 */
    const thash_record *h = find_hash(&r, 1, TSLOT_ATTN_QKV, 1, "k");
    assert_non_null(h);
    assert_true(ttrain_fnv1a(TTRAIN_FNV_OFFSET, buf, n) == h->hash); /* the dump is the hashed tensor */
    buf[7] ^= 1; /* twin: one flipped bit gives another hash */
    assert_true(ttrain_fnv1a(TTRAIN_FNV_OFFSET, buf, n) != h->hash);
    snprintf(path, sizeof path, "rm -rf %s", dir);
    assert_int_equal(system(path), 0);
    ttrain_result_free(&r);
}

/* ---- the command line ------------------------------------------------------------------- */

static void test_cli(void **state)
{
    (void)state;
    TEST_REQUIRE_BIN();
    static char out[65536];
    char log[] = "/tmp/ulpscope_test_train_XXXXXX";
    int fd = mkstemp(log);
    close(fd);
    unlink(log);
    char args[1024];
    snprintf(args, sizeof args, "--steps 3 --width 32 --heads 2 --seq 16 --batch 2 --log %s --quiet", log);
    assert_int_equal(test_run_cli("train", args, out, sizeof out), 0);
    FILE *fp = fopen(log, "r");
    assert_non_null(fp);
    char line[16384];
    int steps = 0, header = 0, final = 0;
    while (fgets(line, sizeof line, fp)) {
        header += strstr(line, "\"record\":\"header\"") && strstr(line, "\"plan\":{\"preset\":\"bf16\"");
        if (strstr(line, "\"record\":\"step\"")) {
            steps++;
            assert_non_null(strstr(line, "\"loss\":"));
            assert_non_null(strstr(line, "\"val_loss\":"));
            assert_non_null(strstr(line, "\"grad_norm\":"));
            assert_non_null(strstr(line, "\"tokens_per_s\":"));
            assert_non_null(strstr(line, "\"ms\":"));
        }
        final += strstr(line, "\"record\":\"final\"") != NULL;
    }
    fclose(fp);
    unlink(log);
    assert_int_equal(header, 1);
    assert_int_equal(steps, 3);
    assert_int_equal(final, 1);
    /* bad input: status 2, one line naming the value, no log file left */
    const char *bad[][2] = {
        {"--plan fp9", "fp9"},
        {"--set lm_head=fp7", "fp7"},
        {"--model gpt3", "gpt3"},
        {"--backend tpu", "tpu"},
        {"--steps 0", "--steps"},
        {"--width 30 --heads 4", "30"},
        {"--data /nonexistent/x", "/nonexistent/x"},
        {"--hash-slots nope --at-steps 0", "nope"},
        {"--switch-at 3:weights=fp9", "fp9"},
        {"--lr abc", "abc"},
        /* integers range-checked before they reach an int */
        {"--batch 4294967297", "--batch needs an integer in 1..1048576, got '4294967297'"},
        {"--depth 4294967297", "--depth needs an integer in 1..1024, got '4294967297'"},
        {"--width 4294967360", "--width needs an integer in 1..65536, got '4294967360'"},
        {"--steps 99999999999999999999", "--steps needs an integer in 1..1000000000"},
        {"--beta1 1", "--beta1 needs a number in [0, 1)"},
        /* each option once; options the mode ignores */
        {"--steps 1 --steps 2", "--steps given twice"},
        {"--model modern --model gpt2", "--model given twice"},
        {"--rank 1", "--rank applies to data parallel runs only"},
        {"--dump-dir /tmp", "--dump-dir needs --dump-slots"},
        {"--at-steps 0", "--at-steps needs --hash-slots or --dump-slots"},
        {"--profile", "--quiet silences the progress lines --profile prints"}, /* --quiet is added below */
        {"--softcap 1", "--softcap applies to --model modern only"},
        {"--model modern --softcap 1 --set cross_entropy=bf16:chunk_1024", "linear_cross_entropy has no logit soft-cap"},
        {"--set cross_entropy=bf16:chunk_1024,lm_head.wgrad=fp32", "set lm_head*=bf16"},
        {"--switch-at 1:cross_entropy=bf16:chunk_128,lm_head=fp8", "lm_head is fp8:fused"},
        /* empty overrides */
        {"--set ''", "empty override in ''"},
        {"--set ',,,'", "empty override in ',,,'"},
        {"--set 'mlp.up=bf16,'", "empty override in 'mlp.up=bf16,'"},
        {"--set '*=fp32:'", "empty variant after ':'"},
        {"--switch-at '1:'", "empty override in ''"},
        /* hooks that can never fire */
        {"--steps 2 --hash-slots all --at-steps 50", "--at-steps 50 can never fire: the run has steps 0..1"},
        {"--steps 2 --hash-slots all --at-steps 0,2", "--at-steps 2 can never fire"},
        {"--steps 2 --hash-slots all --at-steps 0,,1", "--at-steps needs steps like 0,10,20"},
        {"--steps 2 --switch-at 5:mlp.up=fp32", "--switch-at 5 can never fire"},
        /* one seed syntax: decimal or 0x hex */
        {"--seed 010", "--seed needs a seed: decimal or 0x hex"},
        {"--seed -1", "--seed needs a seed"},
        {"--seed 0x", "--seed needs a seed"},
        {"--seed 0x10000000000000000", "--seed needs a seed"},
        {"--seed 18446744073709551616", "--seed needs a seed"},
        {"--seed 1e3", "--seed needs a seed"},
        /* per-layer selectors */
        {"--set lm_head@0=fp8", "slot lm_head is global"},
        {"--set mlp.up@2=fp32", "layer 2 is outside the model's layers 0..1 (depth 2)"},
        {"--depth 3 --switch-at 1:mlp.up@3=fp32", "--switch-at 1: slot mlp.up@3: layer 3 is outside"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "%s --log %s --quiet", bad[i][0], log);
        int st = test_run_cli("train", args, out, sizeof out);
        if (st != 2 || !strstr(out, bad[i][1])) fail_msg("'%s': status %d, output: %s", bad[i][0], st, out);
        assert_null(strchr(strchr(out, '\n') + 1, '\n'));
        struct stat sb;
        assert_int_equal(stat(log, &sb), -1);
    }
    /* --seed 0x10 is --seed 16 (same final state); twin: --seed 17 is not */
    char hashes[3][32];
    const char *seeds[] = {"0x10", "16", "17"};
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof args, "--steps 2 --width 32 --heads 2 --seq 16 --batch 2 --seed %s --log %s --quiet",
                 seeds[i], log);
        assert_int_equal(test_run_cli("train", args, out, sizeof out), 0);
        final_state_hash(log, hashes[i]);
        unlink(log);
    }
    assert_string_equal(hashes[0], hashes[1]);
    assert_string_not_equal(hashes[1], hashes[2]);
    /* --switch-at has no length limit: 600 characters of overrides, the last one applied (it was cut at 511) */
    char longset[1024] = "1:";
    while (strlen(longset) < 600) strcat(longset, "mlp.up=bf16,");
    strcat(longset, "lm_head=bf16:split_k");
    snprintf(args, sizeof args, "--steps 2 --width 32 --heads 2 --seq 16 --batch 2 --switch-at %s --log %s --quiet",
             longset, log);
    assert_int_equal(test_run_cli("train", args, out, sizeof out), 0);
    fp = fopen(log, "r");
    assert_non_null(fp);
    int switched = 0;
    while (fgets(line, sizeof line, fp))
        switched += strstr(line, "\"record\":\"switch\"") && strstr(line, "lm_head=bf16:split_k\"") &&
                    strstr(line, "\"lm_head\":\"bf16:split_k\"");
    fclose(fp);
    unlink(log);
    assert_int_equal(switched, 1);
}

/* tmodel_create_for_timing (bench_train sizes): every parameter filled with
 * its initial spread, not a constant: gains ones, biases and the modern
 * output projections zeros, the rest within +-sqrt(3) x the draw's standard
 * deviation (+-0.02 sqrt(3) for gpt2's normal draws) with a sample standard
 * deviation within 10% of it; and the model runs (a finite loss). */
static void test_timing_fill(void **state)
{
    (void)state;
    for (int kind = 0; kind < TMODEL_COUNT; kind++) {
        ttrain_config c;
        tiny_config(&c, (tmodel_kind)kind, "bf16", 1);
        tbackend *be = tbackend_cpu_create();
        assert_non_null(be);
        char err[512];
        tmodel *m = tmodel_create_for_timing(&c.model, be, &c.plan, c.batch, c.seq, err, sizeof err);
        if (!m) fail_msg("%s", err);
        int spread = 0;
        for (int i = 0; i < tmodel_n_params(m); i++) {
            tparam *p = tmodel_param(m, i);
            int64_t n = ktensor_numel(&p->w);
            double *v = malloc((size_t)n * sizeof *v), sum = 0, sq = 0, lo = INFINITY, hi = -INFINITY;
            assert_non_null(v);
            assert_int_equal(be->download(be, &p->w, v), 0);
            for (int64_t k = 0; k < n; k++) {
                sum += v[k], sq += v[k] * v[k];
                lo = v[k] < lo ? v[k] : lo, hi = v[k] > hi ? v[k] : hi;
            }
            free(v);
            double mean = sum / n, sd = sqrt(sq / n - mean * mean);
            if (strstr(p->name, "norm.") && strstr(p->name, ".g")) assert_true(lo == 1.0 && hi == 1.0);
            else if (strstr(p->name, "norm.") || (kind == TMODEL_MODERN && (strstr(p->name, "attn.out") ||
                                                                          strstr(p->name, "mlp.down"))))
                assert_true(lo == 0.0 && hi == 0.0); /* biases; modern's output projections */
            else {
                /* the draw's standard deviation: gpt2 0.02 (0.02 / sqrt(2L) for the projections into the
                 * residual stream), modern 0.5 / sqrt(cols) */
                int proj = strstr(p->name, "attn.out") || strstr(p->name, "mlp.down");
                double want = p->muon ? 0.5 / sqrt((double)p->cols) : proj ? 0.02 / sqrt(2.0 * c.model.n_layer) : 0.02;
                if (fabs(sd - want) > 0.1 * want)
                    fail_msg("%s: sd %g, the draw's is %g (range %g..%g)", p->name, sd, want, lo, hi);
                assert_true(fabs(mean) < 4 * want / sqrt((double)n));
                spread++;
            }
        }
        assert_true(spread >= 3);
        const size_t BT = (size_t)c.batch * c.seq;
        int32_t *tok = calloc(BT, sizeof *tok);
        assert_non_null(tok);
        for (size_t i = 0; i < BT; i++) tok[i] = (int32_t)(i * 7 % 256);
        double loss = NAN;
        assert_int_equal(tmodel_step_micro(m, tok, tok, NULL, &loss), 0);
        assert_true(isfinite(loss));
        free(tok);
        tmodel_destroy(m);
        be->destroy(be);
    }
}

/* ---- GPU ------------------------------------------------------------------------------- */

/* Same seed, same GPU: bit-identical, for both families. */
static void test_gpu_determinism(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    unsigned long long seed = test_seed("test_gpu_determinism");
    for (int kind = 0; kind < TMODEL_COUNT; kind++) {
        ttrain_config c;
        tiny_config(&c, (tmodel_kind)kind, "bf16", seed);
        c.backend = "cuda";
        c.steps = 4;
        ttrain_result a, b, d;
        run_ok(&c, &a);
        run_ok(&c, &b);
        for (long s = 0; s < c.steps; s++) assert_true(same_bits(a.loss[s], b.loss[s]));
        assert_true(a.param_hash == b.param_hash);
        c.seed = seed + 1; /* twin: another seed, other bits */
        run_ok(&c, &d);
        assert_true(a.param_hash != d.param_hash);
        ttrain_result_free(&a), ttrain_result_free(&b), ttrain_result_free(&d);
    }
}

/* The micro-batch's CUDA graph (trainer/model.c): runs with it (captured on
 * the third micro-batch, replayed after) give the bits of runs without it
 * (ULPSCOPE_CUDA_GRAPH=0): every step's loss and gradient norm and the final
 * state, for both families, the bf16 and fp8 plans, one run and three
 * replicas, two micro-batches a step (a replay per micro-batch, each on its
 * own batch).  Twins: replays that skip the batch's upload (the graph reading
 * the previous micro-batch's tokens), and for fp8 at R = 1 replays that skip
 * the weight images' refresh (GEMMs reading an earlier update's weights),
 * must give other losses.  fp8 under delayed scaling runs without a graph. */
static void graph_run(const ttrain_config *c, int R, int graph, ttrain_result *res)
{
    uint64_t seeds[3] = {c->seed, c->seed + 1, c->seed + 2};
    if (graph) unsetenv("ULPSCOPE_CUDA_GRAPH");
    else setenv("ULPSCOPE_CUDA_GRAPH", "0", 1);
    int st = ttrain_run_replicas(c, R, seeds, seeds, res);
    unsetenv("ULPSCOPE_CUDA_GRAPH");
    if (st) fail_msg("graph run (R=%d, graph %d): %s", R, graph, res[0].error);
}

static int same_run(const ttrain_result *a, const ttrain_result *b, long steps)
{
    for (long s = 0; s < steps; s++)
        if (!same_bits(a->loss[s], b->loss[s]) || !same_bits(a->grad_norm[s], b->grad_norm[s])) return 0;
    return a->param_hash == b->param_hash;
}

static void free_runs(ttrain_result *res, int R)
{
    for (int r = 0; r < R; r++) ttrain_result_free(&res[r]);
}

static void test_gpu_graph_same_bits(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    unsigned long long seed = test_seed("test_gpu_graph_same_bits");
    const char *plans[] = {"bf16", "fp8"};
    for (int p = 0; p < 2; p++)
        for (int kind = 0; kind < TMODEL_COUNT; kind++)
            for (int R = 1; R <= 3; R += 2) {
                const int fp8 = p == 1;
                ttrain_config c;
                tiny_config(&c, (tmodel_kind)kind, plans[p], seed);
                c.backend = "cuda";
                c.accum = 2;
                ttrain_result with[3], without[3], stale[3], stale_w[3];
                graph_run(&c, R, 1, with);
                graph_run(&c, R, 0, without);
                tmodel_plant_graph_stale_batch(1);
                graph_run(&c, R, 1, stale);
                tmodel_plant_graph_stale_batch(0);
                /* the weight images serve single runs (replicas quantise their weights per call) */
                const int cached = fp8 && R == 1;
                if (cached) {
                    tbackend_cuda_plant_stale_graph_weights(1);
                    graph_run(&c, R, 1, stale_w);
                    tbackend_cuda_plant_stale_graph_weights(0);
                }
                print_message("%s %s R=%d: graph captured %ld, replayed %ld micro-batches, %ld failed captures\n",
                              plans[p], kind ? "modern" : "gpt2", R, with[0].graph_captures, with[0].graph_replays,
                              with[0].graph_failures);
                assert_int_equal(with[0].graph_failures, 0);
                assert_true(with[0].graph_captures >= 1);
                assert_true(with[0].graph_replays >= 2 * c.steps - 2);
                assert_int_equal(without[0].graph_replays, 0);
                for (int r = 0; r < R; r++) {
                    assert_true(same_run(&with[r], &without[r], c.steps));
                    assert_false(same_run(&stale[r], &without[r], c.steps));
                    if (cached) assert_false(same_run(&stale_w[r], &without[r], c.steps));
                }
                free_runs(with, R), free_runs(without, R), free_runs(stale, R);
                if (cached) free_runs(stale_w, R);
            }
    /* fp8 under delayed scaling runs without a graph */
    ttrain_config c;
    tiny_config(&c, TMODEL_GPT2, "fp8", seed);
    tiny_set(&c, "fp8_scaling=fp32:delayed");
    c.backend = "cuda";
    ttrain_result f;
    graph_run(&c, 1, 1, &f);
    assert_int_equal(f.graph_replays, 0);
    ttrain_result_free(&f);
}

/* CPU and CUDA run the same plan on the same weights and batch.  Before any
 * update (step 0: the loss and the gradient norm) they may differ only by
 * where each rounds: a few roundings that land on the other side, where the
 * two sum in other orders.  The scale of the plan's own rounding is what the
 * CPU measures on these very inputs as |X(plan) - X(fp32 plan)|, and the
 * bound on |X(cuda) - X(cpu)| is AGREE_FACTOR times that.  The factor was
 * measured on an H100 (docs/results-experiments.md, session of 2026-11-24,
 * fifth): over 37 seeds x 3 configurations the ratio |cuda - cpu| / scale had
 * median 0.002 (loss) and 0.004 (grad norm) but a heavy tail, 2.3 at most
 * (seed 0x2f5c0cc34ac3c7da, gpt2's grad norm: a flipped bf16 rounding of a
 * value many others depend on), which the factor 2 once used here failed on.
 * The twins sit far above 8: a planted dropped term gives a grad-norm ratio
 * of 120 or more, the uncapped CUDA run 320 or more (same 37 seeds).  Later steps start
 * from weights that already differ (a trajectory, not a bound): printed, not
 * checked.  The logit soft-cap (modern): cap on both sides agrees; a CUDA run
 * without the CPU's cap must not (the cap of 0.1 bends most of the tiny
 * model's initial logits: the gradient norm drops by a third). */
#define AGREE_FACTOR 8.0
static int agree(tmodel_kind kind, unsigned long long seed, int planted, double cpu_cap, double cuda_cap)
{
    ttrain_config c;
    tiny_config(&c, kind, "bf16", seed);
    c.steps = 3;
    c.model.softcap = cpu_cap;
    ttrain_result cpu, ref, gpu;
    run_ok(&c, &cpu);
    ttrain_config c32 = c;
    char err[512];
    if (tplan_init(&c32.plan, "fp32", kind, err, sizeof err)) fail_msg("%s", err);
    run_ok(&c32, &ref);
    c.backend = "cuda";
    c.model.softcap = cuda_cap;
    kernels_set_planted_bug(planted ? KBUG_DROP_TERM : KBUG_NONE);
    int st = ttrain_run(&c, &gpu);
    kernels_set_planted_bug(KBUG_NONE);
    if (st == 3 && planted) {
        /* the planted bug left an output unwritten (NaN): as far from agreeing as it gets */
        print_message("%s (planted drop-term): %s\n", tmodel_kind_name(kind), gpu.error);
        ttrain_result_free(&cpu), ttrain_result_free(&ref), ttrain_result_free(&gpu);
        return 0;
    }
    if (st) fail_msg("cuda run failed: %s", gpu.error);
    char tag[96];
    snprintf(tag, sizeof tag, "%s%s", planted ? " (planted drop-term)" : "", cpu_cap != cuda_cap ? " (cuda uncapped)" : "");
    if (cpu_cap > 0) snprintf(tag + strlen(tag), sizeof tag - strlen(tag), " softcap %g", cpu_cap);
    for (long s = 0; s < c.steps; s++)
        print_message("%s%s step %ld: loss cpu %.9f cuda %.9f fp32 %.9f; grad norm cpu %.7g cuda %.7g fp32 %.7g\n",
                      tmodel_kind_name(kind), tag, s, cpu.loss[s], gpu.loss[s], ref.loss[s], cpu.grad_norm[s],
                      gpu.grad_norm[s], ref.grad_norm[s]);
    double sl = fabs(cpu.loss[0] - ref.loss[0]), sg = fabs(cpu.grad_norm[0] - ref.grad_norm[0]);
    double dl = fabs(gpu.loss[0] - cpu.loss[0]), dg = fabs(gpu.grad_norm[0] - cpu.grad_norm[0]);
    print_message("%s%s step 0: |loss cuda-cpu| %.3g (%.3g x the plan's rounding; bound %g x), |grad norm cuda-cpu| "
                  "%.3g (%.3g x; bound %g x)\n",
                  tmodel_kind_name(kind), tag, dl, dl / sl, AGREE_FACTOR, dg, dg / sg, AGREE_FACTOR);
    ttrain_result_free(&cpu), ttrain_result_free(&ref), ttrain_result_free(&gpu);
    return dl <= AGREE_FACTOR * sl && dg <= AGREE_FACTOR * sg;
}

static void test_gpu_cpu_agree(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    unsigned long long seed = test_seed("test_gpu_cpu_agree");
    for (int kind = 0; kind < TMODEL_COUNT; kind++) {
        assert_true(agree((tmodel_kind)kind, seed, 0, 0.0, 0.0));
        assert_false(agree((tmodel_kind)kind, seed, 1, 0.0, 0.0));
    }
    assert_true(agree(TMODEL_MODERN, seed, 0, 0.1, 0.1));
    assert_false(agree(TMODEL_MODERN, seed, 1, 0.1, 0.1));
    assert_false(agree(TMODEL_MODERN, seed, 0, 0.1, 0.0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_determinism),   cmocka_unit_test(test_loss_decreases),
        cmocka_unit_test(test_nonfinite_names_slot), cmocka_unit_test(test_loss_scaling),
        cmocka_unit_test(test_hash_hooks),    cmocka_unit_test(test_switch_at),
        cmocka_unit_test(test_dump_hook),     cmocka_unit_test(test_cli),
        cmocka_unit_test(test_timing_fill),
        cmocka_unit_test(test_gpu_determinism), cmocka_unit_test(test_gpu_graph_same_bits),
        cmocka_unit_test(test_gpu_cpu_agree),
    };
    cmocka_set_test_filter(getenv("ULPSCOPE_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
