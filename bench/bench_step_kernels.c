/* bench/bench_step_kernels.c — the trainer's norm and cross-entropy calls at
 * the shapes of one training step (issues 10 and 14), timed, with a digest
 * of everything they wrote.
 *
 *   ce        gpt2 d12 B16: logits [16384, 50304] bf16, two_pass, losses and
 *             dlogits (every 97th row ignored, target -1)
 *   ln fwd    gpt2 d12 B16: x [16384, 768] bf16, two_pass: y, mean, rstd
 *   ln bwd    the same rows: dx, dgain, dbias
 *   rms fwd   modern 6x256 at R = 64: 64 x 8192 rows of 256 (norm.attn,
 *             block_tree) and 64 x 32768 rows of 64 (norm.qk, warp_tree),
 *             bf16, a gain per replica: y, rstd
 *   rms bwd   the same: dx, dgain
 *
 * Each call: 2 warm-up launches, then the median of 10 launches timed with
 * CUDA events on the current stream (the host work of the call, attribute
 * queries included, is inside).  Inputs come from ktensor_fill_uniform with
 * fixed seeds, so the digest (64-bit, over the bytes of every output after
 * the timed launches) is the same on any build that computes the same bits:
 * run this file built from two trees on one GPU and compare the digests.
 * One line per call:
 *   step_kernel NAME median_us=.. GBps=.. digest=0x..
 * GB/s counts each input read once and each output written once.  Without a
 * GPU: a skip line and exit status 0. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/common/ktensor_io.h"
#include "kernels/cross_entropy.h"
#include "kernels/layernorm.h"
#include "kernels/rmsnorm.h"
#include "precision/rng.h"

#define WARMUP 2
#define REPS 10

typedef struct {
    ktensor t[8]; /* inputs and outputs of one call */
    void *raw[4]; /* device buffers without a format: targets, losses, mean, rstd */
    size_t raw_bytes[4];
    int64_t rows, cols, replicas;
} call_state;

typedef int (*call_fn)(call_state *s);

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* 64-bit digest of bytes (FNV-1a over 8-byte words, then the tail). */
static uint64_t digest_bytes(uint64_t h, const unsigned char *p, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w = 0;
        for (int k = 0; k < 8; k++) w |= (uint64_t)p[i + k] << (8 * k);
        h = (h ^ w) * 0x100000001b3ull;
    }
    for (; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static int digest_device(uint64_t *h, const void *dev, size_t bytes)
{
    unsigned char *host = malloc(bytes);
    if (!host) return kernels_fail("bench: out of host memory for a %zu-byte digest", bytes);
    int rc = kdevice_download(host, dev, bytes, "bench digest");
    if (!rc) *h = digest_bytes(*h, host, bytes);
    free(host);
    return rc;
}

static int alloc2(ktensor *t, int64_t a, int64_t b)
{
    int64_t shape[2] = {a, b};
    return ktensor_alloc(t, PREC_BF16, 2, shape);
}

static int alloc_raw(call_state *s, int k, size_t bytes)
{
    s->raw_bytes[k] = bytes;
    return kdevice_alloc(&s->raw[k], bytes, "bench buffer");
}

/* ---- the calls ------------------------------------------------------------------ */

/* t[0] logits, t[1] dlogits; raw[0] targets, raw[1] losses */
static int run_ce(call_state *s)
{
    return kce_forward_backward(KPATH_BF16, KCE_TWO_PASS, s->rows, s->cols, s->t[0].data, (const int32_t *)s->raw[0],
                                (float *)s->raw[1], s->t[1].data, 1.0f / (float)s->rows, 0.0f);
}
/* t[0] x, t[1] gain, t[2] bias, t[3] y, t[4] dy, t[5] dx, t[6] dgain, t[7] dbias; raw[2] mean, raw[3] rstd */
static int run_ln_fwd(call_state *s)
{
    return klayernorm_forward(&s->t[3], (float *)s->raw[2], (float *)s->raw[3], &s->t[0], &s->t[1], &s->t[2], 1e-5f,
                              KLAYERNORM_TWO_PASS);
}
static int run_ln_bwd(call_state *s)
{
    return klayernorm_backward(&s->t[5], &s->t[6], &s->t[7], &s->t[4], &s->t[0], &s->t[1], (const float *)s->raw[2],
                               (const float *)s->raw[3], KLAYERNORM_TWO_PASS);
}
/* t[0] x, t[1] gain [R, C], t[3] y, t[4] dy, t[5] dx, t[6] dgain [R, C]; raw[3] rstd */
static int run_rms_fwd_block(call_state *s)
{
    return krmsnorm_forward_replicas(s->replicas, &s->t[3], (float *)s->raw[3], &s->t[0], &s->t[1], 1e-5f,
                                     KRMSNORM_BLOCK_TREE);
}
static int run_rms_bwd_block(call_state *s)
{
    return krmsnorm_backward_replicas(s->replicas, &s->t[5], &s->t[6], &s->t[4], &s->t[0], &s->t[1],
                                      (const float *)s->raw[3], KRMSNORM_BLOCK_TREE);
}
static int run_rms_fwd_warp(call_state *s)
{
    return krmsnorm_forward_replicas(s->replicas, &s->t[3], (float *)s->raw[3], &s->t[0], &s->t[1], 1e-5f,
                                     KRMSNORM_WARP_TREE);
}
static int run_rms_bwd_warp(call_state *s)
{
    return krmsnorm_backward_replicas(s->replicas, &s->t[5], &s->t[6], &s->t[4], &s->t[0], &s->t[1],
                                      (const float *)s->raw[3], KRMSNORM_WARP_TREE);
}

typedef struct {
    const char *name;
    call_fn run, before; /* before: a call that makes this one's inputs (the forward of a backward) */
    int ce;
    int64_t rows, cols, replicas;
    int outputs[4], raw_outputs[2]; /* indices hashed (-1: none) */
    double bytes;
} call_case;

static void free_state(call_state *s)
{
    for (int k = 0; k < 8; k++) ktensor_free(&s->t[k]);
    for (int k = 0; k < 4; k++) kdevice_free(s->raw[k]);
}

static int setup(const call_case *c, call_state *s, prec_rng *rng)
{
    const int64_t N = c->rows, C = c->cols, R = c->replicas;
    s->rows = N;
    s->cols = C;
    s->replicas = R;
    if (c->ce) {
        if (alloc2(&s->t[0], N, C) || alloc2(&s->t[1], N, C) || ktensor_fill_uniform(&s->t[0], 0xce01, -8.0f, 8.0f) ||
            alloc_raw(s, 0, (size_t)N * sizeof(int32_t)) || alloc_raw(s, 1, (size_t)N * sizeof(float)))
            return -1;
        int32_t *targets = malloc((size_t)N * sizeof(int32_t));
        if (!targets) return kernels_fail("bench: out of host memory");
        for (int64_t r = 0; r < N; r++) targets[r] = r % 97 == 96 ? -1 : (int32_t)(prec_rng_next(rng) % (uint64_t)C);
        int rc = kdevice_upload(s->raw[0], targets, (size_t)N * sizeof(int32_t), "bench targets");
        free(targets);
        return rc;
    }
    /* norms: x, dy [N, C]; gain, bias, dgain, dbias [R, C]; mean, rstd [N] */
    if (alloc2(&s->t[0], N, C) || alloc2(&s->t[1], R, C) || alloc2(&s->t[2], R, C) || alloc2(&s->t[3], N, C) ||
        alloc2(&s->t[4], N, C) || alloc2(&s->t[5], N, C) || alloc2(&s->t[6], R, C) || alloc2(&s->t[7], R, C) ||
        alloc_raw(s, 2, (size_t)N * sizeof(float)) || alloc_raw(s, 3, (size_t)N * sizeof(float)))
        return -1;
    return ktensor_fill_uniform(&s->t[0], 0x1a01, -3.0f, 3.0f) || ktensor_fill_uniform(&s->t[1], 0x1a02, 0.5f, 1.5f) ||
           ktensor_fill_uniform(&s->t[2], 0x1a03, -0.5f, 0.5f) || ktensor_fill_uniform(&s->t[4], 0x1a04, -1.0f, 1.0f) ||
           (c->before && c->before(s));
}

int main(void)
{
    char why[256];
    if (!kernels_gpu_available(why, sizeof why)) {
        printf("bench_step_kernels: skipped: %s\n", why);
        return 0;
    }
    kdevice_props dev;
    if (kdevice_describe(&dev)) {
        fprintf(stderr, "bench_step_kernels: %s\n", kernels_last_error());
        return 1;
    }
    printf("bench_step_kernels: %s (cc %d.%d, %d SMs)\n", dev.name, dev.cc_major, dev.cc_minor, dev.multiprocessors);
    const double ce_b = 16384.0 * 50304 * 2, ln_b = 16384.0 * 768 * 2, rms_b = 64.0 * 8192 * 256 * 2;
    const call_case cases[] = {
        {"ce_bf16_two_pass_16384x50304", run_ce, NULL, 1, 16384, 50304, 1, {1, -1, -1, -1}, {1, -1}, 2 * ce_b},
        {"ln_fwd_bf16_two_pass_16384x768", run_ln_fwd, NULL, 0, 16384, 768, 1, {3, -1, -1, -1}, {2, 3}, 2 * ln_b},
        {"ln_bwd_bf16_two_pass_16384x768", run_ln_bwd, run_ln_fwd, 0, 16384, 768, 1, {5, 6, 7, -1}, {-1, -1},
         3 * ln_b},
        {"rms_fwd_bf16_block_tree_64x8192x256", run_rms_fwd_block, NULL, 0, 64 * 8192, 256, 64, {3, -1, -1, -1},
         {3, -1}, 2 * rms_b},
        {"rms_bwd_bf16_block_tree_64x8192x256", run_rms_bwd_block, run_rms_fwd_block, 0, 64 * 8192, 256, 64,
         {5, 6, -1, -1}, {-1, -1}, 3 * rms_b},
        {"rms_fwd_bf16_warp_tree_64x32768x64", run_rms_fwd_warp, NULL, 0, 64 * 32768, 64, 64, {3, -1, -1, -1},
         {3, -1}, 2 * rms_b},
        {"rms_bwd_bf16_warp_tree_64x32768x64", run_rms_bwd_warp, run_rms_fwd_warp, 0, 64 * 32768, 64, 64,
         {5, 6, -1, -1}, {-1, -1}, 3 * rms_b},
    };
    ktimer *timer = NULL;
    if (ktimer_create(&timer)) {
        fprintf(stderr, "bench_step_kernels: %s\n", kernels_last_error());
        return 1;
    }
    prec_rng rng;
    prec_rng_seed(&rng, 0x57e9);
    int status = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const call_case *c = &cases[i];
        call_state s = {0};
        float ms[REPS];
        uint64_t h = 0xcbf29ce484222325ull;
        int rc = setup(c, &s, &rng);
        for (int k = 0; !rc && k < WARMUP; k++) rc = c->run(&s);
        if (!rc) rc = kernels_sync("warm-up");
        for (int k = 0; !rc && k < REPS; k++) rc = ktimer_start(timer) || c->run(&s) || ktimer_stop(timer, &ms[k]);
        for (int k = 0; !rc && k < 4; k++)
            if (c->outputs[k] >= 0) rc = digest_device(&h, s.t[c->outputs[k]].data, ktensor_bytes(&s.t[c->outputs[k]]));
        for (int k = 0; !rc && k < 2; k++)
            if (c->raw_outputs[k] >= 0) rc = digest_device(&h, s.raw[c->raw_outputs[k]], s.raw_bytes[c->raw_outputs[k]]);
        if (rc) {
            fprintf(stderr, "bench_step_kernels: %s: %s\n", c->name, kernels_last_error());
            status = 1;
        } else {
            qsort(ms, REPS, sizeof ms[0], cmp_float);
            const float med = ms[REPS / 2];
            printf("step_kernel %s median_us=%.1f GBps=%.0f digest=0x%016llx\n", c->name, med * 1e3,
                   c->bytes / (med * 1e-3) / 1e9, (unsigned long long)h);
        }
        free_state(&s);
    }
    ktimer_destroy(timer);
    return status;
}
