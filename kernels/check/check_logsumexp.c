/* kernels/check/check_logsumexp.c — logsumexp's check.
 *
 * Inputs: logits x ~ N(offset, sigma) in the path's format, dlse ~ N(0, 1)
 * in fp32.  Outputs: lse (fp32; errors in fp32 units, scaled by |max| +
 * log(sum)) and dx = dlse exp(x - lse), which the kernel computes from its
 * own stored lse (so its bound starts from that value's actual error). */
#include <math.h>
#include <stdlib.h>

#include "kernels/check/check_kexp.h"
#include "kernels/check/checks.h"
#include "kernels/common/ktensor_io.h"
#include "kernels/logsumexp.h"
#include "reference/logsumexp.h"

typedef struct {
    int64_t N, C;
    double offset, sigma;
} shape;

static const shape shapes[] = {
    {4, 7, 0, 3}, {37, 768, 0, 3}, {5, 1001, 40, 2}, {3, 50304, 0, 3}, {8, 4099, 0, 8},
};

static const prec_format F32 = PREC_FP32;

static int check_shape(kcheck_ctx *ctx, const shape *s, kpath path, int variant)
{
    const prec_format f = kcheck_path_format(path);
    const double u = prec_format_get(f)->unit_roundoff, u32 = prec_format_get(F32)->unit_roundoff;
    const int64_t N = s->N, C = s->C, NC = N * C;
    double *x = malloc(NC * sizeof(double)), *dx = malloc(NC * sizeof(double)), *dxr = malloc(NC * sizeof(double));
    double *lse = malloc(N * sizeof(double)), *lser = malloc(N * sizeof(double)), *dlse = malloc(N * sizeof(double));
    ktensor tx = {0}, tdx = {0}, tlse = {0}, tdlse = {0};
    int rc = -1;
    if (!x || !dx || !dxr || !lse || !lser || !dlse) {
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
    ref_ctx rctx = REF_CTX_DEFAULT;
    ref_logsumexp_forward(&rctx, N, C, x, lser);
    ref_logsumexp_backward(&rctx, N, C, x, dlse, dxr);

    char name[96];
    snprintf(name, sizeof name, "N=%lld C=%lld x~N(%g,%g)", (long long)N, (long long)C, s->offset, s->sigma);
    const int64_t depth = kcheck_row_depth(C, klogsumexp_row_threads(), klogsumexp_row_vec(C, f));
    kcheck_acc acc_l, acc_dx;
    kcheck_acc_init(&acc_l, "lse", name, u32);
    kcheck_acc_init(&acc_dx, "dx", name, u);
    for (int64_t n = 0; n < N; n++) {
        const double *xr = x + n * C;
        double m = xr[0];
        for (int64_t c = 1; c < C; c++) m = xr[c] > m ? xr[c] : m;
        kval_sum ss;
        kval_sum_init(&ss);
        for (int64_t c = 0; c < C; c++) kval_sum_add(&ss, kcheck_exp_shifted(xr[c], kval_exact(m), variant));
        kval s_row = kval_sum_finish(&ss, depth, F32);
        kval l = kcheck_log_shifted(s_row, kval_exact(m), variant);
        l.v = lser[n];
        double lscale = fabs(m) + log(s_row.v);
        /* the backward read the stored lse, whose error the check knows */
        double lerr = fabs(lse[n] - lser[n]) * (1.0 + 0x1p-40);
        kval lse_read = {lser[n], lerr, lerr};
        if (kcheck_acc_add(&acc_l, n, lse[n], lser[n], l.e, l.p, lscale))
            kcheck_acc_detail(&acc_l, "row %lld: got %.9g ref %.17g rowmax=%.9g", (long long)n, lse[n], lser[n], m);
        for (int64_t c = 0; c < C; c++) {
            int64_t i = n * C + c;
            kval ex = kcheck_exp_shifted(xr[c], lse_read, variant);
            kval d = kval_round(kval_mul(kval_exact(dlse[n]), ex, F32), f);
            if (kcheck_acc_add(&acc_dx, i, dx[i], dxr[i], d.e, d.p, fabs(dxr[i])))
                kcheck_acc_detail(&acc_dx, "row %lld col %lld: got %.9g ref %.17g x=%.9g dlse=%.9g lse=%.9g",
                                  (long long)n, (long long)c, dx[i], dxr[i], xr[c], dlse[n], lse[n]);
        }
    }
    kcheck_acc_report(ctx, &acc_l);
    kcheck_acc_report(ctx, &acc_dx);
    rc = 0;
done:
    ktensor_free(&tx); ktensor_free(&tdx); ktensor_free(&tlse); ktensor_free(&tdlse);
    free(x); free(dx); free(dxr); free(lse); free(lser); free(dlse);
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
