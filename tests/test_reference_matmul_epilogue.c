/* tests/test_reference_matmul_epilogue.c — the matmul-with-epilogue
 * reference: hand values (exact integers, GELU at points whose 40-digit
 * values come from an independent evaluation), agreement with
 * reference/matmul when the epilogue is the identity, and planted-bug twins
 * that must change the answer. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <mpfr.h>

#include "precision/rng.h"
#include "reference/matmul.h"
#include "reference/matmul_epilogue.h"
#include "tests/test_util.h"

/* x correctly rounded from the decimal string: the nearest double. */
static double nearest(const char *decimal)
{
    mpfr_t t;
    mpfr_init2(t, 53);
    mpfr_set_str(t, decimal, 10, MPFR_RNDN);
    double d = mpfr_get_d(t, MPFR_RNDN);
    mpfr_clear(t);
    return d;
}

static void test_exact_epilogue(void **state)
{
    (void)state;
    /* A [1,2] . B [3,4] = 11; 0.5 * 11 + 3 * 2 + 1 = 12.5, exact */
    const double A[2] = {1, 2}, B[2] = {3, 4}, C[1] = {2}, bias[1] = {1};
    double y;
    ref_ctx ctx = REF_CTX_DEFAULT;
    ref_matmul_epilogue(&ctx, 1, 1, 2, A, 2, 1, B, 1, 1, 0.5, C, 3.0, bias, 0, &y, 1);
    assert_true(y == 12.5);
    assert_int_equal(ctx.unproven, 0);
}

static void test_gelu_values(void **state)
{
    (void)state;
    /* gelu(z) for z = 1, -3, 0.5, 0: a 1x1x1 product a * 1 */
    const double z[4] = {1.0, -3.0, 0.5, 0.0};
    const char *want[4] = {"0.8411919906082767047819957770451838608258", "-0.00363739208177301883781646613189139183021",
                           "0.3457140098251439220377572573645232197679", "0"};
    for (int i = 0; i < 4; i++) {
        const double one = 1.0;
        double y;
        ref_ctx ctx = REF_CTX_DEFAULT;
        ref_matmul_epilogue(&ctx, 1, 1, 1, &z[i], 1, 1, &one, 1, 1, 1.0, NULL, 0.0, NULL, 1, &y, 1);
        assert_true(y == nearest(want[i]));
        assert_int_equal(ctx.unproven, 0);
    }
}

static void test_identity_matches_matmul(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("reference matmul epilogue identity"));
    enum { M = 7, N = 5, K = 33 };
    double A[K * M], B[N * K], y1[M * N], y2[M * N];
    for (int i = 0; i < K * M; i++) A[i] = prec_rng_normal(&rng);
    for (int i = 0; i < N * K; i++) B[i] = prec_rng_normal(&rng);
    ref_ctx ctx = REF_CTX_DEFAULT;
    /* A stored transposed [K,M], B stored [N,K]: every stride in use */
    ref_matmul(&ctx, M, N, K, A, 1, M, B, 1, K, y1, N);
    ref_matmul_epilogue(&ctx, M, N, K, A, 1, M, B, 1, K, 1.0, NULL, 0.0, NULL, 0, y2, N);
    for (int i = 0; i < M * N; i++) assert_true(y1[i] == y2[i]);
}

/* The twins: a dropped term and a truncated rounding must change outputs. */
static void test_planted_bugs(void **state)
{
    (void)state;
    const double A[2] = {1, 2}, B[2] = {3, 4};
    double y;
    ref_ctx drop = REF_CTX_DEFAULT;
    drop.bug = REF_BUG_DROP_TERM;
    ref_matmul_epilogue(&drop, 1, 1, 2, A, 2, 1, B, 1, 1, 1.0, NULL, 0.0, NULL, 0, &y, 1);
    assert_true(y == 3.0); /* the 2 * 4 term left out */

    const double z = 0.5, one = 1.0;
    double good, bad;
    ref_ctx ctx = REF_CTX_DEFAULT, trunc = REF_CTX_DEFAULT;
    trunc.bug = REF_BUG_TRUNCATE;
    ref_matmul_epilogue(&ctx, 1, 1, 1, &z, 1, 1, &one, 1, 1, 1.0, NULL, 0.0, NULL, 1, &good, 1);
    ref_matmul_epilogue(&trunc, 1, 1, 1, &z, 1, 1, &one, 1, 1, 1.0, NULL, 0.0, NULL, 1, &bad, 1);
    /* gelu(0.5) = 0.34571400982514392203...: the nearest double lies above
     * it, so rounding toward zero gives the double below */
    assert_true(bad == nextafter(good, 0.0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_epilogue),
        cmocka_unit_test(test_gelu_values),
        cmocka_unit_test(test_identity_matches_matmul),
        cmocka_unit_test(test_planted_bugs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
