/* studies/noise.c — seed and chaos spread along the curve, and runs needed
 * (noise.h). */
#include "studies/noise.h"

#include <math.h>
#include <stdlib.h>

#include "precision/stats.h"

const double noise_shifts[NOISE_SHIFTS] = {0.0005, 0.001, 0.002, 0.005};

/* The value of run r at step, or NaN. */
static double at_step(const cmp_run *r, long step)
{
    if (r->status) return NAN;
    for (int i = 0; i < r->n_curve; i++)
        if (r->curve_step[i] == step) return r->curve_val[i];
    return NAN;
}

int noise_analyse(const cmp_run *base, const cmp_run *null, int n_seeds, double alpha, double power, noise_point *out,
                  int max_points)
{
    /* the steps: those of the first finished base run */
    const cmp_run *ref = NULL;
    for (int s = 0; s < n_seeds && !ref; s++)
        if (base[s].status == 0) ref = &base[s];
    if (!ref) return 0;
    double *x = malloc((size_t)n_seeds * sizeof *x), *y = malloc((size_t)n_seeds * sizeof *y),
           *d = malloc((size_t)n_seeds * sizeof *d);
    int np = 0;
    for (int i = 0; x && y && d && i < ref->n_curve && np < max_points; i++) {
        long step = ref->curve_step[i];
        int n = 0;
        for (int s = 0; s < n_seeds; s++) {
            double b = at_step(&base[s], step), u = at_step(&null[s], step);
            if (!isfinite(b) || !isfinite(u)) continue;
            x[n] = b;
            y[n] = u;
            d[n++] = u - b;
        }
        noise_point *p = &out[np++];
        p->step = step;
        p->n = n;
        p->base_mean = n ? stats_mean(x, (size_t)n) : NAN;
        p->seed_sd = n > 1 ? stats_sd(x, (size_t)n) : NAN;
        double sd_d = n > 1 ? stats_sd(d, (size_t)n) : NAN;
        p->chaos_sd = sd_d / sqrt(2.0);
        p->corr = n > 1 ? stats_correlation(x, y, (size_t)n) : NAN;
        for (int k = 0; k < NOISE_SHIFTS; k++) {
            p->paired_runs[k] = sd_d > 0 ? stats_runs_for_shift(noise_shifts[k], sd_d, alpha, power) : 0;
            p->unpaired_runs[k] =
                p->seed_sd > 0 ? stats_runs_for_shift(noise_shifts[k], sqrt(2.0) * p->seed_sd, alpha, power) : 0;
        }
    }
    free(x);
    free(y);
    free(d);
    return np;
}

static void runs_cell(FILE *fp, size_t n)
{
    if (n) fprintf(fp, " %9zu", n);
    else fprintf(fp, " %9s", "-");
}

void noise_print_table(FILE *fp, const noise_point *p, int n, double alpha, double power)
{
    fprintf(fp, "%8s %5s %9s %9s %9s %6s |", "step", "seeds", "val loss", "seed sd", "chaos sd", "corr");
    for (int k = 0; k < NOISE_SHIFTS; k++) fprintf(fp, " %9.4f", noise_shifts[k]);
    fprintf(fp, "  <- shift (nats): runs per arm, paired / unpaired\n");
    for (int i = 0; i < n; i++) {
        fprintf(fp, "%8ld %5d %9.5f %9.5f %9.5f %6.3f |", p[i].step, p[i].n, p[i].base_mean, p[i].seed_sd, p[i].chaos_sd,
                p[i].corr);
        for (int k = 0; k < NOISE_SHIFTS; k++) runs_cell(fp, p[i].paired_runs[k]);
        fprintf(fp, "  paired\n%8s %5s %9s %9s %9s %6s |", "", "", "", "", "", "");
        for (int k = 0; k < NOISE_SHIFTS; k++) runs_cell(fp, p[i].unpaired_runs[k]);
        fprintf(fp, "  unpaired\n");
    }
    fprintf(fp, "runs per arm for a two-sided test at alpha %.3g with power %.2g; '-': over %d runs or no spread measured\n",
            alpha, power, STATS_MAX_RUNS);
}

static void num(FILE *fp, const char *key, double x)
{
    fprintf(fp, ",\"%s\":", key);
    if (isfinite(x)) fprintf(fp, "%.17g", x);
    else fprintf(fp, "\"%s\"", isnan(x) ? "nan" : x > 0 ? "inf" : "-inf");
}

void noise_write_records(FILE *fp, const noise_point *p, int n, double alpha, double power)
{
    for (int i = 0; i < n; i++) {
        fprintf(fp, "{\"record\":\"noise\",\"step\":%ld,\"seeds\":%d", p[i].step, p[i].n);
        num(fp, "val_loss", p[i].base_mean);
        num(fp, "seed_sd", p[i].seed_sd);
        num(fp, "chaos_sd", p[i].chaos_sd);
        num(fp, "corr", p[i].corr);
        fprintf(fp, ",\"alpha\":%g,\"power\":%g,\"shifts\":[", alpha, power);
        for (int k = 0; k < NOISE_SHIFTS; k++)
            fprintf(fp, "%s{\"shift\":%g,\"paired_runs\":%zu,\"unpaired_runs\":%zu}", k ? "," : "", noise_shifts[k],
                    p[i].paired_runs[k], p[i].unpaired_runs[k]);
        fprintf(fp, "]}\n");
    }
}
