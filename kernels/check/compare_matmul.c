/* kernels/check/compare_matmul.c — a GEMM with epilogue against MPFR with
 * the bound of a described kernel (compare_matmul.h). */
#include "kernels/check/compare_matmul.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "reference/matmul.h"
#include "reference/matmul_epilogue.h"

static const double U32 = 0x1p-24;

static double gelu_d(double z) { return 0.5 * z * (1.0 + tanh(0.7978845608028654 * (z + 0.044715 * z * z * z))); }

/* Half the smallest subnormal of the accumulator: what each of the K
 * accumulations can lose to underflow (fp32 for the matrix units). */
static double underflow_per_term(const prec_dot_model *m)
{
    if (m->kind != PREC_DOT_ROUNDED) return 0x1p-150;
    return m->acc == PREC_FP64 ? 0.0 : 0.5 * prec_format_get(m->acc)->min_subnormal;
}

/* One slice's dot as a kval: v = its exact value, e = G P_s. */
static kval slice_kval(const prec_dot_model *m, double v, double P, int64_t K, int *truncating)
{
    double g = prec_dot_factor(m, K, truncating);
    double eta = (double)K * underflow_per_term(m);
    kval d = {v, g * P + eta, 0.0};
    d.p = *truncating ? d.e : kval_gamma_prob(m->depth, prec_dot_unit(m)) * P + eta;
    return d;
}

int kcmp_matmul(const kcmp_matmul_kernel *k, const kcmp_matmul_data *d, const char *shape, kcheck_acc *row)
{
    const int64_t M = d->M, N = d->N, K = d->K;
    const double *c = k->beta != 0 ? d->c : NULL;
    const size_t elements = M * N > 0 ? (size_t)(M * N) : 1;
    double *S = malloc(elements * sizeof(double)), *yref = malloc(elements * sizeof(double));
    if (!S || !yref) {
        free(S);
        free(yref);
        return -1;
    }
    ref_ctx rctx = REF_CTX_DEFAULT;
    ref_matmul(&rctx, M, N, K, d->a, d->a_rs, d->a_cs, d->b, d->b_rs, d->b_cs, S, N);
    const int plain = !d->bias && !k->gelu && k->alpha == 1.0 && !c;
    if (plain) memcpy(yref, S, M * N * sizeof(double));
    else
        ref_matmul_epilogue(&rctx, M, N, K, d->a, d->a_rs, d->a_cs, d->b, d->b_rs, d->b_cs, k->alpha, c, k->beta,
                            d->bias, k->gelu, yref, N);

    const int64_t slice = k->slice < K ? k->slice : K;
    kcheck_acc_init(row, "y", shape, prec_format_get(k->out)->unit_roundoff);
    for (int64_t m = 0; m < M; m++) {
        for (int64_t n = 0; n < N; n++) {
            kval_sum slices;
            kval_sum_init(&slices);
            double P = 0;
            int n_slices = 0, truncating = 0;
            for (int64_t k0 = 0; k0 < K; k0 += slice, n_slices++) {
                int64_t kl = K - k0 < slice ? K - k0 : slice;
                double Ps = 0, vs = 0;
                for (int64_t i = k0; i < k0 + kl; i++) {
                    double t = d->a[m * d->a_rs + i * d->a_cs] * d->b[i * d->b_rs + n * d->b_cs];
                    Ps += fabs(t);
                    vs += t;
                }
                P += Ps;
                kval_sum_add(&slices, slice_kval(kl < slice ? &k->dot_last : &k->dot, vs, Ps, kl, &truncating));
            }
            kval dot = n_slices > 1 ? kval_sum_finish(&slices, n_slices - 1, k->slice_sum)
                                    : kval_sum_finish(&slices, 0, PREC_FP64);
            dot.v = S[m * N + n];
            /* epilogue, in the order the kernels apply it */
            kval z = kval_mul(dot, kval_exact(k->alpha), k->alpha == 1.0 ? PREC_FP64 : PREC_FP32);
            if (c) z = kval_add(z, kval_mul(kval_exact(c[m * N + n]), kval_exact(k->beta), PREC_FP32), PREC_FP32);
            if (k->round_product && (d->bias || k->gelu)) z = kval_round(z, k->out);
            if (d->bias) z = kval_add(z, kval_exact(d->bias[n]), PREC_FP32);
            kval y = z;
            if (k->gelu) {
                double tanh_err = 0.5 * fabs(z.v) * k->tanh_rel_err;
                y = kval_lipschitz(z, gelu_d, 1.12899, 0.5, tanh_err + 5 * U32 * fabs(z.v), PREC_FP32);
            }
            y = kval_round(y, k->out);
            if (truncating) y.p = y.e;
            double scale = fabs(k->alpha) * P + (c ? fabs(k->beta * c[m * N + n]) : 0) + (d->bias ? fabs(d->bias[n]) : 0);
            int64_t i = m * N + n;
            if (kcheck_acc_add(row, i, d->y[i], yref[i], y.e, y.p, scale))
                kcheck_acc_detail(row, "m %lld n %lld: got %.9g ref %.17g, sum|ab| %.6g, exact dot %.9g%s%s",
                                  (long long)m, (long long)n, d->y[i], yref[i], P, S[i], d->note ? "; " : "",
                                  d->note ? d->note : "");
        }
    }
    kcheck_acc_finish(row);
    free(S);
    free(yref);
    return 1;
}
