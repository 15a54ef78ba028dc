/* tests/test_compare_cli.c — `ulpscope compare` and `ulpscope noise` end to
 * end on the CPU backend with a tiny model (runs are deterministic there, so
 * each verdict below is fixed by the seeds, not drawn):
 *   - an arm with a planted bias (its stores truncate) comes out SHIFT up; the
 *     null arm (one flipped ulp), judged by the same machinery, does not;
 *   - the results directory: a second call with more seeds reuses the runs it
 *     has; a call under another recipe is refused, naming the field;
 *   - the --json output parses, with a record per run and per arm;
 *   - bad input: one line naming the problem, exit 2, nothing left behind;
 *   - noise prints its table from the same cache;
 *   - shards: two processes at once, each with half the seeds, into one
 *     results directory, then a merge call that runs nothing and gives the
 *     runs and verdicts of one unsharded call.
 *   - --jobs N: the runs of N worker processes are those of one process
 *     (compare, noise, bisect), and a planted pool mistake (a request with
 *     the base's plan or another arm's) breaks that equality (the twins); a
 *     killed worker ends the call with exit 1 naming it while the finished
 *     runs stay in the cache; workers end with their parent; bad --jobs
 *     values exit 2;
 *   - bisect --jobs 2 with --windows: the window arms' switches reach the
 *     workers (the same records as --jobs 1); bad --windows values exit 2;
 *   - bisect finds a planted culprit among three units, prints a progress
 *     line while it runs, and writes each culprit's effect (difference and
 *     interval), the clean complement, the runs and the time as JSON Lines
 *     (tests/test_bisect.c measures the search itself).
 * Drives the binary named by ULPSCOPE_BIN (make test sets it). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <signal.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/json_read.h"

#define TINY "--depth 1 --width 16 --heads 2 --seq 16 --batch 4 --steps 24 --lr 3e-3 --quiet"

static char tmp[64];

static int setup(void **state)
{
    (void)state;
    if (!getenv("ULPSCOPE_BIN")) return 0;
    snprintf(tmp, sizeof tmp, "/tmp/ulpscope_cmpcli_XXXXXX");
    return mkdtemp(tmp) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    if (!tmp[0]) return 0;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    return system(cmd) == 0 ? 0 : -1;
}

/* Runs `ulpscope ARGS` in the temporary directory: stdout into out, stderr
 * into err; returns the exit status. */
static int run(const char *args, char *out, size_t out_len, char *err, size_t err_len)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s >out.txt 2>err.txt", tmp, getenv("ULPSCOPE_BIN"), args);
    int status = system(cmd);
    char path[128];
    char *bufs[2] = {out, err};
    size_t lens[2] = {out_len, err_len};
    const char *names[2] = {"out.txt", "err.txt"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", tmp, names[i]);
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(bufs[i], 1, lens[i] - 1, f) : 0;
        bufs[i][n] = '\0';
        if (f) fclose(f);
        remove(path);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

#define SKIP_WITHOUT_BIN()                                                              \
    do {                                                                                \
        if (!getenv("ULPSCOPE_BIN")) {                                                  \
            print_message("skipping: ULPSCOPE_BIN is not set (make test sets it)\n"); \
            skip();                                                                     \
        }                                                                               \
    } while (0)

/* The table row of an arm. */
static const char *row_of(const char *out, const char *arm)
{
    char key[64];
    snprintf(key, sizeof key, "\n%s ", arm);
    const char *p = strstr(out, key);
    return p ? p + 1 : NULL;
}

static int row_says(const char *out, const char *arm, const char *what)
{
    const char *r = row_of(out, arm);
    if (!r) return 0;
    const char *end = strchr(r, '\n');
    const char *hit = strstr(r, what);
    return hit && (!end || hit < end);
}

/* A whole file (NUL-ended; the caller frees), or a failed test. */
static char *slurp(const char *name)
{
    FILE *f = fopen(name, "rb");
    if (!f) fail_msg("cannot open %s", name);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *copy = strdup(buf);
    assert_non_null(copy);
    return copy;
}

/* A whole file of the temporary directory (the caller frees). */
static char *slurp_in_tmp(const char *name)
{
    char path[160];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    return slurp(path);
}

static long file_size(const char *name)
{
    struct stat st;
    if (stat(name, &st)) fail_msg("cannot stat %s", name);
    return (long)st.st_size;
}

static void test_planted_bias_is_a_shift(void **state)
{
    (void)state;
    SKIP_WITHOUT_BIN();
    static char out[16384], err[16384];
    int rc = run("compare " TINY " --seeds 5 --alpha 0.01 --arm trunc=residual=bf16 --plant-truncation trunc "
                 "--results res --json cmp.jsonl",
                 out, sizeof out, err, sizeof err);
    print_message("%s", out);
    if (rc) fail_msg("compare failed (%d): %s", rc, err);
    assert_true(row_says(out, "trunc", "SHIFT up"));
    /* the null arm: the same statistics on pure chaos */
    assert_non_null(row_of(out, "null"));
    assert_false(row_says(out, "null", "SHIFT"));
    assert_non_null(strstr(out, "15 runs (15 executed now, 0 from the cache)"));
    /* the JSON output: a header, 15 runs, 3 arms, the noise record */
    char path[128];
    snprintf(path, sizeof path, "%s/cmp.jsonl", tmp);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[16384];
    int runs = 0, arms = 0, header = 0, noise = 0;
    while (fgets(line, sizeof line, f)) {
        json_value *v;
        char jerr[256];
        if (json_parse(line, strlen(line), &v, jerr, sizeof jerr)) fail_msg("bad JSON line: %s", jerr);
        const json_value *rec = json_get(v, "record");
        assert_non_null(rec);
        runs += strcmp(rec->text, "run") == 0;
        arms += strcmp(rec->text, "arm") == 0;
        header += strcmp(rec->text, "header") == 0;
        noise += strcmp(rec->text, "noise") == 0;
        if (strcmp(rec->text, "arm") == 0 && strcmp(json_get(v, "arm")->text, "trunc") == 0)
            assert_string_equal(json_get(v, "verdict")->text, "SHIFT up");
        json_free(v);
    }
    fclose(f);
    assert_int_equal(header, 1);
    assert_int_equal(runs, 15);
    assert_int_equal(arms, 3);
    assert_int_equal(noise, 1);

    /* more seeds: the 15 finished runs come from the cache */
    rc = run("compare " TINY " --seeds 6 --alpha 0.01 --arm trunc=residual=bf16 --plant-truncation trunc --results res",
             out, sizeof out, err, sizeof err);
    if (rc) fail_msg("compare failed (%d): %s", rc, err);
    assert_non_null(strstr(out, "18 runs (3 executed now, 15 from the cache)"));

    /* noise reads the base and null runs from the same cache */
    rc = run("noise " TINY " --seeds 6 --results res", out, sizeof out, err, sizeof err);
    if (rc) fail_msg("noise failed (%d): %s", rc, err);
    assert_non_null(strstr(out, "chaos sd"));
    assert_non_null(strstr(out, "12 runs (0 executed now, 12 from the cache)"));

    /* another recipe in the same directory is refused before any run */
    rc = run("compare --depth 1 --width 16 --heads 2 --seq 16 --batch 4 --steps 25 --lr 3e-3 --quiet --seeds 5 "
             "--arm trunc=residual=bf16 --plant-truncation trunc --results res",
             out, sizeof out, err, sizeof err);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "another recipe"));
    assert_non_null(strstr(err, "steps"));

    /* runs another build made are refused too (its kernels may differ), naming both builds */
    char recipe_file[128], runs_file[128];
    snprintf(recipe_file, sizeof recipe_file, "%s/res/recipe.json", tmp);
    snprintf(runs_file, sizeof runs_file, "%s/res/runs.jsonl", tmp);
    char *recipe = slurp(recipe_file);
    char *at = strstr(recipe, "\"build\":\"");
    assert_non_null(at);
    FILE *f2 = fopen(recipe_file, "w");
    assert_non_null(f2);
    fprintf(f2, "%.*s\"build\":\"ulpscope 0.0 0123456789ab\",%s", (int)(at - recipe), recipe,
            strchr(at + strlen("\"build\":\""), '"') + 2);
    fclose(f2);
    long before = file_size(runs_file);
    rc = run("compare " TINY " --seeds 6 --alpha 0.01 --arm trunc=residual=bf16 --plant-truncation trunc --results res",
             out, sizeof out, err, sizeof err);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "another build of ulpscope (ulpscope 0.0 0123456789ab; this is "));
    assert_int_equal(file_size(runs_file), before);
    free(recipe);
}

static int exists(const char *name);

static double number(const json_value *v, const char *key)
{
    double x;
    if (json_double(json_get(v, key), &x)) fail_msg("no number '%s'", key);
    return x;
}

static void test_bisect_progress_and_json(void **state)
{
    (void)state;
    SKIP_WITHOUT_BIN();
    static char out[16384], err[65536];
    /* not --quiet: the progress lines go to stderr */
    int rc = run("bisect --depth 1 --width 16 --heads 2 --seq 16 --batch 4 --steps 24 --lr 3e-3 --val-tokens 2048 "
                 "--bad attn.qkv=bf16:split_k,mlp.up=bf16:split_k,optimizer.adamw=fp32:torch "
                 "--plant-truncation optimizer.adamw:torch --seed-schedule 3,8 --margin 0.001 --ddmax "
                 "--results bis --json bis.jsonl",
                 out, sizeof out, err, sizeof err);
    print_message("%s", out);
    if (rc) fail_msg("bisect failed (%d): %s", rc, err);
    assert_non_null(strstr(err, "bisect: 3 units differ (3 groups); the noise floor: the null arm at 8 seeds\n"));
    assert_non_null(strstr(err, "bisect: judged "));
    assert_non_null(strstr(out, "culprit 1: optimizer.adamw\n"));
    assert_non_null(strstr(out, "the rest (2 groups) switched to bad: EQUIVALENT"));
    assert_true(row_says(out, "culprit1", "SHIFT up"));
    char path[128];
    snprintf(path, sizeof path, "%s/bis.jsonl", tmp);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[16384];
    int header = 0, culprits = 0, summaries = 0;
    while (fgets(line, sizeof line, f)) {
        json_value *v;
        char jerr[256];
        if (json_parse(line, strlen(line), &v, jerr, sizeof jerr)) fail_msg("bad JSON line: %s", jerr);
        const char *rec = json_get(v, "record")->text;
        header += strcmp(rec, "header") == 0;
        if (strcmp(rec, "culprit") == 0) {
            culprits++;
            const json_value *g = json_get(v, "groups");
            assert_int_equal(g->n_items, 1);
            assert_string_equal(g->items[0].text, "optimizer.adamw");
            assert_int_equal(json_get(v, "confirmed")->type, JSON_TRUE);
            /* the effect: a positive difference whose interval excludes 0 */
            assert_true(number(v, "ci_lo") > 0);
            assert_true(number(v, "diff") > number(v, "ci_lo") && number(v, "ci_hi") > number(v, "diff"));
            assert_string_equal(json_get(v, "verdict")->text, "SHIFT up");
        }
        if (strcmp(rec, "bisect") == 0) {
            summaries++;
            assert_int_equal(json_get(v, "rest")->n_items, 2);
            assert_string_equal(json_get(v, "rest_verdict")->text, "EQUIVALENT");
            const json_value *re = json_get(v, "rest_effect");
            assert_true(number(re, "ci_lo") > -0.001 && number(re, "ci_hi") < 0.001);
            assert_int_equal(json_get(v, "clean")->n_items, 2);
            assert_true(number(v, "runs_executed") > 0);
            assert_true(number(v, "runs_total") == number(v, "runs_executed") + number(v, "runs_cached"));
            assert_true(number(v, "seconds") > 0);
        }
        json_free(v);
    }
    fclose(f);
    assert_int_equal(header, 1);
    assert_int_equal(culprits, 1);
    assert_int_equal(summaries, 1);
    /* the seed schedule has its own name: --schedule is the learning-rate schedule */
    rc = run("bisect " TINY " --bad attn.qkv=bf16:split_k --seed-schedule 8,4 --results bad2 --json bad2.jsonl", out,
             sizeof out, err, sizeof err);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "--seed-schedule 8,4"));
    rc = run("bisect " TINY " --bad attn.qkv=bf16:split_k --schedule 4,8 --results bad2 --json bad2.jsonl", out,
             sizeof out, err, sizeof err);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "unknown schedule '4,8' (schedules: cosine, linear)"));
    rc = run("bisect " TINY " --bad attn.qkv=bf16:split_k --group-by layers --results bad2 --json bad2.jsonl", out,
             sizeof out, err, sizeof err);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "--group-by layers: unit, layer, slot or role"));
    assert_false(exists("bad2"));
    assert_false(exists("bad2.jsonl"));
    /* --refine looks inside coarser groups: with units (the default) it has nothing to do */
    rc = run("bisect " TINY " --bad attn.qkv=bf16:split_k --refine --results bad2 --json bad2.jsonl", out, sizeof out,
             err, sizeof err);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "--refine searches inside the culprit groups of --group-by"));
    assert_false(exists("bad2"));
    assert_false(exists("bad2.jsonl"));
}

static int exists(const char *name)
{
    char path[160];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    return stat(path, &st) == 0;
}

static void test_bad_input(void **state)
{
    (void)state;
    SKIP_WITHOUT_BIN();
    static const struct {
        const char *args, *says;
    } cases[] = {
        {"--arm x=mlp.up=fp32 --arm x=mlp.down=fp32", "duplicate arm name 'x'"},
        {"--arm x=nosuchslot=bf16", "nosuchslot"},
        {"--arm x=mlp.up=bf16:", "mlp.up"},
        {"--arm 'x'", "expected NAME=OVERRIDES"},
        {"--arm base=mlp.up=fp32", "names 'base' and 'null'"},
        {"--arm x=mlp.up=bf16", "run the same plan"},
        {"--arm x=mlp.up=fp32 --seeds 0", "--seeds 0"},
        {"--arm x=mlp.up=fp32 --seeds 3,3", "listed twice"},
        {"--arm x=mlp.up=fp32 --seeds 3,,4", "is not a seed"},
        {"--arm x=mlp.up=fp32 --null-arm no", "--margin"},
        {"--arm x=mlp.up=fp32 --vary sideways", "--vary sideways"},
        {"--arm x=mlp.up=fp32 --max-runs 10", "go with --until-decided"},
        {"--arm x=mlp.up=fp32 --plant-truncation y", "no such arm"},
        {"--arm x=norm.*=bf16:welford", "arm x: "},
        {"--arm x=mlp.up=fp32 --replicas 0", "--replicas"},
        {"--arm x=mlp.up=fp32 --shard 0/0", "--shard 0/0"},
        {"--arm x=mlp.up=fp32 --shard 3/2", "--shard 3/2"},
        {"--arm x=mlp.up=fp32 --shard x", "--shard x"},
        {"--arm x=mlp.up=fp32 --shard 0/2", "the call without --shard judges"},
        {"--arm x=mlp.up=fp32 --jobs 0", "--jobs needs an integer in 1..64, got '0'"},
        {"--arm x=mlp.up=fp32 --jobs x", "--jobs needs an integer in 1..64, got 'x'"},
        {"--arm x=mlp.up=fp32 --jobs 65", "--jobs needs an integer in 1..64, got '65'"},
        {"--arm x=mlp.up=fp32 --plant-jobs-bug base-plan", "give --jobs N > 1"},
        {"--arm x=mlp.up=fp32 --jobs 2 --plant-jobs-bug sideways", "--plant-jobs-bug sideways"},
        {"--arm x=mlp.up=fp32 --jobs-worker 7,8", "internal to --jobs"},
        {"", "no --arm given"},
    };
    /* bisect's own: whole command lines (one sets fewer steps than TINY) */
    static const struct {
        const char *args, *says;
    } bisect_cases[] = {
        {"bisect " TINY " --bad mlp.up=fp32 --windows 1", "--windows needs an integer in 2..15, got '1'"},
        {"bisect " TINY " --bad mlp.up=fp32 --windows -3", "--windows needs an integer in 2..15, got '-3'"},
        {"bisect " TINY " --bad mlp.up=fp32 --windows 2.5", "--windows needs an integer in 2..15, got '2.5'"},
        {"bisect --depth 1 --width 16 --heads 2 --seq 16 --batch 4 --steps 8 --quiet --bad mlp.up=fp32 --windows 12",
         "--windows 12: more windows than the run's 8 steps"},
    };
    static char out[8192], err[8192];
    const size_t n_compare = sizeof cases / sizeof cases[0], n_bisect = sizeof bisect_cases / sizeof bisect_cases[0];
    for (size_t i = 0; i < n_compare + n_bisect; i++) {
        char args[512];
        const char *given = i < n_compare ? cases[i].args : bisect_cases[i - n_compare].args;
        const char *says = i < n_compare ? cases[i].says : bisect_cases[i - n_compare].says;
        if (i < n_compare) snprintf(args, sizeof args, "compare " TINY " %s --results bad --json bad.jsonl", given);
        else snprintf(args, sizeof args, "%s --results bad --json bad.jsonl", given);
        int rc = run(args, out, sizeof out, err, sizeof err);
        if (rc != 2 || !strstr(err, says))
            fail_msg("'%s': exit %d, expected 2 and a message with '%s'; got: %s", given, rc, says, err);
        if (strchr(err, '\n') != err + strlen(err) - 1) fail_msg("'%s': more than one line: %s", given, err);
        assert_false(exists("bad"));
        assert_false(exists("bad.jsonl"));
    }
}

/* The lines of a JSON Lines output without what differs between calls of
 * one study: the header (time, host) and the wall times. */
static void stable_lines(const char *name, char *buf, size_t len)
{
    char path[160], line[16384];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("cannot read %s", path);
    size_t n = 0;
    buf[0] = '\0';
    static const char *volatile_keys[] = {"\"seconds\":", "\"time_mean\":", "\"time_sd\":"};
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "\"record\":\"header\"")) continue;
        for (size_t k = 0; k < sizeof volatile_keys / sizeof volatile_keys[0]; k++) {
            char *at = strstr(line, volatile_keys[k]);
            if (!at) continue;
            char *end = at + strlen(volatile_keys[k]);
            end += strcspn(end, ",}");
            memmove(at, end, strlen(end) + 1);
        }
        n += (size_t)snprintf(buf + n, len - n, "%s", line);
        if (n >= len) fail_msg("%s: output too long for the test's buffer", name);
    }
    fclose(f);
}

static int count_file_lines(const char *name)
{
    char path[160];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int n = 0, c;
    while ((c = fgetc(f)) != EOF) n += c == '\n';
    fclose(f);
    return n;
}

static void test_shards_merge(void **state)
{
    (void)state;
    SKIP_WITHOUT_BIN();
    /* A Slurm job array would start the shards; CI has no Slurm (nor should
     * the test depend on one), so the two shards are two processes started
     * at once by the shell: what matters is that they share the directory
     * concurrently and then merge. */
    int slurm = system("which sbatch slurmctld >/dev/null 2>&1") == 0;
    print_message("slurm %s on this machine; the shards run as two concurrent processes\n",
                  slurm ? "is installed" : "is not installed");
#define STUDY "compare " TINY " --seeds 5 --arm trunc=residual=bf16 --plant-truncation trunc"
    static char out[16384], err[16384], merged[65536], single[65536];
    char cmd[4096];
    const char *bin = getenv("ULPSCOPE_BIN");
    snprintf(cmd, sizeof cmd,
             "cd '%s' && ('%s' " STUDY " --shard 0/2 --results sh >s0.txt 2>&1 & p0=$!; '%s' " STUDY
             " --shard 1/2 --results sh >s1.txt 2>&1 & p1=$!; wait $p0 && wait $p1)",
             tmp, bin, bin);
    int rc = system(cmd);
    if (!WIFEXITED(rc) || WEXITSTATUS(rc)) fail_msg("a shard failed (status %d)", rc);
    /* seeds 1-2 and 3-5, every arm, each shard in its own file */
    assert_int_equal(count_file_lines("sh/runs.shard-0-of-2.jsonl"), 6);
    assert_int_equal(count_file_lines("sh/runs.shard-1-of-2.jsonl"), 9);
    rc = run(STUDY " --results sh --json merged.jsonl", out, sizeof out, err, sizeof err);
    if (rc) fail_msg("merge failed (%d): %s", rc, err);
    print_message("%s", out);
    assert_non_null(strstr(out, "15 runs (0 executed now, 15 from the cache)"));
    rc = run(STUDY " --results one --json single.jsonl", out, sizeof out, err, sizeof err);
    if (rc) fail_msg("unsharded compare failed (%d): %s", rc, err);
    assert_non_null(strstr(out, "15 runs (15 executed now, 0 from the cache)"));
    stable_lines("merged.jsonl", merged, sizeof merged);
    stable_lines("single.jsonl", single, sizeof single);
    assert_non_null(strstr(single, "\"verdict\":\"SHIFT up\""));
    assert_string_equal(merged, single);
    /* noise shards over the same directory find the base's and null arm's runs there */
    rc = run("noise " TINY " --seeds 5 --shard 1/2 --results sh", out, sizeof out, err, sizeof err);
    if (rc) fail_msg("noise shard failed (%d): %s", rc, err);
    assert_non_null(strstr(out, "6 runs in sh (0 executed now, 6 from the cache)"));
    assert_non_null(strstr(out, "no verdict from a shard"));
    /* more shards than seeds: refused before anything is written */
    rc = run("compare " TINY " --seeds 3 --arm x=mlp.up=fp32 --shard 0/9 --results bad9", out, sizeof out, err, sizeof err);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "9 shards of 3 seeds"));
    assert_false(exists("bad9"));
#undef STUDY
}

/* --gpus 2: the two shards as two processes this call starts (one per
 * GPU; the CPU backend here), then the verdict from the cache: the runs and
 * verdicts of one unsharded call, and stdout keeps only this call's output. */
static void test_gpus_spread(void **state)
{
    (void)state;
    SKIP_WITHOUT_BIN();
#define STUDY "compare " TINY " --seeds 5 --arm trunc=residual=bf16 --plant-truncation trunc"
    static char out[16384], err[16384], spread[65536], single[65536];
    int rc = run(STUDY " --gpus 2 --results gp --json spread.jsonl", out, sizeof out, err, sizeof err);
    if (rc) fail_msg("--gpus 2 failed (%d): %s", rc, err);
    print_message("%s", out);
    assert_non_null(strstr(out, "15 runs (0 executed now, 15 from the cache)"));
    assert_null(strstr(out, "shard 0/2")); /* the shards' summaries went to stderr */
    assert_non_null(strstr(err, "shard 0/2"));
    assert_non_null(strstr(err, "shard 1/2"));
    assert_int_equal(count_file_lines("gp/runs.shard-0-of-2.jsonl"), 6);
    assert_int_equal(count_file_lines("gp/runs.shard-1-of-2.jsonl"), 9);
    rc = run(STUDY " --results one-gp --json single-gp.jsonl", out, sizeof out, err, sizeof err);
    if (rc) fail_msg("unsharded compare failed (%d): %s", rc, err);
    stable_lines("spread.jsonl", spread, sizeof spread);
    stable_lines("single-gp.jsonl", single, sizeof single);
    assert_non_null(strstr(single, "\"verdict\":\"SHIFT up\""));
    assert_string_equal(spread, single);
    /* bad settings: refused before anything runs or is written */
    rc = run(STUDY " --gpus 2", out, sizeof out, err, sizeof err);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "--gpus needs --results"));
    rc = run(STUDY " --gpus 2 --shard 0/2 --results gp-bad", out, sizeof out, err, sizeof err);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "not both"));
    assert_false(exists("gp-bad"));
    setenv("CUDA_VISIBLE_DEVICES", "7", 1);
    rc = run(STUDY " --gpus 2 --results gp-dev", out, sizeof out, err, sizeof err);
    unsetenv("CUDA_VISIBLE_DEVICES");
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "names fewer devices"));
    assert_false(exists("gp-dev"));
#undef STUDY
}

/* Lines of out when every one is a JSON record; -1 otherwise. */
static int json_record_lines(const char *out)
{
    int lines = 0;
    for (const char *p = out; *p;) {
        const char *nl = strchr(p, '\n');
        if (!nl) return -1;
        json_value *v;
        char jerr[256];
        if (json_parse(p, (size_t)(nl - p), &v, jerr, sizeof jerr)) return -1;
        int record = json_get(v, "record") != NULL;
        json_free(v);
        if (!record) return -1;
        lines++;
        p = nl + 1;
    }
    return lines;
}

/* With --json -, stdout carries JSON Lines only; the progress lines and the
 * table go to stderr.  Without it the table is on stdout, which the check
 * must then reject (its twin). */
static void check_pure_json(const char *args, const char *table)
{
    static char out[262144], err[65536];
    char with_json[1024];
    snprintf(with_json, sizeof with_json, "%s --json -", args);
    int rc = run(with_json, out, sizeof out, err, sizeof err);
    if (rc) fail_msg("'%s' failed (%d): %s", with_json, rc, err);
    int lines = json_record_lines(out);
    if (lines < 4) fail_msg("'%s': stdout is not JSON Lines only: %.200s", with_json, out);
    if (!strstr(err, table)) fail_msg("'%s': stderr lacks '%s'", with_json, table);
    assert_non_null(strstr(err, "  run base seed 1: val")); /* the progress, not quieted */
    rc = run(args, out, sizeof out, err, sizeof err);
    if (rc) fail_msg("'%s' failed (%d): %s", args, rc, err);
    assert_non_null(strstr(out, table));
    assert_int_equal(json_record_lines(out), -1);
}

static void test_json_stdout_is_pure(void **state)
{
    (void)state;
    SKIP_WITHOUT_BIN();
#define LOUD "--depth 1 --width 16 --heads 2 --seq 16 --batch 4 --steps 8 --lr 3e-3 --seeds 3"
    check_pure_json("compare " LOUD " --arm f32=residual=fp32", "noise floor:");
    /* the workers' progress goes to stderr too */
    check_pure_json("compare " LOUD " --arm f32=residual=fp32 --jobs 2", "noise floor:");
    check_pure_json("noise " LOUD, "chaos sd");
#undef LOUD
}

/* --jobs N against one process: the same runs (final loss, curve, state
 * hash, status) and verdicts, over four arms and four seeds (compare: an arm
 * per worker and more) and two arms whose seeds the pool splits over three
 * workers (noise); twins: the pool's planted mistakes must change them. */
static void test_jobs_same_runs(void **state)
{
    (void)state;
    SKIP_WITHOUT_BIN();
#define STUDY "compare " TINY " --seeds 4 --arm trunc=residual=bf16 --plant-truncation trunc --arm f32=residual=fp32"
    static char out[16384], err[65536], one[65536], many[65536], planted[65536];
    int rc = run(STUDY " --results j1 --json j1.jsonl", out, sizeof out, err, sizeof err);
    if (rc) fail_msg("compare failed (%d): %s", rc, err);
    rc = run(STUDY " --jobs 3 --results j3 --json j3.jsonl", out, sizeof out, err, sizeof err);
    if (rc) fail_msg("compare --jobs 3 failed (%d): %s", rc, err);
    print_message("%s", out);
    assert_non_null(strstr(out, "16 runs (16 executed now, 0 from the cache)"));
    stable_lines("j1.jsonl", one, sizeof one);
    stable_lines("j3.jsonl", many, sizeof many);
    assert_non_null(strstr(one, "\"state_hash\":"));
    assert_non_null(strstr(one, "\"verdict\":\"SHIFT up\""));
    assert_string_equal(many, one);
    static const char *bugs[] = {"base-plan", "wrong-arm"};
    for (int b = 0; b < 2; b++) {
        char args[1024], json[64];
        snprintf(json, sizeof json, "jb-%s.jsonl", bugs[b]);
        snprintf(args, sizeof args, STUDY " --jobs 3 --plant-jobs-bug %s --results jb-%s --json %s", bugs[b], bugs[b],
                 json);
        rc = run(args, out, sizeof out, err, sizeof err);
        if (rc) fail_msg("compare with the planted %s failed (%d): %s", bugs[b], rc, err);
        stable_lines(json, planted, sizeof planted);
        if (strcmp(planted, one) == 0) fail_msg("the planted pool mistake %s left the runs unchanged", bugs[b]);
    }
#undef STUDY
    rc = run("noise " TINY " --seeds 4 --results n1 --json n1.jsonl", out, sizeof out, err, sizeof err);
    if (rc) fail_msg("noise failed (%d): %s", rc, err);
    rc = run("noise " TINY " --seeds 4 --jobs 3 --results n3 --json n3.jsonl", out, sizeof out, err, sizeof err);
    if (rc) fail_msg("noise --jobs 3 failed (%d): %s", rc, err);
    assert_non_null(strstr(out, "8 runs (8 executed now, 0 from the cache)"));
    stable_lines("n1.jsonl", one, sizeof one);
    stable_lines("n3.jsonl", many, sizeof many);
    assert_string_equal(many, one);
    /* --jobs is listed; the worker's and the test's options are not */
    rc = run("compare --help", out, sizeof out, err, sizeof err);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "--jobs N"));
    assert_null(strstr(out, "--jobs-worker"));
    assert_null(strstr(out, "--plant-jobs-bug"));
    /* bad values for noise and bisect too: exit 2, one line */
    static const char *bad[] = {"noise " TINY " --jobs 0", "noise " TINY " --jobs 65",
                                "bisect " TINY " --bad mlp.up=fp32 --jobs x", "bisect " TINY " --bad mlp.up=fp32 --jobs 100"};
    for (int i = 0; i < 4; i++) {
        rc = run(bad[i], out, sizeof out, err, sizeof err);
        if (rc != 2 || !strstr(err, "--jobs needs an integer in 1..64") || strchr(err, '\n') != err + strlen(err) - 1)
            fail_msg("'%s': exit %d: %s", bad[i], rc, err);
    }
}

/* bisect with --jobs 2: the culprits, counts and effects of --jobs 1; its
 * twin, requests with the good plan, finds none. */
static void test_jobs_bisect(void **state)
{
    (void)state;
    SKIP_WITHOUT_BIN();
#define BISECT "bisect --depth 1 --width 16 --heads 2 --seq 16 --batch 4 --steps 24 --lr 3e-3 --val-tokens 2048 --quiet " \
               "--bad mlp.up=bf16:split_k,optimizer.adamw=fp32:torch --plant-truncation optimizer.adamw:torch "       \
               "--seed-schedule 3,6 --margin 0.001 --windows 2"
    static char out[16384], err[65536], one[65536], many[65536];
    int rc = run(BISECT " --results b1 --json b1.jsonl", out, sizeof out, err, sizeof err);
    if (rc) fail_msg("bisect failed (%d): %s", rc, err);
    assert_non_null(strstr(out, "culprit 1: optimizer.adamw\n"));
    /* --windows 2: the window arms' switches travel in the requests (a worker
     * that dropped them would run window 2 as good: its record below would
     * differ from this call's) */
    assert_non_null(strstr(out, "w2 [12,24)"));
    rc = run(BISECT " --jobs 2 --results b2 --json b2.jsonl", out, sizeof out, err, sizeof err);
    if (rc) fail_msg("bisect --jobs 2 failed (%d): %s", rc, err);
    print_message("%s", out);
    assert_non_null(strstr(out, "culprit 1: optimizer.adamw\n"));
    stable_lines("b1.jsonl", one, sizeof one);
    stable_lines("b2.jsonl", many, sizeof many);
    assert_non_null(strstr(one, "\"runs_executed\":"));
    assert_non_null(strstr(one, "{\"record\":\"window\",\"culprit\":1,\"window\":2,\"steps\":[12,24]"));
    assert_string_equal(many, one);
    rc = run(BISECT " --jobs 2 --plant-jobs-bug base-plan --results bb", out, sizeof out, err, sizeof err);
    if (rc) fail_msg("bisect with the planted base-plan failed (%d): %s", rc, err);
    assert_null(strstr(out, "culprit 1: optimizer.adamw\n"));
#undef BISECT
}

/* The pids whose parent is pid (from /proc), at most max. */
static int children_of(pid_t pid, pid_t *kids, int max)
{
    DIR *d = opendir("/proc");
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        char path[300], buf[512];
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t k = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[k] = '\0';
        const char *close_paren = strrchr(buf, ')'); /* the name may hold spaces */
        char state;
        int ppid;
        if (close_paren && sscanf(close_paren + 1, " %c %d", &state, &ppid) == 2 && ppid == (int)pid)
            kids[n++] = (pid_t)atoi(e->d_name);
    }
    closedir(d);
    return n;
}

/* Gone, or a zombie waiting for whoever adopted it: no longer running. */
static int ended(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    size_t k = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[k] = '\0';
    const char *close_paren = strrchr(buf, ')');
    return !close_paren || close_paren[2] == 'Z' || close_paren[2] == 'X';
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Starts `ulpscope ARGS` (words split at spaces) in the temporary directory
 * with stdout and stderr into files; its pid. */
static pid_t start(const char *args, const char *out_name, const char *err_name)
{
    static char words[4096];
    char *argv[128];
    int n = 0;
    snprintf(words, sizeof words, "%s", args);
    argv[n++] = (char *)getenv("ULPSCOPE_BIN");
    for (char *w = strtok(words, " "); w && n < 127; w = strtok(NULL, " ")) argv[n++] = w;
    argv[n] = NULL;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        if (chdir(tmp) || !freopen(out_name, "w", stdout) || !freopen(err_name, "w", stderr)) _exit(126);
        execv(argv[0], argv);
        _exit(127);
    }
    assert_true(pid > 0);
    return pid;
}

/* Waits (up to a minute) until the results file holds `lines` runs while
 * pid still runs; fails otherwise. */
static void wait_for_runs(pid_t pid, const char *file, int lines)
{
    for (int i = 0; i < 3000; i++) {
        if (count_file_lines(file) >= lines) return;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) fail_msg("the study ended before %d runs were cached", lines);
        sleep_ms(20);
    }
    fail_msg("no %d runs in %s after a minute", lines, file);
}

static void test_jobs_killed_worker(void **state)
{
    (void)state;
    SKIP_WITHOUT_BIN();
#define LONG_STUDY "compare " TINY " --seeds 12 --replicas 1 --arm f32=residual=fp32 --jobs 2"
    /* a worker killed while the study runs: exit 1 naming it, its arm and seeds */
    pid_t pid = start(LONG_STUDY " --results jk", "jk.out", "jk.err");
    wait_for_runs(pid, "jk/runs.jsonl", 3);
    pid_t kids[8];
    int n_kids = children_of(pid, kids, 8);
    assert_int_equal(n_kids, 2);
    assert_int_equal(kill(kids[0], SIGKILL), 0);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    char *err = slurp_in_tmp("jk.err");
    print_message("%s", err);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 1);
    char expect[128];
    snprintf(expect, sizeof expect, "(pid %d) was killed by signal 9 ", (int)kids[0]);
    assert_non_null(strstr(err, expect));
    assert_non_null(strstr(err, "running arm ")); /* or "before running arm ": killed while idle */
    assert_non_null(strstr(err, ", seeds "));
    assert_int_equal(strchr(err, '\n') - err, (long)strlen(err) - 1); /* one line */
    free(err);
    assert_true(ended(kids[1])); /* the other worker ended with the parent */
    /* the finished runs stayed in the cache: a second call reuses every one */
    int kept = count_file_lines("jk/runs.jsonl");
    assert_true(kept >= 3 && kept < 36);
    static char out[16384], err2[65536];
    int rc = run(LONG_STUDY " --results jk", out, sizeof out, err2, sizeof err2);
    if (rc) fail_msg("the rerun failed (%d): %s", rc, err2);
    char counts[96];
    snprintf(counts, sizeof counts, "36 runs (%d executed now, %d from the cache)", 36 - kept, kept);
    if (!strstr(out, counts)) fail_msg("expected '%s' in: %s", counts, out);

    /* the parent killed: its workers end too (their request pipe closes) */
    pid = start(LONG_STUDY " --results jp", "jp.out", "jp.err");
    wait_for_runs(pid, "jp/runs.jsonl", 1);
    n_kids = children_of(pid, kids, 8);
    assert_int_equal(n_kids, 2);
    assert_int_equal(kill(pid, SIGKILL), 0);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    int gone = 0;
    for (int i = 0; i < 1500 && gone < n_kids; i++) {
        gone = 0;
        for (int k = 0; k < n_kids; k++) gone += ended(kids[k]);
        if (gone < n_kids) sleep_ms(20);
    }
    assert_int_equal(gone, n_kids);
#undef LONG_STUDY
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_planted_bias_is_a_shift),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_shards_merge),
        cmocka_unit_test(test_gpus_spread),
        cmocka_unit_test(test_json_stdout_is_pure),
        cmocka_unit_test(test_bisect_progress_and_json),
        cmocka_unit_test(test_jobs_same_runs),
        cmocka_unit_test(test_jobs_bisect),
        cmocka_unit_test(test_jobs_killed_worker),
    };
    cmocka_set_test_filter(getenv("ULPSCOPE_TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
