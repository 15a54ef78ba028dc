// kernels/kexp.cuh — the exponential variants softmax and log-sum-exp share
// (device code).  Each computes exp(x - m) for a row maximum m:
//   KEXP_EXP       expf(x - m)                       (2 ulps)
//   KEXP_EXP2      exp2f(x * L - m * L), L = log2(e) rounded to fp32, the
//                  product m * L rounded once and x * L - (m L) in one fma:
//                  one exp2 instruction, but the argument's rounding error
//                  grows with |x| rather than with |x - m|
//   KEXP_FAST_EXP  __expf(x - m), the fast-math intrinsic (2 + floor(|1.173 d|) ulps)
// Error figures: CUDA C++ Programming Guide, "Mathematical Functions" and
// "Intrinsic Functions" tables.
#ifndef ULPSCOPE_KERNELS_KEXP_CUH
#define ULPSCOPE_KERNELS_KEXP_CUH

enum { KEXP_EXP = 0, KEXP_EXP2 = 1, KEXP_FAST_EXP = 2 };

constexpr float kLog2e = 1.44269504088896340736f;

template <int E> __device__ __forceinline__ float kexp_shifted(float x, float m, float m_log2e)
{
    if constexpr (E == KEXP_EXP2) return exp2f(fmaf(x, kLog2e, -m_log2e));
    else if constexpr (E == KEXP_FAST_EXP) return __expf(x - m);
    else return expf(x - m);
}

#endif
