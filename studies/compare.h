/* studies/compare.h — do several numerics plans give different final
 * losses?  Arms x paired seeds, a null arm that measures the noise floor,
 * and a verdict per arm that a statistician would sign.
 *
 * Design.  Every arm runs the same seeds (common random numbers), so each
 * arm is judged on the paired differences d_s = L_arm(s) - L_base(s) of the
 * final validation loss.  The *null arm* is the base plan with a provably
 * neutral perturbation (one ulp of one initial weight flipped): its
 * differences are pure chaos, and their spread is the noise floor any
 * reordering lives with.  The equivalence margin defaults to the chaos sd of
 * one run, sd(d_null) / sqrt 2: a change that moves the mean final loss by
 * less than the spread that one flipped bit causes is practically no change.
 * (It is estimated from the same runs; the error rates below were measured
 * with that estimate in place: tests/test_compare.c.)  --margin fixes it.
 *
 * Verdict per arm (precision/stats.h):
 *   IDENTICAL   every pair is bit-identical (same final state hash and loss):
 *               no statistics needed;
 *   SHIFT       the paired t test rejects "no change" at alpha, Holm-adjusted
 *               over the user's arms (up: higher loss, i.e. worse);
 *   EQUIVALENT  the paired TOST shows |mean difference| < margin (Holm-
 *               adjusted likewise);
 *   UNDECIDED   neither, with the runs per arm still needed (a plug-in plan).
 * Reported beside it: the mean difference with its 1 - alpha interval,
 * Welch's unpaired test (what ignoring the pairing would give), Wilcoxon's
 * signed-rank p, and the Pitman-Morgan variance-ratio test (an arm can add
 * spread without moving the mean).
 *
 * Sequential mode (until_decided): seeds are added in batches and every arm
 * is judged by an anytime-valid confidence sequence (Lai's t-mixture) at
 * alpha / (number of arms) — Bonferroni, since Holm's step-down has no
 * anytime-valid form here — so looking after every batch keeps the error
 * rate at alpha.  The margin is fixed before the first look (given, or
 * estimated from the null arm's first batch and then frozen).
 *
 * The results directory is the cache: recipe.json (what every run shares:
 * the runs are only comparable under one recipe) and runs.jsonl (one line
 * per finished run, appended and flushed as each run ends).  An interrupted
 * compare resumes without rerunning what finished; a directory written under
 * another recipe is refused, naming the fields that differ.  Runs are keyed
 * by the arm's identity (its resolved plan and perturbation, not its name)
 * and seeds, so renaming an arm keeps its runs.
 *
 * Shards: the seed list cut into n contiguous shares; shard i runs every
 * arm's runs of share i only (pairs stay in one process) into the results
 * directory, in a runs file of its own (runs.shard-I-of-N.jsonl: shards on a
 * network file system never write one file), and judges nothing.  Loading
 * reads runs.jsonl and every shard's file, so a later call without a shard
 * over the whole list finds every run and judges: shards merge by directory.
 * Shards may run at once (a Slurm job array); each run is one write(2) of a
 * whole line, flushed and fsynced as it finishes. */
#ifndef ULPSCOPE_STUDIES_COMPARE_H
#define ULPSCOPE_STUDIES_COMPARE_H

#include <stdint.h>
#include <stdio.h>

#include "precision/stats.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CMP_MAX_ARMS 16
#define CMP_NAME_MAX 32

typedef enum { CMP_VARY_BOTH = 0, CMP_VARY_INIT, CMP_VARY_DATA } cmp_vary;
const char *cmp_vary_name(cmp_vary v);       /* "both", "init", "data" */
int cmp_vary_parse(const char *s, cmp_vary *out);

typedef struct {
    char name[CMP_NAME_MAX];
    const char *spec;      /* as the user wrote it (overrides, or a plan), for the report */
    const char *identity;  /* canonical identity of what the arm runs (resolved plan JSON and
                              perturbation): the cache key; arms with equal identities are refused */
    int is_null;           /* the null arm: base plan + one flipped ulp */
} cmp_arm;

/* One training run: arm x seed. */
typedef struct {
    int arm;
    uint64_t seed;         /* the pairing seed */
    uint64_t init_seed, data_seed;
} cmp_job;

#define CMP_MAX_CURVE 64

typedef struct {
    int status;            /* 0 finished; 3 stopped on a non-finite value; 1 failed */
    double final_val_loss;
    int n_curve;           /* validation points along the run, in step order */
    long curve_step[CMP_MAX_CURVE];
    double curve_val[CMP_MAX_CURVE];
    uint64_t state_hash;   /* every parameter and optimizer state byte at the end */
    double seconds;        /* wall time of the run (training + validation); runs done together as
                              replicas: their share, the group's wall time over its runs */
    char error[256];
} cmp_run;

/* What runs the jobs: the trainer's replica engine (compare_train.h), a
 * pool of worker processes running it (cli/jobs.h) or a simulation in the
 * tests.  run() executes jobs[0..n) — in parallel where it can — and fills
 * out[i]; it returns -1 only when it cannot go on at all (a run that failed
 * is reported through out[i].status; the reason it cannot go on is in
 * out[0].error).
 *
 * A runner whose jobs end at different times (the pool) reports each set of
 * finished jobs through finished(), which cmp_run_study sets for the call:
 * those runs are cached at once and kept when run() later returns -1 (a
 * worker died).  Jobs never reported are taken when run() returns 0. */
typedef struct cmp_runner {
    int (*run)(struct cmp_runner *r, const cmp_arm *arms, const cmp_job *jobs, int n, cmp_run *out);
    int capacity;          /* jobs it runs well in one call (>= 1); per_arm: runs of each arm */
    void *ctx;
    int per_arm;           /* the runner does each arm's jobs together (one plan at a time): a call
                              gets up to capacity seeds, every arm's runs of them */
    void (*finished)(struct cmp_runner *r, const int *which, int m); /* out[which[0..m)] are final; NULL
                              outside a run() call of cmp_run_study */
    void *finished_ctx;
} cmp_runner;

typedef struct {
    cmp_arm arms[CMP_MAX_ARMS]; /* arms[0] is the base */
    int n_arms;
    const uint64_t *seeds;      /* fixed mode: the seeds; sequential mode: ignored */
    int n_seeds;
    cmp_vary vary;
    uint64_t fixed_seed;        /* the seed that does not vary (vary = init or data) */
    double alpha;               /* 0.05 */
    double power;               /* 0.8: for "runs needed" */
    double margin;              /* 0: derived from the null arm */
    int until_decided;
    int max_runs;               /* sequential: total runs (all arms) at most */
    int batch;                  /* sequential: seeds per batch */
    uint64_t first_seed;        /* sequential: seeds first_seed, first_seed + 1, ... */
    const char *results_dir;    /* NULL: no cache */
    int shard, n_shards;        /* n_shards > 1: run shard `shard` (0-based) of the seeds only; no verdict */
    const char *recipe_json;    /* a JSON object: everything the runs share */
    FILE *progress;             /* a progress line per finished batch; NULL: none */
} cmp_config;

typedef enum { CMP_IDENTICAL = 0, CMP_SHIFT_UP, CMP_SHIFT_DOWN, CMP_EQUIVALENT, CMP_UNDECIDED, CMP_NO_DATA } cmp_verdict;
const char *cmp_verdict_name(cmp_verdict v); /* "IDENTICAL", "SHIFT up", "SHIFT down", "EQUIVALENT", "UNDECIDED", "NO DATA" */

typedef struct {
    int runs;                   /* finished runs of this arm */
    int failed;                 /* runs that stopped on a non-finite value or failed */
    double loss_mean, loss_sd;
    double time_mean, time_sd;
    /* against the base (not for arms[0]) */
    int pairs;                  /* seeds where both finished */
    int identical;              /* every pair bit-identical */
    stats_ttest paired;
    stats_ttest welch;
    double wilcoxon_p;
    stats_var_test spread;      /* Pitman-Morgan, arm over base */
    stats_tost tost;
    double correlation;         /* corr(base, arm) over the pairs: what pairing buys */
    double p_adjusted;          /* Holm over the user's arms (the null arm: unadjusted) */
    double tost_p_adjusted;
    stats_cs cs;                /* sequential mode: the confidence sequence at the end */
    cmp_verdict verdict;
    int within_margin;          /* a SHIFT whose interval also lies inside the margin */
    int runs_needed;            /* per arm, for a decision at this margin (UNDECIDED); 0: not reachable */
    char why[160];              /* one line when the arm has no verdict (too few pairs, failures) */
} cmp_arm_report;

typedef struct {
    cmp_arm_report arm[CMP_MAX_ARMS];
    int n_arms;
    double margin;              /* used */
    int margin_derived;         /* from the null arm */
    double seed_sd;             /* sd of the base arm's final loss over seeds */
    double chaos_sd;            /* sd(null - base) / sqrt 2: one run's chaos */
    int runs_total;             /* runs in the report (cached included) */
    int runs_executed;          /* runs this call executed */
    int runs_cached;
    int seeds_used;
    double seconds;             /* wall time of this call */
    int null_warning;           /* the null arm came out SHIFT: too few runs or a broken setup */
    int budget_exhausted;       /* sequential: stopped at max_runs with arms undecided */
    int sharded;                /* a shard's call: its share of the runs (runs, seeds), no verdicts */
    /* every run the report is built on: runs[a * n_seeds + s] (status 1 with
     * error "not run" where a cell was never filled); owned, cmp_report_free */
    cmp_run *runs;
    uint64_t *seeds;
} cmp_report;

void cmp_report_free(cmp_report *rep);

/* "I/N" with 0 <= I < N <= CMP_MAX_SHARDS: 0, else -1. */
#define CMP_MAX_SHARDS 100000
int cmp_shard_parse(const char *s, int *shard, int *n_shards);
/* Seeds [from, to) of the list of n_seeds are shard's share. */
void cmp_shard_range(int n_seeds, int shard, int n_shards, int *from, int *to);

/* Runs (or loads from the cache) every arm x seed, then judges.  Returns 0;
 * 2 for bad settings or a results directory of another recipe (err: one
 * line); 1 when the runner or the cache failed. */
int cmp_run_study(const cmp_config *c, cmp_runner *runner, cmp_report *rep, char *err, size_t errlen);

/* Judges runs already in memory: runs[a * n_seeds + s] for arm a and seed s
 * (what cmp_run_study does after running).  Fixed-n statistics only. */
int cmp_judge(const cmp_config *c, const cmp_run *runs, int n_seeds, cmp_report *rep, char *err, size_t errlen);

/* The table (modded-nanogpt record style) and a few lines on the noise floor. */
void cmp_print_table(FILE *fp, const cmp_config *c, const cmp_report *rep);

/* JSON Lines records: one "run" record per arm and seed (final loss, curve,
 * state hash, time, status), as the results directory stores them. */
void cmp_write_run_records(FILE *fp, const cmp_config *c, const cmp_report *rep);

/* JSON Lines records: one "arm" record per arm with every statistic above. */
void cmp_write_arm_records(FILE *fp, const cmp_config *c, const cmp_report *rep);

#ifdef __cplusplus
}
#endif
#endif
