/* tests/test_cli.c — the command line's contract, across every command:
 * --help works, bad input gets one line naming the problem and exit status 2,
 * and a failed run leaves no output file behind.  Drives the binary test_bin()
 * finds (ULPSCOPE_BIN, or the build's own beside the tests). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/test_util.h"

/* Runs `ulpscope ARGS` in dir; returns the exit status, stderr in err. */
static int run(const char *dir, const char *args, char *err, size_t err_len)
{
    TEST_REQUIRE_BIN();
    char cmd[4096], errfile[] = "/tmp/ulpscope_cli_err_XXXXXX";
    int fd = mkstemp(errfile);
    assert_true(fd >= 0);
    close(fd);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s >/dev/null 2>'%s'", dir, test_bin(), args, errfile);
    int status = system(cmd);
    FILE *f = fopen(errfile, "r");
    size_t n = f ? fread(err, 1, err_len - 1, f) : 0;
    err[n] = '\0';
    if (f) fclose(f);
    remove(errfile);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int dir_is_empty(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            print_message("left behind: %s\n", e->d_name);
            n++;
        }
    closedir(d);
    return n == 0;
}

static void test_help_for_every_command(void **state)
{
    (void)state;
    const char *cmds[] = {"accum", "norms", "check", "probe", "plan", "train"};
    char err[4096];
    assert_int_equal(run(".", "--help", err, sizeof err), 0);
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char args[64];
        snprintf(args, sizeof args, "%s --help", cmds[i]);
        int rc = run(".", args, err, sizeof err);
        if (rc != 0) print_message("%s --help: exit %d: %s\n", cmds[i], rc, err);
        assert_int_equal(rc, 0);
    }
}

/* Each row: arguments, a word the message must contain. */
static const struct { const char *args; const char *names; } bad_inputs[] = {
    {"", "usage"},
    {"frobnicate", "frobnicate"},
    {"accum --acc fp7", "fp7"},
    {"accum --addend e9m9", "e9m9"},
    {"accum --round sideways", "sideways"},
    {"accum --algo bogo", "bogo"},
    {"accum --n 0", "0"},
    {"accum --n 12abc", "12abc"},
    {"norms --format fp7", "fp7"},
    {"check --path fp9", "fp9"},
    {"check nosuchop", "nosuchop"},
    {"probe --model z80", "z80"},
    {"plan --plan fp3", "fp3"},
    {"plan --set nosuchslot=bf16", "nosuchslot"},
    {"train --plan fp3", "fp3"},
    {"train --steps -4", "-4"},
};

/* 1 when `ulpscope ARGS` is rejected the way bad input must be: exit 2 and a
 * message that names the offending value. */
static int rejected_properly(const char *args, const char *word)
{
    char err[4096];
    int rc = run(".", args, err, sizeof err);
    int ok = rc == 2 && strstr(err, word) != NULL && strchr(err, '\n') == strrchr(err, '\n');
    if (!ok) print_message("ulpscope %s: exit %d, stderr: %s\n", args, rc, err);
    return ok;
}

static void test_bad_input_is_named_and_exits_2(void **state)
{
    (void)state;
    int failures = 0;
    for (size_t i = 0; i < sizeof bad_inputs / sizeof bad_inputs[0]; i++)
        failures += !rejected_properly(bad_inputs[i].args, bad_inputs[i].names);
    assert_int_equal(failures, 0);
}

/* Twin: the same verdict on valid input must say "not rejected". */
static void test_verdict_fails_on_valid_input(void **state)
{
    (void)state;
    assert_false(rejected_properly("accum --n 10 --acc fp32 --addend fp32", "fp32"));
    assert_false(rejected_properly("plan --plan bf16", "bf16"));
}

/* A command that needs a GPU, on a machine without one: bad input (exit 2,
 * one line saying why), never a failure while running (1). */
static void test_no_gpu_is_bad_input(void **state)
{
    (void)state;
    char why[256];
    if (kernels_gpu_available(why, sizeof why)) {
        print_message("skipping: this machine has a GPU (the no-GPU exit status is checked on CPU machines)\n");
        skip();
    }
    int failures = 0;
    failures += !rejected_properly("check rmsnorm", "GPU");
    failures += !rejected_properly("check --bug drop-term --quick", "GPU");
    failures += !rejected_properly("probe", "GPU");
    failures += !rejected_properly("probe --validate 10", "GPU");
    failures += !rejected_properly("train --backend cuda --steps 1", "GPU");
    assert_int_equal(failures, 0);
}

/* A run that fails on bad input after naming an output file writes nothing. */
static void test_failed_run_leaves_no_output(void **state)
{
    (void)state;
    char dir[] = "/tmp/ulpscope_cli_out_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char err[4096];
    assert_int_equal(run(dir, "accum --json out.jsonl --acc fp7", err, sizeof err), 2);
    assert_int_equal(run(dir, "norms --json out.jsonl --format fp7", err, sizeof err), 2);
    assert_int_equal(run(dir, "probe --model z80 --json out.jsonl", err, sizeof err), 2);
    assert_true(dir_is_empty(dir));
    rmdir(dir);
}

/* The planted-bug twin of the checks above: a command that succeeds on good
 * input must not be reported as rejecting it, so the harness can fail. */
static void test_good_input_is_accepted(void **state)
{
    (void)state;
    char dir[] = "/tmp/ulpscope_cli_ok_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char err[4096];
    assert_int_equal(run(dir, "accum --json out.jsonl", err, sizeof err), 0);
    assert_int_equal(access(strcat(strcpy((char[256]){0}, dir), "/out.jsonl"), F_OK), 0);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_for_every_command),
        cmocka_unit_test(test_bad_input_is_named_and_exits_2),
        cmocka_unit_test(test_verdict_fails_on_valid_input),
        cmocka_unit_test(test_no_gpu_is_bad_input),
        cmocka_unit_test(test_failed_run_leaves_no_output),
        cmocka_unit_test(test_good_input_is_accepted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
