// kernels/transpose.cu — transpose-copy and transpose-add (see transpose.h).
// Shapes: x (M, N) -> y (N, M).  smem_tile: when M and N are multiples of
// V = 16 bytes / element (and the tensors 16-byte aligned), 256 threads move
// a 64 x 64 tile with 16-byte loads and stores through a shared tile padded
// by 4 bytes a row (so the column gathers hit distinct banks); otherwise
// blocks of 32 x 8 threads move a 32 x 32 tile (each thread 4 rows) through a
// padded shared tile.  direct: one thread per element.  Every variant moves
// the same values (ADD: one fp32 add and one rounding per element).  Planted bugs: drop-term leaves y's last element
// alone (unwritten for copy, x not added for add); truncate-output rounds
// the stores toward zero.  Replicas: R pairs (x_r, y_r) at r M N in both
// tensors, the replica as blockIdx.z: each element moves as in a single call.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/kelem.cuh"
#include "kernels/common/klaunch.cuh"
#include "kernels/common/kreduce.cuh"
#include "kernels/registry.h"
#include "kernels/transpose.h"

// ---- registry entry (kernels/registry.h): name, paths, fp8 note, variants ----

static const kvariant variants[KTRANSPOSE_NVARIANTS] = {
    {"smem_tile", "tiles staged through padded shared memory: 64 x 64 with 16-byte accesses when both sizes allow, else 32 x 32; coalesced reads and writes"},
    {"direct", "one thread per element reading rows and writing columns (same result bit for bit)"},
};

extern "C" const kop kop_transpose = {
    "transpose",
    "transpose-copy y = x^T (exact) and transpose-add y += x^T (a transposed lm_head kept in sync with a tied embedding)",
    KPATHS_NO_FP8,
    "no fp8 path here: an fp8 transposed copy of a weight is a cast with a scale, which matmul's fp8 path makes "
    "itself; an fp8 transpose-add would sum weights or gradients in 3 mantissa bits",
    variants,
    KTRANSPOSE_NVARIANTS,
};

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
    x += blockIdx.z * M * N;
    y += blockIdx.z * M * N;
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

constexpr int kVecTile = 64, kVecThreads = 256;

template <typename T, bool ADD>
__global__ void transpose_vec_kernel(T *__restrict__ y, const T *__restrict__ x, int64_t M, int64_t N, int bug)
{
    constexpr int V = 16 / (int)sizeof(T), PER_ROW = kVecTile / V, VECS = kVecTile * PER_ROW;
    constexpr int STRIDE = kVecTile + 4 / (int)sizeof(T);
    __shared__ T tile[kVecTile][STRIDE];
    x += blockIdx.z * M * N;
    y += blockIdx.z * M * N;
    const int64_t c0 = (int64_t)blockIdx.x * kVecTile, r0 = (int64_t)blockIdx.y * kVecTile;
    // All of a thread's loads are issued before the shared stores.
    alignas(16) T in[VECS / kVecThreads][V];
#pragma unroll
    for (int k = 0; k < VECS / kVecThreads; k++) {
        const int idx = threadIdx.x + k * kVecThreads, r = idx / PER_ROW, c = (idx % PER_ROW) * V;
        if (r0 + r < M && c0 + c < N)
            *reinterpret_cast<uint4 *>(in[k]) = *reinterpret_cast<const uint4 *>(x + (r0 + r) * N + c0 + c);
    }
#pragma unroll
    for (int k = 0; k < VECS / kVecThreads; k++) {
        const int idx = threadIdx.x + k * kVecThreads, r = idx / PER_ROW, c = (idx % PER_ROW) * V;
#pragma unroll
        for (int j = 0; j < V; j++) tile[r][c + j] = in[k][j];
    }
    __syncthreads();
    // y row c0 + c (x column), V consecutive y columns r0 + r .. (x rows).
#pragma unroll
    for (int k = 0; k < VECS / kVecThreads; k++) {
        const int idx = threadIdx.x + k * kVecThreads, c = idx / PER_ROW, r = (idx % PER_ROW) * V;
        const int64_t yr = c0 + c, yc = r0 + r;
        if (yr >= N || yc >= M) continue;
        T *at = y + yr * M + yc;
        float old[V], out[V];
        if (ADD) kvec_io<T, V>::load(at, old);
#pragma unroll
        for (int j = 0; j < V; j++) out[j] = ADD ? old[j] + kto_float(tile[r + j][c]) : kto_float(tile[r + j][c]);
        if (bug == KBUG_DROP_TERM && yr == N - 1 && yc + V == M) {
            for (int j = 0; j < V - 1; j++) at[j] = kfrom_float<T>(out[j], bug); // last element left alone
        } else {
            kvec_io<T, V>::store(at, out, bug);
        }
    }
}

template <typename T, bool ADD>
__global__ void transpose_direct_kernel(T *__restrict__ y, const T *__restrict__ x, int64_t M, int64_t N, int bug)
{
    x += blockIdx.z * M * N;
    y += blockIdx.z * M * N;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= M * N) return;
    int64_t r = i / N, c = i % N;
    put<T, ADD>(y, c * M + r, kto_float(x[i]), r == M - 1 && c == N - 1, bug);
}

// R replicas of x (M, N) -> y (N, M), each M N apart (16-byte aligned with x
// and y when M and N are multiples of the vector).
template <typename T, bool ADD>
int launch(int variant, ktensor *y, const ktensor *x, int64_t M, int64_t N, int64_t R, int bug)
{
    cudaStream_t st = kstream();
    if (variant == KTRANSPOSE_DIRECT) {
        int64_t n = M * N;
        dim3 grid((unsigned)((n + 255) / 256), 1, (unsigned)R);
        transpose_direct_kernel<T, ADD><<<grid, 256, 0, st>>>((T *)y->data, (const T *)x->data, M, N, bug);
    } else if (M % kvec_width<T>() == 0 && N % kvec_width<T>() == 0 &&
               (((uintptr_t)x->data | (uintptr_t)y->data) & 15) == 0) {
        dim3 grid((unsigned)((N + kVecTile - 1) / kVecTile), (unsigned)((M + kVecTile - 1) / kVecTile), (unsigned)R);
        transpose_vec_kernel<T, ADD><<<grid, kVecThreads, 0, st>>>((T *)y->data, (const T *)x->data, M, N, bug);
    } else {
        dim3 grid((unsigned)((N + kTile - 1) / kTile), (unsigned)((M + kTile - 1) / kTile), (unsigned)R),
            block(kTile, kRows);
        transpose_tile_kernel<T, ADD><<<grid, block, 0, st>>>((T *)y->data, (const T *)x->data, M, N, bug);
    }
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        return kernels_fail("transpose %s (M=%lld N=%lld): launch failed: %s", ADD ? "add" : "copy", (long long)M,
                            (long long)N, cudaGetErrorString(err));
    return 0;
}

// x (R M, N) or (R, M, N); y (R N, M) or (R, N, M).
template <bool ADD> int transpose(int64_t R, ktensor *y, const ktensor *x, int variant)
{
    const char *what = ADD ? "transpose add" : "transpose copy";
    if (!x || !y || !x->data || !y->data || x->ndim < 2 || x->ndim > 3 || y->ndim != x->ndim)
        return kernels_fail("%s: x and y must be 2-d tensors (3-d with a replica dimension)", what);
    if (R < 1 || R > 65535) return kernels_fail("%s: %lld replicas (1 to 65535)", what, (long long)R);
    const int64_t N = x->shape[x->ndim - 1], rows = ktensor_numel(x) / N, M = rows / R;
    if (rows % R != 0 || (x->ndim == 3 && x->shape[0] != R))
        return kernels_fail("%s: x has %lld rows, not %lld replicas' equal parts", what, (long long)rows,
                            (long long)R);
    if (y->shape[y->ndim - 1] != M || ktensor_numel(y) != R * M * N || y->format != x->format ||
        (y->ndim == 3 && y->shape[0] != R))
        return kernels_fail("%s: y must be (%lld, %lld) %s per replica, got %lld elements of %s in rows of %lld",
                            what, (long long)N, (long long)M, prec_format_name(x->format), (long long)ktensor_numel(y),
                            prec_format_name(y->format), (long long)y->shape[y->ndim - 1]);
    if (variant < 0 || variant >= KTRANSPOSE_NVARIANTS) return kernels_fail("%s: unknown variant %d", what, variant);
    const int bug = kernels_planted_bug();
    switch (x->format) {
    case PREC_FP32: return launch<float, ADD>(variant, y, x, M, N, R, bug);
    case PREC_BF16: return launch<__nv_bfloat16, ADD>(variant, y, x, M, N, R, bug);
    case PREC_FP16: return launch<__half, ADD>(variant, y, x, M, N, R, bug);
    default: return kernels_fail("%s: no %s path", what, prec_format_name(x->format));
    }
}

} // namespace

extern "C" int ktranspose_copy(ktensor *y, const ktensor *x, int variant) { return transpose<false>(1, y, x, variant); }
extern "C" int ktranspose_add(ktensor *y, const ktensor *x, int variant) { return transpose<true>(1, y, x, variant); }
extern "C" int ktranspose_copy_replicas(int64_t replicas, ktensor *y, const ktensor *x, int variant)
{
    return transpose<false>(replicas, y, x, variant);
}
extern "C" int ktranspose_add_replicas(int64_t replicas, ktensor *y, const ktensor *x, int variant)
{
    return transpose<true>(replicas, y, x, variant);
}
