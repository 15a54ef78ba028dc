/* kernels/check/compare_rope.c — rope's output against MPFR with the bound
 * of a described kernel (compare_rope.h). */
#include "kernels/check/compare_rope.h"

#include <math.h>
#include <stdlib.h>

#include "reference/rope.h"

static const prec_format F32 = PREC_FP32;

/* cos and sin at (p, i) as the kernel obtains them: exact values with the
 * distance of the kernel's from them. */
static void angle_pair(const kcmp_rope_kernel *k, const kcmp_rope_data *d, int64_t p, int64_t i, kval *c, kval *sn)
{
    const int64_t half = d->D / 2;
    const double freq = pow(k->base, -2.0 * (double)i / (double)d->D), theta = (double)p * freq;
    const double slack = 0x1p-48 * (1.0 + fabs(theta));
    const double u32 = prec_format_get(F32)->unit_roundoff;
    if (k->angle == KCMP_ROPE_TABLE) {
        double ec = d->cos_t ? fabs(d->cos_t[p * half + i] - cos(theta)) : u32 * fabs(cos(theta));
        double es = d->sin_t ? fabs(d->sin_t[p * half + i] - sin(theta)) : u32 * fabs(sin(theta));
        ec += slack;
        es += slack;
        *c = (kval){cos(theta), ec, ec};
        *sn = (kval){sin(theta), es, es};
        return;
    }
    /* an fp32 ulp is at most 2 u |x| */
    double ef = (d->inv_freq ? fabs(d->inv_freq[i] - freq) : k->math_ulps * 2.0 * u32 * freq) + 0x1p-50 * freq;
    kval angle = kval_mul(kval_exact((double)p), (kval){freq, ef, ef}, F32);
    *c = kval_lipschitz(angle, cos, 1.0, k->math_ulps, 0.0, F32);
    *sn = kval_lipschitz(angle, sin, 1.0, k->math_ulps, 0.0, F32);
}

int kcmp_rope(const kcmp_rope_kernel *k, const kcmp_rope_data *d, const char *shape, kcheck_acc *row)
{
    const int64_t N = d->N, H = d->H, D = d->D, T = d->T, half = D / 2, n = N * H * D;
    const prec_format f = k->storage, a = k->arith;
    double *yr = malloc((size_t)(n ? n : 1) * sizeof(double));
    kval *cs = malloc((size_t)(2 * T * half + 1) * sizeof(kval));
    if (!yr || !cs) {
        free(yr); free(cs);
        return -1;
    }
    for (int64_t p = 0; p < T; p++)
        for (int64_t i = 0; i < half; i++) angle_pair(k, d, p, i, &cs[2 * (p * half + i)], &cs[2 * (p * half + i) + 1]);
    ref_ctx rctx = REF_CTX_DEFAULT;
    if (d->backward) ref_rope_backward(&rctx, N, H, D, T, k->base, d->in, yr);
    else ref_rope_forward(&rctx, N, H, D, T, k->base, d->in, yr);
    const double *in = d->in, *y = d->y;
    kcheck_acc_init(row, d->backward ? "dx" : "y", shape, prec_format_get(f)->unit_roundoff);
    for (int64_t nh = 0; nh < N * H; nh++)
        for (int64_t i = 0; i < half; i++) {
            int64_t pos = (nh / H) % T, ia = nh * D + i, ib = ia + half;
            kval c = cs[2 * (pos * half + i)], sn = cs[2 * (pos * half + i) + 1];
            if (d->backward) sn = kval_neg(sn);
            kval x1 = kval_exact(in[ia]), x2 = kval_exact(in[ib]);
            kval y1 = kval_round(kval_sub(kval_mul(x1, c, a), kval_mul(x2, sn, a), a), f);
            kval y2 = kval_round(kval_add(kval_mul(x1, sn, a), kval_mul(x2, c, a), a), f);
            double scale = fabs(in[ia]) * fabs(c.v) + fabs(in[ib]) * fabs(sn.v);
            double scale2 = fabs(in[ia]) * fabs(sn.v) + fabs(in[ib]) * fabs(c.v);
            if (kcheck_acc_add(row, ia, y[ia], yr[ia], y1.e, y1.p, scale))
                kcheck_acc_detail(row, "token %lld pair %lld (first): got %.9g ref %.17g x=(%.9g, %.9g) pos=%lld",
                                  (long long)(nh / H), (long long)i, y[ia], yr[ia], in[ia], in[ib], (long long)pos);
            if (kcheck_acc_add(row, ib, y[ib], yr[ib], y2.e, y2.p, scale2))
                kcheck_acc_detail(row, "token %lld pair %lld (second): got %.9g ref %.17g x=(%.9g, %.9g) pos=%lld",
                                  (long long)(nh / H), (long long)i, y[ib], yr[ib], in[ia], in[ib], (long long)pos);
        }
    kcheck_acc_finish(row);
    free(yr); free(cs);
    return 1;
}
