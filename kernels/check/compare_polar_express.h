/* kernels/check/compare_polar_express.h — Muon's orthogonalisation
 * (kernels/polar_express.h) against the MPFR reference
 * (reference/polar_express.h), one stage at a time, with the bound of a
 * described kernel: what `ulpscope check polar_express` reports for its own
 * kernels (check_polar_express.c) and what `ulpscope trace` reports for a
 * replayed optimizer.muon (studies/trace_verdict.c).
 *
 * Stages.  The normalisation X0 = G / (1.02 |G|_F + 1e-6), then each step
 * from the kernel's own previous iterate: the step's reference is the exact
 * step from that same input, so each bound is about one step's roundings (an
 * end-to-end bound would multiply them by the polynomial's gain, |a| up to 8
 * in the first step).
 *
 * Bound of the normalisation: the sum of squares in fp32 (longest rounding
 * chain norm_depth), sqrt (0.5 ulp), the norm rounded to norm_arith, times
 * 1.02 and + 1e-6 and the division in norm_arith (ours: fp32; PyTorch's
 * X / (X.norm() * 1.02 + 1e-6) on a bf16 X: bf16, its norm accumulated in
 * fp32), the rounding into the storage format.
 *
 * Bound of one step (wide form; the tall form is the same analysis on X^T,
 * whose Gram edge is cols; either_form: the larger of the two bounds,
 * element by element, for a kernel whose form is not known): with G(K) the GEMM's accumulation factor
 * (prec_dot_factor of `gemm` over K terms) and u the storage format's unit
 * roundoff,
 *   A = fl(X X^T):      E_A = G(n) P_A + u (|A| + G(n) P_A),  P_A = |X||X|^T
 *   B = fl(c A A + b A): the product of the computed A's,
 *       sum_k |A_ik| E_A_kj + E_A_ik |A_kj| + E_A_ik E_A_kj, plus
 *       G(m) sum_k (|A| + E_A)_ik (|A| + E_A)_kj; then alpha = c and
 *       beta = b in fp32 (kval), rounded to the storage format
 *   X' = fl(B X + a X) (fused) or fl(a X + fl(B X)) (split): E_B |X| plus
 *       G(m) (|B| + E_B)|X|, then the epilogue's roundings (kval).
 * An epilogue that fuses c (A A) + b A or B X + a X into fma's rounds less
 * than this replay (the CPU backend's does): the bound covers it.  The
 * accumulator's roundings follow the GEMM's model (truncating on tensor
 * cores), so the RMS verdict uses the worst case as well. */
#ifndef ULPSCOPE_KERNELS_CHECK_COMPARE_POLAR_EXPRESS_H
#define ULPSCOPE_KERNELS_CHECK_COMPARE_POLAR_EXPRESS_H

#include "kernels/check/check.h"
#include "precision/dot_bound.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    prec_format storage;   /* G, X, A, B and every iterate */
    int tall;              /* Gram matrix X^T X [cols, cols] (else X X^T [rows, rows]) */
    int fused;             /* X' = B X + a X in one GEMM (else T = fl(B X), then a X + T) */
    prec_dot_model gemm;   /* each GEMM's dot product; its depth is taken as the GEMM's K */
    int64_t norm_depth;    /* longest fp32 rounding chain of the normalisation's sum of squares */
    prec_format norm_arith; /* the normalisation's arithmetic after the sum (ours: fp32) */
    int either_form;       /* the form is not known: the larger of the wide and the tall bound (tall ignored) */
} kcmp_pe_kernel;

/* One stage: step 0 is the normalisation (x = G, a b c unused), steps 1 to
 * 5 the iteration (x = the kernel's previous iterate, a b c the fp32
 * coefficients it used); y the stage's output as the kernel wrote it;
 * [rows, cols] row-major. */
typedef struct {
    int64_t rows, cols;
    int step;
    const double *x;
    double a, b, c;
    const double *y;
} kcmp_pe_data;

/* Fills row (finished: kcheck_acc_finish) for the stage's output, named
 * "x<step>"; returns 1, or -1 when out of memory (or step is not 0 to 5). */
int kcmp_polar_express(const kcmp_pe_kernel *k, const kcmp_pe_data *d, const char *shape, kcheck_acc *row);

/* How `ulpscope check` describes its own kernel at (path, variant: a
 * kpe_variant) for [rows, cols] inputs: kmatmul's GEMMs (the model of
 * kmatmul_error_factor), the kernels' two-stage norm (check_polar_express.c). */
kcmp_pe_kernel kcheck_polar_express_kernel(kpath path, int variant, int64_t rows, int64_t cols);

#ifdef __cplusplus
}
#endif
#endif
