/* reference/logsumexp.c — log-sum-exp forward and backward (see logsumexp.h).
 *
 * lse = m + log S,  S = sum_j exp(x_j - m),  m = max_j x_j: with the max
 * taken out S lies in [1, cols], so log S has no cancellation and the ball
 * stays tight; m is exact.  The backward is dlse times the softmax. */
#include "reference/logsumexp.h"

#include <math.h>

/* NaN anywhere gives NaN; otherwise +inf anywhere gives +inf (forward) and
 * the max (possibly -inf) is returned. */
static double row_max(const double *x, long cols, bool *has_nan)
{
    double m = -INFINITY;
    *has_nan = false;
    for (long j = 0; j < cols; j++) {
        if (isnan(x[j])) *has_nan = true;
        else if (x[j] > m) m = x[j];
    }
    return m;
}

/* e_j = exp(x_j - m) and sum = sum_j e_j at the balls' precision. */
static void shifted_exps(const ref_ctx *ctx, long cols, const double *x, double m, ref_ball *e,
                         ref_ball *sum)
{
    for (long j = 0; j < cols; j++) {
        if (x[j] == -INFINITY) {
            ref_ball_set_si(&e[j], 0);
            continue;
        }
        ref_ball_set_d(&e[j], x[j]);
        ref_ball_add_d(&e[j], &e[j], -m);
        ref_ball_exp(&e[j], &e[j]);
    }
    ref_ball_sum(sum, e, ref_terms(ctx, (size_t)cols));
}

static void set_prec_all(ref_ball *b, long n, mpfr_prec_t p)
{
    for (long j = 0; j < n; j++) ref_ball_set_prec(&b[j], p);
}

void ref_logsumexp_forward(ref_ctx *ctx, long rows, long cols, const double *x, double *lse)
{
    mpfr_prec_t p0 = ref_first_prec(ctx);
    ref_ball *e = ref_balls_new((size_t)cols, p0);
    ref_ball sum;
    ref_ball_init(&sum, p0);
    for (long r = 0; r < rows; r++) {
        const double *xr = x + r * cols;
        bool has_nan;
        double m = row_max(xr, cols, &has_nan);
        if (has_nan || isinf(m)) { /* NaN, +inf, or an all -inf row (log 0) */
            lse[r] = has_nan ? NAN : m;
            continue;
        }
        mpfr_prec_t p = p0;
        set_prec_all(e, cols, p);
        ref_ball_set_prec(&sum, p);
        for (;;) {
            shifted_exps(ctx, cols, xr, m, e, &sum);
            ref_ball_log(&sum, &sum);
            ref_ball_add_d(&sum, &sum, m);
            if (ref_output(ctx, &sum, &lse[r])) break;
            if (!(p = ref_next_prec(ctx, p))) {
                ctx->unproven++;
                break;
            }
            set_prec_all(e, cols, p);
            ref_ball_set_prec(&sum, p);
        }
    }
    ref_ball_clear(&sum);
    ref_balls_free(e, (size_t)cols);
}

void ref_logsumexp_backward(ref_ctx *ctx, long rows, long cols, const double *x,
                            const double *dlse, double *dx)
{
    mpfr_prec_t p0 = ref_first_prec(ctx);
    ref_ball *e = ref_balls_new((size_t)cols, p0);
    ref_ball sum, t;
    ref_ball_init(&sum, p0);
    ref_ball_init(&t, p0);
    for (long r = 0; r < rows; r++) {
        const double *xr = x + r * cols;
        double *dxr = dx + r * cols;
        bool has_nan;
        double m = row_max(xr, cols, &has_nan);
        if (has_nan || isinf(m) || !isfinite(dlse[r])) {
            for (long j = 0; j < cols; j++) dxr[j] = NAN;
            continue;
        }
        mpfr_prec_t p = p0;
        set_prec_all(e, cols, p);
        ref_ball_set_prec(&sum, p);
        ref_ball_set_prec(&t, p);
        for (;;) {
            shifted_exps(ctx, cols, xr, m, e, &sum);
            long undecided = 0;
            for (long j = 0; j < cols; j++) {
                ref_ball_div(&t, &e[j], &sum);
                ref_ball_mul_d(&t, &t, dlse[r]);
                undecided += !ref_output(ctx, &t, &dxr[j]);
            }
            if (!undecided) break;
            if (!(p = ref_next_prec(ctx, p))) {
                ctx->unproven += undecided;
                break;
            }
            set_prec_all(e, cols, p);
            ref_ball_set_prec(&sum, p);
            ref_ball_set_prec(&t, p);
        }
    }
    ref_ball_clear(&sum);
    ref_ball_clear(&t);
    ref_balls_free(e, (size_t)cols);
}
