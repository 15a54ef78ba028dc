/* fuzz/fuzz_checkpoint.c — checkpoints, read the way `train --resume` reads
 * them: tckpt_info_read for the header (model, plans, settings, state, all
 * checked as a fresh run's are), the memory the model would take
 * (tmodel_measure, what trun_check_memory weighs against the machine), a
 * CPU model built from the header, then tckpt_load of every tensor into it.
 *
 * Input: a checkpoint without its last 8 bytes, the FNV-1a 64 checksum,
 * which the target appends (as the writer does) so that mutations reach the
 * header and the tensors instead of stopping at the checksum; the corpus
 * holds real checkpoints cut that way (fuzz/make_corpus.sh).  A checksum
 * mismatch is covered by tests/test_checkpoint.c.
 *
 * Beyond not crashing: an accepted header holds a state a run can resume
 * from (the step loop starts at steps_done, the loss scale multiplies every
 * gradient), and a refusal says why.  This process stands for a machine of
 * FUZZ_MACHINE_BYTES: a model measured larger is not built, as a run would
 * be refused there (no real checkpoint of a model that size is this small,
 * so the tensors would be refused anyway). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/fuzz_util.h"
#include "trainer/train.h"

#define FUZZ_MACHINE_BYTES (256u << 20)

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

    tckpt_info *ck = malloc(sizeof *ck);
    if (!ck) abort();
    err[0] = '\0';
    if (tckpt_info_read(path, ck, err, sizeof err)) {
        FUZZ_REQUIRE(err[0], "checkpoint refused without a message");
        tckpt_info_free(ck);
        free(ck);
        return 0;
    }
    const tckpt_state *st = &ck->st;
    FUZZ_REQUIRE(st->steps_done >= 0 && st->steps_done <= ck->run.steps && st->good_steps >= 0 &&
                     st->good_steps <= st->steps_done,
                 "accepted a state no run can have: %ld of %ld steps done, %ld clean steps", st->steps_done,
                 ck->run.steps, st->good_steps);
    FUZZ_REQUIRE(st->loss_scale > 0 && st->loss_scale < INFINITY, "accepted loss scale %g", st->loss_scale);
    tbackend *be = tbackend_cpu_create();
    if (!be) abort();
    tmodel_memory mem;
    /* the smallest micro-batch a run can take: one sequence of one token */
    if (tmodel_measure(&ck->run.model, be, &ck->plan_now, 1, 1, &mem, err, sizeof err)) {
        FUZZ_REQUIRE(err[0], "model measure refused without a message");
    } else if (mem.total_bytes <= FUZZ_MACHINE_BYTES) {
        tmodel *m = tmodel_create(&ck->run.model, be, &ck->plan_now, 1, 1, &ck->run.seed, err, sizeof err);
        if (m) {
            err[0] = '\0';
            if (tckpt_load(path, m, err, sizeof err)) FUZZ_REQUIRE(err[0], "tensors refused without a message");
            tmodel_destroy(m);
        } else {
            FUZZ_REQUIRE(err[0], "model refused without a message");
        }
    }
    be->destroy(be);
    tckpt_info_free(ck);
    free(ck);
    return 0;
}
