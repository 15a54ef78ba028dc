/* reference/exact.c — see exact.h.
 *
 * A term is an integer significand m (< 2^64) times 2^e.  Its bit position
 * above the accumulator's lowest bit, pos = e - EXACT_ACC_LSB, picks the limb
 * (pos / 32) and the shift inside it (pos % 32); the low 32 bits of m << shift
 * go to that limb and the rest (m >> (32 - shift)) to the next one.  Callers
 * keep m below 2^53, so the upper part stays below 2^53 and 2^10 additions
 * cannot overflow a limb's 63 bits: carries are propagated every
 * EXACT_ACC_CARRY_EVERY (= 2^10) additions. */
#include "reference/exact.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include <gmp.h>

#define LIMB_BITS 32
#define LIMB_MASK 0xffffffffll

void exact_acc_init(exact_acc *a) { memset(a, 0, sizeof *a); }

/* Carries out of every limb but the last, which keeps the sign: afterwards
 * limb[0..N-2] lie in [0, 2^32) and the value's sign is the sign of limb[N-1]. */
static void propagate_carries(exact_acc *a)
{
    int64_t carry = 0;
    for (int i = 0; i < EXACT_ACC_LIMBS - 1; i++) {
        int64_t v = a->limb[i] + carry;
        a->limb[i] = v & LIMB_MASK;
        carry = v >> LIMB_BITS; /* arithmetic shift: floor division */
    }
    a->limb[EXACT_ACC_LIMBS - 1] += carry;
    a->pending = 0;
}

/* a += sign * m * 2^e, m < 2^53, e >= EXACT_ACC_LSB. */
static inline void add_scaled(exact_acc *a, uint64_t m, int e, int negative)
{
    int pos = e - EXACT_ACC_LSB;
    int idx = pos >> 5;
    int shift = pos & 31;
    int64_t low = (int64_t)((uint32_t)(m << shift));
    int64_t high = (int64_t)(m >> (LIMB_BITS - shift)); /* shift < 32: defined */
    int64_t mask = -(int64_t)negative;                   /* 0 or all ones */
    a->limb[idx] += (low ^ mask) - mask;
    a->limb[idx + 1] += (high ^ mask) - mask;
    if (++a->pending >= EXACT_ACC_CARRY_EVERY) propagate_carries(a);
}

/* Splits a finite double into sign, 53-bit significand and exponent of its
 * lowest bit: x = (-1)^neg * m * 2^e. */
static inline void split_double(double x, uint64_t *m, int *e, int *negative)
{
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    int biased = (int)((bits >> 52) & 0x7ff);
    uint64_t frac = bits & ((1ull << 52) - 1);
    *negative = (int)(bits >> 63);
    if (biased == 0) { /* subnormal or zero: no hidden bit, exponent of 2^-1074 */
        *m = frac;
        *e = -1074;
    } else {
        *m = frac | (1ull << 52);
        *e = biased - 1075;
    }
}

static void count_nonfinite(exact_acc *a, double x)
{
    if (isnan(x)) a->n_nan++;
    else if (x > 0) a->n_pos_inf++;
    else a->n_neg_inf++;
}

void exact_acc_add(exact_acc *a, double x)
{
    if (!isfinite(x)) {
        count_nonfinite(a, x);
        return;
    }
    uint64_t m;
    int e, negative;
    split_double(x, &m, &e, &negative);
    if (m) add_scaled(a, m, e, negative);
}

void exact_acc_add_product(exact_acc *a, double x, double y)
{
    if (!isfinite(x) || !isfinite(y)) {
        count_nonfinite(a, x * y); /* inf * 0 is NaN, as it should be */
        return;
    }
    uint64_t mx, my;
    int ex, ey, nx, ny;
    split_double(x, &mx, &ex, &nx);
    split_double(y, &my, &ey, &ny);
    if (!mx || !my) return;
    unsigned __int128 p = (unsigned __int128)mx * my; /* < 2^106 */
    int negative = nx ^ ny;
    int e = ex + ey; /* >= -2148 > EXACT_ACC_LSB */
    uint64_t low = (uint64_t)p & ((1ull << 53) - 1);
    uint64_t high = (uint64_t)(p >> 53);
    if (low) add_scaled(a, low, e, negative);
    if (high) add_scaled(a, high, e + 53, negative);
}

void exact_acc_add_acc(exact_acc *a, const exact_acc *b)
{
    exact_acc tmp = *b;
    propagate_carries(&tmp);
    propagate_carries(a);
    /* both now have 32-bit lower limbs: one more sum per limb cannot overflow */
    for (int i = 0; i < EXACT_ACC_LIMBS; i++) a->limb[i] += tmp.limb[i];
    propagate_carries(a);
    a->n_nan += b->n_nan;
    a->n_pos_inf += b->n_pos_inf;
    a->n_neg_inf += b->n_neg_inf;
}

/* NaN, +inf or -inf when a non-finite term decides the result; 0 otherwise. */
static double nonfinite_result(const exact_acc *a)
{
    if (a->n_nan || (a->n_pos_inf && a->n_neg_inf)) return NAN;
    if (a->n_pos_inf) return INFINITY;
    if (a->n_neg_inf) return -INFINITY;
    return 0.0;
}

/* The magnitude of a's finite part in mag[] (all limbs in [0, 2^32)) and
 * its sign; returns the index of the top nonzero limb, or -1 for zero. */
static int magnitude(exact_acc *a, int64_t mag[EXACT_ACC_LIMBS], int *negative)
{
    propagate_carries(a);
    *negative = a->limb[EXACT_ACC_LIMBS - 1] < 0;
    if (*negative) {
        int64_t carry = 0;
        for (int i = 0; i < EXACT_ACC_LIMBS; i++) {
            int64_t v = -a->limb[i] + carry;
            mag[i] = v & LIMB_MASK;
            carry = v >> LIMB_BITS;
        }
    } else {
        memcpy(mag, a->limb, sizeof a->limb);
    }
    for (int i = EXACT_ACC_LIMBS - 1; i >= 0; i--)
        if (mag[i]) return i;
    return -1;
}

int exact_acc_sign(exact_acc *a)
{
    double nf = nonfinite_result(a);
    if (isnan(nf)) return 0;
    if (nf != 0.0) return nf > 0 ? 1 : -1;
    int64_t mag[EXACT_ACC_LIMBS];
    int negative;
    if (magnitude(a, mag, &negative) < 0) return 0;
    return negative ? -1 : 1;
}

double exact_acc_round(exact_acc *a, prec_round_mode mode)
{
    if (mode == PREC_SR || (unsigned)mode >= PREC_NROUNDS) return NAN;
    double nf = nonfinite_result(a);
    if (nf != 0.0 || isnan(nf)) return nf;
    int64_t mag[EXACT_ACC_LIMBS];
    int negative;
    int top = magnitude(a, mag, &negative);
    if (top < 0) return 0.0;

    /* The top three limbs as one 96-bit integer v; everything below is sticky. */
    unsigned __int128 v = 0;
    for (int i = top; i >= top - 2; i--) v = (v << LIMB_BITS) | (uint64_t)(i >= 0 ? mag[i] : 0);
    int sticky = 0;
    for (int i = top - 3; i >= 0 && !sticky; i--) sticky = mag[i] != 0;
    int base = LIMB_BITS * (top - 2) + EXACT_ACC_LSB; /* weight of v's bit 0 */
    int lead = 127;
    while (!((v >> lead) & 1)) lead--; /* v != 0: the top limb is nonzero */
    int exp_lead = base + lead;
    int quantum = exp_lead - 52 > -1074 ? exp_lead - 52 : -1074; /* result's ulp */
    /* Bits of v below the result's ulp.  v's top limb is nonzero, so
     * lead >= 64 and drop >= lead - 52 >= 12: v always holds the round bit. */
    int drop = quantum - base;

    uint64_t kept;
    int round_bit, rest;
    if (drop > 127) { /* far below the smallest subnormal */
        kept = 0;
        round_bit = 0;
        rest = 1;
    } else {
        kept = (uint64_t)(v >> drop);
        round_bit = (int)((v >> (drop - 1)) & 1);
        unsigned __int128 below = v & (((unsigned __int128)1 << (drop - 1)) - 1);
        rest = below != 0;
    }
    rest |= sticky;

    int up = 0;
    switch (mode) {
    case PREC_RNE: up = round_bit && (rest || (kept & 1)); break;
    case PREC_RZ: up = 0; break;
    case PREC_RU: up = !negative && (round_bit || rest); break;
    case PREC_RD: up = negative && (round_bit || rest); break;
    default: break;
    }
    double result = ldexp((double)(kept + (uint64_t)up), quantum); /* kept + up <= 2^53: exact */
    if (isinf(result)) {
        int toward_zero = mode == PREC_RZ || (mode == PREC_RU && negative) || (mode == PREC_RD && !negative);
        if (toward_zero) result = DBL_MAX;
    }
    return negative ? -result : result;
}

double exact_acc_value(exact_acc *a) { return exact_acc_round(a, PREC_RNE); }

double exact_acc_round_to(exact_acc *a, prec_format f, prec_rounding r, uint64_t random_bits)
{
    double nf = nonfinite_result(a);
    if (nf != 0.0 || isnan(nf)) return prec_round2(nf, 0.0, f, r, random_bits);
    if (f == PREC_FP64 && r.mode != PREC_SR) {
        double x = exact_acc_round(a, r.mode);
        if (isinf(x) && r.overflow == PREC_OVF_SATURATE) x = copysign(DBL_MAX, x);
        if (r.flush_subnormals && fabs(x) < DBL_MIN) x = copysign(0.0, x);
        return x;
    }
    double hi = exact_acc_round(a, PREC_RNE);
    double lo;
    if (isinf(hi)) {
        /* beyond the double range, hence beyond every format's: only the
         * overflow rule matters, which a finite stand-in above max triggers */
        hi = copysign(DBL_MAX, hi);
        lo = copysign(0x1p970, hi);
    } else {
        exact_acc rest = *a;
        exact_acc_add(&rest, -hi);
        lo = exact_acc_round(&rest, PREC_RNE);
    }
    return prec_round2(hi, lo, f, r, random_bits);
}

int exact_acc_get_mpfr(exact_acc *a, mpfr_t out)
{
    double nf = nonfinite_result(a);
    if (nf != 0.0 || isnan(nf)) {
        mpfr_set_d(out, nf, MPFR_RNDN);
        return 0;
    }
    int64_t mag[EXACT_ACC_LIMBS];
    int negative;
    int top = magnitude(a, mag, &negative);
    if (top < 0) {
        mpfr_set_zero(out, 1);
        return 0;
    }
    int bottom = 0;
    while (!mag[bottom]) bottom++;
    uint32_t words[EXACT_ACC_LIMBS];
    int count = top - bottom + 1;
    for (int i = 0; i < count; i++) words[i] = (uint32_t)mag[bottom + i];
    mpz_t z;
    mpz_init(z);
    mpz_import(z, (size_t)count, -1, sizeof words[0], 0, 0, words); /* least significant word first */
    if (negative) mpz_neg(z, z);
    size_t bits = mpz_sizeinbase(z, 2);
    mpfr_set_prec(out, bits < MPFR_PREC_MIN ? MPFR_PREC_MIN : (mpfr_prec_t)bits);
    mpfr_set_z_2exp(out, z, LIMB_BITS * bottom + EXACT_ACC_LSB, MPFR_RNDN); /* exact */
    mpz_clear(z);
    return 0;
}

/* ---- fast path for arrays: error-free extraction, then few limb updates ----
 *
 * Adding term by term costs two read-modify-writes of data-dependent limbs
 * per term.  For a block of up to EXACT_BLOCK terms with |x_i| < 2^E, the
 * block is instead split exactly into three "levels" by Rump, Ogita and
 * Oishi's ExtractScalar (SIAM J. Sci. Comput. 31 (2008) 189, Lemma 3.3):
 * with sigma = 2^k >= 2^11 |p|,
 *     q = fl(fl(sigma + p) - sigma),   p' = fl(p - q)
 * gives p = q + p' exactly (fl(sigma + p) - sigma is exact by Sterbenz, and
 * p - q is the rounding error of sigma + p), q a multiple of 2^(k-54) and
 * |p'| <= 2^(k-53).  Level j uses sigma_j = 2^(E + 11 - 42 j), so each level
 * peels 42 bits.  The q of one level are all multiples of 2^(E-43-42j) below
 * 2^(E+1-42j) in magnitude, so a double holds the sum of up to 2^9 of them
 * exactly: each of the four lane accumulators per level sums 256 terms.
 * What is left after three levels (terms more than ~2^80 below the block's
 * largest) goes through exact_acc_add.  Blocks with non-finite terms or E
 * outside [-900, 1000] (where the sigmas or the peeled bits would leave the
 * normal range) also take the term-by-term path. */
#define EXACT_BLOCK 1024

typedef double v2d __attribute__((vector_size(16)));
typedef long long v2i64 __attribute__((vector_size(16)));

static void add_block_termwise(exact_acc *a, const double *p, size_t m)
{
    for (size_t i = 0; i < m; i++) exact_acc_add(a, p[i]);
}

/* max |p_i|, or NaN/inf when a term is not finite. */
static double block_max_abs(const double *p, size_t m)
{
    double amax = 0.0;
    for (size_t i = 0; i < m; i++) {
        double v = fabs(p[i]);
        if (!(v <= DBL_MAX)) return v != v ? v : INFINITY;
        amax = v > amax ? v : amax;
    }
    return amax;
}

static void add_block(exact_acc *a, const double *p, size_t m)
{
    double amax = block_max_abs(p, m);
    if (amax == 0.0) return;
    int e;
    frexp(amax, &e); /* amax < 2^e */
    if (!isfinite(amax) || e < -900 || e > 1000) {
        add_block_termwise(a, p, m);
        return;
    }
    double sig[3] = {ldexp(1.0, e + 11), ldexp(1.0, e - 31), ldexp(1.0, e - 73)};
    v2d zero = {0.0, 0.0};
    v2d sig_v[3], lane_a[3], lane_b[3];
    for (int j = 0; j < 3; j++) {
        sig_v[j] = (v2d){sig[j], sig[j]};
        lane_a[j] = lane_b[j] = zero;
    }
    size_t i = 0;
    for (; i + 4 <= m; i += 4) {
        v2d x, y;
        memcpy(&x, p + i, sizeof x);
        memcpy(&y, p + i + 2, sizeof y);
        for (int j = 0; j < 3; j++) {
            v2d qx = (sig_v[j] + x) - sig_v[j];
            v2d qy = (sig_v[j] + y) - sig_v[j];
            x -= qx;
            y -= qy;
            lane_a[j] += qx;
            lane_b[j] += qy;
        }
        v2i64 left = (x != zero) | (y != zero);
        if (left[0] | left[1]) {
            for (int k = 0; k < 2; k++) {
                if (x[k] != 0.0) exact_acc_add(a, x[k]);
                if (y[k] != 0.0) exact_acc_add(a, y[k]);
            }
        }
    }
    for (; i < m; i++) { /* the last m % 4 terms: levels straight into a */
        double x = p[i];
        for (int j = 0; j < 3; j++) {
            double q = (sig[j] + x) - sig[j];
            x -= q;
            exact_acc_add(a, q);
        }
        exact_acc_add(a, x);
    }
    for (int j = 0; j < 3; j++) {
        for (int k = 0; k < 2; k++) {
            exact_acc_add(a, lane_a[j][k]);
            exact_acc_add(a, lane_b[j][k]);
        }
    }
}

void exact_acc_add_array(exact_acc *a, const double *x, size_t n)
{
    for (size_t start = 0; start < n; start += EXACT_BLOCK)
        add_block(a, x + start, n - start < EXACT_BLOCK ? n - start : EXACT_BLOCK);
}

double exact_sum(const double *x, size_t n)
{
    exact_acc a;
    exact_acc_init(&a);
    exact_acc_add_array(&a, x, n);
    return exact_acc_value(&a);
}

double exact_sum_abs(const double *x, size_t n)
{
    exact_acc a;
    exact_acc_init(&a);
    double buf[EXACT_BLOCK];
    for (size_t start = 0; start < n; start += EXACT_BLOCK) {
        size_t m = n - start < EXACT_BLOCK ? n - start : EXACT_BLOCK;
        for (size_t i = 0; i < m; i++) buf[i] = fabs(x[start + i]);
        add_block(&a, buf, m);
    }
    return exact_acc_round(&a, PREC_RU);
}

double exact_dot(const double *x, const double *y, size_t n)
{
    return exact_dot_strided(x, 1, y, 1, n);
}

double exact_dot_strided(const double *x, ptrdiff_t incx, const double *y, ptrdiff_t incy, size_t n)
{
    exact_acc a;
    exact_acc_init(&a);
    for (size_t i = 0; i < n; i++) exact_acc_add_product(&a, x[(ptrdiff_t)i * incx], y[(ptrdiff_t)i * incy]);
    return exact_acc_value(&a);
}

double exact_dot_abs(const double *x, const double *y, size_t n)
{
    exact_acc a;
    exact_acc_init(&a);
    for (size_t i = 0; i < n; i++) exact_acc_add_product(&a, fabs(x[i]), fabs(y[i]));
    return exact_acc_round(&a, PREC_RU);
}

double exact_sum_f32(const float *x, size_t n)
{
    exact_acc a;
    exact_acc_init(&a);
    double buf[EXACT_BLOCK];
    for (size_t start = 0; start < n; start += EXACT_BLOCK) {
        size_t m = n - start < EXACT_BLOCK ? n - start : EXACT_BLOCK;
        for (size_t i = 0; i < m; i++) buf[i] = (double)x[start + i];
        add_block(&a, buf, m);
    }
    return exact_acc_value(&a);
}

/* The product of two floats has at most 48 significant bits and an exponent
 * far inside the double range: the double product is exact. */
double exact_dot_f32(const float *x, const float *y, size_t n)
{
    exact_acc a;
    exact_acc_init(&a);
    double buf[EXACT_BLOCK];
    for (size_t start = 0; start < n; start += EXACT_BLOCK) {
        size_t m = n - start < EXACT_BLOCK ? n - start : EXACT_BLOCK;
        for (size_t i = 0; i < m; i++) buf[i] = (double)x[start + i] * (double)y[start + i];
        add_block(&a, buf, m);
    }
    return exact_acc_value(&a);
}

double exact_dot_abs_f32(const float *x, const float *y, size_t n)
{
    exact_acc a;
    exact_acc_init(&a);
    for (size_t i = 0; i < n; i++) exact_acc_add(&a, fabs((double)x[i] * (double)y[i]));
    return exact_acc_round(&a, PREC_RU);
}
