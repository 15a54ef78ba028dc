/* tests/test_mma_emulate_gpu.c — the matrix-unit emulation on CUDA cores
 * (kernels/mma_emulate.h) against the CPU model (GPU tests; make test-gpu):
 *  1. for each input format (A100 and H100 models), a 320 x 320 x 203 GEMM
 *     = 102400 dot products whose operand rows take every kind of
 *     tests/mma_test_values.h (subnormals, zeros of both signs, overflow,
 *     infinities, NaN; K = 203 leaves a short last block for every L) gives
 *     mma_dot's bits on every element; twin: with the planted bug (the last
 *     product of each block dropped) some elements must differ;
 *  2. the trainer's entry (mma_emulate_linear) on transposed layouts, with an
 *     accumulating bf16 output: element by element the CPU's
 *     round_bf16(fp32(model + y_old)); twin: the planted bug is seen;
 *  3. control (Hopper): the H100 model through the same fast kernel gives
 *     exactly what the H100's own mma.sync gives for the same K order (a
 *     chain of m16n8k16 / m16n8k8 in increasing k); twin: the A100 model
 *     through it must not;
 *  4. replicas (mma_emulate_linear_batched): R = 3 replicas with distinct
 *     operands at padded strides (and one case sharing A) give byte for byte
 *     what R single calls give, every layout and output format of the
 *     trainer, the guards between replicas' outputs untouched; twin: with the
 *     planted bug (every replica reads replica 0's B) some replica differs;
 *  5. batches with overlapping outputs, no replicas or a negative stride are
 *     refused, the message naming the problem. */
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
#include "tests/mma_test_values.h"
#include "tests/test_util.h"

static uint32_t bits_at(const void *base, prec_format f, long i) { return mma_load_bits(f, base, i); }

/* rows x K operand bits of format f, each row of a random kind */
/* kind -1: each row a random kind of mma_test_values.h; else that kind. */
static void *rows_of(prec_rng *rng, prec_format f, int rows, int K, int fixed_kind)
{
    uint8_t *x = malloc((size_t)rows * K * mma_elem_bytes(f));
    assert_non_null(x);
    for (int r = 0; r < rows; r++) {
        const int kind = fixed_kind >= 0 ? fixed_kind : (int)(prec_rng_next(rng) % MMA_TEST_KINDS);
        for (int k = 0; k < K; k++) mma_test_store_bits(f, x, (long)r * K + k, mma_test_operand(rng, f, kind));
    }
    return x;
}

static void *random_rows(prec_rng *rng, prec_format f, int rows, int K) { return rows_of(rng, f, rows, K, -1); }

static void *upload(const void *h, size_t bytes)
{
    void *d = NULL;
    assert_int_equal(kdevice_alloc(&d, bytes, "operand"), 0);
    assert_int_equal(kdevice_upload(d, h, bytes, "operand"), 0);
    return d;
}

/* Mismatches of mma_emulate_gemm against mma_dot on one random GEMM. */
static long gemm_mismatches(const mma_model *m, int M, int N, int K, uint64_t seed, int planted)
{
    const mma_arith *p = &m->arith;
    const size_t esz = (size_t)mma_elem_bytes(p->in);
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    void *A = random_rows(&rng, p->in, M, K), *B = random_rows(&rng, p->in, N, K);
    void *dA = upload(A, (size_t)M * K * esz), *dB = upload(B, (size_t)N * K * esz), *dD = NULL;
    assert_int_equal(kdevice_alloc(&dD, sizeof(float) * M * N, "D"), 0);
    assert_int_equal(kdevice_fill_bytes(dD, 0xFF, sizeof(float) * M * N, "poison D"), 0);
    mma_emulate_plant_drop_last(planted);
    const int rc = mma_emulate_gemm(p, M, N, K, dA, dB, NULL, dD);
    mma_emulate_plant_drop_last(0);
    if (rc) fail_msg("%s", kernels_last_error());
    if (strcmp(mma_emulate_last_kernel(), "fast") != 0)
        fail_msg("%s %s: ran the %s kernel, not the fast one", m->gen, prec_format_name(p->in), mma_emulate_last_kernel());
    uint32_t *D = malloc(sizeof(uint32_t) * M * N);
    assert_non_null(D);
    assert_int_equal(kdevice_download(D, dD, sizeof(float) * M * N, "D"), 0);
    long bad = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            const uint32_t want = mma_dot(p, K, (uint8_t *)A + (size_t)i * K * esz, (uint8_t *)B + (size_t)j * K * esz, 0u);
            if (D[(size_t)i * N + j] != want && ++bad <= 3 && !planted)
                print_message("%s %s: D[%d][%d] gpu 0x%08x model 0x%08x\n", m->gen, prec_format_name(p->in), i, j,
                              D[(size_t)i * N + j], want);
        }
    kdevice_free(dA);
    kdevice_free(dB);
    kdevice_free(dD);
    free(A);
    free(B);
    free(D);
    return bad;
}

static void test_fast_kernel_matches_cpu_model(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    const uint64_t seed = test_seed("mma emulation vs cpu model");
    static const prec_format fmts[] = {PREC_FP16, PREC_BF16, PREC_TF32, PREC_E4M3, PREC_E5M2};
    static const char *const gens[] = {"a100", "h100"};
    const int M = 320, N = 320, K = 203;
    for (int g = 0; g < 2; g++)
        for (int f = 0; f < 5; f++) {
            const int fp8 = fmts[f] == PREC_E4M3 || fmts[f] == PREC_E5M2;
            const mma_model *m = mma_model_find(gens[g], fp8 && g == 1 ? "wgmma" : "mma.sync", fmts[f], PREC_FP32);
            assert_non_null(m);
            const uint64_t s = seed + (uint64_t)(10 * g + f);
            const long bad = gemm_mismatches(m, M, N, K, s, 0);
            const long twin = gemm_mismatches(m, M, N, K, s, 1);
            print_message("%s %s: %d dots, %ld mismatches; planted twin %ld\n", gens[g], prec_format_name(fmts[f]),
                          M * N, bad, twin);
            if (bad) fail_msg("%s %s: %ld of %d elements differ from the CPU model", gens[g], prec_format_name(fmts[f]),
                              bad, M * N);
            if (!twin) fail_msg("%s %s: the planted twin matched every element: the check cannot fail", gens[g],
                                prec_format_name(fmts[f]));
        }
}

static double bf16_round(float x) { return prec_rne((double)x, PREC_BF16); }

/* mma_emulate_linear with a_trans = 1, b_trans = 0, accumulating into bf16 y;
 * operands of one kind (mma_test_values.h) or, kind -1, each row its own. */
static long linear_mismatches(const mma_model *m, int M, int N, int K, uint64_t seed, int kind, int planted)
{
    const mma_arith *p = &m->arith;
    const size_t esz = (size_t)mma_elem_bytes(p->in);
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    /* A stored [K, M], B stored [K, N]: both with k the row */
    void *At = rows_of(&rng, p->in, K, M, kind), *Bt = rows_of(&rng, p->in, K, N, kind);
    uint16_t *y0 = malloc(2 * (size_t)M * N), *y = malloc(2 * (size_t)M * N);
    uint8_t *arow = malloc((size_t)K * esz), *brow = malloc((size_t)K * esz);
    assert_true(y0 && y && arow && brow);
    for (long i = 0; i < (long)M * N; i++) y0[i] = (uint16_t)prec_encode(prec_rne(prec_rng_normal(&rng), PREC_BF16), PREC_BF16);
    void *dA = upload(At, (size_t)M * K * esz), *dB = upload(Bt, (size_t)N * K * esz), *dy = upload(y0, 2 * (size_t)M * N);
    mma_emulate_plant_drop_last(planted);
    const int rc = mma_emulate_linear(p, M, N, K, dA, 1, dB, 0, dy, PREC_BF16, 1);
    mma_emulate_plant_drop_last(0);
    if (rc) fail_msg("%s", kernels_last_error());
    assert_int_equal(kdevice_download(y, dy, 2 * (size_t)M * N, "y"), 0);
    long bad = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            for (int k = 0; k < K; k++) {
                mma_test_store_bits(p->in, arow, k, bits_at(At, p->in, (long)k * M + i));
                mma_test_store_bits(p->in, brow, k, bits_at(Bt, p->in, (long)k * N + j));
            }
            const uint32_t d = mma_dot(p, K, arow, brow, 0u);
            float df, sum;
            memcpy(&df, &d, 4);
            sum = df + (float)prec_decode(y0[(size_t)i * N + j], PREC_BF16);
            const uint16_t want = (uint16_t)prec_encode(bf16_round(sum), PREC_BF16);
            /* NaN: any NaN bits */
            const int both_nan = sum != sum && (y[(size_t)i * N + j] & 0x7FFFu) > 0x7F80u;
            bad += y[(size_t)i * N + j] != want && !both_nan;
        }
    kdevice_free(dA);
    kdevice_free(dB);
    kdevice_free(dy);
    free(At), free(Bt), free(y0), free(y), free(arow), free(brow);
    return bad;
}

static void test_linear_layouts_and_epilogue(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    const uint64_t seed = test_seed("mma emulation linear");
    static const prec_format fmts[] = {PREC_FP16, PREC_BF16, PREC_TF32};
    for (int f = 0; f < 3; f++) {
        const mma_model *m = mma_model_find("a100", "mma.sync", fmts[f], PREC_FP32);
        assert_non_null(m);
        /* every kind of operand row, then moderate values only: there the
         * twin's dropped products are of the sum's size and survive the bf16
         * output rounding (with huge or special rows they need not) */
        const long bad = linear_mismatches(m, 96, 80, 200, seed + (uint64_t)f, -1, 0) +
                         linear_mismatches(m, 96, 80, 200, seed + (uint64_t)f, 0, 0);
        const long twin = linear_mismatches(m, 96, 80, 200, seed + (uint64_t)f, 0, 1);
        if (bad) fail_msg("a100 %s: %ld of %d linear outputs differ", prec_format_name(fmts[f]), bad, 2 * 96 * 80);
        if (!twin) fail_msg("a100 %s: the planted twin matched every output: the check cannot fail",
                            prec_format_name(fmts[f]));
    }
}

static int is_hopper(void)
{
    kdevice_props p;
    return kdevice_describe(&p) == 0 && p.cc_major == 9;
}

static void test_h100_model_emulated_is_h100_mma(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    if (!is_hopper()) {
        print_message("skipping: the control needs an H100 (compute capability 9.x)\n");
        skip();
    }
    const uint64_t seed = test_seed("h100 emulation vs mma.sync");
    static const prec_format fmts[] = {PREC_FP16, PREC_BF16, PREC_TF32};
    const int M = 256, N = 256, K = 1024;
    for (int f = 0; f < 3; f++) {
        const size_t esz = (size_t)mma_elem_bytes(fmts[f]);
        uint8_t *A = malloc((size_t)M * K * esz), *B = malloc((size_t)N * K * esz);
        uint32_t *native = malloc(4 * (size_t)M * N), *emul = malloc(4 * (size_t)M * N);
        assert_true(A && B && native && emul);
        prec_rng rng;
        prec_rng_seed(&rng, seed + (uint64_t)f);
        for (long i = 0; i < (long)M * K; i++) mma_store(fmts[f], A, i, prec_rne(prec_rng_normal(&rng), fmts[f]));
        for (long i = 0; i < (long)N * K; i++) mma_store(fmts[f], B, i, prec_rne(prec_rng_normal(&rng), fmts[f]));
        void *dA = upload(A, (size_t)M * K * esz), *dB = upload(B, (size_t)N * K * esz), *dD = NULL;
        assert_int_equal(kdevice_alloc(&dD, 4 * (size_t)M * N, "D"), 0);
        assert_int_equal(kdevice_fill_bytes(dD, 0xFF, 4 * (size_t)M * N, "poison"), 0);
        if (probe_sm80_gemm(fmts[f], M, N, K, dA, dB, dD)) fail_msg("%s", kernels_last_error());
        assert_int_equal(kdevice_download(native, dD, 4 * (size_t)M * N, "native D"), 0);
        long bad = 0, twin = 0;
        static const char *const gens[] = {"h100", "a100"};
        for (int g = 0; g < 2; g++) {
            const mma_model *m = mma_model_find(gens[g], "mma.sync", fmts[f], PREC_FP32);
            assert_non_null(m);
            assert_int_equal(kdevice_fill_bytes(dD, 0xFF, 4 * (size_t)M * N, "poison"), 0);
            if (mma_emulate_gemm(&m->arith, M, N, K, dA, dB, NULL, dD)) fail_msg("%s", kernels_last_error());
            assert_int_equal(kdevice_download(emul, dD, 4 * (size_t)M * N, "emulated D"), 0);
            long diff = 0;
            for (long i = 0; i < (long)M * N; i++) diff += native[i] != emul[i];
            if (g == 0) bad = diff;
            else twin = diff;
        }
        print_message("%s: H100 model emulated vs mma.sync: %ld of %d differ; A100 model (twin) %ld\n",
                      prec_format_name(fmts[f]), bad, M * N, twin);
        kdevice_free(dA), kdevice_free(dB), kdevice_free(dD);
        free(A), free(B), free(native), free(emul);
        if (bad) fail_msg("%s: the emulated H100 model differs from the H100's mma.sync", prec_format_name(fmts[f]));
        if (!twin) fail_msg("%s: the A100 model matched mma.sync too: the control cannot fail", prec_format_name(fmts[f]));
    }
}

enum { R_BATCH = 3 };

/* One batched case: layout, formats, replica strides (padded past each
 * array's size; stride_a 0 shares A). */
typedef struct {
    const char *gen;
    prec_format in, y_format;
    int M, N, K, a_trans, b_trans, accumulate, share_a;
} batch_case;

static size_t fmt_bytes(prec_format f) { return (size_t)mma_elem_bytes(f); }

/* Bytes where the batched call's y differs from R single calls' (over every
 * replica's output and the guards between them), operands of one kind (-1:
 * each row its own); *written: the fewest outputs of one replica the single
 * calls changed. */
static long batched_mismatches(const batch_case *c, uint64_t seed, int kind, int planted, long *written)
{
    const mma_model *m = mma_model_find(c->gen, "mma.sync", c->in, PREC_FP32);
    assert_non_null(m);
    const mma_arith *p = &m->arith;
    const size_t esz = fmt_bytes(p->in), ysz = c->y_format == PREC_FP32 ? 4 : 2;
    const int64_t na = (int64_t)c->M * c->K, nb = (int64_t)c->N * c->K, ny = (int64_t)c->M * c->N;
    /* odd paddings: replicas' arrays neither back to back nor aligned */
    const mma_emulate_batch batch = {R_BATCH, c->share_a ? 0 : na + 37, nb + 5, ny + 11};
    const int64_t la = c->share_a ? na : R_BATCH * batch.stride_a, lb = R_BATCH * batch.stride_b;
    const int64_t ly = R_BATCH * batch.stride_y;
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    /* every replica's A and B, padding included, as rows of K operands of a kind each */
    void *A = rows_of(&rng, p->in, (int)((la + c->K - 1) / c->K), c->K, kind);
    void *B = rows_of(&rng, p->in, (int)((lb + c->K - 1) / c->K), c->K, kind);
    uint8_t *y0 = malloc(ly * ysz), *yb = malloc(ly * ysz), *ys = malloc(ly * ysz);
    assert_true(y0 && yb && ys);
    for (int64_t i = 0; i < ly; i++) {
        const int guard = i % batch.stride_y >= ny;
        mma_test_store_bits(c->y_format, y0, (long)i,
                            guard ? 0xA5A5A5A5u : (uint32_t)prec_encode(prec_rne(prec_rng_normal(&rng), c->y_format), c->y_format));
    }
    void *dA = upload(A, la * esz), *dB = upload(B, lb * esz), *dyb = upload(y0, ly * ysz), *dys = upload(y0, ly * ysz);
    mma_emulate_plant_replica0_b(planted);
    const int rc = mma_emulate_linear_batched(p, c->M, c->N, c->K, dA, c->a_trans, dB, c->b_trans, dyb, c->y_format,
                                              c->accumulate, &batch);
    mma_emulate_plant_replica0_b(0);
    if (rc) fail_msg("%s", kernels_last_error());
    for (int r = 0; r < R_BATCH; r++)
        if (mma_emulate_linear(p, c->M, c->N, c->K, (uint8_t *)dA + r * batch.stride_a * esz, c->a_trans,
                               (uint8_t *)dB + r * batch.stride_b * esz, c->b_trans,
                               (uint8_t *)dys + r * batch.stride_y * ysz, c->y_format, c->accumulate))
            fail_msg("%s", kernels_last_error());
    assert_int_equal(kdevice_download(yb, dyb, ly * ysz, "batched y"), 0);
    assert_int_equal(kdevice_download(ys, dys, ly * ysz, "single y"), 0);
    long bad = 0;
    for (int64_t i = 0; i < ly * (int64_t)ysz; i++) bad += yb[i] != ys[i];
    *written = ny;
    for (int r = 0; r < R_BATCH; r++) {
        long changed = 0;
        for (int64_t i = 0; i < ny; i++) {
            const size_t at = (size_t)(r * batch.stride_y + i) * ysz;
            changed += memcmp(ys + at, y0 + at, ysz) != 0;
        }
        if (changed < *written) *written = changed;
    }
    kdevice_free(dA), kdevice_free(dB), kdevice_free(dyb), kdevice_free(dys);
    free(A), free(B), free(y0), free(yb), free(ys);
    return bad;
}

static void test_batched_replicas_equal_single_calls(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    const uint64_t seed = test_seed("mma emulation replicas");
    /* the trainer's three products: forward (x . W^T), dgrad (dy . W), wgrad (dy^T . x) */
    static const batch_case cases[] = {
        {"a100", PREC_BF16, PREC_BF16, 96, 80, 203, 0, 1, 0, 0},
        {"a100", PREC_BF16, PREC_FP32, 96, 80, 203, 1, 0, 1, 0},
        {"a100", PREC_TF32, PREC_FP32, 70, 130, 96, 0, 0, 1, 0},
        {"h100", PREC_FP16, PREC_FP16, 64, 64, 200, 1, 0, 1, 1},
        {"h100", PREC_BF16, PREC_BF16, 130, 64, 64, 0, 1, 0, 0},
    };
    const int64_t calls0 = mma_emulate_batched_calls();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const batch_case *c = &cases[i];
        const uint64_t s = seed + i;
        long written_all, written_normal, written_twin;
        const long bad = batched_mismatches(c, s, -1, 0, &written_all) + batched_mismatches(c, s, 0, 0, &written_normal);
        const long twin = batched_mismatches(c, s, 0, 1, &written_twin);
        print_message("%s %s -> %s %dx%dx%d a_trans %d b_trans %d acc %d%s: R=%d batched vs singles %ld bytes differ "
                      "(fewest outputs a call changed: %ld of %d); planted twin %ld\n",
                      c->gen, prec_format_name(c->in), prec_format_name(c->y_format), c->M, c->N, c->K, c->a_trans,
                      c->b_trans, c->accumulate, c->share_a ? " shared A" : "", R_BATCH, bad, written_normal,
                      c->M * c->N, twin);
        if (bad) fail_msg("case %zu: %ld bytes of the batched call differ from single calls", i, bad);
        /* normal operands change nearly every output: a call that wrote nothing would pass the comparison */
        if (written_normal < (long)c->M * c->N / 2)
            fail_msg("case %zu: the single calls changed only %ld of %d outputs of a replica", i, written_normal,
                     c->M * c->N);
        if (!twin) fail_msg("case %zu: the planted twin (replica 0's B for all) matched: the check cannot fail", i);
    }
    assert_true(mma_emulate_batched_calls() - calls0 == 3 * (int64_t)(sizeof cases / sizeof cases[0]));
}

/* Bad batches are refused with a message naming the problem. */
static void test_batched_refusals(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    const mma_model *m = mma_model_find("a100", "mma.sync", PREC_BF16, PREC_FP32);
    assert_non_null(m);
    void *d = NULL;
    assert_int_equal(kdevice_alloc(&d, 1 << 16, "buffer"), 0);
    const mma_emulate_batch overlapping = {2, 64 * 64, 64 * 64, 64 * 64 - 1}, none = {0, 0, 0, 4096},
                            negative = {2, -1, 0, 4096};
    assert_int_equal(mma_emulate_linear_batched(&m->arith, 64, 64, 64, d, 0, d, 1, d, PREC_BF16, 0, &overlapping), -1);
    assert_non_null(strstr(kernels_last_error(), "y >= M*N"));
    assert_int_equal(mma_emulate_linear_batched(&m->arith, 64, 64, 64, d, 0, d, 1, d, PREC_BF16, 0, &none), -1);
    assert_non_null(strstr(kernels_last_error(), "replicas must be in 1..65535"));
    assert_int_equal(mma_emulate_linear_batched(&m->arith, 64, 64, 64, d, 0, d, 1, d, PREC_BF16, 0, &negative), -1);
    assert_non_null(strstr(kernels_last_error(), "a=-1"));
    kdevice_free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fast_kernel_matches_cpu_model),
        cmocka_unit_test(test_linear_layouts_and_epilogue),
        cmocka_unit_test(test_h100_model_emulated_is_h100_mma),
        cmocka_unit_test(test_batched_replicas_equal_single_calls),
        cmocka_unit_test(test_batched_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
