/* reference/rmsnorm.c — RMSNorm forward and backward (see rmsnorm.h).
 *
 * rstd = 1/sqrt(sum x_j^2 / n + eps): a sum of exact squares (a square of a
 * double fits in 106 bits, so at p >= 106 only the sum rounds), no
 * cancellation anywhere in the forward.  The backward
 *   dx_j = rstd g_j - rstd^3 x_j mean(g x)
 * does cancel when g is nearly parallel to x; the balls measure that and the
 * loop escalates when it has to.  Row outputs loop per row, dgamma per
 * column over per-row rstd (see layernorm.c for the same structure). */
#include "reference/rmsnorm.h"

#include <math.h>

static void row_rstd(const ref_ctx *ctx, long cols, const double *x, double eps, ref_ball *sq,
                     ref_ball *rstd)
{
    size_t n = ref_terms(ctx, (size_t)cols);
    for (long j = 0; j < cols; j++) {
        ref_ball_set_d(&sq[j], x[j]);
        ref_ball_mul_d(&sq[j], &sq[j], x[j]);
    }
    ref_ball one;
    ref_ball_init(&one, mpfr_get_prec(rstd->mid));
    ref_ball_set_si(&one, 1);
    ref_ball_sum(rstd, sq, n);
    ref_ball_div_si(rstd, rstd, cols);
    ref_ball_add_d(rstd, rstd, eps);
    ref_ball_sqrt(rstd, rstd);
    ref_ball_div(rstd, &one, rstd);
    ref_ball_clear(&one);
}

static void set_prec_all(ref_ball *b, long n, mpfr_prec_t p)
{
    for (long j = 0; j < n; j++) ref_ball_set_prec(&b[j], p);
}

void ref_rmsnorm_forward(ref_ctx *ctx, long rows, long cols, const double *x,
                         const double *gamma, double eps, double *y, double *rstd)
{
    mpfr_prec_t p0 = ref_first_prec(ctx);
    ref_ball *sq = ref_balls_new((size_t)cols, p0);
    ref_ball rs, t;
    ref_ball_init(&rs, p0);
    ref_ball_init(&t, p0);
    for (long r = 0; r < rows; r++) {
        const double *xr = x + r * cols;
        mpfr_prec_t p = p0;
        for (;;) {
            set_prec_all(sq, cols, p);
            ref_ball_set_prec(&rs, p);
            ref_ball_set_prec(&t, p);
            row_rstd(ctx, cols, xr, eps, sq, &rs);
            long undecided = 0;
            double scratch;
            undecided += !ref_output(ctx, &rs, rstd ? &rstd[r] : &scratch);
            for (long j = 0; j < cols; j++) {
                ref_ball_mul_d(&t, &rs, xr[j]);
                if (gamma) ref_ball_mul_d(&t, &t, gamma[j]);
                undecided += !ref_output(ctx, &t, &y[r * cols + j]);
            }
            if (!undecided) break;
            if (!(p = ref_next_prec(ctx, p))) {
                ctx->unproven += undecided;
                break;
            }
        }
    }
    ref_ball_clear(&rs);
    ref_ball_clear(&t);
    ref_balls_free(sq, (size_t)cols);
}

/* dx for one row at the balls' precision; returns the undecided count. */
static long backward_row(const ref_ctx *ctx, long cols, const double *x, const double *gamma,
                         const double *dy, double eps, double *dx, ref_ball *work)
{
    mpfr_prec_t p = mpfr_get_prec(work[0].mid);
    ref_ball rs, rs3, mean_gx, t, g;
    ref_ball_init(&g, p);
    ref_ball_init(&rs, p);
    ref_ball_init(&rs3, p);
    ref_ball_init(&mean_gx, p);
    ref_ball_init(&t, p);
    row_rstd(ctx, cols, x, eps, work, &rs);
    ref_ball_mul(&rs3, &rs, &rs);
    ref_ball_mul(&rs3, &rs3, &rs);
    /* mean(g x): g_j x_j = gamma_j dy_j x_j, a product of three doubles */
    for (long j = 0; j < cols; j++) {
        ref_ball_set_d(&work[j], dy[j]);
        if (gamma) ref_ball_mul_d(&work[j], &work[j], gamma[j]);
        ref_ball_mul_d(&work[j], &work[j], x[j]);
    }
    ref_ball_sum(&mean_gx, work, ref_terms(ctx, (size_t)cols));
    ref_ball_div_si(&mean_gx, &mean_gx, cols);
    ref_ball_mul(&rs3, &rs3, &mean_gx); /* rstd^3 mean(g x) */
    long undecided = 0;
    for (long j = 0; j < cols; j++) {
        ref_ball_set_d(&g, dy[j]);
        if (gamma) ref_ball_mul_d(&g, &g, gamma[j]);
        ref_ball_mul(&g, &g, &rs);
        ref_ball_mul_d(&t, &rs3, x[j]);
        ref_ball_sub(&t, &g, &t);
        undecided += !ref_output(ctx, &t, &dx[j]);
    }
    ref_ball_clear(&g);
    ref_ball_clear(&rs);
    ref_ball_clear(&rs3);
    ref_ball_clear(&mean_gx);
    ref_ball_clear(&t);
    return undecided;
}

static void backward_gain(ref_ctx *ctx, long rows, long cols, const double *x, const double *dy,
                          double eps, double *dgamma, ref_ball *work)
{
    mpfr_prec_t p0 = ref_first_prec(ctx), stats_p = 0;
    ref_ball *rs = ref_balls_new((size_t)rows, p0);
    ref_ball *terms = ref_balls_new((size_t)rows, p0);
    ref_ball total;
    ref_ball_init(&total, p0);
    size_t n = ref_terms(ctx, (size_t)rows);
    for (long c = 0; c < cols; c++) {
        mpfr_prec_t p = p0;
        for (;;) {
            if (p > stats_p) { /* per-row rstd at the column's precision */
                stats_p = p;
                set_prec_all(work, cols, p);
                set_prec_all(rs, rows, p);
                for (long r = 0; r < rows; r++) row_rstd(ctx, cols, x + r * cols, eps, work, &rs[r]);
            }
            set_prec_all(terms, rows, p);
            ref_ball_set_prec(&total, p);
            for (long r = 0; r < rows; r++) {
                ref_ball_mul_d(&terms[r], &rs[r], x[r * cols + c]);
                ref_ball_mul_d(&terms[r], &terms[r], dy[r * cols + c]);
            }
            ref_ball_sum(&total, terms, n);
            if (ref_output(ctx, &total, &dgamma[c])) break;
            if (!(p = ref_next_prec(ctx, p))) {
                ctx->unproven++;
                break;
            }
        }
    }
    ref_ball_clear(&total);
    ref_balls_free(rs, (size_t)rows);
    ref_balls_free(terms, (size_t)rows);
}

void ref_rmsnorm_backward(ref_ctx *ctx, long rows, long cols, const double *x,
                          const double *gamma, const double *dy, double eps,
                          double *dx, double *dgamma)
{
    mpfr_prec_t p0 = ref_first_prec(ctx);
    ref_ball *work = ref_balls_new((size_t)cols, p0);
    for (long r = 0; dx && r < rows; r++) {
        mpfr_prec_t p = p0;
        for (;;) {
            set_prec_all(work, cols, p);
            long undecided = backward_row(ctx, cols, x + r * cols, gamma, dy + r * cols, eps,
                                          dx + r * cols, work);
            if (!undecided) break;
            if (!(p = ref_next_prec(ctx, p))) {
                ctx->unproven += undecided;
                break;
            }
        }
    }
    if (dgamma) backward_gain(ctx, rows, cols, x, dy, eps, dgamma, work);
    ref_balls_free(work, (size_t)cols);
}
