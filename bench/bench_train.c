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
 *           peak tensors per replica); the same with attention=flash_mma and
 *           warp_tree norms at R = 1 and 64; gpt2 depth 4, width 256,
 *           sequence 256 with R = 1 and 32
 * Times are the median step (the first, which warms cuBLASLt up, excluded).
 * MFU: model FLOPs (6 N + 12 L T C per token, lm_head in N) over 989.4 TFLOP/s
 * (dense bf16 of an H100/H200 SXM).  The text's bytes are the tokens (ids <
 * 256 in the 50304-entry vocabulary): speed does not depend on token values.
 *
 * usage: bench_train [gpt2|fp8|modern|memory|replicas|all] [--steps N] [--batch B] [--seconds S]
 *                    [--modern-steps N] [--replica-steps N] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
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
               "val mean %.4f  peak tensors %6.1f MiB/replica  GEMMs strided %lld loop %lld\n",
               name, R, res[0].steps_done, wall, res[0].train_seconds, tps, base_tps > 0 ? tps / base_tps : 1.0, mean,
               (double)res[0].peak_bytes / 1048576.0 / R, (long long)bs.strided,
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
    /* the same recipe with the faster variants of its two slowest non-GEMM
     * slots (tensor-core attention, a warp per norm row): another plan, so
     * its own R = 1 */
    if (tplan_set(&c.plan, "attention=bf16:flash_mma,norm.*=bf16:warp_tree", NULL, 0)) return 1;
    base = 0;
    static const int Rfast[] = {1, 64};
    for (size_t i = 0; i < sizeof Rfast / sizeof Rfast[0]; i++) {
        double tps = bench_group("modern fast variants", &c, Rfast[i], base);
        if (Rfast[i] == 1) base = tps;
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

int main(int argc, char **argv)
{
    const char *what = "all";
    long steps = 20, modern_steps = 800; /* ~6 epochs of tinyshakespeare: past that a 4.8M model overfits */
    long replica_steps = 1000;
    int batch = 8;
    double seconds = 60.0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) steps = atol(argv[++i]);
        else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc) batch = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--modern-steps") == 0 && i + 1 < argc) modern_steps = atol(argv[++i]);
        else if (strcmp(argv[i], "--replica-steps") == 0 && i + 1 < argc) replica_steps = atol(argv[++i]);
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
    return rc;
}
