/* reference/softmax.c — softmax forward and backward; the worked example of
 * the ref.h precision loop.
 *
 * Forward, one row x[cols]:  y_j = exp(x_j - m) / S,  S = sum_k exp(x_k - m).
 * Subtracting the row max m is not needed for range (MPFR's exponent range
 * is ~2^62) but keeps the midpoints near 1 and costs nothing.  Each row runs
 * the loop: balls at p bits, every y_j checked by ref_ball_get_d, the row
 * recomputed at 2p if any is undecided. */
#include "reference/softmax.h"

#include <math.h>

/* Row state shared by the two passes: NaN row, or the max of the row. */
static bool row_is_nan(const double *x, long cols, double *max_out)
{
    double m = -INFINITY;
    for (long j = 0; j < cols; j++) {
        if (isnan(x[j]) || x[j] == INFINITY) return true;
        if (x[j] > m) m = x[j];
    }
    *max_out = m;
    return m == -INFINITY; /* all masked: 0/0 */
}

static void forward_row(ref_ctx *ctx, long cols, const double *x, double *y, ref_ball *e)
{
    double m;
    if (row_is_nan(x, cols, &m)) {
        for (long j = 0; j < cols; j++) y[j] = NAN;
        return;
    }
    mpfr_prec_t p = ref_first_prec(ctx);
    ref_ball sum, yj;
    ref_ball_init(&sum, p);
    ref_ball_init(&yj, p);
    for (;;) {
        for (long j = 0; j < cols; j++) {
            if (x[j] == -INFINITY) {
                ref_ball_set_si(&e[j], 0); /* exp(-inf) = 0 exactly */
                continue;
            }
            ref_ball_set_d(&e[j], x[j]);
            ref_ball_add_d(&e[j], &e[j], -m);
            ref_ball_exp(&e[j], &e[j]);
        }
        ref_ball_sum(&sum, e, ref_terms(ctx, (size_t)cols));
        long undecided = 0;
        for (long j = 0; j < cols; j++) {
            ref_ball_div(&yj, &e[j], &sum);
            undecided += !ref_output(ctx, &yj, &y[j]);
        }
        if (!undecided) break;
        if (!(p = ref_next_prec(ctx, p))) {
            ctx->unproven += undecided;
            break;
        }
        for (long j = 0; j < cols; j++) ref_ball_set_prec(&e[j], p);
        ref_ball_set_prec(&sum, p);
        ref_ball_set_prec(&yj, p);
    }
    ref_ball_clear(&sum);
    ref_ball_clear(&yj);
}

void ref_softmax_forward(ref_ctx *ctx, long rows, long cols, const double *x, double *y)
{
    ref_ball *e = ref_balls_new((size_t)cols, ref_first_prec(ctx));
    for (long r = 0; r < rows; r++) {
        /* a previous row may have escalated: start each row at the first precision */
        for (long j = 0; j < cols; j++) ref_ball_set_prec(&e[j], ref_first_prec(ctx));
        forward_row(ctx, cols, x + r * cols, y + r * cols, e);
    }
    ref_balls_free(e, (size_t)cols);
}

/* dx_j = y_j (dy_j - s),  s = sum_k y_k dy_k: s is a ball because the products
 * are exact at p >= 106 bits but the sum of cols of them in general is not. */
static void backward_row(ref_ctx *ctx, long cols, const double *y, const double *dy, double *dx,
                         ref_ball *prod)
{
    mpfr_prec_t p = ref_first_prec(ctx);
    ref_ball s, t, yb;
    ref_ball_init(&s, p);
    ref_ball_init(&t, p);
    ref_ball_init(&yb, p);
    for (;;) {
        for (long k = 0; k < cols; k++) {
            ref_ball_set_d(&prod[k], y[k]);
            ref_ball_mul_d(&prod[k], &prod[k], dy[k]);
        }
        ref_ball_sum(&s, prod, ref_terms(ctx, (size_t)cols));
        long undecided = 0;
        for (long j = 0; j < cols; j++) {
            ref_ball_set_d(&t, dy[j]);
            ref_ball_sub(&t, &t, &s);
            ref_ball_set_d(&yb, y[j]);
            ref_ball_mul(&t, &t, &yb);
            undecided += !ref_output(ctx, &t, &dx[j]);
        }
        if (!undecided) break;
        if (!(p = ref_next_prec(ctx, p))) {
            ctx->unproven += undecided;
            break;
        }
        for (long k = 0; k < cols; k++) ref_ball_set_prec(&prod[k], p);
        ref_ball_set_prec(&s, p);
        ref_ball_set_prec(&t, p);
        ref_ball_set_prec(&yb, p);
    }
    ref_ball_clear(&s);
    ref_ball_clear(&t);
    ref_ball_clear(&yb);
}

void ref_softmax_backward(ref_ctx *ctx, long rows, long cols, const double *y, const double *dy,
                          double *dx)
{
    ref_ball *prod = ref_balls_new((size_t)cols, ref_first_prec(ctx));
    for (long r = 0; r < rows; r++) {
        for (long j = 0; j < cols; j++) ref_ball_set_prec(&prod[j], ref_first_prec(ctx));
        backward_row(ctx, cols, y + r * cols, dy + r * cols, dx + r * cols, prod);
    }
    ref_balls_free(prod, (size_t)cols);
}
