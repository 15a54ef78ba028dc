// kernels/probe/probe_sm80.cu — mma.sync probes, the instruction A100 code issues.
//
// Built for sm_80 with its PTX kept (Makefile rule for *_sm80.cu), so on an
// H100 the driver JIT-compiles this PTX: the tensor-core arithmetic measured
// here is that of the H100 running A100 code.  fp8 mma.sync needs sm_89 and
// lives in probe_sm90a.cu.
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16 / m16n8k8"),
// g = lane / 4, t = lane % 4:
//   m16n8k16 f16/bf16 A: reg r holds row g + 8*(r%2), cols 2t + 8*(r/2) + {0,1}
//                     B: reg r holds k = 2t + 8r + {0,1}, n = g
//   m16n8k8 tf32      A: reg r holds row g + 8*(r%2), col t + 4*(r/2)
//                     B: reg r holds k = t + 4r, n = g
//   C/D f32: reg r holds row g + 8*(r/2), col 2t + r%2;  f16: reg r holds row
//   g + 8r, cols 2t, 2t+1.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/klaunch.cuh"
#include "kernels/kernels.h"
#include "kernels/probe/probe_gpu.h"

namespace {

__device__ __forceinline__ uint32_t ld32(const void *base, long byte_off)
{
    return *reinterpret_cast<const uint32_t *>(static_cast<const uint8_t *>(base) + byte_off);
}

// One m16n8k16 (fp16 or bf16 in) or m16n8k8 (tf32) instruction on registers
// loaded from A [16][K] (lda elements per row) and B [8][K] (ldb), element
// size esz bytes, column offset k0.
template <int IN>  // 0 fp16, 1 bf16, 2 tf32
__device__ __forceinline__ void mma_f32(float d[4], const void *A, long lda, const void *B, long ldb, int k0)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    if constexpr (IN == 2) {
        const uint32_t a0 = ld32(A, 4 * ((long)g * lda + k0 + t)), a1 = ld32(A, 4 * ((long)(g + 8) * lda + k0 + t));
        const uint32_t a2 = ld32(A, 4 * ((long)g * lda + k0 + t + 4)),
                       a3 = ld32(A, 4 * ((long)(g + 8) * lda + k0 + t + 4));
        const uint32_t b0 = ld32(B, 4 * ((long)g * ldb + k0 + t)), b1 = ld32(B, 4 * ((long)g * ldb + k0 + t + 4));
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    } else {
        const uint32_t a0 = ld32(A, 2 * ((long)g * lda + k0 + 2 * t)),
                       a1 = ld32(A, 2 * ((long)(g + 8) * lda + k0 + 2 * t));
        const uint32_t a2 = ld32(A, 2 * ((long)g * lda + k0 + 2 * t + 8)),
                       a3 = ld32(A, 2 * ((long)(g + 8) * lda + k0 + 2 * t + 8));
        const uint32_t b0 = ld32(B, 2 * ((long)g * ldb + k0 + 2 * t)),
                       b1 = ld32(B, 2 * ((long)g * ldb + k0 + 2 * t + 8));
        if constexpr (IN == 0)
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                         "{%8,%9}, {%0,%1,%2,%3};"
                         : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        else
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                         "{%8,%9}, {%0,%1,%2,%3};"
                         : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
}

// One tile per warp: A [16][K], B [8][K], C/D [16][8] fp32.
template <int IN>
__global__ void tiles_f32(int tiles, int K, const void *A, const void *B, const float *C, float *D)
{
    const int tile = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (tile >= tiles) return;  // whole warps leave together: tiles align to warps
    const int esz = IN == 2 ? 4 : 2;
    const uint8_t *a = static_cast<const uint8_t *>(A) + (long)tile * 16 * K * esz;
    const uint8_t *b = static_cast<const uint8_t *>(B) + (long)tile * 8 * K * esz;
    const float *c = C + (long)tile * 128;
    float *dd = D + (long)tile * 128;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    float d[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]};
    mma_f32<IN>(d, a, K, b, K, 0);
    dd[g * 8 + 2 * t] = d[0];
    dd[g * 8 + 2 * t + 1] = d[1];
    dd[(g + 8) * 8 + 2 * t] = d[2];
    dd[(g + 8) * 8 + 2 * t + 1] = d[3];
}

// fp16 in, fp16 accumulate: C/D [16][8] halves.
__global__ void tiles_f16f16(int tiles, const void *A, const void *B, const uint16_t *C, uint16_t *D)
{
    const int tile = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (tile >= tiles) return;
    const uint8_t *a = static_cast<const uint8_t *>(A) + (long)tile * 16 * 16 * 2;
    const uint8_t *b = static_cast<const uint8_t *>(B) + (long)tile * 8 * 16 * 2;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const uint32_t a0 = ld32(a, 2 * (g * 16 + 2 * t)), a1 = ld32(a, 2 * ((g + 8) * 16 + 2 * t));
    const uint32_t a2 = ld32(a, 2 * (g * 16 + 2 * t + 8)), a3 = ld32(a, 2 * ((g + 8) * 16 + 2 * t + 8));
    const uint32_t b0 = ld32(b, 2 * (g * 16 + 2 * t)), b1 = ld32(b, 2 * (g * 16 + 2 * t + 8));
    const uint16_t *c = C + (long)tile * 128;
    uint32_t d0 = ld32(c, 2 * (g * 8 + 2 * t)), d1 = ld32(c, 2 * ((g + 8) * 8 + 2 * t));
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%0,%1};"
                 : "+r"(d0), "+r"(d1)
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    uint16_t *dd = D + (long)tile * 128;
    *reinterpret_cast<uint32_t *>(dd + g * 8 + 2 * t) = d0;
    *reinterpret_cast<uint32_t *>(dd + (g + 8) * 8 + 2 * t) = d1;
}

// GEMM: one warp per 16x8 output tile, the K loop chaining instructions in
// K order with the accumulator in registers (what a plain A100 kernel does).
template <int IN>
__global__ void gemm_f32(int M, int N, int K, const void *A, const void *B, float *D)
{
    const int warp = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int tiles_n = N / 8;
    if (warp >= (M / 16) * tiles_n) return;
    const int m0 = (warp / tiles_n) * 16, n0 = (warp % tiles_n) * 8;
    const int esz = IN == 2 ? 4 : 2, kstep = IN == 2 ? 8 : 16;
    const uint8_t *a = static_cast<const uint8_t *>(A) + (long)m0 * K * esz;
    const uint8_t *b = static_cast<const uint8_t *>(B) + (long)n0 * K * esz;
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    for (int k0 = 0; k0 < K; k0 += kstep) mma_f32<IN>(d, a, K, b, K, k0);
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    D[(long)(m0 + g) * N + n0 + 2 * t] = d[0];
    D[(long)(m0 + g) * N + n0 + 2 * t + 1] = d[1];
    D[(long)(m0 + g + 8) * N + n0 + 2 * t] = d[2];
    D[(long)(m0 + g + 8) * N + n0 + 2 * t + 1] = d[3];
}

}  // namespace

extern "C" int probe_sm80_tiles(prec_format in, prec_format out, int tiles, const void *dA, const void *dB,
                                const void *dC, void *dD)
{
    const int warps = 4, blocks = (tiles + warps - 1) / warps;
    if (out == PREC_FP16) {
        if (in != PREC_FP16) return kernels_fail("mma.sync: fp16 accumulation needs fp16 inputs, not %s",
                                                 prec_format_name(in));
        tiles_f16f16<<<blocks, 32 * warps>>>(tiles, dA, dB, static_cast<const uint16_t *>(dC),
                                             static_cast<uint16_t *>(dD));
        return klaunched_synced("mma.sync m16n8k16 f16.f16 tiles");
    }
    const float *c = static_cast<const float *>(dC);
    float *d = static_cast<float *>(dD);
    switch (in) {
    case PREC_FP16: tiles_f32<0><<<blocks, 32 * warps>>>(tiles, 16, dA, dB, c, d); break;
    case PREC_BF16: tiles_f32<1><<<blocks, 32 * warps>>>(tiles, 16, dA, dB, c, d); break;
    case PREC_TF32: tiles_f32<2><<<blocks, 32 * warps>>>(tiles, 8, dA, dB, c, d); break;
    default: return kernels_fail("mma.sync (sm_80 build): no %s instruction", prec_format_name(in));
    }
    return klaunched_synced("mma.sync tiles");
}

extern "C" int probe_sm80_gemm(prec_format in, int M, int N, int K, const void *dA, const void *dB, float *dD)
{
    if (M % 16 || N % 8 || K % 16)
        return kernels_fail("mma.sync gemm: M=%d N=%d K=%d must be multiples of 16, 8, 16", M, N, K);
    const int warps = 4, tiles = (M / 16) * (N / 8), blocks = (tiles + warps - 1) / warps;
    switch (in) {
    case PREC_FP16: gemm_f32<0><<<blocks, 32 * warps>>>(M, N, K, dA, dB, dD); break;
    case PREC_BF16: gemm_f32<1><<<blocks, 32 * warps>>>(M, N, K, dA, dB, dD); break;
    case PREC_TF32: gemm_f32<2><<<blocks, 32 * warps>>>(M, N, K, dA, dB, dD); break;
    default: return kernels_fail("mma.sync gemm: no %s instruction in the sm_80 build", prec_format_name(in));
    }
    return klaunched_synced("mma.sync gemm");
}
