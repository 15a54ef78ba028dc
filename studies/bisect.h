/* studies/bisect.h — which of the slots where a good and a bad plan differ
 * move the final loss?  Delta debugging (studies/delta_debug.h) with compare
 * (studies/compare.h) as the oracle.
 *
 * Units.  tplan_diff lists every (slot, layer) where the plans assign
 * differently; GEMM roles (forward, dgrad, wgrad) are slots of their own.
 * Units the trainer cannot switch alone (weights=bf16:sr needs its
 * optimizer in bf16; grad_norm must read grad_accum's format) are grouped
 * with the unit that makes them valid, and the search runs over the groups.
 *
 * Oracle.  Configuration S (good with the groups of S switched to bad) is
 * compared with good at n paired seeds: SHIFT when the paired t test rejects
 * at alpha / (schedule looks), EQUIVALENT when the TOST at the margin does,
 * else UNDECIDED; IDENTICAL runs are EQUIVALENT.  The margin is the chaos sd
 * the null arm measures at the largest count of the schedule (or --margin).
 * Every run lands in the results directory, so no configuration x seed runs
 * twice (the base's runs are shared by every judgement).
 *
 * A search makes tens of judgements: the per-judgement alpha must be small
 * (0.01 by default; tests/test_delta_debug.c measured what 0.05 does).
 *
 * Windows (windows = W >= 2): which part of training a culprit matters in.
 * The steps are cut into W windows, [w S / W, (w + 1) S / W) rounded down,
 * the last ending at S; for every culprit set the search found (confirmed
 * or not), W arms run against good at the largest count: good with the
 * culprit's units (whole groups) switched to bad's setting for that window
 * only, through the trainer's switch hook (tswitch: a switch to bad's
 * setting at the window's first step, one back to good's at its end).
 * Holm adjusts over the W arms of a culprit.  Cost: culprits x W x the
 * largest count runs.  A culprit whose units hold training state (the
 * trainer's fixed slots) cannot switch mid-run: its windows are skipped,
 * saying why.
 *
 * Refinement (refine, with a grouping coarser than units): each culprit set
 * of more than one unit is then searched unit by unit, a search of its own
 * whose bad plan is good with that set switched to bad.  It shares the
 * margin and the run cache: its sanity runs (good, the null arm, the set
 * itself) are the outer search's, so only its new configurations run. */
#ifndef ULPSCOPE_STUDIES_BISECT_H
#define ULPSCOPE_STUDIES_BISECT_H

#include <stdio.h>

#include "studies/compare.h"
#include "studies/compare_train.h"
#include "studies/delta_debug.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BISECT_MAX_UNITS 1024

/* Planted mistakes for the tests' twins (never set outside tests): an oracle
 * that ignores the noise floor (SHIFT whenever the mean paired difference is
 * not exactly 0), a search that stops at the first culprit without judging
 * the complement (DD_BUG_STOP_AT_FIRST), and window arms that drop their
 * switches and run the culprit from the first step to the last. */
typedef enum {
    BISECT_BUG_NONE = 0,
    BISECT_BUG_IGNORE_NOISE_FLOOR,
    BISECT_BUG_STOP_AT_FIRST,
    BISECT_BUG_WINDOWS_IGNORE_SWITCHES /* window arms run the culprit for the whole run */
} bisect_bug;

/* How the units are grouped for the search (--group-by).  A plan that
 * differs in every GEMM of a deep model has 12 units a layer: a search over
 * all of them costs hundreds of judgements when the effect is spread, so a
 * user can ask the coarse question first and bisect inside the culprit
 * afterwards (--bad with that group's units).  UNIT: each unit (and the
 * groups the trainer needs); LAYER: the units of one layer together (the
 * global slots, layer -1, one group); SLOT: a GEMM's three roles in every
 * layer together (mlp.up, mlp.up.dgrad and mlp.up.wgrad of all layers),
 * other slots each over its layers; ROLE: every forward GEMM, every dgrad,
 * every wgrad, other slots each alone. */
typedef enum { BISECT_GROUP_UNIT = 0, BISECT_GROUP_LAYER, BISECT_GROUP_SLOT, BISECT_GROUP_ROLE } bisect_grouping;
const char *bisect_grouping_name(bisect_grouping g); /* "unit", "layer", "slot", "role" */
int bisect_grouping_parse(const char *s, bisect_grouping *g); /* 0, or -1 for an unknown name */

/* A culprit's window arms and the runs' Holm adjustment share one study. */
#define BISECT_MAX_WINDOWS (CMP_MAX_ARMS - 1)

/* The runs behind every judgement: the trainer (cmp_train_runner) unless a
 * test puts a simulated trainer in its place. */
typedef void (*bisect_runner_fn)(cmp_runner *r, cmp_train_ctx *tc, void *ctx);

typedef struct {
    cmp_train_ctx train;        /* base config, plan = good; planted bugs apply to every arm */
    tplan good, bad;
    uint64_t first_seed;        /* a judgement at n samples pairs seeds first_seed .. first_seed + n - 1 */
    int schedule[DD_MAX_SCHEDULE];
    int n_schedule;
    double alpha;               /* per search (split over the schedule's looks) */
    double margin;              /* 0: measured by the null arm */
    int ddmax;                  /* also search the largest EQUIVALENT subset */
    bisect_grouping group_by;   /* BISECT_GROUP_UNIT: the finest */
    int windows;                /* 0: none; W in 2..min(steps, BISECT_MAX_WINDOWS): window arms per culprit */
    int refine;                 /* group_by coarser than UNIT: each culprit set searched again unit by unit */
    long max_judgements;
    const char *results_dir;    /* required: the run cache */
    const char *recipe_json;
    FILE *progress;             /* a line per batch of judgements; NULL: quiet */
    bisect_runner_fn runner;    /* NULL: the trainer */
    void *runner_ctx;
    bisect_bug planted_bug;     /* BISECT_BUG_NONE outside the tests */
} bisect_config;

/* One culprit's window arms. */
typedef struct {
    int culprit;                /* index into the culprit sets (0-based) */
    char why[512];              /* not empty: no window arm ran, for this reason */
    long from[BISECT_MAX_WINDOWS], to[BISECT_MAX_WINDOWS]; /* window w: steps [from, to) */
    char *to_bad, *to_good;     /* the switches' overrides: the culprit's units as bad, as good assign them */
    cmp_config cfg;             /* good, then window w as arm w + 1 */
    cmp_report rep;
    char *ids[CMP_MAX_ARMS];
    /* what arm w + 1 ran: its plan starts as good (window 0: the culprit switched on) and switches */
    tswitch switches[BISECT_MAX_WINDOWS][2];
    int n_switches[BISECT_MAX_WINDOWS];
} bisect_windows;

/* One culprit set searched unit by unit (refine). */
struct bisect_report;
typedef struct {
    int culprit;                /* index into the culprit sets (0-based) */
    int n_units;                /* the set's units */
    bisect_config *cfg;         /* the search inside it: group_by UNIT, bad = good with the set switched */
    struct bisect_report *rep;
} bisect_refinement;

typedef struct bisect_report {
    tplan_unit units[BISECT_MAX_UNITS];
    int n_units;
    int group_of[BISECT_MAX_UNITS];  /* unit -> group */
    int n_groups;
    dd_result dd;               /* over groups */
    double margin;
    double chaos_sd;
    cmp_config confirm_cfg;     /* the culprit sets, the rest and the ddmax set at the largest count */
    cmp_report confirm;         /* ... judged against good */
    char *confirm_ids[CMP_MAX_ARMS];
    bisect_windows *windows;    /* [n_windows]: one per culprit set when c->windows (malloc'd) */
    int n_windows;
    bisect_refinement *refined; /* [n_refined]: with refine, one per culprit set of more than one unit */
    int n_refined;
    int runs_executed, runs_cached;
    double seconds;             /* wall time of bisect_run */
} bisect_report;

/* Returns 0; 2 for bad settings (plans that do not differ, a unit that cannot
 * switch even in a group); 1 when training or the cache failed. */
int bisect_run(const bisect_config *c, bisect_report *rep, char *err, size_t errlen);
void bisect_report_free(bisect_report *rep);

/* "mlp.up@1 + mlp.up.dgrad@1" for group g */
void bisect_group_string(const bisect_report *rep, int g, char *buf, size_t len);
void bisect_print(FILE *fp, const bisect_config *c, const bisect_report *rep);
/* JSON Lines: one "culprit" record per culprit set (its groups, whether it
 * was confirmed, its effect against good at the largest count: diff, ci_lo,
 * ci_hi, p, verdict), with windows one "window" record per culprit and
 * window (culprit: the culprit record's index; window from 1; steps [a, b);
 * its effect likewise, p Holm-adjusted over the culprit's windows; why: null,
 * or the reason none ran), one "bisect" record (units, groups, group_by,
 * margin, noise floor, the rest — the clean complement — with its verdict,
 * bad_effect: the whole bad plan's effect when it did not SHIFT (sanity 2),
 * the ddmax set, windows, judgements, runs executed and cached, seconds).
 * With refine, each refined culprit's search comes first as the same
 * records, each with "refines": the culprit record's index; the outer
 * search's records follow, its "bisect" record counting them in "refined",
 * its runs including theirs (its judgements are its own search's). */
void bisect_write_records(FILE *fp, const bisect_config *c, const bisect_report *rep);
/* The confirmation arm of set `name` ("culprit1", "rest", "largest-clean",
 * "bad": the whole bad plan where it did not SHIFT),
 * or NULL when that set was not confirmed (none, or a duplicate plan). */
const cmp_arm_report *bisect_confirmed_arm(const bisect_report *rep, const char *name);

#ifdef __cplusplus
}
#endif
#endif
