/* tests/test_format_round.c — rounding a double (or an exact pair hi + lo)
 * into every format, in every non-stochastic mode, IEEE and saturating
 * overflow, subnormals kept and flushed, agrees with MPFR (mpfr_set at the
 * target precision + mpfr_subnormalize, explicit range checks; see
 * test_format_mpfr.h) on:
 *   - structured inputs at every value of bf16/fp16/e4m3/e5m2 and at sampled
 *     values of tf32/fp32: the value, its neighbours one double-ulp away, the
 *     midpoints to the next value (ties), midpoints +- one double-ulp and
 *     +- one format ulp, around min subnormal, min normal, max finite and the
 *     overflow threshold; signed zeros, NaN, infinities;
 *   - random fp32 and fp64 inputs with exponents drawn over every binade of
 *     the target (subnormal and overflow ranges included), > 10^7 in all;
 *   - for fp64 and the others, exact pairs hi + lo (ties in lo, binade
 *     crossings with lo < 0).
 * Planted twins: the same comparison against a ties-away rounder, one whose
 * subnormal range starts one binade low, and one that overflows on the
 * unrounded input must report mismatches. */
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

typedef double (*rounder_fn)(double hi, double lo, prec_format f, prec_rounding r);

static double round_under_test(double hi, double lo, prec_format f, prec_rounding r)
{
    return prec_round2(hi, lo, f, r, 0);
}

/* The comparison every check here uses: rounder against MPFR on n inputs
 * (lo may be NULL: all zero).  Returns the mismatch count. */
static long compare_rounding(rounder_fn rounder, prec_format f, prec_rounding r, const double *hi,
                             const double *lo, size_t n, bool quiet)
{
    const ref_spec *s = &ref_specs[f];
    long bad = 0;
    for (size_t i = 0; i < n; i++) {
        double l = lo ? lo[i] : 0.0;
        double want = ref_round2(hi[i], l, s, r);
        double got = rounder(hi[i], l, f, r);
        if (!same_double(got, want)) {
            if (!quiet && bad < 5) {
                char cfg[32];
                ref_config_name(r, cfg, sizeof cfg);
                printf("  %s %s: round(%a + %a) = %a, MPFR says %a\n", prec_format_name(f), cfg,
                       hi[i], l, got, want);
            }
            bad++;
        }
    }
    return bad;
}

/* A growing list of inputs. */
typedef struct { double *v; size_t n, cap; } input_list;

static void push(input_list *in, double x)
{
    if (in->n == in->cap) {
        in->cap = in->cap ? 2 * in->cap : 4096;
        in->v = realloc(in->v, in->cap * sizeof *in->v);
        assert_non_null(in->v);
    }
    in->v[in->n++] = x;
}

/* Inputs around the nonnegative format value g (both signs pushed):
 * g, g +- one double ulp, the midpoint to the next value of the format
 * (a tie), the midpoint +- one double ulp and +- one format ulp. */
static void push_around(input_list *in, double g, prec_format f)
{
    double gap = prec_ulp(g, f); /* spacing just above g */
    double mid = g + gap / 2;
    const double xs[] = {g, nextafter(g, INFINITY), nextafter(g, 0.0), mid,
                         nextafter(mid, INFINITY), nextafter(mid, 0.0), mid + gap, mid - gap};
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
        push(in, xs[i]);
        push(in, -xs[i]);
    }
}

/* Structured inputs for format f (see the file comment). */
static input_list structured_inputs(prec_format f, prec_rng *rng)
{
    const prec_format_info *fi = prec_format_get(f);
    input_list in = {0};
    const double specials[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 0x1p-1074, -0x1p-1074,
                               0x1.fffffffffffffp+1023, -0x1.fffffffffffffp+1023};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) push(&in, specials[i]);
    /* every value of the narrow formats, sampled values of the wide ones */
    int width = 1 + fi->exponent_bits + fi->fraction_bits;
    if (width <= 16) {
        for (uint64_t b = 0; b < (1ull << (width - 1)); b++) {
            double g = prec_decode(b, f);
            if (isfinite(g)) push_around(&in, g, f);
        }
    } else {
        for (int i = 0; i < 20000; i++) {
            const int e = fi->emin - fi->precision + /* before the mantissa, explicitly */
                          (int)(prec_rng_next(rng) % (uint64_t)(fi->emax - fi->emin + fi->precision + 1));
            double g = prec_rne(ldexp(1.0 + prec_rng_uniform(rng), e), f);
            if (isfinite(g)) push_around(&in, g, f);
        }
    }
    /* the boundaries: min subnormal, min normal, max, overflow threshold */
    double q = fi->min_subnormal, top_gap = prec_ulp(fi->max_finite, f);
    const double edges[] = {q / 4, q / 2, 3 * q / 4, q, 3 * q / 2, fi->min_normal - q / 2,
                            fi->min_normal, fi->max_finite, fi->max_finite + top_gap / 2,
                            fi->max_finite + top_gap, 2 * fi->max_finite, ldexp(1.0, fi->emax + 1)};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) push_around(&in, edges[i], f);
    return in;
}

static long structured_checked;

static void test_round_structured(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_round_structured"));
    for (int f = 0; f < PREC_NFORMATS; f++) {
        input_list in = structured_inputs((prec_format)f, &rng);
        for (int c = 0; c < REF_NCONFIGS; c++) {
            /* the whole grid for the first four configurations, the
             * boundary-heavy tail (zeros, edges) under saturation and flush */
            size_t n = c < 4 ? in.n : (in.n < 20000 ? in.n : 20000);
            const double *xs = c < 4 ? in.v : in.v + (in.n - n);
            assert_int_equal(compare_rounding(round_under_test, (prec_format)f, ref_config(c), xs,
                                              NULL, n, false), 0);
            if (c >= 4) /* specials sit at the front */
                assert_int_equal(compare_rounding(round_under_test, (prec_format)f, ref_config(c),
                                                  in.v, NULL, 9, false), 0);
            structured_checked += (long)n;
        }
        free(in.v);
    }
    printf("structured: %ld roundings agree with MPFR\n", structured_checked);
}

/* A random double whose exponent is uniform over every binade of f, from
 * well below its smallest subnormal to well past its overflow threshold;
 * with fp32_only, rounded to the nearest fp32 first (an fp32 input).  A
 * few exponents reach double's own extremes. */
static double random_input(prec_rng *rng, const prec_format_info *fi, bool fp32_only)
{
    int lo_exp = fi->emin - fi->precision - 4, hi_exp = fi->emax + 4;
    if (fp32_only) {
        if (lo_exp < -152) lo_exp = -152;
        if (hi_exp > 129) hi_exp = 129;
    }
    uint64_t bits = prec_rng_next(rng);
    int e;
    if ((bits & 63) == 0) e = (int)(prec_rng_next(rng) % 2098) - 1075; /* any double binade */
    else e = lo_exp + (int)(prec_rng_next(rng) % (uint64_t)(hi_exp - lo_exp + 1));
    double m = 1.0 + (double)(prec_rng_next(rng) >> 12) * 0x1p-52;
    if ((bits >> 6) % 8 == 0) m = 1.0 + (double)((prec_rng_next(rng) >> 50) | 1) * 0x1p-14; /* short: ties */
    double x = ldexp(m, e);
    if (fp32_only) x = (double)(float)x;
    return (bits >> 63) ? -x : x;
}

/* Exact pairs: hi a random double over f's binades, lo with |lo| <= ulp(hi)/2
 * and hi = RN(hi + lo); a quarter are ties at double precision (lo = +-ulp/2
 * with hi even) or binade starts with lo < 0. */
static void random_pair(prec_rng *rng, const prec_format_info *fi, double *hi, double *lo)
{
    double h = random_input(rng, fi, false);
    if (h == 0.0 || !isfinite(h)) h = 1.0;
    uint64_t sel = prec_rng_next(rng) % 8;
    if (sel <= 1) h = copysign(ldexp(1.0, ilogb(h)), h); /* a binade start */
    double u = nextafter(fabs(h), INFINITY) - fabs(h);     /* ulp above |h| */
    if (isinf(u)) u = 0x1p971;
    double below = fabs(h) - nextafter(fabs(h), 0.0);      /* spacing below */
    double l;
    switch (sel) {
    case 0: l = -copysign(below / 2, h); break; /* tie just below a binade start */
    case 1: l = -copysign(below / 2 * prec_rng_uniform(rng), h); break;
    case 2: l = copysign(u / 2, h) * ((prec_rng_next(rng) & 1) ? 1 : -1); break; /* tie */
    default: l = (prec_rng_uniform(rng) - 0.5) * u; break;
    }
    double s = h + l; /* renormalise: hi = RN(hi + lo), hi + lo unchanged */
    double t = (h - s) + l;
    if (!isfinite(s)) { s = h; t = 0.0; }
    *hi = s;
    *lo = t;
}

static void test_round_random(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_round_random"));
    const size_t per_config = 48000; /* 7 formats x 16 configs x 2 kinds x 48000 > 10^7 */
    double *hi = malloc(per_config * sizeof *hi), *lo = malloc(per_config * sizeof *lo);
    assert_non_null(hi);
    assert_non_null(lo);
    long fp32_inputs = 0, fp64_inputs = 0, pair_inputs = 0;
    clock_t t0 = clock();
    for (int f = 0; f < PREC_NFORMATS; f++) {
        const prec_format_info *fi = prec_format_get((prec_format)f);
        for (int c = 0; c < REF_NCONFIGS; c++) {
            prec_rounding r = ref_config(c);
            /* fp32 inputs (for fp64 and fp32 targets they are exact: still
             * checks flushing and the identity) */
            for (size_t i = 0; i < per_config; i++) hi[i] = random_input(&rng, fi, true);
            assert_int_equal(compare_rounding(round_under_test, (prec_format)f, r, hi, NULL,
                                              per_config, false), 0);
            fp32_inputs += (long)per_config;
            if (f == PREC_FP64 || f == PREC_FP32 || c % 2 == 0) {
                /* exact pairs: the only nontrivial fp64 rounding, and sticky
                 * bits beyond double for the rest */
                for (size_t i = 0; i < per_config; i++) random_pair(&rng, fi, &hi[i], &lo[i]);
                assert_int_equal(compare_rounding(round_under_test, (prec_format)f, r, hi, lo,
                                                  per_config, false), 0);
                pair_inputs += (long)per_config;
            }
            if (f != PREC_FP64) {
                for (size_t i = 0; i < per_config; i++) hi[i] = random_input(&rng, fi, false);
                assert_int_equal(compare_rounding(round_under_test, (prec_format)f, r, hi, NULL,
                                                  per_config, false), 0);
                fp64_inputs += (long)per_config;
            }
        }
    }
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    printf("random: %ld fp32 inputs, %ld fp64 inputs, %ld exact hi+lo pairs agree with MPFR "
           "(%ld in all, %.1f s)\n",
           fp32_inputs, fp64_inputs, pair_inputs, fp32_inputs + fp64_inputs + pair_inputs, secs);
    assert_true(fp32_inputs + fp64_inputs + pair_inputs >= 10000000);
    free(hi);
    free(lo);
}

/* ---- planted twins ---------------------------------------------------- */

/* Round to nearest with ties away from zero (the classic wrong tie rule). */
static double round_ties_away(double hi, double lo, prec_format f, prec_rounding r)
{
    double v = prec_round2(hi, lo, f, r, 0);
    if (r.mode != PREC_RNE || !isfinite(hi)) return v;
    prec_rounding rz = {PREC_RZ, r.overflow, r.flush_subnormals};
    prec_rounding away = {hi < 0 ? PREC_RD : PREC_RU, r.overflow, r.flush_subnormals};
    double down = prec_round2(hi, lo, f, rz, 0), up = prec_round2(hi, lo, f, away, 0);
    if (lo == 0.0 && isfinite(up) && hi - down == up - hi && down != up) return up;
    return v;
}

/* Subnormal range starting one binade too low: values in [min_normal/2,
 * min_normal) keep full precision (a quantum half the true one). */
static double round_subnormal_bound_low(double hi, double lo, prec_format f, prec_rounding r)
{
    const prec_format_info *fi = prec_format_get(f);
    if (fabs(hi) >= fi->min_normal / 2 && fabs(hi) < fi->min_normal)
        return ldexp(prec_round2(ldexp(hi, 1), ldexp(lo, 1), f, r, 0), -1);
    return prec_round2(hi, lo, f, r, 0);
}

/* Overflow decided on the input instead of the rounded value. */
static double round_overflow_on_input(double hi, double lo, prec_format f, prec_rounding r)
{
    const prec_format_info *fi = prec_format_get(f);
    if (fabs(hi) > fi->max_finite) return prec_round2(copysign(INFINITY, hi), 0.0, f, r, 0);
    return prec_round2(hi, lo, f, r, 0);
}

static void test_planted_rounders_are_caught(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_planted_rounders_are_caught"));
    const rounder_fn twins[] = {round_ties_away, round_subnormal_bound_low, round_overflow_on_input};
    const char *names[] = {"ties away from zero", "subnormal bound one binade low",
                           "overflow on the unrounded input"};
    for (size_t t = 0; t < 3; t++) {
        long bad = 0, checked = 0;
        for (int f = 0; f < PREC_NFORMATS; f++) {
            if (f == PREC_FP64) continue; /* plain doubles round to themselves */
            input_list in = structured_inputs((prec_format)f, &rng);
            size_t n = in.n < 20000 ? in.n : 20000; /* the boundary-heavy tail */
            for (int c = 0; c < REF_NCONFIGS; c++) {
                long b = compare_rounding(twins[t], (prec_format)f, ref_config(c), in.v + in.n - n,
                                          NULL, n, true);
                bad += b;
                checked += (long)n;
            }
            free(in.v);
        }
        printf("  planted rounder '%s': %ld mismatches in %ld roundings\n", names[t], bad, checked);
        assert_true(bad > 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_structured),
        cmocka_unit_test(test_round_random),
        cmocka_unit_test(test_planted_rounders_are_caught),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
