/* ulpscope/verify.h — precision unit tests for kernels that are not
 * ulpscope's (installed as <ulpscope/verify.h>; `ulpscope verify` is the
 * command-line face of the same function).
 *
 * Give the tensors a kernel saw and produced and what you know about the
 * kernel (its storage format, accumulation format, reduction shape,
 * upcasting, the error of its math functions).  ulp_verify computes the MPFR
 * reference of every output element (correctly rounded to double), a bound
 * on each element's error for the kernel so described, replayed on the
 * actual inputs, and reports per output: max and RMS error in units of the
 * storage format's unit roundoff u, the worst element with its inputs, the
 * bound in the same units, PASS or FAIL (the verdict `ulpscope check` gives
 * its own kernels: every element within its bound, the RMS error within the
 * probabilistic RMS bound, no non-finite output where the reference is
 * finite).
 *
 * What you cannot describe, say "unknown": the report then has two rows per
 * output, the tightest assumption (fp32 accumulation, pairwise reduction,
 * every step in fp32) and the loosest (accumulation in the storage format,
 * sequential, every step rounded to the storage format), and the verdict is
 * taken against the loosest, which the report says.
 *
 * Plain C11; link with `pkg-config --cflags --libs ulpscope`. */
#ifndef ULPSCOPE_VERIFY_H
#define ULPSCOPE_VERIFY_H

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ULP_MAX_DIMS 8

/* How a tensor's elements are stored in memory. */
typedef enum {
    ULP_F64 = 0,   /* double */
    ULP_F32,       /* float */
    ULP_BF16_BITS, /* uint16_t bf16 bit patterns */
    ULP_F16_BITS   /* uint16_t IEEE binary16 bit patterns */
} ulp_dtype;

typedef struct {
    const char *name;   /* the op's name for it: "x", "gain", "y", ... (ulp_op_help lists them) */
    ulp_dtype dtype;
    const void *data;   /* row-major (C order) */
    int ndim;
    int64_t shape[ULP_MAX_DIMS];
} ulp_tensor;

/* ULP_TENSOR(name, dtype, data, dims...): ulp_tensor x = ULP_TENSOR("x", ULP_F32, xs, 4, 512); */
#define ULP_NARGS_(a, b, c, d, e, f, g, h, n, ...) n
#define ULP_NARGS(...) ULP_NARGS_(__VA_ARGS__, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define ULP_TENSOR(name, dtype, data, ...) \
    ((ulp_tensor){(name), (dtype), (data), ULP_NARGS(__VA_ARGS__), {__VA_ARGS__}})

/* What you declare about the kernel.  Start from ULP_KERNEL_DEFAULT. */
typedef struct {
    const char *path;     /* storage format of the op's tensors: "fp32", "bf16" or "fp16"; matmul also
                             "fp8" (a, b: the dequantised fp8 operands the GEMM saw, any finite
                             values; c, bias, y: bf16) */
    const char *pass;     /* "fwd" or "bwd" */
    const char *accum;    /* format the sums are accumulated in: "fp32", "fp64", "bf16", "fp16",
                             "storage" (the path's format) or "unknown" (the elementwise ops, which
                             have no sums: the format of their arithmetic); matmul also the
                             matrix-unit models "tensor-core" (bf16/fp16 tensor cores: exact
                             products, block FMAs truncating to fp32), "tf32" (the same after
                             rounding fp32 inputs to tf32), "fp8-promote:N" (fp8 tensor cores,
                             ~14 bits, promoted to fp32 every N products), "fp8-fast" (never
                             promoted), "fp8-groups:N" (one fp32 fma per group of N) */
    const char *reduce;   /* shape of the row sums (matmul: over K, for a rounded accumulator):
                             "sequential", "pairwise", "blocked:B" (consecutive blocks of B, then
                             the block sums in order), "blocks:T" (T threads each summing a strided
                             share in order, then a tree), "depth:D" (the longest chain of
                             roundings) or "unknown" */
    const char *col_reduce; /* shape of sums over rows (dgain, dbias); same syntax */
    const char *upcast;   /* rmsnorm: "gemma" (every step in fp32, one rounding of y), "llama"
                             (x rstd rounded to storage before the gain), "none" (statistics in
                             the storage format too) or "unknown"; polar_express: below */
    double math_ulps;     /* error of the math functions (rsqrt) in ulps of fp32 */
    double eps;           /* rmsnorm's and layernorm's epsilon */
    /* matmul: y = epi(alpha A B + beta C), epi: + bias, then GELU when gelu */
    const char *epilogue; /* "single" (one rounding of y, GELU with a 2-ulp tanhf), "rounded"
                             (alpha A B + beta C rounded to y's format before bias and GELU),
                             "cublaslt" (rounded, and tanh as tanh.approx.f32: cuBLASLt's fused
                             epilogue as observed) or "unknown" */
    const char *layout;   /* "AB" (a is (M, K), b (K, N)), "AtB" (a is (K, M)), "ABt" (b is
                             (N, K)), "AtBt" */
    double alpha, beta;   /* fp32 values, as kernels take them; beta != 0 needs the tensor c */
    int gelu;
    int split_k;          /* K cut into this many slices of ceil(K / split_k) terms, each
                             accumulated as declared, the slices then added (1: none) */
    const char *variance; /* layernorm: "two-pass" (mean, then sum (x - mean)^2), "one-pass"
                             (sum x and sum x^2, var = E[x^2] - mean^2), "welford" (one
                             sequential pass), "welford:T" or "welford:TxV" (T threads, 32 per
                             warp, each a Welford over V consecutive elements per step of a
                             strided share, then pairwise combination over a butterfly per warp
                             and one over the warps) or "unknown" */
    const char *exp_form; /* softmax, logsumexp (with the logarithm of the same family): "exp"
                             (expf(x - max), 2 ulps), "exp2" (exp2f(x log2e - max log2e), the
                             argument folded with an fma), "fast" (__expf, 2 + floor(1.173 |x -
                             max|) ulps) or "unknown" */
    double dloss;         /* cross_entropy: the loss gradient the dlogits are scaled by (an fp32
                             value; 1/N for a mean over N rows); 0: not given */
    int online;           /* cross_entropy: one pass, the sum rescaled at each new maximum */
    const char *function; /* gelu_tanh: "tanh" (0.5 x (1 + tanhf(z))), "tanh-approx" (tanh.approx.f32,
                             2^-10.987 absolute), "sigmoid" (x / (1 + expf(-2z))); gelu_erf: "erf" (0.5 x
                             (1 + erff(x / sqrt 2)), expf for the backward's pdf), "normcdf" (x normcdff(x),
                             CUDA's 5 ulps or math_ulps where larger); either: "any" (whichever form: the
                             largest of their bounds per element) or "unknown".  math_ulps is the error of
                             tanhf, erff and expf.  The activations' accum is the format of their
                             arithmetic (they have no sums) */
    /* adamw: the step's hyperparameters as the kernel took them (fp32 values; eps above is
       adam's epsilon, step t >= 1 drives the bias corrections 1 - beta^t, which kernels compute
       in double and round to fp32 once); accum is the format of the update's arithmetic and of
       m, v and the master */
    double lr, beta1, beta2, weight_decay;
    int64_t step;
    const char *order;    /* adamw: "llmc" (m = b1 m + (1-b1) g, ..., p -= lr (mhat / (sqrt(vhat) + eps)
                             + wd p)), "torch" (p *= 1 - lr wd, m += (1-b1)(g - m), ..., p -= (lr/bc1) m
                             / (sqrt(v)/sqrt(bc2) + eps)), "any" (the larger bound) or "unknown" */
    const char *store;    /* adamw: how the new weights are stored: "nearest", "stochastic" (any
                             point below one ulp), "truncate" (a split master's high half) or
                             "unknown" */
    /* attention (causal; q, k, v (..., T, D)): accum "fp32" or "tensor-core" (flash_mma's
       arithmetic on the H100's matrix units: bf16/fp16); reduce: the softmax row sum's and
       the backward delta's; exp_form "exp" or "exp2" (log2 e folded into the scale); math_ulps:
       the exponential's error (the logarithm's: 1 ulp) */
    const char *softmax;  /* "materialised" (S, P, and in the backward dP, dS, rounded to the storage
                             format; delta = sum P dP), "online" (FlashAttention: tiles of 32 keys,
                             running max, fp32; delta = dout . o), "two-pass" (fp32, P normalised
                             before P v; delta = dout . o) or "unknown"; the backward takes P from
                             the stored lse */
    double scale;         /* the fp32 value the scores are multiplied by; 0: fp32(1/sqrt(D)) */
    int causal;           /* 1 (the default); 0 is refused: the reference is causal */
    /* polar_express (G (rows, cols); outputs the stages x0 = G / (1.02 |G|_F + 1e-6), x1 ... x5, each
       judged from the kernel's own previous iterate): accum is the GEMMs' (fp32, fp64, storage, bf16,
       fp16, tensor-core, tf32, unknown), reduce the norm's fp32 sum of squares, upcast the rest of the
       normalisation: "fp32" or "none" (in the storage format: PyTorch's X / (X.norm() * 1.02 + 1e-6)
       on a bf16 X) or "unknown", epilogue "single" (x' = B x + a x in one GEMM) or "rounded" (B x
       rounded to storage, then + a x) or "unknown" */
    const char *coeffs;   /* "polar-express" (Amsel et al.'s five triples, as modded-nanogpt), "muon-quintic"
                             (3.4445, -4.7750, 2.0315 each step) or "a,b,c" (one triple for every step);
                             rounded to fp32 as kernels take them */
    const char *form;     /* "wide" (A = x x^T), "tall" (A = x^T x), "any" (the larger bound) or "unknown" */
    /* rope (x (..., T, H, D), half-split pairs, theta = pos base^(-2i/D)); accum: the rotation's arithmetic */
    const char *angle;    /* "table" (fp32 cos, sin: the inputs cos, sin, or correctly rounded), "fp32" (the angle
                             fl(pos inv_freq) in fp32, then sincosf: math_ulps, inv_freq the input or within
                             math_ulps) or "unknown" */
    double base;          /* theta's base (10000) */
    double softcap;       /* cross_entropy: the logit soft-cap c, an fp32 value (each logit l becomes
                             c tanhf(l / c) before the loss, the gradient times 1 - tanhf^2); 0: none */
} ulp_kernel;

#define ULP_KERNEL_DEFAULT                                                                            \
    ((ulp_kernel){"fp32", "fwd", "unknown", "unknown", "unknown", "unknown", 2.0, (double)1e-5f, "unknown", \
                  "AB", 1.0, 0.0, 0, 1, "unknown", "unknown", 0.0, 0, "unknown", 0.0, 0.0, 0.0, 0.0, 0,   \
                  "unknown", "unknown", "unknown", 0.0, 1, "unknown", "unknown", "unknown", 10000.0, 0.0})

typedef struct {
    char output[16];        /* "y", "dx", ... */
    char assumption[200];   /* the declaration this row's bound takes, as options */
    char shape[96];
    int64_t n;
    double unit_roundoff;   /* u of the storage format (fp32 for rstd) */
    double max_err_u, rms_err_u; /* errors over u times each element's scale */
    double max_bound_u, rms_bound_u;
    double worst_ratio;     /* max |got - ref| / bound; <= 1 passes */
    int64_t worst_index;
    char worst_detail[256]; /* got, ref and the inputs of the worst element */
    int64_t nonfinite;
    int pass;
    int vacuous;            /* the declaration gives no finite bound here (every finite output passes) */
} ulp_row;

#define ULP_MAX_ROWS 16
typedef struct {
    char op[32];
    char pass[4];
    int n_rows;
    ulp_row rows[ULP_MAX_ROWS];
    int unknown;            /* rows come in pairs: tightest, then loosest */
    int pass_verdict;       /* 1: PASS */
    char verdict[768];      /* one line: PASS or FAIL and against which bound */
    char diagnosis[768];    /* on a FAIL of a declared kernel: a looser declaration the outputs fit, or none */
} ulp_report;

enum { ULP_PASS = 0, ULP_FAIL = 1, ULP_BAD_INPUT = 2 };

/* Returns ULP_PASS or ULP_FAIL with *rep filled, or ULP_BAD_INPUT with err
 * holding one line (an unknown op, name or declaration, a missing tensor, a
 * shape mismatch, a value the declared storage format cannot hold). */
int ulp_verify(const char *op, const ulp_kernel *k, const ulp_tensor *inputs, int n_inputs,
               const ulp_tensor *outputs, int n_outputs, ulp_report *rep, char *err, size_t errlen);

/* The table `ulpscope verify` prints: a header, one line per row, the worst
 * element of every FAIL row, the verdict and the diagnosis. */
void ulp_report_print(FILE *fp, const ulp_report *rep);

/* The ops ulp_verify knows ("cross_entropy, matmul, ..."), and one op's tensors per pass. */
const char *ulp_op_names(void);
void ulp_op_help(FILE *fp);
/* The names of op's tensors for pass ("fwd", "bwd") and role (0 inputs, 1
 * outputs), in order, NULL-terminated in names[max]; -1 for an unknown op or
 * pass, or a pass the op does not have (ulp_verify says why). */
int ulp_op_tensors(const char *op, const char *pass, int role, const char **names, int max);

#ifdef __cplusplus
}
#endif
#endif
