/* kernels/check/compare_cross_entropy.h — cross-entropy over materialised
 * logits, loss_i = lse(z_i) - z_i[t_i] and dlogits_ij = (softmax(z_i)_j -
 * [j = t_i]) dloss, against the MPFR reference (reference/cross_entropy.h),
 * with bounds for a described kernel: what `ulpscope check cross_entropy`
 * reports (check_cross_entropy.c) and what `ulpscope verify cross_entropy`
 * reports for a kernel the user describes.  The replays of the row's
 * normaliser and of one dlogit are also the fused linear check's.
 *
 * Bound per row: z - max rounded in fp32, expf (2 ulps) and logf (1 ulp)
 * (CUDA C++ Programming Guide), the sum in acc with its longest rounding
 * chain, lse = max + log(sum), loss = lse - z_t; then dz = (expf(z - lse) -
 * [j = t]) dloss and its store.  The online variant's terms are also
 * rescaled once per later maximum in their thread and per tree level above
 * it (at most the sum's depth r): 2(r + 1) + r/2 ulps per term and an
 * argument error of u (|z - max| + 2 range).  An ignored row (target -1)
 * must hold exact zeros.
 *
 * Soft-cap c > 0 (an fp32 value): each logit l read becomes z = c tanhf(l / c)
 * (the quotient rounded, tanhf within 2 ulps, the product rounded: those
 * errors enter the row's sums as the logits' own), and the gradient is
 * ((p - [j = t]) (1 - th th)) dloss with th = tanhf(l / c), each operation
 * rounded in fp32, before the store. */
#ifndef ULPSCOPE_KERNELS_CHECK_COMPARE_CROSS_ENTROPY_H
#define ULPSCOPE_KERNELS_CHECK_COMPARE_CROSS_ENTROPY_H

#include "kernels/check/check.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    prec_format logits; /* logits' and dlogits' format */
    prec_format acc;    /* the row sum's format (the GPU kernels: fp32) */
    int64_t depth;      /* longest rounding chain of the sum over V */
    int online;         /* online softmax: one pass, terms rescaled at each new maximum */
    double dloss;       /* the loss gradient the dlogits are scaled by (an fp32 value) */
    double softcap;     /* logit soft-cap (an fp32 value; 0: none) */
} kcmp_ce_kernel;

/* logits (N, V); targets (N), -1 for an ignored row; outputs as the kernel
 * wrote them, NULL ones not compared: loss (N, fp32), dlogits (N, V). */
typedef struct {
    int64_t N, V;
    const double *logits;
    const int32_t *targets;
    const double *loss, *dlogits;
} kcmp_ce_data;

#define KCMP_CE_MAX_ROWS 2
/* Fills rows[] (finished) in the order loss, dlogits for the outputs given;
 * returns how many, or -1 when out of memory. */
int kcmp_cross_entropy(const kcmp_ce_kernel *k, const kcmp_ce_data *d, const char *shape,
                       kcheck_acc rows[KCMP_CE_MAX_ROWS]);

/* The row's normaliser lse as the kernel computes it: z[j] the logits it
 * read, each with error ez[j] (NULL: exact) and ez_max their maximum;
 * *m_out gets the row's maximum. */
kval kcmp_ce_row_lse(const kcmp_ce_kernel *k, const double *z, const double *ez, double ez_max, int64_t V,
                     double *m_out);
/* dz_j as the kernel computes and stores it into format store; th: the
 * soft-cap's tanhf(l_j / c) (NULL: no cap), whose 1 - th th multiplies it. */
kval kcmp_ce_dlogit(double zj, double ezj, kval lse, int is_target, const kval *th, double dloss, prec_format store);
/* The soft-cap's replay of a logit l (compare_cross_entropy.h's note):
 * *th = tanhf(l / c), returns z = c th. */
kval kcmp_ce_capped(double l, double cap, kval *th);

/* How `ulpscope check` describes its own kernel at (path, variant) for rows
 * of V (check_cross_entropy.c: links the kernels). */
kcmp_ce_kernel kcheck_cross_entropy_kernel(kpath path, int variant, int64_t N, int64_t V);

#ifdef __cplusplus
}
#endif
#endif
