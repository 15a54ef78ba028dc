/* studies/noise.h — the noise floor of a recipe: how much the final loss
 * moves from seed to seed, how much pure chaos (one flipped ulp) moves it,
 * how much pairing the seeds buys, and how many runs per arm it takes to see
 * a shift of a given size.
 *
 * Input: the base arm's and the null arm's runs over the same seeds (a
 * compare study with no other arm), each with its validation curve.  At every
 * validation step the runs share:
 *   seed sd    sd over seeds of the base's loss;
 *   chaos sd   sd(null - base) / sqrt 2: the part of one run's loss that a
 *              one-ulp perturbation re-draws;
 *   corr       corr(base, null) over seeds: the fraction of the variance the
 *              seed pins down, i.e. what pairing by seed removes;
 *   runs       per arm, to detect a shift delta with the given power at alpha
 *              (two-sided): paired, the paired t test on differences whose sd
 *              is that of (null - base) — a change that only reorders
 *              arithmetic re-draws the chaos, as the null arm does; unpaired,
 *              the two-sample test with per-arm sd = seed sd.  Both from the
 *              noncentral t (precision/stats.h), the unpaired one through
 *              differences of independent runs (sd sqrt 2 x seed sd). */
#ifndef ULPSCOPE_STUDIES_NOISE_H
#define ULPSCOPE_STUDIES_NOISE_H

#include <stddef.h>
#include <stdio.h>

#include "studies/compare.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NOISE_SHIFTS 4
extern const double noise_shifts[NOISE_SHIFTS]; /* 0.0005, 0.001, 0.002, 0.005 nats */

typedef struct {
    long step;
    int n;                          /* seeds with both runs finite at this step */
    double base_mean, seed_sd, chaos_sd, corr;
    size_t paired_runs[NOISE_SHIFTS];   /* 0: more than STATS_MAX_RUNS or not computable */
    size_t unpaired_runs[NOISE_SHIFTS];
} noise_point;

/* base[s], null[s]: the two arms' runs at seed s (s < n_seeds).  Points are
 * the validation steps of the base's curves (at most max_points).  Returns
 * the number of points written. */
int noise_analyse(const cmp_run *base, const cmp_run *null, int n_seeds, double alpha, double power, noise_point *out,
                  int max_points);

void noise_print_table(FILE *fp, const noise_point *p, int n, double alpha, double power);
void noise_write_records(FILE *fp, const noise_point *p, int n, double alpha, double power);

#ifdef __cplusplus
}
#endif
#endif
