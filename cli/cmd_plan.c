/* cli/cmd_plan.c — `ulpscope plan`: build a numerics plan from a preset and
 * overrides, validate it against the kernel registry, and print it as JSON
 * or explained (every slot's path, variant and formats; every tensor's dtype). */
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "cli/commands.h"
#include "trainer/plan.h"

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: ulpscope plan [--plan PRESET] [--model gpt2|modern] [--set SLOT=PATH[:VARIANT],...]\n"
            "                     [--explain] [--from-json JSON]\n\n"
            "Prints the numerics plan as one JSON object (the form stored in result headers), or with\n"
            "--explain a table: each slot's op, path, variant and storage/compute formats, then the\n"
            "dtype of every tensor of the model.\n\n"
            "  --plan PRESET     %s (default bf16)\n"
            "  --model FAMILY    gpt2 (layernorm, gelu, AdamW) or modern (rmsnorm, rope, QK-norm, relu^2,\n"
            "                    Muon); decides which slots exist and which ops they run (default gpt2)\n"
            "  --set OVERRIDES   SLOT=PATH[:VARIANT], comma separated; SLOT may be a slot name, a glob\n"
            "                    ('attn.*', '*.wgrad') or an op name ('rmsnorm' = every rmsnorm slot).\n"
            "                    Repeatable; applied in order.\n"
            "  --from-json JSON  start from a plan JSON (as printed, or a result header's \"plan\")\n"
            "  --explain         print the table instead of the JSON\n",
            tplan_preset_names());
}

int cmd_plan(int argc, char **argv)
{
    const char *preset = "bf16", *model_name = "gpt2", *from_json = NULL;
    const char *sets[32];
    int n_sets = 0, explain = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has_value = i + 1 < argc;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--explain") == 0) {
            explain = 1;
        } else if (strcmp(a, "--plan") == 0 && has_value) {
            preset = argv[++i];
        } else if (strcmp(a, "--model") == 0 && has_value) {
            model_name = argv[++i];
        } else if (strcmp(a, "--from-json") == 0 && has_value) {
            from_json = argv[++i];
        } else if (strcmp(a, "--set") == 0 && has_value) {
            if (n_sets == (int)(sizeof sets / sizeof sets[0])) return base_error("plan", "too many --set options");
            sets[n_sets++] = argv[++i];
        } else {
            return base_error("plan", "unknown or incomplete option '%s' (options: --plan --model --set --from-json "
                                     "--explain --help)", a);
        }
    }
    tmodel_kind kind;
    if (tmodel_kind_parse(model_name, &kind)) return base_error("plan", "unknown model '%s' (models: gpt2, modern)", model_name);
    tplan p;
    char err[2048];
    if (from_json ? tplan_from_json(&p, from_json, err, sizeof err) : tplan_init(&p, preset, kind, err, sizeof err))
        return base_error("plan", "%s", err);
    for (int i = 0; i < n_sets; i++)
        if (tplan_set(&p, sets[i], err, sizeof err)) return base_error("plan", "%s", err);
    if (explain) {
        tplan_explain(&p, stdout);
    } else {
        char json[8192];
        tplan_to_json(&p, json, sizeof json);
        printf("%s\n", json);
    }
    return 0;
}
