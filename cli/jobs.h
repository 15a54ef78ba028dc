/* cli/jobs.h — `--jobs N` (compare, noise, bisect): the arms' runs in N
 * worker processes at once.
 *
 * A worker is this program re-executed (never a bare fork: the parent may
 * have initialised CUDA) with the parent's command line, less --jobs and
 * --json, plus the internal option --jobs-worker R,W naming its two pipes.
 * It parses and sets up exactly as the parent (the same recipe and base
 * config; a request under another recipe is refused), then serves requests
 * until the parent closes its pipe: a request carries one arm (its plan,
 * plan switches, planted bug, null-arm flag, name) and up to the replica capacity of its
 * jobs; the worker runs them with the trainer's runner (compare_train.h) and
 * answers with the cmp_run results.  Both ends are one binary, so requests
 * and answers are the structs' bytes.
 *
 * The pool's runner splits a call's jobs by arm, an arm's seeds into groups
 * of at most the replica capacity (more, smaller groups while workers would
 * sit idle), and hands them to idle workers: different arms run at once.
 * Grouping never changes a run's bits (compare_train.h), so the results are
 * those of --jobs 1.  Each finished group is reported to compare at once
 * (cmp_runner.finished), so it is cached when it ends.
 *
 * All workers use the devices the parent may use (the first, for the
 * trainer).  Their GPU work overlaps only under the CUDA MPS daemon
 * (nvidia-cuda-mps-control -d); without it the kernels of the processes
 * time-slice and only their host-side work overlaps.
 *
 * A worker that dies (killed, crashed) ends the call: the parent lets the
 * other workers finish what they hold, keeps every finished run, and fails
 * naming the worker, its arm and seeds.  A worker ends when its request pipe
 * closes (the parent ended, however), so none outlives it. */
#ifndef ULPSCOPE_CLI_JOBS_H
#define ULPSCOPE_CLI_JOBS_H

#include "studies/compare.h"
#include "studies/compare_train.h"

#define JOBS_MAX 64

/* The three option-table rows of a command that takes --jobs (F: the
 * including file's offsetof helper; the fields: the count, the worker's
 * pipes, the test-only planted bug). */
#define JOBS_OPTION_ROWS(cmd, jobs, worker, bug)                                                                    \
    {"--jobs", COPT_INT, F(jobs), 1, JOBS_MAX, cmd, "N",                                                            \
     "(1) worker processes running different arms at once; on one GPU their kernels overlap only under "          \
     "CUDA MPS (nvidia-cuda-mps-control -d)", NULL, 0},                                                           \
    {"--jobs-worker", COPT_STRING, F(worker), 0, 0, cmd, "R,W", "internal: a --jobs worker's pipes", NULL,          \
     COPT_HIDDEN},                                                                                                 \
    {"--plant-jobs-bug", COPT_STRING, F(bug), 0, 0, cmd, "base-plan|wrong-arm",                                    \
     "test-only: a planted mistake in the --jobs pool", NULL, COPT_HIDDEN}

/* Planted pool mistakes for the tests' twins (--plant-jobs-bug, hidden):
 * a request that carries the base plan instead of its arm's, and one that
 * carries the next arm of the call (plan, planted bug, null flag). */
typedef enum { JOBS_BUG_NONE = 0, JOBS_BUG_BASE_PLAN, JOBS_BUG_WRONG_ARM } jobs_bug;

typedef struct jobs_pool jobs_pool;

/* A pool of n_workers for command cmd (argv: the command's own, argv[0] the
 * command's name), started at its first run.  recipe: the parent's recipe
 * JSON (the workers must have set up the same).  NULL: out of memory. */
jobs_pool *jobs_pool_create(const char *cmd, int n_workers, int argc, char **argv, const char *recipe, jobs_bug bug);

/* A runner over the pool for the arms' plans in ctx (which must outlive the
 * calls): a call may hold every arm's jobs. */
void jobs_pool_runner(jobs_pool *p, cmp_train_ctx *ctx, cmp_runner *r);

/* bisect's runner hook (bisect_runner_fn) with the pool as its context. */
void jobs_pool_bisect_runner(cmp_runner *r, cmp_train_ctx *ctx, void *pool);

/* Closes the workers' pipes and waits for them.  NULL: nothing. */
void jobs_pool_free(jobs_pool *p);

/* The options every command with --jobs checks: --jobs-worker's pipes, the
 * planted bug's name.  0, or BASE_EXIT_USAGE after an error line. */
int jobs_parse_bug(const char *cmd, const char *name, jobs_bug *bug);

/* A worker's life after its set-up: serves the requests on the pipes spec
 * ("R,W") names with the trainer's runner on ctx until the parent closes the
 * request pipe.  Returns the exit status: 0 at that end, 1 when a pipe broke
 * or a request was malformed, BASE_EXIT_USAGE (after an error line) when
 * spec does not name this process's pipes (--jobs-worker is internal). */
int jobs_serve(const char *cmd, const char *spec, cmp_train_ctx *ctx, const char *recipe);

#endif
