/* tests/test_reference_adamw.c — the AdamW reference: a hand-worked step
 * with exact binary values, the first-step identity p' = p - lr sign(g)
 * (m = v = 0, eps = 0, wd = 0: m'/bc1 = g and v'/bc2 = g^2 exactly), bias
 * corrections against a direct MPFR power, and the truncation twin. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <mpfr.h>

#include "precision/rng.h"
#include "reference/adamw.h"
#include "tests/test_util.h"

static void test_hand_step(void **state)
{
    (void)state;
    /* beta1 = beta2 = 1/2, t = 1: m' = 1, v' = 2, bc = 1/2, m'/bc1 = 2,
     * sqrt(v'/bc2) = 2, u = 1 + wd p = 1.5, p' = 1 - 0.5 * 1.5 = 0.25 */
    const double p = 1, g = 2, m = 0, v = 0;
    ref_adamw_hparams h = {0.5, 0.5, 0.5, 0.0, 0.5, 1};
    double po, mo, vo;
    ref_ctx ctx = REF_CTX_DEFAULT;
    ref_adamw(&ctx, 1, &p, &g, &m, &v, &h, &po, &mo, &vo);
    assert_true(po == 0.25);
    assert_true(mo == 1.0);
    assert_true(vo == 2.0);
    assert_int_equal(ctx.unproven, 0);
}

static void test_first_step_is_sign(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("reference adamw first step"));
    enum { N = 200 };
    double p[N], g[N], z[N] = {0}, po[N], mo[N], vo[N];
    for (int i = 0; i < N; i++) {
        p[i] = prec_rng_normal(&rng);
        g[i] = prec_rng_normal(&rng);
    }
    /* fp32 betas as a kernel receives them */
    ref_adamw_hparams h = {(double)0.001f, (double)0.9f, (double)0.95f, 0.0, 0.0, 1};
    ref_ctx ctx = REF_CTX_DEFAULT;
    ref_adamw(&ctx, N, p, g, z, z, &h, po, mo, vo);
    for (int i = 0; i < N; i++) {
        /* p - lr sign(g), correctly rounded: compute it exactly in MPFR */
        mpfr_t x;
        mpfr_init2(x, 200);
        mpfr_set_d(x, h.lr, MPFR_RNDN);
        if (g[i] > 0) mpfr_neg(x, x, MPFR_RNDN);
        mpfr_add_d(x, x, p[i], MPFR_RNDN);
        assert_true(po[i] == mpfr_get_d(x, MPFR_RNDN));
        mpfr_clear(x);
    }
    assert_int_equal(ctx.unproven, 0);
}

static void test_bias_correction(void **state)
{
    (void)state;
    const long steps[4] = {1, 2, 37, 1000};
    for (int i = 0; i < 4; i++) {
        ref_ball b;
        ref_ball_init(&b, 256);
        ref_ball_one_minus_pow(&b, (double)0.95f, steps[i]);
        mpfr_t want;
        mpfr_init2(want, 256);
        mpfr_set_d(want, (double)0.95f, MPFR_RNDN);
        mpfr_pow_ui(want, want, (unsigned long)steps[i], MPFR_RNDN);
        mpfr_ui_sub(want, 1, want, MPFR_RNDN);
        double got, exp_d = mpfr_get_d(want, MPFR_RNDN);
        assert_true(ref_ball_get_d(&b, &got));
        assert_true(got == exp_d);
        mpfr_clear(want);
        ref_ball_clear(&b);
    }
}

static void test_truncation_twin(void **state)
{
    (void)state;
    /* p' = 1 - 0.001 (1 + 0.1) is inexact in double; truncation must move at
     * least one of many such outputs */
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("reference adamw twin"));
    enum { N = 64 };
    double p[N], g[N], m[N], v[N], a[N], b[N], ma[N], mb[N], va[N], vb[N];
    for (int i = 0; i < N; i++) {
        p[i] = prec_rng_normal(&rng);
        g[i] = prec_rng_normal(&rng);
        m[i] = 0.1 * prec_rng_normal(&rng);
        v[i] = 0.01 * fabs(prec_rng_normal(&rng));
    }
    ref_adamw_hparams h = {(double)0.001f, (double)0.9f, (double)0.95f, (double)1e-8f, (double)0.1f, 7};
    ref_ctx good = REF_CTX_DEFAULT, bad = REF_CTX_DEFAULT;
    bad.bug = REF_BUG_TRUNCATE;
    ref_adamw(&good, N, p, g, m, v, &h, a, ma, va);
    ref_adamw(&bad, N, p, g, m, v, &h, b, mb, vb);
    int moved = 0;
    for (int i = 0; i < N; i++) {
        moved += a[i] != b[i];
        assert_true(fabs(b[i]) <= fabs(a[i])); /* toward zero, never away */
    }
    assert_true(moved > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_step),
        cmocka_unit_test(test_first_step_is_sign),
        cmocka_unit_test(test_bias_correction),
        cmocka_unit_test(test_truncation_twin),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
