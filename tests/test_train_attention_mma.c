/* tests/test_train_attention_mma.c — the tensor-core attention (flash_mma,
 * flash_mma_exp2) as the trainer runs it, now the bf16 and fp16 presets'
 * default:
 *  1. (CPU) the CPU backend's attention slot, forward and backward on
 *     [B*T, C] tensors of several heads, passes kcheck's verdict against the
 *     MPFR reference within the check's own bound (tests/attention_mma_verdict.h,
 *     the H100 units: tplan_attention_mma_model), bf16 and fp16, both
 *     variants; it is bit for bit the host emulation of the kernels
 *     (kernels/attention_mma_arith.h) on each head.  Twins: the slot with
 *     truncated stores planted must fail the verdict; the element-wise
 *     agreement criterion of test 3 must reject the emulation with the
 *     drop-term bug planted.
 *  2. (CPU) tiny training runs on the default plans (gpt2 and modern, bf16):
 *     the plan holds flash_mma and, for modern, warp_tree on norm.qk;
 *     finite, bit-identical across two runs; different from the same run
 *     with attention flash and norm.qk block_tree (twin: were the defaults
 *     not what runs, they would agree).
 *  3. (GPU) the CUDA and CPU backends' attention slot on the same inputs:
 *     each passes the verdict, and every element agrees within the sum of
 *     the two backends' bounds (the CPU runs the kernels' arithmetic with
 *     host expf/exp2f/logf/log2f for CUDA's, which the bound covers at 2 and
 *     1 ulps: the only source of difference, so not bit for bit); the count
 *     of bit-identical elements is reported.  Twin: the CUDA kernels with
 *     the drop-term bug planted must fail the verdict and the agreement. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/attention_mma_arith.h"
#include "kernels/kernels.h"
#include "kernels/rmsnorm.h"
#include "precision/rng.h"
#include "tests/attention_mma_verdict.h"
#include "tests/test_train_util.h"
#include "tests/test_util.h"
#include "trainer/backend.h"

typedef struct {
    int B, T, H, D;
} att_shape;

/* Inputs and outputs of one attention slot call, [B*T, C] (lse [B*H*T]). */
typedef struct {
    double *in[4]; /* q, k, v, dy: values of the path's format */
    double *out[5]; /* y, lse, dq, dk, dv */
} att_io;

static const att_shape shapes[] = {{2, 70, 2, 16}, {1, 33, 2, 32}};

static void io_alloc(att_io *io, const att_shape *s, prec_format f, prec_rng *rng)
{
    const int64_t n = (int64_t)s->B * s->T * s->H * s->D;
    for (int i = 0; i < 4; i++) {
        io->in[i] = malloc(sizeof(double) * n);
        assert_non_null(io->in[i]);
        kcheck_fill_normal(rng, io->in[i], n, 0, 1, f);
    }
    for (int i = 0; i < 5; i++) {
        io->out[i] = malloc(sizeof(double) * n);
        assert_non_null(io->out[i]);
    }
}

static void io_free(att_io *io)
{
    for (int i = 0; i < 4; i++) free(io->in[i]);
    for (int i = 0; i < 5; i++) free(io->out[i]);
}

/* The backend's attention slot (layer 0 of a plan bound with preset and set)
 * forward then backward on io's inputs; outputs into io. */
static void slot_attention(tbackend *be, const char *preset, const char *set, const att_shape *s, att_io *io)
{
    char err[1024];
    tplan plan;
    if (tplan_init(&plan, preset, TMODEL_GPT2, err, sizeof err) || (set && tplan_set(&plan, set, err, sizeof err)))
        fail_msg("%s", err);
    if (tbackend_bind_plan(be, &plan, 1)) fail_msg("%s: %s", be->name, tbackend_error(be));
    const tsite *at = tbackend_site(be, TSLOT_ATTENTION, 0);
    const prec_format f = tpath_storage(at->path);
    const int64_t rows = (int64_t)s->B * s->T, C = (int64_t)s->H * s->D, shape[2] = {rows, C},
                  lshape[1] = {(int64_t)s->B * s->H * s->T};
    ktensor t[9]; /* q k v dy, y dq dk dv, lse */
    for (int i = 0; i < 8; i++)
        if (be->alloc(be, &t[i], f, 2, shape)) fail_msg("%s: %s", be->name, tbackend_error(be));
    if (be->alloc(be, &t[8], PREC_FP32, 1, lshape)) fail_msg("%s: %s", be->name, tbackend_error(be));
    for (int i = 0; i < 4; i++)
        if (be->upload(be, &t[i], io->in[i])) fail_msg("%s: %s", be->name, tbackend_error(be));
    if (be->attention_fwd(be, at, &t[4], &t[8], &t[0], &t[1], &t[2], s->B, s->T, s->H) ||
        be->attention_bwd(be, at, &t[5], &t[6], &t[7], &t[3], &t[0], &t[1], &t[2], &t[4], &t[8], s->B, s->T, s->H) ||
        be->download(be, &t[4], io->out[0]) || be->download(be, &t[8], io->out[1]) ||
        be->download(be, &t[5], io->out[2]) || be->download(be, &t[6], io->out[3]) ||
        be->download(be, &t[7], io->out[4]))
        fail_msg("%s: %s", be->name, tbackend_error(be));
    for (int i = 0; i < 9; i++) be->release(be, &t[i]);
}

/* Head (b, h) of a [B*T, C] array into [T, D], or of lse [B*H*T] into [T]. */
static void head_of(const double *x, const att_shape *s, int b, int h, double *out)
{
    for (int t = 0; t < s->T; t++)
        for (int d = 0; d < s->D; d++)
            out[t * s->D + d] = x[((int64_t)b * s->T + t) * s->H * s->D + h * s->D + d];
}

typedef struct {
    double *x[9]; /* q k v g, o lse dq dk dv of one head */
} head_bufs;

static void head_gather(const att_io *io, const att_shape *s, int b, int h, head_bufs *hb)
{
    for (int i = 0; i < 9; i++) {
        hb->x[i] = malloc(sizeof(double) * s->T * s->D);
        assert_non_null(hb->x[i]);
    }
    for (int i = 0; i < 4; i++) head_of(io->in[i], s, b, h, hb->x[i]);
    head_of(io->out[0], s, b, h, hb->x[4]);
    memcpy(hb->x[5], io->out[1] + ((int64_t)b * s->H + h) * s->T, sizeof(double) * s->T);
    for (int i = 2; i < 5; i++) head_of(io->out[i], s, b, h, hb->x[4 + i]);
}

static void head_release(head_bufs *hb)
{
    for (int i = 0; i < 9; i++) free(hb->x[i]);
}

/* Elements of two implementations' outputs of one head (b.x[4..8]) beyond
 * the sum of their bounds (the same bound: same inputs, same claimed
 * arithmetic), and how many are bit-identical, over o, lse, dq, dk, dv. */
typedef struct {
    long beyond, identical, total;
    double worst; /* max |a - b| / (2 e) */
} agreement;

static void agree(const head_bufs *a, const head_bufs *b, kval *const bounds[3], int64_t T, int64_t D, agreement *g)
{
    const int64_t n = T * D;
    const struct { int buf; const kval *e; int64_t n; } parts[] = {
        {4, bounds[0], n}, {5, bounds[1], T}, {6, bounds[2], n}, {7, bounds[2] + n, n}, {8, bounds[2] + 2 * n, n}};
    for (size_t p = 0; p < sizeof parts / sizeof parts[0]; p++)
        for (int64_t i = 0; i < parts[p].n; i++) {
            const double x = a->x[parts[p].buf][i], y = b->x[parts[p].buf][i], lim = 2 * parts[p].e[i].e;
            g->total++;
            g->identical += memcmp(&x, &y, sizeof x) == 0;
            const double r = fabs(x - y) / lim;
            if (!(fabs(x - y) <= lim)) g->beyond++;
            if (r > g->worst || r != r) g->worst = r;
        }
}

static const mma_model *attention_units(kpath path)
{
    char why[256];
    const mma_model *m = tplan_attention_mma_model(path, why, sizeof why);
    if (!m) fail_msg("%s", why);
    return m;
}

typedef struct {
    const char *preset, *set; /* set: NULL for the preset's default (flash_mma) */
    kpath path;
    int exp2;
} att_config;

static const att_config configs[] = {
    {"bf16", NULL, KPATH_BF16, 0},
    {"fp16", NULL, KPATH_FP16, 0},
    {"bf16", "attention=bf16:flash_mma_exp2", KPATH_BF16, 1},
    {"fp16", "attention=fp16:flash_mma_exp2", KPATH_FP16, 1},
};

/* The CPU backend on every config and shape: verdicts into v, and against
 * the host emulation (emul_bug planted there): elements of the backend's
 * outputs not bit-identical to it, and the agreement tally. */
static void cpu_runs(int emul_bug, unsigned long long seed, mma_verdicts *v, long *not_identical, agreement *g)
{
    tbackend *cpu = tbackend_cpu_create();
    assert_non_null(cpu);
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    *not_identical = 0;
    for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const att_shape *s = &shapes[si];
            const prec_format f = tpath_storage(configs[c].path);
            att_io io;
            io_alloc(&io, s, f, &rng);
            slot_attention(cpu, configs[c].preset, configs[c].set, s, &io);
            print_message("%s %s B=%d H=%d:\n", configs[c].preset, configs[c].exp2 ? "flash_mma_exp2" : "flash_mma",
                          s->B, s->H);
            for (int b = 0; b < s->B; b++)
                for (int h = 0; h < s->H; h++) {
                    head_bufs hb, em;
                    head_gather(&io, s, b, h, &hb);
                    const katt_mma_head kh = {hb.x[0], hb.x[1], hb.x[2], hb.x[3], s->T, s->D, 1.0f / sqrtf((float)s->D),
                                              configs[c].exp2, f, &attention_units(configs[c].path)->arith};
                    kval *bounds[3];
                    mma_verdict_head(&kh, hb.x[4], hb.x[5], hb.x[6], hb.x[7], hb.x[8], v, bounds);
                    head_gather(&io, s, b, h, &em);
                    const katt_mma_arith e = {kh.mma, f, configs[c].exp2, emul_bug, s->T, s->D, (float)kh.scale};
                    assert_int_equal(katt_mma_arith_forward(&e, em.x[0], em.x[1], em.x[2], em.x[4], em.x[5]), 0);
                    assert_int_equal(katt_mma_arith_backward(&e, em.x[0], em.x[1], em.x[2], em.x[3], em.x[4], em.x[5],
                                                             em.x[6], em.x[7], em.x[8]),
                                     0);
                    agreement one = {0, 0, 0, 0};
                    agree(&hb, &em, bounds, s->T, s->D, &one);
                    *not_identical += one.total - one.identical;
                    g->beyond += one.beyond, g->identical += one.identical, g->total += one.total;
                    if (one.worst > g->worst || one.worst != one.worst) g->worst = one.worst;
                    for (int i = 0; i < 3; i++) free(bounds[i]);
                    head_release(&hb);
                    head_release(&em);
                }
            io_free(&io);
        }
    cpu->destroy(cpu);
}

static void test_cpu_slot_within_bound(void **state)
{
    (void)state;
    mma_verdicts v = {0, 0, ""};
    long not_identical;
    agreement g = {0, 0, 0, 0};
    cpu_runs(KBUG_NONE, test_seed("train attention_mma cpu"), &v, &not_identical, &g);
    print_message("%d verdict rows, %d FAIL; %ld of %ld outputs differ from the host emulation\n", v.rows, v.failed,
                  not_identical, g.total);
    if (v.failed) fail_msg("%d FAIL rows; first: %s", v.failed, v.first_fail);
    assert_true(v.rows > 0);
    assert_int_equal(not_identical, 0);
    assert_int_equal(g.beyond, 0);
}

static void test_twin_truncated_slot_fails(void **state)
{
    (void)state;
    mma_verdicts v = {0, 0, ""};
    long not_identical;
    agreement g = {0, 0, 0, 0};
    kernels_set_planted_bug(KBUG_TRUNCATE_OUTPUT);
    cpu_runs(KBUG_NONE, test_seed("train attention_mma cpu trunc"), &v, &not_identical, &g);
    kernels_set_planted_bug(KBUG_NONE);
    print_message("truncated stores: %d of %d rows FAIL\n", v.failed, v.rows);
    assert_true(v.failed > 0);
}

static void test_twin_agreement_rejects_drop_term(void **state)
{
    (void)state;
    mma_verdicts v = {0, 0, ""};
    long not_identical;
    agreement g = {0, 0, 0, 0};
    cpu_runs(KBUG_DROP_TERM, test_seed("train attention_mma cpu drop"), &v, &not_identical, &g);
    print_message("against the drop-term emulation: %ld of %ld outputs beyond the two bounds (worst %.3g)\n",
                  g.beyond, g.total, g.worst);
    assert_true(g.beyond > 0);
}

/* ---- training on the default plans ------------------------------------------------ */

static void test_default_plans_train(void **state)
{
    (void)state;
    const unsigned long long seed = test_seed("train attention_mma defaults");
    for (int kind = 0; kind < TMODEL_COUNT; kind++) {
        ttrain_config c;
        ttrain_result a, again, before;
        tiny_config(&c, (tmodel_kind)kind, "bf16", seed);
        c.steps = 3;
        assert_int_equal(c.plan.slot[TSLOT_ATTENTION].variant, KATT_FLASH_MMA);
        if (kind == TMODEL_MODERN) assert_int_equal(c.plan.slot[TSLOT_NORM_QK].variant, KRMSNORM_WARP_TREE);
        run_ok(&c, &a);
        run_ok(&c, &again);
        tiny_set(&c, kind == TMODEL_MODERN ? "attention=bf16:flash,norm.qk=bf16:block_tree" : "attention=bf16:flash");
        run_ok(&c, &before);
        int differs = 0;
        for (long s = 0; s < c.steps; s++) {
            print_message("%s step %ld: loss %.9f (default plan), %.9f (flash%s)\n", tmodel_kind_name((tmodel_kind)kind),
                          s, a.loss[s], before.loss[s], kind == TMODEL_MODERN ? ", block_tree" : "");
            assert_true(isfinite(a.loss[s]) && isfinite(a.grad_norm[s]));
            if (!same_bits(a.loss[s], again.loss[s]) || !same_bits(a.grad_norm[s], again.grad_norm[s]))
                fail_msg("step %ld: two runs of the default plan differ", s);
            differs |= !same_bits(a.loss[s], before.loss[s]) || !same_bits(a.grad_norm[s], before.grad_norm[s]);
        }
        if (!differs) fail_msg("%s: the default plan gave the old plan's bits", tmodel_kind_name((tmodel_kind)kind));
        ttrain_result_free(&a);
        ttrain_result_free(&again);
        ttrain_result_free(&before);
    }
}

/* ---- the CUDA backend against the CPU's -------------------------------------------- */

static void gpu_against_cpu(tbackend *gpu, tbackend *cpu, int gpu_bug, unsigned long long seed, mma_verdicts *vg,
                            agreement *g)
{
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const att_shape *s = &shapes[si];
            const prec_format f = tpath_storage(configs[c].path);
            att_io io_g, io_c;
            io_alloc(&io_g, s, f, &rng);
            io_alloc(&io_c, s, f, &rng);
            for (int i = 0; i < 4; i++)
                memcpy(io_c.in[i], io_g.in[i], sizeof(double) * s->B * s->T * s->H * s->D);
            kernels_set_planted_bug((kbug)gpu_bug);
            slot_attention(gpu, configs[c].preset, configs[c].set, s, &io_g);
            kernels_set_planted_bug(KBUG_NONE);
            slot_attention(cpu, configs[c].preset, configs[c].set, s, &io_c);
            for (int b = 0; b < s->B; b++)
                for (int h = 0; h < s->H; h++) {
                    head_bufs hg, hc;
                    head_gather(&io_g, s, b, h, &hg);
                    head_gather(&io_c, s, b, h, &hc);
                    const katt_mma_head kh = {hg.x[0], hg.x[1], hg.x[2], hg.x[3], s->T, s->D, 1.0f / sqrtf((float)s->D),
                                              configs[c].exp2, f, &attention_units(configs[c].path)->arith};
                    kval *bounds[3];
                    mma_verdict_head(&kh, hg.x[4], hg.x[5], hg.x[6], hg.x[7], hg.x[8], vg, bounds);
                    agree(&hg, &hc, bounds, s->T, s->D, g);
                    for (int i = 0; i < 3; i++) free(bounds[i]);
                    head_release(&hg);
                    head_release(&hc);
                }
            io_free(&io_g);
            io_free(&io_c);
        }
}

static void test_cuda_and_cpu_backends_agree(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    char why[256];
    tbackend *gpu = tbackend_cuda_create(why, sizeof why);
    if (!gpu) fail_msg("cuda backend: %s", why);
    tbackend *cpu = tbackend_cpu_create();
    assert_non_null(cpu);
    mma_verdicts v = {0, 0, ""}, vt = {0, 0, ""};
    agreement g = {0, 0, 0, 0}, gt = {0, 0, 0, 0};
    gpu_against_cpu(gpu, cpu, KBUG_NONE, test_seed("train attention_mma cuda vs cpu"), &v, &g);
    print_message("cuda: %d verdict rows, %d FAIL; against the cpu: %ld of %ld outputs bit-identical, %ld beyond "
                  "the two bounds (worst |cuda - cpu| / 2e %.3g)\n",
                  v.rows, v.failed, g.identical, g.total, g.beyond, g.worst);
    gpu_against_cpu(gpu, cpu, KBUG_DROP_TERM, test_seed("train attention_mma cuda vs cpu twin"), &vt, &gt);
    print_message("twin (cuda drop-term): %d of %d rows FAIL, %ld of %ld outputs beyond the two bounds\n", vt.failed,
                  vt.rows, gt.beyond, gt.total);
    cpu->destroy(cpu);
    gpu->destroy(gpu);
    if (v.failed) fail_msg("cuda: %d FAIL rows; first: %s", v.failed, v.first_fail);
    assert_int_equal(g.beyond, 0);
    assert_true(vt.failed > 0 && gt.beyond > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_slot_within_bound),
        cmocka_unit_test(test_twin_truncated_slot_fails),
        cmocka_unit_test(test_twin_agreement_rejects_drop_term),
        cmocka_unit_test(test_default_plans_train),
        cmocka_unit_test(test_cuda_and_cpu_backends_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
