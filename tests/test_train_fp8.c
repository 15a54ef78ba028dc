/* tests/test_train_fp8.c — the trainer's fp8 plan: the fp8_scaling slot
 * (current or delayed scaling), its amax histories (one per site, operand
 * and replica), and on the GPU the CUDA backend's weight cache (quantised
 * weights reused until the weights change) and its agreement with the CPU.
 *
 * CPU: the slot's overrides and refusals; every delayed scale equals the max
 * of its own site's recorded amaxes, computed here by hand (twin: one
 * history shared by every site must fail); delayed differs from current on
 * the tiny model, is deterministic, and replicas of delayed runs are single
 * runs bit for bit.
 * GPU (skip without one): cache on vs off bit-identical over steps with
 * gradient accumulation, validation and replicas (twin: a cache that skips
 * invalidation must differ); CPU and CUDA agree under delayed scaling as
 * they do under current scaling. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "precision/rng.h"
#include "tests/test_util.h"
#include "tests/test_train_util.h"
#include "trainer/backend.h"
#include "trainer/model.h"

/* ---- the slot ---------------------------------------------------------------------------------- */

static void test_plan_slot(void **state)
{
    (void)state;
    tplan p;
    char err[1024];
    assert_int_equal(tplan_init(&p, "fp8", TMODEL_GPT2, err, sizeof err), 0);
    assert_int_equal(p.slot[TSLOT_FP8_SCALING].variant, TFP8_SCALING_CURRENT); /* the preset keeps today's */
    assert_int_equal(tplan_set(&p, "fp8_scaling=fp32:delayed", err, sizeof err), 0);
    assert_int_equal(p.slot[TSLOT_FP8_SCALING].variant, TFP8_SCALING_DELAYED);
    /* the JSON says it and reads back */
    char json[TPLAN_JSON_MAX];
    tplan_to_json(&p, json, sizeof json);
    assert_non_null(strstr(json, "\"fp8_scaling\":\"fp32:delayed\""));
    tplan q;
    assert_int_equal(tplan_from_json(&q, json, err, sizeof err), 0);
    assert_true(tplan_equal(&p, &q));
    /* a plan written before the slot existed: current scaling */
    char *cut = strstr(json, ",\"fp8_scaling\":\"fp32:delayed\"");
    assert_non_null(cut);
    memmove(cut, cut + strlen(",\"fp8_scaling\":\"fp32:delayed\""), strlen(cut + strlen(",\"fp8_scaling\":\"fp32:delayed\"")) + 1);
    assert_int_equal(tplan_from_json(&q, json, err, sizeof err), 0);
    assert_int_equal(q.slot[TSLOT_FP8_SCALING].variant, TFP8_SCALING_CURRENT);
    /* refusals name the accepted values, and leave the plan as it was */
    assert_int_equal(tplan_set(&p, "fp8_scaling=fp32:late", err, sizeof err), -1);
    print_message("refused: %s\n", err);
    assert_non_null(strstr(err, "variants: current, delayed"));
    assert_int_equal(tplan_set(&p, "fp8_scaling=bf16:delayed", err, sizeof err), -1);
    assert_non_null(strstr(err, "paths: fp32"));
    assert_int_equal(tplan_set(&p, "fp8_scaling@0=fp32:current", err, sizeof err), -1);
    assert_int_equal(p.slot[TSLOT_FP8_SCALING].variant, TFP8_SCALING_DELAYED);
}

/* ---- every delayed scale from its own site's history ------------------------------------------- */

enum { M = 8, N = 16, K = 32, CALLS = 60 };

typedef struct {
    float amax[CALLS];
    int n;
} amax_list;

/* What the recipe says site list's next scale is, given this call's amax. */
static float expected_scale(const amax_list *h, float amax_now)
{
    float m = amax_now;
    if (h->n) {
        m = 0.0f;
        for (int i = h->n - TFP8_AMAX_HISTORY < 0 ? 0 : h->n - TFP8_AMAX_HISTORY; i < h->n; i++)
            m = fmaxf(m, h->amax[i]);
    }
    return m > 0.0f ? (float)(m / 448.0) : 1.0f; /* e4m3's max_finite */
}

/* CALLS forward GEMMs at mlp.up@0, mlp.up@1 and attn.out@0 in an irregular
 * order, each operand drawn at a magnitude of its own (2^-8 .. 2^8); returns
 * how many of the 2 * CALLS scales differ from their hand-computed value. */
static int scales_off(unsigned long long seed, int planted)
{
    tbackend *be = tbackend_cpu_create();
    assert_non_null(be);
    tplan p;
    char err[1024];
    if (tplan_init(&p, "fp8", TMODEL_GPT2, err, sizeof err) || tplan_set(&p, "fp8_scaling=fp32:delayed", err, sizeof err))
        fail_msg("%s", err);
    if (tbackend_bind_plan(be, &p, 2)) fail_msg("%s", tbackend_error(be));
    const int64_t sa[2] = {M, K}, sb[2] = {N, K}, sy[2] = {M, N};
    ktensor a, b, y;
    if (be->alloc(be, &a, PREC_BF16, 2, sa) || be->alloc(be, &b, PREC_BF16, 2, sb) || be->alloc(be, &y, PREC_BF16, 2, sy))
        fail_msg("%s", tbackend_error(be));
    const tsite *sites[3] = {tbackend_site(be, TSLOT_MLP_UP, 0), tbackend_site(be, TSLOT_MLP_UP, 1),
                             tbackend_site(be, TSLOT_ATTN_OUT, 0)};
    amax_list hist[3][2];
    memset(hist, 0, sizeof hist);
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    double va[M * K], vb[N * K];
    int off = 0;
    tbackend_cpu_plant_shared_fp8_history(planted);
    for (int call = 0; call < CALLS; call++) {
        int s = (int)(prec_rng_uniform(&rng) * 3.0) % 3;
        double mag_a = ldexp(1.0, (int)(prec_rng_uniform(&rng) * 17.0) - 8), mag_b = ldexp(1.0, (int)(prec_rng_uniform(&rng) * 17.0) - 8);
        float amax_a = 0.0f, amax_b = 0.0f;
        for (int i = 0; i < M * K; i++) {
            va[i] = prec_rne(mag_a * prec_rng_normal(&rng), PREC_BF16);
            amax_a = fmaxf(amax_a, (float)fabs(va[i]));
        }
        for (int i = 0; i < N * K; i++) {
            vb[i] = prec_rne(mag_b * prec_rng_normal(&rng), PREC_BF16);
            amax_b = fmaxf(amax_b, (float)fabs(vb[i]));
        }
        if (be->upload(be, &a, va) || be->upload(be, &b, vb) || be->matmul(be, sites[s], &y, &a, 0, &b, 1, 0))
            fail_msg("%s", tbackend_error(be));
        float got_a, got_b, want_a = expected_scale(&hist[s][0], amax_a), want_b = expected_scale(&hist[s][1], amax_b);
        tbackend_cpu_last_fp8_scales(&got_a, &got_b);
        off += memcmp(&got_a, &want_a, sizeof got_a) != 0;
        off += memcmp(&got_b, &want_b, sizeof got_b) != 0;
        hist[s][0].amax[hist[s][0].n++] = amax_a;
        hist[s][1].amax[hist[s][1].n++] = amax_b;
    }
    tbackend_cpu_plant_shared_fp8_history(0);
    be->release(be, &a), be->release(be, &b), be->release(be, &y);
    be->destroy(be);
    return off;
}

static void test_history_per_site(void **state)
{
    (void)state;
    unsigned long long seed = test_seed("test_history_per_site");
    int off = scales_off(seed, 0);
    print_message("delayed scales off their site's own history: %d of %d\n", off, 2 * CALLS);
    assert_int_equal(off, 0);
    /* twin: one history for every site */
    int twin = scales_off(seed, 1);
    print_message("planted shared history: %d of %d scales off\n", twin, 2 * CALLS);
    assert_true(twin > 0);
}

/* ---- training ------------------------------------------------------------------------------------ */

static void fp8_config(ttrain_config *c, tmodel_kind kind, const char *scaling, unsigned long long seed)
{
    tiny_config(c, kind, "fp8", seed);
    c->steps = 5;
    c->accum = 2;
    c->val_every = 2;
    char set[64];
    snprintf(set, sizeof set, "fp8_scaling=fp32:%s", scaling);
    tiny_set(c, set);
}

static void test_delayed_training(void **state)
{
    (void)state;
    unsigned long long seed = test_seed("test_delayed_training");
    for (int kind = 0; kind < TMODEL_COUNT; kind++) {
        ttrain_config cur, del;
        fp8_config(&cur, (tmodel_kind)kind, "current", seed);
        fp8_config(&del, (tmodel_kind)kind, "delayed", seed);
        ttrain_result rc, rd, rd2;
        run_ok(&cur, &rc);
        run_ok(&del, &rd);
        run_ok(&del, &rd2);
        int differ = 0;
        for (long s = 1; s < del.steps; s++) differ += !same_bits(rc.loss[s], rd.loss[s]);
        print_message("%s: loss current %.6f delayed %.6f at the last step; %d of %ld steps after step 0 differ; "
                      "val %.6f / %.6f\n", tmodel_kind_name((tmodel_kind)kind), rc.loss[del.steps - 1],
                      rd.loss[del.steps - 1], differ, del.steps - 1, rc.final_val_loss, rd.final_val_loss);
        assert_true(differ > 0);
        assert_true(rc.param_hash != rd.param_hash);
        /* deterministic */
        for (long s = 0; s < del.steps; s++) assert_true(same_bits(rd.loss[s], rd2.loss[s]));
        assert_true(rd.param_hash == rd2.param_hash);
        assert_true(same_bits(rd.final_val_loss, rd2.final_val_loss));
        ttrain_result_free(&rc), ttrain_result_free(&rd), ttrain_result_free(&rd2);
    }
}

/* R = 3 replicas of delayed runs, each with its own histories: every replica
 * is the single run of its seeds, bit for bit. */
static void test_delayed_replicas(void **state)
{
    (void)state;
    unsigned long long seed = test_seed("test_delayed_replicas");
    enum { R = 3 };
    ttrain_config c;
    fp8_config(&c, TMODEL_GPT2, "delayed", seed);
    uint64_t seeds[R], data_seeds[R];
    ttrain_result res[R];
    for (int r = 0; r < R; r++) seeds[r] = seed + (uint64_t)r * 7919u, data_seeds[r] = seed ^ (uint64_t)(r + 1);
    int st = ttrain_run_replicas(&c, R, seeds, data_seeds, res);
    if (st) fail_msg("replicas failed (status %d): %s", st, res[0].error);
    for (int r = 0; r < R; r++) {
        ttrain_config one = c;
        one.seed = seeds[r];
        one.data_seed = data_seeds[r];
        ttrain_result single;
        run_ok(&one, &single);
        print_message("replica %d: hash %016llx, single run %016llx\n", r, (unsigned long long)res[r].param_hash,
                      (unsigned long long)single.param_hash);
        assert_true(res[r].param_hash == single.param_hash);
        assert_true(same_bits(res[r].final_val_loss, single.final_val_loss));
        ttrain_result_free(&single), ttrain_result_free(&res[r]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_slot),
        cmocka_unit_test(test_history_per_site),
        cmocka_unit_test(test_delayed_training),
        cmocka_unit_test(test_delayed_replicas),
    };
    cmocka_set_test_filter(getenv("ULPSCOPE_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
