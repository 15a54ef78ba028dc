/* bench/bench_train.c — the trainer on the GPU (skips without one):
 *   gpt2    gpt2 depth 12, width 768, 12 heads, vocabulary 50304, sequence
 *           1024 (124M parameters, llm.c's shape), bf16 plan: tokens/s, MFU
 *   fp8     the same model and batches under the fp8 plan against bf16:
 *           tokens/s and validation loss after the same steps
 *   modern  the 1-minute recipe: modern, about 5M parameters, on
 *           tinyshakespeare bytes, 800 steps (well inside a minute; more
 *           epochs only overfit): time to the plateau and the final
 *           validation loss
 *   memory  peak memory per preset (fp32, bf16, fp16, fp8) on gpt2 d12
 *   replicas  the replica engine: the 1-minute recipe for --replica-steps
 *           (1000) steps with R = 1, 8, 16, 32, 64 (wall time of the whole
 *           call, training tokens/s of all replicas, speed-up over R = 1,
 *           peak tensors per replica); gpt2 depth 4, width 256, sequence
 *           256 with R = 1 and 32
 *   sizes   the seed table: forward and backward time of one micro-batch of
 *           --batch sequences (8 unless given) for the gpt2 shapes of 124M,
 *           350M, 774M, 1.5B and 2.7B parameters (vocabulary 50304, context
 *           1024) at sequence 128, 256, 512 and 1024, bf16 and fp32 plans:
 *           mean and sd over --reps (5) timed pairs after a warm-up pair.
 *           A pair is a forward pass, then a forward and backward pass on the
 *           same batch; the backward time is their difference, pair by pair.
 *           A shape that does not fit is reported OOM, with what it needs
 *           (tmodel_measure, plus the ops' scratch as the trainer counts it)
 *           against the GPU's free memory; one whose allocation fails anyway
 *           is reported with the allocator's message.  The weights are
 *           filled on the device (tmodel_create_for_timing: the same spread
 *           as the seeded draws, made in a blink rather than minutes on one
 *           host thread); the loss it prints is that model's.
 * Times are the median step (the first, which warms cuBLASLt up, excluded).
 * MFU: model FLOPs (6 N + 12 L T C per token, lm_head in N) over 989.4 TFLOP/s
 * (dense bf16 of an H100/H200 SXM).  The text's bytes are the tokens (ids <
 * 256 in the 50304-entry vocabulary): speed does not depend on token values.
 *
 * usage: bench_train [gpt2|fp8|modern|memory|replicas|sizes|all] [--steps N] [--batch B] [--seconds S]
 *                    [--modern-steps N] [--replica-steps N] [--reps N]
 * (all: everything but sizes, which takes minutes of its own) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "precision/rng.h"
#include "trainer/backend.h"
#include "trainer/model.h"
#include "trainer/train.h"

#define PEAK_FLOPS 989.4e12

static const char *text_path(void)
{
    static const char *const candidates[] = {"data/tinyshakespeare.txt", "../shared/data/tinyshakespeare.txt"};
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++)
        if (access(candidates[i], R_OK) == 0) return candidates[i];
    return NULL; /* the embedded corpus */
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_ms(const ttrain_result *r)
{
    long n = r->steps_done - 1;
    if (n < 1) return r->step_ms[0];
    double *v = malloc((size_t)n * sizeof *v);
    memcpy(v, r->step_ms + 1, (size_t)n * sizeof *v);
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double m = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    free(v);
    return m;
}

static int gpt2_config(ttrain_config *c, const char *preset, int batch, long steps)
{
    char err[512];
    ttrain_config_defaults(c);
    if (tmodel_config_init(&c->model, TMODEL_GPT2, 12, 768, 12, 50304, 1024, err, sizeof err) ||
        tplan_init(&c->plan, preset, TMODEL_GPT2, err, sizeof err)) {
        fprintf(stderr, "bench_train: %s\n", err);
        return -1;
    }
    c->backend = "cuda";
    c->data_path = text_path();
    c->batch = batch;
    c->seq = 1024;
    c->steps = steps;
    c->warmup = 2;
    c->lr = 6e-4;
    c->val_batches = 2;
    c->peak_flops = PEAK_FLOPS;
    c->seed = 1337;
    return 0;
}

static int run(const ttrain_config *c, ttrain_result *r, const char *what)
{
    int st = ttrain_run(c, r);
    if (st) fprintf(stderr, "bench_train %s: %s\n", what, r->error);
    return st;
}

static void report(const char *name, const ttrain_config *c, const ttrain_result *r)
{
    double ms = median_ms(r), tokens = (double)c->batch * c->seq * c->accum;
    double tps = tokens / (ms * 1e-3), mfu = tmodel_flops_per_token(&c->model) * tps / PEAK_FLOPS;
    printf("%-36s %6ld steps  median %8.2f ms  %10.0f tok/s  MFU %5.1f%%  val %.4f  peak tensors %7.0f MiB  "
           "device %7.0f MiB\n", name, r->steps_done, ms, tps, 100 * mfu, r->final_val_loss,
           (double)r->peak_bytes / 1048576.0, (double)r->device_bytes / 1048576.0);
    fflush(stdout);
}

static int bench_gpt2(const char *preset, int batch, long steps)
{
    ttrain_config c;
    ttrain_result r;
    if (gpt2_config(&c, preset, batch, steps)) return 1;
    if (strcmp(preset, "bf16") != 0 && strcmp(preset, "fp8") != 0) c.steps = 3; /* memory only */
    /* the preset's own attention (bf16, fp16, fp8: flash_mma; fp32: flash) */
    if (run(&c, &r, preset)) return 1;
    char name[64];
    snprintf(name, sizeof name, "gpt2 d12 B%d T1024 %s %s", batch, preset,
             katt_variants[c.plan.slot[TSLOT_ATTENTION].variant].name);
    report(name, &c, &r);
    ttrain_result_free(&r);
    return 0;
}

static int modern_config(ttrain_config *cp, long steps)
{
    char err[512];
    ttrain_config_defaults(cp);
    ttrain_config c = *cp;
    /* 6 layers of width 256: 12 L C^2 + V C = 4.79M parameters */
    if (tmodel_config_init(&c.model, TMODEL_MODERN, 6, 256, 4, 256, 256, err, sizeof err) ||
        tplan_init(&c.plan, "bf16", TMODEL_MODERN, err, sizeof err)) {
        fprintf(stderr, "bench_train: %s\n", err);
        return 1;
    }
    c.backend = "cuda";
    c.data_path = text_path();
    c.batch = 32;
    c.seq = 256;
    c.steps = steps;
    c.warmup = 50;
    c.lr = 3e-3;
    c.muon_lr = 0.02;
    c.weight_decay = 0.0;
    c.grad_clip = 0.0;
    c.cooldown_frac = 0.5;
    c.val_every = steps / 10 > 0 ? steps / 10 : 1;
    c.val_batches = 8;
    c.seed = 1337;
    *cp = c;
    return 0;
}

static int bench_modern(double seconds, long steps)
{
    ttrain_config c;
    if (modern_config(&c, steps)) return 1;
    c.max_seconds = seconds;
    ttrain_result r;
    if (run(&c, &r, "modern")) return 1;
    printf("modern 4.8M on %s: %ld steps in %.1f s of training\n", c.data_path ? c.data_path : "the embedded corpus",
           r.steps_done, r.train_seconds);
    double t = 0.0, best = INFINITY, best_t = 0.0, final = NAN;
    long best_step = 0;
    for (long s = 0; s < r.steps_done; s++) {
        t += r.step_ms[s] * 1e-3;
        if (isnan(r.val_loss[s])) continue;
        printf("  step %5ld  %6.1f s  val %.4f\n", s + 1, t, r.val_loss[s]);
        final = r.val_loss[s];
        if (final < best) { best = final; best_step = s + 1; best_t = t; }
    }
    /* the plateau: the lowest validation loss and when it was reached */
    printf("  plateau: best val %.4f at step %ld (%.1f s); final val %.4f\n", best, best_step, best_t, final);
    report("modern 4.8M B32 T256 bf16", &c, &r);
    ttrain_result_free(&r);
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* R replicas of c (seeds 1..R); base_tps: R = 1's tokens/s (0: this is it). */
static double bench_group(const char *name, const ttrain_config *c, int R, double base_tps)
{
    uint64_t *seeds = malloc((size_t)R * sizeof *seeds);
    ttrain_result *res = calloc((size_t)R, sizeof *res);
    if (!seeds || !res) return 0;
    for (int i = 0; i < R; i++) seeds[i] = (uint64_t)i + 1;
    kmatmul_batch_stats_reset();
    double t0 = now_s();
    int st = ttrain_run_replicas(c, R, seeds, seeds, res);
    double wall = now_s() - t0;
    double tps = 0;
    if (st) fprintf(stderr, "bench_train replicas %s R=%d: %s\n", name, R, res[0].error);
    else {
        kmatmul_batch_stats bs;
        kmatmul_batch_stats_get(&bs);
        double tokens = (double)R * c->batch * c->seq * c->accum * res[0].steps_done;
        tps = tokens / res[0].train_seconds;
        double mean = 0;
        for (int i = 0; i < R; i++) mean += res[i].final_val_loss / R;
        printf("%-22s R=%3d  %5ld steps  wall %7.1f s (training %7.1f s)  %10.0f tok/s  x%5.2f of R=1  "
               "val mean %.4f  peak tensors %6.1f MiB/replica  GEMMs strided %lld (checked algorithm %lld) loop %lld\n",
               name, R, res[0].steps_done, wall, res[0].train_seconds, tps, base_tps > 0 ? tps / base_tps : 1.0, mean,
               (double)res[0].peak_bytes / 1048576.0 / R, (long long)bs.strided, (long long)bs.strided_checked,
               (long long)(bs.loop_fallback + bs.loop_fp8));
        fflush(stdout);
    }
    for (int i = 0; i < R; i++) ttrain_result_free(&res[i]);
    free(res), free(seeds);
    return tps;
}

static int bench_replicas(long steps)
{
    ttrain_config c;
    if (modern_config(&c, steps)) return 1;
    c.val_every = 0; /* validation at the end only */
    static const int Rs[] = {1, 8, 16, 32, 64};
    double base = 0;
    for (size_t i = 0; i < sizeof Rs / sizeof Rs[0]; i++) {
        double tps = bench_group("modern 4.8M B32 T256", &c, Rs[i], base);
        if (Rs[i] == 1) base = tps;
        if (tps <= 0) return 1;
    }
    char err[512];
    ttrain_config g;
    ttrain_config_defaults(&g);
    if (tmodel_config_init(&g.model, TMODEL_GPT2, 4, 256, 4, 256, 256, err, sizeof err) ||
        tplan_init(&g.plan, "bf16", TMODEL_GPT2, err, sizeof err)) {
        fprintf(stderr, "bench_train: %s\n", err);
        return 1;
    }
    tplan_set(&g.plan, "attention=bf16:flash", NULL, 0);
    g.backend = "cuda";
    g.data_path = text_path();
    g.batch = 32;
    g.seq = 256;
    g.steps = steps / 5 > 20 ? steps / 5 : 20;
    g.val_batches = 2;
    base = bench_group("gpt2 d4 w256 T256", &g, 1, 0);
    return base > 0 && bench_group("gpt2 d4 w256 T256", &g, 32, base) > 0 ? 0 : 1;
}

/* ---- sizes: the seed table -------------------------------------------------------------------- */

typedef struct {
    const char *name;
    int layers, width, heads;
} gpt2_shape;

/* GPT-2's four sizes (Radford et al. 2019) and GPT-3's 2.7B (Brown et al. 2020, table 2.1) */
static const gpt2_shape gpt2_shapes[] = {
    {"124M", 12, 768, 12}, {"350M", 24, 1024, 16}, {"774M", 36, 1280, 20}, {"1.5B", 48, 1600, 25},
    {"2.7B", 32, 2560, 32},
};

static void mean_sd(const double *v, int n, double *mean, double *sd)
{
    double m = 0, q = 0;
    for (int i = 0; i < n; i++) m += v[i] / n;
    for (int i = 0; i < n; i++) q += (v[i] - m) * (v[i] - m);
    *mean = m;
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0.0;
}

static double gib(size_t b) { return (double)b / 1073741824.0; }

/* One cell of the table: 1 on a failure that is not the shape's own (no
 * backend, a pass that fails); an OOM shape is a row, not a failure. */
static int size_cell(tbackend *be, const gpt2_shape *sh, const char *preset, int B, int T, int reps)
{
    char err[1024], what[128] = "";
    tmodel_config mc;
    tplan plan;
    if (tmodel_config_init(&mc, TMODEL_GPT2, sh->layers, sh->width, sh->heads, 50304, 1024, err, sizeof err) ||
        tplan_init(&plan, preset, TMODEL_GPT2, err, sizeof err)) {
        fprintf(stderr, "bench_train sizes: %s\n", err);
        return 1;
    }
    printf("%-5s %-5s T%-5d B%-3d ", sh->name, preset, T, B);
    tmodel_memory mem;
    size_t avail = 0;
    if (tbackend_bind_plan(be, &plan, mc.n_layer) || be->mem_available(be, &avail, what, sizeof what)) {
        printf("failed: %s\n", tbackend_error(be));
        return 1;
    }
    if (tmodel_measure(&mc, be, &plan, B, T, &mem, err, sizeof err)) {
        printf("failed: %s\n", err);
        return 1;
    }
    /* the trainer's own estimate (trainer/train_out.c): the ops' scratch and 64 MiB of library workspace */
    const size_t need = mem.total_bytes + 2 * mem.largest_elems * sizeof(float) + ((size_t)64 << 20);
    if (need > avail) {
        printf("OOM: needs %.1f GiB (parameters and optimizer state %.1f GiB), %.1f GiB free\n", gib(need),
               gib(mem.param_bytes), gib(avail));
        fflush(stdout);
        return 0;
    }
    tmodel *m = tmodel_create_for_timing(&mc, be, &plan, B, T, err, sizeof err);
    if (!m) {
        printf("OOM or failure at allocation: %s\n", err);
        fflush(stdout);
        return 0;
    }
    const size_t n = (size_t)B * T;
    int32_t *tok = malloc(n * sizeof *tok), *tgt = malloc(n * sizeof *tgt);
    double *fwd = malloc((size_t)reps * sizeof *fwd), *bwd = malloc((size_t)reps * sizeof *bwd), loss = 0;
    int rc = !tok || !tgt || !fwd || !bwd;
    prec_rng rng;
    prec_rng_seed(&rng, 42);
    for (size_t i = 0; !rc && i < n; i++) tok[i] = (int32_t)(prec_rng_next(&rng) % 50257);
    for (size_t i = 0; !rc && i < n; i++) tgt[i] = (int32_t)(prec_rng_next(&rng) % 50257);
    const double dloss = 1.0 / (double)n;
    for (int r = -1; r < reps && !rc; r++) { /* r = -1: the warm-up pair (kernels load, GEMM algorithms chosen) */
        double t0 = now_s();
        rc = tmodel_step_micro(m, tok, tgt, NULL, &loss) || be->sync(be);
        double t1 = now_s();
        rc = rc || tmodel_step_micro(m, tok, tgt, &dloss, &loss) || be->sync(be);
        double t2 = now_s();
        rc = rc || tmodel_zero_grads(m) || be->sync(be); /* untimed: gradients accumulate otherwise */
        if (r >= 0) {
            fwd[r] = 1e3 * (t1 - t0);
            bwd[r] = 1e3 * ((t2 - t1) - (t1 - t0));
        }
    }
    if (rc) printf("failed: %s\n", tbackend_error(be));
    else {
        double fm, fs, bm, bs;
        mean_sd(fwd, reps, &fm, &fs);
        mean_sd(bwd, reps, &bm, &bs);
        printf("forward %9.2f ms (sd %6.2f)  backward %9.2f ms (sd %6.2f)  %10.0f tok/s fwd+bwd  loss %.3f  "
               "tensors %.1f GiB\n", fm, fs, bm, bs, (double)n / ((fm + bm) * 1e-3), loss, gib(mem.total_bytes));
    }
    fflush(stdout);
    tmodel_destroy(m);
    free(tok), free(tgt), free(fwd), free(bwd);
    return rc;
}

static int bench_sizes(int B, int reps)
{
    char why[256];
    tbackend *be = tbackend_cuda_create(why, sizeof why);
    if (!be) {
        fprintf(stderr, "bench_train sizes: %s\n", why);
        return 1;
    }
    printf("seed table: gpt2 shapes, one micro-batch of B sequences, mean (sd) over %d timed pairs\n", reps);
    static const char *const presets[] = {"bf16", "fp32"};
    static const int seqs[] = {128, 256, 512, 1024};
    int rc = 0;
    for (size_t p = 0; p < 2 && !rc; p++)
        for (size_t s = 0; s < sizeof gpt2_shapes / sizeof gpt2_shapes[0] && !rc; s++)
            for (size_t t = 0; t < sizeof seqs / sizeof seqs[0] && !rc; t++)
                rc = size_cell(be, &gpt2_shapes[s], presets[p], B, seqs[t], reps);
    be->destroy(be);
    return rc;
}

int main(int argc, char **argv)
{
    const char *what = "all";
    long steps = 20, modern_steps = 800; /* ~6 epochs of tinyshakespeare: past that a 4.8M model overfits */
    long replica_steps = 1000;
    int batch = 8, reps = 5;
    double seconds = 60.0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) steps = atol(argv[++i]);
        else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc) batch = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--modern-steps") == 0 && i + 1 < argc) modern_steps = atol(argv[++i]);
        else if (strcmp(argv[i], "--replica-steps") == 0 && i + 1 < argc) replica_steps = atol(argv[++i]);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
        else what = argv[i];
    }
    char why[256];
    if (!kernels_gpu_available(why, sizeof why)) {
        printf("bench_train: skipped (%s)\n", why);
        return 0;
    }
    int all = strcmp(what, "all") == 0, rc = 0;
    if (all || strcmp(what, "gpt2") == 0 || strcmp(what, "fp8") == 0) rc |= bench_gpt2("bf16", batch, steps);
    if (all || strcmp(what, "fp8") == 0) rc |= bench_gpt2("fp8", batch, steps);
    if (all || strcmp(what, "memory") == 0) {
        rc |= bench_gpt2("fp32", batch, 3);
        rc |= bench_gpt2("fp16", batch, 3);
    }
    if (all || strcmp(what, "modern") == 0) rc |= bench_modern(seconds, modern_steps);
    if (all || strcmp(what, "replicas") == 0) rc |= bench_replicas(replica_steps);
    if (strcmp(what, "sizes") == 0) rc |= bench_sizes(batch, reps > 0 ? reps : 1);
    return rc;
}
