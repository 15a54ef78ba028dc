/* precision/kval.h — error-annotated arithmetic: bounds on the error of a
 * computation, obtained by replaying its operations.
 *
 * Each kval carries a value (the exact quantity, evaluated in double) and two
 * error bounds: e, a rigorous worst-case bound on |computed - exact|, and p,
 * a probabilistic one in which rounding errors of long sums grow like
 * sqrt(depth) u (Higham and Mary, SIAM J. Sci. Comput. 41(5), 2019, Thm 2.4).
 * Every rounding adds u|x| plus half the format's smallest subnormal
 * (underflow), so fp16 and fp8 results near zero are covered.  The kernel
 * checks (kernels/check/) replay each kernel's fp32 operations on kval
 * numbers to get the bound of every output element. */
#ifndef ULPSCOPE_PRECISION_KVAL_H
#define ULPSCOPE_PRECISION_KVAL_H

#include <stdint.h>

#include "precision/format.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    double v; /* the exact value of the quantity (evaluated in double) */
    double e; /* rigorous bound on |computed - v| */
    double p; /* probabilistic bound, p <= e */
} kval;

static inline kval kval_exact(double v) { kval r = {v, 0.0, 0.0}; return r; }
/* Errors of a value stored in format f (u |v| plus underflow): the rounding
 * a store or an fp32 operation adds.  f = PREC_FP64 adds nothing: use it for
 * operations the kernel does exactly (a product by a power of two, a copy). */
kval kval_round(kval a, prec_format f);
kval kval_add(kval a, kval b, prec_format f);
kval kval_sub(kval a, kval b, prec_format f);
kval kval_mul(kval a, kval b, prec_format f);
kval kval_div(kval a, kval b, prec_format f); /* |b.v| > b.e required (else e = inf) */
kval kval_fma(kval a, kval b, kval c, prec_format f); /* a*b + c, one rounding */
kval kval_neg(kval a);
/* A constant c the kernel holds rounded to format f: value c, error |fl(c) - c|. */
kval kval_constant(double c, prec_format f);
kval kval_max(kval a, kval b); /* exact operation */
/* y = f(a) for a monotone f, computed by an implementation whose result is
 * within ulps units in the last place (in format fmt) of f(computed a), plus
 * abs_err absolute (for approximations with an absolute error bound; else 0).
 * lo, hi clip the argument interval to f's domain (e.g. 0 for sqrt). */
kval kval_monotone(kval a, double (*f)(double), double lo, double hi, double ulps, double abs_err,
                   prec_format fmt);
/* y = f(a) for f with |f'| <= lipschitz over the argument interval (sin, cos). */
kval kval_lipschitz(kval a, double (*f)(double), double lipschitz, double ulps, double abs_err,
                    prec_format fmt);

/* A sum of terms in format f by any order whose longest chain of roundings
 * has `depth` additions: e = sum e_k + gamma_depth * sum(|v_k| + e_k), p with
 * sqrt(depth) growth.  Add the terms, then finish. */
typedef struct {
    double v, abs, e, p;
} kval_sum;

static inline void kval_sum_init(kval_sum *s) { s->v = s->abs = s->e = s->p = 0.0; }
void kval_sum_add(kval_sum *s, kval term);
kval kval_sum_finish(const kval_sum *s, int64_t depth, prec_format f);

/* gamma_k = k u / (1 - k u) (inf when k u >= 1); and the probabilistic
 * gamma~_k(lambda) = exp(lambda sqrt(k) u + k u^2 / (1 - u)) - 1 with lambda
 * chosen so that each bound fails with probability below 1e-9 for sums of up
 * to 2^40 terms (precision/bounds.h computes both). */
double kval_gamma(int64_t k, double u);
double kval_gamma_prob(int64_t k, double u);

#ifdef __cplusplus
}
#endif
#endif
