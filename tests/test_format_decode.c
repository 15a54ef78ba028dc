/* tests/test_format_decode.c — every bit pattern of tf32, bf16, fp16, e4m3
 * and e5m2 (and random fp32/fp64 patterns) decodes to exactly what MPFR
 * computes from the sign, exponent and fraction fields; encode(decode(b)) is b
 * for every non-NaN pattern; the property table matches the field widths.
 * Planted twins: the same check against a decoder with a wrong exponent bias
 * and one that treats e4m3 like an IEEE format must report mismatches. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>

#include "precision/rng.h"
#include "tests/test_format_mpfr.h"
#include "tests/test_util.h"

typedef double (*decoder_fn)(uint64_t bits, prec_format f);

/* Decode every pattern in patterns[0..n): value (and zero sign)
 * against MPFR, NaN where MPFR says NaN.  Returns the mismatch count. */
static long check_decode(decoder_fn decode, const ref_spec *s, const uint64_t *patterns, size_t n,
                         bool quiet)
{
    long bad = 0;
    for (size_t i = 0; i < n; i++) {
        bool want_nan;
        double want = ref_decode(patterns[i], s, &want_nan);
        double got = decode(patterns[i], s->f);
        if (!same_double(got, want)) {
            if (!quiet && bad < 5)
                printf("  %s decode(0x%llx) = %a, MPFR says %a\n", prec_format_name(s->f),
                       (unsigned long long)patterns[i], got, want);
            bad++;
        }
    }
    return bad;
}

/* All patterns of a format up to 19 bits wide, shifted into place. */
static uint64_t *all_patterns(const ref_spec *s, size_t *n)
{
    int width = 1 + s->ebits + s->fbits;
    *n = (size_t)1 << width;
    uint64_t *p = malloc(*n * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < *n; i++) p[i] = (uint64_t)i << s->shift;
    return p;
}

static void test_decode_exhaustive(void **state)
{
    (void)state;
    const prec_format formats[] = {PREC_TF32, PREC_BF16, PREC_FP16, PREC_E4M3, PREC_E5M2};
    long total = 0, nans = 0;
    for (size_t k = 0; k < sizeof formats / sizeof formats[0]; k++) {
        const ref_spec *s = &ref_specs[formats[k]];
        size_t n;
        uint64_t *p = all_patterns(s, &n);
        assert_int_equal(check_decode(prec_decode, s, p, n, false), 0);
        long roundtrips = 0;
        for (size_t i = 0; i < n; i++) {
            double v = prec_decode(p[i], s->f);
            if (isnan(v)) { nans++; continue; }
            uint64_t back = prec_encode(v, s->f);
            if (back != p[i])
                fail_msg("%s encode(decode(0x%llx)) = 0x%llx", prec_format_name(s->f),
                         (unsigned long long)p[i], (unsigned long long)back);
            assert_true(prec_representable(v, s->f));
            roundtrips++;
        }
        printf("  %s: %zu patterns decoded as MPFR does, %ld round trips\n", prec_format_name(s->f), n,
               roundtrips);
        total += (long)n;
        free(p);
    }
    /* e4m3 has exactly two NaN patterns; the IEEE-like formats 2 * (2^f - 1). */
    assert_int_equal(nans, 2 * ((1 << 10) - 1) + 2 * ((1 << 7) - 1) + 2 * ((1 << 10) - 1) + 2 +
                               2 * ((1 << 2) - 1));
    printf("decode: %ld patterns checked against MPFR\n", total);
}

static void test_decode_random_wide(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_decode_random_wide"));
    const size_t n = 200000;
    uint64_t *p = malloc(n * sizeof *p);
    assert_non_null(p);
    const prec_format formats[] = {PREC_FP32, PREC_FP64};
    for (size_t k = 0; k < 2; k++) {
        const ref_spec *s = &ref_specs[formats[k]];
        int width = 1 + s->ebits + s->fbits;
        for (size_t i = 0; i < n; i++) {
            uint64_t b = prec_rng_next(&rng);
            p[i] = width == 64 ? b : b & ((1ull << width) - 1);
        }
        /* every exponent field at least once, fractions 0 and all ones */
        for (uint64_t ex = 0; ex < (1ull << s->ebits) && ex < n / 2; ex++) {
            p[2 * ex] = ex << s->fbits;
            p[2 * ex + 1] = (ex << s->fbits) | ((1ull << s->fbits) - 1) | (1ull << (width - 1));
        }
        assert_int_equal(check_decode(prec_decode, s, p, n, false), 0);
        for (size_t i = 0; i < n; i++) {
            double v = prec_decode(p[i], s->f);
            if (!isnan(v)) assert_true(prec_encode(v, s->f) == p[i]);
        }
        printf("  %s: %zu random patterns decoded as MPFR does, encode round trips\n",
               prec_format_name(s->f), n);
    }
    free(p);
}

/* The property table against the field widths (ref_spec) and the decoder. */
static void test_properties_from_fields(void **state)
{
    (void)state;
    for (int f = 0; f < PREC_NFORMATS; f++) {
        const ref_spec *s = &ref_specs[f];
        const prec_format_info *fi = prec_format_get((prec_format)f);
        assert_int_equal(fi->exponent_bits, s->ebits);
        assert_int_equal(fi->fraction_bits, s->fbits);
        assert_int_equal(fi->precision, ref_prec(s));
        assert_int_equal(fi->emin, ref_emin(s));
        assert_int_equal(fi->emax, ref_emax(s));
        assert_true(fi->has_infinity == !s->fn);
        assert_true(fi->max_finite == ref_max_finite(s));
        assert_true(fi->min_normal == ref_min_normal(s));
        assert_true(fi->min_subnormal == ldexp(1.0, ref_emin(s) - ref_prec(s) + 1));
        assert_true(fi->unit_roundoff == ldexp(1.0, -ref_prec(s)));
        /* the extreme patterns decode to the table's values */
        uint64_t min_sub = 1ull << s->shift, min_norm = (1ull << s->fbits) << s->shift;
        assert_true(prec_decode(min_sub, (prec_format)f) == fi->min_subnormal);
        assert_true(prec_decode(min_norm, (prec_format)f) == fi->min_normal);
        assert_true(prec_encode(fi->max_finite, (prec_format)f) ==
                    (s->fn ? 0x7eull : (((1ull << s->ebits) - 1) << s->fbits) - 1) << s->shift);
        /* names print and parse back */
        prec_format g;
        assert_int_equal(prec_format_parse(prec_format_name((prec_format)f), &g), 0);
        assert_int_equal(g, f);
    }
    prec_format g;
    assert_int_equal(prec_format_parse("float8_e4m3fn", &g), 0);
    assert_int_equal(g, PREC_E4M3);
    assert_int_equal(prec_format_parse("e4m4", &g), -1);
    assert_int_equal(prec_format_parse("", &g), -1);
    prec_round_mode m;
    for (int i = 0; i < PREC_NROUNDS; i++) {
        assert_int_equal(prec_round_mode_parse(prec_round_mode_name((prec_round_mode)i), &m), 0);
        assert_int_equal(m, i);
    }
    assert_int_equal(prec_round_mode_parse("rn", &m), -1);
    /* NaN encodings: e4m3's one NaN per sign, quiet NaNs elsewhere */
    assert_true(prec_encode(NAN, PREC_E4M3) == 0x7f);
    assert_true(isnan(prec_decode(0xff, PREC_E4M3)));
    assert_true(prec_decode(0xfe, PREC_E4M3) == -448.0);
    assert_true(prec_encode(NAN, PREC_TF32) == 0x7fc00000);
    assert_true(prec_encode(INFINITY, PREC_E5M2) == 0x7c);
    assert_true(prec_encode(-INFINITY, PREC_TF32) == 0xff800000);
    /* tf32 encoding keeps the low 13 bits zero and ignores them when decoding */
    assert_true(prec_encode(1.0 + 0x1p-10, PREC_TF32) == 0x3f802000);
    assert_true(prec_decode(0x3f802000 | 0x1fff, PREC_TF32) == 1.0 + 0x1p-10);
}

/* Planted twins: wrong decoders must be caught by check_decode. */
static double decode_bias_off_by_one(uint64_t bits, prec_format f)
{
    return ldexp(prec_decode(bits, f), 1); /* as if the bias were one smaller */
}

static double decode_e4m3_as_ieee(uint64_t bits, prec_format f)
{
    /* the IEEE reading: exponent field 1111 is inf/NaN */
    if (f == PREC_E4M3 && ((bits >> 3) & 0xf) == 0xf)
        return (bits & 7) ? NAN : ((bits & 0x80) ? -INFINITY : INFINITY);
    return prec_decode(bits, f);
}

static double decode_subnormal_with_hidden_bit(uint64_t bits, prec_format f)
{
    const prec_format_info *fi = prec_format_get(f);
    double v = prec_decode(bits, f);
    if (v != 0.0 && fabs(v) < fi->min_normal) v += copysign(fi->min_normal, v);
    return v;
}

static void test_planted_decoders_are_caught(void **state)
{
    (void)state;
    const decoder_fn twins[] = {decode_bias_off_by_one, decode_e4m3_as_ieee,
                                decode_subnormal_with_hidden_bit};
    const char *names[] = {"bias off by one", "e4m3 read as IEEE", "hidden bit on subnormals"};
    for (size_t t = 0; t < 3; t++) {
        long bad = 0;
        const prec_format formats[] = {PREC_BF16, PREC_FP16, PREC_E4M3, PREC_E5M2};
        for (size_t k = 0; k < 4; k++) {
            size_t n;
            uint64_t *p = all_patterns(&ref_specs[formats[k]], &n);
            bad += check_decode(twins[t], &ref_specs[formats[k]], p, n, true);
            free(p);
        }
        printf("  planted decoder '%s': %ld mismatches reported\n", names[t], bad);
        assert_true(bad > 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_exhaustive),
        cmocka_unit_test(test_decode_random_wide),
        cmocka_unit_test(test_properties_from_fields),
        cmocka_unit_test(test_planted_decoders_are_caught),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
