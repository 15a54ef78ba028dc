// kernels/common/runtime.cu — paths, tensors, error reporting, the current stream and device
// discovery.
#include <cuda_runtime.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <strings.h>

#include "kernels/kernels.h"

static thread_local char last_error[1024];

extern "C" const char *kernels_last_error(void) { return last_error; }

extern "C" int kernels_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return -1;
}

static cudaStream_t current_stream = nullptr;

extern "C" void kernels_set_stream(void *cuda_stream) { current_stream = (cudaStream_t)cuda_stream; }
extern "C" void *kernels_stream(void) { return (void *)current_stream; }

static unsigned long long free_count;
extern "C" unsigned long long kernels_free_count(void) { return free_count; }
extern "C" void kernels_note_free(void) { free_count++; }

static kbug planted_bug = KBUG_NONE;

extern "C" void kernels_set_planted_bug(kbug bug) { planted_bug = bug; }
extern "C" kbug kernels_planted_bug(void) { return planted_bug; }
extern "C" const char *kbug_name(kbug bug)
{
    static const char *const names[KBUG_COUNT] = {"none", "drop-term", "truncate-output"};
    return (unsigned)bug < KBUG_COUNT ? names[bug] : "?";
}

static const char *const path_names[KPATH_COUNT] = {"fp32", "bf16", "fp16", "fp8"};

extern "C" const char *kpath_name(kpath p) { return (unsigned)p < KPATH_COUNT ? path_names[p] : "?"; }
extern "C" const char *kpath_names(void) { return "fp32, bf16, fp16, fp8"; }

extern "C" int kpath_parse(const char *name, kpath *out)
{
    for (int p = 0; p < KPATH_COUNT; p++) {
        if (name && strcasecmp(name, path_names[p]) == 0) {
            *out = (kpath)p;
            return 0;
        }
    }
    return -1;
}

extern "C" int64_t ktensor_numel(const ktensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

extern "C" size_t kformat_bytes(prec_format f)
{
    switch (f) {
    case PREC_FP64: return 8;
    case PREC_FP32: case PREC_TF32: return 4;
    case PREC_BF16: case PREC_FP16: return 2;
    case PREC_E4M3: case PREC_E5M2: return 1;
    default: return 0;
    }
}

extern "C" int kernels_gpu_available(char *why, size_t why_len)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        if (why) snprintf(why, why_len, "no usable CUDA device: %s", cudaGetErrorString(err));
        cudaGetLastError(); // clear the sticky-free error so later probes start clean
        return 0;
    }
    if (count == 0) {
        if (why) snprintf(why, why_len, "no CUDA device found");
        return 0;
    }
    if (why && why_len) why[0] = '\0';
    return 1;
}
