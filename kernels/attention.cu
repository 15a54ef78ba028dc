// kernels/attention.cu — causal self-attention: naive (materialised scores)
// and flash-style (online softmax over key tiles), forward and backward; see
// attention.h.  Every reduction has a fixed order (sequential fma chains and
// fixed butterflies), so results are bitwise repeatable.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdio>

#include "kernels/attention.h"
#include "kernels/kelem.cuh"
#include "kernels/kreduce.cuh"

extern "C" const kvariant katt_variants[KATT_NVARIANTS] = {
    {"naive", "scores S and probabilities P [T,T] materialised in the path's format; dP and dS likewise"},
    {"flash", "one warp per query row, keys in tiles of 32, online softmax in fp32; backward recomputes P from lse"},
    {"flash_exp2", "flash with log2(e) folded into the score scale and exp2f instead of expf"},
};

static const int WARPS = 4; // rows per block in the warp-per-row kernels
static const float kLog2eF = 1.4426950408889634f, kLn2F = 0.6931471805599453f;

template <int EXP2> __device__ __forceinline__ float kexp(float x) { return EXP2 ? exp2f(x) : expf(x); }

__device__ __forceinline__ float warp_max(float v)
{
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

// ---- naive ---------------------------------------------------------------------

// S[bh,i,j] = scale q_i . k_j for j <= i (entries above the diagonal unused).
template <class T>
__global__ void scores_kernel(const T *q, const T *k, int64_t BH, int Tn, int D, float scale, T *S, int bug)
{
    const int Dd = bug == KBUG_DROP_TERM ? D - 1 : D;
    const int64_t total = BH * Tn * (int64_t)Tn;
    for (int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; x < total; x += (int64_t)gridDim.x * blockDim.x) {
        int64_t bh = x / ((int64_t)Tn * Tn);
        int i = (int)(x / Tn % Tn), j = (int)(x % Tn);
        if (j > i) continue;
        const T *qi = q + (bh * Tn + i) * D, *kj = k + (bh * Tn + j) * D;
        float dot = 0.0f;
        for (int d = 0; d < Dd; d++) dot = __fmaf_rn(kto_float(qi[d]), kto_float(kj[d]), dot);
        S[x] = kfrom_float<T>(__fmul_rn(dot, scale), bug);
    }
}

// In place per row (one warp): P = exp(S - max) / sum over j <= i; lse.
template <class T> __global__ void softmax_rows_kernel(T *SP, int64_t BH, int Tn, float *lse, int bug)
{
    const int lane = threadIdx.x & 31;
    const int64_t row = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= BH * Tn) return;
    const int i = (int)(row % Tn);
    T *r = SP + row * Tn; // row (bh, i) of the [BH,T,T] buffer
    float m = -INFINITY;
    for (int j = lane; j <= i; j += 32) m = fmaxf(m, kto_float(r[j]));
    m = warp_max(m);
    float s = 0.0f;
    for (int j = lane; j <= i; j += 32) s = __fadd_rn(s, expf(__fsub_rn(kto_float(r[j]), m)));
    s = kwarp_sum(s);
    for (int j = lane; j <= i; j += 32) r[j] = kfrom_float<T>(__fdiv_rn(expf(__fsub_rn(kto_float(r[j]), m)), s), bug);
    if (lse && lane == 0) lse[row] = kfrom_float<float>(__fadd_rn(m, logf(s)), bug);
}

// o[bh,i,d] = sum_{j<=i} P_ij v_jd
template <class T> __global__ void pv_kernel(const T *P, const T *v, int64_t BH, int Tn, int D, T *o, int bug)
{
    const int64_t total = BH * Tn * (int64_t)D;
    for (int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; x < total; x += (int64_t)gridDim.x * blockDim.x) {
        int64_t row = x / D, bh = row / Tn;
        int i = (int)(row % Tn), d = (int)(x % D);
        const T *p = P + row * Tn, *vb = v + bh * Tn * D;
        float acc = 0.0f;
        for (int j = 0; j <= i; j++) acc = __fmaf_rn(kto_float(p[j]), kto_float(vb[(int64_t)j * D + d]), acc);
        o[x] = kfrom_float<T>(acc, bug);
    }
}

// dP[bh,i,j] = dout_i . v_j (j <= i)
template <class T>
__global__ void dp_kernel(const T *dout, const T *v, int64_t BH, int Tn, int D, T *dP, int bug)
{
    const int64_t total = BH * Tn * (int64_t)Tn;
    for (int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; x < total; x += (int64_t)gridDim.x * blockDim.x) {
        int64_t bh = x / ((int64_t)Tn * Tn);
        int i = (int)(x / Tn % Tn), j = (int)(x % Tn);
        if (j > i) continue;
        const T *g = dout + (bh * Tn + i) * D, *vj = v + (bh * Tn + j) * D;
        float dot = 0.0f;
        for (int d = 0; d < D; d++) dot = __fmaf_rn(kto_float(g[d]), kto_float(vj[d]), dot);
        dP[x] = kfrom_float<T>(dot, bug);
    }
}

// In place per row (one warp): dS = P (dP - sum_k P_ik dP_ik).
template <class T> __global__ void ds_rows_kernel(const T *P, T *dPS, int64_t BH, int Tn, int bug)
{
    const int lane = threadIdx.x & 31;
    const int64_t row = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= BH * Tn) return;
    const int i = (int)(row % Tn);
    const T *p = P + row * Tn;
    T *r = dPS + row * Tn;
    float dot = 0.0f;
    for (int j = lane; j <= i; j += 32) dot = __fmaf_rn(kto_float(p[j]), kto_float(r[j]), dot);
    dot = kwarp_sum(dot);
    for (int j = lane; j <= i; j += 32)
        r[j] = kfrom_float<T>(__fmul_rn(kto_float(p[j]), __fsub_rn(kto_float(r[j]), dot)), bug);
}

// dq[bh,i,d] = scale sum_{j<=i} dS_ij k_jd
template <class T>
__global__ void dq_naive_kernel(const T *dS, const T *k, int64_t BH, int Tn, int D, float scale, T *dq, int bug)
{
    const int64_t total = BH * Tn * (int64_t)D;
    for (int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; x < total; x += (int64_t)gridDim.x * blockDim.x) {
        int64_t row = x / D, bh = row / Tn;
        int i = (int)(row % Tn), d = (int)(x % D);
        const T *s = dS + row * Tn, *kb = k + bh * Tn * D;
        float acc = 0.0f;
        for (int j = 0; j <= i; j++) acc = __fmaf_rn(kto_float(s[j]), kto_float(kb[(int64_t)j * D + d]), acc);
        dq[x] = kfrom_float<T>(__fmul_rn(acc, scale), bug);
    }
}

// dk[bh,j,d] = scale sum_{i>=j} dS_ij q_id,  dv[bh,j,d] = sum_{i>=j} P_ij dout_id
template <class T>
__global__ void dkv_naive_kernel(const T *dS, const T *P, const T *q, const T *dout, int64_t BH, int Tn, int D,
                                 float scale, T *dk, T *dv, int bug)
{
    const int64_t total = BH * Tn * (int64_t)D;
    for (int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; x < total; x += (int64_t)gridDim.x * blockDim.x) {
        int64_t row = x / D, bh = row / Tn;
        int j = (int)(row % Tn), d = (int)(x % D);
        const T *sb = dS + bh * Tn * (int64_t)Tn, *pb = P + bh * Tn * (int64_t)Tn;
        const T *qb = q + bh * Tn * D, *gb = dout + bh * Tn * D;
        float ak = 0.0f, av = 0.0f;
        for (int i = j; i < Tn; i++) {
            ak = __fmaf_rn(kto_float(sb[(int64_t)i * Tn + j]), kto_float(qb[(int64_t)i * D + d]), ak);
            av = __fmaf_rn(kto_float(pb[(int64_t)i * Tn + j]), kto_float(gb[(int64_t)i * D + d]), av);
        }
        dk[x] = kfrom_float<T>(__fmul_rn(ak, scale), bug);
        dv[x] = kfrom_float<T>(av, bug);
    }
}

// ---- flash -----------------------------------------------------------------------

// One warp per query row: keys in tiles of 32 (lane l scores key j0 + l), a
// running max m, sum l and accumulator acc (lane owns d = lane + 32 r),
// rescaled by exp(m_old - m_new) when a tile raises the max.
template <class T, int EXP2>
__global__ void __launch_bounds__(WARPS * 32)
    flash_fwd_kernel(const T *q, const T *k, const T *v, int64_t BH, int Tn, int D, float scale, T *o, float *lse,
                     int bug)
{
    __shared__ float qs[WARPS][KATT_MAX_D];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t row = blockIdx.x * (int64_t)WARPS + warp;
    if (row >= BH * Tn) return;
    const int64_t bh = row / Tn;
    const int i = (int)(row % Tn), Dd = bug == KBUG_DROP_TERM ? D - 1 : D;
    const T *kb = k + bh * Tn * D, *vb = v + bh * Tn * D;
    for (int d = lane; d < D; d += 32) qs[warp][d] = kto_float(q[row * D + d]);
    __syncwarp();
    const float sc = EXP2 ? __fmul_rn(scale, kLog2eF) : scale; // scores in log2 units for exp2
    float m = -INFINITY, l = 0.0f, acc[KATT_MAX_D / 32] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int j0 = 0; j0 <= i; j0 += KATT_TILE) {
        const int j = j0 + lane;
        float s = -INFINITY;
        if (j <= i) {
            const T *kj = kb + (int64_t)j * D;
            float dot = 0.0f;
            for (int d = 0; d < Dd; d++) dot = __fmaf_rn(qs[warp][d], kto_float(kj[d]), dot);
            s = __fmul_rn(dot, sc);
        }
        const float m_new = fmaxf(m, warp_max(s)); // finite: key j0 <= i is in every tile
        const float p = j <= i ? kexp<EXP2>(__fsub_rn(s, m_new)) : 0.0f;
        const float corr = kexp<EXP2>(__fsub_rn(m, m_new)); // 0 on the first tile
        l = __fmaf_rn(l, corr, kwarp_sum(p));
        float pt[KATT_MAX_D / 32] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int t = 0; t < KATT_TILE; t++) {
            const float pl = __shfl_sync(0xffffffffu, p, t);
            if (j0 + t > i) break;
            const T *vj = vb + (int64_t)(j0 + t) * D;
#pragma unroll
            for (int r = 0; r < KATT_MAX_D / 32; r++)
                if (lane + 32 * r < D) pt[r] = __fmaf_rn(pl, kto_float(vj[lane + 32 * r]), pt[r]);
        }
#pragma unroll
        for (int r = 0; r < KATT_MAX_D / 32; r++) acc[r] = __fmaf_rn(acc[r], corr, pt[r]);
        m = m_new;
    }
#pragma unroll
    for (int r = 0; r < KATT_MAX_D / 32; r++)
        if (lane + 32 * r < D) o[row * D + lane + 32 * r] = kfrom_float<T>(__fdiv_rn(acc[r], l), bug);
    if (lane == 0) {
        float L = EXP2 ? __fmul_rn(__fadd_rn(m, log2f(l)), kLn2F) : __fadd_rn(m, logf(l));
        lse[row] = kfrom_float<float>(L, bug);
    }
}

// delta[row] = sum_d dout_d o_d (one warp per row: strided partials, butterfly)
template <class T> __global__ void delta_kernel(const T *dout, const T *o, int64_t rows, int D, float *delta)
{
    const int lane = threadIdx.x & 31;
    const int64_t row = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= rows) return;
    float s = 0.0f;
    for (int d = lane; d < D; d += 32) s = __fmaf_rn(kto_float(dout[row * D + d]), kto_float(o[row * D + d]), s);
    s = kwarp_sum(s);
    if (lane == 0) delta[row] = s;
}

// The score, probability and dS of key row kj against query row (qrow, grow):
// p = exp(s - lse), ds = p (dout . v - delta).
template <class T, int EXP2>
__device__ __forceinline__ void flash_p_ds(const float *qrow, const float *grow, const T *kj, const T *vj, int D,
                                           int Dd, float sc, float lse_row, float delta, float &p, float &ds)
{
    float dot = 0.0f, dp = 0.0f;
    for (int d = 0; d < Dd; d++) dot = __fmaf_rn(qrow[d], kto_float(kj[d]), dot);
    for (int d = 0; d < D; d++) dp = __fmaf_rn(grow[d], kto_float(vj[d]), dp);
    p = kexp<EXP2>(__fsub_rn(__fmul_rn(dot, sc), lse_row));
    ds = __fmul_rn(p, __fsub_rn(dp, delta));
}

// dq: one warp per query row, keys in tiles; dq = scale sum_j ds_ij k_j.
template <class T, int EXP2>
__global__ void __launch_bounds__(WARPS * 32)
    flash_dq_kernel(const T *q, const T *k, const T *v, const T *dout, const float *lse, const float *delta,
                    int64_t BH, int Tn, int D, float scale, T *dq, int bug)
{
    __shared__ float qs[WARPS][KATT_MAX_D], gs[WARPS][KATT_MAX_D];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t row = blockIdx.x * (int64_t)WARPS + warp;
    if (row >= BH * Tn) return;
    const int64_t bh = row / Tn;
    const int i = (int)(row % Tn), Dd = bug == KBUG_DROP_TERM ? D - 1 : D;
    const T *kb = k + bh * Tn * D, *vb = v + bh * Tn * D;
    for (int d = lane; d < D; d += 32) {
        qs[warp][d] = kto_float(q[row * D + d]);
        gs[warp][d] = kto_float(dout[row * D + d]);
    }
    __syncwarp();
    const float sc = EXP2 ? __fmul_rn(scale, kLog2eF) : scale;
    const float lse_row = EXP2 ? __fmul_rn(lse[row], kLog2eF) : lse[row], dl = delta[row];
    float acc[KATT_MAX_D / 32] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int j0 = 0; j0 <= i; j0 += KATT_TILE) {
        const int j = j0 + lane;
        float p = 0.0f, ds = 0.0f;
        if (j <= i)
            flash_p_ds<T, EXP2>(qs[warp], gs[warp], kb + (int64_t)j * D, vb + (int64_t)j * D, D, Dd, sc, lse_row, dl,
                                p, ds);
        for (int t = 0; t < KATT_TILE; t++) {
            const float dsl = __shfl_sync(0xffffffffu, ds, t);
            if (j0 + t > i) break;
            const T *kj = kb + (int64_t)(j0 + t) * D;
#pragma unroll
            for (int r = 0; r < KATT_MAX_D / 32; r++)
                if (lane + 32 * r < D) acc[r] = __fmaf_rn(dsl, kto_float(kj[lane + 32 * r]), acc[r]);
        }
    }
#pragma unroll
    for (int r = 0; r < KATT_MAX_D / 32; r++)
        if (lane + 32 * r < D) dq[row * D + lane + 32 * r] = kfrom_float<T>(__fmul_rn(acc[r], scale), bug);
}

// dk, dv: one warp per key row j, queries i >= j in tiles of 32.
template <class T, int EXP2>
__global__ void __launch_bounds__(WARPS * 32)
    flash_dkv_kernel(const T *q, const T *k, const T *v, const T *dout, const float *lse, const float *delta,
                     int64_t BH, int Tn, int D, float scale, T *dk, T *dv, int bug)
{
    __shared__ float ks[WARPS][KATT_MAX_D], vs[WARPS][KATT_MAX_D];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t row = blockIdx.x * (int64_t)WARPS + warp;
    if (row >= BH * Tn) return;
    const int64_t bh = row / Tn;
    const int j = (int)(row % Tn), Dd = bug == KBUG_DROP_TERM ? D - 1 : D;
    const T *qb = q + bh * Tn * D, *gb = dout + bh * Tn * D;
    for (int d = lane; d < D; d += 32) {
        ks[warp][d] = kto_float(k[row * D + d]);
        vs[warp][d] = kto_float(v[row * D + d]);
    }
    __syncwarp();
    const float sc = EXP2 ? __fmul_rn(scale, kLog2eF) : scale;
    float ak[KATT_MAX_D / 32] = {0.0f, 0.0f, 0.0f, 0.0f}, av[KATT_MAX_D / 32] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int i0 = j; i0 < Tn; i0 += KATT_TILE) {
        const int i = i0 + lane;
        float p = 0.0f, ds = 0.0f;
        if (i < Tn) {
            const int64_t qi = bh * Tn + i;
            const float lse_row = EXP2 ? __fmul_rn(lse[qi], kLog2eF) : lse[qi];
            // the same arithmetic as flash_p_ds, with the roles of the rows swapped
            const T *qr = qb + (int64_t)i * D, *gr = gb + (int64_t)i * D;
            float dot = 0.0f, dp = 0.0f;
            for (int d = 0; d < Dd; d++) dot = __fmaf_rn(kto_float(qr[d]), ks[warp][d], dot);
            for (int d = 0; d < D; d++) dp = __fmaf_rn(kto_float(gr[d]), vs[warp][d], dp);
            p = kexp<EXP2>(__fsub_rn(__fmul_rn(dot, sc), lse_row));
            ds = __fmul_rn(p, __fsub_rn(dp, delta[qi]));
        }
        for (int t = 0; t < KATT_TILE; t++) {
            const float pl = __shfl_sync(0xffffffffu, p, t), dsl = __shfl_sync(0xffffffffu, ds, t);
            if (i0 + t >= Tn) break;
            const T *qr = qb + (int64_t)(i0 + t) * D, *gr = gb + (int64_t)(i0 + t) * D;
#pragma unroll
            for (int r = 0; r < KATT_MAX_D / 32; r++)
                if (lane + 32 * r < D) {
                    ak[r] = __fmaf_rn(dsl, kto_float(qr[lane + 32 * r]), ak[r]);
                    av[r] = __fmaf_rn(pl, kto_float(gr[lane + 32 * r]), av[r]);
                }
        }
    }
#pragma unroll
    for (int r = 0; r < KATT_MAX_D / 32; r++)
        if (lane + 32 * r < D) {
            dk[row * D + lane + 32 * r] = kfrom_float<T>(__fmul_rn(ak[r], scale), bug);
            dv[row * D + lane + 32 * r] = kfrom_float<T>(av[r], bug);
        }
}

// ---- launchers ---------------------------------------------------------------------

static void *att_ws[3];
static size_t att_ws_size[3];
enum { WS_S, WS_DP, WS_DELTA };

static int att_get(const char *ctx, int slot, size_t bytes, void **out)
{
    if (bytes > att_ws_size[slot]) {
        if (att_ws[slot]) {
            cudaError_t e = cudaFree(att_ws[slot]);
            if (e != cudaSuccess) return kernels_fail("%s: cudaFree failed: %s", ctx, cudaGetErrorString(e));
        }
        att_ws[slot] = nullptr;
        att_ws_size[slot] = 0;
        cudaError_t e = cudaMalloc(&att_ws[slot], bytes);
        if (e != cudaSuccess) return kernels_fail("%s: cudaMalloc(%zu) failed: %s", ctx, bytes, cudaGetErrorString(e));
        att_ws_size[slot] = bytes;
    }
    *out = att_ws[slot];
    return 0;
}

extern "C" void kattention_release(void)
{
    for (int s = 0; s < 3; s++) {
        if (att_ws[s]) cudaFree(att_ws[s]);
        att_ws[s] = nullptr;
        att_ws_size[s] = 0;
    }
}

static unsigned grid_of(int64_t n, int threads)
{
    int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 65536 ? b : 65536);
}

static int validate(const char *ctx, kpath path, int variant, int64_t BH, int64_t T, int64_t D)
{
    if (path != KPATH_FP32 && path != KPATH_BF16 && path != KPATH_FP16)
        return kernels_fail("%s: paths fp32, bf16, fp16 (fp8 attention would need its own scaled kernels)", ctx);
    if (variant < 0 || variant >= KATT_NVARIANTS) return kernels_fail("%s: unknown variant %d", ctx, variant);
    if (BH <= 0 || T <= 0 || D <= 0) return kernels_fail("%s: BH, T and D must be positive", ctx);
    if (D > KATT_MAX_D) return kernels_fail("%s: D = %lld above the kernels' %d", ctx, (long long)D, KATT_MAX_D);
    if (T > INT32_MAX / 2) return kernels_fail("%s: T too large", ctx);
    return 0;
}

static int launched(const char *ctx, const char *what)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return kernels_fail("%s: launch of %s failed: %s", ctx, what, cudaGetErrorString(e));
    return 0;
}

template <class T>
static int naive_probabilities(const char *ctx, const T *q, const T *k, int64_t BH, int Tn, int D, float scale, T *SP,
                               float *lse, int bug)
{
    scores_kernel<T><<<grid_of(BH * Tn * (int64_t)Tn, 256), 256>>>(q, k, BH, Tn, D, scale, SP, bug);
    if (launched(ctx, "scores_kernel")) return -1;
    softmax_rows_kernel<T><<<grid_of(BH * Tn, WARPS), WARPS * 32>>>(SP, BH, Tn, lse, bug);
    return launched(ctx, "softmax_rows_kernel");
}

template <class T>
static int forward_t(const char *ctx, int variant, int64_t BH, int Tn, int D, float scale, const void *q,
                     const void *k, const void *v, void *o, float *lse)
{
    const int bug = (int)kernels_planted_bug();
    if (variant == KATT_NAIVE) {
        void *S;
        if (att_get(ctx, WS_S, (size_t)BH * Tn * Tn * sizeof(T), &S)) return -1;
        if (naive_probabilities<T>(ctx, (const T *)q, (const T *)k, BH, Tn, D, scale, (T *)S, lse, bug)) return -1;
        pv_kernel<T><<<grid_of(BH * Tn * (int64_t)D, 256), 256>>>((const T *)S, (const T *)v, BH, Tn, D, (T *)o, bug);
        return launched(ctx, "pv_kernel");
    }
    unsigned grid = grid_of(BH * Tn, WARPS);
    if (variant == KATT_FLASH_EXP2)
        flash_fwd_kernel<T, 1><<<grid, WARPS * 32>>>((const T *)q, (const T *)k, (const T *)v, BH, Tn, D, scale,
                                                     (T *)o, lse, bug);
    else
        flash_fwd_kernel<T, 0><<<grid, WARPS * 32>>>((const T *)q, (const T *)k, (const T *)v, BH, Tn, D, scale,
                                                     (T *)o, lse, bug);
    return launched(ctx, "flash_fwd_kernel");
}

template <class T>
static int backward_t(const char *ctx, int variant, int64_t BH, int Tn, int D, float scale, const void *q,
                      const void *k, const void *v, const void *o, const void *dout, const float *lse, void *dq,
                      void *dk, void *dv)
{
    const int bug = (int)kernels_planted_bug();
    const int64_t rows = BH * Tn;
    if (variant == KATT_NAIVE) {
        void *SP, *DP;
        if (att_get(ctx, WS_S, (size_t)BH * Tn * Tn * sizeof(T), &SP) ||
            att_get(ctx, WS_DP, (size_t)BH * Tn * Tn * sizeof(T), &DP))
            return -1;
        // P again, exactly as the forward made it (same kernels, same bits)
        if (naive_probabilities<T>(ctx, (const T *)q, (const T *)k, BH, Tn, D, scale, (T *)SP, nullptr, bug))
            return -1;
        dp_kernel<T><<<grid_of(BH * Tn * (int64_t)Tn, 256), 256>>>((const T *)dout, (const T *)v, BH, Tn, D, (T *)DP,
                                                                   bug);
        if (launched(ctx, "dp_kernel")) return -1;
        ds_rows_kernel<T><<<grid_of(rows, WARPS), WARPS * 32>>>((const T *)SP, (T *)DP, BH, Tn, bug);
        if (launched(ctx, "ds_rows_kernel")) return -1;
        dq_naive_kernel<T><<<grid_of(rows * D, 256), 256>>>((const T *)DP, (const T *)k, BH, Tn, D, scale, (T *)dq,
                                                           bug);
        if (launched(ctx, "dq_naive_kernel")) return -1;
        dkv_naive_kernel<T><<<grid_of(rows * D, 256), 256>>>((const T *)DP, (const T *)SP, (const T *)q,
                                                            (const T *)dout, BH, Tn, D, scale, (T *)dk, (T *)dv, bug);
        return launched(ctx, "dkv_naive_kernel");
    }
    void *delta;
    if (att_get(ctx, WS_DELTA, (size_t)rows * sizeof(float), &delta)) return -1;
    delta_kernel<T><<<grid_of(rows, WARPS), WARPS * 32>>>((const T *)dout, (const T *)o, rows, D, (float *)delta);
    if (launched(ctx, "delta_kernel")) return -1;
    unsigned grid = grid_of(rows, WARPS);
    if (variant == KATT_FLASH_EXP2) {
        flash_dq_kernel<T, 1><<<grid, WARPS * 32>>>((const T *)q, (const T *)k, (const T *)v, (const T *)dout, lse,
                                                    (const float *)delta, BH, Tn, D, scale, (T *)dq, bug);
        if (launched(ctx, "flash_dq_kernel")) return -1;
        flash_dkv_kernel<T, 1><<<grid, WARPS * 32>>>((const T *)q, (const T *)k, (const T *)v, (const T *)dout, lse,
                                                     (const float *)delta, BH, Tn, D, scale, (T *)dk, (T *)dv, bug);
    } else {
        flash_dq_kernel<T, 0><<<grid, WARPS * 32>>>((const T *)q, (const T *)k, (const T *)v, (const T *)dout, lse,
                                                    (const float *)delta, BH, Tn, D, scale, (T *)dq, bug);
        if (launched(ctx, "flash_dq_kernel")) return -1;
        flash_dkv_kernel<T, 0><<<grid, WARPS * 32>>>((const T *)q, (const T *)k, (const T *)v, (const T *)dout, lse,
                                                     (const float *)delta, BH, Tn, D, scale, (T *)dk, (T *)dv, bug);
    }
    return launched(ctx, "flash_dkv_kernel");
}

extern "C" int kattention_forward(kpath path, int variant, int64_t BH, int64_t T, int64_t D, float scale,
                                  const void *q, const void *k, const void *v, void *o, float *lse)
{
    char ctx[160];
    snprintf(ctx, sizeof ctx, "attention forward %s/%s BH=%lld T=%lld D=%lld", kpath_name(path),
             variant >= 0 && variant < KATT_NVARIANTS ? katt_variants[variant].name : "?", (long long)BH, (long long)T,
             (long long)D);
    if (validate(ctx, path, variant, BH, T, D)) return -1;
    if (!q || !k || !v || !o || !lse) return kernels_fail("%s: null q, k, v, o or lse", ctx);
    switch (path) {
    case KPATH_FP32: return forward_t<float>(ctx, variant, BH, (int)T, (int)D, scale, q, k, v, o, lse);
    case KPATH_BF16: return forward_t<__nv_bfloat16>(ctx, variant, BH, (int)T, (int)D, scale, q, k, v, o, lse);
    default: return forward_t<__half>(ctx, variant, BH, (int)T, (int)D, scale, q, k, v, o, lse);
    }
}

extern "C" int kattention_backward(kpath path, int variant, int64_t BH, int64_t T, int64_t D, float scale,
                                   const void *q, const void *k, const void *v, const void *o, const void *dout,
                                   const float *lse, void *dq, void *dk, void *dv)
{
    char ctx[160];
    snprintf(ctx, sizeof ctx, "attention backward %s/%s BH=%lld T=%lld D=%lld", kpath_name(path),
             variant >= 0 && variant < KATT_NVARIANTS ? katt_variants[variant].name : "?", (long long)BH, (long long)T,
             (long long)D);
    if (validate(ctx, path, variant, BH, T, D)) return -1;
    if (!q || !k || !v || !dout || !dq || !dk || !dv) return kernels_fail("%s: null q, k, v, dout, dq, dk or dv", ctx);
    if (variant != KATT_NAIVE && (!o || !lse)) return kernels_fail("%s: the flash backward needs o and lse", ctx);
    switch (path) {
    case KPATH_FP32:
        return backward_t<float>(ctx, variant, BH, (int)T, (int)D, scale, q, k, v, o, dout, lse, dq, dk, dv);
    case KPATH_BF16:
        return backward_t<__nv_bfloat16>(ctx, variant, BH, (int)T, (int)D, scale, q, k, v, o, dout, lse, dq, dk, dv);
    default: return backward_t<__half>(ctx, variant, BH, (int)T, (int)D, scale, q, k, v, o, dout, lse, dq, dk, dv);
    }
}
