/* tests/test_kernels_gpu_attention.c — on a GPU: the blocked flash kernels
 * (flash, flash_exp2, and flash_mma, flash_mma_exp2 where they exist)
 * compute every row on its own.  Causality makes the forward's rows i < T'
 * (o, lse) and the backward's dq rows i < T' functions of the first T' rows
 * of q, k, v, dout alone, so the run on the prefix of length T' must
 * reproduce them bit for bit, whatever the tiling (T' and T are chosen so the
 * 64-row blocks and 32-key tiles fall differently in the two runs).  Every
 * output element must be written (outputs are poisoned with NaN first).
 * Twin: a change to a key inside the prefix must be seen by the same
 * comparison.  Fresh inputs per run (test_seed).  Skips without a GPU.
 * Without a GPU too: which (path, variant, D) the tensor-core variants
 * refuse, and that the refusal names the reason. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/check/check.h"
#include "kernels/common/ktensor_io.h"
#include "tests/test_util.h"

typedef struct {
    int64_t BH, T, D;
} shape3;

/* o, lse and dq of one run, on the device's bytes as doubles. */
typedef struct {
    double *o, *lse, *dq;
} att_out;

static const prec_format formats[] = {PREC_FP32, PREC_BF16, PREC_FP16};

/* Rows [0, Tp) of every head of x [BH, T, D] into y [BH, Tp, D]. */
static void prefix_rows(const double *x, double *y, int64_t BH, int64_t T, int64_t Tp, int64_t D)
{
    for (int64_t h = 0; h < BH; h++) memcpy(y + h * Tp * D, x + h * T * D, (size_t)(Tp * D) * sizeof(double));
}

/* Forward then backward (on the forward's o, lse) of inputs [BH, T, D]. */
static void run(kpath path, int variant, int64_t BH, int64_t T, int64_t D, double *const in[4], att_out *out)
{
    const int64_t shp[3] = {BH, T, D}, shl[2] = {BH, T};
    const float scale = 1.0f / sqrtf((float)D);
    ktensor t[4] = {{0}}, o = {0}, dq = {0}, dk = {0}, dv = {0}, lse = {0};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(ktensor_alloc(&t[i], formats[path], 3, shp), 0);
        assert_int_equal(ktensor_upload(&t[i], in[i]), 0);
    }
    assert_int_equal(ktensor_alloc(&o, formats[path], 3, shp), 0); /* poisoned: NaN */
    assert_int_equal(ktensor_alloc(&dq, formats[path], 3, shp), 0);
    assert_int_equal(ktensor_alloc(&dk, formats[path], 3, shp), 0);
    assert_int_equal(ktensor_alloc(&dv, formats[path], 3, shp), 0);
    assert_int_equal(ktensor_alloc(&lse, PREC_FP32, 2, shl), 0);
    if (kattention_forward(path, variant, BH, T, D, scale, t[0].data, t[1].data, t[2].data, o.data, lse.data) ||
        kattention_backward(path, variant, BH, T, D, scale, t[0].data, t[1].data, t[2].data, o.data, t[3].data,
                            lse.data, dq.data, dk.data, dv.data) ||
        kernels_sync("attention"))
        fail_msg("%s", kernels_last_error());
    double *dkv = malloc((size_t)(BH * T * D) * sizeof(double));
    assert_non_null(dkv);
    assert_int_equal(ktensor_download(&o, out->o), 0);
    assert_int_equal(ktensor_download(&lse, out->lse), 0);
    assert_int_equal(ktensor_download(&dq, out->dq), 0);
    for (int64_t i = 0; i < BH * T * D; i++) assert_false(isnan(out->o[i]) || isnan(out->dq[i]));
    for (int64_t i = 0; i < BH * T; i++) assert_false(isnan(out->lse[i]));
    assert_int_equal(ktensor_download(&dk, dkv), 0);
    for (int64_t i = 0; i < BH * T * D; i++) assert_false(isnan(dkv[i]));
    assert_int_equal(ktensor_download(&dv, dkv), 0);
    for (int64_t i = 0; i < BH * T * D; i++) assert_false(isnan(dkv[i]));
    free(dkv);
    for (int i = 0; i < 4; i++) ktensor_free(&t[i]);
    ktensor_free(&o);
    ktensor_free(&dq);
    ktensor_free(&dk);
    ktensor_free(&dv);
    ktensor_free(&lse);
}

/* Number of elements of rows < Tp where the full run and the prefix run differ bitwise. */
static int64_t prefix_mismatches(const att_out *full, const att_out *pre, int64_t BH, int64_t T, int64_t Tp,
                                 int64_t D)
{
    int64_t bad = 0;
    for (int64_t h = 0; h < BH; h++)
        for (int64_t i = 0; i < Tp; i++) {
            bad += memcmp(&full->lse[h * T + i], &pre->lse[h * Tp + i], sizeof(double)) != 0;
            for (int64_t d = 0; d < D; d++) {
                bad += memcmp(&full->o[(h * T + i) * D + d], &pre->o[(h * Tp + i) * D + d], sizeof(double)) != 0;
                bad += memcmp(&full->dq[(h * T + i) * D + d], &pre->dq[(h * Tp + i) * D + d], sizeof(double)) != 0;
            }
        }
    return bad;
}

/* perturb: 0 for the property, 1 for the twin (k[head 0, row Tp-1, 0] += 1 in the prefix run only). */
static void check_prefix(int perturb)
{
    static const shape3 shapes[] = {{2, 200, 64}, {1, 150, 128}, {3, 97, 40}, {2, 70, 17}};
    prec_rng rng;
    prec_rng_seed(&rng, test_seed(perturb ? "flash_prefix_twin" : "flash_prefix"));
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int p = KPATH_FP32; p <= KPATH_FP16; p++)
            for (int var = KATT_FLASH; var < KATT_NVARIANTS; var++) {
                const int64_t BH = shapes[s].BH, T = shapes[s].T, D = shapes[s].D;
                char why[256];
                if (!kattention_supports((kpath)p, var, D, why, sizeof why)) continue; /* fp32 or D 17 for flash_mma */
                const int64_t Tp = 1 + (int64_t)(prec_rng_uniform(&rng) * (double)(T - 1)); /* 1 .. T-1 */
                const size_t n = (size_t)(BH * T * D), np = (size_t)(BH * Tp * D);
                double *in[4], *inp[4];
                att_out full, pre;
                for (int i = 0; i < 4; i++) {
                    in[i] = malloc(n * sizeof(double));
                    inp[i] = malloc(np * sizeof(double));
                    assert_non_null(in[i]);
                    assert_non_null(inp[i]);
                    kcheck_fill_normal(&rng, in[i], (int64_t)n, 0.0, 1.0, formats[p]);
                    prefix_rows(in[i], inp[i], BH, T, Tp, D);
                }
                if (perturb) inp[1][(Tp - 1) * D] += 1.0; /* exact in every format: |k| < 2^7 */
                full.o = malloc(n * sizeof(double));
                full.dq = malloc(n * sizeof(double));
                full.lse = malloc((size_t)(BH * T) * sizeof(double));
                pre.o = malloc(np * sizeof(double));
                pre.dq = malloc(np * sizeof(double));
                pre.lse = malloc((size_t)(BH * Tp) * sizeof(double));
                assert_true(full.o && full.dq && full.lse && pre.o && pre.dq && pre.lse);
                run((kpath)p, var, BH, T, D, in, &full);
                run((kpath)p, var, BH, Tp, D, inp, &pre);
                int64_t bad = prefix_mismatches(&full, &pre, BH, T, Tp, D);
                if (perturb && bad == 0)
                    fail_msg("twin: a changed key in the prefix went unseen (%s %s BH %lld T %lld T' %lld D %lld)",
                             kpath_name((kpath)p), katt_variants[var].name, (long long)BH, (long long)T,
                             (long long)Tp, (long long)D);
                if (!perturb && bad != 0)
                    fail_msg("%lld elements of rows < T' differ (%s %s BH %lld T %lld T' %lld D %lld)", (long long)bad,
                             kpath_name((kpath)p), katt_variants[var].name, (long long)BH, (long long)T,
                             (long long)Tp, (long long)D);
                for (int i = 0; i < 4; i++) {
                    free(in[i]);
                    free(inp[i]);
                }
                free(full.o);
                free(full.dq);
                free(full.lse);
                free(pre.o);
                free(pre.dq);
                free(pre.lse);
            }
    kattention_release();
}

static void test_flash_prefix_bitwise(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    check_prefix(0);
}

static void test_flash_prefix_twin_fails(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    check_prefix(1);
}

static void test_mma_refusals(void **state)
{
    (void)state;
    char why[256];
    assert_false(kattention_supports(KPATH_FP32, KATT_FLASH_MMA, 64, why, sizeof why));
    assert_non_null(strstr(why, "bf16 and fp16"));
    assert_false(kattention_supports(KPATH_FP32, KATT_FLASH_MMA_EXP2, 0, why, sizeof why));
    assert_false(kattention_supports(KPATH_BF16, KATT_FLASH_MMA, 17, why, sizeof why));
    assert_non_null(strstr(why, "multiple of 8"));
    assert_false(kattention_supports(KPATH_FP8, KATT_FLASH, 64, why, sizeof why));
    for (int64_t D = 8; D <= KATT_MAX_D; D += 8) {
        assert_true(kattention_supports(KPATH_BF16, KATT_FLASH_MMA, D, why, sizeof why));
        assert_true(kattention_supports(KPATH_FP16, KATT_FLASH_MMA_EXP2, D, why, sizeof why));
    }
    assert_true(kattention_supports(KPATH_FP32, KATT_FLASH, 17, why, sizeof why));
    assert_false(kattention_supports(KPATH_BF16, KATT_FLASH, 129, why, sizeof why));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mma_refusals),
        cmocka_unit_test(test_flash_prefix_bitwise),
        cmocka_unit_test(test_flash_prefix_twin_fails),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
