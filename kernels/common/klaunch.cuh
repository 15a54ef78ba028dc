// kernels/common/klaunch.cuh — the host-side launch helpers the op files share (C++):
// the current stream, lazily grown workspaces, launch checks.
// A kernel launch reports a bad configuration only through
// cudaGetLastError(); each launcher calls one of these right after its
// launches, so the error names the op and the shape that failed.
#ifndef ULPSCOPE_KERNELS_COMMON_KLAUNCH_CUH
#define ULPSCOPE_KERNELS_COMMON_KLAUNCH_CUH

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/kernels.h"

// The stream of kernels_set_stream(): every launch and library call of the
// op files goes there.
inline cudaStream_t kstream() { return (cudaStream_t)kernels_stream(); }

// Grows a lazily allocated workspace *p of *have bytes to at least want bytes
// (never shrinks; the old contents are not kept).  Growing frees and
// allocates, which synchronises the device and cannot be captured into a CUDA
// graph: while the current stream is capturing, a workspace too small is an
// error naming both sizes (make the same calls once before capturing).
inline int kworkspace_grow(const char *ctx, void **p, size_t *have, size_t want)
{
    if (want <= *have) return 0;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing(kstream(), &capture);
    if (e != cudaSuccess) return kernels_fail("%s: cudaStreamIsCapturing failed: %s", ctx, cudaGetErrorString(e));
    if (capture != cudaStreamCaptureStatusNone)
        return kernels_fail("%s: a workspace must grow from %zu to %zu bytes while the stream is captured into a CUDA "
                            "graph; make the same calls once before capturing (a warm-up)", ctx, *have, want);
    if (*p) {
        kernels_note_free();
        e = cudaFree(*p);
        if (e != cudaSuccess) return kernels_fail("%s: cudaFree failed: %s", ctx, cudaGetErrorString(e));
    }
    *p = nullptr;
    *have = 0;
    e = cudaMalloc(p, want);
    if (e != cudaSuccess) {
        *p = nullptr;
        return kernels_fail("%s: cudaMalloc(%zu bytes) for a workspace failed: %s", ctx, want, cudaGetErrorString(e));
    }
    *have = want;
    return 0;
}

// "<ctx>: launch of <what> failed: <cuda error>".
inline int klaunched(const char *ctx, const char *what)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return kernels_fail("%s: launch of %s failed: %s", ctx, what, cudaGetErrorString(e));
    return 0;
}

// The same after waiting for the device, so a fault inside the kernel is
// reported here too (the probes, which run once): "<what>: <cuda error>".
inline int klaunched_synced(const char *what)
{
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) return kernels_fail("%s: %s", what, cudaGetErrorString(e));
    return 0;
}

// Row ops over N rows of C elements: "<op> <what> (N=.. C=..): launch failed: <cuda error>".
inline int krow_launched(const char *op, const char *what, int64_t N, int64_t C)
{
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        return kernels_fail("%s %s (N=%lld C=%lld): launch failed: %s", op, what, (long long)N, (long long)C,
                            cudaGetErrorString(err));
    return 0;
}

#endif
