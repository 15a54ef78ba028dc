/* tests/test_compare_train.c — compare's runner on the replica engine
 * (studies/compare_train.h), CPU backend, tiny model:
 *   - a study run with the runs of each arm batched as replicas gives, run for
 *     run, the results (status, final loss, curve, state hash) of the same
 *     study run one run at a time (R = 1), for a base, a null arm (its flip
 *     must land in every replica), an arm with another plan and an arm with a
 *     planted bug (one at a time, the planted arm's runs come between the
 *     others', which caught its truncation leaking into the next run);
 *   - the scheduling hands the runner every arm's runs of `capacity` seeds at
 *     once, so that groups fill;
 *   - twins: with the replica engine's planted mistakes (every replica takes
 *     replica 0's init seed, or its data order) the batched runs differ, so
 *     the equality above is not vacuous;
 *   - the other plans' runs differ from the base's at every seed.
 * The same on the CUDA backend under make test-gpu (skipped visibly without a GPU). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "studies/compare_train.h"
#include "test_train_util.h"
#include "test_util.h"
#include "trainer/backend.h"

#define N_SEEDS 3
#define N_ARMS 4

typedef struct {
    cmp_train_ctx ctx;
    cmp_config c;
    uint64_t seeds[N_SEEDS];
} study;

static void study_init(study *s, const char *backend, unsigned long long base_seed)
{
    memset(s, 0, sizeof *s);
    ttrain_config *b = &s->ctx.base;
    tiny_config(b, TMODEL_GPT2, "bf16", base_seed);
    b->backend = backend;
    b->val_every = 2;
    static const char *names[N_ARMS] = {"base", "null", "resid32", "trunc"};
    static const char *ids[N_ARMS] = {"bf16", "bf16|null-flip", "bf16+residual=fp32", "bf16|planted"};
    for (int a = 0; a < N_ARMS; a++) {
        snprintf(s->c.arms[a].name, CMP_NAME_MAX, "%s", names[a]);
        s->c.arms[a].identity = ids[a];
        s->ctx.plans[a] = b->plan;
    }
    s->c.arms[1].is_null = 1;
    char err[512];
    if (tplan_set(&s->ctx.plans[2], "residual=fp32", err, sizeof err)) fail_msg("%s", err);
    s->ctx.planted[3] = KBUG_TRUNCATE_OUTPUT;
    tbackend_cpu_plant_site(-1, -1, -1);
    s->c.n_arms = N_ARMS;
    for (int i = 0; i < N_SEEDS; i++) s->seeds[i] = base_seed + 1 + (uint64_t)i;
    s->c.seeds = s->seeds;
    s->c.n_seeds = N_SEEDS;
    s->c.vary = CMP_VARY_BOTH;
    s->c.alpha = 0.05;
    s->c.power = 0.8;
    s->c.margin = 0.01; /* the verdicts do not matter here, the runs do */
}

/* Wraps the trainer's runner, recording how many jobs each call got. */
typedef struct {
    cmp_runner inner;
    int calls, max_jobs;
} spy;

static int spy_run(cmp_runner *r, const cmp_arm *arms, const cmp_job *jobs, int n, cmp_run *out)
{
    spy *s = r->ctx;
    s->calls++;
    if (n > s->max_jobs) s->max_jobs = n;
    return s->inner.run(&s->inner, arms, jobs, n, out);
}

/* Runs the study with `replicas` runs of an arm at once into rep. */
static void run_study(study *s, int replicas, cmp_report *rep, spy *sp)
{
    s->ctx.replicas = replicas;
    memset(sp, 0, sizeof *sp);
    cmp_train_runner(&sp->inner, &s->ctx);
    assert_int_equal(sp->inner.capacity, replicas);
    assert_int_equal(sp->inner.per_arm, 1);
    cmp_runner r = {spy_run, sp->inner.capacity, sp, sp->inner.per_arm, NULL, NULL};
    char err[512];
    int rc = cmp_run_study(&s->c, &r, rep, err, sizeof err);
    if (rc) fail_msg("study failed (%d): %s", rc, err);
    assert_int_equal(rep->seeds_used, N_SEEDS);
}

static int same_run(const cmp_run *a, const cmp_run *b)
{
    if (a->status != b->status || a->state_hash != b->state_hash || !same_bits(a->final_val_loss, b->final_val_loss) ||
        a->n_curve != b->n_curve || strcmp(a->error, b->error) != 0)
        return 0;
    for (int p = 0; p < a->n_curve; p++)
        if (a->curve_step[p] != b->curve_step[p] || !same_bits(a->curve_val[p], b->curve_val[p])) return 0;
    return 1;
}

/* Runs of rep that differ from ref's. */
static int differing_runs(const cmp_report *ref, const cmp_report *rep)
{
    int n = 0;
    for (int i = 0; i < N_ARMS * N_SEEDS; i++) n += !same_run(&ref->runs[i], &rep->runs[i]);
    return n;
}

static void check_batched_equals_single(const char *backend)
{
    unsigned long long seed = test_seed("test_compare_train");
    study s;
    study_init(&s, backend, seed);
    cmp_report one, batched;
    spy sp;
    run_study(&s, 1, &one, &sp);
    /* one run per call */
    assert_int_equal(sp.calls, N_SEEDS * N_ARMS);
    assert_int_equal(sp.max_jobs, 1);
    run_study(&s, 8, &batched, &sp);
    /* one arm's runs of all seeds per call (cached as each arm ends): groups of N_SEEDS replicas */
    assert_int_equal(sp.calls, N_ARMS);
    assert_int_equal(sp.max_jobs, N_SEEDS);
    for (int i = 0; i < N_ARMS * N_SEEDS; i++) {
        const cmp_run *a = &one.runs[i], *b = &batched.runs[i];
        if (a->status) fail_msg("run %d failed: %s", i, a->error);
        assert_true(a->n_curve >= 3);
        if (!same_run(a, b))
            fail_msg("arm %s seed %llu: R=1 val %.17g hash %016llx, batched val %.17g hash %016llx",
                     s.c.arms[i / N_SEEDS].name, (unsigned long long)s.seeds[i % N_SEEDS], a->final_val_loss,
                     (unsigned long long)a->state_hash, b->final_val_loss, (unsigned long long)b->state_hash);
    }
    /* the other plans differ from the base (not the null arm: its one ulp may be rounded away in
     * the first updates of a bf16 weight; that the flip reached every replica shows above, as
     * equality with the runs made alone) */
    for (int a = 2; a < N_ARMS; a++)
        for (int i = 0; i < N_SEEDS; i++)
            if (batched.runs[a * N_SEEDS + i].state_hash == batched.runs[i].state_hash)
                fail_msg("arm %s seed %d ran bit-identical to the base", s.c.arms[a].name, i);
    print_message("%s: %d runs identical batched and alone (seeds %llu..%llu)\n", backend, N_ARMS * N_SEEDS,
                  (unsigned long long)s.seeds[0], (unsigned long long)s.seeds[N_SEEDS - 1]);

    /* twins: the replica engine's planted mistakes must show */
    static const ttrain_bug bugs[2] = {TTRAIN_BUG_SHARED_INIT_SEED, TTRAIN_BUG_SHARED_DATA_ORDER};
    for (int k = 0; k < 2; k++) {
        cmp_report twin;
        ttrain_plant_bug(bugs[k]);
        run_study(&s, 8, &twin, &sp);
        ttrain_plant_bug(TTRAIN_BUG_NONE);
        int diff = differing_runs(&one, &twin);
        print_message("twin %d (shared %s): %d of %d runs differ\n", k, k ? "data order" : "init seed", diff,
                      N_ARMS * N_SEEDS);
        /* replicas 1 and 2 of every arm took replica 0's seed */
        assert_int_equal(diff, N_ARMS * (N_SEEDS - 1));
        cmp_report_free(&twin);
    }
    cmp_report_free(&one);
    cmp_report_free(&batched);
}

static void test_batched_equals_single_cpu(void **state)
{
    (void)state;
    check_batched_equals_single("cpu");
}

/* Run on the GPU machine: make test-gpu (skips here without a GPU). */
static void test_batched_equals_single_cuda(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    check_batched_equals_single("cuda");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batched_equals_single_cpu),
        cmocka_unit_test(test_batched_equals_single_cuda),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
