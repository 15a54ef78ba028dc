/* kernels/check/check_polar_express.c — the checks of polar_express and
 * muon_newton_schulz (the same kernels with Jordan's quintic coefficients).
 *
 * Per shape: G ~ N(0,1) in the path's format.  Row x0: the normalised
 * matrix against reference/polar_express.h's normalize.  Then each of the
 * five steps runs on the GPU from the kernel's own previous iterate (read
 * back: the exact values it holds), and row x<k> compares the step's output
 * with the exact step from that same input.  Checking step by step keeps
 * each bound about one step's roundings; an end-to-end bound would multiply
 * them by the polynomial's gain (|a| up to 8 in the first step).
 *
 * The bounds are compare_polar_express.h's (shared with `ulpscope trace`),
 * for the kernel kcheck_polar_express_kernel describes: kmatmul's GEMMs
 * (kmatmul_error_factor's model), the two-stage fp32 norm (kpe_norm_depth). */
#include <stdlib.h>
#include <string.h>

#include "kernels/check/checks.h"
#include "kernels/check/compare_polar_express.h"
#include "kernels/common/ktensor_io.h"
#include "kernels/polar_express.h"

static const prec_format F32 = PREC_FP32;

typedef struct {
    int64_t rows, cols;
} pe_shape;

static const pe_shape shapes[] = {{8, 13}, {24, 40}, {40, 24}, {16, 16}};

kcmp_pe_kernel kcheck_polar_express_kernel(kpath path, int variant, int64_t rows, int64_t cols)
{
    kcmp_pe_kernel k = {0};
    k.storage = kcheck_path_format(path);
    k.tall = kpe_is_tall(variant, rows, cols);
    k.fused = kpe_is_fused(variant);
    /* kmatmul_error_factor's model of the default accumulation: SIMT FFMA on fp32, tensor cores otherwise */
    k.gemm = (prec_dot_model){path == KPATH_FP32 ? PREC_DOT_ROUNDED : PREC_DOT_TENSOR_CORE, F32, 0, 0.0, 0};
    k.norm_depth = kpe_norm_depth(rows * cols);
    k.norm_arith = F32;
    return k;
}

/* One stage's row through the shared comparison. */
static int stage_row(kcheck_ctx *ctx, const kcmp_pe_kernel *k, const kcmp_pe_data *d, const char *shape)
{
    kcheck_acc row;
    if (kcmp_polar_express(k, d, shape, &row) < 0) return kernels_fail("polar_express check: out of host memory");
    kcheck_report(ctx, &row.row);
    return 0;
}

static int check_shape(kcheck_ctx *ctx, kpath path, int variant, kpe_coeffs which, const pe_shape *s)
{
    const prec_format f = kcheck_path_format(path);
    const int64_t R = s->rows, C = s->cols, n = R * C;
    const kcmp_pe_kernel k = kcheck_polar_express_kernel(path, variant, R, C);
    double *g = malloc(n * sizeof(double)), *x = malloc(n * sizeof(double)), *xn = malloc(n * sizeof(double));
    ktensor G = {0}, X = {0}, Xn = {0};
    int rc = -1;
    if (!g || !x || !xn) {
        kernels_fail("polar_express check: out of host memory");
        goto done;
    }
    prec_rng rng;
    kcheck_rng(ctx, &rng);
    kcheck_fill_normal(&rng, g, n, 0.0, 1.0, f);
    int64_t shp[2] = {R, C};
    if (ktensor_alloc(&G, f, 2, shp) || ktensor_alloc(&X, f, 2, shp) || ktensor_alloc(&Xn, f, 2, shp) ||
        ktensor_upload(&G, g))
        goto done;
    if (kpolar_express_normalize(path, R, C, G.data, X.data) || kernels_sync("polar_express normalize") ||
        ktensor_download(&X, x))
        goto done;
    char shape_name[96];
    snprintf(shape_name, sizeof shape_name, "rows=%lld cols=%lld", (long long)R, (long long)C);
    kcmp_pe_data d = {R, C, 0, g, 0, 0, 0, x};
    if (stage_row(ctx, &k, &d, shape_name)) goto done;
    float abc[KPE_STEPS][3];
    kpe_coefficients(which, abc);
    for (int st = 0; st < KPE_STEPS; st++) {
        if (ktensor_poison(&Xn) || kpolar_express_step(path, variant, R, C, abc[st][0], abc[st][1], abc[st][2],
                                                       X.data, Xn.data) ||
            kernels_sync("polar_express step") || ktensor_download(&Xn, xn))
            goto done;
        kcmp_pe_data ds = {R, C, st + 1, x, abc[st][0], abc[st][1], abc[st][2], xn};
        if (stage_row(ctx, &k, &ds, shape_name)) goto done;
        /* the next step starts from the kernel's own iterate */
        ktensor t = X;
        X = Xn;
        Xn = t;
        memcpy(x, xn, n * sizeof(double));
    }
    rc = 0;
done:
    ktensor_free(&G); ktensor_free(&X); ktensor_free(&Xn);
    free(g); free(x); free(xn);
    return rc;
}

static int check_coeffs(kcheck_ctx *ctx, kpath path, int variant, kpe_coeffs which)
{
    int n = (int)(sizeof shapes / sizeof shapes[0]);
    if (kcheck_quick(ctx)) n = 2;
    for (int i = 0; i < n; i++)
        if (check_shape(ctx, path, variant, which, &shapes[i]) != 0) return -1;
    return 0;
}

int kcheck_polar_express(kcheck_ctx *ctx, kpath path, int variant) { return check_coeffs(ctx, path, variant, KPE_POLAR_EXPRESS); }
int kcheck_muon_newton_schulz(kcheck_ctx *ctx, kpath path, int variant) { return check_coeffs(ctx, path, variant, KPE_MUON_QUINTIC); }
