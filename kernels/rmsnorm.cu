// kernels/rmsnorm.cu — RMSNorm forward and backward (see rmsnorm.h).
//
// Shapes: x, y, dy, dx (N, C) row-major; gain, dgain (C); rstd (N) fp32.
// A "row group" of RT threads owns one row: RT = 256 (block tree, one block
// per row), 32 (warp tree, eight rows per block) or 1 (sequential, one
// thread per row); narrow rows run on fewer lanes that replay the same tree
// (krow_group in kreduce.cuh: a bf16 row of 256 takes 32 lanes, of 64 eight).
// Rows are read with 16-byte vectors when C allows it (kreduce.cuh); the
// partition, and so the rounding order, is fixed.
// Replicas: R blocks of rows_per_replica rows, each with its own gain (R, C);
// row i uses replica i / rows_per_replica's gain, and dgain (R, C) reduces
// each replica's rows alone.  A single call is one replica of N rows.
#include <cuda_runtime.h>

#include "kernels/common/kcolsum.cuh"
#include "kernels/common/klaunch.cuh"
#include "kernels/common/kreduce.cuh"
#include "kernels/registry.h"
#include "kernels/rmsnorm.h"

// ---- registry entry (kernels/registry.h): name, paths, fp8 note, variants ----

static const kvariant variants[KRMSNORM_NVARIANTS] = {
    {"block_tree", "one block of 256 threads per row: strided partial sums, warp butterflies, then a butterfly over warps; fp32 throughout, gain in fp32, one rounding of y (Gemma's placement)"},
    {"warp_tree", "one warp per row: strided partial sums, then a warp butterfly; fp32 throughout"},
    {"sequential", "one thread per row sums left to right; fp32 throughout"},
    {"llama", "block tree; x * rstd rounded to the storage format before the gain multiply, which rounds again (Llama's placement)"},
    {"none", "block tree; no upcast: x^2, the mean, + eps, rsqrt, x * rstd and * gain each rounded to the storage format, only the sum in fp32"},
};

extern "C" const kop kop_rmsnorm = {
    "rmsnorm",
    "RMSNorm with and without a gain: y = gain * x / sqrt(mean(x^2) + eps); backward dx, dgain",
    KPATHS_NO_FP8,
    "no fp8 path: a norm's output feeds the next matmul, whose fp8 cast with a per-tensor scale belongs to "
    "matmul's path; storing the norm's own inputs in fp8 would round the residual stream to 3 mantissa bits",
    variants,
    KRMSNORM_NVARIANTS,
};

namespace {

enum Placement { GEMMA = 0, LLAMA = 1, NO_UPCAST = 2 };

constexpr int kBlock = 256;

// Round to the storage format and back: the "no upcast" steps.  They are
// conversions into the storage format like the final store, so the planted
// truncation applies to them too.
template <typename T> __device__ __forceinline__ float in_storage(float v, int bug) { return kto_float(kfrom_float<T>(v, bug)); }

// G: the lanes that run a row (krow_group; G < RT for narrow rows).
template <typename T, int RT, int G, int V, int PLACE>
__global__ void rmsnorm_forward_kernel(T *__restrict__ y, float *__restrict__ rstd, const T *__restrict__ x,
                                       const T *__restrict__ gain, int64_t N, int64_t C, int64_t rows_per_replica,
                                       float eps, int bug)
{
    __shared__ float scratch[32];
    krow_group<RT, G> g;
    const bool live = krow_live(g, N);
    if (!live && !krow_group<RT, G>::kSubWarp) return; // whole warps / threads only: no block barrier follows
    if (gain) gain += g.row / rows_per_replica * C;
    const T *xr = x + g.row * C;
    float acc = 0.0f;
    for (int64_t base = (int64_t)g.t * V; base < C; base += (int64_t)RT * V) {
        float v[V];
        kvec_io<T, V>::load(xr + base, v);
#pragma unroll
        for (int j = 0; j < V; j++) {
            if (bug == KBUG_DROP_TERM && base + j == C - 1) continue;
            if (PLACE == NO_UPCAST) acc += in_storage<T>(v[j] * v[j], bug);
            else acc = fmaf(v[j], v[j], acc);
        }
    }
    float ss = krow_group_sum<RT, G>(acc, scratch);
    float ms = __fdiv_rn(ss, (float)C);
    float r;
    if (PLACE == NO_UPCAST) {
        ms = in_storage<T>(ms, bug);
        r = in_storage<T>(rsqrtf(in_storage<T>(ms + eps, bug)), bug);
    } else {
        r = rsqrtf(ms + eps);
    }
    if (live && g.t == 0) rstd[g.row] = kfrom_float<float>(r, bug);
    T *yr = y + g.row * C;
    for (int64_t base = (int64_t)g.t * V; base < C; base += (int64_t)RT * V) {
        float v[V], gv[V], out[V];
        kvec_io<T, V>::load(xr + base, v);
        if (gain) kvec_io<T, V>::load(gain + base, gv);
#pragma unroll
        for (int j = 0; j < V; j++) {
            float n = v[j] * r;
            if (PLACE != GEMMA) n = in_storage<T>(n, bug);
            out[j] = gain ? n * gv[j] : n;
        }
        if (live) kvec_io<T, V>::store(yr + base, out, bug);
    }
}

// dx = rstd g - (rstd^3 / C) x sum(g x), g = gain * dy.
template <typename T, int RT, int G, int V>
__global__ void rmsnorm_backward_kernel(T *__restrict__ dx, const T *__restrict__ dy, const T *__restrict__ x,
                                        const T *__restrict__ gain, const float *__restrict__ rstd, int64_t N,
                                        int64_t C, int64_t rows_per_replica, int bug)
{
    __shared__ float scratch[32];
    krow_group<RT, G> g;
    const bool live = krow_live(g, N);
    if (!live && !krow_group<RT, G>::kSubWarp) return; // whole warps / threads only: no block barrier follows
    if (gain) gain += g.row / rows_per_replica * C;
    const T *xr = x + g.row * C, *dyr = dy + g.row * C;
    float acc = 0.0f;
    for (int64_t base = (int64_t)g.t * V; base < C; base += (int64_t)RT * V) {
        float v[V], d[V], gv[V];
        kvec_io<T, V>::load(xr + base, v);
        kvec_io<T, V>::load(dyr + base, d);
        if (gain) kvec_io<T, V>::load(gain + base, gv);
#pragma unroll
        for (int j = 0; j < V; j++) {
            if (bug == KBUG_DROP_TERM && base + j == C - 1) continue;
            float gd = gain ? gv[j] * d[j] : d[j];
            acc = fmaf(gd, v[j], acc);
        }
    }
    float dot = krow_group_sum<RT, G>(acc, scratch);
    float r = rstd[g.row];
    float c = __fdiv_rn(dot * r * r * r, (float)C);
    T *dxr = dx + g.row * C;
    for (int64_t base = (int64_t)g.t * V; base < C; base += (int64_t)RT * V) {
        float v[V], d[V], gv[V], out[V];
        kvec_io<T, V>::load(xr + base, v);
        kvec_io<T, V>::load(dyr + base, d);
        if (gain) kvec_io<T, V>::load(gain + base, gv);
#pragma unroll
        for (int j = 0; j < V; j++) {
            float gd = gain ? gv[j] * d[j] : d[j];
            out[j] = r * gd - c * v[j];
        }
        if (live) kvec_io<T, V>::store(dxr + base, out, bug);
    }
}

// dgain[c] = sum over rows of dy * (x * rstd), in the order of kcolsum.cuh
// (16 row lanes in order, then the 16 partials in order; no atomics), each
// replica's rows alone.
struct dgain_step {
    __device__ __forceinline__ void operator()(float *acc, float d, float xv, float, float rstd) const
    {
        acc[0] += (xv * rstd) * d;
    }
};

// The device's multiprocessor count (the column reduction's tile width depends on it).
int multiprocessors(int *sms)
{
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, dev);
    if (e != cudaSuccess) return kernels_fail("rmsnorm backward: device attributes: %s", cudaGetErrorString(e));
    return 0;
}

int check_2d(const char *what, const ktensor *t, const ktensor *like, int64_t *N, int64_t *C)
{
    if (!t || !t->data) return kernels_fail("rmsnorm %s: %s is missing", what, "a tensor");
    if (t->ndim < 1) return kernels_fail("rmsnorm %s: tensor has no dimensions", what);
    int64_t c = t->shape[t->ndim - 1], n = ktensor_numel(t) / c;
    if (like && (like->format != t->format || ktensor_numel(like) != ktensor_numel(t) ||
                 like->shape[like->ndim - 1] != c))
        return kernels_fail("rmsnorm %s: shapes/formats differ (%lld x %lld %s vs %lld elements %s)", what,
                            (long long)n, (long long)c, prec_format_name(t->format),
                            (long long)ktensor_numel(like), prec_format_name(like->format));
    *N = n;
    *C = c;
    return 0;
}

// A per-replica vector (or none): R x C elements.
int check_vec(const char *what, const ktensor *v, const ktensor *x, int64_t C, int64_t R)
{
    if (!v) return 0;
    if (v->format != x->format || ktensor_numel(v) != R * C)
        return kernels_fail("rmsnorm %s: gain must be %lld x %lld elements of %s (got %lld of %s)", what, (long long)R,
                            (long long)C, prec_format_name(x->format), (long long)ktensor_numel(v),
                            prec_format_name(v->format));
    return 0;
}

// The rows of x are R replicas' N each.
int check_replicas(const char *what, int64_t rows, int64_t R)
{
    if (R < 1 || R > 65535 || rows % R != 0)
        return kernels_fail("rmsnorm %s: %lld rows are not %lld replicas' (R in [1, 65535])", what, (long long)rows,
                            (long long)R);
    return 0;
}

// N: all rows (R replicas' rpr each).
template <typename T, int RT, int V, int PLACE>
void launch_forward(T *y, float *rstd, const T *x, const T *gain, int64_t N, int64_t C, int64_t rpr, float eps,
                    int bug)
{
    krow_dispatch<RT>(N, C, V, [&](auto lanes, dim3 grid, dim3 block) {
        rmsnorm_forward_kernel<T, RT, decltype(lanes)::value, V, PLACE><<<grid, block, 0, kstream()>>>(
            y, rstd, x, gain, N, C, rpr, eps, bug);
    });
}

template <typename T, int V>
void forward_variant(int variant, T *y, float *rstd, const T *x, const T *gain, int64_t N, int64_t C, int64_t rpr,
                     float eps, int bug)
{
    switch (variant) {
    case KRMSNORM_BLOCK_TREE: launch_forward<T, kBlock, V, GEMMA>(y, rstd, x, gain, N, C, rpr, eps, bug); break;
    case KRMSNORM_WARP_TREE: launch_forward<T, 32, V, GEMMA>(y, rstd, x, gain, N, C, rpr, eps, bug); break;
    case KRMSNORM_SEQUENTIAL: launch_forward<T, 1, V, GEMMA>(y, rstd, x, gain, N, C, rpr, eps, bug); break;
    case KRMSNORM_LLAMA: launch_forward<T, kBlock, V, LLAMA>(y, rstd, x, gain, N, C, rpr, eps, bug); break;
    case KRMSNORM_NONE: launch_forward<T, kBlock, V, NO_UPCAST>(y, rstd, x, gain, N, C, rpr, eps, bug); break;
    }
}

template <typename T, int RT, int V>
void launch_backward(T *dx, const T *dy, const T *x, const T *gain, const float *rstd, int64_t N, int64_t C,
                     int64_t rpr, int bug)
{
    krow_dispatch<RT>(N, C, V, [&](auto lanes, dim3 grid, dim3 block) {
        rmsnorm_backward_kernel<T, RT, decltype(lanes)::value, V><<<grid, block, 0, kstream()>>>(dx, dy, x, gain, rstd,
                                                                                               N, C, rpr, bug);
    });
}

template <typename T, int V>
void backward_variant(int variant, T *dx, const T *dy, const T *x, const T *gain, const float *rstd, int64_t N,
                      int64_t C, int64_t rpr, int bug)
{
    if (variant == KRMSNORM_WARP_TREE) launch_backward<T, 32, V>(dx, dy, x, gain, rstd, N, C, rpr, bug);
    else if (variant == KRMSNORM_SEQUENTIAL) launch_backward<T, 1, V>(dx, dy, x, gain, rstd, N, C, rpr, bug);
    else launch_backward<T, kBlock, V>(dx, dy, x, gain, rstd, N, C, rpr, bug);
}

int rows_per_thread_group(int variant) { return variant == KRMSNORM_WARP_TREE ? 32 : variant == KRMSNORM_SEQUENTIAL ? 1 : kBlock; }

} // namespace

extern "C" int64_t krmsnorm_row_depth(int64_t C, prec_format f, int variant)
{
    return krow_depth(C, f, rows_per_thread_group(variant)); // the first fma rounds too
}

extern "C" int64_t krmsnorm_col_depth(int64_t N)
{
    int64_t per_lane = (N + kColLanes - 1) / kColLanes;
    return (per_lane - 1) + (kColLanes - 1); // each lane's rows in order, then the 16 partials in order
}

extern "C" int krmsnorm_forward_replicas(int64_t replicas, ktensor *y, float *rstd, const ktensor *x,
                                         const ktensor *gain, float eps, int variant)
{
    int64_t N = 0, C = 0, N2 = 0, C2 = 0;
    if (check_2d("forward x", x, NULL, &N, &C) || check_2d("forward y", y, x, &N2, &C2) ||
        check_replicas("forward", N, replicas) || check_vec("forward", gain, x, C, replicas))
        return -1;
    if (!rstd) return kernels_fail("rmsnorm forward: rstd buffer is missing");
    if (variant < 0 || variant >= KRMSNORM_NVARIANTS) return kernels_fail("rmsnorm forward: unknown variant %d", variant);
    const int64_t rpr = N / replicas;
    int bug = kernels_planted_bug();
    const void *g = gain ? gain->data : nullptr;
    switch (x->format) {
#define RMS_FWD(TYPE)                                                                                          \
    if (krow_vec<TYPE>(C) > 1)                                                                                 \
        forward_variant<TYPE, kvec_width<TYPE>()>(variant, (TYPE *)y->data, rstd, (const TYPE *)x->data,      \
                                                  (const TYPE *)g, N, C, rpr, eps, bug);                     \
    else forward_variant<TYPE, 1>(variant, (TYPE *)y->data, rstd, (const TYPE *)x->data, (const TYPE *)g, N, C, \
                                  rpr, eps, bug);
    case PREC_FP32: RMS_FWD(float) break;
    case PREC_BF16: RMS_FWD(__nv_bfloat16) break;
    case PREC_FP16: RMS_FWD(__half) break;
#undef RMS_FWD
    default: return kernels_fail("rmsnorm forward: no %s path", prec_format_name(x->format));
    }
    return krow_launched("rmsnorm", "forward", N, C);
}

extern "C" int krmsnorm_forward(ktensor *y, float *rstd, const ktensor *x, const ktensor *gain, float eps, int variant)
{
    return krmsnorm_forward_replicas(1, y, rstd, x, gain, eps, variant);
}

extern "C" int krmsnorm_backward_replicas(int64_t replicas, ktensor *dx, ktensor *dgain, const ktensor *dy,
                                          const ktensor *x, const ktensor *gain, const float *rstd, int variant)
{
    int64_t N = 0, C = 0, N2 = 0, C2 = 0;
    if (check_2d("backward x", x, NULL, &N, &C) || check_2d("backward dy", dy, x, &N2, &C2) ||
        check_2d("backward dx", dx, x, &N2, &C2) || check_replicas("backward", N, replicas) ||
        check_vec("backward", gain, x, C, replicas) || check_vec("backward dgain", dgain, x, C, replicas))
        return -1;
    if (!rstd) return kernels_fail("rmsnorm backward: rstd is missing");
    if (variant < 0 || variant >= KRMSNORM_NVARIANTS) return kernels_fail("rmsnorm backward: unknown variant %d", variant);
    const int64_t rpr = N / replicas;
    int bug = kernels_planted_bug(), sms = 0;
    const void *g = gain ? gain->data : nullptr;
    if (dgain && gain && multiprocessors(&sms)) return -1;
    switch (x->format) {
#define RMS_BWD(TYPE)                                                                                            \
    if (krow_vec<TYPE>(C) > 1)                                                                                   \
        backward_variant<TYPE, kvec_width<TYPE>()>(variant, (TYPE *)dx->data, (const TYPE *)dy->data,           \
                                                   (const TYPE *)x->data, (const TYPE *)g, rstd, N, C, rpr,     \
                                                   bug);                                                         \
    else backward_variant<TYPE, 1>(variant, (TYPE *)dx->data, (const TYPE *)dy->data, (const TYPE *)x->data,    \
                                   (const TYPE *)g, rstd, N, C, rpr, bug);                                       \
    if (dgain && gain)                                                                                           \
        kcolsum_launch<TYPE, 1, false>(kstream(), sms, (TYPE *)dgain->data, (TYPE *)nullptr,                    \
                                       (const TYPE *)dy->data, (const TYPE *)x->data, nullptr, rstd, rpr, C,     \
                                       replicas, bug, dgain_step{});
    case PREC_FP32: RMS_BWD(float) break;
    case PREC_BF16: RMS_BWD(__nv_bfloat16) break;
    case PREC_FP16: RMS_BWD(__half) break;
#undef RMS_BWD
    default: return kernels_fail("rmsnorm backward: no %s path", prec_format_name(x->format));
    }
    return krow_launched("rmsnorm", "backward", N, C);
}

extern "C" int krmsnorm_backward(ktensor *dx, ktensor *dgain, const ktensor *dy, const ktensor *x, const ktensor *gain,
                                 const float *rstd, int variant)
{
    return krmsnorm_backward_replicas(1, dx, dgain, dy, x, gain, rstd, variant);
}
