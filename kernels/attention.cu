// kernels/attention.cu — causal self-attention: naive (materialised scores)
// and flash-style (online softmax over key tiles), forward and backward; see
// attention.h.  Every reduction has a fixed order (sequential fma chains and
// fixed butterflies), so results are bitwise repeatable.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdio>

#include "kernels/attention.h"
#include "kernels/attention_mma.cuh"
#include "kernels/common/kelem.cuh"
#include "kernels/common/klaunch.cuh"
#include "kernels/common/kreduce.cuh"
#include "kernels/registry.h"

extern "C" const kvariant katt_variants[KATT_NVARIANTS] = {
    {"naive", "scores S and probabilities P [T,T] materialised in the path's format; dP and dS likewise"},
    {"flash", "one warp per query row, keys in tiles of 32, online softmax in fp32; backward recomputes P from lse"},
    {"flash_exp2", "flash with log2(e) folded into the score scale and exp2f instead of expf"},
    {"flash_mma", "flash on the tensor cores (mma.sync m16n8k16, fp32 accumulators, P and dS rounded to the path's "
                  "format), 64 query rows per block of 4 warps, keys in tiles of 64; bf16 and fp16 only"},
    {"flash_mma_exp2", "flash_mma with log2(e) folded into the score scale and exp2f instead of expf"},
};

// ---- registry entry (kernels/registry.h): name, paths, fp8 note, variants ----

extern "C" const kop kop_attention = {
    "attention",
    "causal self-attention forward (o, lse) and backward (dq, dk, dv): softmax(scale q k^T) v",
    KPATHS_NO_FP8,
    "no fp8 path: fp8 attention needs per-block scaled kernels of its own (FlashAttention-3 style); the fp8 "
    "plan keeps attention in bf16",
    katt_variants, KATT_NVARIANTS,
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
//
// The arithmetic is that of one warp per row (each lane scoring one key of a
// tile of 32, keys in increasing order); the blocking only changes who does
// it and where the operands come from.  A block of FL_THREADS threads owns
// FL_ROWS consecutive rows of one head (query rows for the forward and dq,
// key rows for dk and dv) and walks the other side in tiles of KATT_TILE rows
// staged in shared memory as fp32 (the conversions are exact), so K and V (Q
// and dout) are read from global memory once per block instead of once per
// row.  What stays fixed, per output element:
//   - a score or dout . v is a sequential fma chain over d from +0;
//   - the forward's online softmax handles a tile of 32 keys in one warp per
//     query row, lane = key, with the same butterflies (warp_max, kwarp_sum)
//     and the same update of m, l and the accumulator;
//   - o's tile partials, dq, dk and dv are sequential fma chains over the keys
//     (queries) in increasing order.
// Thread roles (tid = 16 rg + cg):
//   pair phase   rows rg + 16a (a < 4) against tile rows cg + 16b (b < 2)
//   accumulate   rows rg + 16a, columns 4 cg + 64 h + c (h < DMAX / 64, c < 4)
// Shared rows are fp32 with stride fl_ld(D) = round4(D) + 4: 16-byte aligned
// for float4 reads, and 8 consecutive rows fall in 8 distinct groups of 4
// banks.  The pair tiles have stride FL_PAIR_LD = 48, so the two rows a warp
// writes in the pair phase use disjoint banks.

static const int FL_ROWS = 64, FL_THREADS = 256, FL_PAIR_LD = 48;

__host__ __device__ __forceinline__ int fl_ld(int D) { return (D + 3) / 4 * 4 + 4; }

// dst[r][c] = src[r][c] for r < valid, c < D; 0 up to rows x round4(D).
// Consecutive threads read consecutive elements of the contiguous [rows, D] block.
template <class T> __device__ __forceinline__ void fl_stage(float *dst, int ld, const T *src, int rows, int valid, int D)
{
    const int Dp = (D + 3) / 4 * 4;
    for (int e = threadIdx.x; e < rows * Dp; e += FL_THREADS) {
        const int r = e / Dp, c = e - r * Dp;
        dst[r * ld + c] = r < valid && c < D ? kto_float(src[(int64_t)r * D + c]) : 0.0f;
    }
}

// dot[a][b] = A[rg + 16a] . B[cg + 16b] over d < n: a sequential fma chain from +0.
__device__ __forceinline__ void fl_dots(const float *A, const float *B, int ld, int n, int rg, int cg,
                                        float (&dot)[4][2])
{
#pragma unroll
    for (int a = 0; a < 4; a++) dot[a][0] = dot[a][1] = 0.0f;
    int d = 0;
    for (; d + 4 <= n; d += 4) {
        float4 x[4], y[2];
#pragma unroll
        for (int a = 0; a < 4; a++) x[a] = *(const float4 *)(A + (rg + 16 * a) * ld + d);
#pragma unroll
        for (int b = 0; b < 2; b++) y[b] = *(const float4 *)(B + (cg + 16 * b) * ld + d);
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int b = 0; b < 2; b++) {
                dot[a][b] = __fmaf_rn(x[a].x, y[b].x, dot[a][b]);
                dot[a][b] = __fmaf_rn(x[a].y, y[b].y, dot[a][b]);
                dot[a][b] = __fmaf_rn(x[a].z, y[b].z, dot[a][b]);
                dot[a][b] = __fmaf_rn(x[a].w, y[b].w, dot[a][b]);
            }
    }
    for (; d < n; d++)
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int b = 0; b < 2; b++) dot[a][b] = __fmaf_rn(A[(rg + 16 * a) * ld + d], B[(cg + 16 * b) * ld + d], dot[a][b]);
}

// acc[a][h][c] = fma(W[rg + 16a][t], X[t][4 cg + 64 h + c], acc[a][h][c]) for
// t = 0 .. KATT_TILE-1 in order, where lo[a] <= t <= hi[a].  W: [FL_ROWS][FL_PAIR_LD].
template <int NH>
__device__ __forceinline__ void fl_accumulate(const float *W, const float *X, int ld, int D, const int (&lo)[4],
                                              const int (&hi)[4], int rg, int cg, float (&acc)[4][NH][4])
{
    const int Dp = (D + 3) / 4 * 4;
    for (int t4 = 0; t4 < KATT_TILE; t4 += 4) {
        float4 w[4];
#pragma unroll
        for (int a = 0; a < 4; a++) w[a] = *(const float4 *)(W + (rg + 16 * a) * FL_PAIR_LD + t4);
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int t = t4 + u;
            float4 x[NH];
#pragma unroll
            for (int h = 0; h < NH; h++)
                x[h] = 4 * cg + 64 * h < Dp ? *(const float4 *)(X + t * ld + 4 * cg + 64 * h)
                                            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
            for (int a = 0; a < 4; a++) {
                const float wa = u == 0 ? w[a].x : u == 1 ? w[a].y : u == 2 ? w[a].z : w[a].w;
                if (t < lo[a] || t > hi[a]) continue;
#pragma unroll
                for (int h = 0; h < NH; h++) {
                    acc[a][h][0] = __fmaf_rn(wa, x[h].x, acc[a][h][0]);
                    acc[a][h][1] = __fmaf_rn(wa, x[h].y, acc[a][h][1]);
                    acc[a][h][2] = __fmaf_rn(wa, x[h].z, acc[a][h][2]);
                    acc[a][h][3] = __fmaf_rn(wa, x[h].w, acc[a][h][3]);
                }
            }
        }
    }
}

// Stores rows rg + 16a (< rows) of a [rows, D] block: dst[r][col] = f(acc, r).
template <class T, int NH, class F>
__device__ __forceinline__ void fl_store(T *dst, int rows, int D, int rg, int cg, const float (&acc)[4][NH][4], F f)
{
#pragma unroll
    for (int a = 0; a < 4; a++) {
        const int r = rg + 16 * a;
        if (r >= rows) continue;
#pragma unroll
        for (int h = 0; h < NH; h++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int col = 4 * cg + 64 * h + c;
                if (col < D) dst[(int64_t)r * D + col] = f(acc[a][h][c], r);
            }
    }
}

// Forward: a block owns query rows [i_lo, i_lo + 64) of head bh, key tiles
// j0 = 0, 32, ... up to its last row.  Per tile: scores (pair phase), the
// softmax update (warp w owns rows 8w .. 8w+7, lane = key), then the tile's
// partial pt = sum_t p_t v_t (keys j0 + t <= i, in order) and
// acc = fma(acc, corr, pt).  o = acc / l, lse = m + log l.
template <class T, int EXP2, int DMAX>
__global__ void __launch_bounds__(FL_THREADS)
    flash_fwd_kernel(const T *q, const T *k, const T *v, int64_t BH, int Tn, int D, float scale, T *o, float *lse,
                     int bug)
{
    constexpr int NH = DMAX / 64;
    extern __shared__ float4 fl_smem[];
    const int ld = fl_ld(D);
    float *Qs = (float *)fl_smem, *Ks = Qs + FL_ROWS * ld, *Vs = Ks + KATT_TILE * ld, *Ps = Vs + KATT_TILE * ld;
    float *corr_s = Ps + FL_ROWS * FL_PAIR_LD, *l_s = corr_s + FL_ROWS;
    const int tiles = (Tn + FL_ROWS - 1) / FL_ROWS;
    const int64_t bh = blockIdx.x % BH;
    const int i_lo = (tiles - 1 - (int)(blockIdx.x / BH)) * FL_ROWS; // the longest rows first
    const int rows = min(FL_ROWS, Tn - i_lo);
    const int tid = threadIdx.x, rg = tid >> 4, cg = tid & 15, warp = tid >> 5, lane = tid & 31;
    const int Dd = bug == KBUG_DROP_TERM ? D - 1 : D;
    const T *kb = k + bh * Tn * D, *vb = v + bh * Tn * D;
    fl_stage(Qs, ld, q + (bh * Tn + i_lo) * D, FL_ROWS, rows, D);
    const float sc = EXP2 ? __fmul_rn(scale, kLog2eF) : scale; // scores in log2 units for exp2
    float m[8], l[8], acc[4][NH][4];
#pragma unroll
    for (int rr = 0; rr < 8; rr++) m[rr] = -INFINITY, l[rr] = 0.0f;
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int h = 0; h < NH; h++) acc[a][h][0] = acc[a][h][1] = acc[a][h][2] = acc[a][h][3] = 0.0f;
    for (int j0 = 0; j0 < i_lo + rows; j0 += KATT_TILE) {
        __syncthreads(); // the previous tile's readers are done
        fl_stage(Ks, ld, kb + (int64_t)j0 * D, KATT_TILE, min(KATT_TILE, Tn - j0), D);
        fl_stage(Vs, ld, vb + (int64_t)j0 * D, KATT_TILE, min(KATT_TILE, Tn - j0), D);
        __syncthreads();
        float dot[4][2];
        fl_dots(Qs, Ks, ld, Dd, rg, cg, dot);
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int b = 0; b < 2; b++) Ps[(rg + 16 * a) * FL_PAIR_LD + cg + 16 * b] = __fmul_rn(dot[a][b], sc);
        __syncthreads();
#pragma unroll
        for (int rr = 0; rr < 8; rr++) {
            const int r = 8 * warp + rr, i = i_lo + r, j = j0 + lane;
            if (r >= rows || j0 > i) continue; // warp-uniform
            const float s = j <= i ? Ps[r * FL_PAIR_LD + lane] : -INFINITY;
            const float m_new = fmaxf(m[rr], warp_max(s)); // finite: key j0 <= i is in the tile
            const float p = j <= i ? kexp<EXP2>(__fsub_rn(s, m_new)) : 0.0f;
            const float corr = kexp<EXP2>(__fsub_rn(m[rr], m_new)); // 0 on the first tile
            l[rr] = __fmaf_rn(l[rr], corr, kwarp_sum(p));
            m[rr] = m_new;
            Ps[r * FL_PAIR_LD + lane] = p;
            if (lane == 0) corr_s[r] = corr;
        }
        __syncthreads();
        int lo[4], hi[4];
        float pt[4][NH][4];
#pragma unroll
        for (int a = 0; a < 4; a++) {
            lo[a] = 0;
            hi[a] = rg + 16 * a < rows ? i_lo + rg + 16 * a - j0 : -1;
#pragma unroll
            for (int h = 0; h < NH; h++) pt[a][h][0] = pt[a][h][1] = pt[a][h][2] = pt[a][h][3] = 0.0f;
        }
        fl_accumulate<NH>(Ps, Vs, ld, D, lo, hi, rg, cg, pt);
#pragma unroll
        for (int a = 0; a < 4; a++) {
            if (hi[a] < 0) continue; // the row ended before this tile
            const float corr = corr_s[rg + 16 * a];
#pragma unroll
            for (int h = 0; h < NH; h++)
#pragma unroll
                for (int c = 0; c < 4; c++) acc[a][h][c] = __fmaf_rn(acc[a][h][c], corr, pt[a][h][c]);
        }
    }
#pragma unroll
    for (int rr = 0; rr < 8; rr++) {
        const int r = 8 * warp + rr;
        if (r >= rows || lane != 0) continue;
        l_s[r] = l[rr];
        const float L = EXP2 ? __fmul_rn(__fadd_rn(m[rr], log2f(l[rr])), kLn2F) : __fadd_rn(m[rr], logf(l[rr]));
        lse[bh * Tn + i_lo + r] = kfrom_float<float>(L, bug);
    }
    __syncthreads();
    fl_store<T, NH>(o + (bh * Tn + i_lo) * D, rows, D, rg, cg, acc,
                    [&](float x, int r) { return kfrom_float<T>(__fdiv_rn(x, l_s[r]), bug); });
}

// delta[row] = sum_d dout_d o_d, row = bh T + t (one warp per row: strided
// partials, butterfly); dout's and o's rows where katt_rows says (both read:
// stride ld = katt_rows' in).
template <class T>
__global__ void delta_kernel(const T *dout, const T *o, int64_t rows, int Tn, int D, int64_t H, int64_t ld, float *delta)
{
    const int lane = threadIdx.x & 31;
    const int64_t row = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= rows) return;
    const int64_t bh = row / Tn, t = row - bh * Tn, b = bh / H, at = (b * Tn + t) * ld + (bh - b * H) * D;
    const T *g = dout + at, *y = o + at;
    float s = 0.0f;
    for (int d = lane; d < D; d += 32) s = __fmaf_rn(kto_float(g[d]), kto_float(y[d]), s);
    s = kwarp_sum(s);
    if (lane == 0) delta[row] = s;
}

// The probability of a (query, key) pair from its score's dot product:
// p = exp(dot sc - lse), lse_row in the kernel's units (log2 for exp2).
template <int EXP2> __device__ __forceinline__ float fl_p(float dot, float sc, float lse_row)
{
    return kexp<EXP2>(__fsub_rn(__fmul_rn(dot, sc), lse_row));
}

// lse (in log2 units for exp2) and delta of query rows [i0, i0 + n) into shared memory (0 past the end).
template <int EXP2>
__device__ __forceinline__ void fl_stage_rowstats(float *lse_s, float *delta_s, const float *lse, const float *delta,
                                                  int64_t row0, int n, int valid)
{
    for (int r = threadIdx.x; r < n; r += FL_THREADS) {
        lse_s[r] = r < valid ? (EXP2 ? __fmul_rn(lse[row0 + r], kLog2eF) : lse[row0 + r]) : 0.0f;
        delta_s[r] = r < valid ? delta[row0 + r] : 0.0f;
    }
}

// dq: a block owns query rows [i_lo, i_lo + 64), key tiles j0 = 0, 32, ...;
// dq_i = scale sum_{j <= i} ds_ij k_j, one fma chain over j in order.
template <class T, int EXP2, int DMAX>
__global__ void __launch_bounds__(FL_THREADS)
    flash_dq_kernel(const T *q, const T *k, const T *v, const T *dout, const float *lse, const float *delta,
                    int64_t BH, int Tn, int D, float scale, T *dq, int bug)
{
    constexpr int NH = DMAX / 64;
    extern __shared__ float4 fl_smem[];
    const int ld = fl_ld(D);
    float *Qs = (float *)fl_smem, *Gs = Qs + FL_ROWS * ld, *Ks = Gs + FL_ROWS * ld, *Vs = Ks + KATT_TILE * ld;
    float *DSs = Vs + KATT_TILE * ld, *lse_s = DSs + FL_ROWS * FL_PAIR_LD, *delta_s = lse_s + FL_ROWS;
    const int tiles = (Tn + FL_ROWS - 1) / FL_ROWS;
    const int64_t bh = blockIdx.x % BH;
    const int i_lo = (tiles - 1 - (int)(blockIdx.x / BH)) * FL_ROWS; // the longest rows first
    const int rows = min(FL_ROWS, Tn - i_lo);
    const int tid = threadIdx.x, rg = tid >> 4, cg = tid & 15;
    const int Dd = bug == KBUG_DROP_TERM ? D - 1 : D;
    const T *kb = k + bh * Tn * D, *vb = v + bh * Tn * D;
    fl_stage(Qs, ld, q + (bh * Tn + i_lo) * D, FL_ROWS, rows, D);
    fl_stage(Gs, ld, dout + (bh * Tn + i_lo) * D, FL_ROWS, rows, D);
    fl_stage_rowstats<EXP2>(lse_s, delta_s, lse, delta, bh * Tn + i_lo, FL_ROWS, rows);
    const float sc = EXP2 ? __fmul_rn(scale, kLog2eF) : scale;
    float acc[4][NH][4];
    int lo[4], hi[4];
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int h = 0; h < NH; h++) acc[a][h][0] = acc[a][h][1] = acc[a][h][2] = acc[a][h][3] = 0.0f;
    for (int j0 = 0; j0 < i_lo + rows; j0 += KATT_TILE) {
        __syncthreads();
        fl_stage(Ks, ld, kb + (int64_t)j0 * D, KATT_TILE, min(KATT_TILE, Tn - j0), D);
        fl_stage(Vs, ld, vb + (int64_t)j0 * D, KATT_TILE, min(KATT_TILE, Tn - j0), D);
        __syncthreads();
        float dot[4][2], dp[4][2];
        fl_dots(Qs, Ks, ld, Dd, rg, cg, dot);
        fl_dots(Gs, Vs, ld, D, rg, cg, dp);
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int b = 0; b < 2; b++) {
                const int r = rg + 16 * a;
                const float p = fl_p<EXP2>(dot[a][b], sc, lse_s[r]);
                DSs[r * FL_PAIR_LD + cg + 16 * b] = __fmul_rn(p, __fsub_rn(dp[a][b], delta_s[r]));
            }
        __syncthreads();
#pragma unroll
        for (int a = 0; a < 4; a++) {
            lo[a] = 0;
            hi[a] = rg + 16 * a < rows ? i_lo + rg + 16 * a - j0 : -1;
        }
        fl_accumulate<NH>(DSs, Ks, ld, D, lo, hi, rg, cg, acc);
    }
    fl_store<T, NH>(dq + (bh * Tn + i_lo) * D, rows, D, rg, cg, acc,
                    [&](float x, int) { return kfrom_float<T>(__fmul_rn(x, scale), bug); });
}

// dk, dv: a block owns key rows [j_lo, j_lo + 64), query tiles i0 = j_lo,
// j_lo + 32, ...; dk_j = scale sum_{i >= j} ds_ij q_i, dv_j = sum_{i >= j}
// p_ij dout_i, each one fma chain over i in order.
template <class T, int EXP2, int DMAX>
__global__ void __launch_bounds__(FL_THREADS)
    flash_dkv_kernel(const T *q, const T *k, const T *v, const T *dout, const float *lse, const float *delta,
                     int64_t BH, int Tn, int D, float scale, T *dk, T *dv, int bug)
{
    constexpr int NH = DMAX / 64;
    extern __shared__ float4 fl_smem[];
    const int ld = fl_ld(D);
    float *Ks = (float *)fl_smem, *Vs = Ks + FL_ROWS * ld, *Qs = Vs + FL_ROWS * ld, *Gs = Qs + KATT_TILE * ld;
    float *Pt = Gs + KATT_TILE * ld, *DSt = Pt + FL_ROWS * FL_PAIR_LD, *lse_s = DSt + FL_ROWS * FL_PAIR_LD,
          *delta_s = lse_s + KATT_TILE;
    const int64_t bh = blockIdx.x % BH;
    const int j_lo = (int)(blockIdx.x / BH) * FL_ROWS; // the longest columns first
    const int rows = min(FL_ROWS, Tn - j_lo);
    const int tid = threadIdx.x, rg = tid >> 4, cg = tid & 15;
    const int Dd = bug == KBUG_DROP_TERM ? D - 1 : D;
    const T *qb = q + bh * Tn * D, *gb = dout + bh * Tn * D;
    fl_stage(Ks, ld, k + (bh * Tn + j_lo) * D, FL_ROWS, rows, D);
    fl_stage(Vs, ld, v + (bh * Tn + j_lo) * D, FL_ROWS, rows, D);
    const float sc = EXP2 ? __fmul_rn(scale, kLog2eF) : scale;
    float ak[4][NH][4], av[4][NH][4];
    int lo[4], hi[4];
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int h = 0; h < NH; h++)
#pragma unroll
            for (int c = 0; c < 4; c++) ak[a][h][c] = av[a][h][c] = 0.0f;
    for (int i0 = j_lo; i0 < Tn; i0 += KATT_TILE) {
        const int valid = min(KATT_TILE, Tn - i0);
        __syncthreads();
        fl_stage(Qs, ld, qb + (int64_t)i0 * D, KATT_TILE, valid, D);
        fl_stage(Gs, ld, gb + (int64_t)i0 * D, KATT_TILE, valid, D);
        fl_stage_rowstats<EXP2>(lse_s, delta_s, lse, delta, bh * Tn + i0, KATT_TILE, valid);
        __syncthreads();
        float dot[4][2], dp[4][2];
        fl_dots(Ks, Qs, ld, Dd, rg, cg, dot);
        fl_dots(Vs, Gs, ld, D, rg, cg, dp);
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int b = 0; b < 2; b++) {
                const int x = (rg + 16 * a) * FL_PAIR_LD + cg + 16 * b, t = cg + 16 * b;
                const float p = fl_p<EXP2>(dot[a][b], sc, lse_s[t]);
                Pt[x] = p;
                DSt[x] = __fmul_rn(p, __fsub_rn(dp[a][b], delta_s[t]));
            }
        __syncthreads();
#pragma unroll
        for (int a = 0; a < 4; a++) {
            lo[a] = j_lo + rg + 16 * a - i0; // queries i >= j
            hi[a] = rg + 16 * a < rows ? valid - 1 : -1;
        }
        fl_accumulate<NH>(DSt, Qs, ld, D, lo, hi, rg, cg, ak);
        fl_accumulate<NH>(Pt, Gs, ld, D, lo, hi, rg, cg, av);
    }
    fl_store<T, NH>(dk + (bh * Tn + j_lo) * D, rows, D, rg, cg, ak,
                    [&](float x, int) { return kfrom_float<T>(__fmul_rn(x, scale), bug); });
    fl_store<T, NH>(dv + (bh * Tn + j_lo) * D, rows, D, rg, cg, av,
                    [&](float x, int) { return kfrom_float<T>(x, bug); });
}

// ---- launchers ---------------------------------------------------------------------

static void *att_ws[3];
static size_t att_ws_size[3];
enum { WS_S, WS_DP, WS_DELTA };

static int att_get(const char *ctx, int slot, size_t bytes, void **out)
{
    if (kworkspace_grow(ctx, &att_ws[slot], &att_ws_size[slot], bytes)) return -1;
    *out = att_ws[slot];
    return 0;
}

extern "C" void kattention_release(void)
{
    kernels_note_free(); // a graph that read these workspaces must not be replayed
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
    if (BH * ((T + FL_ROWS - 1) / FL_ROWS) > INT32_MAX) return kernels_fail("%s: BH x T too large", ctx);
    char why[192];
    if (!kattention_supports(path, variant, D, why, sizeof why)) return kernels_fail("%s: %s", ctx, why);
    return 0;
}

// The heads' rows (attention.h, katt_rows): packed, or flash_mma's strided
// ones with both strides at least H D.
static int validate_rows(const char *ctx, int variant, int64_t BH, int64_t D, const katt_rows *r)
{
    if (!r) return kernels_fail("%s: no katt_rows", ctx);
    if (r->H == 1 && r->in == D && r->out == D) return 0;
    if (!kattention_takes_rows(variant))
        return kernels_fail("%s: heads other than packed [BH,T,D] are flash_mma's only (this variant reads [BH,T,D])", ctx);
    if (r->H <= 0 || BH % r->H != 0)
        return kernels_fail("%s: H = %lld heads a row does not divide BH", ctx, (long long)r->H);
    if (r->in < r->H * D || r->out < r->H * D)
        return kernels_fail("%s: row strides %lld (in) and %lld (out) must be at least H x D = %lld", ctx,
                            (long long)r->in, (long long)r->out, (long long)(r->H * D));
    return 0;
}

// Raises the kernel's dynamic shared-memory limit to what this launch needs
// (above 48 KB only on request), then launches FL_THREADS threads per block.
template <class... P, class... A>
static int fl_launch(const char *ctx, const char *what, void (*kernel)(P...), unsigned grid, size_t smem, A... args)
{
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess)
        return kernels_fail("%s: %s needs %zu bytes of shared memory: %s", ctx, what, smem, cudaGetErrorString(e));
    kernel<<<grid, FL_THREADS, smem, kstream()>>>(args...);
    return klaunched(ctx, what);
}

template <class T, int EXP2, int DMAX>
static int flash_backward_d(const char *ctx, int64_t BH, int Tn, int D, float scale, const T *q, const T *k,
                            const T *v, const T *dout, const float *lse, const float *delta, T *dq, T *dk, T *dv,
                            int bug)
{
    const unsigned grid = (unsigned)(BH * ((Tn + FL_ROWS - 1) / FL_ROWS));
    const size_t ld = fl_ld(D);
    const size_t smem_dq = ((2 * FL_ROWS + 2 * KATT_TILE) * ld + FL_ROWS * (FL_PAIR_LD + 2)) * sizeof(float);
    const size_t smem_dkv = ((2 * FL_ROWS + 2 * KATT_TILE) * ld + 2 * FL_ROWS * FL_PAIR_LD + 2 * KATT_TILE) * sizeof(float);
    if (fl_launch(ctx, "flash_dq_kernel", flash_dq_kernel<T, EXP2, DMAX>, grid, smem_dq, q, k, v, dout, lse, delta, BH,
                  Tn, D, scale, dq, bug))
        return -1;
    return fl_launch(ctx, "flash_dkv_kernel", flash_dkv_kernel<T, EXP2, DMAX>, grid, smem_dkv, q, k, v, dout, lse,
                     delta, BH, Tn, D, scale, dk, dv, bug);
}

template <class T, int EXP2>
static int flash_backward(const char *ctx, int64_t BH, int Tn, int D, float scale, const void *q, const void *k,
                          const void *v, const void *dout, const float *lse, const void *delta, void *dq, void *dk,
                          void *dv, int bug)
{
    if (D <= 64)
        return flash_backward_d<T, EXP2, 64>(ctx, BH, Tn, D, scale, (const T *)q, (const T *)k, (const T *)v,
                                             (const T *)dout, lse, (const float *)delta, (T *)dq, (T *)dk, (T *)dv, bug);
    return flash_backward_d<T, EXP2, 128>(ctx, BH, Tn, D, scale, (const T *)q, (const T *)k, (const T *)v,
                                          (const T *)dout, lse, (const float *)delta, (T *)dq, (T *)dk, (T *)dv, bug);
}

template <class T> static kpath kpath_of();
template <> kpath kpath_of<float>() { return KPATH_FP32; }
template <> kpath kpath_of<__nv_bfloat16>() { return KPATH_BF16; }
template <> kpath kpath_of<__half>() { return KPATH_FP16; }

template <class T>
static int naive_probabilities(const char *ctx, const T *q, const T *k, int64_t BH, int Tn, int D, float scale, T *SP,
                               float *lse, int bug)
{
    scores_kernel<T><<<grid_of(BH * Tn * (int64_t)Tn, 256), 256, 0, kstream()>>>(q, k, BH, Tn, D, scale, SP, bug);
    if (klaunched(ctx, "scores_kernel")) return -1;
    softmax_rows_kernel<T><<<(unsigned)((BH * Tn + WARPS - 1) / WARPS), WARPS * 32, 0, kstream()>>>(SP, BH, Tn, lse, bug);
    return klaunched(ctx, "softmax_rows_kernel");
}

template <class T>
static int forward_t(const char *ctx, int variant, int64_t BH, int Tn, int D, const katt_rows *layout, float scale,
                     const void *q, const void *k, const void *v, void *o, float *lse)
{
    const int bug = (int)kernels_planted_bug();
    if (variant == KATT_NAIVE) {
        void *S;
        if (att_get(ctx, WS_S, (size_t)BH * Tn * Tn * sizeof(T), &S)) return -1;
        if (naive_probabilities<T>(ctx, (const T *)q, (const T *)k, BH, Tn, D, scale, (T *)S, lse, bug)) return -1;
        pv_kernel<T><<<grid_of(BH * Tn * (int64_t)D, 256), 256, 0, kstream()>>>((const T *)S, (const T *)v, BH, Tn, D, (T *)o, bug);
        return klaunched(ctx, "pv_kernel");
    }
    if (katt_is_mma(variant))
        return katt_mma_forward(ctx, kpath_of<T>(), katt_is_exp2(variant), BH, Tn, D, layout, scale, q, k, v, o, lse,
                                bug);
    const unsigned grid = (unsigned)(BH * ((Tn + FL_ROWS - 1) / FL_ROWS));
    const size_t smem = ((size_t)(FL_ROWS + 2 * KATT_TILE) * fl_ld(D) + FL_ROWS * (FL_PAIR_LD + 2)) * sizeof(float);
    if (variant == KATT_FLASH_EXP2)
        return D <= 64 ? fl_launch(ctx, "flash_fwd_kernel", flash_fwd_kernel<T, 1, 64>, grid, smem, (const T *)q,
                                   (const T *)k, (const T *)v, BH, Tn, D, scale, (T *)o, lse, bug)
                       : fl_launch(ctx, "flash_fwd_kernel", flash_fwd_kernel<T, 1, 128>, grid, smem, (const T *)q,
                                   (const T *)k, (const T *)v, BH, Tn, D, scale, (T *)o, lse, bug);
    return D <= 64 ? fl_launch(ctx, "flash_fwd_kernel", flash_fwd_kernel<T, 0, 64>, grid, smem, (const T *)q,
                               (const T *)k, (const T *)v, BH, Tn, D, scale, (T *)o, lse, bug)
                   : fl_launch(ctx, "flash_fwd_kernel", flash_fwd_kernel<T, 0, 128>, grid, smem, (const T *)q,
                               (const T *)k, (const T *)v, BH, Tn, D, scale, (T *)o, lse, bug);
}

template <class T>
static int backward_t(const char *ctx, int variant, int64_t BH, int Tn, int D, const katt_rows *layout, float scale,
                      const void *q, const void *k, const void *v, const void *o, const void *dout, const float *lse,
                      void *dq, void *dk, void *dv)
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
        dp_kernel<T><<<grid_of(BH * Tn * (int64_t)Tn, 256), 256, 0, kstream()>>>((const T *)dout, (const T *)v, BH, Tn, D, (T *)DP,
                                                                   bug);
        if (klaunched(ctx, "dp_kernel")) return -1;
        ds_rows_kernel<T><<<(unsigned)((rows + WARPS - 1) / WARPS), WARPS * 32, 0, kstream()>>>((const T *)SP, (T *)DP, BH, Tn, bug);
        if (klaunched(ctx, "ds_rows_kernel")) return -1;
        dq_naive_kernel<T><<<grid_of(rows * D, 256), 256, 0, kstream()>>>((const T *)DP, (const T *)k, BH, Tn, D, scale, (T *)dq,
                                                           bug);
        if (klaunched(ctx, "dq_naive_kernel")) return -1;
        dkv_naive_kernel<T><<<grid_of(rows * D, 256), 256, 0, kstream()>>>((const T *)DP, (const T *)SP, (const T *)q,
                                                            (const T *)dout, BH, Tn, D, scale, (T *)dk, (T *)dv, bug);
        return klaunched(ctx, "dkv_naive_kernel");
    }
    if (katt_is_mma(variant) && katt_mma_device(ctx)) return -1; // before any launch
    void *delta;
    if (att_get(ctx, WS_DELTA, (size_t)rows * sizeof(float), &delta)) return -1;
    delta_kernel<T><<<(unsigned)((rows + WARPS - 1) / WARPS), WARPS * 32, 0, kstream()>>>(
        (const T *)dout, (const T *)o, rows, Tn, D, layout->H, layout->in, (float *)delta);
    if (klaunched(ctx, "delta_kernel")) return -1;
    if (katt_is_mma(variant))
        return katt_mma_backward(ctx, kpath_of<T>(), katt_is_exp2(variant), BH, Tn, D, layout, scale, q, k, v, dout,
                                 lse, (const float *)delta, dq, dk, dv, bug);
    return variant == KATT_FLASH_EXP2 ? flash_backward<T, 1>(ctx, BH, Tn, D, scale, q, k, v, dout, lse, delta, dq, dk, dv, bug)
                                      : flash_backward<T, 0>(ctx, BH, Tn, D, scale, q, k, v, dout, lse, delta, dq, dk, dv, bug);
}

extern "C" int kattention_supports(kpath path, int variant, int64_t D, char *why, size_t why_len)
{
    const char *reason = nullptr;
    if (path != KPATH_FP32 && path != KPATH_BF16 && path != KPATH_FP16)
        reason = "paths fp32, bf16, fp16 (fp8 attention would need its own scaled kernels)";
    else if (variant < 0 || variant >= KATT_NVARIANTS) reason = "unknown variant";
    else if (D > KATT_MAX_D) reason = "D above 128";
    else if (katt_is_mma(variant)) reason = katt_mma_refusal(path, D);
    if (why && why_len) snprintf(why, why_len, "%s", reason ? reason : "");
    return reason == nullptr;
}

static void att_context(char *ctx, size_t len, const char *what, kpath path, int variant, int64_t BH, int64_t T,
                        int64_t D)
{
    snprintf(ctx, len, "attention %s %s/%s BH=%lld T=%lld D=%lld", what, kpath_name(path),
             variant >= 0 && variant < KATT_NVARIANTS ? katt_variants[variant].name : "?", (long long)BH, (long long)T,
             (long long)D);
}

extern "C" int kattention_forward_rows(kpath path, int variant, int64_t BH, int64_t T, int64_t D,
                                       const katt_rows *rows, float scale, const void *q, const void *k, const void *v,
                                       void *o, float *lse)
{
    char ctx[160];
    att_context(ctx, sizeof ctx, "forward", path, variant, BH, T, D);
    if (validate(ctx, path, variant, BH, T, D) || validate_rows(ctx, variant, BH, D, rows)) return -1;
    if (!q || !k || !v || !o || !lse) return kernels_fail("%s: null q, k, v, o or lse", ctx);
    switch (path) {
    case KPATH_FP32: return forward_t<float>(ctx, variant, BH, (int)T, (int)D, rows, scale, q, k, v, o, lse);
    case KPATH_BF16: return forward_t<__nv_bfloat16>(ctx, variant, BH, (int)T, (int)D, rows, scale, q, k, v, o, lse);
    default: return forward_t<__half>(ctx, variant, BH, (int)T, (int)D, rows, scale, q, k, v, o, lse);
    }
}

extern "C" int kattention_forward(kpath path, int variant, int64_t BH, int64_t T, int64_t D, float scale,
                                  const void *q, const void *k, const void *v, void *o, float *lse)
{
    const katt_rows packed = katt_rows_packed(D);
    return kattention_forward_rows(path, variant, BH, T, D, &packed, scale, q, k, v, o, lse);
}

extern "C" int kattention_backward_rows(kpath path, int variant, int64_t BH, int64_t T, int64_t D,
                                        const katt_rows *rows, float scale, const void *q, const void *k,
                                        const void *v, const void *o, const void *dout, const float *lse, void *dq,
                                        void *dk, void *dv)
{
    char ctx[160];
    att_context(ctx, sizeof ctx, "backward", path, variant, BH, T, D);
    if (validate(ctx, path, variant, BH, T, D) || validate_rows(ctx, variant, BH, D, rows)) return -1;
    if (!q || !k || !v || !dout || !dq || !dk || !dv) return kernels_fail("%s: null q, k, v, dout, dq, dk or dv", ctx);
    if (variant != KATT_NAIVE && (!o || !lse)) return kernels_fail("%s: the flash backward needs o and lse", ctx);
    switch (path) {
    case KPATH_FP32:
        return backward_t<float>(ctx, variant, BH, (int)T, (int)D, rows, scale, q, k, v, o, dout, lse, dq, dk, dv);
    case KPATH_BF16:
        return backward_t<__nv_bfloat16>(ctx, variant, BH, (int)T, (int)D, rows, scale, q, k, v, o, dout, lse, dq, dk,
                                         dv);
    default: return backward_t<__half>(ctx, variant, BH, (int)T, (int)D, rows, scale, q, k, v, o, dout, lse, dq, dk, dv);
    }
}

extern "C" int kattention_backward(kpath path, int variant, int64_t BH, int64_t T, int64_t D, float scale,
                                   const void *q, const void *k, const void *v, const void *o, const void *dout,
                                   const float *lse, void *dq, void *dk, void *dv)
{
    const katt_rows packed = katt_rows_packed(D);
    return kattention_backward_rows(path, variant, BH, T, D, &packed, scale, q, k, v, o, dout, lse, dq, dk, dv);
}
