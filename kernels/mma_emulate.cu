// kernels/mma_emulate.cu — the modelled matrix unit on CUDA cores (mma_emulate.h).
//
// Fast kernel (precision/mma_fast.h gives the arithmetic and proves it on the
// CPU): a decode pass turns each operand into magnitude, sign and exponent
// arrays laid out [K][rows] (rows padded to the 64-row tile), plus per (block
// of L, row) the block's floor on emax (zero_exp where it holds a zero, a huge
// value where it holds an infinity or NaN) and the bit mask of its negative
// operands.  The GEMM kernel stages BK x 64 tiles of every array, and the
// tile's floors and masks, in shared memory; each thread owns 4 x 4 outputs
// and, per block of L products, runs pass 1 (emax over c's exponent, the
// floors and ea + eb: one VIADDMNMX per product), pass 2 (c's term, then the
// aligned products) and the rounding into its decoded accumulator
// (mma_fast_finish32: about 15 instructions, no branch; the rare blocks that
// need the model's own code, one branch per block and thread).  The A100's
// blocks (L = 4, 8 with F = 24) sum in 32 bits whole ("narrow"); longer or
// wider blocks in 32-bit chunks added in 64 bits; the narrow kernels hold
// two blocks of threads per SM (their register budget).  Per product, pass 2
// takes 4 integer instructions, the signs in ones' complement (mma_fast.h),
// whose correction is a popcount per block and output.
//
// Replicas (mma_emulate_linear_batched): every kernel takes the replica as
// grid.z, its decoded arrays and its fp32 result at a fixed stride in one
// workspace; a replica's blocks run exactly the code of a single call on its
// own operands, and mma_emulate_linear is the call with one replica.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "kernels/common/kelem.cuh"
#include "kernels/common/klaunch.cuh"
#include "kernels/mma_emulate.h"
#include "precision/mma_fast.h"

namespace {

constexpr int TILE = 64;   // output tile edge (rows of A, rows of B)
constexpr int THREADS = 256; // 16 x 16 threads, 4 x 4 outputs each

// The workspace replicas of one launch may take: more replicas run as further
// launches of the same kernels (bits do not depend on the grouping).  A
// replica whose problem fills the GPU on its own gains nothing from company.
constexpr size_t GROUP_WORKSPACE = size_t(512) << 20;

int planted_drop_last = 0, planted_replica0_b = 0;
const char *last_kernel = "";
int64_t batched_calls = 0;

// ---- the model's own code: one thread per output ---------------------------------------

__global__ void model_gemm(mma_arith p, int M, int N, int K, const uint8_t *A, const uint8_t *B, const float *C,
                           float *D)
{
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    const int m = blockIdx.y;
    if (n >= N || m >= M) return;
    const int sz = mma_elem_bytes(p.in);
    uint32_t c = C ? __float_as_uint(C[(long)m * N + n]) : 0u;
    c = mma_dot(&p, K, A + (long)m * K * sz, B + (long)n * K * sz, c);
    D[(long)m * N + n] = __uint_as_float(c);
}

// ---- fast kernel ---------------------------------------------------------------------------

// Operand (row r, k) of replica z of a source at element
// z * s_rep + r * s_row + k * s_k, decoded into replica z's [Kp][Rp] arrays
// (at z * Kp * Rp); per (block of L, row) its floor (mma_fast_floor) and the
// bit mask of its negative operands, [Kp / L][Rp] (at z * Kp / L * Rp).  One
// thread per (row, block of L, replica).  Rows past `rows` and k past K
// decode as +0 (K padding is the unit's own zero padding of a short block;
// padded rows are never written out).  complement (the second operand, B):
// mag holds sgn * mag and sgn the mask -1 for a negative operand, else 0
// (mma_fast_term_oc's bs and bm).
__global__ void decode_operand(prec_format in, mma_fast_params q, int shift, int complement, int rows, int K, int Kp,
                               int Rp, const uint8_t *src, int64_t s_row, int64_t s_k, int64_t s_rep, uint32_t *mag,
                               int32_t *sgn, int32_t *exp, int32_t *floors, uint32_t *negs)
{
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    const int blk = blockIdx.y, L = q.block;
    if (r >= Rp) return;
    const int64_t z = blockIdx.z, rep = (int64_t)Kp * Rp;
    src += z * s_rep * mma_elem_bytes(in);
    mag += z * rep, sgn += z * rep, exp += z * rep;
    floors += z * (rep / L), negs += z * (rep / L);
    uint32_t f = 0u, neg = 0u;
    for (int kk = 0; kk < L; kk++) {
        const int k = blk * L + kk;
        mma_fast_operand o;
        if (r < rows && k < K) {
            o = mma_fast_decode(in, mma_load_bits(in, src, (long)(r * s_row + (int64_t)k * s_k)), shift);
        } else {
            o.mag = 0u;
            o.sgn = 1;
            o.exp = MMA_FAST_ZERO_EXP;
            o.flag = MMA_FAST_FLAG_ZERO;
        }
        const int64_t at = (int64_t)k * Rp + r;
        mag[at] = complement ? (uint32_t)((int32_t)o.mag * o.sgn) : o.mag;
        sgn[at] = complement ? (o.sgn < 0 ? -1 : 0) : o.sgn;
        exp[at] = o.exp;
        f |= o.flag;
        neg |= (uint32_t)(o.sgn < 0) << kk;
    }
    floors[(int64_t)blk * Rp + r] = mma_fast_floor(&q, f);
    negs[(int64_t)blk * Rp + r] = neg;
}

// Replica 0's decoded arrays (decode_operand's layout); replica z's at
// z * Kp * Rp elements, its floors and masks at z * Kp / L * Rp.
struct decoded {
    const uint32_t *mag;
    const int32_t *sgn, *exp, *floors;
    const uint32_t *negs;
    int Rp;
};

struct source {
    const uint8_t *p;
    int64_t s_row, s_k; // element (r, k) at r * s_row + k * s_k
    int64_t s_rep;      // replica z's elements from z * s_rep (0: every replica reads the same)
};

__device__ decoded replica_of(decoded d, int Kp, int L, int64_t z)
{
    const int64_t rep = (int64_t)Kp * d.Rp;
    d.mag += z * rep, d.sgn += z * rep, d.exp += z * rep;
    d.floors += z * (rep / L), d.negs += z * (rep / L);
    return d;
}

__device__ source replica_of(source s, prec_format in, int64_t z)
{
    s.p += z * s.s_rep * mma_elem_bytes(in);
    return s;
}

// The model's own block for output (m, n), operands gathered from the sources.
__device__ __noinline__ uint32_t model_block(const mma_arith &p, int n_products, source a, int m, source b, int n,
                                             int k0, uint32_t c)
{
    uint32_t abuf[32], bbuf[32]; // up to 32 elements of up to 4 bytes
    for (int i = 0; i < n_products; i++) {
        const uint32_t x = mma_load_bits(p.in, a.p, (long)(m * a.s_row + (int64_t)(k0 + i) * a.s_k));
        const uint32_t y = mma_load_bits(p.in, b.p, (long)(n * b.s_row + (int64_t)(k0 + i) * b.s_k));
        switch (mma_elem_bytes(p.in)) {
        case 4: abuf[i] = x; bbuf[i] = y; break;
        case 2: reinterpret_cast<uint16_t *>(abuf)[i] = (uint16_t)x; reinterpret_cast<uint16_t *>(bbuf)[i] = (uint16_t)y; break;
        default: reinterpret_cast<uint8_t *>(abuf)[i] = (uint8_t)x; reinterpret_cast<uint8_t *>(bbuf)[i] = (uint8_t)y; break;
        }
    }
    return mma_block(&p, n_products, abuf, bbuf, c);
}

// D = A . B^T (+ C) for one 64 x 64 tile of replica blockIdx.z, each thread 4
// x 4 outputs.  NARROW (q.narrow): the whole block sum in 32 bits and
// rounded by mma_fast_finish32, two blocks of THREADS per SM (on the H100,
// 2.26 ms against 2.72 with one for the A100's fp16 at 1024 x 1024 x 4096);
// else partial sums of MMA_FAST_CHUNK products in 32 bits, the block sum in
// 64 (mma_fast_finish64).
template <int L, int BK, bool NARROW>
__global__ void __launch_bounds__(THREADS, NARROW ? 2 : 1)
    fast_gemm(mma_arith p, mma_fast_params q, int M, int N, int K, int nblk, int Kp, decoded da, decoded db,
              source sa, source sb, const float *C, float *D, int drop_last)
{
    static_assert(BK % L == 0 && BK % 16 == 0, "a tile holds whole blocks");
    constexpr int NB = BK / L; // blocks per tile
    __shared__ __align__(16) uint32_t s_amag[BK][TILE], s_bmag[BK][TILE];
    __shared__ __align__(16) int32_t s_asgn[BK][TILE], s_bsgn[BK][TILE], s_aexp[BK][TILE], s_bexp[BK][TILE];
    // the blocks' floors and sign masks in shared memory too, where they fit
    // in the 48 KB of a static allocation (L = 32 reads them from global memory)
    constexpr bool stage_blocks = L < 32;
    __shared__ __align__(16) int32_t s_afloor[stage_blocks ? NB : 1][TILE], s_bfloor[stage_blocks ? NB : 1][TILE];
    constexpr int NEGS = stage_blocks ? NB : 1;
    __shared__ __align__(16) uint32_t s_aneg[NEGS][TILE], s_bneg[NEGS][TILE];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int m0 = blockIdx.y * TILE + ty * 4, n0 = blockIdx.x * TILE + tx * 4;
    // replica blockIdx.z: its operands, decoded arrays and C, D [M][N]
    const int64_t z = blockIdx.z;
    da = replica_of(da, Kp, L, z), db = replica_of(db, Kp, L, z);
    sa = replica_of(sa, p.in, z), sb = replica_of(sb, p.in, z);
    if (C) C += z * M * N;
    D += z * M * N;

    mma_fast_acc acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int m = m0 + i, n = n0 + j;
            acc[i][j] = mma_fast_acc_of(&q, C && m < M && n < N ? __float_as_uint(C[(int64_t)m * N + n]) : 0u);
        }

    for (int kt = 0; kt < Kp; kt += BK) {
        // stage BK x 64 of every decoded array: BK * 16 int4 each; the tile's
        // NB blocks' floors (and sign masks): NB * 16 int4 each
        for (int v = threadIdx.x; v < BK * 16; v += THREADS) {
            const int kk = v / 16, c4 = (v % 16) * 4;
            const int64_t ga = (int64_t)(kt + kk) * da.Rp + blockIdx.y * TILE + c4;
            const int64_t gb = (int64_t)(kt + kk) * db.Rp + blockIdx.x * TILE + c4;
            *reinterpret_cast<uint4 *>(&s_amag[kk][c4]) = *reinterpret_cast<const uint4 *>(da.mag + ga);
            *reinterpret_cast<int4 *>(&s_asgn[kk][c4]) = *reinterpret_cast<const int4 *>(da.sgn + ga);
            *reinterpret_cast<int4 *>(&s_aexp[kk][c4]) = *reinterpret_cast<const int4 *>(da.exp + ga);
            *reinterpret_cast<uint4 *>(&s_bmag[kk][c4]) = *reinterpret_cast<const uint4 *>(db.mag + gb);
            *reinterpret_cast<int4 *>(&s_bsgn[kk][c4]) = *reinterpret_cast<const int4 *>(db.sgn + gb);
            *reinterpret_cast<int4 *>(&s_bexp[kk][c4]) = *reinterpret_cast<const int4 *>(db.exp + gb);
            if (drop_last && kk % L == L - 1) *reinterpret_cast<uint4 *>(&s_bmag[kk][c4]) = make_uint4(0, 0, 0, 0);
        }
        for (int v = threadIdx.x; stage_blocks && v < NB * 16; v += THREADS) {
            const int bl = v / 16, c4 = (v % 16) * 4;
            const int64_t ga = (int64_t)(kt / L + bl) * da.Rp + blockIdx.y * TILE + c4;
            const int64_t gb = (int64_t)(kt / L + bl) * db.Rp + blockIdx.x * TILE + c4;
            *reinterpret_cast<int4 *>(&s_afloor[stage_blocks ? bl : 0][c4]) = *reinterpret_cast<const int4 *>(da.floors + ga);
            *reinterpret_cast<int4 *>(&s_bfloor[stage_blocks ? bl : 0][c4]) = *reinterpret_cast<const int4 *>(db.floors + gb);
            *reinterpret_cast<uint4 *>(&s_aneg[NEGS > 1 ? bl : 0][c4]) = *reinterpret_cast<const uint4 *>(da.negs + ga);
            *reinterpret_cast<uint4 *>(&s_bneg[NEGS > 1 ? bl : 0][c4]) = *reinterpret_cast<const uint4 *>(db.negs + gb);
        }
        __syncthreads();
#pragma unroll 1
        for (int bl = 0; bl < NB; bl++) {
            const int blk = kt / L + bl;
            if (blk >= nblk) break;
            const int kb = bl * L; // first k of the block in the tile
            // pass 1: the block's largest exponent, from c's and the rows' floors
            int emax[4][4];
            {
                const int4 fa4 = *reinterpret_cast<const int4 *>(
                    stage_blocks ? &s_afloor[stage_blocks ? bl : 0][ty * 4] : da.floors + (int64_t)blk * da.Rp + m0);
                const int4 fb4 = *reinterpret_cast<const int4 *>(
                    stage_blocks ? &s_bfloor[stage_blocks ? bl : 0][tx * 4] : db.floors + (int64_t)blk * db.Rp + n0);
                const int fa[4] = {fa4.x, fa4.y, fa4.z, fa4.w}, fb[4] = {fb4.x, fb4.y, fb4.z, fb4.w};
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int j = 0; j < 4; j++) emax[i][j] = mma_fast_emax_start(acc[i][j], fa[i], fb[j]);
            }
#pragma unroll 2
            for (int kk = 0; kk < L; kk++) {
                const int4 ea = *reinterpret_cast<const int4 *>(&s_aexp[kb + kk][ty * 4]);
                const int4 eb = *reinterpret_cast<const int4 *>(&s_bexp[kb + kk][tx * 4]);
                const int ae[4] = {ea.x, ea.y, ea.z, ea.w}, be[4] = {eb.x, eb.y, eb.z, eb.w};
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int j = 0; j < 4; j++) emax[i][j] = max(emax[i][j], ae[i] + be[j]);
            }
            // pass 2: c's term and the ones' complement correction, then the
            // aligned products, MMA_FAST_CHUNK at a time in 32 bits
            int32_t chunk[4][4];
            int64_t S[4][4];
            {
                const uint4 na4 = *reinterpret_cast<const uint4 *>(
                    stage_blocks ? &s_aneg[NEGS > 1 ? bl : 0][ty * 4] : da.negs + (int64_t)blk * da.Rp + m0);
                const uint4 nb4 = *reinterpret_cast<const uint4 *>(
                    stage_blocks ? &s_bneg[NEGS > 1 ? bl : 0][tx * 4] : db.negs + (int64_t)blk * db.Rp + n0);
                const uint32_t na[4] = {na4.x, na4.y, na4.z, na4.w}, nb[4] = {nb4.x, nb4.y, nb4.z, nb4.w};
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        chunk[i][j] = mma_fast_c_term(&q, acc[i][j], emax[i][j]) + mma_fast_oc_correction(na[i], nb[j]);
                        S[i][j] = 0;
                    }
            }
#pragma unroll 2
            for (int kk = 0; kk < L; kk++) {
                const uint4 am = *reinterpret_cast<const uint4 *>(&s_amag[kb + kk][ty * 4]);
                const int4 as = *reinterpret_cast<const int4 *>(&s_asgn[kb + kk][ty * 4]);
                const int4 ae = *reinterpret_cast<const int4 *>(&s_aexp[kb + kk][ty * 4]);
                const uint4 bm = *reinterpret_cast<const uint4 *>(&s_bmag[kb + kk][tx * 4]);
                const int4 bs = *reinterpret_cast<const int4 *>(&s_bsgn[kb + kk][tx * 4]);
                const int4 be = *reinterpret_cast<const int4 *>(&s_bexp[kb + kk][tx * 4]);
                const uint32_t amv[4] = {am.x, am.y, am.z, am.w}, bmv[4] = {bm.x, bm.y, bm.z, bm.w};
                const int32_t asv[4] = {as.x, as.y, as.z, as.w}, bsv[4] = {bs.x, bs.y, bs.z, bs.w};
                const int32_t aev[4] = {ae.x, ae.y, ae.z, ae.w}, bev[4] = {be.x, be.y, be.z, be.w};
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int j = 0; j < 4; j++)
                        chunk[i][j] +=
                            mma_fast_term_oc(amv[i], asv[i], aev[i], (int32_t)bmv[j], bsv[j], bev[j], emax[i][j]);
                if (!NARROW && (kk + 1) % MMA_FAST_CHUNK == 0) {
#pragma unroll
                    for (int i = 0; i < 4; i++)
#pragma unroll
                        for (int j = 0; j < 4; j++) S[i][j] += chunk[i][j], chunk[i][j] = 0;
                }
            }
            // round into the accumulators, then (rare) the blocks the rounding
            // left alone through the model's own code: one branch per block,
            // where the rounding asks again which outputs those were
            bool any_slow = false;
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    any_slow |= (NARROW ? mma_fast_finish32(&q, chunk[i][j], emax[i][j], &acc[i][j])
                                        : mma_fast_finish64(&q, S[i][j] + chunk[i][j], emax[i][j], &acc[i][j])) != 0;
            if (any_slow) {
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        mma_fast_acc probe;
                        const int slow = NARROW ? mma_fast_finish32(&q, chunk[i][j], emax[i][j], &probe)
                                                : mma_fast_finish64(&q, S[i][j] + chunk[i][j], emax[i][j], &probe);
                        const int m = m0 + i, n = n0 + j;
                        if (!slow || m >= M || n >= N) continue; // padding: never written
                        const int k0 = blk * L, count = K - k0 < L ? K - k0 : L;
                        acc[i][j] =
                            mma_fast_acc_of(&q, model_block(p, count, sa, m, sb, n, k0, mma_fast_acc_bits(acc[i][j])));
                    }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int m = m0 + i, n = n0 + j;
            if (m < M && n < N) D[(int64_t)m * N + n] = __uint_as_float(mma_fast_acc_bits(acc[i][j]));
        }
}

// y = round(D (+ y)) into y's format; replica blockIdx.y: D at y * count, y at y * stride_y.
template <typename T>
__global__ void epilogue(int64_t count, const float *D, T *y, int64_t stride_y, int accumulate)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    D += blockIdx.y * count;
    y += blockIdx.y * stride_y;
    float v = D[i];
    if (accumulate) v = __fadd_rn(v, kto_float(y[i]));
    y[i] = kfrom_float<T>(v, KBUG_NONE);
}

// ---- workspaces -----------------------------------------------------------------------------

void *ws_ptr = nullptr;
size_t ws_size = 0;

size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

// The fast kernel's sizes for M x N x K: nblk blocks of L products, K padded
// to Kp (whole BK tiles), rows to Mp and Np (whole 64-row tiles).
struct fast_dims {
    int L, BK, nblk, Kp, Mp, Np;
};

int fast_dims_of(const char *ctx, const mma_arith &p, int M, int N, int K, fast_dims *d)
{
    const int L = p.block, BK = L > 16 ? 32 : 16;
    if (L != 4 && L != 8 && L != 16 && L != 32)
        return kernels_fail("%s: block of %d products (the fast kernel takes 4, 8, 16, 32)", ctx, L);
    const int nblk = (K + L - 1) / L, Kp = (int)round_up((size_t)nblk * L, BK);
    const int Mp = (int)round_up((size_t)M, TILE), Np = (int)round_up((size_t)N, TILE);
    if (Kp / L > 65535) return kernels_fail("%s: K=%d is more than %d blocks", ctx, K, 65535);
    if (Mp / TILE > 65535) return kernels_fail("%s: M=%d above the grid limit", ctx, M);
    *d = fast_dims{L, BK, nblk, Kp, Mp, Np};
    return 0;
}

// Bytes of one operand's decoded arrays for `count` replicas: [count][Kp][Rp]
// of three words + [count][Kp / L][Rp] floors and sign masks.
size_t operand_bytes(const fast_dims &d, int Rp, int count)
{
    return round_up((size_t)count * ((size_t)d.Kp * Rp * 12 + (size_t)(d.Kp / d.L) * Rp * 8), 256);
}

// Both operands' (A's, then B's).
size_t decoded_bytes(const fast_dims &d, int count) { return operand_bytes(d, d.Mp, count) + operand_bytes(d, d.Np, count); }

int decode(const char *ctx, const mma_arith &p, const mma_fast_params &q, int shift, int complement, int rows, int K,
           const fast_dims &d, int Rp, int count, const source &s, uint8_t *base, decoded *out)
{
    const size_t words = (size_t)count * d.Kp * Rp; // of each of the three arrays
    const size_t block_words = words / d.L;         // of the floors and of the masks
    uint32_t *mag = reinterpret_cast<uint32_t *>(base);
    int32_t *sgn = reinterpret_cast<int32_t *>(base + words * 4);
    int32_t *exp = reinterpret_cast<int32_t *>(base + words * 8);
    int32_t *floors = reinterpret_cast<int32_t *>(base + words * 12);
    uint32_t *negs = reinterpret_cast<uint32_t *>(base + words * 12 + block_words * 4);
    const dim3 grid((unsigned)(Rp / 128 + (Rp % 128 ? 1 : 0)), (unsigned)(d.Kp / d.L), (unsigned)count);
    decode_operand<<<grid, 128, 0, kstream()>>>(p.in, q, shift, complement, rows, K, d.Kp, Rp, s.p, s.s_row, s.s_k,
                                                s.s_rep, mag, sgn, exp, floors, negs);
    if (klaunched(ctx, "decode")) return -1;
    *out = decoded{mag, sgn, exp, floors, negs, Rp};
    return 0;
}

template <int L, int BK, bool NARROW>
void launch_fast(const mma_arith &p, const mma_fast_params &q, int M, int N, int K, const fast_dims &d, int count,
                 const decoded &da, const decoded &db, const source &sa, const source &sb, const float *C, float *D)
{
    const dim3 grid((unsigned)(d.Np / TILE), (unsigned)(d.Mp / TILE), (unsigned)count);
    fast_gemm<L, BK, NARROW><<<grid, THREADS, 0, kstream()>>>(p, q, M, N, K, d.nblk, d.Kp, da, db, sa, sb, C, D,
                                                              planted_drop_last);
}

// For replicas z < count: D[z][M][N] = A_z . B_z^T (+ C[z]) through the fast
// kernel, the decoded operands in ws (decoded_bytes(d, count) bytes).
int run_fast(const char *ctx, const mma_arith &p, int M, int N, int K, const fast_dims &d, int count,
             const source &sa, const source &sb, const float *C, float *D, uint8_t *ws)
{
    const mma_fast_params q = mma_fast_params_of(&p);
    decoded da, db;
    if (decode(ctx, p, q, q.a_shift, 0, M, K, d, d.Mp, count, sa, ws, &da) ||
        decode(ctx, p, q, 0, 1, N, K, d, d.Np, count, sb, ws + operand_bytes(d, d.Mp, count), &db))
        return -1;
    if (q.narrow && d.L <= 8) {
        if (d.L == 4) launch_fast<4, 16, true>(p, q, M, N, K, d, count, da, db, sa, sb, C, D);
        else launch_fast<8, 16, true>(p, q, M, N, K, d, count, da, db, sa, sb, C, D);
    } else {
        switch (d.L) {
        case 4: launch_fast<4, 16, false>(p, q, M, N, K, d, count, da, db, sa, sb, C, D); break;
        case 8: launch_fast<8, 16, false>(p, q, M, N, K, d, count, da, db, sa, sb, C, D); break;
        case 16: launch_fast<16, 16, false>(p, q, M, N, K, d, count, da, db, sa, sb, C, D); break;
        default: launch_fast<32, 32, false>(p, q, M, N, K, d, count, da, db, sa, sb, C, D); break;
        }
    }
    last_kernel = "fast";
    return klaunched(ctx, "fast gemm");
}

template <typename T>
void launch_epilogue(int64_t count, int replicas, const float *D, void *y, int64_t stride_y, int accumulate)
{
    const dim3 grid((unsigned)((count + 255) / 256), (unsigned)replicas);
    epilogue<T><<<grid, 256, 0, kstream()>>>(count, D, static_cast<T *>(y), stride_y, accumulate);
}

}  // namespace

extern "C" void mma_emulate_plant_drop_last(int on) { planted_drop_last = on != 0; }

extern "C" void mma_emulate_plant_replica0_b(int on) { planted_replica0_b = on != 0; }

extern "C" const char *mma_emulate_last_kernel(void) { return last_kernel; }

extern "C" int mma_emulate_inner_ops_per_product(void) { return 5; }

extern "C" int64_t mma_emulate_batched_calls(void) { return batched_calls; }

extern "C" void mma_emulate_release(void)
{
    kernels_note_free(); // a graph that read these workspaces must not be replayed
    if (ws_ptr) cudaFree(ws_ptr);
    ws_ptr = nullptr;
    ws_size = 0;
}

extern "C" int mma_emulate_gemm(const mma_arith *p, int M, int N, int K, const void *A, const void *B,
                                const float *C, float *D)
{
    if (M <= 0 || N <= 0 || K <= 0) return kernels_fail("mma_emulate_gemm: M=%d N=%d K=%d must be > 0", M, N, K);
    if (p->out != PREC_FP32)
        return kernels_fail("mma_emulate_gemm: output %s, only fp32 outputs are emulated", prec_format_name(p->out));
    char ctx[96];
    snprintf(ctx, sizeof ctx, "mma_emulate_gemm %s M=%d N=%d K=%d", prec_format_name(p->in), M, N, K);
    if (mma_fast_supported(p)) {
        const source sa{static_cast<const uint8_t *>(A), K, 1, 0}, sb{static_cast<const uint8_t *>(B), K, 1, 0};
        fast_dims d;
        if (fast_dims_of(ctx, *p, M, N, K, &d) || kworkspace_grow(ctx, &ws_ptr, &ws_size, decoded_bytes(d, 1)) ||
            run_fast(ctx, *p, M, N, K, d, 1, sa, sb, C, D, static_cast<uint8_t *>(ws_ptr)))
            return -1;
    } else {
        if (M > 65535) return kernels_fail("%s: M above the grid limit 65535", ctx);
        const dim3 block(128), grid((N + 127) / 128, M);
        model_gemm<<<grid, block, 0, kstream()>>>(*p, M, N, K, static_cast<const uint8_t *>(A),
                                                  static_cast<const uint8_t *>(B), C, D);
        last_kernel = "model";
        if (klaunched(ctx, "model gemm")) return -1;
    }
    return klaunched_synced(ctx);
}

extern "C" int mma_emulate_linear_batched(const mma_arith *p, int64_t M, int64_t N, int64_t K, const void *A,
                                          int a_trans, const void *B, int b_trans, void *y, prec_format y_format,
                                          int accumulate, const mma_emulate_batch *batch)
{
    const int64_t R = batch ? batch->count : 1;
    char ctx[160];
    snprintf(ctx, sizeof ctx, "mma_emulate_linear%s %s M=%lld N=%lld K=%lld R=%lld", batch ? "_batched" : "",
             prec_format_name(p->in), (long long)M, (long long)N, (long long)K, (long long)R);
    if (M <= 0 || N <= 0 || K <= 0 || M > (1 << 30) || N > (1 << 30) || K > (1 << 30))
        return kernels_fail("%s: sizes must be in 1..2^30", ctx);
    if (R < 1 || R > 65535) return kernels_fail("%s: replicas must be in 1..65535", ctx);
    const int64_t stride_a = batch ? batch->stride_a : 0, stride_b = batch ? batch->stride_b : 0;
    const int64_t stride_y = batch ? batch->stride_y : 0;
    if (stride_a < 0 || stride_b < 0 || (R > 1 && stride_y < M * N))
        return kernels_fail("%s: replica strides a=%lld b=%lld y=%lld (a, b >= 0; y >= M*N keeps outputs apart)", ctx,
                            (long long)stride_a, (long long)stride_b, (long long)stride_y);
    if (!mma_fast_supported(p)) return kernels_fail("%s: the fast kernel does not cover this model", ctx);
    if (y_format != PREC_FP32 && y_format != PREC_BF16 && y_format != PREC_FP16)
        return kernels_fail("%s: output %s (fp32, bf16 or fp16)", ctx, prec_format_name(y_format));
    const int64_t count = M * N;
    if ((count + 255) / 256 > 0x7FFFFFFF) return kernels_fail("%s: M*N above the epilogue's grid limit", ctx);
    fast_dims d;
    if (fast_dims_of(ctx, *p, (int)M, (int)N, (int)K, &d)) return -1;
    // A(m, k) and B(n, k) as kernels/matmul.h lays them out
    source sa{static_cast<const uint8_t *>(A), a_trans ? 1 : K, a_trans ? M : 1, stride_a};
    source sb{static_cast<const uint8_t *>(B), b_trans ? K : 1, b_trans ? 1 : N, planted_replica0_b ? 0 : stride_b};
    // replicas in groups within GROUP_WORKSPACE (at least one), each group's
    // decoded operands, then its D [group][M][N], in the workspace
    const size_t d_bytes = (size_t)count * sizeof(float), per_replica = decoded_bytes(d, 1) + d_bytes;
    const int group = (int)std::min<int64_t>(R, std::max<int64_t>((int64_t)(GROUP_WORKSPACE / per_replica), 1));
    const size_t dec = decoded_bytes(d, group);
    if (kworkspace_grow(ctx, &ws_ptr, &ws_size, dec + (size_t)group * d_bytes)) return -1;
    uint8_t *ws = static_cast<uint8_t *>(ws_ptr);
    float *D = reinterpret_cast<float *>(ws + dec);
    const size_t esz = (size_t)mma_elem_bytes(p->in), ysz = y_format == PREC_FP32 ? 4 : 2;
    for (int64_t r0 = 0; r0 < R; r0 += group) {
        const int n = (int)(R - r0 < group ? R - r0 : group);
        source ga = sa, gb = sb;
        ga.p += (size_t)(r0 * ga.s_rep) * esz;
        gb.p += (size_t)(r0 * gb.s_rep) * esz;
        void *gy = static_cast<uint8_t *>(y) + (size_t)(r0 * stride_y) * ysz;
        if (run_fast(ctx, *p, (int)M, (int)N, (int)K, d, n, ga, gb, nullptr, D, ws)) return -1;
        switch (y_format) {
        case PREC_FP32: launch_epilogue<float>(count, n, D, gy, stride_y, accumulate); break;
        case PREC_BF16: launch_epilogue<__nv_bfloat16>(count, n, D, gy, stride_y, accumulate); break;
        default: launch_epilogue<__half>(count, n, D, gy, stride_y, accumulate); break;
        }
        if (klaunched(ctx, "epilogue")) return -1;
    }
    if (R > 1) batched_calls++;
    return 0;
}

extern "C" int mma_emulate_linear(const mma_arith *p, int64_t M, int64_t N, int64_t K, const void *A, int a_trans,
                                  const void *B, int b_trans, void *y, prec_format y_format, int accumulate)
{
    return mma_emulate_linear_batched(p, M, N, K, A, a_trans, B, b_trans, y, y_format, accumulate, nullptr);
}
