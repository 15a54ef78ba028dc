/* reference/gelu_erf.c — GELU in its exact form x Phi(x).  Phi is taken as
 * erfc(-x/sqrt 2)/2, which does not cancel for x << 0 the way 1 + erf does;
 * erfc's derivative is bounded by 2/sqrt(pi) < 1.1284 (ref_ball_lipschitz). */
#include "reference/gelu_erf.h"

#include <math.h>

static void element(ref_ctx *ctx, double x, double dy, int backward, double *out)
{
    if (!isfinite(x)) {
        *out = NAN;
        return;
    }
    mpfr_prec_t p = ref_first_prec(ctx);
    ref_ball bx, s2, cdf, pdf, t;
    ref_ball *all[] = {&bx, &s2, &cdf, &pdf, &t};
    for (int i = 0; i < 5; i++) ref_ball_init(all[i], p);
    for (;;) {
        ref_ball_set_d(&bx, x);
        ref_ball_set_si(&s2, 2);
        ref_ball_sqrt(&s2, &s2);
        ref_ball_div(&t, &bx, &s2);
        ref_ball_neg(&t, &t);
        ref_ball_lipschitz(&cdf, &t, mpfr_erfc, 1.1284);
        ref_ball_mul_d(&cdf, &cdf, 0.5); /* Phi(x) */
        if (!backward) {
            ref_ball_mul(&t, &cdf, &bx);
        } else {
            /* phi(x) = exp(-x^2/2) / sqrt(2 pi), pi = 4 atan 1 */
            ref_ball_mul(&pdf, &bx, &bx);
            ref_ball_mul_d(&pdf, &pdf, -0.5);
            ref_ball_exp(&pdf, &pdf);
            ref_ball_set_si(&t, 1);
            ref_ball_lipschitz(&t, &t, mpfr_atan, 1.0);
            ref_ball_mul_d(&t, &t, 8.0);
            ref_ball_sqrt(&t, &t);
            ref_ball_div(&pdf, &pdf, &t);
            ref_ball_mul(&pdf, &pdf, &bx);
            ref_ball_add(&t, &cdf, &pdf);
            ref_ball_mul_d(&t, &t, dy);
        }
        if (ref_output(ctx, &t, out)) break;
        if (!(p = ref_next_prec(ctx, p))) {
            ctx->unproven++;
            break;
        }
        for (int i = 0; i < 5; i++) ref_ball_set_prec(all[i], p);
    }
    for (int i = 0; i < 5; i++) ref_ball_clear(all[i]);
}

void ref_gelu_erf_forward(ref_ctx *ctx, long n, const double *x, double *y)
{
    for (long i = 0; i < n; i++) element(ctx, x[i], 0.0, 0, &y[i]);
}

void ref_gelu_erf_backward(ref_ctx *ctx, long n, const double *x, const double *dy, double *dx)
{
    for (long i = 0; i < n; i++) element(ctx, x[i], dy[i], 1, &dx[i]);
}
