/* tests/test_norms_cli.c — `ulpscope norms` on bad input: one line on stderr
 * naming the bad value, exit status 2, no output file; and a small valid run
 * that writes a whole JSON Lines file.  The binary is test_bin()'s
 * (ULPSCOPE_BIN, or the build's own).  The twin: the same bad-input check applied to a
 * valid command must fail. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/test_util.h"

static char workdir[] = "/tmp/ulpscope-norms-cli-XXXXXX";

static const char *binary(void)
{
    TEST_REQUIRE_BIN();
    return test_bin();
}

/* Runs `ulpscope norms ARGS --json OUT`; returns the exit status and fills
 * the stderr text. */
static int run_norms(const char *args, const char *out, char *err, size_t err_len)
{
    char cmd[2048], err_path[256];
    snprintf(err_path, sizeof err_path, "%s/stderr", workdir);
    snprintf(cmd, sizeof cmd, "%s norms %s --json %s >/dev/null 2>%s", binary(), args, out, err_path);
    int status = system(cmd);
    FILE *f = fopen(err_path, "r");
    size_t n = f ? fread(err, 1, err_len - 1, f) : 0;
    err[n] = '\0';
    if (f) fclose(f);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The bad-input contract: exit 2, exactly one line on stderr that contains
 * `names` (the bad value), no output file, no temporary left behind. */
static bool rejected_cleanly(const char *args, const char *names)
{
    char out[256], err[4096];
    snprintf(out, sizeof out, "%s/out.jsonl", workdir);
    remove(out);
    int rc = run_norms(args, out, err, sizeof err);
    char *nl = strchr(err, '\n');
    bool one_line = nl && nl[1] == '\0';
    bool names_it = strstr(err, names) != NULL;
    bool no_file = access(out, F_OK) != 0;
    char listing[512];
    snprintf(listing, sizeof listing, "ls %s | grep -q tmp", workdir);
    bool no_temp = system(listing) != 0;
    if (!(rc == 2 && one_line && names_it && no_file && no_temp))
        print_message("'%s': rc %d, stderr '%s', file %s\n", args, rc, err, no_file ? "absent" : "present");
    return rc == 2 && one_line && names_it && no_file && no_temp;
}

static void test_bad_input(void **state)
{
    (void)state;
    binary();
    assert_true(rejected_cleanly("--format fp7", "fp7"));
    assert_true(rejected_cleanly("--format tf32", "tf32"));   /* a format, not a storage format */
    assert_true(rejected_cleanly("--norm batchnorm", "batchnorm"));
    assert_true(rejected_cleanly("--variance sumsq", "sumsq")); /* RMSNorm's, not a choice */
    assert_true(rejected_cleanly("--upcast mistral", "mistral"));
    assert_true(rejected_cleanly("--acc fp64", "fp64"));
    assert_true(rejected_cleanly("--data uniform", "uniform"));
    assert_true(rejected_cleanly("--pass both", "both"));
    assert_true(rejected_cleanly("--width 0", "'0'"));
    assert_true(rejected_cleanly("--width 64,-3", "-3"));
    assert_true(rejected_cleanly("--width 12x", "12x"));
    assert_true(rejected_cleanly("--ratio -1", "-1"));
    assert_true(rejected_cleanly("--ratio nan", "nan"));
    assert_true(rejected_cleanly("--rows 0", "'0'"));
    assert_true(rejected_cleanly("--seed 1.5", "1.5"));
    assert_true(rejected_cleanly("--eps abc", "abc"));
    assert_true(rejected_cleanly("--frobnicate", "--frobnicate"));
    assert_true(rejected_cleanly("--width", "--json")); /* --width swallowed "--json" as its value */
    assert_true(rejected_cleanly("--width 64,,128", "64,,128"));
    assert_true(rejected_cleanly("--width 64 --width 128", "--width given twice"));
    assert_true(rejected_cleanly("--rows 4096 --width 4096", "4096"));
    /* twin: a valid command is not "rejected cleanly" */
    assert_false(rejected_cleanly("--norm rmsnorm --format bf16 --width 32 --pass fwd", "bf16"));
}

static void test_valid_run_writes_whole_file(void **state)
{
    (void)state;
    binary();
    char out[256], err[4096];
    snprintf(out, sizeof out, "%s/ok.jsonl", workdir);
    int rc = run_norms("--norm layernorm --format bf16 --variance twopass --acc fp32 --upcast gemma "
                       "--width 48 --ratio 0,10", out, err, sizeof err);
    assert_int_equal(rc, 0);
    FILE *f = fopen(out, "r");
    assert_non_null(f);
    char line[4096];
    int lines = 0;
    bool header = false, keys = true;
    while (fgets(line, sizeof line, f)) {
        if (lines == 0) header = strstr(line, "\"record\":\"header\"") && strstr(line, "\"tool\":\"norms\"");
        else
            keys = keys && strstr(line, "\"max_err_u\":") && strstr(line, "\"rms_err_u\":") &&
                   strstr(line, "\"variance_algo\":\"twopass\"") && strstr(line, "\"upcast\":\"gemma\"") &&
                   strstr(line, "\"nonfinite\":");
        lines++;
    }
    fclose(f);
    assert_true(header);
    assert_true(keys);
    assert_int_equal(lines, 1 + 2 * 4); /* header + 2 ratios x (y, dx, dgamma, dbeta) */
    remove(out);
}

static int setup(void **state)
{
    (void)state;
    return mkdtemp(workdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", workdir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_valid_run_writes_whole_file),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
