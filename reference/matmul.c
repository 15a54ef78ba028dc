/* reference/matmul.c — C = A B with every element correctly rounded (see
 * matmul.h).
 *
 * Each C(m,n) is a dot product of doubles.  The products are exact (106
 * bits) and H2's superaccumulator (reference/exact.h) adds them without any
 * rounding, so the only rounding is the final one to double: correctly
 * rounded whatever K, order or cancellation, with no precision loop. */
#include "reference/matmul.h"

#include "reference/exact.h"

static double dot(const ref_ctx *ctx, long K, const double *x, long incx, const double *y,
                  long incy)
{
    exact_acc acc;
    exact_acc_init(&acc);
    long terms = (long)ref_terms(ctx, (size_t)K);
    for (long k = 0; k < terms; k++) exact_acc_add_product(&acc, x[k * incx], y[k * incy]);
    return exact_acc_round(&acc, ctx->bug == REF_BUG_TRUNCATE ? PREC_RZ : PREC_RNE);
}

double ref_matmul_dot(long K, const double *x, long incx, const double *y, long incy)
{
    ref_ctx ctx = REF_CTX_DEFAULT;
    return dot(&ctx, K, x, incx, y, incy);
}

void ref_matmul(ref_ctx *ctx, long M, long N, long K,
                const double *A, long a_rs, long a_cs,
                const double *B, long b_rs, long b_cs,
                double *C, long ldc)
{
    for (long m = 0; m < M; m++)
        for (long n = 0; n < N; n++)
            C[m * ldc + n] = dot(ctx, K, A + m * a_rs, a_cs, B + n * b_cs, b_rs);
}
