/* precision/metrics.h — how far a computed value is from a reference.
 *
 * Conventions shared by every function here (x = computed, ref = reference):
 *   - NaN in x or ref gives NaN (the error is unknown), except where noted.
 *   - x == ref, infinities of one sign included, gives error 0; a signed
 *     zero equals the other zero.
 *   - any other comparison against or from an infinity gives +inf.
 *   - ref == 0 (relative measures): x == 0 gives 0, any other x gives +inf.
 * Results are doubles computed in double arithmetic: they carry a relative
 * rounding error of a few units of 2^-53, irrelevant for error reporting. */
#ifndef ULPSCOPE_PRECISION_METRICS_H
#define ULPSCOPE_PRECISION_METRICS_H

#include <stddef.h>

#include "precision/format.h"

#ifdef __cplusplus
extern "C" {
#endif

/* |x - ref|. */
double prec_abs_err(double x, double ref);

/* |x - ref| / |ref|. */
double prec_rel_err(double x, double ref);

/* Distance in steps of format f: the number of values of f passed when
 * walking from ref to x (adjacent values are 1 apart; +0 and -0 are one
 * value).  For values of f the result is an integer.  Values that f does not
 * hold are placed between their neighbours in f linearly, so the distance is
 * continuous and monotone in x: ord(v) = ord(RZ(v)) + (|v| - |RZ(v)|) / gap,
 * gap the spacing of f just above |RZ(v)|; beyond max finite the grid of the
 * top binade continues.  Exact (an integer) while below 2^53. */
double prec_ulp_distance(double x, double ref, prec_format f);

/* |x - ref| in units of the ulp of f at the reference, prec_ulp(ref, f): the
 * usual "error in ulps".  Unlike prec_ulp_distance it does not change scale
 * when x lies in another binade than ref. */
double prec_ulp_error(double x, double ref, prec_format f);

/* Normwise relative error ||x - ref||_2 / ||ref||_2 over n elements, with
 * scaling so that squares neither overflow nor underflow.  n == 0 gives 0.
 * NaN in any element: NaN.  An infinite element (in x or ref) that x and ref
 * share is left out of both norms; one they do not share gives +inf.
 * ||ref|| == 0: 0 if the difference is zero too, else +inf. */
double prec_normwise_rel_err(const double *x, const double *ref, size_t n);

/* The same with the max norm: max |x_i - ref_i| / max |ref_i|. */
double prec_normwise_rel_err_max(const double *x, const double *ref, size_t n);

/* Correct bits: -log2(prec_rel_err(x, ref)), clamped to [0, precision of f]
 * (an exact result has all p bits right; a relative error of 1 or more has
 * none).  NaN x or an infinite x with a finite ref: 0 bits; NaN ref: NaN. */
double prec_correct_bits(double x, double ref, prec_format f);

#ifdef __cplusplus
}
#endif
#endif
