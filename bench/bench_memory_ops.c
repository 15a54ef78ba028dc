/* bench/bench_memory_ops.c — bandwidth of the memory-bound kernels as a
 * fraction of the device's copy bandwidth, measured in the same run.
 *
 * Copy bandwidth: cudaMemcpy device to device of 256 MiB, counting bytes read
 * plus bytes written.  Each op: the fewest bytes it must move (each input
 * read once, each output written once) over its median time; 3 warm-up
 * launches, 15 timed ones (CUDA events around each launch), two buffer sets
 * used in turn (each far larger than the 50 MB L2, so the cache holds
 * neither).  Inputs are random, not zeros.  Without a GPU: a skip line and
 * exit status 0. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/activations.h"
#include "kernels/check/check.h"
#include "kernels/common/ktensor_io.h"
#include "kernels/embedding.h"
#include "kernels/grad_norm.h"
#include "kernels/layernorm.h"
#include "kernels/logsumexp.h"
#include "kernels/residual.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/softmax.h"
#include "kernels/transpose.h"

#define SETS 2
#define WARMUP 3
#define REPS 15

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

typedef int (*launch_fn)(void *arg, int set);

/* Median milliseconds of one launch. */
static int time_median(launch_fn fn, void *arg, ktimer *t, float *median)
{
    float ms[REPS];
    for (int i = 0; i < WARMUP; i++)
        if (fn(arg, i % SETS)) return -1;
    if (kernels_sync("warm-up")) return -1;
    for (int i = 0; i < REPS; i++) {
        if (ktimer_start(t) || fn(arg, i % SETS) || ktimer_stop(t, &ms[i])) return -1;
    }
    qsort(ms, REPS, sizeof ms[0], cmp_float);
    *median = ms[REPS / 2];
    return 0;
}

/* Random values on the device (bench inputs are never zeros). */
static int fill_random(ktensor *t, prec_rng *rng, double sigma)
{
    return ktensor_fill_uniform(t, prec_rng_next(rng), (float)-sigma, (float)sigma);
}

/* ---- ops ------------------------------------------------------------------ */

typedef struct {
    ktensor in[SETS][3], out[SETS][2];
    float *stats[SETS];
    int variant;
    void *ws[SETS];
    size_t ws_bytes;
    int32_t *tokens;
    krope_tables rope;
} op_state;

static int run_copy(void *a, int s)
{
    op_state *o = a;
    return kdevice_copy(o->out[s][0].data, o->in[s][0].data, ktensor_bytes(&o->in[s][0]), "copy");
}
static int run_residual(void *a, int s)
{
    op_state *o = a;
    return kresidual_forward(&o->out[s][0], &o->in[s][0], &o->in[s][1], o->variant);
}
static int run_rmsnorm(void *a, int s)
{
    op_state *o = a;
    return krmsnorm_forward(&o->out[s][0], o->stats[s], &o->in[s][0], &o->in[s][1], 1e-5f, o->variant);
}
static int run_layernorm(void *a, int s)
{
    op_state *o = a;
    int64_t N = o->in[s][0].shape[0];
    return klayernorm_forward(&o->out[s][0], o->stats[s], o->stats[s] + N, &o->in[s][0], &o->in[s][1], &o->in[s][2],
                              1e-5f, o->variant);
}
static int run_softmax(void *a, int s)
{
    op_state *o = a;
    return ksoftmax_forward(&o->out[s][0], &o->in[s][0], o->variant);
}
static int run_lse(void *a, int s)
{
    op_state *o = a;
    return klogsumexp_forward(o->stats[s], &o->in[s][0], o->variant);
}
static int run_gelu(void *a, int s)
{
    op_state *o = a;
    return kgelu_tanh_forward(&o->out[s][0], &o->in[s][0], o->variant);
}
static int run_relu2(void *a, int s)
{
    op_state *o = a;
    return krelu2_forward(&o->out[s][0], NULL, &o->in[s][0], o->variant);
}
static int run_transpose(void *a, int s)
{
    op_state *o = a;
    return ktranspose_copy(&o->out[s][0], &o->in[s][0], o->variant);
}
static int run_rope(void *a, int s)
{
    op_state *o = a;
    return krope_forward(&o->out[s][0], &o->in[s][0], &o->rope, o->variant);
}
static int run_embedding(void *a, int s)
{
    op_state *o = a;
    return kembedding_forward(&o->out[s][0], &o->in[s][0], o->tokens, o->variant);
}
static int run_grad_norm(void *a, int s)
{
    op_state *o = a;
    return kgrad_norm(o->stats[s], &o->in[s][0], 1, o->ws[s], o->ws_bytes, o->variant);
}

typedef struct {
    const char *name, *variant_name;
    int variant;
    prec_format f;
    launch_fn run;
    /* shapes of inputs and outputs (ndim 0: none) */
    int in_ndim[3], out_ndim[2];
    int64_t in_shape[3][3], out_shape[2][3];
    int stats;            /* floats of fp32 statistics per set */
    double bytes;         /* the fewest bytes moved */
} bench_case;

static void free_state(op_state *o)
{
    for (int s = 0; s < SETS; s++) {
        for (int k = 0; k < 3; k++) ktensor_free(&o->in[s][k]);
        for (int k = 0; k < 2; k++) ktensor_free(&o->out[s][k]);
        kdevice_free(o->stats[s]);
        kdevice_free(o->ws[s]);
    }
    kdevice_free(o->tokens);
    kdevice_free((void *)o->rope.cos_t);
    kdevice_free((void *)o->rope.sin_t);
    kdevice_free((void *)o->rope.inv_freq);
}

static int setup(const bench_case *c, op_state *o, prec_rng *rng)
{
    memset(o, 0, sizeof *o);
    o->variant = c->variant;
    for (int s = 0; s < SETS; s++) {
        for (int k = 0; k < 3; k++)
            if (c->in_ndim[k] && (ktensor_alloc(&o->in[s][k], c->f, c->in_ndim[k], c->in_shape[k]) ||
                                  fill_random(&o->in[s][k], rng, 2.0)))
                return -1;
        for (int k = 0; k < 2; k++)
            if (c->out_ndim[k] && ktensor_alloc(&o->out[s][k], c->f, c->out_ndim[k], c->out_shape[k])) return -1;
        if (c->stats && kdevice_alloc((void **)&o->stats[s], (size_t)c->stats * sizeof(float), "bench stats")) return -1;
    }
    if (c->run == run_grad_norm) {
        o->ws_bytes = kgrad_norm_workspace(&o->in[0][0], 1, c->variant);
        for (int s = 0; s < SETS; s++)
            if (kdevice_alloc(&o->ws[s], o->ws_bytes, "bench grad_norm workspace")) return -1;
    }
    if (c->run == run_embedding) {
        int64_t N = c->out_shape[0][0], V = c->in_shape[0][0];
        int32_t *tok = malloc((size_t)N * sizeof(int32_t));
        if (!tok) return kernels_fail("bench: out of host memory");
        for (int64_t t = 0; t < N; t++) tok[t] = (int32_t)(prec_rng_uniform(rng) * V);
        int rc = kdevice_alloc((void **)&o->tokens, (size_t)N * sizeof(int32_t), "bench tokens") ||
                 kdevice_upload(o->tokens, tok, (size_t)N * sizeof(int32_t), "bench tokens");
        free(tok);
        if (rc) return -1;
    }
    if (c->run == run_rope) {
        int64_t T = 1024, D = c->in_shape[0][2], half = D / 2;
        float *ct = malloc((size_t)(T * half) * sizeof(float)), *st = malloc((size_t)(T * half) * sizeof(float)),
              *inv = malloc((size_t)half * sizeof(float));
        void *dc = NULL, *ds = NULL, *di = NULL;
        if (!ct || !st || !inv) return kernels_fail("bench: out of host memory");
        krope_tables_host(ct, st, inv, T, D, 10000.0);
        int rc = kdevice_alloc(&dc, (size_t)(T * half) * sizeof(float), "rope cos") ||
                 kdevice_alloc(&ds, (size_t)(T * half) * sizeof(float), "rope sin") ||
                 kdevice_alloc(&di, (size_t)half * sizeof(float), "rope inv_freq") ||
                 kdevice_upload(dc, ct, (size_t)(T * half) * sizeof(float), "rope cos") ||
                 kdevice_upload(ds, st, (size_t)(T * half) * sizeof(float), "rope sin") ||
                 kdevice_upload(di, inv, (size_t)half * sizeof(float), "rope inv_freq");
        free(ct);
        free(st);
        free(inv);
        o->rope = (krope_tables){dc, ds, di, T};
        if (rc) return -1;
    }
    return 0;
}

int main(void)
{
    char why[256];
    if (!kernels_gpu_available(why, sizeof why)) {
        printf("bench_memory_ops: skipped: %s\n", why);
        return 0;
    }
    kdevice_props dev;
    if (kdevice_describe(&dev)) {
        fprintf(stderr, "bench_memory_ops: %s\n", kernels_last_error());
        return 1;
    }
    printf("bench_memory_ops: %s (cc %d.%d, %d SMs, %.1f GiB), driver %d, runtime %d\n", dev.name, dev.cc_major,
           dev.cc_minor, dev.multiprocessors, dev.memory_bytes / 1073741824.0, dev.driver_version, dev.runtime_version);
    const int64_t R = 16384, C = 4096, n = R * C; /* 64 Mi elements: 128 MiB in bf16 */
    const double b2 = 2.0 * (double)n, b4 = 4.0 * (double)n;
    const int64_t TOK = 65536, VOC = 50304, EMB = 768;
    bench_case cases[] = {
        {"copy", "cudaMemcpy", 0, PREC_BF16, run_copy, {1}, {1}, {{n}}, {{n}}, 0, 2 * b2},
        {"residual", "vector", KRESIDUAL_VECTOR, PREC_BF16, run_residual, {1, 1}, {1}, {{n}, {n}}, {{n}}, 0, 3 * b2},
        {"residual", "scalar", KRESIDUAL_SCALAR, PREC_BF16, run_residual, {1, 1}, {1}, {{n}, {n}}, {{n}}, 0, 3 * b2},
        {"residual", "vector", KRESIDUAL_VECTOR, PREC_FP32, run_residual, {1, 1}, {1}, {{n}, {n}}, {{n}}, 0, 3 * b4},
        {"rmsnorm", "block_tree", KRMSNORM_BLOCK_TREE, PREC_BF16, run_rmsnorm, {2, 1}, {2}, {{R, C}, {C}}, {{R, C}}, (int)R, 2 * b2},
        {"rmsnorm", "warp_tree", KRMSNORM_WARP_TREE, PREC_BF16, run_rmsnorm, {2, 1}, {2}, {{R, C}, {C}}, {{R, C}}, (int)R, 2 * b2},
        {"rmsnorm", "block_tree", KRMSNORM_BLOCK_TREE, PREC_FP32, run_rmsnorm, {2, 1}, {2}, {{R, C}, {C}}, {{R, C}}, (int)R, 2 * b4},
        {"layernorm", "two_pass", KLAYERNORM_TWO_PASS, PREC_BF16, run_layernorm, {2, 1, 1}, {2}, {{R, C}, {C}, {C}}, {{R, C}}, (int)(2 * R), 2 * b2},
        {"layernorm", "welford", KLAYERNORM_WELFORD, PREC_BF16, run_layernorm, {2, 1, 1}, {2}, {{R, C}, {C}, {C}}, {{R, C}}, (int)(2 * R), 2 * b2},
        {"softmax", "exp", KSOFTMAX_EXP, PREC_BF16, run_softmax, {2}, {2}, {{R, C}}, {{R, C}}, 0, 2 * b2},
        {"logsumexp", "exp", KLSE_EXP, PREC_BF16, run_lse, {2}, {0}, {{R, C}}, {{0}}, (int)R, b2},
        {"gelu_tanh", "tanhf", KGELU_TANH_TANHF, PREC_BF16, run_gelu, {1}, {1}, {{n}}, {{n}}, 0, 2 * b2},
        {"gelu_tanh", "tanh_approx", KGELU_TANH_APPROX, PREC_BF16, run_gelu, {1}, {1}, {{n}}, {{n}}, 0, 2 * b2},
        {"relu2", "store_preact", KRELU2_STORE_PREACT, PREC_BF16, run_relu2, {1}, {1}, {{n}}, {{n}}, 0, 2 * b2},
        {"transpose", "smem_tile", KTRANSPOSE_SMEM_TILE, PREC_BF16, run_transpose, {2}, {2}, {{8192, 8192}}, {{8192, 8192}}, 0, 2.0 * 2 * 8192 * 8192},
        {"transpose", "direct", KTRANSPOSE_DIRECT, PREC_BF16, run_transpose, {2}, {2}, {{8192, 8192}}, {{8192, 8192}}, 0, 2.0 * 2 * 8192 * 8192},
        {"rope", "table", KROPE_TABLE, PREC_BF16, run_rope, {3}, {3}, {{32768, 16, 128}}, {{32768, 16, 128}}, 0, 2.0 * 2 * 32768 * 16 * 128},
        {"embedding", "sorted", KEMBED_SORTED, PREC_BF16, run_embedding, {2}, {2}, {{VOC, EMB}}, {{TOK, EMB}}, 0, 2.0 * 2 * TOK * EMB},
        {"grad_norm", "block_tree", KGRADNORM_BLOCK_TREE, PREC_BF16, run_grad_norm, {1}, {0}, {{n}}, {{0}}, 1, b2},
    };
    const int n_cases = (int)(sizeof cases / sizeof cases[0]);
    ktimer *timer = NULL;
    if (ktimer_create(&timer)) {
        fprintf(stderr, "bench_memory_ops: %s\n", kernels_last_error());
        return 1;
    }
    prec_rng rng;
    prec_rng_seed(&rng, 0xbe4c4);
    double copy_gbs = 0;
    int status = 0;
    printf("%-10s %-5s %-12s %10s %10s %9s %8s\n", "op", "path", "variant", "MiB moved", "median us", "GB/s", "of copy");
    for (int i = 0; i < n_cases; i++) {
        op_state o;
        float ms = 0;
        if (setup(&cases[i], &o, &rng) || time_median(cases[i].run, &o, timer, &ms)) {
            fprintf(stderr, "bench_memory_ops: %s %s: %s\n", cases[i].name, cases[i].variant_name, kernels_last_error());
            free_state(&o);
            status = 1;
            continue;
        }
        double gbs = cases[i].bytes / (ms * 1e-3) / 1e9;
        if (i == 0) copy_gbs = gbs;
        printf("%-10s %-5s %-12s %10.1f %10.1f %9.1f %8.3f\n", cases[i].name, prec_format_name(cases[i].f),
               cases[i].variant_name, cases[i].bytes / 1048576.0, ms * 1e3, gbs, copy_gbs > 0 ? gbs / copy_gbs : NAN);
        free_state(&o);
    }
    printf("(bytes: each input read once and each output written once; copy: read + write; medians of %d launches)\n", REPS);
    ktimer_destroy(timer);
    return status;
}
