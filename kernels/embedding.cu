// kernels/embedding.cu — embedding lookup and deterministic backward (see
// embedding.h).  Shapes: table/dtable (V, C), out/dout (N, C), tokens (N).
// Planted bugs: drop-term leaves out[N-1][C-1] unwritten and drops the last
// row of every token's gradient sum; truncate-output rounds stores toward zero.
// Replicas: R tables (R, V, C) and R token arrays (R, N) in one launch;
// token t belongs to replica t / N and reads (or accumulates into) that
// replica's table.  The sorted backward sorts the keys replica * V + token,
// so each (replica, token) run keeps its positions in order: the sum a
// single call forms on that replica's tokens.
#include <cuda_runtime.h>

#include <cub/cub.cuh>

#include "kernels/common/kelementwise.cuh"
#include "kernels/common/klaunch.cuh"
#include "kernels/embedding.h"
#include "kernels/registry.h"

// ---- registry entry (kernels/registry.h): name, paths, fp8 note, variants ----

static const kvariant variants[KEMBED_NVARIANTS] = {
    {"sorted", "stable radix sort of (token, position), then one warp per (distinct token, 32 columns) sums its rows in order"},
    {"row_owner", "one block per vocabulary row scans all tokens in order (no sort; same order, same bits)"},
};

extern "C" const kop kop_embedding = {
    "embedding",
    "token embedding lookup out = table[tokens] (exact) and its deterministic backward dtable += scatter-sum of dout",
    KPATHS_NO_FP8,
    "no fp8 path: the lookup's output starts the residual stream (bf16/fp32), and its gradient is a sum of many "
    "rows; fp8 recipes keep embeddings in high precision",
    variants,
    KEMBED_NVARIANTS,
};

namespace {

constexpr int kThreads = 128;

// Rows copied in 16-byte vectors (C a multiple of the vector), converted
// element by element so the planted truncation applies as in the scalar kernel.
template <typename T>
__global__ void lookup_vec_kernel(T *__restrict__ out, const T *__restrict__ table, const int32_t *__restrict__ tokens,
                                  int64_t N, int64_t V, int64_t C, int64_t tokens_per_replica, int bug)
{
    constexpr int W = 16 / (int)sizeof(T);
    const int64_t t = blockIdx.x;
    const int32_t v = tokens[t];
    table += t / tokens_per_replica * V * C;
    for (int64_t c = (int64_t)threadIdx.x * W; c < C; c += (int64_t)blockDim.x * W) {
        float e[W];
        if (v >= 0 && v < V) kelem_load<T, W>(table + (int64_t)v * C, c, e);
        else
            for (int j = 0; j < W; j++) e[j] = __int_as_float(0x7fffffff);
        kelem_store_scaled<T, W>(out, t * C + c, e, 1.0f, N * C, bug);
    }
}

template <typename T>
__global__ void lookup_kernel(T *__restrict__ out, const T *__restrict__ table, const int32_t *__restrict__ tokens,
                              int64_t N, int64_t V, int64_t C, int64_t tokens_per_replica, int bug)
{
    const int64_t t = blockIdx.x;
    const int32_t v = tokens[t];
    table += t / tokens_per_replica * V * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        if (bug == KBUG_DROP_TERM && t == N - 1 && c == C - 1) continue;
        float val = (v >= 0 && v < V) ? kto_float(table[(int64_t)v * C + c]) : __int_as_float(0x7fffffff);
        out[t * C + c] = kfrom_float<T>(val, bug);
    }
}

// The sort's input: positions 0 .. n-1 and keys replica * V + token, with
// out-of-range tokens mapped to R * V (sorted last, never accumulated; the
// sort looks at the bits below R * V + 1 only, so no out-of-range token can
// fall into a valid key's run).
__global__ void sort_keys_kernel(int32_t *keys, int32_t *positions, const int32_t *tokens, int64_t n,
                                 int64_t tokens_per_replica, int64_t V, int64_t R)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int32_t v = tokens[i];
    positions[i] = (int32_t)i;
    keys[i] = (int32_t)(v >= 0 && v < V ? i / tokens_per_replica * V + v : R * V);
}

// heads[p] = 1 where a run of equal sorted keys starts (p = 0 or a new key).
__global__ void run_heads_kernel(uint8_t *heads, const int32_t *keys, int64_t n)
{
    int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (p < n) heads[p] = p == 0 || keys[p - 1] != keys[p];
}

constexpr int kSegWarps = 4;  // warps per block of the segment sum
constexpr int kSegBatch = 32; // rows whose loads one lane issues before summing them (one per lane's index)

// The rows of a batch: lane k's value of row (k < count) at column c (0 past
// the row count or the columns; never summed).
template <typename T>
__device__ __forceinline__ void load_batch(float (&x)[kSegBatch], const T *__restrict__ dout, int32_t lane_row,
                                           int count, int64_t c, int64_t C)
{
#pragma unroll
    for (int k = 0; k < kSegBatch; k++) {
        const int32_t row = __shfl_sync(0xffffffffu, lane_row, k);
        x[k] = k < count && c < C ? kto_float(dout[(int64_t)row * C + c]) : 0.0f;
    }
}

// Work items (run j, 32-column tile) go to warps, tile-major so that a long
// run's tiles land on different blocks (SMs); lane l owns column tile * 32 + l
// and sums the run's rows into one fp32 accumulator in position order
// (the sort is stable), then adds it to dtable once: each column's order of
// operations is the documented one, whatever the launch shape.  A lane
// issues the loads of the next batch of kSegBatch rows before it adds the
// current one.  Keys index dtable's rows (replica * V + token); V here is all
// R * V rows; the out-of-range tokens' run (key R * V, sorted last) is skipped.
template <typename T>
__global__ void __launch_bounds__(kSegWarps * 32)
    segment_sum_kernel(T *__restrict__ dtable, const T *__restrict__ dout, const int32_t *__restrict__ keys,
                       const int32_t *__restrict__ rows, const int32_t *__restrict__ starts,
                       const int32_t *__restrict__ n_runs, int64_t N, int64_t V, int64_t C, int bug)
{
    const int lane = threadIdx.x & 31;
    const int64_t runs = *n_runs, tiles = (C + 31) / 32;
    const int64_t warps = (int64_t)gridDim.x * kSegWarps;
    for (int64_t item = (int64_t)blockIdx.x * kSegWarps + threadIdx.x / 32; item < runs * tiles; item += warps) {
        const int64_t j = item % runs, c = item / runs * 32 + lane;
        const int64_t p = starts[j], end = j + 1 < runs ? starts[j + 1] : N;
        const int32_t v = keys[p];
        if (v < 0 || v >= V) continue; // uniform across the warp
        // the planted bug drops the run's last row
        const int64_t last = bug == KBUG_DROP_TERM ? end - 1 : end;
        float acc = 0.0f, cur[kSegBatch], next[kSegBatch];
        int64_t q = p;
        int count = (int)min((int64_t)kSegBatch, last - q);
        load_batch<T>(cur, dout, lane < count ? rows[q + lane] : 0, count, c, C);
        while (count > 0) {
            const int64_t q_next = q + count;
            const int count_next = (int)min((int64_t)kSegBatch, last - q_next);
            if (count_next > 0) load_batch<T>(next, dout, lane < count_next ? rows[q_next + lane] : 0, count_next, c, C);
#pragma unroll
            for (int k = 0; k < kSegBatch; k++)
                if (k < count) acc += cur[k];
#pragma unroll
            for (int k = 0; k < kSegBatch; k++) cur[k] = next[k];
            q = q_next;
            count = count_next;
        }
        if (c < C) {
            T *d = &dtable[(int64_t)v * C + c];
            *d = kfrom_float<T>(kto_float(*d) + acc, bug);
        }
    }
}

// One block per vocabulary row v (blockIdx.x) of replica blockIdx.y, which
// scans that replica's N tokens.
template <typename T>
__global__ void row_owner_kernel(T *__restrict__ dtable, const T *__restrict__ dout, const int32_t *__restrict__ tokens,
                                 int64_t N, int64_t V, int64_t C, int bug)
{
    const int32_t v = (int32_t)blockIdx.x;
    {
        const int64_t r = blockIdx.y;
        dtable += r * V * C;
        dout += r * N * C;
        tokens += r * N;
    }
    int64_t last = -1; // the row's last occurrence, for the planted bug
    if (bug == KBUG_DROP_TERM)
        for (int64_t t = 0; t < N; t++)
            if (tokens[t] == v) last = t;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = 0.0f;
        bool any = false;
        for (int64_t t = 0; t < N; t++) {
            if (tokens[t] != v) continue;
            any = true;
            if (t == last) continue;
            acc += kto_float(dout[t * C + c]);
        }
        if (!any) continue;
        T *d = &dtable[(int64_t)v * C + c];
        *d = kfrom_float<T>(kto_float(*d) + acc, bug);
    }
}

int bits_for(int64_t V)
{
    int b = 1;
    while ((1ll << b) < V) b++;
    return b;
}

struct sort_layout {
    int32_t *keys_in, *keys, *rows_in, *rows, *starts, *n_runs;
    uint8_t *heads;
    void *temp;
    size_t temp_bytes, total;
    int key_bits;
};

// Workspace for N tokens with keys below `keys` (R * V, plus the
// out-of-range key): keys in, keys sorted, positions in (0 .. N-1, which
// the sort leaves as they are and the run selection reads), positions
// sorted, the runs' first positions, run heads, the number of runs, CUB's
// temporary storage (the sort's and the selection's, one after the other).
sort_layout layout(void *base, int64_t N, int64_t keys)
{
    sort_layout l{};
    size_t vec = ((size_t)N * sizeof(int32_t) + 255) / 256 * 256, bytes = ((size_t)N + 255) / 256 * 256;
    l.key_bits = bits_for(keys + 1);
    size_t sort_bytes = 0, select_bytes = 0;
    cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, (const int32_t *)nullptr, (int32_t *)nullptr,
                                    (const int32_t *)nullptr, (int32_t *)nullptr, (int)N, 0, l.key_bits);
    cub::DeviceSelect::Flagged(nullptr, select_bytes, (const int32_t *)nullptr, (const uint8_t *)nullptr,
                               (int32_t *)nullptr, (int32_t *)nullptr, (int)N);
    l.temp_bytes = sort_bytes > select_bytes ? sort_bytes : select_bytes;
    char *b = (char *)base;
    l.keys_in = (int32_t *)b;
    l.keys = (int32_t *)(b + vec);
    l.rows_in = (int32_t *)(b + 2 * vec);
    l.rows = (int32_t *)(b + 3 * vec);
    l.starts = (int32_t *)(b + 4 * vec);
    l.heads = (uint8_t *)(b + 5 * vec);
    l.n_runs = (int32_t *)(b + 5 * vec + bytes);
    l.temp = b + 5 * vec + bytes + 256;
    l.total = 5 * vec + bytes + 256 + l.temp_bytes;
    return l;
}

// A table (R * V rows, or R x V, of C) or a token-row tensor (R * N rows of
// C): its rows, the rows per replica and C.
int rows_of(const char *what, const ktensor *t, prec_format f, int64_t R, int64_t *per_replica, int64_t *C)
{
    if (!t || !t->data || t->ndim < 2 || t->ndim > 3 || t->format != f)
        return kernels_fail("embedding: %s must be a 2-d (or replicas x rows x C) %s tensor", what,
                            prec_format_name(f));
    const int64_t c = t->shape[t->ndim - 1], rows = ktensor_numel(t) / c;
    if (R < 1 || R > 65535 || rows % R != 0)
        return kernels_fail("embedding: %s has %lld rows, not %lld replicas' (R in [1, 65535])", what,
                            (long long)rows, (long long)R);
    *per_replica = rows / R;
    *C = c;
    return 0;
}

int launched(const char *what, int64_t N, int64_t V, int64_t C)
{
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        return kernels_fail("embedding %s (N=%lld V=%lld C=%lld): launch failed: %s", what, (long long)N, (long long)V,
                            (long long)C, cudaGetErrorString(err));
    return 0;
}

} // namespace

extern "C" int kembedding_forward_replicas(int64_t replicas, ktensor *out, const ktensor *table,
                                           const int32_t *tokens, int variant)
{
    int64_t V = 0, C = 0, N = 0, C2 = 0;
    if (!table || rows_of("table", table, table->format, replicas, &V, &C) ||
        rows_of("out", out, table->format, replicas, &N, &C2) || !tokens)
        return -1;
    if (C2 != C) return kernels_fail("embedding forward: out has %lld columns, table %lld", (long long)C2, (long long)C);
    if (variant < 0 || variant >= KEMBED_NVARIANTS) return kernels_fail("embedding forward: unknown variant %d", variant);
    const int bug = kernels_planted_bug();
    const int64_t NT = replicas * N; // every replica's tokens
    switch (table->format) {
#define LOOKUP(T)                                                                                                \
    if (C % (16 / (int64_t)sizeof(T)) == 0)                                                                      \
        lookup_vec_kernel<T><<<(unsigned)NT, kThreads, 0, kstream()>>>((T *)out->data, (const T *)table->data,  \
                                                                       tokens, NT, V, C, N, bug);                \
    else lookup_kernel<T><<<(unsigned)NT, kThreads, 0, kstream()>>>((T *)out->data, (const T *)table->data,     \
                                                                    tokens, NT, V, C, N, bug);
    case PREC_FP32: LOOKUP(float) break;
    case PREC_BF16: LOOKUP(__nv_bfloat16) break;
    case PREC_FP16: LOOKUP(__half) break;
#undef LOOKUP
    default: return kernels_fail("embedding forward: no %s path", prec_format_name(table->format));
    }
    return launched("forward", NT, V, C);
}

extern "C" int kembedding_forward(ktensor *out, const ktensor *table, const int32_t *tokens, int variant)
{
    return kembedding_forward_replicas(1, out, table, tokens, variant);
}

extern "C" size_t kembedding_backward_workspace_replicas(int64_t replicas, int64_t n_tokens, int64_t vocab,
                                                         int variant)
{
    if (variant == KEMBED_ROW_OWNER) return 0;
    return layout(nullptr, replicas * n_tokens, replicas * vocab).total;
}

extern "C" size_t kembedding_backward_workspace(int64_t n_tokens, int64_t vocab, int variant)
{
    return kembedding_backward_workspace_replicas(1, n_tokens, vocab, variant);
}

extern "C" int kembedding_backward_replicas(int64_t replicas, ktensor *dtable, const ktensor *dout,
                                            const int32_t *tokens, void *workspace, size_t workspace_bytes,
                                            int variant)
{
    int64_t V = 0, C = 0, N = 0, C2 = 0;
    if (!dtable || rows_of("dtable", dtable, dtable->format, replicas, &V, &C) ||
        rows_of("dout", dout, dtable->format, replicas, &N, &C2) || !tokens)
        return -1;
    if (C2 != C) return kernels_fail("embedding backward: dout has %lld columns, dtable %lld", (long long)C2, (long long)C);
    if (variant < 0 || variant >= KEMBED_NVARIANTS) return kernels_fail("embedding backward: unknown variant %d", variant);
    const int64_t NT = replicas * N, VT = replicas * V;
    if (NT >= INT32_MAX || VT >= INT32_MAX)
        return kernels_fail("embedding backward: %lld tokens of %lld table rows exceed the 32-bit sort", (long long)NT,
                            (long long)VT);
    const int bug = kernels_planted_bug();
    if (variant == KEMBED_ROW_OWNER) {
        dim3 grid((unsigned)V, (unsigned)replicas);
        switch (dtable->format) {
#define OWNER(T)                                                                                                \
    row_owner_kernel<T><<<grid, kThreads, 0, kstream()>>>((T *)dtable->data, (const T *)dout->data, tokens, N, V, \
                                                          C, bug);
        case PREC_FP32: OWNER(float) break;
        case PREC_BF16: OWNER(__nv_bfloat16) break;
        case PREC_FP16: OWNER(__half) break;
#undef OWNER
        default: return kernels_fail("embedding backward: no %s path", prec_format_name(dtable->format));
        }
        return launched("backward (row_owner)", NT, V, C);
    }
    sort_layout l = layout(workspace, NT, VT);
    if (!workspace || workspace_bytes < l.total)
        return kernels_fail("embedding backward: workspace of %zu bytes is below the %zu needed", workspace_bytes, l.total);
    sort_keys_kernel<<<(unsigned)((NT + 255) / 256), 256, 0, kstream()>>>(l.keys_in, l.rows_in, tokens, NT, N, V,
                                                                          replicas);
    if (launched("backward (sort keys)", NT, V, C)) return -1;
    cudaError_t err = cub::DeviceRadixSort::SortPairs(l.temp, l.temp_bytes, l.keys_in, l.keys, l.rows_in, l.rows,
                                                      (int)NT, 0, l.key_bits, kstream());
    if (err != cudaSuccess) return kernels_fail("embedding backward: cub radix sort failed: %s", cudaGetErrorString(err));
    run_heads_kernel<<<(unsigned)((NT + 255) / 256), 256, 0, kstream()>>>(l.heads, l.keys, NT);
    if (launched("backward (run heads)", NT, V, C)) return -1;
    // rows_in holds the positions 0 .. NT-1: the selection gives each run's first position
    err = cub::DeviceSelect::Flagged(l.temp, l.temp_bytes, l.rows_in, l.heads, l.starts, l.n_runs, (int)NT, kstream());
    if (err != cudaSuccess) return kernels_fail("embedding backward: cub run selection failed: %s", cudaGetErrorString(err));
    // enough warps for every (run, tile) of the most runs there can be, at most 8 blocks per SM (the rest loop)
    int device = 0, sms = 0;
    if ((err = cudaGetDevice(&device)) != cudaSuccess ||
        (err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess)
        return kernels_fail("embedding backward: the device's SM count: %s", cudaGetErrorString(err));
    const int64_t max_runs = NT < VT + 1 ? NT : VT + 1, items = max_runs * ((C + 31) / 32);
    int64_t blocks = (items + kSegWarps - 1) / kSegWarps;
    if (blocks > 8 * (int64_t)sms) blocks = 8 * (int64_t)sms;
    switch (dtable->format) {
#define SEG(T)                                                                                                   \
    segment_sum_kernel<T><<<(unsigned)blocks, kSegWarps * 32, 0, kstream()>>>(                                  \
        (T *)dtable->data, (const T *)dout->data, l.keys, l.rows, l.starts, l.n_runs, NT, VT, C, bug);
    case PREC_FP32: SEG(float) break;
    case PREC_BF16: SEG(__nv_bfloat16) break;
    case PREC_FP16: SEG(__half) break;
#undef SEG
    default: return kernels_fail("embedding backward: no %s path", prec_format_name(dtable->format));
    }
    return launched("backward (sorted)", NT, V, C);
}

extern "C" int kembedding_backward(ktensor *dtable, const ktensor *dout, const int32_t *tokens, void *workspace,
                                   size_t workspace_bytes, int variant)
{
    return kembedding_backward_replicas(1, dtable, dout, tokens, workspace, workspace_bytes, variant);
}
