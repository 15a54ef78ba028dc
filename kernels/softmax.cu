// kernels/softmax.cu — softmax forward and backward (see softmax.h).
// Shapes: x, y, dy, dx (N, C); grid N blocks of 256 threads, one row each;
// three sweeps over the row (max, sum of exps, normalise): the row is re-read
// from L1/L2 rather than held in registers, so any C works.
#include <cuda_runtime.h>

#include "kernels/common/kexp.cuh"
#include "kernels/common/klaunch.cuh"
#include "kernels/common/kreduce.cuh"
#include "kernels/registry.h"
#include "kernels/softmax.h"

// ---- registry entry (kernels/registry.h): name, paths, fp8 note, variants ----

static const kvariant variants[KSOFTMAX_NVARIANTS] = {
    {"exp", "expf(x - max), accurate (2 ulps); block-tree sum, one block per row"},
    {"exp2", "exp2f(x*log2(e) - max*log2(e)) with log2(e) folded into one fma: one instruction fewer, argument error grows with |x|"},
    {"fast_exp", "__expf(x - max), the fast-math intrinsic (2 + 1.17|x - max| ulps)"},
};

extern "C" const kop kop_softmax = {
    "softmax",
    "softmax over the last dimension: y = exp(x - max) / sum exp(x - max); backward dx = y (dy - sum y dy)",
    KPATHS_NO_FP8,
    "no fp8 path: probabilities span many binades below 1 and e4m3 keeps 3 mantissa bits; attention's fp8 "
    "softmax is part of the attention kernel's path",
    variants,
    KSOFTMAX_NVARIANTS,
};

namespace {

constexpr int kBlock = 256;

template <typename T, int V, int E>
__global__ void softmax_forward_kernel(T *__restrict__ y, const T *__restrict__ x, int64_t C, int bug)
{
    __shared__ float scratch[32];
    const T *xr = x + (int64_t)blockIdx.x * C;
    T *yr = y + (int64_t)blockIdx.x * C;
    const krow_exp_sum r = kblock_row_exp_sum<kBlock, T, V, E>(xr, C, bug, scratch);
    const float inv = 1.0f / r.s;
    for (int64_t base = (int64_t)threadIdx.x * V; base < C; base += (int64_t)kBlock * V) {
        float v[V], out[V];
        kvec_io<T, V>::load(xr + base, v);
#pragma unroll
        for (int j = 0; j < V; j++) out[j] = kexp_shifted<E>(v[j], r.m, r.m_log2e) * inv;
        kvec_io<T, V>::store(yr + base, out, bug);
    }
}

template <typename T, int V>
__global__ void softmax_backward_kernel(T *__restrict__ dx, const T *__restrict__ y, const T *__restrict__ dy,
                                        int64_t C, int bug)
{
    __shared__ float scratch[32];
    const int64_t off = (int64_t)blockIdx.x * C;
    float dot = 0.0f;
    for (int64_t base = (int64_t)threadIdx.x * V; base < C; base += (int64_t)kBlock * V) {
        float a[V], b[V];
        kvec_io<T, V>::load(y + off + base, a);
        kvec_io<T, V>::load(dy + off + base, b);
#pragma unroll
        for (int j = 0; j < V; j++)
            if (!(bug == KBUG_DROP_TERM && base + j == C - 1)) dot = fmaf(a[j], b[j], dot);
    }
    dot = kblock_sum(dot, scratch);
    for (int64_t base = (int64_t)threadIdx.x * V; base < C; base += (int64_t)kBlock * V) {
        float a[V], b[V], out[V];
        kvec_io<T, V>::load(y + off + base, a);
        kvec_io<T, V>::load(dy + off + base, b);
#pragma unroll
        for (int j = 0; j < V; j++) out[j] = a[j] * (b[j] - dot);
        kvec_io<T, V>::store(dx + off + base, out, bug);
    }
}

int rows_of(const char *what, const ktensor *t, const ktensor *like, int64_t *N, int64_t *C)
{
    if (!t || !t->data || t->ndim < 1) return kernels_fail("softmax %s: tensor missing", what);
    int64_t c = t->shape[t->ndim - 1];
    if (like && (like->format != t->format || ktensor_numel(like) != ktensor_numel(t) ||
                 like->shape[like->ndim - 1] != c))
        return kernels_fail("softmax %s: shape or format differs (%lld elements of %s vs %lld of %s)", what,
                            (long long)ktensor_numel(t), prec_format_name(t->format), (long long)ktensor_numel(like),
                            prec_format_name(like->format));
    *N = ktensor_numel(t) / c;
    *C = c;
    return 0;
}

template <typename T, int V> void forward_t(int variant, T *y, const T *x, int64_t N, int64_t C, int bug)
{
    if (variant == KSOFTMAX_EXP2) softmax_forward_kernel<T, V, KEXP_EXP2><<<(unsigned)N, kBlock, 0, kstream()>>>(y, x, C, bug);
    else if (variant == KSOFTMAX_FAST_EXP) softmax_forward_kernel<T, V, KEXP_FAST_EXP><<<(unsigned)N, kBlock, 0, kstream()>>>(y, x, C, bug);
    else softmax_forward_kernel<T, V, KEXP_EXP><<<(unsigned)N, kBlock, 0, kstream()>>>(y, x, C, bug);
}

} // namespace

extern "C" int ksoftmax_row_threads(void) { return kBlock; }
extern "C" int ksoftmax_row_vec(int64_t C, prec_format f) { return krow_vec_of(C, f); }

extern "C" int ksoftmax_forward(ktensor *y, const ktensor *x, int variant)
{
    int64_t N = 0, C = 0, N2 = 0, C2 = 0;
    if (rows_of("forward x", x, NULL, &N, &C) || rows_of("forward y", y, x, &N2, &C2)) return -1;
    if (variant < 0 || variant >= KSOFTMAX_NVARIANTS) return kernels_fail("softmax forward: unknown variant %d", variant);
    int bug = kernels_planted_bug();
    switch (x->format) {
#define SM_FWD(TYPE)                                                                                             \
    if (krow_vec<TYPE>(C) > 1) forward_t<TYPE, kvec_width<TYPE>()>(variant, (TYPE *)y->data, (const TYPE *)x->data, N, C, bug); \
    else forward_t<TYPE, 1>(variant, (TYPE *)y->data, (const TYPE *)x->data, N, C, bug);
    case PREC_FP32: SM_FWD(float) break;
    case PREC_BF16: SM_FWD(__nv_bfloat16) break;
    case PREC_FP16: SM_FWD(__half) break;
#undef SM_FWD
    default: return kernels_fail("softmax forward: no %s path", prec_format_name(x->format));
    }
    return krow_launched("softmax", "forward", N, C);
}

extern "C" int ksoftmax_backward(ktensor *dx, const ktensor *y, const ktensor *dy, int variant)
{
    int64_t N = 0, C = 0, N2 = 0, C2 = 0;
    if (rows_of("backward y", y, NULL, &N, &C) || rows_of("backward dy", dy, y, &N2, &C2) ||
        rows_of("backward dx", dx, y, &N2, &C2))
        return -1;
    if (variant < 0 || variant >= KSOFTMAX_NVARIANTS) return kernels_fail("softmax backward: unknown variant %d", variant);
    int bug = kernels_planted_bug();
    switch (y->format) {
#define SM_BWD(TYPE)                                                                                              \
    if (krow_vec<TYPE>(C) > 1)                                                                                    \
        softmax_backward_kernel<TYPE, kvec_width<TYPE>()><<<(unsigned)N, kBlock, 0, kstream()>>>(                 \
            (TYPE *)dx->data, (const TYPE *)y->data, (const TYPE *)dy->data, C, bug);                            \
    else softmax_backward_kernel<TYPE, 1><<<(unsigned)N, kBlock, 0, kstream()>>>((TYPE *)dx->data, (const TYPE *)y->data, \
                                                                   (const TYPE *)dy->data, C, bug);
    case PREC_FP32: SM_BWD(float) break;
    case PREC_BF16: SM_BWD(__nv_bfloat16) break;
    case PREC_FP16: SM_BWD(__half) break;
#undef SM_BWD
    default: return kernels_fail("softmax backward: no %s path", prec_format_name(y->format));
    }
    return krow_launched("softmax", "backward", N, C);
}
