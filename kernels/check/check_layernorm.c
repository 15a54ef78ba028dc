/* kernels/check/check_layernorm.c — layernorm's check.
 *
 * Inputs per shape (N rows of C): x ~ N(offset, 1) (an offset of 64 makes
 * the one-pass variance lose ~12 bits to cancellation, which its bound must
 * and does show), gain ~ N(1, 0.25), bias ~ N(0, 0.5), dy ~ N(0, 1), all in
 * the path's format; eps = 1e-5f.  Outputs checked: y, mean and rstd (fp32),
 * dx, dgain, dbias.
 *
 * The comparison (reference and bounds) is kcmp_layernorm
 * (compare_layernorm.h, shared with `ulpscope verify layernorm`), with each
 * variant described as kcheck_layernorm_kernel says: fp32 sums with the
 * kernel's longest rounding chain, Welford replayed thread by thread, rsqrtf
 * within 2 ulps; the backward reads the mean and rstd the forward stored,
 * whose actual errors then start its bound. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/check/checks.h"
#include "kernels/check/compare_layernorm.h"
#include "kernels/common/ktensor_io.h"
#include "kernels/layernorm.h"

typedef struct {
    int64_t N, C;
    double offset;
} shape;

static const shape shapes[] = {
    {4, 7, 0.0}, {37, 768, 0.0}, {6, 1001, 64.0}, {9, 4099, 0.0}, {16, 1024, 8.0},
};

static const prec_format F32 = PREC_FP32;

/* ---- the check ------------------------------------------------------------- */

typedef struct {
    double *x, *g, *b, *dy, *y, *mean, *rstd, *dx, *dg, *db;
} buffers;

#define NBUF 10
static void free_buffers(buffers *b)
{
    double **d = &b->x;
    for (int i = 0; i < NBUF; i++) free(d[i]);
}

static int run_gpu(const shape *s, prec_format f, int variant, float eps, buffers *b)
{
    int64_t nc[2] = {s->N, s->C}, c1[1] = {s->C}, n1[1] = {s->N};
    ktensor x = {0}, y = {0}, g = {0}, bi = {0}, dy = {0}, dx = {0}, dg = {0}, db = {0}, mean = {0}, rstd = {0};
    int rc = -1;
    if (ktensor_alloc(&x, f, 2, nc) || ktensor_alloc(&y, f, 2, nc) || ktensor_alloc(&dy, f, 2, nc) ||
        ktensor_alloc(&dx, f, 2, nc) || ktensor_alloc(&g, f, 1, c1) || ktensor_alloc(&bi, f, 1, c1) ||
        ktensor_alloc(&dg, f, 1, c1) || ktensor_alloc(&db, f, 1, c1) || ktensor_alloc(&mean, F32, 1, n1) ||
        ktensor_alloc(&rstd, F32, 1, n1))
        goto done;
    if (ktensor_upload(&x, b->x) || ktensor_upload(&dy, b->dy) || ktensor_upload(&g, b->g) || ktensor_upload(&bi, b->b))
        goto done;
    if (klayernorm_forward(&y, mean.data, rstd.data, &x, &g, &bi, eps, variant) ||
        klayernorm_backward(&dx, &dg, &db, &dy, &x, &g, mean.data, rstd.data, variant) || kernels_sync("layernorm"))
        goto done;
    if (ktensor_download(&y, b->y) || ktensor_download(&mean, b->mean) || ktensor_download(&rstd, b->rstd) ||
        ktensor_download(&dx, b->dx) || ktensor_download(&dg, b->dg) || ktensor_download(&db, b->db))
        goto done;
    rc = 0;
done:
    ktensor_free(&x); ktensor_free(&y); ktensor_free(&g); ktensor_free(&bi); ktensor_free(&dy);
    ktensor_free(&dx); ktensor_free(&dg); ktensor_free(&db); ktensor_free(&mean); ktensor_free(&rstd);
    return rc;
}

kcmp_layernorm_kernel kcheck_layernorm_kernel(prec_format f, int variant, int64_t N, int64_t C)
{
    kcmp_layernorm_kernel k = {0};
    k.storage = f;
    k.acc = F32;
    k.variance = variant == KLAYERNORM_ONE_PASS ? KCMP_LN_ONE_PASS
                 : variant == KLAYERNORM_WELFORD ? KCMP_LN_WELFORD
                                                 : KCMP_LN_TWO_PASS;
    k.fwd_depth = klayernorm_row_depth(C, f, variant);
    k.welford_threads = klayernorm_row_threads(variant);
    k.welford_vec = klayernorm_row_vec(C, f);
    /* the backward of one_pass and welford keeps the two-pass block tree */
    const int bvariant = variant == KLAYERNORM_WARP_TREE || variant == KLAYERNORM_SEQUENTIAL ? variant : KLAYERNORM_TWO_PASS;
    k.bwd_depth = klayernorm_row_depth(C, f, bvariant);
    k.col_depth = klayernorm_col_depth(N);
    k.rsqrt_ulps = 2.0;
    k.eps = (double)1e-5f;
    return k;
}

static int check_shape(kcheck_ctx *ctx, const shape *s, kpath path, int variant)
{
    const prec_format f = kcheck_path_format(path);
    const int64_t N = s->N, C = s->C, NC = N * C;
    const kcmp_layernorm_kernel k = kcheck_layernorm_kernel(f, variant, N, C);
    buffers b;
    memset(&b, 0, sizeof b);
    int64_t sizes[NBUF] = {NC, C, C, NC, NC, N, N, NC, C, C};
    double **d = &b.x;
    int ok = 1;
    for (int i = 0; i < NBUF; i++) ok &= (d[i] = malloc((size_t)sizes[i] * sizeof(double))) != NULL;
    if (!ok) {
        free_buffers(&b);
        return kernels_fail("layernorm check: out of host memory");
    }
    prec_rng rng;
    kcheck_rng(ctx, &rng);
    kcheck_fill_normal(&rng, b.x, NC, s->offset, 1.0, f);
    kcheck_fill_normal(&rng, b.g, C, 1.0, 0.25, f);
    kcheck_fill_normal(&rng, b.b, C, 0.0, 0.5, f);
    kcheck_fill_normal(&rng, b.dy, NC, 0.0, 1.0, f);
    if (run_gpu(s, f, variant, (float)k.eps, &b) != 0) {
        free_buffers(&b);
        return -1;
    }
    char name[96];
    snprintf(name, sizeof name, "N=%lld C=%lld mean=%g", (long long)N, (long long)C, s->offset);
    kcmp_layernorm_data data = {N, C, b.x, b.g, b.b, b.dy, b.y, b.mean, b.rstd, b.dx, b.dg, b.db};
    kcheck_acc rows[KCMP_LAYERNORM_MAX_ROWS];
    int n_rows = kcmp_layernorm(&k, &data, name, rows);
    free_buffers(&b);
    if (n_rows < 0) return kernels_fail("layernorm check: out of host memory");
    for (int i = 0; i < n_rows; i++) kcheck_report(ctx, &rows[i].row);
    return 0;
}

int kcheck_layernorm(kcheck_ctx *ctx, kpath path, int variant)
{
    int n = (int)(sizeof shapes / sizeof shapes[0]);
    if (kcheck_quick(ctx)) n = 3;
    for (int i = 0; i < n; i++)
        if (check_shape(ctx, &shapes[i], path, variant) != 0) return -1;
    return 0;
}
