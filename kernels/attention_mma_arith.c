/* kernels/attention_mma_arith.c — see attention_mma_arith.h; the kernels'
 * arithmetic it follows is written out at the top of kernels/attention_mma.cu.
 *
 * Operands enter the model as the bits of the path's format, encoded once
 * per call: q, k, v, g rows [T][D] for the d chains, and the columns k^T,
 * q^T, v^T, g^T [D][T] and P^T, dS^T [T][T] for the chains over keys or
 * queries, so that every chain reads two contiguous runs.  The matrix units
 * run through mma_fast_dot where the model allows it (bit-identical to
 * mma_dot: tests/test_mma_fast.c), else through mma_dot. */
#include "kernels/attention_mma_arith.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "precision/mma_fast.h"

#define LOG2E_F 1.4426950408889634f
#define LN2_F 0.6931471805599453f
#define INSTR_K 16 /* products per mma.m16n8k16 */

typedef struct {
    const mma_arith *p;
    int fast;
} units;

static units units_of(const katt_mma_arith *e) { return (units){e->mma, mma_fast_supported(e->mma)}; }

/* acc + a[0..16) . b[0..16) through one k16 instruction. */
static float instr(const units *u, float acc, const uint16_t *a, const uint16_t *b)
{
    uint32_t c;
    memcpy(&c, &acc, 4);
    c = u->fast ? mma_fast_dot(u->p, INSTR_K, a, b, c, 0) : mma_dot(u->p, INSTR_K, a, b, c);
    memcpy(&acc, &c, 4);
    return acc;
}

/* acc + sum_{lo <= i < hi} a[i] b[i], one k16 instruction at a time from
 * position lo / 16 * 16 (positions outside [lo, hi) enter as zeros, as the
 * kernels' masked or zero-filled operands do). */
static float chain(const units *u, float acc, int64_t lo, int64_t hi, const uint16_t *a, const uint16_t *b)
{
    for (int64_t s = lo / INSTR_K * INSTR_K; s < hi; s += INSTR_K) {
        if (s >= lo && s + INSTR_K <= hi) {
            acc = instr(u, acc, a + s, b + s);
            continue;
        }
        uint16_t ab[INSTR_K], bb[INSTR_K];
        for (int t = 0; t < INSTR_K; t++) {
            const int64_t i = s + t;
            const int in = i >= lo && i < hi;
            ab[t] = in ? a[i] : 0;
            bb[t] = in ? b[i] : 0;
        }
        acc = instr(u, acc, ab, bb);
    }
    return acc;
}

static uint16_t bits_of(double x, prec_format f) { return (uint16_t)prec_encode(x, f); }

/* rows [T][D] and columns [D][T] of a head's tensor as bits of f (either may be NULL) */
static void encode(const double *x, int64_t T, int64_t D, prec_format f, uint16_t *rows, uint16_t *cols)
{
    for (int64_t i = 0; i < T; i++)
        for (int64_t d = 0; d < D; d++) {
            const uint16_t b = bits_of(x[i * D + d], f);
            if (rows) rows[i * D + d] = b;
            if (cols) cols[d * T + i] = b;
        }
}

static double store(const katt_mma_arith *e, double x)
{
    prec_rounding r = PREC_ROUNDING_RNE;
    if (e->bug == KBUG_TRUNCATE_OUTPUT) r.mode = PREC_RZ;
    return prec_round(x, e->f, r, 0);
}

static float expo(const katt_mma_arith *e, float x) { return e->exp2 ? exp2f(x) : expf(x); }

/* The score chain's length: the drop-term bug leaves element D-1 out. */
static int64_t score_len(const katt_mma_arith *e) { return e->bug == KBUG_DROP_TERM ? e->D - 1 : e->D; }

int katt_mma_arith_forward(const katt_mma_arith *e, const double *q, const double *k, const double *v, double *o,
                           double *lse)
{
    const int64_t T = e->T, D = e->D, BN = KATT_MMA_KEYS, DS = score_len(e);
    const units u = units_of(e);
    const float sc = e->exp2 ? e->scale * LOG2E_F : e->scale;
    uint16_t *qb = malloc(sizeof(uint16_t) * (size_t)(T * D + 1)), *kb = malloc(sizeof(uint16_t) * (size_t)(T * D + 1)),
             *vt = malloc(sizeof(uint16_t) * (size_t)(T * D + 1)), *pt = malloc(sizeof(uint16_t) * (size_t)(T + 1));
    float *x = malloc(sizeof(float) * (size_t)(T + 1)), *acc = malloc(sizeof(float) * (size_t)(D + 1));
    int rc = qb && kb && vt && pt && x && acc ? 0 : -1;
    if (!rc) {
        encode(q, T, D, e->f, qb, NULL);
        encode(k, T, D, e->f, kb, NULL);
        encode(v, T, D, e->f, NULL, vt);
    }
    for (int64_t i = 0; !rc && i < T; i++) {
        for (int64_t j = 0; j <= i; j++) x[j] = chain(&u, 0.0f, 0, DS, qb + i * D, kb + j * D) * sc;
        float m = -INFINITY, l = 0.0f;
        for (int64_t d = 0; d < D; d++) acc[d] = 0.0f;
        for (int64_t k0 = 0; k0 <= i; k0 += BN) {
            const int64_t hi = k0 + BN < i + 1 ? k0 + BN : i + 1;
            float mx = m;
            for (int64_t j = k0; j < hi; j++) mx = fmaxf(mx, x[j]);
            const float corr = expo(e, m - mx); /* 0 on the first tile */
            m = mx;
            float part[4] = {0, 0, 0, 0}; /* the quad's threads t: keys 8n + 2t + c, in that order */
            for (int t = 0; t < 4; t++)
                for (int n = 0; n < 8; n++)
                    for (int c = 0; c < 2; c++) {
                        const int64_t j = k0 + 8 * n + 2 * t + c;
                        const float p = j <= i ? expo(e, x[j] - m) : 0.0f;
                        part[t] += p;
                        if (j <= i) pt[j] = bits_of(prec_rne(p, e->f), e->f);
                    }
            const float rs = (part[0] + part[1]) + (part[2] + part[3]);
            l = fmaf(l, corr, rs);
            for (int64_t d = 0; d < D; d++) acc[d] = chain(&u, acc[d] * corr, k0, hi, pt, vt + d * T);
        }
        for (int64_t d = 0; d < D; d++) o[i * D + d] = store(e, acc[d] / l);
        const float L = e->exp2 ? (m + log2f(l)) * LN2_F : m + logf(l);
        if (e->bug == KBUG_TRUNCATE_OUTPUT) { /* the fp32 store truncated as kelem.cuh does: to bf16 bits */
            prec_rounding rz = PREC_ROUNDING_RNE;
            rz.mode = PREC_RZ;
            lse[i] = prec_round(L, PREC_BF16, rz, 0);
        } else {
            lse[i] = L;
        }
    }
    free(qb), free(kb), free(vt), free(pt), free(x), free(acc);
    return rc;
}

float katt_mma_arith_delta(const double *g, const double *o, int64_t D)
{
    float lane[32];
    for (int l = 0; l < 32; l++) {
        lane[l] = 0.0f;
        for (int64_t d = l; d < D; d += 32) lane[l] = fmaf((float)g[d], (float)o[d], lane[l]);
    }
    for (int off = 16; off > 0; off >>= 1) {
        float next[32];
        for (int l = 0; l < 32; l++) next[l] = lane[l] + lane[l ^ off];
        memcpy(lane, next, sizeof lane);
    }
    return lane[0];
}

int katt_mma_arith_backward(const katt_mma_arith *e, const double *q, const double *k, const double *v,
                            const double *g, const double *o, const double *lse, double *dq, double *dk, double *dv)
{
    const int64_t T = e->T, D = e->D, DS = score_len(e);
    const units u = units_of(e);
    const float sc = e->exp2 ? e->scale * LOG2E_F : e->scale;
    const size_t td = sizeof(uint16_t) * (size_t)(T * D + 1), tt = sizeof(uint16_t) * (size_t)(T * T + 1);
    uint16_t *qb = malloc(td), *kb = malloc(td), *vb = malloc(td), *gb = malloc(td), *qt = malloc(td), *kt = malloc(td),
             *gt = malloc(td), *S = calloc(1, tt), *St = calloc(1, tt), *Pt = calloc(1, tt);
    int rc = qb && kb && vb && gb && qt && kt && gt && S && St && Pt ? 0 : -1;
    if (!rc) {
        encode(q, T, D, e->f, qb, qt);
        encode(k, T, D, e->f, kb, kt);
        encode(v, T, D, e->f, vb, NULL);
        encode(g, T, D, e->f, gb, gt);
    }
    /* P~ and dS~ of every causal pair (query i, key j <= i) */
    for (int64_t i = 0; !rc && i < T; i++) {
        const float delta = katt_mma_arith_delta(g + i * D, o + i * D, D);
        const float L = e->exp2 ? (float)lse[i] * LOG2E_F : (float)lse[i];
        for (int64_t j = 0; j <= i; j++) {
            const float p = expo(e, chain(&u, 0.0f, 0, DS, qb + i * D, kb + j * D) * sc - L);
            const float dp = chain(&u, 0.0f, 0, D, gb + i * D, vb + j * D);
            const uint16_t ds = bits_of(prec_rne(p * (dp - delta), e->f), e->f);
            S[i * T + j] = St[j * T + i] = ds;
            Pt[j * T + i] = bits_of(prec_rne(p, e->f), e->f);
        }
    }
    for (int64_t i = 0; !rc && i < T; i++)
        for (int64_t d = 0; d < D; d++) dq[i * D + d] = store(e, chain(&u, 0.0f, 0, i + 1, S + i * T, kt + d * T) * e->scale);
    for (int64_t j = 0; !rc && j < T; j++)
        for (int64_t d = 0; d < D; d++) {
            dk[j * D + d] = store(e, chain(&u, 0.0f, j, T, St + j * T, qt + d * T) * e->scale);
            dv[j * D + d] = store(e, chain(&u, 0.0f, j, T, Pt + j * T, gt + d * T));
        }
    free(qb), free(kb), free(vb), free(gb), free(qt), free(kt), free(gt), free(S), free(St), free(Pt);
    return rc;
}
