/* precision/bounds.h — rounding-error bounds computed from the data.
 *
 * A tolerance in ulpscope is one of these bounds, never a tuned constant.
 * All are absolute bounds on |computed - exact|, valid while no intermediate
 * overflows.  Underflow: an addition of two values of a format that keeps
 * subnormals is exact when it underflows, so it costs nothing; every other
 * rounding that may underflow (a product, a conversion, an addition of an
 * addend wider than the accumulator, anything with subnormals flushed) adds
 * eta = prec_bound_eta(format, rounding) to the bound, carried through the
 * later roundings.  A bound is +inf when it carries no information (n u >= 1
 * in gamma_n): an honest "nothing can be said", which is also what
 * stagnation at large n looks like to a worst-case analysis.
 *
 * Unit roundoff per rounding mode (prec_bound_unit): u = 2^-p for round to
 * nearest; 2u (one ulp, relative) for RZ/RU/RD and for stochastic rounding,
 * whose error can be anything below one ulp.
 *
 * Worst case (Higham, Accuracy and Stability of Numerical Algorithms, 2nd
 * ed., 2002, ch. 3-4), S = sum |x_i|, s = the exact sum:
 *   recursive   gamma_{n-1} S
 *   pairwise    gamma_{ceil(log2 n)} S
 *   blocked     gamma_{(b-1) + (ceil(n/b)-1)} S   (b = min(block, n))
 *   wide        gamma_{n-1}(u_wide) S + u_acc (|s| + gamma_{n-1}(u_wide) S)
 *   neumaier    u|s| + gamma_{n-1}^2 S        (Ogita, Rump, Oishi 2005,
 *               Prop. 4.5; round to nearest only)
 *   kahan       (2u + 4 n u^2) S              (Knuth/Goldberg: 2u + O(n u^2);
 *               the second-order coefficient written out, higher orders
 *               neglected; round to nearest only)
 *   dot         gamma_n sum |x_i y_i|          (with or without FMA)
 * Kahan and Neumaier rely on exact error-free transformations, which only
 * round-to-nearest guarantees: in other modes their bound is NaN (none).
 *
 * Probabilistic (Higham and Mary, SIAM J. Sci. Comput. 41 (2019) A2815):
 * if the rounding errors are independent with mean zero, an algorithm in
 * which every term passes through at most p roundings satisfies
 *     |computed - exact| <= gamma~_p(lambda) S,
 *     gamma~_p(lambda) = exp(lambda sqrt(p) u + p u^2 / (1 - u)) - 1,
 * with probability at least 1 - 2 m exp(-lambda^2 (1-u)^2 / 2), m = number
 * of terms.  For round to nearest this is a *model* (it fails for constant
 * data, where errors are systematic); stochastic rounding makes the errors
 * mean-zero and mean-independent, so with u -> 2u the bound is a theorem
 * (Connolly, Higham and Mary, SIAM J. Sci. Comput. 43 (2021) A566).  For the
 * directed modes the errors are biased and no such bound exists (NaN).
 */
#ifndef ULPSCOPE_PRECISION_BOUNDS_H
#define ULPSCOPE_PRECISION_BOUNDS_H

#include <stddef.h>

#include "precision/format.h"
#include "precision/sum.h"

#ifdef __cplusplus
extern "C" {
#endif

/* gamma_n(u) = n u / (1 - n u); +inf when n u >= 1; 0 for n <= 0. */
double prec_gamma(double n, double u);

/* The unit roundoff that bounds one rounding into f in mode m: u, or 2u for
 * directed and stochastic rounding (see the file comment). */
double prec_bound_unit(prec_format f, prec_round_mode m);

/* The absolute error of one rounding into f that underflows: half the
 * smallest subnormal for round to nearest, the whole of it for directed and
 * stochastic rounding, the smallest normal when subnormals are flushed. */
double prec_bound_eta(prec_format f, prec_rounding r);

/* Most roundings any single addend passes through in algorithm cfg->algo on
 * n terms (recursive n-1, pairwise ceil(log2 n), blocked (b-1)+(ceil(n/b)-1),
 * wide n-1 in the wide format; Kahan/Neumaier: n-1 as for recursive). */
double prec_sum_depth(const prec_sum_config *cfg, size_t n);

/* Worst-case bound on |prec_sum(x, n, cfg) - sum x_i| given S = sum |x_i|
 * and abs_exact = |sum x_i| (pass exact values, e.g. from reference/exact.h;
 * exact_sum_abs rounds S up). */
double prec_sum_bound(const prec_sum_config *cfg, size_t n, double sum_abs, double abs_exact);

/* How far the probabilistic bound can be trusted for a rounding mode. */
typedef enum {
    PREC_PROB_NONE = 0, /* directed rounding: biased errors, no bound */
    PREC_PROB_MODEL,    /* round to nearest: holds if the errors behave randomly */
    PREC_PROB_PROVED    /* stochastic rounding: a theorem */
} prec_prob_status;
prec_prob_status prec_prob_status_of(prec_round_mode m);
const char *prec_prob_status_name(prec_prob_status s); /* "none", "model", "proved" */

/* lambda such that 2 m exp(-lambda^2 (1-u)^2 / 2) = fail_prob (m terms). */
double prec_prob_lambda(double m, double fail_prob, double u);
/* The failure probability 2 m exp(-lambda^2 (1-u)^2 / 2), capped at 1. */
double prec_prob_fail(double m, double lambda, double u);
/* gamma~_p(lambda) = exp(lambda sqrt(p) u + p u^2 / (1 - u)) - 1. */
double prec_gamma_tilde(double p, double lambda, double u);

/* Bound holding with probability >= 1 - fail_prob (see prec_prob_status_of
 * for the sense of "probability"): gamma~_p(lambda) S with p the algorithm's
 * depth and u the mode's unit; for Kahan and Neumaier, whose error does not
 * grow with n to first order, the worst-case bound.  NaN for directed modes. */
double prec_sum_prob_bound(const prec_sum_config *cfg, size_t n, double sum_abs, double abs_exact,
                           double fail_prob);

/* Worst case for prec_dot: gamma_n(u) sum |x_i y_i|. */
double prec_dot_bound(const prec_dot_config *cfg, size_t n, double sum_abs_prod);
/* Probabilistic counterpart: gamma~_n(lambda) sum |x_i y_i|. */
double prec_dot_prob_bound(const prec_dot_config *cfg, size_t n, double sum_abs_prod, double fail_prob);

/* ---- per-kernel bounds for the GPU checks ---------------------------------
 *
 * One output element of a dot product / matmul / split-K / fp8 GEMM:
 *     y = scale * sum_{i<k} a_i b_i,  inputs the exact values the kernel read,
 * products formed with relative error u_prod (0 when exact: bf16, fp16 or
 * fp8 operands multiplied into fp32), summed in any order and any tree
 * shape with each addition rounded with unit u_acc (a k-term sum in any
 * order has at most k-1 roundings per term; gamma_k leaves one for an
 * initial accumulator value such as a bias or a split-K partial), then
 * scale_roundings further multiplications of the whole sum (fp8 dequant
 * scales, alpha), each with u_acc, then one rounding into the output with
 * u_out (0 when the output is the accumulator).  With
 *     G = (1 + u_prod) (1 + gamma_k(u_acc)) (1 + u_acc)^scale_roundings - 1,
 *     P = sum |scale a_i b_i|  (scales included),
 * the bound is
 *     B = G P + u_out (|y| + G P) + eta,
 *     eta = (k + scale_roundings) eta_acc (1 + u_out) + eta_out,
 * eta_acc / eta_out being the absolute error of a rounding that underflows
 * in the accumulator / output format: half the smallest subnormal (the
 * smallest normal where subnormals are flushed to zero).
 * A matrix unit that truncates or aligns to fewer bits than IEEE fp32 passes
 * its own u_acc (e.g. 2^-23 for truncation): the model is the caller's
 * claim, the bound then follows from it. */
typedef struct {
    int k;               /* terms in the reduction */
    double u_prod;       /* relative error of each product; 0 when exact */
    double u_acc;        /* unit of each accumulation rounding */
    int scale_roundings; /* roundings of the whole sum before the output */
    double u_out;        /* unit of the output rounding; 0 when none */
    double eta_acc;      /* absolute error of an underflowing product or scaling */
    double eta_out;      /* absolute error of an underflowing output rounding */
} prec_dot_kernel_model;

/* The usual model: inputs in format in, products exact when 2 p_in <= p_acc
 * (else rounded RNE into acc, u_prod = u_acc) except for underflow (eta_acc
 * nonzero when a product of two subnormals of `in` can fall below acc's
 * normal range), RNE accumulation in acc, output RNE into out (u_out = 0
 * when out == acc), no scale roundings: set scale_roundings for fp8 scales
 * that are not powers of two. */
prec_dot_kernel_model prec_dot_kernel_model_for(int k, prec_format in, prec_format acc, prec_format out);
/* B above; sum_abs_prod = P, abs_exact = |y| exact. */
double prec_bound_dot_kernel(const prec_dot_kernel_model *m, double sum_abs_prod, double abs_exact);

/* A row reduction in a norm or softmax kernel: n terms t_i, each computed
 * with relative error at most term_rel_err (0 for the inputs themselves;
 * u_acc for x_i^2 rounded; a few ulps of exp for softmax), summed in any
 * order in a format with unit u_acc:
 *     |computed - exact| <= ((1 + term_rel_err)(1 + gamma_{n-1}(u_acc)) - 1) sum |t_i|.
 * What the kernel then does with the sum (divide, rsqrt, scale) adds its
 * own factors, which the caller composes. */
double prec_bound_row_reduce(size_t n, double u_acc, double term_rel_err, double sum_abs_terms);

#ifdef __cplusplus
}
#endif
#endif
