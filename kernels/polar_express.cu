// kernels/polar_express.cu — Muon's orthogonalisation (polar express / Newton-
// Schulz), wide or tall, fused or split; see polar_express.h.  The GEMMs are
// kmatmul calls; this file adds the Frobenius norm, the normalisation and the
// split variant's a X + T.  Batches of matrices (replicas x blocks) run every
// stage once for all: the GEMMs through kmatmul_batched, the kernels with
// the matrix as blockIdx.y; each matrix gets a single call's bits.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdio>
#include <cstring>

#include "kernels/common/kelem.cuh"
#include "kernels/common/klaunch.cuh"
#include "kernels/common/kreduce.cuh"
#include "kernels/matmul.h"
#include "kernels/polar_express.h"
#include "kernels/registry.h"

extern "C" const kvariant kpe_variants[KPE_NVARIANTS] = {
    {"wide_fused", "A = X X^T (rows x rows), X' = B X + a X in one GEMM (beta = a): one rounding of X'"},
    {"wide_split", "A = X X^T, T = B X rounded, then X' = a X + T elementwise: two roundings"},
    {"tall_fused", "A = X^T X (cols x cols), X' = X B + a X in one GEMM"},
    {"tall_split", "A = X^T X, T = X B rounded, then X' = a X + T elementwise"},
    {"small_fused", "the smaller Gram matrix (wide_fused when rows <= cols, else tall_fused), as modded-nanogpt"},
    {"small_split", "the smaller Gram matrix (wide_split when rows <= cols, else tall_split)"},
};

// ---- registry entry (kernels/registry.h): name, paths, fp8 note, variants ----

#define PE_FP8_NOTE "no fp8 path: an fp8 iterate keeps 3 mantissa bits of a matrix whose singular values the " \
                    "iteration drives toward 1"

extern "C" const kop kop_polar_express = {
    "polar_express",
    "Muon's orthogonalisation: G / (1.02 |G|_F + 1e-6), then 5 steps X <- aX + (bA + cA^2)X with the Polar "
    "Express coefficients (Amsel et al. 2025)",
    KPATHS_NO_FP8, PE_FP8_NOTE, kpe_variants, KPE_NVARIANTS,
};
extern "C" const kop kop_muon_newton_schulz = {
    "muon_newton_schulz",
    "the same iteration with Muon's classic quintic (3.4445, -4.7750, 2.0315) for all 5 steps",
    KPATHS_NO_FP8, PE_FP8_NOTE, kpe_variants, KPE_NVARIANTS,
};

static constexpr int NORM_THREADS = 256, NORM_MAX_BLOCKS = 256;

static int norm_blocks(int64_t n)
{
    int64_t b = (n + NORM_THREADS - 1) / NORM_THREADS;
    return (int)(b < NORM_MAX_BLOCKS ? b : NORM_MAX_BLOCKS);
}

extern "C" int64_t kpe_norm_depth(int64_t n)
{
    // per thread: its strided fmas from zero (each may round), then the block
    // tree (8 levels) and the second stage's tree (8 levels)
    int64_t stride = (int64_t)norm_blocks(n) * NORM_THREADS;
    return (n + stride - 1) / stride + 16;
}

// Stage 1: partial sums of squares, one per block, fixed shape.  Matrix
// blockIdx.y at x + y * stride; its partials at partials + y * NORM_MAX_BLOCKS.
template <class T> __global__ void sumsq_kernel(const T *x, int64_t n, int64_t stride, float *partials, int bug)
{
    __shared__ float scratch[32];
    x += blockIdx.y * stride;
    partials += blockIdx.y * (int64_t)NORM_MAX_BLOCKS;
    const int64_t last = bug == KBUG_DROP_TERM ? n - 1 : n;
    float acc = 0.0f;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < last; i += (int64_t)gridDim.x * blockDim.x) {
        float v = kto_float(x[i]);
        acc = __fmaf_rn(v, v, acc);
    }
    acc = kblock_sum(acc, scratch);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// Stage 2: one block per matrix adds its partials (thread t holds partial t)
// and forms the denominator 1.02 sqrt(sum) + 1e-6.
__global__ void norm_denominator_kernel(const float *partials, int n_partials, float *denom)
{
    __shared__ float scratch[32];
    partials += blockIdx.x * (int64_t)NORM_MAX_BLOCKS;
    denom += blockIdx.x;
    float acc = threadIdx.x < n_partials ? partials[threadIdx.x] : 0.0f;
    acc = kblock_sum(acc, scratch);
    if (threadIdx.x == 0) *denom = __fadd_rn(__fmul_rn(__fsqrt_rn(acc), KPE_NORM_SAFETY), KPE_NORM_EPS);
}

template <class T>
__global__ void divide_kernel(const T *g, int64_t n, int64_t stride, const float *denom, T *x, int bug)
{
    g += blockIdx.y * stride;
    x += blockIdx.y * stride;
    const float d = denom[blockIdx.y];
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = kfrom_float<T>(__fdiv_rn(kto_float(g[i]), d), bug);
}

// The split variant's second half: X' = a X + T (matrix blockIdx.y at its
// stride in each).
template <class T>
__global__ void axpy_kernel(float a, const T *x, int64_t x_stride, const T *t, int64_t t_stride, int64_t n, T *out,
                            int64_t out_stride, int bug)
{
    x += blockIdx.y * x_stride;
    t += blockIdx.y * t_stride;
    out += blockIdx.y * out_stride;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = kfrom_float<T>(__fadd_rn(__fmul_rn(a, kto_float(x[i])), kto_float(t[i])), bug);
}

// ---- workspaces ----------------------------------------------------------------

enum { PE_PARTIALS, PE_DENOM, PE_A, PE_B, PE_T, PE_X, PE_COUNT };
static void *pe_ws[PE_COUNT];
static size_t pe_ws_size[PE_COUNT];

static int pe_get(const char *ctx, int slot, size_t bytes, void **out)
{
    if (kworkspace_grow(ctx, &pe_ws[slot], &pe_ws_size[slot], bytes)) return -1;
    *out = pe_ws[slot];
    return 0;
}

extern "C" void kpolar_express_release(void)
{
    kernels_note_free(); // a graph that read these workspaces must not be replayed
    for (int s = 0; s < PE_COUNT; s++) {
        if (pe_ws[s]) cudaFree(pe_ws[s]);
        pe_ws[s] = nullptr;
        pe_ws_size[s] = 0;
    }
}

static int check_path(const char *ctx, kpath path)
{
    if (path != KPATH_FP32 && path != KPATH_BF16 && path != KPATH_FP16)
        return kernels_fail("%s: paths fp32, bf16, fp16 (an fp8 iterate would keep 3 mantissa bits of an "
                            "orthogonal matrix)", ctx);
    return 0;
}

static size_t elem_bytes(kpath path) { return path == KPATH_FP32 ? 4 : 2; }

// Elements between matrices in the internal workspaces: n rounded up to 256
// bytes, so every matrix keeps a fresh allocation's alignment (and its GEMMs
// the plan a single call gets).
static int64_t padded(int64_t n, kpath path)
{
    const int64_t per = 256 / (int64_t)elem_bytes(path);
    return (n + per - 1) / per * per;
}

static int check_batch(const char *ctx, int64_t count, int64_t stride, int64_t n)
{
    if (count < 1 || count > 65535) return kernels_fail("%s: %lld matrices (1 to 65535)", ctx, (long long)count);
    if (count > 1 && stride < n)
        return kernels_fail("%s: matrix stride %lld below rows x cols = %lld", ctx, (long long)stride, (long long)n);
    return 0;
}

static int normalize_batched(const char *ctx, kpath path, int64_t count, int64_t rows, int64_t cols, int64_t stride,
                             const void *G, void *X0)
{
    const int64_t n = rows * cols;
    const int nb = norm_blocks(n), bug = (int)kernels_planted_bug();
    void *partials, *denom;
    if (pe_get(ctx, PE_PARTIALS, (size_t)count * NORM_MAX_BLOCKS * sizeof(float), &partials) ||
        pe_get(ctx, PE_DENOM, (size_t)count * sizeof(float), &denom))
        return -1;
    const int64_t blocks = (n + 255) / 256 < 65536 ? (n + 255) / 256 : 65536;
    dim3 sgrid((unsigned)nb, (unsigned)count), grid((unsigned)blocks, (unsigned)count);
    cudaStream_t st = kstream();
    switch (path) {
    case KPATH_FP32:
        sumsq_kernel<float><<<sgrid, NORM_THREADS, 0, st>>>((const float *)G, n, stride, (float *)partials, bug);
        break;
    case KPATH_BF16:
        sumsq_kernel<__nv_bfloat16><<<sgrid, NORM_THREADS, 0, st>>>((const __nv_bfloat16 *)G, n, stride,
                                                                    (float *)partials, bug);
        break;
    default:
        sumsq_kernel<__half><<<sgrid, NORM_THREADS, 0, st>>>((const __half *)G, n, stride, (float *)partials, bug);
        break;
    }
    if (klaunched(ctx, "sumsq_kernel")) return -1;
    norm_denominator_kernel<<<(unsigned)count, NORM_THREADS, 0, st>>>((const float *)partials, nb, (float *)denom);
    if (klaunched(ctx, "norm_denominator_kernel")) return -1;
    switch (path) {
    case KPATH_FP32:
        divide_kernel<float><<<grid, 256, 0, st>>>((const float *)G, n, stride, (const float *)denom, (float *)X0, bug);
        break;
    case KPATH_BF16:
        divide_kernel<__nv_bfloat16><<<grid, 256, 0, st>>>((const __nv_bfloat16 *)G, n, stride, (const float *)denom,
                                                           (__nv_bfloat16 *)X0, bug);
        break;
    default:
        divide_kernel<__half><<<grid, 256, 0, st>>>((const __half *)G, n, stride, (const float *)denom, (__half *)X0,
                                                    bug);
        break;
    }
    return klaunched(ctx, "divide_kernel");
}

extern "C" int kpolar_express_normalize(kpath path, int64_t rows, int64_t cols, const void *G, void *X0)
{
    char ctx[160];
    snprintf(ctx, sizeof ctx, "polar_express normalize %s rows=%lld cols=%lld", kpath_name(path), (long long)rows,
             (long long)cols);
    if (check_path(ctx, path)) return -1;
    if (rows <= 0 || cols <= 0) return kernels_fail("%s: rows and cols must be positive", ctx);
    if (!G || !X0) return kernels_fail("%s: null G or X0", ctx);
    return normalize_batched(ctx, path, 1, rows, cols, rows * cols, G, X0);
}

// One step for count matrices: X at x_stride, Xn at xn_stride (elements).
static int step_batched(const char *ctx, kpath path, int variant, int64_t count, int64_t rows, int64_t cols, float a,
                        float b, float c, const void *X, int64_t x_stride, void *Xn, int64_t xn_stride)
{
    const int wide = !kpe_is_tall(variant, rows, cols), fused = kpe_is_fused(variant);
    const int64_t g = wide ? rows : cols; // Gram matrix edge
    const int64_t gs = padded(g * g, path), ts = padded(rows * cols, path);
    const size_t el = elem_bytes(path);
    void *A, *B, *T = nullptr;
    if (pe_get(ctx, PE_A, (size_t)((count - 1) * gs + g * g) * el, &A) ||
        pe_get(ctx, PE_B, (size_t)((count - 1) * gs + g * g) * el, &B))
        return -1;
    if (!fused && pe_get(ctx, PE_T, (size_t)((count - 1) * ts + rows * cols) * el, &T)) return -1;
    // Gram: wide A = X X^T [rows,rows] (K = cols); tall A = X^T X [cols,cols] (K = rows)
    kmatmul_args gram = {g, g, wide ? cols : rows, wide ? 0 : 1, wide ? 1 : 0, X, X, A, nullptr, 1.0f, 0.0f,
                         nullptr, 0, PREC_FP32, PREC_FP32, nullptr, nullptr, 0};
    kmatmul_batch gram_b = {count, x_stride, x_stride, 0, gs, 0, 0, 0};
    if (kmatmul_batched(path, KMATMUL_ACC_DEFAULT, KMATMUL_FUSED, &gram, &gram_b)) return -1;
    // B = c A A + b A  [g,g]
    kmatmul_args poly = {g, g, g, 0, 0, A, A, B, A, c, b, nullptr, 0, PREC_FP32, PREC_FP32, nullptr, nullptr, 0};
    kmatmul_batch poly_b = {count, gs, gs, gs, gs, 0, 0, 0};
    if (kmatmul_batched(path, KMATMUL_ACC_DEFAULT, KMATMUL_FUSED, &poly, &poly_b)) return -1;
    // wide: B X [rows,cols] (K = rows); tall: X B [rows,cols] (K = cols)
    kmatmul_args last = {rows, cols, g, 0, 0, wide ? B : X, wide ? X : B, fused ? Xn : T,
                         fused ? X : nullptr, 1.0f, fused ? a : 0.0f, nullptr, 0, PREC_FP32, PREC_FP32,
                         nullptr, nullptr, 0};
    kmatmul_batch last_b = {count, wide ? gs : x_stride, wide ? x_stride : gs, fused ? x_stride : 0,
                            fused ? xn_stride : ts, 0, 0, 0};
    if (kmatmul_batched(path, KMATMUL_ACC_DEFAULT, KMATMUL_FUSED, &last, &last_b)) return -1;
    if (fused) return 0;
    const int64_t n = rows * cols;
    const int bug = (int)kernels_planted_bug();
    dim3 grid((unsigned)((n + 255) / 256 < 65536 ? (n + 255) / 256 : 65536), (unsigned)count);
    cudaStream_t st = kstream();
    switch (path) {
    case KPATH_FP32:
        axpy_kernel<float><<<grid, 256, 0, st>>>(a, (const float *)X, x_stride, (const float *)T, ts, n, (float *)Xn,
                                                 xn_stride, bug);
        break;
    case KPATH_BF16:
        axpy_kernel<__nv_bfloat16><<<grid, 256, 0, st>>>(a, (const __nv_bfloat16 *)X, x_stride,
                                                         (const __nv_bfloat16 *)T, ts, n, (__nv_bfloat16 *)Xn,
                                                         xn_stride, bug);
        break;
    default:
        axpy_kernel<__half><<<grid, 256, 0, st>>>(a, (const __half *)X, x_stride, (const __half *)T, ts, n,
                                                  (__half *)Xn, xn_stride, bug);
        break;
    }
    return klaunched(ctx, "axpy_kernel");
}

extern "C" int kpolar_express_step(kpath path, int variant, int64_t rows, int64_t cols, float a, float b, float c,
                                   const void *X, void *Xn)
{
    char ctx[200];
    snprintf(ctx, sizeof ctx, "polar_express step %s/%s rows=%lld cols=%lld", kpath_name(path),
             variant >= 0 && variant < KPE_NVARIANTS ? kpe_variants[variant].name : "?", (long long)rows,
             (long long)cols);
    if (check_path(ctx, path)) return -1;
    if (variant < 0 || variant >= KPE_NVARIANTS) return kernels_fail("%s: unknown variant %d", ctx, variant);
    if (rows <= 0 || cols <= 0) return kernels_fail("%s: rows and cols must be positive", ctx);
    if (!X || !Xn || X == Xn) return kernels_fail("%s: X and Xn must be distinct non-null buffers", ctx);
    return step_batched(ctx, path, variant, 1, rows, cols, a, b, c, X, rows * cols, Xn, rows * cols);
}

extern "C" int kpolar_express_batched(kpath path, int variant, kpe_coeffs which, int64_t count, int64_t rows,
                                      int64_t cols, int64_t stride, const void *G, void *X)
{
    char ctx[200];
    snprintf(ctx, sizeof ctx, "polar_express %s rows=%lld cols=%lld matrices=%lld", kpath_name(path),
             (long long)rows, (long long)cols, (long long)count);
    if ((unsigned)which >= KPE_NCOEFFS) return kernels_fail("%s: unknown coefficient set %d", ctx, (int)which);
    if (check_path(ctx, path)) return -1;
    if (variant < 0 || variant >= KPE_NVARIANTS) return kernels_fail("%s: unknown variant %d", ctx, variant);
    if (rows <= 0 || cols <= 0) return kernels_fail("%s: rows and cols must be positive", ctx);
    if (!G || !X) return kernels_fail("%s: null G or X", ctx);
    const int64_t n = rows * cols;
    if (check_batch(ctx, count, stride, n)) return -1;
    if (count == 1) stride = n;
    float abc[KPE_STEPS][3];
    kpe_coefficients(which, abc);
    const int64_t ws = padded(n, path); // the ping-pong buffer's matrix stride
    const size_t el = elem_bytes(path);
    void *W;
    if (pe_get(ctx, PE_X, (size_t)((count - 1) * ws + n) * el, &W)) return -1;
    if (normalize_batched(ctx, path, count, rows, cols, stride, G, X)) return -1;
    void *cur = X, *next = W;
    int64_t cur_stride = stride, next_stride = ws;
    for (int s = 0; s < KPE_STEPS; s++) {
        if (step_batched(ctx, path, variant, count, rows, cols, abc[s][0], abc[s][1], abc[s][2], cur, cur_stride,
                         next, next_stride))
            return -1;
        void *t = cur;
        cur = next;
        next = t;
        int64_t ts = cur_stride;
        cur_stride = next_stride;
        next_stride = ts;
    }
    if (cur != X) {
        cudaError_t e = cudaMemcpy2DAsync(X, (size_t)stride * el, cur, (size_t)cur_stride * el, (size_t)n * el,
                                          (size_t)count, cudaMemcpyDeviceToDevice, kstream());
        if (e != cudaSuccess) return kernels_fail("%s: cudaMemcpy2DAsync failed: %s", ctx, cudaGetErrorString(e));
    }
    return 0;
}

extern "C" int kpolar_express(kpath path, int variant, kpe_coeffs which, int64_t rows, int64_t cols, const void *G,
                              void *X)
{
    return kpolar_express_batched(path, variant, which, 1, rows, cols, rows * cols, G, X);
}
