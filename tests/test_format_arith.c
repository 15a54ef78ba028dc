/* tests/test_format_arith.c — prec_add, prec_mul and prec_fma against MPFR:
 * the exact result (MPFR at 4400 bits, where every sum, product and FMA of
 * doubles is exact; the ternary value proves it) rounded once into the
 * format by the reference of test_format_mpfr.h.  Operands are random values
 * of each format: half random bit patterns (every binade, subnormals,
 * infinities and zeros), half near 1 so that sums cancel and round at every
 * position; FMAs get c = -(a*b rounded) often, the hard cancelling case.
 * Every non-stochastic mode, IEEE and saturating overflow, with and without
 * flushing.
 * Edge cases, drawn on purpose in every run, every format and configuration
 * (stochastic rounding too, checked against the grid point the random bits
 * must pick): operands at and near max finite, sums and products that
 * overflow by less than half an ulp or sit exactly on the overflow
 * threshold, products around the subnormal range (where a double product's
 * error term underflows), FMAs leaving only that error, exact ties (across
 * binade edges too), exactly zero results and zero operands of either sign,
 * addend and product far apart.
 * Planted twins: rounding the double result (a+b, a*b, fma) instead of the
 * exact one must report mismatches on the random draws; the textbook
 * error-free transformations without ordering or scaling (Knuth's TwoSum,
 * TwoProd, ErrFma on the operands as given) must on the edge draws. */
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

/* The exact result of op into X (4400 bits hold every sum, product and FMA
 * of doubles exactly; the ternary value proves it).  The rounding mode only
 * decides the sign of an exact zero. */
static void exact_result(arith_op op, double a, double b, double c, prec_rounding r, mpfr_t X)
{
    mpfr_t A, B, C;
    mpfr_inits2(53, A, B, C, (mpfr_ptr)0);
    mpfr_set_d(A, a, MPFR_RNDN);
    mpfr_set_d(B, b, MPFR_RNDN);
    mpfr_set_d(C, c, MPFR_RNDN);
    mpfr_rnd_t rnd = ref_rnd(r.mode);
    int t = op == OP_ADD ? mpfr_add(X, A, B, rnd) : op == OP_MUL ? mpfr_mul(X, A, B, rnd)
                                                                 : mpfr_fma(X, A, B, C, rnd);
    if (t != 0) fail_msg("MPFR result not exact for %s(%a, %a, %a)", op_names[op], a, b, c);
    mpfr_clears(A, B, C, (mpfr_ptr)0);
}

/* MPFR's exact result of op, rounded into the format. */
static double reference(arith_op op, double a, double b, double c, const ref_spec *s, prec_rounding r)
{
    mpfr_t X;
    mpfr_init2(X, 4400);
    exact_result(op, a, b, c, r, X);
    double v = ref_round_exact(X, s, r);
    mpfr_clear(X);
    return v;
}

static double run_op(const arith_impl *impl, arith_op op, double a, double b, double c, prec_format f,
                     prec_rounding r, uint64_t random_bits)
{
    switch (op) {
    case OP_ADD: return impl->add(a, b, f, r, random_bits);
    case OP_MUL: return impl->mul(a, b, f, r, random_bits);
    default: return impl->fma(a, b, c, f, r, random_bits);
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
            double got = run_op(impl, op, a, b, c, f, r, 0);
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

/* ---- edge cases drawn on purpose ----------------------------------------
 *
 * Random draws reach the corners of the range only by luck (the TwoSum
 * overflow near DBL_MAX showed up about one run in 16), so every run also
 * draws each of these kinds, in every format and configuration, with random
 * significands, signs and operand order.  Operands are values of the format,
 * placed by binade (lead = exponent of the leading bit) from the format's
 * field widths (test_format_mpfr.h), not from format.c's table. */

static int rand_int(prec_rng *rng, int lo, int hi) /* uniform in [lo, hi] */
{
    if (hi < lo) fail_msg("edge draw: empty range [%d, %d]", lo, hi);
    return lo + (int)(prec_rng_next(rng) % (uint64_t)(hi - lo + 1));
}

static double rand_sign(prec_rng *rng, double v) { return (prec_rng_next(rng) & 1) ? -v : v; }

static int min_sub_exp(const ref_spec *s) { return ref_emin(s) - ref_prec(s) + 1; }

/* A random positive value of the format whose leading bit is 2^lead (lead
 * clamped to [min_sub_exp, emax]); e4m3's shortened top binade is clamped at
 * max finite. */
static double grid_value(prec_rng *rng, const ref_spec *s, int lead)
{
    if (lead < min_sub_exp(s)) lead = min_sub_exp(s);
    if (lead > ref_emax(s)) lead = ref_emax(s);
    int qexp = (lead < ref_emin(s) ? ref_emin(s) : lead) - ref_prec(s) + 1;
    int below = lead - qexp; /* significand bits under the leading one */
    uint64_t m = (1ull << below) | (prec_rng_next(rng) & ((1ull << below) - 1));
    double v = ldexp((double)m, qexp);
    return v > ref_max_finite(s) ? ref_max_finite(s) : v;
}

/* Quantum (ulp) of the format in the binade 2^lead. */
static double quantum(const ref_spec *s, int lead)
{
    return ldexp(1.0, (lead < ref_emin(s) ? ref_emin(s) : lead) - ref_prec(s) + 1);
}

static int lead_of(double v)
{
    int e;
    frexp(v, &e);
    return e - 1;
}

static double to_format(double x, const ref_spec *s) { return ref_round2(x, 0.0, s, PREC_ROUNDING_RNE); }

/* a, b > 0 of the format with a*b in [2^lead, 2^(lead+2)), lead within the
 * range two values of the format can reach. */
static void draw_product(prec_rng *rng, const ref_spec *s, int lead, double *a, double *b)
{
    int lo = min_sub_exp(s), hi = ref_emax(s);
    if (lead < 2 * lo) lead = 2 * lo;
    if (lead > 2 * hi) lead = 2 * hi;
    int lead_b = rand_int(rng, lead - hi > lo ? lead - hi : lo, lead - lo < hi ? lead - lo : hi);
    *a = grid_value(rng, s, lead - lead_b);
    *b = grid_value(rng, s, lead_b);
}

/* a random odd integer in [lo, hi], or 0 when there is none */
static uint64_t rand_odd(prec_rng *rng, uint64_t lo, uint64_t hi)
{
    lo |= 1;
    if (hi < lo) return 0;
    return lo + 2 * (prec_rng_next(rng) % ((hi - lo) / 2 + 1));
}

static unsigned bit_length(uint64_t v)
{
    unsigned n = 0;
    while (v) { n++; v >>= 1; }
    return n;
}

/* a, b > 0 of the format whose product is exactly a midpoint between two
 * neighbours of the format in the binade 2^lead (lead >= min_sub_exp - 1;
 * below the normal range a midpoint has fewer bits).  The odd (nb)-bit
 * integer T = m1 * m2 times 2^(qexp-1) is that midpoint.  Returns false
 * when no such pair fits the exponent range. */
static bool draw_tie_product(prec_rng *rng, const ref_spec *s, int lead, double *a, double *b)
{
    int p = ref_prec(s), emin = ref_emin(s);
    int qexp = (lead < emin ? emin : lead) - p + 1;
    int nb = lead - qexp + 2; /* bits of T: p + 1 in the normal range */
    if (nb < 1) return false;
    uint64_t m1 = 1, m2 = 0;
    uint64_t t_lo = 1ull << (nb - 1), t_hi = (1ull << nb) - 1;
    for (int attempt = 0; attempt < 8 && m2 == 0; attempt++) {
        m1 = rand_odd(rng, nb > p ? 3 : 1, p >= 4 ? 15 : (1u << p) - 1);
        if (m1 > t_hi) m1 = 1;
        m2 = rand_odd(rng, (t_lo + m1 - 1) / m1, t_hi / m1);
        if (bit_length(m2) > (unsigned)p) m2 = 0;
    }
    if (m2 == 0) return false;
    int k1 = (int)bit_length(m1), k2 = (int)bit_length(m2);
    int lo_exp = min_sub_exp(s), sum = qexp - 1; /* ea + eb */
    int ea_lo = lo_exp > sum - (ref_emax(s) - k2 + 1) ? lo_exp : sum - (ref_emax(s) - k2 + 1);
    int ea_hi = ref_emax(s) - k1 + 1 < sum - lo_exp ? ref_emax(s) - k1 + 1 : sum - lo_exp;
    if (ea_lo > ea_hi) return false;
    int ea = rand_int(rng, ea_lo, ea_hi);
    *a = ldexp((double)m1, ea);
    *b = ldexp((double)m2, sum - ea);
    return to_format(*a, s) == *a && to_format(*b, s) == *b;
}

static void maybe_swap(prec_rng *rng, double *a, double *b)
{
    if (prec_rng_next(rng) & 1) {
        double t = *a;
        *a = *b;
        *b = t;
    }
}

/* One edge kind: fills a, b (and c for fma) with values of the format. */
typedef void (*edge_draw)(prec_rng *rng, const ref_spec *s, double *a, double *b, double *c);
typedef struct {
    const char *name;
    edge_draw draw;
} edge_kind;

/* One operand at or a few ulps under max, the other of the opposite sign
 * and up to the same size: the sum stays finite.  Half the time the smaller
 * one's bits under max's ulp are exactly half an ulp, so the sum is a tie;
 * when the larger is max and comes second, Knuth's TwoSum rounds s - first
 * past max. */
static void add_near_max_cancel(prec_rng *rng, const ref_spec *s, double *a, double *b, double *c)
{
    int emax = ref_emax(s), p = ref_prec(s);
    double ulp = quantum(s, emax);
    double big = ref_max_finite(s) - ((prec_rng_next(rng) & 1) ? 0 : rand_int(rng, 1, 3)) * ulp;
    double small;
    if (prec_rng_next(rng) & 1) {
        small = grid_value(rng, s, rand_int(rng, emax - p, emax - 1));
        small = floor(small / ulp) * ulp + ulp / 2; /* p bits at most: on the grid */
    } else {
        int lead = (prec_rng_next(rng) & 1) ? rand_int(rng, emax - 6, emax) : rand_int(rng, emax - p - 3, emax);
        small = grid_value(rng, s, lead);
    }
    *a = rand_sign(rng, big);
    *b = *a < 0 ? small : -small;
    maybe_swap(rng, a, b);
    *c = 0.0;
}

/* max plus a value of its sign around half its ulp: sums that overflow by
 * less than half an ulp, exactly half (the tie at the overflow threshold),
 * more; and two large values whose sum overflows double itself. */
static void add_overflow_by_little(prec_rng *rng, const ref_spec *s, double *a, double *b, double *c)
{
    int emax = ref_emax(s), p = ref_prec(s);
    double max = ref_max_finite(s);
    double small;
    switch (prec_rng_next(rng) % 4) {
    case 0: small = ldexp(1.0, emax - p); break; /* half an ulp of max */
    case 1: small = max - rand_int(rng, 0, 3) * quantum(s, emax); break;
    default: small = grid_value(rng, s, rand_int(rng, emax - p - 3, emax - p + 1)); break;
    }
    bool negative = prec_rng_next(rng) & 1;
    *a = negative ? -max : max;
    *b = negative ? -small : small;
    maybe_swap(rng, a, b);
    *c = 0.0;
}

/* Both operands subnormal or among the smallest normals, either sign, half
 * the time nearly cancelling: subnormal results and underflow to zero. */
static void add_subnormal(prec_rng *rng, const ref_spec *s, double *a, double *b, double *c)
{
    int lo = min_sub_exp(s), emin = ref_emin(s);
    *a = rand_sign(rng, grid_value(rng, s, rand_int(rng, lo, emin + 1)));
    if (prec_rng_next(rng) & 1)
        *b = to_format(-*a + rand_int(rng, -3, 3) * ldexp(1.0, lo), s);
    else
        *b = rand_sign(rng, grid_value(rng, s, rand_int(rng, lo, emin + 1)));
    *c = 0.0;
}

/* a plus or minus half its ulp (a tie), or a tie nudged by 2^-j of that half
 * ulp; or a power of two minus half the finer ulp below it (a tie across the
 * binade edge). */
static void add_tie(prec_rng *rng, const ref_spec *s, double *a, double *b, double *c)
{
    int p = ref_prec(s);
    int lead = rand_int(rng, ref_emin(s) + 2, ref_emax(s) - 1);
    bool across_edge = prec_rng_next(rng) % 4 == 0;
    double big = across_edge ? ldexp(1.0, lead) : grid_value(rng, s, lead);
    int half_exp = across_edge ? lead - p - 1 : lead - p;
    double half = ldexp(1.0, half_exp);
    int max_j = half_exp - min_sub_exp(s); /* half * 2^-j stays on the grid */
    if (max_j > p - 1) max_j = p - 1;
    if (max_j >= 1 && (prec_rng_next(rng) & 1)) {
        double nudge = ldexp(1.0, half_exp - rand_int(rng, 1, max_j));
        half += (prec_rng_next(rng) & 1) ? nudge : -nudge;
    }
    *a = rand_sign(rng, big);
    if (across_edge) *b = *a > 0 ? -half : half; /* toward zero, under the edge */
    else *b = rand_sign(rng, half);
    maybe_swap(rng, a, b);
    *c = 0.0;
}

/* Exactly zero sums (x + -x, zeros of either sign) and a zero plus x. */
static void add_signed_zero(prec_rng *rng, const ref_spec *s, double *a, double *b, double *c)
{
    double x = grid_value(rng, s, rand_int(rng, min_sub_exp(s), ref_emax(s)));
    switch (prec_rng_next(rng) % 3) {
    case 0: *a = rand_sign(rng, x); *b = -*a; break;
    case 1: *a = rand_sign(rng, 0.0); *b = rand_sign(rng, 0.0); break;
    default: *a = rand_sign(rng, 0.0); *b = rand_sign(rng, x); break;
    }
    maybe_swap(rng, a, b);
    *c = 0.0;
}

/* a times (max/a rounded, a few ulps either way): products just under max,
 * overflowing by less than half an ulp, or more. */
static void mul_near_max(prec_rng *rng, const ref_spec *s, double *a, double *b, double *c)
{
    double x = grid_value(rng, s, rand_int(rng, 0, ref_emax(s)));
    double y = to_format(ref_max_finite(s) / x, s);
    y = to_format(y + rand_int(rng, -2, 2) * quantum(s, lead_of(y)), s);
    if (!(y <= ref_max_finite(s))) y = ref_max_finite(s); /* past max, or e4m3's NaN */
    *a = rand_sign(rng, x);
    *b = rand_sign(rng, y);
    maybe_swap(rng, a, b);
    *c = 0.0;
}

/* Products around the format's subnormal range (for fp64 the double
 * product's error term underflows there). */
static void mul_tiny(prec_rng *rng, const ref_spec *s, double *a, double *b, double *c)
{
    int lead = rand_int(rng, min_sub_exp(s) - 4, ref_emin(s) + 2);
    draw_product(rng, s, lead, a, b);
    *a = rand_sign(rng, *a);
    *b = rand_sign(rng, *b);
    *c = 0.0;
}

/* a, b > 0 of the format with a*b = max + ulp(max)/2 = (2^(p+1) - 1) 2^(emax-p),
 * the overflow threshold, where 2^(p+1) - 1 splits into two factors of at
 * most p bits (not for e4m3, whose threshold is another value).  Returns
 * false when it does not. */
static bool draw_overflow_threshold_product(prec_rng *rng, const ref_spec *s, double *a, double *b)
{
    int p = ref_prec(s), emax = ref_emax(s), lo = min_sub_exp(s);
    if (s->fn) return false;
    uint64_t t = (1ull << (p + 1)) - 1, m1 = 0;
    for (uint64_t d = 3; d < (1ull << 16) && d * d <= t; d += 2) {
        if (t % d == 0 && bit_length(t / d) <= (unsigned)p) {
            m1 = d;
            break;
        }
    }
    if (m1 == 0) return false;
    uint64_t m2 = t / m1;
    int sum = emax - p; /* ea + eb */
    int k1 = (int)bit_length(m1), k2 = (int)bit_length(m2);
    int ea_lo = lo > sum - (emax - k2 + 1) ? lo : sum - (emax - k2 + 1);
    int ea_hi = emax - k1 + 1 < sum - lo ? emax - k1 + 1 : sum - lo;
    if (ea_lo > ea_hi) return false;
    int ea = rand_int(rng, ea_lo, ea_hi);
    *a = ldexp((double)m1, ea);
    *b = ldexp((double)m2, sum - ea);
    return true;
}

/* Products exactly at a midpoint: subnormal binades (down to min_sub/2, the
 * tie with zero), the top binade (the overflow threshold itself now and
 * then), any binade. */
static void mul_tie(prec_rng *rng, const ref_spec *s, double *a, double *b, double *c)
{
    int lo = min_sub_exp(s) - 1, emin = ref_emin(s), emax = ref_emax(s);
    uint64_t pick = prec_rng_next(rng) % 5;
    int lead = pick < 2 ? rand_int(rng, lo, emin) : pick == 2 ? emax : rand_int(rng, lo, emax);
    bool drawn = pick == 2 && (prec_rng_next(rng) & 1) ? draw_overflow_threshold_product(rng, s, a, b)
                                                      : draw_tie_product(rng, s, lead, a, b);
    if (!drawn) mul_tiny(rng, s, a, b, c);
    *a = rand_sign(rng, *a);
    *b = rand_sign(rng, *b);
    *c = 0.0;
}

/* Products around min_sub/2 (rounding to zero or to min_sub, with the
 * product's sign) and zero factors of either sign. */
static void mul_zero_and_underflow(prec_rng *rng, const ref_spec *s, double *a, double *b, double *c)
{
    int lo = min_sub_exp(s);
    *a = rand_sign(rng, grid_value(rng, s, rand_int(rng, lo, lo + 3)));
    *b = rand_sign(rng, grid_value(rng, s, rand_int(rng, -4, 0)));
    if (prec_rng_next(rng) % 4 == 0) *a = rand_sign(rng, 0.0);
    maybe_swap(rng, a, b);
    *c = 0.0;
}

/* c at or just under max, a*b from half an ulp of max (c + a*b overflows
 * by less than half an ulp, or is the overflow threshold exactly) to as
 * large as c, either sign. */
static void fma_near_max(prec_rng *rng, const ref_spec *s, double *a, double *b, double *c)
{
    int emax = ref_emax(s), p = ref_prec(s), lo = min_sub_exp(s);
    *c = rand_sign(rng, ref_max_finite(s) - rand_int(rng, 0, 3) * quantum(s, emax));
    bool same_sign = false;
    switch (prec_rng_next(rng) % 4) {
    case 0: draw_product(rng, s, rand_int(rng, emax - 6, emax - 1), a, b); break;
    case 1: draw_product(rng, s, rand_int(rng, emax - p - 4, emax - 1), a, b); break;
    case 2: /* around half an ulp of max, of c's sign */
        draw_product(rng, s, rand_int(rng, emax - p - 3, emax - p), a, b);
        same_sign = true;
        break;
    default: { /* exactly half an ulp of max, of c's sign */
        int half_exp = emax - p;
        int ea = rand_int(rng, half_exp - emax > lo ? half_exp - emax : lo, emax < half_exp - lo ? emax : half_exp - lo);
        *a = ldexp(1.0, ea);
        *b = ldexp(1.0, half_exp - ea);
        same_sign = true;
        break;
    }
    }
    *b = rand_sign(rng, *b);
    if (same_sign) *a = (*b < 0) == (*c < 0) ? *a : -*a;
    else *a = rand_sign(rng, *a);
}

/* a*b near max (or past it, by a little), c up to as large, either sign. */
static void fma_product_near_max(prec_rng *rng, const ref_spec *s, double *a, double *b, double *c)
{
    int emax = ref_emax(s), p = ref_prec(s);
    double unused;
    if (prec_rng_next(rng) & 1) mul_near_max(rng, s, a, b, &unused);
    else draw_product(rng, s, rand_int(rng, emax - 2, emax), a, b);
    *a = rand_sign(rng, *a);
    *c = rand_sign(rng, grid_value(rng, s, rand_int(rng, emax - p - 4, emax)));
}

/* a*b around the subnormal range plus a c of that size; or c = -RN(a*b),
 * leaving just the product's error (for fp64, below double's range when the
 * product is subnormal, not a double at all when it is a small normal). */
static void fma_tiny(prec_rng *rng, const ref_spec *s, double *a, double *b, double *c)
{
    int lo = min_sub_exp(s), emin = ref_emin(s), p = ref_prec(s);
    uint64_t pick = prec_rng_next(rng) % 3;
    int lead = pick == 2 ? rand_int(rng, emin, emin + p + 2) : rand_int(rng, lo - 4, emin + 2);
    draw_product(rng, s, lead, a, b);
    *a = rand_sign(rng, *a);
    *b = rand_sign(rng, *b);
    if (pick == 0) *c = rand_sign(rng, grid_value(rng, s, rand_int(rng, lo, emin + 1)));
    else *c = -to_format(*a * *b, s); /* a*b: exact, or RN in fp64 */
    if (*c == 0.0) *c = rand_sign(rng, ldexp(1.0, lo));
}

/* c plus or minus half its ulp as a product (a tie), nudged by products of
 * (1 +- 2^-i)(1 +- 2^-j); or a power of two c minus half the finer ulp
 * below it (a tie across the binade edge). */
static void fma_tie(prec_rng *rng, const ref_spec *s, double *a, double *b, double *c)
{
    int p = ref_prec(s), lo = min_sub_exp(s), emax = ref_emax(s);
    int lead = rand_int(rng, ref_emin(s) + 1, emax - 1);
    bool across_edge = prec_rng_next(rng) % 4 == 0;
    *c = rand_sign(rng, across_edge ? ldexp(1.0, lead) : grid_value(rng, s, lead));
    int half_exp = across_edge ? lead - p - 1 : lead - p; /* |a*b| = 2^half_exp * fa * fb */
    double fa = 1.0, fb = 1.0;
    int i = 0, j = 0;
    if (prec_rng_next(rng) & 1) {
        i = rand_int(rng, 1, p - 1);
        j = rand_int(rng, 1, p - 1);
        fa += rand_sign(rng, ldexp(1.0, -i));
        fb += rand_sign(rng, ldexp(1.0, -j));
    }
    /* 2^ea * fa and 2^eb * fb on the grid and under 2^emax: ea - i >= lo,
     * eb - j >= lo, ea, eb <= emax - 1, ea + eb = half_exp */
    int ea_lo = lo + i > half_exp - (emax - 1) ? lo + i : half_exp - (emax - 1);
    int ea_hi = emax - 1 < half_exp - (lo + j) ? emax - 1 : half_exp - (lo + j);
    double ma = 0.0, mb = 0.0;
    if (ea_lo <= ea_hi) {
        int ea = rand_int(rng, ea_lo, ea_hi);
        ma = ldexp(fa, ea);
        mb = ldexp(fb, half_exp - ea);
    }
    if (ma == 0.0 || to_format(ma, s) != ma || to_format(mb, s) != mb) { /* the plain tie */
        int ea = rand_int(rng, half_exp - emax > lo ? half_exp - emax : lo, emax < half_exp - lo ? emax : half_exp - lo);
        ma = ldexp(1.0, ea);
        mb = ldexp(1.0, half_exp - ea);
    }
    bool product_negative = across_edge ? *c > 0 : (prec_rng_next(rng) & 1); /* across: toward zero */
    bool b_negative = prec_rng_next(rng) & 1;
    *b = b_negative ? -mb : mb;
    *a = product_negative != b_negative ? -ma : ma;
}

/* Exactly zero results (a*b = -c, a*b exact in the format) and zero
 * products or addends of either sign. */
static void fma_signed_zero(prec_rng *rng, const ref_spec *s, double *a, double *b, double *c)
{
    int lo = min_sub_exp(s), emax = ref_emax(s);
    int lead = rand_int(rng, lo, emax - 1); /* of a*b */
    int k = rand_int(rng, lead - emax > lo ? lead - emax : lo, emax < lead - lo ? emax : lead - lo);
    double x = grid_value(rng, s, lead - k);
    if (to_format(ldexp(x, k), s) != ldexp(x, k)) { /* a subnormal product that lost bits */
        x = grid_value(rng, s, lead);
        k = 0;
    }
    *a = rand_sign(rng, x);
    *b = rand_sign(rng, ldexp(1.0, k));
    *c = -(*a * *b);
    switch (prec_rng_next(rng) % 4) {
    case 0: *a = rand_sign(rng, 0.0); *c = rand_sign(rng, 0.0); break;
    case 1: *b = rand_sign(rng, 0.0); break;
    case 2: *c = rand_sign(rng, 0.0); break;
    default: break;
    }
    maybe_swap(rng, a, b);
}

/* The addend far below the product (c at the bottom of the subnormals, a*b
 * near max) or the product far below the addend's last bit (c a power of two
 * half the time, so that the exact value lies just under a binade edge;
 * c subnormal now and then). */
static void fma_far_apart(prec_rng *rng, const ref_spec *s, double *a, double *b, double *c)
{
    int lo = min_sub_exp(s), emin = ref_emin(s), emax = ref_emax(s), p = ref_prec(s);
    if (prec_rng_next(rng) & 1) {
        draw_product(rng, s, rand_int(rng, emax - 4, emax - 1), a, b);
        if (prec_rng_next(rng) & 1) *b = ldexp(1.0, lead_of(*b)); /* a*b on the grid: c decides */
        *c = rand_sign(rng, grid_value(rng, s, rand_int(rng, lo, lo + 3)));
    } else {
        int lead_c = rand_int(rng, (prec_rng_next(rng) & 1) ? lo : emin, emax);
        *c = rand_sign(rng, (prec_rng_next(rng) & 1) ? ldexp(1.0, lead_c) : grid_value(rng, s, lead_c));
        int top = lead_c - p - 3;
        draw_product(rng, s, rand_int(rng, 2 * lo, top > 2 * lo ? top : 2 * lo), a, b);
    }
    *a = rand_sign(rng, *a);
    *b = rand_sign(rng, *b);
}

static const edge_kind add_edges[] = {
    {"near max, cancelling", add_near_max_cancel}, {"overflow by a little", add_overflow_by_little},
    {"subnormal", add_subnormal},                   {"tie", add_tie},
    {"signed zero", add_signed_zero},
};
static const edge_kind mul_edges[] = {
    {"near max", mul_near_max},
    {"tiny", mul_tiny},
    {"tie", mul_tie},
    {"zero and underflow", mul_zero_and_underflow},
};
static const edge_kind fma_edges[] = {
    {"c near max", fma_near_max}, {"a*b near max", fma_product_near_max}, {"tiny", fma_tiny},
    {"tie", fma_tie},             {"signed zero", fma_signed_zero},        {"far apart", fma_far_apart},
};
#define MAX_EDGE_KINDS 6
static const edge_kind *const edge_kinds[OP_COUNT] = {add_edges, mul_edges, fma_edges};
static const int edge_kind_count[OP_COUNT] = {sizeof add_edges / sizeof add_edges[0],
                                              sizeof mul_edges / sizeof mul_edges[0],
                                              sizeof fma_edges / sizeof fma_edges[0]};

/* Every configuration of the random draws plus stochastic rounding (IEEE and
 * saturating, subnormals kept and flushed). */
#define EDGE_NCONFIGS (REF_NCONFIGS + 4)
static prec_rounding edge_config(int i)
{
    if (i < REF_NCONFIGS) return ref_config(i);
    i -= REF_NCONFIGS;
    return (prec_rounding){PREC_SR, i % 2 ? PREC_OVF_SATURATE : PREC_OVF_IEEE, i / 2 != 0};
}

/* The format's range rules on a rounded magnitude (overflow, flushing),
 * then the sign. */
static double finish_magnitude(double mag, bool negative, const ref_spec *s, prec_rounding r)
{
    if (mag > ref_max_finite(s)) {
        if (r.overflow == PREC_OVF_SATURATE) mag = ref_max_finite(s);
        else if (s->fn) return NAN;
        else mag = INFINITY;
    }
    if (r.flush_subnormals && mag < ref_min_normal(s)) mag = 0.0;
    return negative ? -mag : mag;
}

/* Whether got is what stochastic rounding of the exact X may give for the
 * random bits u: the grid point below |X| when u/2^64 >= P, the one above
 * when u/2^64 < P, P = the fraction of the way from one to the other
 * (MPFR, exact before its final rounding to double).  Within 2^-40 of P
 * either is accepted: the implementation computes P in double.  The two
 * candidates and P go to stay, go_up and prob for messages.  X is
 * modified. */
static bool sr_accepts(mpfr_t X, const ref_spec *s, prec_rounding r, uint64_t u, double got, double *stay,
                       double *go_up, double *prob)
{
    if (mpfr_zero_p(X)) {
        *stay = *go_up = mpfr_signbit(X) ? -0.0 : 0.0;
        *prob = 0.0;
        return same_double(got, *stay);
    }
    bool negative = mpfr_signbit(X);
    mpfr_abs(X, X, MPFR_RNDN);
    long lead = (long)mpfr_get_exp(X) - 1;
    long qexp = (lead < ref_emin(s) ? ref_emin(s) : lead) - ref_prec(s) + 1;
    mpfr_t n;
    mpfr_init2(n, mpfr_get_prec(X));
    mpfr_mul_2si(X, X, -qexp, MPFR_RNDN); /* exact */
    mpfr_floor(n, X);
    mpfr_sub(X, X, n, MPFR_RNDN); /* the exact fraction */
    bool exact = mpfr_zero_p(X);
    *prob = mpfr_get_d(X, MPFR_RNDN);
    double below = ldexp(mpfr_get_d(n, MPFR_RNDN), (int)qexp); /* n < 2^p: exact */
    mpfr_clear(n);
    double above = ldexp(1.0, (int)qexp) + below; /* may be inf: past max either way */
    *stay = finish_magnitude(below, negative, s, r);
    *go_up = finish_magnitude(above, negative, s, r);
    double drawn = (double)u * 0x1p-64;
    bool may_go_up = !exact && drawn < *prob + 0x1p-40;
    bool may_stay = exact || drawn >= *prob - 0x1p-40;
    return (may_stay && same_double(got, *stay)) || (may_go_up && same_double(got, *go_up));
}

/* Mismatches of impl against MPFR on n draws of every edge kind of op per
 * configuration (non-stochastic: the correctly rounded result; stochastic:
 * the grid point the random bits pick); per kind in bad_by_kind. */
static long compare_edges(const arith_impl *impl, arith_op op, prec_format f, size_t n, prec_rng *rng,
                          bool quiet, long *checked, long *bad_by_kind)
{
    const ref_spec *s = &ref_specs[f];
    long bad = 0;
    for (int cfg = 0; cfg < EDGE_NCONFIGS; cfg++) {
        prec_rounding r = edge_config(cfg);
        for (int kind = 0; kind < edge_kind_count[op]; kind++) {
            for (size_t i = 0; i < n; i++) {
                double a, b, c;
                edge_kinds[op][kind].draw(rng, s, &a, &b, &c);
                if (!isfinite(a) || !isfinite(b) || !isfinite(c) || !same_double(to_format(a, s), a) ||
                    !same_double(to_format(b, s), b) || !same_double(to_format(c, s), c))
                    fail_msg("edge draw %s of %s: (%a, %a, %a) not all finite %s values", edge_kinds[op][kind].name,
                             op_names[op], a, b, c, prec_format_name(f));
                uint64_t bits = r.mode == PREC_SR ? prec_rng_next(rng) : 0;
                double got = run_op(impl, op, a, b, c, f, r, bits);
                mpfr_t X;
                mpfr_init2(X, 4400);
                exact_result(op, a, b, c, r, X);
                bool ok;
                double want = NAN, stay = NAN, go_up = NAN, prob = NAN;
                if (r.mode == PREC_SR) ok = sr_accepts(X, s, r, bits, got, &stay, &go_up, &prob);
                else ok = same_double(got, want = ref_round_exact(X, s, r));
                mpfr_clear(X);
                if (!ok) {
                    if (!quiet && bad < 5) {
                        char name[32];
                        ref_config_name(r, name, sizeof name);
                        printf("  %s %s %s [%s] (%a, %a, %a) = %a, ", prec_format_name(f), name, op_names[op],
                               edge_kinds[op][kind].name, a, b, c, got);
                        if (r.mode == PREC_SR)
                            printf("MPFR says %a or, with P = %a, %a (random bits 0x%016llx)\n", stay, prob,
                                   go_up, (unsigned long long)bits);
                        else
                            printf("MPFR says %a\n", want);
                    }
                    bad++;
                    bad_by_kind[kind]++;
                }
                (*checked)++;
            }
        }
    }
    return bad;
}

static long check_edges(const arith_impl *impl, arith_op op, size_t n, prec_rng *rng, bool quiet, long *checked)
{
    long bad = 0, bad_by_kind[MAX_EDGE_KINDS] = {0};
    *checked = 0;
    for (int f = 0; f < PREC_NFORMATS; f++)
        bad += compare_edges(impl, op, (prec_format)f, n, rng, quiet, checked, bad_by_kind);
    for (int kind = 0; kind < edge_kind_count[op]; kind++)
        if (bad_by_kind[kind])
            printf("    %s [%s]: %ld mismatches\n", op_names[op], edge_kinds[op][kind].name, bad_by_kind[kind]);
    return bad;
}

static void check_op_edges(arith_op op, const char *name, size_t n)
{
    prec_rng rng;
    prec_rng_seed(&rng, test_seed(name));
    long checked = 0;
    clock_t t0 = clock();
    long bad = check_edges(&under_test, op, n, &rng, false, &checked);
    printf("%s edge cases: %ld results (%d kinds x %d formats x %d configurations, SR included) checked "
           "against MPFR, %ld mismatches (%.1f s)\n",
           op_names[op], checked, edge_kind_count[op], PREC_NFORMATS, EDGE_NCONFIGS, bad,
           (double)(clock() - t0) / CLOCKS_PER_SEC);
    assert_int_equal(bad, 0);
}

static void test_add_edges(void **state) { (void)state; check_op_edges(OP_ADD, "test_add_edges", 1000); }
static void test_mul_edges(void **state) { (void)state; check_op_edges(OP_MUL, "test_mul_edges", 1000); }
static void test_fma_edges(void **state) { (void)state; check_op_edges(OP_FMA, "test_fma_edges", 1000); }

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

/* Planted twins of the error-free transformations: the textbook versions on
 * the operands as given, without the ordering and scaling that keep them
 * exact near overflow and underflow (the add twin is what prec_add did
 * before it ordered its operands).  Cases they do not touch (overflowed or
 * zero results, fp64 RNE fma) go to the real code, so only the edge draws
 * can tell them apart. */
static void knuth_two_sum(double a, double b, double *s, double *t)
{
    double sum = a + b, bb = sum - a;
    *t = (a - (sum - bb)) + (b - bb);
    *s = sum;
}

static double add_by_knuth_two_sum(double a, double b, prec_format f, prec_rounding r, uint64_t bits)
{
    double s, t;
    knuth_two_sum(a, b, &s, &t);
    if (!isfinite(s) || s == 0.0) return prec_add(a, b, f, r, bits);
    return prec_round2(s, t, f, r, bits);
}

static double mul_by_unscaled_two_prod(double a, double b, prec_format f, prec_rounding r, uint64_t bits)
{
    double p = a * b;
    if (!isfinite(p) || p == 0.0) return prec_mul(a, b, f, r, bits);
    return prec_round2(p, fma(a, b, -p), f, r, bits);
}

static double fma_by_unscaled_err_fma(double a, double b, double c, prec_format f, prec_rounding r,
                                      uint64_t bits)
{
    double r1 = fma(a, b, c);
    if (!isfinite(r1) || r1 == 0.0 || a == 0.0 || b == 0.0 || c == 0.0 || (f == PREC_FP64 && r.mode == PREC_RNE))
        return prec_fma(a, b, c, f, r, bits);
    double u1 = a * b, u2 = fma(a, b, -u1);
    double alpha1, alpha2, beta1, beta2, r2, r3;
    knuth_two_sum(c, u2, &alpha1, &alpha2);
    knuth_two_sum(u1, alpha1, &beta1, &beta2);
    knuth_two_sum((beta1 - r1) + beta2, alpha2, &r2, &r3);
    return prec_round2(r1, r2, f, r, bits); /* r3 only refines fp64 ties, which RNE does not reach here */
}

static void test_planted_edges_are_caught(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_planted_edges_are_caught"));
    const arith_impl twin = {add_by_knuth_two_sum, mul_by_unscaled_two_prod, fma_by_unscaled_err_fma};
    static const char *const twin_names[OP_COUNT] = {"Knuth's TwoSum on the operands as given",
                                                      "TwoProd unscaled", "ErrFma unscaled"};
    for (int op = 0; op < OP_COUNT; op++) {
        long checked = 0;
        long bad = check_edges(&twin, (arith_op)op, 100, &rng, true, &checked);
        printf("  planted %s (%s): %ld edge-case mismatches in %ld\n", op_names[op], twin_names[op], bad, checked);
        assert_true(bad > 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add),
        cmocka_unit_test(test_mul),
        cmocka_unit_test(test_fma),
        cmocka_unit_test(test_add_edges),
        cmocka_unit_test(test_mul_edges),
        cmocka_unit_test(test_fma_edges),
        cmocka_unit_test(test_zero_signs_and_range),
        cmocka_unit_test(test_planted_arith_is_caught),
        cmocka_unit_test(test_planted_edges_are_caught),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
