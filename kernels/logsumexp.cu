// kernels/logsumexp.cu — log-sum-exp forward and backward (see logsumexp.h).
// Shapes: x, dx (N, C); lse, dlse (N) fp32.  Forward: one block of 256
// threads per row (max, then the block-tree sum of exps); backward:
// elementwise, one block per row.
#include <cuda_runtime.h>

#include "kernels/common/kexp.cuh"
#include "kernels/common/klaunch.cuh"
#include "kernels/common/kreduce.cuh"
#include "kernels/logsumexp.h"
#include "kernels/registry.h"

// ---- registry entry (kernels/registry.h): name, paths, fp8 note, variants ----

static const kvariant variants[KLSE_NVARIANTS] = {
    {"exp", "expf(x - max) and logf; block-tree sum, one block per row"},
    {"exp2", "exp2f with log2(e) folded into one fma, lse = max + log2f(sum) ln2"},
    {"fast_exp", "the fast-math intrinsics __expf and __logf"},
};

extern "C" const kop kop_logsumexp = {
    "logsumexp",
    "log-sum-exp over the last dimension (cross-entropy's normaliser), fp32 result; backward dx = dlse softmax(x)",
    KPATHS_NO_FP8,
    "no fp8 path: logits come out of the lm_head matmul in bf16/fp32; an fp8 logit keeps 3 mantissa bits, "
    "an error of ~6% in every exp",
    variants,
    KLSE_NVARIANTS,
};

namespace {

constexpr int kBlock = 256;
constexpr float kLn2 = 0.693147180559945309417f;

template <int E> __device__ __forceinline__ float log_of_sum(float s, float m)
{
    if constexpr (E == KEXP_EXP2) return m + log2f(s) * kLn2;
    else if constexpr (E == KEXP_FAST_EXP) return m + __logf(s);
    else return m + logf(s);
}

template <typename T, int V, int E>
__global__ void lse_forward_kernel(float *__restrict__ lse, const T *__restrict__ x, int64_t C, int bug)
{
    __shared__ float scratch[32];
    const krow_exp_sum r = kblock_row_exp_sum<kBlock, T, V, E>(x + (int64_t)blockIdx.x * C, C, bug, scratch);
    if (threadIdx.x == 0) lse[blockIdx.x] = kfrom_float<float>(log_of_sum<E>(r.s, r.m), bug);
}

template <typename T, int E>
__global__ void lse_backward_kernel(T *__restrict__ dx, const T *__restrict__ x, const float *__restrict__ lse,
                                    const float *__restrict__ dlse, int64_t C, int bug)
{
    const int64_t off = (int64_t)blockIdx.x * C;
    const float l = lse[blockIdx.x], g = dlse[blockIdx.x], l_log2e = l * kLog2e;
    for (int64_t c = threadIdx.x; c < C; c += kBlock) {
        if (bug == KBUG_DROP_TERM && c == C - 1) continue; // left unwritten
        dx[off + c] = kfrom_float<T>(g * kexp_shifted<E>(kto_float(x[off + c]), l, l_log2e), bug);
    }
}

int rows_of(const char *what, const ktensor *t, const ktensor *like, int64_t *N, int64_t *C)
{
    if (!t || !t->data || t->ndim < 1) return kernels_fail("logsumexp %s: tensor missing", what);
    int64_t c = t->shape[t->ndim - 1];
    if (like && (like->format != t->format || ktensor_numel(like) != ktensor_numel(t)))
        return kernels_fail("logsumexp %s: shape or format differs from x", what);
    *N = ktensor_numel(t) / c;
    *C = c;
    return 0;
}

template <typename T, int V> void forward_t(int variant, float *lse, const T *x, int64_t N, int64_t C, int bug)
{
    if (variant == KLSE_EXP2) lse_forward_kernel<T, V, KEXP_EXP2><<<(unsigned)N, kBlock, 0, kstream()>>>(lse, x, C, bug);
    else if (variant == KLSE_FAST_EXP) lse_forward_kernel<T, V, KEXP_FAST_EXP><<<(unsigned)N, kBlock, 0, kstream()>>>(lse, x, C, bug);
    else lse_forward_kernel<T, V, KEXP_EXP><<<(unsigned)N, kBlock, 0, kstream()>>>(lse, x, C, bug);
}

template <typename T>
void backward_t(int variant, T *dx, const T *x, const float *lse, const float *dlse, int64_t N, int64_t C, int bug)
{
    if (variant == KLSE_EXP2) lse_backward_kernel<T, KEXP_EXP2><<<(unsigned)N, kBlock, 0, kstream()>>>(dx, x, lse, dlse, C, bug);
    else if (variant == KLSE_FAST_EXP) lse_backward_kernel<T, KEXP_FAST_EXP><<<(unsigned)N, kBlock, 0, kstream()>>>(dx, x, lse, dlse, C, bug);
    else lse_backward_kernel<T, KEXP_EXP><<<(unsigned)N, kBlock, 0, kstream()>>>(dx, x, lse, dlse, C, bug);
}

} // namespace

extern "C" int klogsumexp_row_threads(void) { return kBlock; }
extern "C" int klogsumexp_row_vec(int64_t C, prec_format f) { return krow_vec_of(C, f); }

extern "C" int klogsumexp_forward(float *lse, const ktensor *x, int variant)
{
    int64_t N = 0, C = 0;
    if (rows_of("forward x", x, NULL, &N, &C)) return -1;
    if (!lse) return kernels_fail("logsumexp forward: lse buffer missing");
    if (variant < 0 || variant >= KLSE_NVARIANTS) return kernels_fail("logsumexp forward: unknown variant %d", variant);
    int bug = kernels_planted_bug();
    switch (x->format) {
#define LSE_FWD(TYPE)                                                                                    \
    if (krow_vec<TYPE>(C) > 1) forward_t<TYPE, kvec_width<TYPE>()>(variant, lse, (const TYPE *)x->data, N, C, bug); \
    else forward_t<TYPE, 1>(variant, lse, (const TYPE *)x->data, N, C, bug);
    case PREC_FP32: LSE_FWD(float) break;
    case PREC_BF16: LSE_FWD(__nv_bfloat16) break;
    case PREC_FP16: LSE_FWD(__half) break;
#undef LSE_FWD
    default: return kernels_fail("logsumexp forward: no %s path", prec_format_name(x->format));
    }
    return krow_launched("logsumexp", "forward", N, C);
}

extern "C" int klogsumexp_backward(ktensor *dx, const ktensor *x, const float *lse, const float *dlse, int variant)
{
    int64_t N = 0, C = 0, N2 = 0, C2 = 0;
    if (rows_of("backward x", x, NULL, &N, &C) || rows_of("backward dx", dx, x, &N2, &C2)) return -1;
    if (!lse || !dlse) return kernels_fail("logsumexp backward: lse/dlse missing");
    if (variant < 0 || variant >= KLSE_NVARIANTS) return kernels_fail("logsumexp backward: unknown variant %d", variant);
    int bug = kernels_planted_bug();
    switch (x->format) {
    case PREC_FP32: backward_t<float>(variant, (float *)dx->data, (const float *)x->data, lse, dlse, N, C, bug); break;
    case PREC_BF16:
        backward_t<__nv_bfloat16>(variant, (__nv_bfloat16 *)dx->data, (const __nv_bfloat16 *)x->data, lse, dlse, N, C, bug);
        break;
    case PREC_FP16: backward_t<__half>(variant, (__half *)dx->data, (const __half *)x->data, lse, dlse, N, C, bug); break;
    default: return kernels_fail("logsumexp backward: no %s path", prec_format_name(x->format));
    }
    return krow_launched("logsumexp", "backward", N, C);
}
