/* tests/test_reference_util.h — helpers the reference tests share: exact sums
 * of doubles in MPFR, random inputs, and the comparison of a correctly
 * rounded output with an independent high-precision value.
 * Include after <cmocka.h>. */
#ifndef ULPSCOPE_TESTS_TEST_REFERENCE_UTIL_H
#define ULPSCOPE_TESTS_TEST_REFERENCE_UTIL_H

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <mpfr.h>

#include "precision/rng.h"

#define U64 0x1p-53 /* unit roundoff of the double every reference rounds to */

/* out = the exact sum of v[0..n): doubles span bits 2^-1074 .. 2^1023, so
 * 2100 + 40 bits hold any sum of up to 2^40 of them; 4400 leaves room. */
static inline void sum_exactly(mpfr_ptr out, long n, const double *v)
{
    mpfr_t *terms = malloc((size_t)(n ? n : 1) * sizeof *terms);
    mpfr_ptr *ptrs = malloc((size_t)(n ? n : 1) * sizeof *ptrs);
    for (long j = 0; j < n; j++) {
        mpfr_init2(terms[j], 53);
        mpfr_set_d(terms[j], v[j], MPFR_RNDN);
        ptrs[j] = terms[j];
    }
    mpfr_set_prec(out, 4400);
    mpfr_sum(out, ptrs, (unsigned long)n, MPFR_RNDN);
    for (long j = 0; j < n; j++) mpfr_clear(terms[j]);
    free(terms);
    free(ptrs);
}

static inline void random_normal(prec_rng *rng, double *x, long n, double mean, double scale)
{
    for (long j = 0; j < n; j++) x[j] = mean + scale * prec_rng_normal(rng);
}

/* Outputs start as NaN, so an element the reference leaves unwritten
 * cannot pass as a value that happened to be in memory. */
static inline void poison(double *v, long n)
{
    for (long j = 0; j < n; j++) v[j] = NAN;
}

/* Four identical rows of n values (mean 96, std 3: the large-mean case
 * where statistics are shared after rounding), a gain near 1 and dy whose
 * rows cancel per column (a, -a, b, -b with a, b multiples of 2^-8), so the
 * exact dgamma of every column is 0.  x and dy hold 4 n values. */
static inline void cancelling_rows(prec_rng *rng, long n, double *x, double *g, double *dy)
{
    random_normal(rng, x, n, 96.0, 3.0);
    random_normal(rng, g, n, 1.0, 0.3);
    for (long r = 1; r < 4; r++)
        for (long j = 0; j < n; j++) x[r * n + j] = x[j];
    for (long j = 0; j < n; j++) {
        double a = ldexp(round(ldexp(prec_rng_normal(rng), 8)), -8);
        double b = ldexp(round(ldexp(prec_rng_normal(rng), 8)), -8);
        dy[j] = a, dy[n + j] = -a, dy[2 * n + j] = b, dy[3 * n + j] = -b;
    }
}

/* A correctly rounded double got against a value hi computed to far more
 * than 53 bits: true when got is the double nearest hi.  Bits near a
 * midpoint need hi's own error to be tiny, which 1024+ bits assure. */
static inline bool is_nearest_double(double got, mpfr_srcptr hi)
{
    return got == mpfr_get_d(hi, MPFR_RNDN);
}

/* |got - hi| <= U64 |got| + slack: what a correctly rounded got satisfies
 * against a value hi known to within slack (finite differences). */
static inline bool within_half_ulp(double got, mpfr_srcptr hi, double slack)
{
    MPFR_DECL_INIT(diff, 200);
    mpfr_set_d(diff, got, MPFR_RNDN);
    mpfr_sub(diff, diff, hi, MPFR_RNDN);
    return fabs(mpfr_get_d(diff, MPFR_RNDA)) <= U64 * fabs(got) * (1 + 0x1p-50) + slack;
}

#endif
