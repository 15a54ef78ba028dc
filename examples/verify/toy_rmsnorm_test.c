/* examples/verify/toy_rmsnorm_test.c — a precision unit test of a toy bf16
 * RMSNorm kernel, written against the installed library:
 *
 *   cc -std=c11 toy_rmsnorm_test.c $(pkg-config --cflags --libs ulpscope) -lcmocka -lm
 *
 * The kernel stores x, gain and y in bf16 and computes in fp32; its twin
 * rounds the running sum of squares to bf16 (a bf16 accumulator) and must
 * fail the same assertion's check. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <ulpscope/unit.h>

enum { N = 32, C = 1024 };

static float bf16_value(uint16_t b)
{
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static uint16_t bf16_round(float f) /* round to nearest even (finite inputs) */
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

/* The kernel under test: y = gain x / sqrt(mean(x^2) + eps), one row at a time. */
static void toy_rmsnorm(const uint16_t *x, const uint16_t *gain, uint16_t *y, int bf16_accumulator)
{
    for (int n = 0; n < N; n++) {
        float ss = 0.0f;
        for (int c = 0; c < C; c++) {
            float v = bf16_value(x[n * C + c]);
            ss += v * v;
            if (bf16_accumulator) ss = bf16_value(bf16_round(ss)); /* the planted bug */
        }
        float rstd = 1.0f / sqrtf(ss / C + 1e-5f);
        for (int c = 0; c < C; c++) y[n * C + c] = bf16_round(bf16_value(x[n * C + c]) * rstd * bf16_value(gain[c]));
    }
}

static uint16_t x[N * C], gain[C], y[N * C];

static void fill(unsigned seed)
{
    srand(seed);
    for (int i = 0; i < N * C; i++) x[i] = bf16_round((float)(rand() % 2001 - 1000) / 400.0f);
    for (int c = 0; c < C; c++) gain[c] = bf16_round(0.5f + (float)(rand() % 1000) / 1000.0f);
}

static void correct_kernel_within_bound(void **state)
{
    (void)state;
    fill(1);
    toy_rmsnorm(x, gain, y, 0);
    ulp_tensor in[] = {ULP_TENSOR("x", ULP_BF16_BITS, x, N, C), ULP_TENSOR("gain", ULP_BF16_BITS, gain, C)};
    ulp_tensor out[] = {ULP_TENSOR("y", ULP_BF16_BITS, y, N, C)};
    ulp_assert_within_bound("rmsnorm", in, out, "bf16");
}

/* The twin: the same check must fail on the bf16 accumulator. */
static void bf16_accumulator_fails(void **state)
{
    (void)state;
    fill(1);
    toy_rmsnorm(x, gain, y, 1);
    ulp_tensor in[] = {ULP_TENSOR("x", ULP_BF16_BITS, x, N, C), ULP_TENSOR("gain", ULP_BF16_BITS, gain, C)};
    ulp_tensor out[] = {ULP_TENSOR("y", ULP_BF16_BITS, y, N, C)};
    ulp_kernel k = ULP_KERNEL_DEFAULT;
    k.path = "bf16";
    k.accum = "fp32";
    static ulp_report rep;
    char err[512];
    assert_int_equal(ulp_verify("rmsnorm", &k, in, 2, out, 1, &rep, err, sizeof err), ULP_FAIL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(correct_kernel_within_bound),
        cmocka_unit_test(bf16_accumulator_fails),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
