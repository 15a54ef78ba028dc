/* reference/grad_norm.c — sqrt of a sum of squares.  At 128 bits or more the
 * square of a double (106 bits) is exact, mpfr_sum rounds the whole sum
 * once (ref_ball_sum), and the square root is the only other rounding; the
 * Ziv loop of ref.h decides the double. */
#include "reference/grad_norm.h"

#include <math.h>

double ref_grad_norm(ref_ctx *ctx, int count, const long *sizes, const double *const *g)
{
    long n = 0;
    for (int t = 0; t < count; t++) n += sizes[t];
    mpfr_prec_t p = ref_first_prec(ctx);
    ref_ball *sq = ref_balls_new((size_t)(n > 0 ? n : 1), p);
    ref_ball sum;
    ref_ball_init(&sum, p);
    double out = NAN;
    for (;;) {
        long k = 0;
        for (int t = 0; t < count; t++)
            for (long i = 0; i < sizes[t]; i++, k++) {
                ref_ball_set_d(&sq[k], g[t][i]);
                ref_ball_mul(&sq[k], &sq[k], &sq[k]);
            }
        ref_ball_sum(&sum, sq, ref_terms(ctx, (size_t)n));
        ref_ball_sqrt(&sum, &sum);
        if (ref_output(ctx, &sum, &out)) break;
        if (!(p = ref_next_prec(ctx, p))) {
            ctx->unproven++;
            break;
        }
        for (long i = 0; i < n; i++) ref_ball_set_prec(&sq[i], p);
        ref_ball_set_prec(&sum, p);
    }
    ref_balls_free(sq, (size_t)(n > 0 ? n : 1));
    ref_ball_clear(&sum);
    return out;
}
