// kernels/common/klaunch.cuh — the host-side launch checks the op files share (C++).
// A kernel launch reports a bad configuration only through
// cudaGetLastError(); each launcher calls one of these right after its
// launches, so the error names the op and the shape that failed.
#ifndef ULPSCOPE_KERNELS_COMMON_KLAUNCH_CUH
#define ULPSCOPE_KERNELS_COMMON_KLAUNCH_CUH

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/kernels.h"

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
