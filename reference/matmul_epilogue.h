/* reference/matmul_epilogue.h — MPFR reference for a matmul with its epilogue
 * (ref.h conventions), the reference of kernels/matmul.cu:
 *
 *     Y[m][n] = epi(alpha * sum_k A(m,k) B(k,n) + beta * C[m][n] + bias[n])
 *
 * epi is the identity or the tanh form of GELU that cuBLASLt's epilogue
 * implements, with exact constants:
 *     gelu(z) = z/2 (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))).
 * The dot product is exact (reference/exact.h); alpha, beta, C and bias enter
 * exactly; GELU goes through ball arithmetic and each output runs the Ziv
 * loop, so every Y is correctly rounded to double.  C and bias may be NULL.
 * Strides as in reference/matmul.h: A(m,k) = A[m*a_rs + k*a_cs],
 * B(k,n) = B[k*b_rs + n*b_cs], Y[m*ldy + n], C with the same ldy. */
#ifndef ULPSCOPE_REFERENCE_MATMUL_EPILOGUE_H
#define ULPSCOPE_REFERENCE_MATMUL_EPILOGUE_H

#include "reference/ref.h"

#ifdef __cplusplus
extern "C" {
#endif

void ref_matmul_epilogue(ref_ctx *ctx, long M, long N, long K, const double *A, long a_rs, long a_cs,
                         const double *B, long b_rs, long b_cs, double alpha, const double *C, double beta,
                         const double *bias, int gelu, double *Y, long ldy);

/* r = an exact value held in an mpfr_t of any precision (e.g. from
 * exact_acc_get_mpfr): the midpoint rounded to r's precision, the radius one
 * ulp of it when that rounding was inexact.  The other references of
 * kernels/matmul.cu's users (cross-entropy, attention, polar express) use it
 * for their exact dot products. */
void ref_ball_set_exact(ref_ball *r, mpfr_srcptr exact);

/* r = gelu(a) (tanh form, exact constants) as a ball. */
void ref_ball_gelu_tanh(ref_ball *r, const ref_ball *a);

#ifdef __cplusplus
}
#endif
#endif
