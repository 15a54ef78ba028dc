// kernels/layernorm.cu — LayerNorm forward and backward (see layernorm.h).
//
// Shapes: x, y, dy, dx (N, C) row-major; gain, bias, dgain, dbias (C);
// mean, rstd (N) fp32.  A row group of RT threads (256: block tree, 32:
// warp tree, 1: sequential) owns a row, with the partition of kreduce.cuh;
// a block per row has only the warps that hold terms (C = 768 bf16: 96
// threads), and narrow rows run on fewer lanes that replay the same tree
// (krow_group).
// Replicas: R blocks of rows_per_replica rows, each with its own gain and
// bias (R, C); row i uses the parameters of replica i / rows_per_replica,
// and dgain, dbias (R, C) reduce each replica's rows alone.  A single call is
// one replica of N rows: the same kernels, the same bits.
#include <cuda_runtime.h>

#include "kernels/common/kcolsum.cuh"
#include "kernels/common/klaunch.cuh"
#include "kernels/common/kreduce.cuh"
#include "kernels/layernorm.h"
#include "kernels/registry.h"

// ---- registry entry (kernels/registry.h): name, paths, fp8 note, variants ----

static const kvariant variants[KLAYERNORM_NVARIANTS] = {
    {"two_pass", "mean, then the sum of squared deviations from it; one block of 256 threads per row (block tree)"},
    {"one_pass", "sum(x) and sum(x^2) in one sweep, var = E[x^2] - mean^2 clamped at 0 (the textbook formula); block tree"},
    {"welford", "Welford's running update per thread, then Chan-Golub-LeVeque pairwise combination over the block tree"},
    {"warp_tree", "two passes, one warp per row (strided partial sums and a warp butterfly)"},
    {"sequential", "two passes, one thread per row summing left to right"},
};

extern "C" const kop kop_layernorm = {
    "layernorm",
    "LayerNorm with gain and bias (biased variance, eps inside the sqrt); backward dx, dgain, dbias",
    KPATHS_NO_FP8,
    "no fp8 path: the statistics need the input's full range, and the output's fp8 cast for the next matmul "
    "is part of matmul's fp8 path (per-tensor scale from the current amax)",
    variants,
    KLAYERNORM_NVARIANTS,
};

namespace {

constexpr int kBlock = 256;
enum Stats { TWO_PASS = 0, ONE_PASS = 1, WELFORD = 2 };

// Welford state: count, mean, sum of squared deviations.
struct welford {
    float n, m, m2;
};

__device__ __forceinline__ void welford_add(welford &w, float x)
{
    w.n += 1.0f;
    float d = x - w.m;
    w.m = w.m + __fdiv_rn(d, w.n);
    float d2 = x - w.m;
    w.m2 = w.m2 + d * d2;
}

// Chan, Golub and LeVeque's pairwise update; an empty side returns the other.
__device__ __forceinline__ welford welford_combine(welford a, welford b)
{
    if (b.n == 0.0f) return a;
    if (a.n == 0.0f) return b;
    welford r;
    r.n = a.n + b.n;
    float delta = b.m - a.m;
    r.m = a.m + delta * __fdiv_rn(b.n, r.n);
    r.m2 = (a.m2 + b.m2) + (delta * delta) * __fdiv_rn(a.n * b.n, r.n);
    return r;
}

__device__ __forceinline__ welford welford_shfl(welford w, int offset)
{
    welford o;
    o.n = __shfl_xor_sync(0xffffffffu, w.n, offset);
    o.m = __shfl_xor_sync(0xffffffffu, w.m, offset);
    o.m2 = __shfl_xor_sync(0xffffffffu, w.m2, offset);
    return o;
}

__device__ __forceinline__ welford welford_warp(welford w)
{
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) w = welford_combine(w, welford_shfl(w, offset));
    return w;
}

// Over a row's RT threads; with G < RT lanes standing in (krow_group), the
// threads without terms are empty states, which welford_combine passes over
// exactly: the butterfly's offsets below G are the whole tree.
template <int RT, int G> __device__ __forceinline__ welford welford_group(welford w, welford *scratch)
{
    if constexpr (G < RT) {
#pragma unroll
        for (int offset = G / 2; offset > 0; offset >>= 1) w = welford_combine(w, welford_shfl(w, offset));
        return w;
    }
    if constexpr (RT == 1) return w;
    w = welford_warp(w);
    if constexpr (RT == 32) return w;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    if (lane == 0) scratch[warp] = w;
    __syncthreads();
    if (warp == 0) {
        welford v = lane < warps ? scratch[lane] : welford{0.0f, 0.0f, 0.0f};
        v = welford_warp(v);
        if (lane == 0) scratch[0] = v;
    }
    __syncthreads();
    return scratch[0];
}

// G: the lanes that run a row (krow_group; G < RT for narrow rows).
template <typename T, int RT, int G, int V, int STATS>
__global__ void layernorm_forward_kernel(T *__restrict__ y, float *__restrict__ mean_out, float *__restrict__ rstd_out,
                                         const T *__restrict__ x, const T *__restrict__ gain,
                                         const T *__restrict__ bias, int64_t N, int64_t C, int64_t rows_per_replica,
                                         float eps, int bug)
{
    __shared__ float scratch[32];
    __shared__ welford wscratch[32];
    krow_group<RT, G> g;
    const bool live = krow_live(g, N);
    if (!live && !krow_group<RT, G>::kSubWarp) return; // whole warps / threads only: no block barrier follows
    gain += g.row / rows_per_replica * C;
    bias += g.row / rows_per_replica * C;
    const T *xr = x + g.row * C;
    const float inv_c_num = (float)C;
    float mean, var;
    if (STATS == WELFORD) {
        welford w{0.0f, 0.0f, 0.0f};
        for (int64_t base = (int64_t)g.t * V; base < C; base += (int64_t)RT * V) {
            float v[V];
            kvec_io<T, V>::load(xr + base, v);
#pragma unroll
            for (int j = 0; j < V; j++)
                if (!(bug == KBUG_DROP_TERM && base + j == C - 1)) welford_add(w, v[j]);
        }
        w = welford_group<RT, G>(w, wscratch);
        mean = w.m;
        var = __fdiv_rn(w.m2, inv_c_num);
    } else {
        float s = 0.0f, sq = 0.0f;
        for (int64_t base = (int64_t)g.t * V; base < C; base += (int64_t)RT * V) {
            float v[V];
            kvec_io<T, V>::load(xr + base, v);
#pragma unroll
            for (int j = 0; j < V; j++) {
                if (bug == KBUG_DROP_TERM && base + j == C - 1) continue;
                s += v[j];
                if (STATS == ONE_PASS) sq = fmaf(v[j], v[j], sq);
            }
        }
        mean = __fdiv_rn(krow_group_sum<RT, G>(s, scratch), inv_c_num);
        if (STATS == ONE_PASS) {
            float ms = __fdiv_rn(krow_group_sum<RT, G>(sq, scratch), inv_c_num);
            var = fmaxf(ms - mean * mean, 0.0f);
        } else {
            float d2 = 0.0f;
            for (int64_t base = (int64_t)g.t * V; base < C; base += (int64_t)RT * V) {
                float v[V];
                kvec_io<T, V>::load(xr + base, v);
#pragma unroll
                for (int j = 0; j < V; j++) {
                    if (bug == KBUG_DROP_TERM && base + j == C - 1) continue;
                    float d = v[j] - mean;
                    d2 = fmaf(d, d, d2);
                }
            }
            var = __fdiv_rn(krow_group_sum<RT, G>(d2, scratch), inv_c_num);
        }
    }
    float r = rsqrtf(var + eps);
    if (live && g.t == 0) {
        mean_out[g.row] = kfrom_float<float>(mean, bug);
        rstd_out[g.row] = kfrom_float<float>(r, bug);
    }
    T *yr = y + g.row * C;
    for (int64_t base = (int64_t)g.t * V; base < C; base += (int64_t)RT * V) {
        float v[V], gv[V], bv[V], out[V];
        kvec_io<T, V>::load(xr + base, v);
        kvec_io<T, V>::load(gain + base, gv);
        kvec_io<T, V>::load(bias + base, bv);
#pragma unroll
        for (int j = 0; j < V; j++) out[j] = ((v[j] - mean) * r) * gv[j] + bv[j];
        if (live) kvec_io<T, V>::store(yr + base, out, bug);
    }
}

template <typename T, int RT, int G, int V>
__global__ void layernorm_backward_kernel(T *__restrict__ dx, const T *__restrict__ dy, const T *__restrict__ x,
                                          const T *__restrict__ gain, const float *__restrict__ mean_in,
                                          const float *__restrict__ rstd_in, int64_t N, int64_t C,
                                          int64_t rows_per_replica, int bug)
{
    __shared__ float scratch[32];
    krow_group<RT, G> g;
    const bool live = krow_live(g, N);
    if (!live && !krow_group<RT, G>::kSubWarp) return; // whole warps / threads only: no block barrier follows
    gain += g.row / rows_per_replica * C;
    const T *xr = x + g.row * C, *dyr = dy + g.row * C;
    const float mean = mean_in[g.row], r = rstd_in[g.row];
    float sg = 0.0f, sgx = 0.0f;
    for (int64_t base = (int64_t)g.t * V; base < C; base += (int64_t)RT * V) {
        float v[V], d[V], gv[V];
        kvec_io<T, V>::load(xr + base, v);
        kvec_io<T, V>::load(dyr + base, d);
        kvec_io<T, V>::load(gain + base, gv);
#pragma unroll
        for (int j = 0; j < V; j++) {
            if (bug == KBUG_DROP_TERM && base + j == C - 1) continue;
            float gd = gv[j] * d[j];
            float xhat = (v[j] - mean) * r;
            sg += gd;
            sgx = fmaf(gd, xhat, sgx);
        }
    }
    const float a = __fdiv_rn(krow_group_sum<RT, G>(sg, scratch), (float)C);
    const float b = __fdiv_rn(krow_group_sum<RT, G>(sgx, scratch), (float)C);
    T *dxr = dx + g.row * C;
    for (int64_t base = (int64_t)g.t * V; base < C; base += (int64_t)RT * V) {
        float v[V], d[V], gv[V], out[V];
        kvec_io<T, V>::load(xr + base, v);
        kvec_io<T, V>::load(dyr + base, d);
        kvec_io<T, V>::load(gain + base, gv);
#pragma unroll
        for (int j = 0; j < V; j++) {
            float gd = gv[j] * d[j];
            float xhat = (v[j] - mean) * r;
            out[j] = ((gd - a) - xhat * b) * r;
        }
        if (live) kvec_io<T, V>::store(dxr + base, out, bug);
    }
}

// dgain[c] = sum_rows dy xhat, dbias[c] = sum_rows dy, in the order of
// kcolsum.cuh (16 row lanes in order, then the 16 partials in order; no
// atomics), each replica's rows alone.
struct params_step {
    __device__ __forceinline__ void operator()(float *acc, float d, float xv, float mean, float rstd) const
    {
        float xhat = (xv - mean) * rstd;
        acc[0] = fmaf(d, xhat, acc[0]);
        acc[1] += d;
    }
};

int shape_of(const char *what, const ktensor *t, const ktensor *like, int64_t *N, int64_t *C)
{
    if (!t || !t->data || t->ndim < 1) return kernels_fail("layernorm %s: tensor missing", what);
    int64_t c = t->shape[t->ndim - 1];
    if (like && (like->format != t->format || ktensor_numel(like) != ktensor_numel(t) ||
                 like->shape[like->ndim - 1] != c))
        return kernels_fail("layernorm %s: shape or format differs from x (%lld elements of %s vs %lld of %s)", what,
                            (long long)ktensor_numel(t), prec_format_name(t->format), (long long)ktensor_numel(like),
                            prec_format_name(like->format));
    *N = ktensor_numel(t) / c;
    *C = c;
    return 0;
}

// A per-replica vector: R x C elements.
int vec_ok(const char *what, const ktensor *v, const ktensor *x, int64_t C, int64_t R)
{
    if (!v || !v->data || v->format != x->format || ktensor_numel(v) != R * C)
        return kernels_fail("layernorm %s: needs %lld x %lld elements of %s", what, (long long)R, (long long)C,
                            prec_format_name(x->format));
    return 0;
}

// The rows of x are R replicas' N each.
int replicas_ok(const char *what, int64_t rows, int64_t R)
{
    if (R < 1 || R > 65535 || rows % R != 0)
        return kernels_fail("layernorm %s: %lld rows are not %lld replicas' (R in [1, 65535])", what, (long long)rows,
                            (long long)R);
    return 0;
}

// The device's multiprocessor count (the column reduction's tile width depends on it).
int multiprocessors(int *sms)
{
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, dev);
    if (e != cudaSuccess) return kernels_fail("layernorm backward: device attributes: %s", cudaGetErrorString(e));
    return 0;
}

int rows_threads(int variant)
{
    return variant == KLAYERNORM_WARP_TREE ? 32 : variant == KLAYERNORM_SEQUENTIAL ? 1 : kBlock;
}

template <typename T, int RT, int V, int STATS>
void launch_forward(T *y, float *mean, float *rstd, const T *x, const T *gain, const T *bias, int64_t N, int64_t C,
                    int64_t rpr, float eps, int bug)
{
    krow_dispatch<RT>(N, C, V, [&](auto lanes, dim3 grid, dim3 block) {
        layernorm_forward_kernel<T, RT, decltype(lanes)::value, V, STATS><<<grid, block, 0, kstream()>>>(
            y, mean, rstd, x, gain, bias, N, C, rpr, eps, bug);
    });
}

// N: all rows (R replicas' rpr each).
template <typename T, int V>
void forward_t(int variant, T *y, float *mean, float *rstd, const T *x, const T *gain, const T *bias, int64_t N,
               int64_t C, int64_t rpr, float eps, int bug)
{
    switch (variant) {
    case KLAYERNORM_TWO_PASS:
        launch_forward<T, kBlock, V, TWO_PASS>(y, mean, rstd, x, gain, bias, N, C, rpr, eps, bug);
        break;
    case KLAYERNORM_ONE_PASS:
        launch_forward<T, kBlock, V, ONE_PASS>(y, mean, rstd, x, gain, bias, N, C, rpr, eps, bug);
        break;
    case KLAYERNORM_WELFORD: launch_forward<T, kBlock, V, WELFORD>(y, mean, rstd, x, gain, bias, N, C, rpr, eps, bug); break;
    case KLAYERNORM_WARP_TREE: launch_forward<T, 32, V, TWO_PASS>(y, mean, rstd, x, gain, bias, N, C, rpr, eps, bug); break;
    case KLAYERNORM_SEQUENTIAL: launch_forward<T, 1, V, TWO_PASS>(y, mean, rstd, x, gain, bias, N, C, rpr, eps, bug); break;
    }
}

template <typename T, int RT, int V>
void launch_backward(T *dx, const T *dy, const T *x, const T *gain, const float *mean, const float *rstd, int64_t N,
                     int64_t C, int64_t rpr, int bug)
{
    krow_dispatch<RT>(N, C, V, [&](auto lanes, dim3 grid, dim3 block) {
        layernorm_backward_kernel<T, RT, decltype(lanes)::value, V><<<grid, block, 0, kstream()>>>(
            dx, dy, x, gain, mean, rstd, N, C, rpr, bug);
    });
}

template <typename T, int V>
void backward_t(int variant, T *dx, const T *dy, const T *x, const T *gain, const float *mean, const float *rstd,
                int64_t N, int64_t C, int64_t rpr, int bug)
{
    int rt = rows_threads(variant);
    if (rt == 32) launch_backward<T, 32, V>(dx, dy, x, gain, mean, rstd, N, C, rpr, bug);
    else if (rt == 1) launch_backward<T, 1, V>(dx, dy, x, gain, mean, rstd, N, C, rpr, bug);
    else launch_backward<T, kBlock, V>(dx, dy, x, gain, mean, rstd, N, C, rpr, bug);
}

} // namespace

extern "C" int klayernorm_row_threads(int variant) { return rows_threads(variant); }

extern "C" int klayernorm_row_vec(int64_t C, prec_format f) { return krow_vec_of(C, f); }

extern "C" int64_t klayernorm_row_depth(int64_t C, prec_format f, int variant)
{
    return krow_depth(C, f, rows_threads(variant));
}

extern "C" int64_t klayernorm_col_depth(int64_t N)
{
    return (N + kColLanes - 1) / kColLanes + (kColLanes - 1);
}

extern "C" int klayernorm_forward_replicas(int64_t replicas, ktensor *y, float *mean, float *rstd, const ktensor *x,
                                           const ktensor *gain, const ktensor *bias, float eps, int variant)
{
    int64_t N = 0, C = 0, N2 = 0, C2 = 0;
    if (shape_of("forward x", x, NULL, &N, &C) || shape_of("forward y", y, x, &N2, &C2) ||
        replicas_ok("forward", N, replicas) || vec_ok("forward gain", gain, x, C, replicas) ||
        vec_ok("forward bias", bias, x, C, replicas))
        return -1;
    if (!mean || !rstd) return kernels_fail("layernorm forward: mean/rstd buffers missing");
    if (variant < 0 || variant >= KLAYERNORM_NVARIANTS) return kernels_fail("layernorm forward: unknown variant %d", variant);
    const int64_t rpr = N / replicas;
    int bug = kernels_planted_bug();
    switch (x->format) {
#define LN_FWD(TYPE)                                                                                               \
    if (krow_vec<TYPE>(C) > 1)                                                                                     \
        forward_t<TYPE, kvec_width<TYPE>()>(variant, (TYPE *)y->data, mean, rstd, (const TYPE *)x->data,          \
                                            (const TYPE *)gain->data, (const TYPE *)bias->data, N, C, rpr, eps,   \
                                            bug);                                                                  \
    else forward_t<TYPE, 1>(variant, (TYPE *)y->data, mean, rstd, (const TYPE *)x->data, (const TYPE *)gain->data, \
                            (const TYPE *)bias->data, N, C, rpr, eps, bug);
    case PREC_FP32: LN_FWD(float) break;
    case PREC_BF16: LN_FWD(__nv_bfloat16) break;
    case PREC_FP16: LN_FWD(__half) break;
#undef LN_FWD
    default: return kernels_fail("layernorm forward: no %s path", prec_format_name(x->format));
    }
    return krow_launched("layernorm", "forward", N, C);
}

extern "C" int klayernorm_forward(ktensor *y, float *mean, float *rstd, const ktensor *x, const ktensor *gain,
                                  const ktensor *bias, float eps, int variant)
{
    return klayernorm_forward_replicas(1, y, mean, rstd, x, gain, bias, eps, variant);
}

extern "C" int klayernorm_backward_replicas(int64_t replicas, ktensor *dx, ktensor *dgain, ktensor *dbias,
                                            const ktensor *dy, const ktensor *x, const ktensor *gain,
                                            const float *mean, const float *rstd, int variant)
{
    int64_t N = 0, C = 0, N2 = 0, C2 = 0;
    if (shape_of("backward x", x, NULL, &N, &C) || shape_of("backward dy", dy, x, &N2, &C2) ||
        shape_of("backward dx", dx, x, &N2, &C2) || replicas_ok("backward", N, replicas) ||
        vec_ok("backward gain", gain, x, C, replicas) || vec_ok("backward dgain", dgain, x, C, replicas) ||
        vec_ok("backward dbias", dbias, x, C, replicas))
        return -1;
    if (!mean || !rstd) return kernels_fail("layernorm backward: mean/rstd missing");
    if (variant < 0 || variant >= KLAYERNORM_NVARIANTS) return kernels_fail("layernorm backward: unknown variant %d", variant);
    const int64_t rpr = N / replicas;
    int bug = kernels_planted_bug(), sms = 0;
    if (multiprocessors(&sms)) return -1;
    switch (x->format) {
#define LN_BWD(TYPE)                                                                                                \
    if (krow_vec<TYPE>(C) > 1)                                                                                      \
        backward_t<TYPE, kvec_width<TYPE>()>(variant, (TYPE *)dx->data, (const TYPE *)dy->data,                    \
                                             (const TYPE *)x->data, (const TYPE *)gain->data, mean, rstd, N, C,    \
                                             rpr, bug);                                                             \
    else backward_t<TYPE, 1>(variant, (TYPE *)dx->data, (const TYPE *)dy->data, (const TYPE *)x->data,              \
                             (const TYPE *)gain->data, mean, rstd, N, C, rpr, bug);                                 \
    kcolsum_launch<TYPE, 2, true>(kstream(), sms, (TYPE *)dgain->data, (TYPE *)dbias->data, (const TYPE *)dy->data, \
                                  (const TYPE *)x->data, mean, rstd, rpr, C, replicas, bug, params_step{});
    case PREC_FP32: LN_BWD(float) break;
    case PREC_BF16: LN_BWD(__nv_bfloat16) break;
    case PREC_FP16: LN_BWD(__half) break;
#undef LN_BWD
    default: return kernels_fail("layernorm backward: no %s path", prec_format_name(x->format));
    }
    return krow_launched("layernorm", "backward", N, C);
}

extern "C" int klayernorm_backward(ktensor *dx, ktensor *dgain, ktensor *dbias, const ktensor *dy, const ktensor *x,
                                   const ktensor *gain, const float *mean, const float *rstd, int variant)
{
    return klayernorm_backward_replicas(1, dx, dgain, dbias, dy, x, gain, mean, rstd, variant);
}
