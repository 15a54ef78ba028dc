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
 * Bound of one step (wide form; the tall form is the same analysis on X^T,
 * whose Gram edge is cols): with G(K) the matmul model's factor
 * (kmatmul_error_factor) and u the path's unit roundoff,
 *   A = fl(X X^T):      E_A = G(n) P_A + u (|A| + G(n) P_A),  P_A = |X||X|^T
 *   B = fl(c A A + b A): the product of the computed A's,
 *       sum_k |A_ik| E_A_kj + E_A_ik |A_kj| + E_A_ik E_A_kj, plus
 *       G(m) sum_k (|A| + E_A)_ik (|A| + E_A)_kj; then alpha = c and
 *       beta = b in fp32 (kval), rounded to the path's format
 *   X' = fl(B X + a X) (fused) or fl(a X + fl(B X)) (split): E_B |X| plus
 *       G(m) (|B| + E_B)|X|, then the epilogue's roundings (kval).
 * Roundings of the fp32 accumulator follow the matmul model (truncating on
 * tensor cores), so the RMS verdict uses the worst case as well. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/check/checks.h"
#include "kernels/common/ktensor_io.h"
#include "kernels/matmul.h"
#include "kernels/polar_express.h"
#include "reference/polar_express.h"

static const prec_format F32 = PREC_FP32;

typedef struct {
    int64_t rows, cols;
} pe_shape;

static const pe_shape shapes[] = {{8, 13}, {24, 40}, {40, 24}, {16, 16}};

static double sqrt_d(double x) { return sqrt(x); }

/* Bounds for one wide step on X [m, n] (row-major): out_e[i*n + j], and the
 * magnitude each is proportional to, out_s = sum_k |B_ik X_kj| + |a X_ij|. */
static void step_bound(kpath path, int fused, int64_t m, int64_t n, const double *X, double a, double b, double c,
                       double *out_e, double *out_s)
{
    const prec_format f = kcheck_path_format(path);
    const double u = prec_format_get(f)->unit_roundoff;
    int trunc;
    const double gn = kmatmul_error_factor(path, KMATMUL_ACC_DEFAULT, n, &trunc);
    const double gm = kmatmul_error_factor(path, KMATMUL_ACC_DEFAULT, m, &trunc);
    double *A = calloc(m * m, sizeof(double)), *EA = calloc(m * m, sizeof(double));
    double *B = calloc(m * m, sizeof(double)), *EB = calloc(m * m, sizeof(double));
    if (!A || !EA || !B || !EB) abort();
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < m; j++) {
            double v = 0, P = 0;
            for (int64_t k = 0; k < n; k++) {
                v += X[i * n + k] * X[j * n + k];
                P += fabs(X[i * n + k] * X[j * n + k]);
            }
            A[i * m + j] = v;
            EA[i * m + j] = gn * P + u * (fabs(v) + gn * P) + (double)n * 0x1p-150 + 0.5 * prec_format_get(f)->min_subnormal;
        }
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < m; j++) {
            double v = 0, prop = 0, P = 0;
            for (int64_t k = 0; k < m; k++) {
                double ai = A[i * m + k], ak = A[k * m + j], ei = EA[i * m + k], ek = EA[k * m + j];
                v += ai * ak;
                prop += fabs(ai) * ek + ei * fabs(ak) + ei * ek;
                P += (fabs(ai) + ei) * (fabs(ak) + ek);
            }
            kval acc = {v, prop + gm * P + (double)m * 0x1p-150, 0.0};
            kval ahat = {A[i * m + j], EA[i * m + j], 0.0};
            kval z = kval_add(kval_mul(acc, kval_exact(c), F32), kval_mul(ahat, kval_exact(b), F32), F32);
            z = kval_round(z, f);
            B[i * m + j] = z.v;
            EB[i * m + j] = z.e;
        }
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double v = 0, prop = 0, P = 0;
            for (int64_t k = 0; k < m; k++) {
                double x = fabs(X[k * n + j]);
                v += B[i * m + k] * X[k * n + j];
                prop += EB[i * m + k] * x;
                P += (fabs(B[i * m + k]) + EB[i * m + k]) * x;
            }
            kval bx = {v, prop + gm * P + (double)m * 0x1p-150, 0.0};
            kval ax = kval_mul(kval_exact(X[i * n + j]), kval_exact(a), F32);
            kval y = fused ? kval_add(bx, ax, F32) : kval_add(ax, kval_round(bx, f), F32);
            out_e[i * n + j] = kval_round(y, f).e;
            out_s[i * n + j] = P + fabs(a * X[i * n + j]);
        }
    free(A); free(EA); free(B); free(EB);
}

static int check_shape(kcheck_ctx *ctx, kpath path, int variant, kpe_coeffs which, const pe_shape *s)
{
    const prec_format f = kcheck_path_format(path);
    const double u = prec_format_get(f)->unit_roundoff;
    const int64_t R = s->rows, C = s->cols, n = R * C;
    const int wide = variant == KPE_WIDE_FUSED || variant == KPE_WIDE_SPLIT;
    const int fused = variant == KPE_WIDE_FUSED || variant == KPE_TALL_FUSED;
    double *g = malloc(n * sizeof(double)), *x = malloc(n * sizeof(double)), *xn = malloc(n * sizeof(double));
    double *ref = malloc(n * sizeof(double)), *e = malloc(n * sizeof(double)), *xt = malloc(n * sizeof(double));
    double *et = malloc(n * sizeof(double)), *sc = malloc(n * sizeof(double)), *sct = malloc(n * sizeof(double));
    ktensor G = {0}, X = {0}, Xn = {0};
    int rc = -1;
    if (!g || !x || !xn || !ref || !e || !xt || !et || !sc || !sct) {
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
    ref_ctx rctx = REF_CTX_DEFAULT;
    ref_polar_express_normalize(&rctx, R, C, g, KPE_NORM_SAFETY, KPE_NORM_EPS, ref);
    {
        kval_sum ss;
        kval_sum_init(&ss);
        for (int64_t i = 0; i < n; i++) kval_sum_add(&ss, kval_exact(g[i] * g[i]));
        kval sum = kval_sum_finish(&ss, kpe_norm_depth(n), F32);
        kval norm = kval_monotone(sum, sqrt_d, 0.0, INFINITY, 0.5, 0.0, F32);
        kval den = kval_add(kval_mul(norm, kval_exact(KPE_NORM_SAFETY), F32), kval_exact(KPE_NORM_EPS), F32);
        kcheck_acc acc;
        kcheck_acc_init(&acc, "x0", shape_name, u);
        for (int64_t i = 0; i < n; i++) {
            kval y = kval_round(kval_div(kval_exact(g[i]), den, F32), f);
            if (kcheck_acc_add(&acc, i, x[i], ref[i], y.e, y.p, fabs(ref[i])))
                kcheck_acc_detail(&acc, "element %lld: got %.9g ref %.17g g %.9g", (long long)i, x[i], ref[i], g[i]);
        }
        kcheck_acc_report(ctx, &acc);
    }
    float abc[KPE_STEPS][3];
    kpe_coefficients(which, abc);
    for (int st = 0; st < KPE_STEPS; st++) {
        const double a = abc[st][0], b = abc[st][1], c = abc[st][2];
        if (ktensor_poison(&Xn) || kpolar_express_step(path, variant, R, C, abc[st][0], abc[st][1], abc[st][2],
                                                       X.data, Xn.data) ||
            kernels_sync("polar_express step") || ktensor_download(&Xn, xn))
            goto done;
        ref_polar_express_step(&rctx, R, C, x, a, b, c, ref);
        if (wide) {
            step_bound(path, fused, R, C, x, a, b, c, e, sc);
        } else { /* the tall form is the wide analysis of X^T */
            for (int64_t i = 0; i < R; i++)
                for (int64_t j = 0; j < C; j++) xt[j * R + i] = x[i * C + j];
            step_bound(path, fused, C, R, xt, a, b, c, et, sct);
            for (int64_t i = 0; i < R; i++)
                for (int64_t j = 0; j < C; j++) {
                    e[i * C + j] = et[j * R + i];
                    sc[i * C + j] = sct[j * R + i];
                }
        }
        static const char *const names[KPE_STEPS] = {"x1", "x2", "x3", "x4", "x5"};
        kcheck_acc acc;
        kcheck_acc_init(&acc, names[st], shape_name, u);
        for (int64_t i = 0; i < n; i++)
            if (kcheck_acc_add(&acc, i, xn[i], ref[i], e[i], e[i], sc[i]))
                kcheck_acc_detail(&acc, "step %d element %lld: got %.9g ref %.17g input %.9g (a b c = %g %g %g)",
                                  st + 1, (long long)i, xn[i], ref[i], x[i], a, b, c);
        kcheck_acc_report(ctx, &acc);
        /* the next step starts from the kernel's own iterate */
        ktensor t = X;
        X = Xn;
        Xn = t;
        memcpy(x, xn, n * sizeof(double));
    }
    rc = 0;
done:
    ktensor_free(&G); ktensor_free(&X); ktensor_free(&Xn);
    free(g); free(x); free(xn); free(ref); free(e); free(xt); free(et); free(sc); free(sct);
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
