/* reference/ref.h — the MPFR reference core every kernel check compares with.
 *
 * Conventions (every reference/<op>.c follows them):
 *
 *  - Inputs are the exact values a kernel saw, decoded to double (a bf16
 *    tensor is passed as the doubles its bit patterns mean).  Nothing is
 *    rounded on the way in.
 *  - Every output is the exact mathematical result for those inputs,
 *    correctly rounded to double (round to nearest even, subnormals
 *    included).  A kernel's error is then |got - ref| up to half an fp64 ulp,
 *    far below any format the kernels use.
 *  - Tensors are row-major and contiguous unless a function says otherwise:
 *    x[rows][cols] means x[r * cols + c].  Reductions of "row" ops (softmax,
 *    norms) run over the last dimension, cols.
 *  - Every function takes a ref_ctx: the MPFR working precision is the
 *    caller's choice (ctx->prec), and outputs whose rounding could not be
 *    proven are counted in ctx->unproven, never hidden.
 *
 * Why the returned double is correctly rounded (Ziv's strategy).  No fixed
 * working precision can guarantee correct rounding of a composite function
 * (exp, sqrt and a division in one expression: the table maker's dilemma has
 * no known bound for such compositions), so each op computes in *ball
 * arithmetic*: a value is a ref_ball, a midpoint at P bits plus a radius that
 * rigorously bounds |exact - midpoint|.  Each ball operation adds the
 * propagated input radii (first-order bounds made exact, e.g. for a product
 * |a|rb + |b|ra + ra rb) and its own rounding error.  ref_ball_get_d() then
 * asks MPFR (mpfr_can_round) whether every value in the ball rounds to the
 * same double; if not for some output, the op recomputes that row (or
 * column) at twice the precision, up to ctx->max_prec.  Since the radius
 * shrinks like 2^-P, the loop ends after one pass except when the exact
 * result lies within ~2^-P of a rounding boundary (a midpoint between two
 * doubles), which for irrational results (anything through exp, log or an
 * inexact square root) happens with probability ~2^(53-P) and for exact
 * intermediate steps never, because a ball whose operations were all exact
 * has radius zero.  The default first precision is 128 bits: one pass
 * almost always, and the cancellation a large-mean LayerNorm row causes
 * (mean/std = 1e4 loses ~14 bits) is simply visible in the radius.
 *
 * Adding an op (gelu, rope, attention, cross-entropy, adamw, ...): write
 * reference/<op>.h (declarations, formulas, shapes: the op's owner owns both
 * files, so nobody edits this core to add one) and reference/<op>.c, named
 * like kernels/<op>.cu, computing each output with ref_ball operations
 * inside the precision loop:
 *
 *     mpfr_prec_t p = ref_first_prec(ctx);
 *     for (;;) {
 *         ... ref_ball ops at precision p ...
 *         long undecided = 0;
 *         for each output i: undecided += !ref_output(ctx, &y_i, &out[i]);
 *         if (!undecided) break;
 *         if (!(p = ref_next_prec(ctx, p))) { ctx->unproven += undecided; break; }
 *         (re-init or ref_ball_set_prec the balls at the new p)
 *     }
 *
 * An undecided output keeps its midpoint rounded, which is within the final
 * radius of the exact value (tiny), but is counted as unproven.
 *
 * reference/softmax.c is the worked example; reference/layernorm.c shows
 * per-row and per-column loops.  Functions an op needs that are not below
 * follow the same rule: new radius = (bound on |f'| over the ball) * radius +
 * rounding error of the midpoint; see ref_ball_lipschitz().
 */
#ifndef ULPSCOPE_REFERENCE_REF_H
#define ULPSCOPE_REFERENCE_REF_H

#include <stdbool.h>
#include <stddef.h>
#include <mpfr.h>

#ifdef __cplusplus
extern "C" {
#endif

#define REF_PREC_DEFAULT 128   /* first working precision, bits */
#define REF_PREC_MAX_DEFAULT 8192 /* Ziv cap, bits */
#define REF_PREC_MIN 64        /* doubles must convert exactly: at least 53 */

/* Planted bugs for the reference tests' twins (a check that cannot fail is
 * a defect): an op honours ctx->bug through ref_terms() and ref_output(). */
typedef enum {
    REF_BUG_NONE = 0,
    REF_BUG_DROP_TERM,  /* every reduction leaves out its last term */
    REF_BUG_TRUNCATE,   /* outputs rounded toward zero instead of to nearest */
} ref_bug;

typedef struct {
    mpfr_prec_t prec;     /* first working precision (0: REF_PREC_DEFAULT); values
                             below REF_PREC_MIN are raised to it */
    mpfr_prec_t max_prec; /* highest precision the Ziv loop tries (0: REF_PREC_MAX_DEFAULT);
                             set max_prec = prec for a single fixed-precision pass */
    long unproven;        /* out: outputs whose correct rounding was not proven */
    long escalations;     /* out: times a row/column was recomputed at more bits */
    ref_bug bug;          /* REF_BUG_NONE except in the tests' twins */
} ref_ctx;

/* Defaults: start at 128 bits, escalate up to 8192, no planted bug. */
#define REF_CTX_DEFAULT ((ref_ctx){0, 0, 0, 0, REF_BUG_NONE})

/* The precision loop: first precision, then doubling; 0 once past max_prec. */
mpfr_prec_t ref_first_prec(const ref_ctx *ctx);
mpfr_prec_t ref_next_prec(ref_ctx *ctx, mpfr_prec_t p);

/* How many of n terms a reduction adds: n, or n - 1 under REF_BUG_DROP_TERM. */
size_t ref_terms(const ref_ctx *ctx, size_t n);

/* ---- ball arithmetic ------------------------------------------------------
 * The exact value lies in [mid - rad, mid + rad].  mid has the working
 * precision given at init; rad is a short MPFR number rounded upward.  All
 * operations allow the result to alias an operand.  A non-finite midpoint
 * (NaN, inf) carries radius 0 and propagates as in IEEE arithmetic. */
typedef struct {
    mpfr_t mid;
    mpfr_t rad;
} ref_ball;

void ref_ball_init(ref_ball *b, mpfr_prec_t prec);   /* value 0, radius 0 */
void ref_ball_clear(ref_ball *b);
/* Change the working precision (value becomes 0). */
void ref_ball_set_prec(ref_ball *b, mpfr_prec_t prec);
ref_ball *ref_balls_new(size_t n, mpfr_prec_t prec); /* n balls, aborts on OOM */
void ref_balls_free(ref_ball *b, size_t n);

void ref_ball_set_d(ref_ball *r, double x);   /* exact (prec >= 53) */
void ref_ball_set_si(ref_ball *r, long x);    /* exact for |x| < 2^prec */
void ref_ball_set(ref_ball *r, const ref_ball *a);
void ref_ball_neg(ref_ball *r, const ref_ball *a);
void ref_ball_add(ref_ball *r, const ref_ball *a, const ref_ball *b);
void ref_ball_sub(ref_ball *r, const ref_ball *a, const ref_ball *b);
void ref_ball_mul(ref_ball *r, const ref_ball *a, const ref_ball *b);
/* Division: if the ball b contains 0 the radius becomes +inf (undecidable). */
void ref_ball_div(ref_ball *r, const ref_ball *a, const ref_ball *b);
void ref_ball_add_d(ref_ball *r, const ref_ball *a, double x);
void ref_ball_mul_d(ref_ball *r, const ref_ball *a, double x);
void ref_ball_div_si(ref_ball *r, const ref_ball *a, long n);
/* sqrt: the exact argument must be >= 0 (the caller's math guarantees it). */
void ref_ball_sqrt(ref_ball *r, const ref_ball *a);
void ref_ball_exp(ref_ball *r, const ref_ball *a);
/* log: a ball reaching 0 or below gives radius +inf. */
void ref_ball_log(ref_ball *r, const ref_ball *a);
/* f(a) for an MPFR function f with |f'| <= lipschitz everywhere: tanh (1),
 * erf (2/sqrt(pi) < 1.1284), sin and cos (1), atan (1). */
void ref_ball_lipschitz(ref_ball *r, const ref_ball *a,
                        int (*f)(mpfr_ptr, mpfr_srcptr, mpfr_rnd_t), double lipschitz);
/* r = terms[0] + ... + terms[n-1]; the midpoint sum is correctly rounded
 * (mpfr_sum), the radius the sum of the radii plus that rounding. */
void ref_ball_sum(ref_ball *r, const ref_ball *terms, size_t n);

/* Rows of x[rows][cols] with equal statistics: group[r] is the smallest row
 * index whose exact sum of squares (and, when centered, exact sum) equals
 * row r's.  Equal sums mean equal mean and rstd, so a reduction over rows
 * (dgamma) can add such rows' terms before multiplying by their common
 * rstd: an exact zero (sum_r dy = 0 over identical rows, frequent once a
 * narrow format has rounded rows to the same values) then stays an exact
 * zero instead of a ball around 0 that no precision decides.  O(R log R). */
void ref_group_rows(long rows, long cols, const double *x, bool centered, long *group);
/* The groups as lists: member[rows] holds the rows group by group (each in
 * increasing order), start[g] .. start[g+1] the g-th group's slice; start
 * needs rows + 1 entries.  Returns the number of groups. */
long ref_group_members(long rows, const long *group, long *member, long *start);

/* The double nearest the exact value, when every point of the ball rounds
 * to the same double: stores it and returns true.  Otherwise stores the
 * midpoint rounded and returns false (the caller recomputes at more bits). */
bool ref_ball_get_d(const ref_ball *b, double *out);
/* ref_ball_get_d for an op's output: the same, except that REF_BUG_TRUNCATE
 * moves a result that was rounded away from zero one ulp toward zero. */
bool ref_output(const ref_ctx *ctx, const ref_ball *b, double *out);

#ifdef __cplusplus
}
#endif
#endif
