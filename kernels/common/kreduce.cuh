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
// with blockDim.x == RT), one warp (RT == 32) or one thread (RT == 1).  row is
// the row this thread works on, t its index among the row's threads.
template <int RT> struct krow_group {
    int64_t row;
    int t;
    __device__ krow_group()
    {
        if (RT > 32) {
            row = blockIdx.x;
            t = threadIdx.x;
        } else if (RT == 32) {
            row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
            t = threadIdx.x & 31;
        } else {
            row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
            t = 0;
        }
    }
};

// Sum over a row's RT threads (kblock_sum, kwarp_sum, or the value itself).
template <int RT> __device__ __forceinline__ float krow_group_sum(float v, float *scratch)
{
    if constexpr (RT > 32) return kblock_sum(v, scratch);
    else if constexpr (RT == 32) return kwarp_sum(v);
    else return v;
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
