/* reference/common.c — the precision loop and ball arithmetic of ref.h.
 *
 * A ball is (mid, rad) with |exact - mid| <= rad.  Each operation first
 * bounds how far the exact result can be from f(mid) given the operands'
 * radii (the propagated part, computed into a temporary so the result may
 * alias an operand), then computes the midpoint rounded to nearest at its
 * precision and adds one ulp of it when MPFR reports the rounding inexact
 * (an RN error is at most half an ulp; a whole ulp keeps the code short and
 * stays an upper bound).  Radii are 64-bit MPFR numbers rounded upward, so
 * they neither underflow nor lose rigour. */
#include "reference/ref.h"

#include "reference/exact.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define RAD_PREC 64

mpfr_prec_t ref_first_prec(const ref_ctx *ctx)
{
    mpfr_prec_t p = ctx->prec > 0 ? ctx->prec : REF_PREC_DEFAULT;
    return p < REF_PREC_MIN ? REF_PREC_MIN : p;
}

mpfr_prec_t ref_next_prec(ref_ctx *ctx, mpfr_prec_t p)
{
    mpfr_prec_t cap = ctx->max_prec > 0 ? ctx->max_prec : REF_PREC_MAX_DEFAULT;
    if (p >= cap) return 0;
    ctx->escalations++;
    return 2 * p < cap ? 2 * p : cap;
}

size_t ref_terms(const ref_ctx *ctx, size_t n)
{
    return ctx->bug == REF_BUG_DROP_TERM && n > 0 ? n - 1 : n;
}

void ref_ball_init(ref_ball *b, mpfr_prec_t prec)
{
    mpfr_init2(b->mid, prec);
    mpfr_init2(b->rad, RAD_PREC);
    mpfr_set_zero(b->mid, 1);
    mpfr_set_zero(b->rad, 1);
}

void ref_ball_clear(ref_ball *b)
{
    mpfr_clear(b->mid);
    mpfr_clear(b->rad);
}

void ref_ball_set_prec(ref_ball *b, mpfr_prec_t prec)
{
    mpfr_set_prec(b->mid, prec);
    mpfr_set_zero(b->mid, 1);
    mpfr_set_zero(b->rad, 1);
}

ref_ball *ref_balls_new(size_t n, mpfr_prec_t prec)
{
    ref_ball *b = malloc((n ? n : 1) * sizeof *b);
    if (!b) {
        fprintf(stderr, "ulpscope reference: out of memory for %zu balls\n", n);
        abort();
    }
    for (size_t i = 0; i < n; i++) ref_ball_init(&b[i], prec);
    return b;
}

void ref_balls_free(ref_ball *b, size_t n)
{
    if (!b) return;
    for (size_t i = 0; i < n; i++) ref_ball_clear(&b[i]);
    free(b);
}

/* Install the propagated radius and add the midpoint's own rounding error. */
static void finish(ref_ball *r, mpfr_srcptr propagated, int ternary)
{
    if (!mpfr_number_p(r->mid)) { /* inf/NaN propagate symbolically */
        mpfr_set_zero(r->rad, 1);
        return;
    }
    if (mpfr_nan_p(propagated)) mpfr_set_inf(r->rad, 1);
    else mpfr_set(r->rad, propagated, MPFR_RNDU);
    if (ternary && !mpfr_zero_p(r->mid)) {
        MPFR_DECL_INIT(ulp, RAD_PREC);
        mpfr_set_ui_2exp(ulp, 1, mpfr_get_exp(r->mid) - (mpfr_exp_t)mpfr_get_prec(r->mid), MPFR_RNDU);
        mpfr_add(r->rad, r->rad, ulp, MPFR_RNDU);
    }
}

/* |a| * b rounded upward (b >= 0). */
static void abs_mul_up(mpfr_ptr out, mpfr_srcptr a, mpfr_srcptr b)
{
    mpfr_mul(out, a, b, MPFR_RNDA);
    mpfr_abs(out, out, MPFR_RNDU);
}

void ref_ball_set_d(ref_ball *r, double x)
{
    MPFR_DECL_INIT(zero, RAD_PREC);
    mpfr_set_zero(zero, 1);
    int t = mpfr_set_d(r->mid, x, MPFR_RNDN);
    finish(r, zero, t);
}

void ref_ball_set_si(ref_ball *r, long x)
{
    MPFR_DECL_INIT(zero, RAD_PREC);
    mpfr_set_zero(zero, 1);
    int t = mpfr_set_si(r->mid, x, MPFR_RNDN);
    finish(r, zero, t);
}

void ref_ball_set(ref_ball *r, const ref_ball *a)
{
    if (r == a) return;
    MPFR_DECL_INIT(rad, RAD_PREC);
    mpfr_set(rad, a->rad, MPFR_RNDU);
    int t = mpfr_set(r->mid, a->mid, MPFR_RNDN);
    finish(r, rad, t);
}

void ref_ball_neg(ref_ball *r, const ref_ball *a)
{
    MPFR_DECL_INIT(rad, RAD_PREC);
    mpfr_set(rad, a->rad, MPFR_RNDU);
    int t = mpfr_neg(r->mid, a->mid, MPFR_RNDN);
    finish(r, rad, t);
}

void ref_ball_add(ref_ball *r, const ref_ball *a, const ref_ball *b)
{
    MPFR_DECL_INIT(rad, RAD_PREC);
    mpfr_add(rad, a->rad, b->rad, MPFR_RNDU);
    int t = mpfr_add(r->mid, a->mid, b->mid, MPFR_RNDN);
    finish(r, rad, t);
}

void ref_ball_sub(ref_ball *r, const ref_ball *a, const ref_ball *b)
{
    MPFR_DECL_INIT(rad, RAD_PREC);
    mpfr_add(rad, a->rad, b->rad, MPFR_RNDU);
    int t = mpfr_sub(r->mid, a->mid, b->mid, MPFR_RNDN);
    finish(r, rad, t);
}

/* |ab - am bm| <= |am| rb + |bm| ra + ra rb. */
void ref_ball_mul(ref_ball *r, const ref_ball *a, const ref_ball *b)
{
    MPFR_DECL_INIT(rad, RAD_PREC);
    MPFR_DECL_INIT(tmp, RAD_PREC);
    if (mpfr_zero_p(a->rad) && mpfr_zero_p(b->rad)) { /* exact operands: the common case */
        mpfr_set_zero(rad, 1);
    } else {
        abs_mul_up(rad, a->mid, b->rad);
        abs_mul_up(tmp, b->mid, a->rad);
        mpfr_add(rad, rad, tmp, MPFR_RNDU);
        mpfr_mul(tmp, a->rad, b->rad, MPFR_RNDU);
        mpfr_add(rad, rad, tmp, MPFR_RNDU);
    }
    int t = mpfr_mul(r->mid, a->mid, b->mid, MPFR_RNDN);
    finish(r, rad, t);
}

/* |a/b - am/bm| = |ra' bm - am rb'| / (|b| |bm|) <= (ra |bm| + |am| rb) / ((|bm| - rb) |bm|). */
void ref_ball_div(ref_ball *r, const ref_ball *a, const ref_ball *b)
{
    MPFR_DECL_INIT(rad, RAD_PREC);
    MPFR_DECL_INIT(tmp, RAD_PREC);
    MPFR_DECL_INIT(den, RAD_PREC);
    if (mpfr_zero_p(a->rad) && mpfr_zero_p(b->rad)) {
        mpfr_set_zero(rad, 1);
    } else {
        abs_mul_up(rad, b->mid, a->rad);
        abs_mul_up(tmp, a->mid, b->rad);
        mpfr_add(rad, rad, tmp, MPFR_RNDU);
        mpfr_abs(den, b->mid, MPFR_RNDZ);               /* |bm| rounded down */
        mpfr_sub(tmp, den, b->rad, MPFR_RNDD);          /* |bm| - rb, down */
        if (mpfr_sgn(tmp) <= 0) {
            mpfr_set_inf(rad, 1);
        } else {
            mpfr_mul(den, den, tmp, MPFR_RNDD);
            mpfr_div(rad, rad, den, MPFR_RNDU);
        }
    }
    int t = mpfr_div(r->mid, a->mid, b->mid, MPFR_RNDN);
    finish(r, rad, t);
}

void ref_ball_add_d(ref_ball *r, const ref_ball *a, double x)
{
    MPFR_DECL_INIT(rad, RAD_PREC);
    mpfr_set(rad, a->rad, MPFR_RNDU);
    int t = mpfr_add_d(r->mid, a->mid, x, MPFR_RNDN);
    finish(r, rad, t);
}

void ref_ball_mul_d(ref_ball *r, const ref_ball *a, double x)
{
    MPFR_DECL_INIT(rad, RAD_PREC);
    if (mpfr_zero_p(a->rad)) {
        mpfr_set_zero(rad, 1);
    } else {
        mpfr_mul_d(rad, a->rad, x, MPFR_RNDA);
        mpfr_abs(rad, rad, MPFR_RNDU);
    }
    int t = mpfr_mul_d(r->mid, a->mid, x, MPFR_RNDN);
    finish(r, rad, t);
}

void ref_ball_div_si(ref_ball *r, const ref_ball *a, long n)
{
    MPFR_DECL_INIT(rad, RAD_PREC);
    mpfr_div_si(rad, a->rad, n, MPFR_RNDA);
    mpfr_abs(rad, rad, MPFR_RNDU);
    int t = mpfr_div_si(r->mid, a->mid, n, MPFR_RNDN);
    finish(r, rad, t);
}

/* |sqrt(a) - sqrt(am)| = |a - am| / (sqrt(a) + sqrt(am)) <= min(ra / sqrt(am), sqrt(ra)). */
void ref_ball_sqrt(ref_ball *r, const ref_ball *a)
{
    MPFR_DECL_INIT(rad, RAD_PREC);
    MPFR_DECL_INIT(tmp, RAD_PREC);
    if (mpfr_number_p(a->mid) && mpfr_sgn(a->mid) < 0) {
        /* The midpoint fell below 0 but the exact argument is >= 0 (the
         * caller's contract): it lies in [0, ra], so sqrt lies in [0, sqrt(ra)]. */
        mpfr_sqrt(rad, a->rad, MPFR_RNDU);
        mpfr_set_zero(r->mid, 1);
        finish(r, rad, 0);
        return;
    }
    mpfr_sqrt(rad, a->rad, MPFR_RNDU);
    if (mpfr_sgn(a->mid) > 0 && !mpfr_zero_p(a->rad)) {
        mpfr_sqrt(tmp, a->mid, MPFR_RNDD);
        if (mpfr_sgn(tmp) > 0) {
            mpfr_div(tmp, a->rad, tmp, MPFR_RNDU);
            mpfr_min(rad, rad, tmp, MPFR_RNDU);
        }
    }
    int t = mpfr_sqrt(r->mid, a->mid, MPFR_RNDN);
    finish(r, rad, t);
}

/* |exp(a) - exp(am)| <= exp(am) expm1(ra), and exp(am) <= |mid| + ulp(mid). */
void ref_ball_exp(ref_ball *r, const ref_ball *a)
{
    MPFR_DECL_INIT(spread, RAD_PREC);
    MPFR_DECL_INIT(rad, RAD_PREC);
    mpfr_expm1(spread, a->rad, MPFR_RNDU);
    int t = mpfr_exp(r->mid, a->mid, MPFR_RNDN);
    if (mpfr_regular_p(r->mid) && !mpfr_zero_p(spread)) {
        mpfr_set_ui_2exp(rad, 1, mpfr_get_exp(r->mid) - (mpfr_exp_t)mpfr_get_prec(r->mid), MPFR_RNDU);
        mpfr_add(rad, rad, r->mid, MPFR_RNDU); /* exp(am) is positive: mid + ulp bounds it */
        mpfr_mul(rad, rad, spread, MPFR_RNDU);
    } else {
        mpfr_set_zero(rad, 1);
    }
    finish(r, rad, t);
}

/* |log(a) - log(am)| <= -log1p(-ra/am) for ra < am. */
void ref_ball_log(ref_ball *r, const ref_ball *a)
{
    MPFR_DECL_INIT(rad, RAD_PREC);
    if (mpfr_zero_p(a->rad)) {
        mpfr_set_zero(rad, 1);
    } else if (mpfr_sgn(a->mid) <= 0) {
        mpfr_set_inf(rad, 1);
    } else {
        mpfr_div(rad, a->rad, a->mid, MPFR_RNDU);
        if (mpfr_cmp_ui(rad, 1) >= 0) {
            mpfr_set_inf(rad, 1);
        } else {
            mpfr_neg(rad, rad, MPFR_RNDN);
            mpfr_log1p(rad, rad, MPFR_RNDD);
            mpfr_neg(rad, rad, MPFR_RNDU);
        }
    }
    int t = mpfr_log(r->mid, a->mid, MPFR_RNDN);
    finish(r, rad, t);
}

void ref_ball_lipschitz(ref_ball *r, const ref_ball *a,
                        int (*f)(mpfr_ptr, mpfr_srcptr, mpfr_rnd_t), double lipschitz)
{
    MPFR_DECL_INIT(rad, RAD_PREC);
    mpfr_mul_d(rad, a->rad, lipschitz, MPFR_RNDU);
    int t = f(r->mid, a->mid, MPFR_RNDN);
    finish(r, rad, t);
}

void ref_ball_sum(ref_ball *r, const ref_ball *terms, size_t n)
{
    MPFR_DECL_INIT(rad, RAD_PREC);
    mpfr_set_zero(rad, 1);
    mpfr_ptr *ptrs = malloc((n ? n : 1) * sizeof *ptrs);
    if (!ptrs) {
        fprintf(stderr, "ulpscope reference: out of memory summing %zu terms\n", n);
        abort();
    }
    for (size_t i = 0; i < n; i++) {
        ptrs[i] = (mpfr_ptr)terms[i].mid;
        mpfr_add(rad, rad, terms[i].rad, MPFR_RNDU);
    }
    int t = mpfr_sum(r->mid, ptrs, (unsigned long)n, MPFR_RNDN);
    free(ptrs);
    finish(r, rad, t);
}

/* Doubles in the binade [2^(e-1), 2^e) carry 53 bits when normal and
 * e + 1074 bits when subnormal (fixed quantum 2^-1074). */
bool ref_ball_get_d(const ref_ball *b, double *out)
{
    *out = mpfr_get_d(b->mid, MPFR_RNDN);
    if (!mpfr_number_p(b->mid) || mpfr_zero_p(b->rad)) return true;
    if (mpfr_inf_p(b->rad) || mpfr_zero_p(b->mid)) return false;
    mpfr_exp_t e = mpfr_get_exp(b->mid);
    mpfr_exp_t err = e - mpfr_get_exp(b->rad); /* rad < 2^EXP(rad) = 2^(e - err) */
    if (e <= -1074) {
        /* below 2^-1075 everything rounds to zero once the ball stays below it */
        MPFR_DECL_INIT(hi, RAD_PREC);
        mpfr_abs(hi, b->mid, MPFR_RNDU);
        mpfr_add(hi, hi, b->rad, MPFR_RNDU);
        return mpfr_cmp_si_2exp(hi, 1, -1075) < 0;
    }
    mpfr_prec_t bits = e - 1 >= -1022 ? 53 : (mpfr_prec_t)(e + 1074);
    if (e - 1 < -1021) {
        /* subnormal precision depends on the binade: the ball must stay in it */
        MPFR_DECL_INIT(edge, RAD_PREC);
        mpfr_abs(edge, b->mid, MPFR_RNDD);
        mpfr_sub(edge, edge, b->rad, MPFR_RNDD);
        if (mpfr_cmp_si_2exp(edge, 1, e - 1) < 0) return false;
        mpfr_abs(edge, b->mid, MPFR_RNDU);
        mpfr_add(edge, edge, b->rad, MPFR_RNDU);
        if (mpfr_cmp_si_2exp(edge, 1, e) >= 0) return false;
    }
    return mpfr_can_round(b->mid, err, MPFR_RNDN, MPFR_RNDN, bits) != 0;
}

bool ref_output(const ref_ctx *ctx, const ref_ball *b, double *out)
{
    bool decided = ref_ball_get_d(b, out);
    if (ctx->bug == REF_BUG_TRUNCATE && isfinite(*out) && *out != 0.0) {
        MPFR_DECL_INIT(rounded, 53);
        mpfr_set_d(rounded, *out, MPFR_RNDN);
        if (mpfr_cmpabs(b->mid, rounded) < 0) *out = nextafter(*out, 0.0);
    }
    return decided;
}

/* Exact row sums for ref_group_rows, compared by (sum of squares, sum). */
typedef struct {
    mpfr_t sq, sum;
    long row;
} row_sums;

static int compare_row_sums(const void *pa, const void *pb)
{
    const row_sums *a = pa, *b = pb;
    int c = mpfr_cmp(a->sq, b->sq);
    if (!c) c = mpfr_cmp(a->sum, b->sum);
    if (!c) c = (a->row > b->row) - (a->row < b->row);
    return c;
}

void ref_group_rows(long rows, long cols, const double *x, bool centered, long *group)
{
    row_sums *rs = malloc((size_t)(rows ? rows : 1) * sizeof *rs);
    if (!rs) {
        fprintf(stderr, "ulpscope reference: out of memory grouping %ld rows\n", rows);
        abort();
    }
    exact_acc acc;
    long n = 0; /* rows with finite sums; a row holding NaN or inf is its own group */
    for (long r = 0; r < rows; r++) {
        const double *xr = x + r * cols;
        group[r] = r;
        mpfr_inits2(MPFR_PREC_MIN, rs[n].sq, rs[n].sum, (mpfr_ptr)0);
        exact_acc_init(&acc);
        for (long j = 0; j < cols; j++) exact_acc_add_product(&acc, xr[j], xr[j]);
        exact_acc_get_mpfr(&acc, rs[n].sq);
        exact_acc_init(&acc);
        for (long j = 0; centered && j < cols; j++) exact_acc_add(&acc, xr[j]);
        exact_acc_get_mpfr(&acc, rs[n].sum);
        rs[n].row = r;
        if (mpfr_number_p(rs[n].sq) && mpfr_number_p(rs[n].sum)) n++;
        else mpfr_clears(rs[n].sq, rs[n].sum, (mpfr_ptr)0);
    }
    qsort(rs, (size_t)n, sizeof *rs, compare_row_sums);
    /* in each run of equal sums the first entry has the smallest row index */
    for (long i = 0; i < n; i++) {
        bool same = i > 0 && mpfr_equal_p(rs[i].sq, rs[i - 1].sq) && mpfr_equal_p(rs[i].sum, rs[i - 1].sum);
        group[rs[i].row] = same ? group[rs[i - 1].row] : rs[i].row;
    }
    for (long i = 0; i < n; i++) mpfr_clears(rs[i].sq, rs[i].sum, (mpfr_ptr)0);
    free(rs);
}

long ref_group_members(long rows, const long *group, long *member, long *start)
{
    /* a group is named by its smallest row, so scanning rows in order meets
     * each group's name first at that row: number groups in that order */
    long *index = malloc((size_t)(rows ? rows : 1) * sizeof *index), ngroups = 0;
    if (!index) {
        fprintf(stderr, "ulpscope reference: out of memory grouping %ld rows\n", rows);
        abort();
    }
    for (long r = 0; r < rows; r++)
        if (group[r] == r) index[r] = ngroups++;
    for (long g = 0; g <= ngroups; g++) start[g] = 0;
    for (long r = 0; r < rows; r++) start[index[group[r]] + 1]++;
    for (long g = 0; g < ngroups; g++) start[g + 1] += start[g];
    long *next = malloc((size_t)(ngroups ? ngroups : 1) * sizeof *next);
    if (!next) {
        fprintf(stderr, "ulpscope reference: out of memory grouping %ld rows\n", rows);
        abort();
    }
    for (long g = 0; g < ngroups; g++) next[g] = start[g];
    for (long r = 0; r < rows; r++) member[next[index[group[r]]]++] = r;
    free(next);
    free(index);
    return ngroups;
}
