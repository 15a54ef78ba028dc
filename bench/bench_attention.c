/* bench/bench_attention.c — causal attention forward and backward times,
 * bf16, BH = 96 (gpt2 d12 at batch 8: 8 x 12 heads), D = 64, T = 1024 and
 * 2048, flash and naive: the median of REPS runs timed with CUDA events after
 * one warm-up, on uniform random inputs (never zeros).  The backward is
 * timed on the forward's own o and lse.  Without a GPU: one line saying so,
 * exit 0.
 *
 *   bench_attention [--reps N]   the table
 *   bench_attention --dump FILE  no timing: runs every path x variant x
 *       planted bug on small odd shapes and writes the raw output bytes (o,
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

static int forward(const att_tensors *t, kpath path, int variant, int64_t BH, int64_t T, int64_t D)
{
    return kattention_forward(path, variant, BH, T, D, 1.0f / sqrtf((float)D), t->q.data, t->k.data, t->v.data,
                              t->o.data, t->lse.data);
}

static int backward(const att_tensors *t, kpath path, int variant, int64_t BH, int64_t T, int64_t D)
{
    return kattention_backward(path, variant, BH, T, D, 1.0f / sqrtf((float)D), t->q.data, t->k.data, t->v.data,
                               t->o.data, t->g.data, t->lse.data, t->dq.data, t->dk.data, t->dv.data);
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
static int time_pass(const att_tensors *t, int which, int variant, int64_t BH, int64_t T, int64_t D, int reps,
                     double *ms)
{
    ktimer *tm;
    if (ktimer_create(&tm)) return -1;
    double x[MAX_REPS];
    for (int r = 0; r < reps + 1; r++) {
        float f;
        int bad = ktimer_start(tm) ||
                  (which ? backward(t, KPATH_BF16, variant, BH, T, D) : forward(t, KPATH_BF16, variant, BH, T, D)) ||
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
    const int64_t BH = 96, D = 64, Ts[] = {1024, 2048};
    const int variants[] = {KATT_FLASH, KATT_NAIVE};
    printf("attention bf16, BH %lld, D %lld: median ms of %d runs (CUDA events)\n", (long long)BH, (long long)D, reps);
    printf("%-6s %-8s %12s %12s\n", "T", "variant", "forward", "backward");
    for (size_t a = 0; a < 2; a++)
        for (size_t b = 0; b < 2; b++) {
            att_tensors t;
            double f = 0, g = 0;
            int bad = alloc_all(&t, KPATH_BF16, BH, Ts[a], D, 0xbe7c4) ||
                      time_pass(&t, 0, variants[b], BH, Ts[a], D, reps, &f) ||
                      time_pass(&t, 1, variants[b], BH, Ts[a], D, reps, &g);
            free_all(&t);
            kattention_release();
            if (bad) {
                fprintf(stderr, "bench_attention: %s\n", kernels_last_error());
                return 1;
            }
            printf("%-6lld %-8s %12.3f %12.3f\n", (long long)Ts[a], katt_variants[variants[b]].name, f, g);
            fflush(stdout);
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
                    att_tensors t;
                    kernels_set_planted_bug((kbug)bug);
                    int bad = alloc_all(&t, (kpath)p, BH, T, D, 0xd0 + s) || forward(&t, p, var, BH, T, D) ||
                              backward(&t, p, var, BH, T, D) || kernels_sync("bench_attention dump") ||
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
