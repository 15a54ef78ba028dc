// tests/simt_emu.h — host stand-ins for the device primitives the flash_mma
// kernels use, so that tests/test_attention_mma_simt.cc can compile
// kernels/attention_mma.cu with a host C++ compiler and run its kernels,
// unchanged, with one host thread per CUDA thread (C++; include before the
// kernel source).
//
// A block is 128 pthreads sharing one byte array as shared memory; a block
// barrier is __syncthreads, a per-warp barrier orders the warp-collective
// instructions, which exchange their operands through per-warp slots
// exactly as the PTX ISA defines them:
//  - __shfl_xor_sync: lane l reads the value of lane l ^ offset;
//  - ldmatrix .x4 (.trans): lane l gives the address of row l % 8 of matrix
//    l / 8; register m of lane l receives elements (l / 4, 2 (l % 4) + e) of
//    matrix m (.trans: (2 (l % 4) + e, l / 4)), e = 0 in the low half;
//  - mma.m16n8k16 row.col f32: lane l's d_i (row g + 8 [i >= 2], column
//    2t + i % 2; g = l / 4, t = l % 4) is the model's block chain
//    (precision/mma.h, mma_dot over k = 0..15) of row `row` of A and column
//    `column` of B gathered from the lanes' fragments (a_i: row g + 8 [i % 4
//    >= 2], k 2t + i % 2 + 8 [i >= 4]; b_i: k 2t + i % 2 + 8 [i >= 2], n g),
//    from the lane's own c;
//  - cp.async: each thread queues its copies; commit_group closes a group;
//    wait_group N performs every committed group but the N newest, in order.
//    A copy lands only at the wait that covers it, so a read of a buffer
//    before its wait sees stale data (the test then fails).  With
//    simt_eager_copies a copy lands when issued instead, so a copy issued
//    into a buffer other warps still read corrupts what they read.
// Hazard check (always on): every 16-byte chunk of shared memory records
// which warps read it (ldmatrix) since the last __syncthreads; a cp.async
// issued into a chunk another warp read in that interval is counted as a
// write-after-read hazard (the hardware may land it at any time before the
// wait), whatever the timing of the host threads.
// Warp-collective calls must be reached by all 32 lanes in the same order,
// as on the GPU (a divergent one deadlocks here).
#ifndef ULPSCOPE_TESTS_SIMT_EMU_H
#define ULPSCOPE_TESTS_SIMT_EMU_H

#define ATT_MMA_HOST_EMULATION 1

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <pthread.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "precision/mma.h"

#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif
#ifndef __global__
#define __global__
#endif
#ifndef __align__
#define __align__(n) alignas(n)
#endif

struct simt_index {
    unsigned x, y, z;
};
extern thread_local simt_index threadIdx, blockIdx;

enum { SIMT_THREADS = 128, SIMT_WARPS = SIMT_THREADS / 32 };

struct simt_copy {
    size_t dst;        // offset in shared memory
    const void *src;
    int bytes;         // copied; the rest of the 16 zero-filled
};

struct simt_block {
    std::vector<unsigned char> smem;
    pthread_barrier_t block_bar;
    pthread_barrier_t warp_bar[SIMT_WARPS];
    struct {
        const void *addr[32];
        uint32_t a[32][4], b[32][2];
        float f[32];
    } warp[SIMT_WARPS];
    // per thread: committed groups (oldest first) and the open one
    std::vector<std::vector<std::vector<simt_copy>>> committed;
    std::vector<std::vector<simt_copy>> open;
    std::atomic<int> bad_reads{0}; // cp.async sources outside the tensors (simt_readable)
    std::atomic<int> hazards{0};   // cp.async into a chunk another warp read since the last barrier
    std::atomic<uint32_t> epoch{0}; // __syncthreads passed
    std::vector<std::atomic<uint32_t>> chunk_reads; // (epoch << 8) | mask of the warps that read the chunk
};

extern thread_local simt_block *simt_cur;
extern const mma_arith *simt_model_bf16, *simt_model_fp16; // set by the test
extern bool simt_eager_copies;                              // set by the test

inline int simt_tid() { return (int)threadIdx.x; }
inline void simt_warp_sync() { pthread_barrier_wait(&simt_cur->warp_bar[simt_tid() / 32]); }

inline void __syncthreads()
{
    if (pthread_barrier_wait(&simt_cur->block_bar) == PTHREAD_BARRIER_SERIAL_THREAD) simt_cur->epoch++;
    pthread_barrier_wait(&simt_cur->block_bar);
}

// A read of the 16-byte chunk holding smem offset off by this thread's warp.
inline void simt_note_read(size_t off)
{
    std::atomic<uint32_t> &c = simt_cur->chunk_reads[off / 16];
    const uint32_t e = simt_cur->epoch.load() << 8, bit = 1u << (simt_tid() / 32);
    uint32_t old = c.load();
    while (!c.compare_exchange_weak(old, (old >> 8 << 8) == e ? old | bit : e | bit)) {
    }
}
// A write into that chunk by this thread: a hazard if another warp read it in this interval.
inline void simt_note_write(size_t off)
{
    const uint32_t v = simt_cur->chunk_reads[off / 16].load(), e = simt_cur->epoch.load() << 8;
    if ((v >> 8 << 8) == e && (v & 0xFFu & ~(1u << (simt_tid() / 32)))) simt_cur->hazards++;
}

inline float __shfl_xor_sync(unsigned, float v, int offset)
{
    auto &w = simt_cur->warp[simt_tid() / 32];
    const int lane = simt_tid() % 32;
    w.f[lane] = v;
    simt_warp_sync();
    const float r = w.f[lane ^ offset];
    simt_warp_sync();
    return r;
}

inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }

inline float __uint_as_float(unsigned u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline unsigned __float_as_uint(float f)
{
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
}

inline unsigned char *am_emu_smem() { return simt_cur->smem.data(); }

// The test's check that a copy reads inside a tensor (bytes > 0).
bool simt_readable(const void *src, int bytes);

inline void am_cp16(void *dst, const void *src, int bytes)
{
    if (bytes > 0 && !simt_readable(src, bytes)) simt_cur->bad_reads++;
    const size_t off = (size_t)((unsigned char *)dst - simt_cur->smem.data());
    simt_note_write(off);
    if (simt_eager_copies) {
        memset(dst, 0, 16);
        if (bytes) memcpy(dst, src, (size_t)bytes);
        return;
    }
    simt_cur->open[simt_tid()].push_back({off, src, bytes});
}
inline void am_commit()
{
    const int t = simt_tid();
    simt_cur->committed[t].push_back(simt_cur->open[t]);
    simt_cur->open[t].clear();
}
template <int N> inline void am_wait()
{
    auto &groups = simt_cur->committed[simt_tid()];
    while (groups.size() > (size_t)N) {
        for (const simt_copy &c : groups.front()) {
            unsigned char *d = simt_cur->smem.data() + c.dst;
            memset(d, 0, 16);
            if (c.bytes) memcpy(d, c.src, (size_t)c.bytes);
        }
        groups.erase(groups.begin());
    }
}

inline void simt_ldsm(uint32_t (&r)[4], const void *row, bool trans)
{
    auto &w = simt_cur->warp[simt_tid() / 32];
    const int lane = simt_tid() % 32;
    w.addr[lane] = row;
    simt_note_read((size_t)((const unsigned char *)row - simt_cur->smem.data()));
    simt_warp_sync();
    for (int m = 0; m < 4; m++) {
        uint32_t halves[2];
        for (int e = 0; e < 2; e++) {
            const int rr = trans ? 2 * (lane % 4) + e : lane / 4, cc = trans ? lane / 4 : 2 * (lane % 4) + e;
            uint16_t h;
            memcpy(&h, (const unsigned char *)w.addr[8 * m + rr] + 2 * cc, 2);
            halves[e] = h;
        }
        r[m] = halves[0] | halves[1] << 16;
    }
    simt_warp_sync();
}
inline void am_ldsm(uint32_t (&r)[4], const void *row) { simt_ldsm(r, row, false); }
inline void am_ldsm_trans(uint32_t (&r)[4], const void *row) { simt_ldsm(r, row, true); }

// 16-bit half e of register reg of lane l's fragment
inline uint16_t simt_half(const uint32_t *regs, int reg, int e) { return (uint16_t)(regs[reg] >> (16 * e)); }

inline void am_emu_mma(prec_format in, float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    auto &w = simt_cur->warp[simt_tid() / 32];
    const int lane = simt_tid() % 32, g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; i++) w.a[lane][i] = a[i];
    w.b[lane][0] = b0;
    w.b[lane][1] = b1;
    simt_warp_sync();
    const mma_arith *p = in == PREC_BF16 ? simt_model_bf16 : simt_model_fp16;
    float out[4];
    for (int i = 0; i < 4; i++) {
        const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + i % 2;
        uint16_t arow[16], bcol[16];
        for (int k = 0; k < 16; k++) {
            // a_j with j = 2 reg + e: row g' + 8 (reg & 1), k 2t' + e + 8 (reg >> 1)
            const int reg = (k / 8) * 2 + row / 8, e = k % 2, la = 4 * (row % 8) + (k % 8) / 2;
            arow[k] = simt_half(w.a[la], reg, e);
            // b_j with j = 2 reg + e: k 2t' + e + 8 reg, n g'
            const int lb = 4 * col + (k % 8) / 2;
            bcol[k] = simt_half(w.b[lb], k / 8, e);
        }
        uint32_t c;
        memcpy(&c, &d[i], 4);
        c = mma_dot(p, 16, arow, bcol, c);
        memcpy(&out[i], &c, 4);
    }
    simt_warp_sync();
    for (int i = 0; i < 4; i++) d[i] = out[i];
}

// Runs kernel() as grid blocks of 128 host threads, one block at a time,
// with smem_bytes of shared memory (filled with 0xA5: uninitialised reads show).
void simt_launch(unsigned grid, size_t smem_bytes, const std::function<void()> &kernel);

#endif
