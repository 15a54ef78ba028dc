/* reference/layernorm.c — LayerNorm forward and backward (see layernorm.h).
 *
 * The statistics are the two-pass ones, computed in balls: the mean, then
 * d_j = x_j - mu and var = sum d_j^2 / n.  In exact arithmetic one pass,
 * two passes and Welford agree; two passes keep the balls tight, because
 * E[x^2] - mu^2 would cancel ~2 log2(|mu|/sigma) bits (the radius would show
 * it and the loop would escalate, but there is no reason to pay for that).
 *
 * Row outputs (y, mean, rstd, dx) run the precision loop per row; dgamma and
 * dbeta, sums over rows, run it per column over per-row statistics held at
 * the column's precision (recomputed for all rows only when a column has to
 * escalate, which is rare). */
#include "reference/layernorm.h"

#include <math.h>

/* Per-row statistics as balls: mean and rstd = 1/sqrt(var + eps); d[cols]
 * receives x - mean (work space of the caller). */
static void row_stats(const ref_ctx *ctx, long cols, const double *x, double eps, ref_ball *d,
                      ref_ball *mean, ref_ball *rstd)
{
    size_t n = ref_terms(ctx, (size_t)cols);
    for (long j = 0; j < cols; j++) ref_ball_set_d(&d[j], x[j]);
    ref_ball_sum(mean, d, n);
    ref_ball_div_si(mean, mean, cols);
    for (long j = 0; j < cols; j++) ref_ball_sub(&d[j], &d[j], mean);
    /* var = sum d_j^2 / cols, squares formed in rstd's slot one at a time */
    ref_ball sq_sum, sq;
    ref_ball_init(&sq_sum, mpfr_get_prec(mean->mid));
    ref_ball_init(&sq, mpfr_get_prec(mean->mid));
    for (size_t j = 0; j < n; j++) {
        ref_ball_mul(&sq, &d[j], &d[j]);
        ref_ball_add(&sq_sum, &sq_sum, &sq);
    }
    ref_ball_div_si(rstd, &sq_sum, cols);
    ref_ball_add_d(rstd, rstd, eps);
    ref_ball_sqrt(rstd, rstd);
    ref_ball_set_si(&sq, 1);
    ref_ball_div(rstd, &sq, rstd);
    ref_ball_clear(&sq_sum);
    ref_ball_clear(&sq);
}

static void set_prec_all(ref_ball *b, long n, mpfr_prec_t p)
{
    for (long j = 0; j < n; j++) ref_ball_set_prec(&b[j], p);
}

void ref_layernorm_forward(ref_ctx *ctx, long rows, long cols, const double *x,
                           const double *gamma, const double *beta, double eps,
                           double *y, double *mean, double *rstd)
{
    mpfr_prec_t p0 = ref_first_prec(ctx);
    ref_ball *d = ref_balls_new((size_t)cols, p0);
    ref_ball mu, rs, t;
    ref_ball_init(&mu, p0);
    ref_ball_init(&rs, p0);
    ref_ball_init(&t, p0);
    for (long r = 0; r < rows; r++) {
        mpfr_prec_t p = p0;
        for (;;) {
            set_prec_all(d, cols, p);
            ref_ball_set_prec(&mu, p);
            ref_ball_set_prec(&rs, p);
            ref_ball_set_prec(&t, p);
            row_stats(ctx, cols, x + r * cols, eps, d, &mu, &rs);
            long undecided = 0;
            double scratch;
            undecided += !ref_output(ctx, &mu, mean ? &mean[r] : &scratch);
            undecided += !ref_output(ctx, &rs, rstd ? &rstd[r] : &scratch);
            for (long j = 0; j < cols; j++) {
                ref_ball_mul(&t, &d[j], &rs);
                if (gamma) ref_ball_mul_d(&t, &t, gamma[j]);
                if (beta) ref_ball_add_d(&t, &t, beta[j]);
                undecided += !ref_output(ctx, &t, &y[r * cols + j]);
            }
            if (!undecided) break;
            if (!(p = ref_next_prec(ctx, p))) {
                ctx->unproven += undecided;
                break;
            }
        }
    }
    ref_ball_clear(&mu);
    ref_ball_clear(&rs);
    ref_ball_clear(&t);
    ref_balls_free(d, (size_t)cols);
}

/* dx for one row at precision p; returns the number of undecided outputs. */
static long backward_row(const ref_ctx *ctx, long cols, const double *x, const double *gamma,
                         const double *dy, double eps, double *dx, ref_ball *d, ref_ball *g)
{
    ref_ball mu, rs, mean_g, mean_gx, t;
    mpfr_prec_t p = mpfr_get_prec(d[0].mid);
    ref_ball_init(&mu, p);
    ref_ball_init(&rs, p);
    ref_ball_init(&mean_g, p);
    ref_ball_init(&mean_gx, p);
    ref_ball_init(&t, p);
    size_t n = ref_terms(ctx, (size_t)cols);
    row_stats(ctx, cols, x, eps, d, &mu, &rs);
    for (long j = 0; j < cols; j++) {
        ref_ball_mul(&d[j], &d[j], &rs); /* d becomes xhat */
        ref_ball_set_d(&g[j], dy[j]);
        if (gamma) ref_ball_mul_d(&g[j], &g[j], gamma[j]);
    }
    ref_ball_sum(&mean_g, g, n);
    ref_ball_div_si(&mean_g, &mean_g, cols);
    ref_ball_set_si(&mean_gx, 0);
    for (size_t j = 0; j < n; j++) {
        ref_ball_mul(&t, &g[j], &d[j]);
        ref_ball_add(&mean_gx, &mean_gx, &t);
    }
    ref_ball_div_si(&mean_gx, &mean_gx, cols);
    long undecided = 0;
    for (long j = 0; j < cols; j++) {
        ref_ball_mul(&t, &d[j], &mean_gx);
        ref_ball_sub(&t, &g[j], &t);
        ref_ball_sub(&t, &t, &mean_g);
        ref_ball_mul(&t, &t, &rs);
        undecided += !ref_output(ctx, &t, &dx[j]);
    }
    ref_ball_clear(&mu);
    ref_ball_clear(&rs);
    ref_ball_clear(&mean_g);
    ref_ball_clear(&mean_gx);
    ref_ball_clear(&t);
    return undecided;
}

/* Per-row mean and rstd for every row at precision p (dgamma's inputs). */
static void all_row_stats(const ref_ctx *ctx, long rows, long cols, const double *x, double eps,
                          mpfr_prec_t p, ref_ball *d, ref_ball *mu, ref_ball *rs)
{
    set_prec_all(d, cols, p);
    set_prec_all(mu, rows, p);
    set_prec_all(rs, rows, p);
    for (long r = 0; r < rows; r++) row_stats(ctx, cols, x + r * cols, eps, d, &mu[r], &rs[r]);
}

static void backward_params(ref_ctx *ctx, long rows, long cols, const double *x, const double *dy,
                            double eps, double *dgamma, double *dbeta, ref_ball *d)
{
    mpfr_prec_t p0 = ref_first_prec(ctx), stats_p = p0;
    ref_ball *mu = ref_balls_new((size_t)rows, p0);
    ref_ball *rs = ref_balls_new((size_t)rows, p0);
    ref_ball *terms = ref_balls_new((size_t)rows, p0);
    ref_ball total;
    ref_ball_init(&total, p0);
    all_row_stats(ctx, rows, cols, x, eps, p0, d, mu, rs);
    size_t n = ref_terms(ctx, (size_t)rows);
    for (long c = 0; c < cols; c++) {
        mpfr_prec_t p = p0;
        for (;;) {
            if (p > stats_p) all_row_stats(ctx, rows, cols, x, eps, stats_p = p, d, mu, rs);
            set_prec_all(terms, rows, p);
            ref_ball_set_prec(&total, p);
            long undecided = 0;
            if (dbeta) {
                for (long r = 0; r < rows; r++) ref_ball_set_d(&terms[r], dy[r * cols + c]);
                ref_ball_sum(&total, terms, n);
                undecided += !ref_output(ctx, &total, &dbeta[c]);
            }
            if (dgamma) {
                for (long r = 0; r < rows; r++) {
                    ref_ball_set_d(&terms[r], x[r * cols + c]);
                    ref_ball_sub(&terms[r], &terms[r], &mu[r]);
                    ref_ball_mul(&terms[r], &terms[r], &rs[r]);
                    ref_ball_mul_d(&terms[r], &terms[r], dy[r * cols + c]);
                }
                ref_ball_sum(&total, terms, n);
                undecided += !ref_output(ctx, &total, &dgamma[c]);
            }
            if (!undecided) break;
            if (!(p = ref_next_prec(ctx, p))) {
                ctx->unproven += undecided;
                break;
            }
        }
    }
    ref_ball_clear(&total);
    ref_balls_free(mu, (size_t)rows);
    ref_balls_free(rs, (size_t)rows);
    ref_balls_free(terms, (size_t)rows);
}

void ref_layernorm_backward(ref_ctx *ctx, long rows, long cols, const double *x,
                            const double *gamma, const double *dy, double eps,
                            double *dx, double *dgamma, double *dbeta)
{
    mpfr_prec_t p0 = ref_first_prec(ctx);
    ref_ball *d = ref_balls_new((size_t)cols, p0);
    ref_ball *g = ref_balls_new((size_t)cols, p0);
    for (long r = 0; dx && r < rows; r++) {
        mpfr_prec_t p = p0;
        for (;;) {
            set_prec_all(d, cols, p);
            set_prec_all(g, cols, p);
            long undecided = backward_row(ctx, cols, x + r * cols, gamma, dy + r * cols, eps,
                                          dx + r * cols, d, g);
            if (!undecided) break;
            if (!(p = ref_next_prec(ctx, p))) {
                ctx->unproven += undecided;
                break;
            }
        }
    }
    if (dgamma || dbeta) backward_params(ctx, rows, cols, x, dy, eps, dgamma, dbeta, d);
    ref_balls_free(d, (size_t)cols);
    ref_balls_free(g, (size_t)cols);
}
