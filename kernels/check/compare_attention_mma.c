/* kernels/check/compare_attention_mma.c — bounds of flash_mma and
 * flash_mma_exp2 (see check_attention_mma.h), replaying the kernels'
 * arithmetic (kernels/attention_mma.cu) on kval numbers; no GPU needed
 * (`ulpscope verify` links it), the model is given.
 *
 * Tensor-core products.  Every product the kernels form (q k^T, P~ v,
 * dout v^T, P~^T dout, dS~^T q, dS~ k) is a chain of blocks of the GPU's
 * model (precision/mma.h: L products per block, aligned at multiples of L in
 * the reduction index, the accumulator entering each block as c, fp32 RZ
 * out).  Each block adds mma_align_bound + mma_out_bound (the derivation is
 * in precision/mma.h; tests/test_mma_bound.c checks it against the
 * bit-accurate model), evaluated on upper bounds of the magnitudes the block
 * sees: |a| <= |a.v| + a.e for an operand known as a kval (P~, dS~), |c| <=
 * |acc.v| + acc.e.  An operand's own error enters as sum a.e |b|.  Exact
 * zeros (masked P) contribute nothing, and a block of exact zeros is the
 * identity (the kernel skips such chunks).  Truncation errors are biased,
 * so the probabilistic bound (kval.p) takes the blocks' worst case, as
 * check_matmul.c does for tensor cores.
 *
 * Forward, in the frame of the row's final maximum.  The kernel holds
 * p_j = exp(x_j - m_t) in the frame of the running maximum m_t of its tile
 * t and rescales the accumulator and l by corr_t = exp(m_{t-1} - m_t) at
 * each tile.  Multiplying every frame-t quantity by R_t = exp(m_t - M)
 * (computed maxima, exact exp; R_t <= 1, R_last = 1) maps the computation
 * onto final-frame quantities: a rescale becomes a multiplication by
 * corr^_t / corr_t = 1 + eta_t, P~ becomes a value near w_j = exp(x_j - M),
 * and every rounding or block bound of frame t, multiplied by R_t, is at
 * most the same bound evaluated on the final-frame magnitudes (the bounds
 * are homogeneous of degree one, and their absolute floors, subnormals and
 * 2^zero_exp, only shrink under R_t <= 1).  Hence:
 *  - x_j = fp32(s_j sc) (s_j: the mma chain over d), M = max x (exact max,
 *    error max_j e_j), m_t the running maxima;
 *  - w_j = exp(x_j - M) with argument error e_j + e_M + u |x_j - m_t| (the
 *    fp32 subtraction in frame t) and 2 ulps of expf/exp2f; P~_j = w_j
 *    rounded into the path's format (u_f relative, half a subnormal);
 *  - eta_t: exp(u |Delta|) (1 + 4u + 2 s / corr_lo) - 1 (u |Delta| ln 2 in log2
 *    units) for the subtraction
 *    m_{t-1} - m_t (|Delta| <= |m_{t-1} - m_t| + 2 e_M) and expf's 2 ulps
 *    (s: the smallest fp32 subnormal, corr_lo = exp(-|Delta|));
 *  - l: each tile's row sum of the fp32 p (16 sequential terms a thread, a
 *    butterfly of 2: depth 17), l = fma(l, corr, r) (one rounding);
 *  - acc: at a tile, times (1 + eta_t) and one fp32 rounding (the FMUL),
 *    then the tile's blocks; o = fp32(acc / l) rounded into the format;
 *    lse = M + log l (exp2: (M + log2 l) fp32(ln 2)).
 * Backward: delta = rowsum(dout o) as the flash variants form it (warp
 * sum), p = exp(fp32(s sc) - lse') from the stored lse, dP by the mma
 * chain, ds = fp32(p fp32(dP - delta)), P~ and dS~ rounded into the format,
 * then the three chains, the scale product (dq, dk) and the store.
 * expf/exp2f 2 ulps, logf/log2f 1 ulp: CUDA C++ Programming Guide,
 * "Mathematical Functions". */
#include "kernels/check/check_attention_mma.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"

static const prec_format F32 = PREC_FP32;

/* acc += sum_{t<n} a[t sa] b[t sb]: one block of the model, a kvals (values of
 * the format, errors propagated), b exact.  *abs_sum collects sum |a| |b|. */
static void block_step(const mma_arith *p, kval *acc, int n, const kval *a, int64_t sa, const double *b, int64_t sb,
                       double *abs_sum)
{
    const double c_abs = fabs(acc->v) + acc->e;
    double y = acc->v, in_e = 0, in_p = 0, M = ldexp(1.0, p->zero_exp);
    int N = 0;
    if (c_abs > 0) {
        M = fmax(M, mma_exp_scale(p->out, c_abs));
        N++;
    }
    for (int t = 0; t < n; t++) {
        const kval x = a[t * sa];
        const double bv = b[t * sb];
        if ((x.v == 0 && x.e == 0) || bv == 0) continue;
        y += x.v * bv;
        in_e += x.e * fabs(bv);
        in_p += x.p * fabs(bv);
        if (abs_sum) *abs_sum += (fabs(x.v) + x.e) * fabs(bv);
        M = fmax(M, mma_exp_scale(p->in, fabs(x.v) + x.e) * mma_exp_scale(p->in, bv));
        N++;
    }
    const double A = mma_align_bound(p, N, M);
    const double blk = A + mma_out_bound(p, fabs(y) + acc->e + in_e + A);
    acc->v = y;
    acc->e += in_e + blk;
    acc->p += in_p + blk;
}

/* The chain over positions [lo, hi) of a reduction whose blocks sit at
 * multiples of L, from c = +0; positions outside [lo, hi) are exact zeros. */
static kval chain(const mma_arith *p, int64_t lo, int64_t hi, const kval *a, int64_t sa, const double *b, int64_t sb,
                  double *abs_sum)
{
    kval acc = {0, 0, 0};
    const int L = p->block;
    for (int64_t s = lo / L * L; s < hi; s += L) {
        const int64_t from = s > lo ? s : lo, to = s + L < hi ? s + L : hi;
        block_step(p, &acc, (int)(to - from), a + from * sa, sa, b + from * sb, sb, abs_sum);
    }
    return acc;
}

/* x . y over D as the tensor cores form it (exact inputs). */
static kval dot_mma(const katt_mma_head *h, const double *x, const double *y, kval *scratch)
{
    for (int64_t d = 0; d < h->D; d++) scratch[d] = kval_exact(x[d]);
    return chain(h->mma, 0, h->D, scratch, 1, y, 1, NULL);
}

static double exp_d(double x) { return exp(x); }
static double exp2_d(double x) { return exp2(x); }
static double log_d(double x) { return log(x); }
static double log2_d(double x) { return log2(x); }

/* K (1 + eta): a relative error eta on the value K holds. */
static kval grow(kval K, double eta)
{
    K.e += eta * (fabs(K.v) + K.e);
    K.p += eta * (fabs(K.v) + K.p);
    return K;
}

/* |corr^ / corr - 1| for corr = exp(m_prev - m_cur) computed as
 * expf(fp32(m_prev - m_cur)) (units of the exponential), the maxima known
 * within e_m. */
static double corr_eta(const katt_mma_head *h, double m_prev, double m_cur, double e_m)
{
    const double u = prec_format_get(F32)->unit_roundoff, sub = prec_format_get(F32)->min_subnormal;
    const double delta = fabs(m_cur - m_prev) + 2 * e_m;
    const double arg = u * delta * (h->exp2 ? log(2.0) : 1.0);
    const double corr_lo = h->exp2 ? exp2(-delta) : exp(-delta);
    if (corr_lo == 0) return INFINITY;
    return exp(arg) * (1 + 4 * u + 2 * sub / corr_lo) - 1;
}

void katt_mma_forward_bounds(const katt_mma_head *h, kval sck, kval ln2, kval *o, kval *lse)
{
    const int64_t T = h->T, D = h->D, BN = KATT_MMA_KEYS;
    const double u = prec_format_get(F32)->unit_roundoff;
    double (*ex)(double) = h->exp2 ? exp2_d : exp_d;
    kval *x = malloc(T * sizeof(kval)), *pt = malloc(T * sizeof(kval)), *scr = malloc(D * sizeof(kval));
    double *mrun = malloc(((T + BN - 1) / BN) * sizeof(double)), *eta = malloc(((T + BN - 1) / BN) * sizeof(double));
    double *vcol = malloc(T * sizeof(double));
    if (!x || !pt || !scr || !mrun || !eta || !vcol) abort();
    for (int64_t i = 0; i < T; i++) {
        const int64_t tiles = i / BN + 1;
        double me = 0, mp = 0;
        for (int64_t j = 0; j <= i; j++) {
            x[j] = kval_mul(dot_mma(h, h->q + i * D, h->k + j * D, scr), sck, F32);
            me = fmax(me, x[j].e);
            mp = fmax(mp, x[j].p);
        }
        for (int64_t t = 0; t < tiles; t++) {
            double m = t ? mrun[t - 1] : -INFINITY;
            for (int64_t j = t * BN; j <= i && j < (t + 1) * BN; j++) m = fmax(m, x[j].v);
            mrun[t] = m;
            eta[t] = t ? corr_eta(h, mrun[t - 1], m, me) : 0;
        }
        const kval M = {mrun[tiles - 1], me, mp};
        /* w_j in the final frame (fp32 p, for l) and P~_j (for the products) */
        kval l = {0, 0, 0};
        for (int64_t t = 0; t < tiles; t++) {
            kval_sum S;
            kval_sum_init(&S);
            for (int64_t j = t * BN; j <= i && j < (t + 1) * BN; j++) {
                const double rng_e = fabs(x[j].v - mrun[t]) + x[j].e + me, rng_p = fabs(x[j].v - mrun[t]) + x[j].p + mp;
                kval arg = {x[j].v - M.v, x[j].e + me + u * rng_e, x[j].p + mp + u * rng_p};
                kval w = kval_monotone(arg, ex, -INFINITY, INFINITY, 2.0, 0.0, F32);
                kval_sum_add(&S, w);
                pt[j] = kval_round(w, h->f);
            }
            kval r = kval_sum_finish(&S, 17, F32);
            l = t ? kval_add(grow(l, eta[t]), r, F32) : r;
        }
        if (h->exp2)
            lse[i] = kval_mul(kval_add(M, kval_monotone(l, log2_d, 0.0, INFINITY, 1.0, 0.0, F32), F32), ln2, F32);
        else
            lse[i] = kval_add(M, kval_monotone(l, log_d, 0.0, INFINITY, 1.0, 0.0, F32), F32);
        for (int64_t d = 0; d < D; d++) {
            for (int64_t j = 0; j <= i; j++) vcol[j] = h->v[j * D + d];
            kval acc = {0, 0, 0};
            for (int64_t t = 0; t < tiles; t++) {
                if (t) acc = kval_round(grow(acc, eta[t]), F32);
                const int64_t hi = (t + 1) * BN < i + 1 ? (t + 1) * BN : i + 1;
                for (int64_t s = t * BN; s < hi; s += h->mma->block) {
                    const int64_t to = s + h->mma->block < hi ? s + h->mma->block : hi;
                    block_step(h->mma, &acc, (int)(to - s), pt + s, 1, vcol + s, 1, NULL);
                }
            }
            o[i * D + d] = kval_round(kval_div(acc, l, F32), h->f);
        }
    }
    free(x); free(pt); free(scr); free(mrun); free(eta); free(vcol);
}

void katt_mma_backward_bounds(const katt_mma_head *h, kval sck, kval log2e, const kval *o, const kval *lse, kval *dq,
                              double *dq_scale, kval *dk, double *dk_scale, kval *dv, double *dv_scale)
{
    const int64_t T = h->T, D = h->D;
    double (*ex)(double) = h->exp2 ? exp2_d : exp_d;
    kval *P = calloc(T * T, sizeof(kval)), *S = calloc(T * T, sizeof(kval)), *scr = malloc(D * sizeof(kval));
    double *col = malloc(T * sizeof(double));
    if (!P || !S || !scr || !col) abort();
    for (int64_t i = 0; i < T; i++) {
        kval_sum dl;
        kval_sum_init(&dl);
        for (int64_t d = 0; d < D; d++) kval_sum_add(&dl, kval_mul(kval_exact(h->g[i * D + d]), o[i * D + d], PREC_FP64));
        const kval delta = kval_sum_finish(&dl, kcheck_tree_depth(D, 32), F32);
        const kval L = h->exp2 ? kval_mul(lse[i], log2e, F32) : lse[i];
        for (int64_t j = 0; j <= i; j++) {
            const kval x = kval_mul(dot_mma(h, h->q + i * D, h->k + j * D, scr), sck, F32);
            const kval p = kval_monotone(kval_sub(x, L, F32), ex, -INFINITY, INFINITY, 2.0, 0.0, F32);
            const kval dp = dot_mma(h, h->g + i * D, h->v + j * D, scr);
            P[i * T + j] = kval_round(p, h->f);
            S[i * T + j] = kval_round(kval_mul(p, kval_sub(dp, delta, F32), F32), h->f);
        }
    }
    const kval sc = kval_exact(h->scale);
    for (int64_t i = 0; i < T; i++)
        for (int64_t d = 0; d < D; d++) {
            double abs_sum = 0;
            for (int64_t j = 0; j <= i; j++) col[j] = h->k[j * D + d];
            kval acc = chain(h->mma, 0, i + 1, S + i * T, 1, col, 1, &abs_sum);
            dq[i * D + d] = kval_round(kval_mul(acc, sc, F32), h->f);
            dq_scale[i * D + d] = h->scale * abs_sum;
        }
    for (int64_t j = 0; j < T; j++)
        for (int64_t d = 0; d < D; d++) {
            double ak = 0, av = 0;
            for (int64_t i = 0; i < T; i++) col[i] = h->q[i * D + d];
            kval acc = chain(h->mma, j, T, S + j, T, col, 1, &ak);
            dk[j * D + d] = kval_round(kval_mul(acc, sc, F32), h->f);
            dk_scale[j * D + d] = h->scale * ak;
            for (int64_t i = 0; i < T; i++) col[i] = h->g[i * D + d];
            acc = chain(h->mma, j, T, P + j, T, col, 1, &av);
            dv[j * D + d] = kval_round(acc, h->f);
            dv_scale[j * D + d] = av;
        }
    free(P); free(S); free(scr); free(col);
}
