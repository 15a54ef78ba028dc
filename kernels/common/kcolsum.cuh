// kernels/common/kcolsum.cuh — the column reduction of the norms' parameter
// gradients (device code, C++): dgain and dbias of LayerNorm, dgain of
// RMSNorm, over the N rows (N, C) of each replica.
//
// Order (the one klayernorm_col_depth and krmsnorm_col_depth count for the
// checks' bounds): for each column, 16 row lanes; lane y sums rows
// y, y + 16, y + 32, ... in increasing order from 0.0f, then the 16 lane
// partials are added in lane order (0 + 1, then + 2, ... + 15).  No atomics.
//
// Mapping: a block owns COLS consecutive columns and all 16 lanes
// (16 x COLS threads, thread (x, y) column x, lane y); so a row's COLS
// elements are one 16- or 32-byte segment.  Each lane's chain is sequential,
// so the parallelism is 16 x C chains per replica: the loads are what this
// mapping pipelines.  Rows go in batches of 16 x kColBatch (kColBatch rows per
// lane); the next batch's elements are loaded into registers, and its row
// statistics (mean, rstd) into shared memory, while the current batch is
// summed.
#ifndef ULPSCOPE_KERNELS_COMMON_KCOLSUM_CUH
#define ULPSCOPE_KERNELS_COMMON_KCOLSUM_CUH

#include <cstdint>

#include "kernels/common/kelem.cuh"

constexpr int kColLanes = 16;
constexpr int kColBatch = 32;

// STEP: a functor step(acc, dy, x, mean, rstd) adding one row's terms to the
// NACC partials (in the order the op documents).  MEAN: mean is read (else
// it may be null and step gets 0).  out1 is used when NACC == 2.
// Grid: (ceil(C / COLS), replicas); block: (COLS, 16).
template <typename T, int COLS, int NACC, bool MEAN, class STEP>
__global__ void __launch_bounds__(kColLanes *COLS)
    kcolsum_kernel(T *__restrict__ out0, T *__restrict__ out1, const T *__restrict__ dy, const T *__restrict__ x,
                   const float *__restrict__ mean, const float *__restrict__ rstd, int64_t N, int64_t C, int bug,
                   STEP step)
{
    constexpr int THREADS = kColLanes * COLS, U = kColBatch, ROWS = kColLanes * U, PER = ROWS / THREADS;
    static_assert(ROWS % THREADS == 0, "a batch's statistics split evenly over the block");
    __shared__ float s_mean[2][MEAN ? ROWS : 1], s_rstd[2][ROWS];
    __shared__ float part[NACC][kColLanes][COLS + 1];
    {
        const int64_t rep = blockIdx.y;
        out0 += rep * C;
        if (NACC > 1) out1 += rep * C;
        dy += rep * N * C;
        x += rep * N * C;
        if (MEAN) mean += rep * N;
        rstd += rep * N;
    }
    const int lane = threadIdx.y, tid = threadIdx.y * COLS + threadIdx.x;
    const int64_t c = (int64_t)blockIdx.x * COLS + threadIdx.x;
    const bool col_ok = c < C;
    const int64_t batches = (N + ROWS - 1) / ROWS;
    float acc[NACC];
#pragma unroll
    for (int a = 0; a < NACC; a++) acc[a] = 0.0f;
    T a_dy[U], a_x[U], b_dy[U], b_x[U];
    float st_mean[PER], st_rstd[PER];

    // batch b: rows b ROWS .. b ROWS + ROWS - 1; lane y's step i is row b ROWS + 16 i + y
    auto load_data = [&](T *bdy, T *bx, int64_t b) {
        const int64_t r0 = b * ROWS + lane;
        const T *pdy = dy + r0 * C + c, *px = x + r0 * C + c;
#pragma unroll
        for (int i = 0; i < U; i++)
            if (col_ok && r0 + (int64_t)i * kColLanes < N) {
                bdy[i] = pdy[(int64_t)i * kColLanes * C];
                bx[i] = px[(int64_t)i * kColLanes * C];
            }
    };
    auto load_stats = [&](int64_t b) {
#pragma unroll
        for (int k = 0; k < PER; k++) {
            const int64_t r = b * ROWS + k * THREADS + tid;
            if (r < N) {
                st_rstd[k] = rstd[r];
                if (MEAN) st_mean[k] = mean[r];
            }
        }
    };
    auto store_stats = [&](int buf) { // entries of rows >= N are never read
#pragma unroll
        for (int k = 0; k < PER; k++) {
            s_rstd[buf][k * THREADS + tid] = st_rstd[k];
            if (MEAN) s_mean[buf][k * THREADS + tid] = st_mean[k];
        }
    };
    auto consume = [&](const T *bdy, const T *bx, int64_t b, int buf) {
        const int64_t r0 = b * ROWS + lane;
#pragma unroll
        for (int i = 0; i < U; i++) {
            const int64_t r = r0 + (int64_t)i * kColLanes;
            if (!col_ok || r >= N) continue;
            if (bug == KBUG_DROP_TERM && r == N - 1) continue;
            const int s = i * kColLanes + lane;
            step(acc, kto_float(bdy[i]), kto_float(bx[i]), MEAN ? s_mean[buf][s] : 0.0f, s_rstd[buf][s]);
        }
    };

    if (batches > 0) {
        load_stats(0);
        store_stats(0);
        load_data(a_dy, a_x, 0);
    }
    __syncthreads();
    // Even batches live in a_* and statistics buffer 0, odd ones in b_* and buffer 1.
    for (int64_t b = 0; b < batches; b += 2) {
        if (b + 1 < batches) {
            load_stats(b + 1);
            load_data(b_dy, b_x, b + 1);
        }
        consume(a_dy, a_x, b, 0);
        if (b + 1 < batches) store_stats(1); // buffer 1 was last read before the previous barrier
        __syncthreads();
        if (b + 1 >= batches) break;
        if (b + 2 < batches) {
            load_stats(b + 2);
            load_data(a_dy, a_x, b + 2);
        }
        consume(b_dy, b_x, b + 1, 1);
        if (b + 2 < batches) store_stats(0);
        __syncthreads();
    }

#pragma unroll
    for (int a = 0; a < NACC; a++) part[a][lane][threadIdx.x] = acc[a];
    __syncthreads();
    if (lane == 0 && col_ok) {
        float s[NACC];
#pragma unroll
        for (int a = 0; a < NACC; a++) s[a] = part[a][0][threadIdx.x];
        for (int k = 1; k < kColLanes; k++)
#pragma unroll
            for (int a = 0; a < NACC; a++) s[a] += part[a][k][threadIdx.x];
        out0[c] = kfrom_float<T>(s[0], bug);
        if (NACC > 1) out1[c] = kfrom_float<T>(s[NACC - 1], bug);
    }
}

// Columns per block: one 32-byte segment of a row, or 16 bytes when the
// 32-byte tiles would leave multiprocessors idle (fewer blocks than SMs).
template <typename T> constexpr int kcol_wide() { return 32 / (int)sizeof(T); }
template <typename T> constexpr int kcol_narrow() { return 16 / (int)sizeof(T); }

// Launches kcolsum_kernel on the current stream (the caller checks the launch).
template <typename T, int NACC, bool MEAN, class STEP>
void kcolsum_launch(cudaStream_t stream, int multiprocessors, T *out0, T *out1, const T *dy, const T *x,
                    const float *mean, const float *rstd, int64_t N, int64_t C, int64_t replicas, int bug, STEP step)
{
    constexpr int W = kcol_wide<T>(), NW = kcol_narrow<T>();
    const int64_t wide_blocks = (C + W - 1) / W * replicas;
    if (wide_blocks >= multiprocessors)
        kcolsum_kernel<T, W, NACC, MEAN, STEP><<<dim3((unsigned)((C + W - 1) / W), (unsigned)replicas),
                                                 dim3(W, kColLanes), 0, stream>>>(out0, out1, dy, x, mean, rstd, N,
                                                                                  C, bug, step);
    else
        kcolsum_kernel<T, NW, NACC, MEAN, STEP><<<dim3((unsigned)((C + NW - 1) / NW), (unsigned)replicas),
                                                  dim3(NW, kColLanes), 0, stream>>>(out0, out1, dy, x, mean, rstd,
                                                                                    N, C, bug, step);
}

#endif
