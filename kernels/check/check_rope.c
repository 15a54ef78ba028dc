/* kernels/check/check_rope.c — rope's check.  x, dy ~ N(0, 1)
 * in the path's format, base 10000.  Bounds: table variant, cos and sin are
 * the fp32 table entries, whose distance from the exact values the check
 * knows (it builds the same table with krope_tables_host; the double
 * computation behind it is off by at most 2^-48 (1 + |theta|)); fp32_angle,
 * the angle fl(pos * fl(inv_freq)) and sincosf (2 ulps), cos and sin being
 * 1-Lipschitz.  Then two products, a sum, the storage rounding. */
#include <math.h>
#include <stdlib.h>

#include "kernels/check/checks.h"
#include "kernels/common/ktensor_io.h"
#include "kernels/rope.h"
#include "reference/rope.h"

typedef struct {
    int64_t B, T, H, D;
} shape;

static const shape shapes[] = {{1, 3, 1, 2}, {2, 64, 4, 64}, {3, 37, 3, 18}, {1, 1024, 1, 16}};
static const double BASE = 10000.0;
static const prec_format F32 = PREC_FP32;

static int check_shape(kcheck_ctx *ctx, const shape *s, prec_format f, int variant)
{
    const int64_t N = s->B * s->T, H = s->H, D = s->D, half = D / 2, n = N * H * D;
    double *x = malloc(n * sizeof(double)), *dy = malloc(n * sizeof(double)), *y = malloc(n * sizeof(double)),
           *yr = malloc(n * sizeof(double));
    float *ct = malloc(s->T * half * sizeof(float)), *st = malloc(s->T * half * sizeof(float)),
          *inv = malloc(half * sizeof(float));
    kval *cs = malloc(2 * s->T * half * sizeof(kval));
    ktensor tx = {0}, ty = {0}, tdy = {0}, tdx = {0};
    float *dct = NULL, *dst = NULL, *dinv = NULL;
    int rc = -1;
    if (!x || !dy || !y || !yr || !ct || !st || !inv || !cs) {
        kernels_fail("rope check: out of host memory");
        goto done;
    }
    prec_rng rng;
    kcheck_rng(ctx, &rng);
    kcheck_fill_normal(&rng, x, n, 0.0, 1.0, f);
    kcheck_fill_normal(&rng, dy, n, 0.0, 1.0, f);
    krope_tables_host(ct, st, inv, s->T, D, BASE);
    /* cos, sin per (pos, i) as the kernel obtains them, against the exact angle */
    for (int64_t p = 0; p < s->T; p++)
        for (int64_t i = 0; i < half; i++) {
            double freq = pow(BASE, -2.0 * (double)i / (double)D), theta = (double)p * freq;
            double slack = 0x1p-48 * (1.0 + fabs(theta));
            kval c, sn;
            if (variant == KROPE_TABLE) {
                double ec = fabs((double)ct[p * half + i] - cos(theta)) + slack;
                double es = fabs((double)st[p * half + i] - sin(theta)) + slack;
                c = (kval){cos(theta), ec, ec};
                sn = (kval){sin(theta), es, es};
            } else {
                double ef = fabs((double)inv[i] - freq) + 0x1p-50 * freq;
                kval angle = kval_mul(kval_exact((double)p), (kval){freq, ef, ef}, F32);
                c = kval_lipschitz(angle, cos, 1.0, 2.0, 0.0, F32);
                sn = kval_lipschitz(angle, sin, 1.0, 2.0, 0.0, F32);
            }
            cs[2 * (p * half + i)] = c;
            cs[2 * (p * half + i) + 1] = sn;
        }
    int64_t shp[3] = {N, H, D};
    if (ktensor_alloc(&tx, f, 3, shp) || ktensor_alloc(&ty, f, 3, shp) || ktensor_alloc(&tdy, f, 3, shp) ||
        ktensor_alloc(&tdx, f, 3, shp) || ktensor_upload(&tx, x) || ktensor_upload(&tdy, dy) ||
        kdevice_alloc((void **)&dct, s->T * half * sizeof(float), "rope cos") ||
        kdevice_alloc((void **)&dst, s->T * half * sizeof(float), "rope sin") ||
        kdevice_alloc((void **)&dinv, half * sizeof(float), "rope inv_freq") ||
        kdevice_upload(dct, ct, s->T * half * sizeof(float), "rope cos") ||
        kdevice_upload(dst, st, s->T * half * sizeof(float), "rope sin") ||
        kdevice_upload(dinv, inv, half * sizeof(float), "rope inv_freq"))
        goto done;
    krope_tables tab = {dct, dst, dinv, s->T};
    if (krope_forward(&ty, &tx, &tab, variant) || krope_backward(&tdx, &tdy, &tab, variant) || kernels_sync("rope"))
        goto done;
    char name[96];
    snprintf(name, sizeof name, "B=%lld T=%lld H=%lld D=%lld", (long long)s->B, (long long)s->T, (long long)H, (long long)D);
    ref_ctx rctx = REF_CTX_DEFAULT;
    for (int pass = 0; pass < 2; pass++) {
        const int bwd = pass == 1;
        const double *in = bwd ? dy : x;
        if (ktensor_download(bwd ? &tdx : &ty, y)) goto done;
        if (bwd) ref_rope_backward(&rctx, N, H, D, s->T, BASE, dy, yr);
        else ref_rope_forward(&rctx, N, H, D, s->T, BASE, x, yr);
        kcheck_acc acc;
        kcheck_acc_init(&acc, bwd ? "dx" : "y", name, prec_format_get(f)->unit_roundoff);
        for (int64_t nh = 0; nh < N * H; nh++)
            for (int64_t i = 0; i < half; i++) {
                int64_t pos = (nh / H) % s->T, a = nh * D + i, b = a + half;
                kval c = cs[2 * (pos * half + i)], sn = cs[2 * (pos * half + i) + 1];
                if (bwd) sn = kval_neg(sn);
                kval x1 = kval_exact(in[a]), x2 = kval_exact(in[b]);
                kval y1 = kval_round(kval_sub(kval_mul(x1, c, F32), kval_mul(x2, sn, F32), F32), f);
                kval y2 = kval_round(kval_add(kval_mul(x1, sn, F32), kval_mul(x2, c, F32), F32), f);
                double scale = fabs(in[a]) * fabs(c.v) + fabs(in[b]) * fabs(sn.v), scale2 = fabs(in[a]) * fabs(sn.v) + fabs(in[b]) * fabs(c.v);
                if (kcheck_acc_add(&acc, a, y[a], yr[a], y1.e, y1.p, scale))
                    kcheck_acc_detail(&acc, "token %lld pair %lld (first): got %.9g ref %.17g x=(%.9g, %.9g) pos=%lld",
                                      (long long)(nh / H), (long long)i, y[a], yr[a], in[a], in[b], (long long)pos);
                if (kcheck_acc_add(&acc, b, y[b], yr[b], y2.e, y2.p, scale2))
                    kcheck_acc_detail(&acc, "token %lld pair %lld (second): got %.9g ref %.17g x=(%.9g, %.9g) pos=%lld",
                                      (long long)(nh / H), (long long)i, y[b], yr[b], in[a], in[b], (long long)pos);
            }
        kcheck_acc_report(ctx, &acc);
    }
    rc = 0;
done:
    ktensor_free(&tx); ktensor_free(&ty); ktensor_free(&tdy); ktensor_free(&tdx);
    kdevice_free(dct); kdevice_free(dst); kdevice_free(dinv);
    free(x); free(dy); free(y); free(yr); free(ct); free(st); free(inv); free(cs);
    return rc;
}

int kcheck_rope(kcheck_ctx *ctx, kpath path, int variant)
{
    const int count = kcheck_quick(ctx) ? 2 : (int)(sizeof shapes / sizeof shapes[0]);
    for (int i = 0; i < count; i++)
        if (check_shape(ctx, &shapes[i], kcheck_path_format(path), variant)) return -1;
    return 0;
}

