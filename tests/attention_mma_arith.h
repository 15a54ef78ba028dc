/* tests/attention_mma_arith.h — the arithmetic of the flash_mma kernels
 * (kernels/attention_mma.cu) emulated on the CPU, operation by operation:
 * score and product chains through the bit-accurate matrix-unit model
 * (precision/mma.h, one mma_dot per k16 instruction with the running
 * accumulator as c), the online softmax over 64-key tiles in fp32 float
 * operations, the row sum in the kernels' order (4 threads of 16 sequential
 * terms, then a butterfly), P and dS rounded into the path's format, the
 * delta warp sum; host expf/exp2f/logf/log2f stand for CUDA's.  Planted bugs
 * as the kernels plant them.  Shared by tests/test_attention_mma_bound.c (C)
 * and tests/test_attention_mma_simt.cc (C++); compile with contraction off
 * (C11 and C++17 ISO modes do). */
#ifndef ULPSCOPE_TESTS_ATTENTION_MMA_ARITH_H
#define ULPSCOPE_TESTS_ATTENTION_MMA_ARITH_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "precision/format.h"
#include "precision/mma.h"

typedef struct {
    const mma_arith *p;
    prec_format f;
    int exp2, bug;
    int64_t T, D;
    float scale;
} arith_emu;

static inline double arith_store(const arith_emu *e, double x)
{
    prec_rounding r = PREC_ROUNDING_RNE;
    if (e->bug == KBUG_TRUNCATE_OUTPUT) r.mode = PREC_RZ;
    return prec_round(x, e->f, r, 0);
}

static inline float arith_exp(const arith_emu *e, float x) { return e->exp2 ? exp2f(x) : expf(x); }

/* acc + sum_{t<n} a[t sa] b[t sb] through the model, one k16 instruction at a
 * time from position 0 (a, b values of the format; past n: zeros). */
static inline float arith_chain(const arith_emu *e, float acc, int64_t lo, int64_t hi, const double *a, int64_t sa, const double *b,
                   int64_t sb)
{
    uint16_t abuf[16], bbuf[16];
    for (int64_t s = lo / 16 * 16; s < hi; s += 16) {
        for (int t = 0; t < 16; t++) {
            const int64_t i = s + t;
            const int in = i >= lo && i < hi;
            mma_store(e->f, abuf, t, in ? a[i * sa] : 0.0);
            mma_store(e->f, bbuf, t, in ? b[i * sb] : 0.0);
        }
        uint32_t c;
        memcpy(&c, &acc, 4);
        c = mma_dot(e->p, 16, abuf, bbuf, c);
        memcpy(&acc, &c, 4);
    }
    return acc;
}

/* q_i . k_j as the kernel forms it (drop-term: the last d left out). */
static inline float arith_score_dot(const arith_emu *e, const double *qi, const double *kj)
{
    return arith_chain(e, 0.0f, 0, e->bug == KBUG_DROP_TERM ? e->D - 1 : e->D, qi, 1, kj, 1);
}

static inline void arith_forward(const arith_emu *e, const double *q, const double *k, const double *v, double *o, double *lse)
{
    const int64_t T = e->T, D = e->D, BN = KATT_MMA_KEYS;
    const float sc = e->exp2 ? e->scale * 1.4426950408889634f : e->scale;
    float *x = (float *)malloc(T * sizeof(float)), *acc = (float *)malloc(D * sizeof(float));
    double *pt = (double *)malloc(T * sizeof(double));
    if (!x || !acc || !pt) abort();
    for (int64_t i = 0; i < T; i++) {
        for (int64_t j = 0; j <= i; j++) x[j] = arith_score_dot(e, q + i * D, k + j * D) * sc;
        float m = -INFINITY, l = 0.0f;
        for (int64_t d = 0; d < D; d++) acc[d] = 0.0f;
        for (int64_t k0 = 0; k0 <= i; k0 += BN) {
            float mx = m;
            for (int64_t j = k0; j < k0 + BN && j <= i; j++) mx = fmaxf(mx, x[j]);
            const float corr = arith_exp(e, m - mx);
            m = mx;
            float part[4] = {0, 0, 0, 0}; /* the quad's threads: keys 8n + 2t + c */
            for (int t = 0; t < 4; t++)
                for (int n = 0; n < 8; n++)
                    for (int c = 0; c < 2; c++) {
                        const int64_t j = k0 + 8 * n + 2 * t + c;
                        const float p = j <= i ? arith_exp(e, x[j] - m) : 0.0f;
                        part[t] += p;
                        if (j <= i) pt[j] = prec_rne(p, e->f);
                    }
            const float rs = (part[0] + part[1]) + (part[2] + part[3]);
            l = fmaf(l, corr, rs);
            for (int64_t d = 0; d < D; d++) {
                acc[d] = acc[d] * corr;
                const int64_t hi = k0 + BN < i + 1 ? k0 + BN : i + 1;
                acc[d] = arith_chain(e, acc[d], k0, hi, pt, 1, v + d, D);
            }
        }
        for (int64_t d = 0; d < D; d++) o[i * D + d] = arith_store(e, acc[d] / l);
        const float L = e->exp2 ? (m + log2f(l)) * 0.6931471805599453f : m + logf(l);
        if (e->bug == KBUG_TRUNCATE_OUTPUT) {
            prec_rounding rz = PREC_ROUNDING_RNE;
            rz.mode = PREC_RZ;
            lse[i] = prec_round(L, PREC_BF16, rz, 0);
        } else {
            lse[i] = L;
        }
    }
    free(x); free(acc); free(pt);
}

/* dout . o as delta_kernel: 32 lanes of strided fma chains, butterfly 16 .. 1 (lane 0). */
static inline float arith_delta(const double *g, const double *o, int64_t D)
{
    float lane[32];
    for (int l = 0; l < 32; l++) {
        lane[l] = 0.0f;
        for (int64_t d = l; d < D; d += 32) lane[l] = fmaf((float)g[d], (float)o[d], lane[l]);
    }
    for (int off = 16; off > 0; off >>= 1) {
        float nxt[32];
        for (int l = 0; l < 32; l++) nxt[l] = lane[l] + lane[l ^ off];
        memcpy(lane, nxt, sizeof lane);
    }
    return lane[0];
}

static inline void arith_backward(const arith_emu *e, const double *q, const double *k, const double *v, const double *g, const double *o,
                     const double *lse, double *dq, double *dk, double *dv)
{
    const int64_t T = e->T, D = e->D;
    const float sc = e->exp2 ? e->scale * 1.4426950408889634f : e->scale;
    double *P = (double *)calloc(T * T, sizeof(double)), *S = (double *)calloc(T * T, sizeof(double));
    if (!P || !S) abort();
    for (int64_t i = 0; i < T; i++) {
        const float delta = arith_delta(g + i * D, o + i * D, D);
        const float L = e->exp2 ? (float)lse[i] * 1.4426950408889634f : (float)lse[i];
        for (int64_t j = 0; j <= i; j++) {
            const float p = arith_exp(e, arith_score_dot(e, q + i * D, k + j * D) * sc - L);
            const float dp = arith_chain(e, 0.0f, 0, D, g + i * D, 1, v + j * D, 1);
            P[i * T + j] = prec_rne(p, e->f);
            S[i * T + j] = prec_rne(p * (dp - delta), e->f);
        }
    }
    for (int64_t i = 0; i < T; i++)
        for (int64_t d = 0; d < D; d++) dq[i * D + d] = arith_store(e, arith_chain(e, 0.0f, 0, i + 1, S + i * T, 1, k + d, D) * e->scale);
    for (int64_t j = 0; j < T; j++)
        for (int64_t d = 0; d < D; d++) {
            dk[j * D + d] = arith_store(e, arith_chain(e, 0.0f, j, T, S + j, T, q + d, D) * e->scale);
            dv[j * D + d] = arith_store(e, arith_chain(e, 0.0f, j, T, P + j, T, g + d, D));
        }
    free(P); free(S);
}

#endif
