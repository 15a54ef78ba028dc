/* studies/compare_train.h — compare's runner on the trainer: every job is
 * one training run (trainer/train.h) of its arm's plan at its seeds, on the
 * backend the shared settings name.  The runs of one arm (one plan) that a
 * call hands over go through the replica engine (ttrain_run_replicas) up to
 * `replicas` at a time: run r of a group gives the bits a single run with its
 * seeds gives, so the results do not depend on how the jobs were grouped,
 * only the time does.  A group the trainer refuses for its memory is halved
 * until it fits.
 *
 * The null arm's perturbation: after initialisation, the lowest stored bit
 * of one weight of the first layer's first matrix is flipped (in the
 * working copy and, when the plan keeps one, in the fp32 master): one ulp of
 * one weight, a draw from the same initial distribution to within rounding,
 * so whatever it changes at the end is chaos.
 *
 * Validation: every run of every arm is scored on the same windows, the
 * first `val_batches` batches of the validation split (compare sets them to
 * cover the split up to a token cap). */
#ifndef ULPSCOPE_STUDIES_COMPARE_TRAIN_H
#define ULPSCOPE_STUDIES_COMPARE_TRAIN_H

#include "kernels/kernels.h"
#include "studies/compare.h"
#include "trainer/train.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    ttrain_config base;            /* shared settings; plan, seeds, log, hooks are set per run */
    tplan plans[CMP_MAX_ARMS];     /* each arm's plan (the null arm: the base plan) */
    kbug planted[CMP_MAX_ARMS];    /* self-test: a planted bug the arm's runs carry (kernels.h; the CPU
                                      backend honours KBUG_TRUNCATE_OUTPUT), KBUG_NONE otherwise */
    /* each arm's plan switches (trainer/train.h: the plan changes before those steps), every run of the
     * arm the same; they replace the base's, and the caller keeps the override strings alive.  An arm's
     * identity must name its switches: two arms of one plan with other switches are other runs. */
    tswitch switches[CMP_MAX_ARMS][TTRAIN_MAX_SWITCHES];
    int n_switches[CMP_MAX_ARMS];
    FILE *progress;                /* one line per finished run; NULL: quiet */
    int replicas;                  /* runs of one arm at once in this process; 0: the backend's default */
} cmp_train_ctx;

/* Replicas per group when ctx->replicas is 0: enough to fill an H100 with the
 * small recipes compare is for; on the CPU the replicas share the cores, so
 * a few suffice to amortise the per-step overhead. */
#define CMP_TRAIN_REPLICAS_CUDA 64
#define CMP_TRAIN_REPLICAS_CPU 8
int cmp_train_default_replicas(const char *backend);

/* A runner over ctx (which must outlive it); its capacity is the replicas
 * per group. */
void cmp_train_runner(cmp_runner *r, cmp_train_ctx *ctx);

/* Binds every arm's plan to the backend the runs will use, so that an arm
 * the backend cannot run is refused before any run.  Returns 0, or -1 with
 * err naming the arm and the slot. */
int cmp_train_check_arms(const cmp_train_ctx *ctx, const cmp_arm *arms, int n_arms, char *err, size_t errlen);

/* The recipe: everything the runs of one comparison share, as a JSON object
 * (model, data identity, batch, schedule, optimizer, validation windows,
 * backend and device, vary mode), without the plans and seeds.  malloc'd;
 * NULL with err on failure (the data could not be opened). */
char *cmp_train_recipe(const ttrain_config *base, cmp_vary vary, uint64_t fixed_seed, char *err, size_t errlen);

/* Validation batches covering the validation split up to cap_tokens tokens
 * (at least 1); -1 with err when the data cannot be opened. */
int cmp_train_val_batches(const ttrain_config *base, long cap_tokens, int *batches, long *val_tokens, char *err,
                          size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
