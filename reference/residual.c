/* reference/residual.c — y = a + b.  One IEEE double addition is the exact
 * sum correctly rounded to double (round to nearest even), which is what
 * ref.h asks for; for inputs of fp32 and narrower formats it is even exact
 * unless the exponents differ by more than 29.  ctx->bug's truncation is
 * honoured through ref_output for the reference tests' twins. */
#include "reference/residual.h"

void ref_residual_forward(ref_ctx *ctx, long n, const double *a, const double *b, double *y)
{
    if (ctx->bug == REF_BUG_NONE) {
        for (long i = 0; i < n; i++) y[i] = a[i] + b[i];
        return;
    }
    ref_ball s, t;
    ref_ball_init(&s, ref_first_prec(ctx));
    ref_ball_init(&t, ref_first_prec(ctx));
    for (long i = 0; i < n; i++) {
        ref_ball_set_d(&s, a[i]);
        ref_ball_set_d(&t, b[i]);
        ref_ball_add(&s, &s, &t);
        ref_output(ctx, &s, &y[i]);
    }
    ref_ball_clear(&s);
    ref_ball_clear(&t);
}
