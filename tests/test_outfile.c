/* tests/test_outfile.c — base/outfile.h and base/parse.h: result files never
 * replace what is not theirs (a symlink, a FIFO, a device), a regular file is
 * replaced whole or not at all, the pre-flight check refuses a directory, a
 * missing directory and an unwritable place, every message names the user's
 * path and the reason, and nothing temporary is ever left behind.
 *
 * Twins: the same property checks run against a planted writer with the old
 * behaviour (always PATH.tmp.PID renamed over PATH) must report the symlink
 * replaced and the FIFO reader starved; the "nothing left behind" check must
 * see a planted stray file. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/error.h"
#include "base/outfile.h"
#include "base/parse.h"

static char dir[] = "/tmp/ulpscope-outfile-XXXXXX";

static void path_in(char *buf, size_t len, const char *name) { snprintf(buf, len, "%s/%s", dir, name); }

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void spit(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Entries of directory d other than those named in keep (NULL-ended);
 * printed, so a failure says what was left behind. */
static int strays(const char *d, const char *const *keep)
{
    DIR *dp = opendir(d);
    assert_non_null(dp);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dp))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        int kept = 0;
        for (const char *const *k = keep; *k; k++) kept |= strcmp(e->d_name, *k) == 0;
        if (!kept) {
            print_message("left behind in %s: %s\n", d, e->d_name);
            n++;
        }
    }
    closedir(dp);
    return n;
}

/* Runs fn with stderr captured into err (NUL-ended); returns fn's result. */
static int with_stderr(int (*fn)(void *), void *arg, char *err, size_t len)
{
    char cap[300];
    path_in(cap, sizeof cap, "stderr.capture"); /* removed before anyone counts strays */
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    int fd = open(cap, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, STDERR_FILENO);
    close(fd);
    int rc = fn(arg);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    FILE *f = fopen(cap, "r");
    size_t n = f ? fread(err, 1, len - 1, f) : 0;
    err[n] = '\0';
    if (f) fclose(f);
    unlink(cap);
    return rc;
}

/* ---- writers: the real one and the planted old behaviour -------------------- */

typedef int (*writer)(const char *path, const char *text);

static int real_writer(const char *path, const char *text)
{
    base_outfile o;
    if (base_outfile_open(&o, "test", path)) return -1;
    fputs(text, o.fp);
    return base_outfile_commit(&o, "test");
}

/* The planted bug: what cli/output.c did before, whatever PATH was. */
static int naive_writer(const char *path, const char *text)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return -1;
    fputs(text, f);
    if (fclose(f) || rename(tmp, path)) {
        remove(tmp);
        return -1;
    }
    return 0;
}

/* ---- properties (1 = holds) -------------------------------------------------- */

/* A symlink in one directory to a file in another: after writing through
 * the link, the link is still that link, the target has the new text, and
 * neither directory holds anything else. */
static int symlink_followed(writer w)
{
    char a[300], b[300], link[320], target[320];
    path_in(a, sizeof a, "links");
    path_in(b, sizeof b, "targets");
    snprintf(link, sizeof link, "%s/out.jsonl", a);
    snprintf(target, sizeof target, "%s/real.jsonl", b);
    mkdir(a, 0700);
    mkdir(b, 0700);
    spit(target, "old\n");
    unlink(link);
    assert_int_equal(symlink("../targets/real.jsonl", link), 0);
    int ok = w(link, "new\n") == 0;
    struct stat st;
    char dest[300] = "";
    ssize_t n = readlink(link, dest, sizeof dest - 1);
    if (n >= 0) dest[n] = '\0';
    ok = ok && lstat(link, &st) == 0 && S_ISLNK(st.st_mode) && strcmp(dest, "../targets/real.jsonl") == 0;
    char *got = slurp(target);
    ok = ok && got && strcmp(got, "new\n") == 0;
    ok = ok && strays(a, (const char *[]){"out.jsonl", NULL}) == 0 && strays(b, (const char *[]){"real.jsonl", NULL}) == 0;
    unlink(link);
    unlink(target);
    rmdir(a);
    rmdir(b);
    return ok;
}

/* A FIFO: a reader gets the text, and the FIFO is still a FIFO. */
static int fifo_written(writer w)
{
    char fifo[300], got_path[300];
    path_in(fifo, sizeof fifo, "fifo");
    path_in(got_path, sizeof got_path, "fifo.got");
    unlink(fifo);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    pid_t reader = fork();
    assert_true(reader >= 0);
    if (reader == 0) {
        alarm(20); /* never hang the suite */
        FILE *in = fopen(fifo, "r"), *out = fopen(got_path, "w");
        if (!in || !out) _exit(1);
        int c;
        while ((c = getc(in)) != EOF) putc(c, out);
        _exit(fclose(out) != 0);
    }
    int ok = w(fifo, "through the pipe\n") == 0;
    struct stat st;
    ok = ok && lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode);
    if (!ok) kill(reader, SIGKILL); /* nobody will ever open the old FIFO for writing */
    int status;
    waitpid(reader, &status, 0);
    char *got = slurp(got_path);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0 && got && strcmp(got, "through the pipe\n") == 0;
    unlink(fifo);
    unlink(got_path);
    return ok;
}

static void test_symlink_is_followed(void **state)
{
    (void)state;
    assert_true(symlink_followed(real_writer));
}

static void test_fifo_is_written_directly(void **state)
{
    (void)state;
    assert_true(fifo_written(real_writer));
}

/* Twins: the old writer replaces the link and starves the reader. */
static void test_twin_naive_writer_fails_both(void **state)
{
    (void)state;
    assert_false(symlink_followed(naive_writer));
    assert_false(fifo_written(naive_writer));
}

static void test_strays_twin_sees_a_leftover(void **state)
{
    (void)state;
    char d[300], f[320];
    path_in(d, sizeof d, "stray");
    mkdir(d, 0700);
    snprintf(f, sizeof f, "%s/out.jsonl.tmp.123", d);
    spit(f, "x");
    assert_int_equal(strays(d, (const char *[]){"out.jsonl", NULL}), 1);
    unlink(f);
    assert_int_equal(strays(d, (const char *[]){"out.jsonl", NULL}), 0);
    rmdir(d);
}

/* A regular file: replaced whole, its permissions kept, nothing left beside it. */
static void test_regular_file_replaced(void **state)
{
    (void)state;
    char p[300];
    path_in(p, sizeof p, "plain.jsonl");
    spit(p, "old\n");
    assert_int_equal(chmod(p, 0640), 0);
    assert_int_equal(real_writer(p, "new\n"), 0);
    assert_string_equal(slurp(p), "new\n");
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0640);
    assert_int_equal(strays(dir, (const char *[]){"plain.jsonl", NULL}), 0);
    /* a dangling link creates its target, and stays a link */
    char link[300], target[300];
    path_in(link, sizeof link, "dangling");
    path_in(target, sizeof target, "created.jsonl");
    assert_int_equal(symlink("created.jsonl", link), 0);
    assert_int_equal(real_writer(link, "made\n"), 0);
    assert_string_equal(slurp(target), "made\n");
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    unlink(link);
    unlink(target);
    unlink(p);
}

/* Aborted, or failing at commit: the old file is untouched, no temporary
 * is left, and the message names the user's path, not the temporary. */
typedef struct {
    const char *path;
} commit_case;

static int open_then_fail_commit(void *arg)
{
    const commit_case *c = arg;
    base_outfile o;
    if (base_outfile_open(&o, "test", c->path)) return -2;
    fputs("new\n", o.fp);
    /* the target turns into a directory under our feet: rename must fail */
    unlink(c->path);
    mkdir(c->path, 0700);
    return base_outfile_commit(&o, "test");
}

static void test_failure_leaves_nothing(void **state)
{
    (void)state;
    char p[300];
    path_in(p, sizeof p, "kept.jsonl");
    spit(p, "old\n");
    base_outfile o;
    assert_int_equal(base_outfile_open(&o, "test", p), 0);
    fputs("half a result", o.fp);
    base_outfile_abort(&o);
    assert_string_equal(slurp(p), "old\n");
    assert_int_equal(strays(dir, (const char *[]){"kept.jsonl", NULL}), 0);

    char err[4096];
    commit_case c = {p};
    assert_int_equal(with_stderr(open_then_fail_commit, &c, err, sizeof err), -1);
    print_message("commit failure: %s", err);
    assert_non_null(strstr(err, "cannot write"));
    assert_non_null(strstr(err, p));
    assert_null(strstr(err, ".tmp."));
    assert_int_equal(strays(dir, (const char *[]){"kept.jsonl", NULL}), 0);
    rmdir(p);
}

/* Devices are written in place: /dev/null stays /dev/null; /dev/full fails
 * with "No space left on device" naming /dev/full. */
static int write_dev_full(void *arg)
{
    (void)arg;
    return real_writer("/dev/full", "cannot fit\n");
}

static void test_devices_written_in_place(void **state)
{
    (void)state;
    struct stat st;
    if (stat("/dev/null", &st) != 0 || !S_ISCHR(st.st_mode) || stat("/dev/full", &st) != 0 || !S_ISCHR(st.st_mode)) {
        print_message("skipping: no /dev/null or /dev/full character device here\n");
        skip();
    }
    assert_int_equal(real_writer("/dev/null", "gone\n"), 0);
    assert_int_equal(stat("/dev/null", &st), 0);
    assert_true(S_ISCHR(st.st_mode));
    char err[4096];
    assert_int_equal(with_stderr(write_dev_full, NULL, err, sizeof err), -1);
    print_message("/dev/full: %s", err);
    assert_non_null(strstr(err, "/dev/full"));
    assert_non_null(strstr(err, strerror(ENOSPC)));
    assert_int_equal(stat("/dev/full", &st), 0);
    assert_true(S_ISCHR(st.st_mode));
}

/* ---- the pre-flight check ---------------------------------------------------- */

typedef struct {
    const char *path;
} check_case;

static int run_check(void *arg) { return base_outfile_check("test", ((check_case *)arg)->path); }

/* 1 when the check refuses path with exit 2 and one line naming the path
 * and containing reason. */
static int refused(const char *path, const char *reason)
{
    char err[4096];
    check_case c = {path};
    int rc = with_stderr(run_check, &c, err, sizeof err);
    int ok = rc == BASE_EXIT_USAGE && strstr(err, path) && strstr(err, reason) && strchr(err, '\n') == strrchr(err, '\n');
    if (!ok) print_message("check(%s): %d, '%s' (expected exit 2 and '%s')\n", path, rc, err, reason);
    return ok;
}

static void test_preflight_refuses_before_work(void **state)
{
    (void)state;
    char missing[300], new_file[300];
    path_in(missing, sizeof missing, "no/such/dir/out.jsonl");
    path_in(new_file, sizeof new_file, "fresh.jsonl");
    assert_true(refused(dir, "is a directory"));
    assert_true(refused(missing, "no such directory"));
    assert_true(refused("", "empty output file name"));
    /* twin: a writable new path passes, and the check leaves nothing behind */
    assert_false(refused(new_file, "no such directory"));
    assert_int_equal(base_outfile_check("test", new_file), 0);
    assert_int_equal(base_outfile_check("test", "-"), 0);
    assert_int_equal(strays(dir, (const char *[]){NULL}), 0);
}

/* Unwritable as root: a directory made immutable (chattr +i binds root too).
 * Skipped, visibly, where chattr does not work (not root, or a file system
 * without the attribute); tests/test_cli.c also runs the binary as nobody. */
static void test_preflight_refuses_unwritable(void **state)
{
    (void)state;
    char locked[300], inside[320], cmd[400];
    path_in(locked, sizeof locked, "locked");
    snprintf(inside, sizeof inside, "%s/out.jsonl", locked);
    mkdir(locked, 0700);
    snprintf(cmd, sizeof cmd, "chattr +i '%s' 2>/dev/null", locked);
    if (system(cmd) != 0) {
        rmdir(locked);
        print_message("skipping: chattr +i does not work here\n");
        skip();
    }
    int ok = refused(inside, strerror(EPERM));
    snprintf(cmd, sizeof cmd, "chattr -i '%s'", locked);
    assert_int_equal(system(cmd), 0);
    rmdir(locked);
    assert_true(ok);
}

/* Places root cannot write either: a pseudo file system that takes no new
 * files (/proc), or refuses them (/sys).  Skipped where they are absent. */
static void test_preflight_refuses_pseudo_filesystems(void **state)
{
    (void)state;
    struct stat st;
    int ran = 0;
    if (stat("/proc/self", &st) == 0) {
        assert_true(refused("/proc/ulpscope-never.jsonl", "cannot create a file in /proc"));
        ran++;
    }
    if (stat("/sys/kernel", &st) == 0 && access("/sys", W_OK) != 0) {
        assert_true(refused("/sys/ulpscope-never.jsonl", "/sys"));
        ran++;
    }
    if (!ran) {
        print_message("skipping: no /proc or read-only /sys here\n");
        skip();
    }
}

static void test_stdout_is_recognised(void **state)
{
    (void)state;
    char p[300];
    path_in(p, sizeof p, "stdout.txt");
    assert_true(base_outfile_is_stdout("-"));
    assert_false(base_outfile_is_stdout(NULL));
    spit(p, "");
    assert_false(base_outfile_is_stdout(p));
    fflush(stdout);
    int saved = dup(STDOUT_FILENO), fd = open(p, O_WRONLY);
    dup2(fd, STDOUT_FILENO);
    close(fd);
    int same = base_outfile_is_stdout(p);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    assert_true(same);
    unlink(p);
}

/* ---- numbers and seeds -------------------------------------------------------- */

static void test_seed_syntax(void **state)
{
    (void)state;
    uint64_t s = 7;
    assert_int_equal(base_parse_seed("0", &s), 0);
    assert_true(s == 0);
    assert_int_equal(base_parse_seed("0x5eed", &s), 0);
    assert_true(s == 0x5eed);
    assert_int_equal(base_parse_seed("18446744073709551615", &s), 0);
    assert_true(s == UINT64_MAX);
    s = 7;
    /* "010" is neither eight nor ten: anything octal-looking is refused */
    const char *bad[] = {"", "-1", "+1", " 1", "1 ", "0x", "1e3", "12x", "0x1g", "18446744073709551616",
                         "0x10000000000000000", "-0x1", "010", "00", NULL};
    for (const char **b = bad; *b; b++) {
        if (base_parse_seed(*b, &s) == 0) fail_msg("seed '%s' accepted", *b);
        assert_true(s == 7); /* untouched */
    }
}

static void test_integer_ranges(void **state)
{
    (void)state;
    long v = 3;
    assert_int_equal(base_parse_long_in("16", 1, 16, &v), 0);
    assert_int_equal(v, 16);
    assert_int_equal(base_parse_long_in("17", 1, 16, &v), -1);
    assert_int_equal(base_parse_long_in("0", 1, 16, &v), -1);
    assert_int_equal(base_parse_long_in("4294967312", 1, 16384, &v), -1); /* 2^32 + 16: never wrapped */
    assert_int_equal(base_parse_long_in("99999999999999999999", 1, 16384, &v), -1);
    assert_int_equal(v, 16);
    assert_int_equal(base_parse_long("1e6", &v), 0);
    assert_int_equal(v, 1000000);
    assert_int_equal(base_parse_long("1.5", &v), -1);
}

static int setup(void **state)
{
    (void)state;
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_symlink_is_followed),
        cmocka_unit_test(test_fifo_is_written_directly),
        cmocka_unit_test(test_twin_naive_writer_fails_both),
        cmocka_unit_test(test_strays_twin_sees_a_leftover),
        cmocka_unit_test(test_regular_file_replaced),
        cmocka_unit_test(test_failure_leaves_nothing),
        cmocka_unit_test(test_devices_written_in_place),
        cmocka_unit_test(test_preflight_refuses_before_work),
        cmocka_unit_test(test_preflight_refuses_unwritable),
        cmocka_unit_test(test_preflight_refuses_pseudo_filesystems),
        cmocka_unit_test(test_stdout_is_recognised),
        cmocka_unit_test(test_seed_syntax),
        cmocka_unit_test(test_integer_ranges),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
