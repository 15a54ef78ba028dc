/* kernels/check/check_rmsnorm.c — rmsnorm's check.
 *
 * Inputs per shape (N rows of C): x ~ N(0,1), gain ~ N(1, 0.25), dy ~ N(0,1),
 * all rounded to the path's format; eps = 1e-5f.  Outputs checked: y, rstd
 * (fp32), dx, dgain, by kcmp_rmsnorm (compare_rmsnorm.h, shared with
 * `ulpscope verify`) with each variant described as kcheck_rmsnorm_kernel
 * says: fp32 sums with the kernel's longest rounding chain
 * (krmsnorm_row_depth), rsqrtf within 2 ulps (CUDA C++ Programming Guide,
 * "Mathematical Functions"), the variant's roundings into the storage
 * format.  The backward reads the rstd the forward stored, whose distance
 * from the exact rstd is then known. */
#include <math.h>
#include <stdlib.h>

#include "kernels/check/checks.h"
#include "kernels/check/compare_rmsnorm.h"
#include "kernels/common/ktensor_io.h"
#include "kernels/rmsnorm.h"

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

typedef struct {
    double *x, *g, *dy;       /* inputs (exact values) */
    double *y, *rstd, *dx, *dg; /* kernel outputs */
} buffers;

static void free_buffers(buffers *b)
{
    free(b->x); free(b->g); free(b->dy); free(b->y); free(b->rstd); free(b->dx); free(b->dg);
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

kcmp_rmsnorm_kernel kcheck_rmsnorm_kernel(prec_format f, int variant, int64_t N, int64_t C)
{
    kcmp_rmsnorm_kernel k = {0};
    k.storage = f;
    k.acc = PREC_FP32;
    k.stats_in_storage = variant == KRMSNORM_NONE;
    k.round_normalized = variant == KRMSNORM_LLAMA || variant == KRMSNORM_NONE;
    k.fwd_depth = krmsnorm_row_depth(C, f, variant);
    /* the backward of llama and none keeps the block tree */
    k.bwd_depth = krmsnorm_row_depth(C, f, variant == KRMSNORM_WARP_TREE || variant == KRMSNORM_SEQUENTIAL
                                               ? variant : KRMSNORM_BLOCK_TREE);
    k.col_depth = krmsnorm_col_depth(N);
    k.rsqrt_ulps = 2.0;
    k.eps = (double)1e-5f;
    return k;
}

static int check_shape(kcheck_ctx *ctx, const shape *s, kpath path, int variant)
{
    const prec_format f = kcheck_path_format(path);
    const int64_t N = s->N, C = s->C, NC = N * C;
    const kcmp_rmsnorm_kernel k = kcheck_rmsnorm_kernel(f, variant, N, C);
    buffers b = {0};
    b.x = malloc(NC * sizeof(double)); b.dy = malloc(NC * sizeof(double)); b.g = malloc(C * sizeof(double));
    b.y = malloc(NC * sizeof(double)); b.dx = malloc(NC * sizeof(double)); b.dg = malloc(C * sizeof(double));
    b.rstd = malloc(N * sizeof(double));
    if (!b.x || !b.dy || !b.g || !b.y || !b.dx || !b.dg || !b.rstd) {
        free_buffers(&b);
        return kernels_fail("rmsnorm check: out of host memory");
    }
    prec_rng rng;
    kcheck_rng(ctx, &rng);
    kcheck_fill_normal(&rng, b.x, NC, 0.0, 1.0, f);
    kcheck_fill_normal(&rng, b.dy, NC, 0.0, 1.0, f);
    for (int64_t c = 0; c < C; c++) b.g[c] = 1.0;
    if (s->gain) kcheck_fill_normal(&rng, b.g, C, 1.0, 0.25, f);

    if (run_gpu(s, f, variant, (float)k.eps, &b) != 0) {
        free_buffers(&b);
        return -1;
    }
    char shape_name[96];
    snprintf(shape_name, sizeof shape_name, "N=%lld C=%lld%s", (long long)N, (long long)C, s->gain ? "" : " nogain");
    kcmp_rmsnorm_data d = {N, C, b.x, s->gain ? b.g : NULL, b.dy, b.y, b.rstd, b.dx, s->gain ? b.dg : NULL};
    kcheck_acc rows[KCMP_RMSNORM_MAX_ROWS];
    int n_rows = kcmp_rmsnorm(&k, &d, shape_name, rows);
    free_buffers(&b);
    if (n_rows < 0) return kernels_fail("rmsnorm check: out of host memory");
    for (int i = 0; i < n_rows; i++) kcheck_report(ctx, &rows[i].row);
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
