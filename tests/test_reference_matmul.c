/* tests/test_reference_matmul.c — the matmul reference against exact integer
 * products, hand-worked cancellations, an MPFR evaluation with exact
 * products, and transposed strides; with planted-bug twins. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>

#include "reference/matmul.h"
#include "tests/test_reference_util.h"
#include "tests/test_util.h"

static void test_hand_values(void **state)
{
    (void)state;
    /* 2^53 + 1 - 2^53: a double loop gives 0, the exact dot product 1 */
    double a[3] = {0x1p53, 1.0, -0x1p53}, ones[3] = {1.0, 1.0, 1.0};
    assert_true(ref_matmul_dot(3, a, 1, ones, 1) == 1.0);
    /* (1 + 2^-30)^2 - 1 - 2^-29 = 2^-60: needs the full 106-bit product */
    double x[3] = {1.0 + 0x1p-30, 1.0, 1.0}, y[3] = {1.0 + 0x1p-30, -1.0, -0x1p-29};
    assert_true(ref_matmul_dot(3, x, 1, y, 1) == 0x1p-60);
    /* a sum that must round: 1 + 2^-53 + 2^-106 is just above the midpoint */
    double t[3] = {1.0, 0x1p-53, 0x1p-106};
    assert_true(ref_matmul_dot(3, t, 1, ones, 1) == 1.0 + 0x1p-52);
    /* the tie 1 + 2^-53 goes to even */
    assert_true(ref_matmul_dot(2, t, 1, ones, 1) == 1.0);
    /* a subnormal result is rounded once, at the subnormal quantum 2^-1074:
     * 2^-1060 + 2^-1075 + 2^-1130 is above the midpoint, so it rounds up;
     * rounding to 53 bits first would drop 2^-1130 and tie down to even */
    double s[3] = {0x1p-1000, 0x1p-1000, 0x1p-1000}, w[3] = {0x1p-60, 0x1p-75, 0x1p-130};
    assert_true(ref_matmul_dot(3, s, 1, w, 1) == 0x1p-1060 + 0x1p-1074);
    assert_true(ref_matmul_dot(2, s, 1, w, 1) == 0x1p-1060); /* the tie itself: to even */
}

/* Integer matrices whose products fit in 53 bits: C must equal the int64
 * result exactly.  Returns the number of wrong elements. */
static long integer_mismatches(ref_bug bug, uint64_t seed)
{
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    enum { M = 7, N = 5, K = 300 };
    double A[M * K], B[K * N], C[M * N];
    int64_t Ai[M * K], Bi[K * N];
    for (int i = 0; i < M * K; i++) Ai[i] = (int64_t)(prec_rng_next(&rng) % 2000001) - 1000000;
    for (int i = 0; i < K * N; i++) Bi[i] = (int64_t)(prec_rng_next(&rng) % 2001) - 1000;
    for (int i = 0; i < M * K; i++) A[i] = (double)Ai[i];
    for (int i = 0; i < K * N; i++) B[i] = (double)Bi[i];
    poison(C, M * N);
    ref_ctx ctx = REF_CTX_DEFAULT;
    ctx.bug = bug;
    ref_matmul(&ctx, M, N, K, A, K, 1, B, N, 1, C, N);
    long bad = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            int64_t c = 0; /* |c| <= 300 * 1e6 * 1e3 < 2^53 */
            for (int k = 0; k < K; k++) c += Ai[m * K + k] * Bi[k * N + n];
            bad += C[m * N + n] != (double)c;
        }
    return bad;
}

static void test_exact_integers(void **state)
{
    (void)state;
    uint64_t seed = test_seed("matmul_exact_integers");
    assert_int_equal(integer_mismatches(REF_BUG_NONE, seed), 0);
    assert_true(integer_mismatches(REF_BUG_DROP_TERM, seed) > 0);
}

/* Random doubles over a wide exponent range with heavy cancellation: C must
 * be the nearest double to the exact sum of exact products (MPFR). */
static long rounding_mismatches(ref_bug bug, uint64_t seed)
{
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    enum { M = 6, N = 6, K = 257 };
    double A[M * K], B[K * N], C[M * N];
    for (int i = 0; i < M * K; i++) {
        /* The last term, the one the drop-term twin omits, sits at the top of
         * the range, so omitting it moves the sum by far more than an ulp. */
        const int e = i % K == K - 1 ? 30 + (int)(prec_rng_next(&rng) % 10) : (int)(prec_rng_next(&rng) % 80) - 40;
        A[i] = ldexp(prec_rng_normal(&rng), e);
    }
    for (int i = 0; i < K * N; i++) B[i] = prec_rng_normal(&rng);
    poison(C, M * N);
    ref_ctx ctx = REF_CTX_DEFAULT;
    ctx.bug = bug;
    ref_matmul(&ctx, M, N, K, A, K, 1, B, N, 1, C, N);
    long bad = 0;
    mpfr_t prod[K], sum;
    mpfr_ptr ptrs[K];
    for (int k = 0; k < K; k++) {
        mpfr_init2(prod[k], 106);
        ptrs[k] = prod[k];
    }
    mpfr_init2(sum, 53); /* results are normal doubles: 53 bits is the double grid */
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            for (int k = 0; k < K; k++) {
                mpfr_set_d(prod[k], A[m * K + k], MPFR_RNDN);
                assert_int_equal(mpfr_mul_d(prod[k], prod[k], B[k * N + n], MPFR_RNDN), 0);
            }
            mpfr_sum(sum, ptrs, K, MPFR_RNDN); /* correctly rounded */
            bad += C[m * N + n] != mpfr_get_d(sum, MPFR_RNDN);
        }
    for (int k = 0; k < K; k++) mpfr_clear(prod[k]);
    mpfr_clear(sum);
    return bad;
}

static void test_correctly_rounded(void **state)
{
    (void)state;
    uint64_t seed = test_seed("matmul_correctly_rounded");
    assert_int_equal(rounding_mismatches(REF_BUG_NONE, seed), 0);
    assert_true(rounding_mismatches(REF_BUG_TRUNCATE, seed) > 0);
    assert_true(rounding_mismatches(REF_BUG_DROP_TERM, seed) > 0);
}

/* C = A^T B^T through strides equals the product of explicit transposes. */
static void test_strides(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("matmul_strides"));
    enum { M = 5, N = 3, K = 11 };
    double At[K * M], Bt[N * K], A[M * K], B[K * N], C1[M * N], C2[M * 4];
    random_normal(&rng, At, K * M, 0.0, 1.0);
    random_normal(&rng, Bt, N * K, 0.0, 1.0);
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++) A[m * K + k] = At[k * M + m];
    for (int k = 0; k < K; k++)
        for (int n = 0; n < N; n++) B[k * N + n] = Bt[n * K + k];
    poison(C1, M * N), poison(C2, M * 4);
    ref_ctx ctx = REF_CTX_DEFAULT;
    ref_matmul(&ctx, M, N, K, A, K, 1, B, N, 1, C1, N);
    ref_matmul(&ctx, M, N, K, At, 1, M, Bt, 1, K, C2, 4); /* ldc 4 > N */
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) assert_true(C1[m * N + n] == C2[m * 4 + n]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_values),
        cmocka_unit_test(test_exact_integers),
        cmocka_unit_test(test_correctly_rounded),
        cmocka_unit_test(test_strides),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
