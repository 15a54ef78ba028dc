/* reference/polar_express.c — see polar_express.h. */
#include "reference/polar_express.h"

#include <stdlib.h>

#include "reference/exact.h"
#include "reference/matmul_epilogue.h"

void ref_polar_express_normalize(ref_ctx *ctx, long rows, long cols, const double *G, double safety, double eps,
                                 double *X0)
{
    const long n = rows * cols;
    exact_acc acc;
    exact_acc_init(&acc);
    const size_t terms = ref_terms(ctx, (size_t)n);
    for (size_t i = 0; i < terms; i++) exact_acc_add_product(&acc, G[i], G[i]);
    mpfr_t sumsq;
    mpfr_init2(sumsq, 64);
    exact_acc_get_mpfr(&acc, sumsq);
    mpfr_prec_t p = ref_first_prec(ctx);
    ref_ball den, x;
    ref_ball_init(&den, p);
    ref_ball_init(&x, p);
    for (;;) {
        ref_ball_set_exact(&den, sumsq);
        ref_ball_sqrt(&den, &den);
        ref_ball_mul_d(&den, &den, safety);
        ref_ball_add_d(&den, &den, eps);
        long undecided = 0;
        for (long i = 0; i < n; i++) {
            ref_ball_set_d(&x, G[i]);
            ref_ball_div(&x, &x, &den);
            undecided += !ref_output(ctx, &x, &X0[i]);
        }
        if (!undecided) break;
        if (!(p = ref_next_prec(ctx, p))) {
            ctx->unproven += undecided;
            break;
        }
        ref_ball_set_prec(&den, p);
        ref_ball_set_prec(&x, p);
    }
    ref_ball_clear(&den);
    ref_ball_clear(&x);
    mpfr_clear(sumsq);
}

/* The wide form on X [m, n] with m <= n: A = X X^T (exact), B = b A + c A^2,
 * out = a X + B X, written to out[i * out_rs + j * out_cs]. */
static void step_wide(ref_ctx *ctx, long m, long n, const double *X, double a, double b, double c, double *out,
                      long out_rs, long out_cs)
{
    mpfr_t *aex = malloc((size_t)(m * m) * sizeof *aex);
    if (!aex) abort();
    exact_acc acc;
    const size_t kn = ref_terms(ctx, (size_t)n), km = ref_terms(ctx, (size_t)m);
    for (long i = 0; i < m; i++)
        for (long j = 0; j < m; j++) {
            exact_acc_init(&acc);
            for (size_t k = 0; k < kn; k++) exact_acc_add_product(&acc, X[i * n + (long)k], X[j * n + (long)k]);
            mpfr_init2(aex[i * m + j], 64);
            exact_acc_get_mpfr(&acc, aex[i * m + j]);
        }
    mpfr_prec_t p = ref_first_prec(ctx);
    ref_ball *A = ref_balls_new((size_t)(m * m), p), *B = ref_balls_new((size_t)(m * m), p);
    ref_ball *terms = ref_balls_new((size_t)(m > n ? m : n), p);
    ref_ball s, y;
    ref_ball_init(&s, p);
    ref_ball_init(&y, p);
    for (;;) {
        for (long i = 0; i < m * m; i++) ref_ball_set_exact(&A[i], aex[i]);
        for (long i = 0; i < m; i++)
            for (long j = 0; j < m; j++) {
                for (long k = 0; k < m; k++) ref_ball_mul(&terms[k], &A[i * m + k], &A[k * m + j]);
                ref_ball_sum(&s, terms, km);
                ref_ball_mul_d(&s, &s, c);
                ref_ball_mul_d(&y, &A[i * m + j], b);
                ref_ball_add(&B[i * m + j], &s, &y);
            }
        long undecided = 0;
        for (long i = 0; i < m; i++)
            for (long j = 0; j < n; j++) {
                for (long k = 0; k < m; k++) ref_ball_mul_d(&terms[k], &B[i * m + k], X[k * n + j]);
                ref_ball_sum(&s, terms, km);
                ref_ball_set_d(&y, X[i * n + j]);
                ref_ball_mul_d(&y, &y, a);
                ref_ball_add(&y, &y, &s);
                undecided += !ref_output(ctx, &y, &out[i * out_rs + j * out_cs]);
            }
        if (!undecided) break;
        if (!(p = ref_next_prec(ctx, p))) {
            ctx->unproven += undecided;
            break;
        }
        for (long i = 0; i < m * m; i++) {
            ref_ball_set_prec(&A[i], p);
            ref_ball_set_prec(&B[i], p);
        }
        for (long k = 0; k < (m > n ? m : n); k++) ref_ball_set_prec(&terms[k], p);
        ref_ball_set_prec(&s, p);
        ref_ball_set_prec(&y, p);
    }
    ref_balls_free(A, (size_t)(m * m));
    ref_balls_free(B, (size_t)(m * m));
    ref_balls_free(terms, (size_t)(m > n ? m : n));
    ref_ball_clear(&s);
    ref_ball_clear(&y);
    for (long i = 0; i < m * m; i++) mpfr_clear(aex[i]);
    free(aex);
}

void ref_polar_express_step(ref_ctx *ctx, long rows, long cols, const double *X, double a, double b, double c,
                            double *Xn)
{
    if (rows <= cols) {
        step_wide(ctx, rows, cols, X, a, b, c, Xn, cols, 1);
        return;
    }
    /* tall: p(X) = p(X^T)^T, with the cols x cols Gram matrix */
    double *xt = malloc((size_t)(rows * cols) * sizeof *xt);
    if (!xt) abort();
    for (long i = 0; i < rows; i++)
        for (long j = 0; j < cols; j++) xt[j * rows + i] = X[i * cols + j];
    step_wide(ctx, cols, rows, xt, a, b, c, Xn, 1, cols);
    free(xt);
}
