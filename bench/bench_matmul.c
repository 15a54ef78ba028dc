/* bench/bench_matmul.c — matmul throughput per path against the best
 * cuBLASLt algorithm for the shape, fp8 against bf16, and the peak device
 * memory of the fused linear cross-entropy against the materialised one.
 *
 * Each figure is the median of REPS runs timed with CUDA events after
 * warm-up, on random data (uniform, never zeros).  "best" times up to 8 candidates of
 * cuBLASLt's heuristic for the same GEMM (kmatmul_time_algos) and keeps the
 * fastest; ours is kmatmul itself (its heuristic's first choice, split-K
 * excluded).  The block-scaled kernel is our own mma.sync kernel and is
 * compared with cuBLASLt's per-tensor fp8 GEMM.  Memory: a tracking count
 * of every device allocation each pipeline makes beyond its inputs and
 * outputs (the logits buffer it holds, kmatmul's and klinear_ce's
 * workspaces, which are the only allocations those calls make), taken after
 * the pipeline with the workspaces released before it; nothing is freed in
 * between, so the count is its peak.  Without a GPU: one line saying so,
 * exit 0. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common/ktensor_io.h"
#include "kernels/cross_entropy.h"
#include "kernels/matmul.h"
#include "precision/rng.h"

enum { REPS = 20, WARMUP = 3, MAX_ALGOS = 8 };

static int die(const char *what)
{
    fprintf(stderr, "bench_matmul: %s: %s\n", what, kernels_last_error());
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

/* Median milliseconds of kmatmul over REPS event-timed runs after WARMUP. */
static int time_ours(kpath path, kmatmul_accum accum, int variant, const kmatmul_args *x, double *ms)
{
    ktimer *tm;
    if (ktimer_create(&tm)) return -1;
    double t[REPS];
    for (int r = 0; r < WARMUP + REPS; r++) {
        float f;
        if (ktimer_start(tm) || kmatmul(path, accum, variant, x) || ktimer_stop(tm, &f)) {
            ktimer_destroy(tm);
            return -1;
        }
        if (r >= WARMUP) t[r - WARMUP] = f;
    }
    ktimer_destroy(tm);
    *ms = median(t, REPS);
    return 0;
}

/* Uniform random values in [-sigma, sigma): drawn once per shape, uploaded
 * (rounded into each path's format) for every path. */
static double *random_host(int64_t n, prec_rng *rng, double sigma)
{
    double *x = malloc((size_t)n * sizeof(double));
    if (x)
        for (int64_t i = 0; i < n; i++) x[i] = sigma * (2.0 * prec_rng_uniform(rng) - 1.0);
    return x;
}

static int device_tensor(ktensor *t, prec_format f, int64_t r, int64_t c, const double *x)
{
    int64_t shp[2] = {r, c};
    if (ktensor_alloc(t, f, 2, shp)) return -1;
    return ktensor_upload(t, x);
}

typedef struct {
    const char *name;
    int64_t M, N, K;
} bshape;

typedef struct {
    const char *label;
    kpath path;
    kmatmul_accum accum;
    int variant;
} bpath;

static int bench_shape(const bshape *s, prec_rng *rng)
{
    static const bpath paths[] = {
        {"fp32", KPATH_FP32, KMATMUL_ACC_DEFAULT, KMATMUL_FUSED},
        {"tf32", KPATH_FP32, KMATMUL_ACC_FAST, KMATMUL_FUSED},
        {"bf16", KPATH_BF16, KMATMUL_ACC_DEFAULT, KMATMUL_FUSED},
        {"bf16 split_k", KPATH_BF16, KMATMUL_ACC_DEFAULT, KMATMUL_SPLIT_K},
        {"fp16", KPATH_FP16, KMATMUL_ACC_DEFAULT, KMATMUL_FUSED},
        {"fp8 e4m3", KPATH_FP8, KMATMUL_ACC_DEFAULT, KMATMUL_FUSED},
        {"fp8 e4m3 fast", KPATH_FP8, KMATMUL_ACC_FAST, KMATMUL_FUSED},
        {"fp8 block-scaled", KPATH_FP8, KMATMUL_ACC_BLOCK_SCALED, KMATMUL_FUSED},
    };
    const double flop = 2.0 * (double)s->M * (double)s->N * (double)s->K;
    double bf16_ours = 0, fp8_ours = 0;
    double *ha = random_host(s->M * s->K, rng, 1.0), *hb = random_host(s->N * s->K, rng, 1.0);
    if (!ha || !hb) return die("host memory");
    for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
        const bpath *bp = &paths[p];
        prec_format in = bp->path == KPATH_FP8 ? PREC_BF16 : (bp->path == KPATH_FP32 ? PREC_FP32 : (bp->path == KPATH_BF16 ? PREC_BF16 : PREC_FP16));
        prec_format out = bp->path == KPATH_FP8 ? PREC_BF16 : in;
        ktensor A = {0}, B = {0}, Y = {0}, QA = {0}, QB = {0};
        int64_t sy[2] = {s->M, s->N}, sqa[2] = {s->M, s->K}, sqb[2] = {s->N, s->K};
        float *sa = NULL, *sb = NULL;
        if (device_tensor(&A, in, s->M, s->K, ha) || device_tensor(&B, in, s->N, s->K, hb) ||
            ktensor_alloc(&Y, out, 2, sy))
            return die("allocating operands");
        kmatmul_args x = {s->M, s->N, s->K, 0, 1, A.data, B.data, Y.data, NULL, 1.0f, 0.0f, NULL, 0,
                          PREC_FP32, PREC_FP32, NULL, NULL, 0};
        if (bp->path == KPATH_FP8) { /* quantise once; the GEMM is what is timed */
            int64_t G = (s->K + KMATMUL_FP8_BLOCK - 1) / KMATMUL_FP8_BLOCK;
            int64_t nb = (s->N + KMATMUL_FP8_BLOCK - 1) / KMATMUL_FP8_BLOCK;
            if (ktensor_alloc(&QA, PREC_E4M3, 2, sqa) || ktensor_alloc(&QB, PREC_E4M3, 2, sqb) ||
                kdevice_alloc((void **)&sa, (size_t)(s->M * G) * sizeof(float), "scales") ||
                kdevice_alloc((void **)&sb, (size_t)(nb * G) * sizeof(float), "scales"))
                return die("allocating fp8 operands");
            int rc = bp->accum == KMATMUL_ACC_BLOCK_SCALED
                         ? (kfp8_quantize_blocks(A.data, PREC_BF16, s->M, s->K, 0, 1, PREC_E4M3, QA.data, sa) ||
                            kfp8_quantize_blocks(B.data, PREC_BF16, s->N, s->K, 0, KMATMUL_FP8_BLOCK, PREC_E4M3,
                                                 QB.data, sb))
                         : (kfp8_quantize_tensor(A.data, PREC_BF16, s->M, s->K, 0, PREC_E4M3, QA.data, sa) ||
                            kfp8_quantize_tensor(B.data, PREC_BF16, s->N, s->K, 0, PREC_E4M3, QB.data, sb));
            if (rc) return die("quantising");
            x.a = QA.data;
            x.b = QB.data;
            x.a_format = x.b_format = PREC_E4M3;
            x.a_scale = sa;
            x.b_scale = sb;
        }
        double ours, best = NAN, algos[MAX_ALGOS];
        int n_algos = 0;
        if (time_ours(bp->path, bp->accum, bp->variant, &x, &ours)) return die(bp->label);
        kmatmul_accum ref_accum = bp->accum == KMATMUL_ACC_BLOCK_SCALED ? KMATMUL_ACC_DEFAULT : bp->accum;
        if (bp->accum == KMATMUL_ACC_BLOCK_SCALED) { /* compare with cuBLASLt's per-tensor fp8 on the same codes */
            if (kfp8_quantize_tensor(A.data, PREC_BF16, s->M, s->K, 0, PREC_E4M3, QA.data, sa) ||
                kfp8_quantize_tensor(B.data, PREC_BF16, s->N, s->K, 0, PREC_E4M3, QB.data, sb))
                return die("quantising");
        }
        if (kmatmul_time_algos(bp->path, ref_accum, &x, MAX_ALGOS, REPS, algos, &n_algos)) return die("timing algos");
        for (int a = 0; a < n_algos; a++) best = a == 0 || algos[a] < best ? algos[a] : best;
        double tf_ours = flop / (ours * 1e-3) / 1e12, tf_best = flop / (best * 1e-3) / 1e12;
        printf("%-14s M=%-5lld N=%-5lld K=%-5lld %-17s ours %8.3f ms %7.1f TFLOP/s | best of %d cuBLASLt %8.3f ms %7.1f TFLOP/s | ratio %.2f\n",
               s->name, (long long)s->M, (long long)s->N, (long long)s->K, bp->label, ours, tf_ours, n_algos, best,
               tf_best, best / ours);
        if (bp->path == KPATH_BF16 && bp->variant == KMATMUL_FUSED) bf16_ours = tf_ours;
        if (bp->path == KPATH_FP8 && bp->accum == KMATMUL_ACC_DEFAULT) fp8_ours = tf_ours;
        ktensor_free(&A); ktensor_free(&B); ktensor_free(&Y); ktensor_free(&QA); ktensor_free(&QB);
        kdevice_free(sa);
        kdevice_free(sb);
    }
    printf("%-14s fp8 (e4m3, promoted) / bf16 throughput: %.2f\n", s->name, fp8_ours / bf16_ours);
    free(ha);
    free(hb);
    return 0;
}

/* Fused linear cross-entropy vs materialised logits (logits, CE in place,
 * dh and dW GEMMs) at vocabulary V and N tokens, bf16, C = 768. */
static int bench_ce_memory(prec_rng *rng)
{
    const int64_t N = 8 * 1024, C = 768, V = 50304;
    ktensor H = {0}, W = {0}, DH = {0}, DW = {0}, L = {0};
    int64_t sdw[2] = {V, C}, sdh[2] = {N, C}, sl[1] = {N};
    int32_t *t = malloc((size_t)N * sizeof(int32_t));
    void *tdev = NULL;
    if (!t) return die("host memory");
    for (int64_t i = 0; i < N; i++) t[i] = (int32_t)(prec_rng_next(rng) % (uint64_t)V);
    double *hh = random_host(N * C, rng, 1.0), *hw = random_host(V * C, rng, 0.05);
    if (!hh || !hw) return die("host memory");
    if (device_tensor(&H, PREC_BF16, N, C, hh) || device_tensor(&W, PREC_BF16, V, C, hw) ||
        ktensor_alloc(&DH, PREC_BF16, 2, sdh) || ktensor_alloc(&DW, PREC_FP32, 2, sdw) ||
        ktensor_alloc(&L, PREC_FP32, 1, sl) || kdevice_alloc(&tdev, (size_t)N * sizeof(int32_t), "targets") ||
        kdevice_upload(tdev, t, (size_t)N * sizeof(int32_t), "targets"))
        return die("allocating cross-entropy operands");
    const float dloss = 1.0f / (float)N;
    for (int variant = 0; variant < KLCE_NVARIANTS; variant++) {
        kmatmul_release();
        klinear_ce_release();
        ktimer *tm;
        float ms;
        if (ktimer_create(&tm) || ktimer_start(tm) ||
            klinear_ce(KPATH_BF16, variant, N, C, V, H.data, W.data, tdev, L.data, DH.data, DW.data, dloss) ||
            ktimer_stop(tm, &ms))
            return die("klinear_ce");
        ktimer_destroy(tm);
        double peak = (double)(kmatmul_workspace_bytes() + klinear_ce_workspace_bytes());
        printf("cross-entropy V=%lld N=%lld C=%lld bf16 fused linear (%s): peak extra %.1f MiB, %.2f ms (first call)\n",
               (long long)V, (long long)N, (long long)C, klce_variants[variant].name, peak / 1048576.0, ms);
    }
    for (int fp32_logits = 0; fp32_logits < 2; fp32_logits++) {
        kmatmul_release();
        klinear_ce_release();
        ktensor Z = {0};
        int64_t sz[2] = {N, V};
        prec_format lf = fp32_logits ? PREC_FP32 : PREC_BF16;
        if (ktensor_alloc(&Z, lf, 2, sz)) return die("allocating logits");
        kmatmul_args lg = {N, V, C, 0, 1, H.data, W.data, Z.data, NULL, 1.0f, 0.0f, NULL, 0,
                           PREC_FP32, PREC_FP32, NULL, NULL, fp32_logits};
        if (kmatmul(KPATH_BF16, KMATMUL_ACC_DEFAULT, KMATMUL_FUSED, &lg) ||
            kce_forward_backward(KPATH_BF16, fp32_logits ? KCE_FP32_LOGITS : KCE_TWO_PASS, N, V, Z.data, tdev,
                                 L.data, Z.data, dloss, 0.0f))
            return die("materialised cross-entropy");
        if (!fp32_logits) { /* the backward GEMMs read the bf16 dlogits */
            kmatmul_args a = {N, C, V, 0, 0, Z.data, W.data, DH.data, NULL, 1.0f, 0.0f, NULL, 0,
                              PREC_FP32, PREC_FP32, NULL, NULL, 0};
            kmatmul_args b = {V, C, N, 1, 0, Z.data, H.data, DW.data, NULL, 1.0f, 0.0f, NULL, 0,
                              PREC_FP32, PREC_FP32, NULL, NULL, 1};
            if (kmatmul(KPATH_BF16, KMATMUL_ACC_DEFAULT, KMATMUL_FUSED, &a) ||
                kmatmul(KPATH_BF16, KMATMUL_ACC_DEFAULT, KMATMUL_FUSED, &b))
                return die("materialised backward GEMMs");
        }
        if (kernels_sync("materialised")) return die("sync");
        double peak = (double)(ktensor_bytes(&Z) + kmatmul_workspace_bytes());
        printf("cross-entropy V=%lld N=%lld C=%lld bf16 materialised %s logits%s: peak extra %.1f MiB\n", (long long)V,
               (long long)N, (long long)C, fp32_logits ? "fp32" : "bf16",
               fp32_logits ? " (forward only: bf16 GEMMs cannot read fp32 dlogits)" : " + backward GEMMs",
               peak / 1048576.0);
        ktensor_free(&Z);
    }
    ktensor_free(&H); ktensor_free(&W); ktensor_free(&DH); ktensor_free(&DW); ktensor_free(&L);
    kdevice_free(tdev);
    free(t);
    free(hh);
    free(hw);
    return 0;
}

int main(void)
{
    char why[256];
    if (!kernels_gpu_available(why, sizeof why)) {
        printf("bench_matmul: skipped: %s\n", why);
        return 0;
    }
    kdevice_props prop;
    if (kdevice_describe(&prop)) return die("kdevice_describe");
    printf("bench_matmul: %s (sm_%d%d, %d SMs, runtime %d); medians of %d event-timed runs after %d warm-ups\n",
           prop.name, prop.cc_major, prop.cc_minor, prop.multiprocessors, prop.runtime_version, REPS, WARMUP);
    prec_rng rng;
    prec_rng_seed(&rng, 20261121);
    static const bshape shapes[] = {
        {"square", 4096, 4096, 4096},
        {"gpt2 qkv", 8192, 2304, 768},
        {"gpt2 mlp.down", 8192, 768, 3072},
        {"gpt2 lm_head", 8192, 50304, 768},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (bench_shape(&shapes[i], &rng)) return 1;
    return bench_ce_memory(&rng);
}
