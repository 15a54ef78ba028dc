/* reference/cross_entropy.c — see cross_entropy.h.  Each row runs the Ziv
 * loop over its loss and its V gradients; the logits enter as balls (exact
 * doubles, or exact dot products held in MPFR for the linear form). */
#include "reference/cross_entropy.h"

#include <math.h>
#include <stdlib.h>

#include "reference/exact.h"
#include "reference/matmul_epilogue.h"
#include "reference/matmul.h"

/* One row.  Logits come from zd (doubles) or zx (exact MPFR values); m is
 * the row's largest (capped) logit as a double (any shift works; this keeps
 * the exponentials in range).  cap > 0: z = cap tanh(l / cap), with th[j]
 * holding tanh(l / cap) for the gradient's factor 1 - th^2 (th unused when
 * cap is 0). */
static void row(ref_ctx *ctx, long V, const double *zd, mpfr_t *zx, double cap, double m, int32_t t, double dloss,
                double *loss, double *dz, ref_ball *z, ref_ball *e, ref_ball *th)
{
    if (t < 0 || t >= V) {
        *loss = 0.0;
        if (dz)
            for (long j = 0; j < V; j++) dz[j] = 0.0;
        return;
    }
    mpfr_prec_t p = ref_first_prec(ctx);
    ref_ball sum, lse, q;
    ref_ball_init(&sum, p);
    ref_ball_init(&lse, p);
    ref_ball_init(&q, p);
    for (;;) {
        for (long j = 0; j < V; j++) {
            if (zx) ref_ball_set_exact(&z[j], zx[j]);
            else ref_ball_set_d(&z[j], zd[j]);
            if (cap > 0) {
                ref_ball_set_d(&th[j], cap);
                ref_ball_div(&th[j], &z[j], &th[j]);
                ref_ball_lipschitz(&th[j], &th[j], mpfr_tanh, 1.0);
                ref_ball_mul_d(&z[j], &th[j], cap);
            }
            ref_ball_add_d(&e[j], &z[j], -m);
            ref_ball_exp(&e[j], &e[j]);
        }
        ref_ball_sum(&sum, e, ref_terms(ctx, (size_t)V));
        ref_ball_log(&lse, &sum);
        ref_ball_add_d(&lse, &lse, m);
        ref_ball_sub(&q, &lse, &z[t]);
        long undecided = !ref_output(ctx, &q, loss);
        if (dz)
            for (long j = 0; j < V; j++) {
                ref_ball_sub(&q, &z[j], &lse);
                ref_ball_exp(&q, &q);
                if (j == t) ref_ball_add_d(&q, &q, -1.0);
                if (cap > 0) { /* times 1 - th^2, th^2 formed in e[j] (the sum is done with it) */
                    ref_ball_mul(&e[j], &th[j], &th[j]);
                    ref_ball_neg(&e[j], &e[j]);
                    ref_ball_add_d(&e[j], &e[j], 1.0);
                    ref_ball_mul(&q, &q, &e[j]);
                }
                ref_ball_mul_d(&q, &q, dloss);
                undecided += !ref_output(ctx, &q, &dz[j]);
            }
        if (!undecided) break;
        if (!(p = ref_next_prec(ctx, p))) {
            ctx->unproven += undecided;
            break;
        }
        for (long j = 0; j < V; j++) {
            ref_ball_set_prec(&z[j], p);
            ref_ball_set_prec(&e[j], p);
            if (cap > 0) ref_ball_set_prec(&th[j], p);
        }
        ref_ball_set_prec(&sum, p);
        ref_ball_set_prec(&lse, p);
        ref_ball_set_prec(&q, p);
    }
    ref_ball_clear(&sum);
    ref_ball_clear(&lse);
    ref_ball_clear(&q);
}

void ref_cross_entropy(ref_ctx *ctx, long N, long V, const double *logits, const int32_t *targets, double softcap,
                       double dloss, double *losses, double *dlogits)
{
    const size_t nth = softcap > 0 ? (size_t)V : 0;
    ref_ball *z = ref_balls_new((size_t)V, ref_first_prec(ctx)), *e = ref_balls_new((size_t)V, ref_first_prec(ctx));
    ref_ball *th = nth ? ref_balls_new(nth, ref_first_prec(ctx)) : NULL;
    for (long i = 0; i < N; i++) {
        const double *zr = logits + i * V;
        double m = -INFINITY;
        for (long j = 0; j < V; j++) m = zr[j] > m ? zr[j] : m;
        if (softcap > 0) m = softcap * tanh(m / softcap); /* the cap is increasing: the capped maximum */
        for (long j = 0; j < V; j++) {
            ref_ball_set_prec(&z[j], ref_first_prec(ctx));
            ref_ball_set_prec(&e[j], ref_first_prec(ctx));
            if (nth) ref_ball_set_prec(&th[j], ref_first_prec(ctx));
        }
        row(ctx, V, zr, NULL, softcap, m, targets[i], dloss, &losses[i], dlogits ? dlogits + i * V : NULL, z, e, th);
    }
    ref_balls_free(z, (size_t)V);
    ref_balls_free(e, (size_t)V);
    if (th) ref_balls_free(th, nth);
}

void ref_linear_cross_entropy(ref_ctx *ctx, long N, long C, long V, const double *h, const double *W,
                              const int32_t *targets, double dloss, double *losses, double *dlogits, double *dh,
                              double *dW)
{
    ref_ball *z = ref_balls_new((size_t)V, ref_first_prec(ctx)), *e = ref_balls_new((size_t)V, ref_first_prec(ctx));
    mpfr_t *zx = malloc((size_t)V * sizeof *zx);
    if (!zx) abort();
    for (long j = 0; j < V; j++) mpfr_init2(zx[j], 64);
    const size_t terms = ref_terms(ctx, (size_t)C);
    exact_acc acc;
    for (long i = 0; i < N; i++) {
        double m = -INFINITY;
        for (long j = 0; j < V; j++) {
            exact_acc_init(&acc);
            for (size_t c = 0; c < terms; c++) exact_acc_add_product(&acc, h[i * C + (long)c], W[j * C + (long)c]);
            exact_acc_get_mpfr(&acc, zx[j]);
            double zj = mpfr_get_d(zx[j], MPFR_RNDN);
            m = zj > m ? zj : m;
            ref_ball_set_prec(&z[j], ref_first_prec(ctx));
            ref_ball_set_prec(&e[j], ref_first_prec(ctx));
        }
        row(ctx, V, NULL, zx, 0.0, m, targets[i], dloss, &losses[i], dlogits + i * V, z, e, NULL);
    }
    for (long j = 0; j < V; j++) mpfr_clear(zx[j]);
    free(zx);
    ref_balls_free(z, (size_t)V);
    ref_balls_free(e, (size_t)V);
    ref_ctx exact = *ctx; /* the gradient GEMMs: exact sums of the rounded dz */
    ref_matmul(&exact, N, C, V, dlogits, V, 1, W, C, 1, dh, C);
    ref_matmul(&exact, V, C, N, dlogits, 1, V, h, C, 1, dW, C);
    ctx->unproven = exact.unproven;
}
