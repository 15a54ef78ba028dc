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
 * invalidation must differ); the fp8 operand memo changes no bit and
 * serves GEMMs (twin: a memo that outlives writes must differ); CPU and CUDA
 * agree under delayed scaling as they do under current scaling. */
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
#include "kernels/kernels.h"
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
/* Validation reads the delayed histories and records nothing, so how often
 * a run validates does not change what it trains: validating after every
 * step or only at the end gives the same training losses, gradient norms
 * and final state, on both models (accumulation 2, as fp8_config).  Twin:
 * validation that records its amaxes (the planted mistake) must change them. */
static void validation_schedule(const char *backend, unsigned long long seed)
{
    for (int kind = 0; kind < TMODEL_COUNT; kind++) {
        ttrain_config often, rarely;
        fp8_config(&often, (tmodel_kind)kind, "delayed", seed);
        fp8_config(&rarely, (tmodel_kind)kind, "delayed", seed);
        often.backend = rarely.backend = backend;
        often.val_every = 1;
        rarely.val_every = rarely.steps;
        ttrain_result a, b, planted;
        run_ok(&often, &a);
        run_ok(&rarely, &b);
        ttrain_plant_bug(TTRAIN_BUG_VALIDATION_RECORDS_FP8);
        run_ok(&often, &planted);
        ttrain_plant_bug(TTRAIN_BUG_NONE);
        int same = a.param_hash == b.param_hash, twin_same = a.param_hash == planted.param_hash;
        for (long s = 0; s < often.steps; s++) {
            same &= same_bits(a.loss[s], b.loss[s]) && same_bits(a.grad_norm[s], b.grad_norm[s]);
            twin_same &= same_bits(a.loss[s], planted.loss[s]);
        }
        print_message("%s %s delayed: validating every step vs at the end: %s; validation that records: %s\n",
                      backend, tmodel_kind_name((tmodel_kind)kind), same ? "the same training bits" : "DIFFERENT",
                      twin_same ? "THE SAME" : "different bits");
        assert_true(same);
        assert_false(twin_same);
        ttrain_result_free(&a), ttrain_result_free(&b), ttrain_result_free(&planted);
    }
}

static void test_delayed_validation_schedule(void **state)
{
    (void)state;
    validation_schedule("cpu", test_seed("test_delayed_validation_schedule"));
}

/* The same on CUDA (the kernel's frozen history: kfp8_quantize_tensor_delayed). */
static void test_gpu_delayed_validation_schedule(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    validation_schedule("cuda", test_seed("test_gpu_delayed_validation_schedule"));
}

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

/* ---- the weights version ------------------------------------------------------------------------ */

/* Which writes bump the weights version on a model of `kind` with R
 * replicas: each write to parameters must (init, updates of both
 * optimizers, the lm_head copy, checkpoint-style byte writes, uploads,
 * zeroing), the per-step traffic must not (token uploads, a forward pass,
 * zeroing gradients).  Returns how many expectations failed. */
static int version_misses(tmodel_kind kind, int R, unsigned long long seed)
{
    ttrain_config c;
    tiny_config(&c, kind, "fp8", seed);
    tbackend *be = tbackend_cpu_create();
    assert_non_null(be);
    if (tbackend_set_replicas(be, R)) fail_msg("%s", tbackend_error(be));
    uint64_t seeds[3] = {seed, seed + 1, seed + 2};
    char err[1024];
    uint64_t v0 = be->weights_version;
    tmodel *m = tmodel_create(&c.model, be, &c.plan, c.batch, c.seq, seeds, err, sizeof err);
    if (!m) fail_msg("%s", err);
    int misses = be->weights_version == v0; /* init wrote the weights */
    tparam *p = tmodel_param(m, tmodel_n_params(m) - 3); /* a matrix of the last layer (Muon's in modern) */
    tadamw_args aa[3];
    tmuon_args ma[3];
    for (int r = 0; r < R; r++) {
        aa[r] = (tadamw_args){1e-3, 0.9, 0.95, 1e-8, 0.1, 1, 1.0, seed, 0};
        ma[r] = (tmuon_args){0.02, 0.95, 0.1, 1.0, seed, 0};
    }
    size_t img = tensor_image_bytes(&p->w) * (size_t)R;
    unsigned char *bytes = malloc(img);
    int32_t *tok = calloc((size_t)R * c.batch * c.seq, sizeof *tok);
    double loss[3];
    assert_non_null(bytes), assert_non_null(tok);
    struct {
        const char *what;
        int bumps;
    } steps[] = {{"update", 1}, {"sync_weights (modern: lm_head copy)", kind == TMODEL_MODERN},
                 {"write_bytes", 1}, {"zero weights", 1}, {"forward", 0}, {"zero_grads", 0}, {"raw token upload", 0}};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        uint64_t before = be->weights_version;
        int rc = 0;
        switch (i) {
        case 0: rc = p->muon ? be->muon(be, p, ma) : be->adamw(be, p, aa); break;
        case 1: rc = tmodel_sync_weights(m); break;
        case 2: rc = be->read_bytes(be, &p->w, bytes) || be->write_bytes(be, &p->w, bytes); break;
        case 3: rc = be->zero(be, &p->w); break;
        case 4: rc = tmodel_step_micro(m, tok, tok, NULL, loss); break;
        case 5: rc = tmodel_zero_grads(m); break;
        default: rc = be->raw_upload(be, tok, tok, sizeof *tok); break;
        }
        if (rc) fail_msg("%s: %s", steps[i].what, tbackend_error(be));
        int bumped = be->weights_version != before;
        if (bumped != steps[i].bumps) {
            print_message("%s R=%d: %s %s the weights version\n", tmodel_kind_name(kind), R, steps[i].what,
                          bumped ? "bumped" : "did not bump");
            misses++;
        }
    }
    free(bytes), free(tok);
    tmodel_destroy(m);
    be->destroy(be);
    return misses;
}

static void test_weights_version(void **state)
{
    (void)state;
    unsigned long long seed = test_seed("test_weights_version");
    for (int kind = 0; kind < TMODEL_COUNT; kind++)
        for (int R = 1; R <= 3; R += 2) assert_int_equal(version_misses((tmodel_kind)kind, R, seed), 0);
    /* twin: writes that never bump */
    tbackend_plant_stale_weights(1);
    int twin = version_misses(TMODEL_GPT2, 1, seed);
    tbackend_plant_stale_weights(0);
    print_message("planted stale weights: %d expectations missed\n", twin);
    assert_true(twin > 0);
}

/* ---- GPU: the weight cache and CPU agreement --------------------------------------------------- */

/* A CUDA run of the fp8 plan with the weight cache on or off (planted: on,
 * with writes that never invalidate it).  R > 1: ttrain_run_replicas. */
static void cuda_run(const ttrain_config *c, int cache, int planted, int R, ttrain_result *res)
{
    if (cache) unsetenv("ULPSCOPE_FP8_WEIGHT_CACHE");
    else setenv("ULPSCOPE_FP8_WEIGHT_CACHE", "0", 1);
    tbackend_plant_stale_weights(planted);
    int st;
    if (R == 1) st = ttrain_run(c, res);
    else {
        uint64_t seeds[3], data_seeds[3];
        for (int r = 0; r < R; r++) seeds[r] = c->seed + (uint64_t)r, data_seeds[r] = c->seed ^ (uint64_t)(r + 11);
        st = ttrain_run_replicas(c, R, seeds, data_seeds, res);
    }
    tbackend_plant_stale_weights(0);
    unsetenv("ULPSCOPE_FP8_WEIGHT_CACHE");
    if (st) fail_msg("cuda run failed (status %d): %s", st, res[0].error);
}

static int same_runs(const ttrain_result *a, const ttrain_result *b, int R, long steps)
{
    int same = 1;
    for (int r = 0; r < R; r++) {
        same &= a[r].param_hash == b[r].param_hash && same_bits(a[r].final_val_loss, b[r].final_val_loss);
        for (long s = 0; s < steps; s++) same &= same_bits(a[r].loss[s], b[r].loss[s]);
    }
    return same;
}

static void test_gpu_weight_cache(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    unsigned long long seed = test_seed("test_gpu_weight_cache");
    /* One run only: replicas quantise their weights with their activations,
     * every replica in one launch a pass (backend_cuda.cu's
     * batched_matmul_fp8), and leave the cache to the replica loop's
     * fallbacks (operands in other formats, delayed scaling). */
    for (int kind = 0; kind < TMODEL_COUNT; kind++)
        for (int R = 1; R <= 1; R++) {
            ttrain_config c;
            fp8_config(&c, (tmodel_kind)kind, "current", seed);
            c.backend = "cuda";
            ttrain_result on[3], off[3], stale[3];
            cuda_run(&c, 1, 0, R, on);
            cuda_run(&c, 0, 0, R, off);
            cuda_run(&c, 1, 1, R, stale);
            int same = same_runs(on, off, R, c.steps), twin = same_runs(on, stale, R, c.steps);
            print_message("%s R=%d: cache on vs off %s (hash %016llx / %016llx, val %.9f / %.9f); planted stale "
                          "cache %s\n", tmodel_kind_name((tmodel_kind)kind), R, same ? "identical" : "DIFFER",
                          (unsigned long long)on[0].param_hash, (unsigned long long)off[0].param_hash,
                          on[0].final_val_loss, off[0].final_val_loss, twin ? "IDENTICAL" : "differs");
            assert_true(same);
            assert_false(twin);
            for (int r = 0; r < R; r++) ttrain_result_free(&on[r]), ttrain_result_free(&off[r]), ttrain_result_free(&stale[r]);
        }
}

/* The fp8 operand memo: a CUDA run of the fp8 plan (current scaling) with
 * ULPSCOPE_FP8_MEMO unset (NULL: on), "lean" or "0", or on with the planted
 * mix-up (an entry served to any tensor of its shape and formats). */
static void memo_run(const ttrain_config *c, const char *memo, int planted, ttrain_result *res)
{
    if (memo) setenv("ULPSCOPE_FP8_MEMO", memo, 1);
    else unsetenv("ULPSCOPE_FP8_MEMO");
    tbackend_cuda_plant_memo_mixup(planted);
    int st = ttrain_run(c, res);
    tbackend_cuda_plant_memo_mixup(0);
    unsetenv("ULPSCOPE_FP8_MEMO");
    if (st) fail_msg("cuda run failed (status %d): %s", st, res->error);
}

/* The memo changes no bit: on, lean and off identical over steps with gradient
 * accumulation and validation, with GEMMs served from it (the forward's k and
 * v, each wgrad's transposed gradient, and from the second step on each
 * wgrad's activation, kept transposed since its forward); the twin, a memo
 * that serves one layer's image to another, must differ.  (A twin blind to
 * writes would not differ: in these models every image is read before its
 * tensor is written again; the drops on writes guard other op orders.) */
static void test_gpu_fp8_memo(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    unsigned long long seed = test_seed("test_gpu_fp8_memo");
    for (int kind = 0; kind < TMODEL_COUNT; kind++) {
        ttrain_config c;
        fp8_config(&c, (tmodel_kind)kind, "current", seed);
        c.backend = "cuda";
        ttrain_result on, lean, off, mixup;
        memo_run(&c, NULL, 0, &on);
        memo_run(&c, "lean", 0, &lean);
        memo_run(&c, "0", 0, &off);
        memo_run(&c, NULL, 1, &mixup);
        int same = same_runs(&on, &off, 1, c.steps) && same_runs(&lean, &off, 1, c.steps),
            twin = same_runs(&on, &mixup, 1, c.steps);
        print_message("%s: memo on, lean, off %s (hash %016llx / %016llx / %016llx; GEMMs served their first operand "
                      "%ld / %ld / %ld, their second %ld / %ld / %ld); planted mix-up %s\n",
                      tmodel_kind_name((tmodel_kind)kind), same ? "identical" : "DIFFER",
                      (unsigned long long)on.param_hash, (unsigned long long)lean.param_hash,
                      (unsigned long long)off.param_hash, on.fp8_memo_hits, lean.fp8_memo_hits, off.fp8_memo_hits,
                      on.fp8_memo_b_hits, lean.fp8_memo_b_hits, off.fp8_memo_b_hits, twin ? "IDENTICAL" : "differs");
        assert_true(same);
        assert_true(on.fp8_memo_hits > 0 && on.fp8_memo_b_hits > 0);
        assert_true(lean.fp8_memo_hits > 0 && lean.fp8_memo_b_hits == 0);
        assert_true(off.fp8_memo_hits == 0 && off.fp8_memo_b_hits == 0);
        assert_false(twin);
        ttrain_result_free(&on), ttrain_result_free(&lean), ttrain_result_free(&off), ttrain_result_free(&mixup);
    }
}

/* The memo's drops on writes, through the backend's ops: a forward GEMM at
 * mlp.up@0 reads X, its weight gradient reads X transposed (the memo learns
 * to keep that image), then again with X rewritten (upload) between the
 * forward and the weight gradient: the weight gradient must see the new X,
 * as with the memo off.  Returns 1 when dW's bytes match the memo-off run's.
 * The twin (blind: writes drop nothing) must serve the old image. */
enum { WT_M = 256, WT_K = 128, WT_N = 64 };
static void wt_upload(tbackend *be, ktensor *t, prec_rng *rng, int64_t n)
{
    double *v = malloc((size_t)n * sizeof *v);
    assert_non_null(v);
    for (int64_t i = 0; i < n; i++) v[i] = prec_rne(prec_rng_normal(rng), PREC_BF16);
    if (be->upload(be, t, v)) fail_msg("%s", tbackend_error(be));
    free(v);
}

static void wt_dw(int memo, int blind, unsigned long long seed, uint16_t *dw)
{
    if (memo) unsetenv("ULPSCOPE_FP8_MEMO");
    else setenv("ULPSCOPE_FP8_MEMO", "0", 1);
    char why[512], err[1024];
    tbackend *be = tbackend_cuda_create(why, sizeof why);
    unsetenv("ULPSCOPE_FP8_MEMO");
    if (!be) fail_msg("%s", why);
    tplan p;
    if (tplan_init(&p, "fp8", TMODEL_GPT2, err, sizeof err) || tplan_set(&p, "fp8_scaling=fp32:current", err, sizeof err))
        fail_msg("%s", err);
    if (tbackend_bind_plan(be, &p, 1)) fail_msg("%s", tbackend_error(be));
    const int64_t sx[2] = {WT_M, WT_K}, sw[2] = {WT_N, WT_K}, sy[2] = {WT_M, WT_N};
    ktensor x, w, y, dy, dwt;
    if (be->alloc(be, &x, PREC_BF16, 2, sx) || be->alloc(be, &w, PREC_BF16, 2, sw) ||
        be->alloc(be, &y, PREC_BF16, 2, sy) || be->alloc(be, &dy, PREC_BF16, 2, sy) ||
        be->alloc(be, &dwt, PREC_BF16, 2, sw))
        fail_msg("%s", tbackend_error(be));
    const tsite *fwd = tbackend_site(be, TSLOT_MLP_UP, 0), *wg = tbackend_site(be, TSLOT_MLP_UP_WGRAD, 0);
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    wt_upload(be, &w, &rng, WT_N * WT_K);
    wt_upload(be, &dy, &rng, WT_M * WT_N);
    for (int round = 0; round < 2; round++) {
        wt_upload(be, &x, &rng, WT_M * WT_K);
        if (be->matmul(be, fwd, &y, &x, 0, &w, 1, 0)) fail_msg("%s", tbackend_error(be)); /* [M,K][N,K]^T */
        tbackend_cuda_plant_memo_blind(blind);
        if (round == 1) wt_upload(be, &x, &rng, WT_M * WT_K);
        tbackend_cuda_plant_memo_blind(0);
        if (be->matmul(be, wg, &dwt, &dy, 1, &x, 0, 0)) fail_msg("%s", tbackend_error(be)); /* [N,M][M,K] */
    }
    if (be->read_bytes(be, &dwt, dw)) fail_msg("%s", tbackend_error(be));
    be->release(be, &x), be->release(be, &w), be->release(be, &y), be->release(be, &dy), be->release(be, &dwt);
    be->destroy(be);
}

static void test_gpu_fp8_memo_writes(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    unsigned long long seed = test_seed("test_gpu_fp8_memo_writes");
    static uint16_t on[WT_N * WT_K], off[WT_N * WT_K], blind[WT_N * WT_K];
    wt_dw(1, 0, seed, on);
    wt_dw(0, 0, seed, off);
    wt_dw(1, 1, seed, blind);
    int same = memcmp(on, off, sizeof on) == 0, twin = memcmp(blind, off, sizeof off) == 0;
    print_message("X rewritten between its forward and its weight gradient: memo on vs off %s; planted blind memo %s\n",
                  same ? "identical" : "DIFFER", twin ? "IDENTICAL" : "differs");
    assert_true(same);
    assert_false(twin);
}

/* tmodel_measure's totals with the memo off, lean and keeping inputs. */
static void memo_totals(const ttrain_config *c, size_t total[3])
{
    tbackend *be = tbackend_cpu_create();
    assert_non_null(be);
    char err[512];
    for (int mode = TFP8_MEMO_OFF; mode <= TFP8_MEMO_INPUTS; mode++) {
        be->fp8_memo = mode;
        tmodel_memory mem;
        if (tmodel_measure(&c->model, be, &c->plan, c->batch, c->seq, &mem, err, sizeof err)) fail_msg("%s", err);
        total[mode] = mem.total_bytes;
    }
    be->destroy(be);
}

/* The memory check counts the CUDA backend's fp8 memo (tmodel_measure on a
 * backend that says it keeps one; the CPU backend, told so, stands in for
 * it): lean adds the two in-flight images of the widest operand, [BT, V]
 * here since the fp8 preset's head dgrad is fp8; keeping inputs adds every
 * fp8 forward GEMM's [BT, k] input on top (k = C for qkv, out, up and the
 * head, 4C for down), each padded to 256 bytes with a scale; off, nothing.
 * Twin: the kept inputs left out of the count must fall short. */
static void test_memo_counted(void **state)
{
    (void)state;
    ttrain_config c;
    tiny_config(&c, TMODEL_GPT2, "fp8", 1);
    const size_t BT = (size_t)c.batch * c.seq, C = (size_t)c.model.n_embd, V = (size_t)c.model.vocab,
                 L = (size_t)c.model.n_layer, inputs = BT * (L * (3 * C + 4 * C) + C), images = 4 * L + 1;
    size_t total[3];
    memo_totals(&c, total);
    print_message("memo counted: lean +%zu bytes, keeping inputs +%zu (the inputs' bytes %zu, %zu images)\n",
                  total[1] - total[0], total[2] - total[0], inputs, images);
    assert_true(total[1] - total[0] == 2 * BT * (V > 4 * C ? V : 4 * C));
    assert_true(total[2] - total[1] >= inputs && total[2] - total[1] <= inputs + images * 512);
    /* twin: the kept inputs left out of the count */
    tmodel_plant_memo_inputs_uncounted(1);
    memo_totals(&c, total);
    tmodel_plant_memo_inputs_uncounted(0);
    print_message("planted: keeping inputs +%zu bytes over lean (must fall short of %zu)\n", total[2] - total[1], inputs);
    assert_true(total[2] - total[1] < inputs);
}

/* CPU and CUDA under delayed scaling agree as test_train's CPU/CUDA agreement
 * asks, with two changes fp8 needs.  A rounding that lands on the other side
 * moves an e4m3 value by up to 1/8 and an e5m2 gradient by up to 1/4, and
 * the plan's own rounding of one scalar can cancel by chance: judged against
 * each scalar's own |cpu - fp32|, correct runs reached 37x (seed
 * 0xd0f1ea8c0ccf6535, gpt2's loss, whose own rounding was 1e-7) where a
 * planted dropped term gave 38x at the least (23 seeds, H100).  So the scale
 * is relative and shared: the larger of the loss's and the gradient norm's
 * relative distance from fp32 (both cancelling at once is much rarer), and
 * |cuda - cpu| of each, relative, must stay within FP8_AGREE_FACTOR times it
 * at step 0; later steps printed.  The factor comes from the seed sweep in
 * docs/results-experiments.md (session of 2026-11-24, fifth).  Twin: the
 * planted drop-term on CUDA. */
#define FP8_AGREE_FACTOR 32.0
static int agree_delayed(tmodel_kind kind, unsigned long long seed, int planted)
{
    ttrain_config c;
    fp8_config(&c, kind, "delayed", seed);
    c.steps = 3;
    ttrain_result cpu, ref, gpu;
    run_ok(&c, &cpu);
    ttrain_config c32 = c;
    char err[512];
    if (tplan_init(&c32.plan, "fp32", kind, err, sizeof err)) fail_msg("%s", err);
    run_ok(&c32, &ref);
    c.backend = "cuda";
    kernels_set_planted_bug(planted ? KBUG_DROP_TERM : KBUG_NONE);
    int st = ttrain_run(&c, &gpu);
    kernels_set_planted_bug(KBUG_NONE);
    if (st == 3 && planted) {
        ttrain_result_free(&cpu), ttrain_result_free(&ref), ttrain_result_free(&gpu);
        return 0;
    }
    if (st) fail_msg("cuda run failed: %s", gpu.error);
    for (long s = 0; s < c.steps; s++)
        print_message("%s delayed%s step %ld: loss cpu %.9f cuda %.9f fp32 %.9f\n", tmodel_kind_name(kind),
                      planted ? " (planted drop-term)" : "", s, cpu.loss[s], gpu.loss[s], ref.loss[s]);
    double rel = fmax(fabs(cpu.loss[0] - ref.loss[0]) / fabs(cpu.loss[0]),
                      fabs(cpu.grad_norm[0] - ref.grad_norm[0]) / cpu.grad_norm[0]);
    double dl = fabs(gpu.loss[0] - cpu.loss[0]) / fabs(cpu.loss[0]), dg = fabs(gpu.grad_norm[0] - cpu.grad_norm[0]) / cpu.grad_norm[0];
    print_message("%s delayed%s step 0: relative |loss cuda-cpu| %.3g (%.3g x the plan's relative rounding %.3g), "
                  "|grad norm cuda-cpu| %.3g (%.3g x; bound %g x)\n",
                  tmodel_kind_name(kind), planted ? " (planted drop-term)" : "", dl, dl / rel, rel, dg, dg / rel,
                  FP8_AGREE_FACTOR);
    ttrain_result_free(&cpu), ttrain_result_free(&ref), ttrain_result_free(&gpu);
    return dl <= FP8_AGREE_FACTOR * rel && dg <= FP8_AGREE_FACTOR * rel;
}

static void test_gpu_cpu_agree_delayed(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    unsigned long long seed = test_seed("test_gpu_cpu_agree_delayed");
    for (int kind = 0; kind < TMODEL_COUNT; kind++) {
        assert_true(agree_delayed((tmodel_kind)kind, seed, 0));
        assert_false(agree_delayed((tmodel_kind)kind, seed, 1));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_slot),
        cmocka_unit_test(test_history_per_site),
        cmocka_unit_test(test_delayed_training),
        cmocka_unit_test(test_delayed_validation_schedule),
        cmocka_unit_test(test_delayed_replicas),
        cmocka_unit_test(test_weights_version),
        cmocka_unit_test(test_memo_counted),
        cmocka_unit_test(test_gpu_weight_cache),
        cmocka_unit_test(test_gpu_fp8_memo),
        cmocka_unit_test(test_gpu_fp8_memo_writes),
        cmocka_unit_test(test_gpu_cpu_agree_delayed),
        cmocka_unit_test(test_gpu_delayed_validation_schedule),
    };
    cmocka_set_test_filter(getenv("ULPSCOPE_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
