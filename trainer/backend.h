/* trainer/backend.h — the op calls the model makes, implemented by a CPU
 * backend (backend_cpu.c: fp32/fp64 arithmetic, the plan's formats emulated
 * through precision/format.h) and a CUDA backend (backend_cuda.cu: the
 * kernels' C APIs).
 *
 * Tensors are ktensors (kernels/kernels.h).  Their data lives where the
 * backend keeps it (host floats for the CPU backend, device memory in the
 * tensor's storage encoding for CUDA); the model never touches it directly.
 * A tensor's format is the one the plan gave the slot that writes it.
 *
 * Every op takes the site it runs for: the slot and layer, with the plan's
 * op handle, path and variant for them, resolved when the plan was bound
 * (tbackend_bind_plan).  The backend dispatches on the site's op handle and
 * variant enum, rounds its inputs into the path's operand format when they
 * are stored differently,
 * and rounds outputs into the path's storage format and then, when the output
 * tensor is stored in another format, into that one (matmul outputs must be
 * in the path's storage format).  An op a backend cannot
 * run at the slot's (path, variant) fails with a message naming the slot —
 * no backend falls back to another path silently.  Ops return 0 or -1 with
 * tbackend_error() set.
 *
 * Replicas (tbackend_set_replicas): R independent runs of one model through
 * one backend.  Every tensor the backend then allocates holds R copies
 * (ktensor.replica_stride), and every op works on all of them: replica r's
 * outputs from replica r's inputs, with the bits a single run's call on them
 * would give.  A slice (tbackend_slice: one replica's copy, replica_stride 0)
 * is a single tensor again.  Raw buffers (tokens) are the caller's to lay
 * out: replica r's B*T tokens at r*B*T.  The per-replica scalars (losses'
 * dloss, gradient norms, optimizer arguments) are arrays of R. */
#ifndef ULPSCOPE_TRAINER_BACKEND_H
#define ULPSCOPE_TRAINER_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "trainer/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tbackend tbackend;

/* One trainable tensor with everything the optimizer keeps for it. */
typedef struct {
    char name[32];       /* "h3.attn.qkv.w", "wte", ... */
    int layer;           /* -1 for tensors outside the layers */
    tslot grad_slot;     /* the slot that writes its gradient last in a step (names it in NaN reports) */
    ktensor w;           /* working copy, format = weights slot's storage */
    ktensor master;      /* fp32 master (weights=*:master with a narrower path); else data NULL */
    void *lowbits;       /* weights=bf16:mantissa_buffer: the 16 low bits of each fp32 master */
    ktensor grad;        /* format = grad_accum slot's storage */
    ktensor m, v;        /* AdamW moments (format = optimizer.adamw storage); Muon: m = momentum (fp32) */
    int muon;            /* updated by Muon (modern matrices) rather than AdamW */
    int decay;           /* weight decay applies */
    int rows, cols;      /* Muon orthogonalises [rows, cols] blocks */
    int blocks;          /* number of such blocks stacked along rows (qkv: 3) */
} tparam;

typedef struct {
    double lr, beta1, beta2, eps, weight_decay;
    long step;           /* 1-based update count (bias correction) */
    double grad_scale;   /* multiply gradients by this first (1/loss_scale) */
    uint64_t seed;       /* stochastic rounding stream of this update */
    int skip;            /* leave this replica's parameter and state untouched */
} tadamw_args;

typedef struct {
    double lr, momentum, weight_decay;
    double grad_scale;
    uint64_t seed;
    int skip;
} tmuon_args;

/* The CUDA backend's fp8 operand memo (ULPSCOPE_FP8_MEMO): off ("0"), the
 * images the next GEMM reads ("lean"), or those and each forward GEMM's input
 * until its weight gradient (the default). */
enum { TFP8_MEMO_OFF, TFP8_MEMO_LEAN, TFP8_MEMO_INPUTS };

struct tbackend {
    const char *name;    /* "cpu", "cuda" */
    tbinding bound;      /* the bound plan, every (slot, layer) resolved */
    char error[1024];
    size_t bytes_in_use, peak_bytes;
    void *impl;
    int replicas;        /* R (1: a single run) */
    int replica_now;     /* the replica a single-replica op runs for: the replica loops set it (0 otherwise);
                          * fp8_scaling=delayed keeps one amax history per replica */
    int fp8_frozen;      /* forward-only passes (validation): fp8_scaling=delayed scales from its histories
                          * and records nothing, so a run's training does not depend on when it validates */
    /* fp8_scaling=delayed: keep a copy of every amax history (save) and put it
     * back (restore).  A step saves them before its micro-batches; the NaN
     * audit's replay and the surviving replicas' rerun restore them first, so
     * the survivors record the step once, as without the NaN.  0 when no
     * history exists yet. */
    int (*fp8_histories_save)(tbackend *be);
    int (*fp8_histories_restore)(tbackend *be);
    /* A CUDA graph of the ops between graph_begin and graph_end (NULL where
     * the backend has none).  graph_begin: the ops that follow are recorded,
     * not run; graph_end: 0 and the recording is the backend's graph, or -1
     * when the capture failed (nothing recorded has run: run the ops again).
     * graph_replay runs the graph as recorded: the same device addresses and
     * the host-side values (scalars, shapes) the ops had; -1 when memory it
     * uses was freed since (graph_valid 0). */
    int (*graph_begin)(tbackend *be);
    int (*graph_end)(tbackend *be);
    int (*graph_valid)(tbackend *be);
    int (*graph_replay)(tbackend *be);
    /* The weights GEMMs read (parameters' working copies, the modern
     * lm_head's transposed copy): the model marks them (tbackend_mark_weights),
     * and weights_version counts the calls that may have written one of them
     * (tbackend_guard_weights).  The CUDA backend's fp8 weight cache keeps a
     * quantised image only while the version it was made at stands. */
    uint64_t weights_version;
    struct tweight_range { const char *lo, *hi; } *weight_ranges;
    int n_weight_ranges, cap_weight_ranges;
    int fp8_weight_cache;   /* the backend caches quantised fp8 weights (memory estimates count them) */
    int fp8_memo;           /* its fp8 operand memo, a TFP8_MEMO_* (memory estimates count it) */
    int64_t fp8_memo_hits;  /* GEMMs that took their first operand's fp8 image from the CUDA backend's memo */
    int64_t fp8_memo_b_hits; /* and their second's (a weight gradient's activation, kept from its forward) */
    struct tbackend_guarded {
        int on;
        void (*release)(tbackend *, ktensor *);
        int (*raw_upload)(tbackend *, void *, const void *, size_t);
        int (*upload)(tbackend *, ktensor *, const double *);
        int (*write_bytes)(tbackend *, ktensor *, const void *);
        int (*zero)(tbackend *, ktensor *);
        int (*transpose)(tbackend *, const tsite *, ktensor *, const ktensor *, int);
        int (*accumulate)(tbackend *, const tsite *, ktensor *, const ktensor *);
        int (*adamw)(tbackend *, tparam *, const tadamw_args *);
        int (*muon)(tbackend *, tparam *, const tmuon_args *);
    } guarded;
    tbackend *one;       /* with R > 1: the backend's single-replica ops, which the replica loops call */

    /* 0 when the backend can run the site's (op, path, variant) in binding b */
    int (*supports)(tbackend *be, const tbinding *b, const tsite *at, char *why, size_t why_len);
    /* bytes per element as this backend stores format f (views offset by it) */
    size_t (*elem_bytes)(prec_format f);
    /* memory: shape row-major; data poisoned (NaN) on allocation */
    int (*alloc)(tbackend *be, ktensor *t, prec_format f, int ndim, const int64_t *shape);
    void (*release)(tbackend *be, ktensor *t);
    int (*alloc_raw)(tbackend *be, void **ptr, size_t bytes);
    void (*release_raw)(tbackend *be, void *ptr);
    int (*raw_upload)(tbackend *be, void *dst, const void *src, size_t bytes);
    int (*raw_download)(tbackend *be, void *dst, const void *src, size_t bytes);
    /* values as doubles in stored units; upload rounds RNE into the format */
    int (*upload)(tbackend *be, ktensor *t, const double *values);
    int (*download)(tbackend *be, const ktensor *t, double *values);
    /* storage encoding (prec_encode bytes, little-endian), then for fp8 the
     * float scale: tensor_image_bytes(t) bytes.  For hashes, dumps, checkpoints. */
    int (*read_bytes)(tbackend *be, const ktensor *t, void *dst);
    int (*write_bytes)(tbackend *be, ktensor *t, const void *src);
    int (*zero)(tbackend *be, ktensor *t);
    /* t's elements from a hash of (seed, index): uniform in [lo, hi], rounded
     * into t's format (tmodel_create_for_timing; replica r with seed + r) */
    int (*fill_uniform)(tbackend *be, ktensor *t, uint64_t seed, float lo, float hi);
    int (*count_nonfinite)(tbackend *be, const ktensor *t, int64_t *count);
    int (*sync)(tbackend *be);
    /* device memory in use now, everything the process holds (0 on the CPU) */
    int (*mem_used)(tbackend *be, size_t *bytes);
    /* memory a run may still allocate where this backend keeps tensors (host
     * memory for the CPU: tbackend_host_available; free device memory for
     * CUDA), and what limits it ("MemAvailable", "RLIMIT_AS", "cudaMemGetInfo") */
    int (*mem_available)(tbackend *be, size_t *bytes, char *what, size_t what_len);

    /* x[B*T,C] = wte[tok] (+ wpe[t]); wpe may be NULL */
    int (*embedding_fwd)(tbackend *be, ktensor *x, const int32_t *tokens, const ktensor *wte, const ktensor *wpe,
                         int B, int T);
    /* dwte[tok] += dx, dwpe[t] += dx (deterministic order) */
    int (*embedding_bwd)(tbackend *be, ktensor *dwte, ktensor *dwpe, const ktensor *dx, const int32_t *tokens,
                         int B, int T);
    /* slot's op is layernorm (mean, gain, bias used) or rmsnorm (mean NULL,
     * gain and bias NULL when weightless); rows = x->shape[0], width = shape[1] */
    int (*norm_fwd)(tbackend *be, const tsite *at, ktensor *y, ktensor *mean, ktensor *rstd, const ktensor *x,
                    const ktensor *gain, const ktensor *bias, double eps);
    /* dx written; dgain, dbias accumulated (+=) in their own formats */
    int (*norm_bwd)(tbackend *be, const tsite *at, ktensor *dx, ktensor *dgain, ktensor *dbias, const ktensor *dy,
                    const ktensor *x, const ktensor *gain, const ktensor *mean, const ktensor *rstd);
    /* y[M,N] = op(a) op(b) (+ y when accumulate); shapes as kernels/matmul.h.
     * y is in the path's storage format, or fp32 on the bf16/fp16 paths:
     * then it receives the unrounded fp32 accumulator (grad_accum=fp32:gemm_fp32). */
    int (*matmul)(tbackend *be, const tsite *at, ktensor *y, const ktensor *a, int a_trans, const ktensor *b,
                  int b_trans, int accumulate);
    /* q, k, v, y: [B,T,H,D] = [B*T, C]; lse [B*H*T] fp32 */
    int (*attention_fwd)(tbackend *be, const tsite *at, ktensor *y, ktensor *lse, const ktensor *q, const ktensor *k,
                         const ktensor *v, int B, int T, int H);
    int (*attention_bwd)(tbackend *be, const tsite *at, ktensor *dq, ktensor *dk, ktensor *dv, const ktensor *dy,
                         const ktensor *q, const ktensor *k, const ktensor *v, const ktensor *y,
                         const ktensor *lse, int B, int T, int H);
    /* rotary on [B,T,H,D]: pairs (i, i + D/2), angle t * theta^(-2i/D) */
    int (*rope_fwd)(tbackend *be, const tsite *at, ktensor *y, const ktensor *x, int B, int T, int H, double theta);
    int (*rope_bwd)(tbackend *be, const tsite *at, ktensor *dx, const ktensor *dy, int B, int T, int H, double theta);
    /* gelu_tanh or relu2, by the slot's op.  g: relu2's store_grad variant
     * keeps f'(x) from the forward for the backward (else NULL). */
    int (*activation_fwd)(tbackend *be, const tsite *at, ktensor *y, ktensor *g, const ktensor *x);
    int (*activation_bwd)(tbackend *be, const tsite *at, ktensor *dx, const ktensor *dy, const ktensor *x,
                          const ktensor *g);
    /* y = a + b (y may alias a) */
    int (*residual)(tbackend *be, const tsite *at, ktensor *y, const ktensor *a, const ktensor *b);
    /* losses[i] = logsumexp(z_i) - z_i[target_i] with z = cap*tanh(logits/cap)
     * (cap = 0: z = logits); dlogits = dloss[r] * dz/dlogits * (softmax(z) - onehot) in replica r
     * (dlogits and dloss NULL: the losses only) */
    int (*cross_entropy)(tbackend *be, const tsite *at, ktensor *losses, ktensor *dlogits, const ktensor *logits,
                         const int32_t *targets, double softcap, const double *dloss);
    /* The fused head at the cross_entropy site running linear_cross_entropy
     * (kernels/cross_entropy.h, klinear_ce; no soft-cap): h [N,C] and W [V,C]
     * read in the path's format (logits = h W^T, never stored: rows in chunks
     * of the variant's size); losses [N] fp32; dh [N,C] in the path's storage
     * format (NULL: forward only); dW [V,C] fp32, overwritten with the fp32
     * sum over the chunks (NULL: skip); dloss[r] each row's loss gradient in
     * replica r (NULL when dh and dW are).  Targets in [0, V), negative: an
     * ignored row (loss and gradients 0). */
    int (*linear_cross_entropy)(tbackend *be, const tsite *at, ktensor *losses, ktensor *dh, ktensor *dW,
                                const ktensor *h, const ktensor *W, const int32_t *targets, const double *dloss);
    /* out = in^T, or out += in^T */
    int (*transpose)(tbackend *be, const tsite *at, ktensor *out, const ktensor *in, int accumulate);
    /* dst += src (gradient accumulation when a GEMM's output format differs) */
    int (*accumulate)(tbackend *be, const tsite *at, ktensor *dst, const ktensor *src);
    /* y [M, w_0 + ... + w_{n-1}] = [x_0 | ... | x_{n-1}], x_i [M, w_i] (n <= 4):
     * a copy that rounds nothing, so it is no plan site.  y's format must
     * hold every value exactly: each part's own format, or fp32 for bf16 and
     * fp16 parts (else -1 naming the formats).  The GEMM over the joined K
     * that a fused layer's input gradient needs (attn.qkv.dgrad). */
    int (*concat_columns)(tbackend *be, ktensor *y, const ktensor *const *x, int n);
    /* the global gradient norm sqrt(sum of g^2) over every parameter's
     * gradient (fp32 result), norm[r] for replica r */
    int (*grad_norm)(tbackend *be, const tsite *at, tparam *const *params, int n, double *norm);
    /* replica r updated with a[r] (a: R entries) */
    int (*adamw)(tbackend *be, tparam *p, const tadamw_args *a);
    int (*muon)(tbackend *be, tparam *p, const tmuon_args *a);
    /* Data parallel: join `world` processes (this one is `rank`) through the
     * NCCL unique id in id_file (rank 0 writes it).  A single process needs
     * no call.  Then allreduce sums gradients over ranks in the allreduce
     * slot's format and algorithm (identity for a single process). */
    int (*dp_init)(tbackend *be, int world, int rank, const char *id_file);
    int (*allreduce)(tbackend *be, tparam *const *params, int n);
    /* R > 1: replace the ops that have batched forms (tbackend_set_replicas
     * has installed the loops over replicas first); NULL: loops only */
    int (*batch_replicas)(tbackend *be);
    void (*destroy)(tbackend *be);
};

/* Make be run R replicas (before anything is allocated; once): every op
 * becomes a loop over replicas calling the single-replica op on slices,
 * then the backend's batched forms replace what they cover.  0 or -1. */
int tbackend_set_replicas(tbackend *be, int R);
/* Elements between replicas' copies of a tensor of n elements in format f:
 * n rounded up so that each copy starts 256 bytes after an aligned one
 * (a single allocation's alignment, which GEMM plans depend on). */
int64_t tbackend_replica_stride(const tbackend *be, prec_format f, int64_t n);
/* Replica r's copy of t (t itself when t is not replicated). */
ktensor tbackend_slice(const tbackend *be, const ktensor *t, int r);
/* The parameter with every tensor sliced to replica r (lowbits too). */
tparam tbackend_param_slice(const tbackend *be, const tparam *p, int r);

static inline size_t tensor_image_bytes(const ktensor *t)
{
    return (size_t)ktensor_numel(t) * kformat_bytes(t->format) + (t->scale ? sizeof(float) : 0);
}

/* Weights (see weights_version above).  mark: t's bytes (every replica's
 * copy) are weights from now until t is released (0, or -1 out of memory).
 * is_weight: [p, p + bytes) lies inside a marked tensor.  guard: wraps the
 * ops that write memory a caller names (release, raw_upload, upload,
 * write_bytes, zero, transpose, accumulate, adamw, muon) so that each bumps
 * weights_version when what it writes overlaps a weight; the backends call
 * it when created and tbackend_set_replicas again over its loops, so every
 * such write through the backend counts, whoever makes it.  Binding a plan
 * bumps it too. */
int tbackend_mark_weights(tbackend *be, const ktensor *t);
int tbackend_is_weight(const tbackend *be, const void *p, size_t bytes);
void tbackend_guard_weights(tbackend *be);
void tbackend_unguard_weights(tbackend *be);
/* A planted mistake for the weight cache's twin (on != 0): writes never bump
 * weights_version, so cached images go stale.  Never set outside tests. */
void tbackend_plant_stale_weights(int on);
/* The fp8 operand memo's twin (CUDA backend; on != 0): an entry is served to
 * any tensor of its shape and formats, not only to the one it was made from
 * (in a training step: another layer's image).  Never set outside tests. */
void tbackend_cuda_plant_memo_mixup(int on);
/* Its twin of the drops on writes (on != 0): an op's ktensor outputs do not
 * drop the entries over them.  Never set outside tests. */
void tbackend_cuda_plant_memo_blind(int on);
/* The fp8 graph's twin (CUDA backend; on != 0): a replay does not refresh the
 * weight images, so its GEMMs read the ones of an earlier update.  Never set
 * outside tests. */
void tbackend_cuda_plant_stale_graph_weights(int on);

/* fp8_scaling=delayed: one amax history per (GEMM site, operand, replica).
 * The index of the one for site `at`, operand 0 (A) or 1 (B), replica
 * be->replica_now, in [0, tbackend_fp8_history_count(be)) for the bound plan's depth. */
int64_t tbackend_fp8_history_count(const tbackend *be);
int64_t tbackend_fp8_history_index(const tbackend *be, const tsite *at, int operand);
/* Whether GEMMs at site `at` take their fp8 scales from amax histories. */
int tbackend_fp8_delayed(const tbackend *be, const tsite *at);

/* A CPU backend (always available). */
tbackend *tbackend_cpu_create(void);
/* Self-tests of the experiments (compare --plant-truncation, bisect's tests):
 * while kernels_planted_bug() is KBUG_TRUNCATE_OUTPUT the CPU backend
 * truncates the stores of one site only, slot `slot` at `layer` running
 * `variant` (each -1: any; slot -1: every op, the default).  Process-wide. */
void tbackend_cpu_plant_site(int slot, int layer, int variant);
/* Tests of fp8_scaling=delayed: the per-tensor scales (A, B) of the CPU
 * backend's last fp8 GEMM; and a planted mistake for their twin (on != 0):
 * every site shares one history per operand.  Process-wide. */
void tbackend_cpu_last_fp8_scales(float *a, float *b);
void tbackend_cpu_plant_shared_fp8_history(int on);
/* One stage of the CPU backend's polar express (its optimizer.muon), the
 * code its Muon runs, for `ulpscope trace` to replay stage by stage: stage 0
 * normalises X, stages 1 to 5 run that step; X [rows, cols] row-major holds
 * values of the site's path format and is replaced by the stage's output.
 * at: the optimizer.muon site (op, path, variant; a planted truncation of
 * that site applies).  0, or -1 out of memory. */
int tbackend_cpu_polar_express_stage(const tsite *at, float *X, int rows, int cols, int stage);
/* A CUDA backend, or NULL with the reason in why (no GPU, no kernels). */
tbackend *tbackend_cuda_create(char *why, size_t why_len);

/* Bind a plan for a model of `depth` layers: every (slot, layer) resolved
 * once (tplan_bind; the caller keeps the plan alive and rebinds after
 * editing it, which is how slots switch mid-run).  Checks that the backend
 * can run every used site at its (op, path, variant); returns 0, or -1 with
 * an error naming the first site it cannot run.  The previous binding stays
 * in force on error. */
int tbackend_bind_plan(tbackend *be, const tplan *plan, int depth);
/* The bound site of slot s in layer `layer` (-1 for global slots). */
static inline const tsite *tbackend_site(const tbackend *be, tslot s, int layer)
{
    return tbinding_site(&be->bound, s, layer);
}

/* Host memory this process may still allocate: the least of the kernel's
 * MemAvailable (/proc/meminfo, else sysconf), the cgroup's memory limit less
 * its usage, and RLIMIT_AS / RLIMIT_DATA less what the process maps; what
 * names the one that binds.  0, or -1 when none can be read. */
int tbackend_host_available(size_t *bytes, char *what, size_t what_len);

/* concat_columns' arguments checked (both backends call it first): 2-D
 * shapes that join (y's width the parts' sum, every row count equal), n in
 * 1..4, no fp8 scale, and y's format holding each part's values exactly.
 * 0, or -1 with a message naming the shapes or formats. */
int tbackend_check_concat(tbackend *be, const ktensor *y, const ktensor *const *x, int n);

const char *tbackend_error(const tbackend *be);
/* Records an error (printf-style) and returns -1. */
int tbackend_fail(tbackend *be, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Stochastic rounding bits for element i of stream `seed`: a counter-based
 * hash, so a run needs no random state to resume bit-for-bit. */
static inline uint64_t tbackend_sr_bits(uint64_t seed, uint64_t i)
{
    uint64_t z = seed ^ (i * 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#ifdef __cplusplus
}
#endif
#endif
