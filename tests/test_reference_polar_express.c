/* tests/test_reference_polar_express.c — the polar-express references: the
 * normalisation of a 3-4-5 row, a step on diagonal matrices (singular values
 * map through p(s) = a s + b s^3 + c s^5), the transpose identity
 * p(X^T) = p(X)^T that makes wide and tall forms equal, and the twins. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <mpfr.h>

#include "precision/rng.h"
#include "reference/polar_express.h"
#include "tests/test_util.h"

static void test_normalize(void **state)
{
    (void)state;
    const double G[2] = {3.0, 4.0};
    double X[2];
    ref_ctx ctx = REF_CTX_DEFAULT;
    ref_polar_express_normalize(&ctx, 1, 2, G, 1.0, 0.0, X);
    assert_true(X[0] == 0.6 && X[1] == 0.8); /* 3/5 and 4/5 correctly rounded */
    ref_polar_express_normalize(&ctx, 1, 2, G, 2.0, 0.0, X);
    assert_true(X[0] == 0.3 && X[1] == 0.4);
}

/* p(s) = a s + b s^3 + c s^5 in MPFR, correctly rounded */
static double p_of(double s, double a, double b, double c)
{
    mpfr_t x, t, r;
    mpfr_inits2(512, x, t, r, (mpfr_ptr)0);
    mpfr_set_d(x, s, MPFR_RNDN);
    mpfr_mul_d(r, x, a, MPFR_RNDN);
    mpfr_pow_ui(t, x, 3, MPFR_RNDN);
    mpfr_mul_d(t, t, b, MPFR_RNDN);
    mpfr_add(r, r, t, MPFR_RNDN);
    mpfr_pow_ui(t, x, 5, MPFR_RNDN);
    mpfr_mul_d(t, t, c, MPFR_RNDN);
    mpfr_add(r, r, t, MPFR_RNDN);
    double d = mpfr_get_d(r, MPFR_RNDN);
    mpfr_clears(x, t, r, (mpfr_ptr)0);
    return d;
}

static void test_diagonal_step(void **state)
{
    (void)state;
    const double a = (double)8.156554524902461f, b = (double)-22.48329292557795f, c = (double)15.878769915207462f;
    /* X = [diag(0.5, 0.25) | 0]: 2 x 3 */
    const double X[6] = {0.5, 0, 0, 0, 0.25, 0};
    double Xn[6];
    ref_ctx ctx = REF_CTX_DEFAULT;
    ref_polar_express_step(&ctx, 2, 3, X, a, b, c, Xn);
    assert_true(Xn[0] == p_of(0.5, a, b, c));
    assert_true(Xn[4] == p_of(0.25, a, b, c));
    assert_true(Xn[1] == 0 && Xn[2] == 0 && Xn[3] == 0 && Xn[5] == 0);
    assert_int_equal(ctx.unproven, 0);
}

static void test_transpose_identity(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("reference polar express transpose"));
    enum { R = 4, C = 7 };
    double X[R * C], Xt[R * C], Y[R * C], Yt[R * C];
    for (int i = 0; i < R * C; i++) X[i] = (double)(float)(0.2 * prec_rng_normal(&rng));
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) Xt[j * R + i] = X[i * C + j];
    ref_ctx ctx = REF_CTX_DEFAULT;
    ref_polar_express_step(&ctx, R, C, X, 3.4445, -4.7750, 2.0315, Y);  /* wide */
    ref_polar_express_step(&ctx, C, R, Xt, 3.4445, -4.7750, 2.0315, Yt); /* tall */
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) assert_true(Y[i * C + j] == Yt[j * R + i]);
    assert_int_equal(ctx.unproven, 0);
}

static void test_twins(void **state)
{
    (void)state;
    const double X[4] = {0.5, 0.125, -0.25, 0.375};
    double good[4], bad[4];
    ref_ctx ctx = REF_CTX_DEFAULT, drop = REF_CTX_DEFAULT;
    drop.bug = REF_BUG_DROP_TERM;
    ref_polar_express_step(&ctx, 2, 2, X, 3.4445, -4.7750, 2.0315, good);
    ref_polar_express_step(&drop, 2, 2, X, 3.4445, -4.7750, 2.0315, bad);
    int differ = 0;
    for (int i = 0; i < 4; i++) differ += good[i] != bad[i];
    assert_true(differ > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_normalize),
        cmocka_unit_test(test_diagonal_step),
        cmocka_unit_test(test_transpose_identity),
        cmocka_unit_test(test_twins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
