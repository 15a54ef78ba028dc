/* precision/format.c — see format.h.
 *
 * Rounding works on the scaled significand (round_scaled): with q the quantum
 * (ulp) of the binade that holds |x| (clamped at the subnormal binade),
 * y = |x|/q is exact, n = floor(y) is the candidate below and y - n the
 * fraction that decides the direction.  The low part lo acts as a sticky bit
 * and tie breaker, which is all one correct rounding needs, and refines the
 * probability of stochastic rounding.  Emulated arithmetic hands the core an
 * exact (hi, lo, power-of-two scale) triple, so results past double's range or
 * deep in its subnormals still round once, correctly, in every mode. */
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

/* Stochastic rounding decision: up with probability prob, from 64 uniform
 * random bits.  The threshold floor(prob * 2^64) makes P(up) exact to 2^-64. */
static bool sr_round_up(double prob, uint64_t random_bits)
{
    if (prob <= 0.0) return false;
    if (prob >= 1.0) return true;
    return random_bits < (uint64_t)(prob * 0x1p64); /* prob * 2^64 < 2^64: fits */
}

/* Overflowed magnitude: what a rounding that left the finite range gives. */
static double overflow_result(const prec_format_info *fi, bool negative, prec_rounding r)
{
    bool toward_zero = r.mode == PREC_RZ || (r.mode == PREC_RD && !negative) ||
                       (r.mode == PREC_RU && negative);
    if (toward_zero || r.overflow == PREC_OVF_SATURATE) return fi->max_finite;
    return fi->has_infinity ? INFINITY : NAN;
}

/* An infinite exact value: inf where the format has it (IEEE), max finite when
 * saturating, NaN for e4m3 under IEEE overflow. */
static double round_infinity(const prec_format_info *fi, bool negative, prec_rounding r)
{
    double mag;
    if (r.overflow == PREC_OVF_SATURATE) mag = fi->max_finite;
    else if (fi->has_infinity) mag = INFINITY;
    else return NAN;
    return negative ? -mag : mag;
}

/* Round the exact nonzero finite value (hi + lo) * 2^scale into fi.
 *
 * hi != 0; lo carries what hi misses: its sign is the sign of the remainder,
 * and |lo| is small enough that hi + lo crosses no grid point or midpoint of
 * the target that hi does not sit on (true when hi = RN(hi + lo) in double,
 * as TwoSum/TwoProd/ErrFma give).  The scale lets callers keep hi and lo
 * clear of double overflow and underflow.
 *
 * With q the quantum (ulp) of the binade of |x| (clamped at the subnormal
 * binade), y = |hi| * 2^scale / q is exact, n = floor(y) is the candidate
 * below and frac = y - n (plus lo / q) decides the direction. */
static double round_scaled(double hi, double lo, int scale, const prec_format_info *fi,
                           prec_rounding r, uint64_t random_bits)
{
    bool negative = signbit(hi);
    double ax = fabs(hi);
    double lo_mag = negative ? -lo : lo; /* lo as seen by |x| */
    int p = fi->precision;
    int e;
    frexp(ax, &e);
    int lead = e - 1 + scale; /* exponent of the leading bit of |x| */
    int qexp;                 /* the quantum is 2^qexp */
    double n, frac;           /* |x| = (n + frac) * 2^qexp, frac in [0, 1) before lo */
    int half_cmp;             /* sign of (true fraction - 1/2) */
    bool inexact = true;

    if (lead < fi->emin - p - 1) {
        /* |x| < min_subnormal / 4: nowhere near a midpoint; y would underflow. */
        qexp = fi->emin - p + 1;
        n = 0.0;
        frac = ldexp(ax, scale - qexp); /* only steers SR; may flush to 0 */
        half_cmp = -1;
    } else {
        int grid_lead = lead < fi->emin ? fi->emin : lead;
        qexp = grid_lead - (p - 1);
        double y = ldexp(ax, scale - qexp); /* exact: lowest bit of y >= 2^-54 */
        n = floor(y);
        frac = y - n;
        if (frac == 0.0 && lo_mag < 0.0) {
            /* |hi| sits on a grid point and the true value is just below it.
             * If that point opens a binade, the grid below is twice as fine. */
            if (n == ldexp(1.0, p - 1) && lead > fi->emin) {
                qexp -= 1;
                n = 2.0 * n;
            }
            n -= 1.0;
            frac = 1.0 + ldexp(lo_mag, scale - qexp); /* in [1/2, 1) */
            half_cmp = frac > 0.5 ? 1 : frac < 0.5 ? -1 : 0;
        } else {
            inexact = frac != 0.0 || lo_mag != 0.0;
            if (frac > 0.5) half_cmp = 1;
            else if (frac < 0.5) half_cmp = -1;
            else half_cmp = (lo_mag > 0) - (lo_mag < 0);
            if (lo_mag != 0.0) frac += ldexp(lo_mag, scale - qexp); /* for SR */
        }
    }

    bool up = false; /* round the magnitude up */
    if (inexact) {
        switch (r.mode) {
        case PREC_RNE: up = half_cmp > 0 || (half_cmp == 0 && fmod(n, 2.0) != 0.0); break;
        case PREC_RZ: up = false; break;
        case PREC_RU: up = !negative; break;
        case PREC_RD: up = negative; break;
        case PREC_SR: up = sr_round_up(frac, random_bits); break;
        default: break;
        }
    }
    double mag = ldexp(n + (up ? 1.0 : 0.0), qexp); /* inf when past double range */
    if (mag > fi->max_finite) mag = overflow_result(fi, negative, r);
    if (r.flush_subnormals && mag != 0.0 && mag < fi->min_normal) mag = 0.0;
    return negative ? -mag : mag;
}

double prec_round2(double hi, double lo, prec_format f, prec_rounding r, uint64_t random_bits)
{
    if ((unsigned)f >= PREC_NFORMATS) return NAN;
    const prec_format_info *fi = &format_table[f];
    if (isnan(hi) || isnan(lo)) return NAN; /* a NaN low part must not pass for a direction */
    if (isinf(hi)) return round_infinity(fi, signbit(hi), r);
    if (hi == 0.0) {
        if (lo == 0.0) return hi;
        hi = lo; /* outside the contract, but the value is lo itself */
        lo = 0.0;
    }
    if (f == PREC_FP64 && lo == 0.0) { /* already a double: only flushing can change it */
        if (r.flush_subnormals && fabs(hi) < fi->min_normal) return copysign(0.0, hi);
        return hi;
    }
    return round_scaled(hi, lo, 0, fi, r, random_bits);
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

/* Fast2Sum (Dekker), operands ordered by magnitude: s = RN(a + b) and
 * s + t == a + b exactly, subnormals included.  With |a| >= |b|, z = s - a
 * and t = b - z are exact and no larger than |a| and ulp(s)/2, so nothing
 * overflows unless s does.  Knuth's branch-free TwoSum cannot promise that:
 * with |a| < |b| near DBL_MAX, RN(s - a) can round past DBL_MAX although s
 * does not, and the error term comes out NaN. */
static void fast_two_sum(double a, double b, double *s, double *t)
{
    if (fabs(a) < fabs(b)) {
        double swap = a;
        a = b;
        b = swap;
    }
    double sum = a + b;
    double z = sum - a;
    *t = b - z;
    *s = sum;
}

/* Knuth's TwoSum: s = RN(a + b), s + t == a + b exactly, no ordering of
 * the operands needed; for operands far from overflow only (ErrFma's
 * scaled significands), see fast_two_sum. */
static void two_sum(double a, double b, double *s, double *t)
{
    double sum = a + b;
    double bb = sum - a;
    *t = (a - (sum - bb)) + (b - bb);
    *s = sum;
}

/* The sign of an exactly zero sum, IEEE 754 section 6.3: +0 in every mode but
 * RD, -0 in RD; except that adding two zeros of one sign keeps that sign. */
static double exact_zero_sum(bool both_zero_same_sign, bool negative_zeros, prec_rounding r)
{
    if (both_zero_same_sign) return negative_zeros ? -0.0 : 0.0;
    return r.mode == PREC_RD ? -0.0 : 0.0;
}

double prec_add(double a, double b, prec_format f, prec_rounding r, uint64_t random_bits)
{
    if ((unsigned)f >= PREC_NFORMATS) return NAN;
    const prec_format_info *fi = &format_table[f];
    if (isnan(a) || isnan(b)) return NAN;
    if (isinf(a) || isinf(b)) {
        if (isinf(a) && isinf(b) && signbit(a) != signbit(b)) return NAN; /* inf - inf */
        return round_infinity(fi, signbit(isinf(a) ? a : b), r);
    }
    double s, t;
    fast_two_sum(a, b, &s, &t);
    if (s == 0.0 && t == 0.0) {
        bool zeros_same_sign = a == 0.0 && b == 0.0 && signbit(a) == signbit(b);
        return exact_zero_sum(zeros_same_sign, signbit(a), r);
    }
    if (isinf(s)) {
        /* a + b overflowed double, yet directed modes (and fp64 SR) need the
         * exact value: both addends are >= 2^970 in magnitude, so halving is
         * exact. */
        fast_two_sum(a * 0.5, b * 0.5, &s, &t);
        return round_scaled(s, t, 1, fi, r, random_bits);
    }
    return round_scaled(s, t, 0, fi, r, random_bits);
}

double prec_mul(double a, double b, prec_format f, prec_rounding r, uint64_t random_bits)
{
    if ((unsigned)f >= PREC_NFORMATS) return NAN;
    const prec_format_info *fi = &format_table[f];
    if (isnan(a) || isnan(b)) return NAN;
    bool negative = signbit(a) != signbit(b);
    if (isinf(a) || isinf(b)) {
        if (a == 0.0 || b == 0.0) return NAN; /* inf * 0 */
        return round_infinity(fi, negative, r);
    }
    if (a == 0.0 || b == 0.0) return negative ? -0.0 : 0.0;
    /* Scale both significands into [1/2, 1): the product p + e is then exact
     * (TwoProd by fma cannot underflow) and the exponent travels separately,
     * so products past double's range still round correctly. */
    int ea, eb;
    double ma = frexp(a, &ea), mb = frexp(b, &eb);
    double prod = ma * mb;
    double err = fma(ma, mb, -prod);
    return round_scaled(prod, err, ea + eb, fi, r, random_bits);
}

double prec_fma(double a, double b, double c, prec_format f, prec_rounding r, uint64_t random_bits)
{
    if ((unsigned)f >= PREC_NFORMATS) return NAN;
    const prec_format_info *fi = &format_table[f];
    if (isnan(a) || isnan(b) || isnan(c)) return NAN;
    bool prod_negative = signbit(a) != signbit(b);
    if (isinf(a) || isinf(b)) {
        if (a == 0.0 || b == 0.0) return NAN;                          /* inf * 0 */
        if (isinf(c) && signbit(c) != prod_negative) return NAN;       /* inf - inf */
        return round_infinity(fi, prod_negative, r);
    }
    if (isinf(c)) return round_infinity(fi, signbit(c), r);
    if (a == 0.0 || b == 0.0) {
        if (c == 0.0) return exact_zero_sum(prod_negative == (bool)signbit(c), prod_negative, r);
        return prec_round2(c, 0.0, f, r, random_bits);
    }
    if (c == 0.0) return prec_mul(a, b, f, r, random_bits); /* nonzero product + 0 */
    if (f == PREC_FP64 && r.mode == PREC_RNE) /* the hardware FMA rounds just so */
        return prec_round2(fma(a, b, c), 0.0, f, r, random_bits);

    /* Everything below works on significands, a*b = ma*mb * 2^scale with
     * |ma*mb| in [1/4, 1) and the exponent carried apart: whatever the
     * operands' exponents, nothing overflows and the product's error is a
     * double (it would not be for a subnormal a*b). */
    int ea, eb, ec;
    double ma = frexp(a, &ea), mb = frexp(b, &eb), mc = frexp(c, &ec);
    int scale = ea + eb;
    if (ec - scale > 60) {
        /* |a*b| < 2^scale <= 2^(ec-61) < ulp(c)/2^7: c is RN of the sum and
         * the product, as a low part beside mc in [1/2, 1), only says which
         * side of c the exact value lies on (and moves SR's probability).
         * Should it underflow, any tiny value of its sign decides alike. */
        double tail = ldexp(ma * mb, scale - ec);
        if (tail == 0.0) tail = copysign(0x1p-1074, ma * mb);
        return round_scaled(mc, tail, ec, fi, r, random_bits);
    }
    double cs = ldexp(c, -scale); /* |cs| < 2^61 */
    if (ldexp(cs, scale) != c) {
        /* cs underflowed: |cs| < 2^-1022, far below the last bit (2^-106) of
         * ma*mb, so any tiny value of the same sign rounds alike. */
        cs = copysign(0x1p-200, c);
    }
    /* ErrFma (Boldo and Muller, "Exact and approximated error of the FMA",
     * IEEE TC 2011): ma*mb + cs = r1 + r2 + r3 exactly, r1 = RN(ma*mb + cs),
     * r2 = RN(r2 + r3).  We use TwoSum in the last step where the paper may
     * use Fast2Sum; TwoSum needs no ordering of its operands, and nothing
     * here comes near overflow.  Dropping r3 could only misjudge an fp64
     * tie, and fp64 RNE, the one mode that cares, took the hardware FMA. */
    double r1 = fma(ma, mb, cs);
    double u1 = ma * mb;
    double u2 = fma(ma, mb, -u1);
    double alpha1, alpha2, beta1, beta2, r2, r3;
    two_sum(cs, u2, &alpha1, &alpha2);
    two_sum(u1, alpha1, &beta1, &beta2);
    double gamma = (beta1 - r1) + beta2;
    two_sum(gamma, alpha2, &r2, &r3);
    if (r1 == 0.0) return exact_zero_sum(false, false, r); /* no underflow here: exact 0 */
    return round_scaled(r1, r2, scale, fi, r, random_bits);
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
