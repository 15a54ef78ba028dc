// kernels/rope.cu — rotary position embedding (see rope.h).
// Shapes: x, y (N, H, D); one thread per V rotated pairs (n, h, i), i < D/2,
// consecutive threads on consecutive i (coalesced).  Planted bugs:
// drop-term leaves the tensor's last element unwritten; truncate-output
// rounds stores toward zero.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/common/kelem.cuh"
#include "kernels/common/klaunch.cuh"
#include "kernels/common/kreduce.cuh"
#include "kernels/registry.h"
#include "kernels/rope.h"

// ---- registry entry (kernels/registry.h): name, paths, fp8 note, variants ----

static const kvariant variants[KROPE_NVARIANTS] = {
    {"table", "cos/sin read from an fp32 table computed in double (one rounding each)"},
    {"fp32_angle", "angle = pos * inv_freq formed in fp32, then sincosf: the angle's error grows with the position"},
};

extern "C" const kop kop_rope = {
    "rope",
    "rotary position embedding (half-split pairs, base 10000) on (N, H, D) queries/keys; backward rotates back",
    KPATHS_NO_FP8,
    "no fp8 path: q and k are rotated in bf16/fp32 before attention; an fp8 attention quantises after the "
    "rotation, inside the attention kernel's own path",
    variants,
    KROPE_NVARIANTS,
};

namespace {

// Rotation factors of V consecutive pairs i0 .. i0 + V - 1 at position pos
// (16-byte table reads when V allows).
template <typename I, int VARIANT, int V>
__device__ __forceinline__ void rope_factors(float *c, float *s, const float *__restrict__ cos_t,
                                             const float *__restrict__ sin_t, const float *__restrict__ inv_freq,
                                             I pos, I half, I i0)
{
    if constexpr (VARIANT == KROPE_FP32_ANGLE) {
#pragma unroll
        for (int j = 0; j < V; j++) sincosf((float)pos * inv_freq[i0 + j], &s[j], &c[j]);
    } else if constexpr (V % 4 == 0) {
#pragma unroll
        for (int j = 0; j < V; j += 4) {
            *reinterpret_cast<float4 *>(c + j) = *reinterpret_cast<const float4 *>(cos_t + pos * half + i0 + j);
            *reinterpret_cast<float4 *>(s + j) = *reinterpret_cast<const float4 *>(sin_t + pos * half + i0 + j);
        }
    } else {
#pragma unroll
        for (int j = 0; j < V; j++) {
            c[j] = cos_t[pos * half + i0 + j];
            s[j] = sin_t[pos * half + i0 + j];
        }
    }
}

// One thread per V consecutive rotated pairs (n, h, i0 .. i0 + V - 1): V = 16
// bytes / element when D/2 is a multiple of it (x, y, the tables 16-byte
// aligned), so x1, x2, y1, y2 move as 16-byte vectors; else V = 1.  Each
// element's arithmetic is the same for every V.  I: the index type; 32-bit
// whenever the tensor allows, since 64-bit division and remainder (three per
// thread) cost more than the memory traffic.
template <typename E, typename I, int VARIANT, bool BACKWARD, int V>
__global__ void rope_kernel(E *__restrict__ y, const E *__restrict__ x, const float *__restrict__ cos_t,
                            const float *__restrict__ sin_t, const float *__restrict__ inv_freq, I N, I H, I D, I T,
                            int bug)
{
    const I half = D / 2, groups = half / V, units = N * H * groups;
    const I p = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x;
    if (p >= units) return;
    const I i0 = (p % groups) * V, nh = p / groups, pos = (nh / H) % T;
    const I a = nh * D + i0, b = a + half;
    float x1[V], x2[V], c[V], s[V], y1[V], y2[V];
    kvec_io<E, V>::load(x + a, x1);
    kvec_io<E, V>::load(x + b, x2);
    rope_factors<I, VARIANT, V>(c, s, cos_t, sin_t, inv_freq, pos, half, i0);
#pragma unroll
    for (int j = 0; j < V; j++) {
        const float sj = BACKWARD ? -s[j] : s[j];
        y1[j] = x1[j] * c[j] - x2[j] * sj;
        y2[j] = x1[j] * sj + x2[j] * c[j];
    }
    kvec_io<E, V>::store(y + a, y1, bug);
    if (bug == KBUG_DROP_TERM && b + V == N * H * D) { // the tensor's last element left unwritten
        for (int j = 0; j < V - 1; j++) y[b + j] = kfrom_float<E>(y2[j], bug);
    } else {
        kvec_io<E, V>::store(y + b, y2, bug);
    }
}

template <typename E, int VARIANT, bool BACKWARD, int V>
void launch_v(E *y, const E *x, const krope_tables *tab, int64_t N, int64_t H, int64_t D, int bug)
{
    const int64_t units = N * H * (D / 2) / V;
    const unsigned blocks = (unsigned)((units + 255) / 256);
    if (N * H * D < (1ll << 31) && tab->T < (1ll << 31))
        rope_kernel<E, uint32_t, VARIANT, BACKWARD, V><<<blocks, 256, 0, kstream()>>>(y, x, tab->cos_t, tab->sin_t, tab->inv_freq,
                                                                        (uint32_t)N, (uint32_t)H, (uint32_t)D,
                                                                        (uint32_t)tab->T, bug);
    else
        rope_kernel<E, int64_t, VARIANT, BACKWARD, V><<<blocks, 256, 0, kstream()>>>(y, x, tab->cos_t, tab->sin_t, tab->inv_freq,
                                                                       N, H, D, tab->T, bug);
}

template <typename E, int VARIANT, bool BACKWARD>
void launch(E *y, const E *x, const krope_tables *tab, int64_t N, int64_t H, int64_t D, int bug)
{
    constexpr int V = kvec_width<E>();
    const uintptr_t ptrs = (uintptr_t)y | (uintptr_t)x | (uintptr_t)tab->cos_t | (uintptr_t)tab->sin_t;
    if ((D / 2) % V == 0 && (ptrs & 15) == 0) launch_v<E, VARIANT, BACKWARD, V>(y, x, tab, N, H, D, bug);
    else launch_v<E, VARIANT, BACKWARD, 1>(y, x, tab, N, H, D, bug);
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
