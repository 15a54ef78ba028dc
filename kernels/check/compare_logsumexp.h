/* kernels/check/compare_logsumexp.h — logsumexp's outputs against the MPFR
 * reference (reference/logsumexp.h), with the bound of a described kernel:
 * what `ulpscope check` reports for its own kernels (check_logsumexp.c) and
 * what `ulpscope verify logsumexp` reports for a kernel the user describes.
 *
 * The bound replays, per row of C: the exact row maximum m, e_c = exp(x_c -
 * m) by the described exponential (check_kexp.h), s = sum e (in acc, longest
 * rounding chain depth), lse = m + log(s) as that variant computes it (fp32;
 * errors quoted against |m| + log(s)); backward dx = round(dlse exp(x -
 * lse)) from the stored lse the kernel read, whose actual error starts the
 * bound. */
#ifndef ULPSCOPE_KERNELS_CHECK_COMPARE_LOGSUMEXP_H
#define ULPSCOPE_KERNELS_CHECK_COMPARE_LOGSUMEXP_H

#include "kernels/check/check.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    prec_format storage; /* x, dx */
    prec_format acc;     /* the row sums' format (ours: fp32) */
    int exp_variant;     /* KCHECK_EXP, KCHECK_EXP2, KCHECK_FAST_EXP (check_kexp.h), with its logarithm */
    int64_t depth;       /* the sum of the exponentials */
} kcmp_lse_kernel;

/* x (N, C); lse (N, fp32): the forward's output, which the backward read;
 * dlse (N, fp32) and dx (N, C) the backward's (NULL: no backward row);
 * forward: compare lse itself. */
typedef struct {
    int64_t N, C;
    const double *x, *lse, *dlse, *dx;
    int forward;
} kcmp_lse_data;

#define KCMP_LSE_MAX_ROWS 2
/* Fills rows[] (finished) in the order lse, dx for the parts given; returns
 * how many, or -1 when out of memory. */
int kcmp_logsumexp(const kcmp_lse_kernel *k, const kcmp_lse_data *d, const char *shape, kcheck_acc rows[KCMP_LSE_MAX_ROWS]);

/* How `ulpscope check` describes its own kernel at (storage f, variant) for
 * rows of C (check_logsumexp.c: links the kernels). */
kcmp_lse_kernel kcheck_logsumexp_kernel(prec_format f, int variant, int64_t C);

#ifdef __cplusplus
}
#endif
#endif
