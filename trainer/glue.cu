// trainer/glue.cu — see glue.h.  Grid-stride elementwise kernels.
#include <cuda_runtime.h>

#include "kernels/kelem.cuh"
#include "trainer/glue.h"

#define GLUE_THREADS 256

static int launch_check(const char *what, int64_t n)
{
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return kernels_fail("%s (n=%lld): launch failed: %s", what, (long long)n, cudaGetErrorString(err));
    return 0;
}

static unsigned blocks_for(int64_t n)
{
    int64_t b = (n + GLUE_THREADS - 1) / GLUE_THREADS;
    return (unsigned)(b > 65535 * 8 ? 65535 * 8 : (b < 1 ? 1 : b));
}

template <typename D, typename S>
__global__ void cast_kernel(D *dst, const S *src, const float *src_scale, int64_t n)
{
    float sc = kscale_of(src_scale);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = kfrom_float<D>(kload_scaled(src, i, sc), KBUG_NONE);
}

template <typename D, typename S>
__global__ void add_kernel(D *dst, const S *src, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = kfrom_float<D>(__fadd_rn(kto_float(dst[i]), kto_float(src[i])), KBUG_NONE);
}

template <typename T>
__global__ void nonfinite_kernel(const T *x, int64_t n, unsigned long long *count)
{
    unsigned long long c = 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        c += !isfinite(kto_float(x[i]));
    if (c) atomicAdd(count, c);
}

// Dispatch a storage format to its type (fp32, bf16, fp16, e4m3, e5m2).
#define FORMAT_DISPATCH(fmt, T, ...)                                            \
    switch (fmt) {                                                              \
    case PREC_FP32: { using T = float; __VA_ARGS__; } break;                    \
    case PREC_BF16: { using T = __nv_bfloat16; __VA_ARGS__; } break;            \
    case PREC_FP16: { using T = __half; __VA_ARGS__; } break;                   \
    case PREC_E4M3: { using T = __nv_fp8_e4m3; __VA_ARGS__; } break;            \
    case PREC_E5M2: { using T = __nv_fp8_e5m2; __VA_ARGS__; } break;            \
    default: return kernels_fail("trainer glue: unsupported format %s", prec_format_name(fmt)); \
    }

static int plain(prec_format f) { return f == PREC_FP32 || f == PREC_BF16 || f == PREC_FP16; }

extern "C" int tglue_cast(void *dst, prec_format dst_format, const void *src, prec_format src_format,
                          const float *src_scale, int64_t n)
{
    if (!plain(dst_format)) return kernels_fail("tglue_cast: destination format %s (fp32, bf16, fp16)", prec_format_name(dst_format));
    FORMAT_DISPATCH(dst_format, D, FORMAT_DISPATCH(src_format, S, {
        cast_kernel<D, S><<<blocks_for(n), GLUE_THREADS>>>((D *)dst, (const S *)src, src_scale, n);
    }));
    return launch_check("tglue_cast", n);
}

extern "C" int tglue_add(void *dst, prec_format dst_format, const void *src, prec_format src_format, int64_t n)
{
    if (!plain(dst_format) || !plain(src_format))
        return kernels_fail("tglue_add: formats %s += %s (fp32, bf16, fp16)", prec_format_name(dst_format),
                            prec_format_name(src_format));
    FORMAT_DISPATCH(dst_format, D, FORMAT_DISPATCH(src_format, S, {
        add_kernel<D, S><<<blocks_for(n), GLUE_THREADS>>>((D *)dst, (const S *)src, n);
    }));
    return launch_check("tglue_add", n);
}

extern "C" int tglue_count_nonfinite(const void *x, prec_format format, int64_t n, int64_t *count)
{
    unsigned long long *d = nullptr, h = 0;
    cudaError_t err = cudaMalloc(&d, sizeof *d);
    if (err != cudaSuccess) return kernels_fail("tglue_count_nonfinite: cudaMalloc: %s", cudaGetErrorString(err));
    cudaMemset(d, 0, sizeof *d);
    int rc = 0;
    switch (format) {
    case PREC_FP32: nonfinite_kernel<<<blocks_for(n), GLUE_THREADS>>>((const float *)x, n, d); break;
    case PREC_BF16: nonfinite_kernel<<<blocks_for(n), GLUE_THREADS>>>((const __nv_bfloat16 *)x, n, d); break;
    case PREC_FP16: nonfinite_kernel<<<blocks_for(n), GLUE_THREADS>>>((const __half *)x, n, d); break;
    case PREC_E4M3: nonfinite_kernel<<<blocks_for(n), GLUE_THREADS>>>((const __nv_fp8_e4m3 *)x, n, d); break;
    case PREC_E5M2: nonfinite_kernel<<<blocks_for(n), GLUE_THREADS>>>((const __nv_fp8_e5m2 *)x, n, d); break;
    default: rc = kernels_fail("tglue_count_nonfinite: format %s", prec_format_name(format));
    }
    if (!rc) rc = launch_check("tglue_count_nonfinite", n);
    if (!rc && (err = cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost)) != cudaSuccess)
        rc = kernels_fail("tglue_count_nonfinite: cudaMemcpy: %s", cudaGetErrorString(err));
    cudaFree(d);
    *count = (int64_t)h;
    return rc;
}
