/* bench/bench_exact_dot.c — the exact dot product (reference/exact.h) and
 * MPFR at 256 bits, each as a ratio to a plain double loop, on n = 10^6
 * fp32 terms (normal data).  Medians of repeated runs, taken interleaved so
 * that all of them see the same machine load.
 *
 *   plain   s += (double)x[i] * y[i]          (not exact: the yardstick)
 *   exact   exact_dot_f32                     (exact, correctly rounded)
 *   termwise exact_acc_add per product        (the same accumulator without
 *           the block fast path, for comparison)
 *   mpfr    256-bit mpfr_add_d of the exact double products (what a
 *           straightforward MPFR reference does) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <mpfr.h>

#include "precision/rng.h"
#include "reference/exact.h"

enum { N = 1000000, RUNS = 11 };

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

static double plain_dot(const float *x, const float *y, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * (double)y[i];
    return s;
}

static double termwise_dot(const float *x, const float *y, size_t n)
{
    exact_acc a;
    exact_acc_init(&a);
    for (size_t i = 0; i < n; i++) exact_acc_add(&a, (double)x[i] * (double)y[i]);
    return exact_acc_value(&a);
}

static double mpfr256_dot(const float *x, const float *y, size_t n)
{
    mpfr_t s;
    mpfr_init2(s, 256);
    mpfr_set_zero(s, 1);
    for (size_t i = 0; i < n; i++) mpfr_add_d(s, s, (double)x[i] * (double)y[i], MPFR_RNDN);
    double r = mpfr_get_d(s, MPFR_RNDN);
    mpfr_clear(s);
    return r;
}

int main(void)
{
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    if (!x || !y) return 1;
    prec_rng r;
    prec_rng_seed(&r, 2024);
    for (int i = 0; i < N; i++) {
        x[i] = (float)prec_rng_normal(&r);
        y[i] = (float)prec_rng_normal(&r);
    }
    double t_plain[RUNS], t_exact[RUNS], t_term[RUNS], t_mpfr[RUNS];
    volatile double sink_plain = 0, sink_exact = 0, sink_term = 0, sink_mpfr = 0;
    for (int k = 0; k < RUNS; k++) {
        double t0 = now();
        sink_plain = plain_dot(x, y, N);
        double t1 = now();
        sink_exact = exact_dot_f32(x, y, N);
        double t2 = now();
        sink_term = termwise_dot(x, y, N);
        double t3 = now();
        sink_mpfr = mpfr256_dot(x, y, N);
        double t4 = now();
        t_plain[k] = t1 - t0;
        t_exact[k] = t2 - t1;
        t_term[k] = t3 - t2;
        t_mpfr[k] = t4 - t3;
    }
    double mp = median(t_plain, RUNS), me = median(t_exact, RUNS), mt = median(t_term, RUNS);
    double mm = median(t_mpfr, RUNS);
    printf("bench_exact_dot: n = %d fp32 terms (normal data), median of %d interleaved runs\n", N, RUNS);
    printf("  %-34s %10s %8s %12s\n", "method", "median ms", "ns/term", "vs plain");
    printf("  %-34s %10.3f %8.2f %11.2fx\n", "plain double loop (not exact)", mp * 1e3, mp * 1e9 / N, 1.0);
    printf("  %-34s %10.3f %8.2f %11.2fx\n", "exact superaccumulator (exact.h)", me * 1e3, me * 1e9 / N, me / mp);
    printf("  %-34s %10.3f %8.2f %11.2fx\n", "same, term by term (no fast path)", mt * 1e3, mt * 1e9 / N, mt / mp);
    printf("  %-34s %10.3f %8.2f %11.2fx\n", "MPFR 256-bit running sum", mm * 1e3, mm * 1e9 / N, mm / mp);
    printf("  results: plain %.17g, exact %.17g, termwise %s, mpfr %.17g (exact %s mpfr)\n", sink_plain, sink_exact,
           sink_term == sink_exact ? "same" : "DIFFERENT", sink_mpfr, sink_exact == sink_mpfr ? "==" : "!=");
    printf("  goal: exact within 10x of plain: %s\n", me / mp <= 10.0 ? "met" : "NOT met");
    free(x);
    free(y);
    return 0;
}
