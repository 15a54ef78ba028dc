/* studies/norms.h — the norm-stability study behind `ulpscope norms`.
 *
 * LayerNorm and RMSNorm, forward and backward, computed on the CPU in an
 * emulated storage format F (fp32, bf16, fp16, e4m3, e5m2: every operation
 * rounded once into its format through prec_add / prec_mul), in every
 * combination of
 *   - the variance algorithm (LayerNorm): one pass E[x^2] - E[x]^2 (clamped
 *     at 0, as kernels do), two passes, or Welford; RMSNorm has one, the sum
 *     of squares ("sumsq");
 *   - the accumulator of every reduction: the storage format F or fp32;
 *   - the upcast placement:
 *       none   statistics rounded to F, normalisation and gain in F;
 *       llama  statistics and normalisation in fp32, xhat cast to F before
 *              the gain multiply (LlamaRMSNorm: weight * h.to(input_dtype));
 *       gemma  everything in fp32, one cast to F at the end.
 * For F = fp32 the accumulator and upcast choices coincide, so only
 * (fp32, none) is computed.
 *
 * Each result is compared with the MPFR reference (reference/layernorm.h,
 * reference/rmsnorm.h) computed from the exact stored inputs, and reported
 * in units of F's unit roundoff u, element by element against the output's
 * natural scale (the magnitude its error bound is proportional to):
 *   y:      |gamma_i| (1 + |xhat_i|) + |beta_i|
 *   dx:     rstd (|g_i| + mean|g| + |xhat_i| mean|g xhat|),  g = gamma dy
 *           (RMSNorm: no mean|g| term)
 *   dgamma: sum_r |dy| (1 + |xhat|),   dbeta: sum_r |dy|
 * with xhat and rstd from the reference.  The "1 +" is the unit scale of a
 * normalised value: an error in the mean shifts every xhat by the same
 * absolute amount, so an element whose xhat is near 0 (or a row that
 * rounding in F made constant) is not charged an infinite relative error.  e_i = |got_i - ref_i| / (u s_i);
 * a record holds max_i e_i and sqrt(mean e_i^2) over every element of the
 * output tensor.  A non-finite output (the reference is always finite) is
 * counted in nonfinite and makes max and RMS +inf: never hidden.  Rows whose
 * statistics overflowed or became NaN (an fp16 x^2 > 65504) are counted in
 * stats_nonfinite even when the outputs look finite.
 *
 * Modelling choices, stated once: rsqrt and division are correctly rounded
 * in their format (rsqrt as the double 1/sqrt(v) rounded, a 2^-53 double
 * rounding that is far below every u here); reductions are sequential
 * (recursive summation), the worst ordering a real kernel is close to for
 * one thread's strip; eps is added in the statistics' format. */
#ifndef ULPSCOPE_STUDIES_NORMS_H
#define ULPSCOPE_STUDIES_NORMS_H

#include <stdbool.h>
#include <stdint.h>

#include "precision/format.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { NORMS_LAYERNORM = 0, NORMS_RMSNORM, NORMS_NNORMS } norms_norm;
typedef enum { NORMS_ONEPASS = 0, NORMS_TWOPASS, NORMS_WELFORD, NORMS_SUMSQ, NORMS_NVARIANCES } norms_variance;
typedef enum { NORMS_ACC_STORAGE = 0, NORMS_ACC_FP32, NORMS_NACCS } norms_acc;
typedef enum { NORMS_UPCAST_NONE = 0, NORMS_UPCAST_LLAMA, NORMS_UPCAST_GEMMA, NORMS_NUPCASTS } norms_upcast;
typedef enum { NORMS_FWD = 0, NORMS_BWD, NORMS_NPASSES } norms_pass;
/* normal:   x = s (ratio + z), z standard normal (ratio = mean/std)
 * outliers: the same, with columns 0, 64, 128, ... at s (ratio +- 100)
 * large:    the same scaled by 512, so that x^2 (~2.6e5) overflows fp16
 * s = 1, or the largest power of two keeping the row inside F's range. */
typedef enum { NORMS_DATA_NORMAL = 0, NORMS_DATA_OUTLIERS, NORMS_DATA_LARGE, NORMS_NDATA } norms_data;

const char *norms_norm_name(norms_norm n);          /* "layernorm", "rmsnorm" */
const char *norms_variance_name(norms_variance v);  /* "onepass", "twopass", "welford", "sumsq" */
const char *norms_acc_name(norms_acc a);            /* "storage", "fp32" */
const char *norms_upcast_name(norms_upcast u);      /* "none", "llama", "gemma" */
const char *norms_pass_name(norms_pass p);          /* "fwd", "bwd" */
const char *norms_data_name(norms_data d);          /* "normal", "outliers", "large" */
/* Parsers return 0, or -1 for an unknown name. */
int norms_norm_parse(const char *s, norms_norm *out);
int norms_variance_parse(const char *s, norms_variance *out);
int norms_acc_parse(const char *s, norms_acc *out);
int norms_upcast_parse(const char *s, norms_upcast *out);
int norms_pass_parse(const char *s, norms_pass *out);
int norms_data_parse(const char *s, norms_data *out);

/* One way of computing a norm. */
typedef struct {
    norms_norm norm;
    prec_format format;       /* storage format F */
    norms_acc acc;
    norms_variance variance;  /* NORMS_SUMSQ for RMSNorm */
    norms_upcast upcast;
    bool drop_term;           /* planted bug for the tests' twins: every
                                 reduction leaves out its last term */
} norms_variant;

/* One input case: rows x width values, mean/std ratio, kind of data. */
typedef struct {
    long rows, width;
    double mean_over_std;
    norms_data data;
    uint64_t seed;
    double eps;               /* (double)1e-5f unless changed */
} norms_case;

/* Inputs of a case stored in format F (values of F, as doubles). */
typedef struct {
    long rows, width;
    prec_format format;
    double scale;             /* s above */
    double *x, *dy;           /* [rows][width] */
    double *gamma, *beta;     /* [width] (beta unused by RMSNorm) */
} norms_inputs;

/* Draws the case's inputs (deterministic in seed, width, ratio and data; the
 * same normal draws for every format).  Returns 0, or -1 when out of memory. */
int norms_inputs_make(const norms_case *c, prec_format f, norms_inputs *in);
void norms_inputs_free(norms_inputs *in);

/* The emulated computations.  y, dx: [rows][width]; dgamma, dbeta: [width]
 * (dbeta ignored for RMSNorm).  Return the number of rows whose statistics
 * (mean, variance, rstd, or the backward's row sums) are not finite. */
long norms_forward(const norms_variant *v, const norms_inputs *in, double eps, double *y);
long norms_backward(const norms_variant *v, const norms_inputs *in, double eps, double *dx,
                    double *dgamma, double *dbeta);

/* The MPFR reference of one (norm, inputs) pair and the scales of the
 * errors, for every output. */
typedef struct {
    long rows, width;
    double *y, *dx, *dgamma, *dbeta;                 /* reference values */
    double *s_y, *s_dx, *s_dgamma, *s_dbeta;         /* natural scales (see top) */
    long unproven;                                   /* from ref_ctx: 0 expected */
} norms_reference;

int norms_reference_make(norms_norm n, const norms_inputs *in, double eps, bool backward,
                         norms_reference *ref);
void norms_reference_free(norms_reference *ref);

/* Errors of got[n] against ref[n] with scales s[n], in units of u. */
typedef struct {
    long n;
    double max_err_u, rms_err_u;  /* +inf when any output is non-finite */
    long nonfinite;
    long worst_index;
} norms_error;

norms_error norms_compare(const double *got, const double *ref, const double *scale, long n,
                          double u);

/* One record of the study. */
typedef struct {
    norms_variant variant;
    norms_case kase;
    norms_pass pass;
    const char *output;   /* "y", "dx", "dgamma", "dbeta" */
    double scale;         /* s of the inputs */
    norms_error err;
    long stats_nonfinite;
    long ref_unproven;
} norms_record;

/* Which part of the grid to run (every list non-empty). */
typedef struct {
    bool norms[NORMS_NNORMS];
    bool passes[NORMS_NPASSES];
    bool formats[PREC_NFORMATS];
    bool variances[NORMS_NVARIANCES];
    bool accs[NORMS_NACCS];
    bool upcasts[NORMS_NUPCASTS];
    /* cases: every listed case is run */
    const norms_case *cases;
    long ncases;
} norms_plan;

/* Runs the plan, calling emit for every record in a fixed order (norm,
 * case, format, variant, pass, output): deterministic for a given plan.
 * Returns 0, or -1 when out of memory. */
int norms_run(const norms_plan *plan, void (*emit)(const norms_record *r, void *arg), void *arg);

/* prec_rne(x, f) with a fast path for the common case (exposed for its
 * test): the study's every rounding goes through it. */
double norms_round_rne(double x, prec_format f);

/* The formats the study runs in (the storage formats kernels use). */
bool norms_format_supported(prec_format f);

#ifdef __cplusplus
}
#endif
#endif
