/* kernels/probe/probe_fingerprint.h — the probe families that fingerprint a matrix
 * unit, run through an executor that is either the GPU (kernels/probe/probe_gpu.h)
 * or a model (precision/mma.h), so a measured and a modelled fingerprint come
 * from the same probe vectors and the same interpretation.
 *
 * A fingerprint is JSON Lines: a header, one "route" record per (route,
 * input, output) target, one "property" record per (target, property):
 *   {"record":"property","route":"wgmma","in":"e4m3","out":"fp32",
 *    "property":"alignment_frac_bits","value":13,"detail":"..."}
 * Properties (each a ladder of dot products d = c + a.b of the instruction's
 * K; see probe_fingerprint.c for the vectors):
 *   products_exact, alignment_frac_bits (F), alignment_rounding,
 *   output_frac_bits, output_rounding, block_size (L), carry_bits,
 *   inner_normalisation, monotonicity, subnormal_inputs,
 *   subnormal_outputs, subnormal_accumulator, tf32_conversion, zero_exponent. */
#ifndef ULPSCOPE_KERNELS_PROBE_PROBE_FINGERPRINT_H
#define ULPSCOPE_KERNELS_PROBE_PROBE_FINGERPRINT_H

#include <stdint.h>
#include <stdio.h>

#include "precision/mma.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PROBE_MAX_K 64

typedef struct {
    const char *route;   /* "mma.sync", "wgmma", "tcgen05" */
    prec_format in, out;
    int k;               /* products per dot product: the instruction's K */
} probe_target;

/* Runs n dot products on a target: a and b are n*k packed elements of
 * t->in (mma_store layout, row i at i*k), c and d are bits of t->out.
 * Returns 0, or -1 with a message in err. */
typedef int (*probe_run_fn)(void *ctx, const probe_target *t, int n, const void *a, const void *b,
                            const uint32_t *c, uint32_t *d, char *err, size_t err_len);

typedef struct {
    const char *source; /* "gpu" or "model:h100" */
    probe_run_fn run;
    void *ctx;
} probe_exec;

/* The model as an executor: ctx is the generation name ("a100"). */
int probe_model_run(void *ctx, const probe_target *t, int n, const void *a, const void *b,
                    const uint32_t *c, uint32_t *d, char *err, size_t err_len);

/* The targets a model generation offers (NULL-terminated route list order:
 * mma.sync first).  Fills up to max; returns the count. */
int probe_model_targets(const char *gen, probe_target *out, int max);

/* Run every property on one target and write its records.  Returns the
 * number of records written, or -1 with err set (an executor failure). */
int probe_fingerprint_target(FILE *fp, const probe_exec *ex, const probe_target *t, char *err, size_t err_len);

/* The fingerprint a model predicts: header + records for every target of
 * gen.  Returns 0 or -1 (err). */
int probe_fingerprint_model(FILE *fp, const char *gen, char *err, size_t err_len);

/* Accumulation error against K for fp8 inputs through a model's fp8 route,
 * with no promotion (one accumulator chain) and with promotion of the
 * partial sum into an fp32 accumulator every `interval` products
 * (DeepSeek-V3 sec. 3.3.2 uses 128).  Random normal inputs rounded to the
 * format (seeded), dots per K; records "accum".  Returns 0 or -1 (err). */
int probe_accum_sweep_model(FILE *fp, const char *gen, int interval, int dots, uint64_t seed,
                            char *err, size_t err_len);

/* The error measure of one dot product: |d - exact| / sum |a_i b_i|. */
double probe_dot_error(int k, const double *a, const double *b, double d);

/* Compare two fingerprint files property by property; prints a table to out.
 * Returns 0, or -1 with err naming the file and line that is not a
 * fingerprint. */
int probe_fingerprint_diff(FILE *out, const char *path_a, const char *path_b, char *err, size_t err_len);

/* Print the property records of the fingerprint read from `in` as a table
 * (closes in).  Returns 0 or -1 (err). */
int probe_fingerprint_table(FILE *out, FILE *in, char *err, size_t err_len);

/* Helpers shared with the GPU report (probe_report.c). */
void probe_json_target(FILE *fp, const char *record, const probe_target *t);
/* Find a, b of format f with a*b == p exactly (both normal when possible).
 * Returns 0, or -1 when no such pair exists. */
int probe_split_product(prec_format f, double p, double *a, double *b);

#ifdef __cplusplus
}
#endif
#endif
