/* bench/bench_attention.c — causal attention forward and backward times,
 * bf16, every variant, at T = 1024 and 4096 and head dimension D = 64 (BH =
 * 96: gpt2 d12 at batch 8, 8 x 12 heads) and D = 128 (BH = 48, the same
 * tokens x width): the median of REPS runs timed with CUDA events after one
 * warm-up, on uniform random inputs (never zeros).  The backward is timed on
 * the forward's own o and lse (the flash variants' backward includes the
 * delta pre-pass).  Beside each time: the speed-up over the CUDA-core flash
 * variant at the same shape, and the rate in TFLOP/s counting the causal
 * half of the products (forward 2 matmuls, backward 5, as FlashAttention
 * reports them).  The tensor-core variants also run on the heads as the
 * trainer keeps them, [B, T, H, D] with H D = 768 (katt_rows; rows "BTHD"):
 * the same buffers read as B T rows of H heads.  Without a GPU: one line
 * saying so, exit 0.
 *
 *   bench_attention [--reps N]   the table
 *   bench_attention --dump FILE  no timing: runs every path x variant x
 *       planted bug on small odd shapes (the combinations a variant offers:
 *       kattention_supports) and writes the raw output bytes (o,
 *       lse, dq, dk, dv) to FILE, so that two builds of the kernels (before
 *       and after a change meant to keep the numerics) can be compared
 *       bitwise with cmp.  The inputs are a hash of (seed, index), the same
 *       in every build. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/common/ktensor_io.h"

typedef struct {
    ktensor q, k, v, o, g, dq, dk, dv, lse;
} att_tensors;

static void free_all(att_tensors *t)
{
    ktensor *all[] = {&t->q, &t->k, &t->v, &t->o, &t->g, &t->dq, &t->dk, &t->dv, &t->lse};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ktensor_free(all[i]);
}

/* q, k, v, dout uniform in [-2, 2) (seeded per tensor), outputs poisoned. */
static int alloc_all(att_tensors *t, kpath path, int64_t BH, int64_t T, int64_t D, uint64_t seed)
{
    static const prec_format formats[] = {PREC_FP32, PREC_BF16, PREC_FP16};
    memset(t, 0, sizeof *t);
    const int64_t shp[3] = {BH, T, D}, shl[2] = {BH, T};
    ktensor *in[] = {&t->q, &t->k, &t->v, &t->g}, *out[] = {&t->o, &t->dq, &t->dk, &t->dv};
    for (int i = 0; i < 4; i++)
        if (ktensor_alloc(in[i], formats[path], 3, shp) || ktensor_fill_uniform(in[i], seed + i, -2.0f, 2.0f) ||
            ktensor_alloc(out[i], formats[path], 3, shp))
            return -1;
    return ktensor_alloc(&t->lse, PREC_FP32, 2, shl);
}

/* H heads a row ([B, T, H, D], every row stride H D); H = 1: packed [BH, T, D]. */
static katt_rows rows_of(int64_t H, int64_t D)
{
    const int64_t ld = H * D;
    katt_rows r = {H, ld, ld};
    return r;
}

static int forward(const att_tensors *t, kpath path, int variant, int64_t BH, int64_t T, int64_t D, int64_t H)
{
    const katt_rows rows = rows_of(H, D);
    return kattention_forward_rows(path, variant, BH, T, D, &rows, 1.0f / sqrtf((float)D), t->q.data, t->k.data,
                                   t->v.data, t->o.data, t->lse.data);
}

static int backward(const att_tensors *t, kpath path, int variant, int64_t BH, int64_t T, int64_t D, int64_t H)
{
    const katt_rows rows = rows_of(H, D);
    return kattention_backward_rows(path, variant, BH, T, D, &rows, 1.0f / sqrtf((float)D), t->q.data, t->k.data,
                                    t->v.data, t->o.data, t->g.data, t->lse.data, t->dq.data, t->dk.data, t->dv.data);
}

static double median(double *x, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && x[j - 1] > x[j]; j--) {
            double s = x[j];
            x[j] = x[j - 1];
            x[j - 1] = s;
        }
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

enum { MAX_REPS = 100 };

/* Median ms of forward (which = 0) or backward (1) over reps runs after one warm-up. */
static int time_pass(const att_tensors *t, int which, int variant, int64_t BH, int64_t T, int64_t D, int64_t H,
                     int reps, double *ms)
{
    ktimer *tm;
    if (ktimer_create(&tm)) return -1;
    double x[MAX_REPS];
    for (int r = 0; r < reps + 1; r++) {
        float f;
        int bad = ktimer_start(tm) ||
                  (which ? backward(t, KPATH_BF16, variant, BH, T, D, H) : forward(t, KPATH_BF16, variant, BH, T, D, H)) ||
                  ktimer_stop(tm, &f);
        if (bad) {
            ktimer_destroy(tm);
            return -1;
        }
        if (r > 0) x[r - 1] = f;
    }
    ktimer_destroy(tm);
    *ms = median(x, reps);
    return 0;
}

static int table(int reps)
{
    static const int64_t shapes[][3] = {{96, 1024, 64}, {96, 4096, 64}, {48, 1024, 128}, {48, 4096, 128}}; /* BH, T, D */
    /* the CUDA-core flash first: the others are compared with it; bthd: the trainer's layout */
    static const struct {
        int variant, bthd;
    } runs[] = {{KATT_FLASH, 0},          {KATT_FLASH_EXP2, 0},     {KATT_FLASH_MMA, 0}, {KATT_FLASH_MMA, 1},
                {KATT_FLASH_MMA_EXP2, 0}, {KATT_FLASH_MMA_EXP2, 1}, {KATT_NAIVE, 0}};
    printf("attention bf16: median ms of %d runs (CUDA events); x: speed-up over flash; TF/s: causal FLOPs "
           "(forward 4 BH T^2 D / 2, backward 2.5 times that)\n", reps);
    printf("%-4s %-6s %-4s %-20s %10s %7s %7s %10s %7s %7s\n", "BH", "T", "D", "variant", "forward", "x", "TF/s",
           "backward", "x", "TF/s");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t BH = shapes[s][0], T = shapes[s][1], D = shapes[s][2];
        const double flops = 4.0 * (double)BH * (double)T * (double)T * (double)D / 2;
        double f0 = 0, g0 = 0;
        for (size_t b = 0; b < sizeof runs / sizeof runs[0]; b++) {
            att_tensors t;
            double f = 0, g = 0;
            const int v = runs[b].variant;
            const int64_t H = runs[b].bthd ? 768 / D : 1;
            int bad = alloc_all(&t, KPATH_BF16, BH, T, D, 0xbe7c4) || time_pass(&t, 0, v, BH, T, D, H, reps, &f) ||
                      time_pass(&t, 1, v, BH, T, D, H, reps, &g);
            free_all(&t);
            kattention_release();
            if (bad) {
                fprintf(stderr, "bench_attention: %s\n", kernels_last_error());
                return 1;
            }
            if (v == KATT_FLASH) f0 = f, g0 = g;
            char name[40];
            snprintf(name, sizeof name, "%s%s", katt_variants[v].name, runs[b].bthd ? " BTHD" : "");
            printf("%-4lld %-6lld %-4lld %-20s %10.3f %7.2f %7.1f %10.3f %7.2f %7.1f\n", (long long)BH, (long long)T,
                   (long long)D, name, f, f0 / f, flops / (f * 1e9), g, g0 / g, 2.5 * flops / (g * 1e9));
            fflush(stdout);
        }
    }
    return 0;
}

static int append(FILE *fp, const ktensor *t)
{
    size_t n = ktensor_bytes(t);
    void *h = malloc(n);
    int bad = !h || kdevice_download(h, t->data, n, "bench_attention dump") || fwrite(h, 1, n, fp) != n;
    free(h);
    return bad ? -1 : 0;
}

static int dump(const char *path)
{
    static const int64_t shapes[][3] = {{3, 77, 40}, {2, 130, 128}, {4, 300, 64}, {1, 64, 16}, {2, 201, 17}, {1, 33, 100}};
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        fprintf(stderr, "bench_attention: cannot write %s\n", path);
        return 1;
    }
    int runs = 0;
    for (int bug = 0; bug < KBUG_COUNT; bug++)
        for (int p = KPATH_FP32; p <= KPATH_FP16; p++)
            for (int var = 0; var < KATT_NVARIANTS; var++)
                for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
                    const int64_t BH = shapes[s][0], T = shapes[s][1], D = shapes[s][2];
                    char why[256];
                    if (!kattention_supports((kpath)p, var, D, why, sizeof why)) continue; /* flash_mma: fp32, D % 8 */
                    att_tensors t;
                    kernels_set_planted_bug((kbug)bug);
                    int bad = alloc_all(&t, (kpath)p, BH, T, D, 0xd0 + s) || forward(&t, p, var, BH, T, D, 1) ||
                              backward(&t, p, var, BH, T, D, 1) || kernels_sync("bench_attention dump") ||
                              append(fp, &t.o) || append(fp, &t.lse) || append(fp, &t.dq) || append(fp, &t.dk) ||
                              append(fp, &t.dv);
                    free_all(&t);
                    if (bad) {
                        fprintf(stderr, "bench_attention: %s\n", kernels_last_error());
                        fclose(fp);
                        return 1;
                    }
                    runs++;
                }
    kernels_set_planted_bug(KBUG_NONE);
    kattention_release();
    if (fclose(fp)) return 1;
    printf("bench_attention: %d runs (bugs x paths x variants x shapes) written to %s\n", runs, path);
    return 0;
}

int main(int argc, char **argv)
{
    char why[256];
    if (!kernels_gpu_available(why, sizeof why)) {
        printf("bench_attention: skipped (no GPU: %s)\n", why);
        return 0;
    }
    int reps = 10;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--dump") == 0 && i + 1 < argc) return dump(argv[i + 1]);
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = atoi(argv[++i]);
            if (reps < 1 || reps > MAX_REPS) {
                fprintf(stderr, "bench_attention: bad --reps '%s' (1 to %d)\n", argv[i], MAX_REPS);
                return 2;
            }
            continue;
        }
        fprintf(stderr, "bench_attention: unknown argument '%s' (usage: bench_attention [--reps N] [--dump FILE])\n",
                argv[i]);
        return 2;
    }
    return table(reps);
}
