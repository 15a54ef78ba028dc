/* kernels/check/compare_layernorm.h — LayerNorm's outputs against the MPFR
 * reference (reference/layernorm.h), with bounds for a described kernel:
 * what `ulpscope check` reports for its own kernels (check_layernorm.c
 * describes each variant) and what `ulpscope verify layernorm` reports for a
 * kernel the user describes.
 *
 * The bound replays, per row of C, on kval numbers (precision/kval.h):
 *   forward   mean and variance by one of three algorithms, the sums in acc
 *             with the longest rounding chain fwd_depth:
 *               two-pass  mean = sum x / C, then sum (x - mean)^2 / C; with
 *                         D_k = x_k - mean^ (computed mean), sum D_k^2 =
 *                         sum (x_k - mean)^2 + C (mean^ - mean)^2 exactly, so
 *                         the mean's error enters at second order, C e^2, and
 *                         each term carries its subtraction's rounding
 *               one-pass  sum x and sum x^2 together, var = E[x^2] - mean^2
 *               Welford   per-thread updates over a strided share (threads x
 *                         vec elements per step), then Chan et al.'s pairwise
 *                         combination over a butterfly of 32 lanes per warp
 *                         and one over the warps, replayed thread by thread;
 *                         threads = 1: one sequential Welford pass
 *             rstd = rsqrt(var + eps) (rsqrt_ulps), y = round((x - mean) rstd
 *             gain + bias) with every elementwise step in fp32;
 *   backward  g = gain dy, a = sum g / C, b = sum g xhat / C (bwd_depth),
 *             dx = round(rstd (g - a - xhat b)); dgain[c] = sum_rows dy xhat,
 *             dbias[c] = sum_rows dy (col_depth), each rounded to storage.
 * The backward reads the mean and rstd the forward stored when they are
 * given (their actual errors are then known), else the forward's replay. */
#ifndef ULPSCOPE_KERNELS_CHECK_COMPARE_LAYERNORM_H
#define ULPSCOPE_KERNELS_CHECK_COMPARE_LAYERNORM_H

#include "kernels/check/check.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { KCMP_LN_TWO_PASS = 0, KCMP_LN_ONE_PASS, KCMP_LN_WELFORD } kcmp_ln_variance;

typedef struct {
    prec_format storage;       /* x, gain, bias, y, dy, dx, dgain, dbias */
    prec_format acc;           /* the sums' format, and Welford's arithmetic (the GPU kernels: fp32) */
    kcmp_ln_variance variance;
    int64_t fwd_depth;         /* two-pass, one-pass: longest rounding chain of the row sums */
    int welford_threads;       /* Welford: 1, or a multiple of 32 up to 1024 */
    int welford_vec;           /* Welford: consecutive elements a thread takes per step */
    int64_t bwd_depth;         /* the backward's row sums */
    int64_t col_depth;         /* dgain's and dbias's sums over rows */
    double rsqrt_ulps;
    double eps;
} kcmp_layernorm_kernel;

/* x (N, C); gain, bias (C) or NULL (1, 0); dy (N, C) or NULL (no backward).
 * Outputs as the kernel wrote them, NULL ones not compared: y (N, C), mean,
 * rstd (N, fp32), dx (N, C), dgain, dbias (C).  The backward reads mean and
 * rstd when given. */
typedef struct {
    int64_t N, C;
    const double *x, *gain, *bias, *dy;
    const double *y, *mean, *rstd, *dx, *dgain, *dbias;
} kcmp_layernorm_data;

#define KCMP_LAYERNORM_MAX_ROWS 6
/* Fills rows[] (finished) in the order y, mean, rstd, dx, dgain, dbias for
 * the outputs given; returns how many, or -1 when out of memory. */
int kcmp_layernorm(const kcmp_layernorm_kernel *k, const kcmp_layernorm_data *d, const char *shape,
                   kcheck_acc rows[KCMP_LAYERNORM_MAX_ROWS]);

/* How `ulpscope check` describes its own kernel at (storage f, variant) for
 * an (N, C) input (check_layernorm.c: links the kernels). */
kcmp_layernorm_kernel kcheck_layernorm_kernel(prec_format f, int variant, int64_t N, int64_t C);

#ifdef __cplusplus
}
#endif
#endif
