/* kernels/check/check_logsumexp.c — logsumexp's check.
 *
 * Inputs: logits x ~ N(offset, sigma) in the path's format, dlse ~ N(0, 1)
 * in fp32.  Outputs: lse (fp32; errors in fp32 units, scaled by |max| +
 * log(sum)) and dx = dlse exp(x - lse), which the kernel computes from its
 * own stored lse (so its bound starts from that value's actual error).  The
 * comparison is kcmp_logsumexp (compare_logsumexp.h, shared with `ulpscope
 * verify`). */
#include <stdlib.h>

#include "kernels/check/checks.h"
#include "kernels/check/compare_logsumexp.h"
#include "kernels/common/ktensor_io.h"
#include "kernels/logsumexp.h"

typedef struct {
    int64_t N, C;
    double offset, sigma;
} shape;

static const shape shapes[] = {
    {4, 7, 0, 3}, {37, 768, 0, 3}, {5, 1001, 40, 2}, {3, 50304, 0, 3}, {8, 4099, 0, 8},
};

static const prec_format F32 = PREC_FP32;

kcmp_lse_kernel kcheck_logsumexp_kernel(prec_format f, int variant, int64_t C)
{
    kcmp_lse_kernel k = {f, F32, variant /* KLSE_* = KCHECK_* */, kcheck_row_depth(C, klogsumexp_row_threads(),
                                                                                   klogsumexp_row_vec(C, f))};
    return k;
}

static int check_shape(kcheck_ctx *ctx, const shape *s, kpath path, int variant)
{
    const prec_format f = kcheck_path_format(path);
    const int64_t N = s->N, C = s->C, NC = N * C;
    double *x = malloc(NC * sizeof(double)), *dx = malloc(NC * sizeof(double));
    double *lse = malloc(N * sizeof(double)), *dlse = malloc(N * sizeof(double));
    ktensor tx = {0}, tdx = {0}, tlse = {0}, tdlse = {0};
    int rc = -1;
    if (!x || !dx || !lse || !dlse) {
        kernels_fail("logsumexp check: out of host memory");
        goto done;
    }
    prec_rng rng;
    kcheck_rng(ctx, &rng);
    kcheck_fill_normal(&rng, x, NC, s->offset, s->sigma, f);
    kcheck_fill_normal(&rng, dlse, N, 0.0, 1.0, F32);
    int64_t nc[2] = {N, C}, n1[1] = {N};
    if (ktensor_alloc(&tx, f, 2, nc) || ktensor_alloc(&tdx, f, 2, nc) || ktensor_alloc(&tlse, F32, 1, n1) ||
        ktensor_alloc(&tdlse, F32, 1, n1) || ktensor_upload(&tx, x) || ktensor_upload(&tdlse, dlse) ||
        klogsumexp_forward(tlse.data, &tx, variant) ||
        klogsumexp_backward(&tdx, &tx, tlse.data, tdlse.data, variant) || kernels_sync("logsumexp") ||
        ktensor_download(&tlse, lse) || ktensor_download(&tdx, dx))
        goto done;
    char name[96];
    snprintf(name, sizeof name, "N=%lld C=%lld x~N(%g,%g)", (long long)N, (long long)C, s->offset, s->sigma);
    const kcmp_lse_kernel k = kcheck_logsumexp_kernel(f, variant, C);
    const kcmp_lse_data d = {N, C, x, lse, dlse, dx, 1};
    kcheck_acc rows[KCMP_LSE_MAX_ROWS];
    int n_rows = kcmp_logsumexp(&k, &d, name, rows);
    if (n_rows < 0) {
        kernels_fail("logsumexp check: out of host memory");
        goto done;
    }
    for (int i = 0; i < n_rows; i++) kcheck_report(ctx, &rows[i].row);
    rc = 0;
done:
    ktensor_free(&tx); ktensor_free(&tdx); ktensor_free(&tlse); ktensor_free(&tdlse);
    free(x); free(dx); free(lse); free(dlse);
    return rc;
}

int kcheck_logsumexp(kcheck_ctx *ctx, kpath path, int variant)
{
    int n = (int)(sizeof shapes / sizeof shapes[0]);
    if (kcheck_quick(ctx)) n = 3;
    for (int i = 0; i < n; i++)
        if (check_shape(ctx, &shapes[i], path, variant) != 0) return -1;
    return 0;
}
