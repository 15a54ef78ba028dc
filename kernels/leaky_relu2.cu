// kernels/leaky_relu2.cu — squared leaky ReLU with slope 1/2:
// y = (x > 0 ? x : x/2)^2, f'(x) = x > 0 ? 2x : x/2 (see activations.h for
// the store_preact / store_grad variants).  Shapes: any (flat n).
#include "kernels/activations.h"
#include "kernels/common/kact.cuh"
#include "kernels/registry.h"

// ---- registry entry (kernels/registry.h): name, paths, fp8 note, variants ----

extern "C" const kop kop_leaky_relu2 = {
    "leaky_relu2",
    "squared leaky ReLU, slope 1/2: y = (x > 0 ? x : x/2)^2; backward dx = (x > 0 ? 2x : x/2) dy",
    KPATHS_ALL, KRELU2_FP8_NOTE, krelu2_variants, KRELU2_NVARIANTS,
};

namespace {

struct leaky_relu2_act {
    template <int VAR> static __device__ __forceinline__ float f(float x)
    {
        float r = x > 0.0f ? x : 0.5f * x;
        return r * r;
    }
    template <int VAR> static __device__ __forceinline__ float df(float x) { return x > 0.0f ? 2.0f * x : 0.5f * x; }
};

} // namespace

extern "C" int kleaky_relu2_forward(ktensor *y, ktensor *grad, const ktensor *x, int variant)
{
    if (variant == KRELU2_STORE_PREACT) return kact_forward_launch<leaky_relu2_act, 0>("leaky_relu2", y, nullptr, x);
    if (variant == KRELU2_STORE_GRAD) {
        if (!grad) return kernels_fail("leaky_relu2 forward: store_grad needs the gradient tensor");
        return kact_forward_launch<leaky_relu2_act, 0>("leaky_relu2", y, grad, x);
    }
    return kernels_fail("leaky_relu2 forward: unknown variant %d", variant);
}

extern "C" int kleaky_relu2_backward(ktensor *dx, const ktensor *dy, const ktensor *saved, int variant)
{
    if (variant == KRELU2_STORE_PREACT) return kact_backward_launch<leaky_relu2_act, 0, false>("leaky_relu2", dx, dy, saved);
    if (variant == KRELU2_STORE_GRAD) return kact_backward_launch<leaky_relu2_act, 0, true>("leaky_relu2", dx, dy, saved);
    return kernels_fail("leaky_relu2 backward: unknown variant %d", variant);
}
