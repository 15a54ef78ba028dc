// trainer/backend_cuda.cu — the CUDA backend: every slot runs the registry
// kernel of its (op, path, variant) through the kernels' C APIs, dispatched
// on the site's op handle (top_id) and the kernels' variant enums.
//
// Inputs stored in another format than the slot's path are converted into a
// scratch buffer first (tglue_cast, RNE, as the CPU backend rounds them);
// outputs whose tensor is stored differently are written to a scratch in the
// path's format and converted.  A (path, variant) a kernel does not offer is
// refused when the plan is bound (tbackend_bind_plan), naming the slot;
// nothing falls back to another path or to the CPU.  Attention's tensor-core
// variants read and write the trainer's [B,T,H,D] tensors in place (katt_rows);
// the other variants use [B,H,T,D]: q, k, v and the outputs are permuted
// around them (exactly, or with the RNE conversion into the path's format).
//
// Data parallel: libnccl.so.2 is opened at run time (dlopen), so the binary
// needs NCCL only when --world > 1.  The all-reduce slot's path is the wire
// format (gradients are converted to it and back), its variant NCCL's
// algorithm (NCCL_ALGO, fixed when the communicator is created).
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <unistd.h>

#include "kernels/activations.h"
#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/grad_norm.h"
#include "kernels/common/kgraph.h"
#include "kernels/common/ktensor_io.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/mma_emulate.h"
#include "kernels/polar_express.h"
#include "kernels/residual.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/transpose.h"
#include "trainer/backend.h"
#include "trainer/glue.h"

#define N_SCRATCH 12

// The subset of NCCL's C ABI the trainer uses (nccl.h, NCCL 2.x).
typedef struct {
    char internal[128];
} nccl_unique_id;
typedef struct nccl_comm *nccl_comm_t;
enum { NCCL_FLOAT32 = 7, NCCL_BFLOAT16 = 9, NCCL_SUM = 0 };

struct nccl_api {
    void *lib;
    int (*get_unique_id)(nccl_unique_id *);
    int (*comm_init_rank)(nccl_comm_t *, int, nccl_unique_id, int);
    int (*all_reduce)(const void *, void *, size_t, int, int, nccl_comm_t, cudaStream_t);
    const char *(*error_string)(int);
    int (*comm_destroy)(nccl_comm_t);
};

// A small device array of per-replica optimizer arguments and a host copy
// of what was last uploaded into it: the upload is queued only when the
// values change (the gradient scales once per step, not once per tensor).
struct device_args {
    void *dev;
    unsigned char *shadow;
    size_t bytes, cap;
};

struct cuda_impl {
    void *scratch[N_SCRATCH];
    size_t scratch_bytes[N_SCRATCH];
    int32_t *positions;          // t mod T for the position embedding, [n_positions]
    int64_t n_positions;
    float *rope_cos, *rope_sin, *rope_inv; // rotary tables for (rope_T, rope_D, rope_base)
    int64_t rope_T, rope_D;
    double rope_base;
    float *norm_out;             // one device float (gradient norm)
    nccl_api nccl;
    nccl_comm_t comm;
    int world;
    tbackend *loop;              // replicas: the loops over replicas (trainer/replicas.c) the batched forms fall back on
    float *replica_norms;        // replicas: device float[R] (gradient norms)
    device_args grad_scales;     // float[R]: the optimizers' gradient scales
    device_args skips;           // int32[R]: replicas whose step is skipped
    device_args seeds;           // uint64[R]: stochastic-rounding seeds of the current tensor
    device_args muon_steps;      // tglue_muon_replica[R]
    // fp8 weight cache (current scaling): a weight's quantised e4m3 image [N,K]
    // and its scale, per (weight slice, layout), valid while be->weights_version
    // is the one it was made at
    int cache_on;                // ULPSCOPE_FP8_WEIGHT_CACHE=0 turns it off
    struct fp8_image *images;
    int n_images, cap_images;
    kfp8_history *histories;     // fp8_scaling=delayed: tbackend_fp8_history_index's, their slots
    int64_t n_histories;         // in one device array (history_slots: n x KFP8_HISTORY_SLOTS floats)
    float *history_slots;
    float *saved_slots;          // fp8_histories_save's copy; saved_calls on the host; saved_n 0: the save
    int64_t *saved_calls;        // found no history yet
    int64_t saved_n;
    size_t saved_bytes;
    size_t lce_counted;          // klinear_ce's chunk buffers (the kernel's own) as counted in bytes_in_use
    // fp8 operand memo (current scaling, one replica): the quantised
    // activation and gradient operands of GEMMs, reused by a later GEMM that
    // reads the same tensor while nothing has written it
    uint64_t fence;              // bumped by the ops that may write memory no ktensor argument names (fenced<>)
    struct fp8_memo *memo;       // n_memo of them, at most FP8_MEMO_MAX
    int n_memo;
    int memo_next;               // the entry a miss evicts when all are valid and there is no room
    unsigned char *memo_wants_t; // per site (memo_site): a later GEMM read that site's operand transposed
    int64_t n_memo_sites;
    void *memo_flat;             // the one untransposed image (memo_flat_owner's), memo_flat_cap bytes
    size_t memo_flat_cap;
    int memo_flat_owner;         // the entry whose flat image memo_flat holds, or -1
    void *graph_stream;          // the capture's stream (blocking: ordered with the legacy stream the rest uses)
    kgraph *graph;               // the micro-batch's graph
    unsigned long long graph_frees; // kernels_free_count() when it was captured
};

struct fp8_image {
    const void *w;               // the weight (one replica's slice) it was made from
    ktensor src;                 // that weight as the GEMM got it (a graph replay requantises from it)
    int64_t N, K;
    int b_trans;
    prec_format x_format;
    uint64_t version;            // be->weights_version when it was made
    void *buf;                   // [N,K] e4m3, then the scale at fp8_scale_offset(N*K)
};

// One memo entry: src [rows, cols] (as the model holds it, in src_format)
// quantised from its x_format copy to fp8 by current scaling, untransposed
// (flat), transposed (t) or both, with their one scale; valid while the fence
// stands at epoch and no op has written over src.  buf: the transposed image
// (has_t), then the scale at a 256-byte boundary.  The flat image lives in
// the memo's one flat buffer while the entry owns it (memo_flat_owner): a
// flat image is read by the GEMMs right after it was made (the q, k and v
// GEMMs of one norm output, a dgrad), a transposed one often a whole forward
// later (a weight gradient), so only the transposed images are kept.
struct fp8_memo {
    const void *src;
    size_t src_bytes;
    prec_format src_format, x_format, fp8;
    int64_t rows, cols;
    int has_t;
    float *scale;                // in buf
    int64_t site;                // memo_site of the GEMM that made it
    uint64_t epoch;
    int valid;
    void *buf;
    size_t cap;
};
// Enough for every weight gradient's activation of a deep model (four a layer)
// with the gradients in flight; a miss beyond it evicts, round robin.
static const int FP8_MEMO_MAX = 1024;

// The scale after an image, 256-byte aligned as cuBLASLt wants scale pointers.
static size_t fp8_scale_offset(int64_t nk) { return ((size_t)nk + 255) / 256 * 256; }

static cuda_impl *impl_of(tbackend *be) { return (cuda_impl *)be->impl; }

static int kfail(tbackend *be, const tsite *at, const char *what)
{
    char name[64];
    tsite_name(at, name, sizeof name);
    return tbackend_fail(be, "%s: %s: %s", name, what, kernels_last_error());
}

static int cuda_check(tbackend *be, cudaError_t err, const char *what)
{
    if (err == cudaSuccess) return 0;
    return tbackend_fail(be, "cuda: %s: %s", what, cudaGetErrorString(err));
}

// host[0 .. bytes) on the device in a: the upload is queued on the kernels'
// stream (ordered before the launches that read it, after those that read
// the old values) when the values differ from the last ones.
static int device_copy(tbackend *be, device_args *a, const void *host, size_t bytes, const void **dev)
{
    if (bytes > a->cap) {
        unsigned char *shadow = (unsigned char *)realloc(a->shadow, bytes);
        if (!shadow) return tbackend_fail(be, "out of memory");
        a->shadow = shadow;
        kdevice_free(a->dev); // cudaFree waits for the launches that read it
        a->dev = nullptr;
        a->cap = a->bytes = 0;
        if (kdevice_alloc(&a->dev, bytes, "optimizer arguments")) return tbackend_fail(be, "%s", kernels_last_error());
        a->cap = bytes;
    }
    if (a->bytes != bytes || memcmp(a->shadow, host, bytes)) {
        // from pageable memory: staged before the call returns, so host may change afterwards
        if (cuda_check(be, cudaMemcpyAsync(a->dev, host, bytes, cudaMemcpyHostToDevice, (cudaStream_t)kernels_stream()),
                       "optimizer arguments upload"))
            return -1;
        memcpy(a->shadow, host, bytes);
        a->bytes = bytes;
    }
    *dev = a->dev;
    return 0;
}

static void device_args_free(device_args *a)
{
    kdevice_free(a->dev);
    free(a->shadow);
}

// ---- scratch and format conversion ----------------------------------------------------

static int scratch(tbackend *be, int idx, size_t bytes, void **out)
{
    cuda_impl *im = impl_of(be);
    if (bytes > im->scratch_bytes[idx]) {
        kdevice_free(im->scratch[idx]);
        im->scratch[idx] = nullptr;
        im->scratch_bytes[idx] = 0;
        if (kdevice_alloc(&im->scratch[idx], bytes, "trainer scratch"))
            return tbackend_fail(be, "%s", kernels_last_error());
        im->scratch_bytes[idx] = bytes;
        be->bytes_in_use += bytes;
        if (be->bytes_in_use > be->peak_bytes) be->peak_bytes = be->bytes_in_use;
    }
    *out = im->scratch[idx];
    return 0;
}

// t as a tensor of format f: itself, or a converted copy in scratch idx.
static int as_format(tbackend *be, int idx, const ktensor *t, prec_format f, ktensor *out)
{
    *out = *t;
    if (t->format == f && !t->scale) return 0;
    void *buf = nullptr;
    if (scratch(be, idx, (size_t)ktensor_numel(t) * kformat_bytes(f), &buf)) return -1;
    if (tglue_cast(buf, f, t->data, t->format, t->scale, ktensor_numel(t))) return tbackend_fail(be, "%s", kernels_last_error());
    out->data = buf;
    out->format = f;
    out->scale = nullptr;
    return 0;
}

// Where an op writes y in format f: y itself, or scratch idx (then out_end converts).
static int out_begin(tbackend *be, int idx, const ktensor *y, prec_format f, ktensor *out)
{
    *out = *y;
    if (y->format == f) return 0;
    void *buf = nullptr;
    if (scratch(be, idx, (size_t)ktensor_numel(y) * kformat_bytes(f), &buf)) return -1;
    out->data = buf;
    out->format = f;
    out->scale = nullptr;
    return 0;
}

static int out_end(tbackend *be, ktensor *y, const ktensor *written)
{
    if (written->data == y->data) return 0;
    if (tglue_cast(y->data, y->format, written->data, written->format, nullptr, ktensor_numel(y)))
        return tbackend_fail(be, "%s", kernels_last_error());
    return 0;
}

static prec_format path_fmt(const tsite *at) { return tpath_storage(at->path); }

// ---- what this backend runs --------------------------------------------------------------

static kmatmul_accum accum_of(top_id op)
{
    if (op == TOP_MATMUL_FAST) return KMATMUL_ACC_FAST;
    if (op == TOP_MATMUL_BLOCK_FP8) return KMATMUL_ACC_BLOCK_SCALED;
    return KMATMUL_ACC_DEFAULT;
}

// matmul_block_fp8's one variant (promote_128) is its fused kernel
static int matmul_variant(const tsite *at) { return at->op == TOP_MATMUL_BLOCK_FP8 ? KMATMUL_FUSED : at->variant; }

static kadamw_storage adamw_storage(const tbinding *b)
{
    switch ((tweights_variant)tbinding_site(b, TSLOT_WEIGHTS, -1)->variant) {
    case TWEIGHTS_SR: return KADAMW_STOCHASTIC;
    case TWEIGHTS_MANTISSA_BUFFER: return KADAMW_SPLIT_MASTER;
    default: return KADAMW_MASTER_FP32;
    }
}

static int cuda_supports(tbackend *be, const tbinding *b, const tsite *at, char *why, size_t len)
{
    if (!top_is_kernel(at->op)) return 0;
    if (at->op == TOP_MATMUL || at->op == TOP_MATMUL_FAST || at->op == TOP_MATMUL_BLOCK_FP8)
        return kmatmul_supports(at->path, accum_of(at->op), matmul_variant(at), why, len) ? 0 : -1;
    if (at->op == TOP_MATMUL_MMA) return 0; // every model the plan accepts runs in the fast emulation kernel
    if (at->op == TOP_ADAMW) return kadamw_supports(at->path, adamw_storage(b), why, len) ? 0 : -1;
    if (at->op == TOP_ATTENTION) return kattention_supports(at->path, at->variant, 0, why, len) ? 0 : -1; // flash_mma: no fp32
    return 0; // the registry's paths and variants, which tplan_validate checked
}

// ---- memory -----------------------------------------------------------------------------------

static size_t cuda_elem_bytes(prec_format f) { return kformat_bytes(f); }

static int cuda_alloc(tbackend *be, ktensor *t, prec_format f, int ndim, const int64_t *shape)
{
    if (ktensor_alloc(t, f, ndim, shape)) return tbackend_fail(be, "%s", kernels_last_error());
    be->bytes_in_use += ktensor_bytes(t);
    if (be->bytes_in_use > be->peak_bytes) be->peak_bytes = be->bytes_in_use;
    return 0;
}

static void cuda_release(tbackend *be, ktensor *t)
{
    be->bytes_in_use -= ktensor_bytes(t);
    ktensor_free(t);
}

static int cuda_alloc_raw(tbackend *be, void **ptr, size_t bytes)
{
    if (kdevice_alloc(ptr, bytes, "trainer buffer")) return tbackend_fail(be, "%s", kernels_last_error());
    be->bytes_in_use += bytes;
    if (be->bytes_in_use > be->peak_bytes) be->peak_bytes = be->bytes_in_use;
    return 0;
}

static void cuda_release_raw(tbackend *be, void *ptr) { kdevice_free(ptr); }

static int cuda_raw_upload(tbackend *be, void *dst, const void *src, size_t bytes)
{
    return kdevice_upload(dst, src, bytes, "trainer upload") ? tbackend_fail(be, "%s", kernels_last_error()) : 0;
}

static int cuda_raw_download(tbackend *be, void *dst, const void *src, size_t bytes)
{
    return kdevice_download(dst, src, bytes, "trainer download") ? tbackend_fail(be, "%s", kernels_last_error()) : 0;
}

static int cuda_upload(tbackend *be, ktensor *t, const double *values)
{
    return ktensor_upload(t, values) ? tbackend_fail(be, "%s", kernels_last_error()) : 0;
}

static int cuda_download(tbackend *be, const ktensor *t, double *values)
{
    return ktensor_download(t, values) ? tbackend_fail(be, "%s", kernels_last_error()) : 0;
}

// The device bytes are the storage encoding itself (little-endian).
static int cuda_read_bytes(tbackend *be, const ktensor *t, void *dst)
{
    size_t n = ktensor_bytes(t);
    if (cuda_raw_download(be, dst, t->data, n)) return -1;
    return t->scale ? cuda_raw_download(be, (char *)dst + n, t->scale, sizeof(float)) : 0;
}

static int cuda_write_bytes(tbackend *be, ktensor *t, const void *src)
{
    size_t n = ktensor_bytes(t);
    if (cuda_raw_upload(be, t->data, src, n)) return -1;
    return t->scale ? cuda_raw_upload(be, t->scale, (const char *)src + n, sizeof(float)) : 0;
}

static int cuda_zero(tbackend *be, ktensor *t)
{
    if (kdevice_fill_bytes(t->data, 0, ktensor_bytes(t), "trainer zero")) return tbackend_fail(be, "%s", kernels_last_error());
    return t->scale ? ktensor_set_scale(t, 1.0f) : 0;
}

static int cuda_fill_uniform(tbackend *be, ktensor *t, uint64_t seed, float lo, float hi)
{
    return ktensor_fill_uniform(t, seed, lo, hi) ? tbackend_fail(be, "%s", kernels_last_error()) : 0;
}

static int cuda_count_nonfinite(tbackend *be, const ktensor *t, int64_t *count)
{
    return tglue_count_nonfinite(t->data, t->format, ktensor_numel(t), count) ? tbackend_fail(be, "%s", kernels_last_error())
                                                                              : 0;
}

static int cuda_sync(tbackend *be)
{
    return kernels_sync("trainer step") ? tbackend_fail(be, "%s", kernels_last_error()) : 0;
}

static int cuda_mem_used(tbackend *be, size_t *bytes)
{
    size_t free_b = 0, total = 0;
    if (cuda_check(be, cudaMemGetInfo(&free_b, &total), "cudaMemGetInfo")) return -1;
    *bytes = total - free_b;
    return 0;
}

static int cuda_mem_available(tbackend *be, size_t *bytes, char *what, size_t what_len)
{
    size_t free_b = 0, total = 0;
    if (cuda_check(be, cudaMemGetInfo(&free_b, &total), "cudaMemGetInfo")) return -1;
    *bytes = free_b;
    snprintf(what, what_len, "the GPU's free memory (cudaMemGetInfo)");
    return 0;
}

// ---- matmul -----------------------------------------------------------------------------------

// The matrix-unit model of a matmul_mma site, or NULL with the backend's error set.
static const mma_model *mma_model_of(tbackend *be, const tsite *at)
{
    const char *fallback;
    char why[256], name[64];
    const mma_model *model = tplan_mma_model(at->slot, at->path, at->variant, &fallback, why, sizeof why);
    if (!model) {
        tsite_name(at, name, sizeof name);
        tbackend_fail(be, "%s: %s", name, why);
    }
    return model;
}

// The stored format the model reads its operands in (tf32: fp32 words).
static prec_format mma_load_format(const mma_model *model)
{
    return model->arith.in == PREC_TF32 ? PREC_FP32 : model->arith.in;
}

// matmul_mma: the generation's matrix-unit model on CUDA cores (kernels/mma_emulate.h),
// operands in the model's input format (tf32: fp32 words), y = round(fp32(D + y_old)).
static int cuda_matmul_mma(tbackend *be, const tsite *at, ktensor *y, const ktensor *a, int a_trans, const ktensor *b,
                           int b_trans, int64_t M, int64_t N, int64_t K, int accumulate)
{
    const mma_model *model = mma_model_of(be, at);
    if (!model) return -1;
    const prec_format load = mma_load_format(model);
    ktensor A, B;
    if (as_format(be, 0, a, load, &A) || as_format(be, 1, b, load, &B)) return -1;
    if (mma_emulate_linear(&model->arith, M, N, K, A.data, a_trans, B.data, b_trans, y->data, y->format, accumulate))
        return kfail(be, at, "matmul_mma");
    return 0;
}

// fp8_scaling=delayed: the amax history of (site, operand, replica), made on first use.
static int fp8_history(tbackend *be, const tsite *at, int operand, kfp8_history **out)
{
    cuda_impl *im = impl_of(be);
    int64_t n = tbackend_fp8_history_count(be);
    if (im->n_histories != n) { // first delayed GEMM (the plan's depth and replicas are fixed for a run)
        const size_t bytes = (size_t)n * KFP8_HISTORY_SLOTS * sizeof(float);
        if (im->n_histories) be->bytes_in_use -= (size_t)im->n_histories * KFP8_HISTORY_SLOTS * sizeof(float);
        kdevice_free(im->history_slots);
        free(im->histories);
        im->history_slots = nullptr;
        im->histories = (kfp8_history *)calloc((size_t)n, sizeof *im->histories);
        im->n_histories = 0;
        if (!im->histories) return tbackend_fail(be, "out of memory");
        if (kdevice_alloc((void **)&im->history_slots, bytes, "fp8 amax histories") ||
            kdevice_fill_bytes(im->history_slots, 0, bytes, "fp8 amax histories"))
            return tbackend_fail(be, "%s", kernels_last_error());
        for (int64_t i = 0; i < n; i++) im->histories[i].slots = im->history_slots + i * KFP8_HISTORY_SLOTS;
        im->n_histories = n;
        be->bytes_in_use += bytes;
        if (be->bytes_in_use > be->peak_bytes) be->peak_bytes = be->bytes_in_use;
    }
    kfp8_history *h = &im->histories[tbackend_fp8_history_index(be, at, operand)];
    h->frozen = be->fp8_frozen;
    *out = h;
    return 0;
}

// fp8_histories_save / restore (backend.h): one device copy of all the slots, the counts on the host.
static int cuda_fp8_histories_save(tbackend *be)
{
    cuda_impl *im = impl_of(be);
    const int64_t n = im->n_histories;
    const size_t bytes = (size_t)n * KFP8_HISTORY_SLOTS * sizeof(float);
    if (n && im->saved_n != n) {
        if (im->saved_slots) be->bytes_in_use -= im->saved_bytes;
        kdevice_free(im->saved_slots);
        free(im->saved_calls);
        im->saved_slots = nullptr;
        im->saved_bytes = 0;
        im->saved_n = 0;
        im->saved_calls = (int64_t *)malloc((size_t)n * sizeof *im->saved_calls);
        if (!im->saved_calls) return tbackend_fail(be, "out of memory");
        if (kdevice_alloc((void **)&im->saved_slots, bytes, "fp8 amax histories (saved)"))
            return tbackend_fail(be, "%s", kernels_last_error());
        im->saved_bytes = bytes;
        be->bytes_in_use += bytes;
        if (be->bytes_in_use > be->peak_bytes) be->peak_bytes = be->bytes_in_use;
    }
    im->saved_n = n;
    if (!n) return 0;
    if (kdevice_copy(im->saved_slots, im->history_slots, bytes, "fp8 amax histories (save)"))
        return tbackend_fail(be, "%s", kernels_last_error());
    for (int64_t i = 0; i < n; i++) im->saved_calls[i] = im->histories[i].calls;
    return 0;
}

static int cuda_fp8_histories_restore(tbackend *be)
{
    cuda_impl *im = impl_of(be);
    const int64_t n = im->n_histories;
    const size_t bytes = (size_t)n * KFP8_HISTORY_SLOTS * sizeof(float);
    if (!n) return 0;
    if (!im->saved_n) { // saved before any history existed: empty again
        if (kdevice_fill_bytes(im->history_slots, 0, bytes, "fp8 amax histories (restore)"))
            return tbackend_fail(be, "%s", kernels_last_error());
        for (int64_t i = 0; i < n; i++) im->histories[i].calls = 0;
        return 0;
    }
    if (im->saved_n != n) return tbackend_fail(be, "fp8 amax histories restored from a save of another size");
    if (kdevice_copy(im->history_slots, im->saved_slots, bytes, "fp8 amax histories (restore)"))
        return tbackend_fail(be, "%s", kernels_last_error());
    for (int64_t i = 0; i < n; i++) im->histories[i].calls = im->saved_calls[i];
    return 0;
}

static float *fp8_image_scale(const fp8_image *e) { return (float *)((char *)e->buf + fp8_scale_offset(e->N * e->K)); }

// The image from B, the weight's values in e->x_format: B [K,N] (b_trans = 0:
// transposed while quantising) or [N,K], into [N,K].
static int fp8_image_make(fp8_image *e, const void *B)
{
    return kfp8_quantize_tensor(B, e->x_format, e->b_trans ? e->N : e->K, e->b_trans ? e->K : e->N, !e->b_trans,
                                PREC_E4M3, e->buf, fp8_image_scale(e));
}

// Current scaling with B a weight (forward and dgrad GEMMs; never wgrad): B
// given from its cached e4m3 image, quantised here (the kernels' own
// quantiser, so the same bytes and scale as a per-call quantisation) when
// the weights changed since it was made.  b: the weight as the model holds
// it (the key); B: its values in x_format (what is quantised).  Anything
// else leaves *op for kmatmul_quantized_ex to quantise.
static int fp8_cached_weight(tbackend *be, const tsite *at, const ktensor *b, const ktensor *B, int b_trans,
                             prec_format x_format, int64_t N, int64_t K, kfp8_operand *op)
{
    cuda_impl *im = impl_of(be);
    if (!im->cache_on || tslot_get(at->slot)->gemm == TGEMM_WGRAD ||
        !tbackend_is_weight(be, b->data, (size_t)ktensor_numel(b) * kformat_bytes(b->format)))
        return 0;
    fp8_image *e = nullptr;
    for (int i = 0; i < im->n_images && !e; i++) {
        fp8_image *c = &im->images[i];
        if (c->w == b->data && c->N == N && c->K == K && c->b_trans == b_trans && c->x_format == x_format) e = c;
    }
    if (!e) {
        if (im->n_images == im->cap_images) {
            int cap = im->cap_images ? 2 * im->cap_images : 64;
            fp8_image *grown = (fp8_image *)realloc(im->images, (size_t)cap * sizeof *grown);
            if (!grown) return tbackend_fail(be, "out of memory");
            im->images = grown;
            im->cap_images = cap;
        }
        e = &im->images[im->n_images];
        memset(e, 0, sizeof *e);
        size_t bytes = fp8_scale_offset(N * K) + 256;
        if (kdevice_alloc(&e->buf, bytes, "fp8 weight cache")) return tbackend_fail(be, "%s", kernels_last_error());
        im->n_images++;
        be->bytes_in_use += bytes;
        if (be->bytes_in_use > be->peak_bytes) be->peak_bytes = be->bytes_in_use;
        e->w = b->data, e->N = N, e->K = K, e->b_trans = b_trans, e->x_format = x_format;
        e->src = *b;
        e->version = be->weights_version - 1; // not made yet
    }
    if (e->version != be->weights_version) {
        if (fp8_image_make(e, B->data)) return kfail(be, at, "fp8 weight cache");
        e->version = be->weights_version;
    }
    op->q = e->buf;
    op->scale = fp8_image_scale(e);
    return 0;
}

// The stale image of the same weight in the other layout (a forward GEMM
// reads W [N,K] as it is, its dgrad as W^T), or NULL.
static fp8_image *fp8_image_twin(cuda_impl *im, const fp8_image *e, uint64_t version)
{
    for (int i = 0; i < im->n_images; i++) {
        fp8_image *t = &im->images[i];
        if (t != e && t->w == e->w && t->b_trans != e->b_trans && t->N == e->K && t->K == e->N &&
            t->x_format == e->x_format && t->src.format == e->src.format && t->version != version)
            return t;
    }
    return nullptr;
}

// A CUDA graph replays its GEMMs without this backend's host logic, so the
// weight images they read are brought up to date eagerly before each replay
// (and before a capture, which then records no weight quantisation): every
// image whose weight changed since it was made and is still a weight.  A
// weight with both layouts cached is quantised into both in one pass (one
// amax and, for sides that are multiples of 64, one read of W): the bytes and
// scale of the two single passes.
static int fp8_weights_refresh(tbackend *be)
{
    cuda_impl *im = impl_of(be);
    const uint64_t now = be->weights_version;
    for (int i = 0; i < im->n_images; i++) {
        fp8_image *e = &im->images[i];
        const size_t bytes = (size_t)ktensor_numel(&e->src) * kformat_bytes(e->src.format);
        if (e->version == now || !tbackend_is_weight(be, e->w, bytes)) continue;
        ktensor B;
        if (as_format(be, 1, &e->src, e->x_format, &B)) return -1;
        // the untransposed image is the one with b_trans: W [N,K] read as [N,K]
        fp8_image *twin = fp8_image_twin(im, e, now);
        fp8_image *flat = twin && e->b_trans ? e : twin, *t = twin && e->b_trans ? twin : e;
        int rc = twin ? kfp8_quantize_tensor_dual(B.data, e->x_format, flat->N, flat->K, PREC_E4M3, flat->buf, t->buf,
                                                  fp8_image_scale(flat)) ||
                            kdevice_copy(fp8_image_scale(t), fp8_image_scale(flat), sizeof(float), "fp8 weight scale")
                      : fp8_image_make(e, B.data);
        if (rc) return tbackend_fail(be, "fp8 weight cache: %s", kernels_last_error());
        e->version = now;
        if (twin) twin->version = now;
    }
    return 0;
}

// ---- the fp8 operand memo ----------------------------------------------------------------------
//
// Current scaling quantises a GEMM's activation or gradient operand on every
// call: an amax pass and a quantise pass over it.  Three patterns read the
// same tensor again with nothing written over it in between: the forward's q,
// k and v GEMMs all read the norm's output; a gradient dY is read by its
// dgrad as [M,N] and then by its wgrad as [N,M]; and a forward GEMM's input X
// is read again, transposed, by its weight gradient in the backward.  The
// memo keeps those images: the q GEMM's is reused by k and v, and a GEMM
// whose operand a later GEMM asked for transposed (learnt at the first step)
// quantises it into both layouts in one pass (kfp8_quantize_tensor_dual) and
// keeps the transposed image for that reader.  The bytes and the scale are
// what the second call would have made itself (same tensor, same quantiser),
// so the bits of a run do not change (test_train_fp8 compares
// ULPSCOPE_FP8_MEMO=0).  The forward inputs kept for the weight gradients
// cost memory (on gpt2 d12 at batch 8, about 44 MB a layer: four [8192, C or
// 4C] images of a byte an element) for a step about 1 ms shorter
// (docs/results-experiments.md); ULPSCOPE_FP8_MEMO=lean keeps only the
// images read by the next GEMMs (q's by k and v, a dgrad's dY by its wgrad).
//
// An entry is valid while its source is unwritten: every op of the backend is
// wrapped (fenced<> below) so that each ktensor it may write (its non-const
// ktensor arguments) drops the entries whose source it overlaps, and an op
// that may write memory no ktensor names (an optimizer step, an allreduce, a
// raw upload, a graph) bumps the fence, which ends them all; a GEMM drops
// the entries its output overlaps.  One replica only: the replica loops
// interleave their calls (no entry would be hit).

static int memo_mixup_planted;
static int memo_blind_planted;
extern "C" void tbackend_cuda_plant_memo_blind(int on) { memo_blind_planted = on != 0; }
static int stale_graph_weights_planted;
extern "C" void tbackend_cuda_plant_stale_graph_weights(int on) { stale_graph_weights_planted = on != 0; }
extern "C" void tbackend_cuda_plant_memo_mixup(int on) { memo_mixup_planted = on != 0; }

static int memo_alive(const cuda_impl *im, const fp8_memo *e) { return e->valid && e->epoch == im->fence; }

static void memo_drop_overlapping(cuda_impl *im, const void *p, size_t bytes)
{
    const char *lo = (const char *)p, *hi = lo + bytes;
    for (int i = 0; i < im->n_memo; i++) {
        fp8_memo *e = &im->memo[i];
        const char *elo = (const char *)e->src, *ehi = elo + e->src_bytes;
        if (e->valid && lo < ehi && hi > elo) e->valid = 0;
    }
}

// A site's index in memo_wants_t.
static int64_t memo_site(const tbackend *be, const tsite *at)
{
    return (int64_t)at->slot * (be->bound.depth + 1) + (at->layer + 1);
}

static int memo_grow(tbackend *be, void **buf, size_t *cap, size_t need, const char *what)
{
    if (*cap >= need) return 0;
    kdevice_free(*buf);
    be->bytes_in_use -= *cap;
    *buf = nullptr;
    *cap = 0;
    if (kdevice_alloc(buf, need, what)) return tbackend_fail(be, "%s", kernels_last_error());
    *cap = need;
    be->bytes_in_use += need;
    if (be->bytes_in_use > be->peak_bytes) be->peak_bytes = be->bytes_in_use;
    return 0;
}

// The entry a miss fills: a dead one whose buffer is big enough (the
// smallest such, so that after the first step no buffer is regrown, which
// would free memory a CUDA graph uses), else any dead one, else a new one,
// else (FP8_MEMO_MAX) the next in turn.  An entry whose images are gone (its
// flat one overwritten, its transposed one served) stays alive until then: a
// transposed read of its source teaches its site to keep that layout.
static fp8_memo *memo_slot(tbackend *be, size_t need)
{
    cuda_impl *im = impl_of(be);
    fp8_memo *fit = nullptr, *spare = nullptr;
    for (int i = 0; i < im->n_memo; i++) {
        fp8_memo *e = &im->memo[i];
        if (memo_alive(im, e)) continue;
        if (e->cap >= need && (!fit || e->cap < fit->cap)) fit = e;
        if (!spare) spare = e;
    }
    if (fit) return fit;
    if (spare) return spare;
    if (!im->memo) {
        im->memo = (fp8_memo *)calloc(FP8_MEMO_MAX, sizeof *im->memo);
        if (!im->memo) return nullptr;
    }
    if (im->n_memo < FP8_MEMO_MAX) return &im->memo[im->n_memo++];
    fp8_memo *e = &im->memo[im->memo_next];
    im->memo_next = (im->memo_next + 1) % FP8_MEMO_MAX;
    return e;
}

// The fp8 image, [M,K] with K contiguous, of a GEMM operand t at `at` (its
// first, or its second: then [N,K]): t as the model holds it is [M,K] (trans
// 0) or [K,M] (trans 1), X its x-format copy (as_format'd here on a miss
// only).  From the memo where it has it; on a miss an untransposed image is
// made there (and both layouts where a later GEMM read this site's operand
// transposed), a transposed one is left to the GEMM (op empty: then
// kmatmul_quantized_ex quantises), as everything is when the memo is off.
static int fp8_memo_operand(tbackend *be, const tsite *at, const ktensor *t, int second, int trans, prec_format x,
                            prec_format fp8, int64_t M, int64_t K, kfp8_operand *op)
{
    cuda_impl *im = impl_of(be);
    if (be->fp8_memo == TFP8_MEMO_OFF || be->replicas != 1) return 0;
    const int64_t n_sites = (int64_t)TSLOT_COUNT * (be->bound.depth + 1);
    if (im->n_memo_sites != n_sites) {
        free(im->memo_wants_t);
        im->memo_wants_t = (unsigned char *)calloc((size_t)n_sites, 1);
        if (!im->memo_wants_t) return tbackend_fail(be, "out of memory");
        im->n_memo_sites = n_sites;
        for (int i = 0; i < im->n_memo; i++) im->memo[i].valid = 0; // their sites index the old array
    }
    const int64_t rows = trans ? K : M, cols = trans ? M : K;
    const size_t n = fp8_scale_offset(rows * cols);
    for (int i = 0; i < im->n_memo; i++) {
        fp8_memo *c = &im->memo[i];
        if (!memo_alive(im, c) || (c->src != t->data && !memo_mixup_planted) || c->src_format != t->format || c->x_format != x ||
            c->fp8 != fp8 || c->rows != rows || c->cols != cols)
            continue;
        const int has_flat = im->memo_flat_owner == i;
        if (trans ? c->has_t : has_flat) {
            op->q = trans ? c->buf : im->memo_flat;
            op->scale = c->scale;
            if (second) be->fp8_memo_b_hits++;
            else be->fp8_memo_hits++;
            // a transposed image has one reader (a weight gradient): once served, the
            // entry lets its buffer go to the next miss (which the stream orders after
            // this GEMM), so the images kept are those still awaited
            if (trans) c->has_t = 0;
            if (!c->has_t && !has_flat) c->valid = 0;
            return 0;
        }
        if (trans) im->memo_wants_t[c->site] = 1; // its maker quantises both layouts from now on
        else c->valid = 0;                         // remade below, both layouts if its site wants them
    }
    // A transposed image not in the memo has no later reader: the GEMM quantises it itself
    if (trans) return 0;
    const int keep_t = im->memo_wants_t[memo_site(be, at)];
    fp8_memo *e = memo_slot(be, (keep_t ? n : 0) + 256);
    if (!e) return tbackend_fail(be, "out of memory");
    if (im->memo_flat_owner == (int)(e - im->memo)) im->memo_flat_owner = -1;
    e->valid = 0;
    if (memo_grow(be, &e->buf, &e->cap, (keep_t ? n : 0) + 256, "fp8 operand memo") ||
        memo_grow(be, &im->memo_flat, &im->memo_flat_cap, n, "fp8 operand memo"))
        return -1;
    ktensor X;
    if (as_format(be, 0, t, x, &X)) return -1;
    float *scale = (float *)((char *)e->buf + (keep_t ? n : 0));
    int rc = keep_t ? kfp8_quantize_tensor_dual(X.data, x, rows, cols, fp8, im->memo_flat, e->buf, scale)
                    : kfp8_quantize_tensor(X.data, x, rows, cols, 0, fp8, im->memo_flat, scale);
    if (rc) return kfail(be, at, "fp8 operand memo");
    im->memo_flat_owner = (int)(e - im->memo);
    e->src = t->data;
    e->src_bytes = (size_t)ktensor_numel(t) * kformat_bytes(t->format);
    e->src_format = t->format, e->x_format = x, e->fp8 = fp8;
    e->rows = rows, e->cols = cols;
    e->has_t = keep_t;
    e->scale = scale;
    e->site = memo_site(be, at);
    e->epoch = im->fence;
    e->valid = 1;
    op->q = im->memo_flat;
    op->scale = scale;
    return 0;
}

static void fp8_memo_free(tbackend *be)
{
    cuda_impl *im = impl_of(be);
    for (int i = 0; i < im->n_memo; i++) {
        kdevice_free(im->memo[i].buf);
        be->bytes_in_use -= im->memo[i].cap;
    }
    kdevice_free(im->memo_flat);
    be->bytes_in_use -= im->memo_flat_cap;
    im->memo_flat = nullptr;
    im->memo_flat_cap = 0;
    im->memo_flat_owner = -1;
    free(im->memo);
    im->memo = nullptr;
    im->n_memo = 0;
    free(im->memo_wants_t);
    im->memo_wants_t = nullptr;
}

static int cuda_matmul(tbackend *be, const tsite *at, ktensor *y, const ktensor *a, int a_trans, const ktensor *b,
                       int b_trans, int accumulate)
{
    kpath path = at->path;
    kmatmul_accum accum = accum_of(at->op);
    int variant = matmul_variant(at);
    int64_t M = a_trans ? a->shape[1] : a->shape[0], K = a_trans ? a->shape[0] : a->shape[1];
    int64_t N = b_trans ? b->shape[0] : b->shape[1];
    int y_fp32 = y->format == PREC_FP32 && (path == KPATH_BF16 || path == KPATH_FP16);
    char name[64];
    tsite_name(at, name, sizeof name);
    if ((y->format != tpath_storage(path) && !y_fp32) || y->shape[0] != M || y->shape[1] != N)
        return tbackend_fail(be, "%s: output %lldx%lld %s, expected %lldx%lld %s", name,
                             (long long)y->shape[0], (long long)y->shape[1], prec_format_name(y->format), (long long)M,
                             (long long)N, prec_format_name(tpath_storage(path)));
    memo_drop_overlapping(impl_of(be), y->data, (size_t)ktensor_numel(y) * kformat_bytes(y->format));
    if (at->op == TOP_MATMUL_MMA) return cuda_matmul_mma(be, at, y, a, a_trans, b, b_trans, M, N, K, accumulate);
    kmatmul_args args;
    memset(&args, 0, sizeof args);
    args.M = M, args.N = N, args.K = K;
    args.a_trans = a_trans, args.b_trans = b_trans;
    args.y = y->data;
    args.c = accumulate ? y->data : nullptr;
    args.alpha = 1.0f;
    args.beta = accumulate ? 1.0f : 0.0f;
    args.y_fp32 = y_fp32;
    ktensor A, B;
    if (path != KPATH_FP8) {
        prec_format f = tpath_storage(path);
        if (as_format(be, 0, a, f, &A) || as_format(be, 1, b, f, &B)) return -1;
        args.a = A.data, args.b = B.data;
        if (kmatmul(path, accum, variant, &args)) return kfail(be, at, "matmul");
        return 0;
    }
    // fp8: both operands handed over in one format (fp32 if both are, else bf16) and quantised inside
    // (the first from the memo where it has it: then A is never converted)
    prec_format x = a->format == PREC_FP32 && b->format == PREC_FP32 ? PREC_FP32 : PREC_BF16;
    prec_format a_fp8 = tpath_operand(path, tslot_is_gradient_gemm(at->slot));
    kfp8_operand a_op, b_op;
    memset(&a_op, 0, sizeof a_op);
    memset(&b_op, 0, sizeof b_op);
    const int delayed = tbackend_fp8_delayed(be, at);
    const int memo = accum != KMATMUL_ACC_BLOCK_SCALED && !delayed;
    if (memo && fp8_memo_operand(be, at, a, 0, a_trans, x, a_fp8, M, K, &a_op)) return -1;
    // the second operand too where it is a weight gradient's activation, B = X [K,N] (its image [N,K]):
    // looked up only (a transposed image is never made for one reader)
    const int b_memo = memo && !b_trans && be->fp8_memo == TFP8_MEMO_INPUTS &&
                       !tbackend_is_weight(be, b->data, (size_t)ktensor_numel(b) * kformat_bytes(b->format));
    if (b_memo && fp8_memo_operand(be, at, b, 1, !b_trans, x, PREC_E4M3, N, K, &b_op)) return -1;
    if ((!a_op.q && as_format(be, 0, a, x, &A)) || (!b_op.q && as_format(be, 1, b, x, &B))) return -1;
    args.a = a_op.q ? nullptr : A.data, args.b = b_op.q ? nullptr : B.data;
    if (accum == KMATMUL_ACC_BLOCK_SCALED) {
        if (kmatmul_quantized(accum, variant, &args, x, a_fp8, PREC_E4M3)) return kfail(be, at, "fp8 matmul");
        return 0;
    }
    if (delayed) {
        if (fp8_history(be, at, 0, &a_op.history) || fp8_history(be, at, 1, &b_op.history)) return -1;
    } else if (!b_op.q && fp8_cached_weight(be, at, b, &B, b_trans, x, N, K, &b_op)) {
        return -1;
    }
    if (kmatmul_quantized_ex(accum, variant, &args, x, a_fp8, PREC_E4M3, &a_op, &b_op)) return kfail(be, at, "fp8 matmul");
    return 0;
}

// ---- norms ------------------------------------------------------------------------------------

static int cuda_norm_fwd(tbackend *be, const tsite *at, ktensor *y, ktensor *mean, ktensor *rstd, const ktensor *x,
                         const ktensor *gain, const ktensor *bias, double eps)
{
    prec_format f = path_fmt(at);
    ktensor X, G, Bb, Y;
    if (as_format(be, 0, x, f, &X) || (gain && as_format(be, 1, gain, f, &G)) || (bias && as_format(be, 2, bias, f, &Bb)) ||
        out_begin(be, 3, y, f, &Y))
        return -1;
    int rc = at->op == TOP_LAYERNORM
                 ? klayernorm_forward(&Y, (float *)mean->data, (float *)rstd->data, &X, gain ? &G : nullptr,
                                      bias ? &Bb : nullptr, (float)eps, at->variant)
                 : krmsnorm_forward(&Y, (float *)rstd->data, &X, gain ? &G : nullptr, (float)eps, at->variant);
    if (rc) return kfail(be, at, "norm forward");
    return out_end(be, y, &Y);
}

static int cuda_norm_bwd(tbackend *be, const tsite *at, ktensor *dx, ktensor *dgain, ktensor *dbias, const ktensor *dy,
                         const ktensor *x, const ktensor *gain, const ktensor *mean, const ktensor *rstd)
{
    prec_format f = path_fmt(at);
    ktensor DY, X, G, DX, DG, DB;
    if (as_format(be, 0, dy, f, &DY) || as_format(be, 1, x, f, &X) || (gain && as_format(be, 2, gain, f, &G)) ||
        out_begin(be, 3, dx, f, &DX))
        return -1;
    // the kernels write dgain/dbias in the path's format; the model accumulates them
    void *buf = nullptr;
    if (dgain) {
        if (scratch(be, 4, (size_t)ktensor_numel(dgain) * kformat_bytes(f), &buf)) return -1;
        DG = *dgain, DG.data = buf, DG.format = f;
    }
    if (dbias) {
        if (scratch(be, 5, (size_t)ktensor_numel(dbias) * kformat_bytes(f), &buf)) return -1;
        DB = *dbias, DB.data = buf, DB.format = f;
    }
    int rc = at->op == TOP_LAYERNORM
                 ? klayernorm_backward(&DX, dgain ? &DG : nullptr, dbias ? &DB : nullptr, &DY, &X, gain ? &G : nullptr,
                                       (const float *)mean->data, (const float *)rstd->data, at->variant)
                 : krmsnorm_backward(&DX, dgain ? &DG : nullptr, &DY, &X, gain ? &G : nullptr,
                                     (const float *)rstd->data, at->variant);
    if (rc) return kfail(be, at, "norm backward");
    if (out_end(be, dx, &DX)) return -1;
    if (dgain && tglue_add(dgain->data, dgain->format, DG.data, f, ktensor_numel(dgain))) return kfail(be, at, "dgain");
    if (dbias && tglue_add(dbias->data, dbias->format, DB.data, f, ktensor_numel(dbias))) return kfail(be, at, "dbias");
    return 0;
}

// ---- embedding --------------------------------------------------------------------------------

static int positions_for(tbackend *be, int B, int T)
{
    cuda_impl *im = impl_of(be);
    int64_t n = (int64_t)B * T;
    if (im->n_positions == n && im->positions) return 0;
    kdevice_free(im->positions);
    im->positions = nullptr;
    int32_t *host = (int32_t *)malloc((size_t)n * sizeof *host);
    if (!host) return tbackend_fail(be, "out of memory");
    for (int64_t i = 0; i < n; i++) host[i] = (int32_t)(i % T);
    int rc = kdevice_alloc((void **)&im->positions, (size_t)n * sizeof *host, "positions") ||
             kdevice_upload(im->positions, host, (size_t)n * sizeof *host, "positions");
    free(host);
    if (rc) return tbackend_fail(be, "%s", kernels_last_error());
    im->n_positions = n;
    return 0;
}

static int cuda_embedding_fwd(tbackend *be, ktensor *x, const int32_t *tokens, const ktensor *wte, const ktensor *wpe,
                              int B, int T)
{
    const tsite *at = tbackend_site(be, TSLOT_EMBEDDING, -1);
    prec_format f = path_fmt(at);
    int v = at->variant;
    ktensor W, X, P, WP;
    if (as_format(be, 0, wte, f, &W) || out_begin(be, 1, x, f, &X)) return -1;
    if (kembedding_forward(&X, &W, tokens, v)) return kfail(be, at, "token lookup");
    if (wpe) {
        // + the learned position rows, one fp32 add rounded into the path's format
        void *buf = nullptr;
        if (positions_for(be, B, T) || as_format(be, 2, wpe, f, &WP) ||
            scratch(be, 3, (size_t)ktensor_numel(x) * kformat_bytes(f), &buf))
            return -1;
        P = X, P.data = buf;
        if (kembedding_forward(&P, &WP, impl_of(be)->positions, v)) return kfail(be, at, "position lookup");
        if (kresidual_forward(&X, &X, &P, KRESIDUAL_VECTOR)) return kfail(be, at, "position add");
    }
    return out_end(be, x, &X);
}

// The backward runs in the gradients' format: per-row fp32 sums added into them.
static int cuda_embedding_bwd(tbackend *be, ktensor *dwte, ktensor *dwpe, const ktensor *dx, const int32_t *tokens,
                              int B, int T)
{
    const tsite *at = tbackend_site(be, TSLOT_EMBEDDING, -1);
    int v = at->variant;
    ktensor DX;
    if (as_format(be, 0, dx, dwte->format, &DX)) return -1;
    int64_t n = (int64_t)B * T;
    size_t ws = kembedding_backward_workspace(n, dwte->shape[0], v);
    void *buf = nullptr;
    if (ws && scratch(be, 1, ws, &buf)) return -1;
    if (kembedding_backward(dwte, &DX, tokens, buf, ws, v)) return kfail(be, at, "token scatter");
    if (dwpe) {
        ws = kembedding_backward_workspace(n, dwpe->shape[0], v);
        if ((ws && scratch(be, 1, ws, &buf)) || positions_for(be, B, T)) return -1;
        if (kembedding_backward(dwpe, &DX, impl_of(be)->positions, buf, ws, v)) return kfail(be, at, "position scatter");
    }
    return 0;
}

// ---- attention ---------------------------------------------------------------------------------

// [B,T,H,D] tensor t into scratch idx as [B,H,T,D] in format f.
static int to_bhtd(tbackend *be, int idx, const ktensor *t, prec_format f, int B, int T, int H, void **out)
{
    int64_t D = t->shape[1] / H;
    if (scratch(be, idx, (size_t)ktensor_numel(t) * kformat_bytes(f), out)) return -1;
    if (tglue_permute_heads(*out, f, t->data, t->format, B, T, H, D, 1)) return tbackend_fail(be, "%s", kernels_last_error());
    return 0;
}

static int from_bhtd(tbackend *be, ktensor *t, const void *src, prec_format f, int B, int T, int H)
{
    int64_t D = t->shape[1] / H;
    if (tglue_permute_heads(t->data, t->format, src, f, B, T, H, D, 0)) return tbackend_fail(be, "%s", kernels_last_error());
    return 0;
}

static int attention_shape(tbackend *be, const ktensor *q, int H)
{
    int64_t D = q->shape[1] / H;
    if (D > KATT_MAX_D) return tbackend_fail(be, "slot attention: head dimension %lld exceeds the kernel's %d",
                                             (long long)D, KATT_MAX_D);
    return 0;
}

// Every tensor of the attention slot is a [B*T, H*D] matrix: the heads' rows
// for the kernels that take them where they are (kattention_takes_rows).
static katt_rows bthd_rows(const ktensor *q, int H)
{
    const int64_t C = q->shape[1];
    return katt_rows{H, C, C};
}

static int cuda_attention_fwd(tbackend *be, const tsite *at, ktensor *y, ktensor *lse, const ktensor *q, const ktensor *k,
                              const ktensor *v, int B, int T, int H)
{
    prec_format f = path_fmt(at);
    kpath path = at->path;
    int64_t D = q->shape[1] / H;
    if (attention_shape(be, q, H)) return -1;
    if (kattention_takes_rows(at->variant)) { // in place, converted only when stored in another format
        ktensor Q, K, V, Y;
        const katt_rows rows = bthd_rows(q, H);
        if (as_format(be, 0, q, f, &Q) || as_format(be, 1, k, f, &K) || as_format(be, 2, v, f, &V) ||
            out_begin(be, 3, y, f, &Y))
            return -1;
        if (kattention_forward_rows(path, at->variant, (int64_t)B * H, T, D, &rows, 1.0f / sqrtf((float)D), Q.data,
                                    K.data, V.data, Y.data, (float *)lse->data))
            return kfail(be, at, "attention forward");
        return out_end(be, y, &Y);
    }
    void *Q = nullptr, *K = nullptr, *V = nullptr, *O = nullptr;
    if (to_bhtd(be, 0, q, f, B, T, H, &Q) || to_bhtd(be, 1, k, f, B, T, H, &K) ||
        to_bhtd(be, 2, v, f, B, T, H, &V) || scratch(be, 3, (size_t)ktensor_numel(y) * kformat_bytes(f), &O))
        return -1;
    if (kattention_forward(path, at->variant, (int64_t)B * H, T, D, 1.0f / sqrtf((float)D), Q, K, V, O,
                           (float *)lse->data))
        return kfail(be, at, "attention forward");
    return from_bhtd(be, y, O, f, B, T, H);
}

static int cuda_attention_bwd(tbackend *be, const tsite *at, ktensor *dq, ktensor *dk, ktensor *dv, const ktensor *dy,
                              const ktensor *q, const ktensor *k, const ktensor *v, const ktensor *y,
                              const ktensor *lse, int B, int T, int H)
{
    prec_format f = path_fmt(at);
    kpath path = at->path;
    int64_t D = q->shape[1] / H;
    if (attention_shape(be, q, H)) return -1;
    if (kattention_takes_rows(at->variant)) { // in place, converted only when stored in another format
        ktensor Q, K, V, Y, DY, DQ, DK, DV;
        const katt_rows rows = bthd_rows(q, H);
        if (as_format(be, 0, q, f, &Q) || as_format(be, 1, k, f, &K) || as_format(be, 2, v, f, &V) ||
            as_format(be, 3, y, f, &Y) || as_format(be, 4, dy, f, &DY) || out_begin(be, 5, dq, f, &DQ) ||
            out_begin(be, 6, dk, f, &DK) || out_begin(be, 7, dv, f, &DV))
            return -1;
        if (kattention_backward_rows(path, at->variant, (int64_t)B * H, T, D, &rows, 1.0f / sqrtf((float)D), Q.data,
                                     K.data, V.data, Y.data, DY.data, (const float *)lse->data, DQ.data, DK.data,
                                     DV.data))
            return kfail(be, at, "attention backward");
        if (out_end(be, dq, &DQ) || out_end(be, dk, &DK) || out_end(be, dv, &DV)) return -1;
        return 0;
    }
    size_t bytes = (size_t)ktensor_numel(q) * kformat_bytes(f);
    void *Q = nullptr, *K = nullptr, *V = nullptr, *O = nullptr, *dO = nullptr, *dQ = nullptr, *dK = nullptr, *dV = nullptr;
    if (to_bhtd(be, 0, q, f, B, T, H, &Q) || to_bhtd(be, 1, k, f, B, T, H, &K) ||
        to_bhtd(be, 2, v, f, B, T, H, &V) || to_bhtd(be, 3, y, f, B, T, H, &O) || to_bhtd(be, 4, dy, f, B, T, H, &dO) ||
        scratch(be, 5, bytes, &dQ) || scratch(be, 6, bytes, &dK) || scratch(be, 7, bytes, &dV))
        return -1;
    if (kattention_backward(path, at->variant, (int64_t)B * H, T, D, 1.0f / sqrtf((float)D), Q, K, V, O, dO,
                            (const float *)lse->data, dQ, dK, dV))
        return kfail(be, at, "attention backward");
    if (from_bhtd(be, dq, dQ, f, B, T, H) || from_bhtd(be, dk, dK, f, B, T, H) || from_bhtd(be, dv, dV, f, B, T, H))
        return -1;
    return 0;
}

// ---- rope ----------------------------------------------------------------------------------------

static int rope_tables(tbackend *be, int64_t T, int64_t D, double base, krope_tables *tab)
{
    cuda_impl *im = impl_of(be);
    if (!(im->rope_cos && im->rope_T == T && im->rope_D == D && im->rope_base == base)) {
        kdevice_free(im->rope_cos), kdevice_free(im->rope_sin), kdevice_free(im->rope_inv);
        im->rope_cos = im->rope_sin = im->rope_inv = nullptr;
        int64_t half = D / 2;
        float *c = (float *)malloc((size_t)(T * half) * sizeof(float)), *sn = (float *)malloc((size_t)(T * half) * sizeof(float));
        float *inv = (float *)malloc((size_t)half * sizeof(float));
        int rc = !c || !sn || !inv;
        if (!rc) {
            krope_tables_host(c, sn, inv, T, D, base);
            rc = kdevice_alloc((void **)&im->rope_cos, (size_t)(T * half) * sizeof(float), "rope") ||
                 kdevice_alloc((void **)&im->rope_sin, (size_t)(T * half) * sizeof(float), "rope") ||
                 kdevice_alloc((void **)&im->rope_inv, (size_t)half * sizeof(float), "rope") ||
                 kdevice_upload(im->rope_cos, c, (size_t)(T * half) * sizeof(float), "rope") ||
                 kdevice_upload(im->rope_sin, sn, (size_t)(T * half) * sizeof(float), "rope") ||
                 kdevice_upload(im->rope_inv, inv, (size_t)half * sizeof(float), "rope");
        }
        free(c), free(sn), free(inv);
        if (rc) return tbackend_fail(be, "slot rope: tables: %s", kernels_last_error());
        im->rope_T = T, im->rope_D = D, im->rope_base = base;
    }
    tab->cos_t = im->rope_cos, tab->sin_t = im->rope_sin, tab->inv_freq = im->rope_inv, tab->T = T;
    return 0;
}

// x [B*T, H*D] viewed as the kernel's (N, H, D)
static ktensor heads_view(const ktensor *t, int H)
{
    ktensor v = *t;
    v.ndim = 3;
    v.shape[2] = t->shape[1] / H;
    v.shape[1] = H;
    return v;
}

static int rope_apply(tbackend *be, const tsite *at, ktensor *y, const ktensor *x, int T, int H, double theta, int backward)
{
    prec_format f = path_fmt(at);
    krope_tables tab;
    ktensor X, Y;
    if (rope_tables(be, T, x->shape[1] / H, theta, &tab) || as_format(be, 0, x, f, &X) || out_begin(be, 1, y, f, &Y))
        return -1;
    ktensor X3 = heads_view(&X, H), Y3 = heads_view(&Y, H);
    int rc = backward ? krope_backward(&Y3, &X3, &tab, at->variant) : krope_forward(&Y3, &X3, &tab, at->variant);
    if (rc) return kfail(be, at, backward ? "rope backward" : "rope forward");
    return out_end(be, y, &Y);
}

static int cuda_rope_fwd(tbackend *be, const tsite *at, ktensor *y, const ktensor *x, int B, int T, int H, double theta)
{
    return rope_apply(be, at, y, x, T, H, theta, 0);
}

static int cuda_rope_bwd(tbackend *be, const tsite *at, ktensor *dx, const ktensor *dy, int B, int T, int H, double theta)
{
    return rope_apply(be, at, dx, dy, T, H, theta, 1);
}

// ---- activation, residual, transpose ------------------------------------------------------------

static int cuda_activation_fwd(tbackend *be, const tsite *at, ktensor *y, ktensor *g, const ktensor *x)
{
    prec_format f = path_fmt(at);
    ktensor X, Y, G;
    if (as_format(be, 0, x, f, &X) || out_begin(be, 1, y, f, &Y) || (g && out_begin(be, 2, g, f, &G))) return -1;
    int v = at->variant;
    int rc = at->op == TOP_GELU_TANH ? kgelu_tanh_forward(&Y, &X, v) : krelu2_forward(&Y, g ? &G : nullptr, &X, v);
    if (rc) return kfail(be, at, "activation forward");
    if (out_end(be, y, &Y) || (g && out_end(be, g, &G))) return -1;
    return 0;
}

static int cuda_activation_bwd(tbackend *be, const tsite *at, ktensor *dx, const ktensor *dy, const ktensor *x,
                               const ktensor *g)
{
    prec_format f = path_fmt(at);
    ktensor DY, S, DX;
    if (as_format(be, 0, dy, f, &DY) || as_format(be, 1, g ? g : x, f, &S) || out_begin(be, 2, dx, f, &DX)) return -1;
    int v = at->variant;
    int rc = at->op == TOP_GELU_TANH ? kgelu_tanh_backward(&DX, &DY, &S, v) : krelu2_backward(&DX, &DY, &S, v);
    if (rc) return kfail(be, at, "activation backward");
    return out_end(be, dx, &DX);
}

static int cuda_residual(tbackend *be, const tsite *at, ktensor *y, const ktensor *a, const ktensor *b)
{
    prec_format f = path_fmt(at);
    ktensor A, B, Y;
    if (as_format(be, 0, a, f, &A) || as_format(be, 1, b, f, &B) || out_begin(be, 2, y, f, &Y)) return -1;
    if (kresidual_forward(&Y, &A, &B, at->variant)) return kfail(be, at, "residual add");
    return out_end(be, y, &Y);
}

static int cuda_transpose(tbackend *be, const tsite *at, ktensor *out, const ktensor *in, int accumulate)
{
    int v = at->variant;
    if (!accumulate) {
        // an exact copy, in the destination's (the working weights') format
        ktensor I;
        if (as_format(be, 0, in, out->format, &I)) return -1;
        if (ktranspose_copy(out, &I, v)) return kfail(be, at, "transpose copy");
        return 0;
    }
    prec_format f = path_fmt(at);
    ktensor I, O;
    if (as_format(be, 0, in, f, &I) || as_format(be, 1, out, f, &O)) return -1; // O starts from out's values
    if (ktranspose_add(&O, &I, v)) return kfail(be, at, "transpose add");
    return out_end(be, out, &O);
}

// ---- cross-entropy, gradient norm -----------------------------------------------------------------

static int cuda_cross_entropy(tbackend *be, const tsite *at, ktensor *losses, ktensor *dlogits, const ktensor *logits,
                              const int32_t *targets, double softcap, const double *dloss)
{
    kpath path = at->path;
    int v = at->variant;
    prec_format lf = kce_logits_format(path, v);
    ktensor L, DL;
    if (as_format(be, 0, logits, lf, &L) || (dlogits && out_begin(be, 1, dlogits, lf, &DL))) return -1;
    if (kce_forward_backward(path, v, logits->shape[0], logits->shape[1], L.data, targets, (float *)losses->data,
                             dlogits ? DL.data : nullptr, dloss ? (float)*dloss : 0.0f, (float)softcap))
        return kfail(be, at, "cross-entropy");
    return dlogits ? out_end(be, dlogits, &DL) : 0;
}

// The fused head: klinear_ce on h and W in the path's format, dh through a
// scratch when its tensor is stored otherwise.  The kernel keeps its chunk
// buffers between calls; what they grew by is counted here as this backend's
// memory (peak_bytes), as the scratch buffers are.
static int cuda_linear_cross_entropy(tbackend *be, const tsite *at, ktensor *losses, ktensor *dh, ktensor *dW,
                                     const ktensor *h, const ktensor *W, const int32_t *targets, const double *dloss)
{
    cuda_impl *im = impl_of(be);
    prec_format f = path_fmt(at);
    ktensor H, Wf, DH = {};
    if (as_format(be, 0, h, f, &H) || as_format(be, 1, W, f, &Wf) || (dh && out_begin(be, 2, dh, f, &DH))) return -1;
    if (dW && dW->format != PREC_FP32) return tbackend_fail(be, "slot cross_entropy: linear_cross_entropy writes dW in fp32");
    if (klinear_ce(at->path, at->variant, h->shape[0], h->shape[1], W->shape[0], H.data, Wf.data, targets,
                   (float *)losses->data, dh ? DH.data : nullptr, dW ? (float *)dW->data : nullptr,
                   dloss ? (float)*dloss : 0.0f))
        return kfail(be, at, "linear cross-entropy");
    const size_t ws = klinear_ce_workspace_bytes();
    if (ws > im->lce_counted) {
        be->bytes_in_use += ws - im->lce_counted;
        im->lce_counted = ws;
        if (be->bytes_in_use > be->peak_bytes) be->peak_bytes = be->bytes_in_use;
    }
    return dh ? out_end(be, dh, &DH) : 0;
}

static int cuda_grad_norm(tbackend *be, const tsite *at, tparam *const *params, int n, double *norm)
{
    cuda_impl *im = impl_of(be);
    int v = at->variant;
    ktensor *grads = (ktensor *)malloc((size_t)n * sizeof *grads);
    if (!grads) return tbackend_fail(be, "out of memory");
    for (int i = 0; i < n; i++) grads[i] = params[i]->grad;
    size_t ws = kgrad_norm_workspace(grads, n, v);
    void *buf = nullptr;
    int rc = (ws && scratch(be, 0, ws, &buf)) ? -1 : 0;
    if (!rc && !im->norm_out && kdevice_alloc((void **)&im->norm_out, sizeof(float), "grad norm"))
        rc = tbackend_fail(be, "%s", kernels_last_error());
    if (!rc && kgrad_norm(im->norm_out, grads, n, buf, ws, v)) rc = kfail(be, at, "gradient norm");
    free(grads);
    float h = 0.0f;
    if (!rc && cuda_raw_download(be, &h, im->norm_out, sizeof h)) rc = -1;
    *norm = h;
    return rc;
}

// ---- optimizers -------------------------------------------------------------------------------------

// The gradient scale goes into the update kernel when the gradients are
// stored in the path's format: it rounds g s into that format as the
// in-place scaling pass did (fp32 gradients: fp32(g s)).  Gradients that
// need a conversion are scaled in their own format first, then converted.
// The fp32 path with a narrower working copy updates the fp32 master and
// writes the working copy (its RNE image) in the same kernel.
static int cuda_adamw(tbackend *be, tparam *p, const tadamw_args *a)
{
    const tsite *at = tbackend_site(be, TSLOT_ADAMW, -1);
    kpath path = at->path;
    kadamw_storage storage = adamw_storage(&be->bound);
    int64_t n = ktensor_numel(&p->w);
    const int fused_scale = p->grad.format == tpath_storage(path) && !p->grad.scale;
    kadamw_replicas rep;
    memset(&rep, 0, sizeof rep);
    if (a->grad_scale != 1.0) {
        const float s = (float)a->grad_scale;
        if (fused_scale) {
            if (device_copy(be, &impl_of(be)->grad_scales, &s, sizeof s, (const void **)&rep.grad_scale)) return -1;
        } else if (tglue_scale(p->grad.data, p->grad.format, n, s)) {
            return kfail(be, at, "gradient scale");
        }
    }
    ktensor G;
    if (as_format(be, 0, &p->grad, tpath_storage(path), &G)) return -1;
    kadamw_hparams h = {(float)a->lr, (float)a->beta1, (float)a->beta2, (float)a->eps,
                        p->decay ? (float)a->weight_decay : 0.0f, a->step, a->seed};
    int rc;
    if (path == KPATH_FP32 && p->master.data) {
        rep.working = p->w.data;
        rep.working_format = p->w.format;
        rc = kadamw_step_replicas(KPATH_FP32, KADAMW_MASTER_FP32, at->variant, 1, n, p->master.data, nullptr, nullptr,
                                  (float *)p->m.data, (float *)p->v.data, G.data, &h, &rep);
    } else {
        rc = kadamw_step_replicas(path, storage, at->variant, 1, n, p->w.data, (float *)p->master.data,
                                  (uint16_t *)p->lowbits, (float *)p->m.data, (float *)p->v.data, G.data, &h, &rep);
    }
    return rc ? kfail(be, at, "adamw") : 0;
}

static int cuda_muon(tbackend *be, tparam *p, const tmuon_args *a)
{
    const tsite *at = tbackend_site(be, TSLOT_MUON, -1);
    kpath path = at->path;
    prec_format f = tpath_storage(path);
    kpe_coeffs which = at->op == TOP_MUON_NEWTON_SCHULZ ? KPE_MUON_QUINTIC : KPE_POLAR_EXPRESS;
    int64_t block = (int64_t)p->rows * p->cols;
    float scale = sqrtf(fmaxf(1.0f, (float)p->rows / (float)p->cols));
    int sr = tbackend_site(be, TSLOT_WEIGHTS, -1)->variant == TWEIGHTS_SR && p->w.format != PREC_FP32;
    void *U = nullptr;
    if (scratch(be, 0, (size_t)block * kformat_bytes(f), &U)) return -1;
    size_t we = kformat_bytes(p->w.format), ge = kformat_bytes(p->grad.format);
    for (int b = 0; b < p->blocks; b++) {
        int64_t off = (int64_t)b * block;
        if (tglue_muon_momentum((float *)p->m.data + off, (const char *)p->grad.data + off * ge, p->grad.format, block,
                                (float)a->momentum, (float)a->grad_scale, U, f))
            return kfail(be, at, "momentum");
        if (kpolar_express(path, at->variant, which, p->rows, p->cols, U, U))
            return kfail(be, at, "polar express");
        if (tglue_weight_update((char *)p->w.data + off * we, p->w.format,
                                p->master.data ? (float *)p->master.data + off : nullptr,
                                p->lowbits ? (uint16_t *)p->lowbits + off : nullptr, sr, a->seed, U, f, block,
                                (float)a->lr, p->decay ? (float)a->weight_decay : 0.0f, scale))
            return kfail(be, at, "weight update");
    }
    return 0;
}

// ---- gradient accumulation -------------------------------------------------------------------

static int cuda_accumulate(tbackend *be, const tsite *at, ktensor *dst, const ktensor *src)
{
    if (tglue_add(dst->data, dst->format, src->data, src->format, ktensor_numel(dst))) return kfail(be, at, "accumulate");
    return 0;
}

// ---- joining column blocks ----------------------------------------------------------------------

// One copy kernel per part; every value fits y's format (tbackend_check_concat), so nothing rounds.
static int cuda_concat_columns(tbackend *be, ktensor *y, const ktensor *const *x, int n)
{
    if (tbackend_check_concat(be, y, x, n)) return -1;
    int64_t col0 = 0;
    for (int i = 0; i < n; i++) {
        if (tglue_copy_columns(y->data, y->format, y->shape[1], col0, x[i]->data, x[i]->format, y->shape[0],
                               x[i]->shape[1]))
            return tbackend_fail(be, "concat_columns: %s", kernels_last_error());
        col0 += x[i]->shape[1];
    }
    return 0;
}

// ---- data parallel (NCCL through dlopen) ----------------------------------------------------------

static int nccl_load(tbackend *be, nccl_api *n)
{
    n->lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!n->lib) return tbackend_fail(be, "data parallel needs NCCL: cannot open libnccl.so.2 (%s)", dlerror());
    *(void **)&n->get_unique_id = dlsym(n->lib, "ncclGetUniqueId");
    *(void **)&n->comm_init_rank = dlsym(n->lib, "ncclCommInitRank");
    *(void **)&n->all_reduce = dlsym(n->lib, "ncclAllReduce");
    *(void **)&n->error_string = dlsym(n->lib, "ncclGetErrorString");
    *(void **)&n->comm_destroy = dlsym(n->lib, "ncclCommDestroy");
    if (!n->get_unique_id || !n->comm_init_rank || !n->all_reduce || !n->error_string || !n->comm_destroy)
        return tbackend_fail(be, "libnccl.so.2 lacks a symbol the trainer needs (ncclGetUniqueId, ncclCommInitRank, "
                                 "ncclAllReduce, ncclGetErrorString, ncclCommDestroy)");
    return 0;
}

static int cuda_dp_init(tbackend *be, int world, int rank, const char *id_file)
{
    cuda_impl *im = impl_of(be);
    int devices = 0;
    if (cuda_check(be, cudaGetDeviceCount(&devices), "cudaGetDeviceCount")) return -1;
    if (cuda_check(be, cudaSetDevice(rank % devices), "cudaSetDevice")) return -1;
    if (nccl_load(be, &im->nccl)) return -1;
    // NCCL reads its algorithm when the communicator is created
    if (be->bound.sites)
        setenv("NCCL_ALGO", tbackend_site(be, TSLOT_ALLREDUCE, -1)->variant == TALLREDUCE_TREE ? "Tree" : "Ring", 1);
    nccl_unique_id id;
    if (rank == 0) {
        int rc = im->nccl.get_unique_id(&id);
        if (rc) return tbackend_fail(be, "ncclGetUniqueId: %s", im->nccl.error_string(rc));
        char tmp[4160];
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld", id_file, (long)getpid());
        FILE *fp = fopen(tmp, "wb");
        if (!fp || fwrite(&id, sizeof id, 1, fp) != 1 || fclose(fp) || rename(tmp, id_file))
            return tbackend_fail(be, "cannot write the NCCL id file %s: %s", id_file, strerror(errno));
    } else {
        // wait (up to 120 s) for rank 0 to publish the id
        int got = 0;
        for (int tries = 0; tries < 1200 && !got; tries++) {
            FILE *fp = fopen(id_file, "rb");
            if (fp) {
                got = fread(&id, sizeof id, 1, fp) == 1;
                fclose(fp);
            }
            if (!got) usleep(100000);
        }
        if (!got) return tbackend_fail(be, "rank %d: no NCCL id in %s after 120 s (is rank 0 running?)", rank, id_file);
    }
    int rc = im->nccl.comm_init_rank(&im->comm, world, id, rank);
    if (rc) return tbackend_fail(be, "ncclCommInitRank(world %d, rank %d): %s", world, rank, im->nccl.error_string(rc));
    im->world = world;
    return 0;
}

static int cuda_allreduce(tbackend *be, tparam *const *params, int n)
{
    cuda_impl *im = impl_of(be);
    if (im->world <= 1) return 0;
    const tsite *at = tbackend_site(be, TSLOT_ALLREDUCE, -1);
    prec_format wire = tpath_storage(at->path);
    int dtype = wire == PREC_BF16 ? NCCL_BFLOAT16 : NCCL_FLOAT32;
    for (int i = 0; i < n; i++) {
        ktensor *g = &params[i]->grad;
        ktensor W;
        if (as_format(be, 0, g, wire, &W)) return -1;
        int rc = im->nccl.all_reduce(W.data, W.data, (size_t)ktensor_numel(g), dtype, NCCL_SUM, im->comm, 0);
        if (rc) return tbackend_fail(be, "slot allreduce: ncclAllReduce(%s, %lld elements): %s", params[i]->name,
                                     (long long)ktensor_numel(g), im->nccl.error_string(rc));
        if (W.data != g->data && tglue_cast(g->data, g->format, W.data, wire, nullptr, ktensor_numel(g)))
            return kfail(be, at, "allreduce");
    }
    return 0;
}

// ---- replicas: the batched forms (backend.h) ----------------------------------------------------
//
// Each replaces the loop over replicas where one launch can do every replica
// with the bits of single calls: the GEMMs through kmatmul_batched (the
// single problem's algorithm, pinned), the emulated matrix units through
// mma_emulate_linear_batched (the replica as a grid dimension), ops whose
// rows or elements are independent on the replicas' rows folded into one
// bigger call, the norms, gradient norm and polar express through their
// replica kernels.  Those kernels take replicas back to back, so a tensor
// padded between replicas (replica_stride > numel, only for tensors under
// 256 bytes) goes through the loop (the GEMMs take any stride); stored
// formats that need a conversion first go through the loop too.

static int contiguous(const ktensor *t) { return !t || !t->data || t->replica_stride == ktensor_numel(t); }

// t with every replica's rows as one tensor (shape[0] times R)
static ktensor folded(const tbackend *be, const ktensor *t)
{
    ktensor f = *t;
    f.shape[0] *= be->replicas;
    f.replica_stride = 0;
    return f;
}

static ktensor *fold_or_null(const tbackend *be, const ktensor *t, ktensor *buf)
{
    if (!t) return nullptr;
    *buf = folded(be, t);
    return buf;
}

static int in_format(const ktensor *t, prec_format f) { return !t || !t->data || (t->format == f && !t->scale); }

// matmul_mma: every replica through one emulation call (mma_emulate_linear_batched,
// each replica's bits those of cuda_matmul_mma on its slices) when the
// operands are stored in the model's input format and y is an output
// cuda_matmul accepts; otherwise the loop, which converts or names the problem.
static int batched_matmul_mma(tbackend *be, const tsite *at, ktensor *y, const ktensor *a, int a_trans,
                              const ktensor *b, int b_trans, int accumulate, int y_fp32)
{
    const mma_model *model = mma_model_of(be, at);
    if (!model) return -1;
    const prec_format load = mma_load_format(model);
    int64_t M = a_trans ? a->shape[1] : a->shape[0], K = a_trans ? a->shape[0] : a->shape[1];
    int64_t N = b_trans ? b->shape[0] : b->shape[1];
    if (!in_format(a, load) || !in_format(b, load) || (y->format != tpath_storage(at->path) && !y_fp32) ||
        y->shape[0] != M || y->shape[1] != N)
        return impl_of(be)->loop->matmul(be, at, y, a, a_trans, b, b_trans, accumulate);
    mma_emulate_batch batch;
    batch.count = be->replicas;
    batch.stride_a = a->replica_stride, batch.stride_b = b->replica_stride;
    batch.stride_y = y->replica_stride;
    if (mma_emulate_linear_batched(&model->arith, M, N, K, a->data, a_trans, b->data, b_trans, y->data, y->format,
                                   accumulate, &batch))
        return kfail(be, at, "matmul_mma (replicas)");
    return 0;
}

// y (+)= op(a) op(b) for every replica as one batched call's arguments, at
// the tensors' replica strides (M, N, K from a and b; the caller checks y).
static void replica_gemm_args(const tbackend *be, const ktensor *y, const ktensor *a, int a_trans, const ktensor *b,
                              int b_trans, int accumulate, int y_fp32, kmatmul_args *args, kmatmul_batch *batch)
{
    memset(args, 0, sizeof *args);
    args->M = a_trans ? a->shape[1] : a->shape[0];
    args->K = a_trans ? a->shape[0] : a->shape[1];
    args->N = b_trans ? b->shape[0] : b->shape[1];
    args->a_trans = a_trans, args->b_trans = b_trans;
    args->a = a->data, args->b = b->data;
    args->y = y->data;
    args->c = accumulate ? y->data : nullptr;
    args->alpha = 1.0f;
    args->beta = accumulate ? 1.0f : 0.0f;
    args->y_fp32 = y_fp32;
    memset(batch, 0, sizeof *batch);
    batch->count = be->replicas;
    batch->stride_a = a->replica_stride, batch->stride_b = b->replica_stride;
    batch->stride_y = y->replica_stride;
    batch->stride_c = accumulate ? y->replica_stride : 0;
}

// fp8 (current scaling, per tensor or block-scaled): every replica's operands
// quantised by one launch per pass (kmatmul_quantized_batched; each replica's
// scales from its own amax, so the bytes of its single call), then one GEMM
// per replica, as the single calls run it.  The loop (a quantisation per
// replica and operand, the weights from the cache) where the operands are
// not both replicated in the quantiser's input format, under delayed scaling
// (one history per replica), or for outputs cuda_matmul would refuse.
static int batched_matmul_fp8(tbackend *be, const tsite *at, ktensor *y, const ktensor *a, int a_trans,
                              const ktensor *b, int b_trans, int accumulate, int y_fp32)
{
    tbackend *loop = impl_of(be)->loop;
    const prec_format x = a->format == PREC_FP32 && b->format == PREC_FP32 ? PREC_FP32 : PREC_BF16;
    kmatmul_args args;
    kmatmul_batch batch;
    replica_gemm_args(be, y, a, a_trans, b, b_trans, accumulate, y_fp32, &args, &batch);
    if (!(at->op == TOP_MATMUL || at->op == TOP_MATMUL_FAST || at->op == TOP_MATMUL_BLOCK_FP8) ||
        tbackend_fp8_delayed(be, at) || !in_format(a, x) || !in_format(b, x) ||
        (y->format != tpath_storage(KPATH_FP8) && !y_fp32) || !a->replica_stride || !b->replica_stride ||
        y->shape[0] != args.M || y->shape[1] != args.N)
        return loop->matmul(be, at, y, a, a_trans, b, b_trans, accumulate);
    prec_format a_fp8 = tpath_operand(KPATH_FP8, tslot_is_gradient_gemm(at->slot));
    if (kmatmul_quantized_batched(accum_of(at->op), matmul_variant(at), &args, &batch, x, a_fp8, PREC_E4M3))
        return kfail(be, at, "fp8 matmul (replicas)");
    return 0;
}

static int batched_matmul(tbackend *be, const tsite *at, ktensor *y, const ktensor *a, int a_trans, const ktensor *b,
                          int b_trans, int accumulate)
{
    tbackend *one = be->one, *loop = impl_of(be)->loop;
    if (!y->replica_stride) return one->matmul(be, at, y, a, a_trans, b, b_trans, accumulate);
    kpath path = at->path;
    prec_format f = tpath_storage(path);
    int y_fp32 = y->format == PREC_FP32 && (path == KPATH_BF16 || path == KPATH_FP16);
    if (at->op == TOP_MATMUL_MMA) return batched_matmul_mma(be, at, y, a, a_trans, b, b_trans, accumulate, y_fp32);
    if (path == KPATH_FP8) return batched_matmul_fp8(be, at, y, a, a_trans, b, b_trans, accumulate, y_fp32);
    // Only the ops kmatmul_batched implements may reach it.
    if (!(at->op == TOP_MATMUL || at->op == TOP_MATMUL_FAST) || !in_format(a, f) || !in_format(b, f) ||
        (y->format != f && !y_fp32) || !a->replica_stride || !b->replica_stride)
        return loop->matmul(be, at, y, a, a_trans, b, b_trans, accumulate);
    kmatmul_args args;
    kmatmul_batch batch;
    replica_gemm_args(be, y, a, a_trans, b, b_trans, accumulate, y_fp32, &args, &batch);
    if (y->shape[0] != args.M || y->shape[1] != args.N) return one->matmul(be, at, y, a, a_trans, b, b_trans, accumulate);
    if (kmatmul_batched(path, accum_of(at->op), matmul_variant(at), &args, &batch)) return kfail(be, at, "batched matmul");
    return 0;
}

// Row- and element-wise ops: every replica's rows in one call when they lie back to back.
#define FOLD2(t0, t1) (contiguous(t0) && contiguous(t1))
#define FOLD3(t0, t1, t2) (FOLD2(t0, t1) && contiguous(t2))

static int batched_residual(tbackend *be, const tsite *at, ktensor *y, const ktensor *a, const ktensor *b)
{
    if (!y->replica_stride) return be->one->residual(be, at, y, a, b);
    if (!FOLD3(y, a, b)) return impl_of(be)->loop->residual(be, at, y, a, b);
    ktensor Y = folded(be, y), A = folded(be, a), B = folded(be, b);
    if (y->data == a->data) A.data = Y.data;
    return be->one->residual(be, at, &Y, &A, &B);
}

static int batched_accumulate(tbackend *be, const tsite *at, ktensor *dst, const ktensor *src)
{
    if (!dst->replica_stride) return be->one->accumulate(be, at, dst, src);
    if (!FOLD2(dst, src)) return impl_of(be)->loop->accumulate(be, at, dst, src);
    ktensor D = folded(be, dst), S = folded(be, src);
    return be->one->accumulate(be, at, &D, &S);
}

// Rows are independent: every replica's rows joined in one call per part.
static int batched_concat_columns(tbackend *be, ktensor *y, const ktensor *const *x, int n)
{
    if (!y->replica_stride) return be->one->concat_columns(be, y, x, n);
    int folds = contiguous(y) && n >= 1 && n <= 4;
    for (int i = 0; folds && i < n; i++) folds = x[i]->replica_stride && contiguous(x[i]);
    if (!folds) return impl_of(be)->loop->concat_columns(be, y, x, n);
    ktensor Y = folded(be, y), parts[4];
    const ktensor *ptrs[4];
    for (int i = 0; i < n; i++) {
        parts[i] = folded(be, x[i]);
        ptrs[i] = &parts[i];
    }
    return be->one->concat_columns(be, &Y, ptrs, n);
}

static int batched_activation_fwd(tbackend *be, const tsite *at, ktensor *y, ktensor *g, const ktensor *x)
{
    if (!y->replica_stride) return be->one->activation_fwd(be, at, y, g, x);
    if (!FOLD3(y, g, x)) return impl_of(be)->loop->activation_fwd(be, at, y, g, x);
    ktensor Y = folded(be, y), X = folded(be, x), G;
    return be->one->activation_fwd(be, at, &Y, fold_or_null(be, g, &G), &X);
}

static int batched_activation_bwd(tbackend *be, const tsite *at, ktensor *dx, const ktensor *dy, const ktensor *x,
                                  const ktensor *g)
{
    if (!dx->replica_stride) return be->one->activation_bwd(be, at, dx, dy, x, g);
    if (!FOLD3(dx, dy, x) || !contiguous(g)) return impl_of(be)->loop->activation_bwd(be, at, dx, dy, x, g);
    ktensor DX = folded(be, dx), DY = folded(be, dy), X = folded(be, x), G;
    return be->one->activation_bwd(be, at, &DX, &DY, &X, fold_or_null(be, g, &G));
}

static int batched_rope_fwd(tbackend *be, const tsite *at, ktensor *y, const ktensor *x, int B, int T, int H,
                            double theta)
{
    if (!y->replica_stride) return be->one->rope_fwd(be, at, y, x, B, T, H, theta);
    if (!FOLD2(y, x)) return impl_of(be)->loop->rope_fwd(be, at, y, x, B, T, H, theta);
    ktensor Y = folded(be, y), X = folded(be, x);
    return be->one->rope_fwd(be, at, &Y, &X, B * be->replicas, T, H, theta);
}

static int batched_rope_bwd(tbackend *be, const tsite *at, ktensor *dx, const ktensor *dy, int B, int T, int H,
                            double theta)
{
    if (!dx->replica_stride) return be->one->rope_bwd(be, at, dx, dy, B, T, H, theta);
    if (!FOLD2(dx, dy)) return impl_of(be)->loop->rope_bwd(be, at, dx, dy, B, T, H, theta);
    ktensor DX = folded(be, dx), DY = folded(be, dy);
    return be->one->rope_bwd(be, at, &DX, &DY, B * be->replicas, T, H, theta);
}

static int batched_attention_fwd(tbackend *be, const tsite *at, ktensor *y, ktensor *lse, const ktensor *q,
                                 const ktensor *k, const ktensor *v, int B, int T, int H)
{
    if (!y->replica_stride) return be->one->attention_fwd(be, at, y, lse, q, k, v, B, T, H);
    if (!FOLD3(y, lse, q) || !FOLD2(k, v)) return impl_of(be)->loop->attention_fwd(be, at, y, lse, q, k, v, B, T, H);
    ktensor Y = folded(be, y), L = folded(be, lse), Q = folded(be, q), K = folded(be, k), V = folded(be, v);
    return be->one->attention_fwd(be, at, &Y, &L, &Q, &K, &V, B * be->replicas, T, H);
}

static int batched_attention_bwd(tbackend *be, const tsite *at, ktensor *dq, ktensor *dk, ktensor *dv,
                                 const ktensor *dy, const ktensor *q, const ktensor *k, const ktensor *v,
                                 const ktensor *y, const ktensor *lse, int B, int T, int H)
{
    if (!dq->replica_stride) return be->one->attention_bwd(be, at, dq, dk, dv, dy, q, k, v, y, lse, B, T, H);
    if (!FOLD3(dq, dk, dv) || !FOLD3(dy, q, k) || !FOLD3(v, y, lse))
        return impl_of(be)->loop->attention_bwd(be, at, dq, dk, dv, dy, q, k, v, y, lse, B, T, H);
    ktensor DQ = folded(be, dq), DK = folded(be, dk), DV = folded(be, dv), DY = folded(be, dy), Q = folded(be, q),
            K = folded(be, k), V = folded(be, v), Y = folded(be, y), L = folded(be, lse);
    return be->one->attention_bwd(be, at, &DQ, &DK, &DV, &DY, &Q, &K, &V, &Y, &L, B * be->replicas, T, H);
}

static int batched_norm_fwd(tbackend *be, const tsite *at, ktensor *y, ktensor *mean, ktensor *rstd, const ktensor *x,
                            const ktensor *gain, const ktensor *bias, double eps)
{
    if (!y->replica_stride) return be->one->norm_fwd(be, at, y, mean, rstd, x, gain, bias, eps);
    prec_format f = path_fmt(at);
    if (!FOLD3(y, mean, rstd) || !FOLD3(x, gain, bias) || !in_format(y, f) || !in_format(x, f) ||
        !in_format(gain, f) || !in_format(bias, f))
        return impl_of(be)->loop->norm_fwd(be, at, y, mean, rstd, x, gain, bias, eps);
    // x, y: R x N rows; gain, bias: R x C (the replica kernels' layout)
    int64_t R = be->replicas;
    ktensor Y = folded(be, y), X = folded(be, x), G, Bb;
    ktensor *g = fold_or_null(be, gain, &G), *b = fold_or_null(be, bias, &Bb);
    int rc = at->op == TOP_LAYERNORM
                 ? klayernorm_forward_replicas(R, &Y, (float *)mean->data, (float *)rstd->data, &X, g, b, (float)eps,
                                               at->variant)
                 : krmsnorm_forward_replicas(R, &Y, (float *)rstd->data, &X, g, (float)eps, at->variant);
    return rc ? kfail(be, at, "norm forward (replicas)") : 0;
}

static int batched_norm_bwd(tbackend *be, const tsite *at, ktensor *dx, ktensor *dgain, ktensor *dbias,
                            const ktensor *dy, const ktensor *x, const ktensor *gain, const ktensor *mean,
                            const ktensor *rstd)
{
    if (!dx->replica_stride) return be->one->norm_bwd(be, at, dx, dgain, dbias, dy, x, gain, mean, rstd);
    prec_format f = path_fmt(at);
    if (!FOLD3(dx, dgain, dbias) || !FOLD3(dy, x, gain) || !FOLD2(mean, rstd) || !in_format(dx, f) ||
        !in_format(dy, f) || !in_format(x, f) || !in_format(gain, f))
        return impl_of(be)->loop->norm_bwd(be, at, dx, dgain, dbias, dy, x, gain, mean, rstd);
    int64_t R = be->replicas;
    ktensor DX = folded(be, dx), DY = folded(be, dy), X = folded(be, x), G, DG, DB;
    ktensor *g = fold_or_null(be, gain, &G);
    // the kernels write dgain/dbias in the path's format; they are accumulated into the gradients after
    void *buf = nullptr;
    if (dgain) {
        DG = folded(be, dgain);
        if (scratch(be, 4, (size_t)ktensor_numel(&DG) * kformat_bytes(f), &buf)) return -1;
        DG.data = buf, DG.format = f;
    }
    if (dbias) {
        DB = folded(be, dbias);
        if (scratch(be, 5, (size_t)ktensor_numel(&DB) * kformat_bytes(f), &buf)) return -1;
        DB.data = buf, DB.format = f;
    }
    int rc = at->op == TOP_LAYERNORM
                 ? klayernorm_backward_replicas(R, &DX, dgain ? &DG : nullptr, dbias ? &DB : nullptr, &DY, &X, g,
                                                (const float *)mean->data, (const float *)rstd->data, at->variant)
                 : krmsnorm_backward_replicas(R, &DX, dgain ? &DG : nullptr, &DY, &X, g, (const float *)rstd->data,
                                              at->variant);
    if (rc) return kfail(be, at, "norm backward (replicas)");
    if (dgain && tglue_add(dgain->data, dgain->format, DG.data, f, ktensor_numel(&DG))) return kfail(be, at, "dgain");
    if (dbias && tglue_add(dbias->data, dbias->format, DB.data, f, ktensor_numel(&DB))) return kfail(be, at, "dbias");
    return 0;
}

static int batched_grad_norm(tbackend *be, const tsite *at, tparam *const *params, int n, double *norm)
{
    cuda_impl *im = impl_of(be);
    int64_t R = be->replicas;
    int ok = n > 0 && params[0]->grad.replica_stride;
    for (int i = 0; i < n && ok; i++) ok = contiguous(&params[i]->grad) && params[i]->grad.format == params[0]->grad.format;
    if (!ok) return im->loop->grad_norm(be, at, params, n, norm);
    ktensor *grads = (ktensor *)malloc((size_t)n * sizeof *grads);
    float *host = (float *)malloc((size_t)R * sizeof *host);
    int rc = !grads || !host ? tbackend_fail(be, "out of memory") : 0;
    for (int i = 0; !rc && i < n; i++) grads[i] = folded(be, &params[i]->grad); // R x n_t elements each
    size_t ws = rc ? 0 : kgrad_norm_workspace_replicas(R, grads, n, at->variant);
    void *buf = nullptr;
    if (!rc && ws && scratch(be, 0, ws, &buf)) rc = -1;
    if (!rc && !im->replica_norms && kdevice_alloc((void **)&im->replica_norms, (size_t)R * sizeof(float), "grad norms"))
        rc = tbackend_fail(be, "%s", kernels_last_error());
    if (!rc && kgrad_norm_replicas(R, im->replica_norms, grads, n, buf, ws, at->variant))
        rc = kfail(be, at, "gradient norms (replicas)");
    if (!rc && cuda_raw_download(be, host, im->replica_norms, (size_t)R * sizeof(float))) rc = -1;
    for (int64_t r = 0; !rc && r < R; r++) norm[r] = host[r];
    free(grads);
    free(host);
    return rc;
}

// AdamW: every replica in one launch (the replica as the grid's second
// dimension) with its own gradient scale, skip flag and stochastic-rounding
// seed, when the tensors lie back to back, the gradients need no conversion
// and the live replicas share the step's other scalars; else the loop.
static int batched_adamw(tbackend *be, tparam *p, const tadamw_args *a)
{
    cuda_impl *im = impl_of(be);
    if (!p->w.replica_stride) return im->loop->adamw(be, p, a);
    const tsite *at = tbackend_site(be, TSLOT_ADAMW, -1);
    kpath path = at->path;
    kadamw_storage storage = adamw_storage(&be->bound);
    if (!contiguous(&p->w) || !contiguous(&p->master) || !contiguous(&p->grad) || !contiguous(&p->m) ||
        !contiguous(&p->v) || p->grad.format != tpath_storage(path) || p->grad.scale)
        return im->loop->adamw(be, p, a);
    const int64_t R = be->replicas, n = ktensor_numel(&p->w);
    int64_t first = -1;
    for (int64_t r = 0; r < R; r++) {
        if (a[r].skip) continue;
        if (first < 0) first = r;
        else if (a[r].lr != a[first].lr || a[r].beta1 != a[first].beta1 || a[r].beta2 != a[first].beta2 ||
                 a[r].eps != a[first].eps || a[r].weight_decay != a[first].weight_decay || a[r].step != a[first].step)
            return im->loop->adamw(be, p, a);
    }
    if (first < 0) return 0; // every replica skips this step
    float *scales = (float *)malloc((size_t)R * sizeof *scales);
    int32_t *skips = (int32_t *)malloc((size_t)R * sizeof *skips);
    uint64_t *seeds = (uint64_t *)malloc((size_t)R * sizeof *seeds);
    kadamw_replicas rep;
    memset(&rep, 0, sizeof rep);
    int rc = !scales || !skips || !seeds ? tbackend_fail(be, "out of memory") : 0;
    for (int64_t r = 0; !rc && r < R; r++) {
        scales[r] = (float)a[r].grad_scale; // 1.0f where the single call would not scale: the kernel skips it
        skips[r] = a[r].skip != 0;
        seeds[r] = a[r].seed;
    }
    if (!rc && (device_copy(be, &im->grad_scales, scales, (size_t)R * sizeof *scales, (const void **)&rep.grad_scale) ||
                device_copy(be, &im->skips, skips, (size_t)R * sizeof *skips, (const void **)&rep.skip) ||
                (storage == KADAMW_STOCHASTIC &&
                 device_copy(be, &im->seeds, seeds, (size_t)R * sizeof *seeds, (const void **)&rep.seed))))
        rc = -1;
    free(scales);
    free(skips);
    free(seeds);
    if (rc) return -1;
    const tadamw_args *f = &a[first];
    kadamw_hparams h = {(float)f->lr, (float)f->beta1, (float)f->beta2, (float)f->eps,
                        p->decay ? (float)f->weight_decay : 0.0f, f->step, f->seed};
    if (path == KPATH_FP32 && p->master.data) {
        rep.working = p->w.data;
        rep.working_format = p->w.format;
        rc = kadamw_step_replicas(KPATH_FP32, KADAMW_MASTER_FP32, at->variant, R, n, p->master.data, nullptr, nullptr,
                                  (float *)p->m.data, (float *)p->v.data, p->grad.data, &h, &rep);
    } else {
        rc = kadamw_step_replicas(path, storage, at->variant, R, n, p->w.data, (float *)p->master.data,
                                  (uint16_t *)p->lowbits, (float *)p->m.data, (float *)p->v.data, p->grad.data, &h,
                                  &rep);
    }
    return rc ? kfail(be, at, "adamw (replicas)") : 0;
}

// Muon: every replica's momentum (its own gradient scale) in one launch,
// every replica's blocks orthogonalised in one batched polar express, every
// replica's update (its own stochastic-rounding seed) in one launch; skipped
// replicas' blocks are orthogonalised too (from their stale U) and neither
// their momentum nor their weights are touched.  The live replicas must
// share lr, momentum and weight decay (else the loop).
static int batched_muon(tbackend *be, tparam *p, const tmuon_args *a)
{
    cuda_impl *im = impl_of(be);
    if (!p->w.replica_stride) return be->one->muon(be, p, a);
    const tsite *at = tbackend_site(be, TSLOT_MUON, -1);
    kpath path = at->path;
    prec_format f = tpath_storage(path);
    int64_t R = be->replicas, block = (int64_t)p->rows * p->cols, per = block * p->blocks;
    if (!contiguous(&p->w) || !contiguous(&p->grad) || !contiguous(&p->m) || !contiguous(&p->master) ||
        (block * (int64_t)kformat_bytes(f)) % 256)
        return im->loop->muon(be, p, a);
    int64_t first = -1;
    for (int64_t r = 0; r < R; r++) {
        if (a[r].skip) continue;
        if (first < 0) first = r;
        else if (a[r].lr != a[first].lr || a[r].momentum != a[first].momentum ||
                 a[r].weight_decay != a[first].weight_decay)
            return im->loop->muon(be, p, a);
    }
    if (first < 0) return 0; // every replica skips this step
    kpe_coeffs which = at->op == TOP_MUON_NEWTON_SCHULZ ? KPE_MUON_QUINTIC : KPE_POLAR_EXPRESS;
    float scale = sqrtf(fmaxf(1.0f, (float)p->rows / (float)p->cols));
    int sr = tbackend_site(be, TSLOT_WEIGHTS, -1)->variant == TWEIGHTS_SR && p->w.format != PREC_FP32;
    void *U = nullptr;
    if (scratch(be, 0, (size_t)(R * per) * kformat_bytes(f), &U)) return -1;
    tglue_replica *host = (tglue_replica *)calloc((size_t)R, sizeof *host);
    if (!host) return tbackend_fail(be, "out of memory");
    for (int64_t r = 0; r < R; r++) {
        host[r].grad_scale = (float)a[r].grad_scale;
        host[r].skip = a[r].skip != 0;
        host[r].seed = a[r].seed;
    }
    const void *dev = nullptr;
    int rc = device_copy(be, &im->muon_steps, host, (size_t)R * sizeof *host, &dev);
    free(host);
    if (rc) return -1;
    const tmuon_args *s = &a[first];
    if (tglue_muon_momentum_replicas(R, (const tglue_replica *)dev, (float *)p->m.data, p->grad.data, p->grad.format,
                                     per, (float)s->momentum, U, f))
        return kfail(be, at, "momentum (replicas)");
    if (kpolar_express_batched(path, at->variant, which, R * p->blocks, p->rows, p->cols, block, U, U))
        return kfail(be, at, "polar express (replicas)");
    if (tglue_weight_update_replicas(R, (const tglue_replica *)dev, p->w.data, p->w.format, (float *)p->master.data,
                                     (uint16_t *)p->lowbits, sr, U, f, per, block, (float)s->lr,
                                     p->decay ? (float)s->weight_decay : 0.0f, scale))
        return kfail(be, at, "weight update (replicas)");
    return 0;
}

// The loss gradient is one number for every replica unless their loss
// scales differ: then each replica's rows are their own call.
static int batched_cross_entropy(tbackend *be, const tsite *at, ktensor *losses, ktensor *dlogits,
                                 const ktensor *logits, const int32_t *targets, double softcap, const double *dloss)
{
    if (!losses->replica_stride) return be->one->cross_entropy(be, at, losses, dlogits, logits, targets, softcap, dloss);
    int same = 1;
    for (int r = 1; dloss && r < be->replicas; r++) same &= dloss[r] == dloss[0];
    if (!same || !FOLD3(losses, dlogits, logits))
        return impl_of(be)->loop->cross_entropy(be, at, losses, dlogits, logits, targets, softcap, dloss);
    ktensor L = folded(be, losses), Z = folded(be, logits), D;
    return be->one->cross_entropy(be, at, &L, fold_or_null(be, dlogits, &D), &Z, targets, softcap, dloss);
}

// Token tables per replica (the replica kernels); the gpt2 position table through the loop.
static int batched_embedding_fwd(tbackend *be, ktensor *x, const int32_t *tokens, const ktensor *wte,
                                 const ktensor *wpe, int B, int T)
{
    if (!x->replica_stride) return be->one->embedding_fwd(be, x, tokens, wte, wpe, B, T);
    const tsite *at = tbackend_site(be, TSLOT_EMBEDDING, -1);
    prec_format f = path_fmt(at);
    if (wpe || !FOLD2(x, wte) || !in_format(x, f) || !in_format(wte, f))
        return impl_of(be)->loop->embedding_fwd(be, x, tokens, wte, wpe, B, T);
    ktensor X = folded(be, x), W = folded(be, wte);
    if (kembedding_forward_replicas(be->replicas, &X, &W, tokens, at->variant))
        return kfail(be, at, "token lookup (replicas)");
    return 0;
}

static int batched_embedding_bwd(tbackend *be, ktensor *dwte, ktensor *dwpe, const ktensor *dx,
                                 const int32_t *tokens, int B, int T)
{
    if (!dx->replica_stride) return be->one->embedding_bwd(be, dwte, dwpe, dx, tokens, B, T);
    const tsite *at = tbackend_site(be, TSLOT_EMBEDDING, -1);
    if (dwpe || !FOLD2(dwte, dx)) return impl_of(be)->loop->embedding_bwd(be, dwte, dwpe, dx, tokens, B, T);
    int64_t R = be->replicas, n = (int64_t)B * T;
    // every replica's rows converted into the gradients' format in one pass (the single call's RNE)
    ktensor DW = folded(be, dwte), DXf = folded(be, dx), DX;
    if (as_format(be, 0, &DXf, dwte->format, &DX)) return -1;
    size_t ws = kembedding_backward_workspace_replicas(R, n, dwte->shape[0], at->variant);
    void *buf = nullptr;
    if (ws && scratch(be, 1, ws, &buf)) return -1;
    if (kembedding_backward_replicas(R, &DW, &DX, tokens, buf, ws, at->variant))
        return kfail(be, at, "token scatter (replicas)");
    return 0;
}

// The modern lm_head's transposed copies: each replica's matrix on its own.
static int batched_transpose(tbackend *be, const tsite *at, ktensor *out, const ktensor *in, int accumulate)
{
    if (!out->replica_stride) return be->one->transpose(be, at, out, in, accumulate);
    prec_format f = accumulate ? path_fmt(at) : out->format;
    if (!FOLD2(out, in) || !in_format(in, f) || !in_format(out, f))
        return impl_of(be)->loop->transpose(be, at, out, in, accumulate);
    // (R M, N) -> (R N, M): the folded shapes the replica kernels read
    ktensor O = folded(be, out), I = folded(be, in);
    int rc = accumulate ? ktranspose_add_replicas(be->replicas, &O, &I, at->variant)
                        : ktranspose_copy_replicas(be->replicas, &O, &I, at->variant);
    return rc ? kfail(be, at, accumulate ? "transpose add (replicas)" : "transpose copy (replicas)") : 0;
}

#undef FOLD2
#undef FOLD3

static int cuda_batch_replicas(tbackend *be)
{
    cuda_impl *im = impl_of(be);
    im->loop = (tbackend *)malloc(sizeof *im->loop);
    if (!im->loop) return tbackend_fail(be, "out of memory");
    *im->loop = *be;
    be->matmul = batched_matmul;
    be->residual = batched_residual;
    be->accumulate = batched_accumulate;
    be->concat_columns = batched_concat_columns;
    be->activation_fwd = batched_activation_fwd;
    be->activation_bwd = batched_activation_bwd;
    be->rope_fwd = batched_rope_fwd;
    be->rope_bwd = batched_rope_bwd;
    be->attention_fwd = batched_attention_fwd;
    be->attention_bwd = batched_attention_bwd;
    be->norm_fwd = batched_norm_fwd;
    be->norm_bwd = batched_norm_bwd;
    be->grad_norm = batched_grad_norm;
    be->adamw = batched_adamw;
    be->muon = batched_muon;
    be->cross_entropy = batched_cross_entropy;
    be->embedding_fwd = batched_embedding_fwd;
    be->embedding_bwd = batched_embedding_bwd;
    be->transpose = batched_transpose;
    return 0;
}

// ---- a CUDA graph of the micro-batch (trainer/model.c) -------------------------------------------
//
// The trainer runs on the legacy default stream, which cannot be captured:
// the ops are recorded on a stream of our own (blocking, so a replay waits
// for the batch upload before it on the legacy stream, and the loss
// download after it waits for the replay).

// fp8 (current scaling) in a graph: the weight images are refreshed eagerly
// before the capture and before each replay (fp8_weights_refresh), and the
// quantisers' amax words are rewound at both ends of the capture
// (kfp8_amax_rewind), so each replay finds them as the capture did.
// fp8_scaling=delayed keeps host-side history counts: the trainer runs it
// without graphs.
static int cuda_graph_begin(tbackend *be)
{
    cuda_impl *im = impl_of(be);
    if (fp8_weights_refresh(be)) return -1;
    if (!im->graph_stream && kstream_create(&im->graph_stream, 0)) return tbackend_fail(be, "%s", kernels_last_error());
    if (kgraph_capture_begin(im->graph_stream)) return tbackend_fail(be, "%s", kernels_last_error());
    kernels_set_stream(im->graph_stream);
    if (kfp8_amax_rewind()) {
        char why[512];
        snprintf(why, sizeof why, "%s", kernels_last_error());
        kernels_set_stream(nullptr);
        kgraph *g = nullptr;
        kgraph_capture_end(im->graph_stream, &g);
        kgraph_destroy(g);
        return tbackend_fail(be, "%s", why);
    }
    return 0;
}

static int cuda_graph_end(tbackend *be)
{
    cuda_impl *im = impl_of(be);
    int rewound = kfp8_amax_rewind() == 0;
    kernels_set_stream(nullptr);
    kgraph *g = nullptr;
    int rc = kgraph_capture_end(im->graph_stream, &g) || !rewound;
    // the capture ran nothing: the amax words are as before it, the parity not
    if (kfp8_amax_rewind()) rc = 1;
    if (rc) {
        kgraph_destroy(g);
        // a weight image made during a capture that failed was marked current but never computed
        for (int i = 0; i < im->n_images; i++) im->images[i].version = be->weights_version - 1;
        return tbackend_fail(be, "%s", kernels_last_error());
    }
    kgraph_destroy(im->graph);
    im->graph = g;
    im->graph_frees = kernels_free_count();
    return 0;
}

static int cuda_graph_valid(tbackend *be)
{
    cuda_impl *im = impl_of(be);
    return im->graph && im->graph_frees == kernels_free_count();
}

static int cuda_graph_replay(tbackend *be)
{
    cuda_impl *im = impl_of(be);
    if (!cuda_graph_valid(be)) return tbackend_fail(be, "CUDA graph: none, or memory it uses was freed since its capture");
    if (!stale_graph_weights_planted && fp8_weights_refresh(be)) return -1;
    return kgraph_launch(im->graph, im->graph_stream) ? tbackend_fail(be, "%s", kernels_last_error()) : 0;
}

static void cuda_destroy(tbackend *be)
{
    cuda_impl *im = impl_of(be);
    kgraph_destroy(im->graph);
    kstream_destroy(im->graph_stream);
    for (int i = 0; i < im->n_images; i++) kdevice_free(im->images[i].buf);
    free(im->images);
    free(im->histories);
    kdevice_free(im->history_slots);
    kdevice_free(im->saved_slots);
    free(im->saved_calls);
    free(be->weight_ranges);
    for (int i = 0; i < N_SCRATCH; i++) kdevice_free(im->scratch[i]);
    kdevice_free(im->positions);
    kdevice_free(im->rope_cos), kdevice_free(im->rope_sin), kdevice_free(im->rope_inv);
    kdevice_free(im->norm_out);
    kdevice_free(im->replica_norms);
    device_args_free(&im->grad_scales);
    device_args_free(&im->skips);
    device_args_free(&im->seeds);
    device_args_free(&im->muon_steps);
    fp8_memo_free(be);
    free(im->loop);
    kattention_release();
    kpolar_express_release();
    if (im->comm) im->nccl.comm_destroy(im->comm);
    if (im->nccl.lib) dlclose(im->nccl.lib);
    kmatmul_release();
    klinear_ce_release();
    mma_emulate_release();
    tbinding_free(&be->bound);
    free(im);
    free(be);
}

// Every op of the backend that may write device memory, wrapped to tell the
// fp8 memo (see the memo above) first, argument by argument: a ktensor it
// may write (a non-const ktensor *) drops the entries over that tensor; a
// pointer through which it may write anything else (a tparam *, a void *, an
// array of pointers) bumps the fence, which ends every entry; what it only
// reads (const data, numbers) and host outputs (double *) say nothing.  Not
// wrapped: matmul (it drops the entries its output overlaps) and the ops that
// only read.  The planted twin (tbackend_cuda_plant_memo_blind) skips the
// ktensor arguments, so an entry outlives the writes of every op but GEMMs.
template <class T> static void memo_note(cuda_impl *im, T)
{
    using P = typename std::remove_pointer<T>::type;
    if (std::is_pointer<T>::value && (!std::is_const<P>::value || std::is_pointer<P>::value)) im->fence++;
}
static void memo_note(cuda_impl *im, ktensor *t)
{
    if (t && t->data && !memo_blind_planted) memo_drop_overlapping(im, t->data, (size_t)ktensor_numel(t) * kformat_bytes(t->format));
}
static void memo_note(cuda_impl *, double *) {}
static void memo_note(cuda_impl *, const ktensor *const *) {}

template <auto F> struct fenced;
template <class R, class... A, R (*F)(tbackend *, A...)> struct fenced<F> {
    static R call(tbackend *be, A... args)
    {
        cuda_impl *im = impl_of(be);
        (memo_note(im, args), ...);
        return F(be, args...);
    }
};
// New memory, or memory whose owner is not a ktensor: every entry ends.
template <auto F> struct fence_all;
template <class R, class... A, R (*F)(tbackend *, A...)> struct fence_all<F> {
    static R call(tbackend *be, A... args)
    {
        impl_of(be)->fence++;
        return F(be, args...);
    }
};

extern "C" tbackend *tbackend_cuda_create(char *why, size_t why_len)
{
    if (!kernels_gpu_available(why, why_len)) return nullptr;
    tbackend *be = (tbackend *)calloc(1, sizeof *be);
    cuda_impl *im = (cuda_impl *)calloc(1, sizeof *im);
    if (!be || !im) {
        free(be);
        free(im);
        snprintf(why, why_len, "out of memory");
        return nullptr;
    }
    be->name = "cuda";
    be->impl = im;
    be->supports = cuda_supports;
    be->elem_bytes = cuda_elem_bytes;
    be->alloc = fence_all<cuda_alloc>::call;
    be->release = fenced<cuda_release>::call;
    be->alloc_raw = fenced<cuda_alloc_raw>::call;
    be->release_raw = fenced<cuda_release_raw>::call;
    be->raw_upload = fenced<cuda_raw_upload>::call;
    be->raw_download = cuda_raw_download;
    be->upload = fenced<cuda_upload>::call;
    be->download = cuda_download;
    be->read_bytes = cuda_read_bytes;
    be->write_bytes = fenced<cuda_write_bytes>::call;
    be->zero = fenced<cuda_zero>::call;
    be->fill_uniform = fenced<cuda_fill_uniform>::call;
    be->graph_begin = fence_all<cuda_graph_begin>::call;
    be->graph_end = fence_all<cuda_graph_end>::call;
    be->graph_valid = cuda_graph_valid;
    be->graph_replay = fence_all<cuda_graph_replay>::call;
    be->count_nonfinite = cuda_count_nonfinite;
    be->sync = cuda_sync;
    be->mem_used = cuda_mem_used;
    be->mem_available = cuda_mem_available;
    be->embedding_fwd = fenced<cuda_embedding_fwd>::call;
    be->embedding_bwd = fenced<cuda_embedding_bwd>::call;
    be->norm_fwd = fenced<cuda_norm_fwd>::call;
    be->norm_bwd = fenced<cuda_norm_bwd>::call;
    be->matmul = cuda_matmul;
    be->attention_fwd = fenced<cuda_attention_fwd>::call;
    be->attention_bwd = fenced<cuda_attention_bwd>::call;
    be->rope_fwd = fenced<cuda_rope_fwd>::call;
    be->rope_bwd = fenced<cuda_rope_bwd>::call;
    be->activation_fwd = fenced<cuda_activation_fwd>::call;
    be->activation_bwd = fenced<cuda_activation_bwd>::call;
    be->residual = fenced<cuda_residual>::call;
    be->cross_entropy = fenced<cuda_cross_entropy>::call;
    be->linear_cross_entropy = fenced<cuda_linear_cross_entropy>::call;
    be->transpose = fenced<cuda_transpose>::call;
    be->accumulate = fenced<cuda_accumulate>::call;
    be->concat_columns = fenced<cuda_concat_columns>::call;
    be->grad_norm = fenced<cuda_grad_norm>::call;
    be->adamw = fenced<cuda_adamw>::call;
    be->muon = fenced<cuda_muon>::call;
    be->dp_init = fence_all<cuda_dp_init>::call;
    be->allreduce = fenced<cuda_allreduce>::call;
    be->batch_replicas = fence_all<cuda_batch_replicas>::call;
    be->replicas = 1;
    be->destroy = cuda_destroy;
    be->fp8_histories_save = fence_all<cuda_fp8_histories_save>::call;
    be->fp8_histories_restore = fence_all<cuda_fp8_histories_restore>::call;
    im->memo_flat_owner = -1;
    const char *memo = getenv("ULPSCOPE_FP8_MEMO");
    be->fp8_memo = !memo                      ? TFP8_MEMO_INPUTS
                   : strcmp(memo, "0") == 0    ? TFP8_MEMO_OFF
                   : strcmp(memo, "lean") == 0 ? TFP8_MEMO_LEAN
                                               : TFP8_MEMO_INPUTS;
    const char *cache = getenv("ULPSCOPE_FP8_WEIGHT_CACHE");
    im->cache_on = !(cache && strcmp(cache, "0") == 0);
    be->fp8_weight_cache = im->cache_on;
    tbackend_guard_weights(be);
    return be;
}
