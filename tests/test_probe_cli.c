/* tests/test_probe_cli.c — `ulpscope probe` from the command line (the binary
 * named by ULPSCOPE_BIN, set by make test): model fingerprints, the diff
 * (and a twin with one value changed that the diff must flag), the CPU
 * accumulation sweep and its determinism, and bad input: one line on
 * stderr, exit 2, no file left behind. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/test_util.h"

static char dir[256];

static const char *bin(void)
{
    const char *b = test_bin();
    return b ? b : "build/ulpscope";
}

/* Run `ulpscope ARGS`, stdout to out_path and stderr to err_path (may be
 * NULL); returns the exit status. */
static int run(const char *args, const char *out_path, const char *err_path)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s >%s 2>%s", bin(), args, out_path ? out_path : "/dev/null",
             err_path ? err_path : "/dev/null");
    const int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf) buf[n] = '\0';
    fclose(f);
    return buf;
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/ulpscope-probe-cli-XXXXXX");
    if (!mkdtemp(dir)) return -1;
    if (access(bin(), X_OK) != 0) {
        print_message("no ulpscope binary at %s (set ULPSCOPE_BIN)\n", bin());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void path(char *buf, size_t len, const char *name) { snprintf(buf, len, "%s/%s", dir, name); }

static void test_model_fingerprints_and_diff(void **state)
{
    (void)state;
    char a100[300], h100[300], out[300], args[1024];
    path(a100, sizeof a100, "fp_a100.jsonl");
    path(h100, sizeof h100, "fp_h100.jsonl");
    path(out, sizeof out, "out.txt");
    snprintf(args, sizeof args, "probe --model a100 --json %s", a100);
    assert_int_equal(run(args, out, NULL), 0);
    snprintf(args, sizeof args, "probe --model h100 --json %s", h100);
    assert_int_equal(run(args, out, NULL), 0);
    char *fa = slurp(a100), *fh = slurp(h100);
    assert_non_null(fa);
    assert_non_null(fh);
    assert_non_null(strstr(fa, "{\"record\":\"header\""));
    assert_non_null(strstr(fa, "\"property\":\"block_size\",\"value\":8"));
    assert_non_null(strstr(fh, "\"route\":\"wgmma\""));
    /* A100 vs H100: mma.sync fp16 alignment bits 24 vs 25 must be flagged */
    snprintf(args, sizeof args, "probe --diff %s %s", a100, h100);
    assert_int_equal(run(args, out, NULL), 0);
    char *d = slurp(out);
    assert_non_null(d);
    assert_non_null(strstr(d, "mma.sync fp16->fp32 alignment_frac_bits"));
    assert_non_null(strstr(d, "*differs"));
    free(d);
    /* a file against itself: nothing differs */
    snprintf(args, sizeof args, "probe --diff %s %s", h100, h100);
    assert_int_equal(run(args, out, NULL), 0);
    d = slurp(out);
    assert_null(strstr(d, "*differs"));
    assert_non_null(strstr(d, " 0 differ"));
    free(d);
    /* twin: the same file with one value changed must show exactly one */
    char twin[300];
    path(twin, sizeof twin, "fp_twin.jsonl");
    char *p = strstr(fh, "\"property\":\"alignment_frac_bits\",\"value\":25");
    assert_non_null(p);
    p[strlen("\"property\":\"alignment_frac_bits\",\"value\":2")] = '4';
    FILE *f = fopen(twin, "w");
    assert_non_null(f);
    fputs(fh, f);
    fclose(f);
    snprintf(args, sizeof args, "probe --diff %s %s", h100, twin);
    assert_int_equal(run(args, out, NULL), 0);
    d = slurp(out);
    assert_non_null(strstr(d, " 1 differ"));
    free(d);
    free(fa);
    free(fh);
}

static void test_bad_input(void **state)
{
    (void)state;
    char out[300], err[300], file[300], args[1024];
    path(out, sizeof out, "out.txt");
    path(err, sizeof err, "err.txt");
    path(file, sizeof file, "never.jsonl");
    const char *bad[] = {
        "probe --model z100 --json %s",          "probe --model",
        "probe --accum-sweep --json %s",         "probe --model h100 --dots 1 --accum-sweep --json %s",
        "probe --validate 0 --json %s",          "probe --validate 12x --json %s",
        "probe --bogus --json %s",               "probe --model a100 --diff a b",
        "probe --emulate-gemm --size 10,16,32 --json %s", "probe --model a100 --size 16,16,32 --json %s",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, bad[i], file);
        const int rc = run(args, out, err);
        if (rc != 2) fail_msg("'%s' exited %d, not 2", args, rc);
        char *e = slurp(err);
        assert_non_null(e);
        if (count_lines(e) != 1) fail_msg("'%s' printed %d lines on stderr:\n%s", args, count_lines(e), e);
        free(e);
        assert_false(exists(file));
    }
    /* a file that is not a fingerprint, and one that is missing */
    char junk[300];
    path(junk, sizeof junk, "junk.jsonl");
    FILE *f = fopen(junk, "w");
    fputs("{\"record\":\"header\"}\n{not json\n", f);
    fclose(f);
    snprintf(args, sizeof args, "probe --diff %s %s", junk, junk);
    assert_int_equal(run(args, out, err), 2);
    snprintf(args, sizeof args, "probe --diff %s/missing.jsonl %s", dir, junk);
    assert_int_equal(run(args, out, err), 2);
}

static void test_gpu_mode_without_gpu(void **state)
{
    (void)state;
    char why[256];
    if (kernels_gpu_available(why, sizeof why)) skip(); /* only meaningful without a GPU */
    char out[300], file[300], args[1024];
    path(out, sizeof out, "out.txt");
    path(file, sizeof file, "gpu.jsonl");
    snprintf(args, sizeof args, "probe --json %s", file);
    assert_int_not_equal(run(args, out, NULL), 0);
    assert_false(exists(file));
}

static void test_accum_sweep_deterministic(void **state)
{
    (void)state;
    char f1[300], f2[300], out[300], args[1024];
    path(f1, sizeof f1, "s1.jsonl");
    path(f2, sizeof f2, "s2.jsonl");
    path(out, sizeof out, "out.txt");
    snprintf(args, sizeof args, "probe --model h100 --accum-sweep --dots 4 --seed 7 --json %s", f1);
    assert_int_equal(run(args, out, NULL), 0);
    snprintf(args, sizeof args, "probe --model h100 --accum-sweep --dots 4 --seed 7 --json %s", f2);
    assert_int_equal(run(args, out, NULL), 0);
    char *a = slurp(f1), *b = slurp(f2);
    /* skip the header (time, host), compare every record */
    const char *ra = strchr(a, '\n'), *rb = strchr(b, '\n');
    assert_non_null(ra);
    assert_non_null(rb);
    assert_string_equal(ra, rb);
    assert_non_null(strstr(ra, "\"promotion\":\"fp32 every 128\""));
    /* twin: another seed must give other records, or the comparison proves nothing */
    char f3[300];
    path(f3, sizeof f3, "s3.jsonl");
    snprintf(args, sizeof args, "probe --model h100 --accum-sweep --dots 4 --seed 8 --json %s", f3);
    assert_int_equal(run(args, out, NULL), 0);
    char *c = slurp(f3);
    assert_string_not_equal(ra, strchr(c, '\n'));
    free(a);
    free(b);
    free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_fingerprints_and_diff),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_gpu_mode_without_gpu),
        cmocka_unit_test(test_accum_sweep_deterministic),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
