/* studies/accum.h — the accumulation study behind `ulpscope accum` (its
 * options: cli/accum_args.h).
 *
 * One row: n addends (constant, uniform positive, normal with zero mean, or
 * heavy-tailed, times a scale x), stored in the addend format (rounded to
 * nearest even, as a cast would), summed by one algorithm in one
 * accumulator format and rounding mode.  The row reports the computed value,
 * the exact sum of the stored addends (so the error is the accumulation's
 * alone, not the addends' rounding), the error, the worst-case bound and the
 * probabilistic bound with its status (model for RNE, proved for SR, none
 * for directed rounding), and how many additions stagnated.
 *
 * Data depend only on (seed, data kind, n): every format, algorithm and
 * rounding mode sees the same draws.  Stochastic rounding draws its bits from
 * a stream seeded by (seed, row), so a run is bit-for-bit repeatable.
 */
#ifndef ULPSCOPE_STUDIES_ACCUM_H
#define ULPSCOPE_STUDIES_ACCUM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "precision/bounds.h"
#include "precision/format.h"
#include "precision/sum.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { ACCUM_CONSTANT = 0, ACCUM_UNIFORM, ACCUM_NORMAL, ACCUM_HEAVY, ACCUM_NDATA } accum_data;

const char *accum_data_name(accum_data d); /* "constant", "uniform", "normal", "heavy" */
int accum_data_parse(const char *name, accum_data *out);
const char *accum_data_names(void);

/* The addends of one row, stored in their format, with the exact reference. */
typedef struct {
    accum_data kind;
    double x;          /* the constant, or the scale of the random data */
    prec_format addend;
    size_t n;
    double *v;         /* n stored addends */
    double exact;      /* sum of v, correctly rounded */
    double sum_abs;    /* sum |v_i|, rounded up */
    double exact_unrounded; /* sum of the addends before storage, correctly rounded */
} accum_dataset;

/* Draws n addends (uniform: x U[0,1); normal: x N(0,1); heavy: x times a
 * symmetric Pareto variable with tail index 1.5, whose variance is
 * infinite) and stores them in `addend`.  Returns 0, or -1 when out of memory. */
int accum_dataset_make(accum_dataset *d, accum_data kind, double x, prec_format addend, size_t n, uint64_t seed);
void accum_dataset_free(accum_dataset *d);

typedef struct {
    prec_format acc;
    prec_sum_algo algo;
    prec_round_mode round;
    size_t block;      /* blocked algorithm */
    double fail_prob;  /* of the probabilistic bound */
} accum_method;

typedef struct {
    accum_method m;
    double value, exact, abs_err, rel_err;
    double bound, prob_bound;
    prec_prob_status prob_status;
    size_t stagnant;   /* additions of a nonzero addend that left the sum unchanged */
    bool nonfinite;    /* an intermediate overflowed (bounds do not apply) */
} accum_result;

/* Sums d by method m.  seed feeds stochastic rounding. */
void accum_run(const accum_dataset *d, const accum_method *m, uint64_t seed, accum_result *out);

#ifdef __cplusplus
}
#endif
#endif
