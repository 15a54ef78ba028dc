/* tests/test_reference_cross_entropy.c — the cross-entropy references: a
 * hand-worked row (loss log 2), shift invariance, gradients summing to zero,
 * the linear form against the materialised one on exactly representable
 * logits, ignored rows, and planted-bug twins. */
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
    ref_cross_entropy(&ctx, 1, 2, z, t, 0.25, &loss, dz);
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
    ref_cross_entropy(&ctx, N, V, z, t, 1.0, loss, dz);
    ref_cross_entropy(&ctx, N, V, zs, t, 1.0, loss_s, dzs);
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
    ref_cross_entropy(&ctx, N, V, z, t, 0.5, loss_a, dz_a);
    ref_linear_cross_entropy(&ctx, N, C, V, h, W, t, 0.5, loss_b, dz_b, dh, dW);
    for (int i = 0; i < N; i++) assert_true(loss_a[i] == loss_b[i]);
    for (int i = 0; i < N * V; i++) assert_true(dz_a[i] == dz_b[i]);
    /* dh[0][0] = sum_j dz[0][j] W[j][0], from the rounded dz */
    double s = 0;
    for (int j = 0; j < V; j++) s += dz_b[j] * W[j * C];
    assert_true(fabs(dh[0] - s) <= 4 * V * 0x1p-53 * (fabs(s) + 1));
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
    ref_cross_entropy(&ctx, 1, 3, z, t, 1.0, &good, dz);
    ref_cross_entropy(&drop, 1, 3, z, t, 1.0, &bad, dz);
    assert_true(bad < good - 0.5); /* exp(2) left out of the sum */
    ref_cross_entropy(&trunc, 1, 3, z, t, 1.0, &bad, dz);
    assert_true(bad <= good && fabs(bad) <= fabs(good));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_row),
        cmocka_unit_test(test_shift_and_zero_sum),
        cmocka_unit_test(test_linear_matches_materialised),
        cmocka_unit_test(test_twins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
