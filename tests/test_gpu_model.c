/* tests/test_gpu_model.c — the GPU-model preset (--gpu-model GEN, the plan
 * item gpu_model=GEN; trainer/plan.h "GPU models"):
 *   - every GEN: which op and variant every slot runs (tensor-core GEMMs on
 *     matmul_mma.GEN, fp32 GEMMs on the plain matmul, the rest unchanged),
 *     JSON round trips, explain's "gpu model" lines and per-slot notes;
 *   - the order: overrides after the model are read under it, a model can
 *     replace another, contradictions are refused; the plan is unchanged on
 *     error; bisect mixtures take a model their choices obey;
 *   - refusals on the command line: one line, exit status 2, no log left;
 *   - training (CPU): --gpu-model a100 equals the explicit --set overrides
 *     bit for bit (library and command line) and differs from native (twin);
 *   - compare with arms gpu_model=a100 and gpu_model=h100 end to end, and the
 *     results cache: another GPU model is another run, never a cached one;
 *   - (GPU) the CUDA backend under --gpu-model a100: bit-identical to the
 *     explicit --set run, every GEMM site bound to matmul_mma.a100, and the
 *     first step within test_train.c's CPU-vs-CUDA bound of the CPU's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "tests/test_train_util.h"
#include "tests/test_util.h"
#include "trainer/backend.h"
#include "trainer/plan.h"

static void plan_ok(tplan *p, const char *preset, tmodel_kind model, const char *sets)
{
    char err[2048];
    if (tplan_init(p, preset, model, err, sizeof err) || (sets && tplan_set(p, sets, err, sizeof err)))
        fail_msg("%s + '%s': %s", preset, sets ? sets : "", err);
}

/* tplan_set must refuse `sets`, leave the plan as it was, and say `says`. */
static void refused(tplan *p, const char *sets, const char *says)
{
    char err[2048] = "";
    tplan before = *p;
    assert_int_equal(tplan_set(p, sets, err, sizeof err), -1);
    print_message("'%s' -> %s\n", sets, err);
    assert_true(tplan_equal(p, &before));
    if (!strstr(err, says)) fail_msg("'%s': the message '%s' does not say '%s'", sets, err, says);
    assert_null(strchr(err, '\n'));
}

/* ---- the plan ------------------------------------------------------------------------ */

static void test_every_generation(void **state)
{
    (void)state;
    char err[2048], json[TPLAN_JSON_MAX];
    for (int g = TGPU_NATIVE; g < TGPU_COUNT; g++) {
        tgpu_model parsed;
        assert_int_equal(tgpu_model_parse(tgpu_model_name((tgpu_model)g), &parsed), 0);
        assert_int_equal(parsed, g);
        for (int m = 0; m < TMODEL_COUNT; m++) {
            /* the V100's units take fp16 only; Muon's GEMMs go to CUDA cores */
            const char *preset = g == TGPU_V100 ? "fp16" : "bf16";
            tplan native, p;
            plan_ok(&native, preset, (tmodel_kind)m, m == TMODEL_MODERN ? "optimizer.muon=fp32" : NULL);
            p = native;
            char item[32];
            snprintf(item, sizeof item, "gpu_model=%s", tgpu_model_name((tgpu_model)g));
            if (tplan_set(&p, item, err, sizeof err)) fail_msg("%s: %s", item, err);
            assert_int_equal(p.gpu_model, g);
            for (int s = 0; s < TSLOT_COUNT; s++) {
                if (!p.used[s]) continue;
                const tslot_choice *c = &p.slot[s], *was = &native.slot[s];
                assert_int_equal(c->path, was->path); /* a model never changes a format */
                if (tslot_get((tslot)s)->gemm != TGEMM_NONE && g != TGPU_NATIVE) {
                    assert_int_equal(c->op, TOP_MATMUL_MMA);
                    assert_int_equal(c->variant, g - TGPU_V100);
                } else if (s == TSLOT_ATTENTION && g != TGPU_NATIVE && katt_is_mma(was->variant)) {
                    /* the tensor-core attention falls back to the CUDA-core flash */
                    assert_int_equal(c->op, was->op);
                    assert_int_equal(c->variant, katt_is_exp2(was->variant) ? KATT_FLASH_EXP2 : KATT_FLASH);
                } else {
                    assert_int_equal(c->op, was->op);
                    assert_int_equal(c->variant, was->variant);
                }
            }
            /* JSON: "gpu_model" beside "model" (absent for native), and back */
            tplan_to_json(&p, json, sizeof json);
            assert_int_equal(strstr(json, "\"gpu_model\":") != NULL, g != TGPU_NATIVE);
            tplan back;
            if (tplan_from_json(&back, json, err, sizeof err)) fail_msg("%s: %s", json, err);
            assert_true(tplan_equal(&p, &back));
            assert_int_equal(tplan_equal(&p, &native), g == TGPU_NATIVE);
            /* explain: the "gpu model" line, and for a model one note per slot */
            char *text = NULL;
            size_t len = 0;
            FILE *fp = open_memstream(&text, &len);
            assert_non_null(fp);
            tplan_explain(&p, fp);
            fclose(fp);
            char line[64];
            snprintf(line, sizeof line, "\ngpu model %s", tgpu_model_name((tgpu_model)g));
            if (!strstr(text, line)) fail_msg("explain lacks '%s':\n%s", line + 1, text);
            if (g != TGPU_NATIVE) {
                snprintf(line, sizeof line, "\ngpu model %s, slot by slot\n", tgpu_model_name((tgpu_model)g));
                assert_non_null(strstr(text, line));
                char note[128];
                snprintf(note, sizeof note, "\nlm_head          matrix units: the %s %s model", tgpu_model_name((tgpu_model)g),
                         preset);
                if (!strstr(text, note)) fail_msg("explain lacks '%s':\n%s", note + 1, text);
                assert_non_null(strstr(text, "\nattention        CUDA cores: the arithmetic an sm_80 build runs"));
                assert_non_null(strstr(text, "not modelled"));
            }
            free(text);
        }
    }
}

/* fp32: plain GEMMs stay CUDA-core SGEMM; matmul_fast (tf32) goes to the
 * model's tf32; fp8 on an A100 runs the bf16 model, and explain says so. */
static void test_paths_and_fallbacks(void **state)
{
    (void)state;
    tplan p, native;
    plan_ok(&native, "fp32", TMODEL_GPT2, NULL);
    plan_ok(&p, "fp32", TMODEL_GPT2, "gpu_model=a100");
    for (int s = 0; s < TSLOT_COUNT; s++)
        if (p.used[s]) {
            assert_int_equal(p.slot[s].op, native.slot[s].op);
            assert_int_equal(p.slot[s].variant, native.slot[s].variant);
        }
    char note[512];
    tplan_gpu_model_note(&p, TSLOT_MLP_UP, &p.slot[TSLOT_MLP_UP], note, sizeof note);
    assert_non_null(strstr(note, "fp32 SGEMM on CUDA cores"));
    plan_ok(&p, "fp32", TMODEL_GPT2, "lm_head=fp32:fast,gpu_model=a100");
    assert_int_equal(p.slot[TSLOT_LM_HEAD].op, TOP_MATMUL_MMA);
    assert_int_equal(p.slot[TSLOT_MLP_UP].op, TOP_MATMUL);
    tplan_gpu_model_note(&p, TSLOT_LM_HEAD, &p.slot[TSLOT_LM_HEAD], note, sizeof note);
    assert_non_null(strstr(note, "the a100 tf32 model"));
    plan_ok(&p, "fp8", TMODEL_GPT2, "lm_head=fp8:fast,gpu_model=a100");
    assert_int_equal(p.slot[TSLOT_LM_HEAD].op, TOP_MATMUL_MMA);
    assert_int_equal(p.slot[TSLOT_LM_HEAD].path, KPATH_FP8);
    tplan_gpu_model_note(&p, TSLOT_LM_HEAD, &p.slot[TSLOT_LM_HEAD], note, sizeof note);
    assert_non_null(strstr(note, "the a100 bf16 model; no fp8 units on a100"));
}

/* Overrides after the model are read under it; the model's rewrite does not
 * depend on where the overrides stood before it. */
static void test_order(void **state)
{
    (void)state;
    tplan after, before, explicit_sets;
    plan_ok(&after, "bf16", TMODEL_GPT2, "gpu_model=a100,lm_head=fp8,mlp.up@1=fp16");
    plan_ok(&before, "bf16", TMODEL_GPT2, "lm_head=fp8,mlp.up@1=fp16,gpu_model=a100");
    plan_ok(&explicit_sets, "bf16", TMODEL_GPT2, "matmul=bf16:mma.a100,lm_head=fp8:mma.a100,mlp.up@1=fp16:mma.a100,attention=bf16:flash");
    assert_true(tplan_equal(&after, &before));
    assert_int_equal(tplan_choice_at(&after, TSLOT_MLP_UP, 1)->op, TOP_MATMUL_MMA);
    assert_int_equal(tplan_choice_at(&after, TSLOT_MLP_UP, 1)->path, KPATH_FP16);
    /* the same choices as the explicit overrides; only the recorded model differs */
    int depth = 2;
    tplan_unit u[64];
    assert_int_equal(tplan_diff(&after, &explicit_sets, depth, u, 64), 0);
    assert_false(tplan_equal(&after, &explicit_sets));
    /* an explicit matmul_mma of the model's generation is no contradiction */
    plan_ok(&after, "bf16", TMODEL_GPT2, "gpu_model=a100,lm_head=bf16:mma.a100");
    /* a model replaces another: a100's GEMMs become h100's */
    plan_ok(&after, "bf16", TMODEL_GPT2, "gpu_model=a100,mlp.up@0=fp16,gpu_model=h100");
    assert_int_equal(after.gpu_model, TGPU_H100);
    assert_int_equal(after.slot[TSLOT_LM_HEAD].variant, TMMA_H100);
    assert_int_equal(tplan_choice_at(&after, TSLOT_MLP_UP, 0)->variant, TMMA_H100);
    /* the public call is the item */
    char err[1024];
    plan_ok(&before, "bf16", TMODEL_GPT2, NULL);
    assert_int_equal(tplan_set_gpu_model(&before, TGPU_H100, err, sizeof err), 0);
    plan_ok(&after, "bf16", TMODEL_GPT2, "gpu_model=h100");
    assert_true(tplan_equal(&after, &before));
}

static void test_refusals(void **state)
{
    (void)state;
    tplan p;
    plan_ok(&p, "bf16", TMODEL_GPT2, NULL);
    refused(&p, "gpu_model=v100", "slot attn.qkv runs a bf16 GEMM on the matrix units, which take fp16 only");
    refused(&p, "gpu_model=x100", "unknown GPU model 'x100'");
    refused(&p, "gpu_model@0=a100", "no layer selector");
    /* read under the model, a tensor-core attention is refused (applied to
     * it, the model makes it fall back: test_every_generation) */
    refused(&p, "gpu_model=a100,attention=bf16:flash_mma_exp2", "use attention=bf16:flash_exp2 (CUDA cores)");
    refused(&p, "gpu_model=a100,attention@1=bf16:flash_mma_exp2", "slot attention@1: flash_mma_exp2");
    refused(&p, "lm_head=bf16:split_k,gpu_model=a100", "variant split_k has no matrix-unit model");
    refused(&p, "lm_head=bf16:mma.h100,gpu_model=a100", "contradicts the GPU model");
    refused(&p, "gpu_model=a100,lm_head=bf16:mma.h100", "contradicts the GPU model");
    refused(&p, "gpu_model=a100,attention=bf16:flash_mma", "has no a100 model");
    refused(&p, "gpu_model=a100,gpu_model=native", "the native choices that model replaced are not kept");
    plan_ok(&p, "fp8", TMODEL_GPT2, NULL);
    refused(&p, "gpu_model=h100", "matmul_mma.h100 has no fp8 path");
    refused(&p, "lm_head=fp8:blockwise,gpu_model=a100", "matmul_block_fp8 runs this GPU's own fp8 matrix units");
    plan_ok(&p, "bf16", TMODEL_MODERN, NULL);
    refused(&p, "gpu_model=a100", "use optimizer.muon=fp32");
    plan_ok(&p, "fp32", TMODEL_GPT2, NULL);
    refused(&p, "lm_head=fp32:fast,gpu_model=v100", "slot lm_head runs a tf32 GEMM");
    /* JSON that breaks the model's rules: refused, never silently rewritten */
    char json[TPLAN_JSON_MAX], err[1024];
    plan_ok(&p, "bf16", TMODEL_GPT2, "gpu_model=a100");
    tplan_to_json(&p, json, sizeof json);
    char *at = strstr(json, "\"lm_head\":\"bf16:matmul_mma.a100\"");
    assert_non_null(at);
    memmove(at + strlen("\"lm_head\":\"bf16:fused\""), at + strlen("\"lm_head\":\"bf16:matmul_mma.a100\""),
            strlen(at + strlen("\"lm_head\":\"bf16:matmul_mma.a100\"")) + 1);
    memcpy(at, "\"lm_head\":\"bf16:fused\"", strlen("\"lm_head\":\"bf16:fused\""));
    tplan q;
    assert_int_equal(tplan_from_json(&q, json, err, sizeof err), -1);
    print_message("edited JSON -> %s\n", err);
    assert_non_null(strstr(err, "slot lm_head runs bf16:fused on this GPU's own matrix units"));
    assert_int_equal(tplan_from_json(&q, "{\"preset\":\"bf16\",\"model\":\"gpt2\",\"gpu_model\":\"a200\",\"slots\":{}}",
                                     err, sizeof err), -1);
    assert_non_null(strstr(err, "unknown gpu_model 'a200'"));
}

/* Bisect mixtures: a model every choice of the mixture obeys (the bad
 * plan's, the good plan's), else native; the choices say what runs. */
static void test_mixtures(void **state)
{
    (void)state;
    tplan good, bad, mix;
    char err[1024];
    plan_ok(&good, "bf16", TMODEL_GPT2, NULL);
    plan_ok(&bad, "bf16", TMODEL_GPT2, "gpu_model=a100");
    tplan_unit u[256];
    int n = tplan_diff(&good, &bad, 2, u, 256);
    assert_true(n > 0);
    /* every unit: the bad plan's choices at every layer; the slot rows the
     * per-layer units leave behind are the good plan's, which a100 forbids */
    assert_int_equal(tplan_apply_units(&good, &bad, u, n, &mix, err, sizeof err), 0);
    assert_int_equal(tplan_diff(&mix, &bad, 2, u + 128, 128), 0);
    assert_int_equal(mix.gpu_model, TGPU_NATIVE);
    assert_int_equal(tplan_apply_units(&good, &bad, u, 1, &mix, err, sizeof err), 0);
    assert_int_equal(mix.gpu_model, TGPU_NATIVE);
    assert_int_equal(tplan_choice_at(&mix, u[0].slot, u[0].layer)->op, TOP_MATMUL_MMA);
    /* the global units alone (lm_head and its gradients): obeying neither */
    tplan_unit globals[8];
    int k = 0;
    for (int i = 0; i < n && k < 8; i++)
        if (u[i].layer < 0) globals[k++] = u[i];
    assert_int_equal(k, 3);
    assert_int_equal(tplan_apply_units(&good, &bad, globals, k, &mix, err, sizeof err), 0);
    assert_int_equal(mix.gpu_model, TGPU_NATIVE);
    /* two plans on one model keep it */
    tplan bad2 = bad;
    if (tplan_set(&bad2, "lm_head=fp16", err, sizeof err)) fail_msg("%s", err);
    n = tplan_diff(&bad, &bad2, 2, u, 256);
    assert_int_equal(n, 1);
    assert_int_equal(tplan_apply_units(&bad, &bad2, u, n, &mix, err, sizeof err), 0);
    assert_int_equal(mix.gpu_model, TGPU_A100);
    assert_true(tplan_equal(&mix, &bad2));
    /* a mixture that obeys the bad plan's model takes it: the fp32 preset,
     * whose GEMMs a100 leaves alone, against the same with lm_head on tf32 */
    plan_ok(&good, "fp32", TMODEL_GPT2, NULL);
    plan_ok(&bad, "fp32", TMODEL_GPT2, "lm_head=fp32:fast,gpu_model=a100");
    n = tplan_diff(&good, &bad, 2, u, 256);
    assert_int_equal(n, 1);
    assert_int_equal(tplan_apply_units(&good, &bad, u, n, &mix, err, sizeof err), 0);
    assert_int_equal(mix.gpu_model, TGPU_A100);
    assert_true(tplan_equal(&mix, &bad));
}

/* ---- the command line ------------------------------------------------------------- */

/* One line "ulpscope CMD: error: ..." saying `says`, exit status 2. */
static void cli_refuses(const char *cmd, const char *args, const char *says)
{
    char out[8192];
    int st = test_run_cli(cmd, args, out, sizeof out);
    print_message("%s %s -> %d: %s", cmd, args, st, out);
    assert_int_equal(st, 2);
    char head[64];
    snprintf(head, sizeof head, "ulpscope %s: error: ", cmd);
    assert_int_equal(strncmp(out, head, strlen(head)), 0);
    const char *nl = strchr(out, '\n');
    assert_true(nl && nl[1] == '\0');
    if (!strstr(out, says)) fail_msg("'%s' does not say '%s'", out, says);
}

static void test_cli_refusals(void **state)
{
    (void)state;
    TEST_REQUIRE_BIN();
    cli_refuses("plan", "--gpu-model v100", "take fp16 only on a V100: use --plan fp16");
    cli_refuses("plan", "--gpu-model a200", "unknown --gpu-model 'a200' (models: native, v100, a100, h100, b200)");
    cli_refuses("plan", "--set gpu_model=a100,attention=bf16:flash_mma", "use attention=bf16:flash");
    cli_refuses("plan", "--gpu-model a100 --model modern", "use optimizer.muon=fp32");
    cli_refuses("plan", "--set gpu_model=a100,gpu_model=native", "not kept");
    /* --gpu-model comes after every --set: the Muon fix may follow it on the line */
    char out[65536];
    assert_int_equal(test_run_cli("plan", "--gpu-model a100 --model modern --set optimizer.muon=fp32", out, sizeof out), 0);
    char log[] = "/tmp/ulpscope_gpumodel_XXXXXX";
    int fd = mkstemp(log);
    assert_true(fd >= 0);
    close(fd);
    unlink(log);
    char args[256];
    snprintf(args, sizeof args, "--gpu-model v100 --steps 2 --log %s", log);
    cli_refuses("train", args, "take fp16 only on a V100");
    assert_int_equal(access(log, F_OK), -1); /* nothing left behind */
    cli_refuses("compare", "--steps 2 --seeds 2 --arm x=gpu_model=h100 --plan fp8", "--arm x: gpu_model=h100");
    cli_refuses("bisect", "--steps 2 --bad gpu_model=v100", "bad plan: gpu_model=v100");
    cli_refuses("trace", "--steps 2 --bad lm_head=bf16:mma.h100 --gpu-model a100", "contradicts the GPU model");
    /* explain through the command: the model's lines */
    assert_int_equal(test_run_cli("plan", "--gpu-model a100 --model modern --set optimizer.muon=fp32 --explain", out,
                                  sizeof out), 0);
    assert_non_null(strstr(out, "gpu model a100: "));
    assert_non_null(strstr(out, "\noptimizer.muon   fp32 SGEMMs on CUDA cores"));
    assert_non_null(strstr(out, "\"gpu_model\":\"a100\""));
}

/* ---- training ------------------------------------------------------------------------- */

static void train_pair(tmodel_kind kind, const char *preset, const char *base_sets, const char *explicit_sets,
                       unsigned long long seed)
{
    ttrain_config c;
    ttrain_result native, model, expl;
    char err[1024];
    tiny_config(&c, kind, preset, seed);
    c.steps = 3;
    if (base_sets) tiny_set(&c, base_sets);
    run_ok(&c, &native);
    ttrain_config m = c, e = c;
    if (tplan_set_gpu_model(&m.plan, TGPU_A100, err, sizeof err)) fail_msg("%s", err);
    tiny_set(&e, explicit_sets);
    run_ok(&m, &model);
    run_ok(&e, &expl);
    int differs = native.param_hash != model.param_hash;
    for (long s = 0; s < c.steps; s++) {
        print_message("%s %s step %ld: loss native %.9f, --gpu-model a100 %.9f, explicit %.9f\n", tmodel_kind_name(kind),
                      preset, s, native.loss[s], model.loss[s], expl.loss[s]);
        if (!same_bits(model.loss[s], expl.loss[s]) || !same_bits(model.grad_norm[s], expl.grad_norm[s]))
            fail_msg("%s %s step %ld: --gpu-model a100 and '%s' differ", tmodel_kind_name(kind), preset, s, explicit_sets);
        differs |= !same_bits(native.loss[s], model.loss[s]);
    }
    assert_true(model.param_hash == expl.param_hash);
    /* twin: were the model not applied, the run would be native's */
    if (!differs) fail_msg("%s %s: --gpu-model a100 gave the native run's bits", tmodel_kind_name(kind), preset);
    ttrain_result_free(&native), ttrain_result_free(&model), ttrain_result_free(&expl);
}

static void test_cpu_training_equals_explicit_sets(void **state)
{
    (void)state;
    const unsigned long long seed = test_seed("gpu model training");
    train_pair(TMODEL_GPT2, "bf16", NULL, "matmul=bf16:mma.a100,attention=bf16:flash", seed);
    train_pair(TMODEL_GPT2, "fp8", NULL, "matmul=fp8:mma.a100,attention=bf16:flash", seed);
    train_pair(TMODEL_MODERN, "bf16", "optimizer.muon=fp32", "matmul=bf16:mma.a100,attention=bf16:flash", seed);
}

/* The same through `ulpscope train`: final state hashes. */
static void test_cli_training(void **state)
{
    (void)state;
    TEST_REQUIRE_BIN();
    const unsigned long long seed = test_seed("gpu model train CLI");
    static const char *const variants[3] = {"", "--gpu-model a100", "--set matmul=bf16:mma.a100,attention=bf16:flash"};
    char hash[3][32], out[16384];
    for (int i = 0; i < 3; i++) {
        char log[] = "/tmp/ulpscope_gpumodel_log_XXXXXX";
        int fd = mkstemp(log);
        assert_true(fd >= 0);
        close(fd);
        unlink(log);
        char args[512];
        snprintf(args, sizeof args, "--depth 1 --width 32 --heads 2 --seq 32 --batch 2 --steps 3 --quiet --seed %llu "
                 "--log %s %s", seed, log, variants[i]);
        int st = test_run_cli("train", args, out, sizeof out);
        if (st) fail_msg("train %s: status %d: %s", args, st, out);
        final_state_hash(log, hash[i]);
        /* the log's plan says which model ran */
        FILE *fp = fopen(log, "r");
        char line[16384];
        int says = 0;
        while (fp && fgets(line, sizeof line, fp)) says |= strstr(line, "\"gpu_model\":\"a100\"") != NULL;
        if (fp) fclose(fp);
        assert_int_equal(says, i == 1);
        unlink(log);
        print_message("train %s: state hash %s\n", variants[i], hash[i]);
    }
    assert_string_equal(hash[1], hash[2]);
    assert_string_not_equal(hash[0], hash[1]); /* twin */
}

/* compare: base native against gpu_model arms, then the cache. */
static void test_compare_arms(void **state)
{
    (void)state;
    TEST_REQUIRE_BIN();
    char dir[] = "/tmp/ulpscope_gpumodel_cmp_XXXXXX";
    if (!mkdtemp(dir)) fail_msg("mkdtemp");
    static char out[32768];
    char args[1024];
    const char *tiny = "--depth 1 --width 16 --heads 2 --seq 16 --batch 4 --steps 12 --lr 3e-3 --quiet --seeds 3";
    snprintf(args, sizeof args, "%s --arm a100=gpu_model=a100 --arm h100emu=gpu_model=h100 --results %s/res", tiny, dir);
    int st = test_run_cli("compare", args, out, sizeof out);
    print_message("%s", out);
    if (st) fail_msg("compare: status %d", st);
    assert_non_null(strstr(out, "\na100 "));
    assert_non_null(strstr(out, "\nh100emu "));
    assert_non_null(strstr(out, "12 runs (12 executed now, 0 from the cache)"));
    /* the same again: all cached */
    st = test_run_cli("compare", args, out, sizeof out);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "12 runs (0 executed now, 12 from the cache)"));
    /* arm a100 now on another model: its runs are new, the others cached */
    snprintf(args, sizeof args, "%s --arm a100=gpu_model=b200 --arm h100emu=gpu_model=h100 --results %s/res", tiny, dir);
    st = test_run_cli("compare", args, out, sizeof out);
    print_message("%s", out);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "12 runs (3 executed now, 9 from the cache)"));
    /* the base under --gpu-model a100: a run is keyed by its resolved plan,
     * not by arm names, so the base's runs are the first call's arm a100's
     * and h100emu's are h100emu's; the null arm (one flipped ulp of the a100
     * plan) is new */
    snprintf(args, sizeof args, "%s --gpu-model a100 --arm h100emu=gpu_model=h100 --results %s/res", tiny, dir);
    st = test_run_cli("compare", args, out, sizeof out);
    print_message("%s", out);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "9 runs (3 executed now, 6 from the cache)"));
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* ---- GPU ------------------------------------------------------------------------------- */

static void test_cuda_training(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    const unsigned long long seed = test_seed("gpu model cuda");
    char err[1024];
    ttrain_config c;
    tiny_config(&c, TMODEL_GPT2, "bf16", seed);
    c.steps = 3;
    c.backend = "cuda";
    ttrain_config m = c, e = c, cpu;
    if (tplan_set_gpu_model(&m.plan, TGPU_A100, err, sizeof err)) fail_msg("%s", err);
    tiny_set(&e, "matmul=bf16:mma.a100,attention=bf16:flash");
    ttrain_result native, model, expl, on_cpu, ref;
    run_ok(&c, &native);
    run_ok(&m, &model);
    run_ok(&e, &expl);
    cpu = m;
    cpu.backend = "cpu";
    run_ok(&cpu, &on_cpu);
    ttrain_config c32 = cpu;
    if (tplan_init(&c32.plan, "fp32", TMODEL_GPT2, err, sizeof err)) fail_msg("%s", err);
    run_ok(&c32, &ref);
    for (long s = 0; s < c.steps; s++) {
        print_message("step %ld: loss cuda native %.9f, cuda a100 %.9f, explicit %.9f, cpu a100 %.9f\n", s, native.loss[s],
                      model.loss[s], expl.loss[s], on_cpu.loss[s]);
        if (!same_bits(model.loss[s], expl.loss[s]) || !same_bits(model.grad_norm[s], expl.grad_norm[s]))
            fail_msg("cuda step %ld: --gpu-model a100 and matmul=bf16:mma.a100 differ", s);
    }
    assert_true(model.param_hash == expl.param_hash);
    assert_true(model.param_hash != native.param_hash); /* twin: the model ran, not cuBLAS */
    /* the GEMMs are the CPU's bits (test_train_mma.c checks them one by one);
     * the other kernels reduce in another order than the CPU's, so the first
     * step agrees within test_train.c's bound: twice the CPU's own distance
     * from the fp32 plan */
    double dl = fabs(model.loss[0] - on_cpu.loss[0]), bl = 2 * fabs(on_cpu.loss[0] - ref.loss[0]);
    print_message("step 0: |loss cuda-cpu| %.3g, bound %.3g\n", dl, bl);
    assert_true(dl <= bl);
    /* every GEMM site the CUDA backend binds runs the A100 model */
    tbackend *gpu = tbackend_cuda_create(err, sizeof err);
    if (!gpu) fail_msg("cuda backend: %s", err);
    if (tbackend_bind_plan(gpu, &m.plan, c.model.n_layer)) fail_msg("cuda: %s", tbackend_error(gpu));
    for (int s = 0; s < TSLOT_COUNT; s++)
        if (tslot_get((tslot)s)->gemm != TGEMM_NONE)
            for (int l = 0; l < (tslot_get((tslot)s)->per_layer ? c.model.n_layer : 1); l++) {
                const tsite *at = tbackend_site(gpu, (tslot)s, l);
                assert_int_equal(at->op, TOP_MATMUL_MMA);
                assert_int_equal(at->variant, TMMA_A100);
            }
    gpu->destroy(gpu);
    ttrain_result_free(&native), ttrain_result_free(&model), ttrain_result_free(&expl);
    ttrain_result_free(&on_cpu), ttrain_result_free(&ref);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_generation),
        cmocka_unit_test(test_paths_and_fallbacks),
        cmocka_unit_test(test_order),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_mixtures),
        cmocka_unit_test(test_cli_refusals),
        cmocka_unit_test(test_cpu_training_equals_explicit_sets),
        cmocka_unit_test(test_cli_training),
        cmocka_unit_test(test_compare_arms),
        cmocka_unit_test(test_cuda_training),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
