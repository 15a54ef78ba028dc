// kernels/attention_mma.cu — causal flash attention on the tensor cores
// (variants flash_mma and flash_mma_exp2, bf16 and fp16 paths), forward and
// backward, after FlashAttention-2 (Dao, 2023): mma.sync.aligned.m16n8k16
// with fp32 accumulators, operands staged in shared memory by cp.async and
// read into registers by ldmatrix.
//
// Layout.  A head's rows are wherever katt_rows puts them (kernels/attention.h:
// row t of head bh = b H + h at element (b T + t) ld + h D, packed [BH, T, D]
// being H = 1, ld = D); the kernels only ever address whole rows through
// am_head, so the layout changes addresses and nothing else.
//
// Work split.  A block of 4 warps owns 64 rows of one head (query rows for
// the forward and dq, key rows for dk and dv), 16 rows per warp; the other
// side streams through shared memory in tiles, double-buffered (the next
// tile's cp.async is in flight while the current one is used).  Rows of
// shared memory are DMAX + 8 elements long (16 bytes of padding): the 8 rows
// an ldmatrix 8x8 matrix reads then start in 8 different groups of 4 banks.
// Elements past D (D < DMAX, a multiple of 8) and rows past T are zero-filled
// by cp.async's src-size operand, so nothing outside the tensors is read and
// no NaN enters a product.  Causality: key tiles above a block's diagonal
// are never loaded; inside the diagonal tile each warp skips the 16-key (or
// 16-query) chunks that are masked for all its rows.  A skipped chunk would
// have contributed products that are all zero, and an mma whose products
// are all zero returns its accumulator unchanged (the fp32 c is aligned to
// its own exponent with F >= 24 fraction bits and rounded to fp32 again), so
// skipping changes no bit.
//
// The arithmetic, per output element (what kernels/check/check_attention_mma.c
// replays; L, F: the tensor cores' block length and alignment bits,
// precision/mma.h):
//  forward (query row i, keys in tiles of KATT_MMA_KEYS = 64):
//   s_ij = mma chain over d of q_id k_jd (k16 instructions in d order), fp32;
//   x_ij = fp32(s_ij sc), sc = scale (flash_mma) or fp32(scale log2 e) (exp2);
//   per tile t: m_t = max(m_{t-1}, max_j x_ij) (exact), corr_t = exp(m_{t-1} - m_t)
//     (0 on the first tile), p_ij = exp(x_ij - m_t) (one fp32 subtraction, expf
//     or exp2f), the tile's row sum r_t: each of the 4 threads of a row sums
//     its 16 p in key order, then a butterfly over the 4 (2 levels);
//     l_t = fma(l_{t-1}, corr_t, r_t);  acc = fp32(acc corr_t), then
//     acc += P~ v by the mma chain over the tile's keys in order, where
//     P~ = p rounded to nearest into the path's format;
//   o_i = fp32(acc / l) stored in the path's format; lse_i = m + log l
//     (exp2: (m + log2 l) fp32(ln 2)).
//  backward (delta_i = rowsum(dout o), kernels/attention.cu):
//   p_ij = exp(fp32(s_ij sc) - lse_i') with lse_i' = lse_i (exp2: fp32(lse_i
//   log2 e)), dP_ij = mma chain over d of dout_id v_jd, ds_ij = fp32(p_ij
//   fp32(dP_ij - delta_i)); P~, dS~ rounded to the path's format;
//   dv_j = mma chain over i >= j of P~_ij dout_i; dk_j = fp32(scale x mma
//   chain over i >= j of dS~_ij q_i); dq_i = fp32(scale x mma chain over
//   j <= i of dS~_ij k_j); each stored in the path's format.
// No float atomics: dq comes from its own kernel over query blocks (which
// recomputes P and dS), dk and dv from one over key blocks, so every result
// is bitwise repeatable.  Planted bugs: drop-term zeroes element D-1 of the
// staged q (forward, dq) or k (dk, dv) used only for the score product, so
// every score loses its last term; truncate-output rounds every store
// toward zero (kelem.cuh).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
// ATT_MMA_HOST_EMULATION: tests/test_attention_mma_simt.cc compiles this file
// on the host after tests/simt_emu.h, which supplies every device primitive
// used below (shared memory, barriers, shuffles, cp.async, ldmatrix, mma)
// for 128 host threads a block; the launchers are left out there.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/attention_mma.cuh"
#include "kernels/attention_mma_layout.h"
#include "kernels/common/kelem.cuh"
#include "kernels/common/klaunch.cuh"

namespace {

constexpr int AM_THREADS = 128; // 4 warps
constexpr int AM_ROWS = 64;     // rows a block owns, 16 per warp
constexpr unsigned FULL = 0xffffffffu;
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

static_assert(KATT_MMA_KEYS == AM_ROWS, "the forward's diagonal key tile is the block's own rows");

#ifdef ATT_MMA_HOST_EMULATION
#define AM_DYNAMIC_SMEM(name) unsigned char *name = am_emu_smem()
#else
#define AM_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

// Keys per tile in the dq kernel and queries per tile in the dk/dv kernel:
// 32 at DMAX 128 keeps the accumulators (2 x 64 floats a thread in dk/dv) and
// the tile's scores in registers without spilling.
template <int DMAX> __host__ __device__ constexpr int am_side_tile() { return DMAX > 64 ? 32 : 64; }

// Blocks per SM the register allocation must allow: 3 at DMAX 64 (at most
// 168 registers a thread), 2 at DMAX 128 (255).  Without a minimum ptxas
// squeezed the DMAX 64 forward into 128 registers and spilled; for sm_80 the
// DMAX 64 backward kernels spill under 168, so they get 2 there.
#define AM_MIN_BLOCKS (DMAX > 64 ? 2 : 3)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define AM_MIN_BLOCKS_BWD 2
#else
#define AM_MIN_BLOCKS_BWD AM_MIN_BLOCKS
#endif

template <int EXP2> __device__ __forceinline__ float am_exp(float x) { return EXP2 ? exp2f(x) : expf(x); }

// ---- the instructions ----------------------------------------------------------------

#ifndef ATT_MMA_HOST_EMULATION
__device__ __forceinline__ uint32_t am_smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

// 16 bytes global -> shared, asynchronously; bytes < 16 fills the rest with
// zeros (bytes = 0 reads nothing).
__device__ __forceinline__ void am_cp16(void *dst, const void *src, int bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(am_smem_addr(dst)), "l"(src), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void am_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void am_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// Four 8x8 matrices of 16-bit elements: lane l gives the address of row l % 8
// of matrix l / 8; register r receives, in lane l, elements (l / 4, 2 (l % 4))
// and (l / 4, 2 (l % 4) + 1) of matrix r (trans: elements (2 (l % 4), l / 4)
// and (2 (l % 4) + 1, l / 4)), the first in the low half (PTX ISA, ldmatrix).
__device__ __forceinline__ void am_ldsm(uint32_t (&r)[4], const void *row)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(am_smem_addr(row))
                 : "memory");
}
__device__ __forceinline__ void am_ldsm_trans(uint32_t (&r)[4], const void *row)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(am_smem_addr(row))
                 : "memory");
}

#endif

// d[16x8] += a[16x16] b[16x8].  Fragments (PTX ISA, mma.m16n8k16, g = lane / 4,
// t = lane % 4): a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8,
// 2t+8..); b0 (k 2t..2t+1, n g), b1 (k 2t+8.., n g); d0, d1 (g, 2t, 2t+1),
// d2, d3 (g+8, 2t, 2t+1).
template <class T> struct am_type;
template <> struct am_type<__nv_bfloat16> {
    static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
    {
#ifdef ATT_MMA_HOST_EMULATION
        am_emu_mma(PREC_BF16, d, a, b0, b1);
#else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
    }
    // two floats rounded to nearest even, lo in the low half
    static __device__ __forceinline__ uint32_t pack(float lo, float hi)
    {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        uint32_t r;
        memcpy(&r, &v, 4);
        return r;
    }
};
template <> struct am_type<__half> {
    static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
    {
#ifdef ATT_MMA_HOST_EMULATION
        am_emu_mma(PREC_FP16, d, a, b0, b1);
#else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi)
    {
        __half2 v = __floats2half2_rn(lo, hi);
        uint32_t r;
        memcpy(&r, &v, 4);
        return r;
    }
};

// The A fragment of keys (or queries) [16 kc, 16 kc + 16) from the fp32
// accumulator fragments of n-tiles 2 kc (lo) and 2 kc + 1 (hi), rounded to
// nearest into T (attention_mma_layout.h: aml_acc_tile, aml_acc_elem).
template <class T> __device__ __forceinline__ void am_a_from_acc(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4])
{
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const float(&acc)[4] = aml_acc_tile(r) ? hi : lo;
        a[r] = am_type<T>::pack(acc[aml_acc_elem(r, 0)], acc[aml_acc_elem(r, 1)]);
    }
}

// Two stored values side by side (4 bytes; element d even, D a multiple of 8).
template <class T> __device__ __forceinline__ void am_store2(T *dst, float x0, float x1, int bug)
{
    T pair[2] = {kfrom_float<T>(x0, bug), kfrom_float<T>(x1, bug)};
    uint32_t bits;
    memcpy(&bits, pair, 4);
    *reinterpret_cast<uint32_t *>(dst) = bits;
}

// ---- shared-memory tiles -------------------------------------------------------------

// dst [R][DMAX + 8] <- rows [0, valid) x columns [0, D) of src, rows ld
// elements apart; zeros elsewhere (valid may be <= 0).  16-byte chunks, consecutive threads on
// consecutive chunks; a zero-filled chunk reads nothing and names `head`, the
// start of the head's tensor, as its source.
template <class T, int DMAX, int R>
__device__ __forceinline__ void am_load_tile(T *dst, const T *src, int valid, int D, int ld, const T *head)
{
    constexpr int LDS = DMAX + 8, CPR = DMAX / 8;
    static_assert(R * CPR % AM_THREADS == 0, "whole chunks per thread");
#pragma unroll
    for (int it = 0; it < R * CPR / AM_THREADS; it++) {
        const int c = threadIdx.x + it * AM_THREADS, r = c / CPR, col = (c % CPR) * 8;
        const bool ok = r < valid && col < D;
        am_cp16(dst + r * LDS + col, ok ? src + (int64_t)r * ld + col : head, ok ? 16 : 0);
    }
}

// The planted drop-term bug: element D-1 of every staged row read as zero.
template <class T, int DMAX> __device__ __forceinline__ void am_drop_last_term(T *tile, int rows, int D)
{
    for (int r = threadIdx.x; r < rows; r += AM_THREADS) tile[r * (DMAX + 8) + D - 1] = kfrom_float<T>(0.0f, 0);
}

// katt_rows as the kernels take it: 32-bit (am_rows_of refuses larger).  Two
// strides, not one a tensor, and 32-bit ones: the DMAX 64 backward kernels
// run at their register cap on sm_90 (168), and a stride a tensor, or 64-bit
// strides, made them spill.
struct am_rows {
    int H, in, out;
};

// false when H or a stride does not fit 32 bits
static bool am_rows_of(const katt_rows &r, am_rows *out)
{
    if (r.H < 0 || r.H > INT32_MAX || r.in < 0 || r.in > INT32_MAX || r.out < 0 || r.out > INT32_MAX) return false;
    *out = {(int)r.H, (int)r.in, (int)r.out};
    return true;
}

// Row 0 of head bh (= b H + h) in a tensor whose rows are ld elements apart
// (kernels/attention.h, katt_rows): heads of one b side by side in a row.
template <class P> __device__ __forceinline__ P *am_head(P *base, int bh, int Tn, int D, int H, int ld)
{
    const int b = bh / H, h = bh - b * H;
    return base + (int64_t)b * Tn * ld + h * D;
}

// ldmatrix row addresses: attention_mma_layout.h.
template <int LDS> __device__ __forceinline__ int am_a_offset(int r0, int c0, int lane) { return aml_a_offset(LDS, r0, c0, lane); }
template <int LDS> __device__ __forceinline__ int am_bn_offset(int n0, int k0, int lane) { return aml_bn_offset(LDS, n0, k0, lane); }
template <int LDS> __device__ __forceinline__ int am_bk_offset(int k0, int n0, int lane) { return aml_bk_offset(LDS, k0, n0, lane); }

// ---- forward -------------------------------------------------------------------------

// Block: query rows [q0, q0 + 64) of head bh (the last row blocks first: they
// have the most keys); warp w: rows q0 + 16 w + {g, g + 8}.
template <class T, int EXP2, int DMAX>
__global__ void __launch_bounds__(AM_THREADS, AM_MIN_BLOCKS)
    mma_fwd_kernel(const T *q, const T *k, const T *v, int64_t BH, int Tn, int D, am_rows rows, float scale, T *o,
                   float *lse, int bug)
{
    constexpr int LDS = DMAX + 8, NK = DMAX / 16, ND = DMAX / 8, BN = KATT_MMA_KEYS, NS = BN / 8;
    AM_DYNAMIC_SMEM(am_smem);
    T *Qs = reinterpret_cast<T *>(am_smem), *Ks = Qs + AM_ROWS * LDS, *Vs = Ks + 2 * BN * LDS;
    const int row_blocks = (Tn + AM_ROWS - 1) / AM_ROWS;
    const int bh = (int)(blockIdx.x % (unsigned)BH); // 32-bit: BH x row blocks fit (validated)
    const int q0 = (row_blocks - 1 - (int)(blockIdx.x / (unsigned)BH)) * AM_ROWS;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int nk = (D + 15) / 16; // 16-wide chunks of d holding data
    const T *qb = am_head(q, bh, Tn, D, rows.H, rows.in), *kb = am_head(k, bh, Tn, D, rows.H, rows.in),
            *vb = am_head(v, bh, Tn, D, rows.H, rows.in);
    am_load_tile<T, DMAX, AM_ROWS>(Qs, qb + (int64_t)q0 * rows.in, Tn - q0, D, rows.in, qb);
    am_load_tile<T, DMAX, BN>(Ks, kb, Tn, D, rows.in, kb);
    am_load_tile<T, DMAX, BN>(Vs, vb, Tn, D, rows.in, vb);
    am_commit();

    const float sc = EXP2 ? __fmul_rn(scale, kLog2e) : scale;
    const int row0 = q0 + 16 * warp + g; // this thread's rows: row0, row0 + 8
    const int n_tiles = q0 / BN + 1;     // key tiles 0 .. the diagonal one
    uint32_t qf[NK][4] = {};
    float acc[ND][4] = {};
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    for (int j = 0; j < n_tiles; j++) {
        const int buf = j & 1, k0 = j * BN;
        if (j + 1 < n_tiles) {
            am_load_tile<T, DMAX, BN>(Ks + (buf ^ 1) * BN * LDS, kb + (int64_t)(k0 + BN) * rows.in, Tn - k0 - BN, D,
                                      rows.in, kb);
            am_load_tile<T, DMAX, BN>(Vs + (buf ^ 1) * BN * LDS, vb + (int64_t)(k0 + BN) * rows.in, Tn - k0 - BN, D,
                                      rows.in, vb);
            am_commit();
            am_wait<1>();
        } else {
            am_wait<0>();
        }
        __syncthreads();
        if (j == 0) {
            if (bug == KBUG_DROP_TERM) {
                am_drop_last_term<T, DMAX>(Qs, AM_ROWS, D);
                __syncthreads();
            }
#pragma unroll
            for (int kk = 0; kk < NK; kk++)
                if (kk < nk) am_ldsm(qf[kk], Qs + am_a_offset<LDS>(16 * warp, 16 * kk, lane));
        }
        const T *Kt = Ks + buf * BN * LDS, *Vt = Vs + buf * BN * LDS;
        const bool diag = j == n_tiles - 1;
        const int chunks = diag ? warp + 1 : BN / 16; // 16-key chunks with a key <= one of this warp's rows

        // s = q k^T over the tile (raw dot products)
        float s[NS][4] = {};
#pragma unroll
        for (int kk = 0; kk < NK; kk++) {
            if (kk >= nk) continue;
#pragma unroll
            for (int kc = 0; kc < BN / 16; kc++) {
                if (kc >= chunks) continue;
                uint32_t b[4];
                am_ldsm(b, Kt + am_bn_offset<LDS>(16 * kc, 16 * kk, lane));
                am_type<T>::mma(s[2 * kc], qf[kk], b[0], b[1]);
                am_type<T>::mma(s[2 * kc + 1], qf[kk], b[2], b[3]);
            }
        }
        // scaled scores, causal mask, the running maximum of each row
        float mx[2] = {m[0], m[1]};
#pragma unroll
        for (int n = 0; n < NS; n++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int key = k0 + 8 * n + 2 * t + (c & 1), row = row0 + 8 * (c >> 1);
                const float x = diag && key > row ? -INFINITY : __fmul_rn(s[n][c], sc);
                s[n][c] = x;
                mx[c >> 1] = fmaxf(mx[c >> 1], x);
            }
        float corr[2], rs[2] = {0.0f, 0.0f};
#pragma unroll
        for (int h = 0; h < 2; h++) {
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(FULL, mx[h], 1));
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(FULL, mx[h], 2)); // finite: key k0 <= every row
            corr[h] = am_exp<EXP2>(__fsub_rn(m[h], mx[h]));        // 0 on the first tile
            m[h] = mx[h];
        }
#pragma unroll
        for (int n = 0; n < NS; n++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const float p = am_exp<EXP2>(__fsub_rn(s[n][c], m[c >> 1])); // masked: exp(-inf) = 0
                s[n][c] = p;
                rs[c >> 1] = __fadd_rn(rs[c >> 1], p);
            }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            rs[h] = __fadd_rn(rs[h], __shfl_xor_sync(FULL, rs[h], 1));
            rs[h] = __fadd_rn(rs[h], __shfl_xor_sync(FULL, rs[h], 2));
            l[h] = __fmaf_rn(l[h], corr[h], rs[h]);
        }
#pragma unroll
        for (int n = 0; n < ND; n++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[n][c] = __fmul_rn(acc[n][c], corr[c >> 1]);

        // acc += P~ v, keys in order
#pragma unroll
        for (int kc = 0; kc < BN / 16; kc++) {
            if (kc >= chunks) continue;
            uint32_t a[4];
            am_a_from_acc<T>(a, s[2 * kc], s[2 * kc + 1]);
#pragma unroll
            for (int dd = 0; dd < NK; dd++) {
                if (dd >= nk) continue;
                uint32_t b[4];
                am_ldsm_trans(b, Vt + am_bk_offset<LDS>(16 * kc, 16 * dd, lane));
                am_type<T>::mma(acc[2 * dd], a, b[0], b[1]);
                am_type<T>::mma(acc[2 * dd + 1], a, b[2], b[3]);
            }
        }
        __syncthreads(); // the next iteration's loads overwrite this buffer
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int row = row0 + 8 * h;
        if (row >= Tn) continue;
        T *orow = am_head(o, bh, Tn, D, rows.H, rows.out) + (int64_t)row * rows.out;
#pragma unroll
        for (int n = 0; n < ND; n++) {
            const int d = 8 * n + 2 * t;
            if (d < D) am_store2<T>(orow + d, __fdiv_rn(acc[n][2 * h], l[h]), __fdiv_rn(acc[n][2 * h + 1], l[h]), bug);
        }
        if (t == 0) {
            const float L = EXP2 ? __fmul_rn(__fadd_rn(m[h], log2f(l[h])), kLn2) : __fadd_rn(m[h], logf(l[h]));
            lse[(int64_t)bh * Tn + row] = kfrom_float<float>(L, bug);
        }
    }
}

// ---- backward: dq ----------------------------------------------------------------------

// Block: query rows [q0, q0 + 64) (the last first), key tiles of BN from 0 to
// the diagonal; dq_i = scale sum_j dS~_ij k_j.
template <class T, int EXP2, int DMAX>
__global__ void __launch_bounds__(AM_THREADS, AM_MIN_BLOCKS_BWD)
    mma_dq_kernel(const T *q, const T *k, const T *v, const T *dout, const float *lse, const float *delta, int64_t BH,
                  int Tn, int D, am_rows rows, float scale, T *dq, int bug)
{
    constexpr int LDS = DMAX + 8, NK = DMAX / 16, ND = DMAX / 8, BN = am_side_tile<DMAX>(), NS = BN / 8;
    AM_DYNAMIC_SMEM(am_smem);
    T *Qs = reinterpret_cast<T *>(am_smem), *Gs = Qs + AM_ROWS * LDS, *Ks = Gs + AM_ROWS * LDS,
      *Vs = Ks + 2 * BN * LDS;
    const int row_blocks = (Tn + AM_ROWS - 1) / AM_ROWS;
    const int bh = (int)(blockIdx.x % (unsigned)BH); // 32-bit: BH x row blocks fit (validated)
    const int q0 = (row_blocks - 1 - (int)(blockIdx.x / (unsigned)BH)) * AM_ROWS;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int nk = (D + 15) / 16;
    const T *qb = am_head(q, bh, Tn, D, rows.H, rows.in), *gb = am_head(dout, bh, Tn, D, rows.H, rows.in),
            *kb = am_head(k, bh, Tn, D, rows.H, rows.in), *vb = am_head(v, bh, Tn, D, rows.H, rows.in);
    am_load_tile<T, DMAX, AM_ROWS>(Qs, qb + (int64_t)q0 * rows.in, Tn - q0, D, rows.in, qb);
    am_load_tile<T, DMAX, AM_ROWS>(Gs, gb + (int64_t)q0 * rows.in, Tn - q0, D, rows.in, gb);
    am_load_tile<T, DMAX, BN>(Ks, kb, Tn, D, rows.in, kb);
    am_load_tile<T, DMAX, BN>(Vs, vb, Tn, D, rows.in, vb);
    am_commit();

    const float sc = EXP2 ? __fmul_rn(scale, kLog2e) : scale;
    const int row0 = q0 + 16 * warp + g, last = q0 + 16 * warp + 15; // last: the warp's last row
    float lse_r[2], delta_r[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int row = row0 + 8 * h;
        const float L = row < Tn ? lse[(int64_t)bh * Tn + row] : 0.0f;
        lse_r[h] = EXP2 ? __fmul_rn(L, kLog2e) : L;
        delta_r[h] = row < Tn ? delta[(int64_t)bh * Tn + row] : 0.0f;
    }
    // key tiles up to the end of the diagonal block whatever T is (those past T
    // are zeros), so a row's chain of instructions does not depend on T
    const int n_tiles = (q0 + AM_ROWS) / BN;
    uint32_t qf[NK][4] = {}, gf[NK][4] = {};
    float acc[ND][4] = {};
    for (int j = 0; j < n_tiles; j++) {
        const int buf = j & 1, k0 = j * BN;
        if (j + 1 < n_tiles) {
            am_load_tile<T, DMAX, BN>(Ks + (buf ^ 1) * BN * LDS, kb + (int64_t)(k0 + BN) * rows.in, Tn - k0 - BN, D,
                                      rows.in, kb);
            am_load_tile<T, DMAX, BN>(Vs + (buf ^ 1) * BN * LDS, vb + (int64_t)(k0 + BN) * rows.in, Tn - k0 - BN, D,
                                      rows.in, vb);
            am_commit();
            am_wait<1>();
        } else {
            am_wait<0>();
        }
        __syncthreads();
        if (j == 0) {
            if (bug == KBUG_DROP_TERM) {
                am_drop_last_term<T, DMAX>(Qs, AM_ROWS, D);
                __syncthreads();
            }
#pragma unroll
            for (int kk = 0; kk < NK; kk++)
                if (kk < nk) {
                    am_ldsm(qf[kk], Qs + am_a_offset<LDS>(16 * warp, 16 * kk, lane));
                    am_ldsm(gf[kk], Gs + am_a_offset<LDS>(16 * warp, 16 * kk, lane));
                }
        }
        const T *Kt = Ks + buf * BN * LDS, *Vt = Vs + buf * BN * LDS;
        // 16-key chunks with a key <= the warp's last row; masking wherever a key may exceed a row
        const int chunks = last < k0 ? 0 : (last - k0) / 16 + 1 < BN / 16 ? (last - k0) / 16 + 1 : BN / 16;
        const bool masked = k0 + BN - 1 > q0 + 16 * warp;
        if (chunks > 0) {
            float s[NS][4] = {}, dp[NS][4] = {};
#pragma unroll
            for (int kk = 0; kk < NK; kk++) {
                if (kk >= nk) continue;
#pragma unroll
                for (int kc = 0; kc < BN / 16; kc++) {
                    if (kc >= chunks) continue;
                    uint32_t b[4];
                    am_ldsm(b, Kt + am_bn_offset<LDS>(16 * kc, 16 * kk, lane));
                    am_type<T>::mma(s[2 * kc], qf[kk], b[0], b[1]);
                    am_type<T>::mma(s[2 * kc + 1], qf[kk], b[2], b[3]);
                    am_ldsm(b, Vt + am_bn_offset<LDS>(16 * kc, 16 * kk, lane));
                    am_type<T>::mma(dp[2 * kc], gf[kk], b[0], b[1]);
                    am_type<T>::mma(dp[2 * kc + 1], gf[kk], b[2], b[3]);
                }
            }
#pragma unroll
            for (int n = 0; n < NS; n++)
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    const int key = k0 + 8 * n + 2 * t + (c & 1), row = row0 + 8 * (c >> 1), h = c >> 1;
                    float p = am_exp<EXP2>(__fsub_rn(__fmul_rn(s[n][c], sc), lse_r[h]));
                    if (masked && key > row) p = 0.0f;
                    s[n][c] = __fmul_rn(p, __fsub_rn(dp[n][c], delta_r[h])); // ds
                }
#pragma unroll
            for (int kc = 0; kc < BN / 16; kc++) {
                if (kc >= chunks) continue;
                uint32_t a[4];
                am_a_from_acc<T>(a, s[2 * kc], s[2 * kc + 1]);
#pragma unroll
                for (int dd = 0; dd < NK; dd++) {
                    if (dd >= nk) continue;
                    uint32_t b[4];
                    am_ldsm_trans(b, Kt + am_bk_offset<LDS>(16 * kc, 16 * dd, lane));
                    am_type<T>::mma(acc[2 * dd], a, b[0], b[1]);
                    am_type<T>::mma(acc[2 * dd + 1], a, b[2], b[3]);
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int row = row0 + 8 * h;
        if (row >= Tn) continue;
        T *drow = am_head(dq, bh, Tn, D, rows.H, rows.out) + (int64_t)row * rows.out;
#pragma unroll
        for (int n = 0; n < ND; n++) {
            const int d = 8 * n + 2 * t;
            if (d < D)
                am_store2<T>(drow + d, __fmul_rn(acc[n][2 * h], scale), __fmul_rn(acc[n][2 * h + 1], scale), bug);
        }
    }
}

// ---- backward: dk, dv ------------------------------------------------------------------

// Block: key rows [j0, j0 + 64) (the first first: they have the most queries),
// query tiles of BQ from j0 to the end; warp w: keys j0 + 16 w + {g, g + 8}.
// dv_j = sum_i P~_ij dout_i, dk_j = scale sum_i dS~_ij q_i: the A operands are
// P^T and dS^T, straight from the accumulators of s^T = k q^T and dP^T = v dout^T.
template <class T, int EXP2, int DMAX>
__global__ void __launch_bounds__(AM_THREADS, AM_MIN_BLOCKS_BWD)
    mma_dkv_kernel(const T *q, const T *k, const T *v, const T *dout, const float *lse, const float *delta,
                   int64_t BH, int Tn, int D, am_rows rows, float scale, T *dk, T *dv, int bug)
{
    constexpr int LDS = DMAX + 8, NK = DMAX / 16, ND = DMAX / 8, BQ = am_side_tile<DMAX>(), NS = BQ / 8;
    AM_DYNAMIC_SMEM(am_smem);
    T *Ks = reinterpret_cast<T *>(am_smem), *Vs = Ks + AM_ROWS * LDS, *Qs = Vs + AM_ROWS * LDS,
      *Gs = Qs + 2 * BQ * LDS;
    float *lse_s = reinterpret_cast<float *>(Gs + 2 * BQ * LDS), *delta_s = lse_s + 2 * BQ;
    const int bh = (int)(blockIdx.x % (unsigned)BH); // 32-bit: BH x row blocks fit (validated)
    const int j0 = (int)(blockIdx.x / (unsigned)BH) * AM_ROWS;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int nk = (D + 15) / 16;
    const T *qb = am_head(q, bh, Tn, D, rows.H, rows.in), *gb = am_head(dout, bh, Tn, D, rows.H, rows.in);
    const float *lb = lse + (int64_t)bh * Tn, *db = delta + (int64_t)bh * Tn;
    // lse (in the exponential's units) and delta of query rows [i0, i0 + BQ), 0 past T
    auto stage_stats = [&](int b, int i0) {
        for (int c = threadIdx.x; c < BQ; c += AM_THREADS) {
            const int i = i0 + c;
            lse_s[b * BQ + c] = i < Tn ? (EXP2 ? __fmul_rn(lb[i], kLog2e) : lb[i]) : 0.0f;
            delta_s[b * BQ + c] = i < Tn ? db[i] : 0.0f;
        }
    };
    const T *kb = am_head(k, bh, Tn, D, rows.H, rows.in), *vb = am_head(v, bh, Tn, D, rows.H, rows.in);
    am_load_tile<T, DMAX, AM_ROWS>(Ks, kb + (int64_t)j0 * rows.in, Tn - j0, D, rows.in, kb);
    am_load_tile<T, DMAX, AM_ROWS>(Vs, vb + (int64_t)j0 * rows.in, Tn - j0, D, rows.in, vb);
    am_load_tile<T, DMAX, BQ>(Qs, qb + (int64_t)j0 * rows.in, Tn - j0, D, rows.in, qb);
    am_load_tile<T, DMAX, BQ>(Gs, gb + (int64_t)j0 * rows.in, Tn - j0, D, rows.in, gb);
    am_commit();
    stage_stats(0, j0);

    const float sc = EXP2 ? __fmul_rn(scale, kLog2e) : scale;
    const int key_first = j0 + 16 * warp, key0 = key_first + g; // this thread's keys: key0, key0 + 8
    const int n_tiles = (Tn - j0 + BQ - 1) / BQ;
    float acc_k[ND][4] = {}, acc_v[ND][4] = {};
    for (int j = 0; j < n_tiles; j++) {
        const int buf = j & 1, i0 = j0 + j * BQ;
        if (j + 1 < n_tiles) {
            am_load_tile<T, DMAX, BQ>(Qs + (buf ^ 1) * BQ * LDS, qb + (int64_t)(i0 + BQ) * rows.in, Tn - i0 - BQ, D,
                                      rows.in, qb);
            am_load_tile<T, DMAX, BQ>(Gs + (buf ^ 1) * BQ * LDS, gb + (int64_t)(i0 + BQ) * rows.in, Tn - i0 - BQ, D,
                                      rows.in, gb);
            am_commit();
            stage_stats(buf ^ 1, i0 + BQ);
            am_wait<1>();
        } else {
            am_wait<0>();
        }
        __syncthreads();
        if (j == 0 && bug == KBUG_DROP_TERM) {
            am_drop_last_term<T, DMAX>(Ks, AM_ROWS, D);
            __syncthreads();
        }
        const T *Qt = Qs + buf * BQ * LDS, *Gt = Gs + buf * BQ * LDS;
        const float *lse_t = lse_s + buf * BQ, *delta_t = delta_s + buf * BQ;
        // 16-query chunks with a query >= the warp's first key (i0 and key_first are multiples of 16)
        const int first_chunk = key_first > i0 ? (key_first - i0) / 16 : 0;
        const bool masked = i0 < key_first + 16 || i0 + BQ > Tn;
        if (first_chunk < BQ / 16) {
            float st[NS][4] = {}, dpt[NS][4] = {};
#pragma unroll
            for (int kk = 0; kk < NK; kk++) {
                if (kk >= nk) continue;
                uint32_t ka[4], va[4];
                am_ldsm(ka, Ks + am_a_offset<LDS>(16 * warp, 16 * kk, lane));
                am_ldsm(va, Vs + am_a_offset<LDS>(16 * warp, 16 * kk, lane));
#pragma unroll
                for (int qc = 0; qc < BQ / 16; qc++) {
                    if (qc < first_chunk) continue;
                    uint32_t b[4];
                    am_ldsm(b, Qt + am_bn_offset<LDS>(16 * qc, 16 * kk, lane));
                    am_type<T>::mma(st[2 * qc], ka, b[0], b[1]);
                    am_type<T>::mma(st[2 * qc + 1], ka, b[2], b[3]);
                    am_ldsm(b, Gt + am_bn_offset<LDS>(16 * qc, 16 * kk, lane));
                    am_type<T>::mma(dpt[2 * qc], va, b[0], b[1]);
                    am_type<T>::mma(dpt[2 * qc + 1], va, b[2], b[3]);
                }
            }
#pragma unroll
            for (int n = 0; n < NS; n++)
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    const int col = 8 * n + 2 * t + (c & 1), query = i0 + col, key = key0 + 8 * (c >> 1);
                    float p = am_exp<EXP2>(__fsub_rn(__fmul_rn(st[n][c], sc), lse_t[col]));
                    if (masked && (query < key || query >= Tn)) p = 0.0f;
                    st[n][c] = p;
                    dpt[n][c] = __fmul_rn(p, __fsub_rn(dpt[n][c], delta_t[col])); // ds
                }
#pragma unroll
            for (int qc = 0; qc < BQ / 16; qc++) {
                if (qc < first_chunk) continue;
                uint32_t pa[4], sa[4];
                am_a_from_acc<T>(pa, st[2 * qc], st[2 * qc + 1]);
                am_a_from_acc<T>(sa, dpt[2 * qc], dpt[2 * qc + 1]);
#pragma unroll
                for (int dd = 0; dd < NK; dd++) {
                    if (dd >= nk) continue;
                    uint32_t b[4];
                    am_ldsm_trans(b, Gt + am_bk_offset<LDS>(16 * qc, 16 * dd, lane));
                    am_type<T>::mma(acc_v[2 * dd], pa, b[0], b[1]);
                    am_type<T>::mma(acc_v[2 * dd + 1], pa, b[2], b[3]);
                    am_ldsm_trans(b, Qt + am_bk_offset<LDS>(16 * qc, 16 * dd, lane));
                    am_type<T>::mma(acc_k[2 * dd], sa, b[0], b[1]);
                    am_type<T>::mma(acc_k[2 * dd + 1], sa, b[2], b[3]);
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int key = key0 + 8 * h;
        if (key >= Tn) continue;
        T *krow = am_head(dk, bh, Tn, D, rows.H, rows.out) + (int64_t)key * rows.out,
          *vrow = am_head(dv, bh, Tn, D, rows.H, rows.out) + (int64_t)key * rows.out;
#pragma unroll
        for (int n = 0; n < ND; n++) {
            const int d = 8 * n + 2 * t;
            if (d >= D) continue;
            am_store2<T>(krow + d, __fmul_rn(acc_k[n][2 * h], scale), __fmul_rn(acc_k[n][2 * h + 1], scale), bug);
            am_store2<T>(vrow + d, acc_v[n][2 * h], acc_v[n][2 * h + 1], bug);
        }
    }
}

// ---- launchers -------------------------------------------------------------------------

template <class T, int DMAX> constexpr size_t am_smem_fwd() { return (size_t)(AM_ROWS + 4 * KATT_MMA_KEYS) * (DMAX + 8) * sizeof(T); }
template <class T, int DMAX> constexpr size_t am_smem_dq() { return (size_t)(2 * AM_ROWS + 4 * am_side_tile<DMAX>()) * (DMAX + 8) * sizeof(T); }
template <class T, int DMAX> constexpr size_t am_smem_dkv()
{
    return (size_t)(2 * AM_ROWS + 4 * am_side_tile<DMAX>()) * (DMAX + 8) * sizeof(T) + 4 * am_side_tile<DMAX>() * sizeof(float);
}

#ifndef ATT_MMA_HOST_EMULATION
// Raises the kernel's dynamic shared-memory limit (once per kernel), then
// launches AM_THREADS threads per block.
template <class... P, class... A>
static int am_launch(const char *ctx, const char *what, bool &raised, void (*kernel)(P...), unsigned grid, size_t smem,
                     A... args)
{
    if (!raised) {
        cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess)
            return kernels_fail("%s: %s needs %zu bytes of shared memory: %s", ctx, what, smem, cudaGetErrorString(e));
        raised = true;
    }
    kernel<<<grid, AM_THREADS, smem, kstream()>>>(args...);
    return klaunched(ctx, what);
}

template <class T, int EXP2, int DMAX>
static int am_forward(const char *ctx, int64_t BH, int Tn, int D, const am_rows &rows, float scale, const void *q,
                      const void *k, const void *v, void *o, float *lse, int bug)
{
    static bool raised = false;
    const unsigned grid = (unsigned)(BH * ((Tn + AM_ROWS - 1) / AM_ROWS));
    return am_launch(ctx, "mma_fwd_kernel", raised, mma_fwd_kernel<T, EXP2, DMAX>, grid, am_smem_fwd<T, DMAX>(),
                     (const T *)q, (const T *)k, (const T *)v, BH, Tn, D, rows, scale, (T *)o, lse, bug);
}

template <class T, int EXP2, int DMAX>
static int am_backward(const char *ctx, int64_t BH, int Tn, int D, const am_rows &rows, float scale, const void *q,
                       const void *k, const void *v, const void *dout, const float *lse, const float *delta, void *dq,
                       void *dk, void *dv, int bug)
{
    static bool raised_dq = false, raised_dkv = false;
    const unsigned grid = (unsigned)(BH * ((Tn + AM_ROWS - 1) / AM_ROWS));
    if (am_launch(ctx, "mma_dq_kernel", raised_dq, mma_dq_kernel<T, EXP2, DMAX>, grid, am_smem_dq<T, DMAX>(),
                  (const T *)q, (const T *)k, (const T *)v, (const T *)dout, lse, delta, BH, Tn, D, rows, scale,
                  (T *)dq, bug))
        return -1;
    return am_launch(ctx, "mma_dkv_kernel", raised_dkv, mma_dkv_kernel<T, EXP2, DMAX>, grid, am_smem_dkv<T, DMAX>(),
                     (const T *)q, (const T *)k, (const T *)v, (const T *)dout, lse, delta, BH, Tn, D, rows, scale,
                     (T *)dk, (T *)dv, bug);
}

// Operands read by cp.async in 16-byte chunks (every row start: the pointer
// and the row stride of 8 16-bit elements); outputs written in pairs.
static int am_aligned(const char *ctx, const void *const *in, const int64_t *ld_in, int n_in, void *const *out,
                      const int64_t *ld_out, int n_out)
{
    for (int i = 0; i < n_in; i++)
        if ((uintptr_t)in[i] % 16 != 0 || ld_in[i] % 8 != 0)
            return kernels_fail("%s: flash_mma needs 16-byte aligned rows of q, k, v, dout (pointers, and row strides "
                                "a multiple of 8 elements)", ctx);
    for (int i = 0; i < n_out; i++)
        if ((uintptr_t)out[i] % 4 != 0 || ld_out[i] % 2 != 0)
            return kernels_fail("%s: flash_mma needs 4-byte aligned output rows (row strides even)", ctx);
    return 0;
}

#endif // ATT_MMA_HOST_EMULATION
} // namespace
#ifndef ATT_MMA_HOST_EMULATION

const char *katt_mma_refusal(kpath path, int64_t D)
{
    if (path != KPATH_BF16 && path != KPATH_FP16)
        return "flash_mma runs on the tensor cores' 16-bit inputs: bf16 and fp16 paths only (fp32 would need tf32 "
               "or split operands, another arithmetic; use flash or flash_exp2)";
    if (D > 0 && (D % 8 != 0 || D > KATT_MAX_D))
        return "flash_mma needs D a multiple of 8 up to 128 (rows copied in 16-byte chunks)";
    return nullptr;
}

int katt_mma_device(const char *ctx)
{
    static int major = -1;
    if (major < 0) {
        int dev = 0;
        cudaError_t e = cudaGetDevice(&dev);
        if (e == cudaSuccess) e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
        if (e != cudaSuccess) {
            major = -1;
            return kernels_fail("%s: cannot query the device: %s", ctx, cudaGetErrorString(e));
        }
    }
    if (major < 8) return kernels_fail("%s: flash_mma needs an sm_80 or newer GPU (mma.sync bf16, cp.async)", ctx);
    return 0;
}

int katt_mma_forward(const char *ctx, kpath path, int exp2, int64_t BH, int Tn, int D, const katt_rows *rows,
                     float scale, const void *q, const void *k, const void *v, void *o, float *lse, int bug)
{
    const char *why = katt_mma_refusal(path, D);
    if (why) return kernels_fail("%s: %s", ctx, why);
    const void *in[] = {q, k, v};
    void *out[] = {o, lse};
    const int64_t ld_in[] = {rows->in, rows->in, rows->in}, ld_out[] = {rows->out, 2};
    am_rows r32;
    if (!am_rows_of(*rows, &r32)) return kernels_fail("%s: flash_mma's heads a row and row strides fit 32 bits", ctx);
    if (katt_mma_device(ctx) || am_aligned(ctx, in, ld_in, 3, out, ld_out, 2)) return -1;
    const bool wide = D > 64;
    if (path == KPATH_BF16) {
        using T = __nv_bfloat16;
        if (exp2) return wide ? am_forward<T, 1, 128>(ctx, BH, Tn, D, r32, scale, q, k, v, o, lse, bug)
                              : am_forward<T, 1, 64>(ctx, BH, Tn, D, r32, scale, q, k, v, o, lse, bug);
        return wide ? am_forward<T, 0, 128>(ctx, BH, Tn, D, r32, scale, q, k, v, o, lse, bug)
                    : am_forward<T, 0, 64>(ctx, BH, Tn, D, r32, scale, q, k, v, o, lse, bug);
    }
    using T = __half;
    if (exp2) return wide ? am_forward<T, 1, 128>(ctx, BH, Tn, D, r32, scale, q, k, v, o, lse, bug)
                          : am_forward<T, 1, 64>(ctx, BH, Tn, D, r32, scale, q, k, v, o, lse, bug);
    return wide ? am_forward<T, 0, 128>(ctx, BH, Tn, D, r32, scale, q, k, v, o, lse, bug)
                : am_forward<T, 0, 64>(ctx, BH, Tn, D, r32, scale, q, k, v, o, lse, bug);
}

int katt_mma_backward(const char *ctx, kpath path, int exp2, int64_t BH, int Tn, int D, const katt_rows *rows,
                      float scale, const void *q, const void *k, const void *v, const void *dout, const float *lse,
                      const float *delta, void *dq, void *dk, void *dv, int bug)
{
    const char *why = katt_mma_refusal(path, D);
    if (why) return kernels_fail("%s: %s", ctx, why);
    const void *in[] = {q, k, v, dout};
    void *out[] = {dq, dk, dv};
    const int64_t ld_in[] = {rows->in, rows->in, rows->in, rows->in}, ld_out[] = {rows->out, rows->out, rows->out};
    am_rows r32;
    if (!am_rows_of(*rows, &r32)) return kernels_fail("%s: flash_mma's heads a row and row strides fit 32 bits", ctx);
    if (katt_mma_device(ctx) || am_aligned(ctx, in, ld_in, 4, out, ld_out, 3)) return -1;
    const bool wide = D > 64;
#define AM_BACKWARD(T, E, DM) am_backward<T, E, DM>(ctx, BH, Tn, D, r32, scale, q, k, v, dout, lse, delta, dq, dk, dv, bug)
    if (path == KPATH_BF16) {
        if (exp2) return wide ? AM_BACKWARD(__nv_bfloat16, 1, 128) : AM_BACKWARD(__nv_bfloat16, 1, 64);
        return wide ? AM_BACKWARD(__nv_bfloat16, 0, 128) : AM_BACKWARD(__nv_bfloat16, 0, 64);
    }
    if (exp2) return wide ? AM_BACKWARD(__half, 1, 128) : AM_BACKWARD(__half, 1, 64);
    return wide ? AM_BACKWARD(__half, 0, 128) : AM_BACKWARD(__half, 0, 64);
#undef AM_BACKWARD
}
#endif // ATT_MMA_HOST_EMULATION
