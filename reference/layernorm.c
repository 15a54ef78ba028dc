/* reference/layernorm.c — LayerNorm forward and backward (see layernorm.h).
 *
 * The statistics are the two-pass ones, computed in balls: the mean, then
 * d_j = x_j - mu and var = sum d_j^2 / n.  In exact arithmetic one pass,
 * two passes and Welford agree; two passes keep the balls tight, because
 * E[x^2] - mu^2 would cancel ~2 log2(|mu|/sigma) bits (the radius would show
 * it and the loop would escalate, but there is no reason to pay for that).
 *
 * Row outputs (y, mean, rstd, dx) run the precision loop per row; dgamma and
 * dbeta, sums over rows, run it per column over the statistics of each group
 * of equal rows, held at the column's precision (recomputed only when a
 * column has to escalate, which is rare). */
#include "reference/layernorm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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

/* dgamma[c] = sum_r dy (x - mu_r) rstd_r and dbeta[c] = sum_r dy, with rows
 * of equal statistics grouped (ref_group_rows): per group,
 *   (sum dy x - mu_g sum dy) rstd_g,
 * the two inner sums exact once p covers them, so identical rows whose dy
 * cancel give an exact zero rather than a ball around 0. */
static void backward_params(ref_ctx *ctx, long rows, long cols, const double *x, const double *dy,
                            double eps, double *dgamma, double *dbeta, ref_ball *d)
{
    mpfr_prec_t p0 = ref_first_prec(ctx), stats_p = 0;
    long *group = malloc((size_t)rows * sizeof *group), *member = malloc((size_t)rows * sizeof *member);
    long *start = malloc((size_t)(rows + 1) * sizeof *start);
    if (!group || !member || !start) {
        fprintf(stderr, "ulpscope reference: out of memory (layernorm dgamma, %ld rows)\n", rows);
        abort();
    }
    ref_group_rows(rows, cols, x, true, group);
    long ngroups = ref_group_members(rows, group, member, start);
    long kept_rows = (long)ref_terms(ctx, (size_t)rows); /* planted bug: the last row left out */
    ref_ball *mu = ref_balls_new((size_t)ngroups, p0);
    ref_ball *rs = ref_balls_new((size_t)ngroups, p0);
    ref_ball *terms = ref_balls_new((size_t)rows, p0);
    ref_ball *group_terms = ref_balls_new((size_t)ngroups, p0);
    ref_ball sum_dy, sum_dyx, total;
    ref_ball_init(&sum_dy, p0);
    ref_ball_init(&sum_dyx, p0);
    ref_ball_init(&total, p0);
    for (long c = 0; c < cols; c++) {
        mpfr_prec_t p = p0;
        for (;;) {
            if (p > stats_p) { /* each group's statistics at the column's precision */
                stats_p = p;
                set_prec_all(d, cols, p);
                set_prec_all(mu, ngroups, p);
                set_prec_all(rs, ngroups, p);
                for (long g = 0; g < ngroups; g++)
                    row_stats(ctx, cols, x + member[start[g]] * cols, eps, d, &mu[g], &rs[g]);
            }
            set_prec_all(terms, rows, p);
            set_prec_all(group_terms, ngroups, p);
            ref_ball_set_prec(&sum_dy, p);
            ref_ball_set_prec(&sum_dyx, p);
            ref_ball_set_prec(&total, p);
            long undecided = 0;
            if (dbeta) {
                for (long r = 0; r < kept_rows; r++) ref_ball_set_d(&terms[r], dy[r * cols + c]);
                ref_ball_sum(&total, terms, (size_t)kept_rows);
                undecided += !ref_output(ctx, &total, &dbeta[c]);
            }
            if (dgamma) {
                for (long g = 0; g < ngroups; g++) {
                    long k = 0;
                    for (long m = start[g]; m < start[g + 1]; m++)
                        if (member[m] < kept_rows) ref_ball_set_d(&terms[k++], dy[member[m] * cols + c]);
                    ref_ball_sum(&sum_dy, terms, (size_t)k);
                    k = 0;
                    for (long m = start[g]; m < start[g + 1]; m++) {
                        long r = member[m];
                        if (r >= kept_rows) continue;
                        ref_ball_set_d(&terms[k], x[r * cols + c]);
                        ref_ball_mul_d(&terms[k], &terms[k], dy[r * cols + c]);
                        k++;
                    }
                    ref_ball_sum(&sum_dyx, terms, (size_t)k);
                    ref_ball_mul(&sum_dy, &sum_dy, &mu[g]);
                    ref_ball_sub(&group_terms[g], &sum_dyx, &sum_dy);
                    ref_ball_mul(&group_terms[g], &group_terms[g], &rs[g]);
                }
                ref_ball_sum(&total, group_terms, (size_t)ngroups);
                undecided += !ref_output(ctx, &total, &dgamma[c]);
            }
            if (!undecided) break;
            if (!(p = ref_next_prec(ctx, p))) {
                ctx->unproven += undecided;
                break;
            }
        }
    }
    ref_ball_clear(&sum_dy);
    ref_ball_clear(&sum_dyx);
    ref_ball_clear(&total);
    ref_balls_free(mu, (size_t)ngroups);
    ref_balls_free(rs, (size_t)ngroups);
    ref_balls_free(terms, (size_t)rows);
    ref_balls_free(group_terms, (size_t)ngroups);
    free(group), free(member), free(start);
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
