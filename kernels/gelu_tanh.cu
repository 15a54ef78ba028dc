// kernels/gelu_tanh.cu — GELU, tanh form (see activations.h).  Shapes: any
// (flat n).  Constants k0 = sqrt(2/pi) and k1 = 0.044715 are rounded to fp32.
// Variants compute tanh three ways:
//   tanhf        the accurate library tanh (2 ulps)
//   tanh_approx  PTX tanh.approx.f32 (max error 2^-10.987, PTX ISA), one instruction
//   sigmoid      0.5 x (1 + tanh z) = x / (1 + exp(-2z)), with expf
#include "kernels/activations.h"
#include "kernels/common/kact.cuh"
#include "kernels/registry.h"

// ---- registry entry (kernels/registry.h): name, paths, fp8 note, variants ----

static const kvariant variants[KGELU_TANH_NVARIANTS] = {
    {"tanhf", "0.5 x (1 + tanhf(z)) with the accurate library tanh (2 ulps)"},
    {"tanh_approx", "0.5 x (1 + tanh.approx.f32(z)): one MUFU instruction, ~11 correct bits"},
    {"sigmoid", "x / (1 + expf(-2z)), the same function through the logistic form"},
};

extern "C" const kop kop_gelu_tanh = {
    "gelu_tanh",
    "GELU, tanh approximation (GPT-2's): y = x/2 (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))); backward dx",
    KPATHS_ALL,
    "fp8: x and y in e4m3, dy and dx in e5m2, per-tensor scales amax/max_finite (current scaling), fp32 math "
    "(the activation feeding an fp8 down-projection)",
    variants,
    KGELU_TANH_NVARIANTS,
};

namespace {

constexpr float kK0 = 0.7978845608028654f, kK1 = 0.044715f;

__device__ __forceinline__ float tanh_approx(float z)
{
    float t;
    asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(z));
    return t;
}

struct gelu_tanh_act {
    template <int VAR> static __device__ __forceinline__ float tanh_of(float z)
    {
        return VAR == KGELU_TANH_APPROX ? tanh_approx(z) : tanhf(z);
    }
    template <int VAR> static __device__ __forceinline__ float f(float x)
    {
        float z = kK0 * fmaf(kK1, x * x * x, x);
        if (VAR == KGELU_TANH_SIGMOID) return x / (1.0f + expf(-2.0f * z));
        return 0.5f * x * (1.0f + tanh_of<VAR>(z));
    }
    template <int VAR> static __device__ __forceinline__ float df(float x)
    {
        float x2 = x * x;
        float z = kK0 * fmaf(kK1, x2 * x, x);
        float dz = kK0 * fmaf(3.0f * kK1, x2, 1.0f);
        if (VAR == KGELU_TANH_SIGMOID) {
            float s = 1.0f / (1.0f + expf(-2.0f * z));
            return s + ((2.0f * x) * dz) * s * (1.0f - s);
        }
        float t = tanh_of<VAR>(z);
        return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * dz;
    }
};

} // namespace

extern "C" int kgelu_tanh_forward(ktensor *y, const ktensor *x, int variant)
{
    switch (variant) {
    case KGELU_TANH_TANHF: return kact_forward_launch<gelu_tanh_act, KGELU_TANH_TANHF>("gelu_tanh", y, nullptr, x);
    case KGELU_TANH_APPROX: return kact_forward_launch<gelu_tanh_act, KGELU_TANH_APPROX>("gelu_tanh", y, nullptr, x);
    case KGELU_TANH_SIGMOID: return kact_forward_launch<gelu_tanh_act, KGELU_TANH_SIGMOID>("gelu_tanh", y, nullptr, x);
    default: return kernels_fail("gelu_tanh forward: unknown variant %d", variant);
    }
}

extern "C" int kgelu_tanh_backward(ktensor *dx, const ktensor *dy, const ktensor *x, int variant)
{
    switch (variant) {
    case KGELU_TANH_TANHF: return kact_backward_launch<gelu_tanh_act, KGELU_TANH_TANHF, false>("gelu_tanh", dx, dy, x);
    case KGELU_TANH_APPROX: return kact_backward_launch<gelu_tanh_act, KGELU_TANH_APPROX, false>("gelu_tanh", dx, dy, x);
    case KGELU_TANH_SIGMOID: return kact_backward_launch<gelu_tanh_act, KGELU_TANH_SIGMOID, false>("gelu_tanh", dx, dy, x);
    default: return kernels_fail("gelu_tanh backward: unknown variant %d", variant);
    }
}
