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
#include "kernels/common/klaunch.cuh"
#include "kernels/common/ktensor_io.h"
#include "kernels/matmul.h"
#include "kernels/registry.h"
#include "precision/dot_bound.h"

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
    if (kworkspace_grow(ctx, &ws_ptr[slot], &ws_size[slot], bytes)) return -1;
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

static size_t type_bytes(cudaDataType t) { return t == CUDA_R_32F ? 4 : t == CUDA_R_16BF || t == CUDA_R_16F ? 2 : 1; }

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
    // Alignment caps in bytes (0: none).  In a batched call every replica's
    // operand is only as aligned as the replica stride allows; its plan is
    // made for that alignment, the same for every replica.
    uint32_t cap_a, cap_b, cap_c, cap_d;
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

static uint32_t capped_alignment(const void *p, uint32_t cap)
{
    uint32_t a = pointer_alignment(p);
    return cap && cap < a ? cap : a;
}

static std::string lt_key(const lt_gemm &g)
{
    char k[320];
    snprintf(k, sizeof k, "%d %d %d %d %d %d %lld %lld %lld %lld %lld %d %d %d %d %d %u %u %u %u", (int)g.a_type,
             (int)g.b_type, (int)g.out_type, (int)g.compute, g.a_trans, g.b_trans, (long long)g.M, (long long)g.N,
             (long long)g.K, (long long)g.lda, (long long)g.ldb, g.bias != nullptr, g.gelu, g.a_scale != nullptr,
             g.fast_accum, g.c != nullptr && g.beta != 0.0f, capped_alignment(g.a, g.cap_a),
             capped_alignment(g.b, g.cap_b), capped_alignment(g.c ? g.c : g.d, g.c ? g.cap_c : g.cap_d),
             capped_alignment(g.d, g.cap_d));
    return k;
}

// The operation descriptor of g: transposes, epilogue, bias, fp8 scales.
static int lt_desc_create(const char *ctx, const lt_gemm &g, cublasLtMatmulDesc_t *out)
{
    cublasLtMatmulDesc_t desc;
    KLT(ctx, cublasLtMatmulDescCreate(&desc, g.compute, CUDA_R_32F));
    *out = desc;
    cublasOperation_t op_a = g.b_trans ? CUBLAS_OP_T : CUBLAS_OP_N; // cuBLASLt's A is our B
    cublasOperation_t op_b = g.a_trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    KLT(ctx, cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
    KLT(ctx, cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
    cublasLtEpilogue_t epi = g.bias ? (g.gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                                    : (g.gelu ? CUBLASLT_EPILOGUE_GELU : CUBLASLT_EPILOGUE_DEFAULT);
    KLT(ctx, cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (g.bias) {
        int32_t bias_type = g.out_type;
        KLT(ctx, cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                sizeof bias_type));
        KLT(ctx, cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias));
    }
    if (g.a_scale) {
        KLT(ctx, cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g.b_scale,
                                                sizeof g.b_scale));
        KLT(ctx, cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g.a_scale,
                                                sizeof g.a_scale));
        int8_t fast = (int8_t)g.fast_accum;
        KLT(ctx, cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
    }
    return 0;
}

// The layouts of cuBLASLt's A (our B: column-major K x N when b_trans, stored
// [N,K]; else N x K), B (our A) and C = D (N x M).
static int lt_layouts_create(const char *ctx, const lt_gemm &g, cublasLtMatrixLayout_t *la, cublasLtMatrixLayout_t *lb,
                             cublasLtMatrixLayout_t *lc)
{
    if (g.b_trans) KLT(ctx, cublasLtMatrixLayoutCreate(la, g.b_type, g.K, g.N, g.ldb));
    else KLT(ctx, cublasLtMatrixLayoutCreate(la, g.b_type, g.N, g.K, g.ldb));
    if (g.a_trans) KLT(ctx, cublasLtMatrixLayoutCreate(lb, g.a_type, g.M, g.K, g.lda));
    else KLT(ctx, cublasLtMatrixLayoutCreate(lb, g.a_type, g.K, g.M, g.lda));
    KLT(ctx, cublasLtMatrixLayoutCreate(lc, g.out_type, g.N, g.M, g.N));
    return 0;
}

// The heuristic's constraints for g: our workspace, the operands' (capped)
// alignments, and no cuBLASLt split-K.  Split-K is a variant of its own
// (ours): cuBLASLt's reduction would change the summation order behind our
// back.
static int lt_pref_create(const char *ctx, const lt_gemm &g, cublasLtMatmulPreference_t *out)
{
    cublasLtMatmulPreference_t pref;
    KLT(ctx, cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws_bytes = LT_WORKSPACE_BYTES;
    uint32_t al_a = capped_alignment(g.b, g.cap_b), al_b = capped_alignment(g.a, g.cap_a);
    uint32_t al_c = capped_alignment(g.c ? g.c : g.d, g.c ? g.cap_c : g.cap_d), al_d = capped_alignment(g.d, g.cap_d);
    uint32_t no_reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &no_reduction,
                                         sizeof no_reduction);
    *out = pref;
    return 0;
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
    if (lt_desc_create(ctx, g, &p.desc) || lt_layouts_create(ctx, g, &p.la, &p.lb, &p.lc)) return -1;

    cublasLtMatmulPreference_t pref;
    if (lt_pref_create(ctx, g, &pref)) return -1;
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

// kmatmul_last_algo()'s text for algo.
static void lt_describe(const cublasLtMatmulAlgo_t *al, const char *suffix)
{
    int32_t id = -1, splitk = 1;
    uint32_t tile = 0, stages = 0, reduction = 0;
    cublasLtMatmulAlgoConfigGetAttribute(al, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, nullptr);
    cublasLtMatmulAlgoConfigGetAttribute(al, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, nullptr);
    cublasLtMatmulAlgoConfigGetAttribute(al, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, nullptr);
    cublasLtMatmulAlgoConfigGetAttribute(al, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, nullptr);
    cublasLtMatmulAlgoConfigGetAttribute(al, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &reduction, sizeof reduction,
                                         nullptr);
    snprintf(lt_last_algo, sizeof lt_last_algo, "cuBLASLt algo %d tile %u stages %u splitK %d reduction %u%s", id,
             tile, stages, splitk, reduction, suffix);
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
                            &p->algos[algo_index].algo, ws, LT_WORKSPACE_BYTES, kstream()));
    lt_describe(&p->algos[algo_index].algo, p->split_k_excluded ? "" : " (fp32 split-K allowed)");
    return 0;
}

extern "C" const char *kmatmul_last_algo(void) { return lt_last_algo; }

static int lt_gemm_run(const char *ctx, const lt_gemm &g)
{
    lt_plan *p;
    if (lt_plan_get(ctx, g, &p)) return -1;
    return lt_run(ctx, p, g, 0);
}

// ---- batched cuBLASLt GEMMs (replicas) ----------------------------------------------
//
// count GEMMs of one shape whose operands lie at fixed strides (elements of
// each operand's type): one strided-batched cuBLASLt call that runs the
// algorithm the batch-1 problem's plan chose (its algos[0]), so that every
// replica gets the bits a single call gives.  When cublasLtMatmulAlgoCheck
// refuses that algorithm for the batched layouts (or the batched call
// reports it unsupported), the GEMM runs as count single calls instead; fp8
// per-tensor scales are one scalar per call in cuBLASLt, so those always run
// as single calls, each with its replica's scales.

struct lt_batch {
    int64_t count;
    int64_t a, b, c, d, bias;      // strides in elements
    int64_t a_scale, b_scale;      // strides in floats (fp8)
};

struct lt_batched_plan {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc, ld;
    cublasLtMatmulAlgo_t algo;
    int strided; // 0: the pinned algorithm was refused for the batched layouts; single calls
    int checked; // 1: algo is not the pinned one but the probe found it gives the pinned one's bits
};

static std::unordered_map<std::string, lt_batched_plan> lt_batched_plans;
static kmatmul_batch_stats batch_stats;
static int planted_batched_algo_change, planted_probe_perturbation;

extern "C" void kmatmul_batch_stats_get(kmatmul_batch_stats *s) { *s = batch_stats; }
extern "C" void kmatmul_batch_stats_reset(void) { memset(&batch_stats, 0, sizeof batch_stats); }
extern "C" void kmatmul_plant_batched_algo_change(int on) { planted_batched_algo_change = on != 0; }
extern "C" void kmatmul_plant_probe_perturbation(int on) { planted_probe_perturbation = on != 0; }

// Replica r's GEMM: every pointer moved by r strides.
static lt_gemm lt_replica(const lt_gemm &g, const lt_batch &b, int64_t r)
{
    lt_gemm x = g;
    x.a = (const char *)g.a + r * b.a * (int64_t)type_bytes(g.a_type);
    x.b = (const char *)g.b + r * b.b * (int64_t)type_bytes(g.b_type);
    if (g.c) x.c = (const char *)g.c + r * b.c * (int64_t)type_bytes(g.out_type);
    x.d = (char *)g.d + r * b.d * (int64_t)type_bytes(g.out_type);
    if (g.bias) x.bias = (const char *)g.bias + r * b.bias * (int64_t)type_bytes(g.out_type);
    if (g.a_scale) x.a_scale = g.a_scale + r * b.a_scale;
    if (g.b_scale) x.b_scale = g.b_scale + r * b.b_scale;
    return x;
}

static int lt_set_batch(const char *ctx, cublasLtMatrixLayout_t l, int64_t count, int64_t stride)
{
    int32_t n = (int32_t)count;
    KLT(ctx, cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &n, sizeof n));
    KLT(ctx, cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
    return 0;
}

// The planted mistake of the replica tests' twin: an algorithm of the batch-1
// plan's candidates with cuBLASLt's split-K switched (2 or 4 slices, or none
// where it had some), which changes every dot product's summation order: the
// first such configuration cublasLtMatmulAlgoCheck accepts for the batched
// layouts.
static int lt_plant_algo_change(const char *ctx, const lt_plan *p1, const lt_batched_plan *bp,
                                cublasLtMatmulAlgo_t *algo)
{
    for (int i = 0; i < p1->n_algos; i++)
        for (int32_t want : {2, 4, 1}) {
            cublasLtMatmulAlgo_t a = p1->algos[i].algo;
            int32_t support = 0, splitk = 1;
            uint32_t schemes = 0;
            if (cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &support, sizeof support,
                                                  nullptr) != CUBLAS_STATUS_SUCCESS ||
                !support)
                break;
            cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes,
                                              nullptr);
            cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, nullptr);
            if (want == splitk) continue;
            uint32_t scheme = want == 1 ? CUBLASLT_REDUCTION_SCHEME_NONE
                              : (schemes & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE)
                                  ? CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE
                                  : CUBLASLT_REDUCTION_SCHEME_INPLACE;
            cublasLtMatmulHeuristicResult_t check;
            memset(&check, 0, sizeof check);
            if (cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &want, sizeof want) !=
                    CUBLAS_STATUS_SUCCESS ||
                cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                                     sizeof scheme) != CUBLAS_STATUS_SUCCESS ||
                cublasLtMatmulAlgoCheck(lt_handle, bp->desc, bp->la, bp->lb, bp->lc, bp->ld, &a, &check) !=
                    CUBLAS_STATUS_SUCCESS ||
                check.workspaceSize > LT_WORKSPACE_BYTES)
                continue;
            *algo = a;
            return 0;
        }
    return kernels_fail("%s: planted algorithm change: no split-K configuration of the batch-1 plan's candidates "
                        "is accepted for the batched layouts", ctx);
}

static void lt_batched_plan_destroy(lt_batched_plan &p)
{
    cublasLtMatmulDescDestroy(p.desc);
    cublasLtMatrixLayoutDestroy(p.la);
    cublasLtMatrixLayoutDestroy(p.lb);
    cublasLtMatrixLayoutDestroy(p.lc);
    cublasLtMatrixLayoutDestroy(p.ld);
}

// ---- a faster batched algorithm with the pinned one's bits (checked) ----------------
//
// The pinned algorithm was chosen for one matrix: at R = 64 the Muon Gram
// matrices ran the 64 x 24 tiles the heuristic picks for a lone 256 x 256
// output.  cuBLASLt kernels without split-K that issue the same MMA steps
// along K give the same bits whatever their tiles (on the H100 no candidate
// for the replica test's shapes changed a bit), but nothing documents which
// do.  So the candidates the heuristic ranks for the batched problem are run
// on two replicas of probe operands at the call's strides, beside the pinned
// algorithm's single calls on the same data; the first candidate, in the
// heuristic's order, whose every output byte equals theirs is adopted.  The
// probe's operands make the order of the sum visible: random signs and
// magnitudes over 2^-6 .. 2^6, and at k = 0 and k = K/2 a pair of products
// +-2^30 that cancel exactly, so that the terms between them are rounded to
// multiples of 2^7 in a sequential K order and elsewhere in any other (bf16
// outputs then differ by far more than their last bit).  The choice depends
// on the GPU and the library only, never on a timing: runs stay
// deterministic.  ULPSCOPE_BATCHED_GEMM_PINNED=1 keeps the pinned algorithm
// (the same bits, for comparing speed).

// Elements a row-major operand spans: column-major rows x cols with ld.
static int64_t lt_span(int64_t rows, int64_t cols, int64_t ld) { return (cols - 1) * ld + rows; }

template <class T>
__global__ void probe_fill_kernel(T *p, int64_t n, uint64_t seed)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint64_t z = seed + 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        float u = (float)(z >> 40) * 0x1p-24f; // [0, 1)
        int e = (int)((z >> 8) % 13) - 6;        // 2^-6 .. 2^6
        p[i] = kfrom_float<T>(ldexpf(u - 0.5f, e), 0);
    }
}

// The cancelling pair's operand elements: k = 0 and k = K/2 of every row
// (our A, value +-2^15) or column (our B, 2^15), in each of `count` replicas.
template <class T>
__global__ void probe_pair_kernel(T *p, int64_t lines, int64_t k_stride, int64_t line_stride, int64_t k_half,
                                  int64_t replica_stride, int sign_second)
{
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= lines) return;
    T *x = p + blockIdx.y * replica_stride + i * line_stride;
    x[0] = kfrom_float<T>(32768.0f, 0);
    x[k_half * k_stride] = kfrom_float<T>(sign_second ? -32768.0f : 32768.0f, 0);
}

template <class T>
static int probe_operand(const char *ctx, void *p, int64_t n, uint64_t seed, int64_t lines, int64_t k_stride,
                         int64_t line_stride, int64_t k_half, int64_t replica_stride, int count, int sign_second)
{
    probe_fill_kernel<T><<<(unsigned)std::min<int64_t>((n + 255) / 256, 4096), 256, 0, kstream()>>>((T *)p, n, seed);
    KLAUNCHED(ctx, "probe_fill_kernel");
    if (lines > 0) {
        dim3 grid((unsigned)((lines + 255) / 256), (unsigned)count);
        probe_pair_kernel<T><<<grid, 256, 0, kstream()>>>((T *)p, lines, k_stride, line_stride, k_half, replica_stride,
                                                          sign_second);
        KLAUNCHED(ctx, "probe_pair_kernel");
    }
    return 0;
}

static int probe_fill(const char *ctx, cudaDataType t, void *p, int64_t n, uint64_t seed, int64_t lines,
                      int64_t k_stride, int64_t line_stride, int64_t k_half, int64_t replica_stride, int count,
                      int sign_second)
{
    switch (t) {
    case CUDA_R_32F:
        return probe_operand<float>(ctx, p, n, seed, lines, k_stride, line_stride, k_half, replica_stride, count,
                                    sign_second);
    case CUDA_R_16BF:
        return probe_operand<__nv_bfloat16>(ctx, p, n, seed, lines, k_stride, line_stride, k_half, replica_stride,
                                            count, sign_second);
    default:
        return probe_operand<__half>(ctx, p, n, seed, lines, k_stride, line_stride, k_half, replica_stride, count,
                                     sign_second);
    }
}

template <class T> __global__ void probe_set_kernel(T *p, int64_t i, float v) { p[i] = kfrom_float<T>(v, 0); }

static size_t lt_type_bytes(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

// Probe buffers: our A, B, C, bias, the pinned algorithm's outputs and the
// candidate's, two replicas each (freed on every path out).
struct lt_probe {
    void *mem[6] = {nullptr, nullptr, nullptr, nullptr, nullptr, nullptr};
    cublasLtMatrixLayout_t l[4] = {nullptr, nullptr, nullptr, nullptr};
    ~lt_probe()
    {
        for (void *m : mem)
            if (m) kdevice_free(m);
        for (auto x : l)
            if (x) cublasLtMatrixLayoutDestroy(x);
    }
};

// Adopts into bp the first candidate the heuristic ranks for the batched
// problem that the probe finds bit-identical to the pinned algorithm (see
// above); bp is left as it is when the pinned algorithm ranks first, or no
// candidate passes.  0, or -1 on a CUDA or cuBLASLt error.
static int lt_checked_algo(const char *ctx, const lt_gemm &g, const lt_batch &b, lt_plan *p1, lt_batched_plan *bp)
{
    static const char *pinned_only = getenv("ULPSCOPE_BATCHED_GEMM_PINNED");
    if (pinned_only && strcmp(pinned_only, "1") == 0) return 0;
    const auto plain = [](cudaDataType t) { return t == CUDA_R_32F || t == CUDA_R_16BF || t == CUDA_R_16F; };
    if (!plain(g.a_type) || !plain(g.b_type) || !plain(g.out_type) || g.a_scale || !p1->split_k_excluded ||
        g.K < 16)
        return 0;
    cublasLtMatmulPreference_t pref;
    if (lt_pref_create(ctx, g, &pref)) return -1;
    cublasLtMatmulHeuristicResult_t cands[LT_MAX_ALGOS];
    int n = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt_handle, bp->desc, bp->la, bp->lb, bp->lc, bp->ld, pref,
                                                       LT_MAX_ALGOS, cands, &n);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || n == 0 || !memcmp(&cands[0].algo, &bp->algo, sizeof bp->algo)) return 0;

    // two replicas of probe operands at the call's strides
    const int64_t span_a = g.a_trans ? lt_span(g.M, g.K, g.lda) : lt_span(g.K, g.M, g.lda);
    const int64_t span_b = g.b_trans ? lt_span(g.K, g.N, g.ldb) : lt_span(g.N, g.K, g.ldb);
    const int has_c = g.c && g.beta != 0.0f;
    const int64_t c_stride = has_c ? b.c : b.d;
    const int64_t elems[6] = {b.a + span_a, b.b + span_b, has_c ? c_stride + g.M * g.N : 0, g.bias ? b.bias + g.N : 0,
                              b.d + g.M * g.N, b.d + g.M * g.N};
    const cudaDataType types[6] = {g.a_type, g.b_type, g.out_type, g.out_type, g.out_type, g.out_type};
    lt_probe pr;
    for (int i = 0; i < 6; i++)
        if (elems[i] && kdevice_alloc(&pr.mem[i], (size_t)elems[i] * lt_type_bytes(types[i]), "GEMM probe"))
            return -1;
    const uint64_t seed = 0x5eed0ull ^ (uint64_t)(g.M * 1000003 + g.N * 1009 + g.K);
    // our A: row m's k-th element at m lda + k (or k lda + m transposed); B: (k, n) at k ldb + n (or n ldb + k)
    if (probe_fill(ctx, g.a_type, pr.mem[0], elems[0], seed, g.M, g.a_trans ? g.lda : 1, g.a_trans ? 1 : g.lda,
                   g.K / 2, b.a, 2, 1) ||
        probe_fill(ctx, g.b_type, pr.mem[1], elems[1], seed + 1, g.N, g.b_trans ? 1 : g.ldb, g.b_trans ? g.ldb : 1,
                   g.K / 2, b.b, 2, 0) ||
        (has_c && probe_fill(ctx, g.out_type, pr.mem[2], elems[2], seed + 2, 0, 0, 0, 0, 0, 0, 0)) ||
        (g.bias && probe_fill(ctx, g.out_type, pr.mem[3], elems[3], seed + 3, 0, 0, 0, 0, 0, 0, 0)))
        return -1;
    lt_gemm gp = g;
    gp.a = pr.mem[0];
    gp.b = pr.mem[1];
    gp.c = has_c ? pr.mem[2] : nullptr;
    gp.bias = g.bias ? pr.mem[3] : nullptr;
    gp.d = pr.mem[4];
    for (int64_t r = 0; r < 2; r++)
        if (lt_run(ctx, p1, lt_replica(gp, b, r), 0)) return -1;
    // the candidates' problem: the batched layouts with a batch of two
    if (lt_layouts_create(ctx, g, &pr.l[0], &pr.l[1], &pr.l[2])) return -1;
    KLT(ctx, cublasLtMatrixLayoutCreate(&pr.l[3], g.out_type, g.N, g.M, g.N));
    if (lt_set_batch(ctx, pr.l[0], 2, b.b) || lt_set_batch(ctx, pr.l[1], 2, b.a) ||
        lt_set_batch(ctx, pr.l[2], 2, c_stride) || lt_set_batch(ctx, pr.l[3], 2, b.d))
        return -1;
    if (g.bias)
        KLT(ctx, cublasLtMatmulDescSetAttribute(bp->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &gp.bias, sizeof gp.bias));
    if (planted_probe_perturbation) {
        // the twin: the candidates read A with row 0's last element changed
        const int64_t at = g.a_trans ? (g.K - 1) * g.lda : g.K - 1;
        switch (g.a_type) {
        case CUDA_R_32F: probe_set_kernel<float><<<1, 1, 0, kstream()>>>((float *)pr.mem[0], at, 1000.0f); break;
        case CUDA_R_16BF:
            probe_set_kernel<__nv_bfloat16><<<1, 1, 0, kstream()>>>((__nv_bfloat16 *)pr.mem[0], at, 1000.0f);
            break;
        default: probe_set_kernel<__half><<<1, 1, 0, kstream()>>>((__half *)pr.mem[0], at, 1000.0f); break;
        }
        KLAUNCHED(ctx, "probe_set_kernel");
    }
    void *ws = nullptr;
    if (ws_get(ctx, WS_LT, LT_WORKSPACE_BYTES, &ws)) return -1;
    const size_t out_bytes = (size_t)(g.M * g.N) * lt_type_bytes(g.out_type);
    std::vector<unsigned char> want(2 * out_bytes), got(2 * out_bytes);
    for (int64_t r = 0; r < 2; r++)
        if (kdevice_download(want.data() + r * out_bytes, (char *)pr.mem[4] + r * b.d * lt_type_bytes(g.out_type),
                             out_bytes, "GEMM probe"))
            return -1;
    const float beta = has_c ? g.beta : 0.0f;
    for (int i = 0; i < n; i++) {
        if (!memcmp(&cands[i].algo, &bp->algo, sizeof bp->algo)) return 0; // the pinned one ranks above the rest
        if (cands[i].workspaceSize > LT_WORKSPACE_BYTES) continue;
        batch_stats.probes++;
        if (kdevice_fill_bytes(pr.mem[5], 0xFF, (size_t)elems[5] * lt_type_bytes(g.out_type), "GEMM probe")) return -1;
        st = cublasLtMatmul(lt_handle, bp->desc, &g.alpha, gp.b, pr.l[0], gp.a, pr.l[1], &beta,
                            has_c ? gp.c : pr.mem[5], pr.l[2], pr.mem[5], pr.l[3], &cands[i].algo, ws,
                            LT_WORKSPACE_BYTES, kstream());
        int same = st == CUBLAS_STATUS_SUCCESS;
        for (int64_t r = 0; r < 2 && same; r++) {
            if (kdevice_download(got.data() + r * out_bytes, (char *)pr.mem[5] + r * b.d * lt_type_bytes(g.out_type),
                                 out_bytes, "GEMM probe"))
                return -1;
            same = !memcmp(got.data() + r * out_bytes, want.data() + r * out_bytes, out_bytes);
        }
        if (!same) {
            batch_stats.probe_refusals++;
            continue;
        }
        bp->algo = cands[i].algo;
        bp->strided = 1;
        bp->checked = 1;
        return 0;
    }
    return 0;
}

static int lt_batched_plan_get(const char *ctx, const lt_gemm &g, const lt_batch &b, lt_plan *p1,
                               lt_batched_plan **out)
{
    char extra[200];
    snprintf(extra, sizeof extra, " | %lld %lld %lld %lld %lld %lld %d", (long long)b.count, (long long)b.a,
             (long long)b.b, (long long)b.c, (long long)b.d, (long long)b.bias, planted_batched_algo_change);
    std::string key = lt_key(g) + extra;
    auto it = lt_batched_plans.find(key);
    if (it != lt_batched_plans.end()) {
        *out = &it->second;
        return 0;
    }
    lt_batched_plan p;
    memset(&p, 0, sizeof p);
    // C has its own layout only when the call reads a C of its own.
    const int64_t c_stride = (g.c && g.beta != 0.0f) ? b.c : b.d;
    if (lt_desc_create(ctx, g, &p.desc) || lt_layouts_create(ctx, g, &p.la, &p.lb, &p.lc)) return -1;
    KLT(ctx, cublasLtMatrixLayoutCreate(&p.ld, g.out_type, g.N, g.M, g.N));
    if (lt_set_batch(ctx, p.la, b.count, b.b) || lt_set_batch(ctx, p.lb, b.count, b.a) ||
        lt_set_batch(ctx, p.lc, b.count, c_stride) || lt_set_batch(ctx, p.ld, b.count, b.d))
        return -1;
    if (g.bias)
        KLT(ctx, cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &b.bias,
                                                sizeof b.bias));
    p.algo = p1->algos[0].algo;
    if (planted_batched_algo_change && lt_plant_algo_change(ctx, p1, &p, &p.algo)) return -1;
    cublasLtMatmulHeuristicResult_t check;
    memset(&check, 0, sizeof check);
    cublasStatus_t st = cublasLtMatmulAlgoCheck(lt_handle, p.desc, p.la, p.lb, p.lc, p.ld, &p.algo, &check);
    p.strided = st == CUBLAS_STATUS_SUCCESS && check.workspaceSize <= LT_WORKSPACE_BYTES;
    if (!planted_batched_algo_change && lt_checked_algo(ctx, g, b, p1, &p)) {
        lt_batched_plan_destroy(p);
        return -1;
    }
    auto ins = lt_batched_plans.emplace(key, p);
    *out = &ins.first->second;
    return 0;
}


// g is replica 0's GEMM (alignment caps set by the caller); b.count >= 1.
static int lt_gemm_run_batched(const char *ctx, const lt_gemm &g, const lt_batch &b)
{
    if (b.count == 1) return lt_gemm_run(ctx, g);
    lt_plan *p1;
    if (lt_plan_get(ctx, g, &p1)) return -1;
    if (!g.a_scale) {
        lt_batched_plan *bp = nullptr;
        if (lt_batched_plan_get(ctx, g, b, p1, &bp)) return -1;
        if (bp->strided) {
            void *ws = nullptr;
            if (ws_get(ctx, WS_LT, LT_WORKSPACE_BYTES, &ws)) return -1;
            if (g.bias)
                KLT(ctx, cublasLtMatmulDescSetAttribute(bp->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias,
                                                        sizeof g.bias));
            const void *c = (g.c && g.beta != 0.0f) ? g.c : g.d;
            float beta = (g.c && g.beta != 0.0f) ? g.beta : 0.0f;
            cublasStatus_t st = cublasLtMatmul(lt_handle, bp->desc, &g.alpha, g.b, bp->la, g.a, bp->lb, &beta, c,
                                               bp->lc, g.d, bp->ld, &bp->algo, ws, LT_WORKSPACE_BYTES, kstream());
            if (st == CUBLAS_STATUS_SUCCESS) {
                if (bp->checked) batch_stats.strided_checked++;
                else batch_stats.strided++;
                char suffix[120];
                snprintf(suffix, sizeof suffix, "%s; strided batch of %lld%s%s",
                         p1->split_k_excluded ? "" : " (fp32 split-K allowed)", (long long)b.count,
                         bp->checked ? " (not the pinned algorithm: its bits, checked)" : "",
                         planted_batched_algo_change ? " (planted algorithm change)" : "");
                lt_describe(&bp->algo, suffix);
                return 0;
            }
            if (st != CUBLAS_STATUS_NOT_SUPPORTED)
                return kernels_fail("%s: batched cublasLtMatmul (x%lld) failed: %s", ctx, (long long)b.count,
                                    cublasLtGetStatusString(st));
            bp->strided = 0; // refused at run time after all: single calls from now on
        }
        batch_stats.loop_fallback++;
    } else {
        batch_stats.loop_fp8++;
    }
    for (int64_t r = 0; r < b.count; r++)
        if (lt_gemm_run(ctx, lt_replica(g, b, r))) return -1;
    return 0;
}

// ---- epilogue kernels ------------------------------------------------------------

__device__ __forceinline__ float gelu_tanh(float z)
{
    const float sqrt_2_over_pi = 0.7978845608028654f;
    float inner = sqrt_2_over_pi * (z + 0.044715f * z * z * z);
    return 0.5f * z * (1.0f + tanhf(inner));
}

// Replica strides (elements) of the epilogue kernels' c, bias and y; the
// replica is blockIdx.y.  A single call is replica 0 of one.
struct epi_strides {
    int64_t c, bias, y;
};

// y[m,n] = epi(alpha * sum_s partials[s][m,n] + beta * c[m,n] + bias[n]); the
// slices are added in order s = 0, 1, ... so the result never depends on timing.
// partials [S, M, N] fp32 per replica, replica r's at r * partials_stride;
// c, y [M,N]; bias [N].
template <class T>
__global__ void splitk_reduce_kernel(const float *partials, int S, int64_t partials_stride, int64_t MN, int64_t N,
                                     float alpha, const T *c, float beta, const T *bias, int gelu, T *y,
                                     epi_strides rs, int bug)
{
    const int64_t r = blockIdx.y;
    partials += r * partials_stride;
    if (c) c += r * rs.c;
    if (bias) bias += r * rs.bias;
    y += r * rs.y;
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
__global__ void split_epilogue_kernel(T *y, int64_t MN, int64_t N, const T *bias, int gelu, epi_strides rs, int bug)
{
    const int64_t r = blockIdx.y;
    if (bias) bias += r * rs.bias;
    y += r * rs.y;
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

// The split-K reduction for `count` replicas starting at x's pointers.
template <class T>
static int launch_reduce(const char *ctx, const float *partials, int S, int64_t partials_stride, const kmatmul_args *x,
                         int64_t count, epi_strides rs, int bug)
{
    int64_t MN = x->M * x->N;
    dim3 grid((unsigned)grid_for(MN, 256), (unsigned)count);
    splitk_reduce_kernel<T><<<grid, 256, 0, kstream()>>>(partials, S, partials_stride, MN, x->N, x->alpha,
                                                         (const T *)x->c, x->beta, (const T *)x->bias, x->gelu,
                                                         (T *)x->y, rs, bug);
    KLAUNCHED(ctx, "splitk_reduce_kernel");
    return 0;
}

static int launch_reduce_any(const char *ctx, cudaDataType out, const float *partials, int S, int64_t partials_stride,
                             const kmatmul_args *x, int64_t count, epi_strides rs, int bug)
{
    switch (out) {
    case CUDA_R_32F: return launch_reduce<float>(ctx, partials, S, partials_stride, x, count, rs, bug);
    case CUDA_R_16BF: return launch_reduce<__nv_bfloat16>(ctx, partials, S, partials_stride, x, count, rs, bug);
    default: return launch_reduce<__half>(ctx, partials, S, partials_stride, x, count, rs, bug);
    }
}

static int launch_split_epilogue(const char *ctx, cudaDataType out, const kmatmul_args *x, int64_t count,
                                 epi_strides rs, int bug)
{
    int64_t MN = x->M * x->N;
    dim3 g((unsigned)grid_for(MN, 256), (unsigned)count);
    switch (out) {
    case CUDA_R_32F:
        split_epilogue_kernel<float><<<g, 256, 0, kstream()>>>((float *)x->y, MN, x->N, (const float *)x->bias,
                                                              x->gelu, rs, bug);
        break;
    case CUDA_R_16BF:
        split_epilogue_kernel<__nv_bfloat16><<<g, 256, 0, kstream()>>>(
            (__nv_bfloat16 *)x->y, MN, x->N, (const __nv_bfloat16 *)x->bias, x->gelu, rs, bug);
        break;
    default:
        split_epilogue_kernel<__half><<<g, 256, 0, kstream()>>>((__half *)x->y, MN, x->N, (const __half *)x->bias,
                                                               x->gelu, rs, bug);
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

// Batched quantisation: replica r (blockIdx.y for amax, blockIdx.z for the
// tile kernels) reads x + r * x_stride and writes q + r * q_stride and its own
// scales; a single tensor is replica 0 of one.

// amax over x [n], a block's threads striding over the tensor: each thread's
// fmaxf, the block's tree in shared memory, then one integer atomicMax a block
// (|x| as float bits is monotone for non-negative values, so the result is
// exact and independent of the order: deterministic).  fmaxf drops NaN (as the
// CPU backend's amax does); a NaN element stays NaN through its own
// quantisation.  At most AMAX_BLOCKS blocks a replica: one atomic a warp on a
// single address (up to 2^19 for an 8192 x 3072 operand) had made the
// quantisation take 10 times the GEMM's time on an H100.
static const int AMAX_BLOCKS = 1024;
// The max of every thread's m, valid in the thread of lane 0 of warp 0: each
// warp by shuffles, then the warps' maxima through shared memory.  Every
// thread of the block calls it (it synchronises).  The max is exact, so the
// order of the tree does not matter.
__device__ float block_max(float m, int warp, int lane, int n_warps)
{
    __shared__ float warp_max[32];
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (lane == 0) warp_max[warp] = m;
    __syncthreads();
    if (warp == 0 && lane == 0)
        for (int w = 1; w < n_warps; w++) m = fmaxf(m, warp_max[w]);
    return m;
}

template <class T> __global__ void amax_kernel(const T *x, int64_t n, int64_t x_stride, unsigned *amax_bits)
{
    constexpr int V = 16 / (int)sizeof(T); // 16-byte loads where x is aligned (the max does not care about order)
    x += blockIdx.y * x_stride;
    const int64_t tid = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, threads = (int64_t)gridDim.x * blockDim.x;
    const int64_t nv = (uintptr_t)x % 16 == 0 ? n / V : 0;
    float m = 0.0f;
    for (int64_t i = tid; i < nv; i += threads) {
        uint4 u = ((const uint4 *)x)[i];
        const T *e = (const T *)&u;
#pragma unroll
        for (int j = 0; j < V; j++) m = fmaxf(m, fabsf(kto_float(e[j])));
    }
    for (int64_t i = nv * V + tid; i < n; i += threads) m = fmaxf(m, fabsf(kto_float(x[i])));
    m = block_max(m, threadIdx.x >> 5, threadIdx.x & 31, blockDim.x >> 5);
    if (threadIdx.x == 0) atomicMax(amax_bits + blockIdx.y, __float_as_uint(m));
}

// Where a quantiser's scale comes from, per replica z (blockIdx.z):
//   amax     current scaling: amax bits of this tensor (amax_kernel's), scale = amax / max_finite (1 when 0)
//   given    a scale computed before the pass (delayed scaling with the scale given)
//   hist     delayed scaling from an amax history (single tensor): the max of the
//            bits in slots (calls - n .. calls - 1) mod KFP8_HISTORY_SLOTS, n = min(calls, KFP8_HISTORY_LEN)
// and what the pass writes besides q: the scale it used (scale_out[z]), this
// tensor's amax (atomicMax into record[z], one pass), and zeros in zero[0..n_zero)
// (block 0's thread 0: the amax buffer the next call accumulates into, so no memset launch).
struct qscale {
    const unsigned *amax;
    const float *given;
    const unsigned *hist;
    int64_t calls;
    float max_finite;
    float *scale_out;
    unsigned *record;
    unsigned *zero;
    int64_t n_zero;
};

__device__ __forceinline__ float scale_from_amax(float amax, float max_finite)
{
    return amax > 0.0f ? amax / max_finite : 1.0f;
}

__device__ float qscale_value(const qscale &sc, int z)
{
    if (sc.amax) return scale_from_amax(__uint_as_float(sc.amax[z]), sc.max_finite);
    if (sc.given) return sc.given[z];
    int64_t n = sc.calls < KFP8_HISTORY_LEN ? sc.calls : KFP8_HISTORY_LEN;
    unsigned m = 0;
    for (int64_t i = 1; i <= n; i++) m = max(m, sc.hist[(sc.calls - i) % KFP8_HISTORY_SLOTS]);
    return scale_from_amax(__uint_as_float(m), sc.max_finite);
}

// A quantiser's scale for replica z, read once a block (leader: the thread
// that reads it) and shared; the first block's leader also writes scale_out[z]
// and, for replica 0, zeroes the amax words the next call accumulates into.
// Every thread of the block calls it (it synchronises).
__device__ float quantizer_scale(const qscale &sc, int z, bool leader, bool first_block)
{
    __shared__ float s_shared;
    if (leader) {
        s_shared = qscale_value(sc, z);
        if (first_block && sc.scale_out) sc.scale_out[z] = s_shared;
        if (first_block && z == 0)
            for (int64_t i = 0; i < sc.n_zero; i++) sc.zero[i] = 0u;
    }
    __syncthreads();
    return s_shared;
}

// The element arithmetic of every per-tensor quantiser, on one 16-byte load
// of x (16 / sizeof(T) elements): b[j] = sat(x_j / s), and the running |x| max
// m updated (returned).
template <class T>
__device__ __forceinline__ float quantize_16_bytes(const uint4 &raw, float s, int e5m2, uint8_t *b, float m)
{
    const T *e = (const T *)&raw;
#pragma unroll
    for (int j = 0; j < 16 / (int)sizeof(T); j++) {
        float v = kto_float(e[j]);
        m = fmaxf(m, fabsf(v));
        b[j] = to_fp8(v / s, e5m2);
    }
    return m;
}

// q = sat(x / scale), x [rows, cols]; q [rows, cols] or transposed [cols, rows]
// through a 32x32 shared tile so both sides stay coalesced.  Block (32, 8):
// each row of threads is one warp (the amax record reduces over it).
template <class T>
__global__ void quantize_kernel(const T *x, int64_t x_stride, int64_t rows, int64_t cols, int transpose, qscale sc,
                                int e5m2, uint8_t *q, int64_t q_stride)
{
    __shared__ uint8_t tile[32][33];
    const int z = blockIdx.z;
    x += z * x_stride;
    q += z * q_stride;
    const float s = quantizer_scale(sc, z, threadIdx.x == 0 && threadIdx.y == 0, blockIdx.x == 0 && blockIdx.y == 0);
    float m = 0.0f;
    int64_t r0 = (int64_t)blockIdx.y * 32, c0 = (int64_t)blockIdx.x * 32;
    for (int dy = threadIdx.y; dy < 32; dy += blockDim.y) {
        int64_t r = r0 + dy, c = c0 + threadIdx.x;
        if (r < rows && c < cols) {
            float v = kto_float(x[r * cols + c]);
            m = fmaxf(m, fabsf(v));
            uint8_t b = to_fp8(v / s, e5m2);
            if (transpose) tile[dy][threadIdx.x] = b;
            else q[r * cols + c] = b;
        }
    }
    if (sc.record) { // one atomic a block (see amax_kernel); a row of threads is a warp
        m = block_max(m, threadIdx.y, threadIdx.x, blockDim.y);
        if (threadIdx.x == 0 && threadIdx.y == 0) atomicMax(sc.record + z, __float_as_uint(m));
    }
    if (!transpose) return;
    __syncthreads();
    for (int dy = threadIdx.y; dy < 32; dy += blockDim.y) {
        int64_t c = c0 + dy, r = r0 + threadIdx.x; // q[c][r] = x[r][c]
        if (r < rows && c < cols) q[c * rows + r] = tile[threadIdx.x][dy];
    }
}

// The transposing quantiser for tensors whose sides are multiples of 64 (every
// trainer GEMM operand of a realistic shape): a 64 x 64 tile a block, 16-byte
// loads of x, the tile's fp8 bytes through shared memory, 16-byte stores of
// q [cols, rows]; and, where qf is given, the untransposed bytes qf [rows,
// cols] too (8- or 4-byte stores), so a tensor that a GEMM needs in both
// layouts (a gradient: dgrad reads it [M,N], wgrad [N,M]) is read once.  The
// element arithmetic is quantize_kernel's (to_fp8(v / s)), so the bytes are
// the same; it replaced quantize_kernel's 32 x 32 tiles of 2-byte loads and
// 1-byte stores, which ran at about a quarter of the H100's bandwidth and were
// a fifth of the fp8 plan's gpt2 step (docs/results-experiments.md).
// Block 256 threads; grid (cols / 64, rows / 64, count).
constexpr int QT_TILE = 64;
static int planted_tile_transpose_bug;
extern "C" void kfp8_plant_tile_transpose_bug(int on) { planted_tile_transpose_bug = on != 0; }

template <class T>
__global__ void quantize_tile_kernel(const T *x, int64_t x_stride, int64_t rows, int64_t cols, qscale sc, int e5m2,
                                     uint8_t *q, int64_t q_stride, uint8_t *qf, int64_t qf_stride, int bug)
{
    constexpr int V = 16 / (int)sizeof(T), VPR = QT_TILE / V; // elements a 16-byte load, loads a tile row
    __shared__ uint8_t tile[QT_TILE][QT_TILE + 1];             // +1: the column gathers below hit distinct banks
    const int z = blockIdx.z;
    x += z * x_stride;
    q += z * q_stride;
    if (qf) qf += z * qf_stride;
    const float s = quantizer_scale(sc, z, threadIdx.x == 0, blockIdx.x == 0 && blockIdx.y == 0);
    const int64_t r0 = (int64_t)blockIdx.y * QT_TILE, c0 = (int64_t)blockIdx.x * QT_TILE;
    float m = 0.0f;
    for (int u = threadIdx.x; u < QT_TILE * VPR; u += blockDim.x) {
        const int row = u / VPR, cv = (u % VPR) * V;
        uint8_t b[V];
        m = quantize_16_bytes<T>(*(const uint4 *)(x + (r0 + row) * cols + c0 + cv), s, e5m2, b, m);
#pragma unroll
        for (int j = 0; j < V; j++) tile[row][cv + j] = b[j];
        if (qf) {
            uint8_t *dst = qf + (r0 + row) * cols + c0 + cv;
            if (V == 8) *(uint2 *)dst = *(const uint2 *)b;
            else *(uint32_t *)dst = *(const uint32_t *)b;
        }
    }
    if (sc.record) { // one atomic a block, as amax_kernel
        m = block_max(m, threadIdx.x >> 5, threadIdx.x & 31, blockDim.x >> 5);
        if (threadIdx.x == 0) atomicMax(sc.record + z, __float_as_uint(m));
    }
    __syncthreads();
    // q[c][r0 .. r0+63]: 64 bytes a column of the tile, four threads of 16 bytes each
    for (int t = threadIdx.x; t < QT_TILE * 4; t += blockDim.x) {
        const int c = t / 4, rr = (t % 4) * 16;
        uint8_t out[16];
#pragma unroll
        for (int k = 0; k < 16; k++) out[k] = tile[rr + k][c];
        const int rw = bug ? rr ^ 16 : rr; // the planted twin: two row chunks swapped
        *(uint4 *)(q + (c0 + c) * rows + r0 + rw) = *(const uint4 *)out;
    }
}

// One block per tile of block_rows x 128 of the K-contiguous [R,K] view:
// amax, scale = amax / max_finite, then the quantised tile.
template <class T>
__global__ void block_quantize_kernel(const T *x, int64_t x_stride, int64_t R, int64_t K, int x_transposed,
                                      int block_rows, float max_finite, int e5m2, uint8_t *q, int64_t q_stride,
                                      float *scales, int64_t scales_stride)
{
    __shared__ float warp_max[32];
    x += blockIdx.z * x_stride;
    q += blockIdx.z * q_stride;
    scales += blockIdx.z * scales_stride;
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

static int check_quant_batch(const char *ctx, int64_t count, int64_t x_stride, int64_t x_size, int64_t q_stride,
                             int64_t q_size)
{
    if (count < 1 || count > 65535) return kernels_fail("%s: count %lld not in [1, 65535]", ctx, (long long)count);
    if (count > 1 && (x_stride < x_size || q_stride < q_size))
        return kernels_fail("%s: replica strides %lld (x) and %lld (q) below the tensor sizes %lld and %lld", ctx,
                            (long long)x_stride, (long long)q_stride, (long long)x_size, (long long)q_size);
    return 0;
}

// q = sat(x / scale) for an untransposed x: the flat [rows * cols] view, V
// elements a thread (16-byte loads, V-byte stores), replica z = blockIdx.y;
// the same element arithmetic as quantize_kernel, so the same bytes.  x and q
// of every replica aligned (launch_quantize checks).
template <class T>
__global__ void quantize_flat_kernel(const T *x, int64_t x_stride, int64_t n, qscale sc, int e5m2, uint8_t *q,
                                     int64_t q_stride)
{
    constexpr int V = 16 / (int)sizeof(T);
    const int z = blockIdx.y;
    x += z * x_stride;
    q += z * q_stride;
    const float s = quantizer_scale(sc, z, threadIdx.x == 0, blockIdx.x == 0);
    float m = 0.0f;
    const int64_t tid = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, threads = (int64_t)gridDim.x * blockDim.x;
    const int64_t nv = n / V;
    for (int64_t i = tid; i < nv; i += threads) {
        uint8_t b[V];
        m = quantize_16_bytes<T>(((const uint4 *)x)[i], s, e5m2, b, m);
        if (V == 8) ((uint2 *)q)[i] = *(const uint2 *)b;
        else ((uint32_t *)q)[i] = *(const uint32_t *)b;
    }
    for (int64_t i = nv * V + tid; i < n; i += threads) {
        float v = kto_float(x[i]);
        m = fmaxf(m, fabsf(v));
        q[i] = to_fp8(v / s, e5m2);
    }
    if (sc.record) { // one atomic a block
        m = block_max(m, threadIdx.x >> 5, threadIdx.x & 31, blockDim.x >> 5);
        if (threadIdx.x == 0) atomicMax(sc.record + z, __float_as_uint(m));
    }
}

// The quantise launch for x in x_format (fp32 or bf16): q [rows, cols], or
// [cols, rows] when transpose; with qf (transpose only) the untransposed
// bytes too, in the same pass where quantize_tile_kernel takes the shape.
static int launch_quantize(const char *ctx, const void *x, int64_t x_stride, prec_format x_format, int64_t rows,
                           int64_t cols, int transpose, const qscale &sc, prec_format fp8, void *q, int64_t q_stride,
                           int64_t count, void *qf = nullptr, int64_t qf_stride = 0)
{
    int e5m2 = fp8 == PREC_E5M2;
    const int64_t el = x_format == PREC_FP32 ? 4 : 2, V = 16 / el, n = rows * cols;
    const bool tile = transpose && rows % QT_TILE == 0 && cols % QT_TILE == 0 && rows / QT_TILE <= 65535 &&
                      (uintptr_t)x % 16 == 0 && (x_stride * el) % 16 == 0 && (uintptr_t)q % 16 == 0 &&
                      q_stride % 16 == 0 && (!qf || ((uintptr_t)qf % V == 0 && qf_stride % V == 0));
    if (tile) {
        dim3 grid((unsigned)(cols / QT_TILE), (unsigned)(rows / QT_TILE), (unsigned)count);
        const int bug = planted_tile_transpose_bug;
        if (x_format == PREC_FP32)
            quantize_tile_kernel<float><<<grid, 256, 0, kstream()>>>((const float *)x, x_stride, rows, cols, sc, e5m2,
                                                                     (uint8_t *)q, q_stride, (uint8_t *)qf, qf_stride,
                                                                     bug);
        else
            quantize_tile_kernel<__nv_bfloat16><<<grid, 256, 0, kstream()>>>((const __nv_bfloat16 *)x, x_stride, rows,
                                                                             cols, sc, e5m2, (uint8_t *)q, q_stride,
                                                                             (uint8_t *)qf, qf_stride, bug);
        KLAUNCHED(ctx, "quantize_tile_kernel");
        return 0;
    }
    if (qf && launch_quantize(ctx, x, x_stride, x_format, rows, cols, 0, sc, fp8, qf, qf_stride, count)) return -1;
    if (!transpose && (uintptr_t)x % 16 == 0 && (x_stride * el) % 16 == 0 && (uintptr_t)q % V == 0 && q_stride % V == 0) {
        dim3 fgrid((unsigned)std::min<int64_t>((n / V + 255) / 256 + 1, 2048), (unsigned)count);
        if (x_format == PREC_FP32)
            quantize_flat_kernel<float><<<fgrid, 256, 0, kstream()>>>((const float *)x, x_stride, n, sc, e5m2,
                                                                      (uint8_t *)q, q_stride);
        else
            quantize_flat_kernel<__nv_bfloat16><<<fgrid, 256, 0, kstream()>>>((const __nv_bfloat16 *)x, x_stride, n,
                                                                              sc, e5m2, (uint8_t *)q, q_stride);
        KLAUNCHED(ctx, "quantize_flat_kernel");
        return 0;
    }
    dim3 qgrid((unsigned)((cols + 31) / 32), (unsigned)((rows + 31) / 32), (unsigned)count), qblock(32, 8);
    if (x_format == PREC_FP32)
        quantize_kernel<float><<<qgrid, qblock, 0, kstream()>>>((const float *)x, x_stride, rows, cols, transpose, sc,
                                                               e5m2, (uint8_t *)q, q_stride);
    else
        quantize_kernel<__nv_bfloat16><<<qgrid, qblock, 0, kstream()>>>((const __nv_bfloat16 *)x, x_stride, rows,
                                                                       cols, transpose, sc, e5m2, (uint8_t *)q,
                                                                       q_stride);
    KLAUNCHED(ctx, "quantize_kernel");
    return 0;
}

static int check_quantize_args(const char *ctx, const void *x, prec_format x_format, int64_t rows, int64_t cols,
                               prec_format fp8, const void *q, const void *scales)
{
    if (rows <= 0 || cols <= 0) return kernels_fail("%s: rows and cols must be positive", ctx);
    if (!x || !q || !scales) return kernels_fail("%s: null pointer", ctx);
    return check_quant_formats(ctx, x_format, fp8);
}

// Current scaling's amax buffers: two halves of amax_capacity counters each
// in WS_AMAX.  A call accumulates into half amax_parity (zero), and its
// quantise launch zeroes the other half for the next call: two launches per
// tensor, no memset.  Fresh (or regrown) buffers are zeroed once.
static int amax_parity;
static int64_t amax_capacity;

static int amax_halves(const char *ctx, int64_t count, unsigned **mine, unsigned **next)
{
    void *amax = nullptr;
    if (count > amax_capacity) {
        if (ws_get(ctx, WS_AMAX, (size_t)(2 * count) * sizeof(unsigned), &amax)) return -1;
        KCUDA(ctx, cudaMemsetAsync(amax, 0, (size_t)(2 * count) * sizeof(unsigned), kstream()));
        amax_capacity = count;
        amax_parity = 0;
    }
    unsigned *base = (unsigned *)ws_ptr[WS_AMAX];
    *mine = base + amax_parity * amax_capacity;
    *next = base + (1 - amax_parity) * amax_capacity;
    amax_parity ^= 1;
    return 0;
}

// Both halves zeroed and the parity back to 0, on the current stream.  A CUDA
// graph's replay must find the amax words as its capture assumed them (the
// parity is host state, baked into the captured launches): the trainer's
// graphs call this first and last in each capture, so every replay starts and
// ends with both halves zero, and once more eagerly after the capture (which
// ran nothing, so the words are as before it while the parity moved on).
extern "C" int kfp8_amax_rewind(void)
{
    amax_parity = 0;
    if (!amax_capacity) return 0;
    KCUDA("fp8 amax rewind",
          cudaMemsetAsync(ws_ptr[WS_AMAX], 0, (size_t)(2 * amax_capacity) * sizeof(unsigned), kstream()));
    return 0;
}

// Current scaling: the amax pass, then the quantise pass (qf: launch_quantize's).
static int quantize_current(const char *ctx, int64_t count, const void *x, int64_t x_stride, prec_format x_format,
                            int64_t rows, int64_t cols, int transpose, prec_format fp8, void *q, int64_t q_stride,
                            float *scales, void *qf)
{
    if (check_quantize_args(ctx, x, x_format, rows, cols, fp8, q, scales)) return -1;
    const int64_t n = rows * cols;
    if (check_quant_batch(ctx, count, x_stride, n, q_stride, n)) return -1;
    unsigned *amax = nullptr, *next = nullptr;
    if (amax_halves(ctx, count, &amax, &next)) return -1;
    dim3 agrid((unsigned)std::min(grid_for(n, 256), AMAX_BLOCKS), (unsigned)count);
    if (x_format == PREC_FP32)
        amax_kernel<float><<<agrid, 256, 0, kstream()>>>((const float *)x, n, x_stride, amax);
    else
        amax_kernel<__nv_bfloat16><<<agrid, 256, 0, kstream()>>>((const __nv_bfloat16 *)x, n, x_stride, amax);
    KLAUNCHED(ctx, "amax_kernel");
    qscale sc = {};
    sc.amax = amax;
    sc.max_finite = (float)prec_format_get(fp8)->max_finite;
    sc.scale_out = scales;
    sc.zero = next;
    sc.n_zero = amax_capacity;
    return launch_quantize(ctx, x, x_stride, x_format, rows, cols, transpose, sc, fp8, q, q_stride, count, qf,
                           q_stride);
}

extern "C" int kfp8_quantize_tensor_batched(int64_t count, const void *x, int64_t x_stride, prec_format x_format,
                                            int64_t rows, int64_t cols, int transpose, prec_format fp8, void *q,
                                            int64_t q_stride, float *scales)
{
    char ctx[200];
    snprintf(ctx, sizeof ctx, "fp8 quantize %s->%s rows=%lld cols=%lld transpose=%d count=%lld",
             prec_format_name(x_format), prec_format_name(fp8), (long long)rows, (long long)cols, transpose,
             (long long)count);
    return quantize_current(ctx, count, x, x_stride, x_format, rows, cols, transpose, fp8, q, q_stride, scales,
                            nullptr);
}

extern "C" int kfp8_quantize_tensor_dual(const void *x, prec_format x_format, int64_t rows, int64_t cols,
                                         prec_format fp8, void *q, void *q_t, float *scale)
{
    char ctx[200];
    snprintf(ctx, sizeof ctx, "fp8 quantize (both layouts) %s->%s rows=%lld cols=%lld", prec_format_name(x_format),
             prec_format_name(fp8), (long long)rows, (long long)cols);
    if (!q_t) return kernels_fail("%s: null pointer", ctx);
    return quantize_current(ctx, 1, x, 0, x_format, rows, cols, 1, fp8, q_t, 0, scale, q);
}

extern "C" int kfp8_quantize_tensor_scaled(const void *x, prec_format x_format, int64_t rows, int64_t cols,
                                           int transpose, prec_format fp8, const float *scale, void *q, float *amax)
{
    char ctx[200];
    snprintf(ctx, sizeof ctx, "fp8 quantize (given scale) %s->%s rows=%lld cols=%lld transpose=%d",
             prec_format_name(x_format), prec_format_name(fp8), (long long)rows, (long long)cols, transpose);
    if (check_quantize_args(ctx, x, x_format, rows, cols, fp8, q, scale)) return -1;
    if (!amax) return kernels_fail("%s: null amax", ctx);
    qscale sc = {};
    sc.given = scale;
    sc.record = (unsigned *)amax;
    return launch_quantize(ctx, x, 0, x_format, rows, cols, transpose, sc, fp8, q, 0, 1);
}

extern "C" int kfp8_history_init(kfp8_history *h)
{
    h->calls = 0;
    h->frozen = 0;
    h->slots = nullptr;
    if (kdevice_alloc((void **)&h->slots, KFP8_HISTORY_SLOTS * sizeof(float), "fp8 amax history")) return -1;
    return kdevice_fill_bytes(h->slots, 0, KFP8_HISTORY_SLOTS * sizeof(float), "fp8 amax history");
}

extern "C" void kfp8_history_free(kfp8_history *h)
{
    kdevice_free(h->slots);
    h->slots = nullptr;
    h->calls = 0;
}

extern "C" int kfp8_quantize_tensor_delayed(const void *x, prec_format x_format, int64_t rows, int64_t cols,
                                            int transpose, prec_format fp8, void *q, float *scale, kfp8_history *h)
{
    char ctx[200];
    snprintf(ctx, sizeof ctx, "fp8 quantize (delayed, call %lld) %s->%s rows=%lld cols=%lld transpose=%d",
             h ? (long long)h->calls : -1LL, prec_format_name(x_format), prec_format_name(fp8), (long long)rows,
             (long long)cols, transpose);
    if (check_quantize_args(ctx, x, x_format, rows, cols, fp8, q, scale)) return -1;
    if (!h || !h->slots) return kernels_fail("%s: no history", ctx);
    unsigned *slots = (unsigned *)h->slots;
    unsigned *mine = slots + h->calls % KFP8_HISTORY_SLOTS, *next = slots + (h->calls + 1) % KFP8_HISTORY_SLOTS;
    qscale sc = {};
    sc.max_finite = (float)prec_format_get(fp8)->max_finite;
    sc.scale_out = scale;
    if (h->frozen) { // read the history, record nothing (its ring and count stay as they are)
        if (h->calls == 0) return kfp8_quantize_tensor(x, x_format, rows, cols, transpose, fp8, q, scale);
        sc.hist = slots;
        sc.calls = h->calls;
        return launch_quantize(ctx, x, 0, x_format, rows, cols, transpose, sc, fp8, q, 0, 1);
    }
    sc.zero = next;
    sc.n_zero = 1;
    if (h->calls == 0) {
        // the first call scales by its own amax, which is also the history's first entry
        const int64_t n = rows * cols;
        if (x_format == PREC_FP32)
            amax_kernel<float><<<dim3((unsigned)std::min(grid_for(n, 256), AMAX_BLOCKS), 1), 256, 0, kstream()>>>((const float *)x, n, 0, mine);
        else
            amax_kernel<__nv_bfloat16><<<dim3((unsigned)std::min(grid_for(n, 256), AMAX_BLOCKS), 1), 256, 0, kstream()>>>(
                (const __nv_bfloat16 *)x, n, 0, mine);
        KLAUNCHED(ctx, "amax_kernel");
        sc.amax = mine;
    } else {
        sc.hist = slots;
        sc.calls = h->calls;
        sc.record = mine;
    }
    if (launch_quantize(ctx, x, 0, x_format, rows, cols, transpose, sc, fp8, q, 0, 1)) return -1;
    h->calls++;
    return 0;
}

extern "C" int kfp8_quantize_tensor(const void *x, prec_format x_format, int64_t rows, int64_t cols, int transpose,
                                    prec_format fp8, void *q, float *scale)
{
    return kfp8_quantize_tensor_batched(1, x, 0, x_format, rows, cols, transpose, fp8, q, 0, scale);
}

extern "C" int kfp8_quantize_blocks_batched(int64_t count, const void *x, int64_t x_stride, prec_format x_format,
                                            int64_t R, int64_t K, int x_transposed, int block_rows, prec_format fp8,
                                            void *q, int64_t q_stride, float *scales, int64_t scales_stride)
{
    char ctx[224];
    snprintf(ctx, sizeof ctx, "fp8 block quantize %s->%s R=%lld K=%lld transposed=%d block=%dx%d count=%lld",
             prec_format_name(x_format), prec_format_name(fp8), (long long)R, (long long)K, x_transposed, block_rows,
             KMATMUL_FP8_BLOCK, (long long)count);
    if (R <= 0 || K <= 0) return kernels_fail("%s: R and K must be positive", ctx);
    if (block_rows != 1 && block_rows != KMATMUL_FP8_BLOCK)
        return kernels_fail("%s: block_rows %d not accepted (1, %d)", ctx, block_rows, KMATMUL_FP8_BLOCK);
    if (!x || !q || !scales) return kernels_fail("%s: null pointer", ctx);
    if (check_quant_formats(ctx, x_format, fp8)) return -1;
    if (check_quant_batch(ctx, count, x_stride, R * K, q_stride, R * K)) return -1;
    const int64_t tiles = ((K + KMATMUL_FP8_BLOCK - 1) / KMATMUL_FP8_BLOCK) * ((R + block_rows - 1) / block_rows);
    if (count > 1 && scales_stride < tiles)
        return kernels_fail("%s: scales stride %lld below the %lld tiles", ctx, (long long)scales_stride,
                            (long long)tiles);
    dim3 grid((unsigned)((K + KMATMUL_FP8_BLOCK - 1) / KMATMUL_FP8_BLOCK), (unsigned)((R + block_rows - 1) / block_rows),
              (unsigned)count);
    float max_finite = (float)prec_format_get(fp8)->max_finite;
    int e5m2 = fp8 == PREC_E5M2;
    if (x_format == PREC_FP32)
        block_quantize_kernel<float><<<grid, 128, 0, kstream()>>>((const float *)x, x_stride, R, K, x_transposed,
                                                                 block_rows, max_finite, e5m2, (uint8_t *)q, q_stride,
                                                                 scales, scales_stride);
    else
        block_quantize_kernel<__nv_bfloat16><<<grid, 128, 0, kstream()>>>(
            (const __nv_bfloat16 *)x, x_stride, R, K, x_transposed, block_rows, max_finite, e5m2, (uint8_t *)q,
            q_stride, scales, scales_stride);
    KLAUNCHED(ctx, "block_quantize_kernel");
    return 0;
}

extern "C" int kfp8_quantize_blocks(const void *x, prec_format x_format, int64_t R, int64_t K, int x_transposed,
                                    int block_rows, prec_format fp8, void *q, float *scales)
{
    return kfp8_quantize_blocks_batched(1, x, 0, x_format, R, K, x_transposed, block_rows, fp8, q, 0, scales, 0);
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
constexpr int BS_BM = 64, BS_BN = 64; // the block tile; its K group is KMATMUL_FP8_BLOCK (BS_BK in the kernel)
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

// Replica strides (elements) of the block-scaled kernel's operands; the
// replica is blockIdx.z.
struct bs_strides {
    int64_t a, b, sa, sb, c, bias, y;
};

template <int A_E5M2, int B_E5M2>
__global__ void __launch_bounds__(128)
    block_scaled_fp8_kernel(const uint8_t *A, const uint8_t *B, const float *sa, const float *sb, int M, int N, int K,
                            float alpha, const __nv_bfloat16 *c, float beta, const __nv_bfloat16 *bias, int gelu,
                            __nv_bfloat16 *y, bs_strides rs, int drop_last_term, int bug)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    constexpr int BS_BK = KMATMUL_FP8_BLOCK; // here: the sm_80 pass compiles no body to use it
    {
        const int64_t r = blockIdx.z;
        A += r * rs.a;
        B += r * rs.b;
        sa += r * rs.sa;
        sb += r * rs.sb;
        if (c) c += r * rs.c;
        if (bias) bias += r * rs.bias;
        y += r * rs.y;
    }
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

static int launch_block_scaled(const char *ctx, const kmatmul_args *x, const kmatmul_batch *b, int drop_last, int bug)
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
    dim3 grid((unsigned)((x->N + BS_BN - 1) / BS_BN), (unsigned)((x->M + BS_BM - 1) / BS_BM), (unsigned)b->count);
    int ae = x->a_format == PREC_E5M2, be = x->b_format == PREC_E5M2;
    auto *kern = ae ? (be ? block_scaled_fp8_kernel<1, 1> : block_scaled_fp8_kernel<1, 0>)
                    : (be ? block_scaled_fp8_kernel<0, 1> : block_scaled_fp8_kernel<0, 0>);
    bs_strides rs = {b->stride_a, b->stride_b, b->stride_a_scale, b->stride_b_scale, b->stride_c, b->stride_bias,
                     b->stride_y};
    kern<<<grid, 128, 0, kstream()>>>((const uint8_t *)x->a, (const uint8_t *)x->b, x->a_scale, x->b_scale, (int)x->M,
                                      (int)x->N, (int)x->K, x->alpha, (const __nv_bfloat16 *)x->c, x->beta,
                                      (const __nv_bfloat16 *)x->bias, x->gelu, (__nv_bfloat16 *)x->y, rs, drop_last,
                                      bug);
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

// The alignment (bytes, at most 256) every replica's operand keeps when
// replicas lie `stride_bytes` apart: none is lost when the stride is a
// multiple of 256.
static uint32_t stride_alignment(int64_t stride_bytes) { return pointer_alignment((const void *)(uintptr_t)stride_bytes); }

static int check_batch(const char *ctx, const kmatmul_args *x, const kmatmul_batch *b)
{
    if (b->count < 1 || b->count > 65535)
        return kernels_fail("%s: batch count %lld not in [1, 65535]", ctx, (long long)b->count);
    if (b->count == 1) return 0;
    if (b->stride_a < 0 || b->stride_b < 0 || b->stride_c < 0 || b->stride_bias < 0 || b->stride_a_scale < 0 ||
        b->stride_b_scale < 0)
        return kernels_fail("%s: negative replica stride", ctx);
    if (b->stride_y < x->M * x->N)
        return kernels_fail("%s: replica stride of y %lld below M*N = %lld: replicas' outputs would overlap", ctx,
                            (long long)b->stride_y, (long long)(x->M * x->N));
    if (x->c == x->y && x->beta != 0.0f && b->stride_c != b->stride_y)
        return kernels_fail("%s: C is y (in place) but their replica strides differ (%lld, %lld)", ctx,
                            (long long)b->stride_c, (long long)b->stride_y);
    return 0;
}

// Split-K partials of a batched call: [replica][slice][M*N] fp32, replicas
// 256 bytes aligned (so each replica's slices sit exactly where a single
// call's would); at most this many bytes at once, else replicas in groups.
static const size_t PARTIALS_GROUP_BYTES = 256u << 20;

extern "C" int kmatmul_batched(kpath path, kmatmul_accum accum, int variant, const kmatmul_args *x,
                               const kmatmul_batch *batch)
{
    char ctx[256];
    if (!x) return kernels_fail("matmul: null arguments");
    const kmatmul_batch single = {1, 0, 0, 0, 0, 0, 0, 0};
    const kmatmul_batch *b = batch ? batch : &single;
    char replicas[40] = "";
    if (b->count != 1) snprintf(replicas, sizeof replicas, " x%lld replicas", (long long)b->count);
    snprintf(ctx, sizeof ctx, "matmul %s/%s/%s M=%lld N=%lld K=%lld a_trans=%d b_trans=%d%s", kpath_name(path),
             kmatmul_accum_name(accum),
             (variant >= 0 && variant < KMATMUL_NVARIANTS) ? kmatmul_variants[variant].name : "?", (long long)x->M,
             (long long)x->N, (long long)x->K, x->a_trans, x->b_trans, replicas);
    lt_gemm g;
    if (matmul_prepare(ctx, path, accum, variant, x, &g) || check_batch(ctx, x, b)) return -1;
    const int64_t R = b->count;
    const int bug = (int)kernels_planted_bug();
    const int drop = bug == KBUG_DROP_TERM;
    const cudaDataType out = g.out_type;
    const size_t a_el = type_bytes(g.a_type), b_el = type_bytes(g.b_type), o_el = type_bytes(out);
    // The fp8 layouts move K in steps of 16 bytes: the planted bug drops that many.
    const int64_t k_step = path == KPATH_FP8 ? 16 : 1;

    if (accum == KMATMUL_ACC_BLOCK_SCALED) {
        if (R > 1) batch_stats.kernel++;
        return launch_block_scaled(ctx, x, b, drop, bug);
    }
    if (R > 1) {
        g.cap_a = stride_alignment(b->stride_a * (int64_t)a_el);
        g.cap_b = stride_alignment(b->stride_b * (int64_t)b_el);
        g.cap_c = stride_alignment(b->stride_c * (int64_t)o_el);
        g.cap_d = stride_alignment(b->stride_y * (int64_t)o_el);
    }
    lt_batch lb = {R, b->stride_a, b->stride_b, b->stride_c, b->stride_y, b->stride_bias, b->stride_a_scale,
                   b->stride_b_scale};

    if (variant == KMATMUL_SPLIT_K || bug == KBUG_TRUNCATE_OUTPUT || (drop && x->K <= k_step)) {
        // Slices of K (a multiple of k_step each) into fp32 partials, then the
        // fixed-order reduction with the epilogue.  The truncate-output bug also
        // comes this way (one slice) so that our kernel does the final rounding,
        // and a dropped term that leaves no K at all (its partial is zero).
        int64_t slices = variant == KMATMUL_SPLIT_K ? KMATMUL_SPLIT_K_SLICES : 1;
        int64_t chunk = (x->K + slices - 1) / slices;
        chunk = (chunk + k_step - 1) / k_step * k_step;
        int n_slices = (int)((x->K + chunk - 1) / chunk);
        const int64_t MN = x->M * x->N, per_replica = (n_slices * MN + 63) / 64 * 64; // floats
        int64_t group = R;
        if (R > 1)
            group = std::max<int64_t>(1, std::min<int64_t>(R, (int64_t)(PARTIALS_GROUP_BYTES / (per_replica * 4))));
        void *partials = nullptr;
        if (ws_get(ctx, WS_PARTIALS, (size_t)((group - 1) * per_replica + n_slices * MN) * sizeof(float), &partials))
            return -1;
        for (int64_t r0 = 0; r0 < R; r0 += group) {
            const int64_t n = std::min(group, R - r0);
            lt_batch sb = {n, b->stride_a, b->stride_b, 0, per_replica, 0, b->stride_a_scale, b->stride_b_scale};
            for (int s = 0; s < n_slices; s++) {
                int64_t k0 = s * chunk, kl = std::min(chunk, x->K - k0);
                if (drop && s == n_slices - 1) kl -= k_step;
                lt_gemm gs = g;
                gs.out_type = CUDA_R_32F;
                gs.K = kl;
                gs.a = (const char *)x->a + (r0 * b->stride_a + (x->a_trans ? k0 * x->M : k0)) * (int64_t)a_el;
                gs.b = (const char *)x->b + (r0 * b->stride_b + (x->b_trans ? k0 : k0 * x->N)) * (int64_t)b_el;
                if (g.a_scale) gs.a_scale = g.a_scale + r0 * b->stride_a_scale;
                if (g.b_scale) gs.b_scale = g.b_scale + r0 * b->stride_b_scale;
                gs.alpha = 1.0f;
                gs.d = (float *)partials + (size_t)s * MN;
                gs.cap_c = gs.cap_d = 0; // partials: every replica's at a multiple of 256 bytes
                if (kl <= 0) { // the planted bug emptied a slice: its partial is zero
                    for (int64_t r = 0; r < n; r++)
                        KCUDA(ctx, cudaMemsetAsync((float *)gs.d + r * per_replica, 0, (size_t)MN * sizeof(float),
                                                   kstream()));
                    continue;
                }
                if (lt_gemm_run_batched(ctx, gs, sb)) return -1;
            }
            kmatmul_args xr = *x;
            if (x->c) xr.c = (const char *)x->c + r0 * b->stride_c * (int64_t)o_el;
            if (x->bias) xr.bias = (const char *)x->bias + r0 * b->stride_bias * (int64_t)o_el;
            xr.y = (char *)x->y + r0 * b->stride_y * (int64_t)o_el;
            epi_strides rs = {b->stride_c, b->stride_bias, b->stride_y};
            if (launch_reduce_any(ctx, out, (const float *)partials, n_slices, per_replica, &xr, n, rs, bug))
                return -1;
        }
        return 0;
    }

    if (drop) g.K -= k_step;
    g.c = x->c;
    g.beta = x->beta;
    if (variant == KMATMUL_SPLIT_EPILOGUE) {
        if (lt_gemm_run_batched(ctx, g, lb)) return -1;
        epi_strides rs = {b->stride_c, b->stride_bias, b->stride_y};
        if (x->bias || x->gelu) return launch_split_epilogue(ctx, out, x, R, rs, bug);
        return 0;
    }
    g.bias = x->bias;
    g.gelu = x->gelu;
    return lt_gemm_run_batched(ctx, g, lb);
}

extern "C" int kmatmul(kpath path, kmatmul_accum accum, int variant, const kmatmul_args *x)
{
    return kmatmul_batched(path, accum, variant, x, nullptr);
}

// Per-tensor fp8 scales of R replicas, contiguous in src, to dst[r * spread]
// (256-byte aligned scale pointers for cuBLASLt).
__global__ void spread_scales_kernel(float *da, const float *sa, float *db, const float *sb, int64_t R, int64_t spread)
{
    for (int64_t r = threadIdx.x; r < R; r += blockDim.x) {
        da[r * spread] = sa[r];
        db[r * spread] = sb[r];
    }
}

extern "C" int kmatmul_quantized_batched(kmatmul_accum accum, int variant, const kmatmul_args *x,
                                         const kmatmul_batch *batch, prec_format x_format, prec_format a_fp8,
                                         prec_format b_fp8)
{
    char ctx[220];
    if (!x) return kernels_fail("matmul quantized: null arguments");
    const kmatmul_batch single = {1, 0, 0, 0, 0, 0, 0, 0};
    const kmatmul_batch *b = batch ? batch : &single;
    snprintf(ctx, sizeof ctx, "matmul quantized %s x %s variant %d M=%lld N=%lld K=%lld replicas=%lld",
             prec_format_name(a_fp8), prec_format_name(b_fp8), variant, (long long)x->M, (long long)x->N,
             (long long)x->K, (long long)b->count);
    char why[128];
    if (!kmatmul_supports(KPATH_FP8, accum, variant, why, sizeof why)) return kernels_fail("%s: %s", ctx, why);
    if (x->M <= 0 || x->N <= 0 || x->K <= 0) return kernels_fail("%s: M, N and K must be positive", ctx);
    if (!x->a || !x->b) return kernels_fail("%s: null A or B", ctx);
    if (check_batch(ctx, x, b)) return -1;
    const int64_t R = b->count;
    if (R > 1 && (b->stride_a < x->M * x->K || b->stride_b < x->N * x->K))
        return kernels_fail("%s: replica strides of A and B must hold a whole operand each", ctx);
    // Each replica's quantised operands in their own part of the workspaces,
    // 256-byte aligned like a single call's (so the GEMM's plan is the same).
    const int64_t G = (x->K + KMATMUL_FP8_BLOCK - 1) / KMATMUL_FP8_BLOCK;
    const int64_t nb = (x->N + KMATMUL_FP8_BLOCK - 1) / KMATMUL_FP8_BLOCK;
    const int block = accum == KMATMUL_ACC_BLOCK_SCALED;
    const int64_t qa_stride = (x->M * x->K + 255) / 256 * 256, qb_stride = (x->N * x->K + 255) / 256 * 256;
    // Per-tensor scales of several replicas sit 256 bytes apart: cuBLASLt
    // refused fp8 GEMMs whose scale pointer was only 4-byte aligned (replica
    // 1 of contiguous scales; CUBLAS_STATUS_NOT_SUPPORTED on an H100).  The
    // quantiser writes them contiguously after that spread area; one 2D copy
    // spreads them.  A single call keeps its one contiguous scale.
    const int64_t spread = (!block && R > 1) ? 256 / (int64_t)sizeof(float) : 0;
    const int64_t sa_stride = block ? x->M * G : spread ? spread : 1, sb_stride = block ? nb * G : spread ? spread : 1;
    // Scale floats: block-scaled, R tile grids; per tensor, the spread area
    // (R * spread) and after it the R contiguous scales the quantiser writes.
    // (Sized as block-scaled grids before, the per-tensor area ran past the
    // end for small operands at R = 16: the 1-minute recipe's replicas then
    // differed from their single runs.)
    const int64_t sa_floats = block ? (R - 1) * sa_stride + x->M * G : R * spread + R;
    const int64_t sb_floats = block ? (R - 1) * sb_stride + nb * G : R * spread + R;
    void *qa = nullptr, *qb = nullptr, *sa = nullptr, *sb = nullptr;
    if (ws_get(ctx, WS_QA, (size_t)((R - 1) * qa_stride + x->M * x->K), &qa) ||
        ws_get(ctx, WS_QB, (size_t)((R - 1) * qb_stride + x->N * x->K), &qb))
        return -1;
    if (ws_get(ctx, WS_SA, (size_t)sa_floats * sizeof(float), &sa) ||
        ws_get(ctx, WS_SB, (size_t)sb_floats * sizeof(float), &sb))
        return -1;
    if (block) {
        if (kfp8_quantize_blocks_batched(R, x->a, b->stride_a, x_format, x->M, x->K, x->a_trans, 1, a_fp8, qa,
                                         qa_stride, (float *)sa, sa_stride) ||
            kfp8_quantize_blocks_batched(R, x->b, b->stride_b, x_format, x->N, x->K, !x->b_trans, KMATMUL_FP8_BLOCK,
                                         b_fp8, qb, qb_stride, (float *)sb, sb_stride))
            return -1;
    } else {
        // A stored [M,K] (or [K,M]: transposed while quantising); B to [N,K];
        // one scale per replica (its own amax), contiguous.
        float *sa_out = spread ? (float *)sa + R * spread : (float *)sa;
        float *sb_out = spread ? (float *)sb + R * spread : (float *)sb;
        if (kfp8_quantize_tensor_batched(R, x->a, b->stride_a, x_format, x->a_trans ? x->K : x->M,
                                         x->a_trans ? x->M : x->K, x->a_trans, a_fp8, qa, qa_stride, sa_out) ||
            kfp8_quantize_tensor_batched(R, x->b, b->stride_b, x_format, x->b_trans ? x->N : x->K,
                                         x->b_trans ? x->K : x->N, !x->b_trans, b_fp8, qb, qb_stride, sb_out))
            return -1;
        if (spread) {
            spread_scales_kernel<<<1, 256, 0, kstream()>>>((float *)sa, sa_out, (float *)sb, sb_out, R, spread);
            if (klaunched(ctx, "spread scales")) return -1;
        }
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
    kmatmul_batch qbatch = {R, qa_stride, qb_stride, b->stride_c, b->stride_y, b->stride_bias, sa_stride, sb_stride};
    return kmatmul_batched(KPATH_FP8, accum, variant, &q, &qbatch);
}

extern "C" int kmatmul_quantized(kmatmul_accum accum, int variant, const kmatmul_args *x, prec_format x_format,
                                 prec_format a_fp8, prec_format b_fp8)
{
    return kmatmul_quantized_batched(accum, variant, x, nullptr, x_format, a_fp8, b_fp8);
}

// One operand of kmatmul_quantized_ex into the K-contiguous [rows, K] layout
// at q (workspace slot ws) with its scale at *scale_at.
static int quantized_operand(const char *ctx, const kfp8_operand *op, int ws, int sws, const void *x, int transpose,
                             int64_t rows, int64_t K, prec_format x_format, prec_format fp8, const void **q,
                             const float **scale_at)
{
    if (op && op->q) {
        if (!op->scale) return kernels_fail("%s: a given operand needs its scale", ctx);
        *q = op->q;
        *scale_at = op->scale;
        return 0;
    }
    void *buf = nullptr, *sbuf = nullptr;
    if (ws_get(ctx, ws, (size_t)(rows * K), &buf) || ws_get(ctx, sws, sizeof(float), &sbuf)) return -1;
    // x is [rows, K], or [K, rows] (transpose = 1: transposed while quantising)
    int rc = op && op->history
                 ? kfp8_quantize_tensor_delayed(x, x_format, transpose ? K : rows, transpose ? rows : K, transpose, fp8,
                                                buf, (float *)sbuf, op->history)
                 : kfp8_quantize_tensor(x, x_format, transpose ? K : rows, transpose ? rows : K, transpose, fp8, buf,
                                        (float *)sbuf);
    if (rc) return -1;
    *q = buf;
    *scale_at = (const float *)sbuf;
    return 0;
}

extern "C" int kmatmul_quantized_ex(kmatmul_accum accum, int variant, const kmatmul_args *x, prec_format x_format,
                                    prec_format a_fp8, prec_format b_fp8, const kfp8_operand *a_op,
                                    const kfp8_operand *b_op)
{
    char ctx[220];
    if (!x) return kernels_fail("matmul quantized: null arguments");
    snprintf(ctx, sizeof ctx, "matmul quantized %s x %s variant %d M=%lld N=%lld K=%lld (%s A, %s B)",
             prec_format_name(a_fp8), prec_format_name(b_fp8), variant, (long long)x->M, (long long)x->N,
             (long long)x->K, a_op && a_op->q ? "given" : a_op && a_op->history ? "delayed" : "current",
             b_op && b_op->q ? "given" : b_op && b_op->history ? "delayed" : "current");
    char why[128];
    if (!kmatmul_supports(KPATH_FP8, accum, variant, why, sizeof why)) return kernels_fail("%s: %s", ctx, why);
    if (accum == KMATMUL_ACC_BLOCK_SCALED) return kernels_fail("%s: per-tensor scales only (not block_scaled)", ctx);
    if (x->M <= 0 || x->N <= 0 || x->K <= 0) return kernels_fail("%s: M, N and K must be positive", ctx);
    if ((!x->a && !(a_op && a_op->q)) || (!x->b && !(b_op && b_op->q))) return kernels_fail("%s: null A or B", ctx);
    kmatmul_args q = *x;
    const float *sa = nullptr, *sb = nullptr;
    // A [M,K] (or [K,M]); B to [N,K] (transposed unless b_trans)
    if (quantized_operand(ctx, a_op, WS_QA, WS_SA, x->a, x->a_trans, x->M, x->K, x_format, a_fp8, &q.a, &sa) ||
        quantized_operand(ctx, b_op, WS_QB, WS_SB, x->b, !x->b_trans, x->N, x->K, x_format, b_fp8, &q.b, &sb))
        return -1;
    q.a_trans = 0;
    q.b_trans = 1;
    q.a_format = a_fp8;
    q.b_format = b_fp8;
    q.a_scale = sa;
    q.b_scale = sb;
    return kmatmul_batched(KPATH_FP8, accum, variant, &q, nullptr);
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
            if (cudaEventRecord(e0, kstream()) != cudaSuccess) rc = kernels_fail("%s: cudaEventRecord failed", ctx);
            if (rc == 0) rc = lt_run(ctx, p, g, a);
            if (rc == 0 && cudaEventRecord(e1, kstream()) != cudaSuccess)
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
// The models themselves, with their sources, are in precision/dot_bound.h and
// kernels/check/check_matmul.c; here only which one each GEMM claims.
extern "C" double kmatmul_error_factor(kpath path, kmatmul_accum accum, int64_t K, int *truncating)
{
    prec_dot_model m = {PREC_DOT_TENSOR_CORE, PREC_FP32, K, 0.0, 0};
    if (accum == KMATMUL_ACC_BLOCK_SCALED) {
        m.kind = PREC_DOT_FP8_GROUPS;
        m.interval = KMATMUL_FP8_BLOCK;
    } else if (path == KPATH_FP8) {
        m.kind = PREC_DOT_FP8;
        m.interval = accum == KMATMUL_ACC_FAST ? 0 : 128; // assumed promotion interval of cuBLASLt's default mode
    } else if (path == KPATH_FP32 && accum == KMATMUL_ACC_DEFAULT) {
        m.kind = PREC_DOT_ROUNDED; // SIMT FFMA, sequential over K
    } else if (path == KPATH_FP32) {
        m.u_in = 0x1p-10; // tf32: each input truncated to 11 bits
    }
    return prec_dot_factor(&m, K, truncating);
}

extern "C" size_t kmatmul_workspace_bytes(void)
{
    size_t total = 0;
    for (int s = 0; s < WS_COUNT; s++) total += ws_size[s];
    return total;
}

extern "C" void kmatmul_release(void)
{
    kernels_note_free(); // a graph that read these workspaces must not be replayed
    for (auto &kv : lt_plans) {
        cublasLtMatmulDescDestroy(kv.second.desc);
        cublasLtMatrixLayoutDestroy(kv.second.la);
        cublasLtMatrixLayoutDestroy(kv.second.lb);
        cublasLtMatrixLayoutDestroy(kv.second.lc);
    }
    lt_plans.clear();
    for (auto &kv : lt_batched_plans) lt_batched_plan_destroy(kv.second);
    lt_batched_plans.clear();
    for (int s = 0; s < WS_COUNT; s++) {
        if (ws_ptr[s]) cudaFree(ws_ptr[s]);
        ws_ptr[s] = nullptr;
        ws_size[s] = 0;
    }
    amax_capacity = 0;
    amax_parity = 0;
}
