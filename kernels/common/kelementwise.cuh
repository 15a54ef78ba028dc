// kernels/common/kelementwise.cuh — the flat elementwise launch the activations and
// residual add share (device code, C++).  Each thread owns V consecutive
// elements (16-byte accesses for the widest type when n allows), a grid-
// stride loop covers any n, and the last n % V elements take a scalar tail.
// Planted bugs: KBUG_DROP_TERM leaves the last element unwritten;
// KBUG_TRUNCATE_OUTPUT rounds the stores toward zero (kelem.cuh).
#ifndef ULPSCOPE_KERNELS_COMMON_KELEMENTWISE_CUH
#define ULPSCOPE_KERNELS_COMMON_KELEMENTWISE_CUH

#include <cuda_runtime.h>

#include "kernels/common/kelem.cuh"
#include "kernels/common/ktensor_io.h"

constexpr int kElemBlock = 256;

// Blocks for n elements at V per thread: enough to fill the GPU a few times,
// the grid-stride loop does the rest.
inline unsigned kelem_blocks(int64_t n, int V)
{
    int64_t threads = (n + V - 1) / V, blocks = (threads + kElemBlock - 1) / kElemBlock;
    const int64_t cap = 132 * 32; // a few waves on an H100; larger n loops
    return (unsigned)(blocks < 1 ? 1 : blocks > cap ? cap : blocks);
}

// Loads V elements of p starting at i (i a multiple of V; all in range).
template <typename T, int V> __device__ __forceinline__ void kelem_load(const T *p, int64_t i, float *out)
{
    if constexpr (V * sizeof(T) == 16) {
        alignas(16) T e[V];
        *reinterpret_cast<uint4 *>(e) = *reinterpret_cast<const uint4 *>(p + i);
#pragma unroll
        for (int j = 0; j < V; j++) out[j] = kto_float(e[j]);
    } else {
#pragma unroll
        for (int j = 0; j < V; j++) out[j] = kto_float(p[i + j]);
    }
}

template <typename T, int V> __device__ __forceinline__ void kelem_store(T *p, int64_t i, const float *in, int bug)
{
    if constexpr (V * sizeof(T) == 16) {
        alignas(16) T e[V];
#pragma unroll
        for (int j = 0; j < V; j++) e[j] = kfrom_float<T>(in[j], bug);
        *reinterpret_cast<uint4 *>(p + i) = *reinterpret_cast<const uint4 *>(e);
    } else {
#pragma unroll
        for (int j = 0; j < V; j++) p[i + j] = kfrom_float<T>(in[j], bug);
    }
}

// The element count all tensors of an elementwise op must share.
inline int kelem_same_size(const char *op, const ktensor *a, const ktensor *b, int64_t *n)
{
    if (!a || !a->data) return kernels_fail("%s: a tensor is missing", op);
    if (b && (!b->data || ktensor_numel(a) != ktensor_numel(b)))
        return kernels_fail("%s: tensors differ in size (%lld vs %lld elements)", op, (long long)ktensor_numel(a),
                            b && b->data ? (long long)ktensor_numel(b) : -1ll);
    *n = ktensor_numel(a);
    return 0;
}

inline int kelem_launched(const char *op, int64_t n)
{
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return kernels_fail("%s (n=%lld): launch failed: %s", op, (long long)n, cudaGetErrorString(err));
    return 0;
}

#endif

// Scaled variants for fp8 tensors (real = stored * scale; other formats
// ignore the scale), and a store that honours KBUG_DROP_TERM by leaving the
// tensor's last element (index n - 1) unwritten.
template <typename T, int V>
__device__ __forceinline__ void kelem_load_scaled(const T *p, int64_t i, float scale, float *out)
{
    kelem_load<T, V>(p, i, out);
    if constexpr (kis_fp8<T>::value) {
#pragma unroll
        for (int j = 0; j < V; j++) out[j] *= scale;
    }
}

template <typename T, int V>
__device__ __forceinline__ void kelem_store_scaled(T *p, int64_t i, float *vals, float scale, int64_t n, int bug)
{
    if constexpr (kis_fp8<T>::value) {
#pragma unroll
        for (int j = 0; j < V; j++) vals[j] = __fdiv_rn(vals[j], scale);
    }
    if (bug == KBUG_DROP_TERM && i + V == n) {
        for (int j = 0; j < V - 1; j++) p[i + j] = kfrom_float<T>(vals[j], bug);
        return;
    }
    kelem_store<T, V>(p, i, vals, bug);
}

// Runs vec(i) for each full vector of V elements starting at i (grid-stride)
// and tail(i) for each of the last n % V elements.
template <int V, class VecBody, class TailBody>
__device__ __forceinline__ void kelem_loop(int64_t n, VecBody vec, TailBody tail)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x * V;
    for (int64_t i0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * V; i0 < n; i0 += stride) {
        if (i0 + V <= n) vec(i0);
        else
            for (int64_t i = i0; i < n; i++) tail(i);
    }
}
