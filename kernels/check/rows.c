/* kernels/check/rows.c — building a row (errors in u, bounds, the worst
 * element and the verdict) and the reduction depths (check.h).  Free of the registry and the GPU, so
 * that `ulpscope verify` and the installed library (libulpscope) share it. */
#include "kernels/check/check.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

void kcheck_acc_init(kcheck_acc *acc, const char *output, const char *shape, double unit_roundoff)
{
    memset(acc, 0, sizeof *acc);
    acc->row.output = output;
    snprintf(acc->row.shape, sizeof acc->row.shape, "%s", shape);
    acc->row.unit_roundoff = unit_roundoff;
    acc->row.worst_index = -1;
}

/* The bound the verdict uses: the op's bound, inflated by 2^-40 relative for
 * the double arithmetic that computed it, plus the reference's own rounding
 * to double (half an fp64 ulp, at most 2^-53 |ref|). */
static double effective_bound(double bound, double ref)
{
    return bound * (1.0 + 0x1p-40) + 0x1p-53 * fabs(ref);
}

int kcheck_acc_add(kcheck_acc *acc, int64_t i, double got, double ref, double bound, double prob,
                   double scale)
{
    kcheck_row *r = &acc->row;
    r->n++;
    if (!isfinite(ref)) {
        /* Only a kernel that reproduces the same non-finite value passes. */
        int same = (isnan(ref) && isnan(got)) || got == ref;
        if (!same && r->worst_ratio != INFINITY) {
            r->worst_ratio = INFINITY;
            r->worst_index = i;
            return 1;
        }
        return 0;
    }
    if (!isfinite(got)) {
        r->nonfinite++;
        if (r->worst_ratio != INFINITY) {
            r->worst_ratio = INFINITY;
            r->worst_index = i;
            return 1;
        }
        return 0;
    }
    double err = fabs(got - ref);
    double b = effective_bound(bound, ref);
    double pb = effective_bound(prob, ref);
    double ratio = b > 0 ? err / b : (err == 0 ? 0.0 : INFINITY);
    if (scale > 0) {
        double unit = r->unit_roundoff * scale;
        double eu = err / unit, bu = b / unit, pu = pb / unit;
        if (eu > r->max_err_u) r->max_err_u = eu;
        if (bu > r->max_bound_u) r->max_bound_u = bu;
        acc->sum_sq_err_u += eu * eu;
        acc->sum_sq_prob_u += pu * pu;
        acc->counted++;
    } else if (err > 0) {
        r->max_err_u = INFINITY; /* an error where the scale says none is possible */
    }
    if (r->worst_index < 0 || ratio > r->worst_ratio) {
        r->worst_ratio = ratio;
        r->worst_index = i;
        return 1;
    }
    return 0;
}

void kcheck_acc_detail(kcheck_acc *acc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(acc->row.worst_detail, sizeof acc->row.worst_detail, fmt, ap);
    va_end(ap);
}

void kcheck_acc_finish(kcheck_acc *acc)
{
    kcheck_row *r = &acc->row;
    if (acc->counted > 0) {
        r->rms_err_u = sqrt(acc->sum_sq_err_u / (double)acc->counted);
        r->rms_bound_u = sqrt(acc->sum_sq_prob_u / (double)acc->counted);
    }
    r->pass = r->n > 0 && r->nonfinite == 0 && r->worst_ratio <= 1.0 && r->rms_err_u <= r->rms_bound_u &&
              r->max_err_u != INFINITY;
}

/* ---- reduction depths ------------------------------------------------------- */

int64_t kcheck_tree_depth(int64_t n, int threads)
{
    if (n <= 1) return 0;
    if (threads <= 1) return n - 1;
    int64_t per_thread = (n + threads - 1) / threads;
    int64_t active = n < threads ? n : threads;
    int levels = 0;
    while ((1ll << levels) < active) levels++;
    return (per_thread - 1) + levels;
}

int64_t kcheck_row_depth(int64_t C, int threads, int vec)
{
    if (vec < 1) vec = 1;
    int64_t span = (int64_t)threads * vec;
    int64_t per_thread = (int64_t)vec * ((C + span - 1) / span);
    if (per_thread > C) per_thread = C;
    int64_t groups = (C + vec - 1) / vec, active = groups < threads ? groups : threads;
    int levels = 0;
    while ((1ll << levels) < active) levels++;
    return per_thread + levels;
}
