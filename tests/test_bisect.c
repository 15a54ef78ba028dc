/* tests/test_bisect.c — `ulpscope bisect` (studies/bisect.h) end to end on
 * the CPU backend: a planted culprit hidden among equivalent units.
 *
 * The recipe (measured, not assumed: the test prints the figures): tiny gpt2,
 * depth 1, width 16, 2 heads, sequence 16, batch 4, 24 steps at lr 3e-3; the
 * bad plan switches ten matmul units to split_k (K in 4 fp32 slices: the
 * same product summed in another order, other bits in some of them) and the AdamW update to its torch variant, whose
 * stores truncate (KBUG_TRUNCATE_OUTPUT confined to that site): weights biased
 * toward zero at every update.  At 8 steps that bias was lost in the noise;
 * at 24 it shifts the final validation loss by 0.005 to 0.006 nats (paired
 * sd 0.0004 to 0.0017 over seeds), while the ten split_k units together move
 * it by about 1e-5 (the null arm's one-ulp chaos is about 1e-5).  The margin,
 * 0.001 nats, is the shift we call negligible: a fifth of the planted bias.
 * Seed schedule 3, 8: a clean configuration is EQUIVALENT at 3 seeds; one
 * with the culprit needs 8 for power (at 3, 6 the whole bad plan failed to
 * SHIFT in 1 of 40 surrogate searches).
 *
 * Real training: each search (about 60 to 110 runs of 0.1 s: 7 to 12 s on
 * this 2-core machine) must find the planted unit alone and confirmed, with a
 * clean complement (no SHIFT beyond the margin), and ddmax must return a clean
 * set that excludes it.  Ten such searches take about 100 s, more than a CI
 * test may, so `make test` runs 4 with fresh seeds, all of which must succeed,
 * and ULPSCOPE_BISECT_TRIALS=10 runs the statistic (>= 9 of 10) on
 * real training (measured: 10 of 10 in each of two such runs, 93 and 106 s).
 * Twin: the same search with an oracle that ignores the noise floor blames an
 * equivalent unit.
 *
 * The >= 9 of 10 statistic in every `make test`, and the twin that stops at
 * the first culprit without judging the complement (which can only fail
 * where there is a second culprit, and the CPU backend plants one site), run
 * on a surrogate: the whole bisect pipeline
 * (grouping, null arm, compare statistics, run cache, rddmin, ddmax,
 * confirmation) over a simulated trainer whose paired differences are drawn
 * with the shift and the paired sds the first real search measured (printed).
 * Ten trials each, random culprits among 20 units: one culprit and two must
 * be found in >= 9 of 10; the oracle that ignores the noise floor (one
 * culprit) and the search that stops at the first (two) must not.
 *
 * --group-by: on the surrogate at 3 layers (39 GEMM units), groups by layer,
 * slot and role hold only units that share the key, and searches under each
 * name the culprit's group alone in >= 9 of 10 trials; the oracle that
 * ignores the noise floor must not.
 *
 * Windows (--windows): the surrogate's culprit moves the loss only while it
 * is on in the last quarter of the steps (the trainer's switches applied
 * step by step to the arm's plan); with 4 windows the last must be SHIFT and
 * the other three not in >= 9 of 10 trials, and the twin whose window arms
 * drop their switches must fail that.  On real training (the planted
 * culprit alone, validation after every step) each window's runs must part
 * from the culprit's and good's runs exactly after step 12, a replica group's
 * runs must be single runs' bits, and a second call must run nothing. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "kernels/registry.h"
#include "precision/rng.h"
#include "studies/bisect.h"
#include "trainer/backend.h"
#include "tests/test_util.h"

/* the ten equivalent units of the real searches, then the culprit */
#define EQUIVALENT_UNITS                                                                                              \
    "attn.qkv=bf16:split_k,attn.out=bf16:split_k,mlp.up=bf16:split_k,mlp.down=bf16:split_k,lm_head=bf16:split_k,"    \
    "attn.qkv.dgrad=bf16:split_k,attn.out.dgrad=bf16:split_k,mlp.up.dgrad=bf16:split_k,"                               \
    "mlp.down.dgrad=bf16:split_k,lm_head.dgrad=bf16:split_k"
#define CULPRIT "optimizer.adamw=fp32:torch"
/* the surrogate's 20 units: every matmul role split_k, the norms and the gradient norm sequential, AdamW torch */
#define SURROGATE_UNITS                                                                                               \
    "attn.*=bf16:split_k,mlp.*=bf16:split_k,lm_head*=bf16:split_k,norm.*=bf16:sequential,"                            \
    "grad_norm=fp32:sequential,optimizer.adamw=fp32:torch"

/* what the first real search measured, for the surrogate */
static struct {
    int measured;
    double shift, sd_culprit, sd_clean, chaos_sd, seed_sd, base_loss;
} calib;

static char results_root[64];

static int setup(void **state)
{
    (void)state;
    snprintf(results_root, sizeof results_root, "/tmp/ulpscope_bisect_test_XXXXXX");
    return mkdtemp(results_root) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", results_root);
    return system(cmd) == 0 ? 0 : -1;
}

/* The recipe's training settings at `depth` layers, the good plan (bf16
 * preset) and the bad one. */
static void recipe_at(bisect_config *c, const char *bad_overrides, int depth, char **recipe_json);

/* ... at one layer */
static void recipe(bisect_config *c, const char *bad_overrides, char **recipe_json)
{
    recipe_at(c, bad_overrides, 1, recipe_json);
}

static void recipe_at(bisect_config *c, const char *bad_overrides, int depth, char **recipe_json)
{
    char err[1024];
    memset(c, 0, sizeof *c);
    ttrain_config *t = &c->train.base;
    ttrain_config_defaults(t);
    t->backend = "cpu";
    t->model.n_layer = depth;
    t->model.n_embd = 16;
    t->model.n_head = 2;
    t->model.seq_len = 16;
    t->seq = 16;
    t->batch = 4;
    t->steps = 24;
    t->lr = 3e-3;
    t->val_every = 0;
    long val_tokens;
    /* every run scores the same windows: 2048 validation tokens */
    if (cmp_train_val_batches(t, 2048, &t->val_batches, &val_tokens, err, sizeof err)) fail_msg("%s", err);
    if (tplan_init(&c->good, "bf16", t->model.kind, err, sizeof err)) fail_msg("%s", err);
    c->bad = c->good;
    if (tplan_set(&c->bad, bad_overrides, err, sizeof err)) fail_msg("%s", err);
    t->plan = c->good;
    *recipe_json = cmp_train_recipe(t, CMP_VARY_BOTH, 0, err, sizeof err);
    if (!*recipe_json) fail_msg("%s", err);
    c->recipe_json = *recipe_json;
    c->n_schedule = 2;
    c->schedule[0] = 3;
    c->schedule[1] = 8;
    c->alpha = 0.01;
    c->margin = 0.001;
    c->ddmax = 1;
    c->max_judgements = 1000;
}

static int unit_is(const bisect_report *rep, int group, tslot slot, int layer)
{
    for (int i = 0; i < rep->n_units; i++)
        if (rep->group_of[i] == group && (rep->units[i].slot != slot || rep->units[i].layer != layer)) return 0;
    for (int i = 0; i < rep->n_units; i++)
        if (rep->group_of[i] == group) return 1;
    return 0;
}

static int set_has_unit(const bisect_report *rep, const int *groups, int n, tslot slot, int layer)
{
    for (int i = 0; i < n; i++)
        if (unit_is(rep, groups[i], slot, layer)) return 1;
    return 0;
}

/* Found: every planted unit is a culprit set of its own, confirmed; no other
 * culprit is confirmed; the complement was judged and does not SHIFT. */
static int found(const bisect_report *rep, const tplan_unit *planted, int n_planted)
{
    const dd_result *d = &rep->dd;
    if (d->sanity_failed || d->budget_exhausted || d->rest_verdict == DD_SHIFT) return 0;
    int confirmed = 0, hits = 0;
    for (int k = 0; k < d->n_culprits; k++) {
        if (!d->culprit_confirmed[k]) continue;
        confirmed++;
        for (int p = 0; p < n_planted; p++)
            hits += d->culprit_len[k] == 1 &&
                    unit_is(rep, d->culprit_units[d->culprit_start[k]], planted[p].slot, planted[p].layer);
    }
    if (confirmed != n_planted || hits != n_planted) return 0;
    /* the rest at the largest count, from bisect's own confirmation: a SHIFT
     * whose interval lies inside the margin is detectable but negligible */
    const cmp_arm_report *rest = bisect_confirmed_arm(rep, "rest");
    return !rest || (rest->verdict != CMP_SHIFT_UP && rest->verdict != CMP_SHIFT_DOWN) || rest->within_margin;
}

/* ddmax: a clean set of most units without any planted one */
static int ddmax_ok(const bisect_report *rep, const tplan_unit *planted, int n_planted)
{
    const dd_result *d = &rep->dd;
    for (int p = 0; p < n_planted; p++)
        if (set_has_unit(rep, d->clean, d->n_clean, planted[p].slot, planted[p].layer)) return 0;
    return d->n_clean >= rep->n_groups - n_planted - 2;
}

/* The window study of the culprit set that holds unit u, or NULL. */
static const bisect_windows *windows_of(const bisect_report *rep, tplan_unit u)
{
    const dd_result *d = &rep->dd;
    for (int k = 0; k < rep->n_windows; k++) {
        int culprit = rep->windows[k].culprit;
        if (set_has_unit(rep, d->culprit_units + d->culprit_start[culprit], d->culprit_len[culprit], u.slot, u.layer))
            return &rep->windows[k];
    }
    return NULL;
}

/* ---- real training --------------------------------------------------------------------- */

static int real_search(bisect_config *c, uint64_t first_seed, const char *dir, bisect_report *rep)
{
    char err[1024];
    c->first_seed = first_seed;
    c->results_dir = dir;
    for (int a = 0; a < CMP_MAX_ARMS; a++) c->train.planted[a] = KBUG_TRUNCATE_OUTPUT;
    const kop *adamw = tplan_kop(&c->bad, TSLOT_ADAMW);
    assert_non_null(adamw);
    tbackend_cpu_plant_site(TSLOT_ADAMW, -1, kregistry_variant(adamw, "torch"));
    int rc = bisect_run(c, rep, err, sizeof err);
    tbackend_cpu_plant_site(-1, -1, -1);
    if (rc) fail_msg("bisect_run: %d: %s", rc, err);
    return rc;
}

static void print_search(const char *what, const bisect_config *c, const bisect_report *rep)
{
    print_message("%s (seeds from %llu):\n", what, (unsigned long long)c->first_seed);
    bisect_print(stdout, c, rep);
}

static void test_real_training(void **state)
{
    (void)state;
    uint64_t seed = test_seed("test_real_training");
    bisect_config *c = malloc(sizeof *c);
    assert_non_null(c);
    char *recipe_json = NULL;
    recipe(c, EQUIVALENT_UNITS "," CULPRIT, &recipe_json);
    const tplan_unit planted = {TSLOT_ADAMW, -1};
    /* 4 searches in `make test`; ULPSCOPE_BISECT_TRIALS=10 runs the issue's
     * statistic on real training (about 100 s here).  A tenth may miss. */
    int trials = 4;
    const char *env = getenv("ULPSCOPE_BISECT_TRIALS");
    if (env && (atoi(env) < 1 || atoi(env) > 100)) fail_msg("ULPSCOPE_BISECT_TRIALS=%s: 1..100", env);
    if (env) trials = atoi(env);
    char (*dir)[128] = malloc((size_t)trials * sizeof *dir);
    uint64_t *first = malloc((size_t)trials * sizeof *first);
    assert_non_null(dir);
    assert_non_null(first);
    int hits = 0, ddmax_found = 0;
    long runs = 0;
    double seconds = 0;
    for (int t = 0; t < trials; t++) {
        snprintf(dir[t], sizeof dir[t], "%s/real%d", results_root, t);
        assert_int_equal(mkdir(dir[t], 0700), 0);
        first[t] = 1 + (seed + (uint64_t)t * 0x9e3779b97f4a7c15ull) % 1000000000ull;
        bisect_report rep;
        real_search(c, first[t], dir[t], &rep);
        if (t == 0) print_search("real training, trial 1", c, &rep);
        assert_int_equal(rep.n_units, 11);
        const cmp_arm_report *culprit = bisect_confirmed_arm(&rep, "culprit1");
        const cmp_arm_report *rest = bisect_confirmed_arm(&rep, "rest");
        int ok = found(&rep, &planted, 1), clean_ok = ddmax_ok(&rep, &planted, 1);
        hits += ok;
        ddmax_found += clean_ok;
        runs += rep.runs_executed;
        seconds += rep.seconds;
        print_message("trial %d (seeds from %llu): %s, ddmax %s; planted shift %+.5f (paired sd %.5f), the rest %+.6f "
                      "(paired sd %.6f), null-arm chaos sd %.6f; %ld judgements, %d runs executed (%d from the cache), "
                      "%.1f s\n",
                      t + 1, (unsigned long long)first[t], ok ? "found alone" : "NOT found alone",
                      clean_ok ? "excludes it" : "DOES NOT exclude it", culprit ? culprit->paired.estimate : NAN,
                      culprit ? culprit->paired.se * sqrt(culprit->pairs) : NAN, rest ? rest->paired.estimate : NAN,
                      rest ? rest->paired.se * sqrt(rest->pairs) : NAN, rep.chaos_sd, rep.dd.judgements,
                      rep.runs_executed, rep.runs_cached, rep.seconds);
        /* the surrogate's calibration: the first trial whose equivalent units
         * moved the loss at all (for about one trial's seeds in 20 none of the
         * rest's reorderings changes a bit: a clean paired sd of 0 would make
         * the surrogate's clean configurations exact, and its noise-floor twin
         * could not go wrong; CI met it at ULPSCOPE_SEED=0x2396efdc38dc21c7) */
        const double rest_sd = rest ? rest->paired.se * sqrt(rest->pairs) : 0.0;
        if (culprit && rest && (!calib.measured || (calib.sd_clean == 0.0 && rest_sd > 0.0))) {
            calib.shift = culprit->paired.estimate;
            calib.sd_culprit = culprit->paired.se * sqrt(culprit->pairs);
            calib.sd_clean = rest_sd;
            calib.chaos_sd = rep.chaos_sd;
            calib.seed_sd = rep.confirm.seed_sd;
            calib.base_loss = rep.confirm.arm[0].loss_mean;
            calib.measured = 1;
        }
        bisect_report_free(&rep);
    }
    print_message("real training: the planted culprit found alone in %d of %d searches, ddmax excludes it in %d of %d; "
                  "%.0f runs executed per search, %.0f s in all\n",
                  hits, trials, ddmax_found, trials, (double)runs / trials, seconds);
    assert_true(hits >= trials - trials / 10);
    assert_true(ddmax_found >= trials - trials / 10);
    /* twin: an oracle that ignores the noise floor calls every configuration
     * whose loss moved at all a SHIFT, and split_k moves it by chaos: ddmin
     * blames an equivalent unit first.  (Judgement budget: the first culprit
     * is all the twin needs to show; trial 0's cache holds most runs.) */
    /* Its premise is that split_k's reordering moves some run's bits; at this
     * size that can fail for a trial's seeds (about one in 20: no equivalent
     * configuration differs at all, and the twin then finds the culprit as the
     * real oracle does).  So up to three trials' seeds (their caches hold most
     * runs); the twin must blame an equivalent unit in one of them. */
    int twin_caught = 0;
    for (int t = 0; t < trials && t < 3 && !twin_caught; t++) {
        bisect_report rep;
        c->planted_bug = BISECT_BUG_IGNORE_NOISE_FLOOR;
        c->max_judgements = 14;
        real_search(c, first[t], dir[t], &rep);
        print_search("twin (noise floor ignored), real training", c, &rep);
        twin_caught = !found(&rep, &planted, 1) && rep.dd.n_culprits >= 1 &&
                      !(unit_is(&rep, rep.dd.culprit_units[rep.dd.culprit_start[0]], planted.slot, planted.layer) &&
                        rep.dd.culprit_len[0] == 1);
        bisect_report_free(&rep);
    }
    assert_true(twin_caught);
    free(dir);
    free(first);
    free(recipe_json);
    free(c);
}

/* ---- windows on real training ------------------------------------------------------------ */

static const cmp_run *run_of(const cmp_report *r, int arm, int seed_index)
{
    return &r->runs[(size_t)arm * (size_t)r->seeds_used + (size_t)seed_index];
}

static int same_bits(double x, double y) { return memcmp(&x, &y, sizeof x) == 0; }

/* Runs x and y validated after every step agree bit for bit after steps 1 ..
 * until and differ after step until + 1: they ran alike up to step `until`
 * and one of them switched its plan before step `until` (0-based) ran. */
static int part_at(const cmp_run *x, const cmp_run *y, long until)
{
    if (x->status || y->status || x->n_curve != y->n_curve || x->n_curve <= until) return 0;
    for (int i = 0; i < x->n_curve; i++) {
        if (x->curve_step[i] != i + 1 || y->curve_step[i] != i + 1) return 0;
        if (i + 1 <= until && !same_bits(x->curve_val[i], y->curve_val[i])) return 0;
        if (i + 1 == until + 1 && same_bits(x->curve_val[i], y->curve_val[i])) return 0;
    }
    return 1;
}

static int count_lines_with(FILE *f, const char *what)
{
    char line[8192];
    int n = 0;
    rewind(f);
    while (fgets(line, sizeof line, f)) n += strstr(line, what) != NULL;
    return n;
}

/* --windows 2 on the tiny recipe with the planted culprit alone (validation
 * after every step, so the curves show where runs part): two window records,
 * switches at step 12 with the culprit's settings, window 1's runs are the
 * culprit's up to step 12 and window 2's are good's, each parting right
 * after; the replica group's runs of window 2 are single runs' bits (the
 * replica engine honours the switches); a second call executes no run. */
static void test_real_windows(void **state)
{
    (void)state;
    uint64_t seed = test_seed("test_real_windows");
    bisect_config *c = malloc(sizeof *c);
    assert_non_null(c);
    char *recipe_json = NULL, err[1024];
    recipe(c, CULPRIT, &recipe_json);
    c->train.base.val_every = 1;
    free(recipe_json);
    recipe_json = cmp_train_recipe(&c->train.base, CMP_VARY_BOTH, 0, err, sizeof err);
    if (!recipe_json) fail_msg("%s", err);
    c->recipe_json = recipe_json;
    c->ddmax = 0;
    c->windows = 2;
    char dir[128];
    snprintf(dir, sizeof dir, "%s/windows", results_root);
    assert_int_equal(mkdir(dir, 0700), 0);
    const uint64_t first = 1 + seed % 1000000000ull;
    bisect_report rep;
    real_search(c, first, dir, &rep);
    print_search("--windows 2, real training", c, &rep);
    const tplan_unit planted = {TSLOT_ADAMW, -1};
    assert_true(found(&rep, &planted, 1));
    assert_int_equal(rep.n_windows, rep.dd.n_culprits);
    const bisect_windows *ws = windows_of(&rep, planted);
    assert_non_null(ws);
    assert_string_equal(ws->why, "");
    assert_int_equal(ws->rep.n_arms, 3);
    /* the schedule: [0, 12) and [12, 24); window 1 starts as the culprit's
     * plan and switches back, window 2 switches the culprit on */
    assert_true(ws->from[0] == 0 && ws->to[0] == 12 && ws->from[1] == 12 && ws->to[1] == 24);
    assert_int_equal(ws->n_switches[0], 1);
    assert_int_equal(ws->switches[0][0].step, 12);
    assert_string_equal(ws->switches[0][0].overrides, "optimizer.adamw=fp32:llmc");
    assert_int_equal(ws->n_switches[1], 1);
    assert_int_equal(ws->switches[1][0].step, 12);
    assert_string_equal(ws->switches[1][0].overrides, "optimizer.adamw=fp32:torch");
    /* the records */
    FILE *f = tmpfile();
    assert_non_null(f);
    bisect_write_records(f, c, &rep);
    assert_int_equal(count_lines_with(f, "{\"record\":\"window\","), 2 * rep.dd.n_culprits);
    assert_int_equal(count_lines_with(f, "\"windows\":2,"), 1);
    fclose(f);
    /* the runs switch where the schedule says, seed by seed */
    char name[CMP_NAME_MAX];
    snprintf(name, sizeof name, "culprit%d", ws->culprit + 1);
    int culprit_arm = -1;
    for (int a = 1; a < rep.confirm_cfg.n_arms; a++)
        if (strcmp(rep.confirm_cfg.arms[a].name, name) == 0) culprit_arm = a;
    assert_true(culprit_arm > 0);
    assert_int_equal(ws->rep.seeds_used, rep.confirm.seeds_used);
    for (int k = 0; k < ws->rep.seeds_used; k++) {
        assert_true(ws->rep.seeds[k] == rep.confirm.seeds[k]);
        if (!part_at(run_of(&ws->rep, 1, k), run_of(&rep.confirm, culprit_arm, k), 12))
            fail_msg("seed %llu: window 1's run does not part from the culprit's after step 12",
                     (unsigned long long)ws->rep.seeds[k]);
        if (!part_at(run_of(&ws->rep, 2, k), run_of(&ws->rep, 0, k), 12))
            fail_msg("seed %llu: window 2's run does not part from good's after step 12",
                     (unsigned long long)ws->rep.seeds[k]);
        /* the check itself tells step 12 from its neighbours */
        if (part_at(run_of(&ws->rep, 2, k), run_of(&ws->rep, 0, k), 11) ||
            part_at(run_of(&ws->rep, 2, k), run_of(&ws->rep, 0, k), 13))
            fail_msg("seed %llu: the parting check passes at step 11 or 13 too", (unsigned long long)ws->rep.seeds[k]);
    }
    print_message("windows: every one of %d seeds' runs parts from the culprit's (window 1) and good's (window 2) "
                  "right after step 12\n", ws->rep.seeds_used);
    /* the replica engine: window 2's first and last seeds as single runs */
    const kop *adamw = tplan_kop(&c->bad, TSLOT_ADAMW);
    assert_true(ws->rep.seeds_used > 1);
    for (int k = 0; k < ws->rep.seeds_used; k += ws->rep.seeds_used - 1) {
        ttrain_config cfg = c->train.base;
        cfg.plan = c->good;
        cfg.seed = cfg.data_seed = ws->rep.seeds[k];
        cfg.n_switches = ws->n_switches[1];
        memcpy(cfg.switches, ws->switches[1], sizeof ws->switches[1]);
        ttrain_result res;
        tbackend_cpu_plant_site(TSLOT_ADAMW, -1, kregistry_variant(adamw, "torch"));
        kernels_set_planted_bug(KBUG_TRUNCATE_OUTPUT);
        int rc = ttrain_run(&cfg, &res);
        kernels_set_planted_bug(KBUG_NONE);
        tbackend_cpu_plant_site(-1, -1, -1);
        if (rc) fail_msg("single run: %d: %s", rc, res.error);
        const cmp_run *group_run = run_of(&ws->rep, 2, k);
        assert_true(res.param_hash == group_run->state_hash);
        assert_true(same_bits(res.final_val_loss, group_run->final_val_loss));
        ttrain_result_free(&res);
    }
    int executed = rep.runs_executed;
    bisect_report_free(&rep);
    /* the same call again: every run from the cache */
    real_search(c, first, dir, &rep);
    print_message("the first call executed %d runs; the same call again: %d executed, %d from the cache\n", executed,
                  rep.runs_executed, rep.runs_cached);
    assert_int_equal(rep.runs_executed, 0);
    assert_int_equal(rep.n_windows, rep.dd.n_culprits);
    bisect_report_free(&rep);
    free(recipe_json);
    free(c);
}

/* ---- the surrogate ------------------------------------------------------------------------ */

typedef struct {
    const tplan *bad;
    tplan_unit culprit[2];
    int n_culprits;
    uint64_t key;              /* this trial's draws */
    const cmp_train_ctx *tc;   /* the arms' plans of the study running now */
} surrogate;

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static double normal_at(uint64_t key)
{
    prec_rng r;
    prec_rng_seed(&r, key);
    return prec_rng_normal(&r);
}

static int switched(const tplan *plan, const tplan *bad, tplan_unit u)
{
    const tslot_choice *a = tplan_choice_at(plan, u.slot, u.layer), *b = tplan_choice_at(bad, u.slot, u.layer);
    return a->path == b->path && a->op == b->op && a->variant == b->variant;
}

/* When a culprit matters: only while it is on in the last quarter of the
 * steps, its shift in proportion to the share of those steps it is on.  Arm
 * a's plan with its switches applied step by step (as the trainer applies
 * them): sum of the culprits' shares into *shifts, and whether any culprit
 * is on at any step. */
static int culprits_on(const surrogate *s, int a, double *shifts)
{
    const cmp_train_ctx *tc = s->tc;
    const long steps = tc->base.steps, late = steps - steps / 4;
    tplan *plan = malloc(sizeof *plan);
    assert_non_null(plan);
    *plan = tc->plans[a];
    int on = 0;
    *shifts = 0;
    for (long step = 0; step < steps; step++) {
        char err[512];
        for (int i = 0; i < tc->n_switches[a]; i++)
            if (tc->switches[a][i].step == step && tplan_set(plan, tc->switches[a][i].overrides, err, sizeof err))
                fail_msg("arm %d's switch at step %ld: %s", a, step, err);
        for (int c = 0; c < s->n_culprits; c++) {
            if (!switched(plan, s->bad, s->culprit[c])) continue;
            on = 1;
            if (step >= late) *shifts += 1.0 / (double)(steps - late);
        }
    }
    free(plan);
    return on;
}

/* A run of arm a at seed s: the base's loss at s (seed-to-seed spread), plus,
 * for any other plan, its paired difference: the shifts of the culprits it
 * switches (culprits_on) and a draw with the paired sd measured for
 * culprit-carrying or for clean configurations, keyed by (plan and switches,
 * seed) as a rerun would be; the null arm: a draw with the chaos sd. */
static int surrogate_run(cmp_runner *r, const cmp_arm *arms, const cmp_job *jobs, int n, cmp_run *out)
{
    const surrogate *s = r->ctx;
    for (int i = 0; i < n; i++) {
        const cmp_job *j = &jobs[i];
        const cmp_arm *arm = &arms[j->arm];
        uint64_t plan_key = fnv(s->key, arm->identity, strlen(arm->identity));
        uint64_t seed_key = fnv(s->key, &j->seed, sizeof j->seed);
        double loss = calib.base_loss + calib.seed_sd * normal_at(seed_key);
        uint64_t run_key = fnv(plan_key, &j->seed, sizeof j->seed);
        if (arm->is_null) loss += calib.chaos_sd * normal_at(run_key);
        else if (j->arm != 0) {
            double shifts;
            int on = culprits_on(s, j->arm, &shifts);
            loss += shifts * calib.shift + (on ? calib.sd_culprit : calib.sd_clean) * normal_at(run_key);
        }
        memset(&out[i], 0, sizeof out[i]);
        out[i].final_val_loss = loss;
        out[i].state_hash = j->arm == 0 ? seed_key : run_key;
        out[i].seconds = 0.2;
    }
    return 0;
}

static void surrogate_runner(cmp_runner *r, cmp_train_ctx *tc, void *ctx)
{
    surrogate *s = ctx;
    s->tc = tc;
    r->run = surrogate_run;
    r->capacity = 64;
    r->ctx = s;
}

/* One bisect over the surrogate s, its runs cached in a fresh directory dir. */
static void surrogate_search(bisect_config *c, surrogate *s, const char *dir, uint64_t first_seed, bisect_bug bug,
                             bisect_report *rep)
{
    char err[1024];
    assert_int_equal(mkdir(dir, 0700), 0);
    c->results_dir = dir;
    c->first_seed = first_seed;
    c->runner = surrogate_runner;
    c->runner_ctx = s;
    c->planted_bug = bug;
    if (bisect_run(c, rep, err, sizeof err)) fail_msg("bisect_run: %s", err);
}

static int is_shift(cmp_verdict v) { return v == CMP_SHIFT_UP || v == CMP_SHIFT_DOWN; }

/* The surrogate's truth at 4 windows: the last (the last quarter of the
 * steps) SHIFT, the other three not. */
static int windows_right(const bisect_report *rep, tplan_unit culprit)
{
    const bisect_windows *ws = windows_of(rep, culprit);
    if (!ws || ws->why[0] || ws->rep.n_arms != 5) return 0;
    for (int w = 1; w <= 3; w++)
        if (is_shift(ws->rep.arm[w].verdict)) return 0;
    return is_shift(ws->rep.arm[4].verdict);
}

/* Ten searches, each with fresh draws, fresh seeds and random culprits among
 * the 20 units; how many found every culprit alone (and a clean rest), and
 * how many ddmax sets excluded them.  windows > 0: also how many window
 * studies of the (first) culprit came out right (windows_right). */
static int surrogate_trials(uint64_t seed, int n_culprits, bisect_bug bug, int windows, int *ddmax_found,
                            int *windows_found, double *mean_runs)
{
    bisect_config *c = malloc(sizeof *c);
    assert_non_null(c);
    char *recipe_json = NULL;
    recipe(c, SURROGATE_UNITS, &recipe_json);
    tplan_unit units[BISECT_MAX_UNITS];
    int n = tplan_diff(&c->good, &c->bad, 1, units, BISECT_MAX_UNITS);
    assert_int_equal(n, 20);
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    int hits = 0;
    long runs = 0;
    *ddmax_found = 0;
    *windows_found = 0;
    c->windows = windows;
    for (int t = 0; t < 10; t++) {
        surrogate s = {.bad = &c->bad, .n_culprits = n_culprits, .key = prec_rng_next(&rng)};
        int first = (int)(prec_rng_next(&rng) % (uint64_t)n);
        s.culprit[0] = units[first];
        if (n_culprits == 2) s.culprit[1] = units[(first + 1 + (int)(prec_rng_next(&rng) % (uint64_t)(n - 1))) % n];
        char dir[160];
        snprintf(dir, sizeof dir, "%s/surrogate_%d_%d_%d_%d", results_root, n_culprits, (int)bug, windows, t);
        bisect_report rep;
        surrogate_search(c, &s, dir, 1 + prec_rng_next(&rng) % 1000000000ull, bug, &rep);
        int ok = found(&rep, s.culprit, n_culprits);
        hits += ok;
        *ddmax_found += ddmax_ok(&rep, s.culprit, n_culprits);
        if (windows) {
            int right = windows_right(&rep, s.culprit[0]);
            *windows_found += right;
            if (t == 0 || (!right && bug == BISECT_BUG_NONE)) {
                print_message("trial %d: windows %s:\n", t + 1, right ? "right" : "WRONG");
                bisect_print(stdout, c, &rep);
            }
        }
        if (!ok && bug == BISECT_BUG_NONE) {
            /* a miss: what the search said, to tell the statistics from a defect */
            char u[2][96];
            for (int k = 0; k < n_culprits; k++) tplan_unit_string(&s.culprit[k], u[k], sizeof u[k]);
            print_message("trial %d missed (planted: %s%s%s):\n", t + 1, u[0], n_culprits > 1 ? ", " : "",
                          n_culprits > 1 ? u[1] : "");
            bisect_print(stdout, c, &rep);
        }
        runs += rep.runs_executed;
        bisect_report_free(&rep);
    }
    *mean_runs = runs / 10.0;
    free(recipe_json);
    free(c);
    return hits;
}

static void test_surrogate_nine_in_ten(void **state)
{
    (void)state;
    if (!calib.measured) fail_msg("the surrogate needs the real search's measurements (test_real_training first)");
    print_message("surrogate calibrated from real training: shift %+.5f, paired sd %.5f with the culprit, %.6f "
                  "without; chaos sd %.6f; seed-to-seed sd %.5f\n",
                  calib.shift, calib.sd_culprit, calib.sd_clean, calib.chaos_sd, calib.seed_sd);
    if (calib.sd_clean == 0.0) fail_msg("no real trial's equivalent units moved the loss: nothing to calibrate the twin on");
    uint64_t seed = test_seed("test_surrogate_nine_in_ten");
    int ddmax_found, windows_found;
    double runs;
    int hits = surrogate_trials(seed, 1, BISECT_BUG_NONE, 0, &ddmax_found, &windows_found, &runs);
    print_message("one culprit among 20 units: found alone in %d of 10, ddmax excludes it in %d of 10, %.0f runs "
                  "per search\n", hits, ddmax_found, runs);
    assert_true(hits >= 9);
    assert_true(ddmax_found >= 9);
    hits = surrogate_trials(seed, 2, BISECT_BUG_NONE, 0, &ddmax_found, &windows_found, &runs);
    print_message("two culprits among 20 units: both found in %d of 10, ddmax excludes both in %d of 10, %.0f runs "
                  "per search\n", hits, ddmax_found, runs);
    assert_true(hits >= 9);
    assert_true(ddmax_found >= 9);
    /* twins */
    hits = surrogate_trials(seed, 1, BISECT_BUG_IGNORE_NOISE_FLOOR, 0, &ddmax_found, &windows_found, &runs);
    print_message("twin (noise floor ignored): found alone in %d of 10, ddmax excludes it in %d of 10\n", hits,
                  ddmax_found);
    assert_true(hits < 9);
    hits = surrogate_trials(seed, 2, BISECT_BUG_STOP_AT_FIRST, 0, &ddmax_found, &windows_found, &runs);
    print_message("twin (stops at the first culprit, complement never judged): both found in %d of 10\n", hits);
    assert_true(hits < 9);
}

/* ---- --group-by ---------------------------------------------------------------------------- */

/* every GEMM role of every layer split_k: 3 layers x 4 GEMMs x 3 roles + lm_head's 3 */
#define GEMM_UNITS "attn.*=bf16:split_k,mlp.*=bf16:split_k,lm_head*=bf16:split_k"

/* Group g holds unit u, and every unit of g shares u's key under the grouping. */
static int group_is_keyed(const bisect_report *rep, int g, tplan_unit u, bisect_grouping by)
{
    int holds = 0;
    for (int i = 0; i < rep->n_units; i++) {
        if (rep->group_of[i] != g) continue;
        tplan_unit v = rep->units[i];
        const tslot_info *a = tslot_get(u.slot), *b = tslot_get(v.slot);
        int same = by == BISECT_GROUP_LAYER ? v.layer == u.layer
                   : by == BISECT_GROUP_SLOT ? a->forward == b->forward
                                              : a->gemm == b->gemm;
        if (!same) return 0;
        holds |= v.slot == u.slot && v.layer == u.layer;
    }
    return holds;
}

/* Ten surrogate searches at 3 layers grouped by `by`, a random culprit unit
 * each: how many confirmed exactly one culprit set, the one group that holds
 * the culprit, with a clean rest; with refine, and whose search inside that
 * group (the only one refined) found the culprit unit alone with a clean
 * rest. */
static int group_trials(uint64_t seed, bisect_grouping by, int refine, bisect_bug bug, int *n_groups,
                        double *mean_runs)
{
    bisect_config *c = malloc(sizeof *c);
    assert_non_null(c);
    char *recipe_json = NULL;
    recipe_at(c, GEMM_UNITS, 3, &recipe_json);
    c->group_by = by;
    c->refine = refine;
    tplan_unit units[BISECT_MAX_UNITS];
    int n = tplan_diff(&c->good, &c->bad, 3, units, BISECT_MAX_UNITS);
    assert_int_equal(n, 39);
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    int hits = 0;
    long runs = 0;
    for (int t = 0; t < 10; t++) {
        surrogate s = {.bad = &c->bad, .n_culprits = 1, .key = prec_rng_next(&rng)};
        s.culprit[0] = units[prec_rng_next(&rng) % (uint64_t)n];
        char dir[160];
        snprintf(dir, sizeof dir, "%s/group_%d_%d_%d_%d", results_root, (int)by, refine, (int)bug, t);
        bisect_report rep;
        surrogate_search(c, &s, dir, 1 + prec_rng_next(&rng) % 1000000000ull, bug, &rep);
        const dd_result *d = &rep.dd;
        int confirmed = 0, right = 0;
        for (int k = 0; k < d->n_culprits; k++) {
            if (!d->culprit_confirmed[k]) continue;
            confirmed++;
            right += d->culprit_len[k] == 1 && group_is_keyed(&rep, d->culprit_units[d->culprit_start[k]], s.culprit[0], by);
        }
        const cmp_arm_report *rest = bisect_confirmed_arm(&rep, "rest");
        int ok = !d->sanity_failed && d->rest_verdict != DD_SHIFT && confirmed == 1 && right == 1 &&
                 (!rest || !is_shift(rest->verdict) || rest->within_margin);
        if (refine)
            ok = ok && rep.n_refined == 1 && rep.refined[0].rep->n_groups == rep.refined[0].n_units &&
                 found(rep.refined[0].rep, &s.culprit[0], 1);
        if (!ok && bug == BISECT_BUG_NONE) {
            char u[96];
            tplan_unit_string(&s.culprit[0], u, sizeof u);
            print_message("trial %d missed (planted: %s):\n", t + 1, u);
            bisect_print(stdout, c, &rep);
        }
        hits += ok;
        *n_groups = rep.n_groups;
        runs += rep.runs_executed;
        bisect_report_free(&rep);
    }
    *mean_runs = runs / 10.0;
    free(recipe_json);
    free(c);
    return hits;
}

/* --group-by on the surrogate at 3 layers, 39 units: 4 groups by layer
 * (the head's 3 units one), 5 by slot, 3 by role, each holding only units
 * that share the key; searches under each name the culprit's group alone in
 * >= 9 of 10 trials; the twin whose oracle ignores the noise floor (by
 * layer) must not. */
static void test_surrogate_group_by(void **state)
{
    (void)state;
    if (!calib.measured) fail_msg("the surrogate needs the real search's measurements (test_real_training first)");
    uint64_t seed = test_seed("test_surrogate_group_by");
    const bisect_grouping by[3] = {BISECT_GROUP_LAYER, BISECT_GROUP_SLOT, BISECT_GROUP_ROLE};
    const int want_groups[3] = {4, 5, 3};
    for (int i = 0; i < 3; i++) {
        int n_groups = 0;
        double runs;
        int hits = group_trials(seed + (uint64_t)i, by[i], 0, BISECT_BUG_NONE, &n_groups, &runs);
        print_message("group by %s: %d groups; the culprit's group named alone in %d of 10, %.0f runs per search\n",
                      bisect_grouping_name(by[i]), n_groups, hits, runs);
        assert_int_equal(n_groups, want_groups[i]);
        assert_true(hits >= 9);
    }
    int n_groups;
    double runs;
    int hits = group_trials(seed, BISECT_GROUP_LAYER, 0, BISECT_BUG_IGNORE_NOISE_FLOOR, &n_groups, &runs);
    print_message("twin (noise floor ignored), by layer: the culprit's group named alone in %d of 10\n", hits);
    assert_true(hits < 9);
}

/* --refine on the surrogate at 3 layers grouped by slot (5 groups of 6 to 9
 * units): the culprit's group named alone and then, searched unit by unit,
 * the culprit unit alone with a clean rest, in >= 9 of 10 trials; the twin
 * whose oracle ignores the noise floor must not. */
static void test_surrogate_refine(void **state)
{
    (void)state;
    if (!calib.measured) fail_msg("the surrogate needs the real search's measurements (test_real_training first)");
    uint64_t seed = test_seed("test_surrogate_refine");
    int n_groups = 0;
    double runs;
    int hits = group_trials(seed, BISECT_GROUP_SLOT, 1, BISECT_BUG_NONE, &n_groups, &runs);
    print_message("group by slot, refined: the culprit unit named alone in %d of 10, %.0f runs per search (the "
                  "refinement included)\n", hits, runs);
    assert_true(hits >= 9);
    hits = group_trials(seed, BISECT_GROUP_SLOT, 1, BISECT_BUG_IGNORE_NOISE_FLOOR, &n_groups, &runs);
    print_message("twin (noise floor ignored): the culprit unit named alone in %d of 10\n", hits);
    assert_true(hits < 9);
}

/* No culprit on the surrogate: the whole bad plan does not SHIFT (sanity 2),
 * and the report still says by how much it moved the loss: the "bad" arm
 * with its interval at the largest count, and no culprit.  Twin: the oracle
 * that ignores the noise floor calls the whole plan a SHIFT. */
static int nothing_to_find(uint64_t seed, bisect_bug bug)
{
    bisect_config *c = malloc(sizeof *c);
    assert_non_null(c);
    char *recipe_json = NULL;
    recipe(c, SURROGATE_UNITS, &recipe_json);
    surrogate s = {.bad = &c->bad, .n_culprits = 0, .key = seed};
    char dir[160];
    snprintf(dir, sizeof dir, "%s/nothing_%d", results_root, (int)bug);
    bisect_report rep;
    surrogate_search(c, &s, dir, 1 + seed % 1000000000ull, bug, &rep);
    bisect_print(stdout, c, &rep);
    const cmp_arm_report *whole = bisect_confirmed_arm(&rep, "bad");
    int ok = rep.dd.sanity_failed == 2 && rep.dd.n_culprits == 0 && whole &&
             whole->pairs == c->schedule[c->n_schedule - 1] && isfinite(whole->paired.ci_lo) &&
             isfinite(whole->paired.ci_hi);
    bisect_report_free(&rep);
    free(recipe_json);
    free(c);
    return ok;
}

static void test_surrogate_nothing_to_find(void **state)
{
    (void)state;
    if (!calib.measured) fail_msg("the surrogate needs the real search's measurements (test_real_training first)");
    uint64_t seed = test_seed("test_surrogate_nothing_to_find");
    assert_true(nothing_to_find(seed, BISECT_BUG_NONE));
    assert_false(nothing_to_find(seed, BISECT_BUG_IGNORE_NOISE_FLOOR));
}

/* --windows 4 on the surrogate, whose culprit moves the loss only while it is
 * on in the last quarter of the 24 steps: the last window SHIFT and the
 * other three not, in >= 9 of 10 trials; the twin whose window arms drop
 * their switches (the culprit on for the whole run) must fail that. */
static void test_surrogate_windows(void **state)
{
    (void)state;
    if (!calib.measured) fail_msg("the surrogate needs the real search's measurements (test_real_training first)");
    uint64_t seed = test_seed("test_surrogate_windows");
    int ddmax_found, windows_found;
    double runs;
    int hits = surrogate_trials(seed, 1, BISECT_BUG_NONE, 4, &ddmax_found, &windows_found, &runs);
    print_message("4 windows, the culprit matters in the last quarter only: found alone in %d of 10, windows right "
                  "(the last SHIFT, the other three not) in %d of 10, %.0f runs per search and windows\n",
                  hits, windows_found, runs);
    assert_true(hits >= 9);
    assert_true(windows_found >= 9);
    hits = surrogate_trials(seed, 1, BISECT_BUG_WINDOWS_IGNORE_SWITCHES, 4, &ddmax_found, &windows_found, &runs);
    print_message("twin (window arms drop their switches): windows right in %d of 10\n", windows_found);
    assert_true(windows_found < 9);
}

/* A culprit whose path the trainer fixes for the whole run (AdamW's state
 * in bf16) cannot switch mid-run: its windows are skipped, saying why, and
 * its window records carry the reason and no effect. */
static void test_windows_fixed_slot(void **state)
{
    (void)state;
    if (!calib.measured) fail_msg("the surrogate needs the real search's measurements (test_real_training first)");
    bisect_config *c = malloc(sizeof *c);
    assert_non_null(c);
    char *recipe_json = NULL, err[1024], dir[160];
    recipe(c, "optimizer.adamw=bf16:llmc", &recipe_json);
    surrogate s = {.bad = &c->bad, .n_culprits = 1, .key = test_seed("test_windows_fixed_slot")};
    s.culprit[0] = (tplan_unit){TSLOT_ADAMW, -1};
    snprintf(dir, sizeof dir, "%s/fixed", results_root);
    assert_int_equal(mkdir(dir, 0700), 0);
    c->results_dir = dir;
    c->first_seed = 1;
    c->runner = surrogate_runner;
    c->runner_ctx = &s;
    c->windows = 2;
    bisect_report rep;
    if (bisect_run(c, &rep, err, sizeof err)) fail_msg("bisect_run: %s", err);
    bisect_print(stdout, c, &rep);
    assert_true(found(&rep, s.culprit, 1));
    assert_int_equal(rep.n_windows, 1);
    assert_non_null(strstr(rep.windows[0].why, "slot optimizer.adamw holds training state"));
    assert_int_equal(rep.windows[0].rep.n_arms, 0);
    FILE *f = tmpfile();
    assert_non_null(f);
    bisect_write_records(f, c, &rep);
    assert_int_equal(count_lines_with(f, "\"verdict\":null,\"why\":\"slot optimizer.adamw holds training state"), 2);
    fclose(f);
    bisect_report_free(&rep);
    free(recipe_json);
    free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_training),
        cmocka_unit_test(test_surrogate_nine_in_ten),
        cmocka_unit_test(test_surrogate_windows),
        cmocka_unit_test(test_surrogate_group_by),
        cmocka_unit_test(test_surrogate_refine),
        cmocka_unit_test(test_surrogate_nothing_to_find),
        cmocka_unit_test(test_windows_fixed_slot),
        cmocka_unit_test(test_real_windows),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
