// kernels/residual.cu — y = a + b (see residual.h).  Shapes: flat n.
//   vector  each thread adds 16-byte vectors (8 bf16/fp16 or 4 fp32), grid-stride
//   scalar  one element per thread per step, grid-stride
#include "kernels/common/kelementwise.cuh"
#include "kernels/common/klaunch.cuh"
#include "kernels/registry.h"
#include "kernels/residual.h"

// ---- registry entry (kernels/registry.h): name, paths, fp8 note, variants ----

static const kvariant variants[KRESIDUAL_NVARIANTS] = {
    {"vector", "16-byte vector loads and stores, grid-stride loop"},
    {"scalar", "one element per thread per step, grid-stride loop (same result bit for bit)"},
};

extern "C" const kop kop_residual = {
    "residual",
    "residual add y = a + b (in place allowed); its backward is the identity",
    KPATHS_NO_FP8,
    "no fp8 path: the residual stream accumulates every layer's update; 3 mantissa bits would swamp the "
    "updates (fp8 recipes keep it in bf16/fp32)",
    variants,
    KRESIDUAL_NVARIANTS,
};

namespace {

template <typename T, int V>
__global__ void residual_kernel(T *y, const T *a, const T *b, int64_t n, int bug)
{
    kelem_loop<V>(
        n,
        [&](int64_t i) {
            float va[V], vb[V];
            kelem_load<T, V>(a, i, va);
            kelem_load<T, V>(b, i, vb);
#pragma unroll
            for (int j = 0; j < V; j++) va[j] += vb[j];
            kelem_store_scaled<T, V>(y, i, va, 1.0f, n, bug);
        },
        [&](int64_t i) {
            if (bug == KBUG_DROP_TERM && i == n - 1) return;
            y[i] = kfrom_float<T>(kto_float(a[i]) + kto_float(b[i]), bug);
        });
}

template <typename T> int launch(int variant, ktensor *y, const ktensor *a, const ktensor *b, int64_t n, int bug)
{
    constexpr int V = 16 / (int)sizeof(T);
    if (variant == KRESIDUAL_SCALAR)
        residual_kernel<T, 1><<<kelem_blocks(n, 1), kElemBlock, 0, kstream()>>>((T *)y->data, (const T *)a->data, (const T *)b->data, n, bug);
    else
        residual_kernel<T, V><<<kelem_blocks(n, V), kElemBlock, 0, kstream()>>>((T *)y->data, (const T *)a->data, (const T *)b->data, n, bug);
    return kelem_launched("residual", n);
}

} // namespace

extern "C" int kresidual_forward(ktensor *y, const ktensor *a, const ktensor *b, int variant)
{
    int64_t n = 0, n2 = 0;
    if (kelem_same_size("residual", a, b, &n) || kelem_same_size("residual", a, y, &n2)) return -1;
    if (a->format != b->format || a->format != y->format)
        return kernels_fail("residual: a, b and y must share a format (%s, %s, %s)", prec_format_name(a->format),
                            prec_format_name(b->format), prec_format_name(y->format));
    if (variant < 0 || variant >= KRESIDUAL_NVARIANTS) return kernels_fail("residual: unknown variant %d", variant);
    const int bug = kernels_planted_bug();
    switch (a->format) {
    case PREC_FP32: return launch<float>(variant, y, a, b, n, bug);
    case PREC_BF16: return launch<__nv_bfloat16>(variant, y, a, b, n, bug);
    case PREC_FP16: return launch<__half>(variant, y, a, b, n, bug);
    default: return kernels_fail("residual: no %s path", prec_format_name(a->format));
    }
}
