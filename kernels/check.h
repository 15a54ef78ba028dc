/* kernels/check.h — the harness every op's check reports through.
 *
 * An op's check draws fresh random inputs (kcheck_seed), poisons its outputs
 * (NaN patterns) before the launch, runs the kernel at (path, variant),
 * copies the outputs back, computes the MPFR reference from the exact values
 * the kernel saw, and for each element i computes a bound B_i from the
 * inputs (accumulation precision and output rounding included; bounds.h).
 * It then reports, per output tensor and shape, a kcheck_row. */
#ifndef ULPSCOPE_KERNELS_CHECK_H
#define ULPSCOPE_KERNELS_CHECK_H

#include <stdint.h>

#include "kernels/registry.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *output;      /* output tensor: "y", "dx", "dgamma", ... */
    char shape[96];          /* "N=37 C=768" */
    int64_t n;               /* elements compared */
    double unit_roundoff;    /* u of the path's storage format: the unit errors are quoted in */
    /* Errors in units of u, each element's error divided by its own scale s_i
     * (the magnitude its bound is proportional to, e.g. sum |a_k b_k| for a dot
     * product, or |ref_i| for an elementwise op): e_i = |got_i - ref_i| / (u s_i). */
    double max_err_u;
    double rms_err_u;
    double max_bound_u;      /* max_i B_i / (u s_i): the worst-case bound, same units */
    double rms_bound_u;      /* probabilistic bound on the RMS error, same units */
    double worst_ratio;      /* max_i |got_i - ref_i| / B_i; <= 1 passes */
    int64_t worst_index;     /* element achieving worst_ratio */
    char worst_detail[256];  /* got, ref and the inputs that produced that element */
    int64_t nonfinite;       /* outputs that were NaN/inf where the reference is finite
                                (unwritten, poisoned elements show up here) */
    int pass;                /* worst_ratio <= 1, rms within its bound, nonfinite == 0 */
} kcheck_row;

/* Accumulates one element into a row being built (helpers for op checks). */
typedef struct {
    kcheck_row row;
    double sum_sq_err_u;
    double sum_sq_bound_u;
} kcheck_acc;

void kcheck_acc_init(kcheck_acc *acc, const char *output, const char *shape, double unit_roundoff);
/* got, ref: the element; bound: B_i (absolute); scale: s_i (> 0); detail_fn
 * writes the element's inputs into the row's worst_detail when it becomes the
 * worst (may be NULL). */
void kcheck_acc_add(kcheck_acc *acc, int64_t i, double got, double ref, double bound, double scale,
                    double rms_bound_scale);
/* Sets detail for the current worst element (call after add when
 * acc->row.worst_index == i). */
void kcheck_acc_detail(kcheck_acc *acc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Finishes means and the verdict, and reports the row to ctx. */
void kcheck_acc_report(kcheck_ctx *ctx, kcheck_acc *acc);

void kcheck_report(kcheck_ctx *ctx, const kcheck_row *row);
uint64_t kcheck_seed(kcheck_ctx *ctx);  /* a fresh seed for this (op, path, variant) */

#ifdef __cplusplus
}
#endif
#endif
