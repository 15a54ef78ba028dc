// kernels/probe/probe_gpu.cu — host side of the GPU probes: which instructions this
// build has, tiles in and out of device memory, dot products packed on tile
// diagonals, the fingerprint header, cuBLASLt fp8 GEMMs and the GEMM study of
// the A100 path on an H100.  Every CUDA/cuBLAS call is checked.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/mma_emulate.h"
#include "kernels/probe/probe_gpu.h"
#include "precision/rng.h"

namespace {

#define CK(call, what)                                                                             \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) return kernels_fail("%s: %s", (what), cudaGetErrorString(e_));      \
    } while (0)
#define CKL(call, what)                                                                            \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) return kernels_fail("%s: cublas status %d", (what), (int)s_); \
    } while (0)

// Device buffers freed on every exit path.
struct dbuf {
    void *p = nullptr;
    ~dbuf() { if (p) cudaFree(p); }
    int alloc(size_t bytes, const char *what)
    {
        cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
        if (e != cudaSuccess) {
            p = nullptr;
            return kernels_fail("cudaMalloc %zu bytes for %s: %s", bytes, what, cudaGetErrorString(e));
        }
        return 0;
    }
};

int device_cc()
{
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return 0;
    if (cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) return 0;
    return 10 * major + minor;
}

int out_bytes(prec_format out) { return out == PREC_FP16 ? 2 : 4; }

}  // namespace

extern "C" int probe_gpu_shape(const char *route, prec_format in, prec_format out, int *m)
{
    const bool o16 = out == PREC_FP16;
    if (out != PREC_FP32 && !o16) return 0;
    const bool fp8 = in == PREC_E4M3 || in == PREC_E5M2;
    if (strcmp(route, "mma.sync") == 0) {
        *m = 16;
        if (in == PREC_FP16) return 16;
        if ((in == PREC_BF16) && !o16) return 16;
        if (in == PREC_TF32 && !o16) return 8;
        if (fp8) return 32;
        return 0;
    }
    if (strcmp(route, "wgmma") == 0) {
        *m = 64;
        if (in == PREC_FP16) return 16;
        if ((in == PREC_BF16) && !o16) return 16;
        if (in == PREC_TF32 && !o16) return 8;
        if (fp8) return 32;
    }
    return 0;
}

extern "C" int probe_gpu_targets(probe_target *out, int max)
{
    static const struct { const char *route; prec_format in, out; bool hopper; } all[] = {
        {"mma.sync", PREC_FP16, PREC_FP32, false}, {"mma.sync", PREC_FP16, PREC_FP16, false},
        {"mma.sync", PREC_BF16, PREC_FP32, false}, {"mma.sync", PREC_TF32, PREC_FP32, false},
        {"mma.sync", PREC_E4M3, PREC_FP32, true},  {"mma.sync", PREC_E4M3, PREC_FP16, true},
        {"mma.sync", PREC_E5M2, PREC_FP32, true},  {"mma.sync", PREC_E5M2, PREC_FP16, true},
        {"wgmma", PREC_FP16, PREC_FP32, true},     {"wgmma", PREC_FP16, PREC_FP16, true},
        {"wgmma", PREC_BF16, PREC_FP32, true},     {"wgmma", PREC_TF32, PREC_FP32, true},
        {"wgmma", PREC_E4M3, PREC_FP32, true},     {"wgmma", PREC_E4M3, PREC_FP16, true},
        {"wgmma", PREC_E5M2, PREC_FP32, true},     {"wgmma", PREC_E5M2, PREC_FP16, true},
    };
    const int cc = device_cc();
    int n = 0;
    for (const auto &e : all) {
        // the sm_90a objects run on compute capability 9.0 only
        if (n >= max || (e.hopper && cc != 90) || cc < 80) continue;
        int m;
        out[n].route = e.route;
        out[n].in = e.in;
        out[n].out = e.out;
        out[n].k = probe_gpu_shape(e.route, e.in, e.out, &m);
        n++;
    }
    return n;
}

extern "C" int probe_gpu_tiles(const char *route, prec_format in, prec_format out, int tiles, const void *a,
                               const void *b, const void *c, void *d)
{
    int m = 0;
    const int K = probe_gpu_shape(route, in, out, &m);
    if (!K)
        return kernels_fail("probe: no %s instruction for %s -> %s", route, prec_format_name(in),
                            prec_format_name(out));
    const size_t esz = (size_t)mma_elem_bytes(in), osz = (size_t)out_bytes(out);
    const size_t na = (size_t)tiles * m * K * esz, nb = (size_t)tiles * 8 * K * esz, nc = (size_t)tiles * m * 8 * osz;
    dbuf dA, dB, dC, dD;
    if (dA.alloc(na, "probe A") || dB.alloc(nb, "probe B") || dC.alloc(nc, "probe C") || dD.alloc(nc, "probe D"))
        return -1;
    CK(cudaMemcpy(dA.p, a, na, cudaMemcpyHostToDevice), "probe: copy A");
    CK(cudaMemcpy(dB.p, b, nb, cudaMemcpyHostToDevice), "probe: copy B");
    CK(cudaMemcpy(dC.p, c, nc, cudaMemcpyHostToDevice), "probe: copy C");
    CK(cudaMemset(dD.p, 0xFF, nc), "probe: poison D");  // NaN everywhere: an unwritten D shows
    const bool fp8 = in == PREC_E4M3 || in == PREC_E5M2;
    int rc;
    if (strcmp(route, "mma.sync") == 0 && !fp8) rc = probe_sm80_tiles(in, out, tiles, dA.p, dB.p, dC.p, dD.p);
    else rc = probe_sm90a_tiles(route, in, out, tiles, dA.p, dB.p, dC.p, dD.p);
    if (rc) return -1;
    CK(cudaMemcpy(d, dD.p, nc, cudaMemcpyDeviceToHost), "probe: copy D back");
    return 0;
}

extern "C" int probe_gpu_run(void *ctx, const probe_target *t, int n, const void *a, const void *b,
                             const uint32_t *c, uint32_t *d, char *err, size_t err_len)
{
    (void)ctx;
    int m = 0;
    const int K = probe_gpu_shape(t->route, t->in, t->out, &m);
    if (K != t->k) {
        snprintf(err, err_len, "probe: %s %s -> %s has K=%d on the GPU, the probe asked for %d", t->route,
                 prec_format_name(t->in), prec_format_name(t->out), K, t->k);
        return -1;
    }
    const int tiles = (n + 7) / 8;
    const size_t esz = (size_t)mma_elem_bytes(t->in), osz = (size_t)out_bytes(t->out);
    std::vector<uint8_t> A((size_t)tiles * m * K * esz, 0), B((size_t)tiles * 8 * K * esz, 0);
    std::vector<uint8_t> C((size_t)tiles * m * 8 * osz, 0), D(C.size());
    for (int i = 0; i < n; i++) {
        const int tile = i / 8, p = i % 8;
        memcpy(&A[((size_t)tile * m + p) * K * esz], (const uint8_t *)a + (size_t)i * K * esz, K * esz);
        memcpy(&B[((size_t)tile * 8 + p) * K * esz], (const uint8_t *)b + (size_t)i * K * esz, K * esz);
        memcpy(&C[((size_t)tile * m * 8 + p * 8 + p) * osz], &c[i], osz);  // little-endian low bytes
    }
    if (probe_gpu_tiles(t->route, t->in, t->out, tiles, A.data(), B.data(), C.data(), D.data())) {
        snprintf(err, err_len, "%s", kernels_last_error());
        return -1;
    }
    for (int i = 0; i < n; i++) {
        const int tile = i / 8, p = i % 8;
        uint32_t bits = 0;
        memcpy(&bits, &D[((size_t)tile * m * 8 + p * 8 + p) * osz], osz);
        d[i] = bits;
    }
    return 0;
}

extern "C" int probe_gpu_header(char *buf, size_t len)
{
    int dev = 0, drv = 0, rt = 0;
    cudaDeviceProp prop;
    CK(cudaGetDevice(&dev), "cudaGetDevice");
    CK(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
    CK(cudaDriverGetVersion(&drv), "cudaDriverGetVersion");
    CK(cudaRuntimeGetVersion(&rt), "cudaRuntimeGetVersion");
    // The kernel module's own version string, when the driver exposes it.
    char module[64] = "unknown";
    FILE *f = fopen("/proc/driver/nvidia/version", "r");
    if (f) {
        char line[256];
        if (fgets(line, sizeof line, f)) {
            // "NVRM version: NVIDIA UNIX ... Kernel Module for x86_64  580.159.04  Release Build ..."
            const char *k = strstr(line, "Kernel Module");
            for (const char *s = k; s && *s; s++)
                if (*s >= '0' && *s <= '9' && s[-1] == ' ') {
                    if (sscanf(s, "%63s", module) != 1) snprintf(module, sizeof module, "?");
                    break;
                }
        }
        fclose(f);
    }
    char name[256];
    size_t j = 0;
    for (const char *s = prop.name; *s && j + 2 < sizeof name; s++) {
        if (*s == '"' || *s == '\\') name[j++] = '\\';
        name[j++] = *s;
    }
    name[j] = '\0';
    snprintf(buf, len,
             "\"source\":\"gpu\",\"device\":\"%s\",\"cc\":\"%d.%d\",\"driver\":\"%s\",\"driver_api\":%d,"
             "\"runtime\":%d,\"cublaslt\":%zu",
             name, prop.major, prop.minor, module, drv, rt, cublasLtGetVersion());
    return 0;
}

// ---- cuBLASLt fp8 ----------------------------------------------------------

namespace {

struct lt_state {
    cublasLtHandle_t h = nullptr;
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    ~lt_state()
    {
        if (pref) cublasLtMatmulPreferenceDestroy(pref);
        if (ld) cublasLtMatrixLayoutDestroy(ld);
        if (lb) cublasLtMatrixLayoutDestroy(lb);
        if (la) cublasLtMatrixLayoutDestroy(la);
        if (op) cublasLtMatmulDescDestroy(op);
        if (h) cublasLtDestroy(h);
    }
};

// D (column-major M x N, i.e. dD[n*M + m]) = A^T B with A stored K x M and B
// K x N column-major: exactly A [M][K] and B [N][K] row-major.  fp8 needs
// this "TN" form.
int lt_fp8_device(int fast_accum, int M, int N, int K, const void *dA, const void *dB, float *dD, float *ms)
{
    lt_state s;
    CKL(cublasLtCreate(&s.h), "cublasLtCreate");
    CKL(cublasLtMatmulDescCreate(&s.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CKL(cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "set TRANSA");
    CKL(cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "set TRANSB");
    const int8_t fast = (int8_t)fast_accum;
    CKL(cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast), "set FAST_ACCUM");
    CKL(cublasLtMatrixLayoutCreate(&s.la, CUDA_R_8F_E4M3, K, M, K), "layout A");
    CKL(cublasLtMatrixLayoutCreate(&s.lb, CUDA_R_8F_E4M3, K, N, K), "layout B");
    CKL(cublasLtMatrixLayoutCreate(&s.ld, CUDA_R_32F, M, N, M), "layout D");
    const size_t ws_bytes = 32u << 20;
    dbuf ws;
    if (ws.alloc(ws_bytes, "cuBLASLt workspace")) return -1;
    CKL(cublasLtMatmulPreferenceCreate(&s.pref), "preference");
    CKL(cublasLtMatmulPreferenceSetAttribute(s.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                             sizeof ws_bytes),
        "preference workspace");
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    CKL(cublasLtMatmulAlgoGetHeuristic(s.h, s.op, s.la, s.lb, s.ld, s.ld, s.pref, 1, &heur, &found),
        "cublasLtMatmulAlgoGetHeuristic");
    if (!found) return kernels_fail("cuBLASLt: no fp8 algorithm for M=%d N=%d K=%d", M, N, K);
    const float alpha = 1.0f, beta = 0.0f;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0), "event");
    CK(cudaEventCreate(&e1), "event");
    CK(cudaEventRecord(e0), "event record");
    cublasStatus_t st = cublasLtMatmul(s.h, s.op, &alpha, dA, s.la, dB, s.lb, &beta, dD, s.ld, dD, s.ld, &heur.algo,
                                       ws.p, ws_bytes, 0);
    cudaEventRecord(e1);
    cudaError_t se = cudaEventSynchronize(e1);
    float t = 0.0f;
    cudaEventElapsedTime(&t, e0, e1);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (st != CUBLAS_STATUS_SUCCESS)
        return kernels_fail("cublasLtMatmul fp8 M=%d N=%d K=%d fast_accum=%d: status %d", M, N, K, fast_accum, (int)st);
    CK(se, "cublasLtMatmul fp8 synchronize");
    if (ms) *ms = t;
    return 0;
}

}  // namespace

extern "C" int probe_cublaslt_fp8(int fast_accum, int M, int N, int K, const uint8_t *a, const uint8_t *b, float *d)
{
    if (M % 16 || N % 16 || K % 16) return kernels_fail("cuBLASLt fp8: M=%d N=%d K=%d must be multiples of 16", M, N, K);
    dbuf dA, dB, dD;
    if (dA.alloc((size_t)M * K, "A") || dB.alloc((size_t)N * K, "B") || dD.alloc((size_t)M * N * 4, "D")) return -1;
    CK(cudaMemcpy(dA.p, a, (size_t)M * K, cudaMemcpyHostToDevice), "copy A");
    CK(cudaMemcpy(dB.p, b, (size_t)N * K, cudaMemcpyHostToDevice), "copy B");
    CK(cudaMemset(dD.p, 0xFF, (size_t)M * N * 4), "poison D");
    if (lt_fp8_device(fast_accum, M, N, K, dA.p, dB.p, (float *)dD.p, nullptr)) return -1;
    std::vector<float> cm((size_t)M * N);
    CK(cudaMemcpy(cm.data(), dD.p, cm.size() * 4, cudaMemcpyDeviceToHost), "copy D back");
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) d[(size_t)m * N + n] = cm[(size_t)n * M + m];
    return 0;
}

// ---- the GEMM study ----------------------------------------------------------

namespace {

// fp64 reference: exact products of the decoded inputs, summed with fma.
__global__ void ref_gemm(prec_format in, int M, int N, int K, const uint8_t *A, const uint8_t *B, double *D)
{
    const int n = blockIdx.x * blockDim.x + threadIdx.x, m = blockIdx.y;
    if (n >= N) return;
    const int sz = mma_elem_bytes(in);
    double s = 0.0;
    for (int k = 0; k < K; k++) {
        const mma_num x = mma_decode(in, mma_load_bits(in, A, (long)m * K + k), false);
        const mma_num y = mma_decode(in, mma_load_bits(in, B, (long)n * K + k), false);
        const double vx = ldexp((double)x.mant, x.exp - x.fb) * (x.neg ? -1.0 : 1.0);
        const double vy = ldexp((double)y.mant, y.exp - y.fb) * (y.neg ? -1.0 : 1.0);
        s = fma(vx, vy, s);
    }
    (void)sz;
    D[(long)m * N + n] = s;
}

double rel_fro(const std::vector<float> &x, const std::vector<double> &ref)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < ref.size(); i++) {
        const double e = (double)x[i] - ref[i];
        num += e * e;
        den += ref[i] * ref[i];
    }
    return sqrt(num / den);
}

double rel_fro2(const std::vector<float> &x, const std::vector<float> &y, const std::vector<double> &ref)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < ref.size(); i++) {
        const double e = (double)x[i] - (double)y[i];
        num += e * e;
        den += ref[i] * ref[i];
    }
    return sqrt(num / den);
}

int download(std::vector<float> &h, const void *d, const char *what)
{
    CK(cudaMemcpy(h.data(), d, h.size() * sizeof(float), cudaMemcpyDeviceToHost), what);
    return 0;
}

}  // namespace

extern "C" int probe_gemm_study(prec_format in, int M, int N, int K, uint64_t seed, probe_gemm_result *r)
{
    memset(r, 0, sizeof *r);
    r->in = in;
    r->M = M;
    r->N = N;
    r->K = K;
    r->mma_sync_mismatch = -1;
    const bool fp8 = in == PREC_E4M3 || in == PREC_E5M2;
    const mma_model *a100 = mma_model_find("a100", "mma.sync", in, PREC_FP32);
    const mma_model *h100 = mma_model_find("h100", fp8 ? "wgmma" : "mma.sync", in, PREC_FP32);
    if (!a100 || !h100) return kernels_fail("gemm study: no a100/h100 model for %s", prec_format_name(in));
    const size_t esz = (size_t)mma_elem_bytes(in);
    std::vector<uint8_t> A((size_t)M * K * esz), B((size_t)N * K * esz);
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    const prec_format round_to = in;
    for (size_t i = 0; i < (size_t)M * K; i++) mma_store(in, A.data(), (long)i, prec_rne(prec_rng_normal(&rng), round_to));
    for (size_t i = 0; i < (size_t)N * K; i++) mma_store(in, B.data(), (long)i, prec_rne(prec_rng_normal(&rng), round_to));
    dbuf dA, dB, dRef, dX;
    if (dA.alloc(A.size(), "A") || dB.alloc(B.size(), "B") || dRef.alloc((size_t)M * N * 8, "fp64 D") ||
        dX.alloc((size_t)M * N * 4, "D"))
        return -1;
    CK(cudaMemcpy(dA.p, A.data(), A.size(), cudaMemcpyHostToDevice), "copy A");
    CK(cudaMemcpy(dB.p, B.data(), B.size(), cudaMemcpyHostToDevice), "copy B");
    std::vector<double> ref((size_t)M * N);
    std::vector<float> xa((size_t)M * N), xh((size_t)M * N), xhm((size_t)M * N);
    ref_gemm<<<dim3((N + 127) / 128, M), 128>>>(in, M, N, K, (const uint8_t *)dA.p, (const uint8_t *)dB.p,
                                               (double *)dRef.p);
    CK(cudaGetLastError(), "fp64 reference gemm launch");
    CK(cudaMemcpy(ref.data(), dRef.p, ref.size() * 8, cudaMemcpyDeviceToHost), "fp64 reference gemm");

    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0), "event");
    CK(cudaEventCreate(&e1), "event");
    float t = 0.0f;
    // A100 model on CUDA cores (warm-up run, then the timed run)
    if (mma_emulate_gemm(&a100->arith, M, N, K, dA.p, dB.p, nullptr, (float *)dX.p)) return -1;
    CK(cudaMemset(dX.p, 0xFF, (size_t)M * N * 4), "poison");
    CK(cudaEventRecord(e0), "event");
    if (mma_emulate_gemm(&a100->arith, M, N, K, dA.p, dB.p, nullptr, (float *)dX.p)) return -1;
    CK(cudaEventRecord(e1), "event");
    CK(cudaEventSynchronize(e1), "event sync");
    CK(cudaEventElapsedTime(&t, e0, e1), "elapsed");
    r->ms_emulate_a100 = t;
    if (download(xa, dX.p, "A100 model D")) return -1;
    // H100 model on CUDA cores
    CK(cudaMemset(dX.p, 0xFF, (size_t)M * N * 4), "poison");
    if (mma_emulate_gemm(&h100->arith, M, N, K, dA.p, dB.p, nullptr, (float *)dX.p)) return -1;
    if (download(xhm, dX.p, "H100 model D")) return -1;
    // The H100 itself
    CK(cudaMemset(dX.p, 0xFF, (size_t)M * N * 4), "poison");
    bool have_h100 = true;
    if (in == PREC_E4M3) {
        snprintf(r->h100_route, sizeof r->h100_route, "cuBLASLt fp8 (no fast accum)");
        float ms = 0.0f;
        if (lt_fp8_device(0, M, N, K, dA.p, dB.p, (float *)dX.p, nullptr)) return -1; // warm-up
        if (lt_fp8_device(0, M, N, K, dA.p, dB.p, (float *)dX.p, &ms)) return -1;
        r->ms_h100 = ms;
        std::vector<float> cm((size_t)M * N);
        if (download(cm, dX.p, "cuBLASLt D")) return -1;
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) xh[(size_t)m * N + n] = cm[(size_t)n * M + m];
    } else if (in == PREC_E5M2) {
        snprintf(r->h100_route, sizeof r->h100_route, "none (cuBLASLt has no e5m2 x e5m2)");
        have_h100 = false;
    } else {
        snprintf(r->h100_route, sizeof r->h100_route, "cuBLAS %s", in == PREC_TF32 ? "TF32 (32F_FAST_TF32)" : "32F");
        cublasHandle_t h;
        CKL(cublasCreate(&h), "cublasCreate");
        const cudaDataType_t ty = in == PREC_FP16 ? CUDA_R_16F : in == PREC_BF16 ? CUDA_R_16BF : CUDA_R_32F;
        const cublasComputeType_t ct = in == PREC_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
        const float alpha = 1.0f, beta = 0.0f;
        cublasStatus_t st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, &alpha, dA.p, ty, K, dB.p, ty, K,
                                         &beta, dX.p, CUDA_R_32F, M, ct, CUBLAS_GEMM_DEFAULT);
        cudaEventRecord(e0);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, &alpha, dA.p, ty, K, dB.p, ty, K, &beta, dX.p,
                              CUDA_R_32F, M, ct, CUBLAS_GEMM_DEFAULT);
        cudaEventRecord(e1);
        cudaError_t se = cudaEventSynchronize(e1);
        cudaEventElapsedTime(&t, e0, e1);
        cublasDestroy(h);
        if (st != CUBLAS_STATUS_SUCCESS) return kernels_fail("cublasGemmEx %s: status %d", prec_format_name(in), (int)st);
        CK(se, "cublasGemmEx sync");
        r->ms_h100 = t;
        std::vector<float> cm((size_t)M * N);
        if (download(cm, dX.p, "cuBLAS D")) return -1;
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) xh[(size_t)m * N + n] = cm[(size_t)n * M + m];
        // mma.sync GEMM on the H100 against the H100 model, element by element
        CK(cudaMemset(dX.p, 0xFF, (size_t)M * N * 4), "poison");
        if (probe_sm80_gemm(in, M, N, K, dA.p, dB.p, (float *)dX.p)) return -1;
        std::vector<float> xs((size_t)M * N);
        if (download(xs, dX.p, "mma.sync gemm D")) return -1;
        long mism = 0;
        for (size_t i = 0; i < xs.size(); i++) mism += memcmp(&xs[i], &xhm[i], 4) != 0;
        r->mma_sync_mismatch = mism;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    r->a100_vs_fp64 = rel_fro(xa, ref);
    r->h100_model_vs_fp64 = rel_fro(xhm, ref);
    r->a100_vs_h100_model = rel_fro2(xa, xhm, ref);
    if (have_h100) {
        r->h100_vs_fp64 = rel_fro(xh, ref);
        r->a100_vs_h100 = rel_fro2(xa, xh, ref);
        long diff = 0;
        for (size_t i = 0; i < xa.size(); i++) diff += memcmp(&xa[i], &xh[i], 4) != 0;
        r->frac_differ_a100_h100 = (double)diff / (double)xa.size();
    } else {
        r->h100_vs_fp64 = r->a100_vs_h100 = r->frac_differ_a100_h100 = NAN;
    }
    return 0;
}
