/* precision/dot_bound.c — accumulation models of a dot product (dot_bound.h). */
#include "precision/dot_bound.h"

#include <math.h>

#include "precision/bounds.h"

static const double U32 = 0x1p-24, U_FP8_ACC = 0x1p-13, U_TENSOR_CORE = 0x1p-23;

double prec_dot_unit(const prec_dot_model *m)
{
    switch (m->kind) {
    case PREC_DOT_ROUNDED: return m->acc == PREC_FP64 ? 0x1p-53 : prec_format_get(m->acc)->unit_roundoff;
    case PREC_DOT_TENSOR_CORE: return U_TENSOR_CORE;
    case PREC_DOT_FP8:
    case PREC_DOT_FP8_GROUPS: return U_FP8_ACC;
    }
    return NAN;
}

double prec_dot_factor(const prec_dot_model *m, int64_t K, int *truncating)
{
    *truncating = 1;
    switch (m->kind) {
    case PREC_DOT_ROUNDED:
        *truncating = 0;
        return prec_gamma((double)m->depth, prec_dot_unit(m));
    case PREC_DOT_TENSOR_CORE: {
        double u_prod = (1 + m->u_in) * (1 + m->u_in) - 1;
        return (1 + u_prod) * (1 + prec_gamma((double)(K + 2 * ((K + 3) / 4)), U_TENSOR_CORE)) - 1;
    }
    case PREC_DOT_FP8: {
        if (m->interval <= 0) return (1 + prec_gamma(1.5 * (double)K, U_FP8_ACC)) * pow(1 + U32, 3) - 1;
        int64_t interval = K < m->interval ? K : m->interval, promotions = (K + m->interval - 1) / m->interval;
        return (1 + prec_gamma(1.5 * (double)interval, U_FP8_ACC)) * (1 + prec_gamma((double)promotions, U32)) *
                   pow(1 + U32, 3) - 1;
    }
    case PREC_DOT_FP8_GROUPS: {
        int64_t groups = (K + m->interval - 1) / m->interval, in_group = K < m->interval ? K : m->interval;
        return (1 + prec_gamma(1.5 * (double)in_group, U_FP8_ACC)) * (1 + prec_gamma((double)groups + 1, U32)) - 1;
    }
    }
    return NAN;
}
