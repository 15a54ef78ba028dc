/* studies/delta_debug.h — delta debugging with a noisy oracle: which of n
 * differences between a good and a bad configuration move the result.
 *
 * A *unit* is one difference (in `ulpscope bisect`: one slot x layer x GEMM
 * role where the good and the bad plan disagree).  A configuration is a
 * subset S of the units: the good configuration with the units of S switched
 * to their bad setting.  The oracle judges a batch of configurations with a
 * given number of samples (paired runs) each, and answers per configuration:
 *
 *   DD_SHIFT       S moves the result (a significant shift against the good
 *                  configuration),
 *   DD_EQUIVALENT  S provably does not move it by more than the margin,
 *   DD_UNDECIDED   neither, at this sample count.
 *
 * Searches (Zeller and Hildebrandt, "Simplifying and isolating failure-
 * inducing input", IEEE TSE 28(2), 2002; Verrou's verrou_dd, Fevotte and
 * Lathuiliere, "Debugging and optimization of HPC programs with the Verrou
 * tool", Correctness 2019):
 *
 *   ddmin    a 1-minimal failing subset of a failing set: every proper
 *            subset obtained by removing one unit no longer SHIFTs (relative
 *            to the oracle).
 *   rddmin   ddmin, set the culprit aside, repeat on the rest until the rest
 *            as a whole no longer SHIFTs ("the complement is clean"): finds
 *            several independent culprits, not just the first.
 *   srddmin  the sample schedule: a configuration that does not SHIFT at the
 *            first sample count is judged again at the next count before it
 *            is accepted as not failing (a SHIFT is accepted at once).  The
 *            oracle must keep its error rate under such repeated looks
 *            (an anytime-valid test, or alpha split over the schedule).
 *            A search makes tens of judgements, most of culprit-free
 *            configurations, so one false SHIFT can send ddmin to a wrong
 *            set: every culprit ddmin returns is therefore judged once more
 *            at the largest count and kept as *confirmed* only if it SHIFTs
 *            there; an unconfirmed set is set aside all the same (so the
 *            search goes on) and reported as such.
 *   ddmax    the largest subset that is EQUIVALENT (1-maximal: adding any
 *            other single unit breaks equivalence) — for bf16 vs fp8, "the
 *            largest fp8 plan that does not move the loss".
 *
 * Sanity configurations come first, as verrou_dd does: the empty set must
 * not SHIFT and the full set must SHIFT; otherwise the search stops and says
 * which one failed.  Verdicts are cached per (configuration, samples): no
 * configuration is judged twice at the same count.  Configurations of one
 * round of the search (all chunks, then all complements) go to the oracle as
 * one batch, so that it can run them in parallel. */
#ifndef ULPSCOPE_STUDIES_DELTA_DEBUG_H
#define ULPSCOPE_STUDIES_DELTA_DEBUG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DD_EQUIVALENT = 0, DD_SHIFT, DD_UNDECIDED } dd_verdict;
const char *dd_verdict_name(dd_verdict v); /* "EQUIVALENT", "SHIFT", "UNDECIDED" */

/* One configuration: units[0..n) switched to bad, sorted ascending. */
typedef struct {
    const int *units;
    int n;
} dd_config;

/* Judge configs[0..count) with `samples` samples each; write verdicts[i].
 * Returns 0, or -1 (the search stops and reports the oracle's failure). */
typedef int (*dd_oracle_fn)(void *ctx, const dd_config *configs, int count, int samples, dd_verdict *verdicts);

#define DD_MAX_SCHEDULE 8

/* Planted bugs for the tests' twins: a search that stops at the first
 * culprit without judging the rest (so a second culprit goes unseen). */
typedef enum { DD_BUG_NONE = 0, DD_BUG_STOP_AT_FIRST } dd_bug;

typedef struct {
    int n_units;
    int schedule[DD_MAX_SCHEDULE]; /* increasing sample counts, e.g. {4, 8, 16} */
    int n_schedule;                /* >= 1 */
    long max_judgements;           /* budget of oracle judgements (configuration x count); 0: none */
    dd_oracle_fn oracle;
    void *ctx;
    dd_bug planted_bug;            /* DD_BUG_NONE outside the tests */
} dd_problem;

typedef struct {
    /* rddmin */
    int n_culprits;
    int culprit_start[64];         /* culprit c is units[culprit_start[c] .. + culprit_len[c]) */
    int culprit_len[64];
    int culprit_confirmed[64];     /* SHIFT at the largest count of the schedule */
    int *culprit_units;            /* [n_units] */
    int *rest;                     /* the units outside every culprit, [n_rest] */
    int n_rest;
    dd_verdict rest_verdict;       /* the rest switched to bad, at the largest count */
    /* ddmax */
    int *clean;                    /* the largest EQUIVALENT subset found, [n_clean] */
    int n_clean;
    /* cost */
    long judgements;               /* oracle judgements made (cache misses) */
    long cache_hits;
    long samples;                  /* sum of samples over the judgements */
    /* how it ended */
    int sanity_failed;             /* 1: empty set SHIFTs; 2: full set does not SHIFT */
    int budget_exhausted;
    char error[256];
} dd_result;

void dd_result_init(dd_result *r);
void dd_result_free(dd_result *r);

/* rddmin with the sample schedule (srddmin).  Returns 0 (see r->sanity_failed
 * and r->budget_exhausted), or -1 when the oracle failed (r->error). */
int dd_rddmin(const dd_problem *p, dd_result *r);

/* ddmax over all units: a configuration passes when it is EQUIVALENT at some
 * count of the schedule before any count calls it SHIFT; UNDECIDED at the
 * largest count does not pass.  Returns 0 or -1 as dd_rddmin. */
int dd_ddmax(const dd_problem *p, dd_result *r);

#ifdef __cplusplus
}
#endif
#endif
