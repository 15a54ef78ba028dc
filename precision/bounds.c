/* precision/bounds.c — see bounds.h for the formulas and their sources. */
#include "precision/bounds.h"

#include <math.h>

double prec_gamma(double n, double u)
{
    if (n <= 0) return 0.0;
    double nu = n * u;
    if (nu >= 1.0) return INFINITY;
    return nu / (1.0 - nu);
}

double prec_bound_unit(prec_format f, prec_round_mode m)
{
    const prec_format_info *fi = prec_format_get(f);
    if (!fi) return NAN;
    return m == PREC_RNE ? fi->unit_roundoff : 2.0 * fi->unit_roundoff;
}

static double ceil_log2(size_t n)
{
    double d = 0;
    for (size_t p = 1; p < n; p <<= 1) d++;
    return d;
}

double prec_sum_depth(const prec_sum_config *cfg, size_t n)
{
    if (n == 0) return 0;
    if (n == 1) return 1; /* the one addend is rounded into acc */
    switch (cfg->algo) {
    case PREC_SUM_PAIRWISE: return ceil_log2(n);
    case PREC_SUM_BLOCKED: {
        size_t b = cfg->block ? cfg->block : 32;
        if (b > n) b = n;
        size_t blocks = (n + b - 1) / b;
        return (double)(b - 1) + (double)(blocks - 1);
    }
    default: return (double)(n - 1);
    }
}

/* The absolute error of one rounding into f that underflows: half the
 * subnormal spacing (a whole one for directed and stochastic rounding), or
 * the smallest normal when subnormals are flushed. */
double prec_bound_eta(prec_format f, prec_rounding r)
{
    const prec_format_info *fi = prec_format_get(f);
    if (!fi) return NAN;
    double step = r.flush_subnormals ? fi->min_normal : fi->min_subnormal;
    return r.mode == PREC_RNE && !r.flush_subnormals ? step / 2 : step;
}

/* Sum of absolute underflow terms: count roundings that may underflow
 * inexactly, each eta, carried through later roundings (factor 1 + g).
 * Additions of two values of a format with subnormals kept are exact when
 * they underflow, so count = 0 when the addends are values of the format. */
static double underflow_term(double count, double eta, double g)
{
    if (count <= 0) return 0.0;
    return count * eta * (1 + g);
}

/* Kahan and Neumaier round addends that are not values of acc first: one
 * more rounding per addend, a relative error u each. */
static double compensated_bound(const prec_sum_config *cfg, size_t n, double u, double sum_abs,
                                double abs_exact)
{
    double extra = prec_format_contains(cfg->acc, cfg->addend) ? 0.0 : u;
    double s_abs = sum_abs * (1 + extra); /* bounds sum |fl(x_i)| */
    double s_exact = abs_exact + extra * sum_abs;
    double b;
    if (cfg->algo == PREC_SUM_NEUMAIER) {
        double g = prec_gamma((double)n - 1, u);
        b = u * s_exact + g * g * s_abs;
    } else {
        double nd = (double)n;
        b = (2 * u + 4 * nd * u * u) * s_abs;
        if (nd * u >= 1) b = INFINITY; /* outside where the expansion means anything */
    }
    return b + extra * sum_abs;
}

/* The error of the wide algorithm given g, the relative factor of its wide
 * recursive sum (worst case or probabilistic). */
static double wide_bound(const prec_sum_config *cfg, size_t n, double g, double sum_abs, double abs_exact)
{
    double u = prec_bound_unit(cfg->acc, cfg->rounding.mode);
    bool wide_exact = prec_format_contains(cfg->wide, cfg->addend) && !cfg->rounding.flush_subnormals;
    double wide_err = g * sum_abs + underflow_term(wide_exact || n < 2 ? 0.0 : (double)n - 1,
                                                   prec_bound_eta(cfg->wide, cfg->rounding), g);
    /* then one rounding of (exact + wide_err) into acc */
    return wide_err + u * (abs_exact + wide_err) + prec_bound_eta(cfg->acc, cfg->rounding);
}

/* Recursive, pairwise, blocked given g, the relative factor for their depth:
 * g S plus the underflow term (n - 1 additions, or the one conversion when
 * n = 1, when the addends are not all values of acc or subnormals flush). */
static double plain_bound(const prec_sum_config *cfg, size_t n, double g, double sum_abs)
{
    bool exact_underflow = prec_format_contains(cfg->acc, cfg->addend) && !cfg->rounding.flush_subnormals;
    double roundings = exact_underflow ? 0.0 : n >= 2 ? (double)n - 1 : 1.0;
    return g * sum_abs + underflow_term(roundings, prec_bound_eta(cfg->acc, cfg->rounding), g);
}

static bool is_compensated(const prec_sum_config *cfg, size_t n)
{
    return n >= 2 && (cfg->algo == PREC_SUM_KAHAN || cfg->algo == PREC_SUM_NEUMAIER);
}

double prec_sum_bound(const prec_sum_config *cfg, size_t n, double sum_abs, double abs_exact)
{
    double u = prec_bound_unit(cfg->acc, cfg->rounding.mode);
    if (n == 0) return 0.0;
    if (isnan(u) || (cfg->algo == PREC_SUM_WIDE && !prec_format_get(cfg->wide))) return NAN;
    if (is_compensated(cfg, n)) {
        if (cfg->rounding.mode != PREC_RNE || cfg->rounding.flush_subnormals) return NAN;
        bool converted = !prec_format_contains(cfg->acc, cfg->addend);
        return compensated_bound(cfg, n, u, sum_abs, abs_exact) +
               underflow_term(converted ? (double)n : 0.0, prec_bound_eta(cfg->acc, cfg->rounding), 2 * u);
    }
    if (cfg->algo == PREC_SUM_WIDE) {
        double uw = prec_bound_unit(cfg->wide, cfg->rounding.mode);
        return wide_bound(cfg, n, n >= 2 ? prec_gamma((double)n - 1, uw) : 0.0, sum_abs, abs_exact);
    }
    return plain_bound(cfg, n, prec_gamma(prec_sum_depth(cfg, n), u), sum_abs);
}

prec_prob_status prec_prob_status_of(prec_round_mode m)
{
    if (m == PREC_RNE) return PREC_PROB_MODEL;
    if (m == PREC_SR) return PREC_PROB_PROVED;
    return PREC_PROB_NONE;
}

const char *prec_prob_status_name(prec_prob_status s)
{
    switch (s) {
    case PREC_PROB_MODEL: return "model";
    case PREC_PROB_PROVED: return "proved";
    default: return "none";
    }
}

double prec_prob_lambda(double m, double fail_prob, double u)
{
    if (m < 1) m = 1;
    return sqrt(2.0 * log(2.0 * m / fail_prob)) / (1.0 - u);
}

double prec_prob_fail(double m, double lambda, double u)
{
    if (m < 1) m = 1;
    double p = 2.0 * m * exp(-lambda * lambda * (1 - u) * (1 - u) / 2.0);
    return p > 1.0 ? 1.0 : p;
}

double prec_gamma_tilde(double p, double lambda, double u)
{
    if (p <= 0) return 0.0;
    return expm1(lambda * sqrt(p) * u + p * u * u / (1.0 - u));
}

double prec_sum_prob_bound(const prec_sum_config *cfg, size_t n, double sum_abs, double abs_exact,
                           double fail_prob)
{
    if (prec_prob_status_of(cfg->rounding.mode) == PREC_PROB_NONE) return NAN;
    if (is_compensated(cfg, n)) return prec_sum_bound(cfg, n, sum_abs, abs_exact);
    double u = prec_bound_unit(cfg->acc, cfg->rounding.mode);
    if (n == 0) return 0.0;
    if (isnan(u) || (cfg->algo == PREC_SUM_WIDE && !prec_format_get(cfg->wide))) return NAN;
    if (cfg->algo == PREC_SUM_WIDE) {
        /* the wide sum is the probabilistic part; the final rounding stays worst case */
        double uw = prec_bound_unit(cfg->wide, cfg->rounding.mode);
        double lambda = prec_prob_lambda((double)n, fail_prob, uw);
        return wide_bound(cfg, n, n >= 2 ? prec_gamma_tilde((double)n - 1, lambda, uw) : 0.0, sum_abs, abs_exact);
    }
    double lambda = prec_prob_lambda((double)n, fail_prob, u);
    return plain_bound(cfg, n, prec_gamma_tilde(prec_sum_depth(cfg, n), lambda, u), sum_abs);
}

/* Products rounded into acc (or FMA results) can underflow inexactly: n of
 * them; with flushed subnormals the additions too. */
static double dot_underflow(const prec_dot_config *cfg, size_t n, double g)
{
    double roundings = (double)n * (cfg->rounding.flush_subnormals && !cfg->fma ? 2 : 1);
    return underflow_term(roundings, prec_bound_eta(cfg->acc, cfg->rounding), g);
}

double prec_dot_bound(const prec_dot_config *cfg, size_t n, double sum_abs_prod)
{
    double u = prec_bound_unit(cfg->acc, cfg->rounding.mode);
    double g = prec_gamma((double)n, u);
    return g * sum_abs_prod + dot_underflow(cfg, n, g);
}

double prec_dot_prob_bound(const prec_dot_config *cfg, size_t n, double sum_abs_prod, double fail_prob)
{
    if (prec_prob_status_of(cfg->rounding.mode) == PREC_PROB_NONE) return NAN;
    double u = prec_bound_unit(cfg->acc, cfg->rounding.mode);
    double g = prec_gamma_tilde((double)n, prec_prob_lambda((double)n, fail_prob, u), u);
    return g * sum_abs_prod + dot_underflow(cfg, n, g);
}

prec_dot_kernel_model prec_dot_kernel_model_for(int k, prec_format in, prec_format acc, prec_format out)
{
    const prec_format_info *fi = prec_format_get(in), *fa = prec_format_get(acc), *fo = prec_format_get(out);
    prec_dot_kernel_model m = {k, 0.0, NAN, 0, 0.0, 0.0, 0.0};
    if (!fi || !fa || !fo) {
        m.u_prod = NAN;
        return m;
    }
    /* 2p bits hold the product exactly unless it underflows acc's normal
     * range; an underflowing product costs at most eta_acc, absolutely */
    m.u_prod = 2 * fi->precision <= fa->precision ? 0.0 : fa->unit_roundoff;
    bool can_underflow = 2 * (fi->emin - fi->precision + 1) < fa->emin;
    m.u_acc = fa->unit_roundoff;
    m.u_out = out == acc ? 0.0 : fo->unit_roundoff;
    m.eta_acc = can_underflow ? fa->min_subnormal / 2 : 0.0;
    m.eta_out = out == acc ? 0.0 : fo->min_subnormal / 2;
    return m;
}

double prec_bound_dot_kernel(const prec_dot_kernel_model *m, double sum_abs_prod, double abs_exact)
{
    double g = (1 + m->u_prod) * (1 + prec_gamma(m->k, m->u_acc)) * pow(1 + m->u_acc, m->scale_roundings) - 1;
    double eta = (m->k + m->scale_roundings) * m->eta_acc * (1 + m->u_out) + m->eta_out;
    return g * sum_abs_prod + m->u_out * (abs_exact + g * sum_abs_prod) + eta;
}

double prec_bound_row_reduce(size_t n, double u_acc, double term_rel_err, double sum_abs_terms)
{
    double g = n >= 2 ? prec_gamma((double)n - 1, u_acc) : 0.0;
    return ((1 + term_rel_err) * (1 + g) - 1) * sum_abs_terms;
}
