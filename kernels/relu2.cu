// kernels/relu2.cu — squared ReLU, y = max(x, 0)^2, f'(x) = 2 max(x, 0)
// (see activations.h for the store_preact / store_grad variants).  Shapes:
// any (flat n).
#include "kernels/activations.h"
#include "kernels/common/kact.cuh"
#include "kernels/registry.h"

// ---- registry entry (kernels/registry.h): name, paths, fp8 note, variants ----

extern "C" const kvariant krelu2_variants[KRELU2_NVARIANTS] = {
    {"store_preact", "the forward keeps x; the backward computes f'(x) with a branch, in fp32 (one rounding of dx)"},
    {"store_grad", "the forward also stores g = f'(x) in the activation format; the backward is dx = dy g, branch-free (g rounds too)"},
};

extern "C" const kop kop_relu2 = {
    "relu2",
    "squared ReLU: y = max(x, 0)^2; backward dx = 2 max(x, 0) dy",
    KPATHS_ALL, KRELU2_FP8_NOTE, krelu2_variants, KRELU2_NVARIANTS,
};

namespace {

struct relu2_act {
    template <int VAR> static __device__ __forceinline__ float f(float x)
    {
        float r = fmaxf(x, 0.0f);
        return r * r;
    }
    template <int VAR> static __device__ __forceinline__ float df(float x) { return 2.0f * fmaxf(x, 0.0f); }
};

} // namespace

extern "C" int krelu2_forward(ktensor *y, ktensor *grad, const ktensor *x, int variant)
{
    if (variant == KRELU2_STORE_PREACT) return kact_forward_launch<relu2_act, 0>("relu2", y, nullptr, x);
    if (variant == KRELU2_STORE_GRAD) {
        if (!grad) return kernels_fail("relu2 forward: store_grad needs the gradient tensor");
        return kact_forward_launch<relu2_act, 0>("relu2", y, grad, x);
    }
    return kernels_fail("relu2 forward: unknown variant %d", variant);
}

extern "C" int krelu2_backward(ktensor *dx, const ktensor *dy, const ktensor *saved, int variant)
{
    if (variant == KRELU2_STORE_PREACT) return kact_backward_launch<relu2_act, 0, false>("relu2", dx, dy, saved);
    if (variant == KRELU2_STORE_GRAD) return kact_backward_launch<relu2_act, 0, true>("relu2", dx, dy, saved);
    return kernels_fail("relu2 backward: unknown variant %d", variant);
}
