/* tests/test_probe_gpu.c — the matrix units of this GPU against the H100
 * model, and the emulated GEMM against the CPU model (make test-gpu):
 *  1. fresh random dot products on every probed instruction (mma.sync,
 *     wgmma; every input and output format) give the H100 model's bits;
 *     twin: the same hardware outputs against the model with one alignment
 *     bit fewer must disagree somewhere;
 *  2. mma_emulate_gemm (CUDA cores) gives the CPU model's bits; twin: the
 *     A100 parameters on the H100-model result must disagree;
 *  3. a mma.sync GEMM (sm_80 code JIT-compiled on the H100) gives the bits
 *     of the H100 model emulated along K; twin: the A100 model must not. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common/ktensor_io.h"
#include "kernels/mma_emulate.h"
#include "kernels/probe/probe_gpu.h"
#include "kernels/probe/probe_report.h"
#include "tests/test_util.h"

static int is_hopper(void)
{
    kdevice_props p;
    return kdevice_describe(&p) == 0 && p.cc_major == 9;
}

/* Mismatches between the GPU and arithmetic p on n random dots of target t. */
static long compare_target(const probe_target *t, const mma_arith *p, long n, uint64_t seed, long *twin_mismatch)
{
    const int k = t->k, esz = mma_elem_bytes(t->in);
    uint8_t *a = malloc((size_t)n * k * esz), *b = malloc((size_t)n * k * esz);
    uint32_t *c = malloc(sizeof(uint32_t) * n), *dg = malloc(sizeof(uint32_t) * n);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    assert_non_null(dg);
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    double av[PROBE_MAX_K], bv[PROBE_MAX_K], cv;
    for (long i = 0; i < n; i++) {
        probe_random_dot(&rng, t, i, av, bv, &cv);
        for (int j = 0; j < k; j++) {
            mma_store(t->in, a, i * k + j, av[j]);
            mma_store(t->in, b, i * k + j, bv[j]);
        }
        c[i] = (uint32_t)prec_encode(cv, t->out);
        dg[i] = 0xFFFFFFFFu; /* poison */
    }
    char err[512];
    if (probe_gpu_run(NULL, t, (int)n, a, b, c, dg, err, sizeof err)) fail_msg("%s", err);
    /* twin: one alignment bit fewer; for an emulated (split) instruction,
     * whose fp16 sub-results rarely show that bit, the adds in another order */
    mma_arith twin = *p;
    if (p->split != MMA_SPLIT_NONE) twin.split = MMA_SPLIT_C_P1_P2;
    else twin.frac_bits -= 1;
    long bad = 0, twin_bad = 0;
    for (long i = 0; i < n; i++) {
        const uint32_t want = mma_dot(p, k, a + i * k * esz, b + i * k * esz, c[i]);
        const uint32_t twin_want = mma_dot(&twin, k, a + i * k * esz, b + i * k * esz, c[i]);
        if (dg[i] != want && ++bad <= 3)
            print_message("%s %s->%s dot %ld: gpu 0x%x model 0x%x\n", t->route, prec_format_name(t->in),
                          prec_format_name(t->out), i, dg[i], want);
        twin_bad += dg[i] != twin_want;
    }
    *twin_mismatch = twin_bad;
    free(a);
    free(b);
    free(c);
    free(dg);
    return bad;
}

static void test_hardware_matches_h100_model(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    if (!is_hopper()) skip();
    const uint64_t seed = test_seed("hardware vs model");
    probe_target targets[32];
    const int nt = probe_gpu_targets(targets, 32);
    assert_true(nt > 0);
    long total = 0;
    for (int i = 0; i < nt; i++) {
        const mma_model *m = mma_model_find("h100", targets[i].route, targets[i].in, targets[i].out);
        assert_non_null(m);
        long twin = 0;
        const long bad = compare_target(&targets[i], &m->arith, 4000, seed + (uint64_t)i, &twin);
        total += bad;
        if (twin == 0)
            fail_msg("%s %s->%s: the planted twin agreed with the GPU on all 4000 dots: the check cannot fail",
                     targets[i].route, prec_format_name(targets[i].in), prec_format_name(targets[i].out));
    }
    assert_int_equal(total, 0);
}

/* Small GEMM on the device through mma_emulate_gemm vs mma_dot on the host. */
static void emulate_vs_cpu(const mma_arith *p, const mma_arith *check, int M, int N, int K, uint64_t seed, long *bad)
{
    const int esz = mma_elem_bytes(p->in);
    uint8_t *A = malloc((size_t)M * K * esz), *B = malloc((size_t)N * K * esz);
    float *D = malloc(sizeof(float) * M * N);
    assert_non_null(A);
    assert_non_null(B);
    assert_non_null(D);
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    const probe_target t = {"gemm", p->in, PREC_FP32, 1};
    for (long i = 0; i < (long)M * K; i++) {
        double v, w, c;
        probe_random_dot(&rng, &t, i, &v, &w, &c);
        mma_store(p->in, A, i, v);
    }
    for (long i = 0; i < (long)N * K; i++) {
        double v, w, c;
        probe_random_dot(&rng, &t, i, &v, &w, &c);
        mma_store(p->in, B, i, w);
    }
    void *dA = NULL, *dB = NULL, *dD = NULL;
    assert_int_equal(kdevice_alloc(&dA, (size_t)M * K * esz, "A"), 0);
    assert_int_equal(kdevice_alloc(&dB, (size_t)N * K * esz, "B"), 0);
    assert_int_equal(kdevice_alloc(&dD, sizeof(float) * M * N, "D"), 0);
    assert_int_equal(kdevice_upload(dA, A, (size_t)M * K * esz, "A"), 0);
    assert_int_equal(kdevice_upload(dB, B, (size_t)N * K * esz, "B"), 0);
    assert_int_equal(kdevice_fill_bytes(dD, 0xFF, sizeof(float) * M * N, "poison D"), 0);
    if (mma_emulate_gemm(p, M, N, K, dA, dB, NULL, dD)) fail_msg("%s", kernels_last_error());
    assert_int_equal(kdevice_download(D, dD, sizeof(float) * M * N, "D"), 0);
    *bad = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            const uint32_t want = mma_dot(check, K, A + (long)m * K * esz, B + (long)n * K * esz, 0u);
            uint32_t got;
            memcpy(&got, &D[m * N + n], 4);
            *bad += got != want;
        }
    kdevice_free(dA);
    kdevice_free(dB);
    kdevice_free(dD);
    free(A);
    free(B);
    free(D);
}

static void test_emulated_gemm_matches_cpu_model(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    const uint64_t seed = test_seed("emulated gemm");
    static const prec_format fmts[] = {PREC_FP16, PREC_BF16, PREC_TF32, PREC_E4M3, PREC_E5M2};
    for (int f = 0; f < 5; f++) {
        const mma_model *a100 = mma_model_find("a100", "mma.sync", fmts[f], PREC_FP32);
        assert_non_null(a100);
        long bad;
        emulate_vs_cpu(&a100->arith, &a100->arith, 48, 40, 320, seed + (uint64_t)f, &bad);
        if (bad) fail_msg("%s: %ld of 1920 emulated GEMM elements differ from the CPU model", prec_format_name(fmts[f]), bad);
        /* twin: the CPU side with the H100 parameters must see differences */
        const mma_model *h100 = mma_model_find("h100", "mma.sync", fmts[f], PREC_FP32);
        assert_non_null(h100);
        emulate_vs_cpu(&a100->arith, &h100->arith, 48, 40, 320, seed + (uint64_t)f, &bad);
        if (bad == 0) fail_msg("%s: A100 and H100 models agree on every element: the check cannot fail",
                               prec_format_name(fmts[f]));
    }
}

static void test_mma_sync_gemm_is_h100_model(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    if (!is_hopper()) skip();
    const uint64_t seed = test_seed("mma.sync gemm");
    static const prec_format fmts[] = {PREC_FP16, PREC_BF16, PREC_TF32};
    const int M = 128, N = 64, K = 512;
    for (int f = 0; f < 3; f++) {
        const mma_model *h100 = mma_model_find("h100", "mma.sync", fmts[f], PREC_FP32);
        const mma_model *a100 = mma_model_find("a100", "mma.sync", fmts[f], PREC_FP32);
        const int esz = mma_elem_bytes(fmts[f]);
        uint8_t *A = malloc((size_t)M * K * esz), *B = malloc((size_t)N * K * esz);
        float *D = malloc(sizeof(float) * M * N);
        prec_rng rng;
        prec_rng_seed(&rng, seed + (uint64_t)f);
        for (long i = 0; i < (long)M * K; i++) mma_store(fmts[f], A, i, prec_rne(prec_rng_normal(&rng), fmts[f]));
        for (long i = 0; i < (long)N * K; i++) mma_store(fmts[f], B, i, prec_rne(prec_rng_normal(&rng), fmts[f]));
        void *dA = NULL, *dB = NULL, *dD = NULL;
        assert_int_equal(kdevice_alloc(&dA, (size_t)M * K * esz, "A"), 0);
        assert_int_equal(kdevice_alloc(&dB, (size_t)N * K * esz, "B"), 0);
        assert_int_equal(kdevice_alloc(&dD, sizeof(float) * M * N, "D"), 0);
        assert_int_equal(kdevice_upload(dA, A, (size_t)M * K * esz, "A"), 0);
        assert_int_equal(kdevice_upload(dB, B, (size_t)N * K * esz, "B"), 0);
        assert_int_equal(kdevice_fill_bytes(dD, 0xFF, sizeof(float) * M * N, "poison D"), 0);
        if (probe_sm80_gemm(fmts[f], M, N, K, dA, dB, dD)) fail_msg("%s", kernels_last_error());
        assert_int_equal(kdevice_download(D, dD, sizeof(float) * M * N, "D"), 0);
        long bad = 0, twin = 0;
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                uint32_t got;
                memcpy(&got, &D[m * N + n], 4);
                bad += got != mma_dot(&h100->arith, K, A + (long)m * K * esz, B + (long)n * K * esz, 0u);
                twin += got != mma_dot(&a100->arith, K, A + (long)m * K * esz, B + (long)n * K * esz, 0u);
            }
        kdevice_free(dA);
        kdevice_free(dB);
        kdevice_free(dD);
        free(A);
        free(B);
        free(D);
        if (bad) fail_msg("%s: %ld of %d mma.sync GEMM elements differ from the H100 model", prec_format_name(fmts[f]),
                          bad, M * N);
        if (twin == 0) fail_msg("%s: the A100 model also matches every element: the check cannot fail",
                                prec_format_name(fmts[f]));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hardware_matches_h100_model),
        cmocka_unit_test(test_emulated_gemm_matches_cpu_model),
        cmocka_unit_test(test_mma_sync_gemm_is_h100_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
