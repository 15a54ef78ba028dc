// kernels/common/kreduce.cuh — the fixed-order reductions the row kernels share
// (device code, C++).  Every tree here has a fixed shape, so results are
// bitwise repeatable; the shapes are what kcheck_tree_depth() assumes.
//
// Row partition: thread t of T owns the elements [t*V, t*V + V) of every
// chunk of T*V consecutive elements (V = 16 bytes / element size when the row
// length is a multiple of it, else 1) and sums them in order; so a thread
// holds at most V * ceil(C / (T V)) terms, and krow_depth() is the longest
// chain of roundings: that count minus one plus the tree's levels.
#ifndef ULPSCOPE_KERNELS_COMMON_KREDUCE_CUH
#define ULPSCOPE_KERNELS_COMMON_KREDUCE_CUH

#include <cstdint>
#include <type_traits>

#include "kernels/common/kelem.cuh"

// Butterfly over the 32 lanes, offsets 16, 8, 4, 2, 1: every lane ends with
// the same association order's sum from lane 0's point of view.
__device__ __forceinline__ float kwarp_sum(float v)
{
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// Block of blockDim.x threads (a multiple of 32, at most 1024): warp
// butterflies, then warp 0 butterflies the warps' sums.  scratch: 32 floats of
// shared memory.  Every thread receives the total.
__device__ __forceinline__ float kblock_sum(float v, float *scratch)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = kwarp_sum(v);
    __syncthreads(); // scratch may still be read from a previous call
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < warps ? scratch[lane] : 0.0f;
        w = kwarp_sum(w);
        if (lane == 0) scratch[0] = w;
    }
    __syncthreads();
    return scratch[0];
}

// Maximum over a block (exact: the order does not matter).
__device__ __forceinline__ float kblock_max(float v, float *scratch)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < warps ? scratch[lane] : -INFINITY;
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) w = fmaxf(w, __shfl_xor_sync(0xffffffffu, w, offset));
        if (lane == 0) scratch[0] = w;
    }
    __syncthreads();
    return scratch[0];
}

// The threads that share one row, RT of them: a whole block (RT > 32, launched
// with blockDim.x <= RT: the threads a block lacks would hold no terms), one
// warp (RT == 32) or one thread (RT == 1).  row is the row this thread works
// on, t its index among the row's threads.
//
// Narrow rows: when a row has at most G vectors (G = 8, 16 or 32, G < RT),
// only the first G of its RT threads hold terms; then G lanes of a warp stand
// in for the RT threads and a block runs blockDim.x / G rows.  The tree is
// kept: the threads without terms hold +0.0f, and what they add is replayed
// by krow_group_sum (see there).  Whole-warp groups (G >= 32 or G == RT)
// may leave a row >= N early; narrower ones must stay for the shuffles.
template <int RT, int G = RT> struct krow_group {
    static_assert(G == RT || (G < RT && (G == 8 || G == 16 || G == 32)), "G: RT, or 8, 16 or 32 lanes below RT");
    static constexpr bool kSubWarp = G < RT && G < 32;
    int64_t row;
    int t;
    __device__ krow_group()
    {
        if (G > 32) {
            row = blockIdx.x;
            t = threadIdx.x;
        } else if (G > 1) {
            row = (int64_t)blockIdx.x * (blockDim.x / G) + threadIdx.x / G;
            t = threadIdx.x & (G - 1);
        } else {
            row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
            t = 0;
        }
    }
};

// Whether this thread's row exists (row < N).  A thread without one leaves
// (false) unless its lanes are a sub-warp group, which must stay for the
// shuffles: it then works on row N - 1 and must store nothing.
template <int RT, int G> __device__ __forceinline__ bool krow_live(krow_group<RT, G> &g, int64_t N)
{
    if (g.row < N) return true;
    g.row = N - 1;
    return false;
}

// Sum over a row's RT threads (kblock_sum, kwarp_sum, or the value itself).
// With G < RT lanes standing in: the threads without terms hold +0.0f, so
// the warp butterfly's offsets 16 .. G add +0.0f to each live lane before the
// offsets below G pair the live lanes as the full butterfly does; a block
// tree then adds its other warps' +0.0f to warp 0's sum.  x + 0.0f is x
// except that -0.0f becomes +0.0f (and a NaN the canonical NaN), both of
// which the full tree does too, and repeating it changes nothing: one add
// of +0.0f before the butterfly and one after stand for them all.
template <int RT, int G = RT> __device__ __forceinline__ float krow_group_sum(float v, float *scratch)
{
    if constexpr (G == RT) {
        if constexpr (RT > 32) return kblock_sum(v, scratch);
        else if constexpr (RT == 32) return kwarp_sum(v);
        else return v;
    } else {
        if constexpr (G < 32) v = __fadd_rn(v, 0.0f);
#pragma unroll
        for (int offset = G / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
        if constexpr (RT > 32) v = __fadd_rn(v, 0.0f);
        return v;
    }
}

// The narrow-row lanes for a row of C elements read V at a time by RT
// threads: 8, 16 or 32 when the row's vectors fit in fewer lanes than RT
// (RT 32 or 256), else RT (no stand-ins).
inline int krow_narrow_lanes(int64_t C, int V, int rt)
{
    const int64_t vectors = (C + V - 1) / V;
    if (rt < 32 || vectors > 32 || vectors >= rt) return rt;
    return vectors <= 8 ? 8 : vectors <= 16 ? 16 : 32;
}

// Threads of a block that runs one row of C elements (RT > 32 and more than
// 32 vectors): the warps that hold terms, at most RT.
inline int krow_block_threads(int64_t C, int V, int rt)
{
    const int64_t vectors = (C + V - 1) / V, warps = (vectors + 31) / 32;
    return warps * 32 < rt ? (int)(warps * 32) : rt;
}

// Calls launch(std::integral_constant<int, G>{}, grid, block) with the row
// groups for N rows of C elements read V at a time by RT threads: narrow rows
// G lanes each (blockDim / G rows a block), else a block per row (RT > 32,
// only the warps holding terms), eight warps a block (RT 32), or 128 rows a
// block (RT 1).
template <int RT, class F> inline void krow_dispatch(int64_t N, int64_t C, int V, F &&launch)
{
    if constexpr (RT >= 32) {
        const int lanes = krow_narrow_lanes(C, V, RT);
        const auto grid = [N](int g) { return dim3((unsigned)((N + 256 / g - 1) / (256 / g))); };
        if (lanes == 8) return launch(std::integral_constant<int, 8>{}, grid(8), dim3(256));
        if (lanes == 16) return launch(std::integral_constant<int, 16>{}, grid(16), dim3(256));
        if (RT > 32 && lanes == 32) return launch(std::integral_constant<int, 32>{}, grid(32), dim3(256));
    }
    if (RT > 32) launch(std::integral_constant<int, RT>{}, dim3((unsigned)N), dim3(krow_block_threads(C, V, RT)));
    else if (RT == 32) launch(std::integral_constant<int, RT>{}, dim3((unsigned)((N + 7) / 8)), dim3(256));
    else launch(std::integral_constant<int, RT>{}, dim3((unsigned)((N + 127) / 128)), dim3(128));
}

// Elements per vector access for storage type T when a row of C elements
// allows it (C a multiple of the vector, rows 16-byte aligned with it).
template <typename T> __host__ __device__ constexpr int kvec_width() { return 16 / (int)sizeof(T); }
template <typename T> __host__ __device__ inline int krow_vec(int64_t C)
{
    return C % kvec_width<T>() == 0 ? kvec_width<T>() : 1;
}

// The same for a storage format chosen at run time (host side).
inline int krow_vec_of(int64_t C, prec_format f)
{
    int w = 16 / (int)kformat_bytes(f);
    return C % w == 0 ? w : 1;
}

// krow_depth: the longest chain of roundings in a row of C elements of format
// f reduced by RT threads (the partition above): a thread's v * ceil(C / (RT v))
// terms (at most C), each rounded into its zero-initialised partial, plus the
// levels of the tree over the threads that hold any.
inline int64_t krow_depth(int64_t C, prec_format f, int rt)
{
    int v = krow_vec_of(C, f);
    int64_t span = (int64_t)rt * v, per_thread = (int64_t)v * ((C + span - 1) / span);
    if (per_thread > C) per_thread = C;
    int64_t groups = (C + v - 1) / v, active = groups < rt ? groups : rt;
    int levels = 0;
    while ((1ll << levels) < active) levels++;
    return per_thread + levels;
}

// Loads V consecutive elements as floats (one 16-byte access when V > 1).
template <typename T, int V> struct kvec_io {
    static __device__ __forceinline__ void load(const T *p, float *out)
    {
        if constexpr (V == 1) {
            out[0] = kto_float(p[0]);
        } else {
            alignas(16) T e[V];
            *reinterpret_cast<uint4 *>(e) = *reinterpret_cast<const uint4 *>(p);
#pragma unroll
            for (int j = 0; j < V; j++) out[j] = kto_float(e[j]);
        }
    }
    static __device__ __forceinline__ void store(T *p, const float *in, int bug)
    {
        if constexpr (V == 1) {
            p[0] = kfrom_float<T>(in[0], bug);
        } else {
            alignas(16) T e[V];
#pragma unroll
            for (int j = 0; j < V; j++) e[j] = kfrom_float<T>(in[j], bug);
            *reinterpret_cast<uint4 *>(p) = *reinterpret_cast<const uint4 *>(e);
        }
    }
};

#endif
