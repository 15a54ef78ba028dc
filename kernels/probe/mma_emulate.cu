// kernels/probe/mma_emulate.cu — the modelled matrix unit on CUDA cores: one thread
// per output element runs the chain of mma_block() calls over K (integer
// arithmetic from precision/mma.h, shared with the CPU model), so the result
// is bit-identical to the model and, where the model is validated, to the
// hardware it models.
#include <cuda_runtime.h>

#include <cstring>

#include "kernels/probe/mma_emulate.h"

namespace {

// D[m][n]: one thread.  The block loop reads A's row m and B's row n straight
// from global memory (rows are reused across threads through L1/L2).
__global__ void emulate_gemm(mma_arith p, int M, int N, int K, const uint8_t *A, const uint8_t *B, const float *C,
                             float *D)
{
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    const int m = blockIdx.y;
    if (n >= N || m >= M) return;
    const int sz = mma_elem_bytes(p.in);
    uint32_t c = C ? __float_as_uint(C[(long)m * N + n]) : 0u;
    c = mma_dot(&p, K, A + (long)m * K * sz, B + (long)n * K * sz, c);
    D[(long)m * N + n] = __uint_as_float(c);
}

// fp8 scales multiply the fp32 result: d *= (*sa) * (*sb), fp32 RNE.
__global__ void apply_scales(long count, float *D, const float *sa, const float *sb)
{
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    const float s = (sa ? *sa : 1.0f) * (sb ? *sb : 1.0f);
    D[i] = __fmul_rn(D[i], s);
}

}  // namespace

extern "C" int mma_emulate_gemm(const mma_arith *p, int M, int N, int K, const void *A, const void *B,
                                const float *C, float *D)
{
    if (M <= 0 || N <= 0 || K <= 0) return kernels_fail("mma_emulate_gemm: M=%d N=%d K=%d must be > 0", M, N, K);
    if (p->out != PREC_FP32)
        return kernels_fail("mma_emulate_gemm: output %s, only fp32 outputs are emulated", prec_format_name(p->out));
    if (M > 65535) return kernels_fail("mma_emulate_gemm: M=%d above the grid limit 65535", M);
    const dim3 block(128), grid((N + 127) / 128, M);
    emulate_gemm<<<grid, block>>>(*p, M, N, K, static_cast<const uint8_t *>(A), static_cast<const uint8_t *>(B), C,
                                  D);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
        return kernels_fail("mma_emulate_gemm %s M=%d N=%d K=%d: %s", prec_format_name(p->in), M, N, K,
                            cudaGetErrorString(e));
    return 0;
}

extern "C" int mma_emulate_matmul(const char *gen, const ktensor *a, const ktensor *b, ktensor *d)
{
    if (a->ndim != 2 || b->ndim != 2 || d->ndim != 2)
        return kernels_fail("mma_emulate_matmul: a, b, d must be 2-D (got %d, %d, %d dims)", a->ndim, b->ndim,
                            d->ndim);
    const long M = a->shape[0], K = a->shape[1], N = b->shape[0];
    if (b->shape[1] != K || d->shape[0] != M || d->shape[1] != N)
        return kernels_fail("mma_emulate_matmul: shapes a [%ld][%ld], b [%lld][%lld], d [%lld][%lld] do not give "
                            "d = a b^T",
                            M, K, (long long)b->shape[0], (long long)b->shape[1], (long long)d->shape[0],
                            (long long)d->shape[1]);
    if (a->format != b->format)
        return kernels_fail("mma_emulate_matmul: a is %s but b is %s", prec_format_name(a->format),
                            prec_format_name(b->format));
    if (d->format != PREC_FP32)
        return kernels_fail("mma_emulate_matmul: d must be fp32, not %s", prec_format_name(d->format));
    static const char *const routes[] = {"mma.sync", "wgmma", "tcgen05"};
    const mma_model *m = NULL;
    for (int r = 0; r < 3 && !m; r++) m = mma_model_find(gen, routes[r], a->format, PREC_FP32);
    if (!m)
        return kernels_fail("mma_emulate_matmul: no %s model for %s inputs (generations: %s)", gen,
                            prec_format_name(a->format), mma_gen_names());
    if (mma_emulate_gemm(&m->arith, (int)M, (int)N, (int)K, a->data, b->data, NULL, (float *)d->data)) return -1;
    const bool fp8 = a->format == PREC_E4M3 || a->format == PREC_E5M2;
    if (fp8 && (a->scale || b->scale)) {
        const long count = M * N;
        apply_scales<<<(unsigned)((count + 255) / 256), 256>>>(count, (float *)d->data, a->scale, b->scale);
        cudaError_t e = cudaGetLastError();
        if (e == cudaSuccess) e = cudaDeviceSynchronize();
        if (e != cudaSuccess) return kernels_fail("mma_emulate_matmul scales: %s", cudaGetErrorString(e));
    }
    return 0;
}
