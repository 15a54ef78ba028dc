/* tests/test_mma_fast.c — the fast rearrangement of the block arithmetic
 * (precision/mma_fast.h, what the CUDA emulation kernel runs) against the
 * model itself (mma_dot), on the CPU:
 *  1. for every parameter set it applies to, 10^5 random dot products
 *     (lengths across one to four blocks, partial last blocks included;
 *     operand rows of every kind of tests/mma_test_values.h: subnormals,
 *     zeros of both signs, overflow, infinities and NaN; c of every kind)
 *     give the model's bits (signs in ones' complement, narrow blocks
 *     summed in 32 bits, wide ones in 64); twin: the same dots with the last
 *     product of each block planted out must disagree somewhere;
 *  2. which parameter sets it does not apply to (they run the model's own
 *     code on the GPU): the split fp8 instructions and fp16 outputs only. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "precision/mma_fast.h"
#include "tests/mma_test_values.h"
#include "tests/test_util.h"

#define DOTS 100000

static void test_fast_matches_model(void **state)
{
    (void)state;
    const uint64_t seed = test_seed("mma fast vs model");
    int models_checked = 0;
    for (int i = 0; i < mma_model_count(); i++) {
        const mma_model *m = mma_model_at(i);
        const mma_arith *p = &m->arith;
        if (!mma_fast_supported(p)) continue;
        models_checked++;
        prec_rng rng;
        prec_rng_seed(&rng, seed + (uint64_t)i);
        uint32_t a[4 * 32 + 7], b[4 * 32 + 7]; /* room for any element size */
        long bad = 0, twin_bad = 0, overflow = 0, zeros = 0;
        for (long d = 0; d < DOTS; d++) {
            const int k = 1 + (int)(prec_rng_next(&rng) % (uint64_t)(4 * p->block + 3));
            const int ka = (int)(prec_rng_next(&rng) % MMA_TEST_KINDS), kb = (int)(prec_rng_next(&rng) % MMA_TEST_KINDS);
            for (int j = 0; j < k; j++) {
                mma_test_store_bits(p->in, a, j, mma_test_operand(&rng, p->in, ka));
                mma_test_store_bits(p->in, b, j, mma_test_operand(&rng, p->in, kb));
            }
            const uint32_t c = mma_test_bits(&rng, PREC_FP32, (int)(prec_rng_next(&rng) % MMA_TEST_KINDS));
            const uint32_t want = mma_dot(p, k, a, b, c);
            const uint32_t got = mma_fast_dot(p, k, a, b, c, 0);
            overflow += (want & 0x7FFFFFFFu) == 0x7F800000u;
            zeros += (want & 0x7FFFFFFFu) == 0u;
            if (got != want && ++bad <= 3)
                print_message("%s %s %s: dot %ld (k %d, kinds %d/%d): fast 0x%08x model 0x%08x\n", m->gen, m->route,
                              prec_format_name(p->in), d, k, ka, kb, got, want);
            twin_bad += mma_fast_dot(p, k, a, b, c, 1) != want;
        }
        print_message("%s %s %s: %d dots, %ld infinite results, %ld zero results, %ld mismatches; twin %ld\n", m->gen,
                      m->route, prec_format_name(p->in), DOTS, overflow, zeros, bad, twin_bad);
        if (bad) fail_msg("%s %s %s: %ld of %d dots differ from the model", m->gen, m->route, prec_format_name(p->in),
                          bad, DOTS);
        if (twin_bad == 0)
            fail_msg("%s %s %s: the planted twin (last product dropped) agreed on every dot: the check cannot fail",
                     m->gen, m->route, prec_format_name(p->in));
    }
    assert_true(models_checked >= 20);
}

static void test_what_the_fast_path_leaves_to_the_model(void **state)
{
    (void)state;
    for (int i = 0; i < mma_model_count(); i++) {
        const mma_arith *p = &mma_model_at(i)->arith;
        const int expected = p->out == PREC_FP32 && p->split == MMA_SPLIT_NONE;
        if (mma_fast_supported(p) != expected)
            fail_msg("%s %s %s->%s: fast path %s", mma_model_at(i)->gen, mma_model_at(i)->route,
                     prec_format_name(p->in), prec_format_name(p->out),
                     expected ? "refused an fp32-output native model" : "accepted a model it does not cover");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fast_matches_model),
        cmocka_unit_test(test_what_the_fast_path_leaves_to_the_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
