// kernels/relu2.cu — squared ReLU, y = max(x, 0)^2, f'(x) = 2 max(x, 0)
// (see activations.h for the store_preact / store_grad variants).  Shapes:
// any (flat n).
#include "kernels/activations.h"
#include "kernels/kact.cuh"

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
