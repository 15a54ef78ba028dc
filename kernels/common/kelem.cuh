// kernels/common/kelem.cuh — element conversions every kernel shares (device code,
// C++): load any storage format as fp32, store fp32 into it rounding to
// nearest even, or, under the planted bug KBUG_TRUNCATE_OUTPUT, toward zero
// (fp32 outputs: toward zero at bf16 precision, see kernels/check/check.h).
//
// fp8 values are stored divided by the tensor's scale (real = stored * scale);
// kstore_scaled divides once (__fdiv_rn) so the only extra error is one
// fp32 rounding before the fp8 one.  Conversions to fp8 saturate to the
// largest finite value, as delayed-scaling recipes do.
#ifndef ULPSCOPE_KERNELS_COMMON_KELEM_CUH
#define ULPSCOPE_KERNELS_COMMON_KELEM_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "kernels/kernels.h"

__device__ __forceinline__ float kto_float(float x) { return x; }
__device__ __forceinline__ float kto_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float kto_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float kto_float(__nv_fp8_e4m3 x) { return float(x); }
__device__ __forceinline__ float kto_float(__nv_fp8_e5m2 x) { return float(x); }

template <typename T> struct kstore_traits;

template <> struct kstore_traits<float> {
    static __device__ __forceinline__ float from(float x, int bug)
    {
        return bug == KBUG_TRUNCATE_OUTPUT ? __uint_as_float(__float_as_uint(x) & 0xFFFF0000u) : x;
    }
};
template <> struct kstore_traits<__nv_bfloat16> {
    static __device__ __forceinline__ __nv_bfloat16 from(float x, int bug)
    {
        return bug == KBUG_TRUNCATE_OUTPUT ? __float2bfloat16_rz(x) : __float2bfloat16_rn(x);
    }
};
template <> struct kstore_traits<__half> {
    static __device__ __forceinline__ __half from(float x, int bug)
    {
        return bug == KBUG_TRUNCATE_OUTPUT ? __float2half_rz(x) : __float2half_rn(x);
    }
};

// fp8: round to nearest even with saturation; toward zero by stepping the
// magnitude down one code when the nearest value lies farther from zero.
__device__ __forceinline__ __nv_fp8_storage_t kfp8_from_float(float x, __nv_fp8_interpretation_t kind, int bug)
{
    __nv_fp8_storage_t bits = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, kind);
    if (bug == KBUG_TRUNCATE_OUTPUT) {
        float back = __half2float(__half(__nv_cvt_fp8_to_halfraw(bits, kind)));
        if (fabsf(back) > fabsf(x) && (bits & 0x7F) != 0) bits = (__nv_fp8_storage_t)(bits - 1);
    }
    return bits;
}
template <> struct kstore_traits<__nv_fp8_e4m3> {
    static __device__ __forceinline__ __nv_fp8_e4m3 from(float x, int bug)
    {
        __nv_fp8_e4m3 r;
        r.__x = kfp8_from_float(x, __NV_E4M3, bug);
        return r;
    }
};
template <> struct kstore_traits<__nv_fp8_e5m2> {
    static __device__ __forceinline__ __nv_fp8_e5m2 from(float x, int bug)
    {
        __nv_fp8_e5m2 r;
        r.__x = kfp8_from_float(x, __NV_E5M2, bug);
        return r;
    }
};

template <typename T> __device__ __forceinline__ T kfrom_float(float x, int bug)
{
    return kstore_traits<T>::from(x, bug);
}

template <typename T> struct kis_fp8 { static constexpr bool value = false; };
template <> struct kis_fp8<__nv_fp8_e4m3> { static constexpr bool value = true; };
template <> struct kis_fp8<__nv_fp8_e5m2> { static constexpr bool value = true; };

// Scaled access: real = stored * scale for fp8, the plain value otherwise
// (scale pointers of non-fp8 tensors are ignored and may be null).
template <typename T> __device__ __forceinline__ float kload_scaled(const T *p, int64_t i, float scale)
{
    if constexpr (kis_fp8<T>::value) return kto_float(p[i]) * scale;
    else return kto_float(p[i]);
}
template <typename T> __device__ __forceinline__ void kstore_scaled(T *p, int64_t i, float x, float scale, int bug)
{
    if constexpr (kis_fp8<T>::value) p[i] = kfrom_float<T>(__fdiv_rn(x, scale), bug);
    else p[i] = kfrom_float<T>(x, bug);
}
// The scale a launcher passes by value: *t->scale is a device float, read by
// the kernel itself so the host never synchronises on it.
__device__ __forceinline__ float kscale_of(const float *scale) { return scale ? *scale : 1.0f; }

// Dispatch a path to its storage type: KPATH_DISPATCH(path, T, { body using T })
// with fp8 mapping to e4m3 (ops whose fp8 gradients use e5m2 dispatch those
// tensors themselves).
#define KPATH_DISPATCH(path, T, ...)                                       \
    switch (path) {                                                        \
    case KPATH_FP32: { using T = float; __VA_ARGS__; } break;              \
    case KPATH_BF16: { using T = __nv_bfloat16; __VA_ARGS__; } break;      \
    case KPATH_FP16: { using T = __half; __VA_ARGS__; } break;             \
    case KPATH_FP8: { using T = __nv_fp8_e4m3; __VA_ARGS__; } break;       \
    default: break;                                                        \
    }

#endif
