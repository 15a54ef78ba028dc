/* kernels/matmul.h — y = epilogue(alpha * op(A) op(B) + beta * C): cuBLASLt for
 * fp32 / tf32 / bf16 / fp16 / fp8 with per-tensor scales, and our own
 * block-scaled fp8 kernel (DeepSeek-V3 style).
 *
 * Shapes (row-major, last dimension contiguous):
 *   A  [M,K] when a_trans = 0, [K,M] when a_trans = 1
 *   B  [K,N] when b_trans = 0, [N,K] when b_trans = 1 (nn.Linear's weight [out, in])
 *   C, y [M,N]; bias [N]
 * A linear layer y = x W^T + b (x [tokens, in], W [out, in]) is
 *   forward  y  = x W^T   M=tokens N=out K=in      a_trans=0 b_trans=1
 *   backward dx = dy W    M=tokens N=in  K=out     a_trans=0 b_trans=0
 *            dW = dy^T x  M=out    N=in  K=tokens  a_trans=1 b_trans=0
 *
 * Paths (what A, B, C, y and bias hold):
 *   fp32, bf16, fp16: all tensors in that format; accumulation in fp32.
 *   fp8: A and B are e4m3 or e5m2 (e4m3 x e4m3 for the forward, e5m2 x e4m3
 *        for gradients; e5m2 x e5m2 is not offered by the hardware) with fp32
 *        scales (real value = stored * scale); C, y and bias are bf16.  The fp8
 *        kernels need both operands K-contiguous (a_trans = 0, b_trans = 1:
 *        cuBLASLt's "TN" layout), K % 16 == 0 and N % 16 == 0 (16-byte rows);
 *        M is free.  kfp8_quantize*() below produce that layout from bf16/fp32
 *        tensors in any orientation; kmatmul_quantized() does it all in one call.
 *
 * Accumulation schemes (kmatmul_accum; the registry lists each as an op of its
 * own because each applies to some paths only):
 *   KMATMUL_ACC_DEFAULT  fp32 accumulation; fp8: cuBLASLt's default, which
 *                        periodically promotes partial sums out of the tensor
 *                        cores' reduced-precision accumulator      (op matmul)
 *   KMATMUL_ACC_FAST     fp32 path: inputs rounded to tf32 on the tensor cores
 *                        (CUBLAS_COMPUTE_32F_FAST_TF32); fp8 path:
 *                        CUBLASLT_MATMUL_DESC_FAST_ACCUM, no promotion
 *                                                               (op matmul_fast)
 *   KMATMUL_ACC_BLOCK_SCALED  fp8 path: our mma.sync kernel with one scale per
 *                        1x128 tile of A and per 128x128 tile of B; the
 *                        tensor-core partial sum of each 128-element K group is
 *                        promoted to an fp32 accumulator (DeepSeek-AI,
 *                        "DeepSeek-V3 Technical Report", arXiv:2412.19437,
 *                        section 3.3.2).  Compute capability 8.9+; its epilogue
 *                        is always fused (variant fused only) (op matmul_block_fp8)
 *
 * Variants (run-time; kmatmul_variants[] names them for the registry):
 *   fused           cuBLASLt's best heuristic algorithm with cuBLASLt's own
 *                   split-K excluded; bias and GELU in the cuBLASLt epilogue
 *   split_epilogue  the GEMM rounds alpha*AB + beta*C to the output format, then
 *                   our kernel adds the bias and applies GELU in fp32 and rounds
 *                   again (two roundings instead of one)
 *   split_k         K cut into 4 slices, each a cuBLASLt GEMM into an fp32
 *                   partial; our kernel adds the slices in a fixed order and
 *                   applies the epilogue (deterministic, no atomics)
 *
 * GELU is the tanh form 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))), the one
 * cuBLASLt's epilogue implements.
 *
 * Planted bugs (kernels_planted_bug()): drop-term leaves the last term of every
 * dot product out (fp8 cuBLASLt paths: the last 16, the smallest step their
 * layout allows); truncate-output rounds the bf16/fp16 output toward zero (the
 * GEMM then writes fp32 and our epilogue kernel rounds).  fp32 cuBLASLt output
 * has no rounding of ours to plant a bug in: those variants honour drop-term only.
 *
 * All calls run on the current stream (kernels_set_stream) and are
 * deterministic: the same inputs give the same bits on the same GPU model and
 * library version.  Internal workspaces (cuBLASLt's 32 MiB, split-K partials,
 * fp8 copies) grow on demand and persist until kmatmul_release(); cuBLASLt
 * plans are made on a shape's first call.  Both happen outside a CUDA-graph
 * capture only: make each call once before capturing.
 *
 * Replicas (kmatmul_batched): R independent GEMMs of one shape whose
 * operands lie at fixed strides, e.g. R training runs' weights [R, N, K] and
 * activations [R, M, K].  Replica r gets exactly the bits kmatmul gives on
 * replica r's operands alone, for every path, scheme and variant:
 *   - cuBLASLt GEMMs (each K slice of split_k too) run as one strided-batched
 *     call with the algorithm the batch-1 problem's heuristic chose (pinned),
 *     or with a faster one the heuristic ranks for the batched problem that a
 *     probe, on the plan's first call, found to give the pinned algorithm's
 *     bytes on operands built to expose any other order of the sum (bf16
 *     plans where cuBLASLt adds along K in the same order with other tiles;
 *     ULPSCOPE_BATCHED_GEMM_PINNED=1 keeps the pinned one); if
 *     cublasLtMatmulAlgoCheck refuses the algorithm for the batched layouts,
 *     the GEMM runs as R single calls on the same stream (counted in
 *     kmatmul_batch_stats);
 *   - fp8 with per-tensor scales: cuBLASLt takes one scale per operand per
 *     call, so the GEMM runs as R single calls, each with its replica's
 *     scales (counted);
 *   - our kernels (split-K reduction, split epilogue, block-scaled fp8) take
 *     the replica as one more grid dimension; each output element's
 *     arithmetic is the same as in a single call.
 * The plan of a batched call is made for the alignment its operands keep
 * at the replica strides: with strides that are multiples of 256 bytes it is
 * the plan of a single call on a fresh allocation (cudaMalloc aligns to 256),
 * so keep replica strides at multiples of 256 bytes to match separate runs. */
#ifndef ULPSCOPE_KERNELS_MATMUL_H
#define ULPSCOPE_KERNELS_MATMUL_H

#include "kernels/kernels.h"
#include "kernels/registry.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    KMATMUL_FUSED = 0,
    KMATMUL_SPLIT_EPILOGUE,
    KMATMUL_SPLIT_K,
    KMATMUL_NVARIANTS
} kmatmul_variant;

typedef enum {
    KMATMUL_ACC_DEFAULT = 0,
    KMATMUL_ACC_FAST,
    KMATMUL_ACC_BLOCK_SCALED,
    KMATMUL_NACCUMS
} kmatmul_accum;

const char *kmatmul_accum_name(kmatmul_accum acc); /* "default", "fast", "block_scaled" */

extern const kvariant kmatmul_variants[KMATMUL_NVARIANTS];

#define KMATMUL_SPLIT_K_SLICES 4
#define KMATMUL_FP8_BLOCK 128 /* block_scaled: K group and weight tile edge */

typedef struct {
    int64_t M, N, K;
    int a_trans, b_trans;
    const void *a, *b;     /* device */
    void *y;               /* device [M,N] */
    const void *c;         /* device [M,N] or NULL; may equal y */
    float alpha, beta;     /* y = epi(alpha * AB + beta * C) */
    const void *bias;      /* device [N] or NULL */
    int gelu;              /* apply GELU after the bias */
    /* fp8 path only */
    prec_format a_format, b_format; /* PREC_E4M3 or PREC_E5M2 */
    const float *a_scale;  /* per tensor: one float; block_scaled: [M, ceil(K/128)] */
    const float *b_scale;  /* per tensor: one float; block_scaled: [ceil(N/128), ceil(K/128)] */
    /* bf16/fp16 paths: C, y and bias in fp32 instead of the path's format
     * (the GEMM's fp32 accumulator unrounded: logits for a loss, gradient
     * accumulation).  Not offered on the fp8 path. */
    int y_fp32;
} kmatmul_args;

/* Returns 0, or -1 with kernels_last_error() naming the op, path, variant,
 * shape and the failing call (or the broken constraint). */
int kmatmul(kpath path, kmatmul_accum accum, int variant, const kmatmul_args *args);

/* R replicas of one GEMM: args describes replica 0 (its pointers, the shared
 * shape and scalars); replica r's operands are at r times the strides below
 * (elements of each operand's own type; 0 shares the operand).  y's stride
 * must keep replicas' outputs apart (>= M*N); an in-place C (c == y) needs
 * stride_c == stride_y.  fp8 per-tensor scales: a_scale + r * stride_a_scale
 * (one float each); block-scaled: the replica's whole scale array. */
typedef struct {
    int64_t count; /* R >= 1 */
    int64_t stride_a, stride_b, stride_c, stride_y, stride_bias;
    int64_t stride_a_scale, stride_b_scale;
} kmatmul_batch;

/* kmatmul is kmatmul_batched with batch NULL (one replica). */
int kmatmul_batched(kpath path, kmatmul_accum accum, int variant, const kmatmul_args *args,
                    const kmatmul_batch *batch);

/* How the batched GEMMs of the calls so far ran, one count per cuBLASLt GEMM
 * of R > 1 replicas (a split_k call has one per K slice). */
typedef struct {
    int64_t strided;         /* one strided-batched call with the pinned algorithm */
    int64_t strided_checked; /* one strided-batched call with another algorithm the probe found bit-identical */
    int64_t loop_fallback;   /* R single calls: the pinned algorithm refused for the batched layouts */
    int64_t loop_fp8;      /* R single calls: fp8 per-tensor scales (by design) */
    int64_t kernel;        /* block-scaled fp8: our kernel with the replica as a grid dimension */
    int64_t probes;         /* candidate algorithms the probe ran (once per batched plan) */
    int64_t probe_refusals; /* of which some output byte differed from the pinned algorithm's */
} kmatmul_batch_stats;
void kmatmul_batch_stats_get(kmatmul_batch_stats *stats);
void kmatmul_batch_stats_reset(void);

/* A planted mistake for the replica tests' twin (on != 0): batched cuBLASLt
 * calls run the pinned algorithm with cuBLASLt's split-K switched (2 slices,
 * or none where it had some), so each replica's sums are formed in another
 * order than a single call's.  Never set outside tests. */
void kmatmul_plant_batched_algo_change(int on);
/* The probe's twin (on != 0): the candidates it tries read an operand with
 * one element changed, so it must refuse them all.  Tests only. */
void kmatmul_plant_probe_perturbation(int on);

/* 1 when (path, accum, variant) exists, else 0 with the reason in why. */
int kmatmul_supports(kpath path, kmatmul_accum accum, int variant, char *why, size_t why_len);

/* Per-tensor fp8 quantisation with the scale from the current amax, all on the
 * GPU: scale = amax / max_finite(fp8) (1 when amax = 0), q = round-to-nearest-
 * even(x / scale) saturated to +-max_finite.  Two launches (amax, then the
 * quantise pass, which computes the scale and zeroes the amax buffer of the
 * next call), two reads of x.  x [rows, cols] in x_format (fp32
 * or bf16); q is [rows, cols], or [cols, rows] when transpose = 1; *scale is a
 * device float. */
int kfp8_quantize_tensor(const void *x, prec_format x_format, int64_t rows, int64_t cols, int transpose,
                         prec_format fp8, void *q, float *scale);
/* The same for count tensors at x + r * x_stride (elements), each with its
 * own amax: q at q + r * q_stride (bytes), scales[r]. */
int kfp8_quantize_tensor_batched(int64_t count, const void *x, int64_t x_stride, prec_format x_format, int64_t rows,
                                 int64_t cols, int transpose, prec_format fp8, void *q, int64_t q_stride,
                                 float *scales);
/* Current scaling keeps two halves of amax words and a host-side parity (one
 * launch fewer a call).  This zeroes both and resets the parity, on the
 * current stream: what a CUDA graph of quantising calls needs at the start
 * and end of its capture, and eagerly after it. */
int kfp8_amax_rewind(void);

/* kfp8_quantize_tensor's current scaling into both layouts at once: q [rows,
 * cols] and q_t [cols, rows], the bytes of two calls (transpose 0 and 1), with
 * one amax pass and, where both sides are multiples of 64, one read of x.
 * For a tensor two GEMMs read in both orientations (a gradient's dgrad and
 * wgrad). */
int kfp8_quantize_tensor_dual(const void *x, prec_format x_format, int64_t rows, int64_t cols, prec_format fp8,
                              void *q, void *q_t, float *scale);
/* The planted twin of the 64 x 64 transposing quantiser's test (on != 0): two
 * 16-row chunks of each transposed tile column swapped. */
void kfp8_plant_tile_transpose_bug(int on);

/* Quantisation with a scale known before the pass (delayed scaling), in one
 * read of x: q = round-to-nearest-even(x / *scale) saturated to
 * +-max_finite, and x's amax recorded with an atomic max on its float bits
 * into *amax (device; the caller zeroes it first).  A scale too small for x
 * saturates (the fp8 casts are __NV_SATFINITE). */
int kfp8_quantize_tensor_scaled(const void *x, prec_format x_format, int64_t rows, int64_t cols, int transpose,
                                prec_format fp8, const float *scale, void *q, float *amax);

/* Delayed scaling (NVIDIA Transformer Engine's DelayedScaling recipe, amax
 * max over the history): one tensor's amaxes over its last KFP8_HISTORY_LEN
 * calls, on the device in a ring of KFP8_HISTORY_SLOTS floats (two spare:
 * the slot this call records into and the one it zeroes for the next, so one
 * launch reads the history while recording).  calls: host count. */
#define KFP8_HISTORY_LEN 16
#define KFP8_HISTORY_SLOTS (KFP8_HISTORY_LEN + 2)
typedef struct {
    float *slots;
    int64_t calls;
    int frozen; /* set by the caller for forward-only passes (validation): the scale comes from the history
                 * (a history with no call yet: the tensor's own amax, as current scaling) and nothing is
                 * recorded, calls unchanged */
} kfp8_history;
int kfp8_history_init(kfp8_history *h); /* allocates zeroed slots: 0 or -1 */
void kfp8_history_free(kfp8_history *h);
/* q = sat(x / scale) with scale = (max of the history's last min(calls, 16)
 * amaxes) / max_finite (1 when 0), written to *scale (device), and x's amax
 * recorded: one launch, one read of x.  The first call (calls = 0) scales by
 * x's own amax (amax, then quantise: two launches).  calls is incremented. */
int kfp8_quantize_tensor_delayed(const void *x, prec_format x_format, int64_t rows, int64_t cols, int transpose,
                                 prec_format fp8, void *q, float *scale, kfp8_history *h);

/* Block-scaled quantisation into the K-contiguous layout the block_scaled
 * variant reads: q [R,K]; x is [R,K] (x_transposed = 0) or [K,R] (1); one
 * scale per tile of block_rows x 128 (block_rows = 1 for activations, 128 for
 * weights): scales [ceil(R/block_rows), ceil(K/128)], each amax/max_finite of
 * its tile. */
int kfp8_quantize_blocks(const void *x, prec_format x_format, int64_t R, int64_t K, int x_transposed,
                         int block_rows, prec_format fp8, void *q, float *scales);
/* The same for count tensors: x + r * x_stride, q + r * q_stride,
 * scales + r * scales_stride. */
int kfp8_quantize_blocks_batched(int64_t count, const void *x, int64_t x_stride, prec_format x_format, int64_t R,
                                 int64_t K, int x_transposed, int block_rows, prec_format fp8, void *q,
                                 int64_t q_stride, float *scales, int64_t scales_stride);

/* The fp8 path from bf16 or fp32 tensors in any orientation: A and B (in
 * x_format, a_trans/b_trans as in kmatmul_args) are quantised into internal
 * workspaces (per tensor, or per block for KMATMUL_ACC_BLOCK_SCALED) to
 * a_fp8/b_fp8 and multiplied; C, y and bias are bf16.  The trainer's fp8
 * matmul slot: e4m3 x e4m3 forward, e5m2 (gradient) x e4m3 backward. */
int kmatmul_quantized(kmatmul_accum accum, int variant, const kmatmul_args *args, prec_format x_format,
                      prec_format a_fp8, prec_format b_fp8);
/* The same for replicas: batch's strides are those of the unquantised A and
 * B (x_format elements) and of C, y, bias; its scale strides are ignored
 * (each replica's scales come from its own amax, kept internally). */
int kmatmul_quantized_batched(kmatmul_accum accum, int variant, const kmatmul_args *args, const kmatmul_batch *batch,
                              prec_format x_format, prec_format a_fp8, prec_format b_fp8);

/* One replica's per-tensor fp8 GEMM with a choice per operand: q non-NULL:
 * the operand already quantised (A [M,K], B [N,K], K contiguous; 256-byte
 * aligned like a workspace, so the GEMM's plan is the one of
 * kmatmul_quantized) with its device scale; else history non-NULL: delayed
 * scaling from it (kfp8_quantize_tensor_delayed); else (or op NULL) current
 * scaling as kmatmul_quantized.  With every operand current, the bits of
 * kmatmul_quantized; with a given operand that is what kmatmul_quantized
 * would have made of it, the same bits again.  Not block_scaled. */
typedef struct {
    const void *q;
    const float *scale;
    kfp8_history *history;
} kfp8_operand;
int kmatmul_quantized_ex(kmatmul_accum accum, int variant, const kmatmul_args *args, prec_format x_format,
                         prec_format a_fp8, prec_format b_fp8, const kfp8_operand *a_op, const kfp8_operand *b_op);

/* Benchmarks: the single cuBLASLt GEMM that kmatmul(path, accum, fused)
 * issues (default or fast accumulation; no epilogue), timed for each of up to
 * max_algos heuristic candidates: median milliseconds of reps runs each (CUDA
 * events) into ms[i]; *n_algos gets the number timed, ms[0] being the
 * algorithm kmatmul itself uses. */
int kmatmul_time_algos(kpath path, kmatmul_accum accum, const kmatmul_args *args, int max_algos, int reps,
                       double *ms, int *n_algos);

/* The accumulation model the checks assume for one dot product of K terms
 * (kernels/check/check_matmul.c explains each): the relative factor G with
 * |computed - exact| <= G sum |a_k b_k| before the epilogue, and whether the
 * model truncates (its errors then are biased: no probabilistic bound). */
double kmatmul_error_factor(kpath path, kmatmul_accum accum, int64_t K, int *truncating);

/* The cuBLASLt algorithm the last GEMM ran: "cuBLASLt algo ID tile T stages S
 * splitK N reduction R" ("" before the first); for results and diagnostics. */
const char *kmatmul_last_algo(void);

/* Device bytes the internal workspaces hold now (for memory accounting). */
size_t kmatmul_workspace_bytes(void);

/* Frees the internal workspaces and cached cuBLASLt plans. */
void kmatmul_release(void);

#ifdef __cplusplus
}
#endif
#endif
