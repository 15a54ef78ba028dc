/* tests/test_compare.c — compare's verdicts on simulated training runs whose
 * truth is known, and its results-directory cache.
 *
 * Simulation: the final loss of arm a at seed s is
 *     mu + seed_effect(s) + chaos(class(a), s) + shift(a),
 * seed_effect ~ N(0, seed_sd) shared by every arm at seed s (common random
 * numbers), chaos ~ N(0, chaos_sd) drawn per *bits class*: arms of one class
 * run bit-identical arithmetic (same losses, same state hash), other classes
 * part chaotically.  The base is class 0, the null arm class 1.
 *
 * Measured here, each against a binomial interval wide enough that a correct
 * implementation fails about once in 10^5 runs (4.4 sd):
 *   - false SHIFT rate at true shift 0 (fixed n) ~ alpha;
 *   - false EQUIVALENT rate at a true shift equal to the chaos sd — the
 *     margin compare derives from the null arm — is at most alpha;
 *   - power at a true shift of 1.5 chaos sd >= the paired t formula's;
 *   - family-wise false SHIFT rate over 3 null arms (Holm) <= alpha;
 *   - sequential (--until-decided, a look after every batch): false SHIFT
 *     rate <= alpha.
 * Twins that must fail the same checks: optional stopping with the fixed-n
 * test (looking after every batch), Welch's unpaired test on paired arms
 * (power), and no Holm correction over several arms. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "precision/rng.h"
#include "precision/stats.h"
#include "studies/compare.h"
#include "studies/noise.h"
#include "tests/test_util.h"

typedef struct {
    double mu, seed_sd, chaos_sd;
    double shift[CMP_MAX_ARMS];
    int bits_class[CMP_MAX_ARMS];
    uint64_t key;
    int calls, jobs_run;
    int fail_after;           /* the runner gives up after this many jobs (0: never) */
} sim;

static double gauss(uint64_t key)
{
    prec_rng r;
    prec_rng_seed(&r, key);
    return prec_rng_normal(&r);
}

static void sim_one(const sim *m, int arm, uint64_t init_seed, uint64_t data_seed, cmp_run *out)
{
    memset(out, 0, sizeof *out);
    uint64_t s = init_seed * 0x9e3779b97f4a7c15ull ^ data_seed * 0xbf58476d1ce4e5b9ull ^ m->key;
    double seed_effect = m->seed_sd * gauss(s);
    int cls = m->bits_class[arm];
    double chaos = m->chaos_sd * gauss(s ^ (0x1234567ull * (uint64_t)(cls + 1)));
    out->final_val_loss = m->mu + seed_effect + chaos + m->shift[arm];
    out->state_hash = s ^ (uint64_t)(cls + 1) * 0x94d049bb133111ebull ^ (uint64_t)(m->shift[arm] * 1e9);
    out->seconds = 10.0 + 0.1 * gauss(s ^ 77);
    out->n_curve = 2;
    out->curve_step[0] = 50;
    out->curve_val[0] = out->final_val_loss + 0.5;
    out->curve_step[1] = 100;
    out->curve_val[1] = out->final_val_loss;
}

static int sim_run(cmp_runner *r, const cmp_arm *arms, const cmp_job *jobs, int n, cmp_run *out)
{
    (void)arms;
    sim *m = r->ctx;
    m->calls++;
    for (int i = 0; i < n; i++) {
        if (m->fail_after && m->jobs_run >= m->fail_after) {
            snprintf(out[0].error, sizeof out[0].error, "simulated kill");
            return -1;
        }
        sim_one(m, jobs[i].arm, jobs[i].init_seed, jobs[i].data_seed, &out[i]);
        m->jobs_run++;
    }
    return 0;
}

static const char *identities[CMP_MAX_ARMS] = {"plan-base", "plan-base+flip", "plan-a", "plan-b", "plan-c", "plan-d"};

static cmp_config config_with(int n_arms, int null_arm)
{
    cmp_config c;
    memset(&c, 0, sizeof c);
    c.n_arms = n_arms;
    for (int a = 0; a < n_arms; a++) {
        snprintf(c.arms[a].name, sizeof c.arms[a].name, a == 0 ? "base" : (a == 1 && null_arm) ? "null" : "arm%d", a);
        c.arms[a].identity = identities[a];
        c.arms[a].is_null = a == 1 && null_arm;
    }
    c.alpha = 0.05;
    c.power = 0.8;
    c.fixed_seed = 1337;
    return c;
}

/* Simulates n seeds of every arm into runs[a * n + s] and judges them. */
static void judge_sim(const cmp_config *c, const sim *m, int n, uint64_t first_seed, cmp_report *rep)
{
    cmp_run *runs = malloc((size_t)c->n_arms * n * sizeof *runs);
    for (int a = 0; a < c->n_arms; a++)
        for (int s = 0; s < n; s++) sim_one(m, a, first_seed + s, first_seed + s, &runs[(size_t)a * n + s]);
    char err[256];
    int rc = cmp_judge(c, runs, n, rep, err, sizeof err);
    free(runs);
    if (rc) fail_msg("cmp_judge: %s", err);
    cmp_report_free(rep);
}

/* |observed - expected| within 4.4 binomial sd (one-sided checks use the upper side only). */
static double binomial_slack(double p, int trials) { return 4.4 * sqrt(p * (1 - p) / trials); }

static sim null_sim(uint64_t key)
{
    sim m;
    memset(&m, 0, sizeof m);
    m.mu = 1.40;
    m.seed_sd = 0.006;
    m.chaos_sd = 0.0028;
    m.key = key;
    for (int a = 0; a < CMP_MAX_ARMS; a++) m.bits_class[a] = a;
    return m;
}

static void test_false_shift_rate(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_false_shift_rate"));
    const int trials = 10000, n = 8;
    cmp_config c = config_with(3, 1);
    int shift = 0, null_shift = 0;
    for (int t = 0; t < trials; t++) {
        sim m = null_sim(prec_rng_next(&rng));
        cmp_report rep;
        judge_sim(&c, &m, n, 1, &rep);
        shift += rep.arm[2].verdict == CMP_SHIFT_UP || rep.arm[2].verdict == CMP_SHIFT_DOWN;
        null_shift += rep.null_warning;
    }
    double rate = (double)shift / trials;
    print_message("fixed n = %d, true shift 0: false SHIFT rate %.4f (alpha 0.05), null arm SHIFT %.4f\n", n, rate,
                  (double)null_shift / trials);
    assert_true(fabs(rate - 0.05) <= binomial_slack(0.05, trials));
    assert_true(fabs((double)null_shift / trials - 0.05) <= binomial_slack(0.05, trials));
}

static void test_false_equivalence_rate(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_false_equivalence_rate"));
    const int trials = 10000, n = 24;
    cmp_config c = config_with(3, 1);
    int equiv = 0;
    for (int t = 0; t < trials; t++) {
        sim m = null_sim(prec_rng_next(&rng));
        m.shift[2] = m.chaos_sd; /* exactly at the derived margin's true value */
        cmp_report rep;
        judge_sim(&c, &m, n, 1, &rep);
        equiv += rep.arm[2].verdict == CMP_EQUIVALENT;
    }
    double rate = (double)equiv / trials;
    print_message("true shift = chaos sd (the derived margin), n = %d: false EQUIVALENT rate %.4f (must be <= 0.05)\n", n,
                  rate);
    assert_true(rate <= 0.05 + binomial_slack(0.05, trials));
}

static void power_check(int use_welch, double *observed, double *predicted)
{
    prec_rng rng;
    prec_rng_seed(&rng, 0xabcdefull);
    const int trials = 4000, n = 10;
    cmp_config c = config_with(3, 1);
    int shift = 0;
    sim m0 = null_sim(0);
    double delta = 1.5 * m0.chaos_sd, sd_diff = m0.chaos_sd * sqrt(2.0);
    for (int t = 0; t < trials; t++) {
        sim m = null_sim(prec_rng_next(&rng));
        m.shift[2] = delta;
        cmp_report rep;
        judge_sim(&c, &m, n, 1, &rep);
        if (use_welch) shift += rep.arm[2].welch.p < c.alpha;
        else shift += rep.arm[2].verdict == CMP_SHIFT_UP;
    }
    *observed = (double)shift / trials;
    *predicted = stats_power_paired_t((size_t)n, delta, sd_diff, c.alpha);
}

static void test_power(void **state)
{
    (void)state;
    double obs, pred;
    power_check(0, &obs, &pred);
    print_message("true shift 1.5 chaos sd, n = 10: SHIFT rate %.4f, paired t power formula %.4f\n", obs, pred);
    assert_true(obs >= pred - binomial_slack(pred, 4000));
    /* twin: the unpaired test on the same paired arms throws the seed pairing away */
    power_check(1, &obs, &pred);
    print_message("twin (Welch on paired arms): rate %.4f, far below %.4f\n", obs, pred);
    assert_false(obs >= pred - binomial_slack(pred, 4000));
}

static void fwer_check(int holm, double *rate)
{
    prec_rng rng;
    prec_rng_seed(&rng, 0x5151ull);
    const int trials = 6000, n = 8;
    cmp_config c = config_with(5, 1);
    int any = 0;
    for (int t = 0; t < trials; t++) {
        sim m = null_sim(prec_rng_next(&rng));
        cmp_report rep;
        judge_sim(&c, &m, n, 1, &rep);
        int hit = 0;
        for (int a = 2; a < 5; a++)
            hit |= holm ? (rep.arm[a].verdict == CMP_SHIFT_UP || rep.arm[a].verdict == CMP_SHIFT_DOWN)
                        : rep.arm[a].paired.p < c.alpha;
        any += hit;
    }
    *rate = (double)any / trials;
}

static void test_family_wise_rate(void **state)
{
    (void)state;
    double rate;
    fwer_check(1, &rate);
    print_message("3 null arms, Holm: family-wise false SHIFT rate %.4f (must be <= 0.05)\n", rate);
    assert_true(rate <= 0.05 + binomial_slack(0.05, 6000));
    fwer_check(0, &rate);
    print_message("twin (no correction): family-wise rate %.4f\n", rate);
    assert_false(rate <= 0.05 + binomial_slack(0.05, 6000));
}

/* Sequential: a look after every batch of 4 seeds, up to 15 looks. */
static double sequential_false_shift(uint64_t seed, int fixed_n_twin, int trials)
{
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    int shift = 0;
    for (int t = 0; t < trials; t++) {
        sim m = null_sim(prec_rng_next(&rng));
        cmp_config c = config_with(3, 1);
        c.margin = 0.0028;
        c.until_decided = 1;
        c.batch = 4;
        c.max_runs = 60 * 3;
        c.first_seed = 1;
        if (!fixed_n_twin) {
            cmp_runner r = {sim_run, 64, &m, 0, NULL, NULL};
            cmp_report rep;
            char err[256];
            assert_int_equal(cmp_run_study(&c, &r, &rep, err, sizeof err), 0);
            cmp_report_free(&rep);
            shift += rep.arm[2].verdict == CMP_SHIFT_UP || rep.arm[2].verdict == CMP_SHIFT_DOWN;
        } else {
            /* twin: the fixed-n test after every batch, stopping at the first SHIFT */
            c.until_decided = 0;
            int hit = 0;
            for (int look = 1; look <= 15 && !hit; look++) {
                cmp_report rep;
                judge_sim(&c, &m, 4 * look, 1, &rep);
                hit = rep.arm[2].verdict == CMP_SHIFT_UP || rep.arm[2].verdict == CMP_SHIFT_DOWN;
                if (rep.arm[2].verdict == CMP_EQUIVALENT) break;
            }
            shift += hit;
        }
    }
    return (double)shift / trials;
}

static void test_sequential(void **state)
{
    (void)state;
    uint64_t seed = test_seed("test_sequential");
    double rate = sequential_false_shift(seed, 0, 2000);
    print_message("sequential (look every 4 seeds, up to 15 looks), true shift 0: false SHIFT rate %.4f (<= 0.05)\n", rate);
    assert_true(rate <= 0.05 + binomial_slack(0.05, 2000));
    double twin = sequential_false_shift(seed, 1, 2000);
    print_message("twin (fixed-n test at every look): false SHIFT rate %.4f\n", twin);
    assert_false(twin <= 0.05 + binomial_slack(0.05, 2000));
    /* and a real shift is found, with runs to spare */
    sim m = null_sim(seed ^ 99);
    m.shift[2] = 3 * m.chaos_sd;
    cmp_config c = config_with(3, 1);
    c.margin = 0.0028;
    c.until_decided = 1;
    c.batch = 4;
    c.max_runs = 60 * 3;
    c.first_seed = 1;
    cmp_runner r = {sim_run, 64, &m, 0, NULL, NULL};
    cmp_report rep;
    char err[256];
    assert_int_equal(cmp_run_study(&c, &r, &rep, err, sizeof err), 0);
    cmp_report_free(&rep);
    assert_int_equal(rep.arm[2].verdict, CMP_SHIFT_UP);
    assert_true(rep.arm[2].cs.lo > 0);
    assert_false(rep.budget_exhausted);
}

static void test_identical(void **state)
{
    (void)state;
    sim m = null_sim(test_seed("test_identical"));
    m.bits_class[2] = 0; /* arm 2 runs the base's bits */
    cmp_config c = config_with(3, 1);
    cmp_report rep;
    judge_sim(&c, &m, 6, 1, &rep);
    assert_int_equal(rep.arm[2].verdict, CMP_IDENTICAL);
    assert_int_not_equal(rep.arm[1].verdict, CMP_IDENTICAL);
    /* twin: one seed of arm 2 differing in its state hash only is no longer identical */
    cmp_run runs[3 * 6];
    for (int a = 0; a < 3; a++)
        for (int s = 0; s < 6; s++) sim_one(&m, a, 1 + s, 1 + s, &runs[a * 6 + s]);
    runs[2 * 6 + 3].state_hash ^= 1;
    char err[256];
    assert_int_equal(cmp_judge(&c, runs, 6, &rep, err, sizeof err), 0);
    cmp_report_free(&rep);
    assert_int_not_equal(rep.arm[2].verdict, CMP_IDENTICAL);
}

static void make_tmpdir(char *dir, size_t len)
{
    snprintf(dir, len, "/tmp/ulpscope_compare_XXXXXX");
    assert_non_null(mkdtemp(dir));
}

static int count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int n = 0, ch;
    while ((ch = fgetc(f)) != EOF) n += ch == '\n';
    fclose(f);
    return n;
}

/* Three arms at `seeds` with a results directory rd (under a fresh dir) and a fixed recipe. */
static cmp_config cached_config(char *dir, size_t dir_len, char *rd, size_t rd_len, const uint64_t *seeds, int n)
{
    make_tmpdir(dir, dir_len);
    snprintf(rd, rd_len, "%s/res", dir);
    cmp_config c = config_with(3, 1);
    c.seeds = seeds;
    c.n_seeds = n;
    c.results_dir = rd;
    c.recipe_json = "{\"model\":\"modern\",\"steps\":100,\"plan\":{\"preset\":\"bf16\"}}";
    return c;
}

/* The replica engine's runner takes one arm's runs per call: a compare
 * killed in its second arm keeps the first arm's runs (all arms in one call,
 * as fill once batched them, kept none). */
static void test_killed_per_arm_keeps_finished_arms(void **state)
{
    (void)state;
    char dir[64], rd[128], file[192];
    static const uint64_t seeds[6] = {1, 2, 3, 4, 5, 6};
    cmp_config c = cached_config(dir, sizeof dir, rd, sizeof rd, seeds, 6);
    sim m = null_sim(7);
    m.fail_after = 8; /* in the second arm */
    cmp_runner r = {sim_run, 6, &m, 1, NULL, NULL};
    cmp_report rep;
    char err[256];
    assert_int_equal(cmp_run_study(&c, &r, &rep, err, sizeof err), 1);
    cmp_report_free(&rep);
    snprintf(file, sizeof file, "%s/runs.jsonl", rd);
    assert_int_equal(count_lines(file), 6);
    m.fail_after = 0;
    m.jobs_run = 0;
    assert_int_equal(cmp_run_study(&c, &r, &rep, err, sizeof err), 0);
    cmp_report_free(&rep);
    assert_int_equal(rep.runs_cached, 6);
    assert_int_equal(m.jobs_run, 12);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* Like sim_run, but reports every job through r->finished as it ends, as
 * the --jobs pool does (its workers finish at different times). */
static int reporting_run(cmp_runner *r, const cmp_arm *arms, const cmp_job *jobs, int n, cmp_run *out)
{
    (void)arms;
    sim *m = r->ctx;
    m->calls++;
    for (int i = 0; i < n; i++) {
        if (m->fail_after && m->jobs_run >= m->fail_after) {
            snprintf(out[0].error, sizeof out[0].error, "simulated worker death");
            return -1;
        }
        sim_one(m, jobs[i].arm, jobs[i].init_seed, jobs[i].data_seed, &out[i]);
        m->jobs_run++;
        if (r->finished) r->finished(r, &i, 1);
    }
    return 0;
}

/* All 18 runs in one call that fails after 7: the 7 the runner reported
 * finished are cached and reused; its twin, a runner that reports nothing
 * before it returns, keeps none. */
static void test_reported_runs_survive_a_failed_call(void **state)
{
    (void)state;
    char dir[64], rd[128], file[192];
    static const uint64_t seeds[6] = {1, 2, 3, 4, 5, 6};
    cmp_config c = cached_config(dir, sizeof dir, rd, sizeof rd, seeds, 6);
    snprintf(file, sizeof file, "%s/runs.jsonl", rd);
    sim m = null_sim(11);
    m.fail_after = 7;
    cmp_runner r = {reporting_run, 18, &m, 0, NULL, NULL};
    cmp_report rep;
    char err[256];
    assert_int_equal(cmp_run_study(&c, &r, &rep, err, sizeof err), 1);
    cmp_report_free(&rep);
    assert_int_equal(m.calls, 1);
    assert_non_null(strstr(err, "simulated worker death"));
    assert_int_equal(count_lines(file), 7);
    assert_null(r.finished); /* the hook lives only for the call */
    m.fail_after = 0;
    m.jobs_run = 0;
    assert_int_equal(cmp_run_study(&c, &r, &rep, err, sizeof err), 0);
    cmp_report_free(&rep);
    assert_int_equal(rep.runs_cached, 7);
    assert_int_equal(m.jobs_run, 11);
    assert_int_equal(count_lines(file), 18);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    /* twin: the same failure without reports loses the call's runs */
    c = cached_config(dir, sizeof dir, rd, sizeof rd, seeds, 6);
    snprintf(file, sizeof file, "%s/runs.jsonl", rd);
    m = null_sim(11);
    m.fail_after = 7;
    cmp_runner silent = {sim_run, 18, &m, 0, NULL, NULL};
    assert_int_equal(cmp_run_study(&c, &silent, &rep, err, sizeof err), 1);
    cmp_report_free(&rep);
    assert_true(count_lines(file) <= 0);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_cache_and_resume(void **state)
{
    (void)state;
    char dir[64], rd[128], file[192];
    static const uint64_t seeds[6] = {1, 2, 3, 4, 5, 6};
    cmp_config c = cached_config(dir, sizeof dir, rd, sizeof rd, seeds, 6);
    sim m = null_sim(42);
    m.shift[2] = 0.01;
    char err[256];
    /* killed after 7 of 18 runs */
    m.fail_after = 7;
    cmp_runner r = {sim_run, 1, &m, 0, NULL, NULL};
    cmp_report rep;
    assert_int_equal(cmp_run_study(&c, &r, &rep, err, sizeof err), 1);
    cmp_report_free(&rep);
    assert_non_null(strstr(err, "simulated kill"));
    snprintf(file, sizeof file, "%s/runs.jsonl", rd);
    assert_int_equal(count_lines(file), 7);
    /* a line cut by the kill is dropped and rerun */
    FILE *f = fopen(file, "a");
    fputs("{\"record\":\"run\",\"arm\":\"base\",\"ident", f);
    fclose(f);
    m.fail_after = 0;
    m.jobs_run = 0;
    assert_int_equal(cmp_run_study(&c, &r, &rep, err, sizeof err), 0);
    cmp_report_free(&rep);
    assert_int_equal(m.jobs_run, 11);
    assert_int_equal(rep.runs_cached, 7);
    assert_int_equal(rep.runs_executed, 11);
    assert_int_equal(count_lines(file), 18);
    cmp_report full;
    sim m2 = m;
    judge_sim(&c, &m2, 6, 1, &full);
    assert_true(rep.arm[2].paired.estimate == full.arm[2].paired.estimate);
    /* a third call runs nothing */
    m.jobs_run = 0;
    assert_int_equal(cmp_run_study(&c, &r, &rep, err, sizeof err), 0);
    cmp_report_free(&rep);
    assert_int_equal(m.jobs_run, 0);
    assert_int_equal(rep.runs_cached, 18);
    /* a renamed arm keeps its runs (identity, not name) */
    snprintf(c.arms[2].name, sizeof c.arms[2].name, "renamed");
    assert_int_equal(cmp_run_study(&c, &r, &rep, err, sizeof err), 0);
    cmp_report_free(&rep);
    assert_int_equal(m.jobs_run, 0);
    /* another recipe is refused, naming the field */
    c.recipe_json = "{\"model\":\"modern\",\"steps\":200,\"plan\":{\"preset\":\"bf16\"}}";
    assert_int_equal(cmp_run_study(&c, &r, &rep, err, sizeof err), 2);
    cmp_report_free(&rep);
    assert_non_null(strstr(err, "steps"));
    assert_null(strstr(err, "model"));
    c.recipe_json = "{\"model\":\"modern\",\"steps\":100,\"plan\":{\"preset\":\"fp8\"}}";
    assert_int_equal(cmp_run_study(&c, &r, &rep, err, sizeof err), 2);
    cmp_report_free(&rep);
    assert_non_null(strstr(err, "plan"));
    /* a corrupt line in the middle is refused, not skipped */
    c.recipe_json = "{\"model\":\"modern\",\"steps\":100,\"plan\":{\"preset\":\"bf16\"}}";
    f = fopen(file, "a");
    fputs("garbage\n", f);
    fclose(f);
    assert_int_equal(cmp_run_study(&c, &r, &rep, err, sizeof err), 2);
    cmp_report_free(&rep);
    assert_non_null(strstr(err, "corrupt"));
    /* a results path that is a file is refused */
    c.results_dir = file;
    assert_int_equal(cmp_run_study(&c, &r, &rep, err, sizeof err), 2);
    cmp_report_free(&rep);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_bad_settings(void **state)
{
    (void)state;
    uint64_t seeds[3] = {1, 2, 2};
    cmp_config c = config_with(3, 1);
    c.seeds = seeds;
    c.n_seeds = 3;
    sim m = null_sim(1);
    cmp_runner r = {sim_run, 1, &m, 0, NULL, NULL};
    cmp_report rep;
    char err[256];
    assert_int_equal(cmp_run_study(&c, &r, &rep, err, sizeof err), 2);
    cmp_report_free(&rep);
    assert_non_null(strstr(err, "listed twice"));
    c.n_seeds = 0;
    assert_int_equal(cmp_run_study(&c, &r, &rep, err, sizeof err), 2);
    cmp_report_free(&rep);
    assert_non_null(strstr(err, "at least 2 seeds"));
    c.n_seeds = 2;
    snprintf(c.arms[2].name, sizeof c.arms[2].name, "base");
    assert_int_equal(cmp_run_study(&c, &r, &rep, err, sizeof err), 2);
    cmp_report_free(&rep);
    assert_non_null(strstr(err, "duplicate arm name 'base'"));
    c = config_with(3, 1);
    c.seeds = seeds;
    c.n_seeds = 2;
    c.arms[2].identity = "plan-base";
    assert_int_equal(cmp_run_study(&c, &r, &rep, err, sizeof err), 2);
    cmp_report_free(&rep);
    assert_non_null(strstr(err, "run the same plan"));
    c = config_with(3, 0);
    c.seeds = seeds;
    c.n_seeds = 2;
    assert_int_equal(cmp_run_study(&c, &r, &rep, err, sizeof err), 2);
    cmp_report_free(&rep);
    assert_non_null(strstr(err, "no margin"));
    assert_int_equal(m.calls, 0);
}

/* noise: the spreads it estimates are the simulation's, and its run counts
 * are the formula's for those spreads; pairing needs fewer runs. */
static void test_noise(void **state)
{
    (void)state;
    sim m = null_sim(test_seed("test_noise"));
    const int n = 400;
    cmp_run *base = malloc((size_t)n * sizeof *base), *null = malloc((size_t)n * sizeof *null);
    for (int s = 0; s < n; s++) {
        sim_one(&m, 0, (uint64_t)s + 1, (uint64_t)s + 1, &base[s]);
        sim_one(&m, 1, (uint64_t)s + 1, (uint64_t)s + 1, &null[s]);
    }
    null[5].status = 3; /* a failed run is left out, not counted */
    noise_point p[4];
    int np = noise_analyse(base, null, n, 0.05, 0.8, p, 4);
    assert_int_equal(np, 2);
    assert_int_equal(p[1].step, 100);
    assert_int_equal(p[1].n, n - 1);
    double se_sd = 1.0 / sqrt(2.0 * (n - 2)); /* relative standard error of a normal sd */
    double want_seed = sqrt(m.seed_sd * m.seed_sd + m.chaos_sd * m.chaos_sd);
    print_message("noise: seed sd %.5f (true %.5f), chaos sd %.5f (true %.5f), corr %.3f\n", p[1].seed_sd, want_seed,
                  p[1].chaos_sd, m.chaos_sd, p[1].corr);
    assert_true(fabs(p[1].seed_sd / want_seed - 1) < 4.4 * se_sd);
    assert_true(fabs(p[1].chaos_sd / m.chaos_sd - 1) < 4.4 * se_sd);
    for (int k = 0; k < NOISE_SHIFTS; k++) {
        assert_true(p[1].paired_runs[k] ==
                    stats_runs_for_shift(noise_shifts[k], p[1].chaos_sd * sqrt(2.0), 0.05, 0.8));
        assert_true(p[1].paired_runs[k] < p[1].unpaired_runs[k]);
    }
    free(base);
    free(null);
}

/* --shard I/N: what parses, and shares that cover the list once, in order,
 * as evenly as integers allow. */
static void test_shards(void **state)
{
    (void)state;
    static const char *bad[] = {"0/0", "3/2", "2/2", "x", "", "1", "1/", "/2", "-1/2", "1/-2", "0/2x", "0/100001"};
    int i, n;
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        if (cmp_shard_parse(bad[k], &i, &n) == 0) fail_msg("'%s' parsed as shard %d/%d", bad[k], i, n);
    assert_int_equal(cmp_shard_parse("3/8", &i, &n), 0);
    assert_int_equal(i, 3);
    assert_int_equal(n, 8);
    for (int seeds = 1; seeds <= 40; seeds++)
        for (int shards = 1; shards <= seeds; shards++) {
            int next = 0;
            for (int s = 0; s < shards; s++) {
                int from, to;
                cmp_shard_range(seeds, s, shards, &from, &to);
                assert_int_equal(from, next);
                assert_true(to - from >= seeds / shards && to - from <= seeds / shards + 1);
                next = to;
            }
            assert_int_equal(next, seeds);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_false_shift_rate),
        cmocka_unit_test(test_false_equivalence_rate),
        cmocka_unit_test(test_power),
        cmocka_unit_test(test_family_wise_rate),
        cmocka_unit_test(test_sequential),
        cmocka_unit_test(test_identical),
        cmocka_unit_test(test_cache_and_resume),
        cmocka_unit_test(test_killed_per_arm_keeps_finished_arms),
        cmocka_unit_test(test_reported_runs_survive_a_failed_call),
        cmocka_unit_test(test_bad_settings),
        cmocka_unit_test(test_noise),
        cmocka_unit_test(test_shards),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
