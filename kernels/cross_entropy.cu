// kernels/cross_entropy.cu — cross-entropy over the vocabulary from
// materialised logits, and fused with the lm_head matmul in row chunks (see
// cross_entropy.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_pipeline.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <type_traits>

#include "kernels/common/kelem.cuh"
#include "kernels/common/klaunch.cuh"
#include "kernels/common/kreduce.cuh"
#include "kernels/cross_entropy.h"
#include "kernels/matmul.h"
#include "kernels/registry.h"

extern "C" const kvariant kce_variants[KCE_NVARIANTS] = {
    {"two_pass", "row maximum, then sum exp(z - max) over a block tree; logits and dlogits in the path's format"},
    {"online", "one read for the normaliser: running (max, sum) per thread, rescaled on each new max, merged over "
               "the block tree"},
    {"fp32_logits", "two_pass on fp32 logits and dlogits (an lm_head that writes its fp32 accumulator)"},
};

extern "C" const kvariant klce_variants[KLCE_NVARIANTS] = {
    {"chunk_1024", "1024 rows per chunk: logits [1024,V] fp32, never [N,V]"},
    {"chunk_128", "128 rows per chunk: less memory, dW summed over more chunk GEMMs"},
};

// ---- registry entry (kernels/registry.h): name, paths, fp8 note, variants ----

extern "C" const kop kop_cross_entropy = {
    "cross_entropy",
    "cross-entropy over the vocabulary from materialised logits: per-row loss = lse - z_target and "
    "dlogits = (softmax - onehot) dloss",
    KPATHS_NO_FP8,
    "no fp8 path: logits in e4m3 keep 3 mantissa bits, an error of up to 6% in every exp; the fp8 lm_head is "
    "matmul's fp8 path writing bf16 or fp32 logits",
    kce_variants, KCE_NVARIANTS,
};
extern "C" const kop kop_linear_cross_entropy = {
    "linear_cross_entropy",
    "lm_head matmul fused with cross-entropy in row chunks (never the full logits): loss, dh and dW (fp32)",
    KPATHS_NO_FP8,
    "no fp8 path here: an fp8 lm_head is matmul's fp8 path followed by cross_entropy",
    klce_variants, KLCE_NVARIANTS,
};

extern "C" int64_t klce_chunk_rows(int variant) { return variant == KLCE_CHUNK_128 ? 128 : 1024; }

extern "C" prec_format kce_logits_format(kpath path, int variant)
{
    if (variant == KCE_FP32_LOGITS) return PREC_FP32;
    switch (path) {
    case KPATH_BF16: return PREC_BF16;
    case KPATH_FP16: return PREC_FP16;
    default: return PREC_FP32;
    }
}

static const int CE_THREADS = 256;

__device__ __forceinline__ float block_max(float v, float *scratch)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < warps ? scratch[lane] : -INFINITY;
        for (int off = 16; off > 0; off >>= 1) w = fmaxf(w, __shfl_xor_sync(0xffffffffu, w, off));
        if (lane == 0) scratch[0] = w;
    }
    __syncthreads();
    return scratch[0];
}

// (m, s) represents s * exp(m); merging rescales the smaller-max side.
__device__ __forceinline__ void online_merge(float &m, float &s, float m2, float s2)
{
    float mm = fmaxf(m, m2);
    if (mm == -INFINITY) return; // both empty
    s = __fadd_rn(__fmul_rn(s, expf(__fsub_rn(m, mm))), __fmul_rn(s2, expf(__fsub_rn(m2, mm))));
    m = mm;
}

__device__ __forceinline__ void block_online(float &m, float &s, float *scratch_m, float *scratch_s)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int off = 16; off > 0; off >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, off), s2 = __shfl_xor_sync(0xffffffffu, s, off);
        online_merge(m, s, m2, s2);
    }
    __syncthreads();
    if (lane == 0) {
        scratch_m[warp] = m;
        scratch_s[warp] = s;
    }
    __syncthreads();
    if (warp == 0) {
        float wm = lane < warps ? scratch_m[lane] : -INFINITY, ws = lane < warps ? scratch_s[lane] : 0.0f;
        for (int off = 16; off > 0; off >>= 1) {
            float m2 = __shfl_xor_sync(0xffffffffu, wm, off), s2 = __shfl_xor_sync(0xffffffffu, ws, off);
            online_merge(wm, ws, m2, s2);
        }
        if (lane == 0) {
            scratch_m[0] = wm;
            scratch_s[0] = ws;
        }
    }
    __syncthreads();
    m = scratch_m[0];
    s = scratch_s[0];
}

// Staging: a row of V elements copied once into shared memory, so that the
// sweeps over it (maximum, sum, gradient) read global memory once instead of
// three times.  VEC: 16-byte asynchronous copies (V a multiple of the vector
// and the row 16-byte aligned), else element by element.  Only where the
// copy happens changes: every sweep reads the same values in the same order.
template <class TIn, bool VEC> __device__ __forceinline__ void stage_row(TIn *zs, const TIn *z, int V)
{
    if (VEC) {
        constexpr int W = 16 / (int)sizeof(TIn);
        const int vectors = V / W;
        for (int i = threadIdx.x; i < vectors; i += blockDim.x) __pipeline_memcpy_async(zs + i * W, z + i * W, 16);
        __pipeline_commit();
        __pipeline_wait_prior(0);
    } else {
        for (int j = threadIdx.x; j < V; j += blockDim.x) zs[j] = z[j];
    }
    __syncthreads();
}

// Loads W consecutive elements of T from 16-byte aligned memory as floats.
template <class T, int W> __device__ __forceinline__ void load_floats(const T *p, float *out)
{
    constexpr int PER16 = 16 / (int)sizeof(T);
#pragma unroll
    for (int k = 0; k < W; k += PER16) kvec_io<T, PER16>::load(p + k, out + k);
}

// The soft-cap (cross_entropy.h): z = cap tanhf(l / cap), each step rounded
// (no contraction).  CAP is a template argument so that the uncapped
// kernels are the code they were, with no test on the hot path.
template <bool CAP> __device__ __forceinline__ float capped_logit(float l, float cap)
{
    if constexpr (CAP) return __fmul_rn(cap, tanhf(__fdiv_rn(l, cap)));
    return l;
}

// dz = ((p - [j = t]) (1 - th th)) dloss with th = tanhf(l / cap); without a
// cap, (p - [j = t]) dloss.
template <bool CAP> __device__ __forceinline__ float logit_gradient(float l, float lse, bool target, float cap, float dloss)
{
    float th = 0.0f, z = l;
    if constexpr (CAP) {
        th = tanhf(__fdiv_rn(l, cap));
        z = __fmul_rn(cap, th);
    }
    const float p = expf(__fsub_rn(z, lse));
    float g = target ? __fsub_rn(p, 1.0f) : p;
    if constexpr (CAP) g = __fmul_rn(g, __fsub_rn(1.0f, __fmul_rn(th, th)));
    return __fmul_rn(g, dloss);
}

// One block per row.  logits [N,V] (TIn), dlogits [N,V] (TOut, may alias
// logits: every thread reads z_j before writing dlogits_j, and z_t is read
// before the reduction's barriers), losses [N] fp32.
// The maximum and the sums follow the fixed partition (thread j mod 256 owns
// element j, in increasing j) and the block trees whatever the staging; the
// gradient is elementwise, so STAGED && VEC writes it 16 bytes per thread.
// STAGED: the row is read from global memory once, into dynamic shared memory
// of V * sizeof(TIn) bytes (VEC: V a multiple of both formats' 16-byte
// vectors, logits and dlogits 16-byte aligned); indices then fit in int.
template <class TIn, class TOut, int ONLINE, bool STAGED, bool VEC, bool CAP>
__global__ void __launch_bounds__(CE_THREADS)
    ce_row_kernel(const TIn *logits, const int32_t *targets, int64_t V, float *losses, TOut *dlogits, float dloss,
                  float cap, int bug)
{
    using idx = typename std::conditional<STAGED, int, int64_t>::type;
    extern __shared__ __align__(16) unsigned char ce_row_smem[];
    __shared__ float scratch_m[32], scratch_s[32];
    const int64_t row = blockIdx.x;
    const TIn *z = logits + row * V;
    const int32_t t = targets[row];
    TOut *dz = dlogits ? dlogits + row * V : nullptr;
    if (t < 0 || t >= V) { // ignored row
        if (threadIdx.x == 0) losses[row] = 0.0f;
        if (dz)
            for (int64_t j = threadIdx.x; j < V; j += blockDim.x) dz[j] = kfrom_float<TOut>(0.0f, KBUG_NONE);
        return;
    }
    const float zt = capped_logit<CAP>(kto_float(z[t]), cap);
    if (STAGED) {
        TIn *zs = reinterpret_cast<TIn *>(ce_row_smem);
        stage_row<TIn, VEC>(zs, z, (int)V);
        z = zs;
    }
    const idx n = (idx)V;
    const idx terms = bug == KBUG_DROP_TERM ? n - 1 : n; // the planted bug leaves z[V-1] out of the sum
    float m, s;
    if (ONLINE) {
        m = -INFINITY;
        s = 0.0f;
        for (idx j = threadIdx.x; j < terms; j += blockDim.x) {
            float x = capped_logit<CAP>(kto_float(z[j]), cap);
            if (x > m) {
                s = __fadd_rn(__fmul_rn(s, expf(__fsub_rn(m, x))), 1.0f);
                m = x;
            } else {
                s = __fadd_rn(s, expf(__fsub_rn(x, m)));
            }
        }
        block_online(m, s, scratch_m, scratch_s);
    } else {
        m = -INFINITY;
        for (idx j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, capped_logit<CAP>(kto_float(z[j]), cap));
        m = block_max(m, scratch_m);
        s = 0.0f;
        for (idx j = threadIdx.x; j < terms; j += blockDim.x)
            s = __fadd_rn(s, expf(__fsub_rn(capped_logit<CAP>(kto_float(z[j]), cap), m)));
        s = kblock_sum(s, scratch_s);
    }
    const float lse = __fadd_rn(m, logf(s));
    if (threadIdx.x == 0) losses[row] = kfrom_float<float>(__fsub_rn(lse, zt), bug);
    if (!dz) return;
    if (STAGED && VEC) {
        constexpr int W = 16 / (int)sizeof(TOut);
        for (idx base = threadIdx.x * W; base < n; base += blockDim.x * W) {
            float zv[W], g[W];
            load_floats<TIn, W>(z + base, zv);
#pragma unroll
            for (int k = 0; k < W; k++) g[k] = logit_gradient<CAP>(zv[k], lse, base + k == t, cap, dloss);
            kvec_io<TOut, W>::store(dz + base, g, bug);
        }
    } else {
        for (idx j = threadIdx.x; j < n; j += blockDim.x)
            dz[j] = kfrom_float<TOut>(logit_gradient<CAP>(kto_float(z[j]), lse, j == t, cap, dloss), bug);
    }
}

// Shared memory for a staged row, or 0 when two blocks of it would not fit on
// one multiprocessor (then the row is read from global memory in each sweep:
// one block per multiprocessor would leave too few loads in flight).
static int staged_bytes(const char *ctx, int64_t V, size_t elem, size_t *bytes)
{
    int dev = 0, per_sm = 0, per_block = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (e != cudaSuccess) return kernels_fail("%s: device attributes: %s", ctx, cudaGetErrorString(e));
    const int64_t want = V * (int64_t)elem, reserve = 2048; // per block: static scratch and the runtime's share
    *bytes = want <= per_block && 2 * (want + reserve) <= per_sm ? (size_t)want : 0;
    return 0;
}

template <class TIn, class TOut, int ONLINE, bool STAGED, bool VEC, bool CAP>
static int launch_row_kernel(const char *ctx, int64_t N, int64_t V, size_t smem, const void *logits,
                             const int32_t *targets, float *losses, void *dlogits, float dloss, float cap, int bug)
{
    auto kernel = ce_row_kernel<TIn, TOut, ONLINE, STAGED, VEC, CAP>;
    if (STAGED) {
        cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess)
            return kernels_fail("%s: %zu bytes of shared memory for ce_row_kernel: %s", ctx, smem,
                                cudaGetErrorString(e));
    }
    kernel<<<(unsigned)N, CE_THREADS, smem, kstream()>>>((const TIn *)logits, targets, V, losses, (TOut *)dlogits,
                                                         dloss, cap, bug);
    return klaunched(ctx, "ce_row_kernel");
}

template <class TIn, class TOut, int ONLINE, bool CAP>
static int launch_variant(const char *ctx, int64_t N, int64_t V, const void *logits, const int32_t *targets,
                          float *losses, void *dlogits, float dloss, float cap, int bug)
{
    size_t smem = 0;
    if (staged_bytes(ctx, V, sizeof(TIn), &smem)) return -1;
    if (!smem)
        return launch_row_kernel<TIn, TOut, ONLINE, false, false, CAP>(ctx, N, V, 0, logits, targets, losses, dlogits,
                                                                 dloss, cap, bug);
    const bool aligned = (uintptr_t)logits % 16 == 0 && (uintptr_t)dlogits % 16 == 0;
    if (aligned && V % (16 / sizeof(TIn)) == 0 && V % (16 / sizeof(TOut)) == 0)
        return launch_row_kernel<TIn, TOut, ONLINE, true, true, CAP>(ctx, N, V, smem, logits, targets, losses, dlogits,
                                                               dloss, cap, bug);
    return launch_row_kernel<TIn, TOut, ONLINE, true, false, CAP>(ctx, N, V, smem, logits, targets, losses, dlogits, dloss,
                                                            cap, bug);
}

template <class TIn, class TOut>
static int launch_rows(const char *ctx, int online, int64_t N, int64_t V, const void *logits, const int32_t *targets,
                       float *losses, void *dlogits, float dloss, float cap)
{
    const int bug = (int)kernels_planted_bug();
    if (cap > 0.0f) {
        if (online) return launch_variant<TIn, TOut, 1, true>(ctx, N, V, logits, targets, losses, dlogits, dloss, cap, bug);
        return launch_variant<TIn, TOut, 0, true>(ctx, N, V, logits, targets, losses, dlogits, dloss, cap, bug);
    }
    if (online) return launch_variant<TIn, TOut, 1, false>(ctx, N, V, logits, targets, losses, dlogits, dloss, cap, bug);
    return launch_variant<TIn, TOut, 0, false>(ctx, N, V, logits, targets, losses, dlogits, dloss, cap, bug);
}

extern "C" int kce_forward_backward(kpath path, int variant, int64_t N, int64_t V, const void *logits,
                                    const int32_t *targets, float *losses, void *dlogits, float dloss, float softcap)
{
    char ctx[160];
    snprintf(ctx, sizeof ctx, "cross_entropy %s/%s N=%lld V=%lld", kpath_name(path),
             variant >= 0 && variant < KCE_NVARIANTS ? kce_variants[variant].name : "?", (long long)N, (long long)V);
    if (path != KPATH_FP32 && path != KPATH_BF16 && path != KPATH_FP16)
        return kernels_fail("%s: paths fp32, bf16, fp16 (logits in fp8 would keep 3 mantissa bits)", ctx);
    if (variant < 0 || variant >= KCE_NVARIANTS) return kernels_fail("%s: unknown variant %d", ctx, variant);
    if (N <= 0 || V <= 0 || N > INT32_MAX) return kernels_fail("%s: N in [1, 2^31) and V >= 1 required", ctx);
    if (!logits || !targets || !losses) return kernels_fail("%s: null logits, targets or losses", ctx);
    if (!(softcap >= 0.0f) || isinf(softcap)) return kernels_fail("%s: soft-cap %g is not finite and >= 0", ctx, softcap);
    const int online = variant == KCE_ONLINE;
    const float cap = softcap;
    switch (kce_logits_format(path, variant)) {
    case PREC_BF16:
        return launch_rows<__nv_bfloat16, __nv_bfloat16>(ctx, online, N, V, logits, targets, losses, dlogits, dloss,
                                                         cap);
    case PREC_FP16: return launch_rows<__half, __half>(ctx, online, N, V, logits, targets, losses, dlogits, dloss, cap);
    default: return launch_rows<float, float>(ctx, online, N, V, logits, targets, losses, dlogits, dloss, cap);
    }
}

// ---- fused linear cross-entropy ------------------------------------------------

static void *chunk_logits, *chunk_dlogits;
static size_t chunk_logits_bytes, chunk_dlogits_bytes;

extern "C" size_t klinear_ce_workspace_bytes(void) { return chunk_logits_bytes + chunk_dlogits_bytes; }

extern "C" void klinear_ce_release(void)
{
    kernels_note_free(); // a graph that read these workspaces must not be replayed
    if (chunk_logits) cudaFree(chunk_logits);
    if (chunk_dlogits) cudaFree(chunk_dlogits);
    chunk_logits = chunk_dlogits = nullptr;
    chunk_logits_bytes = chunk_dlogits_bytes = 0;
}

extern "C" int klinear_ce(kpath path, int variant, int64_t N, int64_t C, int64_t V, const void *h, const void *W,
                          const int32_t *targets, float *losses, void *dh, float *dW, float dloss)
{
    char ctx[200];
    snprintf(ctx, sizeof ctx, "linear_cross_entropy %s/%s N=%lld C=%lld V=%lld", kpath_name(path),
             variant >= 0 && variant < KLCE_NVARIANTS ? klce_variants[variant].name : "?", (long long)N, (long long)C,
             (long long)V);
    if (path != KPATH_FP32 && path != KPATH_BF16 && path != KPATH_FP16)
        return kernels_fail("%s: paths fp32, bf16, fp16 (the fp8 lm_head is matmul's fp8 path)", ctx);
    if (variant < 0 || variant >= KLCE_NVARIANTS) return kernels_fail("%s: unknown variant %d", ctx, variant);
    if (N <= 0 || C <= 0 || V <= 0) return kernels_fail("%s: N, C and V must be positive", ctx);
    if (!h || !W || !targets || !losses) return kernels_fail("%s: null h, W, targets or losses", ctx);
    const int64_t R = klce_chunk_rows(variant) < N ? klce_chunk_rows(variant) : N;
    const size_t el = path == KPATH_FP32 ? 4 : 2;
    if (kworkspace_grow(ctx, &chunk_logits, &chunk_logits_bytes, (size_t)R * V * sizeof(float))) return -1;
    void *dl = chunk_logits; // fp32 path: dlogits overwrite the chunk's logits in place
    if (path != KPATH_FP32) {
        if (kworkspace_grow(ctx, &chunk_dlogits, &chunk_dlogits_bytes, (size_t)R * V * el)) return -1;
        dl = chunk_dlogits;
    }
    for (int64_t c0 = 0; c0 < N; c0 += R) {
        const int64_t r = N - c0 < R ? N - c0 : R;
        const void *hc = (const char *)h + (size_t)c0 * C * el;
        // logits [r,V] fp32 = h[c0:c0+r] W^T
        kmatmul_args lg = {r, V, C, 0, 1, hc, W, chunk_logits, nullptr, 1.0f, 0.0f, nullptr, 0,
                           PREC_FP32, PREC_FP32, nullptr, nullptr, 1};
        if (kmatmul(path, KMATMUL_ACC_DEFAULT, KMATMUL_FUSED, &lg)) return -1;
        int rc = path == KPATH_FP32
                     ? launch_rows<float, float>(ctx, 0, r, V, chunk_logits, targets + c0, losses + c0, dl, dloss, 0.0f)
                 : path == KPATH_BF16
                     ? launch_rows<float, __nv_bfloat16>(ctx, 0, r, V, chunk_logits, targets + c0, losses + c0, dl,
                                                         dloss, 0.0f)
                     : launch_rows<float, __half>(ctx, 0, r, V, chunk_logits, targets + c0, losses + c0, dl, dloss,
                                                  0.0f);
        if (rc) return -1;
        if (dh) { // dh[c0:c0+r] [r,C] = dlogits [r,V] . W [V,C]
            kmatmul_args a = {r, C, V, 0, 0, dl, W, (char *)dh + (size_t)c0 * C * el, nullptr, 1.0f, 0.0f, nullptr, 0,
                              PREC_FP32, PREC_FP32, nullptr, nullptr, 0};
            if (kmatmul(path, KMATMUL_ACC_DEFAULT, KMATMUL_FUSED, &a)) return -1;
        }
        if (dW) { // dW [V,C] (+)= dlogits^T [V,r] . h[c0:c0+r] [r,C], fp32 across chunks
            kmatmul_args b = {V, C, r, 1, 0, dl, hc, dW, c0 > 0 ? dW : nullptr, 1.0f, c0 > 0 ? 1.0f : 0.0f, nullptr,
                              0, PREC_FP32, PREC_FP32, nullptr, nullptr, 1};
            if (kmatmul(path, KMATMUL_ACC_DEFAULT, KMATMUL_FUSED, &b)) return -1;
        }
    }
    return 0;
}
