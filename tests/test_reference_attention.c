/* tests/test_reference_attention.c — the attention references: a single
 * position (o = v, lse = s), q = 0 where every row averages its prefix
 * (o_i = mean of v_0..v_i, dv_j = sum_{i>=j} dout_i / (i+1), dk = 0 exactly),
 * and the dropped-term twin. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <mpfr.h>

#include "precision/rng.h"
#include "reference/attention.h"
#include "tests/test_util.h"

static void test_single_position(void **state)
{
    (void)state;
    const double q[3] = {0.5, -1, 2}, k[3] = {1, 0.25, -0.5}, v[3] = {3, -7, 0.125};
    double o[3], lse;
    ref_ctx ctx = REF_CTX_DEFAULT;
    ref_attention_forward(&ctx, 1, 1, 3, 0.5, q, k, v, o, &lse);
    for (int d = 0; d < 3; d++) assert_true(o[d] == v[d]);
    assert_true(lse == 0.5 * (0.5 - 0.25 - 1.0)); /* the one score */
}

/* sum of x[0..n) / n correctly rounded; *tie set when the exact mean lies
 * exactly halfway between two doubles (a mean of two values can) */
static double mean_cr(const double *x, long stride, long n, int *tie)
{
    mpfr_t s, r;
    mpfr_inits2(2200, s, r, (mpfr_ptr)0);
    mpfr_set_zero(s, 1);
    for (long i = 0; i < n; i++) mpfr_add_d(s, s, x[i * stride], MPFR_RNDN);
    /* a tie needs a dyadic mean (n a power of two: the division is exact);
     * other n leave the 2200-bit value far from every tie */
    mpfr_div_si(s, s, n, MPFR_RNDN);
    double d = mpfr_get_d(s, MPFR_RNDN);
    mpfr_sub_d(r, s, d, MPFR_RNDN);
    mpfr_abs(r, r, MPFR_RNDN);
    double ad = fabs(d);
    *tie = d != 0.0 && (mpfr_cmp_d(r, 0.5 * (nextafter(ad, INFINITY) - ad)) == 0 ||
                        mpfr_cmp_d(r, 0.5 * (ad - nextafter(ad, 0.0))) == 0);
    mpfr_clears(s, r, (mpfr_ptr)0);
    return d;
}

static void test_uniform_attention(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("reference attention uniform"));
    enum { T = 9, D = 4 };
    double q[T * D] = {0}, k[T * D], v[T * D], g[T * D], o[T * D], lse[T], dq[T * D], dk[T * D], dv[T * D];
    for (int i = 0; i < T * D; i++) {
        k[i] = prec_rng_normal(&rng);
        v[i] = prec_rng_normal(&rng);
        g[i] = prec_rng_normal(&rng);
    }
    /* With q = 0 some outputs are exact doubles reached through exp and log
     * (o_1 = (v_0 + v_1) / 2): their balls keep a radius, so Ziv's loop
     * cannot prove the rounding, only deliver the midpoint; cap the loop. */
    ref_ctx ctx = REF_CTX_DEFAULT;
    ctx.max_prec = 512;
    ref_attention_forward(&ctx, 1, T, D, 0.5, q, k, v, o, lse);
    ref_attention_backward(&ctx, 1, T, D, 0.5, q, k, v, g, dq, dk, dv);
    /* A tie is the one case Ziv's loop cannot decide: the reference must then
     * count the output as unproven and return one of the two neighbours. */
    long ties = 0;
    for (int i = 0; i < T; i++)
        for (int d = 0; d < D; d++) {
            int tie;
            double want = mean_cr(v + d, D, i + 1, &tie), got = o[i * D + d];
            if (tie) {
                ties++;
                assert_true(got == want || got == nextafter(want, INFINITY) || got == nextafter(want, -INFINITY));
            } else {
                assert_true(got == want);
            }
            assert_true(dk[i * D + d] == 0.0);
        }
    if (ties) assert_true(ctx.unproven >= ties);
    /* dv_j = sum_{i >= j} g_i / (i + 1), in MPFR */
    for (int j = 0; j < T; j++)
        for (int d = 0; d < D; d++) {
            mpfr_t s, t;
            mpfr_inits2(2200, s, t, (mpfr_ptr)0);
            mpfr_set_zero(s, 1);
            for (int i = j; i < T; i++) {
                mpfr_set_d(t, g[i * D + d], MPFR_RNDN);
                mpfr_div_si(t, t, i + 1, MPFR_RNDN);
                mpfr_add(s, s, t, MPFR_RNDN);
            }
            assert_true(dv[j * D + d] == mpfr_get_d(s, MPFR_RNDN));
            mpfr_clears(s, t, (mpfr_ptr)0);
        }
}

/* Random inputs: every output proven. */
static void test_random_proven(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("reference attention random"));
    enum { BH = 2, T = 11, D = 5 };
    double q[BH * T * D], k[BH * T * D], v[BH * T * D], g[BH * T * D], o[BH * T * D], lse[BH * T];
    double dq[BH * T * D], dk[BH * T * D], dv[BH * T * D];
    for (int i = 0; i < BH * T * D; i++) {
        q[i] = (double)(float)prec_rng_normal(&rng);
        k[i] = (double)(float)prec_rng_normal(&rng);
        v[i] = (double)(float)prec_rng_normal(&rng);
        g[i] = (double)(float)prec_rng_normal(&rng);
    }
    ref_ctx ctx = REF_CTX_DEFAULT;
    ref_attention_forward(&ctx, BH, T, D, (double)0.4472136f, q, k, v, o, lse);
    ref_attention_backward(&ctx, BH, T, D, (double)0.4472136f, q, k, v, g, dq, dk, dv);
    assert_int_equal(ctx.unproven, 0);
    /* row 0 attends to itself only: dS_00 = 0, so its dq is exactly 0 */
    for (int d = 0; d < D; d++) assert_true(dq[d] == 0.0 && dq[T * D + d] == 0.0);
}

static void test_twin(void **state)
{
    (void)state;
    const double q[4] = {1, 2, 0.5, -1}, k[4] = {0.5, 1, -2, 0.25}, v[4] = {1, 2, 3, 4};
    double good[4], bad[4], lse[2];
    ref_ctx ctx = REF_CTX_DEFAULT, drop = REF_CTX_DEFAULT;
    drop.bug = REF_BUG_DROP_TERM;
    ref_attention_forward(&ctx, 1, 2, 2, 1.0, q, k, v, good, lse);
    ref_attention_forward(&drop, 1, 2, 2, 1.0, q, k, v, bad, lse);
    assert_true(good[2] != bad[2]); /* row 1 mixes two keys whose scores lost a term */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_position),
        cmocka_unit_test(test_uniform_attention),
        cmocka_unit_test(test_random_proven),
        cmocka_unit_test(test_twin),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
