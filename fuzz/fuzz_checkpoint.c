/* fuzz/fuzz_checkpoint.c — checkpoints, read the way `train --resume` reads
 * them (cli/train_options.c, trainer/train_ckpt.c): tckpt_peek for the model
 * configuration, plan and state, tplan_from_json and the layer check on the
 * plan, a CPU model built from that configuration, then tckpt_load of every
 * tensor into it.
 *
 * Input: a checkpoint without its last 8 bytes, the FNV-1a 64 checksum,
 * which the target appends (as the writer does) so that mutations reach the
 * header and the tensors instead of stopping at the checksum; the corpus
 * holds real checkpoints cut that way (fuzz/make_corpus.sh).  A checksum
 * mismatch is covered by tests/test_checkpoint.c.  Beyond not crashing: an
 * accepted checkpoint holds a state a run can resume from. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/fuzz_util.h"
#include "trainer/train.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned char *file = malloc(size + 8);
    if (!file) abort();
    memcpy(file, data, size);
    const uint64_t sum = ttrain_fnv1a(TTRAIN_FNV_OFFSET, data, size);
    memcpy(file + size, &sum, sizeof sum);
    char path[512], err[2048];
    fuzz_write_file(path, sizeof path, NULL, "run.ckpt", file, size + 8);
    free(file);

    tmodel_config cfg;
    tckpt_state st;
    char *json = NULL;
    tplan *plan = malloc(sizeof *plan);
    if (!plan) abort();
    err[0] = '\0';
    if (tckpt_peek(path, &cfg, &json, &st, err, sizeof err) || tplan_from_json(plan, json, err, sizeof err) ||
        tplan_check_layers(plan, cfg.n_layer, err, sizeof err)) {
        FUZZ_REQUIRE(err[0], "checkpoint refused without a message");
        free(json);
        free(plan);
        return 0;
    }
    free(json);
    /* what a resumed run indexes and divides by (the step loop starts at
     * steps_done; the loss scale multiplies every gradient) */
    FUZZ_REQUIRE(st.steps_done >= 0 && st.good_steps >= 0 && st.good_steps <= st.steps_done,
                 "accepted a state no run can have: %ld steps done, %ld clean steps", st.steps_done, st.good_steps);
    FUZZ_REQUIRE(st.loss_scale > 0 && st.loss_scale < INFINITY, "accepted loss scale %g", st.loss_scale);
    tbackend *be = tbackend_cpu_create();
    if (!be) abort();
    /* the smallest micro-batch a run can take: one sequence of one token */
    tmodel *m = tmodel_create(&cfg, be, plan, 1, 1, st.seed, err, sizeof err);
    if (m) {
        err[0] = '\0';
        if (tckpt_load(path, m, err, sizeof err)) FUZZ_REQUIRE(err[0], "checkpoint tensors refused without a message");
        tmodel_destroy(m);
    } else {
        FUZZ_REQUIRE(err[0], "model refused without a message");
    }
    be->destroy(be);
    free(plan);
    return 0;
}
