// kernels/common/kexp.cuh — the exponential variants softmax and log-sum-exp share
// (device code).  Each computes exp(x - m) for a row maximum m:
//   KEXP_EXP       expf(x - m)                       (2 ulps)
//   KEXP_EXP2      exp2f(x * L - m * L), L = log2(e) rounded to fp32, the
//                  product m * L rounded once and x * L - (m L) in one fma:
//                  one exp2 instruction, but the argument's rounding error
//                  grows with |x| rather than with |x - m|
//   KEXP_FAST_EXP  __expf(x - m), the fast-math intrinsic (2 + floor(|1.173 d|) ulps)
// Error figures: CUDA C++ Programming Guide, "Mathematical Functions" and
// "Intrinsic Functions" tables.
#ifndef ULPSCOPE_KERNELS_COMMON_KEXP_CUH
#define ULPSCOPE_KERNELS_COMMON_KEXP_CUH

#include <cstdint>

#include "kernels/common/kreduce.cuh"

enum { KEXP_EXP = 0, KEXP_EXP2 = 1, KEXP_FAST_EXP = 2 };

constexpr float kLog2e = 1.44269504088896340736f;

template <int E> __device__ __forceinline__ float kexp_shifted(float x, float m, float m_log2e)
{
    if constexpr (E == KEXP_EXP2) return exp2f(fmaf(x, kLog2e, -m_log2e));
    else if constexpr (E == KEXP_FAST_EXP) return __expf(x - m);
    else return expf(x - m);
}

// The row statistics softmax and log-sum-exp share: the row maximum m, its
// KEXP_EXP2 shift m * kLog2e, and s = sum of exp(x - m) over the row.
struct krow_exp_sum {
    float m, m_log2e, s;
};

// Two sweeps over a row xr of C elements by a block of BLOCK threads
// (kreduce.cuh's partition, V elements per access): the maximum, then the sum
// of exps; every thread receives the result.  scratch: 32 floats of shared
// memory.  Planted bug KBUG_DROP_TERM leaves the last element out of the sum.
template <int BLOCK, typename T, int V, int E>
__device__ __forceinline__ krow_exp_sum kblock_row_exp_sum(const T *xr, int64_t C, int bug, float *scratch)
{
    float m = -INFINITY;
    for (int64_t base = (int64_t)threadIdx.x * V; base < C; base += (int64_t)BLOCK * V) {
        float v[V];
        kvec_io<T, V>::load(xr + base, v);
#pragma unroll
        for (int j = 0; j < V; j++) m = fmaxf(m, v[j]);
    }
    m = kblock_max(m, scratch);
    const float m_log2e = m * kLog2e;
    float s = 0.0f;
    for (int64_t base = (int64_t)threadIdx.x * V; base < C; base += (int64_t)BLOCK * V) {
        float v[V];
        kvec_io<T, V>::load(xr + base, v);
#pragma unroll
        for (int j = 0; j < V; j++)
            if (!(bug == KBUG_DROP_TERM && base + j == C - 1)) s += kexp_shifted<E>(v[j], m, m_log2e);
    }
    s = kblock_sum(s, scratch);
    return krow_exp_sum{m, m_log2e, s};
}

#endif
