/* cli/cmd_plan.c — `ulpscope plan`: build a numerics plan from a preset and
 * overrides, validate it against the kernel registry and a model depth, and
 * print it as JSON or explained (every slot's path, variant and formats,
 * the per-layer choices, every tensor's dtype). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "trainer/plan.h"

typedef struct {
    const char *preset, *model_name, *gpu_model, *from_json;
    copt_list sets;
    int depth, explain, help;
} plan_options;

#define F(field) offsetof(plan_options, field)
static const copt plan_opts[] = {
    {"--plan", COPT_STRING, F(preset), 0, 0, "plan", "PRESET", "", NULL, 0},
    {"--model", COPT_STRING, F(model_name), 0, 0, "plan", "FAMILY", "", NULL, 0},
    {"--depth", COPT_INT, F(depth), 1, TPLAN_MAX_LAYERS, "plan", "L", "", NULL, 0},
    {"--set", COPT_LIST, F(sets), 0, 0, "plan", "OVERRIDES", "", NULL, 0},
    {"--gpu-model", COPT_STRING, F(gpu_model), 0, 0, "plan", "GEN", "", NULL, 0},
    {"--from-json", COPT_STRING, F(from_json), 0, 0, "plan", "JSON", "", NULL, 0},
    {"--explain", COPT_FLAG, F(explain), 0, 0, "plan", NULL, "", NULL, 0},
    {"--help", COPT_FLAG, F(help), 0, 0, "plan", NULL, "", NULL, 0},
    {"-h", COPT_FLAG, F(help), 0, 0, "plan", NULL, "", NULL, 0},
};
#undef F

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: ulpscope plan [--plan PRESET] [--model gpt2|modern] [--depth L] [--gpu-model GEN]\n"
            "                     [--set OVERRIDES]... [--explain] [--from-json JSON]\n\n"
            "Prints the numerics plan as one JSON object (the form stored in result headers), or with\n"
            "--explain a table: each slot's op, path, variant and storage/compute formats, the per-layer\n"
            "choices that differ from their slot's row, then the dtype of every tensor of the model.\n\n"
            "  --plan PRESET     %s (default bf16)\n"
            "  --model FAMILY    gpt2 (layernorm, gelu, AdamW) or modern (rmsnorm, rope, QK-norm, relu^2,\n"
            "                    Muon); decides which slots exist and which ops they run (default gpt2)\n"
            "  --depth L         the model's layers, which layer selectors are checked against (default 2,\n"
            "                    as ulpscope train)\n"
            "  --set OVERRIDES   SLOT[@LAYERS]=PATH[:VARIANT], comma separated.  SLOT is a slot name, a glob\n"
            "                    ('attn.*', '*.wgrad') or an op name ('rmsnorm' = every rmsnorm slot).\n"
            "                    @LAYERS picks layers of a per-layer slot: one layer '@3' or a range '@0-2'\n"
            "                    (a glob or op name then applies to the per-layer slots it names; global\n"
            "                    slots such as lm_head, embedding or the optimizers take no selector).\n"
            "                    Examples: lm_head=fp8:fast  mlp.up@0=bf16  attn.*@11=fp8:fast  *@0=fp32\n"
            "                    mlp.up@0=bf16,mlp.up@11=bf16 (two layers).  Later overrides win; one\n"
            "                    without @LAYERS sets every layer of its slots.  Repeatable; applied in order.\n"
            "                    gpu_model=GEN is an item too (applied where it stands; see --gpu-model).\n"
            "  --gpu-model GEN   %s (default native).  Run the plan as GEN's code would: every GEMM\n"
            "                    slot on a tensor-core path (bf16, fp16, fp8, matmul_fast) becomes\n"
            "                    matmul_mma.GEN (fp8 on a100: the bf16 model; v100: fp16 only; fp8 refused\n"
            "                    on v100, h100, b200); fp32 GEMMs stay CUDA-core SGEMM (PyTorch's default:\n"
            "                    no TF32); kernels on this GPU's own matrix units without a GEN model are\n"
            "                    refused, naming what to use (attention flash_mma -> flash, matmul_block_fp8\n"
            "                    -> fp8, bf16 Muon -> optimizer.muon=fp32, split_k/split_epilogue -> fused).\n"
            "                    Applied after the preset and every --set, as a last --set gpu_model=GEN: it\n"
            "                    rewrites their choices (lm_head=fp8 becomes fp8:mma.GEN) or refuses one it\n"
            "                    cannot run (lm_head=bf16:mma.h100 under a100).  Items after a gpu_model=GEN\n"
            "                    item (and compare arms, --bad, --switch-at on such a plan) are read under\n"
            "                    it the same way.\n"
            "                    Other kernels: the arithmetic an sm_80 build runs; the algorithm cuBLAS\n"
            "                    picks on a real GEN (fp32 GEMMs) is not modelled.  --explain says so per slot.\n"
            "  --from-json JSON  start from a plan JSON (as printed, or a result header's \"plan\"); it fixes\n"
            "                    the preset and the model (no --plan, --model)\n"
            "  --explain         print the table instead of the JSON\n",
            tplan_preset_names(), tgpu_model_names());
}

int cmd_plan(int argc, char **argv)
{
    plan_options o = {"bf16", "gpt2", "native", NULL, {{0}, 0}, 2, 0, 0};
    copt_table table = {plan_opts, (int)(sizeof plan_opts / sizeof plan_opts[0]), &o};
    copt_seen seen;
    int status = copt_parse("plan", argc, argv, &table, 1, &seen);
    if (status) return status;
    if (o.help) {
        usage(stdout);
        return 0;
    }
    static const char *const fixed_by_json[] = {"--plan", "--model", NULL};
    const char *ignored = o.from_json ? copt_first_given(&seen, fixed_by_json) : NULL;
    if (ignored) return base_error("plan", "--from-json fixes the preset and the model; drop %s", ignored);
    tmodel_kind kind;
    if (tmodel_kind_parse(o.model_name, &kind))
        return base_error("plan", "unknown model '%s' (models: gpt2, modern)", o.model_name);
    tplan *p = malloc(sizeof *p);
    if (!p) return base_error("plan", "out of memory");
    char err[2048];
    tgpu_model gpu;
    if (tgpu_model_parse(o.gpu_model, &gpu)) {
        free(p);
        return base_error("plan", "unknown --gpu-model '%s' (models: %s)", o.gpu_model, tgpu_model_names());
    }
    int bad = o.from_json ? tplan_from_json(p, o.from_json, err, sizeof err) : tplan_init(p, o.preset, kind, err, sizeof err);
    for (int i = 0; i < o.sets.n && !bad; i++) bad = tplan_set(p, o.sets.items[i], err, sizeof err);
    /* after every --set, as ulpscope train applies it; native on a JSON
     * that has a model already is no change */
    if (!bad && gpu != TGPU_NATIVE) bad = tplan_set_gpu_model(p, gpu, err, sizeof err);
    if (!bad) bad = tplan_check_layers(p, o.depth, err, sizeof err);
    if (bad) {
        free(p);
        return base_error("plan", "%s", err);
    }
    if (o.explain) {
        tplan_explain(p, stdout);
    } else {
        char *json = tplan_json_alloc(p);
        if (json) printf("%s\n", json);
        free(json);
        if (!json) bad = base_error("plan", "out of memory");
    }
    free(p);
    return bad;
}
