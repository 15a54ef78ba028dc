/* kernels/check/check_rmsnorm.c — rmsnorm's check.
 *
 * Inputs per shape (N rows of C): x ~ N(0,1), gain ~ N(1, 0.25), dy ~ N(0,1),
 * all rounded to the path's format; eps = 1e-5f.  Outputs checked: y, rstd
 * (fp32), dx, dgain.  Bounds replay each kernel's operations on kval numbers
 * (check.h): the sum of squares with the kernel's longest rounding chain
 * (krmsnorm_row_depth), the division by C, + eps, rsqrtf (2 ulps, CUDA C++
 * Programming Guide, "Mathematical Functions"), the products, the variant's
 * roundings into the storage format.  The backward reads the rstd the
 * forward stored, whose distance from the exact rstd the check knows: its
 * bound starts from that actual error (stored_rstd_kval). */
#include <math.h>
#include <stdlib.h>

#include "kernels/check/checks.h"
#include "kernels/common/ktensor_io.h"
#include "kernels/rmsnorm.h"
#include "reference/rmsnorm.h"

typedef struct {
    int64_t N, C;
    int gain;
} shape;

/* Non-multiples of every tile and vector width (7, 37, 1001, 4099) beside
 * model widths; the small ones make a single dropped term visible even in
 * bf16.  --quick runs the first three. */
static const shape shapes[] = {
    {5, 7, 1}, {37, 768, 1}, {3, 2, 0}, {16, 1001, 0}, {9, 4099, 1}, {64, 1024, 1},
};

static double rsqrt_d(double t) { return 1.0 / sqrt(t); }

typedef struct {
    double *x, *g, *dy;       /* inputs (exact values) */
    double *y, *rstd, *dx, *dg; /* kernel outputs */
    double *yr, *rr, *dxr, *dgr; /* references */
} buffers;

static void free_buffers(buffers *b)
{
    free(b->x); free(b->g); free(b->dy); free(b->y); free(b->rstd); free(b->dx); free(b->dg);
    free(b->yr); free(b->rr); free(b->dxr); free(b->dgr);
}

/* The rstd the backward read: the stored value, whose error against the
 * exact rstd is known exactly (inflated by 2^-40 for the double arithmetic). */
static kval stored_rstd_kval(double stored, double exact)
{
    double e = fabs(stored - exact) * (1.0 + 0x1p-40);
    kval k = {exact, e, e};
    return k;
}

static int run_gpu(const shape *s, prec_format f, int variant, float eps, buffers *b)
{
    int64_t nc[2] = {s->N, s->C}, c1[1] = {s->C}, n1[1] = {s->N};
    ktensor x = {0}, y = {0}, gain = {0}, dy = {0}, dx = {0}, dg = {0}, rstd = {0};
    int rc = -1;
    if (ktensor_alloc(&x, f, 2, nc) || ktensor_alloc(&y, f, 2, nc) || ktensor_alloc(&dy, f, 2, nc) ||
        ktensor_alloc(&dx, f, 2, nc) || ktensor_alloc(&rstd, PREC_FP32, 1, n1) ||
        (s->gain && (ktensor_alloc(&gain, f, 1, c1) || ktensor_alloc(&dg, f, 1, c1))))
        goto done;
    if (ktensor_upload(&x, b->x) || ktensor_upload(&dy, b->dy) || (s->gain && ktensor_upload(&gain, b->g)))
        goto done;
    if (krmsnorm_forward(&y, rstd.data, &x, s->gain ? &gain : NULL, eps, variant) ||
        krmsnorm_backward(&dx, s->gain ? &dg : NULL, &dy, &x, s->gain ? &gain : NULL, rstd.data, variant) ||
        kernels_sync("rmsnorm"))
        goto done;
    if (ktensor_download(&y, b->y) || ktensor_download(&rstd, b->rstd) || ktensor_download(&dx, b->dx) ||
        (s->gain && ktensor_download(&dg, b->dg)))
        goto done;
    rc = 0;
done:
    ktensor_free(&x); ktensor_free(&y); ktensor_free(&gain); ktensor_free(&dy);
    ktensor_free(&dx); ktensor_free(&dg); ktensor_free(&rstd);
    return rc;
}

static int check_shape(kcheck_ctx *ctx, const shape *s, kpath path, int variant)
{
    const prec_format f = kcheck_path_format(path), F32 = PREC_FP32;
    const double u = prec_format_get(f)->unit_roundoff;
    const float eps = 1e-5f;
    const int64_t N = s->N, C = s->C, NC = N * C;
    buffers b = {0};
    b.x = malloc(NC * sizeof(double)); b.dy = malloc(NC * sizeof(double)); b.g = malloc(C * sizeof(double));
    b.y = malloc(NC * sizeof(double)); b.dx = malloc(NC * sizeof(double)); b.dg = malloc(C * sizeof(double));
    b.rstd = malloc(N * sizeof(double)); b.yr = malloc(NC * sizeof(double)); b.dxr = malloc(NC * sizeof(double));
    b.dgr = malloc(C * sizeof(double)); b.rr = malloc(N * sizeof(double));
    if (!b.x || !b.dy || !b.g || !b.y || !b.dx || !b.dg || !b.rstd || !b.yr || !b.dxr || !b.dgr || !b.rr) {
        free_buffers(&b);
        return kernels_fail("rmsnorm check: out of host memory");
    }
    prec_rng rng;
    kcheck_rng(ctx, &rng);
    kcheck_fill_normal(&rng, b.x, NC, 0.0, 1.0, f);
    kcheck_fill_normal(&rng, b.dy, NC, 0.0, 1.0, f);
    for (int64_t c = 0; c < C; c++) b.g[c] = 1.0;
    if (s->gain) kcheck_fill_normal(&rng, b.g, C, 1.0, 0.25, f);

    if (run_gpu(s, f, variant, eps, &b) != 0) {
        free_buffers(&b);
        return -1;
    }
    ref_ctx rc = REF_CTX_DEFAULT;
    const double *gref = s->gain ? b.g : NULL;
    ref_rmsnorm_forward(&rc, N, C, b.x, gref, (double)eps, b.yr, b.rr);
    ref_rmsnorm_backward(&rc, N, C, b.x, gref, b.dy, (double)eps, b.dxr, s->gain ? b.dgr : NULL);

    char shape_name[96];
    snprintf(shape_name, sizeof shape_name, "N=%lld C=%lld%s", (long long)N, (long long)C, s->gain ? "" : " nogain");
    const int no_upcast = variant == KRMSNORM_NONE, llama = variant == KRMSNORM_LLAMA;
    const prec_format fs = no_upcast ? f : F32; /* format of the statistics' steps */
    const int64_t depth = krmsnorm_row_depth(C, f, variant);

    /* forward: rstd per row, then y */
    kcheck_acc acc_y, acc_r;
    kcheck_acc_init(&acc_y, "y", shape_name, u);
    kcheck_acc_init(&acc_r, "rstd", shape_name, prec_format_get(F32)->unit_roundoff);
    for (int64_t n = 0; n < N; n++) {
        const double *xr = b.x + n * C;
        kval_sum ss;
        kval_sum_init(&ss);
        for (int64_t c = 0; c < C; c++) {
            kval sq = kval_exact(xr[c] * xr[c]); /* exact in double for fp32 inputs too */
            if (no_upcast) sq = kval_round(kval_round(sq, F32), f);
            kval_sum_add(&ss, sq);
        }
        kval sum = kval_sum_finish(&ss, depth, F32);
        kval ms = kval_round(kval_div(sum, kval_exact((double)C), F32), fs);
        kval t = kval_round(kval_add(ms, kval_exact((double)eps), F32), fs);
        kval r = kval_round(kval_monotone(t, rsqrt_d, 0.0, INFINITY, 2.0, 0.0, F32), fs);
        r.v = b.rr[n]; /* the exact rstd (the replay's double value differs from it by ~1e-16 relative) */
        if (kcheck_acc_add(&acc_r, n, b.rstd[n], b.rr[n], r.e, r.p, fabs(b.rr[n])))
            kcheck_acc_detail(&acc_r, "row %lld: got %.9g ref %.17g", (long long)n, b.rstd[n], b.rr[n]);
        for (int64_t c = 0; c < C; c++) {
            int64_t i = n * C + c;
            kval xn = kval_mul(kval_exact(xr[c]), r, F32);
            if (llama || no_upcast) xn = kval_round(xn, f);
            kval y = s->gain ? kval_mul(xn, kval_exact(b.g[c]), F32) : xn;
            y = kval_round(y, f);
            if (kcheck_acc_add(&acc_y, i, b.y[i], b.yr[i], y.e, y.p, fabs(b.yr[i])))
                kcheck_acc_detail(&acc_y, "row %lld col %lld: got %.9g ref %.17g x=%.9g gain=%.9g rstd=%.9g",
                                  (long long)n, (long long)c, b.y[i], b.yr[i], xr[c], b.g[c], b.rr[n]);
        }
    }
    kcheck_acc_report(ctx, &acc_y);
    kcheck_acc_report(ctx, &acc_r);

    /* backward: dx = r g dy - (((dot r) r) r / C) x, dot = sum (g dy) x */
    kcheck_acc acc_dx;
    kcheck_acc_init(&acc_dx, "dx", shape_name, u);
    const int64_t bdepth = krmsnorm_row_depth(C, f, variant == KRMSNORM_WARP_TREE || variant == KRMSNORM_SEQUENTIAL
                                                        ? variant : KRMSNORM_BLOCK_TREE);
    for (int64_t n = 0; n < N; n++) {
        const double *xr = b.x + n * C, *dyr = b.dy + n * C;
        kval r = stored_rstd_kval(b.rstd[n], b.rr[n]);
        kval_sum dots;
        kval_sum_init(&dots);
        for (int64_t c = 0; c < C; c++) {
            kval gd = s->gain ? kval_mul(kval_exact(b.g[c]), kval_exact(dyr[c]), F32) : kval_exact(dyr[c]);
            kval_sum_add(&dots, kval_mul(gd, kval_exact(xr[c]), PREC_FP64)); /* fma: product unrounded */
        }
        kval dot = kval_sum_finish(&dots, bdepth, F32);
        kval cf = kval_div(kval_mul(kval_mul(kval_mul(dot, r, F32), r, F32), r, F32), kval_exact((double)C), F32);
        for (int64_t c = 0; c < C; c++) {
            int64_t i = n * C + c;
            kval gd = s->gain ? kval_mul(kval_exact(b.g[c]), kval_exact(dyr[c]), F32) : kval_exact(dyr[c]);
            kval a = kval_mul(r, gd, F32), bx = kval_mul(cf, kval_exact(xr[c]), F32);
            kval d = kval_round(kval_sub(a, bx, F32), f);
            double scale = fabs(a.v) + fabs(bx.v);
            if (kcheck_acc_add(&acc_dx, i, b.dx[i], b.dxr[i], d.e, d.p, scale))
                kcheck_acc_detail(&acc_dx, "row %lld col %lld: got %.9g ref %.17g x=%.9g dy=%.9g gain=%.9g rstd=%.9g",
                                  (long long)n, (long long)c, b.dx[i], b.dxr[i], xr[c], dyr[c], b.g[c], b.rr[n]);
        }
    }
    kcheck_acc_report(ctx, &acc_dx);

    if (s->gain) {
        kcheck_acc acc_dg;
        kcheck_acc_init(&acc_dg, "dgain", shape_name, u);
        const int64_t cdepth = krmsnorm_col_depth(N);
        for (int64_t c = 0; c < C; c++) {
            kval_sum col;
            kval_sum_init(&col);
            for (int64_t n = 0; n < N; n++)
                kval_sum_add(&col, kval_mul(kval_mul(kval_exact(b.x[n * C + c]), stored_rstd_kval(b.rstd[n], b.rr[n]), F32),
                                            kval_exact(b.dy[n * C + c]), F32));
            kval dg = kval_round(kval_sum_finish(&col, cdepth, F32), f);
            if (kcheck_acc_add(&acc_dg, c, b.dg[c], b.dgr[c], dg.e, dg.p, col.abs))
                kcheck_acc_detail(&acc_dg, "col %lld: got %.9g ref %.17g (sum over %lld rows of dy x rstd)",
                                  (long long)c, b.dg[c], b.dgr[c], (long long)N);
        }
        kcheck_acc_report(ctx, &acc_dg);
    }
    free_buffers(&b);
    return 0;
}

int kcheck_rmsnorm(kcheck_ctx *ctx, kpath path, int variant)
{
    int n = (int)(sizeof shapes / sizeof shapes[0]);
    if (kcheck_quick(ctx)) n = 3;
    for (int i = 0; i < n; i++)
        if (check_shape(ctx, &shapes[i], path, variant) != 0) return -1;
    return 0;
}
