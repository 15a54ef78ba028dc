/* tests/test_cli.c — the command line's contract, across every command:
 * --help works, bad input gets one line naming the problem and exit status 2,
 * a failed run leaves no output file behind, and output paths (--json of
 * accum, norms, check, probe) are checked before any work and never replace
 * what is not theirs: /dev/stdout, /dev/full, a symlink, a FIFO, a
 * directory, a missing directory, an unwritable directory.  Drives the
 * binary test_bin() finds (ULPSCOPE_BIN, or the build's own beside the tests). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
    /* every command: an option table defect (a name defined twice) fails even --help */
    const char *cmds[] = {"accum", "norms", "check", "verify", "probe", "plan",
                          "train", "compare", "noise", "bisect", "trace"};
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
    /* repeated options are refused, not silently overridden */
    {"accum --n 10 --n 20", "--n"},
    {"norms --seed 1 --seed 2", "--seed"},
    {"norms --quick --quick", "--quick"},
    {"check --quick --quick", "--quick"},
    {"probe --model a100 --model h100", "--model"},
    {"probe --model h100 --accum-sweep --accum-sweep", "--accum-sweep"},
    /* integers are range-checked, never wrapped */
    {"probe --emulate-gemm --size 4294967312,16,32", "4294967312"},
    {"probe --emulate-gemm --size 16,16", "16,16"},
    {"probe --emulate-gemm --size 16,16,32,32", "16,16,32,32"},
    {"probe --model h100 --accum-sweep --dots 4294967298", "4294967298"},
    {"norms --rows 4294967297", "4294967297"},
    /* one seed syntax: decimal or 0x hex, no sign, no exponent */
    {"accum --seed -1", "-1"},
    {"norms --seed -1", "-1"},
    {"check --seed -1", "-1"},
    {"probe --model a100 --seed -1", "-1"},
    {"probe --model a100 --seed 1e3", "1e3"},
    {"accum --seed 0x", "0x"},
    /* binary input is refused, not read forever */
    {"probe --diff /dev/zero /dev/zero", "NUL"},
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
static int run_out(const char *dir, const char *args, const char *out, char *err, size_t err_len);
static char *slurp(const char *path);

static void test_good_input_is_accepted(void **state)
{
    (void)state;
    char dir[] = "/tmp/ulpscope_cli_ok_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char err[4096];
    assert_int_equal(run(dir, "accum --json out.jsonl", err, sizeof err), 0);
    assert_int_equal(access(strcat(strcpy((char[256]){0}, dir), "/out.jsonl"), F_OK), 0);
    /* --version names the build (what compare's cache records): "ulpscope VERSION GIT-DESCRIBE" */
    assert_int_equal(run_out(dir, "--version", "version.txt", err, sizeof err), 0);
    const char *v = slurp(strcat(strcpy((char[256]){0}, dir), "/version.txt"));
    assert_non_null(v);
    char word[3][64];
    assert_int_equal(sscanf(v, "%63s %63s %63s", word[0], word[1], word[2]), 3);
    assert_string_equal(word[0], "ulpscope");
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* Runs `cd DIR && ulpscope ARGS >OUT 2>ERR` (OUT relative to DIR or
 * absolute); returns the exit status, stderr in err. */
static int run_out(const char *dir, const char *args, const char *out, char *err, size_t err_len)
{
    char cmd[3072], errfile[] = "/tmp/ulpscope_cli_err_XXXXXX";
    int fd = mkstemp(errfile);
    assert_true(fd >= 0);
    close(fd);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s >'%s' 2>'%s'", dir, test_bin(), args, out, errfile);
    int status = system(cmd);
    FILE *f = fopen(errfile, "r");
    size_t n = f ? fread(err, 1, err_len - 1, f) : 0;
    err[n] = '\0';
    if (f) fclose(f);
    remove(errfile);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static char *slurp(const char *path)
{
    static char buf[1 << 20];
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* 1 when text is nothing but JSON Lines (at least one line, every line an
 * object) and starts with the header record. */
static int pure_jsonl(const char *text)
{
    if (!text || strncmp(text, "{\"record\":\"header\"", 18) != 0) return 0;
    for (const char *line = text; *line;) {
        const char *nl = strchr(line, '\n');
        if (!nl || line[0] != '{' || nl[-1] != '}') return 0;
        line = nl + 1;
    }
    return 1;
}

static void rm_rf(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* One seed syntax: 0x10 is sixteen, as the header's seed shows; "010" is
 * refused (octal-looking), exit 2, naming it. */
static void test_seed_is_decimal_not_octal(void **state)
{
    (void)state;
    char dir[] = "/tmp/ulpscope_cli_seed_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char err[4096];
    assert_int_equal(run_out(dir, "accum --seed 0x10 --n 10 --json -", "out", err, sizeof err), 0);
    char out[300];
    snprintf(out, sizeof out, "%s/out", dir);
    assert_non_null(strstr(slurp(out), "\"seed\":16,"));
    const char *cmds[] = {"accum", "norms", "check", "probe --model a100"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char args[128];
        snprintf(args, sizeof args, "%s --seed 010", cmds[i]);
        assert_true(rejected_properly(args, "010"));
    }
    rm_rf(dir);
}

/* --json - : stdout holds the JSON Lines alone (the table goes to stderr
 * or is left out).  Twin: the plain table is not taken for pure JSON. */
static void test_json_to_stdout_is_pure(void **state)
{
    (void)state;
    char dir[] = "/tmp/ulpscope_cli_pure_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char out[300], err[4096];
    snprintf(out, sizeof out, "%s/out", dir);
    const char *cases[] = {"accum --json -", "norms --width 64 --format bf16 --json -", "probe --model a100 --json -",
                           "probe --model h100 --accum-sweep --dots 2 --json -"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(run_out(dir, cases[i], out, err, sizeof err), 0);
        if (!pure_jsonl(slurp(out))) fail_msg("ulpscope %s: stdout is not pure JSON Lines", cases[i]);
    }
    assert_int_equal(run_out(dir, "probe --model a100", out, err, sizeof err), 0);
    assert_false(pure_jsonl(slurp(out)));
    rm_rf(dir);
}

/* The GPU modes: `check --json -` and `probe --json -` (the fingerprint,
 * whose table is printed too) keep stdout pure JSON.  Skips visibly without
 * a GPU (make test-gpu runs it). */
static void test_gpu_json_to_stdout_is_pure(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    char dir[] = "/tmp/ulpscope_cli_gpu_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char out[300], err[4096];
    snprintf(out, sizeof out, "%s/out", dir);
    const char *cases[] = {"check rmsnorm --quick --seed 1 --json -", "probe --json -",
                           "probe --emulate-gemm --size 64,64,128 --json -"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = run_out(dir, cases[i], out, err, sizeof err);
        if (rc != 0 || !pure_jsonl(slurp(out)))
            fail_msg("ulpscope %s: exit %d, stdout is%s pure JSON Lines; stderr: %s", cases[i], rc,
                     pure_jsonl(slurp(out)) ? "" : " not", err);
    }
    rm_rf(dir);
}

/* /dev/stdout is written through (stdout gets pure JSON, the link stays a
 * link); /dev/full reports a full disk naming /dev/full, exit 1, and stays a
 * device. */
static void test_dev_stdout_and_dev_full(void **state)
{
    (void)state;
    struct stat st;
    if (lstat("/dev/stdout", &st) != 0 || stat("/dev/full", &st) != 0 || !S_ISCHR(st.st_mode)) {
        print_message("skipping: no /dev/stdout or /dev/full here\n");
        skip();
    }
    char dir[] = "/tmp/ulpscope_cli_dev_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char out[300], err[4096];
    snprintf(out, sizeof out, "%s/out", dir);
    struct stat before, after;
    assert_int_equal(lstat("/dev/stdout", &before), 0);
    const char *cmds[] = {"accum", "norms --width 64 --format bf16", "probe --model a100"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char args[256];
        snprintf(args, sizeof args, "%s --json /dev/stdout", cmds[i]);
        assert_int_equal(run_out(dir, args, out, err, sizeof err), 0);
        if (!pure_jsonl(slurp(out))) fail_msg("ulpscope %s: stdout is not pure JSON Lines", args);
        assert_int_equal(lstat("/dev/stdout", &after), 0);
        assert_true(after.st_mode == before.st_mode && after.st_ino == before.st_ino);
        snprintf(args, sizeof args, "%s --json /dev/full", cmds[i]);
        assert_int_equal(run_out(dir, args, "/dev/null", err, sizeof err), 1);
        if (!strstr(err, "/dev/full") || !strstr(err, strerror(ENOSPC)))
            fail_msg("ulpscope %s: message does not say the disk is full: %s", args, err);
        assert_int_equal(stat("/dev/full", &st), 0);
        assert_true(S_ISCHR(st.st_mode));
    }
    rm_rf(dir);
}

/* A symlink is followed (the link stays, its target gets the JSON, nothing
 * else appears); a FIFO's reader gets the JSON and the FIFO stays a FIFO. */
static void test_symlink_and_fifo_outputs(void **state)
{
    (void)state;
    char dir[] = "/tmp/ulpscope_cli_link_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char err[4096], path[300], cmd[1024];
    snprintf(cmd, sizeof cmd, "cd '%s' && mkdir sub && echo old > sub/target.jsonl && ln -s sub/target.jsonl link.jsonl"
                              " && mkfifo pipe", dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(run_out(dir, "accum --json link.jsonl", "/dev/null", err, sizeof err), 0);
    struct stat st;
    snprintf(path, sizeof path, "%s/link.jsonl", dir);
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    snprintf(path, sizeof path, "%s/sub/target.jsonl", dir);
    assert_true(pure_jsonl(slurp(path)));
    snprintf(cmd, sizeof cmd, "test \"$(ls '%s' | tr '\\n' ' ')\" = 'link.jsonl pipe sub ' && "
                              "test \"$(ls '%s/sub')\" = target.jsonl", dir, dir);
    assert_int_equal(system(cmd), 0);
    /* the FIFO: a reader in the background, the writer in front */
    snprintf(cmd, sizeof cmd, "cd '%s' && { timeout 60 cat pipe > got & reader=$!; timeout 60 '%s' probe --model a100 "
                              "--json pipe >/dev/null; status=$?; wait $reader && exit $status; }",
             dir, test_bin());
    assert_int_equal(system(cmd), 0);
    snprintf(path, sizeof path, "%s/got", dir);
    assert_true(pure_jsonl(slurp(path)));
    snprintf(path, sizeof path, "%s/pipe", dir);
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    rm_rf(dir);
}

/* A directory or a missing directory: exit 2, one line naming the path and
 * the reason, and no work done (nothing on stdout, where every command
 * prints its table as it goes).  check needs a GPU for its work, so its
 * refusal shows that the path is checked before the GPU is even looked for. */
static void test_bad_output_paths_refused_before_work(void **state)
{
    (void)state;
    char dir[] = "/tmp/ulpscope_cli_bad_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char out[300], err[4096], args[512], cmd[512];
    snprintf(out, sizeof out, "%s.stdout", dir);
    snprintf(cmd, sizeof cmd, "mkdir '%s/adir'", dir);
    assert_int_equal(system(cmd), 0);
    const char *cmds[] = {"accum", "norms --width 64 --format bf16", "check rmsnorm", "probe --model a100",
                          "probe --model h100 --accum-sweep --dots 2", "probe --emulate-gemm"};
    const struct { const char *path, *reason; } bad[] = {{"adir", "is a directory"},
                                                         {"missing/out.jsonl", "no such directory"}};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
            snprintf(args, sizeof args, "%s --json %s", cmds[i], bad[k].path);
            int rc = run_out(dir, args, out, err, sizeof err);
            const char *printed = slurp(out);
            if (rc != 2 || !strstr(err, bad[k].path) || !strstr(err, bad[k].reason) ||
                strchr(err, '\n') != strrchr(err, '\n') || (printed && *printed))
                fail_msg("ulpscope %s: exit %d, stderr '%s', stdout %zu bytes", args, rc, err,
                         printed ? strlen(printed) : 0);
        }
    snprintf(cmd, sizeof cmd, "test \"$(ls '%s')\" = adir", dir);
    assert_int_equal(system(cmd), 0);
    remove(out);
    rm_rf(dir);
}

/* An unwritable directory.  As root (the README's set-up), permissions do
 * not bind, so: a directory made immutable with chattr +i, which binds root
 * too; and, where setpriv exists, the binary run as nobody against a
 * directory with mode 0555.  Either part skips visibly when it cannot run. */
static void test_unwritable_output_refused(void **state)
{
    (void)state;
    char dir[] = "/tmp/ulpscope_cli_ro_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char err[4096], cmd[1024];
    int ran = 0;
    snprintf(cmd, sizeof cmd, "mkdir '%s/locked' && chattr +i '%s/locked' 2>/dev/null", dir, dir);
    if (system(cmd) == 0) {
        int rc = run_out(dir, "accum --json locked/out.jsonl", "/dev/null", err, sizeof err);
        snprintf(cmd, sizeof cmd, "chattr -i '%s/locked'", dir);
        assert_int_equal(system(cmd), 0);
        print_message("immutable directory: exit %d: %s", rc, err);
        assert_int_equal(rc, 2);
        assert_non_null(strstr(err, "locked/out.jsonl"));
        assert_non_null(strstr(err, strerror(EPERM)));
        ran++;
    } else {
        print_message("skipping the chattr part: chattr +i does not work here\n");
    }
    /* as nobody: the binary must be reachable by nobody; if it is not, skip */
    snprintf(cmd, sizeof cmd, "mkdir '%s/ro' && chmod 0555 '%s/ro' && chmod 0755 '%s' && command -v setpriv >/dev/null && "
                              "[ \"$(id -u)\" = 0 ] && setpriv --reuid=65534 --regid=65534 --clear-groups '%s' --version "
                              ">/dev/null 2>&1",
             dir, dir, dir, test_bin());
    if (system(cmd) == 0) {
        char errfile[300];
        snprintf(errfile, sizeof errfile, "%s.err", dir);
        snprintf(cmd, sizeof cmd, "cd '%s' && setpriv --reuid=65534 --regid=65534 --clear-groups '%s' accum --json "
                                  "ro/out.jsonl >/dev/null 2>'%s'", dir, test_bin(), errfile);
        int st = system(cmd);
        const char *e = slurp(errfile);
        print_message("as nobody, mode 0555: status %d: %s", WEXITSTATUS(st), e ? e : "");
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 2);
        assert_non_null(e);
        assert_non_null(strstr(e, "ro/out.jsonl"));
        assert_non_null(strstr(e, strerror(EACCES)));
        remove(errfile);
        ran++;
    } else {
        print_message("skipping the non-root part: setpriv missing, not root, or the binary unreachable for nobody\n");
    }
    rm_rf(dir);
    if (!ran) skip();
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
        cmocka_unit_test(test_seed_is_decimal_not_octal),
        cmocka_unit_test(test_json_to_stdout_is_pure),
        cmocka_unit_test(test_gpu_json_to_stdout_is_pure),
        cmocka_unit_test(test_dev_stdout_and_dev_full),
        cmocka_unit_test(test_symlink_and_fifo_outputs),
        cmocka_unit_test(test_bad_output_paths_refused_before_work),
        cmocka_unit_test(test_unwritable_output_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
