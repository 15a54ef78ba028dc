/* tests/test_util.h — shared by the CMocka tests.
 * Include after <cmocka.h>'s prerequisites (stdarg, stddef, stdint, setjmp). */
#ifndef ULPSCOPE_TESTS_TEST_UTIL_H
#define ULPSCOPE_TESTS_TEST_UTIL_H

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/kernels.h"

/* A GPU test calls this first: without a GPU it skips, visibly, unless
 * ULPSCOPE_REQUIRE_GPU=1 (make test-gpu), where a missing GPU is a failure. */
#define TEST_REQUIRE_GPU()                                                      \
    do {                                                                        \
        char why_[256];                                                         \
        if (!kernels_gpu_available(why_, sizeof why_)) {                        \
            const char *req_ = getenv("ULPSCOPE_REQUIRE_GPU");                  \
            if (req_ && *req_ == '1') fail_msg("GPU required: %s", why_);       \
            print_message("skipping GPU test: %s\n", why_);                     \
            skip();                                                             \
        }                                                                       \
    } while (0)

/* Seed for a test's random inputs: fresh each run unless ULPSCOPE_SEED is set;
 * printed so a failure can be replayed. */
static inline unsigned long long test_seed(const char *test_name)
{
    const char *env = getenv("ULPSCOPE_SEED");
    unsigned long long seed;
    if (env) seed = strtoull(env, NULL, 0);
    else {
        FILE *f = fopen("/dev/urandom", "rb");
        if (!f || fread(&seed, sizeof seed, 1, f) != 1) seed = 0x5eed;
        if (f) fclose(f);
    }
    printf("[ SEED     ] %s ULPSCOPE_SEED=0x%llx\n", test_name, seed);
    return seed;
}

/* The ulpscope binary the CLI tests drive, as an absolute path (tests run
 * it from other directories): $ULPSCOPE_BIN (make test sets it), else the
 * one the build puts beside the test binaries' folder (BUILD/tests/test_x ->
 * BUILD/ulpscope).  NULL when there is none: TEST_REQUIRE_BIN skips, saying so. */
static inline const char *test_bin(void)
{
    static char path[1024];
    const char *env = getenv("ULPSCOPE_BIN");
    if (env && *env) {
        /* the binary asked for, even when missing: its tests then fail, naming it */
        char resolved[PATH_MAX];
        const char *use = realpath(env, resolved) ? resolved : env;
        if (strlen(use) >= sizeof path) return env;
        memcpy(path, use, strlen(use) + 1);
        return path;
    }
    char self[sizeof path - 16];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return NULL;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash) return NULL;
    *slash = '\0'; /* BUILD/tests */
    snprintf(path, sizeof path, "%s/../ulpscope", self);
    char resolved[PATH_MAX];
    if (!realpath(path, resolved) || access(resolved, X_OK) != 0 || strlen(resolved) >= sizeof path) return NULL;
    memcpy(path, resolved, strlen(resolved) + 1);
    return path;
}

/* A CLI test calls this first: without the binary it skips, visibly. */
#define TEST_REQUIRE_BIN()                                                                          \
    do {                                                                                            \
        if (!test_bin()) {                                                                          \
            print_message("skipping CLI test: no ulpscope binary (set ULPSCOPE_BIN, or run make)\n"); \
            skip();                                                                                 \
        }                                                                                           \
    } while (0)

/* Runs `ulpscope <command> <args>` (test_bin()) with stdout and stderr
 * together into out (at most len - 1 bytes, NUL-ended); returns the exit
 * status, -1 when the command did not exit normally. */
static inline int test_run_cli(const char *command, const char *args, char *out, size_t len)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' %s %s 2>&1", test_bin(), command, args);
    FILE *fp = popen(cmd, "r");
    size_t n = fread(out, 1, len - 1, fp);
    out[n] = '\0';
    int st = pclose(fp);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A command line that must be refused: args (each standalone "D" or "D/..."
 * names the test's directory) and a piece of the one-line message. */
typedef struct {
    const char *args, *message;
} test_cli_case;

/* Runs `ulpscope <command> <args>` for every case in dir: each must exit 2
 * with exactly one line "ulpscope <command>: error: ..." holding its message,
 * and dir must hold as many entries afterwards as before (nothing left
 * behind). */
static inline void test_cli_bad_inputs(const char *command, const char *dir, const test_cli_case *cases, size_t n)
{
    DIR *before = opendir(dir);
    assert_non_null(before);
    int entries_before = 0;
    while (readdir(before)) entries_before++;
    closedir(before);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "ulpscope %s: error: ", command);
    for (size_t k = 0; k < n; k++) {
        char args[1024], out[4096];
        const char *s = cases[k].args;
        size_t o = 0;
        for (; *s && o + 300 < sizeof args; s++) {
            if (*s == 'D' && (s[1] == '/' || s[1] == ' ' || s[1] == '\0') &&
                (s == cases[k].args || s[-1] == ' ' || s[-1] == ',' || s[-1] == '='))
                o += (size_t)snprintf(args + o, sizeof args - o, "%s", dir);
            else args[o++] = *s;
        }
        args[o] = '\0';
        int rc = test_run_cli(command, args, out, sizeof out);
        int lines = 0;
        for (const char *p = out; *p; p++) lines += *p == '\n';
        if (rc != 2 || !strstr(out, cases[k].message) || lines != 1 || !strstr(out, prefix))
            fail_msg("case %zu (%s): exit %d, want 2 and one line with '%s'; got: %s", k, args, rc, cases[k].message, out);
    }
    DIR *after = opendir(dir);
    assert_non_null(after);
    int entries_after = 0;
    while (readdir(after)) entries_after++;
    closedir(after);
    assert_int_equal(entries_before, entries_after);
}

#endif
