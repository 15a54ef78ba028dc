/* tests/test_util.h — shared by the CMocka tests.
 * Include after <cmocka.h>'s prerequisites (stdarg, stddef, stdint, setjmp). */
#ifndef ULPSCOPE_TESTS_TEST_UTIL_H
#define ULPSCOPE_TESTS_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

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

/* Runs `$ULPSCOPE_BIN <command> <args>` (make test sets ULPSCOPE_BIN) with
 * stdout and stderr together into out (at most len - 1 bytes, NUL-ended);
 * returns the exit status, -1 when the command did not exit normally. */
static inline int test_run_cli(const char *command, const char *args, char *out, size_t len)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s %s 2>&1", getenv("ULPSCOPE_BIN"), command, args);
    FILE *fp = popen(cmd, "r");
    size_t n = fread(out, 1, len - 1, fp);
    out[n] = '\0';
    int st = pclose(fp);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#endif
