// kernels/rope.cu — rotary position embedding (see rope.h).
// Shapes: x, y (N, H, D); one thread per rotated pair (n, h, i), i < D/2,
// consecutive threads on consecutive i (coalesced).  Planted bugs:
// drop-term leaves the tensor's last element unwritten; truncate-output
// rounds stores toward zero.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/kelem.cuh"
#include "kernels/rope.h"

namespace {

// I: the index type; 32-bit whenever the tensor allows, since 64-bit division
// and remainder (three per thread) cost more than the memory traffic.
template <typename E, typename I, int VARIANT, bool BACKWARD>
__global__ void rope_kernel(E *__restrict__ y, const E *__restrict__ x, const float *__restrict__ cos_t,
                            const float *__restrict__ sin_t, const float *__restrict__ inv_freq, I N, I H, I D, I T,
                            int bug)
{
    const I half = D / 2, pairs = N * H * half;
    const I p = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x;
    if (p >= pairs) return;
    const I i = p % half, nh = p / half, pos = (nh / H) % T;
    float c, s;
    if (VARIANT == KROPE_FP32_ANGLE) sincosf((float)pos * inv_freq[i], &s, &c);
    else {
        c = cos_t[pos * half + i];
        s = sin_t[pos * half + i];
    }
    if (BACKWARD) s = -s;
    const I a = nh * D + i, b = a + half;
    const float x1 = kto_float(x[a]), x2 = kto_float(x[b]);
    y[a] = kfrom_float<E>(x1 * c - x2 * s, bug);
    if (!(bug == KBUG_DROP_TERM && b == N * H * D - 1)) y[b] = kfrom_float<E>(x1 * s + x2 * c, bug);
}

template <typename E, int VARIANT, bool BACKWARD>
void launch(E *y, const E *x, const krope_tables *tab, int64_t N, int64_t H, int64_t D, int bug)
{
    const int64_t pairs = N * H * (D / 2);
    const unsigned blocks = (unsigned)((pairs + 255) / 256);
    if (N * H * D < (1ll << 31) && tab->T < (1ll << 31))
        rope_kernel<E, uint32_t, VARIANT, BACKWARD><<<blocks, 256>>>(y, x, tab->cos_t, tab->sin_t, tab->inv_freq,
                                                                     (uint32_t)N, (uint32_t)H, (uint32_t)D,
                                                                     (uint32_t)tab->T, bug);
    else
        rope_kernel<E, int64_t, VARIANT, BACKWARD><<<blocks, 256>>>(y, x, tab->cos_t, tab->sin_t, tab->inv_freq, N, H,
                                                                    D, tab->T, bug);
}

template <bool BACKWARD> int rope(ktensor *y, const ktensor *x, const krope_tables *tab, int variant)
{
    const char *what = BACKWARD ? "rope backward" : "rope forward";
    if (!x || !y || !x->data || !y->data || x->ndim != 3 || !tab)
        return kernels_fail("%s: x must be (N, H, D) and the tables given", what);
    const int64_t N = x->shape[0], H = x->shape[1], D = x->shape[2];
    if (D % 2) return kernels_fail("%s: head dimension D=%lld must be even", what, (long long)D);
    if (y->format != x->format || ktensor_numel(y) != ktensor_numel(x))
        return kernels_fail("%s: y must match x (%lld x %lld x %lld %s)", what, (long long)N, (long long)H, (long long)D,
                            prec_format_name(x->format));
    if (tab->T < 1 || (variant == KROPE_TABLE && (!tab->cos_t || !tab->sin_t)) ||
        (variant == KROPE_FP32_ANGLE && !tab->inv_freq))
        return kernels_fail("%s: variant %d needs its tables and T >= 1", what, variant);
    if (variant < 0 || variant >= KROPE_NVARIANTS) return kernels_fail("%s: unknown variant %d", what, variant);
    const int bug = kernels_planted_bug();
    switch (x->format) {
#define ROPE(TYPE)                                                                                           \
    if (variant == KROPE_FP32_ANGLE)                                                                         \
        launch<TYPE, KROPE_FP32_ANGLE, BACKWARD>((TYPE *)y->data, (const TYPE *)x->data, tab, N, H, D, bug); \
    else launch<TYPE, KROPE_TABLE, BACKWARD>((TYPE *)y->data, (const TYPE *)x->data, tab, N, H, D, bug);
    case PREC_FP32: ROPE(float) break;
    case PREC_BF16: ROPE(__nv_bfloat16) break;
    case PREC_FP16: ROPE(__half) break;
#undef ROPE
    default: return kernels_fail("%s: no %s path", what, prec_format_name(x->format));
    }
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        return kernels_fail("%s (N=%lld H=%lld D=%lld): launch failed: %s", what, (long long)N, (long long)H,
                            (long long)D, cudaGetErrorString(err));
    return 0;
}

} // namespace

extern "C" void krope_tables_host(float *cos_t, float *sin_t, float *inv_freq, int64_t T, int64_t D, double base)
{
    const int64_t half = D / 2;
    for (int64_t i = 0; i < half; i++) {
        double f = std::pow(base, -2.0 * (double)i / (double)D);
        if (inv_freq) inv_freq[i] = (float)f;
        for (int64_t p = 0; p < T; p++) {
            if (cos_t) cos_t[p * half + i] = (float)std::cos((double)p * f);
            if (sin_t) sin_t[p * half + i] = (float)std::sin((double)p * f);
        }
    }
}

extern "C" int krope_forward(ktensor *y, const ktensor *x, const krope_tables *tab, int variant)
{
    return rope<false>(y, x, tab, variant);
}

extern "C" int krope_backward(ktensor *dx, const ktensor *dy, const krope_tables *tab, int variant)
{
    return rope<true>(dx, dy, tab, variant);
}
