/* tests/test_util.h — shared by the CMocka tests.
 * Include after <cmocka.h>'s prerequisites (stdarg, stddef, stdint, setjmp). */
#ifndef ULPSCOPE_TESTS_TEST_UTIL_H
#define ULPSCOPE_TESTS_TEST_UTIL_H

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

#endif
