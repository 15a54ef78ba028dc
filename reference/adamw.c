/* reference/adamw.c — one AdamW step in ball arithmetic; see adamw.h.  m'
 * and v' are sums of two exact products of doubles, so their balls are exact
 * at 128 bits unless the exponents are far apart; p' goes through a square
 * root and two divisions, and each element runs the Ziv loop. */
#include "reference/adamw.h"

void ref_ball_one_minus_pow(ref_ball *r, double beta, long t)
{
    mpfr_prec_t p = mpfr_get_prec(r->mid);
    ref_ball base, acc;
    ref_ball_init(&base, p);
    ref_ball_init(&acc, p);
    ref_ball_set_d(&base, beta);
    ref_ball_set_si(&acc, 1);
    for (long e = t; e > 0; e >>= 1) { /* binary powering, every product a ball */
        if (e & 1) ref_ball_mul(&acc, &acc, &base);
        if (e > 1) ref_ball_mul(&base, &base, &base);
    }
    ref_ball_set_si(r, 1);
    ref_ball_sub(r, r, &acc);
    ref_ball_clear(&base);
    ref_ball_clear(&acc);
}

void ref_adamw(ref_ctx *ctx, long n, const double *p, const double *g, const double *m, const double *v,
               const ref_adamw_hparams *h, double *p_out, double *m_out, double *v_out)
{
    mpfr_prec_t prec = ref_first_prec(ctx);
    enum { BC1, BC2, M, V, T, U, P, NB };
    ref_ball b[NB];
    for (int i = 0; i < NB; i++) ref_ball_init(&b[i], prec);
    for (long i = 0; i < n; i++) {
        mpfr_prec_t pr = ref_first_prec(ctx);
        for (;;) {
            ref_ball_one_minus_pow(&b[BC1], h->beta1, h->step);
            ref_ball_one_minus_pow(&b[BC2], h->beta2, h->step);
            /* m' = beta1 m + (1 - beta1) g */
            ref_ball_set_d(&b[M], m[i]);
            ref_ball_mul_d(&b[M], &b[M], h->beta1);
            ref_ball_set_si(&b[T], 1);
            ref_ball_add_d(&b[T], &b[T], -h->beta1);
            ref_ball_mul_d(&b[T], &b[T], g[i]);
            ref_ball_add(&b[M], &b[M], &b[T]);
            /* v' = beta2 v + (1 - beta2) g^2 */
            ref_ball_set_d(&b[V], v[i]);
            ref_ball_mul_d(&b[V], &b[V], h->beta2);
            ref_ball_set_si(&b[T], 1);
            ref_ball_add_d(&b[T], &b[T], -h->beta2);
            ref_ball_mul_d(&b[T], &b[T], g[i]);
            ref_ball_mul_d(&b[T], &b[T], g[i]);
            ref_ball_add(&b[V], &b[V], &b[T]);
            /* u = (m'/bc1) / (sqrt(v'/bc2) + eps) + wd p */
            ref_ball_div(&b[T], &b[V], &b[BC2]);
            ref_ball_sqrt(&b[T], &b[T]);
            ref_ball_add_d(&b[T], &b[T], h->eps);
            ref_ball_div(&b[U], &b[M], &b[BC1]);
            ref_ball_div(&b[U], &b[U], &b[T]);
            ref_ball_set_d(&b[P], p[i]);
            ref_ball_mul_d(&b[T], &b[P], h->weight_decay);
            ref_ball_add(&b[U], &b[U], &b[T]);
            /* p' = p - lr u */
            ref_ball_mul_d(&b[U], &b[U], -h->lr);
            ref_ball_add(&b[P], &b[P], &b[U]);
            long undecided = !ref_output(ctx, &b[P], &p_out[i]);
            undecided += !ref_output(ctx, &b[M], &m_out[i]);
            undecided += !ref_output(ctx, &b[V], &v_out[i]);
            if (!undecided) break;
            if (!(pr = ref_next_prec(ctx, pr))) {
                ctx->unproven += undecided;
                break;
            }
            for (int k = 0; k < NB; k++) ref_ball_set_prec(&b[k], pr);
        }
        if (pr != prec)
            for (int k = 0; k < NB; k++) ref_ball_set_prec(&b[k], prec);
    }
    for (int i = 0; i < NB; i++) ref_ball_clear(&b[i]);
}
