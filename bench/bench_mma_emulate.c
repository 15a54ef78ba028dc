/* bench/bench_mma_emulate.c — the matrix-unit emulation on CUDA cores
 * (kernels/mma_emulate.h) at 1024 x 1024 x 4096, per input format, for the
 * A100 and H100 models: median milliseconds of REPS event-timed calls after
 * WARMUP (the whole call: operand decode, GEMM, the wait for the device),
 * products per second, and the fraction of the GPU's 32-bit integer issue
 * rate that the GEMM's integer instructions take: the kernel's inner loops
 * issue mma_emulate_inner_ops_per_product() integer instructions per product
 * (counted in the kernel's sm_90 SASS, nvdisasm; the per-block rounding,
 * about 30 instructions per output and block, is not in it), and
 * an sm_80 / sm_90 SM issues 64 such instructions per clock (four partitions
 * of 16 lanes), at the peak SM clock the driver reports.  Profile with
 * `ncu --metrics smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_fma.sum`
 * to see what the compiler issued.  Random normal operands rounded to the
 * format (no zeros, so every block takes the fast path).
 *
 * Replicas: the linear layers of the tiny recipe (modern, depth 2, width 64,
 * 8 x 64 tokens, vocabulary 256; `matmul=bf16:mma.a100`) for R = 64 replicas,
 * each shape as one mma_emulate_linear_batched call ("batched") against R
 * mma_emulate_linear calls one after another ("looped", what the trainer ran
 * before), median of REPS event-timed runs, then the sum over one training
 * step's GEMMs (each shape times its count per step); replica strides
 * rounded to 256 bytes as the trainer keeps them.  The batched outputs must
 * equal the looped ones byte for byte (else exit 1).  Argument "gemm": the
 * 1024 x 1024 x 4096 table alone.  Without a GPU: one line saying so, exit 0. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common/ktensor_io.h"
#include "kernels/mma_emulate.h"
#include "precision/rng.h"

enum { REPS = 10, WARMUP = 2, M = 1024, N = 1024, K = 4096 };
enum { R_REPLICAS = 64, TOKENS = 8 * 64, WIDTH = 64, FF = 4 * WIDTH, VOCAB = 256 };
#define INT_LANES_PER_SM 64.0

static int die(const char *what)
{
    fprintf(stderr, "bench_mma_emulate: %s: %s\n", what, kernels_last_error());
    return 1;
}

static double median(double *x, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && x[j - 1] > x[j]; j--) {
            double t = x[j];
            x[j] = x[j - 1];
            x[j - 1] = t;
        }
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* One linear layer of the tiny recipe per replica: y [M,N] = A . B with
 * kernels/matmul.h's layouts, and how many of it one training step runs. */
typedef struct {
    const char *name;
    int M, N, K, a_trans, b_trans, accumulate, per_step;
} tiny_linear;

static const tiny_linear tiny_linears[] = {
    /* forward: x [T, in] . W^T, W [out, in] */
    {"fwd qkv", TOKENS, 3 * WIDTH, WIDTH, 0, 1, 0, 2},
    {"fwd proj", TOKENS, WIDTH, WIDTH, 0, 1, 0, 2},
    {"fwd up", TOKENS, FF, WIDTH, 0, 1, 0, 2},
    {"fwd down", TOKENS, WIDTH, FF, 0, 1, 0, 2},
    {"fwd lm_head", TOKENS, VOCAB, WIDTH, 0, 0, 0, 1},
    /* dgrad: dy [T, out] . W */
    {"dgrad qkv", TOKENS, WIDTH, 3 * WIDTH, 0, 0, 0, 2},
    {"dgrad proj", TOKENS, WIDTH, WIDTH, 0, 0, 0, 2},
    {"dgrad up", TOKENS, WIDTH, FF, 0, 0, 0, 2},
    {"dgrad down", TOKENS, FF, WIDTH, 0, 0, 0, 2},
    {"dgrad lm_head", TOKENS, WIDTH, VOCAB, 0, 1, 0, 1},
    /* wgrad: dy^T . x, accumulated */
    {"wgrad qkv", 3 * WIDTH, WIDTH, TOKENS, 1, 0, 1, 2},
    {"wgrad proj", WIDTH, WIDTH, TOKENS, 1, 0, 1, 2},
    {"wgrad up", FF, WIDTH, TOKENS, 1, 0, 1, 2},
    {"wgrad down", WIDTH, FF, TOKENS, 1, 0, 1, 2},
    {"wgrad lm_head", WIDTH, VOCAB, TOKENS, 1, 0, 1, 1},
};

/* n elements of 2 bytes rounded up to 256 bytes: the trainer's replica stride */
static int64_t stride_of(int64_t n) { return (n + 127) / 128 * 128; }

/* Median ms of REPS runs of R replicas of l, batched (one call) or looped. */
static int time_linear(ktimer *tm, const mma_arith *p, const tiny_linear *l, int batched, void *dA, void *dB, void *dy,
                       double *ms_out)
{
    const mma_emulate_batch batch = {R_REPLICAS, stride_of((int64_t)l->M * l->K), stride_of((int64_t)l->N * l->K),
                                     stride_of((int64_t)l->M * l->N)};
    double t[REPS];
    for (int rep = 0; rep < WARMUP + REPS; rep++) {
        float ms;
        if (ktimer_start(tm)) return -1;
        if (batched) {
            if (mma_emulate_linear_batched(p, l->M, l->N, l->K, dA, l->a_trans, dB, l->b_trans, dy, PREC_BF16,
                                           l->accumulate, &batch))
                return -1;
        } else {
            for (int r = 0; r < R_REPLICAS; r++)
                if (mma_emulate_linear(p, l->M, l->N, l->K, (uint16_t *)dA + r * batch.stride_a, l->a_trans,
                                       (uint16_t *)dB + r * batch.stride_b, l->b_trans,
                                       (uint16_t *)dy + r * batch.stride_y, PREC_BF16, l->accumulate))
                    return -1;
        }
        if (ktimer_stop(tm, &ms)) return -1;
        if (rep >= WARMUP) t[rep - WARMUP] = ms;
    }
    *ms_out = median(t, REPS);
    return 0;
}

/* The tiny recipe's GEMMs at R = 64, batched against looped; 0, 1 when the
 * outputs differ, -1 on a failed call. */
static int bench_replicas(ktimer *tm)
{
    const mma_model *m = mma_model_find("a100", "mma.sync", PREC_BF16, PREC_FP32);
    if (!m) return -1;
    /* the largest operand and output of any shape, times R */
    const size_t span = (size_t)stride_of((int64_t)TOKENS * VOCAB) * R_REPLICAS * 2;
    void *dA = NULL, *dB = NULL, *dy_batched = NULL, *dy_looped = NULL;
    uint8_t *host = malloc(span), *yb = malloc(span), *yl = malloc(span);
    if (!host || !yb || !yl || kdevice_alloc(&dA, span, "A") || kdevice_alloc(&dB, span, "B") ||
        kdevice_alloc(&dy_batched, span, "y batched") || kdevice_alloc(&dy_looped, span, "y looped"))
        return -1;
    prec_rng rng;
    prec_rng_seed(&rng, 0x7e97);
    for (size_t i = 0; i < span / 2; i++) mma_store(PREC_BF16, host, (long)i, prec_rne(prec_rng_normal(&rng), PREC_BF16));
    if (kdevice_upload(dA, host, span, "A") || kdevice_upload(dB, host + 2, span - 2, "B")) return -1;
    printf("\nreplicas: tiny recipe linear layers, a100 bf16 model, bf16 y, R = %d\n", R_REPLICAS);
    printf("%-14s %5s %5s %5s %12s %12s %8s %6s\n", "gemm", "M", "N", "K", "looped ms", "batched ms", "speedup", "same");
    double step_looped = 0, step_batched = 0;
    int differ = 0;
    for (size_t s = 0; s < sizeof tiny_linears / sizeof tiny_linears[0]; s++) {
        const tiny_linear *l = &tiny_linears[s];
        double looped, batched;
        /* both outputs from the same start: y = 0 (accumulating shapes add to it every run) */
        if (kdevice_fill_bytes(dy_batched, 0, span, "y") || kdevice_fill_bytes(dy_looped, 0, span, "y") ||
            time_linear(tm, &m->arith, l, 0, dA, dB, dy_looped, &looped) ||
            time_linear(tm, &m->arith, l, 1, dA, dB, dy_batched, &batched) ||
            kdevice_download(yb, dy_batched, span, "y") || kdevice_download(yl, dy_looped, span, "y"))
            return -1;
        const int same = memcmp(yb, yl, span) == 0;
        differ |= !same;
        step_looped += l->per_step * looped, step_batched += l->per_step * batched;
        printf("%-14s %5d %5d %5d %12.3f %12.3f %8.1f %6s\n", l->name, l->M, l->N, l->K, looped, batched,
               looped / batched, same ? "yes" : "NO");
    }
    printf("%-14s %17s %12.3f %12.3f %8.1f\n", "one step", "", step_looped, step_batched, step_looped / step_batched);
    kdevice_free(dA), kdevice_free(dB), kdevice_free(dy_batched), kdevice_free(dy_looped);
    free(host), free(yb), free(yl);
    if (differ) fprintf(stderr, "bench_mma_emulate: batched outputs differ from looped ones\n");
    return differ;
}

int main(int argc, char **argv)
{
    const int gemm_only = argc == 2 && strcmp(argv[1], "gemm") == 0;
    if (argc > 2 || (argc == 2 && !gemm_only)) {
        fprintf(stderr, "bench_mma_emulate: unknown argument '%s' (none, or gemm)\n", argv[argc - 1]);
        return 2;
    }
    char why[256];
    if (!kernels_gpu_available(why, sizeof why)) {
        printf("bench_mma_emulate: skipped (no GPU: %s)\n", why);
        return 0;
    }
    kdevice_props dev;
    if (kdevice_describe(&dev)) return die("device");
    const double peak_int = (double)dev.multiprocessors * INT_LANES_PER_SM * dev.max_clock_khz * 1e3;
    printf("device %s, %d SMs, %d MHz: integer issue rate %.1f Tops/s (64 lanes per SM)\n", dev.name,
           dev.multiprocessors, dev.max_clock_khz / 1000, peak_int * 1e-12);
    const double int_ops = mma_emulate_inner_ops_per_product();
    printf("fast kernel: %.0f integer instructions per product in its inner loops\n", int_ops);
    printf("%-5s %-5s %-7s %10s %14s %12s\n", "gen", "in", "kernel", "ms", "Gproducts/s", "int frac");
    static const prec_format fmts[] = {PREC_FP16, PREC_BF16, PREC_TF32, PREC_E4M3};
    static const char *const gens[] = {"a100", "h100"};
    void *dA = NULL, *dB = NULL, *dD = NULL;
    const size_t max_bytes = (size_t)M * K * 4;
    if (kdevice_alloc(&dA, max_bytes, "A") || kdevice_alloc(&dB, max_bytes, "B") ||
        kdevice_alloc(&dD, (size_t)M * N * sizeof(float), "D"))
        return die("alloc");
    uint8_t *host = malloc(max_bytes);
    if (!host) return 1;
    prec_rng rng;
    prec_rng_seed(&rng, 0xbe4c);
    ktimer *tm;
    if (ktimer_create(&tm)) return die("timer");
    int status = 0;
    for (int f = 0; f < 4; f++) {
        for (long i = 0; i < (long)M * K; i++) mma_store(fmts[f], host, i, prec_rne(prec_rng_normal(&rng), fmts[f]));
        if (kdevice_upload(dA, host, (size_t)M * K * mma_elem_bytes(fmts[f]), "A") ||
            kdevice_upload(dB, host, (size_t)N * K * mma_elem_bytes(fmts[f]), "B"))
            return die("upload");
        for (int g = 0; g < 2; g++) {
            /* the H100's fp8 mma.sync is a split instruction (the model's own kernel): its wgmma instead */
            const int fp8 = fmts[f] == PREC_E4M3;
            const mma_model *m = mma_model_find(gens[g], fp8 && g == 1 ? "wgmma" : "mma.sync", fmts[f], PREC_FP32);
            if (!m) continue;
            double t[REPS];
            for (int r = 0; r < WARMUP + REPS; r++) {
                float ms;
                if (ktimer_start(tm) || mma_emulate_gemm(&m->arith, M, N, K, dA, dB, NULL, dD) || ktimer_stop(tm, &ms))
                    return die("emulate");
                if (r >= WARMUP) t[r - WARMUP] = ms;
            }
            const double ms = median(t, REPS), products = (double)M * N * K / (ms * 1e-3);
            printf("%-5s %-5s %-7s %10.3f %14.1f %12.3f\n", gens[g], prec_format_name(fmts[f]),
                   mma_emulate_last_kernel(), ms, products * 1e-9, products * int_ops / peak_int);
        }
    }
    const int replicas = gemm_only ? 0 : bench_replicas(tm);
    if (replicas < 0) return die("replicas");
    status |= replicas;
    ktimer_destroy(tm);
    kdevice_free(dA);
    kdevice_free(dB);
    kdevice_free(dD);
    mma_emulate_release();
    free(host);
    return status;
}
