// kernels/common/ktensor_io.cu — device memory for host C code (see ktensor_io.h).
// Encoding and decoding run on the host through precision/format.h, so the
// bits on the device are exactly the values the reference is given.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/common/kelem.cuh"
#include "kernels/common/klaunch.cuh"
#include "kernels/common/ktensor_io.h"

static int cuda_fail(const char *what, const char *call, cudaError_t err)
{
    return kernels_fail("%s: %s failed: %s", what, call, cudaGetErrorString(err));
}

extern "C" size_t ktensor_bytes(const ktensor *t)
{
    return (size_t)ktensor_numel(t) * kformat_bytes(t->format);
}

extern "C" int kdevice_alloc(void **ptr, size_t bytes, const char *what)
{
    *ptr = nullptr;
    cudaError_t err = cudaMalloc(ptr, bytes ? bytes : 1);
    if (err != cudaSuccess) {
        *ptr = nullptr;
        return kernels_fail("%s: cudaMalloc(%zu bytes) failed: %s", what, bytes, cudaGetErrorString(err));
    }
    return 0;
}

extern "C" void kdevice_free(void *ptr)
{
    if (!ptr) return;
    kernels_note_free();
    cudaFree(ptr); // freeing is not checked: nothing useful to do on failure
}

// Uploads from pageable host memory are staged before cudaMemcpyAsync
// returns, so src may be reused at once; the copy is ordered on the stream.
extern "C" int kdevice_upload(void *dst, const void *src, size_t bytes, const char *what)
{
    cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, kstream());
    return err == cudaSuccess ? 0 : cuda_fail(what, "cudaMemcpyAsync(host to device)", err);
}

extern "C" int kdevice_download(void *dst, const void *src, size_t bytes, const char *what)
{
    cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, kstream());
    if (err != cudaSuccess) return cuda_fail(what, "cudaMemcpyAsync(device to host)", err);
    err = cudaStreamSynchronize(kstream());
    return err == cudaSuccess ? 0 : cuda_fail(what, "cudaStreamSynchronize after the download", err);
}

extern "C" int kdevice_fill_bytes(void *dst, int byte, size_t bytes, const char *what)
{
    cudaError_t err = cudaMemsetAsync(dst, byte, bytes, kstream());
    return err == cudaSuccess ? 0 : cuda_fail(what, "cudaMemsetAsync", err);
}

extern "C" int kernels_sync(const char *what)
{
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return cuda_fail(what, "kernel launch", err);
    err = cudaDeviceSynchronize();
    return err == cudaSuccess ? 0 : cuda_fail(what, "cudaDeviceSynchronize", err);
}

static int is_fp8(prec_format f) { return f == PREC_E4M3 || f == PREC_E5M2; }

extern "C" int ktensor_alloc(ktensor *t, prec_format f, int ndim, const int64_t *shape)
{
    memset(t, 0, sizeof *t);
    if (ndim < 1 || ndim > KTENSOR_MAX_DIMS || kformat_bytes(f) == 0)
        return kernels_fail("ktensor_alloc: bad tensor (ndim %d, format %s)", ndim, prec_format_name(f));
    t->format = f;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 0) return kernels_fail("ktensor_alloc: dimension %d is %lld", i, (long long)shape[i]);
        t->shape[i] = shape[i];
    }
    if (kdevice_alloc(&t->data, ktensor_bytes(t), "ktensor_alloc") != 0) {
        memset(t, 0, sizeof *t);
        return -1;
    }
    if (is_fp8(f)) {
        void *s = nullptr;
        if (kdevice_alloc(&s, sizeof(float), "ktensor_alloc(scale)") != 0 ||
            (t->scale = (float *)s, ktensor_set_scale(t, 1.0f)) != 0) {
            ktensor_free(t);
            return -1;
        }
    }
    return ktensor_poison(t);
}

extern "C" void ktensor_free(ktensor *t)
{
    kdevice_free(t->data);
    kdevice_free(t->scale);
    memset(t, 0, sizeof *t);
}

extern "C" int ktensor_upload(ktensor *t, const double *values)
{
    size_t n = (size_t)ktensor_numel(t), w = kformat_bytes(t->format);
    unsigned char *buf = (unsigned char *)malloc(n * w > 0 ? n * w : 1);
    if (!buf) return kernels_fail("ktensor_upload: out of host memory (%zu bytes)", n * w);
    for (size_t i = 0; i < n; i++) {
        uint64_t bits = prec_encode(prec_rne(values[i], t->format), t->format);
        memcpy(buf + i * w, &bits, w); // little-endian: the low bytes hold the pattern
    }
    int rc = kdevice_upload(t->data, buf, n * w, "ktensor_upload");
    free(buf);
    return rc;
}

extern "C" int ktensor_download(const ktensor *t, double *values)
{
    size_t n = (size_t)ktensor_numel(t), w = kformat_bytes(t->format);
    unsigned char *buf = (unsigned char *)malloc(n * w > 0 ? n * w : 1);
    if (!buf) return kernels_fail("ktensor_download: out of host memory (%zu bytes)", n * w);
    int rc = kdevice_download(buf, t->data, n * w, "ktensor_download");
    if (rc == 0) {
        for (size_t i = 0; i < n; i++) {
            uint64_t bits = 0;
            memcpy(&bits, buf + i * w, w);
            values[i] = prec_decode(bits, t->format);
        }
    }
    free(buf);
    return rc;
}

extern "C" int ktensor_poison(ktensor *t)
{
    return kdevice_fill_bytes(t->data, 0xFF, ktensor_bytes(t), "ktensor_poison");
}

extern "C" int ktensor_set_scale(ktensor *t, float scale)
{
    if (!t->scale) return kernels_fail("ktensor_set_scale: %s tensor has no scale", prec_format_name(t->format));
    return kdevice_upload(t->scale, &scale, sizeof scale, "ktensor_set_scale");
}

extern "C" int ktensor_get_scale(const ktensor *t, float *scale)
{
    if (!t->scale) {
        *scale = 1.0f;
        return 0;
    }
    return kdevice_download(scale, t->scale, sizeof *scale, "ktensor_get_scale");
}

extern "C" int kdevice_describe(kdevice_props *props)
{
    memset(props, 0, sizeof *props);
    int dev = 0;
    cudaError_t err = cudaGetDevice(&dev);
    cudaDeviceProp p;
    if (err == cudaSuccess) err = cudaGetDeviceProperties(&p, dev);
    if (err == cudaSuccess) err = cudaDriverGetVersion(&props->driver_version);
    if (err == cudaSuccess) err = cudaRuntimeGetVersion(&props->runtime_version);
    if (err != cudaSuccess) return cuda_fail("kdevice_describe", "cudaGetDeviceProperties", err);
    snprintf(props->name, sizeof props->name, "%s", p.name);
    props->cc_major = p.major;
    props->cc_minor = p.minor;
    props->multiprocessors = p.multiProcessorCount;
    props->memory_bytes = p.totalGlobalMem;
    err = cudaDeviceGetAttribute(&props->max_clock_khz, cudaDevAttrClockRate, dev);
    if (err != cudaSuccess) return cuda_fail("kdevice_describe", "cudaDeviceGetAttribute(ClockRate)", err);
    return 0;
}

extern "C" int kdevice_copy(void *dst, const void *src, size_t bytes, const char *what)
{
    cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, kstream());
    return err == cudaSuccess ? 0 : cuda_fail(what, "cudaMemcpyAsync(device to device)", err);
}

struct ktimer {
    cudaEvent_t start, stop;
};

extern "C" int ktimer_create(ktimer **t)
{
    *t = (ktimer *)calloc(1, sizeof(ktimer));
    if (!*t) return kernels_fail("ktimer_create: out of host memory");
    cudaError_t err = cudaEventCreate(&(*t)->start);
    if (err == cudaSuccess) err = cudaEventCreate(&(*t)->stop);
    if (err != cudaSuccess) {
        free(*t);
        *t = nullptr;
        return cuda_fail("ktimer_create", "cudaEventCreate", err);
    }
    return 0;
}

extern "C" void ktimer_destroy(ktimer *t)
{
    if (!t) return;
    cudaEventDestroy(t->start);
    cudaEventDestroy(t->stop);
    free(t);
}

extern "C" int ktimer_start(ktimer *t)
{
    cudaError_t err = cudaEventRecord(t->start, kstream());
    return err == cudaSuccess ? 0 : cuda_fail("ktimer_start", "cudaEventRecord", err);
}

extern "C" int ktimer_stop(ktimer *t, float *ms)
{
    cudaError_t err = cudaEventRecord(t->stop, kstream());
    if (err == cudaSuccess) err = cudaEventSynchronize(t->stop);
    if (err == cudaSuccess) err = cudaGetLastError();
    if (err == cudaSuccess) err = cudaEventElapsedTime(ms, t->start, t->stop);
    return err == cudaSuccess ? 0 : cuda_fail("ktimer_stop", "cudaEventElapsedTime", err);
}

namespace {

__device__ __forceinline__ float hash_uniform(uint64_t seed, int64_t i)
{
    uint64_t z = seed + 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (float)(z >> 40) * 0x1p-24f;
}

template <typename T> __global__ void fill_uniform_kernel(T *p, int64_t n, uint64_t seed, float lo, float hi)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        p[i] = kfrom_float<T>(lo + (hi - lo) * hash_uniform(seed, i), 0);
}

} // namespace

extern "C" int ktensor_fill_uniform(ktensor *t, uint64_t seed, float lo, float hi)
{
    int64_t n = ktensor_numel(t);
    unsigned blocks = (unsigned)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
    switch (t->format) {
    case PREC_FP32: fill_uniform_kernel<float><<<blocks, 256, 0, kstream()>>>((float *)t->data, n, seed, lo, hi); break;
    case PREC_BF16: fill_uniform_kernel<__nv_bfloat16><<<blocks, 256, 0, kstream()>>>((__nv_bfloat16 *)t->data, n, seed, lo, hi); break;
    case PREC_FP16: fill_uniform_kernel<__half><<<blocks, 256, 0, kstream()>>>((__half *)t->data, n, seed, lo, hi); break;
    case PREC_E4M3: fill_uniform_kernel<__nv_fp8_e4m3><<<blocks, 256, 0, kstream()>>>((__nv_fp8_e4m3 *)t->data, n, seed, lo, hi); break;
    case PREC_E5M2: fill_uniform_kernel<__nv_fp8_e5m2><<<blocks, 256, 0, kstream()>>>((__nv_fp8_e5m2 *)t->data, n, seed, lo, hi); break;
    default: return kernels_fail("ktensor_fill_uniform: no %s fill", prec_format_name(t->format));
    }
    return kernels_sync("ktensor_fill_uniform");
}
