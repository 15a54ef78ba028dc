/* tests/test_progress.c — the progress line of long runs: nothing for a
 * quick run (the twin), a line with rows, elapsed and time left once 10 s
 * have passed, none once the run is done (it prints its own end). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/progress.h"

/* Runs steps with stderr in a file; returns what was printed. */
static void capture(base_progress *p, int steps, double age, char *out, size_t len)
{
    char path[] = "/tmp/ulpscope_progress_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    p->tty = 0; /* the log case; the test's stderr may be anything */
    p->t0 -= age;
    p->last -= age;
    for (int i = 0; i < steps; i++) base_progress_step(p);
    base_progress_end(p);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    lseek(fd, 0, SEEK_SET);
    ssize_t n = read(fd, out, len - 1);
    out[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
}

static void test_progress_line(void **state)
{
    (void)state;
    char out[512];
    base_progress p;
    base_progress_start(&p, "accum", "rows", 4);
    capture(&p, 1, 20.0, out, sizeof out);
    assert_non_null(strstr(out, "accum: 1/4 rows, 20 s elapsed, about 60 s left\n"));
    /* twin: a quick run prints nothing */
    base_progress_start(&p, "accum", "rows", 4);
    capture(&p, 3, 0.0, out, sizeof out);
    assert_string_equal(out, "");
    /* the last row: the run prints its own end */
    base_progress_start(&p, "accum", "rows", 1);
    capture(&p, 1, 20.0, out, sizeof out);
    assert_string_equal(out, "");
    /* unknown total: no time left */
    base_progress_start(&p, "norms", "records", 0);
    capture(&p, 2, 30.0, out, sizeof out);
    assert_non_null(strstr(out, "norms: 1 records, 30 s elapsed\n"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_progress_line)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
