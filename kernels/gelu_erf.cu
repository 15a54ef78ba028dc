// kernels/gelu_erf.cu — GELU, exact (erf) form (see activations.h).  Shapes:
// any (flat n).  Variants compute Phi(x):
//   erff     (1 + erff(x / sqrt 2)) / 2        (erff: 2 ulps; cancels for x << 0)
//   normcdf  normcdff(x)                        (5 ulps; no cancellation)
// The backward adds x phi(x) = x exp(-x^2/2) / sqrt(2 pi) with expf.
#include "kernels/activations.h"
#include "kernels/common/kact.cuh"
#include "kernels/registry.h"

// ---- registry entry (kernels/registry.h): name, paths, fp8 note, variants ----

static const kvariant variants[KGELU_ERF_NVARIANTS] = {
    {"erff", "x/2 (1 + erff(x / sqrt 2)): cancels for x << 0"},
    {"normcdf", "x normcdff(x): the same function without the cancellation (normcdff: 5 ulps)"},
};

extern "C" const kop kop_gelu_erf = {
    "gelu_erf",
    "GELU, exact form: y = x Phi(x) = x/2 (1 + erf(x / sqrt 2)); backward dx = dy (Phi(x) + x phi(x))",
    KPATHS_ALL,
    "fp8: x and y in e4m3, dy and dx in e5m2, per-tensor scales amax/max_finite (current scaling), fp32 math",
    variants,
    KGELU_ERF_NVARIANTS,
};

namespace {

constexpr float kInvSqrt2 = 0.70710678118654752f, kInvSqrt2Pi = 0.39894228040143268f;

struct gelu_erf_act {
    template <int VAR> static __device__ __forceinline__ float cdf(float x)
    {
        if (VAR == KGELU_ERF_NORMCDF) return normcdff(x);
        return 0.5f * (1.0f + erff(x * kInvSqrt2));
    }
    template <int VAR> static __device__ __forceinline__ float f(float x)
    {
        if (VAR == KGELU_ERF_NORMCDF) return x * normcdff(x);
        return 0.5f * x * (1.0f + erff(x * kInvSqrt2));
    }
    template <int VAR> static __device__ __forceinline__ float df(float x)
    {
        float pdf = expf(-0.5f * x * x) * kInvSqrt2Pi;
        return cdf<VAR>(x) + x * pdf;
    }
};

} // namespace

extern "C" int kgelu_erf_forward(ktensor *y, const ktensor *x, int variant)
{
    switch (variant) {
    case KGELU_ERF_ERFF: return kact_forward_launch<gelu_erf_act, KGELU_ERF_ERFF>("gelu_erf", y, nullptr, x);
    case KGELU_ERF_NORMCDF: return kact_forward_launch<gelu_erf_act, KGELU_ERF_NORMCDF>("gelu_erf", y, nullptr, x);
    default: return kernels_fail("gelu_erf forward: unknown variant %d", variant);
    }
}

extern "C" int kgelu_erf_backward(ktensor *dx, const ktensor *dy, const ktensor *x, int variant)
{
    switch (variant) {
    case KGELU_ERF_ERFF: return kact_backward_launch<gelu_erf_act, KGELU_ERF_ERFF, false>("gelu_erf", dx, dy, x);
    case KGELU_ERF_NORMCDF: return kact_backward_launch<gelu_erf_act, KGELU_ERF_NORMCDF, false>("gelu_erf", dx, dy, x);
    default: return kernels_fail("gelu_erf backward: unknown variant %d", variant);
    }
}
