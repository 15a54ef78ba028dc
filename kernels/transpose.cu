// kernels/transpose.cu — transpose-copy and transpose-add (see transpose.h).
// Shapes: x (M, N) -> y (N, M).  smem_tile: blocks of 32 x 8 threads move a
// 32 x 32 tile (each thread 4 rows) through a padded shared tile; direct:
// one thread per element.  Planted bugs: drop-term leaves y's last element
// alone (unwritten for copy, x not added for add); truncate-output rounds
// the stores toward zero.
#include <cuda_runtime.h>

#include "kernels/kelem.cuh"
#include "kernels/transpose.h"

namespace {

constexpr int kTile = 32, kRows = 8;

template <typename T, bool ADD> __device__ __forceinline__ void put(T *y, int64_t at, float v, bool last, int bug)
{
    if (bug == KBUG_DROP_TERM && last) return;
    y[at] = kfrom_float<T>(ADD ? kto_float(y[at]) + v : v, bug);
}

template <typename T, bool ADD>
__global__ void transpose_tile_kernel(T *__restrict__ y, const T *__restrict__ x, int64_t M, int64_t N, int bug)
{
    __shared__ float tile[kTile][kTile + 1];
    int64_t c0 = (int64_t)blockIdx.x * kTile, r0 = (int64_t)blockIdx.y * kTile;
    for (int k = threadIdx.y; k < kTile; k += kRows) {
        int64_t r = r0 + k, c = c0 + threadIdx.x;
        if (r < M && c < N) tile[k][threadIdx.x] = kto_float(x[r * N + c]);
    }
    __syncthreads();
    for (int k = threadIdx.y; k < kTile; k += kRows) {
        int64_t yr = c0 + k, yc = r0 + threadIdx.x; // y row = x column
        if (yr < N && yc < M) put<T, ADD>(y, yr * M + yc, tile[threadIdx.x][k], yr == N - 1 && yc == M - 1, bug);
    }
}

template <typename T, bool ADD>
__global__ void transpose_direct_kernel(T *__restrict__ y, const T *__restrict__ x, int64_t M, int64_t N, int bug)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= M * N) return;
    int64_t r = i / N, c = i % N;
    put<T, ADD>(y, c * M + r, kto_float(x[i]), r == M - 1 && c == N - 1, bug);
}

template <typename T, bool ADD> int launch(int variant, ktensor *y, const ktensor *x, int64_t M, int64_t N, int bug)
{
    if (variant == KTRANSPOSE_DIRECT) {
        int64_t n = M * N;
        transpose_direct_kernel<T, ADD><<<(unsigned)((n + 255) / 256), 256>>>((T *)y->data, (const T *)x->data, M, N, bug);
    } else {
        dim3 grid((unsigned)((N + kTile - 1) / kTile), (unsigned)((M + kTile - 1) / kTile)), block(kTile, kRows);
        transpose_tile_kernel<T, ADD><<<grid, block>>>((T *)y->data, (const T *)x->data, M, N, bug);
    }
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        return kernels_fail("transpose %s (M=%lld N=%lld): launch failed: %s", ADD ? "add" : "copy", (long long)M,
                            (long long)N, cudaGetErrorString(err));
    return 0;
}

template <bool ADD> int transpose(ktensor *y, const ktensor *x, int variant)
{
    const char *what = ADD ? "transpose add" : "transpose copy";
    if (!x || !y || !x->data || !y->data || x->ndim != 2 || y->ndim != 2)
        return kernels_fail("%s: x and y must be 2-d tensors", what);
    int64_t M = x->shape[0], N = x->shape[1];
    if (y->shape[0] != N || y->shape[1] != M || y->format != x->format)
        return kernels_fail("%s: y must be (%lld, %lld) %s, got (%lld, %lld) %s", what, (long long)N, (long long)M,
                            prec_format_name(x->format), (long long)y->shape[0], (long long)y->shape[1],
                            prec_format_name(y->format));
    if (variant < 0 || variant >= KTRANSPOSE_NVARIANTS) return kernels_fail("%s: unknown variant %d", what, variant);
    const int bug = kernels_planted_bug();
    switch (x->format) {
    case PREC_FP32: return launch<float, ADD>(variant, y, x, M, N, bug);
    case PREC_BF16: return launch<__nv_bfloat16, ADD>(variant, y, x, M, N, bug);
    case PREC_FP16: return launch<__half, ADD>(variant, y, x, M, N, bug);
    default: return kernels_fail("%s: no %s path", what, prec_format_name(x->format));
    }
}

} // namespace

extern "C" int ktranspose_copy(ktensor *y, const ktensor *x, int variant) { return transpose<false>(y, x, variant); }
extern "C" int ktranspose_add(ktensor *y, const ktensor *x, int variant) { return transpose<true>(y, x, variant); }
