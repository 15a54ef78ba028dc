/* tests/test_reference_cross_entropy.c — the cross-entropy references: a
 * hand-worked row (loss log 2), shift invariance, gradients summing to zero,
 * the linear form against the materialised one on exactly representable
 * logits, ignored rows, the logit soft-cap (against an independent MPFR
 * evaluation, and its gradient against finite differences of the loss,
 * with a twin that leaves out the cap's derivative), and planted-bug twins. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <mpfr.h>
#include <stdlib.h>

#include "precision/rng.h"
#include "reference/cross_entropy.h"
#include "tests/test_util.h"

static void test_hand_row(void **state)
{
    (void)state;
    const double z[2] = {0.0, 0.0};
    const int32_t t[1] = {0};
    double loss, dz[2];
    ref_ctx ctx = REF_CTX_DEFAULT;
    ref_cross_entropy(&ctx, 1, 2, z, t, 0.0, 0.25, &loss, dz);
    mpfr_t l2;
    mpfr_init2(l2, 200);
    mpfr_const_log2(l2, MPFR_RNDN);
    assert_true(loss == mpfr_get_d(l2, MPFR_RNDN));
    mpfr_clear(l2);
    assert_true(dz[0] == -0.125 && dz[1] == 0.125);
}

static void test_shift_and_zero_sum(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("reference cross entropy shift"));
    enum { N = 4, V = 300 };
    double *z = malloc(N * V * sizeof(double)), *zs = malloc(N * V * sizeof(double));
    double *dz = malloc(N * V * sizeof(double)), *dzs = malloc(N * V * sizeof(double));
    double loss[N], loss_s[N];
    int32_t t[N] = {0, 17, V - 1, -1};
    for (int i = 0; i < N * V; i++) {
        z[i] = (double)(float)(2.0 * prec_rng_normal(&rng)); /* fp32 values: z + 4 stays exact */
        zs[i] = z[i] + 4.0;
    }
    ref_ctx ctx = REF_CTX_DEFAULT;
    ref_cross_entropy(&ctx, N, V, z, t, 0.0, 1.0, loss, dz);
    ref_cross_entropy(&ctx, N, V, zs, t, 0.0, 1.0, loss_s, dzs);
    for (int i = 0; i < N; i++) {
        assert_true(loss[i] == loss_s[i]);
        double sum = 0, abs = 0;
        for (int j = 0; j < V; j++) {
            assert_true(dz[i * V + j] == dzs[i * V + j]);
            sum += dz[i * V + j];
            abs += fabs(dz[i * V + j]);
        }
        /* softmax minus a one-hot sums to 0: only the roundings remain */
        assert_true(fabs(sum) <= 2 * V * 0x1p-53 * (abs + 1));
    }
    assert_true(loss[3] == 0.0 && dz[3 * V] == 0.0); /* ignored row */
    assert_int_equal(ctx.unproven, 0);
    free(z); free(zs); free(dz); free(dzs);
}

static void test_linear_matches_materialised(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("reference linear cross entropy"));
    enum { N = 3, C = 5, V = 40 };
    double h[N * C], W[V * C], z[N * V], loss_a[N], loss_b[N], dz_a[N * V], dz_b[N * V], dh[N * C], dW[V * C];
    int32_t t[N] = {1, 39, 7};
    /* small integers: every logit is exact in double */
    for (int i = 0; i < N * C; i++) h[i] = floor(4 * prec_rng_uniform(&rng)) - 2;
    for (int i = 0; i < V * C; i++) W[i] = floor(4 * prec_rng_uniform(&rng)) - 2;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < V; j++) {
            double s = 0;
            for (int c = 0; c < C; c++) s += h[i * C + c] * W[j * C + c];
            z[i * V + j] = s;
        }
    ref_ctx ctx = REF_CTX_DEFAULT;
    ref_cross_entropy(&ctx, N, V, z, t, 0.0, 0.5, loss_a, dz_a);
    ref_linear_cross_entropy(&ctx, N, C, V, h, W, t, 0.5, loss_b, dz_b, dh, dW);
    for (int i = 0; i < N; i++) assert_true(loss_a[i] == loss_b[i]);
    for (int i = 0; i < N * V; i++) assert_true(dz_a[i] == dz_b[i]);
    /* dh[0][0] = sum_j dz[0][j] W[j][0], from the rounded dz */
    double s = 0;
    for (int j = 0; j < V; j++) s += dz_b[j] * W[j * C];
    assert_true(fabs(dh[0] - s) <= 4 * V * 0x1p-53 * (fabs(s) + 1));
}

/* The soft-capped row at 300 bits, independently: z = c tanh(l / c),
 * loss = log sum exp z - z_t, dz_j = (softmax_j - [j = t]) (1 - tanh^2) dloss. */
static void capped_row_mpfr(int V, const double *l, int32_t t, double cap, double dloss, double *loss, double *dz)
{
    mpfr_t th[16], z[16], s, x, lse;
    mpfr_inits2(300, s, x, lse, (mpfr_ptr)0);
    mpfr_set_zero(s, 1);
    for (int j = 0; j < V; j++) {
        mpfr_inits2(300, th[j], z[j], (mpfr_ptr)0);
        mpfr_set_d(th[j], l[j], MPFR_RNDN);
        mpfr_div_d(th[j], th[j], cap, MPFR_RNDN);
        mpfr_tanh(th[j], th[j], MPFR_RNDN);
        mpfr_mul_d(z[j], th[j], cap, MPFR_RNDN);
        mpfr_exp(x, z[j], MPFR_RNDN);
        mpfr_add(s, s, x, MPFR_RNDN);
    }
    mpfr_log(lse, s, MPFR_RNDN);
    mpfr_sub(x, lse, z[t], MPFR_RNDN);
    *loss = mpfr_get_d(x, MPFR_RNDN);
    for (int j = 0; j < V; j++) {
        mpfr_sub(x, z[j], lse, MPFR_RNDN);
        mpfr_exp(x, x, MPFR_RNDN);
        if (j == t) mpfr_sub_ui(x, x, 1, MPFR_RNDN);
        mpfr_sqr(th[j], th[j], MPFR_RNDN);
        mpfr_ui_sub(th[j], 1, th[j], MPFR_RNDN);
        mpfr_mul(x, x, th[j], MPFR_RNDN);
        mpfr_mul_d(x, x, dloss, MPFR_RNDN);
        dz[j] = mpfr_get_d(x, MPFR_RNDN);
        mpfr_clears(th[j], z[j], (mpfr_ptr)0);
    }
    mpfr_clears(s, x, lse, (mpfr_ptr)0);
}

/* Largest |dz_j / dloss - (L(l + h e_j) - L(l - h e_j)) / 2h| over a row:
 * the gradient against central differences of the reference's own loss. */
static double gradient_vs_differences(int V, const double *l, int32_t t, double cap, const double *dz, double dloss)
{
    const double h = 0x1p-17;
    double worst = 0, lp[16], up, down, unused[16];
    for (int j = 0; j < V; j++) {
        ref_ctx ctx = REF_CTX_DEFAULT;
        for (int k = 0; k < V; k++) lp[k] = l[k];
        lp[j] = l[j] + h; /* exact: l has few significant bits */
        ref_cross_entropy(&ctx, 1, V, lp, &t, cap, 1.0, &up, unused);
        lp[j] = l[j] - h;
        ref_cross_entropy(&ctx, 1, V, lp, &t, cap, 1.0, &down, unused);
        worst = fmax(worst, fabs(dz[j] / dloss - (up - down) / (2 * h)));
    }
    return worst;
}

static void test_softcap(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("reference cross entropy softcap"));
    enum { N = 4, V = 11 };
    const double cap = 3.0, dloss = 0.25;
    double l[N * V], loss[N], dz[N * V], uncapped_dz[N * V], zc[N * V], unused[N];
    int32_t t[N];
    for (int i = 0; i < N * V; i++) l[i] = ldexp(round(ldexp(4.0 * prec_rng_normal(&rng), 12)), -12);
    for (int i = 0; i < N; i++) t[i] = (int32_t)(prec_rng_next(&rng) % V);
    ref_ctx ctx = REF_CTX_DEFAULT;
    ref_cross_entropy(&ctx, N, V, l, t, cap, dloss, loss, dz);
    assert_int_equal(ctx.unproven, 0);
    for (int i = 0; i < N; i++) {
        double want_loss, want_dz[V];
        capped_row_mpfr(V, l + i * V, t[i], cap, dloss, &want_loss, want_dz);
        assert_true(loss[i] == want_loss);
        for (int j = 0; j < V; j++) assert_true(dz[i * V + j] == want_dz[j]);
        /* central differences: O(h^2) truncation and 2^-53 / h rounding, far below 1e-6 */
        assert_true(gradient_vs_differences(V, l + i * V, t[i], cap, dz + i * V, dloss) < 1e-6);
    }
    /* twin: the capped logits' softmax gradient without the cap's derivative
     * 1 - tanh^2 must be told apart by the same difference test */
    for (int i = 0; i < N * V; i++) zc[i] = cap * tanh(l[i] / cap);
    ref_cross_entropy(&ctx, N, V, zc, t, 0.0, dloss, unused, uncapped_dz);
    double twin_worst = 0;
    for (int i = 0; i < N; i++)
        twin_worst = fmax(twin_worst, gradient_vs_differences(V, l + i * V, t[i], cap, uncapped_dz + i * V, dloss));
    assert_true(twin_worst > 1e-3);
    /* and a cap far above the logits changes (almost) nothing */
    double wide_loss[N], plain_loss[N];
    ref_cross_entropy(&ctx, N, V, l, t, 1e6, dloss, wide_loss, dz);
    ref_cross_entropy(&ctx, N, V, l, t, 0.0, dloss, plain_loss, dz);
    for (int i = 0; i < N; i++) assert_true(fabs(wide_loss[i] - plain_loss[i]) < 1e-9);
}

static void test_twins(void **state)
{
    (void)state;
    const double z[3] = {0.5, -1.0, 2.0};
    const int32_t t[1] = {1};
    double good, bad, dz[3];
    ref_ctx ctx = REF_CTX_DEFAULT, drop = REF_CTX_DEFAULT, trunc = REF_CTX_DEFAULT;
    drop.bug = REF_BUG_DROP_TERM;
    trunc.bug = REF_BUG_TRUNCATE;
    ref_cross_entropy(&ctx, 1, 3, z, t, 0.0, 1.0, &good, dz);
    ref_cross_entropy(&drop, 1, 3, z, t, 0.0, 1.0, &bad, dz);
    assert_true(bad < good - 0.5); /* exp(2) left out of the sum */
    ref_cross_entropy(&trunc, 1, 3, z, t, 0.0, 1.0, &bad, dz);
    assert_true(bad <= good && fabs(bad) <= fabs(good));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_row),
        cmocka_unit_test(test_shift_and_zero_sum),
        cmocka_unit_test(test_linear_matches_materialised),
        cmocka_unit_test(test_softcap),
        cmocka_unit_test(test_twins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
