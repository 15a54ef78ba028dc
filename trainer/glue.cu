// trainer/glue.cu — see glue.h.  Grid-stride elementwise kernels.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/common/kelem.cuh"
#include "kernels/common/klaunch.cuh"
#include "precision/format.h"
#include "trainer/glue.h"

#define GLUE_THREADS 256

static int launch_check(const char *what, int64_t n)
{
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return kernels_fail("%s (n=%lld): launch failed: %s", what, (long long)n, cudaGetErrorString(err));
    return 0;
}

static unsigned blocks_for(int64_t n)
{
    int64_t b = (n + GLUE_THREADS - 1) / GLUE_THREADS;
    return (unsigned)(b > 65535 * 8 ? 65535 * 8 : (b < 1 ? 1 : b));
}

template <typename D, typename S>
__global__ void cast_kernel(D *dst, const S *src, const float *src_scale, int64_t n)
{
    float sc = kscale_of(src_scale);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = kfrom_float<D>(kload_scaled(src, i, sc), KBUG_NONE);
}

template <typename D, typename S>
__global__ void add_kernel(D *dst, const S *src, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = kfrom_float<D>(__fadd_rn(kto_float(dst[i]), kto_float(src[i])), KBUG_NONE);
}

template <typename D, typename S>
__global__ void copy_columns_kernel(D *dst, int64_t dst_cols, int64_t col0, const S *src, int64_t rows, int64_t cols)
{
    const int64_t n = rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[(i / cols) * dst_cols + col0 + i % cols] = kfrom_float<D>(kto_float(src[i]), KBUG_NONE);
}

// Equal formats, 16-byte units: a thread moves one unit of a source row into
// its place in the destination row (bits as they are).  The copy_columns
// kernel above made a 64-bit division per element: 0.48 ms for a replica
// batch's [524288, 256] bf16 part on an H100, 1/5 of the bandwidth.
template <typename Idx>
__global__ void copy_columns_vec_kernel(uint4 *dst, Idx dst_units, Idx unit0, const uint4 *src, Idx units_per_row,
                                        Idx n_units)
{
    for (Idx u = blockIdx.x * (Idx)blockDim.x + threadIdx.x; u < n_units; u += (Idx)gridDim.x * blockDim.x) {
        const Idx row = u / units_per_row;
        dst[row * dst_units + unit0 + (u - row * units_per_row)] = src[u];
    }
}

template <typename T>
__global__ void nonfinite_kernel(const T *x, int64_t n, unsigned long long *count)
{
    unsigned long long c = 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        c += !isfinite(kto_float(x[i]));
    if (c) atomicAdd(count, c);
}

// Dispatch a storage format to its type (fp32, bf16, fp16, e4m3, e5m2).
#define FORMAT_DISPATCH(fmt, T, ...)                                            \
    switch (fmt) {                                                              \
    case PREC_FP32: { using T = float; __VA_ARGS__; } break;                    \
    case PREC_BF16: { using T = __nv_bfloat16; __VA_ARGS__; } break;            \
    case PREC_FP16: { using T = __half; __VA_ARGS__; } break;                   \
    case PREC_E4M3: { using T = __nv_fp8_e4m3; __VA_ARGS__; } break;            \
    case PREC_E5M2: { using T = __nv_fp8_e5m2; __VA_ARGS__; } break;            \
    default: return kernels_fail("trainer glue: unsupported format %s", prec_format_name(fmt)); \
    }

static int plain(prec_format f) { return f == PREC_FP32 || f == PREC_BF16 || f == PREC_FP16; }

extern "C" int tglue_cast(void *dst, prec_format dst_format, const void *src, prec_format src_format,
                          const float *src_scale, int64_t n)
{
    if (!plain(dst_format)) return kernels_fail("tglue_cast: destination format %s (fp32, bf16, fp16)", prec_format_name(dst_format));
    FORMAT_DISPATCH(dst_format, D, FORMAT_DISPATCH(src_format, S, {
        cast_kernel<D, S><<<blocks_for(n), GLUE_THREADS, 0, kstream()>>>((D *)dst, (const S *)src, src_scale, n);
    }));
    return launch_check("tglue_cast", n);
}

extern "C" int tglue_add(void *dst, prec_format dst_format, const void *src, prec_format src_format, int64_t n)
{
    if (!plain(dst_format) || !plain(src_format))
        return kernels_fail("tglue_add: formats %s += %s (fp32, bf16, fp16)", prec_format_name(dst_format),
                            prec_format_name(src_format));
    FORMAT_DISPATCH(dst_format, D, FORMAT_DISPATCH(src_format, S, {
        add_kernel<D, S><<<blocks_for(n), GLUE_THREADS, 0, kstream()>>>((D *)dst, (const S *)src, n);
    }));
    return launch_check("tglue_add", n);
}

extern "C" int tglue_copy_columns(void *dst, prec_format dst_format, int64_t dst_cols, int64_t col0, const void *src,
                                  prec_format src_format, int64_t rows, int64_t cols)
{
    if (!plain(dst_format) || !plain(src_format))
        return kernels_fail("tglue_copy_columns: formats %s <- %s (fp32, bf16, fp16)", prec_format_name(dst_format),
                            prec_format_name(src_format));
    if (cols <= 0 || col0 < 0 || col0 + cols > dst_cols)
        return kernels_fail("tglue_copy_columns: columns %lld..%lld of a %lld-wide matrix", (long long)col0,
                            (long long)(col0 + cols), (long long)dst_cols);
    const int64_t n = rows * cols;
    const int64_t el = kformat_bytes(dst_format), per = 16 / el; // elements per 16-byte unit
    if (dst_format == src_format && cols % per == 0 && dst_cols % per == 0 && col0 % per == 0 &&
        (uintptr_t)dst % 16 == 0 && (uintptr_t)src % 16 == 0) {
        const int64_t units = n / per, row_units = cols / per;
        if (rows * (dst_cols / per) < INT32_MAX / 2) // every unit index (and the grid stride past it) fits 32 bits
            copy_columns_vec_kernel<int32_t><<<blocks_for(units), GLUE_THREADS, 0, kstream()>>>(
                (uint4 *)dst, (int32_t)(dst_cols / per), (int32_t)(col0 / per), (const uint4 *)src, (int32_t)row_units,
                (int32_t)units);
        else
            copy_columns_vec_kernel<int64_t><<<blocks_for(units), GLUE_THREADS, 0, kstream()>>>(
                (uint4 *)dst, dst_cols / per, col0 / per, (const uint4 *)src, row_units, units);
        return launch_check("tglue_copy_columns", n);
    }
    FORMAT_DISPATCH(dst_format, D, FORMAT_DISPATCH(src_format, S, {
        copy_columns_kernel<D, S><<<blocks_for(n), GLUE_THREADS, 0, kstream()>>>((D *)dst, dst_cols, col0, (const S *)src, rows, cols);
    }));
    return launch_check("tglue_copy_columns", n);
}

// [B,T,H,D] <-> [B,H,T,D]: the D elements of one (b, t, h) are one
// contiguous row on both sides, so a thread moves a unit of a row: 16 bytes
// (VEC elements, Dt == S) or one element (VEC = 1).  Equal formats are
// copied as bits (a NaN keeps its payload), others converted (RNE).  Idx is 32-bit unless the unit count needs 64: the
// row decomposition (three divisions by T and H) is done once per unit.
// u indexes the destination's units.
template <typename Dt, typename S, int VEC, typename Idx>
__global__ void permute_heads_kernel(Dt *dst, const S *src, Idx units_per_row, Idx T, Idx H, Idx n_units, int to_bhtd)
{
    for (Idx u = blockIdx.x * (Idx)blockDim.x + threadIdx.x; u < n_units; u += (Idx)gridDim.x * blockDim.x) {
        const Idx row = u / units_per_row, c = u - row * units_per_row;
        Idx src_row;
        if (to_bhtd) { // dst row (b, h, t) of [B,H,T], src row (b, t, h) of [B,T,H]
            const Idx t = row % T, bh = row / T, h = bh % H, b = bh / H;
            src_row = (b * T + t) * H + h;
        } else {       // dst row (b, t, h) of [B,T,H], src row (b, h, t) of [B,H,T]
            const Idx h = row % H, bt = row / H, t = bt % T, b = bt / T;
            src_row = (b * H + h) * T + t;
        }
        const Idx s = src_row * units_per_row + c;
        if constexpr (VEC > 1) reinterpret_cast<uint4 *>(dst)[u] = reinterpret_cast<const uint4 *>(src)[s];
        else if constexpr (std::is_same<Dt, S>::value) dst[u] = src[s];
        else dst[u] = kfrom_float<Dt>(kto_float(src[s]), KBUG_NONE);
    }
}

template <typename Dt, typename S, int VEC>
static void permute_heads_launch(void *dst, const void *src, int64_t B, int64_t T, int64_t H, int64_t D, int to_bhtd)
{
    const int64_t per_row = D / VEC, n_units = B * T * H * per_row;
    // 32-bit indices while the grid-stride loop's last step cannot wrap
    if (n_units < ((int64_t)1 << 31))
        permute_heads_kernel<Dt, S, VEC, uint32_t><<<blocks_for(n_units), GLUE_THREADS, 0, kstream()>>>(
            (Dt *)dst, (const S *)src, (uint32_t)per_row, (uint32_t)T, (uint32_t)H, (uint32_t)n_units, to_bhtd);
    else
        permute_heads_kernel<Dt, S, VEC, uint64_t><<<blocks_for(n_units), GLUE_THREADS, 0, kstream()>>>(
            (Dt *)dst, (const S *)src, (uint64_t)per_row, (uint64_t)T, (uint64_t)H, (uint64_t)n_units, to_bhtd);
}

template <typename T>
__global__ void scale_kernel(T *x, int64_t n, float s)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = kfrom_float<T>(__fmul_rn(kto_float(x[i]), s), KBUG_NONE);
}

// Replica r = blockIdx.y at r n; rep (NULL for a single call) gives its
// gradient scale and skip flag.
template <typename G, typename U>
__global__ void muon_momentum_kernel(float *buf, const G *grad, int64_t n, float mu, float gs, U *u,
                                     const tglue_replica *rep)
{
    const int64_t r = blockIdx.y;
    if (rep) {
        if (rep[r].skip) return;
        gs = rep[r].grad_scale;
    }
    buf += r * n, grad += r * n, u += r * n;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float g = kto_float(grad[i]);
        if (gs != 1.0f) g = kto_float(kfrom_float<G>(__fmul_rn(g, gs), KBUG_NONE));
        float m = __fadd_rn(__fmul_rn(mu, buf[i]), __fmul_rn(1.0f - mu, g));
        buf[i] = m;
        u[i] = kfrom_float<U>(__fadd_rn(__fmul_rn(1.0f - mu, g), __fmul_rn(mu, m)), KBUG_NONE);
    }
}

// The counter-based hash of trainer/backend.h (tbackend_sr_bits).
__device__ __forceinline__ uint64_t sr_bits(uint64_t seed, uint64_t i)
{
    uint64_t z = seed ^ (i * 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Stochastic rounding of x into a format of p significand bits and minimum
// normal exponent emin: up (away from zero) with probability equal to the
// fraction of the quantum, decided as precision/format.c does.
__device__ double sr_round(double x, int p, int emin, uint64_t bits)
{
    double mag = fabs(x);
    if (mag == 0.0 || !isfinite(mag)) return x;
    int e = ilogb(mag);
    if (e < emin) e = emin;
    double q = ldexp(1.0, e - p + 1);
    double y = mag / q, n = floor(y), frac = y - n;
    bool up = frac > 0.0 && bits < (unsigned long long)(frac * 18446744073709551616.0);
    double r = (n + (up ? 1.0 : 0.0)) * q;
    return x < 0 ? -r : r;
}

// Replica r = blockIdx.y at r n; rep (NULL for a single call) gives its
// seed and skip flag.  The stochastic-rounding index is i mod period.
template <typename W, typename O>
__global__ void weight_update_kernel(W *w, float *master, uint16_t *low, int sr, uint64_t seed, const O *o, int64_t n,
                                     int64_t period, float lr, float wd, float scale, int p, int emin,
                                     const tglue_replica *rep)
{
    const int64_t r = blockIdx.y;
    if (rep) {
        if (rep[r].skip) return;
        seed = rep[r].seed;
    }
    w += r * n, o += r * n;
    if (master) master += r * n;
    if (low) low += r * n;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float old;
        if (master) old = master[i];
        else if (low) old = __uint_as_float(((uint32_t)__bfloat16_as_ushort(*(const __nv_bfloat16 *)&w[i]) << 16) | low[i]);
        else old = kto_float(w[i]);
        double x = (double)__fmul_rn(old, 1.0f - __fmul_rn(lr, wd)) - (double)__fmul_rn(__fmul_rn(lr, scale), kto_float(o[i]));
        if (master) {
            master[i] = (float)x;
            w[i] = kfrom_float<W>((float)x, KBUG_NONE);
        } else if (low) {
            uint32_t b = __float_as_uint((float)x);
            *(__nv_bfloat16 *)&w[i] = __ushort_as_bfloat16((unsigned short)(b >> 16));
            low[i] = (uint16_t)(b & 0xFFFF);
        } else if (sr) {
            w[i] = kfrom_float<W>((float)sr_round(x, p, emin, sr_bits(seed, (uint64_t)(i % period))), KBUG_NONE);
        } else {
            w[i] = kfrom_float<W>((float)x, KBUG_NONE);
        }
    }
}

// The grid of a replica launch: blocks_for(n) per replica, R replicas.
static int replica_grid(const char *what, int64_t R, int64_t n, dim3 *grid)
{
    if (R < 1 || R > 65535 || n < 1) return kernels_fail("%s: %lld replicas of %lld elements (R in [1, 65535], n >= 1)", what, (long long)R, (long long)n);
    *grid = dim3(blocks_for(n), (unsigned)R);
    return 0;
}

extern "C" int tglue_permute_heads(void *dst, prec_format dst_format, const void *src, prec_format src_format, int64_t B,
                                   int64_t T, int64_t H, int64_t D, int to_bhtd)
{
    if (!plain(dst_format) || !plain(src_format)) return kernels_fail("tglue_permute_heads: formats (fp32, bf16, fp16)");
    if (B <= 0 || T <= 0 || H <= 0 || D <= 0)
        return kernels_fail("tglue_permute_heads: B=%lld T=%lld H=%lld D=%lld must be positive", (long long)B,
                            (long long)T, (long long)H, (long long)D);
    const int64_t n = B * T * H * D, row_bytes = D * (int64_t)kformat_bytes(dst_format);
    const bool aligned = ((uintptr_t)dst | (uintptr_t)src) % 16 == 0;
    if (dst_format == src_format && row_bytes % 16 == 0 && aligned) {
        FORMAT_DISPATCH(dst_format, T_, {
            permute_heads_launch<T_, T_, 16 / sizeof(T_)>(dst, src, B, T, H, D, to_bhtd);
        });
    } else {
        FORMAT_DISPATCH(dst_format, Dt, FORMAT_DISPATCH(src_format, S, {
            permute_heads_launch<Dt, S, 1>(dst, src, B, T, H, D, to_bhtd);
        }));
    }
    return launch_check("tglue_permute_heads", n);
}

extern "C" int tglue_scale(void *x, prec_format format, int64_t n, float s)
{
    if (!plain(format)) return kernels_fail("tglue_scale: format %s", prec_format_name(format));
    FORMAT_DISPATCH(format, T, { scale_kernel<T><<<blocks_for(n), GLUE_THREADS, 0, kstream()>>>((T *)x, n, s); });
    return launch_check("tglue_scale", n);
}

extern "C" int tglue_muon_momentum(float *buf, const void *grad, prec_format grad_format, int64_t n, float mu,
                                   float grad_scale, void *u, prec_format u_format)
{
    if (!plain(grad_format) || !plain(u_format)) return kernels_fail("tglue_muon_momentum: formats");
    FORMAT_DISPATCH(grad_format, G, FORMAT_DISPATCH(u_format, U, {
        muon_momentum_kernel<G, U><<<blocks_for(n), GLUE_THREADS, 0, kstream()>>>(buf, (const G *)grad, n, mu, grad_scale, (U *)u,
                                                                   nullptr);
    }));
    return launch_check("tglue_muon_momentum", n);
}

extern "C" int tglue_muon_momentum_replicas(int64_t R, const tglue_replica *rep, float *buf, const void *grad,
                                            prec_format grad_format, int64_t n, float mu, void *u, prec_format u_format)
{
    dim3 grid;
    if (!plain(grad_format) || !plain(u_format)) return kernels_fail("tglue_muon_momentum_replicas: formats");
    if (!rep) return kernels_fail("tglue_muon_momentum_replicas: no replica arguments");
    if (replica_grid("tglue_muon_momentum_replicas", R, n, &grid)) return -1;
    FORMAT_DISPATCH(grad_format, G, FORMAT_DISPATCH(u_format, U, {
        muon_momentum_kernel<G, U><<<grid, GLUE_THREADS, 0, kstream()>>>(buf, (const G *)grad, n, mu, 1.0f, (U *)u, rep);
    }));
    return launch_check("tglue_muon_momentum_replicas", R * n);
}

static int weight_update(const char *what, int64_t R, const tglue_replica *rep, void *w, prec_format w_format,
                         float *master, uint16_t *low_bits, int sr, uint64_t seed, const void *o, prec_format o_format,
                         int64_t n, int64_t period, float lr, float wd, float scale)
{
    dim3 grid;
    if (!plain(w_format) || !plain(o_format)) return kernels_fail("%s: formats", what);
    if (low_bits && w_format != PREC_BF16) return kernels_fail("%s: the mantissa buffer needs bf16 weights", what);
    if (period < 1) return kernels_fail("%s: stochastic-rounding period %lld", what, (long long)period);
    if (replica_grid(what, R, n, &grid)) return -1;
    const prec_format_info *fi = prec_format_get(w_format);
    FORMAT_DISPATCH(w_format, W, FORMAT_DISPATCH(o_format, O, {
        weight_update_kernel<W, O><<<grid, GLUE_THREADS, 0, kstream()>>>((W *)w, master, low_bits, sr, seed, (const O *)o, n, period,
                                                           lr, wd, scale, fi->precision, fi->emin, rep);
    }));
    return launch_check(what, R * n);
}

extern "C" int tglue_weight_update(void *w, prec_format w_format, float *master, uint16_t *low_bits, int sr,
                                   uint64_t seed, const void *o, prec_format o_format, int64_t n, float lr, float wd,
                                   float scale)
{
    return weight_update("tglue_weight_update", 1, nullptr, w, w_format, master, low_bits, sr, seed, o, o_format, n, n,
                         lr, wd, scale);
}

extern "C" int tglue_weight_update_replicas(int64_t R, const tglue_replica *rep, void *w, prec_format w_format,
                                            float *master, uint16_t *low_bits, int sr, const void *o,
                                            prec_format o_format, int64_t n, int64_t period, float lr, float wd,
                                            float scale)
{
    if (!rep) return kernels_fail("tglue_weight_update_replicas: no replica arguments");
    return weight_update("tglue_weight_update_replicas", R, rep, w, w_format, master, low_bits, sr, 0, o, o_format, n,
                         period, lr, wd, scale);
}

extern "C" int tglue_count_nonfinite(const void *x, prec_format format, int64_t n, int64_t *count)
{
    unsigned long long *d = nullptr, h = 0;
    cudaError_t err = cudaMalloc(&d, sizeof *d);
    if (err != cudaSuccess) return kernels_fail("tglue_count_nonfinite: cudaMalloc: %s", cudaGetErrorString(err));
    int rc = 0;
    if ((err = cudaMemsetAsync(d, 0, sizeof *d, kstream())) != cudaSuccess)
        rc = kernels_fail("tglue_count_nonfinite: cudaMemsetAsync: %s", cudaGetErrorString(err));
    if (!rc) switch (format) {
    case PREC_FP32: nonfinite_kernel<<<blocks_for(n), GLUE_THREADS, 0, kstream()>>>((const float *)x, n, d); break;
    case PREC_BF16: nonfinite_kernel<<<blocks_for(n), GLUE_THREADS, 0, kstream()>>>((const __nv_bfloat16 *)x, n, d); break;
    case PREC_FP16: nonfinite_kernel<<<blocks_for(n), GLUE_THREADS, 0, kstream()>>>((const __half *)x, n, d); break;
    case PREC_E4M3: nonfinite_kernel<<<blocks_for(n), GLUE_THREADS, 0, kstream()>>>((const __nv_fp8_e4m3 *)x, n, d); break;
    case PREC_E5M2: nonfinite_kernel<<<blocks_for(n), GLUE_THREADS, 0, kstream()>>>((const __nv_fp8_e5m2 *)x, n, d); break;
    default: rc = kernels_fail("tglue_count_nonfinite: format %s", prec_format_name(format));
    }
    if (!rc) rc = launch_check("tglue_count_nonfinite", n);
    if (!rc && ((err = cudaMemcpyAsync(&h, d, sizeof h, cudaMemcpyDeviceToHost, kstream())) != cudaSuccess ||
                (err = cudaStreamSynchronize(kstream())) != cudaSuccess))
        rc = kernels_fail("tglue_count_nonfinite: reading the count: %s", cudaGetErrorString(err));
    cudaFree(d);
    *count = (int64_t)h;
    return rc;
}
