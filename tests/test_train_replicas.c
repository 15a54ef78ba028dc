/* tests/test_train_replicas.c — the replica engine (trainer/train.h,
 * ttrain_run_replicas; trainer/replicas.c): R runs in one process give, run
 * by run, the bits of single runs with the same seeds.
 *
 *   - every replica equals the single run with its init and data-order seeds,
 *     step by step (training losses, validation loss) and in its final state
 *     hash, for gpt2 and modern, fp32, bf16 and fp16 with dynamic loss
 *     scaling; and the same group twice gives the same bits;
 *   - twins: an engine whose replicas share replica 0's data order, or its
 *     init seed, must fail that comparison;
 *   - one replica poisoned with a NaN stops with status 3, named by replica,
 *     seed, slot and tensor; the others finish with the bits they have
 *     without the poisoned one;
 *   - what replicas refuse (R out of range, checkpoints, hooks);
 *   - on a GPU (make test-gpu; skipped visibly here): the same comparisons on
 *     the CUDA backend, whose batched forms (strided-batched GEMMs, the
 *     emulated matrix units' batched calls, folded row ops, replica kernels)
 *     must be in use.
 * Seeds are fresh per run (ULPSCOPE_SEED replays). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/matmul.h"
#include "kernels/mma_emulate.h"
#include "test_util.h"
#include "test_train_util.h"

#define R_TEST 3

/* Replica seeds from the test seed: distinct, and distinct data orders. */
static void replica_seeds(unsigned long long base, uint64_t *seeds, uint64_t *data_seeds)
{
    for (int i = 0; i < R_TEST; i++) {
        seeds[i] = base + 7919ull * (uint64_t)i;
        data_seeds[i] = base ^ (0x5eedull << 20) ^ (uint64_t)(i + 1);
    }
}

/* Replicas of c against single runs with the same seeds: the number of
 * replicas whose losses or final state differ in any bit. */
static int replicas_vs_singles(const ttrain_config *c, const uint64_t *seeds, const uint64_t *data_seeds)
{
    ttrain_result group[R_TEST];
    int st = ttrain_run_replicas(c, R_TEST, seeds, data_seeds, group);
    if (st) fail_msg("replicas failed (status %d): %s", st, group[0].error);
    int differ = 0;
    for (int i = 0; i < R_TEST; i++) {
        ttrain_config one = *c;
        one.seed = seeds[i];
        one.data_seed = data_seeds[i];
        ttrain_result single;
        run_ok(&one, &single);
        int same = single.steps_done == group[i].steps_done && single.param_hash == group[i].param_hash &&
                   same_bits(single.final_val_loss, group[i].final_val_loss);
        for (long s = 0; s < c->steps && same; s++) same = same_bits(single.loss[s], group[i].loss[s]);
        differ += !same;
        ttrain_result_free(&single);
    }
    for (int i = 0; i < R_TEST; i++) ttrain_result_free(&group[i]);
    return differ;
}

static void check_plans(const char *backend, int width, int seq)
{
    static const char *const presets[] = {"fp32", "bf16", "fp16"};
    unsigned long long base = test_seed("test_replicas_equal_singles");
    for (int kind = 0; kind < TMODEL_COUNT; kind++) {
        for (size_t p = 0; p < sizeof presets / sizeof presets[0]; p++) {
            ttrain_config c;
            tiny_config(&c, (tmodel_kind)kind, presets[p], base);
            char err[512];
            if (tmodel_config_init(&c.model, (tmodel_kind)kind, 2, width, 2, 256, seq, err, sizeof err))
                fail_msg("%s", err);
            c.seq = seq;
            c.backend = backend;
            c.steps = 4;
            c.accum = 2;
            uint64_t seeds[R_TEST], data_seeds[R_TEST];
            replica_seeds(base + p, seeds, data_seeds);
            int differ = replicas_vs_singles(&c, seeds, data_seeds);
            print_message("%s %s %s: %d of %d replicas differ from their single runs\n", backend,
                          tmodel_kind_name((tmodel_kind)kind), presets[p], differ, R_TEST);
            assert_int_equal(differ, 0);
        }
    }
}

/* Variants each take their own road through the engine (fp8 quantises
 * every replica in one launch a pass and runs a GEMM per replica, the
 * emulated matrix units go through their own batched calls, the others
 * batched or folded): replica s
 * must equal the single run with seed s under each.  cpu_too: the CPU backend
 * models the variants too. */
static const struct {
    tmodel_kind model;
    const char *preset, *overrides;
    int cpu_too;
} variant_plans[] = {
    {TMODEL_GPT2, "bf16", "matmul=bf16:mma.a100", 1},
    {TMODEL_MODERN, "bf16", "matmul=bf16:mma.h100", 1},
    {TMODEL_MODERN, "fp32", "matmul=fp32:mma.a100", 1},
    {TMODEL_GPT2, "bf16", "matmul=bf16:split_k,attention=bf16:naive,norm.*=bf16:sequential", 1},
    {TMODEL_MODERN, "bf16", "optimizer.muon=bf16:tall_fused,activation=bf16:store_grad,attention=bf16:naive", 1},
    {TMODEL_GPT2, "bf16", "lm_head=fp8,mlp.up=fp8", 1},
    {TMODEL_GPT2, "bf16", "lm_head=fp8:fast,mlp.up=fp8:fast", 0},
    {TMODEL_GPT2, "fp8", "fp8_scaling=fp32:current", 0},
    {TMODEL_MODERN, "fp8", "fp8_scaling=fp32:current", 0},
    {TMODEL_GPT2, "bf16", "mlp.up=fp8:blockwise,lm_head=fp8:blockwise", 0},
    {TMODEL_MODERN, "bf16", "attention=bf16:flash_mma,norm.*=bf16:warp_tree", 0},
    {TMODEL_GPT2, "fp16", "attention=fp16:flash_mma_exp2", 0},
    {TMODEL_GPT2, "bf16", "cross_entropy=bf16:chunk_128", 1},  /* the fused head: a call per replica */
    {TMODEL_MODERN, "bf16", "cross_entropy=bf16:chunk_1024", 1},
};

static void check_variant_plans(const char *backend, int width, int seq)
{
    unsigned long long base = test_seed("test_replicas_variants");
    for (size_t v = 0; v < sizeof variant_plans / sizeof variant_plans[0]; v++) {
        if (strcmp(backend, "cpu") == 0 && !variant_plans[v].cpu_too) continue;
        ttrain_config c;
        tiny_config(&c, variant_plans[v].model, variant_plans[v].preset, base);
        char err[512];
        if (tmodel_config_init(&c.model, variant_plans[v].model, 2, width, 2, 256, seq, err, sizeof err))
            fail_msg("%s", err);
        tiny_set(&c, variant_plans[v].overrides);
        c.seq = seq;
        c.backend = backend;
        c.steps = 3;
        uint64_t seeds[R_TEST], data_seeds[R_TEST];
        replica_seeds(base + v, seeds, data_seeds);
        int differ = replicas_vs_singles(&c, seeds, data_seeds);
        print_message("%s %s %s %s: %d of %d replicas differ from their single runs\n", backend,
                      tmodel_kind_name(variant_plans[v].model), variant_plans[v].preset, variant_plans[v].overrides,
                      differ, R_TEST);
        assert_int_equal(differ, 0);
    }
}

static void test_replicas_equal_singles_cpu(void **state)
{
    (void)state;
    check_plans("cpu", 32, 32);
    check_variant_plans("cpu", 32, 32);
}

/* Twins: the comparison above must catch replicas that share a data order
 * or an init seed (the engine's planted mistakes). */
static void check_twin(ttrain_bug bug, const char *what)
{
    unsigned long long base = test_seed("test_replicas_twin");
    ttrain_config c;
    tiny_config(&c, TMODEL_GPT2, "bf16", base);
    c.steps = 3;
    uint64_t seeds[R_TEST], data_seeds[R_TEST];
    replica_seeds(base, seeds, data_seeds);
    ttrain_plant_bug(bug);
    int differ = replicas_vs_singles(&c, seeds, data_seeds);
    ttrain_plant_bug(TTRAIN_BUG_NONE);
    print_message("planted: replicas sharing %s: %d of %d replicas differ (must be %d)\n", what, differ, R_TEST,
                  R_TEST - 1);
    assert_int_equal(differ, R_TEST - 1);
}

static void test_twin_shared_data_order(void **state)
{
    (void)state;
    check_twin(TTRAIN_BUG_SHARED_DATA_ORDER, "replica 0's data order");
}

static void test_twin_shared_init_seed(void **state)
{
    (void)state;
    check_twin(TTRAIN_BUG_SHARED_INIT_SEED, "replica 0's init seed");
}

/* One replica's weight poisoned with a NaN after initialisation. */
typedef struct {
    int replica;
} poison;

static int poison_weight(tmodel *m, void *ctx)
{
    const poison *p = ctx;
    tbackend *be = tmodel_backend(m);
    tparam *w = NULL;
    for (int i = 0; i < tmodel_n_params(m); i++)
        if (strcmp(tmodel_param(m, i)->name, "h0.attn.qkv.w") == 0) w = tmodel_param(m, i);
    if (!w) return -1;
    ktensor mine = tbackend_slice(be, &w->w, p->replica);
    int64_t n = ktensor_numel(&mine);
    double *v = malloc((size_t)n * sizeof *v);
    if (!v || be->download(be, &mine, v)) return free(v), -1;
    v[n / 2] = NAN;
    int rc = be->upload(be, &mine, v);
    free(v);
    return rc;
}

/* plan: a preset and overrides ("fp8", "fp8_scaling=fp32:delayed"); planted:
 * the twin's mistake, which must change a survivor's bits (0: none). */
static int check_nan_replica_plan(const char *backend, int width, int seq, const char *preset, const char *set,
                                  ttrain_bug planted)
{
    unsigned long long base = test_seed("test_replica_nan");
    ttrain_config c;
    tiny_config(&c, TMODEL_GPT2, preset, base);
    if (set) tiny_set(&c, set);
    char err[512];
    if (tmodel_config_init(&c.model, TMODEL_GPT2, 2, width, 2, 256, seq, err, sizeof err)) fail_msg("%s", err);
    c.seq = seq;
    c.backend = backend;
    c.steps = 3;
    uint64_t seeds[R_TEST], data_seeds[R_TEST];
    replica_seeds(base, seeds, data_seeds);
    ttrain_result clean[R_TEST], hit[R_TEST];
    int st = ttrain_run_replicas(&c, R_TEST, seeds, data_seeds, clean);
    if (st) fail_msg("replicas failed (status %d): %s", st, clean[0].error);
    poison p = {1};
    c.after_init = poison_weight;
    c.after_init_ctx = &p;
    ttrain_plant_bug(planted);
    st = ttrain_run_replicas(&c, R_TEST, seeds, data_seeds, hit);
    ttrain_plant_bug(TTRAIN_BUG_NONE);
    print_message("%s %s%s%s%s: poisoned replica 1: group status %d; replica 1: %s\n", backend, preset, set ? " " : "",
                  set ? set : "", planted ? " (planted: replays record)" : "", st, hit[1].error);
    assert_int_equal(st, 3);
    assert_int_equal(hit[1].status, 3);
    assert_true(hit[1].nonfinite);
    char seed[64];
    snprintf(seed, sizeof seed, "replica 1 (seed %llu)", (unsigned long long)seeds[1]);
    assert_non_null(strstr(hit[1].error, seed));
    assert_string_equal(hit[1].nonfinite_slot, "weights");
    assert_string_equal(hit[1].nonfinite_tensor, "h0.attn.qkv.w");
    int same = 1;
    for (int i = 0; i < R_TEST; i += 2) {
        assert_int_equal(hit[i].status, 0);
        assert_int_equal(hit[i].steps_done, c.steps);
        same &= hit[i].param_hash == clean[i].param_hash && same_bits(hit[i].final_val_loss, clean[i].final_val_loss);
    }
    print_message("  the others: %s\n", same ? "the same bits as without the NaN" : "OTHER BITS than without the NaN");
    for (int i = 0; i < R_TEST; i++) ttrain_result_free(&clean[i]), ttrain_result_free(&hit[i]);
    return same;
}

static void check_nan_replica(const char *backend, int width, int seq)
{
    assert_true(check_nan_replica_plan(backend, width, seq, "bf16", NULL, TTRAIN_BUG_NONE));
    /* fp8 delayed scaling: the audit's replays restore the amax histories the step began with */
    assert_true(check_nan_replica_plan(backend, width, seq, "fp8", "fp8_scaling=fp32:delayed", TTRAIN_BUG_NONE));
    assert_false(check_nan_replica_plan(backend, width, seq, "fp8", "fp8_scaling=fp32:delayed",
                                        TTRAIN_BUG_REPLAY_RECORDS_FP8));
}

static void test_nan_replica_cpu(void **state)
{
    (void)state;
    check_nan_replica("cpu", 32, 32);
}

static void test_refusals(void **state)
{
    (void)state;
    ttrain_config c;
    tiny_config(&c, TMODEL_GPT2, "bf16", 1);
    uint64_t seeds[2] = {1, 2};
    ttrain_result res[2];
    assert_int_equal(ttrain_run_replicas(&c, 0, seeds, seeds, res), 2);
    assert_non_null(strstr(res[0].error, "--replicas 0"));
    c.ckpt_path = "never-written.ckpt";
    assert_int_equal(ttrain_run_replicas(&c, 2, seeds, seeds, res), 2);
    assert_non_null(strstr(res[0].error, "--ckpt is for single runs"));
    for (int i = 0; i < 2; i++) ttrain_result_free(&res[i]);
    FILE *fp = fopen("never-written.ckpt", "r");
    assert_null(fp);
    c.ckpt_path = NULL;
    c.hash_slot[TSLOT_LM_HEAD] = 1;
    assert_int_equal(ttrain_run_replicas(&c, 2, seeds, seeds, res), 2);
    assert_non_null(strstr(res[0].error, "--hash is for single runs"));
    for (int i = 0; i < 2; i++) ttrain_result_free(&res[i]);
}

/* Run on the GPU machine: make test-gpu (skips here without a GPU).  Width
 * 128 and 64-token windows: tensors of 256 bytes and more, so that the
 * batched forms run (the padded small ones go through the loop). */
static void test_replicas_equal_singles_cuda(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    kmatmul_batch_stats_reset();
    const int64_t mma_calls0 = mma_emulate_batched_calls();
    check_plans("cuda", 128, 64);
    check_variant_plans("cuda", 128, 64);
    kmatmul_batch_stats stats;
    kmatmul_batch_stats_get(&stats);
    const int64_t mma_calls = mma_emulate_batched_calls() - mma_calls0;
    print_message("cuda batched GEMMs: %lld strided-batched, %lld loop fallbacks, %lld fp8 loops; %lld batched "
                  "matrix-unit emulations\n",
                  (long long)stats.strided, (long long)stats.loop_fallback, (long long)stats.loop_fp8,
                  (long long)mma_calls);
    assert_true(stats.strided > 0);
    assert_true(stats.loop_fp8 > 0); /* the fp8 plans' replicas went through kmatmul_quantized_batched */
    assert_true(stats.kernel > 0);   /* and the block-scaled one through its replica grid */
    assert_true(mma_calls > 0);
}

static void test_nan_replica_cuda(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    check_nan_replica("cuda", 128, 64);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replicas_equal_singles_cpu), cmocka_unit_test(test_twin_shared_data_order),
        cmocka_unit_test(test_twin_shared_init_seed),      cmocka_unit_test(test_nan_replica_cpu),
        cmocka_unit_test(test_refusals),                   cmocka_unit_test(test_replicas_equal_singles_cuda),
        cmocka_unit_test(test_nan_replica_cuda),
    };
    cmocka_set_test_filter(getenv("ULPSCOPE_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
