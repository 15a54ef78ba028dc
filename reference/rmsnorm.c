/* reference/rmsnorm.c — RMSNorm forward and backward (see rmsnorm.h).
 *
 * rstd = 1/sqrt(sum x_j^2 / n + eps): a sum of exact squares (a square of a
 * double fits in 106 bits, so at p >= 106 only the sum rounds), no
 * cancellation anywhere in the forward.  The backward
 *   dx_j = rstd g_j - rstd^3 x_j mean(g x)
 * does cancel when g is nearly parallel to x; the balls measure that and the
 * loop escalates when it has to.  Row outputs loop per row, dgamma per
 * column over per-group rstd (see backward_gain and layernorm.c). */
#include "reference/rmsnorm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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

/* dgamma[c] = sum_r dy x rstd_r, added group by group (ref_group_rows):
 * rows with equal sums of squares share rstd, so their exact dy x terms are
 * summed first and multiplied by it once; identical rows whose dy cancel
 * give an exact zero. */
static void backward_gain(ref_ctx *ctx, long rows, long cols, const double *x, const double *dy,
                          double eps, double *dgamma, ref_ball *work)
{
    mpfr_prec_t p0 = ref_first_prec(ctx), stats_p = 0;
    long *group = malloc((size_t)rows * sizeof *group), *member = malloc((size_t)rows * sizeof *member);
    long *start = malloc((size_t)(rows + 1) * sizeof *start);
    if (!group || !member || !start) {
        fprintf(stderr, "ulpscope reference: out of memory (rmsnorm dgamma, %ld rows)\n", rows);
        abort();
    }
    ref_group_rows(rows, cols, x, false, group);
    long ngroups = ref_group_members(rows, group, member, start);
    long kept_rows = (long)ref_terms(ctx, (size_t)rows); /* planted bug: the last row left out */
    ref_ball *rs = ref_balls_new((size_t)ngroups, p0);
    ref_ball *terms = ref_balls_new((size_t)rows, p0);
    ref_ball *group_terms = ref_balls_new((size_t)ngroups, p0);
    ref_ball total;
    ref_ball_init(&total, p0);
    for (long c = 0; c < cols; c++) {
        mpfr_prec_t p = p0;
        for (;;) {
            if (p > stats_p) { /* each group's rstd at the column's precision */
                stats_p = p;
                set_prec_all(work, cols, p);
                set_prec_all(rs, ngroups, p);
                for (long g = 0; g < ngroups; g++) row_rstd(ctx, cols, x + member[start[g]] * cols, eps, work, &rs[g]);
            }
            set_prec_all(terms, rows, p);
            set_prec_all(group_terms, ngroups, p);
            ref_ball_set_prec(&total, p);
            for (long g = 0; g < ngroups; g++) {
                long k = 0;
                for (long m = start[g]; m < start[g + 1]; m++) {
                    long r = member[m];
                    if (r >= kept_rows) continue;
                    ref_ball_set_d(&terms[k], x[r * cols + c]);
                    ref_ball_mul_d(&terms[k], &terms[k], dy[r * cols + c]);
                    k++;
                }
                ref_ball_sum(&group_terms[g], terms, (size_t)k);
                ref_ball_mul(&group_terms[g], &group_terms[g], &rs[g]);
            }
            ref_ball_sum(&total, group_terms, (size_t)ngroups);
            if (ref_output(ctx, &total, &dgamma[c])) break;
            if (!(p = ref_next_prec(ctx, p))) {
                ctx->unproven++;
                break;
            }
        }
    }
    ref_ball_clear(&total);
    ref_balls_free(rs, (size_t)ngroups);
    ref_balls_free(terms, (size_t)rows);
    ref_balls_free(group_terms, (size_t)ngroups);
    free(group), free(member), free(start);
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
