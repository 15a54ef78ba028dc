/* kernels/check/compare_rope.c — rope against MPFR with the bound of a
 * described kernel (compare_rope.h). */
#include "kernels/check/compare_rope.h"

#include <math.h>
#include <stdlib.h>

#include "reference/rope.h"

int kcmp_rope(const kcmp_rope_kernel *k, const kcmp_rope_data *d, const char *shape, kcheck_acc *row)
{
    const prec_format f = k->storage, F32 = PREC_FP32;
    const int64_t N = d->N, H = d->H, D = d->D, T = d->T, half = D / 2;
    if (D % 2) return -1;
    double *yr = malloc((size_t)(N * H * D > 0 ? N * H * D : 1) * sizeof *yr);
    kval *cs = malloc((size_t)(2 * T * half > 0 ? 2 * T * half : 1) * sizeof *cs);
    if (!yr || !cs) {
        free(yr), free(cs);
        return -1;
    }
    /* cos, sin per (position, pair) as the kernel obtains them, against the exact angle */
    for (int64_t p = 0; p < T; p++)
        for (int64_t i = 0; i < half; i++) {
            const double freq = pow(k->base, -2.0 * (double)i / (double)D), theta = (double)p * freq;
            const double slack = 0x1p-48 * (1.0 + fabs(theta));
            kval c, sn;
            if (!k->fp32_angle) {
                double ec = fabs((double)k->cos_t[p * half + i] - cos(theta)) + slack;
                double es = fabs((double)k->sin_t[p * half + i] - sin(theta)) + slack;
                c = (kval){cos(theta), ec, ec};
                sn = (kval){sin(theta), es, es};
            } else {
                double ef = fabs((double)k->inv_freq[i] - freq) + 0x1p-50 * freq;
                kval angle = kval_mul(kval_exact((double)p), (kval){freq, ef, ef}, F32);
                c = kval_lipschitz(angle, cos, 1.0, k->sincos_ulps, 0.0, F32);
                sn = kval_lipschitz(angle, sin, 1.0, k->sincos_ulps, 0.0, F32);
            }
            cs[2 * (p * half + i)] = c;
            cs[2 * (p * half + i) + 1] = sn;
        }
    ref_ctx rctx = REF_CTX_DEFAULT;
    if (d->backward) ref_rope_backward(&rctx, N, H, D, T, k->base, d->x, yr);
    else ref_rope_forward(&rctx, N, H, D, T, k->base, d->x, yr);
    kcheck_acc_init(row, d->backward ? "dx" : "y", shape, prec_format_get(f)->unit_roundoff);
    const double *in = d->x, *y = d->y;
    for (int64_t nh = 0; nh < N * H; nh++)
        for (int64_t i = 0; i < half; i++) {
            const int64_t pos = (nh / H) % T, a = nh * D + i, b = a + half;
            kval c = cs[2 * (pos * half + i)], sn = cs[2 * (pos * half + i) + 1];
            if (d->backward) sn = kval_neg(sn);
            kval x1 = kval_exact(in[a]), x2 = kval_exact(in[b]);
            kval y1 = kval_round(kval_sub(kval_mul(x1, c, F32), kval_mul(x2, sn, F32), F32), f);
            kval y2 = kval_round(kval_add(kval_mul(x1, sn, F32), kval_mul(x2, c, F32), F32), f);
            double s1 = fabs(in[a]) * fabs(c.v) + fabs(in[b]) * fabs(sn.v);
            double s2 = fabs(in[a]) * fabs(sn.v) + fabs(in[b]) * fabs(c.v);
            if (kcheck_acc_add(row, a, y[a], yr[a], y1.e, y1.p, s1))
                kcheck_acc_detail(row, "token %lld pair %lld (first): got %.9g ref %.17g x=(%.9g, %.9g) pos=%lld",
                                  (long long)(nh / H), (long long)i, y[a], yr[a], in[a], in[b], (long long)pos);
            if (kcheck_acc_add(row, b, y[b], yr[b], y2.e, y2.p, s2))
                kcheck_acc_detail(row, "token %lld pair %lld (second): got %.9g ref %.17g x=(%.9g, %.9g) pos=%lld",
                                  (long long)(nh / H), (long long)i, y[b], yr[b], in[a], in[b], (long long)pos);
        }
    kcheck_acc_finish(row);
    free(yr), free(cs);
    return 1;
}
