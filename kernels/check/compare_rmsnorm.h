/* kernels/check/compare_rmsnorm.h — RMSNorm's outputs against the MPFR
 * reference, with bounds for a described kernel: what `ulpscope check`
 * reports for its own kernels (check_rmsnorm.c describes each variant) and
 * what `ulpscope verify` reports for a kernel the user describes.
 *
 * The bound replays this sequence of operations (kernels/rmsnorm.h):
 *   forward   ss = sum x^2 (in acc, longest rounding chain fwd_depth),
 *             ms = ss / C, t = ms + eps, r = rsqrt(t) (rsqrt_ulps ulps),
 *             xn = x r, y = round_storage(xn gain);
 *   backward  dot = sum (gain dy) x (in acc, bwd_depth),
 *             dx = round_storage(r gain dy - (dot r^3 / C) x),
 *             dgain[c] = round_storage(sum_rows x r dy) (in acc, col_depth),
 * with every elementwise step in fp32, or, with stats_in_storage, the
 * squares, ms, t, r and xn rounded to the storage format as well.  The
 * backward reads r: the stored rstd when the kernel wrote one (its actual
 * error is then known), else the forward's replayed bound.  With bwd_xhat
 * the backward is the other common order (PyTorch's, the CPU backend's):
 *             xhat = x r, dot = sum (gain dy) xhat (each product rounded
 *             to fp32 before the sum: covers an fma too),
 *             dx = round_storage((gain dy - xhat (dot / C)) r). */
#ifndef ULPSCOPE_KERNELS_CHECK_COMPARE_RMSNORM_H
#define ULPSCOPE_KERNELS_CHECK_COMPARE_RMSNORM_H

#include "kernels/check/check.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    prec_format storage;   /* x, gain, y, dy, dx, dgain */
    prec_format acc;       /* format of the row and column sums (the GPU kernels: fp32) */
    int stats_in_storage;  /* no upcast: squares, mean, + eps, rsqrt and x r rounded to storage */
    int round_normalized;  /* x r rounded to storage before the gain (Llama; also without upcast) */
    int64_t fwd_depth;     /* longest rounding chain of the sum of squares */
    int64_t bwd_depth;     /* ... of the backward's row dot product */
    int64_t col_depth;     /* ... of dgain's sum over rows */
    double rsqrt_ulps;     /* error of the reciprocal square root, ulps of fp32 */
    double eps;
    int bwd_xhat;          /* the backward in the xhat order (above); 0: the kernels' order */
} kcmp_rmsnorm_kernel;

/* x (N, C); gain (C) or NULL (no gain: y = x r); dy (N, C) or NULL (no
 * backward).  Outputs as the kernel wrote them; a NULL one is not compared:
 * y (N, C), rstd (N), dx (N, C), dgain (C, needs gain). */
typedef struct {
    int64_t N, C;
    const double *x, *gain, *dy;
    const double *y, *rstd, *dx, *dgain;
} kcmp_rmsnorm_data;

#define KCMP_RMSNORM_MAX_ROWS 4
/* Fills rows[] (finished: kcheck_acc_finish) in the order y, rstd, dx, dgain,
 * for the outputs given; returns how many, or -1 when out of memory. */
int kcmp_rmsnorm(const kcmp_rmsnorm_kernel *k, const kcmp_rmsnorm_data *d, const char *shape,
                 kcheck_acc rows[KCMP_RMSNORM_MAX_ROWS]);

/* How `ulpscope check` describes its own kernel at (storage f, variant) for
 * an (N, C) input (check_rmsnorm.c: links the kernels). */
kcmp_rmsnorm_kernel kcheck_rmsnorm_kernel(prec_format f, int variant, int64_t N, int64_t C);

#ifdef __cplusplus
}
#endif
#endif
