/* fuzz/fuzz_plan_set.c — plan overrides (tplan_set: what `--set` and the
 * arms of `compare` go through) on every preset of both model families.
 *
 * Input: byte 0 picks the preset (bits 0-1) and the family (bit 2); the rest
 * is the override string.  Beyond not crashing: an accepted plan serialises
 * to JSON that parses back to an equal plan (checkpoints store plans that
 * way) and binds to any depth its layer choices fit; a refused override
 * leaves the plan unchanged and says why. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/fuzz_util.h"
#include "trainer/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const presets[] = {"fp32", "bf16", "fp16", "fp8"};
    static FILE *devnull;
    if (size < 1) return 0;
    if (!devnull && !(devnull = fopen("/dev/null", "w"))) abort();
    tplan *plan = malloc(sizeof *plan), *before = malloc(sizeof *before), *back = malloc(sizeof *back);
    if (!plan || !before || !back) abort();
    char err[4096];
    const tmodel_kind model = (data[0] >> 2) & 1 ? TMODEL_MODERN : TMODEL_GPT2;
    FUZZ_REQUIRE(tplan_init(plan, presets[data[0] & 3], model, err, sizeof err) == 0, "preset refused: %s", err);
    *before = *plan;
    char *overrides = fuzz_string(data + 1, size - 1);
    err[0] = '\0';
    if (tplan_set(plan, overrides, err, sizeof err) == 0) {
        char *json = tplan_json_alloc(plan);
        FUZZ_REQUIRE(json, "tplan_json_alloc failed");
        FUZZ_REQUIRE(tplan_from_json(back, json, err, sizeof err) == 0, "'%s' gave JSON %s that does not parse: %s",
                     overrides, json, err);
        FUZZ_REQUIRE(tplan_equal(plan, back), "'%s': the plan read back from %s differs", overrides, json);
        free(json);
        tplan_explain(plan, devnull);
        int depth = 1;
        for (int i = 0; i < plan->n_layer_choices; i++)
            if (plan->layer_choice[i].layer + 1 > depth) depth = plan->layer_choice[i].layer + 1;
        FUZZ_REQUIRE(tplan_check_layers(plan, depth, err, sizeof err) == 0, "depth %d: %s", depth, err);
        tbinding b;
        FUZZ_REQUIRE(tplan_bind(&b, plan, depth, err, sizeof err) == 0, "bind to depth %d: %s", depth, err);
        tbinding_free(&b);
    } else {
        FUZZ_REQUIRE(err[0], "'%s' refused without a message", overrides);
        FUZZ_REQUIRE(memcmp(plan, before, sizeof *plan) == 0, "refused '%s' changed the plan", overrides);
    }
    free(overrides);
    free(plan), free(before), free(back);
    return 0;
}
