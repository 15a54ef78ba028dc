/* kernels/check/compare_matmul.h — a GEMM with epilogue,
 *     y = round_out(epi(alpha A B + beta C)),  epi: + bias, then GELU (tanh form),
 * against the MPFR reference (reference/matmul.h, reference/matmul_epilogue.h),
 * with the bound of a described kernel: what `ulpscope check` reports for its
 * matmul family (check_matmul.c describes each path, accumulation and
 * variant) and what `ulpscope verify matmul` reports for a GEMM the user
 * describes.
 *
 * The bound per element, from the actual inputs, P = sum_k |a_k b_k|: K is
 * cut into slices of `slice` consecutive terms (split-K; one slice
 * otherwise); each slice's dot carries the error G P_s of its accumulation
 * model (precision/dot_bound.h), the slices are added in slice_sum (depth
 * slices - 1); then the epilogue is replayed on kval numbers in fp32:
 * alpha (exact when 1), + beta C, optionally one rounding of that into y's
 * format before bias and GELU (split epilogues; cuBLASLt's fused one as
 * observed, check_matmul.c), + bias, GELU (tanh within tanh_rel_err beyond
 * about 5 fp32 roundings; sup |gelu'| = 1.12899 carries the argument's
 * error), the output rounding.  Truncating models have no probabilistic
 * bound: their RMS bound is the worst case. */
#ifndef ULPSCOPE_KERNELS_CHECK_COMPARE_MATMUL_H
#define ULPSCOPE_KERNELS_CHECK_COMPARE_MATMUL_H

#include "kernels/check/check.h"
#include "precision/dot_bound.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    prec_format out;       /* y's format (C and bias are held in it too) */
    int64_t slice;         /* split-K slice length (>= K: one slice) */
    prec_dot_model dot;    /* accumulation of a slice of `slice` terms */
    prec_dot_model dot_last; /* ... of the last slice when it is shorter (its ROUNDED depth differs) */
    prec_format slice_sum; /* format the slices are added in */
    double alpha, beta;
    int gelu;
    int round_product;     /* alpha A B + beta C rounded to `out` before bias and GELU (when there are any) */
    double tanh_rel_err;   /* GELU's tanh beyond its fp32 roundings: 0 (tanhf) or 2^-10.987 (tanh.approx.f32) */
} kcmp_matmul_kernel;

/* A[m,k] = a[m a_rs + k a_cs], B[k,n] = b[k b_rs + n b_cs] (any layout);
 * c (M, N) or NULL (beta = 0 then), bias (N) or NULL; y (M, N) as the
 * kernel wrote it.  note: appended to the worst element's detail (the
 * cuBLASLt algorithm that ran, ...) or NULL. */
typedef struct {
    int64_t M, N, K;
    const double *a;
    long a_rs, a_cs;
    const double *b;
    long b_rs, b_cs;
    const double *c, *bias, *y;
    const char *note;
} kcmp_matmul_data;

/* Fills row (finished: kcheck_acc_finish) for y; returns 1, or -1 when out
 * of memory. */
int kcmp_matmul(const kcmp_matmul_kernel *k, const kcmp_matmul_data *d, const char *shape, kcheck_acc *row);

/* How `ulpscope check` describes its own GEMM at (path, accum: a
 * kmatmul_accum, variant: a kmatmul_variant) for this epilogue and K
 * (check_matmul.c: links the kernels). */
kcmp_matmul_kernel kcheck_matmul_kernel(kpath path, int accum, int variant, int64_t K, double alpha, double beta,
                                        int gelu);

#ifdef __cplusplus
}
#endif
#endif
