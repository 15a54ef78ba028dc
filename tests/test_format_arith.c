/* tests/test_format_arith.c — prec_add, prec_mul and prec_fma against MPFR:
 * the exact result (MPFR at 4400 bits, where every sum, product and FMA of
 * doubles is exact; the ternary value proves it) rounded once into the
 * format by the reference of test_format_mpfr.h.  Operands are random values
 * of each format: half random bit patterns (every binade, subnormals,
 * infinities and zeros), half near 1 so that sums cancel and round at every
 * position; FMAs get c = -(a*b rounded) often, the hard cancelling case.
 * Every non-stochastic mode, IEEE and saturating overflow, with and without
 * flushing.  Planted twins: rounding the double result (a+b, a*b, fma)
 * instead of the exact one must report mismatches. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <time.h>

#include "precision/rng.h"
#include "tests/test_format_mpfr.h"
#include "tests/test_util.h"

typedef enum { OP_ADD, OP_MUL, OP_FMA, OP_COUNT } arith_op;
static const char *const op_names[OP_COUNT] = {"add", "mul", "fma"};

typedef struct {
    double (*add)(double, double, prec_format, prec_rounding, uint64_t);
    double (*mul)(double, double, prec_format, prec_rounding, uint64_t);
    double (*fma)(double, double, double, prec_format, prec_rounding, uint64_t);
} arith_impl;

/* MPFR's exact result of op, rounded into the format. */
static double reference(arith_op op, double a, double b, double c, const ref_spec *s, prec_rounding r)
{
    mpfr_t A, B, C, X;
    mpfr_inits2(53, A, B, C, (mpfr_ptr)0);
    mpfr_init2(X, 4400);
    mpfr_set_d(A, a, MPFR_RNDN);
    mpfr_set_d(B, b, MPFR_RNDN);
    mpfr_set_d(C, c, MPFR_RNDN);
    mpfr_rnd_t rnd = ref_rnd(r.mode); /* exact, so it only decides the sign of a zero */
    int t = op == OP_ADD ? mpfr_add(X, A, B, rnd) : op == OP_MUL ? mpfr_mul(X, A, B, rnd)
                                                                 : mpfr_fma(X, A, B, C, rnd);
    if (t != 0) fail_msg("MPFR result not exact for %s(%a, %a, %a)", op_names[op], a, b, c);
    double v = ref_round_exact(X, s, r);
    mpfr_clears(A, B, C, X, (mpfr_ptr)0);
    return v;
}

static double run_op(const arith_impl *impl, arith_op op, double a, double b, double c, prec_format f,
                     prec_rounding r)
{
    switch (op) {
    case OP_ADD: return impl->add(a, b, f, r, 0);
    case OP_MUL: return impl->mul(a, b, f, r, 0);
    default: return impl->fma(a, b, c, f, r, 0);
    }
}

/* A random value of format f (never NaN; see the file comment). */
static double random_operand(prec_rng *rng, prec_format f)
{
    const prec_format_info *fi = prec_format_get(f);
    uint64_t sel = prec_rng_next(rng);
    if (sel % 64 == 0) { /* specials */
        const double sp[] = {0.0, -0.0, INFINITY, -INFINITY, fi->max_finite, -fi->min_subnormal};
        return sp[(sel >> 8) % 6];
    }
    if (sel & 64) { /* any bit pattern */
        int width = fi->storage_bits;
        uint64_t bits = prec_rng_next(rng);
        if (width < 64) bits &= (1ull << width) - 1;
        double v = prec_decode(bits, f);
        return isnan(v) ? 1.0 : v;
    }
    /* near 1: exponents in [-6, 6] */
    double m = 1.0 + prec_rng_uniform(rng);
    double v = prec_rne(ldexp(m, (int)(prec_rng_next(rng) % 13) - 6), f);
    return (sel & 128) ? -v : v;
}

/* Mismatches of impl against MPFR on n random operand triples per config. */
static long compare_arith(const arith_impl *impl, arith_op op, prec_format f, size_t n, prec_rng *rng,
                          bool quiet, long *checked)
{
    const ref_spec *s = &ref_specs[f];
    long bad = 0;
    for (int cfg = 0; cfg < REF_NCONFIGS; cfg++) {
        prec_rounding r = ref_config(cfg);
        for (size_t i = 0; i < n; i++) {
            double a = random_operand(rng, f), b = random_operand(rng, f), c = random_operand(rng, f);
            if (op == OP_FMA && (prec_rng_next(rng) & 3) == 0 && isfinite(a * b)) {
                /* cancel the product's leading bits */
                c = -prec_rne(a * b, f);
                if (isinf(c)) c = random_operand(rng, f);
            }
            double want = reference(op, a, b, c, s, r);
            double got = run_op(impl, op, a, b, c, f, r);
            if (!same_double(got, want)) {
                if (!quiet && bad < 5) {
                    char name[32];
                    ref_config_name(r, name, sizeof name);
                    printf("  %s %s %s(%a, %a, %a) = %a, MPFR says %a\n", prec_format_name(f), name,
                           op_names[op], a, b, c, got, want);
                }
                bad++;
            }
            (*checked)++;
        }
    }
    return bad;
}

static const arith_impl under_test = {prec_add, prec_mul, prec_fma};

static void check_op(arith_op op, const char *name, size_t n)
{
    prec_rng rng;
    prec_rng_seed(&rng, test_seed(name));
    long checked = 0, bad = 0;
    clock_t t0 = clock();
    for (int f = 0; f < PREC_NFORMATS; f++) bad += compare_arith(&under_test, op, (prec_format)f, n, &rng, false, &checked);
    printf("%s: %ld results checked against MPFR, %ld mismatches (%.1f s)\n", op_names[op], checked,
           bad, (double)(clock() - t0) / CLOCKS_PER_SEC);
    assert_int_equal(bad, 0);
}

static void test_add(void **state) { (void)state; check_op(OP_ADD, "test_add", 20000); }
static void test_mul(void **state) { (void)state; check_op(OP_MUL, "test_mul", 20000); }
static void test_fma(void **state) { (void)state; check_op(OP_FMA, "test_fma", 20000); }

/* Hand-worked cases where the sign of zero or range matters. */
static void test_zero_signs_and_range(void **state)
{
    (void)state;
    prec_rounding rne = PREC_ROUNDING_RNE, rd = {PREC_RD, PREC_OVF_IEEE, false},
                  rz = {PREC_RZ, PREC_OVF_IEEE, false}, ru = {PREC_RU, PREC_OVF_IEEE, false};
    assert_true(same_double(prec_add(1.0, -1.0, PREC_BF16, rne, 0), 0.0));
    assert_true(same_double(prec_add(1.0, -1.0, PREC_BF16, rd, 0), -0.0));
    assert_true(same_double(prec_add(-0.0, -0.0, PREC_FP16, rne, 0), -0.0));
    assert_true(same_double(prec_add(0.0, -0.0, PREC_FP16, rd, 0), -0.0));
    assert_true(same_double(prec_fma(0.0, -1.0, 0.0, PREC_FP32, rne, 0), 0.0));
    assert_true(same_double(prec_fma(0.0, -1.0, -0.0, PREC_FP32, rne, 0), -0.0));
    assert_true(same_double(prec_fma(2.0, 3.0, -6.0, PREC_FP64, rd, 0), -0.0));
    /* past double's range, exactly: RZ keeps max finite, RU overflows */
    assert_true(prec_add(0x1.fffffffffffffp+1023, 0x1p970, PREC_FP64, rz, 0) == 0x1.fffffffffffffp+1023);
    assert_true(isinf(prec_add(0x1.fffffffffffffp+1023, 0x1p970, PREC_FP64, ru, 0)));
    assert_true(prec_mul(0x1p1000, 0x1p100, PREC_FP64, rz, 0) == 0x1.fffffffffffffp+1023);
    /* under double's range: RU of a tiny positive product is the smallest subnormal */
    assert_true(prec_mul(0x1p-600, 0x1p-600, PREC_FP64, ru, 0) == 0x1p-1074);
    assert_true(prec_mul(0x1p-600, -0x1p-600, PREC_FP64, rne, 0) == 0.0 &&
                signbit(prec_mul(0x1p-600, -0x1p-600, PREC_FP64, rne, 0)));
    /* fma in fp64 with a directed mode: the sticky bit beyond 106 bits */
    assert_true(prec_fma(1.0 + 0x1p-52, 1.0 + 0x1p-52, -1.0, PREC_FP64, rd, 0) == 0x1.00000000000008p-51);
    assert_true(isnan(prec_fma(INFINITY, 0.0, 1.0, PREC_FP32, rne, 0)));
    assert_true(isnan(prec_add(INFINITY, -INFINITY, PREC_FP16, rne, 0)));
    assert_true(isnan(prec_mul(1e6, 1e6, PREC_E4M3, rne, 0)));
    assert_true(prec_mul(1e6, 1e6, PREC_E4M3, (prec_rounding){PREC_RNE, PREC_OVF_SATURATE, false}, 0) == 448.0);
}

/* Planted twins: round the double-precision result instead of the exact one. */
static double add_rounding_the_double(double a, double b, prec_format f, prec_rounding r, uint64_t bits)
{
    return prec_round(a + b, f, r, bits);
}
static double mul_rounding_the_double(double a, double b, prec_format f, prec_rounding r, uint64_t bits)
{
    return prec_round(a * b, f, r, bits);
}
static double fma_rounding_the_double(double a, double b, double c, prec_format f, prec_rounding r,
                                      uint64_t bits)
{
    return prec_round(fma(a, b, c), f, r, bits);
}

static void test_planted_arith_is_caught(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_planted_arith_is_caught"));
    const arith_impl twin = {add_rounding_the_double, mul_rounding_the_double, fma_rounding_the_double};
    for (int op = 0; op < OP_COUNT; op++) {
        long checked = 0, bad = 0;
        for (int f = 0; f < PREC_NFORMATS; f++)
            bad += compare_arith(&twin, (arith_op)op, (prec_format)f, 500, &rng, true, &checked);
        printf("  planted %s (rounds the double result): %ld mismatches in %ld\n", op_names[op], bad,
               checked);
        assert_true(bad > 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add),
        cmocka_unit_test(test_mul),
        cmocka_unit_test(test_fma),
        cmocka_unit_test(test_zero_signs_and_range),
        cmocka_unit_test(test_planted_arith_is_caught),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
