/* cli/experiment.h — what the commands that run training arms share
 * (compare, noise, bisect, trace): their options beside the training options, seed lists,
 * the trainer-backed runner with its validation windows and recipe, and the
 * JSON Lines output. */
#ifndef ULPSCOPE_CLI_EXPERIMENT_H
#define ULPSCOPE_CLI_EXPERIMENT_H

#include "cli/jobs.h"
#include "cli/train_options.h"
#include "studies/compare.h"
#include "studies/compare_train.h"

typedef struct {
    const char *seeds;        /* "N" (1..N), "A-B" or "A,B,C" */
    const char *vary;         /* both|init|data */
    const char *results_dir;
    const char *json_path;
    long val_tokens;          /* validation windows cover the split up to this many tokens */
    double alpha, power;
    int replicas;             /* runs of one arm at once (0: the backend's default, compare_train.h) */
    const char *shard;        /* "I/N": this process runs the I-th of N shares of the seeds (compare, noise) */
    int gpus;                 /* > 1: the shares run as that many processes, one per GPU (experiment_spread) */
    int jobs;                 /* > 1: the runs go to that many worker processes (cli/jobs.h) */
    const char *jobs_worker;  /* internal: this process is a --jobs worker on these pipes ("R,W") */
    const char *jobs_bug;     /* test-only: a planted pool mistake (jobs_bug) */
} experiment_options;

void experiment_options_defaults(experiment_options *e);

/* Parses a seed list; *seeds malloc'd.  Returns 0 or -1 with err. */
int experiment_parse_seeds(const char *spec, uint64_t **seeds, int *n, char *err, size_t errlen);

/* Fills the runner context from the finished training options: the base
 * config (validation batches over the split up to val_tokens, a curve of
 * about 8 points unless --val-every was given) and the recipe JSON
 * (*recipe malloc'd).  Returns 0 or BASE_EXIT_USAGE after an error line. */
int experiment_setup(const char *cmd, train_options *t, const experiment_options *e, cmp_vary vary,
                     cmp_train_ctx *ctx, char **recipe);

/* --shard I/N into c (shard, n_shards): it needs --results and a fixed seed
 * list, and writes no --json (the merge call judges).  0, or BASE_EXIT_USAGE
 * after an error line.  Without --shard: 0, nothing set. */
int experiment_shard(const char *cmd, const experiment_options *e, int until_decided, cmp_config *c);

/* --gpus N (N > 1): the seeds as N shards, run by N copies of this command
 * at once (argv as the command received it, with --shard I/N added and
 * --gpus and --json left out), copy I seeing only GPU I
 * (CUDA_VISIBLE_DEVICES: I, or the I-th of the devices this process may
 * use); all write into --results, from which the caller then judges.  It
 * needs --results and a fixed seed list.  0 once every copy succeeded;
 * BASE_EXIT_USAGE for bad settings; 1 naming the first copy that failed. */
int experiment_spread(const char *cmd, const experiment_options *e, int until_decided, int argc, char **argv);

/* --jobs N: a pool of N workers when N > 1 (*pool NULL otherwise), its
 * workers started at the first run.  argv as the command received it.  0,
 * or BASE_EXIT_USAGE after an error line (--plant-jobs-bug without --jobs,
 * a bad bug name, out of memory). */
int experiment_jobs(const char *cmd, const experiment_options *e, int argc, char **argv, const char *recipe,
                    jobs_pool **pool);

/* A shard's summary line (what it ran, where, how to merge). */
void experiment_print_shard(FILE *fp, const char *cmd, const cmp_config *c, const cmp_report *rep);

/* Writes the header, every run and every arm record to the --json output
 * (nothing when json_path is NULL).  Returns 0 or 1. */
int experiment_write_json(const char *cmd, const char *json_path, const char *recipe, const cmp_config *c,
                          const cmp_report *rep, void (*extra)(FILE *fp, void *ctx), void *extra_ctx);

/* The bad plan of bisect and trace: --bad OVERRIDES on the good plan
 * (t->cfg.plan, --plan/--set) or --bad-plan PRESET[,OVERRIDES], exactly one
 * of them, checked against the depth.  0, or BASE_EXIT_USAGE after an error
 * line. */
int experiment_bad_plan(const char *cmd, const train_options *t, const char *bad, const char *bad_plan, tplan *out);

/* --plant-truncation SLOT[@LAYER][:VARIANT] (a variant of the bad plan's op
 * there): the CPU backend's planted site (tbackend_cpu_plant_site; the caller
 * sets KBUG_TRUNCATE_OUTPUT for the runs).  0 or BASE_EXIT_USAGE. */
int experiment_plant(const char *cmd, const char *spec, const tplan *bad, int depth);

#endif
