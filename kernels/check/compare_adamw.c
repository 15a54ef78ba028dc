/* kernels/check/compare_adamw.c — one AdamW step against MPFR with the
 * bound of a described kernel (compare_adamw.h).  The replay follows
 * kernels/adamw.cu, which spells each operation with an explicit-rounding
 * intrinsic. */
#include "kernels/check/compare_adamw.h"

#include <math.h>
#include <stdlib.h>

#include "reference/adamw.h"

static const prec_format F32 = PREC_FP32;

static double sqrt_d(double x) { return sqrt(x); }

/* The bias correction as the kernel holds it: fp32 rounding of 1 - beta^t
 * computed in double (pow within an ulp or two of double: 4 * 2^-53 absolute
 * covers it and the subtraction). */
static kval bias_correction(double beta, int64_t t)
{
    kval r = {1.0 - pow(beta, (double)t), 4 * 0x1p-53, 4 * 0x1p-53};
    return kval_round(r, F32);
}

typedef struct {
    kval m1, v1;
    kval base, t; /* the new weight is base - t */
} update;

static update replay(const kcmp_adamw_kernel *k, kcmp_adamw_order order, double w, double gv, double mv, double vv)
{
    const prec_format a = k->arith;
    const kval lr = kval_exact(k->lr), b1 = kval_exact(k->beta1), b2 = kval_exact(k->beta2), eps = kval_exact(k->eps),
               wd = kval_exact(k->weight_decay);
    const kval c1 = kval_exact(1.0 - k->beta1), c2 = kval_exact(1.0 - k->beta2); /* exact in fp32 */
    const kval bc1 = bias_correction(k->beta1, k->step), bc2 = bias_correction(k->beta2, k->step);
    const kval p = kval_exact(w), g = kval_exact(gv), m = kval_exact(mv), v = kval_exact(vv);
    update u;
    if (order == KCMP_ADAMW_LLMC) {
        u.m1 = kval_fma(b1, m, kval_mul(c1, g, a), a);
        u.v1 = kval_fma(b2, v, kval_mul(c2, kval_mul(g, g, a), a), a);
        kval mhat = kval_div(u.m1, bc1, a), vhat = kval_div(u.v1, bc2, a);
        kval den = kval_add(kval_monotone(vhat, sqrt_d, 0.0, INFINITY, 0.5, 0.0, a), eps, a);
        u.t = kval_mul(lr, kval_fma(wd, p, kval_div(mhat, den, a), a), a);
        u.base = p;
    } else {
        kval decay = kval_sub(kval_exact(1.0), kval_mul(lr, wd, a), a);
        u.base = kval_mul(p, decay, a);
        u.m1 = kval_fma(c1, kval_sub(g, m, a), m, a);
        u.v1 = kval_fma(c2, kval_sub(kval_mul(g, g, a), v, a), v, a);
        kval sbc2 = kval_monotone(bc2, sqrt_d, 0.0, INFINITY, 0.5, 0.0, a);
        kval step_size = kval_div(lr, bc1, a);
        kval den = kval_add(kval_div(kval_monotone(u.v1, sqrt_d, 0.0, INFINITY, 0.5, 0.0, a), sbc2, a), eps, a);
        u.t = kval_mul(step_size, kval_div(u.m1, den, a), a);
    }
    return u;
}

/* a holds for both: the larger error, plus the gap of the exact values (double rounding apart) */
static kval either(kval x, kval y)
{
    double gap = fabs(x.v - y.v);
    kval r = {x.v, fmax(x.e, y.e + gap), fmax(x.p, y.p + gap)};
    return r;
}

int kcmp_adamw(const kcmp_adamw_kernel *k, const kcmp_adamw_data *d, const char *shape,
               kcheck_acc rows[KCMP_ADAMW_MAX_ROWS])
{
    const int64_t n = d->n;
    const size_t bytes = (size_t)(n ? n : 1) * sizeof(double);
    double *p_ref = malloc(bytes), *m_ref = malloc(bytes), *v_ref = malloc(bytes);
    if (!p_ref || !m_ref || !v_ref) {
        free(p_ref); free(m_ref); free(v_ref);
        return -1;
    }
    const ref_adamw_hparams rh = {k->lr, k->beta1, k->beta2, k->eps, k->weight_decay, (long)k->step};
    ref_ctx rctx = REF_CTX_DEFAULT;
    ref_adamw(&rctx, n, d->w, d->g, d->m, d->v, &rh, p_ref, m_ref, v_ref);
    const double u = prec_format_get(k->storage)->unit_roundoff, ua = prec_format_get(k->arith)->unit_roundoff;
    int n_rows = 0;
    kcheck_acc *ap = &rows[n_rows++], *am = d->m_out ? &rows[n_rows++] : NULL, *av = d->v_out ? &rows[n_rows++] : NULL;
    kcheck_acc *ams = d->master ? &rows[n_rows++] : NULL;
    kcheck_acc_init(ap, "p", shape, u);
    if (am) kcheck_acc_init(am, "m", shape, ua);
    if (av) kcheck_acc_init(av, "v", shape, ua);
    if (ams) kcheck_acc_init(ams, "master", shape, ua);
    /* weights in the arithmetic's format (the fp32 path): no rounding after the update's own */
    const int same_format = k->storage == k->arith;
    for (int64_t i = 0; i < n; i++) {
        update up = replay(k, k->order == KCMP_ADAMW_ANY ? KCMP_ADAMW_LLMC : k->order, d->w[i], d->g[i], d->m[i], d->v[i]);
        kval hi = kval_sub(up.base, up.t, k->arith); /* the new weight in the arithmetic's format */
        kval exact_diff = kval_sub(up.base, up.t, PREC_FP64);
        if (k->order == KCMP_ADAMW_ANY) {
            update other = replay(k, KCMP_ADAMW_TORCH, d->w[i], d->g[i], d->m[i], d->v[i]);
            up.m1 = either(up.m1, other.m1);
            up.v1 = either(up.v1, other.v1);
            hi = either(hi, kval_sub(other.base, other.t, k->arith));
            exact_diff = either(exact_diff, kval_sub(other.base, other.t, PREC_FP64));
        }
        kval stored; /* the weight as stored */
        if (k->store == KCMP_ADAMW_STOCHASTIC) {
            /* SR of the exact difference (TwoSum) where the weights are in the arithmetic's format, else of hi */
            stored = kval_round(kval_round(same_format ? exact_diff : hi, k->storage), k->storage); /* below one ulp: 2u */
        } else if (k->store == KCMP_ADAMW_TRUNCATE) {
            stored = kval_round(kval_round(hi, k->storage), k->storage); /* truncation: below one ulp */
        } else {
            stored = same_format ? hi : kval_round(hi, k->storage);
        }
        if (kcheck_acc_add(ap, i, d->p[i], p_ref[i], stored.e, stored.p, fabs(p_ref[i])))
            kcheck_acc_detail(ap, "i %lld: got %.9g ref %.17g p %.9g g %.9g m %.9g v %.9g", (long long)i, d->p[i],
                              p_ref[i], d->w[i], d->g[i], d->m[i], d->v[i]);
        if (am && kcheck_acc_add(am, i, d->m_out[i], m_ref[i], up.m1.e, up.m1.p, fabs(m_ref[i])))
            kcheck_acc_detail(am, "i %lld: got %.9g ref %.17g m %.9g g %.9g", (long long)i, d->m_out[i], m_ref[i],
                              d->m[i], d->g[i]);
        if (av && kcheck_acc_add(av, i, d->v_out[i], v_ref[i], up.v1.e, up.v1.p, fabs(v_ref[i])))
            kcheck_acc_detail(av, "i %lld: got %.9g ref %.17g v %.9g g %.9g", (long long)i, d->v_out[i], v_ref[i],
                              d->v[i], d->g[i]);
        if (ams && kcheck_acc_add(ams, i, d->master[i], p_ref[i], hi.e, hi.p, fabs(p_ref[i])))
            kcheck_acc_detail(ams, "i %lld: got %.9g ref %.17g master %.9g", (long long)i, d->master[i], p_ref[i], d->w[i]);
    }
    for (int i = 0; i < n_rows; i++) kcheck_acc_finish(&rows[i]);
    free(p_ref); free(m_ref); free(v_ref);
    return n_rows;
}
