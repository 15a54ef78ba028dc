/* tests/test_format_mpfr.h — MPFR reference for the format tests, built from
 * each format's field widths alone (nothing here reads format.c's table, so a
 * wrong table entry or rounding rule in format.c cannot hide in the
 * reference).  Include after <cmocka.h> and its prerequisites. */
#ifndef ULPSCOPE_TESTS_TEST_FORMAT_MPFR_H
#define ULPSCOPE_TESTS_TEST_FORMAT_MPFR_H

#include <math.h>
#include <mpfr.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "precision/format.h"

/* A format as its bit fields describe it.  fn: the OCP "fn" kind (e4m3): no
 * infinities, the top exponent holds normal values, S.1111.111 is NaN. */
typedef struct {
    prec_format f;
    int ebits, fbits;
    bool fn;
    int shift; /* tf32 sits in the top 19 bits of a 32-bit word */
} ref_spec;

static const ref_spec ref_specs[PREC_NFORMATS] = {
    {PREC_FP64, 11, 52, false, 0}, {PREC_FP32, 8, 23, false, 0}, {PREC_TF32, 8, 10, false, 13},
    {PREC_BF16, 8, 7, false, 0},   {PREC_FP16, 5, 10, false, 0}, {PREC_E4M3, 4, 3, true, 0},
    {PREC_E5M2, 5, 2, false, 0},
};

static inline int ref_bias(const ref_spec *s) { return (1 << (s->ebits - 1)) - 1; }
static inline int ref_prec(const ref_spec *s) { return s->fbits + 1; }
static inline int ref_emin(const ref_spec *s) { return 1 - ref_bias(s); }
/* Leading-bit exponent of the largest finite value. */
static inline int ref_emax(const ref_spec *s)
{
    return (s->fn ? (1 << s->ebits) - 1 : (1 << s->ebits) - 2) - ref_bias(s);
}
/* Largest finite value: all-ones fraction, or all-ones minus one for "fn". */
static inline double ref_max_finite(const ref_spec *s)
{
    double frac_top = s->fn ? 2.0 - ldexp(1.0, 1 - s->fbits) : 2.0 - ldexp(1.0, -s->fbits);
    return ldexp(frac_top, ref_emax(s));
}
static inline double ref_min_normal(const ref_spec *s) { return ldexp(1.0, ref_emin(s)); }

static inline mpfr_rnd_t ref_rnd(prec_round_mode m)
{
    switch (m) {
    case PREC_RZ: return MPFR_RNDZ;
    case PREC_RU: return MPFR_RNDU;
    case PREC_RD: return MPFR_RNDD;
    default: return MPFR_RNDN;
    }
}

/* Decode a bit pattern with MPFR from its fields.  Returns the value as a
 * double (exact: every value of these formats is a double) and sets *is_nan. */
static inline double ref_decode(uint64_t bits, const ref_spec *s, bool *is_nan)
{
    bits >>= s->shift;
    uint64_t frac = bits & ((1ull << s->fbits) - 1);
    uint64_t ex = (bits >> s->fbits) & ((1ull << s->ebits) - 1);
    int neg = (int)((bits >> (s->ebits + s->fbits)) & 1);
    uint64_t top = (1ull << s->ebits) - 1;
    *is_nan = false;
    if (s->fn && ex == top && frac == (1ull << s->fbits) - 1) { *is_nan = true; return NAN; }
    if (!s->fn && ex == top) {
        if (frac) { *is_nan = true; return NAN; }
        return neg ? -INFINITY : INFINITY;
    }
    mpfr_t v;
    mpfr_init2(v, 64);
    if (ex == 0) { /* subnormal: 0.frac * 2^emin */
        mpfr_set_ui(v, (unsigned long)frac, MPFR_RNDN);
        mpfr_mul_2si(v, v, ref_emin(s) - s->fbits, MPFR_RNDN);
    } else { /* 1.frac * 2^(ex - bias) */
        mpfr_set_ui(v, 1, MPFR_RNDN);
        mpfr_mul_2si(v, v, s->fbits, MPFR_RNDN);
        mpfr_add_ui(v, v, (unsigned long)frac, MPFR_RNDN);
        mpfr_mul_2si(v, v, (long)ex - ref_bias(s) - s->fbits, MPFR_RNDN);
    }
    if (neg) mpfr_neg(v, v, MPFR_RNDN);
    double d = mpfr_get_d(v, MPFR_RNDN);
    if (mpfr_zero_p(v) && neg) d = -0.0;
    mpfr_clear(v);
    return d;
}

/* Round the exact value X (in MPFR's default wide exponent range) into the
 * format: mpfr_set at the format's precision with emin/emax set so that
 * mpfr_subnormalize produces the subnormals, then explicit range checks for
 * what MPFR cannot know (e4m3's shortened top binade, saturation, flushing).
 * X is modified. */
static inline double ref_round_exact(mpfr_t X, const ref_spec *s, prec_rounding r)
{
    double max_finite = ref_max_finite(s);
    if (mpfr_nan_p(X)) return NAN;
    if (mpfr_inf_p(X)) { /* an exact infinity */
        bool neg = mpfr_sgn(X) < 0;
        if (r.overflow == PREC_OVF_SATURATE) return neg ? -max_finite : max_finite;
        if (s->fn) return NAN;
        return neg ? -INFINITY : INFINITY;
    }
    mpfr_rnd_t rnd = ref_rnd(r.mode);
    mpfr_exp_t old_emin = mpfr_get_emin(), old_emax = mpfr_get_emax();
    /* MPFR writes x = m * 2^e with m in [1/2, 1): the smallest subnormal
     * 2^(emin - p + 1) is 2^(emin') / 2 with emin' = emin - p + 2, and every
     * value below 2^(emax + 1) fits under emax' = emax + 1. */
    mpfr_t rounded;
    mpfr_init2(rounded, ref_prec(s));
    mpfr_set_emin(ref_emin(s) - ref_prec(s) + 2);
    mpfr_set_emax(ref_emax(s) + 1);
    int t = mpfr_check_range(X, 0, rnd); /* X out of range: its underflow or overflow value */
    int t2 = mpfr_set(rounded, X, rnd);
    if (t == 0) t = t2;
    t = mpfr_subnormalize(rounded, t, rnd);
    mpfr_set_emin(old_emin);
    mpfr_set_emax(old_emax);
    double v = mpfr_get_d(rounded, MPFR_RNDN); /* exact */
    bool neg = mpfr_signbit(rounded);
    if (mpfr_zero_p(rounded)) v = neg ? -0.0 : 0.0;
    mpfr_clear(rounded);
    if (isinf(v) || fabs(v) > max_finite) { /* overflow, per mode */
        bool toward_zero = r.mode == PREC_RZ || (r.mode == PREC_RD && !neg) ||
                           (r.mode == PREC_RU && neg);
        double mag;
        if (r.overflow == PREC_OVF_SATURATE || toward_zero) mag = max_finite;
        else if (s->fn) return NAN;
        else mag = INFINITY;
        v = neg ? -mag : mag;
    }
    if (r.flush_subnormals && v != 0.0 && fabs(v) < ref_min_normal(s)) v = neg ? -0.0 : 0.0;
    return v;
}

/* Round the exact hi + lo. */
static inline double ref_round2(double hi, double lo, const ref_spec *s, prec_rounding r)
{
    mpfr_t X;
    mpfr_init2(X, 2200); /* holds any sum of two doubles exactly */
    mpfr_set_d(X, hi, MPFR_RNDN);
    if (!mpfr_nan_p(X) && !mpfr_inf_p(X) && lo != 0.0) mpfr_add_d(X, X, lo, MPFR_RNDN);
    double v = ref_round_exact(X, s, r);
    mpfr_clear(X);
    return v;
}

/* Same value, NaNs alike, zeros of the same sign. */
static inline bool same_double(double a, double b)
{
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return a == b && signbit(a) == signbit(b);
}

/* Every rounding configuration: 4 non-SR modes x 2 overflow kinds x flush. */
#define REF_NCONFIGS 16
static inline prec_rounding ref_config(int i)
{
    prec_rounding r = {(prec_round_mode)(i % 4), (i / 4) % 2 ? PREC_OVF_SATURATE : PREC_OVF_IEEE,
                       i / 8 != 0};
    return r;
}

static inline void ref_config_name(prec_rounding r, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%s%s", prec_round_mode_name(r.mode),
             r.overflow == PREC_OVF_SATURATE ? "sat" : "ieee", r.flush_subnormals ? "/ftz" : "");
}

#endif
