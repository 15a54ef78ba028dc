/* bench/bench_mma_emulate.c — the matrix-unit emulation on CUDA cores
 * (kernels/mma_emulate.h) at 1024 x 1024 x 4096, per input format, for the
 * A100 and H100 models: median milliseconds of REPS event-timed calls after
 * WARMUP (the whole call: operand decode, GEMM, the wait for the device),
 * products per second, and the fraction of the GPU's 32-bit integer issue
 * rate that the GEMM's integer instructions take: the kernel's inner loops
 * issue INT_OPS_PER_PRODUCT integer instructions per product (counted in the
 * source: pass 1 add + max, pass 2 three-input add, two multiplies, shift,
 * multiply-add), and an sm_80 / sm_90 SM issues 64 such instructions per
 * clock (four partitions of 16 lanes), at the peak SM clock the driver
 * reports.  The count is the design's; profile with
 * `ncu --metrics smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_fma.sum`
 * to see what the compiler issued.  Random normal operands rounded to the
 * format (no zeros, so every block takes the fast path).  Without a GPU:
 * one line saying so, exit 0. */
#include <stdio.h>
#include <stdlib.h>

#include "kernels/common/ktensor_io.h"
#include "kernels/mma_emulate.h"
#include "precision/rng.h"

enum { REPS = 10, WARMUP = 2, M = 1024, N = 1024, K = 4096 };
#define INT_OPS_PER_PRODUCT 7.0
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

int main(void)
{
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
                   mma_emulate_last_kernel(), ms, products * 1e-9, products * INT_OPS_PER_PRODUCT / peak_int);
        }
    }
    ktimer_destroy(tm);
    kdevice_free(dA);
    kdevice_free(dB);
    kdevice_free(dD);
    mma_emulate_release();
    free(host);
    return status;
}
