/* precision/sum.h — sums and dot products computed in an emulated format.
 *
 * Every operation of the algorithm (each add, and in the dot product each
 * multiply or FMA) is an emulated prec_add / prec_mul / prec_fma: the exact
 * result rounded once into the accumulator format with the configured
 * rounding.  Addends are used as given (doubles); a caller that models
 * addends stored in format F rounds them first (prec_round_array), and the
 * reference is then the exact sum of those rounded addends.  The result is
 * always a value of the accumulator format (n = 1 rounds the one addend).
 *
 * Algorithms (Higham, Accuracy and Stability of Numerical Algorithms, 2nd
 * ed., ch. 4):
 *   recursive  s = ((x1 + x2) + x3) + ...
 *   pairwise   split [0, n) into [0, ceil(n/2)) and the rest, recursively:
 *              every addend passes through at most ceil(log2 n) additions
 *   kahan      Kahan's compensated summation (y = x - c; t = s + y;
 *              c = (t - s) - y; s = t)
 *   neumaier   Neumaier's variant: the compensation is the exact error of
 *              each addition (Fast2Sum ordered by magnitude), added at the end
 *   blocked    recursive sums of consecutive blocks of b terms, then the
 *              recursive sum of the block sums
 *   wide       recursive sum with the running sum held in a wider format
 *              (cfg.wide, fp32 by default), rounded once into cfg.acc at the
 *              end: what a GPU kernel with an fp32 accumulator and a bf16 or
 *              fp16 output does
 */
#ifndef ULPSCOPE_PRECISION_SUM_H
#define ULPSCOPE_PRECISION_SUM_H

#include <stdbool.h>
#include <stddef.h>

#include "precision/format.h"
#include "precision/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    PREC_SUM_RECURSIVE = 0,
    PREC_SUM_PAIRWISE,
    PREC_SUM_KAHAN,
    PREC_SUM_NEUMAIER,
    PREC_SUM_BLOCKED,
    PREC_SUM_WIDE,
    PREC_SUM_NALGOS
} prec_sum_algo;

const char *prec_sum_algo_name(prec_sum_algo a); /* "recursive", "pairwise", ... */
int prec_sum_algo_parse(const char *name, prec_sum_algo *out); /* 0, or -1 */
const char *prec_sum_algo_names(void); /* "recursive, pairwise, kahan, neumaier, blocked, wide" */

typedef struct {
    prec_sum_algo algo;
    prec_format acc;        /* accumulator format: every operation rounds into it */
    prec_format addend;     /* format the addends are in.  Kahan and Neumaier need
                               addends that are values of acc: when addend is not
                               contained in acc they round each addend into acc
                               first (and their bound counts that rounding) */
    prec_rounding rounding; /* how every operation rounds */
    size_t block;           /* blocked: block size b >= 1 (0 means 32) */
    prec_format wide;       /* wide: format of the running sum (PREC_FP32 usual) */
    prec_rng *rng;          /* random bits for PREC_SR, one draw per rounding;
                               NULL means a private stream with seed 0 */
} prec_sum_config;

/* Defaults: recursive, addends in acc, RNE, block 32, wide fp32, rng NULL. */
prec_sum_config prec_sum_config_default(prec_format acc);

/* True when every value of format inner is a value of format outer. */
bool prec_format_contains(prec_format outer, prec_format inner);

/* What happened during a sum, for the studies (optional: pass NULL). */
typedef struct {
    size_t additions;  /* rounded additions performed (compensation steps excluded) */
    size_t stagnant;   /* additions of a nonzero addend that left the sum unchanged */
    bool nonfinite;    /* an intermediate overflowed to inf or became NaN */
} prec_sum_stats;

/* The sum of x[0..n) (n = 0 gives +0).  A config naming an unknown algorithm
 * or format gives NaN. */
double prec_sum(const double *x, size_t n, const prec_sum_config *cfg, prec_sum_stats *stats);

/* out[i] = x[i] rounded into f (for SR, rng supplies the bits; may be NULL
 * for the other modes).  out may equal x. */
void prec_round_array(double *out, const double *x, size_t n, prec_format f, prec_rounding r, prec_rng *rng);

typedef struct {
    prec_format acc;        /* products (without FMA) and the running sum round into acc */
    prec_rounding rounding;
    bool fma;               /* s = fma(x_i, y_i, s) rounded once, instead of s + fl(x_i y_i) */
    prec_rng *rng;          /* as in prec_sum_config */
} prec_dot_config;

/* Recursive dot product sum_i x[i] y[i] in order i = 0, 1, ..., n-1. */
double prec_dot(const double *x, const double *y, size_t n, const prec_dot_config *cfg);

#ifdef __cplusplus
}
#endif
#endif
