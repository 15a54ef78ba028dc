/* reference/matmul.h — MPFR reference for matmul (ref.h conventions). */
#ifndef ULPSCOPE_REFERENCE_MATMUL_H
#define ULPSCOPE_REFERENCE_MATMUL_H

#include "reference/ref.h"

#ifdef __cplusplus
extern "C" {
#endif

/* sum_k x[k*incx] y[k*incy]: exact products, one rounding to double (the
 * 1 x K x 1 matmul). */
double ref_matmul_dot(long K, const double *x, long incx, const double *y, long incy);

/* C[M][N] = A[M][K] B[K][N], each element correctly rounded.  Strides make
 * transposes free: A(m,k) = A[m*a_rs + k*a_cs], B(k,n) = B[k*b_rs + n*b_cs],
 * C(m,n) = C[m*ldc + n].  Exact at any precision (a product of two doubles
 * fits in 106 bits and reference/exact.h's superaccumulator adds them
 * without rounding), so no precision loop runs: ctx->prec is not used, only
 * ctx->bug (the tests' twins).  NaN/inf follow exact.h. */
void ref_matmul(ref_ctx *ctx, long M, long N, long K,
                const double *A, long a_rs, long a_cs,
                const double *B, long b_rs, long b_cs,
                double *C, long ldc);

#ifdef __cplusplus
}
#endif
#endif
