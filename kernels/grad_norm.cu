// kernels/grad_norm.cu — global gradient norm (see grad_norm.h).
// Shapes: count tensors of n_t elements each (flat).  Stage 1 writes one fp32
// partial per chunk (block_tree, warp_tree) or per tensor (sequential) into
// the workspace, tensor after tensor; stage 2 reduces the partials and takes
// the square root.  Planted bugs: drop-term skips each tensor's last
// element; truncate-output truncates the stored norm (kelem.cuh).
// Replicas (blockIdx.y in stage 1, one stage-2 block each): replica r's part
// of tensor t is its own n_t elements at r * n_t, its partials are the
// single call's, at r * P in the workspace (P partials per replica), and its
// stage 2 reduces them in the single call's order into norm[r].
#include <cuda_runtime.h>

#include "kernels/common/klaunch.cuh"
#include "kernels/common/kreduce.cuh"
#include "kernels/grad_norm.h"
#include "kernels/registry.h"

// ---- registry entry (kernels/registry.h): name, paths, fp8 note, variants ----

static const kvariant variants[KGRADNORM_NVARIANTS] = {
    {"block_tree", "chunks of 4096 per block (strided partials, block butterfly), then one block over the partials"},
    {"warp_tree", "chunks of 1024 per warp (strided partials, warp butterfly), then one block over the partials"},
    {"sequential", "one thread per tensor left to right, then one thread over the per-tensor sums"},
};

extern "C" const kop kop_grad_norm = {
    "grad_norm",
    "global gradient norm sqrt(sum over tensors of sum g^2), fp32 result, for clipping",
    KPATHS_NO_FP8,
    "no fp8 path: gradients reach the norm in their storage format (bf16/fp32); fp8 gradient tensors exist "
    "only inside matmul's fp8 path, scaled per tensor",
    variants,
    KGRADNORM_NVARIANTS,
};

namespace {

constexpr int kBlock = 256, kBlockChunk = 4096, kWarpChunk = 1024;

int64_t chunk_of(int variant) { return variant == KGRADNORM_WARP_TREE ? kWarpChunk : kBlockChunk; }

int64_t partials_of(const int64_t n, int variant)
{
    return variant == KGRADNORM_SEQUENTIAL ? 1 : (n + chunk_of(variant) - 1) / chunk_of(variant);
}

template <typename T>
__global__ void block_chunks_kernel(float *__restrict__ partial, const T *__restrict__ g, int64_t n,
                                    int64_t partial_stride, int bug)
{
    __shared__ float scratch[32];
    g += blockIdx.y * n;
    partial += blockIdx.y * partial_stride;
    const int64_t start = (int64_t)blockIdx.x * kBlockChunk, end = start + kBlockChunk < n ? start + kBlockChunk : n;
    float acc = 0.0f;
    if (end - start == kBlockChunk) {
        // Full chunk: all of the thread's loads in flight at once, then the
        // same in-order accumulation as the loop below.
        constexpr int PER_THREAD = kBlockChunk / kBlock;
        float v[PER_THREAD];
#pragma unroll
        for (int k = 0; k < PER_THREAD; k++) v[k] = kto_float(g[start + threadIdx.x + (int64_t)k * kBlock]);
#pragma unroll
        for (int k = 0; k < PER_THREAD; k++)
            if (!(bug == KBUG_DROP_TERM && start + threadIdx.x + (int64_t)k * kBlock == n - 1)) acc = fmaf(v[k], v[k], acc);
    } else {
        for (int64_t i = start + threadIdx.x; i < end; i += kBlock) {
            if (bug == KBUG_DROP_TERM && i == n - 1) continue;
            float v = kto_float(g[i]);
            acc = fmaf(v, v, acc);
        }
    }
    acc = kblock_sum(acc, scratch);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

template <typename T>
__global__ void warp_chunks_kernel(float *__restrict__ partial, const T *__restrict__ g, int64_t n, int64_t chunks,
                                   int64_t partial_stride, int bug)
{
    g += blockIdx.y * n;
    partial += blockIdx.y * partial_stride;
    const int64_t chunk = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (chunk >= chunks) return; // whole warps leave together
    const int lane = threadIdx.x & 31;
    const int64_t start = chunk * kWarpChunk, end = start + kWarpChunk < n ? start + kWarpChunk : n;
    float acc = 0.0f;
    for (int64_t i = start + lane; i < end; i += 32) {
        if (bug == KBUG_DROP_TERM && i == n - 1) continue;
        float v = kto_float(g[i]);
        acc = fmaf(v, v, acc);
    }
    acc = kwarp_sum(acc);
    if (lane == 0) partial[chunk] = acc;
}

template <typename T>
__global__ void sequential_kernel(float *__restrict__ partial, const T *__restrict__ g, int64_t n,
                                  int64_t partial_stride, int bug)
{
    g += blockIdx.x * n;
    partial += blockIdx.x * partial_stride;
    float acc = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        if (bug == KBUG_DROP_TERM && i == n - 1) continue;
        float v = kto_float(g[i]);
        acc = fmaf(v, v, acc);
    }
    *partial = acc;
}

__global__ void final_block_kernel(float *norm, const float *__restrict__ partial, int64_t count, int bug)
{
    __shared__ float scratch[32];
    norm += blockIdx.x;
    partial += blockIdx.x * count;
    float acc = 0.0f;
    for (int64_t i = threadIdx.x; i < count; i += kBlock) acc += partial[i];
    acc = kblock_sum(acc, scratch);
    if (threadIdx.x == 0) *norm = kfrom_float<float>(sqrtf(acc), bug);
}

__global__ void final_sequential_kernel(float *norm, const float *__restrict__ partial, int64_t count, int bug)
{
    norm += blockIdx.x;
    partial += blockIdx.x * count;
    float acc = 0.0f;
    for (int64_t i = 0; i < count; i++) acc += partial[i];
    *norm = kfrom_float<float>(sqrtf(acc), bug);
}

// One tensor of n elements per replica (R of them, n apart); replica r's
// partials at partial + r * partial_stride.
template <typename T>
void stage1(int variant, float *partial, const T *g, int64_t n, int64_t R, int64_t partial_stride, int bug)
{
    cudaStream_t st = kstream();
    if (variant == KGRADNORM_SEQUENTIAL) sequential_kernel<T><<<(unsigned)R, 1, 0, st>>>(partial, g, n, partial_stride, bug);
    else if (variant == KGRADNORM_WARP_TREE) {
        int64_t chunks = partials_of(n, variant);
        dim3 grid((unsigned)((chunks + 7) / 8), (unsigned)R);
        warp_chunks_kernel<T><<<grid, kBlock, 0, st>>>(partial, g, n, chunks, partial_stride, bug);
    } else {
        dim3 grid((unsigned)partials_of(n, variant), (unsigned)R);
        block_chunks_kernel<T><<<grid, kBlock, 0, st>>>(partial, g, n, partial_stride, bug);
    }
}

int levels(int64_t active)
{
    int l = 0;
    while ((1ll << l) < active) l++;
    return l;
}

} // namespace

// Partials per replica: tensor t holds R x n_t elements.
static int64_t partials_per_replica(const ktensor *grads, int count, int64_t R, int variant)
{
    int64_t p = 0;
    for (int t = 0; t < count; t++) p += partials_of(ktensor_numel(&grads[t]) / R, variant);
    return p;
}

extern "C" size_t kgrad_norm_workspace_replicas(int64_t replicas, const ktensor *grads, int count, int variant)
{
    if (replicas < 1) return 0;
    int64_t p = replicas * partials_per_replica(grads, count, replicas, variant);
    return (size_t)(p > 0 ? p : 1) * sizeof(float);
}

extern "C" size_t kgrad_norm_workspace(const ktensor *grads, int count, int variant)
{
    return kgrad_norm_workspace_replicas(1, grads, count, variant);
}

extern "C" int64_t kgrad_norm_depth(const int64_t *sizes, int count, int variant)
{
    int64_t stage1 = 0, partials = 0;
    for (int t = 0; t < count; t++) {
        int64_t n = sizes[t], d;
        if (variant == KGRADNORM_SEQUENTIAL) d = n;
        else {
            int64_t chunk = chunk_of(variant), threads = variant == KGRADNORM_WARP_TREE ? 32 : kBlock;
            int64_t in_chunk = n < chunk ? n : chunk;
            d = (in_chunk + threads - 1) / threads + levels(in_chunk < threads ? in_chunk : threads);
        }
        stage1 = d > stage1 ? d : stage1;
        partials += partials_of(n, variant);
    }
    int64_t stage2 = variant == KGRADNORM_SEQUENTIAL ? partials - 1
                                                       : (partials + kBlock - 1) / kBlock - 1 + levels(partials < kBlock ? partials : kBlock);
    return stage1 + (stage2 > 0 ? stage2 : 0);
}

extern "C" int kgrad_norm_replicas(int64_t replicas, float *norms, const ktensor *grads, int count, void *workspace,
                                   size_t workspace_bytes, int variant)
{
    if (!norms || !grads || count < 1) return kernels_fail("grad_norm: needs an output and at least one tensor");
    if (variant < 0 || variant >= KGRADNORM_NVARIANTS) return kernels_fail("grad_norm: unknown variant %d", variant);
    if (replicas < 1 || replicas > 65535) return kernels_fail("grad_norm: %lld replicas (1 to 65535)", (long long)replicas);
    for (int t = 0; t < count; t++) {
        int64_t n = ktensor_numel(&grads[t]);
        if (!grads[t].data || n < 1) return kernels_fail("grad_norm: tensor %d is empty", t);
        if (n % replicas != 0)
            return kernels_fail("grad_norm: tensor %d has %lld elements, not %lld replicas' equal parts", t,
                                (long long)n, (long long)replicas);
    }
    const size_t need = kgrad_norm_workspace_replicas(replicas, grads, count, variant);
    if (!workspace || workspace_bytes < need)
        return kernels_fail("grad_norm: workspace of %zu bytes is below the %zu needed", workspace_bytes, need);
    const int bug = kernels_planted_bug();
    const int64_t P = partials_per_replica(grads, count, replicas, variant);
    float *partial = (float *)workspace;
    int64_t offset = 0;
    for (int t = 0; t < count; t++) {
        const ktensor *g = &grads[t];
        int64_t n = ktensor_numel(g) / replicas;
        if (g->format != grads[0].format) return kernels_fail("grad_norm: tensor %d is %s, tensor 0 %s", t,
                                                              prec_format_name(g->format), prec_format_name(grads[0].format));
        switch (g->format) {
        case PREC_FP32: stage1<float>(variant, partial + offset, (const float *)g->data, n, replicas, P, bug); break;
        case PREC_BF16:
            stage1<__nv_bfloat16>(variant, partial + offset, (const __nv_bfloat16 *)g->data, n, replicas, P, bug);
            break;
        case PREC_FP16: stage1<__half>(variant, partial + offset, (const __half *)g->data, n, replicas, P, bug); break;
        default: return kernels_fail("grad_norm: no %s path", prec_format_name(g->format));
        }
        offset += partials_of(n, variant);
    }
    if (variant == KGRADNORM_SEQUENTIAL) final_sequential_kernel<<<(unsigned)replicas, 1, 0, kstream()>>>(norms, partial, P, bug);
    else final_block_kernel<<<(unsigned)replicas, kBlock, 0, kstream()>>>(norms, partial, P, bug);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        return kernels_fail("grad_norm (%d tensors, %lld replicas): launch failed: %s", count, (long long)replicas,
                            cudaGetErrorString(err));
    return 0;
}

extern "C" int kgrad_norm(float *norm, const ktensor *grads, int count, void *workspace, size_t workspace_bytes,
                          int variant)
{
    return kgrad_norm_replicas(1, norm, grads, count, workspace, workspace_bytes, variant);
}
