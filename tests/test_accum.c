/* tests/test_accum.c — the accumulation study: its rows against independent
 * computations (native float accumulation, the exact product n*x), every
 * row within its bound (and a dropped-term twin outside it), determinism,
 * and the option parser's answers to bad input. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "cli/accum_args.h"
#include "studies/accum.h"
#include "tests/test_util.h"

static accum_method method(prec_format acc, prec_sum_algo algo, prec_round_mode round)
{
    accum_method m = {acc, algo, round, 32, 1e-6};
    return m;
}

/* fp32/fp32, recursive, RNE is exactly what a float loop does. */
static void test_classic_fp32_matches_float_loop(void **state)
{
    (void)state;
    const double xs[2] = {0.01, 0.001};
    const size_t ns[2] = {1000, 10000};
    for (int c = 0; c < 2; c++) {
        accum_dataset d;
        assert_int_equal(accum_dataset_make(&d, ACCUM_CONSTANT, xs[c], PREC_FP32, ns[c], 1), 0);
        volatile float s = 0.0f;
        for (size_t i = 0; i < ns[c]; i++) s += (float)xs[c];
        accum_method m = method(PREC_FP32, PREC_SUM_RECURSIVE, PREC_RNE);
        accum_result r;
        accum_run(&d, &m, 1, &r);
        assert_true(r.value == (double)s);
        /* the exact sum of n equal addends is n x: one correctly rounded product */
        assert_true(r.exact == (double)ns[c] * (double)(float)xs[c]);
        assert_true(r.abs_err <= r.bound);
        accum_dataset_free(&d);
    }
}

/* Every classic pair and algorithm, every rounding mode, random data: the
 * error is within the reported bound whenever there is one; the twin with a
 * dropped addend is not (fp32 accumulator, where the bound is far below an
 * addend). */
static void test_rows_within_bounds(void **state)
{
    (void)state;
    uint64_t seed = test_seed("accum_rows");
    accum_pair pairs[ACCUM_MAX_LIST];
    int n_pairs = accum_classic_pairs(pairs);
    const size_t ns[] = {10, 300};
    int checked = 0, twins_caught = 0;
    for (int k = 0; k < ACCUM_NDATA; k++) {
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
            for (int p = 0; p < n_pairs; p++) {
                accum_dataset d;
                assert_int_equal(accum_dataset_make(&d, (accum_data)k, k == ACCUM_CONSTANT ? 0.01 : 1.0,
                                                    pairs[p].addend, ns[i], seed), 0);
                for (int a = 0; a < PREC_SUM_NALGOS; a++) {
                    for (int m = 0; m < PREC_NROUNDS; m++) {
                        accum_method meth = method(pairs[p].acc, (prec_sum_algo)a, (prec_round_mode)m);
                        accum_result r;
                        accum_run(&d, &meth, seed, &r);
                        if (r.nonfinite || isnan(r.bound)) continue;
                        if (!(r.abs_err <= r.bound))
                            fail_msg("%s/%s %s %s %s n=%zu: error %g > bound %g", prec_format_name(meth.acc),
                                     prec_format_name(d.addend), prec_sum_algo_name(meth.algo),
                                     prec_round_mode_name(meth.round), accum_data_name(d.kind), d.n, r.abs_err,
                                     r.bound);
                        checked++;
                    }
                }
                if (pairs[p].acc == PREC_FP32 && d.v[0] != 0.0 && k != ACCUM_HEAVY) {
                    /* planted bug: the summing loop never sees addend 0 */
                    double kept = d.v[0];
                    d.v[0] = 0.0;
                    accum_method meth = method(PREC_FP32, PREC_SUM_RECURSIVE, PREC_RNE);
                    accum_result r;
                    accum_run(&d, &meth, seed, &r);
                    d.v[0] = kept;
                    /* the reported error is against the exact sum *with* the addend */
                    double err = fabs(r.value - d.exact);
                    if (fabs(kept) > 2 * r.bound) {
                        assert_false(err <= r.bound);
                        twins_caught++;
                    }
                }
                accum_dataset_free(&d);
            }
        }
    }
    print_message("checked %d rows, %d dropped-addend twins caught\n", checked, twins_caught);
    assert_true(checked > 500);
    assert_true(twins_caught > 0); /* the twin's branch really ran */
}

static void test_deterministic(void **state)
{
    (void)state;
    accum_dataset a, b;
    assert_int_equal(accum_dataset_make(&a, ACCUM_NORMAL, 1.0, PREC_BF16, 5000, 77), 0);
    assert_int_equal(accum_dataset_make(&b, ACCUM_NORMAL, 1.0, PREC_BF16, 5000, 77), 0);
    assert_memory_equal(a.v, b.v, 5000 * sizeof *a.v);
    accum_method m = method(PREC_BF16, PREC_SUM_PAIRWISE, PREC_SR);
    accum_result r1, r2, r3;
    accum_run(&a, &m, 77, &r1);
    accum_run(&b, &m, 77, &r2);
    accum_run(&b, &m, 78, &r3);
    assert_true(r1.value == r2.value);
    assert_true(r1.value != r3.value || r1.abs_err == 0); /* another seed, other SR draws */
    accum_dataset_free(&a);
    accum_dataset_free(&b);
}

static void test_log_spaced(void **state)
{
    (void)state;
    size_t out[64];
    int n = accum_log_spaced(10, 10000000, 13, out, 64);
    assert_int_equal(n, 13);
    assert_true(out[0] == 10 && out[12] == 10000000 && out[2] == 100 && out[4] == 1000);
    n = accum_log_spaced(1, 4, 10, out, 64); /* duplicates dropped */
    assert_int_equal(n, 4);
}

/* One bad argument list: parse fails, and the message names `bad` and
 * (when given) contains `accepted`. */
static void expect_bad(const char *bad, const char *accepted, int argc, char **argv)
{
    accum_options o;
    char err[512] = "";
    assert_int_equal(accum_parse_args(argc, argv, &o, err, sizeof err), -1);
    assert_non_null(strstr(err, bad));
    if (accepted) assert_non_null(strstr(err, accepted));
    assert_null(strchr(err, '\n'));
}

static void test_bad_input(void **state)
{
    (void)state;
    expect_bad("fp7", "bf16, fp16", 3, (char *[]){"accum", "--acc", "fp7"});
    expect_bad("fp9", "e4m3", 2, (char *[]){"accum", "--addend=fp9"});
    expect_bad("'xx'", "fp16", 3, (char *[]){"accum", "--pairs", "fp32/xx"});
    expect_bad("'0'", NULL, 3, (char *[]){"accum", "--n", "0"});
    expect_bad("-5", NULL, 3, (char *[]){"accum", "--n", "10,-5"});
    expect_bad("12abc", NULL, 3, (char *[]){"accum", "--n", "12abc"});
    expect_bad("foo", "kahan", 3, (char *[]){"accum", "--algo", "foo"});
    expect_bad("rn", "rne, rz", 3, (char *[]){"accum", "--round", "rn"});
    expect_bad("gauss", "heavy", 3, (char *[]){"accum", "--data", "gauss"});
    expect_bad("--bogus", "--n-min", 2, (char *[]){"accum", "--bogus"});
    expect_bad("--n-min", NULL, 5, (char *[]){"accum", "--n-min", "100", "--n-max", "10"});
    expect_bad("1.5", NULL, 3, (char *[]){"accum", "--block", "1.5"});
    expect_bad("inf", NULL, 3, (char *[]){"accum", "--x", "inf"});
    expect_bad("--json", NULL, 2, (char *[]){"accum", "--json"});
    expect_bad("0", NULL, 3, (char *[]){"accum", "--fail-prob", "0"});
    expect_bad("--n given twice", NULL, 5, (char *[]){"accum", "--n", "10", "--n", "20"});
    expect_bad("'10,,20'", NULL, 3, (char *[]){"accum", "--n", "10,,20"});
    expect_bad("'fp32,'", NULL, 3, (char *[]){"accum", "--acc", "fp32,"});
    expect_bad("--json needs a value", NULL, 4, (char *[]){"accum", "--json", "--n", "10"});
}

static void test_good_input(void **state)
{
    (void)state;
    accum_options o;
    char err[256];
    assert_int_equal(accum_parse_args(1, (char *[]){"accum"}, &o, err, sizeof err), 0);
    assert_true(o.classic);
    assert_int_equal(o.n_pairs, 9);
    char *argv[] = {"accum", "--n", "10,1e3", "--algo", "all", "--round", "rne,sr", "--acc", "fp32,bf16",
                    "--addend", "bf16,e4m3", "--data=normal,heavy", "--json", "-"};
    assert_int_equal(accum_parse_args(14, argv, &o, err, sizeof err), 0);
    assert_false(o.classic);
    assert_int_equal(o.n_ns, 2);
    assert_true(o.ns[1] == 1000);
    assert_int_equal(o.n_algos, PREC_SUM_NALGOS);
    assert_int_equal(o.n_rounds, 2);
    assert_int_equal(o.n_pairs, 4);
    assert_int_equal(o.pairs[3].acc, PREC_BF16);
    assert_int_equal(o.pairs[3].addend, PREC_E4M3);
    assert_int_equal(o.n_data, 2);
    assert_string_equal(o.json, "-");
    char *sweep[] = {"accum", "--n-min", "10", "--n-max", "1e7", "--points", "13", "--addend", "fp16"};
    assert_int_equal(accum_parse_args(9, sweep, &o, err, sizeof err), 0);
    assert_int_equal(o.n_ns, 13);
    assert_int_equal(o.pairs[0].acc, PREC_FP32);
    assert_int_equal(o.pairs[0].addend, PREC_FP16);
    char *alone[] = {"accum", "--acc", "bf16,fp16", "--data", "all"}; /* pairs with itself */
    assert_int_equal(accum_parse_args(5, alone, &o, err, sizeof err), 0);
    assert_int_equal(o.n_pairs, 2);
    assert_int_equal(o.pairs[1].acc, PREC_FP16);
    assert_int_equal(o.pairs[1].addend, PREC_FP16);
    assert_int_equal(o.n_data, ACCUM_NDATA);
}

/* Kahan and Neumaier have bounds under round to nearest only: under directed
 * and stochastic rounding the result says "no bound" (NaN) and claims no
 * probabilistic status; under RNE (the twin) both exist and hold. */
static void test_no_bound_is_said(void **state)
{
    (void)state;
    accum_dataset d;
    assert_int_equal(accum_dataset_make(&d, ACCUM_UNIFORM, 1.0, PREC_FP32, 500, 7), 0);
    const prec_sum_algo algos[2] = {PREC_SUM_KAHAN, PREC_SUM_NEUMAIER};
    const prec_round_mode rounds[3] = {PREC_RZ, PREC_RU, PREC_SR};
    for (int a = 0; a < 2; a++) {
        for (int k = 0; k < 3; k++) {
            accum_method m = method(PREC_FP32, algos[a], rounds[k]);
            accum_result r;
            accum_run(&d, &m, 1, &r);
            assert_true(isnan(r.prob_bound));
            assert_int_equal(r.prob_status, PREC_PROB_NONE);
        }
        accum_method m = method(PREC_FP32, algos[a], PREC_RNE);
        accum_result r;
        accum_run(&d, &m, 1, &r);
        assert_false(isnan(r.bound));
        assert_int_not_equal(r.prob_status, PREC_PROB_NONE);
        assert_true(r.abs_err <= r.bound);
    }
    accum_dataset_free(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_classic_fp32_matches_float_loop),
        cmocka_unit_test(test_rows_within_bounds),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_no_bound_is_said),
        cmocka_unit_test(test_log_spaced),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_good_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
