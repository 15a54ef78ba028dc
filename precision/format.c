/* precision/format.c — see format.h.
 *
 * Rounding works on the scaled significand: with q the quantum (ulp) of the
 * binade that holds |x| (clamped at the subnormal binade), y = |x|/q is exact,
 * n = floor(y) is the candidate below and y - n the fraction that decides the
 * direction.  The low part lo only ever acts as a sticky bit / tie breaker,
 * which is all a single correct rounding needs. */
#include "precision/format.h"

#include <math.h>
#include <string.h>
#include <strings.h>

/* {name, bits, ebits, fbits, p, emin, emax, inf, sub, max, min_normal, min_sub, u} */
static const prec_format_info format_table[PREC_NFORMATS] = {
    [PREC_FP64] = {"fp64", 64, 11, 52, 53, -1022, 1023, true, true,
                   0x1.fffffffffffffp+1023, 0x1p-1022, 0x1p-1074, 0x1p-53},
    [PREC_FP32] = {"fp32", 32, 8, 23, 24, -126, 127, true, true,
                   0x1.fffffep+127, 0x1p-126, 0x1p-149, 0x1p-24},
    [PREC_TF32] = {"tf32", 32, 8, 10, 11, -126, 127, true, true,
                   0x1.ffcp+127, 0x1p-126, 0x1p-136, 0x1p-11},
    [PREC_BF16] = {"bf16", 16, 8, 7, 8, -126, 127, true, true,
                   0x1.fep+127, 0x1p-126, 0x1p-133, 0x1p-8},
    [PREC_FP16] = {"fp16", 16, 5, 10, 11, -14, 15, true, true,
                   65504.0, 0x1p-14, 0x1p-24, 0x1p-11},
    [PREC_E4M3] = {"e4m3", 8, 4, 3, 4, -6, 8, false, true,
                   448.0, 0x1p-6, 0x1p-9, 0x1p-4},
    [PREC_E5M2] = {"e5m2", 8, 5, 2, 3, -14, 15, true, true,
                   57344.0, 0x1p-14, 0x1p-16, 0x1p-3},
};

const prec_format_info *prec_format_get(prec_format f)
{
    if ((unsigned)f >= PREC_NFORMATS) return NULL;
    return &format_table[f];
}

const char *prec_format_name(prec_format f)
{
    return (unsigned)f < PREC_NFORMATS ? format_table[f].name : "?";
}

const char *prec_format_names(void) { return "fp64, fp32, tf32, bf16, fp16, e4m3, e5m2"; }

int prec_format_parse(const char *name, prec_format *out)
{
    static const struct { const char *alias; prec_format f; } aliases[] = {
        {"fp64", PREC_FP64}, {"float64", PREC_FP64}, {"double", PREC_FP64}, {"f64", PREC_FP64},
        {"fp32", PREC_FP32}, {"float32", PREC_FP32}, {"float", PREC_FP32}, {"f32", PREC_FP32},
        {"tf32", PREC_TF32},
        {"bf16", PREC_BF16}, {"bfloat16", PREC_BF16},
        {"fp16", PREC_FP16}, {"float16", PREC_FP16}, {"half", PREC_FP16}, {"f16", PREC_FP16},
        {"e4m3", PREC_E4M3}, {"fp8e4m3", PREC_E4M3}, {"e4m3fn", PREC_E4M3},
        {"fp8_e4m3", PREC_E4M3}, {"float8_e4m3fn", PREC_E4M3},
        {"e5m2", PREC_E5M2}, {"fp8e5m2", PREC_E5M2}, {"fp8_e5m2", PREC_E5M2},
        {"float8_e5m2", PREC_E5M2},
    };
    if (!name) return -1;
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
        if (strcasecmp(name, aliases[i].alias) == 0) {
            *out = aliases[i].f;
            return 0;
        }
    }
    return -1;
}

static const char *const round_names[PREC_NROUNDS] = {"rne", "rz", "ru", "rd", "sr"};

const char *prec_round_mode_name(prec_round_mode m)
{
    return (unsigned)m < PREC_NROUNDS ? round_names[m] : "?";
}

const char *prec_round_mode_names(void) { return "rne, rz, ru, rd, sr"; }

int prec_round_mode_parse(const char *name, prec_round_mode *out)
{
    if (!name) return -1;
    for (int m = 0; m < PREC_NROUNDS; m++) {
        if (strcasecmp(name, round_names[m]) == 0) {
            *out = (prec_round_mode)m;
            return 0;
        }
    }
    if (strcasecmp(name, "stochastic") == 0) { *out = PREC_SR; return 0; }
    if (strcasecmp(name, "nearest") == 0) { *out = PREC_RNE; return 0; }
    return -1;
}

/* Uniform double in [0, 1) from the top 53 random bits. */
static double unit_from_bits(uint64_t bits) { return (double)(bits >> 11) * 0x1p-53; }

/* Overflowed magnitude: what a rounding that left the finite range gives. */
static double overflow_result(const prec_format_info *fi, bool negative, prec_rounding r)
{
    bool toward_zero = r.mode == PREC_RZ || (r.mode == PREC_RD && !negative) ||
                       (r.mode == PREC_RU && negative);
    if (toward_zero || r.overflow == PREC_OVF_SATURATE) return fi->max_finite;
    return fi->has_infinity ? INFINITY : NAN;
}

/* fp64 target: hi is already the nearest double; lo moves it one step for the
 * directed and stochastic modes. */
static double round_fp64(double hi, double lo, prec_rounding r, uint64_t random_bits)
{
    const prec_format_info *fi = &format_table[PREC_FP64];
    if (isnan(hi)) return NAN;
    if (isinf(hi)) {
        if (r.overflow == PREC_OVF_SATURATE) return copysign(fi->max_finite, hi);
        return hi;
    }
    double x = hi;
    if (lo != 0.0) {
        double toward = lo > 0 ? INFINITY : -INFINITY;
        double other = nextafter(hi, toward); /* neighbour on lo's side */
        bool step = false;
        switch (r.mode) {
        case PREC_RNE: break;
        case PREC_RZ: step = (hi > 0) != (lo > 0) && hi != 0; break;
        case PREC_RU: step = lo > 0; break;
        case PREC_RD: step = lo < 0; break;
        case PREC_SR: {
            double frac = fabs(lo) / fabs(other - hi); /* distance toward other, in (0, 1/2] */
            step = unit_from_bits(random_bits) < frac;
            break;
        }
        default: break;
        }
        if (step) x = other;
        if (isinf(x)) return overflow_result(fi, x < 0, r) * (x < 0 ? -1.0 : 1.0);
    }
    if (r.flush_subnormals && x != 0 && fabs(x) < fi->min_normal) x = copysign(0.0, x);
    return x;
}

double prec_round2(double hi, double lo, prec_format f, prec_rounding r, uint64_t random_bits)
{
    if ((unsigned)f >= PREC_NFORMATS) return NAN;
    if (f == PREC_FP64) return round_fp64(hi, lo, r, random_bits);
    const prec_format_info *fi = &format_table[f];
    if (isnan(hi)) return NAN;
    bool negative = signbit(hi);
    if (isinf(hi)) {
        if (!fi->has_infinity || r.overflow == PREC_OVF_SATURATE) {
            if (!fi->has_infinity && r.overflow == PREC_OVF_IEEE) return NAN;
            return negative ? -fi->max_finite : fi->max_finite;
        }
        return hi;
    }
    if (hi == 0.0 && lo == 0.0) return hi;
    if (hi == 0.0) { /* value is lo itself */
        hi = lo;
        lo = 0.0;
        negative = signbit(hi);
    }

    double ax = fabs(hi);
    double lo_mag = negative ? -lo : lo; /* lo as seen by |x| */
    int e;
    frexp(ax, &e);                      /* ax = m * 2^e, m in [0.5, 1) */
    int lead = e - 1;                   /* exponent of the leading bit */
    if (lead < fi->emin) lead = fi->emin;
    int qexp = lead - (fi->precision - 1);
    double y = ldexp(ax, -qexp);        /* exact: a power-of-two scaling */
    double n = floor(y);
    double frac = y - n;                /* exact */
    int half_cmp;                       /* sign of (true fraction - 1/2) */
    bool inexact;

    if (frac == 0.0 && lo_mag < 0.0) {
        /* |x| sits on a grid point and the true value is just below it.  If
         * that point opens a binade, the grid below is twice as fine. */
        if (n == ldexp(1.0, fi->precision - 1) && lead > fi->emin) {
            qexp -= 1;
            n = 2.0 * n;
        }
        n -= 1.0;
        frac = 1.0; /* "just under one": above half, inexact */
        half_cmp = 1;
        inexact = true;
    } else {
        inexact = frac != 0.0 || lo_mag != 0.0;
        if (frac > 0.5) half_cmp = 1;
        else if (frac < 0.5) half_cmp = -1;
        else half_cmp = (lo_mag > 0) - (lo_mag < 0);
    }

    bool up = false; /* round the magnitude up */
    if (inexact) {
        switch (r.mode) {
        case PREC_RNE:
            up = half_cmp > 0 || (half_cmp == 0 && fmod(n, 2.0) != 0.0);
            break;
        case PREC_RZ: up = false; break;
        case PREC_RU: up = !negative; break;
        case PREC_RD: up = negative; break;
        case PREC_SR: {
            double p = frac;
            if (p >= 1.0) p = 1.0 - 0x1p-60; /* "just under one" */
            if (p == 0.0) p = 0x1p-60;        /* only lo: "just above zero" */
            up = unit_from_bits(random_bits) < p;
            break;
        }
        default: break;
        }
    }
    double mag = ldexp(n + (up ? 1.0 : 0.0), qexp);
    if (mag > fi->max_finite) mag = overflow_result(fi, negative, r);
    if (r.flush_subnormals && mag != 0.0 && mag < fi->min_normal) mag = 0.0;
    return negative ? -mag : mag;
}

double prec_round(double x, prec_format f, prec_rounding r, uint64_t random_bits)
{
    return prec_round2(x, 0.0, f, r, random_bits);
}

double prec_rne(double x, prec_format f) { return prec_round2(x, 0.0, f, PREC_ROUNDING_RNE, 0); }

bool prec_representable(double x, prec_format f)
{
    if ((unsigned)f >= PREC_NFORMATS) return false;
    if (isnan(x)) return true;
    if (isinf(x)) return format_table[f].has_infinity;
    return prec_rne(x, f) == x;
}

static int exponent_bias(const prec_format_info *fi) { return (1 << (fi->exponent_bits - 1)) - 1; }

uint64_t prec_encode(double x, prec_format f)
{
    if ((unsigned)f >= PREC_NFORMATS) return 0;
    const prec_format_info *fi = &format_table[f];
    if (f == PREC_FP64) {
        uint64_t bits;
        memcpy(&bits, &x, sizeof bits);
        return bits;
    }
    if (!prec_representable(x, f)) x = prec_rne(x, f);
    int fbits = fi->fraction_bits;
    int ebits = fi->exponent_bits;
    int shift = f == PREC_TF32 ? 13 : 0; /* tf32 lives in the top of a 32-bit word */
    uint64_t sign = (uint64_t)(signbit(x) ? 1 : 0) << (ebits + fbits);
    uint64_t exp_all_ones = (1u << ebits) - 1;
    uint64_t body;
    if (isnan(x)) {
        if (f == PREC_E4M3) body = (exp_all_ones << fbits) | ((1u << fbits) - 1);
        else body = (exp_all_ones << fbits) | (1u << (fbits - 1)); /* quiet NaN */
        sign = 0;
    } else if (isinf(x)) {
        body = exp_all_ones << fbits;
    } else if (x == 0.0) {
        body = 0;
    } else {
        double ax = fabs(x);
        if (ax < fi->min_normal) {
            body = (uint64_t)(ax / fi->min_subnormal);
        } else {
            int e;
            frexp(ax, &e);
            int lead = e - 1;
            uint64_t mant = (uint64_t)(ldexp(ax, fbits - lead) - ldexp(1.0, fbits));
            body = ((uint64_t)(lead + exponent_bias(fi)) << fbits) | mant;
        }
    }
    return (sign | body) << shift;
}

double prec_decode(uint64_t bits, prec_format f)
{
    if ((unsigned)f >= PREC_NFORMATS) return NAN;
    const prec_format_info *fi = &format_table[f];
    if (f == PREC_FP64) {
        double x;
        memcpy(&x, &bits, sizeof x);
        return x;
    }
    if (f == PREC_TF32) bits >>= 13;
    int fbits = fi->fraction_bits;
    int ebits = fi->exponent_bits;
    uint64_t mant = bits & ((1ull << fbits) - 1);
    uint64_t ex = (bits >> fbits) & ((1ull << ebits) - 1);
    bool negative = (bits >> (ebits + fbits)) & 1;
    uint64_t exp_all_ones = (1ull << ebits) - 1;
    double mag;
    if (f == PREC_E4M3) {
        if (ex == exp_all_ones && mant == (1ull << fbits) - 1) return NAN;
    } else if (ex == exp_all_ones) {
        if (mant != 0) return NAN;
        return negative ? -INFINITY : INFINITY;
    }
    if (ex == 0) mag = ldexp((double)mant, fi->emin - fbits);
    else mag = ldexp((double)((1ull << fbits) | mant), (int)ex - exponent_bias(fi) - fbits);
    return negative ? -mag : mag;
}

/* Knuth's TwoSum: s + t == a + b exactly (barring overflow). */
static void two_sum(double a, double b, double *s, double *t)
{
    double sum = a + b;
    double bb = sum - a;
    *t = (a - (sum - bb)) + (b - bb);
    *s = sum;
}

double prec_add(double a, double b, prec_format f, prec_rounding r, uint64_t random_bits)
{
    double s, t;
    two_sum(a, b, &s, &t);
    if (!isfinite(s)) t = 0.0;
    return prec_round2(s, t, f, r, random_bits);
}

double prec_mul(double a, double b, prec_format f, prec_rounding r, uint64_t random_bits)
{
    double p = a * b;
    double e = isfinite(p) ? fma(a, b, -p) : 0.0;
    return prec_round2(p, e, f, r, random_bits);
}

double prec_fma(double a, double b, double c, prec_format f, prec_rounding r, uint64_t random_bits)
{
    if (f == PREC_FP64 && r.mode == PREC_RNE) return round_fp64(fma(a, b, c), 0.0, r, 0);
    double p = a * b;
    double e = isfinite(p) ? fma(a, b, -p) : 0.0; /* a*b = p + e exactly */
    double s, t;
    two_sum(p, c, &s, &t);
    if (!isfinite(s)) return prec_round2(s, 0.0, f, r, random_bits);
    /* a*b + c = s + (t + e); t + e rounded keeps its sign, which is all the
     * sticky information a rounding to p <= 24 bits needs. */
    double rest = t + e;
    double hi, lo;
    two_sum(s, rest, &hi, &lo);
    return prec_round2(hi, lo, f, r, random_bits);
}

double prec_ulp(double x, prec_format f)
{
    const prec_format_info *fi = prec_format_get(f);
    if (!fi || !isfinite(x)) return NAN;
    double ax = fabs(x);
    int lead = fi->emin;
    if (ax >= fi->min_normal) {
        int e;
        frexp(ax, &e);
        lead = e - 1;
    }
    return ldexp(1.0, lead - (fi->precision - 1));
}
