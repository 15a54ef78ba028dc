// kernels/adamw.cu — one AdamW step, three weight storages, two operation
// orders (see adamw.h).  One thread per element, grid-stride; every
// floating-point operation is an explicit-rounding intrinsic so that nvcc's
// fma contraction cannot change what the check's bound replays.  Replicas
// are blockIdx.y: replica r's arrays start at r * n, and element i of
// replica r is updated exactly as element i of a single call on its arrays
// with its gradient scale and seed.  The fp32 path may also store a narrower
// working copy of the new weights (kadamw_replicas.working): the RNE image a
// separate conversion pass over the weights would write, in the same pass.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "kernels/adamw.h"
#include "kernels/common/kelem.cuh"
#include "kernels/common/klaunch.cuh"
#include "kernels/registry.h"

extern "C" const kvariant kadamw_variants[KADAMW_NVARIANTS] = {
    {"llmc", "m, v by beta-weighted sums; p -= lr (m/bc1 / (sqrt(v/bc2) + eps) + wd p) (llm.c's order)"},
    {"torch", "p *= 1 - lr wd first; m, v by lerp; p -= (lr/bc1) m / (sqrt(v)/sqrt(bc2) + eps) (torch.optim.AdamW)"},
};

// ---- registry entry (kernels/registry.h): name, paths, fp8 note, variants ----

#define NO_FP8_NOTE "no fp8 path: weights rounded to 3 mantissa bits every step would not train"

extern "C" const kop kop_adamw = {
    "adamw",
    "AdamW step with fp32 master weights (bf16/fp16 weights = the master rounded to nearest)",
    KPATHS_NO_FP8, NO_FP8_NOTE, kadamw_variants, KADAMW_NVARIANTS,
};
extern "C" const kop kop_adamw_sr = {
    "adamw_sr",
    "AdamW step on the weights themselves, stochastic rounding from a hash of (seed, step, index)",
    KPATHS_NO_FP8, NO_FP8_NOTE, kadamw_variants, KADAMW_NVARIANTS,
};
extern "C" const kop kop_adamw_split = {
    "adamw_split",
    "AdamW step on bf16 weights plus a 16-bit buffer with the low half of the fp32 master",
    KPATH_BIT(KPATH_BF16), NO_FP8_NOTE, kadamw_variants, KADAMW_NVARIANTS,
};

extern "C" const char *kadamw_storage_name(kadamw_storage s)
{
    static const char *const names[KADAMW_NSTORAGE] = {"master_fp32", "stochastic", "split_master"};
    return (unsigned)s < KADAMW_NSTORAGE ? names[s] : "?";
}

// splitmix64's finaliser (Steele, Lea, Flood 2014): a bijective 64-bit mix.
__host__ __device__ __forceinline__ uint64_t adamw_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Counter-based: the bits depend on (seed, step, index) only, never on the
// launch, so a step is bitwise repeatable.
__host__ __device__ __forceinline__ uint32_t adamw_bits(uint64_t seed, int64_t step, int64_t index)
{
    uint64_t h = adamw_mix64(seed + 0x9e3779b97f4a7c15ull);
    h = adamw_mix64(h ^ ((uint64_t)step * 0xd1b54a32d192ed03ull));
    h = adamw_mix64(h ^ (uint64_t)index);
    return (uint32_t)(h >> 40); // 24 bits
}

extern "C" uint32_t kadamw_sr_bits(uint64_t seed, int64_t step, int64_t index) { return adamw_bits(seed, step, index); }

extern "C" float kadamw_bias_correction(float beta, int64_t step)
{
    return (float)(1.0 - pow((double)beta, (double)step));
}

// Stochastic rounding of the exact value hi + lo (hi an fp32, |lo| below half
// an fp32 ulp of hi) into fp32: toward lo's side with probability |lo| / gap.
__device__ __forceinline__ float sr_to_fp32(float hi, float lo, uint32_t bits24)
{
    if (lo == 0.0f) return hi;
    float other = nextafterf(hi, lo > 0.0f ? INFINITY : -INFINITY);
    float gap = fabsf(__fsub_rn(other, hi)); // adjacent floats: exact
    float frac = __fdiv_rn(fabsf(lo), gap);  // gap is a power of two: exact
    return (float)bits24 * 0x1p-24f < frac ? other : hi;
}

// Stochastic rounding of an fp32 value into bf16/fp16: the neighbour away
// from zero with probability equal to the fraction of the gap (24-bit
// resolution: a bias below 2^-24 ulp).
template <class T> __device__ __forceinline__ T sr_narrow(float x, uint32_t bits24);
template <> __device__ __forceinline__ __nv_bfloat16 sr_narrow<__nv_bfloat16>(float x, uint32_t bits24)
{
    __nv_bfloat16 down = __float2bfloat16_rz(x);
    float d = __bfloat162float(down);
    if (d == x || !isfinite(x)) return down;
    __nv_bfloat16 up = __ushort_as_bfloat16((unsigned short)(__bfloat16_as_ushort(down) + 1));
    float frac = __fdiv_rn(fabsf(__fsub_rn(x, d)), fabsf(__fsub_rn(__bfloat162float(up), d)));
    return (float)bits24 * 0x1p-24f < frac ? up : down;
}
template <> __device__ __forceinline__ __half sr_narrow<__half>(float x, uint32_t bits24)
{
    __half down = __float2half_rz(x);
    float d = __half2float(down);
    if (d == x || !isfinite(x)) return down;
    __half up = __ushort_as_half((unsigned short)(__half_as_ushort(down) + 1));
    float frac = __fdiv_rn(fabsf(__fsub_rn(x, d)), fabsf(__fsub_rn(__half2float(up), d)));
    return (float)bits24 * 0x1p-24f < frac ? up : down;
}

struct adamw_consts {
    float lr, beta1, beta2, eps, wd;
    float bc1, bc2;
    float one_minus_beta1, one_minus_beta2; // exact: 1 - beta for beta in [0.5, 1] (Sterbenz)
    float decay;                            // torch: 1 - lr wd (two fp32 roundings, on the device)
    float sqrt_bc2;                         // torch: sqrtf(bc2)
    float step_size;                        // torch: lr / bc1
    int64_t step;
    uint64_t seed;
};

// The update of one element, given the old weight p (fp32).  Returns the new
// weight as an fp32 hi plus the rounding error lo of the last subtraction
// (TwoSum), and writes the new moments.
template <int VARIANT>
__device__ __forceinline__ float adamw_element(const adamw_consts &c, float p, float g, float &m, float &v, float &lo)
{
    float t; // the amount subtracted from (the decayed) p
    float base = p;
    if (VARIANT == KADAMW_LLMC) {
        m = __fmaf_rn(c.beta1, m, __fmul_rn(c.one_minus_beta1, g));
        v = __fmaf_rn(c.beta2, v, __fmul_rn(c.one_minus_beta2, __fmul_rn(g, g)));
        float mhat = __fdiv_rn(m, c.bc1), vhat = __fdiv_rn(v, c.bc2);
        float upd = __fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), c.eps));
        t = __fmul_rn(c.lr, __fmaf_rn(c.wd, p, upd));
    } else {
        base = __fmul_rn(p, c.decay);
        m = __fmaf_rn(c.one_minus_beta1, __fsub_rn(g, m), m);
        v = __fmaf_rn(c.one_minus_beta2, __fsub_rn(__fmul_rn(g, g), v), v);
        float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), c.sqrt_bc2), c.eps);
        t = __fmul_rn(c.step_size, __fdiv_rn(m, denom));
    }
    // TwoSum (Knuth): hi + lo = base - t exactly.
    float hi = __fsub_rn(base, t);
    float bb = __fsub_rn(hi, base);
    lo = __fadd_rn(__fsub_rn(base, __fsub_rn(hi, bb)), __fsub_rn(-t, bb));
    return hi;
}

// The per-replica device arrays of kadamw_replicas (any may be NULL).
struct adamw_replica_arrays {
    const float *grad_scale;
    const uint64_t *seed;
    const int32_t *skip;
};

// W: the working copy's type (void: none; only with the fp32 path's master storage).
template <class T, int STORAGE, int VARIANT, class W>
__global__ void adamw_kernel(int64_t n, T *params, float *master, uint16_t *low_bits, float *m_arr, float *v_arr,
                             const T *grad, W *working, adamw_consts c_arg, const adamw_consts *c_dev,
                             adamw_replica_arrays ra, int bug)
{
    constexpr bool has_working = !std::is_void<W>::value;
    const int64_t r = blockIdx.y;
    if (ra.skip && ra.skip[r]) return; // a skipped step leaves the replica's state as it was
    const adamw_consts c = c_dev ? *c_dev : c_arg;
    const float grad_scale = ra.grad_scale ? ra.grad_scale[r] : 1.0f;
    const uint64_t seed = ra.seed ? ra.seed[r] : c.seed;
    params += r * n;
    if (master) master += r * n;
    if (low_bits) low_bits += r * n;
    m_arr += r * n;
    v_arr += r * n;
    grad += r * n;
    if constexpr (has_working) working += r * n;
    const int64_t last = bug == KBUG_DROP_TERM ? n - 1 : n; // the planted bug leaves the last element untouched
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < last; i += (int64_t)gridDim.x * blockDim.x) {
        float g = kto_float(grad[i]);
        // the trainer's gradient scaling (clip factor / loss scale), rounded
        // into the gradient's format as an in-place scaling pass would
        if (grad_scale != 1.0f) g = kto_float(kfrom_float<T>(__fmul_rn(g, grad_scale), KBUG_NONE));
        float m = m_arr[i], v = v_arr[i];
        float p;
        if (STORAGE == KADAMW_SPLIT_MASTER) {
            uint32_t hi_bits = __bfloat16_as_ushort(reinterpret_cast<const __nv_bfloat16 *>(params)[i]);
            p = __uint_as_float((hi_bits << 16) | low_bits[i]);
        } else if (STORAGE == KADAMW_MASTER_FP32 && master) {
            p = master[i];
        } else {
            p = kto_float(params[i]);
        }
        float lo;
        float hi = adamw_element<VARIANT>(c, p, g, m, v, lo);
        m_arr[i] = kfrom_float<float>(m, bug);
        v_arr[i] = kfrom_float<float>(v, bug);
        if (STORAGE == KADAMW_SPLIT_MASTER) {
            uint32_t bits = __float_as_uint(hi);
            reinterpret_cast<__nv_bfloat16 *>(params)[i] = __ushort_as_bfloat16((unsigned short)(bits >> 16));
            low_bits[i] = (uint16_t)(bits & 0xFFFFu);
        } else if (STORAGE == KADAMW_STOCHASTIC) {
            uint32_t bits = adamw_bits(seed, c.step, i);
            if constexpr (sizeof(T) == 4) params[i] = sr_to_fp32(hi, lo, bits);
            else params[i] = sr_narrow<T>(hi, bits);
        } else {
            if (master) master[i] = hi;
            params[i] = kfrom_float<T>(hi, bug);
            if constexpr (has_working) working[i] = kfrom_float<W>(hi, bug);
        }
    }
}

extern "C" int kadamw_supports(kpath path, kadamw_storage storage, char *why, size_t why_len)
{
    const char *reason = nullptr;
    if (path != KPATH_FP32 && path != KPATH_BF16 && path != KPATH_FP16)
        reason = "AdamW keeps weights in fp32, bf16 or fp16 (fp8 weights would be rounded to 3 bits every step)";
    else if ((unsigned)storage >= KADAMW_NSTORAGE) reason = "unknown weight storage";
    else if (storage == KADAMW_SPLIT_MASTER && path != KPATH_BF16)
        reason = "the split master needs bf16 weights: only bf16 is the high half of an fp32";
    if (why && why_len) snprintf(why, why_len, "%s", reason ? reason : "");
    return reason == nullptr;
}

template <class T, int STORAGE, class W = void>
static void launch(int variant, int64_t R, int64_t n, void *params, float *master, uint16_t *low, float *m, float *v,
                   const void *grad, void *working, const adamw_consts &c, const adamw_consts *c_dev,
                   adamw_replica_arrays ra, int bug)
{
    int threads = 256;
    int64_t blocks = (n + threads - 1) / threads;
    if (blocks > 65536) blocks = 65536;
    dim3 grid((unsigned)blocks, (unsigned)R);
    if (variant == KADAMW_LLMC)
        adamw_kernel<T, STORAGE, KADAMW_LLMC, W><<<grid, threads, 0, kstream()>>>(
            n, (T *)params, master, low, m, v, (const T *)grad, (W *)working, c, c_dev, ra, bug);
    else
        adamw_kernel<T, STORAGE, KADAMW_TORCH, W><<<grid, threads, 0, kstream()>>>(
            n, (T *)params, master, low, m, v, (const T *)grad, (W *)working, c, c_dev, ra, bug);
}

template <class T>
static void launch_storage(kadamw_storage storage, int variant, int64_t R, int64_t n, void *params, float *master,
                           uint16_t *low, float *m, float *v, const void *grad, const adamw_consts &c,
                           const adamw_consts *c_dev, adamw_replica_arrays ra, int bug)
{
    switch (storage) {
    case KADAMW_MASTER_FP32:
        launch<T, KADAMW_MASTER_FP32>(variant, R, n, params, master, low, m, v, grad, nullptr, c, c_dev, ra, bug);
        break;
    case KADAMW_STOCHASTIC:
        launch<T, KADAMW_STOCHASTIC>(variant, R, n, params, master, low, m, v, grad, nullptr, c, c_dev, ra, bug);
        break;
    default:
        launch<T, KADAMW_SPLIT_MASTER>(variant, R, n, params, master, low, m, v, grad, nullptr, c, c_dev, ra, bug);
        break;
    }
}

// The constants of one step from h (validated), computed on the host.
static int make_consts(const char *ctx, const kadamw_hparams *h, adamw_consts *c)
{
    if (!h || h->step < 1) return kernels_fail("%s: step must be >= 1", ctx);
    if (!(h->beta1 >= 0.5f && h->beta1 < 1.0f && h->beta2 >= 0.5f && h->beta2 < 1.0f))
        return kernels_fail("%s: beta1 = %g, beta2 = %g: the kernels need betas in [0.5, 1) (1 - beta then exact)",
                            ctx, (double)h->beta1, (double)h->beta2);
    c->lr = h->lr;
    c->beta1 = h->beta1;
    c->beta2 = h->beta2;
    c->eps = h->eps;
    c->wd = h->weight_decay;
    c->bc1 = kadamw_bias_correction(h->beta1, h->step);
    c->bc2 = kadamw_bias_correction(h->beta2, h->step);
    c->one_minus_beta1 = 1.0f - h->beta1;
    c->one_minus_beta2 = 1.0f - h->beta2;
    // Host fp32 arithmetic matches the device's for these IEEE operations.
    volatile float lr_wd = h->lr * h->weight_decay;
    c->decay = 1.0f - lr_wd;
    c->sqrt_bc2 = sqrtf(c->bc2);
    c->step_size = h->lr / c->bc1;
    c->step = h->step;
    c->seed = h->seed;
    return 0;
}

extern "C" size_t kadamw_hparams_bytes(void) { return sizeof(adamw_consts); }

extern "C" int kadamw_hparams_upload(void *device_hparams, const kadamw_hparams *h)
{
    const char *ctx = "adamw hyperparameters upload";
    adamw_consts c;
    if (!device_hparams) return kernels_fail("%s: no device buffer", ctx);
    if (make_consts(ctx, h, &c)) return -1;
    // From pageable memory the copy is staged before the call returns, so c
    // may go out of scope; on the device it is ordered before later launches.
    cudaError_t err = cudaMemcpyAsync(device_hparams, &c, sizeof c, cudaMemcpyHostToDevice, kstream());
    if (err != cudaSuccess) return kernels_fail("%s: cudaMemcpyAsync failed: %s", ctx, cudaGetErrorString(err));
    return 0;
}

extern "C" int kadamw_step_replicas(kpath path, kadamw_storage storage, int variant, int64_t replicas, int64_t n,
                                    void *params, float *master, uint16_t *low_bits, float *m, float *v,
                                    const void *grad, const kadamw_hparams *h, const kadamw_replicas *rep)
{
    char ctx[192];
    snprintf(ctx, sizeof ctx, "adamw %s/%s/%s n=%lld%s", kpath_name(path), kadamw_storage_name(storage),
             variant >= 0 && variant < KADAMW_NVARIANTS ? kadamw_variants[variant].name : "?", (long long)n,
             replicas != 1 ? " (replicas)" : "");
    char why[160];
    if (!kadamw_supports(path, storage, why, sizeof why)) return kernels_fail("%s: %s", ctx, why);
    if (variant < 0 || variant >= KADAMW_NVARIANTS) return kernels_fail("%s: unknown variant %d", ctx, variant);
    if (n <= 0) return kernels_fail("%s: n must be positive", ctx);
    if (replicas < 1 || replicas > 65535) return kernels_fail("%s: %lld replicas (1 to 65535)", ctx, (long long)replicas);
    const adamw_consts *c_dev = rep ? (const adamw_consts *)rep->hparams : nullptr;
    adamw_consts c;
    memset(&c, 0, sizeof c);
    if (!c_dev && make_consts(ctx, h, &c)) return -1;
    if (!params || !m || !v || !grad) return kernels_fail("%s: null params, m, v or grad", ctx);
    if (storage == KADAMW_MASTER_FP32 && path != KPATH_FP32 && !master)
        return kernels_fail("%s: %s weights need an fp32 master array", ctx, kpath_name(path));
    if (storage == KADAMW_SPLIT_MASTER && !low_bits) return kernels_fail("%s: split_master needs low_bits", ctx);
    if (storage != KADAMW_MASTER_FP32 || path == KPATH_FP32) master = nullptr;
    void *working = rep ? rep->working : nullptr;
    if (working && (path != KPATH_FP32 || storage != KADAMW_MASTER_FP32 ||
                    (rep->working_format != PREC_BF16 && rep->working_format != PREC_FP16)))
        return kernels_fail("%s: a working copy goes with fp32 weights updated in place (master_fp32) and is bf16 "
                            "or fp16, not %s", ctx, prec_format_name(rep->working_format));
    adamw_replica_arrays ra = {rep ? rep->grad_scale : nullptr, rep ? rep->seed : nullptr,
                               rep ? rep->skip : nullptr};
    const int bug = (int)kernels_planted_bug();
    switch (path) {
    case KPATH_FP32:
        if (working && rep->working_format == PREC_BF16)
            launch<float, KADAMW_MASTER_FP32, __nv_bfloat16>(variant, replicas, n, params, nullptr, nullptr, m, v, grad,
                                                             working, c, c_dev, ra, bug);
        else if (working)
            launch<float, KADAMW_MASTER_FP32, __half>(variant, replicas, n, params, nullptr, nullptr, m, v, grad,
                                                      working, c, c_dev, ra, bug);
        else
            launch_storage<float>(storage, variant, replicas, n, params, master, low_bits, m, v, grad, c, c_dev, ra,
                                  bug);
        break;
    case KPATH_BF16:
        launch_storage<__nv_bfloat16>(storage, variant, replicas, n, params, master, low_bits, m, v, grad, c, c_dev,
                                      ra, bug);
        break;
    default:
        launch_storage<__half>(storage, variant, replicas, n, params, master, low_bits, m, v, grad, c, c_dev, ra, bug);
        break;
    }
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return kernels_fail("%s: launch of adamw_kernel failed: %s", ctx, cudaGetErrorString(err));
    return 0;
}

extern "C" int kadamw_step(kpath path, kadamw_storage storage, int variant, int64_t n, void *params, float *master,
                           uint16_t *low_bits, float *m, float *v, const void *grad, const kadamw_hparams *h)
{
    return kadamw_step_replicas(path, storage, variant, 1, n, params, master, low_bits, m, v, grad, h, nullptr);
}
