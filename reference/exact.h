/* reference/exact.h — exact sums and dot products of doubles.
 *
 * exact_acc is a long fixed-point accumulator (a "superaccumulator") wide
 * enough for every double and every exact product of two doubles: bit
 * positions 2^-2176 .. 2^2175, in 136 signed 64-bit limbs of 32 value bits
 * each.  Adding a double splits its 53-bit significand over two limbs; the
 * 32 spare bits of each limb absorb carries, which are propagated once every
 * EXACT_ACC_CARRY_EVERY additions.  No addition ever rounds, so the result
 * is independent of the order of the terms; it is rounded once, at the end,
 * in any mode and into any format.
 *
 * Products: exact_acc_add_product multiplies the two 53-bit significands
 * into a 106-bit integer, so every product of doubles (subnormals included)
 * is exact.  For fp32 (and narrower) inputs the double product is already
 * exact, which the *_f32 entry points use.
 *
 * Infinities and NaN are counted apart: a NaN term, or +inf and -inf
 * together, gives NaN; otherwise an infinite term gives that infinity.
 *
 * MPFR gives the same answers (tests/test_exact.c checks it); this is the
 * fast path for the references (bench/bench_exact_dot.c has the figures).
 */
#ifndef ULPSCOPE_REFERENCE_EXACT_H
#define ULPSCOPE_REFERENCE_EXACT_H

#include <stddef.h>
#include <stdint.h>

#include <mpfr.h>

#include "precision/format.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EXACT_ACC_LIMBS 136
#define EXACT_ACC_LSB (-2176)       /* weight of bit 0 of limb 0 */
#define EXACT_ACC_CARRY_EVERY 1024  /* additions between carry propagations */

typedef struct {
    int64_t limb[EXACT_ACC_LIMBS]; /* value = sum limb[i] * 2^(32 i + EXACT_ACC_LSB) */
    int pending;                   /* additions since the last carry propagation */
    uint32_t n_nan, n_pos_inf, n_neg_inf;
} exact_acc;

void exact_acc_init(exact_acc *a);
/* a += x, exactly. */
void exact_acc_add(exact_acc *a, double x);
/* a += x * y, exactly (the full 106-bit product). */
void exact_acc_add_product(exact_acc *a, double x, double y);
/* a += x[0] + ... + x[n-1], exactly; several times faster than n calls of
 * exact_acc_add (blocks are split error-free into a few doubles first). */
void exact_acc_add_array(exact_acc *a, const double *x, size_t n);
/* a += b, exactly. */
void exact_acc_add_acc(exact_acc *a, const exact_acc *b);

/* -1, 0 or +1: the sign of the exact value (NaN counts as 0, infinities by sign). */
int exact_acc_sign(exact_acc *a);

/* The exact value rounded once to a double in mode m (RNE, RZ, RU, RD;
 * PREC_SR is rejected with NaN: use exact_acc_round_to).  Overflow follows
 * IEEE: to inf, or to the largest double where the mode rounds toward zero.
 * Propagates carries in a (the value is unchanged). */
double exact_acc_round(exact_acc *a, prec_round_mode m);
/* Shorthand: round to nearest even. */
double exact_acc_value(exact_acc *a);

/* The exact value rounded once into format f with rounding r (every mode,
 * stochastic included, driven by random_bits).  Done as hi = RNE double,
 * lo = RNE double of (exact - hi), then prec_round2(hi, lo, ...), which is a
 * single correct rounding: every grid point and midpoint of a format
 * narrower than fp64 is a double, and lo carries the sign of the rest. */
double exact_acc_round_to(exact_acc *a, prec_format f, prec_rounding r, uint64_t random_bits);

/* Sets out to the exact value; out's precision is changed to however many
 * bits that takes (at least MPFR_PREC_MIN).  Returns 0. */
int exact_acc_get_mpfr(exact_acc *a, mpfr_t out);

/* One-call helpers: the exact result rounded to nearest even. */
double exact_sum(const double *x, size_t n);
double exact_sum_abs(const double *x, size_t n);  /* sum |x_i|, rounded up (for bounds) */
double exact_dot(const double *x, const double *y, size_t n);
/* x[i*incx] . y[i*incy] for i < n: a row of A against a column of B. */
double exact_dot_strided(const double *x, ptrdiff_t incx, const double *y, ptrdiff_t incy, size_t n);
double exact_sum_f32(const float *x, size_t n);
double exact_dot_f32(const float *x, const float *y, size_t n);
/* sum |x_i y_i|, rounded up (for bounds). */
double exact_dot_abs_f32(const float *x, const float *y, size_t n);
double exact_dot_abs(const double *x, const double *y, size_t n);

#ifdef __cplusplus
}
#endif
#endif
