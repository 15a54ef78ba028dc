// kernels/probe/probe_sm90a.cu — Hopper-only probes: wgmma (fp16, bf16, tf32, e4m3,
// e5m2; fp32 or fp16 accumulators) and the fp8 mma.sync (m16n8k32, an sm_89
// instruction that also assembles for sm_90a).  Built for sm_90a only
// (Makefile rule for *_sm90a.cu).
//
// wgmma, m64n8kK, one warpgroup (128 threads) per tile:
//   A from registers: warp w holds rows 16w..16w+15 in the mma.sync layout of
//     the same K (m16n8k16 for 16-bit, m16n8k8 for tf32, m16n8k32 for fp8);
//   B from shared memory, K-major, no swizzle: two 8x16-byte core matrices
//     along K, 128 bytes apart; row n of a core matrix at byte 16n.  With N = 8
//     there is one core matrix along N, so the leading and stride byte offsets
//     are both 128 and their order cannot matter;
//   D: warp w holds rows 16w + g (+8), cols 2t, 2t+1 (g = lane/4, t = lane%4).
// m16n8k32 fp8 A: reg r holds row g + 8*(r%2), k = 4t + 16*(r/2) + {0..3};
//   B: reg r holds k = 4t + 16r + {0..3}, n = g.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "kernels/common/klaunch.cuh"
#include "kernels/kernels.h"
#include "kernels/probe/probe_gpu.h"

namespace {

__device__ __forceinline__ uint32_t ld32(const void *base, long byte_off)
{
    return *reinterpret_cast<const uint32_t *>(static_cast<const uint8_t *>(base) + byte_off);
}

// The four A registers of one warp's 16 rows for an instruction of K = 32
// bytes per row (16 fp16/bf16, 8 tf32, 32 fp8): element size esz.
__device__ __forceinline__ void load_a(uint32_t a[4], const uint8_t *A, int K, int esz, int row0)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const long r0 = (long)(row0 + g) * K * esz, r1 = (long)(row0 + g + 8) * K * esz;
    // Byte column of this thread's first register: 4t for every element size
    // (tf32 col t, 16-bit cols 2t..2t+1, fp8 cols 4t..4t+3); the second half of
    // K starts 16 bytes later (tf32 col t+4, 16-bit +8, fp8 +16).
    const int c0 = 4 * t, c1 = c0 + 16;
    a[0] = ld32(A, r0 + c0);
    a[1] = ld32(A, r1 + c0);
    a[2] = ld32(A, r0 + c1);
    a[3] = ld32(A, r1 + c1);
}

template <int IN, bool OUT16>  // IN: 0 fp16, 1 bf16, 2 tf32, 3 e4m3, 4 e5m2
__global__ void __launch_bounds__(128) wgmma_tiles(int tiles, const void *A, const void *B, const void *C, void *D)
{
    constexpr int esz = IN == 2 ? 4 : (IN >= 3 ? 1 : 2);
    constexpr int K = 32 / esz;
    __shared__ __align__(128) uint8_t sB[256];
    const int tile = blockIdx.x;
    if (tile >= tiles) return;  // whole block
    const uint8_t *a = static_cast<const uint8_t *>(A) + (long)tile * 64 * K * esz;
    const uint8_t *b = static_cast<const uint8_t *>(B) + (long)tile * 8 * K * esz;
    // B [8][K] into two core matrices along K
    for (int e = threadIdx.x; e < 8 * K; e += blockDim.x) {
        const int n = e / K, k = e % K, per_row = 16 / esz;
        const int dst = (k / per_row) * 128 + n * 16 + (k % per_row) * esz;
        for (int i = 0; i < esz; i++) sB[dst + i] = b[(long)e * esz + i];
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(sB));
    const uint64_t desc = (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(128 >> 4) << 16) |
                          ((uint64_t)(128 >> 4) << 32);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int row0 = 16 * warp;
    uint32_t ar[4];
    load_a(ar, a, K, esz, row0);
    if constexpr (OUT16) {
        const uint16_t *c = static_cast<const uint16_t *>(C) + (long)tile * 512;
        uint32_t d0 = ld32(c, 2 * ((row0 + g) * 8 + 2 * t)), d1 = ld32(c, 2 * ((row0 + g + 8) * 8 + 2 * t));
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        if constexpr (IN == 0)
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                         "wgmma.mma_async.sync.aligned.m64n8k16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, %6, p, 1, 1, 0;\n}"
                         : "+r"(d0), "+r"(d1)
                         : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "l"(desc));
        else if constexpr (IN == 3)
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                         "wgmma.mma_async.sync.aligned.m64n8k32.f16.e4m3.e4m3 {%0,%1}, {%2,%3,%4,%5}, %6, p, 1, 1;\n}"
                         : "+r"(d0), "+r"(d1)
                         : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "l"(desc));
        else
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                         "wgmma.mma_async.sync.aligned.m64n8k32.f16.e5m2.e5m2 {%0,%1}, {%2,%3,%4,%5}, %6, p, 1, 1;\n}"
                         : "+r"(d0), "+r"(d1)
                         : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "l"(desc));
        asm volatile("wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;" ::: "memory");
        uint16_t *d = static_cast<uint16_t *>(D) + (long)tile * 512;
        *reinterpret_cast<uint32_t *>(d + (row0 + g) * 8 + 2 * t) = d0;
        *reinterpret_cast<uint32_t *>(d + (row0 + g + 8) * 8 + 2 * t) = d1;
    } else {
        const float *c = static_cast<const float *>(C) + (long)tile * 512;
        float d[4] = {c[(row0 + g) * 8 + 2 * t], c[(row0 + g) * 8 + 2 * t + 1], c[(row0 + g + 8) * 8 + 2 * t],
                      c[(row0 + g + 8) * 8 + 2 * t + 1]};
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#define WGMMA_F32(INSTR, TAIL)                                                                          \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n" INSTR                                       \
                 " {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1" TAIL ";\n}"                               \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                       \
                 : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "l"(desc))
        if constexpr (IN == 0) WGMMA_F32("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16", ", 0");
        else if constexpr (IN == 1) WGMMA_F32("wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16", ", 0");
        else if constexpr (IN == 2) WGMMA_F32("wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32", "");
        else if constexpr (IN == 3) WGMMA_F32("wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3", "");
        else WGMMA_F32("wgmma.mma_async.sync.aligned.m64n8k32.f32.e5m2.e5m2", "");
#undef WGMMA_F32
        asm volatile("wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;" ::: "memory");
        float *dd = static_cast<float *>(D) + (long)tile * 512;
        dd[(row0 + g) * 8 + 2 * t] = d[0];
        dd[(row0 + g) * 8 + 2 * t + 1] = d[1];
        dd[(row0 + g + 8) * 8 + 2 * t] = d[2];
        dd[(row0 + g + 8) * 8 + 2 * t + 1] = d[3];
    }
}

// fp8 mma.sync m16n8k32, one tile per warp: A [16][32], B [8][32] bytes.
template <bool E5M2, bool OUT16>
__global__ void mma_fp8_tiles(int tiles, const void *A, const void *B, const void *C, void *D)
{
    const int tile = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (tile >= tiles) return;
    const uint8_t *a = static_cast<const uint8_t *>(A) + (long)tile * 16 * 32;
    const uint8_t *b = static_cast<const uint8_t *>(B) + (long)tile * 8 * 32;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const uint32_t a0 = ld32(a, g * 32 + 4 * t), a1 = ld32(a, (g + 8) * 32 + 4 * t);
    const uint32_t a2 = ld32(a, g * 32 + 4 * t + 16), a3 = ld32(a, (g + 8) * 32 + 4 * t + 16);
    const uint32_t b0 = ld32(b, g * 32 + 4 * t), b1 = ld32(b, g * 32 + 4 * t + 16);
    if constexpr (OUT16) {
        const uint16_t *c = static_cast<const uint16_t *>(C) + (long)tile * 128;
        uint32_t d0 = ld32(c, 2 * (g * 8 + 2 * t)), d1 = ld32(c, 2 * ((g + 8) * 8 + 2 * t));
        if constexpr (E5M2)
            asm volatile("mma.sync.aligned.m16n8k32.row.col.f16.e5m2.e5m2.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, "
                         "{%0,%1};"
                         : "+r"(d0), "+r"(d1)
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        else
            asm volatile("mma.sync.aligned.m16n8k32.row.col.f16.e4m3.e4m3.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, "
                         "{%0,%1};"
                         : "+r"(d0), "+r"(d1)
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        uint16_t *d = static_cast<uint16_t *>(D) + (long)tile * 128;
        *reinterpret_cast<uint32_t *>(d + g * 8 + 2 * t) = d0;
        *reinterpret_cast<uint32_t *>(d + (g + 8) * 8 + 2 * t) = d1;
    } else {
        const float *c = static_cast<const float *>(C) + (long)tile * 128;
        float d[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]};
        if constexpr (E5M2)
            asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                         "{%8,%9}, {%0,%1,%2,%3};"
                         : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        else
            asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                         "{%8,%9}, {%0,%1,%2,%3};"
                         : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        float *dd = static_cast<float *>(D) + (long)tile * 128;
        dd[g * 8 + 2 * t] = d[0];
        dd[g * 8 + 2 * t + 1] = d[1];
        dd[(g + 8) * 8 + 2 * t] = d[2];
        dd[(g + 8) * 8 + 2 * t + 1] = d[3];
    }
}

}  // namespace

extern "C" int probe_sm90a_tiles(const char *route, prec_format in, prec_format out, int tiles, const void *dA,
                                 const void *dB, const void *dC, void *dD)
{
    const bool o16 = out == PREC_FP16;
    if (strcmp(route, "mma.sync") == 0) {
        const int warps = 4, blocks = (tiles + warps - 1) / warps;
        if (in == PREC_E4M3 && !o16) mma_fp8_tiles<false, false><<<blocks, 128>>>(tiles, dA, dB, dC, dD);
        else if (in == PREC_E4M3) mma_fp8_tiles<false, true><<<blocks, 128>>>(tiles, dA, dB, dC, dD);
        else if (in == PREC_E5M2 && !o16) mma_fp8_tiles<true, false><<<blocks, 128>>>(tiles, dA, dB, dC, dD);
        else if (in == PREC_E5M2) mma_fp8_tiles<true, true><<<blocks, 128>>>(tiles, dA, dB, dC, dD);
        else return kernels_fail("mma.sync (sm_90a build): only the fp8 instructions live here, not %s",
                                 prec_format_name(in));
        return klaunched_synced("mma.sync m16n8k32 fp8 tiles");
    }
    if (strcmp(route, "wgmma") != 0) return kernels_fail("sm_90a probes: unknown route '%s'", route);
    switch (in) {
    case PREC_FP16:
        if (o16) wgmma_tiles<0, true><<<tiles, 128>>>(tiles, dA, dB, dC, dD);
        else wgmma_tiles<0, false><<<tiles, 128>>>(tiles, dA, dB, dC, dD);
        break;
    case PREC_BF16:
        if (o16) return kernels_fail("wgmma: bf16 inputs accumulate in fp32 only");
        wgmma_tiles<1, false><<<tiles, 128>>>(tiles, dA, dB, dC, dD);
        break;
    case PREC_TF32:
        if (o16) return kernels_fail("wgmma: tf32 inputs accumulate in fp32 only");
        wgmma_tiles<2, false><<<tiles, 128>>>(tiles, dA, dB, dC, dD);
        break;
    case PREC_E4M3:
        if (o16) wgmma_tiles<3, true><<<tiles, 128>>>(tiles, dA, dB, dC, dD);
        else wgmma_tiles<3, false><<<tiles, 128>>>(tiles, dA, dB, dC, dD);
        break;
    case PREC_E5M2:
        if (o16) wgmma_tiles<4, true><<<tiles, 128>>>(tiles, dA, dB, dC, dD);
        else wgmma_tiles<4, false><<<tiles, 128>>>(tiles, dA, dB, dC, dD);
        break;
    default: return kernels_fail("wgmma: no %s instruction", prec_format_name(in));
    }
    return klaunched_synced("wgmma tiles");
}
