/* tests/test_train_mma.c — training "as an A100" (plan matmul=...:mma.a100):
 *  1. (CPU, CI) a tiny model trains with every GEMM slot through the A100
 *     model: finite losses and gradient norms, bit-identical across two
 *     runs; on the fp32 path (tf32 units, unrounded fp32 outputs) different
 *     from the plain fp32 matmul (twin: were the model not used, they would
 *     agree);
 *  2. (GPU) the CUDA backend's matmul_mma and the CPU backend's give the
 *     same bits for every GEMM role the tiny model runs (forward, dgrad,
 *     the qkv dgrad over K = 3C, wgrad accumulating into fp32, the layouts
 *     of kernels/matmul.h), on bf16, fp16, fp32 (tf32 units) and fp8 (bf16
 *     on an A100) paths; twin: the emulation's planted bug must show. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "kernels/mma_emulate.h"
#include "precision/rng.h"
#include "tests/test_train_util.h"
#include "tests/test_util.h"
#include "trainer/backend.h"

static void test_cpu_trains_as_a100(void **state)
{
    (void)state;
    const unsigned long long seed = test_seed("train as a100");
    /* bf16: the A100 run is finite and repeats bit for bit.  fp32 (tf32 units
     * under the model, fp32 outputs, so every GEMM difference reaches the
     * loss): the model's run differs from the plain fp32 matmul's. */
    static const char *const presets[] = {"bf16", "fp32"};
    for (int p = 0; p < 2; p++) {
        ttrain_config c;
        ttrain_result a100, again, plain;
        tiny_config(&c, TMODEL_GPT2, presets[p], seed);
        c.steps = 3;
        run_ok(&c, &plain);
        char set[64];
        snprintf(set, sizeof set, "matmul=%s:mma.a100", presets[p]);
        tiny_set(&c, set);
        run_ok(&c, &a100);
        run_ok(&c, &again);
        int differs = 0;
        for (long s = 0; s < c.steps; s++) {
            print_message("%s step %ld: loss a100 model %.9f, plain %.9f; grad norm %.9g, %.9g\n", presets[p], s,
                          a100.loss[s], plain.loss[s], a100.grad_norm[s], plain.grad_norm[s]);
            assert_true(isfinite(a100.loss[s]));
            if (!same_bits(a100.loss[s], again.loss[s]) || !same_bits(a100.grad_norm[s], again.grad_norm[s]))
                fail_msg("%s step %ld: two runs of one plan differ", presets[p], s);
            differs |= !same_bits(a100.loss[s], plain.loss[s]) || !same_bits(a100.grad_norm[s], plain.grad_norm[s]);
        }
        if (p == 1 && !differs) fail_msg("fp32: the A100 model gave the plain matmul's losses: the model was not used");
        ttrain_result_free(&a100);
        ttrain_result_free(&again);
        ttrain_result_free(&plain);
    }
}

typedef struct {
    int64_t M, N, K;
    int a_trans, b_trans, accumulate;
    tslot slot;
} gemm_case;

/* Mismatching output elements between the two backends for one GEMM. */
static long backend_mismatches(tbackend *cpu, tbackend *gpu, const gemm_case *g, prec_format ab, prec_format yf,
                               prec_rng *rng)
{
    tbackend *be[2] = {cpu, gpu};
    const int64_t ashape[2] = {g->a_trans ? g->K : g->M, g->a_trans ? g->M : g->K};
    const int64_t bshape[2] = {g->b_trans ? g->N : g->K, g->b_trans ? g->K : g->N};
    const int64_t yshape[2] = {g->M, g->N};
    const int64_t na = g->M * g->K, nb = g->N * g->K, ny = g->M * g->N;
    double *va = malloc(sizeof(double) * na), *vb = malloc(sizeof(double) * nb), *vy = malloc(sizeof(double) * ny);
    uint8_t *out[2] = {malloc(4 * ny), malloc(4 * ny)};
    assert_true(va && vb && vy && out[0] && out[1]);
    for (int64_t i = 0; i < na; i++) va[i] = prec_rne(prec_rng_normal(rng), ab);
    for (int64_t i = 0; i < nb; i++) vb[i] = prec_rne(ldexp(prec_rng_normal(rng), -3), ab);
    for (int64_t i = 0; i < ny; i++) vy[i] = prec_rne(prec_rng_normal(rng), yf);
    for (int k = 0; k < 2; k++) {
        ktensor A, B, Y;
        if (be[k]->alloc(be[k], &A, ab, 2, ashape) || be[k]->alloc(be[k], &B, ab, 2, bshape) ||
            be[k]->alloc(be[k], &Y, yf, 2, yshape))
            fail_msg("%s: %s", be[k]->name, tbackend_error(be[k]));
        if (be[k]->upload(be[k], &A, va) || be[k]->upload(be[k], &B, vb) || be[k]->upload(be[k], &Y, vy) ||
            be[k]->matmul(be[k], tbackend_site(be[k], g->slot, 0), &Y, &A, g->a_trans, &B, g->b_trans, g->accumulate) ||
            be[k]->read_bytes(be[k], &Y, out[k]))
            fail_msg("%s: %s", be[k]->name, tbackend_error(be[k]));
        be[k]->release(be[k], &A);
        be[k]->release(be[k], &B);
        be[k]->release(be[k], &Y);
    }
    const size_t esz = kformat_bytes(yf);
    long bad = 0;
    for (int64_t i = 0; i < ny; i++) bad += memcmp(out[0] + i * esz, out[1] + i * esz, esz) != 0;
    free(va), free(vb), free(vy), free(out[0]), free(out[1]);
    return bad;
}

static void test_cuda_and_cpu_backends_agree(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    const unsigned long long seed = test_seed("matmul_mma cuda vs cpu");
    char why[256], err[1024];
    tbackend *gpu = tbackend_cuda_create(why, sizeof why);
    if (!gpu) fail_msg("cuda backend: %s", why);
    tbackend *cpu = tbackend_cpu_create();
    assert_non_null(cpu);
    /* the tiny model's GEMMs: tokens 64, width 32, 4x width 128, vocabulary 256 */
    static const gemm_case cases[] = {
        {64, 128, 32, 0, 1, 0, TSLOT_MLP_UP},        /* forward y = x W^T */
        {64, 32, 128, 0, 0, 0, TSLOT_MLP_UP_DGRAD},  /* dx = dy W */
        {64, 32, 96, 0, 0, 0, TSLOT_ATTN_QKV_DGRAD}, /* dx = [dq dk dv] W_qkv, one K = 3C chain */
        {128, 32, 64, 1, 0, 1, TSLOT_MLP_UP_WGRAD},  /* dW += dy^T x */
        {64, 256, 32, 0, 1, 0, TSLOT_LM_HEAD},
    };
    static const struct { const char *plan, *set; prec_format ab; } paths[] = {
        {"bf16", "matmul=bf16:mma.a100", PREC_BF16},
        {"fp16", "matmul=fp16:mma.a100", PREC_FP16},
        {"fp32", "matmul=fp32:mma.a100", PREC_FP32},
        {"fp8", "matmul=fp8:mma.a100", PREC_BF16},
        {"bf16", "matmul=bf16:mma.h100", PREC_BF16},
    };
    prec_rng rng;
    for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
        tplan plan;
        if (tplan_init(&plan, paths[p].plan, TMODEL_GPT2, err, sizeof err) || tplan_set(&plan, paths[p].set, err, sizeof err))
            fail_msg("%s", err);
        if (tbackend_bind_plan(cpu, &plan, 2)) fail_msg("cpu: %s", tbackend_error(cpu));
        if (tbackend_bind_plan(gpu, &plan, 2)) fail_msg("cuda: %s", tbackend_error(gpu));
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            const tsite *at = tbackend_site(cpu, cases[i].slot, 0);
            prec_format yf = tpath_storage(at->path);
            if (cases[i].accumulate) yf = PREC_FP32; /* the fp32 gradients a wgrad adds into (gemm_fp32 style) */
            if (cases[i].accumulate && at->path != KPATH_FP32 && at->path != KPATH_BF16 && at->path != KPATH_FP16)
                yf = tpath_storage(at->path);
            prec_rng_seed(&rng, seed + 100 * p + i);
            const long bad = backend_mismatches(cpu, gpu, &cases[i], paths[p].ab, yf, &rng);
            prec_rng_seed(&rng, seed + 100 * p + i);
            mma_emulate_plant_drop_last(1);
            const long twin = backend_mismatches(cpu, gpu, &cases[i], paths[p].ab, yf, &rng);
            mma_emulate_plant_drop_last(0);
            print_message("%s case %zu: %ld mismatches, twin %ld\n", paths[p].set, i, bad, twin);
            if (bad) fail_msg("%s case %zu: %ld outputs differ between the backends", paths[p].set, i, bad);
            if (!twin) fail_msg("%s case %zu: the planted twin agreed: the check cannot fail", paths[p].set, i);
        }
    }
    cpu->destroy(cpu);
    gpu->destroy(gpu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_trains_as_a100),
        cmocka_unit_test(test_cuda_and_cpu_backends_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
