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
    const char *preset, *model_name, *from_json;
    copt_list sets;
    int depth, explain, help;
} plan_options;

#define F(field) offsetof(plan_options, field)
static const copt plan_opts[] = {
    {"--plan", COPT_STRING, F(preset), 0, 0, "plan", "PRESET", "", NULL, 0},
    {"--model", COPT_STRING, F(model_name), 0, 0, "plan", "FAMILY", "", NULL, 0},
    {"--depth", COPT_INT, F(depth), 1, TPLAN_MAX_LAYERS, "plan", "L", "", NULL, 0},
    {"--set", COPT_LIST, F(sets), 0, 0, "plan", "OVERRIDES", "", NULL, 0},
    {"--from-json", COPT_STRING, F(from_json), 0, 0, "plan", "JSON", "", NULL, 0},
    {"--explain", COPT_FLAG, F(explain), 0, 0, "plan", NULL, "", NULL, 0},
    {"--help", COPT_FLAG, F(help), 0, 0, "plan", NULL, "", NULL, 0},
    {"-h", COPT_FLAG, F(help), 0, 0, "plan", NULL, "", NULL, 0},
};
#undef F

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: ulpscope plan [--plan PRESET] [--model gpt2|modern] [--depth L] [--set OVERRIDES]...\n"
            "                     [--explain] [--from-json JSON]\n\n"
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
            "  --from-json JSON  start from a plan JSON (as printed, or a result header's \"plan\"); it fixes\n"
            "                    the preset and the model (no --plan, --model)\n"
            "  --explain         print the table instead of the JSON\n",
            tplan_preset_names());
}

int cmd_plan(int argc, char **argv)
{
    plan_options o = {"bf16", "gpt2", NULL, {{0}, 0}, 2, 0, 0};
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
    int bad = o.from_json ? tplan_from_json(p, o.from_json, err, sizeof err) : tplan_init(p, o.preset, kind, err, sizeof err);
    for (int i = 0; i < o.sets.n && !bad; i++) bad = tplan_set(p, o.sets.items[i], err, sizeof err);
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
