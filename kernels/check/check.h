/* kernels/check/check.h — the harness every op's check reports through.
 *
 * An op's check (checks.h, attached by the op's name) draws fresh random
 * inputs (kcheck_rng), poisons
 * its outputs (ktensor_poison: NaN in every format) before the launch, runs
 * the kernel at (path, variant), copies the outputs back, computes the MPFR
 * reference (reference/ref.h) from the exact values the kernel saw, and for
 * each element i a bound B_i from those inputs.  It reports, per output
 * tensor and shape, a kcheck_row.
 *
 * Bounds.  B_i bounds |computed_i - exact_i| for the kernel's own sequence
 * of fp32 operations and its output rounding.  The easiest way to get one is
 * to replay the kernel's arithmetic on kval numbers (precision/kval.h): each
 * carries the exact value, a rigorous worst-case error bound e and a
 * probabilistic one p (sqrt(depth) growth), used for the RMS verdict.
 *
 * Verdict of a row: PASS when every element has |got - ref| <= B_i (the
 * harness adds the reference's own rounding, 2^-53 |ref|), the RMS of the
 * errors over the row is at most the RMS of the probabilistic bounds, and no
 * element is NaN/inf where the reference is finite (unwritten, poisoned
 * elements show up there).
 *
 * Planted bugs (kernels_set_planted_bug): KBUG_DROP_TERM leaves one term out
 * of each reduction, or leaves one element of an elementwise output
 * unwritten; KBUG_TRUNCATE_OUTPUT rounds outputs toward zero instead of to
 * nearest even (fp32 outputs, which have no narrower rounding step, are
 * truncated to bf16 precision: a truncating narrow store).  kernels/common/kelem.cuh
 * has the device helpers.  A twin (op, path, variant) is caught when at least
 * one of its rows FAILs: a single dropped term among thousands can be below a
 * bf16 bound, which is why every check also runs small shapes. */
#ifndef ULPSCOPE_KERNELS_CHECK_CHECK_H
#define ULPSCOPE_KERNELS_CHECK_CHECK_H

#include <stdint.h>
#include <stdio.h>

#include "kernels/registry.h"
#include "precision/kval.h"
#include "precision/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kcheck_ctx kcheck_ctx; /* below */

/* ---- rows ----------------------------------------------------------------- */

typedef struct {
    const char *output;      /* output tensor: "y", "dx", "dgamma", ... */
    char shape[96];          /* "N=37 C=768" */
    int64_t n;               /* elements compared */
    double unit_roundoff;    /* u of the path's storage format: the unit errors are quoted in */
    /* Errors in units of u, each element's error divided by its own scale s_i
     * (the magnitude its bound is proportional to, e.g. sum |a_k b_k| for a dot
     * product, or |ref_i| for an elementwise op): e_i = |got_i - ref_i| / (u s_i). */
    double max_err_u;
    double rms_err_u;
    double max_bound_u;      /* max_i B_i / (u s_i): the worst-case bound, same units */
    double rms_bound_u;      /* RMS of the probabilistic bounds P_i / (u s_i) */
    double worst_ratio;      /* max_i |got_i - ref_i| / B_i; <= 1 passes */
    int64_t worst_index;     /* element achieving worst_ratio (-1: none) */
    char worst_detail[256];  /* got, ref and the inputs that produced that element */
    int64_t nonfinite;       /* outputs that were NaN/inf where the reference is finite
                                (unwritten, poisoned elements show up here) */
    int pass;                /* worst_ratio <= 1, rms within its bound, nonfinite == 0 */
} kcheck_row;

/* Accumulates elements into a row being built. */
typedef struct {
    kcheck_row row;
    double sum_sq_err_u;     /* over the elements with scale > 0 */
    double sum_sq_prob_u;
    int64_t counted;
} kcheck_acc;

void kcheck_acc_init(kcheck_acc *acc, const char *output, const char *shape, double unit_roundoff);
/* One element: got, ref; bound = B_i and prob = P_i (absolute, prob <= bound);
 * scale = s_i (> 0; 0 is allowed where ref and bound are both 0).  Returns 1
 * when this element became the worst so far (then call kcheck_acc_detail). */
int kcheck_acc_add(kcheck_acc *acc, int64_t i, double got, double ref, double bound, double prob,
                   double scale);
/* Sets the worst element's description: its inputs, got and ref. */
void kcheck_acc_detail(kcheck_acc *acc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Finishes the means and the verdict (kcheck_acc_finish), then reports. */
void kcheck_acc_finish(kcheck_acc *acc);
void kcheck_acc_report(kcheck_ctx *ctx, kcheck_acc *acc);

/* ---- the context an op's check runs in ------------------------------------ */

typedef void (*kcheck_sink)(void *user, const kcheck_ctx *ctx, const kcheck_row *row);

struct kcheck_ctx {
    uint64_t seed;      /* base seed of the run */
    int quick;          /* reduced shapes (sanitizer runs) */
    kbug bug;           /* planted bug of this run (also set in kernels_set_planted_bug) */
    const kop *op;      /* what is being checked now */
    kpath path;
    int variant;
    uint64_t draws;     /* seeds handed out for the current (op, path, variant) */
    kcheck_sink sink;   /* receives every row */
    void *user;
    char not_offered[192]; /* set by kcheck_not_offered: why (path, variant) does not exist */
};

void kcheck_report(kcheck_ctx *ctx, const kcheck_row *row);
/* A fresh seed for the next draw of this (op, path, variant): a hash of the
 * run's seed, the names and a counter, so one op's inputs do not depend on
 * which other ops ran. */
uint64_t kcheck_seed(kcheck_ctx *ctx);
static inline void kcheck_rng(kcheck_ctx *ctx, prec_rng *rng) { prec_rng_seed(rng, kcheck_seed(ctx)); }
static inline int kcheck_quick(const kcheck_ctx *ctx) { return ctx->quick; }
/* The registry lists paths per op, not per variant: a check whose variant
 * does not exist on this path (e.g. a tensor-core kernel for 16-bit inputs
 * asked for fp32) returns kcheck_not_offered(ctx, why) without running.  The
 * harness prints the reason and counts the combination neither as a twin
 * nor as an error; reporting rows as well is an error.  Returns 0. */
int kcheck_not_offered(kcheck_ctx *ctx, const char *why);

/* ---- inputs ---------------------------------------------------------------- */

/* Storage format of a path's tensors (fp8: e4m3; gradients of fp8 paths use
 * e5m2, which each op's check chooses itself). */
prec_format kcheck_path_format(kpath p);
/* x[i] = round_RNE(mean + sigma * N(0,1)) in format f (values the kernel can
 * hold exactly).  For fp8 pass the value divided by its scale yourself. */
void kcheck_fill_normal(prec_rng *rng, double *x, int64_t n, double mean, double sigma, prec_format f);
void kcheck_fill_uniform(prec_rng *rng, double *x, int64_t n, double lo, double hi, prec_format f);
/* Per-tensor fp8 scale as delayed-scaling recipes choose it: amax / max_finite
 * of f, so the largest |x| lands on the format's largest value (returns 1 for
 * an all-zero tensor).  The returned scale is an fp32 value. */
double kcheck_fp8_scale(const double *x, int64_t n, prec_format f);

/* ---- reduction depths (the `depth` of kval_sum_finish) ------------------- */

/* Longest chain of roundings when n terms are reduced by `threads` threads,
 * each summing its strided share sequentially, then a tree over the threads:
 * (ceil(n / threads) - 1) + ceil(log2(threads)).  threads = 1: n - 1. */
int64_t kcheck_tree_depth(int64_t n, int threads);
/* The same for the row partition of kernels/common/kreduce.cuh (threads per row,
 * vec consecutive elements per access), counting each accumulation into the
 * thread's zero-initialised partial (so a first rounded product counts):
 * vec * ceil(C / (threads vec)) (at most C) + ceil(log2(active threads)). */
int64_t kcheck_row_depth(int64_t C, int threads, int vec);

/* ---- checks attached to ops by name (kernels/check/checks.c) -------------- */

typedef int (*kcheck_fn)(kcheck_ctx *ctx, kpath path, int variant);
typedef struct {
    const char *op;    /* the op's registry name */
    kcheck_fn check;
} kcheck_entry;

const kcheck_entry *kcheck_table(int *count);
kcheck_fn kcheck_find(const char *op);  /* NULL when the op has no check */
kcheck_fn kcheck_find_in(const kcheck_entry *table, int n, const char *op);
/* Holds a table and the registry to each other: counts the registry's ops
 * without a check, the entries naming no op and the ops checked twice, and
 * lists them in msg ("no check for op X; ..."). */
int kcheck_table_mismatches(const kcheck_entry *table, int n, char *msg, size_t len);

/* ---- the harness ----------------------------------------------------------- */

typedef struct {
    const char *op;       /* NULL: every op */
    int path;             /* -1: every path the op offers; else a kpath */
    const char *variant;  /* NULL: every variant (requires op) */
    kbug bug;             /* planted bug: the run then expects every twin to FAIL */
    uint64_t seed;
    int quick;
    FILE *table;          /* human table (NULL: none) */
    FILE *json;           /* JSON Lines records, after the caller's header (NULL: none) */
} kcheck_options;

typedef struct {
    int rows, failed_rows;
    int errors;           /* checks that returned -1 (CUDA errors and the like) */
    int twins, twins_caught; /* (op, path, variant) combinations run, and those with a FAIL row */
} kcheck_summary;

/* Runs the matrix the options select.  Returns the exit status the command
 * should use: without a bug, 0 when every row passed and no check errored;
 * with a bug, 0 when every twin was caught and no check errored; else 1. */
int kcheck_run(const kcheck_options *o, kcheck_summary *summary);

/* One JSON Lines record for a row (also used by tests). */
void kcheck_row_json(FILE *fp, const kcheck_ctx *ctx, const kcheck_row *row);

#ifdef __cplusplus
}
#endif
#endif
