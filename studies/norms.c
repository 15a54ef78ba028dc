/* studies/norms.c — see norms.h.
 *
 * Every arithmetic operation of a variant goes through one of the helpers
 * below, each an exact operation rounded once into the format named at the
 * call: that is what makes "statistics in fp32, normalisation in bf16" a
 * precise statement rather than a C type. */
#include "studies/norms.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "precision/rng.h"
#include "reference/layernorm.h"
#include "reference/rmsnorm.h"

/* ---- names ------------------------------------------------------------------ */

static const char *const norm_names[NORMS_NNORMS] = {"layernorm", "rmsnorm"};
static const char *const variance_names[NORMS_NVARIANCES] = {"onepass", "twopass", "welford", "sumsq"};
static const char *const acc_names[NORMS_NACCS] = {"storage", "fp32"};
static const char *const upcast_names[NORMS_NUPCASTS] = {"none", "llama", "gemma"};
static const char *const pass_names[NORMS_NPASSES] = {"fwd", "bwd"};
static const char *const data_names[NORMS_NDATA] = {"normal", "outliers", "large"};

static const char *name_of(const char *const *names, int n, int i) { return i >= 0 && i < n ? names[i] : "?"; }

static int parse_name(const char *const *names, int n, const char *s, int *out)
{
    for (int i = 0; s && i < n; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = i;
            return 0;
        }
    return -1;
}

const char *norms_norm_name(norms_norm v) { return name_of(norm_names, NORMS_NNORMS, v); }
const char *norms_variance_name(norms_variance v) { return name_of(variance_names, NORMS_NVARIANCES, v); }
const char *norms_acc_name(norms_acc v) { return name_of(acc_names, NORMS_NACCS, v); }
const char *norms_upcast_name(norms_upcast v) { return name_of(upcast_names, NORMS_NUPCASTS, v); }
const char *norms_pass_name(norms_pass v) { return name_of(pass_names, NORMS_NPASSES, v); }
const char *norms_data_name(norms_data v) { return name_of(data_names, NORMS_NDATA, v); }

#define PARSER(fn, type, names, n)                                                                 \
    int fn(const char *s, type *out)                                                               \
    {                                                                                              \
        int i;                                                                                     \
        if (parse_name(names, n, s, &i)) return -1;                                                \
        *out = (type)i;                                                                            \
        return 0;                                                                                  \
    }
PARSER(norms_norm_parse, norms_norm, norm_names, NORMS_NNORMS)
PARSER(norms_variance_parse, norms_variance, variance_names, NORMS_NVARIANCES)
PARSER(norms_acc_parse, norms_acc, acc_names, NORMS_NACCS)
PARSER(norms_upcast_parse, norms_upcast, upcast_names, NORMS_NUPCASTS)
PARSER(norms_pass_parse, norms_pass, pass_names, NORMS_NPASSES)
PARSER(norms_data_parse, norms_data, data_names, NORMS_NDATA)

bool norms_format_supported(prec_format f)
{
    return f == PREC_FP32 || f == PREC_BF16 || f == PREC_FP16 || f == PREC_E4M3 || f == PREC_E5M2;
}

/* ---- emulated arithmetic: exact result, one rounding into f --------------- */

/* prec_rne(x, f) for a double x, fast.  The study rounds ~10^8 values, and
 * the general rounding (any mode, any overflow rule, a low part) costs
 * ~60 ns; here the common case (x normal in f and not above f's largest
 * value) is done on the bits: add half an ulp of f minus one, plus the
 * last kept bit (ties to even), and clear the dropped bits; a carry into
 * the exponent is the correct result.  fp32 uses the hardware conversion,
 * itself round-to-nearest-even with IEEE overflow and subnormals.  Every
 * other case goes to prec_rne.  tests/test_norms_study.c checks the two
 * agree on edge cases and random values in every study format. */
static double round_rne(double x, prec_format f)
{
    if (f == PREC_FP32) return (double)(float)x;
    const prec_format_info *fi = prec_format_get(f);
    double ax = fabs(x);
    if (!(ax >= fi->min_normal && ax <= fi->max_finite)) return prec_rne(x, f);
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    int drop = 53 - fi->precision;
    uint64_t keep_lsb = (bits >> drop) & 1;
    bits += ((uint64_t)1 << (drop - 1)) - 1 + keep_lsb;
    bits &= ~(((uint64_t)1 << drop) - 1);
    double r;
    memcpy(&r, &bits, sizeof r);
    return r;
}

double norms_round_rne(double x, prec_format f) { return round_rne(x, f); }

static inline double rnd(double x, prec_format f) { return round_rne(x, f); }

/* a + b rounded once: fast when the double sum is exact (TwoSum error 0). */
static inline double add(double a, double b, prec_format f)
{
    double s = a + b, bb = s - a, err = (a - (s - bb)) + (b - bb);
    if (err == 0.0 && isfinite(s)) return round_rne(s, f);
    return prec_add(a, b, f, PREC_ROUNDING_RNE, 0);
}
static inline double sub(double a, double b, prec_format f) { return add(a, -b, f); }

/* a * b rounded once: fast when the double product is exact (fma residual 0;
 * always the case for values of formats up to fp32). */
static inline double mul(double a, double b, prec_format f)
{
    double p = a * b;
    if (isfinite(p) && p != 0.0 && fma(a, b, -p) == 0.0) return round_rne(p, f);
    return prec_mul(a, b, f, PREC_ROUNDING_RNE, 0);
}

/* a / b rounded once: q = RN(a/b) in double, the exact remainder a - q b by
 * fma, and its quotient as the low part that decides ties and directions. */
static double divide(double a, double b, prec_format f)
{
    double q = a / b;
    if (!isfinite(q) || b == 0.0) return rnd(q, f);
    double r = fma(-q, b, a);
    if (r == 0.0) return round_rne(q, f);
    return prec_round2(q, r / b, f, PREC_ROUNDING_RNE, 0);
}

/* 1/sqrt(v) in f (see the header on the double rounding). */
static inline double rsqrt(double v, prec_format f) { return rnd(1.0 / sqrt(v), f); }

/* ---- the formats a variant uses -------------------------------------------- */

typedef struct {
    prec_format store;  /* F: inputs and outputs */
    prec_format acc;    /* every reduction's accumulator */
    prec_format stat;   /* mean, variance, rstd */
    prec_format norm;   /* x - mean, times rstd */
    prec_format gain;   /* gamma times xhat (+ beta), gamma times dy */
    bool cast_xhat;     /* llama: xhat rounded to F before the gain */
    bool centered;      /* LayerNorm subtracts the mean, RMSNorm does not */
} formats;

static formats formats_of(const norms_variant *v)
{
    formats fm;
    fm.store = v->format;
    fm.acc = v->acc == NORMS_ACC_FP32 ? PREC_FP32 : v->format;
    bool up = v->upcast != NORMS_UPCAST_NONE;
    fm.stat = up ? PREC_FP32 : v->format;
    fm.norm = up ? PREC_FP32 : v->format;
    fm.gain = v->upcast == NORMS_UPCAST_GEMMA ? PREC_FP32 : v->format;
    fm.cast_xhat = v->upcast == NORMS_UPCAST_LLAMA;
    fm.centered = v->norm == NORMS_LAYERNORM;
    return fm;
}

/* Row statistics: mean (0 for RMSNorm) and rstd in fm.stat.  Returns false
 * when a statistic is not finite. */
static bool row_stats(const norms_variant *v, const formats *fm, const double *x, long n, double eps,
                      double *mean_out, double *rstd_out)
{
    prec_format A = fm->acc;
    long terms = v->drop_term ? n - 1 : n;
    double mean = 0.0, var;
    switch (v->norm == NORMS_RMSNORM ? NORMS_SUMSQ : v->variance) {
    case NORMS_ONEPASS: {
        double s1 = 0.0, s2 = 0.0;
        for (long j = 0; j < terms; j++) {
            s1 = add(s1, x[j], A);
            s2 = add(s2, mul(x[j], x[j], A), A);
        }
        mean = divide(s1, (double)n, A);
        var = sub(divide(s2, (double)n, A), mul(mean, mean, A), A);
        if (var < 0.0) var = 0.0; /* cancellation can make it negative; kernels clamp */
        break;
    }
    case NORMS_TWOPASS: {
        double s1 = 0.0, s2 = 0.0;
        for (long j = 0; j < terms; j++) s1 = add(s1, x[j], A);
        mean = divide(s1, (double)n, A);
        for (long j = 0; j < terms; j++) {
            double d = sub(x[j], mean, A);
            s2 = add(s2, mul(d, d, A), A);
        }
        var = divide(s2, (double)n, A);
        break;
    }
    case NORMS_WELFORD: {
        double m2 = 0.0;
        for (long k = 0; k < terms; k++) {
            double delta = sub(x[k], mean, A);
            mean = add(mean, divide(delta, (double)(k + 1), A), A);
            m2 = add(m2, mul(delta, sub(x[k], mean, A), A), A);
        }
        var = divide(m2, (double)n, A);
        break;
    }
    default: { /* sumsq: RMSNorm's mean of squares */
        double s2 = 0.0;
        for (long j = 0; j < terms; j++) s2 = add(s2, mul(x[j], x[j], A), A);
        var = divide(s2, (double)n, A);
        break;
    }
    }
    *mean_out = rnd(mean, fm->stat);
    double var_stat = rnd(var, fm->stat); /* may overflow F even when the accumulator did not */
    *rstd_out = rsqrt(add(var_stat, eps, fm->stat), fm->stat);
    return isfinite(*mean_out) && isfinite(var_stat) && isfinite(*rstd_out);
}

/* xhat_j in fm->norm (not yet cast for llama). */
static inline double normalise(const formats *fm, double x, double mean, double rstd)
{
    double centered = fm->centered ? sub(x, mean, fm->norm) : x;
    return mul(centered, rstd, fm->norm);
}

long norms_forward(const norms_variant *v, const norms_inputs *in, double eps, double *y)
{
    formats fm = formats_of(v);
    long bad_rows = 0, n = in->width;
    for (long r = 0; r < in->rows; r++) {
        const double *x = in->x + r * n;
        double mean, rstd;
        bad_rows += !row_stats(v, &fm, x, n, eps, &mean, &rstd);
        for (long j = 0; j < n; j++) {
            double xh = normalise(&fm, x[j], mean, rstd);
            if (fm.cast_xhat) xh = rnd(xh, fm.store);
            double t = mul(in->gamma[j], xh, fm.gain);
            if (fm.centered) t = add(t, in->beta[j], fm.gain);
            y[r * n + j] = rnd(t, fm.store);
        }
    }
    return bad_rows;
}

/* Backward, per row, with g = gamma dy and means over the row:
 *   dx = rstd (g - mean(g) - xhat mean(g xhat))      (RMSNorm: no mean(g))
 * the row sums in the accumulator, the elementwise part in fm.norm (the
 * format the forward normalised in), one cast to F at the end.  dgamma and
 * dbeta sum over rows in the accumulator: dy times the xhat the gain saw. */
long norms_backward(const norms_variant *v, const norms_inputs *in, double eps, double *dx,
                    double *dgamma, double *dbeta)
{
    formats fm = formats_of(v);
    prec_format A = fm.acc;
    long bad_rows = 0, n = in->width, rows = in->rows;
    long terms = v->drop_term ? n - 1 : n, row_terms = v->drop_term ? rows - 1 : rows;
    double *xh = malloc((size_t)n * sizeof *xh), *g = malloc((size_t)n * sizeof *g);
    double *gsum = calloc((size_t)n, sizeof *gsum), *bsum = calloc((size_t)n, sizeof *bsum);
    if (!xh || !g || !gsum || !bsum) {
        free(xh), free(g), free(gsum), free(bsum);
        return -1;
    }
    for (long r = 0; r < rows; r++) {
        const double *x = in->x + r * n, *dy = in->dy + r * n;
        double mean, rstd;
        bool ok = row_stats(v, &fm, x, n, eps, &mean, &rstd);
        double sum_g = 0.0, sum_gx = 0.0;
        for (long j = 0; j < n; j++) {
            xh[j] = normalise(&fm, x[j], mean, rstd);
            g[j] = mul(in->gamma[j], dy[j], fm.gain);
            if (j < terms) {
                sum_g = add(sum_g, g[j], A);
                sum_gx = add(sum_gx, mul(g[j], xh[j], fm.norm), A);
            }
            if (r < row_terms) {
                double xh_gain = fm.cast_xhat ? rnd(xh[j], fm.store) : xh[j];
                gsum[j] = add(gsum[j], mul(dy[j], xh_gain, fm.gain), A);
                bsum[j] = add(bsum[j], dy[j], A);
            }
        }
        double mean_g = divide(sum_g, (double)n, A), mean_gx = divide(sum_gx, (double)n, A);
        ok = ok && isfinite(mean_g) && isfinite(mean_gx);
        bad_rows += !ok;
        for (long j = 0; j < n; j++) {
            double t = fm.centered ? sub(g[j], mean_g, fm.norm) : g[j];
            t = sub(t, mul(xh[j], mean_gx, fm.norm), fm.norm);
            dx[r * n + j] = rnd(mul(t, rstd, fm.norm), fm.store);
        }
    }
    for (long j = 0; j < n; j++) {
        dgamma[j] = rnd(gsum[j], fm.store);
        if (dbeta) dbeta[j] = rnd(bsum[j], fm.store);
    }
    free(xh), free(g), free(gsum), free(bsum);
    return bad_rows;
}

/* ---- inputs ----------------------------------------------------------------- */

static uint64_t case_seed(const norms_case *c)
{
    uint64_t h = c->seed ^ 0x6e6f726d73ull; /* "norms" */
    uint64_t ratio_bits;
    memcpy(&ratio_bits, &c->mean_over_std, sizeof ratio_bits);
    uint64_t parts[4] = {(uint64_t)c->rows, (uint64_t)c->width, ratio_bits, (uint64_t)c->data};
    for (int i = 0; i < 4; i++) {
        h ^= parts[i];
        h = prec_splitmix64(&h);
    }
    return h;
}

int norms_inputs_make(const norms_case *c, prec_format f, norms_inputs *in)
{
    long rows = c->rows, n = c->width, total = rows * n;
    memset(in, 0, sizeof *in);
    in->rows = rows;
    in->width = n;
    in->format = f;
    in->x = malloc((size_t)total * sizeof *in->x);
    in->dy = malloc((size_t)total * sizeof *in->dy);
    in->gamma = malloc((size_t)n * sizeof *in->gamma);
    in->beta = malloc((size_t)n * sizeof *in->beta);
    if (!in->x || !in->dy || !in->gamma || !in->beta) {
        norms_inputs_free(in);
        return -1;
    }
    prec_rng rng;
    prec_rng_seed(&rng, case_seed(c));
    /* unscaled values first (the same for every format), then one scale */
    double magnitude = c->data == NORMS_DATA_LARGE ? 512.0 : 1.0, biggest = 0.0;
    for (long i = 0; i < total; i++) {
        double z = prec_rng_normal(&rng);
        /* outlier channels: fixed columns, as in LLM activations */
        bool outlier = c->data == NORMS_DATA_OUTLIERS && (i % n) % 64 == 0;
        double v = outlier ? c->mean_over_std + (z < 0 ? -100.0 : 100.0)
                           : c->mean_over_std + z;
        in->x[i] = magnitude * v;
        if (fabs(in->x[i]) > biggest) biggest = fabs(in->x[i]);
    }
    for (long i = 0; i < total; i++) in->dy[i] = rnd(prec_rng_normal(&rng), f);
    for (long j = 0; j < n; j++) in->gamma[j] = rnd(1.0 + 0.1 * prec_rng_normal(&rng), f);
    for (long j = 0; j < n; j++) in->beta[j] = rnd(0.1 * prec_rng_normal(&rng), f);
    double s = 1.0, limit = prec_format_get(f)->max_finite / 2;
    while (s * biggest > limit) s *= 0.5;
    in->scale = s;
    for (long i = 0; i < total; i++) in->x[i] = rnd(s * in->x[i], f);
    return 0;
}

void norms_inputs_free(norms_inputs *in)
{
    free(in->x), free(in->dy), free(in->gamma), free(in->beta);
    memset(in, 0, sizeof *in);
}

/* ---- reference and errors --------------------------------------------------- */

void norms_reference_free(norms_reference *ref)
{
    free(ref->y), free(ref->dx), free(ref->dgamma), free(ref->dbeta);
    free(ref->s_y), free(ref->s_dx), free(ref->s_dgamma), free(ref->s_dbeta);
    memset(ref, 0, sizeof *ref);
}

int norms_reference_make(norms_norm which, const norms_inputs *in, double eps, bool backward,
                         norms_reference *ref)
{
    long rows = in->rows, n = in->width, total = rows * n;
    memset(ref, 0, sizeof *ref);
    ref->rows = rows;
    ref->width = n;
    bool ln = which == NORMS_LAYERNORM;
    double *xhat = malloc((size_t)total * sizeof *xhat), *rstd = malloc((size_t)rows * sizeof *rstd);
    ref->y = malloc((size_t)total * sizeof *ref->y);
    ref->s_y = malloc((size_t)total * sizeof *ref->s_y);
    if (backward) {
        ref->dx = malloc((size_t)total * sizeof *ref->dx);
        ref->s_dx = malloc((size_t)total * sizeof *ref->s_dx);
        ref->dgamma = malloc((size_t)n * sizeof *ref->dgamma);
        ref->s_dgamma = calloc((size_t)n, sizeof *ref->s_dgamma);
        ref->dbeta = malloc((size_t)n * sizeof *ref->dbeta);
        ref->s_dbeta = calloc((size_t)n, sizeof *ref->s_dbeta);
    }
    if (!xhat || !rstd || !ref->y || !ref->s_y ||
        (backward && (!ref->dx || !ref->s_dx || !ref->dgamma || !ref->s_dgamma || !ref->dbeta ||
                      !ref->s_dbeta))) {
        free(xhat), free(rstd);
        norms_reference_free(ref);
        return -1;
    }
    ref_ctx ctx = REF_CTX_DEFAULT;
    if (ln) {
        ref_layernorm_forward(&ctx, rows, n, in->x, in->gamma, in->beta, eps, ref->y, NULL, NULL);
        ref_layernorm_forward(&ctx, rows, n, in->x, NULL, NULL, eps, xhat, NULL, rstd);
    } else {
        ref_rmsnorm_forward(&ctx, rows, n, in->x, in->gamma, eps, ref->y, NULL);
        ref_rmsnorm_forward(&ctx, rows, n, in->x, NULL, eps, xhat, rstd);
    }
    for (long i = 0; i < total; i++) {
        long j = i % n;
        ref->s_y[i] = fabs(in->gamma[j]) * (1.0 + fabs(xhat[i])) + (ln ? fabs(in->beta[j]) : 0.0);
    }
    if (backward) {
        if (ln)
            ref_layernorm_backward(&ctx, rows, n, in->x, in->gamma, in->dy, eps, ref->dx, ref->dgamma,
                                   ref->dbeta);
        else
            ref_rmsnorm_backward(&ctx, rows, n, in->x, in->gamma, in->dy, eps, ref->dx, ref->dgamma);
        for (long r = 0; r < rows; r++) {
            double mean_abs_g = 0.0, mean_abs_gx = 0.0;
            for (long j = 0; j < n; j++) {
                double g = fabs(in->gamma[j] * in->dy[r * n + j]);
                mean_abs_g += g / (double)n;
                mean_abs_gx += g * fabs(xhat[r * n + j]) / (double)n;
            }
            for (long j = 0; j < n; j++) {
                long i = r * n + j;
                double g = fabs(in->gamma[j] * in->dy[i]);
                ref->s_dx[i] = rstd[r] * (g + (ln ? mean_abs_g : 0.0) + fabs(xhat[i]) * mean_abs_gx);
                ref->s_dgamma[j] += fabs(in->dy[i]) * (1.0 + fabs(xhat[i]));
                ref->s_dbeta[j] += fabs(in->dy[i]);
            }
        }
    }
    ref->unproven = ctx.unproven;
    free(xhat), free(rstd);
    return 0;
}

norms_error norms_compare(const double *got, const double *ref, const double *scale, long n, double u)
{
    norms_error e = {n, 0.0, 0.0, 0, -1};
    double sum_sq = 0.0;
    for (long i = 0; i < n; i++) {
        double err;
        if (!isfinite(got[i])) {
            e.nonfinite++;
            err = INFINITY;
        } else if (scale[i] > 0.0) {
            err = fabs(got[i] - ref[i]) / (u * scale[i]);
        } else {
            err = got[i] == ref[i] ? 0.0 : INFINITY;
        }
        if (err > e.max_err_u || e.worst_index < 0) {
            e.max_err_u = err;
            e.worst_index = i;
        }
        sum_sq += err * err;
    }
    e.rms_err_u = n > 0 ? sqrt(sum_sq / (double)n) : 0.0;
    return e;
}

/* ---- the grid ---------------------------------------------------------------- */

static int run_variant(const norms_plan *plan, const norms_variant *v, const norms_case *c,
                       const norms_inputs *in, const norms_reference *ref,
                       void (*emit)(const norms_record *, void *), void *arg)
{
    long total = in->rows * in->width, n = in->width;
    double u = prec_format_get(v->format)->unit_roundoff;
    norms_record rec = {*v, *c, NORMS_FWD, "y", in->scale, {0}, 0, ref->unproven};
    if (plan->passes[NORMS_FWD]) {
        double *y = malloc((size_t)total * sizeof *y);
        if (!y) return -1;
        rec.stats_nonfinite = norms_forward(v, in, c->eps, y);
        rec.err = norms_compare(y, ref->y, ref->s_y, total, u);
        emit(&rec, arg);
        free(y);
    }
    if (plan->passes[NORMS_BWD]) {
        double *dx = malloc((size_t)total * sizeof *dx), *dg = malloc((size_t)n * sizeof *dg);
        double *db = malloc((size_t)n * sizeof *db);
        long bad = (!dx || !dg || !db) ? -1 : norms_backward(v, in, c->eps, dx, dg, v->norm == NORMS_LAYERNORM ? db : NULL);
        if (bad < 0) {
            free(dx), free(dg), free(db);
            return -1;
        }
        rec.pass = NORMS_BWD;
        rec.stats_nonfinite = bad;
        rec.output = "dx";
        rec.err = norms_compare(dx, ref->dx, ref->s_dx, total, u);
        emit(&rec, arg);
        rec.output = "dgamma";
        rec.err = norms_compare(dg, ref->dgamma, ref->s_dgamma, n, u);
        emit(&rec, arg);
        if (v->norm == NORMS_LAYERNORM) {
            rec.output = "dbeta";
            rec.err = norms_compare(db, ref->dbeta, ref->s_dbeta, n, u);
            emit(&rec, arg);
        }
        free(dx), free(dg), free(db);
    }
    return 0;
}

int norms_run(const norms_plan *plan, void (*emit)(const norms_record *r, void *arg), void *arg)
{
    for (int nm = 0; nm < NORMS_NNORMS; nm++) {
        if (!plan->norms[nm]) continue;
        for (long ci = 0; ci < plan->ncases; ci++) {
            const norms_case *c = &plan->cases[ci];
            for (int f = 0; f < PREC_NFORMATS; f++) {
                if (!plan->formats[f] || !norms_format_supported((prec_format)f)) continue;
                norms_inputs in;
                norms_reference ref;
                if (norms_inputs_make(c, (prec_format)f, &in)) return -1;
                if (norms_reference_make((norms_norm)nm, &in, c->eps, plan->passes[NORMS_BWD], &ref)) {
                    norms_inputs_free(&in);
                    return -1;
                }
                int status = 0;
                for (int var = 0; var < NORMS_NVARIANCES && !status; var++) {
                    /* RMSNorm has only the sum of squares; the filter is LayerNorm's */
                    if (nm == NORMS_RMSNORM ? var != NORMS_SUMSQ
                                            : var == NORMS_SUMSQ || !plan->variances[var])
                        continue;
                    for (int a = 0; a < NORMS_NACCS && !status; a++) {
                        for (int up = 0; up < NORMS_NUPCASTS && !status; up++) {
                            /* fp32 storage: every accumulator and upcast is fp32 */
                            if (f == PREC_FP32 ? (a != NORMS_ACC_FP32 || up != NORMS_UPCAST_NONE)
                                               : (!plan->accs[a] || !plan->upcasts[up]))
                                continue;
                            norms_variant v = {(norms_norm)nm, (prec_format)f, (norms_acc)a,
                                               (norms_variance)var, (norms_upcast)up, false};
                            status = run_variant(plan, &v, c, &in, &ref, emit, arg);
                        }
                    }
                }
                norms_reference_free(&ref);
                norms_inputs_free(&in);
                if (status) return status;
            }
        }
    }
    return 0;
}
