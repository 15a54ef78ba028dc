/* reference/attention.c — see attention.h.  Per head: the exact dot
 * products once (mpfr values of whatever precision they need), then the
 * softmax and the sums in balls, refined together until every output of the
 * head rounds to a unique double. */
#include "reference/attention.h"

#include <math.h>
#include <stdlib.h>

#include "reference/exact.h"
#include "reference/matmul_epilogue.h"

/* dots[i*T + j] = x_i . y_j exactly, for j <= i (x, y [T, D] of one head). */
static void exact_dots(const ref_ctx *ctx, long T, long D, const double *x, const double *y, mpfr_t *dots)
{
    exact_acc acc;
    const size_t terms = ref_terms(ctx, (size_t)D);
    for (long i = 0; i < T; i++)
        for (long j = 0; j <= i; j++) {
            exact_acc_init(&acc);
            for (size_t d = 0; d < terms; d++) exact_acc_add_product(&acc, x[i * D + (long)d], y[j * D + (long)d]);
            exact_acc_get_mpfr(&acc, dots[i * T + j]);
        }
}

typedef struct {
    long T, D;
    ref_ball *P, *aux, *terms, lse, t;
    mpfr_t *sdot, *gdot;
} head_state;

static void head_init(head_state *h, long T, long D, mpfr_prec_t p)
{
    h->T = T;
    h->D = D;
    h->P = ref_balls_new((size_t)(T * T), p);
    h->aux = ref_balls_new((size_t)(T * T), p);
    h->terms = ref_balls_new((size_t)T, p);
    ref_ball_init(&h->lse, p);
    ref_ball_init(&h->t, p);
    h->sdot = malloc((size_t)(T * T) * sizeof(mpfr_t));
    h->gdot = malloc((size_t)(T * T) * sizeof(mpfr_t));
    if (!h->sdot || !h->gdot) abort();
    for (long i = 0; i < T * T; i++) {
        mpfr_init2(h->sdot[i], 64);
        mpfr_init2(h->gdot[i], 64);
    }
}

static void head_set_prec(head_state *h, mpfr_prec_t p)
{
    for (long i = 0; i < h->T * h->T; i++) {
        ref_ball_set_prec(&h->P[i], p);
        ref_ball_set_prec(&h->aux[i], p);
    }
    for (long i = 0; i < h->T; i++) ref_ball_set_prec(&h->terms[i], p);
    ref_ball_set_prec(&h->lse, p);
    ref_ball_set_prec(&h->t, p);
}

static void head_clear(head_state *h)
{
    ref_balls_free(h->P, (size_t)(h->T * h->T));
    ref_balls_free(h->aux, (size_t)(h->T * h->T));
    ref_balls_free(h->terms, (size_t)h->T);
    ref_ball_clear(&h->lse);
    ref_ball_clear(&h->t);
    for (long i = 0; i < h->T * h->T; i++) {
        mpfr_clear(h->sdot[i]);
        mpfr_clear(h->gdot[i]);
    }
    free(h->sdot);
    free(h->gdot);
}

/* P (row i, j <= i) from the exact score dots; lse_i into lse_out when given
 * (returns the count of undecided lse outputs). */
static long probabilities(ref_ctx *ctx, head_state *h, double scale, double *lse_out)
{
    const long T = h->T;
    long undecided = 0;
    for (long i = 0; i < T; i++) {
        double m = -INFINITY;
        for (long j = 0; j <= i; j++) {
            ref_ball_set_exact(&h->aux[i * T + j], h->sdot[i * T + j]);
            ref_ball_mul_d(&h->aux[i * T + j], &h->aux[i * T + j], scale); /* s_ij */
            double sd = mpfr_get_d(h->aux[i * T + j].mid, MPFR_RNDN);
            m = sd > m ? sd : m;
        }
        if (i == 0) {
            /* one key: lse = s_00 and P_00 = 1 exactly.  Through exp and log
             * the ball would keep a radius around an exact (often
             * representable) value, and the Ziv loop could never decide it. */
            ref_ball_set(&h->lse, &h->aux[0]);
            ref_ball_set_si(&h->P[0], 1);
        } else {
            for (long j = 0; j <= i; j++) {
                ref_ball_add_d(&h->terms[j], &h->aux[i * T + j], -m);
                ref_ball_exp(&h->terms[j], &h->terms[j]);
            }
            ref_ball_sum(&h->t, h->terms, (size_t)(i + 1));
            ref_ball_log(&h->lse, &h->t);
            ref_ball_add_d(&h->lse, &h->lse, m);
            for (long j = 0; j <= i; j++) {
                ref_ball_sub(&h->P[i * T + j], &h->aux[i * T + j], &h->lse);
                ref_ball_exp(&h->P[i * T + j], &h->P[i * T + j]);
            }
        }
        if (lse_out) undecided += !ref_output(ctx, &h->lse, &lse_out[i]);
    }
    return undecided;
}

void ref_attention_forward(ref_ctx *ctx, long BH, long T, long D, double scale, const double *q, const double *k,
                           const double *v, double *o, double *lse)
{
    head_state h;
    head_init(&h, T, D, ref_first_prec(ctx));
    for (long b = 0; b < BH; b++) {
        const double *qb = q + b * T * D, *kb = k + b * T * D, *vb = v + b * T * D;
        exact_dots(ctx, T, D, qb, kb, h.sdot);
        mpfr_prec_t p = ref_first_prec(ctx);
        head_set_prec(&h, p);
        for (;;) {
            long undecided = probabilities(ctx, &h, scale, lse + b * T);
            for (long i = 0; i < T; i++)
                for (long d = 0; d < D; d++) {
                    for (long j = 0; j <= i; j++) ref_ball_mul_d(&h.terms[j], &h.P[i * T + j], vb[j * D + d]);
                    ref_ball_sum(&h.t, h.terms, (size_t)(i + 1));
                    undecided += !ref_output(ctx, &h.t, &o[(b * T + i) * D + d]);
                }
            if (!undecided) break;
            if (!(p = ref_next_prec(ctx, p))) {
                ctx->unproven += undecided;
                break;
            }
            head_set_prec(&h, p);
        }
    }
    head_clear(&h);
}

void ref_attention_backward(ref_ctx *ctx, long BH, long T, long D, double scale, const double *q, const double *k,
                            const double *v, const double *dout, double *dq, double *dk, double *dv)
{
    head_state h;
    head_init(&h, T, D, ref_first_prec(ctx));
    ref_ball delta;
    ref_ball_init(&delta, ref_first_prec(ctx));
    for (long b = 0; b < BH; b++) {
        const long off = b * T * D;
        exact_dots(ctx, T, D, q + off, k + off, h.sdot);
        exact_dots(ctx, T, D, dout + off, v + off, h.gdot);
        mpfr_prec_t p = ref_first_prec(ctx);
        head_set_prec(&h, p);
        ref_ball_set_prec(&delta, p);
        for (;;) {
            probabilities(ctx, &h, scale, NULL);
            /* aux = dS: P (dP - sum_k P_ik dP_ik), row by row */
            ref_ball_set_si(&h.aux[0], 0); /* row 0: dS_00 = 1 (dP_00 - dP_00) = 0 exactly */
            for (long i = 1; i < T; i++) {
                for (long j = 0; j <= i; j++) {
                    ref_ball_set_exact(&h.aux[i * T + j], h.gdot[i * T + j]);
                    ref_ball_mul(&h.terms[j], &h.P[i * T + j], &h.aux[i * T + j]);
                }
                ref_ball_sum(&delta, h.terms, (size_t)(i + 1));
                for (long j = 0; j <= i; j++) {
                    ref_ball_sub(&h.aux[i * T + j], &h.aux[i * T + j], &delta);
                    ref_ball_mul(&h.aux[i * T + j], &h.aux[i * T + j], &h.P[i * T + j]);
                }
            }
            long undecided = 0;
            for (long i = 0; i < T; i++)
                for (long d = 0; d < D; d++) {
                    for (long j = 0; j <= i; j++) ref_ball_mul_d(&h.terms[j], &h.aux[i * T + j], k[off + j * D + d]);
                    ref_ball_sum(&h.t, h.terms, (size_t)(i + 1));
                    ref_ball_mul_d(&h.t, &h.t, scale);
                    undecided += !ref_output(ctx, &h.t, &dq[off + i * D + d]);
                }
            for (long j = 0; j < T; j++)
                for (long d = 0; d < D; d++) {
                    for (long i = j; i < T; i++) ref_ball_mul_d(&h.terms[i - j], &h.aux[i * T + j], q[off + i * D + d]);
                    ref_ball_sum(&h.t, h.terms, (size_t)(T - j));
                    ref_ball_mul_d(&h.t, &h.t, scale);
                    undecided += !ref_output(ctx, &h.t, &dk[off + j * D + d]);
                    for (long i = j; i < T; i++) ref_ball_mul_d(&h.terms[i - j], &h.P[i * T + j], dout[off + i * D + d]);
                    ref_ball_sum(&h.t, h.terms, (size_t)(T - j));
                    undecided += !ref_output(ctx, &h.t, &dv[off + j * D + d]);
                }
            if (!undecided) break;
            if (!(p = ref_next_prec(ctx, p))) {
                ctx->unproven += undecided;
                break;
            }
            head_set_prec(&h, p);
            ref_ball_set_prec(&delta, p);
        }
    }
    ref_ball_clear(&delta);
    head_clear(&h);
}
