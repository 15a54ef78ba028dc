/* fuzz/fuzz_plan_json.c — plan JSON (tplan_from_json: `plan --from-json`,
 * the plan inside a checkpoint, the runs of `compare`).
 *
 * Input: the JSON text.  Beyond not crashing: an accepted plan serialises
 * to the same canonical JSON again after a round trip, and a refused text
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
    tplan *plan = malloc(sizeof *plan), *before = malloc(sizeof *before), *back = malloc(sizeof *back);
    if (!plan || !before || !back) abort();
    char err[4096];
    FUZZ_REQUIRE(tplan_init(plan, "bf16", TMODEL_GPT2, err, sizeof err) == 0, "preset refused: %s", err);
    *before = *plan;
    char *text = fuzz_string(data, size);
    err[0] = '\0';
    if (tplan_from_json(plan, text, err, sizeof err) == 0) {
        char *json = tplan_json_alloc(plan);
        FUZZ_REQUIRE(json, "tplan_json_alloc failed");
        FUZZ_REQUIRE(tplan_from_json(back, json, err, sizeof err) == 0, "canonical JSON %s does not parse: %s", json, err);
        FUZZ_REQUIRE(tplan_equal(plan, back), "the plan read back from %s differs", json);
        char *again = tplan_json_alloc(back);
        FUZZ_REQUIRE(again && strcmp(json, again) == 0, "JSON not stable over a round trip: %s then %s", json,
                     again ? again : "(null)");
        free(again);
        free(json);
    } else {
        FUZZ_REQUIRE(err[0], "refused without a message");
        FUZZ_REQUIRE(memcmp(plan, before, sizeof *plan) == 0, "refused JSON changed the plan");
    }
    free(text);
    free(plan), free(before), free(back);
    return 0;
}
