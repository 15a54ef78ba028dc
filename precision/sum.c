/* precision/sum.c — see sum.h.
 *
 * Every rounded operation goes through op_add / op_mul / op_fma, which draw
 * one 64-bit random word per rounding under stochastic rounding (so a seed
 * fixes the result) and keep the statistics.  Round to nearest even in fp64,
 * and in fp32 when both operands are floats, runs on the hardware: the same
 * single correct rounding, many times faster than the emulation. */
#include "precision/sum.h"

#include <math.h>
#include <strings.h>

static const char *const algo_names[PREC_SUM_NALGOS] = {
    "recursive", "pairwise", "kahan", "neumaier", "blocked", "wide",
};

const char *prec_sum_algo_name(prec_sum_algo a)
{
    return (unsigned)a < PREC_SUM_NALGOS ? algo_names[a] : "?";
}

const char *prec_sum_algo_names(void) { return "recursive, pairwise, kahan, neumaier, blocked, wide"; }

int prec_sum_algo_parse(const char *name, prec_sum_algo *out)
{
    if (!name) return -1;
    for (int a = 0; a < PREC_SUM_NALGOS; a++) {
        if (strcasecmp(name, algo_names[a]) == 0) {
            *out = (prec_sum_algo)a;
            return 0;
        }
    }
    return -1;
}

prec_sum_config prec_sum_config_default(prec_format acc)
{
    prec_sum_config c = {PREC_SUM_RECURSIVE, acc, acc, PREC_ROUNDING_RNE, 32, PREC_FP32, NULL};
    return c;
}

bool prec_format_contains(prec_format outer, prec_format inner)
{
    const prec_format_info *o = prec_format_get(outer), *i = prec_format_get(inner);
    if (!o || !i) return false;
    return i->precision <= o->precision && i->max_finite <= o->max_finite &&
           i->min_subnormal >= o->min_subnormal && (!i->has_infinity || o->has_infinity);
}

enum { NATIVE_NONE, NATIVE_FP64, NATIVE_FP32 };

typedef struct {
    prec_format f;
    prec_rounding r;
    prec_rng *rng;
    prec_sum_stats *stats;
    int native;
} op_ctx;

static void ctx_init(op_ctx *c, prec_format f, prec_rounding r, prec_rng *rng, prec_rng *own,
                     prec_sum_stats *stats)
{
    c->f = f;
    c->r = r;
    if (!rng) {
        prec_rng_seed(own, 0);
        rng = own;
    }
    c->rng = rng;
    c->stats = stats;
    c->native = NATIVE_NONE;
    if (r.mode == PREC_RNE && r.overflow == PREC_OVF_IEEE && !r.flush_subnormals) {
        if (f == PREC_FP64) c->native = NATIVE_FP64;
        if (f == PREC_FP32) c->native = NATIVE_FP32;
    }
}

static inline uint64_t draw(op_ctx *c) { return c->r.mode == PREC_SR ? prec_rng_next(c->rng) : 0; }

static inline bool is_float(double x) { return (double)(float)x == x || isnan(x); }

/* One rounded addition; counts it when counted is true (compensation steps
 * are not counted). */
static inline double op_add_counted(op_ctx *c, double a, double b, bool counted)
{
    double s;
    if (c->native == NATIVE_FP64) s = a + b;
    else if (c->native == NATIVE_FP32 && is_float(a) && is_float(b)) s = (double)((float)a + (float)b);
    else s = prec_add(a, b, c->f, c->r, draw(c));
    if (c->stats) {
        if (counted) {
            c->stats->additions++;
            if (b != 0.0 && s == a) c->stats->stagnant++;
        }
        if (!isfinite(s)) c->stats->nonfinite = true;
    }
    return s;
}

static inline double op_add(op_ctx *c, double a, double b) { return op_add_counted(c, a, b, true); }
static inline double op_add_aux(op_ctx *c, double a, double b) { return op_add_counted(c, a, b, false); }

static inline double op_round(op_ctx *c, double x)
{
    double y = prec_round(x, c->f, c->r, draw(c));
    if (c->stats && !isfinite(y)) c->stats->nonfinite = true;
    return y;
}

static double sum_recursive(op_ctx *c, const double *x, size_t n)
{
    double s = x[0];
    for (size_t i = 1; i < n; i++) s = op_add(c, s, x[i]);
    return s;
}

/* [0, ceil(n/2)) + [ceil(n/2), n): depth ceil(log2 n). */
static double sum_pairwise(op_ctx *c, const double *x, size_t n)
{
    if (n == 1) return x[0];
    if (n == 2) return op_add(c, x[0], x[1]);
    size_t half = (n + 1) / 2;
    double left = sum_pairwise(c, x, half);
    double right = sum_pairwise(c, x + half, n - half);
    return op_add(c, left, right);
}

static double sum_blocked(op_ctx *c, const double *x, size_t n, size_t b)
{
    double total = 0.0;
    for (size_t start = 0; start < n; start += b) {
        size_t len = n - start < b ? n - start : b;
        double block = sum_recursive(c, x + start, len);
        total = start == 0 ? block : op_add(c, total, block);
    }
    return total;
}

/* Kahan (Higham 2002, Alg. 4.2): s = x1, c = 0; for k >= 2:
 * y = x_k - c; t = s + y; c = (t - s) - y; s = t. */
static double sum_kahan(op_ctx *c, const double *x, size_t n, bool round_addends)
{
    double s = round_addends ? op_round(c, x[0]) : x[0];
    double comp = 0.0;
    for (size_t i = 1; i < n; i++) {
        double xi = round_addends ? op_round(c, x[i]) : x[i];
        double y = op_add_aux(c, xi, -comp);
        double t = op_add(c, s, y);
        comp = op_add_aux(c, op_add_aux(c, t, -s), -y);
        s = t;
    }
    return s;
}

/* Neumaier: t = s + x_k, its exact error by Fast2Sum with the larger operand
 * first, errors summed apart and added once at the end. */
static double sum_neumaier(op_ctx *c, const double *x, size_t n, bool round_addends)
{
    double s = round_addends ? op_round(c, x[0]) : x[0];
    double comp = 0.0;
    for (size_t i = 1; i < n; i++) {
        double xi = round_addends ? op_round(c, x[i]) : x[i];
        double t = op_add(c, s, xi);
        double err = fabs(s) >= fabs(xi) ? op_add_aux(c, op_add_aux(c, s, -t), xi)
                                         : op_add_aux(c, op_add_aux(c, xi, -t), s);
        comp = op_add_aux(c, comp, err);
        s = t;
    }
    return op_add_aux(c, s, comp);
}

double prec_sum(const double *x, size_t n, const prec_sum_config *cfg, prec_sum_stats *stats)
{
    if (stats) *stats = (prec_sum_stats){0, 0, false};
    if (!prec_format_get(cfg->acc) || (unsigned)cfg->algo >= PREC_SUM_NALGOS) return NAN;
    if (cfg->algo == PREC_SUM_WIDE && !prec_format_get(cfg->wide)) return NAN;
    if (n == 0) return 0.0;
    prec_rng own;
    op_ctx c;
    ctx_init(&c, cfg->algo == PREC_SUM_WIDE ? cfg->wide : cfg->acc, cfg->rounding, cfg->rng, &own, stats);
    if (n == 1) {
        c.f = cfg->acc;
        return op_round(&c, x[0]);
    }
    bool round_addends = !prec_format_contains(cfg->acc, cfg->addend);
    switch (cfg->algo) {
    case PREC_SUM_RECURSIVE: return sum_recursive(&c, x, n);
    case PREC_SUM_PAIRWISE: return sum_pairwise(&c, x, n);
    case PREC_SUM_KAHAN: return sum_kahan(&c, x, n, round_addends);
    case PREC_SUM_NEUMAIER: return sum_neumaier(&c, x, n, round_addends);
    case PREC_SUM_BLOCKED: return sum_blocked(&c, x, n, cfg->block ? cfg->block : 32);
    case PREC_SUM_WIDE: {
        double s = sum_recursive(&c, x, n);
        op_ctx out;
        ctx_init(&out, cfg->acc, cfg->rounding, c.rng, &own, stats);
        return op_round(&out, s);
    }
    default: return NAN;
    }
}

void prec_round_array(double *out, const double *x, size_t n, prec_format f, prec_rounding r, prec_rng *rng)
{
    prec_rng own;
    if (!rng) {
        prec_rng_seed(&own, 0);
        rng = &own;
    }
    for (size_t i = 0; i < n; i++) out[i] = prec_round(x[i], f, r, r.mode == PREC_SR ? prec_rng_next(rng) : 0);
}

double prec_dot(const double *x, const double *y, size_t n, const prec_dot_config *cfg)
{
    if (!prec_format_get(cfg->acc)) return NAN;
    if (n == 0) return 0.0;
    prec_rng own;
    op_ctx c;
    ctx_init(&c, cfg->acc, cfg->rounding, cfg->rng, &own, NULL);
    double s = prec_mul(x[0], y[0], c.f, c.r, draw(&c));
    for (size_t i = 1; i < n; i++) {
        if (cfg->fma) s = prec_fma(x[i], y[i], s, c.f, c.r, draw(&c));
        else s = op_add(&c, s, prec_mul(x[i], y[i], c.f, c.r, draw(&c)));
    }
    return s;
}
