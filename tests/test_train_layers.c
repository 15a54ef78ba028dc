/* tests/test_train_layers.c — per-layer slots reach exactly their layer, on
 * both backends.
 *
 * With the hash hooks on every slot at step 0, a plan that changes slot S in
 * layer L only must leave every hash recorded before S first writes in
 * layer L identical to the base run's (the other layers' outputs of S that
 * come earlier, and every earlier slot of the step), and change that one.
 * L is the layer that S reaches last (the last layer for slots that write
 * in the forward pass, layer 0 for the backward GEMMs), so that the other
 * layers of S are all among the identical ones.  Every per-layer slot of
 * both families is tried, with a choice that changes its output's bits
 * (path fp32 against the bf16 plan).
 *
 * Twins, which must fail the same check: the override applied to every
 * layer; the override placed one layer off; an override that changes
 * nothing.
 *
 * The CPU test runs everywhere; the CUDA test must be run on the GPU
 * machine (make test-gpu) and skips visibly without a GPU. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "test_train_util.h"

#define DEPTH 3

/* modern zero-initialises its output projections (modded-nanogpt), which
 * leaves every gradient behind them zero at step 0, in any format: give
 * them small deterministic values so that every slot's output depends on
 * its format from the first step. */
static int nonzero_out_proj(tmodel *m, void *ctx)
{
    (void)ctx;
    tbackend *be = tmodel_backend(m);
    for (int i = 0; i < tmodel_n_params(m); i++) {
        tparam *p = tmodel_param(m, i);
        if (!strstr(p->name, ".attn.out.w") && !strstr(p->name, ".mlp.down.w")) continue;
        int64_t n = ktensor_numel(&p->w);
        double *v = malloc((size_t)n * sizeof *v);
        if (!v) return -1;
        for (int64_t j = 0; j < n; j++) v[j] = 0.02 * sin(0.7 * (double)j + i);
        int rc = be->upload(be, &p->w, v);
        if (!rc && p->master.data) rc = be->upload(be, &p->master, v);
        free(v);
        if (rc) return rc;
    }
    return 0;
}

/* A 3-layer tiny model hashing every slot's output at step 0 of one step. */
static void layered(ttrain_config *c, tmodel_kind kind, const char *backend, unsigned long long seed,
                    const char *set)
{
    char err[512];
    tiny_config(c, kind, "bf16", seed);
    if (tmodel_config_init(&c->model, kind, DEPTH, 32, 2, 256, 32, err, sizeof err)) fail_msg("%s", err);
    if (set) tiny_set(c, set);
    c->backend = backend;
    c->steps = 1;
    for (int s = 0; s < TSLOT_COUNT; s++) c->hash_slot[s] = c->plan.used[s];
    c->at_steps[0] = 0;
    c->n_at_steps = 1;
    if (kind == TMODEL_MODERN) c->after_init = nonzero_out_proj;
}

static int first_record(const ttrain_result *r, tslot slot, int layer)
{
    for (int i = 0; i < r->n_hashes; i++)
        if (r->hashes[i].step == 0 && r->hashes[i].slot == slot && r->hashes[i].layer == layer) return i;
    return -1;
}

/* The layer slot s reaches last in a step: its first record comes latest. */
static int last_layer_reached(const ttrain_result *base, tslot s)
{
    int best = -1, at = -1;
    for (int l = 0; l < DEPTH; l++) {
        int i = first_record(base, s, l);
        if (i > at) at = i, best = l;
    }
    return best;
}

/* The check: records before (slot, layer)'s first are identical to the
 * base's, that one differs.  Returns 1 when it holds; why says otherwise. */
static int changes_exactly(const ttrain_result *base, const ttrain_result *run, tslot slot, int layer, char *why,
                           size_t len)
{
    int at = first_record(base, slot, layer);
    if (at < 0 || first_record(run, slot, layer) != at || run->n_hashes != base->n_hashes) {
        snprintf(why, len, "the runs recorded different hooks");
        return 0;
    }
    for (int i = 0; i < at; i++) {
        const thash_record *a = &base->hashes[i], *b = &run->hashes[i];
        if (a->slot != b->slot || a->layer != b->layer || strcmp(a->tensor, b->tensor) != 0) {
            snprintf(why, len, "record %d is another tensor", i);
            return 0;
        }
        if (a->hash != b->hash) {
            snprintf(why, len, "%s@%d %s, recorded before %s@%d, changed", tslot_get(a->slot)->name, a->layer,
                     a->tensor, tslot_get(slot)->name, layer);
            return 0;
        }
    }
    if (base->hashes[at].hash == run->hashes[at].hash) {
        snprintf(why, len, "%s@%d %s did not change", tslot_get(slot)->name, layer, base->hashes[at].tensor);
        return 0;
    }
    return 1;
}

static int run_and_check(tmodel_kind kind, const char *backend, unsigned long long seed, const ttrain_result *base,
                         const char *set, tslot slot, int layer, char *why, size_t len)
{
    ttrain_config c;
    ttrain_result r;
    layered(&c, kind, backend, seed, set);
    run_ok(&c, &r);
    int ok = changes_exactly(base, &r, slot, layer, why, len);
    ttrain_result_free(&r);
    return ok;
}

/* fp32 against the bf16 plan; attention keeps its flash kernel (a path
 * alone selects variant 0, the naive one). */
static void fp32_choice(tslot s, const char *selector, char *buf, size_t len)
{
    snprintf(buf, len, "%s%s=fp32%s", tslot_get(s)->name, selector, s == TSLOT_ATTENTION ? ":flash" : "");
}

static void check_every_layer_slot(const char *backend)
{
    unsigned long long seed = test_seed("test_layer_slots");
    for (int kind = 0; kind < TMODEL_COUNT; kind++) {
        ttrain_config c;
        ttrain_result base;
        layered(&c, (tmodel_kind)kind, backend, seed, NULL);
        run_ok(&c, &base);
        int tried = 0;
        for (int s = 0; s < TSLOT_COUNT; s++) {
            if (!c.plan.used[s] || !tslot_get((tslot)s)->per_layer) continue;
            int L = last_layer_reached(&base, (tslot)s);
            if (L < 0) fail_msg("%s: slot %s records no hash", tmodel_kind_name((tmodel_kind)kind), tslot_get((tslot)s)->name);
            char set[96], sel[16], why[256];
            snprintf(sel, sizeof sel, "@%d", L);
            fp32_choice((tslot)s, sel, set, sizeof set);
            if (!run_and_check((tmodel_kind)kind, backend, seed, &base, set, (tslot)s, L, why, sizeof why))
                fail_msg("%s %s %s: %s", backend, tmodel_kind_name((tmodel_kind)kind), set, why);
            /* twin: the same choice in every layer must fail the check */
            fp32_choice((tslot)s, "", set, sizeof set);
            if (run_and_check((tmodel_kind)kind, backend, seed, &base, set, (tslot)s, L, why, sizeof why))
                fail_msg("%s %s twin %s passed the per-layer check", backend, tmodel_kind_name((tmodel_kind)kind), set);
            tried++;
        }
        print_message("%s %s: %d per-layer slots each change exactly their layer; the all-layer twins fail\n", backend,
                      tmodel_kind_name((tmodel_kind)kind), tried);
        assert_int_equal(tried, kind == TMODEL_GPT2 ? 17 : 19);
        /* twins: one layer off, and an override that changes nothing */
        char why[256];
        char off[64];
        snprintf(off, sizeof off, "mlp.up@%d=fp32", DEPTH - 2);
        assert_false(run_and_check((tmodel_kind)kind, backend, seed, &base, off, TSLOT_MLP_UP, DEPTH - 1, why, sizeof why));
        snprintf(off, sizeof off, "mlp.up@%d=bf16", DEPTH - 1);
        assert_false(run_and_check((tmodel_kind)kind, backend, seed, &base, off, TSLOT_MLP_UP, DEPTH - 1, why, sizeof why));
        ttrain_result_free(&base);
    }
}

static void test_layer_slots_cpu(void **state)
{
    (void)state;
    check_every_layer_slot("cpu");
}

/* Run on the GPU machine: make test-gpu (skips here without a GPU). */
static void test_layer_slots_cuda(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    check_every_layer_slot("cuda");
}

/* A plan mixing formats across layers trains, bit for bit the same twice,
 * and differs from the uniform plan (the per-format scratch of the layers
 * is exercised: the residual stream's gradient changes format between
 * layers). */
static void check_mixed_plan(const char *backend)
{
    unsigned long long seed = test_seed("test_mixed_layers");
    const char *mixed = "*@0=fp32,residual@1=fp16,mlp.down.dgrad@2=fp32,attn.*@1=fp8,lm_head=bf16";
    for (int kind = 0; kind < TMODEL_COUNT; kind++) {
        ttrain_config c;
        ttrain_result a, b, u;
        layered(&c, (tmodel_kind)kind, backend, seed, mixed);
        for (int s = 0; s < TSLOT_COUNT; s++) c.hash_slot[s] = 0;
        c.n_at_steps = 0;
        c.steps = 4;
        run_ok(&c, &a);
        run_ok(&c, &b);
        for (long s = 0; s < c.steps; s++) assert_true(same_bits(a.loss[s], b.loss[s]));
        assert_true(a.param_hash == b.param_hash);
        char err[512];
        if (tplan_init(&c.plan, "bf16", (tmodel_kind)kind, err, sizeof err)) fail_msg("%s", err);
        run_ok(&c, &u);
        assert_true(a.param_hash != u.param_hash);
        print_message("%s %s mixed per-layer plan: loss %.6f (uniform bf16 %.6f)\n", backend,
                      tmodel_kind_name((tmodel_kind)kind), a.loss[c.steps - 1], u.loss[c.steps - 1]);
        ttrain_result_free(&a), ttrain_result_free(&b), ttrain_result_free(&u);
    }
}

static void test_mixed_layers_cpu(void **state)
{
    (void)state;
    check_mixed_plan("cpu");
}

/* Run on the GPU machine: make test-gpu (skips here without a GPU). */
static void test_mixed_layers_cuda(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    check_mixed_plan("cuda");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layer_slots_cpu),  cmocka_unit_test(test_mixed_layers_cpu),
        cmocka_unit_test(test_layer_slots_cuda), cmocka_unit_test(test_mixed_layers_cuda),
    };
    cmocka_set_test_filter(getenv("ULPSCOPE_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
