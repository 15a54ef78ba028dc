/* studies/accum.c — see accum.h. */
#include "studies/accum.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "precision/rng.h"
#include "reference/exact.h"

static const char *const data_names[ACCUM_NDATA] = {"constant", "uniform", "normal", "heavy"};

const char *accum_data_name(accum_data d) { return (unsigned)d < ACCUM_NDATA ? data_names[d] : "?"; }
const char *accum_data_names(void) { return "constant, uniform, normal, heavy"; }

int accum_data_parse(const char *name, accum_data *out)
{
    for (int d = 0; name && d < ACCUM_NDATA; d++) {
        if (strcasecmp(name, data_names[d]) == 0) {
            *out = (accum_data)d;
            return 0;
        }
    }
    return -1;
}

/* A stream per purpose, independent of the order rows are run in. */
static uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t s = seed ^ 0x243f6a8885a308d3ull;
    uint64_t h = prec_splitmix64(&s);
    s = h ^ (a * 0x9e3779b97f4a7c15ull);
    h = prec_splitmix64(&s);
    s = h ^ (b * 0xbf58476d1ce4e5b9ull);
    h = prec_splitmix64(&s);
    s = h ^ (c * 0x94d049bb133111ebull);
    return prec_splitmix64(&s);
}

int accum_dataset_make(accum_dataset *d, accum_data kind, double x, prec_format addend, size_t n, uint64_t seed)
{
    memset(d, 0, sizeof *d);
    d->kind = kind;
    d->x = x;
    d->addend = addend;
    d->n = n;
    d->v = malloc((n ? n : 1) * sizeof *d->v);
    if (!d->v) return -1;
    prec_rng r;
    prec_rng_seed(&r, mix_seed(seed, (uint64_t)kind, (uint64_t)n, 0));
    for (size_t i = 0; i < n; i++) {
        double t;
        switch (kind) {
        case ACCUM_UNIFORM: t = prec_rng_uniform(&r); break;
        case ACCUM_NORMAL: t = prec_rng_normal(&r); break;
        case ACCUM_HEAVY: {
            /* symmetric Pareto, P(|t| > s) = s^-1.5 for s >= 1 */
            double u = 1.0 - prec_rng_uniform(&r); /* (0, 1] */
            t = pow(u, -1.0 / 1.5);
            if (prec_rng_next(&r) & 1) t = -t;
            break;
        }
        default: t = 1.0; break;
        }
        d->v[i] = x * t;
    }
    d->exact_unrounded = exact_sum(d->v, n);
    prec_round_array(d->v, d->v, n, addend, PREC_ROUNDING_RNE, NULL);
    exact_acc a;
    exact_acc_init(&a);
    exact_acc_add_array(&a, d->v, n);
    d->exact = exact_acc_value(&a);
    d->sum_abs = exact_sum_abs(d->v, n);
    return 0;
}

void accum_dataset_free(accum_dataset *d)
{
    free(d->v);
    d->v = NULL;
}

void accum_run(const accum_dataset *d, const accum_method *m, uint64_t seed, accum_result *out)
{
    memset(out, 0, sizeof *out);
    out->m = *m;
    prec_rng r;
    prec_rng_seed(&r, mix_seed(seed, ((uint64_t)m->acc << 16) | ((uint64_t)d->addend << 8) | (uint64_t)m->algo,
                               (uint64_t)d->n, ((uint64_t)d->kind << 8) | (uint64_t)m->round));
    prec_sum_config c = prec_sum_config_default(m->acc);
    c.algo = m->algo;
    c.addend = d->addend;
    c.rounding.mode = m->round;
    c.block = m->block;
    c.rng = &r;
    prec_sum_stats st;
    out->value = prec_sum(d->v, d->n, &c, &st);
    out->stagnant = st.stagnant;
    out->nonfinite = st.nonfinite || !isfinite(out->value);
    out->exact = d->exact;
    /* the error from the exact sum, not from its rounded double */
    exact_acc e;
    exact_acc_init(&e);
    exact_acc_add_array(&e, d->v, d->n);
    exact_acc_add(&e, -out->value);
    out->abs_err = fabs(exact_acc_value(&e));
    if (!isfinite(out->value)) out->abs_err = INFINITY;
    out->rel_err = d->exact != 0.0 ? out->abs_err / fabs(d->exact) : (out->abs_err == 0 ? 0.0 : INFINITY);
    out->bound = prec_sum_bound(&c, d->n, d->sum_abs, fabs(d->exact));
    out->prob_bound = prec_sum_prob_bound(&c, d->n, d->sum_abs, fabs(d->exact), m->fail_prob);
    out->prob_status = prec_prob_status_of(m->round);
    /* Kahan and Neumaier have bounds under round to nearest only: elsewhere
     * there is no bound (NaN), and no status may claim one */
    if (isnan(out->prob_bound)) out->prob_status = PREC_PROB_NONE;
}
