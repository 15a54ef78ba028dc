/* reference/matmul_epilogue.c — matmul with scaling, C, bias and GELU; see
 * matmul_epilogue.h.  The sum over k is exact in an exact_acc; everything
 * after it is a ball at the working precision, refined by the Ziv loop per
 * output element. */
#include "reference/matmul_epilogue.h"

#include <math.h>

#include "reference/exact.h"

void ref_ball_set_exact(ref_ball *r, mpfr_srcptr exact)
{
    int t = mpfr_set(r->mid, exact, MPFR_RNDN);
    if (t != 0 && mpfr_regular_p(r->mid))
        mpfr_set_ui_2exp(r->rad, 1, mpfr_get_exp(r->mid) - (mpfr_exp_t)mpfr_get_prec(r->mid), MPFR_RNDU);
    else
        mpfr_set_zero(r->rad, 1);
}

/* sqrt(2/pi) and 0.044715 as balls at r's precision. */
static void gelu_constants(ref_ball *sqrt_2_over_pi, ref_ball *cubic)
{
    ref_ball two;
    ref_ball_init(&two, mpfr_get_prec(sqrt_2_over_pi->mid));
    mpfr_const_pi(sqrt_2_over_pi->mid, MPFR_RNDN); /* pi, then one ulp of radius */
    mpfr_set_ui_2exp(sqrt_2_over_pi->rad, 1,
                     mpfr_get_exp(sqrt_2_over_pi->mid) - (mpfr_exp_t)mpfr_get_prec(sqrt_2_over_pi->mid), MPFR_RNDU);
    ref_ball_set_d(&two, 2.0);
    ref_ball_div(sqrt_2_over_pi, &two, sqrt_2_over_pi);
    ref_ball_sqrt(sqrt_2_over_pi, sqrt_2_over_pi);
    ref_ball_clear(&two);
    int t = mpfr_set_str(cubic->mid, "0.044715", 10, MPFR_RNDN);
    if (t != 0)
        mpfr_set_ui_2exp(cubic->rad, 1, mpfr_get_exp(cubic->mid) - (mpfr_exp_t)mpfr_get_prec(cubic->mid), MPFR_RNDU);
    else
        mpfr_set_zero(cubic->rad, 1);
}

void ref_ball_gelu_tanh(ref_ball *r, const ref_ball *a)
{
    mpfr_prec_t p = mpfr_get_prec(r->mid) > mpfr_get_prec(a->mid) ? mpfr_get_prec(r->mid) : mpfr_get_prec(a->mid);
    ref_ball c0, c1, z, t;
    ref_ball_init(&c0, p);
    ref_ball_init(&c1, p);
    ref_ball_init(&z, p);
    ref_ball_init(&t, p);
    gelu_constants(&c0, &c1);
    ref_ball_set(&z, a);
    ref_ball_mul(&t, &z, &z);
    ref_ball_mul(&t, &t, &z);
    ref_ball_mul(&t, &t, &c1);  /* 0.044715 z^3 */
    ref_ball_add(&t, &t, &z);
    ref_ball_mul(&t, &t, &c0);  /* sqrt(2/pi) (z + 0.044715 z^3) */
    ref_ball_lipschitz(&t, &t, mpfr_tanh, 1.0);
    ref_ball_add_d(&t, &t, 1.0);
    ref_ball_mul(&t, &t, &z);
    ref_ball_mul_d(r, &t, 0.5); /* exact */
    ref_ball_clear(&c0);
    ref_ball_clear(&c1);
    ref_ball_clear(&z);
    ref_ball_clear(&t);
}

void ref_matmul_epilogue(ref_ctx *ctx, long M, long N, long K, const double *A, long a_rs, long a_cs,
                         const double *B, long b_rs, long b_cs, double alpha, const double *C, double beta,
                         const double *bias, int gelu, double *Y, long ldy)
{
    const size_t terms = ref_terms(ctx, (size_t)K);
    exact_acc acc;
    mpfr_t sum;
    mpfr_init2(sum, 64);
    ref_ball z, t;
    ref_ball_init(&z, ref_first_prec(ctx));
    ref_ball_init(&t, ref_first_prec(ctx));
    for (long m = 0; m < M; m++) {
        for (long n = 0; n < N; n++) {
            exact_acc_init(&acc);
            for (size_t k = 0; k < terms; k++) exact_acc_add_product(&acc, A[m * a_rs + (long)k * a_cs], B[(long)k * b_rs + n * b_cs]);
            exact_acc_get_mpfr(&acc, sum);
            double *out = &Y[m * ldy + n];
            if (!mpfr_number_p(sum)) { /* NaN or inf inputs: IEEE propagation is the reference */
                double s = mpfr_get_d(sum, MPFR_RNDN) * alpha;
                if (C) s += beta * C[m * ldy + n];
                if (bias) s += bias[n];
                *out = s;
                continue;
            }
            mpfr_prec_t p = ref_first_prec(ctx);
            ref_ball_set_prec(&z, p);
            ref_ball_set_prec(&t, p);
            for (;;) {
                ref_ball_set_exact(&z, sum);
                ref_ball_mul_d(&z, &z, alpha);
                if (C) {
                    ref_ball_set_d(&t, C[m * ldy + n]);
                    ref_ball_mul_d(&t, &t, beta);
                    ref_ball_add(&z, &z, &t);
                }
                if (bias) ref_ball_add_d(&z, &z, bias[n]);
                if (gelu) ref_ball_gelu_tanh(&z, &z);
                if (ref_output(ctx, &z, out)) break;
                if (!(p = ref_next_prec(ctx, p))) {
                    ctx->unproven++;
                    break;
                }
                ref_ball_set_prec(&z, p);
                ref_ball_set_prec(&t, p);
            }
        }
    }
    ref_ball_clear(&z);
    ref_ball_clear(&t);
    mpfr_clear(sum);
}
