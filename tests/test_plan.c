/* tests/test_plan.c — the numerics plan: presets, overrides, validation
 * against the kernel registry with errors that list the accepted names,
 * JSON round trips, explain, and `ulpscope plan` on the command line. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/activations.h"
#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/grad_norm.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/polar_express.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "test_util.h"
#include "trainer/plan.h"

static const char *const presets[] = {"fp32", "bf16", "fp16", "fp8"};

static void test_presets_valid(void **state)
{
    (void)state;
    char err[1024];
    for (int m = 0; m < TMODEL_COUNT; m++)
        for (int i = 0; i < 4; i++) {
            tplan p;
            assert_int_equal(tplan_init(&p, presets[i], (tmodel_kind)m, err, sizeof err), 0);
            assert_int_equal(tplan_validate(&p, err, sizeof err), 0);
            /* the slots each family has */
            assert_int_equal(p.used[TSLOT_ROPE], m == TMODEL_MODERN);
            assert_int_equal(p.used[TSLOT_MUON], m == TMODEL_MODERN);
            assert_int_equal(p.used[TSLOT_NORM_QK], m == TMODEL_MODERN);
            assert_true(p.used[TSLOT_ATTN_QKV_WGRAD] && p.used[TSLOT_WEIGHTS] && p.used[TSLOT_ALLREDUCE]);
        }
    tplan p;
    assert_int_equal(tplan_init(&p, "fp8", TMODEL_GPT2, err, sizeof err), 0);
    assert_int_equal(p.slot[TSLOT_MLP_UP].path, KPATH_FP8);
    assert_int_equal(p.slot[TSLOT_ATTN_QKV_WGRAD].path, KPATH_FP8);
    assert_int_equal(p.slot[TSLOT_NORM_MLP].path, KPATH_BF16);
    assert_int_equal(tplan_init(&p, "fp16", TMODEL_GPT2, err, sizeof err), 0);
    assert_int_equal(p.slot[TSLOT_LOSS_SCALE].variant, TLOSS_SCALE_DYNAMIC);
    assert_int_equal(tplan_init(&p, "bf16", TMODEL_GPT2, err, sizeof err), 0);
    assert_int_equal(p.slot[TSLOT_LOSS_SCALE].variant, TLOSS_SCALE_NONE);
    assert_int_equal(p.slot[TSLOT_GRAD_ACCUM].path, KPATH_FP32);
}

/* An error must name the bad value and list what is accepted. */
static void expect_error(tplan *p, const char *set, const char *bad, const char *accepted)
{
    char err[2048] = "";
    tplan before = *p;
    assert_int_equal(tplan_set(p, set, err, sizeof err), -1);
    if (!strstr(err, bad) || !strstr(err, accepted)) fail_msg("error for '%s' was: %s", set, err);
    assert_true(tplan_equal(p, &before)); /* left unchanged */
    assert_memory_equal(p, &before, sizeof before);
}

static void test_override_errors(void **state)
{
    (void)state;
    char err[1024];
    tplan p;
    assert_int_equal(tplan_init(&p, "bf16", TMODEL_GPT2, err, sizeof err), 0);
    expect_error(&p, "lm_hed=fp8", "lm_hed", "lm_head");                       /* unknown slot: lists slots */
    expect_error(&p, "lm_head=fp7", "fp7", "fp32, bf16, fp16, fp8");             /* unknown path */
    expect_error(&p, "lm_head=fp8:fastest", "fastest", "split_k");               /* unknown variant */
    expect_error(&p, "lm_head", "lm_head", "SLOT[@LAYERS]=PATH");              /* malformed */
    expect_error(&p, "rope=bf16", "rope", "norm.attn");                         /* not a gpt2 slot */
    expect_error(&p, "norm.mlp=bf16:nope", "nope", "two_pass");                 /* the registry's variants */
    expect_error(&p, "weights=fp32:sr", "sr", "bf16");                          /* trainer rule */
    expect_error(&p, "weights=fp16:mantissa_buffer", "mantissa_buffer", "bf16");
    expect_error(&p, "grad_accum=bf16", "grad_norm", "grad_accum=bf16,grad_norm=bf16");
    expect_error(&p, "activation=fp8", "activation", "GEMM");
    expect_error(&p, "weights=bf16:sr", "optimizer.adamw", "optimizer.adamw=bf16");
    expect_error(&p, "zzz*=fp32", "zzz*", "slots:");                            /* a glob matching nothing */
    /* a later item failing leaves earlier ones unapplied too */
    expect_error(&p, "mlp.up=fp32,mlp.down=fp9", "fp9", "fp16");
}

static void test_overrides_apply(void **state)
{
    (void)state;
    char err[1024];
    tplan p;
    assert_int_equal(tplan_init(&p, "bf16", TMODEL_MODERN, err, sizeof err), 0);
    /* op name: every rmsnorm slot; glob over names; sibling op of the GEMM family */
    assert_int_equal(tplan_set(&p, "rmsnorm=fp32,attn.*=fp32,lm_head=fp8:matmul_fast", err, sizeof err), 0);
    assert_int_equal(p.slot[TSLOT_NORM_ATTN].path, KPATH_FP32);
    assert_int_equal(p.slot[TSLOT_NORM_QK].path, KPATH_FP32);
    assert_int_equal(p.slot[TSLOT_NORM_FINAL].path, KPATH_FP32);
    assert_int_equal(p.slot[TSLOT_ATTN_QKV].path, KPATH_FP32);
    assert_int_equal(p.slot[TSLOT_ATTN_OUT_WGRAD].path, KPATH_FP32);
    assert_int_equal(p.slot[TSLOT_MLP_UP].path, KPATH_BF16);
    assert_int_equal(p.slot[TSLOT_LM_HEAD].path, KPATH_FP8);
    assert_string_equal(tplan_kop(&p, TSLOT_LM_HEAD)->name, "matmul_fast");
    char choice[160];
    tplan_choice_string(&p, TSLOT_LM_HEAD, choice, sizeof choice);
    assert_string_equal(choice, "fp8:matmul_fast.fused");
    assert_int_equal(tplan_set(&p, "lm_head=bf16:split_k", err, sizeof err), 0);
    tplan_choice_string(&p, TSLOT_LM_HEAD, choice, sizeof choice);
    assert_string_equal(choice, "bf16:split_k");
    assert_string_equal(tplan_kop(&p, TSLOT_LM_HEAD)->name, "matmul");
    /* the brief's example: an rmsnorm variant of the registry */
    assert_int_equal(tplan_set(&p, "rmsnorm=bf16:llama", err, sizeof err), 0);
    tplan_choice_string(&p, TSLOT_NORM_QK, choice, sizeof choice);
    assert_string_equal(choice, "bf16:llama");
    assert_int_equal(tplan_set(&p, "weights=bf16:sr,optimizer.adamw=bf16", err, sizeof err), 0);
    assert_int_equal(p.slot[TSLOT_WEIGHTS].variant, TWEIGHTS_SR);
}

static void test_json_round_trip(void **state)
{
    (void)state;
    char err[1024], json[8192], json2[8192];
    const char *sets[] = {NULL, "lm_head=fp8:matmul_fast,*.wgrad=fp32", "rmsnorm=fp32,layernorm=fp32",
                          "grad_accum=fp32:gemm_fp32", "allreduce=bf16:tree,loss_scale=fp32:dynamic"};
    for (int m = 0; m < TMODEL_COUNT; m++)
        for (int i = 0; i < 4; i++)
            for (size_t k = 0; k < sizeof sets / sizeof sets[0]; k++) {
                tplan p, q;
                assert_int_equal(tplan_init(&p, presets[i], (tmodel_kind)m, err, sizeof err), 0);
                if (sets[k] && tplan_set(&p, sets[k], err, sizeof err)) continue; /* not every set fits every family */
                int n = tplan_to_json(&p, json, sizeof json);
                assert_true(n > 0 && (size_t)n < sizeof json);
                if (tplan_from_json(&q, json, err, sizeof err)) fail_msg("%s: %s", json, err);
                assert_true(tplan_equal(&p, &q));
                tplan_to_json(&q, json2, sizeof json2);
                assert_string_equal(json, json2);
                /* twin: one slot changed must not compare equal */
                q.slot[TSLOT_MLP_DOWN].path = q.slot[TSLOT_MLP_DOWN].path == KPATH_FP32 ? KPATH_BF16 : KPATH_FP32;
                assert_false(tplan_equal(&p, &q));
            }
}

/* Rules between slots hold for the whole plan, not for each override in
 * turn: a plan tplan_set accepts must read back from its JSON, which lists
 * optimizer.adamw before weights (found by fuzz/fuzz_plan_set: the fp32
 * preset with weights=bf16:sr,optimizer.adamw=bf16 wrote JSON that was
 * refused, so a checkpoint of that run could not be resumed). */
static void test_json_rules_between_slots(void **state)
{
    (void)state;
    char err[1024], json[8192];
    const char *sets[] = {"weights=bf16:sr,optimizer.adamw=bf16", "optimizer.adamw=bf16,weights=bf16:sr",
                          "weights=fp16:sr,optimizer.adamw=fp16", "grad_norm=bf16,grad_accum=bf16"};
    for (int m = 0; m < TMODEL_COUNT; m++)
        for (size_t k = 0; k < sizeof sets / sizeof sets[0]; k++) {
            tplan p, q;
            assert_int_equal(tplan_init(&p, "fp32", (tmodel_kind)m, err, sizeof err), 0);
            if (tplan_set(&p, sets[k], err, sizeof err)) fail_msg("fp32 + '%s' refused: %s", sets[k], err);
            assert_int_equal(tplan_to_json(&p, json, sizeof json) < (int)sizeof json, 1);
            if (tplan_from_json(&q, json, err, sizeof err)) fail_msg("fp32 + '%s': %s refused: %s", sets[k], json, err);
            assert_true(tplan_equal(&p, &q));
        }
    /* twins: the rules are still checked, on the whole plan */
    tplan p, before;
    assert_int_equal(tplan_init(&p, "fp32", TMODEL_GPT2, err, sizeof err), 0);
    before = p;
    assert_int_equal(tplan_set(&p, "optimizer.adamw=bf16", err, sizeof err), -1);
    assert_non_null(strstr(err, "optimizer.adamw"));
    assert_memory_equal(&p, &before, sizeof p);
    assert_int_equal(tplan_set(&p, "grad_norm=bf16", err, sizeof err), -1);
    assert_non_null(strstr(err, "grad_accum"));
    assert_int_equal(tplan_set(&p, "weights=bf16:sr,optimizer.adamw=bf16", err, sizeof err), 0);
    tplan_to_json(&p, json, sizeof json);
    const char *sr = "\"weights\":\"bf16:sr\"", *master = "\"weights\":\"fp32:master\"";
    char *w = strstr(json, sr), edited[8192];
    assert_non_null(w);
    snprintf(edited, sizeof edited, "%.*s%s%s", (int)(w - json), json, master, w + strlen(sr));
    assert_int_equal(tplan_from_json(&before, edited, err, sizeof err), -1);
    if (!strstr(err, "optimizer.adamw")) fail_msg("%s refused for another reason: %s", edited, err);
}

static void test_json_errors(void **state)
{
    (void)state;
    char err[1024], json[8192];
    tplan p, q;
    assert_int_equal(tplan_init(&p, "bf16", TMODEL_GPT2, err, sizeof err), 0);
    tplan_to_json(&p, json, sizeof json);
    /* a missing slot: plans are explicit */
    char *cut = strstr(json, "\"attn.out\":\"bf16:fused\",");
    assert_non_null(cut);
    memmove(cut, cut + strlen("\"attn.out\":\"bf16:fused\","), strlen(cut + strlen("\"attn.out\":\"bf16:fused\",")) + 1);
    assert_int_equal(tplan_from_json(&q, json, err, sizeof err), -1);
    assert_non_null(strstr(err, "attn.out"));
    assert_int_equal(tplan_from_json(&q, "{\"preset\":\"bf16\",\"model\":\"gpt3\",\"slots\":{}}", err, sizeof err), -1);
    assert_non_null(strstr(err, "gpt3"));
    assert_int_equal(tplan_from_json(&q, "{\"preset\":\"bf16\"", err, sizeof err), -1);
    assert_int_equal(tplan_from_json(&q, "[1,2]", err, sizeof err), -1);
    tplan_to_json(&p, json, sizeof json);
    char *v = strstr(json, "\"mlp.up\":\"bf16:fused\"");
    memcpy(v + strlen("\"mlp.up\":\""), "fp7", 3);
    assert_int_equal(tplan_from_json(&q, json, err, sizeof err), -1);
    assert_non_null(strstr(err, "fp7"));
}

static char *explain_text(const tplan *p)
{
    FILE *fp = tmpfile();
    assert_non_null(fp);
    tplan_explain(p, fp);
    long n = ftell(fp);
    char *buf = malloc((size_t)n + 1);
    rewind(fp);
    assert_int_equal(fread(buf, 1, (size_t)n, fp), (size_t)n);
    buf[n] = '\0';
    fclose(fp);
    return buf;
}

static void test_explain(void **state)
{
    (void)state;
    char err[1024];
    tplan p;
    assert_int_equal(tplan_init(&p, "bf16", TMODEL_MODERN, err, sizeof err), 0);
    assert_int_equal(tplan_set(&p, "mlp.up=fp8,norm.mlp=fp32", err, sizeof err), 0);
    char *text = explain_text(&p);
    for (int s = 0; s < TSLOT_COUNT; s++)
        if (p.used[s] && !strstr(text, tslot_get((tslot)s)->name)) fail_msg("explain lacks slot %s", tslot_get((tslot)s)->name);
    /* the dtypes the overrides imply */
    assert_non_null(strstr(text, "x e4m3, W e4m3 (per-tensor scales)"));
    const char *row = strstr(text, "norm.mlp out");
    assert_non_null(row);
    assert_non_null(strstr(row, "fp32"));
    row = strstr(text, "mlp.up out (pre-activation)");
    assert_non_null(row);
    assert_true(strncmp(strstr(row, "bf16"), "bf16", 4) == 0); /* fp8 GEMMs write bf16 */
    assert_non_null(strstr(text, "parameters (master)"));
    assert_non_null(strstr(text, "{\"preset\":\"bf16\",\"model\":\"modern\""));
    free(text);
}

/* ---- per-layer choices ---------------------------------------------------------------- */

static const tslot_choice *at(const tplan *p, tslot s, int layer) { return tplan_choice_at(p, s, layer); }

static void test_layer_overrides(void **state)
{
    (void)state;
    char err[2048];
    tplan p;
    assert_int_equal(tplan_init(&p, "bf16", TMODEL_GPT2, err, sizeof err), 0);
    /* one layer of one slot; the slot's row and the other layers keep bf16 */
    assert_int_equal(tplan_set(&p, "mlp.up@0=fp32", err, sizeof err), 0);
    assert_int_equal(at(&p, TSLOT_MLP_UP, 0)->path, KPATH_FP32);
    assert_int_equal(at(&p, TSLOT_MLP_UP, 1)->path, KPATH_BF16);
    assert_int_equal(p.slot[TSLOT_MLP_UP].path, KPATH_BF16);
    assert_int_equal(at(&p, TSLOT_MLP_UP_DGRAD, 0)->path, KPATH_BF16); /* GEMM roles are slots of their own */
    /* a range, then a later override of one layer inside it wins */
    assert_int_equal(tplan_set(&p, "attn.out@1-3=fp32,attn.out@2=fp16", err, sizeof err), 0);
    assert_int_equal(at(&p, TSLOT_ATTN_OUT, 1)->path, KPATH_FP32);
    assert_int_equal(at(&p, TSLOT_ATTN_OUT, 2)->path, KPATH_FP16);
    assert_int_equal(at(&p, TSLOT_ATTN_OUT, 3)->path, KPATH_FP32);
    assert_int_equal(at(&p, TSLOT_ATTN_OUT, 0)->path, KPATH_BF16);
    /* a glob with a selector: per-layer slots it names, sibling ops too; globals untouched */
    assert_int_equal(tplan_set(&p, "attn.*@4=fp8:fast", err, sizeof err), 0);
    assert_int_equal(at(&p, TSLOT_ATTN_QKV, 4)->op, TOP_MATMUL_FAST);
    assert_int_equal(at(&p, TSLOT_ATTN_OUT_WGRAD, 4)->path, KPATH_FP8);
    assert_int_equal(at(&p, TSLOT_ATTN_QKV, 3)->op, TOP_MATMUL);
    /* '*' and an op name with a selector skip the global slots they match */
    assert_int_equal(tplan_set(&p, "*@5=fp32,layernorm@6=fp16", err, sizeof err), 0);
    for (int s = 0; s < TSLOT_COUNT; s++) {
        if (!p.used[s]) continue;
        kpath want = tslot_get((tslot)s)->per_layer ? KPATH_FP32 : p.slot[s].path;
        assert_int_equal(at(&p, (tslot)s, 5)->path, want);
    }
    assert_int_equal(at(&p, TSLOT_NORM_ATTN, 6)->path, KPATH_FP16);
    assert_int_equal(at(&p, TSLOT_NORM_MLP, 6)->path, KPATH_FP16);
    assert_int_equal(p.slot[TSLOT_NORM_FINAL].path, KPATH_BF16);
    assert_int_equal(p.slot[TSLOT_LM_HEAD].path, KPATH_BF16);
    /* an override without a selector sets every layer: the slot's layer choices go */
    assert_int_equal(tplan_set(&p, "mlp.up=fp16", err, sizeof err), 0);
    assert_int_equal(at(&p, TSLOT_MLP_UP, 0)->path, KPATH_FP16);
    assert_int_equal(at(&p, TSLOT_MLP_UP, 5)->path, KPATH_FP16);
    /* depth: every named layer must exist */
    assert_int_equal(tplan_check_layers(&p, 7, err, sizeof err), 0);
    assert_int_equal(tplan_check_layers(&p, 6, err, sizeof err), -1);
    assert_non_null(strstr(err, "@6"));
    assert_non_null(strstr(err, "0..5"));
    /* a choice equal to the slot's still names its layer */
    tplan q;
    assert_int_equal(tplan_init(&q, "bf16", TMODEL_GPT2, err, sizeof err), 0);
    assert_int_equal(tplan_set(&q, "mlp.up@9=bf16", err, sizeof err), 0);
    assert_int_equal(tplan_check_layers(&q, 9, err, sizeof err), -1);
    assert_non_null(strstr(err, "mlp.up@9"));
    /* equality is by choice: that plan equals the preset, a real difference does not */
    tplan r;
    assert_int_equal(tplan_init(&r, "bf16", TMODEL_GPT2, err, sizeof err), 0);
    assert_true(tplan_equal(&q, &r) && tplan_equal(&r, &q));
    assert_int_equal(tplan_set(&q, "mlp.up@9=fp32", err, sizeof err), 0);
    assert_false(tplan_equal(&q, &r));
    assert_false(tplan_equal(&r, &q));
}

static void test_layer_errors(void **state)
{
    (void)state;
    char err[1024];
    tplan p;
    assert_int_equal(tplan_init(&p, "bf16", TMODEL_MODERN, err, sizeof err), 0);
    expect_error(&p, "lm_head@0=fp8", "lm_head", "global");               /* a global slot named outright */
    expect_error(&p, "optimizer.muon@1=fp32", "optimizer.muon", "per-layer slots:");
    expect_error(&p, "lm_head*@0=fp32", "lm_head*", "needs a per-layer slot"); /* a glob naming globals only */
    expect_error(&p, "mlp.up@x=bf16", "@x", "SLOT@A-B");
    expect_error(&p, "mlp.up@=bf16", "@", "SLOT@L");
    expect_error(&p, "mlp.up@2-1=bf16", "@2-1", "SLOT@A-B");
    expect_error(&p, "mlp.up@-1=bf16", "@-1", "SLOT@L");
    expect_error(&p, "mlp.up@0-=bf16", "@0-", "SLOT@A-B");
    expect_error(&p, "mlp.up@1024=bf16", "@1024", "0..1023");
    expect_error(&p, "@0=bf16", "@0", "no slot");
    expect_error(&p, "mlp.up@0=fp9", "fp9", "fp32, bf16, fp16, fp8");
    expect_error(&p, "activation@0=fp8", "activation", "GEMM");            /* the trainer's rules per layer too */
    expect_error(&p, "norm.qk@0=fp8", "norm.qk", "no fp8 path");          /* and the registry's */
}

static void test_empty_overrides(void **state)
{
    (void)state;
    char err[1024];
    tplan p;
    assert_int_equal(tplan_init(&p, "bf16", TMODEL_GPT2, err, sizeof err), 0);
    expect_error(&p, "", "''", "empty override");
    expect_error(&p, ",,,", "',,,'", "empty override");
    expect_error(&p, "mlp.up=bf16,", "'mlp.up=bf16,'", "empty override");
    expect_error(&p, ",mlp.up=bf16", "',mlp.up=bf16'", "empty override");
    expect_error(&p, "*=fp32:", "empty variant", "fp32:");
    expect_error(&p, "mlp.up=", "mlp.up", "missing or malformed path");
    expect_error(&p, "=fp32", "'=fp32'", "malformed override");
    /* twin: the same items without the stray comma are accepted */
    assert_int_equal(tplan_set(&p, "mlp.up=bf16", err, sizeof err), 0);
}

static void test_layer_json(void **state)
{
    (void)state;
    char err[1024];
    static char json[TPLAN_JSON_MAX], json2[TPLAN_JSON_MAX];
    for (int m = 0; m < TMODEL_COUNT; m++) {
        tplan p, q;
        assert_int_equal(tplan_init(&p, "bf16", (tmodel_kind)m, err, sizeof err), 0);
        assert_int_equal(tplan_set(&p, "mlp.up@0-2=fp32,mlp.up@3=fp16,attn.*@5=fp8:fast,*@7=fp32,mlp.up@11=bf16", err,
                                   sizeof err), 0);
        tplan_to_json(&p, json, sizeof json);
        assert_non_null(strstr(json, "\"layers\":{"));
        assert_non_null(strstr(json, "\"mlp.up@0-2\":\"fp32:fused\"")); /* a run of layers in one key */
        if (tplan_from_json(&q, json, err, sizeof err)) fail_msg("%s: %s", json, err);
        assert_true(tplan_equal(&p, &q));
        tplan_to_json(&q, json2, sizeof json2);
        assert_string_equal(json, json2);
        assert_memory_equal(&p, &q, sizeof p); /* the same entries, not only the same choices */
        /* twin: one layer's choice changed must not compare equal */
        assert_int_equal(tplan_set(&q, "mlp.up@1=bf16", err, sizeof err), 0);
        assert_false(tplan_equal(&p, &q));
        /* keys in any order: "layers" first, preset and model after it */
        char *slots = strstr(json, "\"slots\""), *layers = strstr(json, ",\"layers\"");
        assert_non_null(slots);
        assert_non_null(layers);
        size_t ls = strlen(layers + 1) - 1; /* "layers":{...} without the closing brace of the plan */
        snprintf(json2, sizeof json2, "{%.*s,\"preset\":\"bf16\",\"model\":\"%s\",%.*s}", (int)ls, layers + 1,
                 tmodel_kind_name((tmodel_kind)m), (int)(layers - slots), slots);
        if (tplan_from_json(&q, json2, err, sizeof err)) fail_msg("%s: %s", json2, err);
        assert_true(tplan_equal(&p, &q));
    }
    /* a plan without "layers" (as written before per-layer slots) still reads */
    tplan p, q;
    assert_int_equal(tplan_init(&p, "fp8", TMODEL_GPT2, err, sizeof err), 0);
    tplan_to_json(&p, json, sizeof json);
    assert_null(strstr(json, "layers"));
    assert_int_equal(tplan_from_json(&q, json, err, sizeof err), 0);
    assert_true(tplan_equal(&p, &q));
    /* selectors belong in "layers", layer keys need one */
    char *bad = strstr(json, "\"mlp.up\":");
    snprintf(json2, sizeof json2, "%.*s\"mlp.up@0\"%s", (int)(bad - json), json, bad + strlen("\"mlp.up\""));
    assert_int_equal(tplan_from_json(&q, json2, err, sizeof err), -1);
    assert_non_null(strstr(err, "layers"));
    tplan_to_json(&p, json, sizeof json);
    snprintf(json + strlen(json) - 1, 64, ",\"layers\":{\"mlp.up\":\"fp32\"}}");
    assert_int_equal(tplan_from_json(&q, json, err, sizeof err), -1);
    assert_non_null(strstr(err, "SLOT@LAYERS"));
    tplan_to_json(&p, json, sizeof json);
    snprintf(json + strlen(json) - 1, 64, ",\"layers\":{\"lm_head@0\":\"fp32\"}}");
    assert_int_equal(tplan_from_json(&q, json, err, sizeof err), -1);
    assert_non_null(strstr(err, "global"));
}

static void test_layer_explain(void **state)
{
    (void)state;
    char err[1024];
    tplan p;
    assert_int_equal(tplan_init(&p, "bf16", TMODEL_MODERN, err, sizeof err), 0);
    /* a layer choice equal to its slot's is not a difference: nothing shown */
    assert_int_equal(tplan_set(&p, "mlp.up@3=bf16", err, sizeof err), 0);
    char *text = explain_text(&p);
    assert_null(strstr(text, "per-layer"));
    free(text);
    assert_int_equal(tplan_set(&p, "mlp.up@0-1=fp8,mlp.up@5=fp32,norm.qk@2=fp32", err, sizeof err), 0);
    text = explain_text(&p);
    const char *sec = strstr(text, "per-layer choices");
    assert_non_null(sec);
    const char *row = strstr(sec, "mlp.up@0-1 ");
    assert_non_null(row);
    assert_true(strncmp(row, "mlp.up@0-1       matmul           fp8   fused            x e4m3, W e4m3", 71) == 0);
    assert_non_null(strstr(sec, "mlp.up@5 "));
    assert_non_null(strstr(sec, "norm.qk@2 "));
    const char *tensors = strstr(sec, "\ntensor");
    assert_non_null(tensors);
    const char *equal_row = strstr(sec, "mlp.up@3");
    assert_true(!equal_row || equal_row > tensors); /* equal to the slot's row: not listed (the JSON has it) */
    /* the slot's own row keeps the slot's choice */
    row = strstr(text, "\nmlp.up ");
    assert_non_null(row);
    assert_non_null(strstr(row, "bf16"));
    free(text);
}

/* bisect's search space: every (slot, layer) where two plans differ, and
 * plans mixing them */
static void test_diff_apply(void **state)
{
    (void)state;
    char err[1024], name[64];
    tplan a, b, mix;
    enum { DEPTH = 3 };
    assert_int_equal(tplan_init(&a, "bf16", TMODEL_GPT2, err, sizeof err), 0);
    b = a;
    assert_int_equal(tplan_set(&b, "mlp.up=fp8,lm_head=fp8:fast,attn.qkv.wgrad@1=fp32", err, sizeof err), 0);
    tplan_unit u[64];
    int n = tplan_diff(&a, &b, DEPTH, u, 64);
    assert_int_equal(n, 5);
    const char *want[] = {"mlp.up@0", "mlp.up@1", "mlp.up@2", "lm_head", "attn.qkv.wgrad@1"};
    /* slot order: mlp.up (forward) before lm_head before the backward GEMMs */
    for (int i = 0; i < n; i++) {
        tplan_unit_string(&u[i], name, sizeof name);
        assert_string_equal(name, want[i]);
    }
    assert_int_equal(tplan_diff(&a, &a, DEPTH, u, 64), 0);
    assert_int_equal(tplan_diff(&a, &b, DEPTH, u, 2), 5); /* the count, even past max_units */
    /* all units: the other plan */
    n = tplan_diff(&a, &b, DEPTH, u, 64);
    assert_int_equal(tplan_apply_units(&a, &b, u, n, &mix, err, sizeof err), 0);
    assert_int_equal(tplan_diff(&mix, &b, DEPTH, u + 10, 50), 0);
    /* one unit: that layer's slot only */
    tplan_unit one = {TSLOT_MLP_UP, 1};
    assert_int_equal(tplan_apply_units(&a, &b, &one, 1, &mix, err, sizeof err), 0);
    assert_int_equal(tplan_choice_at(&mix, TSLOT_MLP_UP, 1)->path, KPATH_FP8);
    assert_int_equal(tplan_choice_at(&mix, TSLOT_MLP_UP, 0)->path, KPATH_BF16);
    assert_int_equal(tplan_choice_at(&mix, TSLOT_MLP_UP, 2)->path, KPATH_BF16);
    n = tplan_diff(&a, &mix, DEPTH, u, 64);
    assert_int_equal(n, 1);
    assert_true(u[0].slot == TSLOT_MLP_UP && u[0].layer == 1);
    /* the mixture round-trips through JSON with its per-layer choice */
    static char json[TPLAN_JSON_MAX];
    tplan back;
    tplan_to_json(&mix, json, sizeof json);
    assert_int_equal(tplan_from_json(&back, json, err, sizeof err), 0);
    assert_int_equal(tplan_diff(&mix, &back, DEPTH, u, 64), 0);
    /* a global unit */
    tplan_unit lm = {TSLOT_LM_HEAD, -1};
    assert_int_equal(tplan_apply_units(&a, &b, &lm, 1, &mix, err, sizeof err), 0);
    assert_int_equal(mix.slot[TSLOT_LM_HEAD].op, TOP_MATMUL_FAST);
    assert_int_equal(tplan_diff(&a, &mix, DEPTH, u, 64), 1);
    /* malformed units and mixtures the trainer refuses */
    tplan_unit wrong[] = {{TSLOT_LM_HEAD, 0}, {TSLOT_MLP_UP, -1}, {TSLOT_ROPE, 0}};
    for (int i = 0; i < 3; i++) assert_int_equal(tplan_apply_units(&a, &b, &wrong[i], 1, &mix, err, sizeof err), -1);
    tplan sr = a;
    assert_int_equal(tplan_set(&sr, "weights=bf16:sr,optimizer.adamw=bf16", err, sizeof err), 0);
    n = tplan_diff(&a, &sr, DEPTH, u, 64);
    assert_int_equal(n, 2);
    tplan_unit weights_only = {TSLOT_WEIGHTS, -1};
    assert_int_equal(tplan_apply_units(&a, &sr, &weights_only, 1, &mix, err, sizeof err), -1);
    assert_non_null(strstr(err, "optimizer.adamw"));
    /* plans of different families have no common units */
    tplan modern;
    assert_int_equal(tplan_init(&modern, "bf16", TMODEL_MODERN, err, sizeof err), 0);
    assert_int_equal(tplan_diff(&a, &modern, DEPTH, u, 64), -1);
}

/* The backends dispatch on variant enums: the registry must list each
 * variant at its enum's index.  Twin: a pair that does not match is seen. */
static int variant_at(top_id op, int index, const char *name)
{
    const kop *k = top_lookup(op);
    return k && index >= 0 && index < k->n_variants && strcmp(k->variants[index].name, name) == 0;
}

static void test_op_handles(void **state)
{
    (void)state;
    for (int op = TOP_NONE + 1; op < TOP_COUNT; op++) {
        const kop *k = top_lookup((top_id)op);
        if (!k) fail_msg("op %s is not registered", top_name((top_id)op));
        assert_string_equal(k->name, top_name((top_id)op));
        assert_int_equal(top_is_kernel((top_id)op), op < TOP_WEIGHTS);
    }
    assert_null(top_lookup(TOP_NONE));
    static const struct {
        top_id op;
        int index;
        const char *name;
    } used[] = {
        {TOP_LAYERNORM, KLAYERNORM_TWO_PASS, "two_pass"},   {TOP_LAYERNORM, KLAYERNORM_ONE_PASS, "one_pass"},
        {TOP_LAYERNORM, KLAYERNORM_SEQUENTIAL, "sequential"}, {TOP_RMSNORM, KRMSNORM_BLOCK_TREE, "block_tree"},
        {TOP_RMSNORM, KRMSNORM_SEQUENTIAL, "sequential"},   {TOP_RMSNORM, KRMSNORM_LLAMA, "llama"},
        {TOP_RMSNORM, KRMSNORM_NONE, "none"},               {TOP_ATTENTION, KATT_NAIVE, "naive"},
        {TOP_ATTENTION, KATT_FLASH, "flash"},               {TOP_ROPE, KROPE_FP32_ANGLE, "fp32_angle"},
        {TOP_CROSS_ENTROPY, KCE_TWO_PASS, "two_pass"},      {TOP_CROSS_ENTROPY, KCE_FP32_LOGITS, "fp32_logits"},
        {TOP_ADAMW, KADAMW_TORCH, "torch"},                 {TOP_MATMUL, KMATMUL_SPLIT_K, "split_k"},
        {TOP_MATMUL_FAST, KMATMUL_SPLIT_K, "split_k"},      {TOP_RELU2, KRELU2_STORE_GRAD, "store_grad"},
        {TOP_GELU_TANH, KGELU_TANH_TANHF, "tanhf"},         {TOP_GRAD_NORM, KGRADNORM_BLOCK_TREE, "block_tree"},
        {TOP_GRAD_NORM, KGRADNORM_SEQUENTIAL, "sequential"}, {TOP_POLAR_EXPRESS, KPE_WIDE_SPLIT, "wide_split"},
        {TOP_POLAR_EXPRESS, KPE_TALL_FUSED, "tall_fused"},  {TOP_POLAR_EXPRESS, KPE_TALL_SPLIT, "tall_split"},
        {TOP_MUON_NEWTON_SCHULZ, KPE_TALL_SPLIT, "tall_split"}, {TOP_POLAR_EXPRESS, KPE_SMALL_FUSED, "small_fused"},
        {TOP_POLAR_EXPRESS, KPE_SMALL_SPLIT, "small_split"},
        {TOP_WEIGHTS, TWEIGHTS_SR, "sr"},                   {TOP_WEIGHTS, TWEIGHTS_MANTISSA_BUFFER, "mantissa_buffer"},
        {TOP_GRAD_ACCUM, TGRAD_ACCUM_GEMM_FP32, "gemm_fp32"}, {TOP_ALLREDUCE, TALLREDUCE_TREE, "tree"},
        {TOP_LOSS_SCALE, TLOSS_SCALE_DYNAMIC, "dynamic"},
    };
    for (size_t i = 0; i < sizeof used / sizeof used[0]; i++)
        if (!variant_at(used[i].op, used[i].index, used[i].name))
            fail_msg("op %s: variant #%d is not %s", top_name(used[i].op), used[i].index, used[i].name);
    assert_false(variant_at(TOP_ATTENTION, KATT_NAIVE, "flash")); /* twin */
    assert_false(variant_at(TOP_RMSNORM, KRMSNORM_NONE, "llama"));
}

/* The slot table's facts agree with each other. */
static void test_slot_table(void **state)
{
    (void)state;
    int rows[64] = {0}, max_row = 0;
    for (int s = 0; s < TSLOT_COUNT; s++) {
        const tslot_info *d = tslot_get((tslot)s);
        assert_non_null(d->name);
        assert_non_null(d->summary);
        assert_true(tslot_op((tslot)s, TMODEL_GPT2) != TOP_NONE || tslot_op((tslot)s, TMODEL_MODERN) != TOP_NONE);
        if (d->gemm != TGEMM_NONE) {
            const tslot_info *f = tslot_get(d->forward);
            assert_int_equal(f->gemm, TGEMM_FORWARD);
            assert_int_equal(f->per_layer, d->per_layer);
            char name[64];
            snprintf(name, sizeof name, "%s%s", f->name,
                     d->gemm == TGEMM_DGRAD ? ".dgrad" : d->gemm == TGEMM_WGRAD ? ".wgrad" : "");
            assert_string_equal(d->name, name);
            assert_int_equal(tslot_is_gradient_gemm((tslot)s), d->gemm != TGEMM_FORWARD);
        }
        /* the slots that hold state are global */
        if (d->fixed != TFIXED_NO) assert_false(d->per_layer);
        for (int k = 0; k < TSLOT_TENSORS_MAX && d->tensors[k].row; k++) {
            int r = d->tensors[k].row;
            assert_true(r > 0 && r < 64);
            rows[r]++;
            if (r > max_row) max_row = r;
        }
    }
    for (int r = 1; r <= max_row; r++)
        if (rows[r] != 1) fail_msg("explain's tensor row %d appears %d times", r, rows[r]);
    /* every forward GEMM has its dgrad and wgrad */
    for (int s = 0; s < TSLOT_COUNT; s++) {
        if (tslot_get((tslot)s)->gemm != TGEMM_FORWARD) continue;
        int roles = 0;
        for (int t = 0; t < TSLOT_COUNT; t++)
            if (tslot_get((tslot)t)->gemm != TGEMM_NONE && tslot_get((tslot)t)->forward == (tslot)s)
                roles |= 1 << tslot_get((tslot)t)->gemm;
        assert_int_equal(roles, (1 << TGEMM_FORWARD) | (1 << TGEMM_DGRAD) | (1 << TGEMM_WGRAD));
    }
}

/* The fused head: the chunk variants name the sibling op linear_cross_entropy
 * (alone, or after its op name), read back from JSON, and explain says the
 * head's GEMM slots run inside it.  What cannot hold is refused, the plan
 * left unchanged, each with the reason and the fix.  Twins: the materialised
 * variants still name cross_entropy, and an accepted fused plan. */
static void test_fused_head(void **state)
{
    (void)state;
    char err[1024];
    tplan p, q;
    for (int m = 0; m < TMODEL_COUNT; m++) {
        assert_int_equal(tplan_init(&p, "bf16", (tmodel_kind)m, err, sizeof err), 0);
        assert_false(tplan_fused_head(&p));
        assert_int_equal(tplan_set(&p, "cross_entropy=bf16:online", err, sizeof err), 0);
        assert_int_equal(p.slot[TSLOT_CROSS_ENTROPY].op, TOP_CROSS_ENTROPY);
        assert_false(tplan_fused_head(&p));
        assert_int_equal(tplan_set(&p, "cross_entropy=bf16:chunk_128", err, sizeof err), 0);
        assert_int_equal(p.slot[TSLOT_CROSS_ENTROPY].op, TOP_LINEAR_CROSS_ENTROPY);
        assert_int_equal(p.slot[TSLOT_CROSS_ENTROPY].variant, KLCE_CHUNK_128);
        assert_true(tplan_fused_head(&p));
        char choice[160];
        tplan_choice_string(&p, TSLOT_CROSS_ENTROPY, choice, sizeof choice);
        assert_string_equal(choice, "bf16:linear_cross_entropy.chunk_128");
        assert_int_equal(tplan_set(&p, "cross_entropy=fp16:linear_cross_entropy.chunk_1024,lm_head*=fp16", err,
                                   sizeof err), 0);
        assert_int_equal(p.slot[TSLOT_CROSS_ENTROPY].variant, KLCE_CHUNK_1024);
        assert_int_equal(p.slot[TSLOT_CROSS_ENTROPY].path, KPATH_FP16);
        char *json = tplan_json_alloc(&p);
        assert_non_null(json);
        assert_int_equal(tplan_from_json(&q, json, err, sizeof err), 0);
        assert_true(tplan_equal(&p, &q));
        free(json);
    }
    assert_int_equal(tplan_init(&p, "bf16", TMODEL_GPT2, err, sizeof err), 0);
    /* each refusal names the problem and the fix */
    expect_error(&p, "cross_entropy=bf16:chunk_1024,lm_head=fp32", "lm_head is fp32:fused", "lm_head*=bf16");
    expect_error(&p, "cross_entropy=bf16:chunk_1024,lm_head.dgrad=bf16:split_k", "lm_head.dgrad is bf16:split_k",
                 "lm_head*=bf16");
    expect_error(&p, "cross_entropy=fp32:chunk_1024,lm_head*=fp32,lm_head.wgrad=fp32:fast",
                 "lm_head.wgrad is fp32:matmul_fast.fused", "lm_head*=fp32");
    expect_error(&p, "cross_entropy=bf16:chunk_1024,lm_head*=fp8", "no fp8 path", "lm_head*=bf16");
    expect_error(&p, "cross_entropy=fp8:chunk_1024", "linear_cross_entropy has no fp8 path", "bf16");
    expect_error(&p, "cross_entropy=bf16:chunk_1024,grad_accum=bf16,grad_norm=bf16", "grad_accum is bf16",
                 "grad_accum=fp32");
    expect_error(&p, "cross_entropy=bf16:chunk_1024,lm_head=bf16:mma.h100", "matmul_mma.h100", "cross_entropy=bf16");
    expect_error(&p, "cross_entropy=bf16:chunk_1024,gpu_model=a100", "no a100 model", "cross_entropy=bf16");
    expect_error(&p, "gpu_model=a100,cross_entropy=bf16:chunk_1024", "no a100 model", "cross_entropy=bf16");
    expect_error(&p, "cross_entropy=bf16:chunk_64", "chunk_64", "linear_cross_entropy[.chunk_1024|chunk_128]");
    /* the fp8 preset's head is fp8 GEMMs: refused until they are set to the fused op's path */
    assert_int_equal(tplan_init(&q, "fp8", TMODEL_GPT2, err, sizeof err), 0);
    expect_error(&q, "cross_entropy=bf16:chunk_1024", "lm_head is fp8:fused", "lm_head*=bf16");
    assert_int_equal(tplan_set(&q, "cross_entropy=bf16:chunk_1024,lm_head*=bf16", err, sizeof err), 0);
    /* fp32 under a GPU model: the plain fp32 GEMMs stay CUDA-core SGEMM, which the fused op runs */
    assert_int_equal(tplan_init(&q, "fp32", TMODEL_GPT2, err, sizeof err), 0);
    assert_int_equal(tplan_set(&q, "cross_entropy=fp32:chunk_128,gpu_model=h100", err, sizeof err), 0);
    /* explain: the head's GEMM slots run inside it, the logits are not stored, modern's transpose idles */
    for (int fused = 0; fused < 2; fused++) {
        assert_int_equal(tplan_init(&p, "bf16", TMODEL_MODERN, err, sizeof err), 0);
        if (fused) assert_int_equal(tplan_set(&p, "cross_entropy=bf16:chunk_1024", err, sizeof err), 0);
        char *text = NULL;
        size_t len = 0;
        FILE *fp = open_memstream(&text, &len);
        tplan_explain(&p, fp);
        fclose(fp);
        const char *inside = strstr(text, "computed inside cross_entropy (linear_cross_entropy)");
        assert_int_equal(inside != NULL, fused);
        assert_int_equal(strstr(text, "not stored (linear_cross_entropy)") != NULL, fused);
        assert_int_equal(strstr(text, "idle: linear_cross_entropy reads E") != NULL, fused);
        assert_int_equal(strstr(text, "per 1024-row chunk") != NULL, fused);
        free(text);
    }
}

/* `ulpscope plan` itself: output, exit status 2 and one line on bad input. */
static void test_cli(void **state)
{
    (void)state;
    TEST_REQUIRE_BIN();
    static char out[65536];
    assert_int_equal(test_run_cli("plan", "--plan fp8 --model modern", out, sizeof out), 0);
    assert_non_null(strstr(out, "\"mlp.up\":\"fp8:fused\""));
    assert_int_equal(test_run_cli("plan", "--explain --set lm_head=fp32", out, sizeof out), 0);
    assert_non_null(strstr(out, "lm_head "));
    assert_int_equal(test_run_cli("plan", "--plan fp9", out, sizeof out), 2);
    assert_non_null(strstr(out, "fp9"));
    assert_non_null(strstr(out, "fp32, bf16, fp16, fp8"));
    assert_null(strchr(strchr(out, '\n') + 1, '\n')); /* one line */
    assert_int_equal(test_run_cli("plan", "--set lm_head=fp8:fastest", out, sizeof out), 2);
    assert_non_null(strstr(out, "matmul_fast"));
    /* the issue's own example: 'fast' names the fast-accumulation sibling */
    assert_int_equal(
        test_run_cli("plan", "--model modern --set lm_head=fp8:fast,rmsnorm=bf16:llama", out, sizeof out), 0);
    assert_non_null(strstr(out, "\"lm_head\":\"fp8:matmul_fast.fused\""));
    assert_int_equal(test_run_cli("plan", "--model gpt3", out, sizeof out), 2);
    /* per-layer choices: shown by --explain, documented in --help */
    assert_int_equal(test_run_cli("plan", "--depth 4 --set mlp.up@3=fp32 --explain", out, sizeof out), 0);
    assert_non_null(strstr(out, "\nmlp.up@3 "));
    assert_int_equal(test_run_cli("plan", "--help", out, sizeof out), 0);
    assert_non_null(strstr(out, "SLOT[@LAYERS]=PATH[:VARIANT]"));
    assert_non_null(strstr(out, "mlp.up@0=bf16"));
    assert_non_null(strstr(out, "'@0-2'"));
    /* bad input: status 2 and one line naming the problem */
    const char *bad[][2] = {
        {"--plan fp8 --plan bf16", "--plan given twice"},
        {"--set lm_head=fp8 --explain --explain", "--explain given twice"},
        {"--from-json '{}' --model modern", "--from-json fixes the preset and the model; drop --model"},
        {"--from-json '{}' --plan fp8", "drop --plan"},
        {"--set lm_head@0=bf16", "slot lm_head is global"},
        {"--depth 4 --set mlp.up@4=fp32", "layer 4 is outside the model's layers 0..3"},
        {"--set mlp.up@2=fp32", "0..1 (depth 2)"},          /* the default depth is train's */
        {"--depth 0", "--depth needs an integer in 1..1024"},
        {"--depth 4294967297", "--depth needs an integer in 1..1024"},
        {"--set ''", "empty override in ''"},
        {"--set ',,,'", "empty override in ',,,'"},
        {"--set 'mlp.up=bf16,'", "empty override in 'mlp.up=bf16,'"},
        {"--set '*=fp32:'", "empty variant after ':'"},
        {"--set", "--set needs a value"},
        {"--bogus", "unknown option '--bogus'"},
        {"--set cross_entropy=bf16:chunk_1024,lm_head=fp32", "set lm_head*=bf16"},
        {"--plan fp8 --set cross_entropy=bf16:chunk_128", "linear_cross_entropy has no fp8 path"},
        {"--gpu-model a100 --set cross_entropy=bf16:chunk_128", "has no a100 model"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int st = test_run_cli("plan", bad[i][0], out, sizeof out);
        if (st != 2 || !strstr(out, bad[i][1])) fail_msg("'%s': status %d, output: %s", bad[i][0], st, out);
        assert_null(strchr(strchr(out, '\n') + 1, '\n'));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_presets_valid),   cmocka_unit_test(test_override_errors),
        cmocka_unit_test(test_overrides_apply), cmocka_unit_test(test_json_round_trip),
        cmocka_unit_test(test_json_errors),     cmocka_unit_test(test_explain),
        cmocka_unit_test(test_layer_overrides), cmocka_unit_test(test_layer_errors),
        cmocka_unit_test(test_empty_overrides), cmocka_unit_test(test_layer_json),
        cmocka_unit_test(test_layer_explain),   cmocka_unit_test(test_diff_apply),
        cmocka_unit_test(test_op_handles),      cmocka_unit_test(test_slot_table),
        cmocka_unit_test(test_cli),             cmocka_unit_test(test_json_rules_between_slots),
        cmocka_unit_test(test_fused_head),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
