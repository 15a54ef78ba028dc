// kernels/matmul.cu — matmul through cuBLASLt (fp32, tf32, bf16, fp16, fp8 with
// per-tensor scales), fp8 quantisation from the current amax, our own split-K
// reduction and split epilogue, and a block-scaled fp8 kernel.  See matmul.h
// for shapes, paths and variants.
#include <cublasLt.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/common/kelem.cuh"
#include "kernels/matmul.h"
#include "kernels/registry.h"

extern "C" const kvariant kmatmul_variants[KMATMUL_NVARIANTS] = {
    {"fused", "cuBLASLt heuristic's best algorithm, split-K excluded; bias and GELU in its epilogue"},
    {"split_epilogue", "GEMM rounds to the output format, then bias + GELU in our fp32 kernel and a second rounding"},
    {"split_k", "K in 4 slices, each a cuBLASLt GEMM into fp32; slices added in fixed order with the epilogue"},
};

// ---- registry entry (kernels/registry.h): name, paths, fp8 note, variants ----

static const kvariant block_variants[1] = {
    {"promote_128", "our mma.sync kernel: fp8 partial sums of each 128-wide K group scaled and added in fp32"},
};

extern "C" const kop kop_matmul = {
    "matmul",
    "y = epi(alpha op(A) op(B) + beta C + bias), epi = identity or GELU (tanh), through cuBLASLt; fp32 "
    "accumulation (fp8: cuBLASLt's periodic promotion); linear forward and both backward GEMMs by transposes",
    KPATHS_ALL,
    "A, B e4m3 x e4m3 (forward) or e5m2 x e4m3 (gradients), per-tensor scales amax/max_finite computed on the "
    "GPU, K-contiguous (TN), K and N multiples of 16; C, y, bias bf16",
    kmatmul_variants,
    KMATMUL_NVARIANTS,
};
extern "C" const kop kop_matmul_fast = {
    "matmul_fast",
    "matmul with the fast tensor-core mode: fp32 inputs rounded to tf32, or fp8 with "
    "CUBLASLT_MATMUL_DESC_FAST_ACCUM (no promotion of partial sums)",
    KPATH_BIT(KPATH_FP32) | KPATH_BIT(KPATH_FP8),
    "as matmul's fp8 path, accumulated without promotion out of the tensor cores",
    kmatmul_variants,
    KMATMUL_NVARIANTS,
};
extern "C" const kop kop_matmul_block_fp8 = {
    "matmul_block_fp8",
    "fp8 matmul with block scales (1x128 tiles of A, 128x128 tiles of B) and fp32 promotion every 128 "
    "elements of K (DeepSeek-V3), our own kernel",
    KPATH_BIT(KPATH_FP8),
    "A, B e4m3 or e5m2 with one fp32 scale per tile (amax/max_finite of the tile); C, y, bias bf16",
    block_variants,
    1,
};

extern "C" const char *kmatmul_accum_name(kmatmul_accum acc)
{
    static const char *const names[KMATMUL_NACCUMS] = {"default", "fast", "block_scaled"};
    return (unsigned)acc < KMATMUL_NACCUMS ? names[acc] : "?";
}

#define KCUDA(ctx, call)                                                                           \
    do {                                                                                           \
        cudaError_t kerr_ = (call);                                                                \
        if (kerr_ != cudaSuccess)                                                                  \
            return kernels_fail("%s: %s failed: %s", (ctx), #call, cudaGetErrorString(kerr_));     \
    } while (0)

#define KLAUNCHED(ctx, kernel_name)                                                                \
    do {                                                                                           \
        cudaError_t kerr_ = cudaGetLastError();                                                    \
        if (kerr_ != cudaSuccess)                                                                  \
            return kernels_fail("%s: launch of %s failed: %s", (ctx), (kernel_name),               \
                                cudaGetErrorString(kerr_));                                        \
    } while (0)

// ---- workspaces ----------------------------------------------------------------

enum { WS_LT, WS_PARTIALS, WS_QA, WS_QB, WS_SA, WS_SB, WS_AMAX, WS_COUNT };
static void *ws_ptr[WS_COUNT];
static size_t ws_size[WS_COUNT];
static const size_t LT_WORKSPACE_BYTES = 32u << 20;

static int ws_get(const char *ctx, int slot, size_t bytes, void **out)
{
    if (bytes > ws_size[slot]) {
        if (ws_ptr[slot]) KCUDA(ctx, cudaFree(ws_ptr[slot]));
        ws_ptr[slot] = nullptr;
        ws_size[slot] = 0;
        KCUDA(ctx, cudaMalloc(&ws_ptr[slot], bytes));
        ws_size[slot] = bytes;
    }
    *out = ws_ptr[slot];
    return 0;
}

// ---- cuBLASLt plans ----------------------------------------------------------------

#define KLT(ctx, call)                                                                             \
    do {                                                                                           \
        cublasStatus_t kst_ = (call);                                                              \
        if (kst_ != CUBLAS_STATUS_SUCCESS)                                                         \
            return kernels_fail("%s: %s failed: %s", (ctx), #call, cublasLtGetStatusString(kst_)); \
    } while (0)

enum { LT_MAX_ALGOS = 8 };

// One GEMM as cuBLASLt sees it, in our row-major terms (operand A of cuBLASLt
// is our B and vice versa: row-major y = A B is column-major y^T = B^T A^T).
struct lt_gemm {
    cudaDataType a_type, b_type, out_type;
    cublasComputeType_t compute;
    int a_trans, b_trans;
    int64_t M, N, K, lda, ldb;
    const void *a, *b, *c;
    void *d;
    float alpha, beta;
    const void *bias;
    int gelu;
    const float *a_scale, *b_scale;
    int fast_accum;
};

struct lt_plan {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulHeuristicResult_t algos[LT_MAX_ALGOS];
    int n_algos;
    int split_k_excluded; // 0 when no algorithm without split-K existed and fp32 split-K was allowed
};

static char lt_last_algo[200];

static cublasLtHandle_t lt_handle;
static std::unordered_map<std::string, lt_plan> lt_plans;

static uint32_t pointer_alignment(const void *p)
{
    uintptr_t x = (uintptr_t)p;
    uint32_t a = 256;
    while (a > 1 && (x % a) != 0) a >>= 1;
    return a;
}

static std::string lt_key(const lt_gemm &g)
{
    char k[320];
    snprintf(k, sizeof k, "%d %d %d %d %d %d %lld %lld %lld %lld %lld %d %d %d %d %d %u %u %u %u", (int)g.a_type,
             (int)g.b_type, (int)g.out_type, (int)g.compute, g.a_trans, g.b_trans, (long long)g.M, (long long)g.N,
             (long long)g.K, (long long)g.lda, (long long)g.ldb, g.bias != nullptr, g.gelu, g.a_scale != nullptr,
             g.fast_accum, g.c != nullptr && g.beta != 0.0f, pointer_alignment(g.a), pointer_alignment(g.b),
             pointer_alignment(g.c ? g.c : g.d), pointer_alignment(g.d));
    return k;
}

static int lt_plan_get(const char *ctx, const lt_gemm &g, lt_plan **out)
{
    if (!lt_handle) KLT(ctx, cublasLtCreate(&lt_handle));
    std::string key = lt_key(g);
    auto it = lt_plans.find(key);
    if (it != lt_plans.end()) {
        *out = &it->second;
        return 0;
    }
    lt_plan p;
    memset(&p, 0, sizeof p);
    KLT(ctx, cublasLtMatmulDescCreate(&p.desc, g.compute, CUDA_R_32F));
    cublasOperation_t op_a = g.b_trans ? CUBLAS_OP_T : CUBLAS_OP_N; // cuBLASLt's A is our B
    cublasOperation_t op_b = g.a_trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    KLT(ctx, cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
    KLT(ctx, cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
    cublasLtEpilogue_t epi = g.bias ? (g.gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                                    : (g.gelu ? CUBLASLT_EPILOGUE_GELU : CUBLASLT_EPILOGUE_DEFAULT);
    KLT(ctx, cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (g.bias) {
        int32_t bias_type = g.out_type;
        KLT(ctx, cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                sizeof bias_type));
        KLT(ctx, cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias));
    }
    if (g.a_scale) {
        KLT(ctx, cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g.b_scale,
                                                sizeof g.b_scale));
        KLT(ctx, cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g.a_scale,
                                                sizeof g.a_scale));
        int8_t fast = (int8_t)g.fast_accum;
        KLT(ctx, cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
    }
    // cuBLASLt's A (our B): column-major K x N when b_trans (stored [N,K]), else N x K.
    if (g.b_trans) KLT(ctx, cublasLtMatrixLayoutCreate(&p.la, g.b_type, g.K, g.N, g.ldb));
    else KLT(ctx, cublasLtMatrixLayoutCreate(&p.la, g.b_type, g.N, g.K, g.ldb));
    if (g.a_trans) KLT(ctx, cublasLtMatrixLayoutCreate(&p.lb, g.a_type, g.M, g.K, g.lda));
    else KLT(ctx, cublasLtMatrixLayoutCreate(&p.lb, g.a_type, g.K, g.M, g.lda));
    KLT(ctx, cublasLtMatrixLayoutCreate(&p.lc, g.out_type, g.N, g.M, g.N));

    cublasLtMatmulPreference_t pref;
    KLT(ctx, cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws_bytes = LT_WORKSPACE_BYTES;
    uint32_t al_a = pointer_alignment(g.b), al_b = pointer_alignment(g.a);
    uint32_t al_c = pointer_alignment(g.c ? g.c : g.d), al_d = pointer_alignment(g.d);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d);
    // Split-K is a variant of its own (ours): exclude cuBLASLt's, whose
    // reduction would change the summation order behind our back.
    uint32_t no_reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &no_reduction,
                                         sizeof no_reduction);
    p.split_k_excluded = 1;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt_handle, p.desc, p.la, p.lb, p.lc, p.lc, pref,
                                                       LT_MAX_ALGOS, p.algos, &p.n_algos);
    if (st != CUBLAS_STATUS_SUCCESS || p.n_algos == 0) {
        // Only split-K whose partial sums stay in fp32 (the compute type):
        // the in-place and output-type schemes round partials to the output
        // format, which no bound of ours covers.
        uint32_t fp32_partials = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &fp32_partials,
                                             sizeof fp32_partials);
        p.split_k_excluded = 0;
        st = cublasLtMatmulAlgoGetHeuristic(lt_handle, p.desc, p.la, p.lb, p.lc, p.lc, pref, LT_MAX_ALGOS, p.algos,
                                            &p.n_algos);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || p.n_algos == 0) {
        cublasLtMatmulDescDestroy(p.desc);
        cublasLtMatrixLayoutDestroy(p.la);
        cublasLtMatrixLayoutDestroy(p.lb);
        cublasLtMatrixLayoutDestroy(p.lc);
        return kernels_fail("%s: cublasLtMatmulAlgoGetHeuristic found no algorithm (%s)", ctx,
                            st == CUBLAS_STATUS_SUCCESS ? "0 results" : cublasLtGetStatusString(st));
    }
    auto ins = lt_plans.emplace(key, p);
    *out = &ins.first->second;
    return 0;
}

static int lt_run(const char *ctx, lt_plan *p, const lt_gemm &g, int algo_index)
{
    void *ws = nullptr;
    if (ws_get(ctx, WS_LT, LT_WORKSPACE_BYTES, &ws)) return -1;
    // Pointers may differ from the ones the plan was made with (same alignment).
    if (g.bias)
        KLT(ctx, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias));
    if (g.a_scale) {
        KLT(ctx, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g.b_scale,
                                                sizeof g.b_scale));
        KLT(ctx, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g.a_scale,
                                                sizeof g.a_scale));
    }
    const void *c = (g.c && g.beta != 0.0f) ? g.c : g.d;
    float beta = (g.c && g.beta != 0.0f) ? g.beta : 0.0f;
    KLT(ctx, cublasLtMatmul(lt_handle, p->desc, &g.alpha, g.b, p->la, g.a, p->lb, &beta, c, p->lc, g.d, p->lc,
                            &p->algos[algo_index].algo, ws, LT_WORKSPACE_BYTES, 0));
    int32_t id = -1, splitk = 1;
    uint32_t tile = 0, stages = 0, reduction = 0;
    const cublasLtMatmulAlgo_t *al = &p->algos[algo_index].algo;
    cublasLtMatmulAlgoConfigGetAttribute(al, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, nullptr);
    cublasLtMatmulAlgoConfigGetAttribute(al, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, nullptr);
    cublasLtMatmulAlgoConfigGetAttribute(al, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, nullptr);
    cublasLtMatmulAlgoConfigGetAttribute(al, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, nullptr);
    cublasLtMatmulAlgoConfigGetAttribute(al, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &reduction, sizeof reduction,
                                         nullptr);
    snprintf(lt_last_algo, sizeof lt_last_algo, "cuBLASLt algo %d tile %u stages %u splitK %d reduction %u%s", id,
             tile, stages, splitk, reduction, p->split_k_excluded ? "" : " (fp32 split-K allowed)");
    return 0;
}

extern "C" const char *kmatmul_last_algo(void) { return lt_last_algo; }

static int lt_gemm_run(const char *ctx, const lt_gemm &g)
{
    lt_plan *p;
    if (lt_plan_get(ctx, g, &p)) return -1;
    return lt_run(ctx, p, g, 0);
}

// ---- epilogue kernels ------------------------------------------------------------

__device__ __forceinline__ float gelu_tanh(float z)
{
    const float sqrt_2_over_pi = 0.7978845608028654f;
    float inner = sqrt_2_over_pi * (z + 0.044715f * z * z * z);
    return 0.5f * z * (1.0f + tanhf(inner));
}

// y[m,n] = epi(alpha * sum_s partials[s][m,n] + beta * c[m,n] + bias[n]); the
// slices are added in order s = 0, 1, ... so the result never depends on timing.
// partials [S, M, N] fp32; c, y [M,N]; bias [N].
template <class T>
__global__ void splitk_reduce_kernel(const float *partials, int S, int64_t MN, int64_t N, float alpha, const T *c,
                                     float beta, const T *bias, int gelu, T *y, int bug)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < MN; i += (int64_t)gridDim.x * blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s < S; s++) acc += partials[s * MN + i];
        float z = alpha * acc;
        if (c) z += beta * kto_float(c[i]);
        if (bias) z += kto_float(bias[i % N]);
        if (gelu) z = gelu_tanh(z);
        y[i] = kfrom_float<T>(z, bug);
    }
}

// In place: y[m,n] = epi(y[m,n] + bias[n]), y already rounded once by the GEMM.
template <class T>
__global__ void split_epilogue_kernel(T *y, int64_t MN, int64_t N, const T *bias, int gelu, int bug)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < MN; i += (int64_t)gridDim.x * blockDim.x) {
        float z = kto_float(y[i]);
        if (bias) z += kto_float(bias[i % N]);
        if (gelu) z = gelu_tanh(z);
        y[i] = kfrom_float<T>(z, bug);
    }
}

static int grid_for(int64_t n, int threads)
{
    int64_t blocks = (n + threads - 1) / threads;
    return (int)std::min<int64_t>(blocks, 65536);
}

template <class T>
static int launch_reduce(const char *ctx, const float *partials, int S, int64_t M, int64_t N, const kmatmul_args *x,
                         int bug)
{
    int64_t MN = M * N;
    splitk_reduce_kernel<T><<<grid_for(MN, 256), 256>>>(partials, S, MN, N, x->alpha, (const T *)x->c, x->beta,
                                                        (const T *)x->bias, x->gelu, (T *)x->y, bug);
    KLAUNCHED(ctx, "splitk_reduce_kernel");
    return 0;
}

static int launch_reduce_any(const char *ctx, cudaDataType out, const float *partials, int S, const kmatmul_args *x,
                             int bug)
{
    switch (out) {
    case CUDA_R_32F: return launch_reduce<float>(ctx, partials, S, x->M, x->N, x, bug);
    case CUDA_R_16BF: return launch_reduce<__nv_bfloat16>(ctx, partials, S, x->M, x->N, x, bug);
    default: return launch_reduce<__half>(ctx, partials, S, x->M, x->N, x, bug);
    }
}

static int launch_split_epilogue(const char *ctx, cudaDataType out, const kmatmul_args *x, int bug)
{
    int64_t MN = x->M * x->N;
    int g = grid_for(MN, 256);
    switch (out) {
    case CUDA_R_32F:
        split_epilogue_kernel<float><<<g, 256>>>((float *)x->y, MN, x->N, (const float *)x->bias, x->gelu, bug);
        break;
    case CUDA_R_16BF:
        split_epilogue_kernel<__nv_bfloat16><<<g, 256>>>((__nv_bfloat16 *)x->y, MN, x->N,
                                                         (const __nv_bfloat16 *)x->bias, x->gelu, bug);
        break;
    default:
        split_epilogue_kernel<__half><<<g, 256>>>((__half *)x->y, MN, x->N, (const __half *)x->bias, x->gelu,
                                                  bug);
        break;
    }
    KLAUNCHED(ctx, "split_epilogue_kernel");
    return 0;
}

// ---- fp8 quantisation ------------------------------------------------------------

__device__ __forceinline__ uint8_t to_fp8(float v, int e5m2)
{
    return (uint8_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, e5m2 ? __NV_E5M2 : __NV_E4M3);
}

// amax over x [n]: |x| as float bits is monotone for non-negative values, so an
// integer atomicMax is exact and order-independent (deterministic); NaN wins.
template <class T> __global__ void amax_kernel(const T *x, int64_t n, unsigned *amax_bits)
{
    float m = 0.0f;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        m = fmaxf(m, fabsf(kto_float(x[i])));
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    if ((threadIdx.x & 31) == 0) atomicMax(amax_bits, __float_as_uint(m));
}

__global__ void scale_from_amax_kernel(const unsigned *amax_bits, float max_finite, float *scale)
{
    float amax = __uint_as_float(*amax_bits);
    *scale = amax > 0.0f ? amax / max_finite : 1.0f; // NaN amax gives a NaN scale: visible downstream
}

// q = sat(x / scale), x [rows, cols]; q [rows, cols] or transposed [cols, rows]
// through a 32x32 shared tile so both sides stay coalesced.
template <class T>
__global__ void quantize_kernel(const T *x, int64_t rows, int64_t cols, int transpose, const float *scale, int e5m2,
                                uint8_t *q)
{
    __shared__ uint8_t tile[32][33];
    float s = *scale;
    int64_t r0 = (int64_t)blockIdx.y * 32, c0 = (int64_t)blockIdx.x * 32;
    for (int dy = threadIdx.y; dy < 32; dy += blockDim.y) {
        int64_t r = r0 + dy, c = c0 + threadIdx.x;
        if (r < rows && c < cols) {
            uint8_t v = to_fp8(kto_float(x[r * cols + c]) / s, e5m2);
            if (transpose) tile[dy][threadIdx.x] = v;
            else q[r * cols + c] = v;
        }
    }
    if (!transpose) return;
    __syncthreads();
    for (int dy = threadIdx.y; dy < 32; dy += blockDim.y) {
        int64_t c = c0 + dy, r = r0 + threadIdx.x; // q[c][r] = x[r][c]
        if (r < rows && c < cols) q[c * rows + r] = tile[threadIdx.x][dy];
    }
}

// One block per tile of block_rows x 128 of the K-contiguous [R,K] view:
// amax, scale = amax / max_finite, then the quantised tile.
template <class T>
__global__ void block_quantize_kernel(const T *x, int64_t R, int64_t K, int x_transposed, int block_rows,
                                      float max_finite, int e5m2, uint8_t *q, float *scales)
{
    __shared__ float warp_max[32];
    int64_t k0 = (int64_t)blockIdx.x * KMATMUL_FP8_BLOCK, r0 = (int64_t)blockIdx.y * block_rows;
    int64_t n_el = (int64_t)block_rows * KMATMUL_FP8_BLOCK;
    auto at = [&](int64_t r, int64_t k) { return kto_float(x_transposed ? x[k * R + r] : x[r * K + k]); };
    float m = 0.0f;
    for (int64_t e = threadIdx.x; e < n_el; e += blockDim.x) {
        int64_t r = r0 + e / KMATMUL_FP8_BLOCK, k = k0 + e % KMATMUL_FP8_BLOCK;
        if (r < R && k < K) m = fmaxf(m, fabsf(at(r, k)));
    }
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x < 32) {
        m = threadIdx.x < (blockDim.x >> 5) ? warp_max[threadIdx.x] : 0.0f;
        for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
        if (threadIdx.x == 0) warp_max[0] = m;
    }
    __syncthreads();
    float amax = warp_max[0];
    float s = amax > 0.0f ? amax / max_finite : 1.0f;
    if (threadIdx.x == 0) scales[blockIdx.y * (int64_t)gridDim.x + blockIdx.x] = s;
    for (int64_t e = threadIdx.x; e < n_el; e += blockDim.x) {
        int64_t r = r0 + e / KMATMUL_FP8_BLOCK, k = k0 + e % KMATMUL_FP8_BLOCK;
        if (r < R && k < K) q[r * K + k] = to_fp8(at(r, k) / s, e5m2);
    }
}

static int check_quant_formats(const char *ctx, prec_format x_format, prec_format fp8)
{
    if (x_format != PREC_FP32 && x_format != PREC_BF16)
        return kernels_fail("%s: input format %s not accepted (fp32, bf16)", ctx, prec_format_name(x_format));
    if (fp8 != PREC_E4M3 && fp8 != PREC_E5M2)
        return kernels_fail("%s: target format %s not accepted (e4m3, e5m2)", ctx, prec_format_name(fp8));
    return 0;
}

extern "C" int kfp8_quantize_tensor(const void *x, prec_format x_format, int64_t rows, int64_t cols, int transpose,
                                    prec_format fp8, void *q, float *scale)
{
    char ctx[160];
    snprintf(ctx, sizeof ctx, "fp8 quantize %s->%s rows=%lld cols=%lld transpose=%d", prec_format_name(x_format),
             prec_format_name(fp8), (long long)rows, (long long)cols, transpose);
    if (rows <= 0 || cols <= 0) return kernels_fail("%s: rows and cols must be positive", ctx);
    if (!x || !q || !scale) return kernels_fail("%s: null pointer", ctx);
    if (check_quant_formats(ctx, x_format, fp8)) return -1;
    void *amax = nullptr;
    if (ws_get(ctx, WS_AMAX, sizeof(unsigned), &amax)) return -1;
    KCUDA(ctx, cudaMemsetAsync(amax, 0, sizeof(unsigned), 0));
    int64_t n = rows * cols;
    int e5m2 = fp8 == PREC_E5M2;
    float max_finite = (float)prec_format_get(fp8)->max_finite;
    dim3 qgrid((unsigned)((cols + 31) / 32), (unsigned)((rows + 31) / 32)), qblock(32, 8);
    if (x_format == PREC_FP32) {
        amax_kernel<float><<<grid_for(n, 256), 256>>>((const float *)x, n, (unsigned *)amax);
        KLAUNCHED(ctx, "amax_kernel");
        scale_from_amax_kernel<<<1, 1>>>((const unsigned *)amax, max_finite, scale);
        KLAUNCHED(ctx, "scale_from_amax_kernel");
        quantize_kernel<float><<<qgrid, qblock>>>((const float *)x, rows, cols, transpose, scale, e5m2, (uint8_t *)q);
    } else {
        amax_kernel<__nv_bfloat16><<<grid_for(n, 256), 256>>>((const __nv_bfloat16 *)x, n, (unsigned *)amax);
        KLAUNCHED(ctx, "amax_kernel");
        scale_from_amax_kernel<<<1, 1>>>((const unsigned *)amax, max_finite, scale);
        KLAUNCHED(ctx, "scale_from_amax_kernel");
        quantize_kernel<__nv_bfloat16><<<qgrid, qblock>>>((const __nv_bfloat16 *)x, rows, cols, transpose, scale,
                                                          e5m2, (uint8_t *)q);
    }
    KLAUNCHED(ctx, "quantize_kernel");
    return 0;
}

extern "C" int kfp8_quantize_blocks(const void *x, prec_format x_format, int64_t R, int64_t K, int x_transposed,
                                    int block_rows, prec_format fp8, void *q, float *scales)
{
    char ctx[192];
    snprintf(ctx, sizeof ctx, "fp8 block quantize %s->%s R=%lld K=%lld transposed=%d block=%dx%d",
             prec_format_name(x_format), prec_format_name(fp8), (long long)R, (long long)K, x_transposed, block_rows,
             KMATMUL_FP8_BLOCK);
    if (R <= 0 || K <= 0) return kernels_fail("%s: R and K must be positive", ctx);
    if (block_rows != 1 && block_rows != KMATMUL_FP8_BLOCK)
        return kernels_fail("%s: block_rows %d not accepted (1, %d)", ctx, block_rows, KMATMUL_FP8_BLOCK);
    if (!x || !q || !scales) return kernels_fail("%s: null pointer", ctx);
    if (check_quant_formats(ctx, x_format, fp8)) return -1;
    dim3 grid((unsigned)((K + KMATMUL_FP8_BLOCK - 1) / KMATMUL_FP8_BLOCK), (unsigned)((R + block_rows - 1) / block_rows));
    float max_finite = (float)prec_format_get(fp8)->max_finite;
    int e5m2 = fp8 == PREC_E5M2;
    if (x_format == PREC_FP32)
        block_quantize_kernel<float><<<grid, 128>>>((const float *)x, R, K, x_transposed, block_rows, max_finite, e5m2,
                                                    (uint8_t *)q, scales);
    else
        block_quantize_kernel<__nv_bfloat16><<<grid, 128>>>((const __nv_bfloat16 *)x, R, K, x_transposed, block_rows,
                                                            max_finite, e5m2, (uint8_t *)q, scales);
    KLAUNCHED(ctx, "block_quantize_kernel");
    return 0;
}

// ---- block-scaled fp8 kernel -----------------------------------------------------
//
// y [M,N] bf16 = epi(alpha * sum_g (sa[m,g] * sb[n/128,g]) * P_g[m,n] + beta c + bias)
// with P_g the tensor-core sum over K group g (128 wide) of qa[m,k] qb[n,k];
// A [M,K] and B [N,K] fp8 (K-contiguous), sa [M,G], sb [ceil(N/128),G].
// Block tile 64 x 64, 4 warps of 32 x 32, mma.sync m16n8k32 (sm_89+).  After
// each group the partial sums leave the tensor cores' accumulator and are added
// to an fp32 register accumulator with their scales (the "promotion").

namespace {
constexpr int BS_BM = 64, BS_BN = 64, BS_BK = KMATMUL_FP8_BLOCK;
}

template <int A_E5M2, int B_E5M2> struct fp8_mma;
#define ULP_FP8_MMA(AE, BE, ANAME, BNAME)                                                                      \
    template <> struct fp8_mma<AE, BE> {                                                                       \
        static __device__ __forceinline__ void run(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) \
        {                                                                                                      \
            asm volatile("mma.sync.aligned.m16n8k32.row.col.f32." ANAME "." BNAME ".f32 "                      \
                         "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                             \
                         : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                      \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));                  \
        }                                                                                                      \
    };
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
ULP_FP8_MMA(0, 0, "e4m3", "e4m3")
ULP_FP8_MMA(0, 1, "e4m3", "e5m2")
ULP_FP8_MMA(1, 0, "e5m2", "e4m3")
ULP_FP8_MMA(1, 1, "e5m2", "e5m2")
#endif

template <int A_E5M2, int B_E5M2>
__global__ void __launch_bounds__(128)
    block_scaled_fp8_kernel(const uint8_t *A, const uint8_t *B, const float *sa, const float *sb, int M, int N, int K,
                            float alpha, const __nv_bfloat16 *c, float beta, const __nv_bfloat16 *bias, int gelu,
                            __nv_bfloat16 *y, int drop_last_term, int bug)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    constexpr int BS_LDS = BS_BK + 16; // smem row stride in bytes: 36 words, so fragment loads hit 32 banks
    __shared__ __align__(16) uint8_t As[BS_BM * BS_LDS];
    __shared__ __align__(16) uint8_t Bs[BS_BN * BS_LDS];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int wm = warp >> 1, wn = warp & 1;
    const int m0 = blockIdx.y * BS_BM, n0 = blockIdx.x * BS_BN;
    const int G = (K + BS_BK - 1) / BS_BK;
    float acc[2][4][4];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++)
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

    for (int grp = 0; grp < G; grp++) {
        const int k0 = grp * BS_BK;
        for (int i = tid; i < BS_BM * (BS_BK / 16); i += blockDim.x) {
            int r = i / (BS_BK / 16), ch = i % (BS_BK / 16), k = k0 + ch * 16;
            uint4 va = make_uint4(0, 0, 0, 0), vb = make_uint4(0, 0, 0, 0);
            if (k < K && m0 + r < M) va = *reinterpret_cast<const uint4 *>(A + (size_t)(m0 + r) * K + k);
            if (k < K && n0 + r < N) vb = *reinterpret_cast<const uint4 *>(B + (size_t)(n0 + r) * K + k);
            if (drop_last_term && k <= K - 1 && K - 1 < k + 16) { // the planted bug: A[m, K-1] read as 0
                const int byte = K - 1 - k;
                const uint32_t keep = ~(0xFFu << (8 * (byte & 3)));
                if (byte < 4) va.x &= keep;
                else if (byte < 8) va.y &= keep;
                else if (byte < 12) va.z &= keep;
                else va.w &= keep;
            }
            *reinterpret_cast<uint4 *>(As + r * BS_LDS + ch * 16) = va;
            *reinterpret_cast<uint4 *>(Bs + r * BS_LDS + ch * 16) = vb;
        }
        __syncthreads();
        float part[2][4][4];
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 4; j++)
                for (int e = 0; e < 4; e++) part[i][j][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < BS_BK / 32; kk++) {
            const int col = kk * 32 + t * 4;
            uint32_t af[2][4], bf[4][2];
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                const int row = wm * 32 + mt * 16 + g;
                af[mt][0] = *reinterpret_cast<const uint32_t *>(As + row * BS_LDS + col);
                af[mt][1] = *reinterpret_cast<const uint32_t *>(As + (row + 8) * BS_LDS + col);
                af[mt][2] = *reinterpret_cast<const uint32_t *>(As + row * BS_LDS + col + 16);
                af[mt][3] = *reinterpret_cast<const uint32_t *>(As + (row + 8) * BS_LDS + col + 16);
            }
#pragma unroll
            for (int nt = 0; nt < 4; nt++) {
                const int nrow = wn * 32 + nt * 8 + g;
                bf[nt][0] = *reinterpret_cast<const uint32_t *>(Bs + nrow * BS_LDS + col);
                bf[nt][1] = *reinterpret_cast<const uint32_t *>(Bs + nrow * BS_LDS + col + 16);
            }
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int nt = 0; nt < 4; nt++) fp8_mma<A_E5M2, B_E5M2>::run(part[mt][nt], af[mt], bf[nt]);
        }
        __syncthreads();
        // Promotion: scale the group's partial sums and add them in fp32.
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int row = m0 + wm * 32 + mt * 16 + g + (e >= 2 ? 8 : 0);
                    int col = n0 + wn * 32 + nt * 8 + t * 2 + (e & 1);
                    if (row < M && col < N) {
                        float s = sa[(size_t)row * G + grp] * sb[(size_t)(col / BS_BK) * G + grp];
                        acc[mt][nt][e] = fmaf(part[mt][nt][e], s, acc[mt][nt][e]);
                    }
                }
    }
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int row = m0 + wm * 32 + mt * 16 + g + (e >= 2 ? 8 : 0);
                int col = n0 + wn * 32 + nt * 8 + t * 2 + (e & 1);
                if (row < M && col < N) {
                    size_t i = (size_t)row * N + col;
                    float z = alpha * acc[mt][nt][e];
                    if (c) z += beta * __bfloat162float(c[i]);
                    if (bias) z += __bfloat162float(bias[col]);
                    if (gelu) z = gelu_tanh(z);
                    y[i] = kfrom_float<__nv_bfloat16>(z, bug);
                }
            }
#else
    __trap(); // the launcher refuses devices below compute capability 8.9
#endif
}

static int launch_block_scaled(const char *ctx, const kmatmul_args *x, int drop_last, int bug)
{
    int dev, major, minor;
    KCUDA(ctx, cudaGetDevice(&dev));
    KCUDA(ctx, cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    KCUDA(ctx, cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    if (major * 10 + minor < 89)
        return kernels_fail("%s: block_scaled needs fp8 mma.sync (compute capability 8.9+), device has %d.%d", ctx,
                            major, minor);
    if (x->M > INT32_MAX || x->N > INT32_MAX || x->K > INT32_MAX)
        return kernels_fail("%s: block_scaled takes dimensions below 2^31", ctx);
    dim3 grid((unsigned)((x->N + BS_BN - 1) / BS_BN), (unsigned)((x->M + BS_BM - 1) / BS_BM));
    int ae = x->a_format == PREC_E5M2, be = x->b_format == PREC_E5M2;
    auto *kern = ae ? (be ? block_scaled_fp8_kernel<1, 1> : block_scaled_fp8_kernel<1, 0>)
                    : (be ? block_scaled_fp8_kernel<0, 1> : block_scaled_fp8_kernel<0, 0>);
    kern<<<grid, 128>>>((const uint8_t *)x->a, (const uint8_t *)x->b, x->a_scale, x->b_scale, (int)x->M, (int)x->N,
                        (int)x->K, x->alpha, (const __nv_bfloat16 *)x->c, x->beta, (const __nv_bfloat16 *)x->bias,
                        x->gelu, (__nv_bfloat16 *)x->y, drop_last, bug);
    KLAUNCHED(ctx, "block_scaled_fp8_kernel");
    return 0;
}

// ---- the dispatcher ------------------------------------------------------------------

extern "C" int kmatmul_supports(kpath path, kmatmul_accum accum, int variant, char *why, size_t why_len)
{
    const char *reason = nullptr;
    if ((unsigned)path >= KPATH_COUNT) reason = "unknown path";
    else if ((unsigned)accum >= KMATMUL_NACCUMS) reason = "unknown accumulation scheme";
    else if (variant < 0 || variant >= KMATMUL_NVARIANTS) reason = "unknown variant";
    else if (accum == KMATMUL_ACC_FAST && path != KPATH_FP32 && path != KPATH_FP8)
        reason = "fast accumulation exists for fp32 (tf32 inputs) and fp8 (no promotion) only";
    else if (accum == KMATMUL_ACC_BLOCK_SCALED && path != KPATH_FP8) reason = "block scaling is an fp8 scheme";
    else if (accum == KMATMUL_ACC_BLOCK_SCALED && variant != KMATMUL_FUSED)
        reason = "the block-scaled kernel always fuses its epilogue and does not split K";
    if (why && why_len) snprintf(why, why_len, "%s", reason ? reason : "");
    return reason == nullptr;
}

static cudaDataType path_type(kpath p)
{
    switch (p) {
    case KPATH_FP32: return CUDA_R_32F;
    case KPATH_BF16: return CUDA_R_16BF;
    case KPATH_FP16: return CUDA_R_16F;
    default: return CUDA_R_16BF; // fp8: C, y and bias
    }
}

static size_t type_bytes(cudaDataType t) { return t == CUDA_R_32F ? 4 : t == CUDA_R_16BF || t == CUDA_R_16F ? 2 : 1; }

// The lt_gemm for y = alpha op(A) op(B) (no C, no epilogue yet), after the
// argument checks every entry point shares.
static int matmul_prepare(const char *ctx, kpath path, kmatmul_accum accum, int variant, const kmatmul_args *x,
                          lt_gemm *g)
{
    char why[128];
    if (!kmatmul_supports(path, accum, variant, why, sizeof why)) return kernels_fail("%s: %s", ctx, why);
    if (x->M <= 0 || x->N <= 0 || x->K <= 0) return kernels_fail("%s: M, N and K must be positive", ctx);
    if (!x->a || !x->b || !x->y) return kernels_fail("%s: null A, B or y", ctx);
    if (x->beta != 0.0f && !x->c) return kernels_fail("%s: beta = %g needs C", ctx, (double)x->beta);
    memset(g, 0, sizeof *g);
    if (x->y_fp32 && path == KPATH_FP8) return kernels_fail("%s: y_fp32 is not offered on the fp8 path", ctx);
    g->out_type = path_type(path);
    g->compute = (accum == KMATMUL_ACC_FAST && path == KPATH_FP32) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    g->a_trans = x->a_trans;
    g->b_trans = x->b_trans;
    g->M = x->M;
    g->N = x->N;
    g->K = x->K;
    g->lda = x->a_trans ? x->M : x->K;
    g->ldb = x->b_trans ? x->K : x->N;
    g->a = x->a;
    g->b = x->b;
    g->d = x->y;
    g->alpha = x->alpha;
    g->a_type = g->b_type = g->out_type;
    if (x->y_fp32) g->out_type = CUDA_R_32F;
    if (path != KPATH_FP8) return 0;
    if ((x->a_format != PREC_E4M3 && x->a_format != PREC_E5M2) ||
        (x->b_format != PREC_E4M3 && x->b_format != PREC_E5M2))
        return kernels_fail("%s: fp8 operands must be e4m3 or e5m2 (got %s x %s)", ctx, prec_format_name(x->a_format),
                            prec_format_name(x->b_format));
    if (x->a_format == PREC_E5M2 && x->b_format == PREC_E5M2)
        return kernels_fail("%s: e5m2 x e5m2 is not an fp8 GEMM the hardware offers (e4m3 x e4m3, e5m2 x e4m3, "
                            "e4m3 x e5m2)", ctx);
    if (x->a_trans != 0 || x->b_trans != 1)
        return kernels_fail("%s: fp8 needs K-contiguous operands (a_trans=0, b_trans=1); "
                            "kmatmul_quantized() transposes while quantising", ctx);
    if (x->K % 16 != 0 || x->N % 16 != 0)
        return kernels_fail("%s: fp8 needs K %% 16 == 0 and N %% 16 == 0 (16-byte rows)", ctx);
    if (!x->a_scale || !x->b_scale) return kernels_fail("%s: fp8 needs a_scale and b_scale", ctx);
    g->a_type = x->a_format == PREC_E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
    g->b_type = x->b_format == PREC_E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
    g->a_scale = x->a_scale;
    g->b_scale = x->b_scale;
    g->fast_accum = accum == KMATMUL_ACC_FAST;
    return 0;
}

extern "C" int kmatmul(kpath path, kmatmul_accum accum, int variant, const kmatmul_args *x)
{
    char ctx[256];
    if (!x) return kernels_fail("matmul: null arguments");
    snprintf(ctx, sizeof ctx, "matmul %s/%s/%s M=%lld N=%lld K=%lld a_trans=%d b_trans=%d", kpath_name(path),
             kmatmul_accum_name(accum),
             (variant >= 0 && variant < KMATMUL_NVARIANTS) ? kmatmul_variants[variant].name : "?", (long long)x->M,
             (long long)x->N, (long long)x->K, x->a_trans, x->b_trans);
    lt_gemm g;
    if (matmul_prepare(ctx, path, accum, variant, x, &g)) return -1;
    const int bug = (int)kernels_planted_bug();
    const int drop = bug == KBUG_DROP_TERM;
    const cudaDataType out = g.out_type;
    // The fp8 layouts move K in steps of 16 bytes: the planted bug drops that many.
    const int64_t k_step = path == KPATH_FP8 ? 16 : 1;

    if (accum == KMATMUL_ACC_BLOCK_SCALED) return launch_block_scaled(ctx, x, drop, bug);

    if (variant == KMATMUL_SPLIT_K || bug == KBUG_TRUNCATE_OUTPUT || (drop && x->K <= k_step)) {
        // Slices of K (a multiple of k_step each) into fp32 partials, then the
        // fixed-order reduction with the epilogue.  The truncate-output bug also
        // comes this way (one slice) so that our kernel does the final rounding,
        // and a dropped term that leaves no K at all (its partial is zero).
        int64_t slices = variant == KMATMUL_SPLIT_K ? KMATMUL_SPLIT_K_SLICES : 1;
        int64_t chunk = (x->K + slices - 1) / slices;
        chunk = (chunk + k_step - 1) / k_step * k_step;
        int n_slices = (int)((x->K + chunk - 1) / chunk);
        void *partials = nullptr;
        if (ws_get(ctx, WS_PARTIALS, (size_t)n_slices * x->M * x->N * sizeof(float), &partials)) return -1;
        for (int s = 0; s < n_slices; s++) {
            int64_t k0 = s * chunk, kl = std::min(chunk, x->K - k0);
            if (drop && s == n_slices - 1) kl -= k_step;
            lt_gemm gs = g;
            gs.out_type = CUDA_R_32F;
            gs.K = kl;
            size_t a_el = type_bytes(g.a_type), b_el = type_bytes(g.b_type);
            gs.a = (const char *)x->a + (x->a_trans ? k0 * x->M : k0) * a_el;
            gs.b = (const char *)x->b + (x->b_trans ? k0 : k0 * x->N) * b_el;
            gs.alpha = 1.0f;
            gs.d = (float *)partials + (size_t)s * x->M * x->N;
            if (kl <= 0) { // the planted bug emptied a slice: its partial is zero
                KCUDA(ctx, cudaMemsetAsync(gs.d, 0, (size_t)x->M * x->N * sizeof(float), 0));
                continue;
            }
            if (lt_gemm_run(ctx, gs)) return -1;
        }
        return launch_reduce_any(ctx, out, (const float *)partials, n_slices, x, bug);
    }

    if (drop) g.K -= k_step;
    g.c = x->c;
    g.beta = x->beta;
    if (variant == KMATMUL_SPLIT_EPILOGUE) {
        if (lt_gemm_run(ctx, g)) return -1;
        if (x->bias || x->gelu) return launch_split_epilogue(ctx, out, x, bug);
        return 0;
    }
    g.bias = x->bias;
    g.gelu = x->gelu;
    return lt_gemm_run(ctx, g);
}

extern "C" int kmatmul_quantized(kmatmul_accum accum, int variant, const kmatmul_args *x, prec_format x_format,
                                 prec_format a_fp8, prec_format b_fp8)
{
    char ctx[200];
    if (!x) return kernels_fail("matmul quantized: null arguments");
    snprintf(ctx, sizeof ctx, "matmul quantized %s x %s variant %d M=%lld N=%lld K=%lld", prec_format_name(a_fp8),
             prec_format_name(b_fp8), variant, (long long)x->M, (long long)x->N, (long long)x->K);
    char why[128];
    if (!kmatmul_supports(KPATH_FP8, accum, variant, why, sizeof why)) return kernels_fail("%s: %s", ctx, why);
    if (x->M <= 0 || x->N <= 0 || x->K <= 0) return kernels_fail("%s: M, N and K must be positive", ctx);
    if (!x->a || !x->b) return kernels_fail("%s: null A or B", ctx);
    void *qa = nullptr, *qb = nullptr, *sa = nullptr, *sb = nullptr;
    if (ws_get(ctx, WS_QA, (size_t)x->M * x->K, &qa) || ws_get(ctx, WS_QB, (size_t)x->N * x->K, &qb)) return -1;
    int64_t G = (x->K + KMATMUL_FP8_BLOCK - 1) / KMATMUL_FP8_BLOCK;
    int64_t nb = (x->N + KMATMUL_FP8_BLOCK - 1) / KMATMUL_FP8_BLOCK;
    if (ws_get(ctx, WS_SA, (size_t)x->M * G * sizeof(float), &sa) ||
        ws_get(ctx, WS_SB, (size_t)nb * G * sizeof(float), &sb))
        return -1;
    if (accum == KMATMUL_ACC_BLOCK_SCALED) {
        if (kfp8_quantize_blocks(x->a, x_format, x->M, x->K, x->a_trans, 1, a_fp8, qa, (float *)sa) ||
            kfp8_quantize_blocks(x->b, x_format, x->N, x->K, !x->b_trans, KMATMUL_FP8_BLOCK, b_fp8, qb, (float *)sb))
            return -1;
    } else {
        // A stored [M,K] (or [K,M]: transposed while quantising); B to [N,K].
        if (kfp8_quantize_tensor(x->a, x_format, x->a_trans ? x->K : x->M, x->a_trans ? x->M : x->K, x->a_trans,
                                 a_fp8, qa, (float *)sa) ||
            kfp8_quantize_tensor(x->b, x_format, x->b_trans ? x->N : x->K, x->b_trans ? x->K : x->N, !x->b_trans,
                                 b_fp8, qb, (float *)sb))
            return -1;
    }
    kmatmul_args q = *x;
    q.a = qa;
    q.b = qb;
    q.a_trans = 0;
    q.b_trans = 1;
    q.a_format = a_fp8;
    q.b_format = b_fp8;
    q.a_scale = (const float *)sa;
    q.b_scale = (const float *)sb;
    return kmatmul(KPATH_FP8, accum, variant, &q);
}

extern "C" int kmatmul_time_algos(kpath path, kmatmul_accum accum, const kmatmul_args *x, int max_algos, int reps,
                                  double *ms, int *n_algos)
{
    char ctx[200];
    if (!x) return kernels_fail("matmul timing: null arguments");
    snprintf(ctx, sizeof ctx, "matmul timing %s/%s M=%lld N=%lld K=%lld", kpath_name(path), kmatmul_accum_name(accum),
             (long long)x->M, (long long)x->N, (long long)x->K);
    if (accum == KMATMUL_ACC_BLOCK_SCALED) return kernels_fail("%s: not a cuBLASLt GEMM", ctx);
    if (reps < 1 || max_algos < 1) return kernels_fail("%s: reps and max_algos must be positive", ctx);
    lt_gemm g;
    if (matmul_prepare(ctx, path, accum, KMATMUL_FUSED, x, &g)) return -1;
    lt_plan *p;
    if (lt_plan_get(ctx, g, &p)) return -1;
    int n = std::min(max_algos, p->n_algos);
    cudaEvent_t e0, e1;
    KCUDA(ctx, cudaEventCreate(&e0));
    KCUDA(ctx, cudaEventCreate(&e1));
    std::vector<float> t((size_t)reps);
    int rc = 0;
    for (int a = 0; a < n && rc == 0; a++) {
        for (int w = 0; w < 3 && rc == 0; w++) rc = lt_run(ctx, p, g, a);
        for (int r = 0; r < reps && rc == 0; r++) {
            if (cudaEventRecord(e0, 0) != cudaSuccess) rc = kernels_fail("%s: cudaEventRecord failed", ctx);
            if (rc == 0) rc = lt_run(ctx, p, g, a);
            if (rc == 0 && cudaEventRecord(e1, 0) != cudaSuccess)
                rc = kernels_fail("%s: cudaEventRecord failed", ctx);
            if (rc == 0 && cudaEventSynchronize(e1) != cudaSuccess)
                rc = kernels_fail("%s: cudaEventSynchronize failed: %s", ctx, cudaGetErrorString(cudaGetLastError()));
            if (rc == 0 && cudaEventElapsedTime(&t[r], e0, e1) != cudaSuccess)
                rc = kernels_fail("%s: cudaEventElapsedTime failed", ctx);
        }
        if (rc == 0) {
            std::sort(t.begin(), t.end());
            ms[a] = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
        }
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    *n_algos = n;
    return rc;
}

// The models are explained in kernels/check/check_matmul.c's file comment.
extern "C" double kmatmul_error_factor(kpath path, kmatmul_accum accum, int64_t K, int *truncating)
{
    const double u32 = 0x1p-24;
    auto gamma = [](double n, double u) { return n * u < 1 ? n * u / (1 - n * u) : INFINITY; };
    *truncating = 1;
    if (accum == KMATMUL_ACC_BLOCK_SCALED) {
        int64_t groups = (K + KMATMUL_FP8_BLOCK - 1) / KMATMUL_FP8_BLOCK;
        int64_t in_group = K < KMATMUL_FP8_BLOCK ? K : KMATMUL_FP8_BLOCK;
        return (1 + gamma(1.5 * in_group, 0x1p-13)) * (1 + gamma((double)groups + 1, u32)) - 1;
    }
    if (path == KPATH_FP8) {
        const int64_t nc = 128; // assumed promotion interval of cuBLASLt's default mode
        if (accum == KMATMUL_ACC_FAST) return (1 + gamma(1.5 * K, 0x1p-13)) * pow(1 + u32, 3) - 1;
        int64_t interval = K < nc ? K : nc, promotions = (K + nc - 1) / nc;
        return (1 + gamma(1.5 * interval, 0x1p-13)) * (1 + gamma((double)promotions, u32)) * pow(1 + u32, 3) - 1;
    }
    if (path == KPATH_FP32 && accum == KMATMUL_ACC_DEFAULT) {
        *truncating = 0;
        return gamma((double)K, u32);
    }
    double u_prod = path == KPATH_FP32 ? (1 + 0x1p-10) * (1 + 0x1p-10) - 1 : 0.0;
    return (1 + u_prod) * (1 + gamma((double)(K + 2 * ((K + 3) / 4)), 0x1p-23)) - 1;
}

extern "C" size_t kmatmul_workspace_bytes(void)
{
    size_t total = 0;
    for (int s = 0; s < WS_COUNT; s++) total += ws_size[s];
    return total;
}

extern "C" void kmatmul_release(void)
{
    for (auto &kv : lt_plans) {
        cublasLtMatmulDescDestroy(kv.second.desc);
        cublasLtMatrixLayoutDestroy(kv.second.la);
        cublasLtMatrixLayoutDestroy(kv.second.lb);
        cublasLtMatrixLayoutDestroy(kv.second.lc);
    }
    lt_plans.clear();
    for (int s = 0; s < WS_COUNT; s++) {
        if (ws_ptr[s]) cudaFree(ws_ptr[s]);
        ws_ptr[s] = nullptr;
        ws_size[s] = 0;
    }
}
