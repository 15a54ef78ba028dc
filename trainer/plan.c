/* trainer/plan.c — see plan.h. */
#include "trainer/plan.h"
#include "trainer/errbuf.h"

#include <assert.h>
#include <ctype.h>
#include <fnmatch.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/matmul.h"
#include "kernels/polar_express.h"
#include "kernels/rmsnorm.h"

/* ---- model families --------------------------------------------------------- */

static const char *const model_names[TMODEL_COUNT] = {"gpt2", "modern"};

const char *tmodel_kind_name(tmodel_kind k) { return (unsigned)k < TMODEL_COUNT ? model_names[k] : "?"; }

int tmodel_kind_parse(const char *name, tmodel_kind *out)
{
    for (int k = 0; k < TMODEL_COUNT; k++)
        if (name && strcmp(name, model_names[k]) == 0) {
            *out = (tmodel_kind)k;
            return 0;
        }
    return -1;
}

/* ---- the trainer's own slots ---------------------------------------------------
 * Described with the registry's kop struct so that validation, error messages
 * and explain treat them like kernel ops.  They have no GPU check. */

#define PATH_BIT(p) (1u << (p))

static const kvariant weights_variants[] = {
    {"master", "fp32 master weights; the working copy is their round-to-nearest image in the path's format"},
    {"sr", "no master: each update is rounded stochastically into the path's format"},
    {"mantissa_buffer", "bf16 working copy = fp32 master truncated; the 16 dropped bits stored beside it"},
};
static const kop weights_op = {
    "weights", "parameter storage: the working copy's format and how updates reach it",
    PATH_BIT(KPATH_FP32) | PATH_BIT(KPATH_BF16) | PATH_BIT(KPATH_FP16),
    "fp8 GEMM slots quantise the working copy (the CUDA backend once per update)", weights_variants, 3};

static const kvariant grad_accum_variants[] = {
    {"sum", "a weight-gradient GEMM rounds its result to its own path's format, which is then added into the "
            "stored gradient (straight into it, beta = 1, when the formats agree)"},
    {"gemm_fp32", "weight-gradient GEMMs on bf16/fp16 paths add their unrounded fp32 accumulator straight into "
                  "fp32 gradients (beta = 1); needs path fp32"},
};
static const kop grad_accum_op = {
    "grad_accum", "format of the stored, accumulated parameter gradients",
    PATH_BIT(KPATH_FP32) | PATH_BIT(KPATH_BF16) | PATH_BIT(KPATH_FP16),
    "gradients are not stored in fp8", grad_accum_variants, 2};

static const kvariant allreduce_variants[] = {
    {"ring", "NCCL ring all-reduce (NCCL_ALGO=Ring)"},
    {"tree", "NCCL tree all-reduce (NCCL_ALGO=Tree)"},
};
static const kop allreduce_op = {
    "allreduce", "data parallel gradient sum over ranks",
    PATH_BIT(KPATH_FP32) | PATH_BIT(KPATH_BF16),
    "NCCL reduces fp32 or bf16 here", allreduce_variants, 2};

static const kvariant loss_scale_variants[] = {
    {"none", "the loss is not scaled"},
    {"dynamic", "scale 2^16, halved and the step skipped on overflow, doubled after 2000 clean steps"},
};
static const kop loss_scale_op = {
    "loss_scale", "loss scaling for narrow-exponent gradients",
    PATH_BIT(KPATH_FP32), "the scale is an fp32 number", loss_scale_variants, 2};

static const kvariant fp8_scaling_variants[] = {
    {"current", "each fp8 GEMM operand scaled by its own amax at this call: amax / max_finite"},
    {"delayed", "Transformer Engine's DelayedScaling: the max amax of the last 16 calls of this site's operand "
                "(slot x layer x A/B x replica) / max_finite; a site's first call uses its own amax; validation "
                "reads the histories and records nothing; casts saturate"},
};
static const kop fp8_scaling_op = {
    "fp8_scaling", "per-tensor scales of fp8 GEMM operands",
    PATH_BIT(KPATH_FP32), "the scales are fp32 numbers", fp8_scaling_variants, 2};

static const kvariant matmul_mma_variants[TMMA_COUNT] = {
    {"v100", "V100 matrix units (fp16 only): blocks of 4 products, 23 fraction bits, RZ"},
    {"a100", "A100 matrix units: blocks of 8 (tf32: 4), 24 fraction bits after alignment, RZ into fp32"},
    {"h100", "H100 matrix units (mma.sync): blocks of 16 (tf32: 8), 25 fraction bits, RZ, +0 for zero sums"},
    {"b200", "B200 matrix units (mma.sync): blocks of 16 (tf32: 8), 25 fraction bits, RZ"},
};
static const kop matmul_mma_op = {
    "matmul_mma", "the GEMM through a GPU generation's bit-accurate matrix-unit model (precision/mma.h), "
    "on CUDA cores or the CPU, K in order in blocks of L",
    PATH_BIT(KPATH_FP32) | PATH_BIT(KPATH_BF16) | PATH_BIT(KPATH_FP16) | PATH_BIT(KPATH_FP8),
    "fp8 runs bf16 on a100 (no fp8 units); refused on the others", matmul_mma_variants, TMMA_COUNT};

const mma_model *tplan_mma_model(tslot s, kpath path, int gen, const char **fallback, char *why, size_t why_len)
{
    static const char *const gens[TMMA_COUNT] = {"v100", "a100", "h100", "b200"};
    *fallback = NULL;
    if (gen < 0 || gen >= TMMA_COUNT) {
        snprintf(why, why_len, "matmul_mma: no generation #%d (v100, a100, h100, b200)", gen);
        return NULL;
    }
    prec_format in;
    switch (path) {
    case KPATH_FP16: in = PREC_FP16; break;
    case KPATH_BF16: in = PREC_BF16; break;
    case KPATH_FP32: in = PREC_TF32; break;
    default:
        if (gen != TMMA_A100) {
            snprintf(why, why_len, "matmul_mma.%s has no fp8 path: the trainer's fp8 GEMMs mix e5m2 gradients with "
                     "e4m3 operands, which the one-format models do not describe (a100 runs fp8 as bf16)", gens[gen]);
            return NULL;
        }
        in = PREC_BF16;
        *fallback = "no fp8 units on a100: runs bf16 (operands unquantised)";
        break;
    }
    (void)s;
    if (gen == TMMA_V100 && in != PREC_FP16) {
        snprintf(why, why_len, "matmul_mma.v100 takes the fp16 path only (V100 matrix units have no %s; real code "
                 "runs such GEMMs on CUDA cores: use the plain matmul there)", in == PREC_TF32 ? "tf32" : "bf16");
        return NULL;
    }
    const mma_model *m = mma_model_find(gens[gen], "mma.sync", in, PREC_FP32);
    if (!m) snprintf(why, why_len, "matmul_mma.%s: no %s model", gens[gen], prec_format_name(in));
    return m;
}

const mma_model *tplan_attention_mma_model(kpath path, char *why, size_t why_len)
{
    if (path != KPATH_BF16 && path != KPATH_FP16) {
        snprintf(why, why_len, "flash_mma runs on the tensor cores' 16-bit inputs: bf16 and fp16 paths only, not %s",
                 kpath_name(path));
        return NULL;
    }
    const prec_format in = path == KPATH_BF16 ? PREC_BF16 : PREC_FP16;
    const mma_model *m = mma_model_find(TPLAN_ATTENTION_MMA_GEN, "mma.sync", in, PREC_FP32);
    if (!m) snprintf(why, why_len, "no %s mma.sync %s model", TPLAN_ATTENTION_MMA_GEN, prec_format_name(in));
    return m;
}

/* ---- ops ------------------------------------------------------------------------ */

static const struct {
    const char *name; /* the registry's name */
    const kop *own;   /* the trainer's own description, NULL for registry ops */
} op_table[TOP_COUNT] = {
    [TOP_NONE] = {"?", NULL},
    [TOP_EMBEDDING] = {"embedding", NULL},
    [TOP_LAYERNORM] = {"layernorm", NULL},
    [TOP_RMSNORM] = {"rmsnorm", NULL},
    [TOP_MATMUL] = {"matmul", NULL},
    [TOP_MATMUL_FAST] = {"matmul_fast", NULL},
    [TOP_MATMUL_BLOCK_FP8] = {"matmul_block_fp8", NULL},
    [TOP_ROPE] = {"rope", NULL},
    [TOP_ATTENTION] = {"attention", NULL},
    [TOP_RESIDUAL] = {"residual", NULL},
    [TOP_GELU_TANH] = {"gelu_tanh", NULL},
    [TOP_RELU2] = {"relu2", NULL},
    [TOP_CROSS_ENTROPY] = {"cross_entropy", NULL},
    [TOP_LINEAR_CROSS_ENTROPY] = {"linear_cross_entropy", NULL},
    [TOP_TRANSPOSE] = {"transpose", NULL},
    [TOP_GRAD_NORM] = {"grad_norm", NULL},
    [TOP_ADAMW] = {"adamw", NULL},
    [TOP_POLAR_EXPRESS] = {"polar_express", NULL},
    [TOP_MUON_NEWTON_SCHULZ] = {"muon_newton_schulz", NULL},
    [TOP_MATMUL_MMA] = {"matmul_mma", &matmul_mma_op},
    [TOP_WEIGHTS] = {"weights", &weights_op},
    [TOP_GRAD_ACCUM] = {"grad_accum", &grad_accum_op},
    [TOP_ALLREDUCE] = {"allreduce", &allreduce_op},
    [TOP_LOSS_SCALE] = {"loss_scale", &loss_scale_op},
    [TOP_FP8_SCALING] = {"fp8_scaling", &fp8_scaling_op},
};

const char *top_name(top_id op) { return (unsigned)op < TOP_COUNT ? op_table[op].name : "?"; }

int top_is_kernel(top_id op) { return op > TOP_NONE && op < TOP_WEIGHTS; }

const kop *top_lookup(top_id op)
{
    if (op <= TOP_NONE || op >= TOP_COUNT) return NULL;
    return op_table[op].own ? op_table[op].own : kregistry_find(op_table[op].name);
}

/* ---- slots ------------------------------------------------------------------------ */

#define SAME(op) {{op}, {op}}
#define BY_MODEL(gpt2, modern) {{gpt2}, {modern}}
#define GEMM_OPS {TOP_MATMUL, TOP_MATMUL_FAST, TOP_MATMUL_BLOCK_FP8, TOP_MATMUL_MMA}
#define CE_OPS {TOP_CROSS_ENTROPY, TOP_LINEAR_CROSS_ENTROPY}
#define GEMM(role, fwd) .family = {GEMM_OPS, GEMM_OPS}, .gemm = (role), .forward = (fwd)
#define BOTH_MODELS 3u
#define GPT2_ONLY 1u
#define MODERN_ONLY 2u
#define ACT TTENSOR_ACTIVATION
#define GRAD TTENSOR_GRADIENT
#define STAT TTENSOR_STATISTIC

static const tslot_info slot_table[TSLOT_COUNT] = {
    [TSLOT_EMBEDDING] = {"embedding", "token (+ learned position) embedding lookup; backward scatters into the table",
                         .family = SAME(TOP_EMBEDDING)},
    [TSLOT_NORM_ATTN] = {"norm.attn", "pre-attention norm of every layer",
                         .family = BY_MODEL(TOP_LAYERNORM, TOP_RMSNORM), .per_layer = 1,
                         .tensors = {{"norm.attn out", "B*T x C", ACT, BOTH_MODELS, 2},
                                     {"norm mean", "B*T", STAT, GPT2_ONLY, 3},
                                     {"norm rstd", "B*T", STAT, BOTH_MODELS, 4},
                                     {"d(norm input), added to d(residual)", "B*T x C", GRAD, BOTH_MODELS, 29}}},
    [TSLOT_ATTN_QKV] = {"attn.qkv", "q, k, v = x Wq^T, x Wk^T, x Wv^T", GEMM(TGEMM_FORWARD, TSLOT_ATTN_QKV),
                        .per_layer = 1, .tensors = {{"q, k, v", "B*T x C each", ACT, BOTH_MODELS, 5}}},
    [TSLOT_NORM_QK] = {"norm.qk", "per-head rmsnorm of q and k (QK-norm)", .family = BY_MODEL(TOP_NONE, TOP_RMSNORM),
                       .per_layer = 1,
                       .tensors = {{"q, k after QK-norm", "B*T*H x D", ACT, MODERN_ONLY, 6},
                                   {"dq, dk before QK-norm", "B*T*H x D", GRAD, MODERN_ONLY, 27}}},
    [TSLOT_ROPE] = {"rope", "rotary position embedding of q and k", .family = BY_MODEL(TOP_NONE, TOP_ROPE),
                    .per_layer = 1,
                    .tensors = {{"q, k after rope", "B*T x C", ACT, MODERN_ONLY, 7},
                                {"dq, dk before rope", "B*T x C", GRAD, MODERN_ONLY, 26}}},
    [TSLOT_ATTENTION] = {"attention", "causal softmax(q k^T / sqrt(D)) v per head", .family = SAME(TOP_ATTENTION),
                         .per_layer = 1,
                         .tensors = {{"attention out", "B*T x C", ACT, BOTH_MODELS, 8},
                                     {"attention logsumexp", "B*H*T", STAT, BOTH_MODELS, 9},
                                     {"dq, dk, dv", "B*T x C each", GRAD, BOTH_MODELS, 25}}},
    [TSLOT_ATTN_OUT] = {"attn.out", "attention output projection y Wo^T", GEMM(TGEMM_FORWARD, TSLOT_ATTN_OUT),
                        .per_layer = 1, .tensors = {{"attn.out out", "B*T x C", ACT, BOTH_MODELS, 10}}},
    [TSLOT_RESIDUAL] = {"residual", "residual stream x + f(x), forward and backward", .family = SAME(TOP_RESIDUAL),
                        .per_layer = 1,
                        .tensors = {{"x (residual stream, per layer)", "B*T x C", ACT, BOTH_MODELS, 1},
                                    {"d(residual stream)", "B*T x C", GRAD, BOTH_MODELS, 20}}},
    [TSLOT_NORM_MLP] = {"norm.mlp", "pre-MLP norm of every layer", .family = BY_MODEL(TOP_LAYERNORM, TOP_RMSNORM),
                        .per_layer = 1, .tensors = {{"norm.mlp out", "B*T x C", ACT, BOTH_MODELS, 11}}},
    [TSLOT_MLP_UP] = {"mlp.up", "MLP up projection x Wup^T, C -> 4C", GEMM(TGEMM_FORWARD, TSLOT_MLP_UP), .per_layer = 1,
                      .tensors = {{"mlp.up out (pre-activation)", "B*T x 4C", ACT, BOTH_MODELS, 12}}},
    [TSLOT_ACTIVATION] = {"activation", "MLP nonlinearity", .family = BY_MODEL(TOP_GELU_TANH, TOP_RELU2),
                          .per_layer = 1,
                          .tensors = {{"activation out", "B*T x 4C", ACT, BOTH_MODELS, 13},
                                      {"d(mlp.up out)", "B*T x 4C", GRAD, BOTH_MODELS, 22}}},
    [TSLOT_MLP_DOWN] = {"mlp.down", "MLP down projection a Wdown^T, 4C -> C", GEMM(TGEMM_FORWARD, TSLOT_MLP_DOWN),
                        .per_layer = 1, .tensors = {{"mlp.down out", "B*T x C", ACT, BOTH_MODELS, 14}}},
    [TSLOT_NORM_FINAL] = {"norm.final", "norm before the lm_head", .family = BY_MODEL(TOP_LAYERNORM, TOP_RMSNORM),
                          .tensors = {{"norm.final out", "B*T x C", ACT, BOTH_MODELS, 15}}},
    [TSLOT_LM_HEAD] = {"lm_head", "logits = x W_lm (the embedding, tied)", GEMM(TGEMM_FORWARD, TSLOT_LM_HEAD),
                       .tensors = {{"logits", "B*T x V", ACT, BOTH_MODELS, 16}}},
    [TSLOT_CROSS_ENTROPY] = {"cross_entropy", "(soft-capped) logits -> per-token loss and dlogits; or "
                             "linear_cross_entropy: the whole head fused, logits never stored",
                             .family = {CE_OPS, CE_OPS},
                             .tensors = {{"per-token loss", "B*T", STAT, BOTH_MODELS, 17},
                                         {"dlogits", "B*T x V", GRAD, BOTH_MODELS, 18}}},
    [TSLOT_LM_HEAD_DGRAD] = {"lm_head.dgrad", "dx = dlogits W_lm^T", GEMM(TGEMM_DGRAD, TSLOT_LM_HEAD),
                             .tensors = {{"dx into norm.final", "B*T x C", GRAD, BOTH_MODELS, 19}}},
    [TSLOT_LM_HEAD_WGRAD] = {"lm_head.wgrad", "dW_lm += x^T dlogits", GEMM(TGEMM_WGRAD, TSLOT_LM_HEAD)},
    [TSLOT_MLP_DOWN_DGRAD] = {"mlp.down.dgrad", "da = dy Wdown", GEMM(TGEMM_DGRAD, TSLOT_MLP_DOWN), .per_layer = 1,
                              .tensors = {{"d(activation out)", "B*T x 4C", GRAD, BOTH_MODELS, 21}}},
    [TSLOT_MLP_DOWN_WGRAD] = {"mlp.down.wgrad", "dWdown += dy^T a", GEMM(TGEMM_WGRAD, TSLOT_MLP_DOWN), .per_layer = 1},
    [TSLOT_MLP_UP_DGRAD] = {"mlp.up.dgrad", "dx = dh Wup", GEMM(TGEMM_DGRAD, TSLOT_MLP_UP), .per_layer = 1,
                            .tensors = {{"d(norm.mlp out)", "B*T x C", GRAD, BOTH_MODELS, 23}}},
    [TSLOT_MLP_UP_WGRAD] = {"mlp.up.wgrad", "dWup += dh^T x", GEMM(TGEMM_WGRAD, TSLOT_MLP_UP), .per_layer = 1},
    [TSLOT_ATTN_OUT_DGRAD] = {"attn.out.dgrad", "dy_att = dx Wo", GEMM(TGEMM_DGRAD, TSLOT_ATTN_OUT), .per_layer = 1,
                              .tensors = {{"d(attention out)", "B*T x C", GRAD, BOTH_MODELS, 24}}},
    [TSLOT_ATTN_OUT_WGRAD] = {"attn.out.wgrad", "dWo += dx^T y_att", GEMM(TGEMM_WGRAD, TSLOT_ATTN_OUT), .per_layer = 1},
    [TSLOT_ATTN_QKV_DGRAD] = {"attn.qkv.dgrad", "dx = [dq dk dv] [Wq; Wk; Wv], one GEMM over K = 3C",
                              GEMM(TGEMM_DGRAD, TSLOT_ATTN_QKV),
                              .per_layer = 1, .tensors = {{"d(norm.attn out)", "B*T x C", GRAD, BOTH_MODELS, 28}}},
    [TSLOT_ATTN_QKV_WGRAD] = {"attn.qkv.wgrad", "dW_qkv += [dq dk dv]^T x, one GEMM of M = 3C", GEMM(TGEMM_WGRAD, TSLOT_ATTN_QKV),
                              .per_layer = 1},
    [TSLOT_TRANSPOSE] = {"transpose", "transposed lm_head kept in sync: W_lm = E^T (copy), dE += dW_lm^T (add)",
                         .family = BY_MODEL(TOP_NONE, TOP_TRANSPOSE)},
    [TSLOT_GRAD_ACCUM] = {"grad_accum", "format parameter gradients are accumulated and stored in",
                          .family = SAME(TOP_GRAD_ACCUM), .fixed = TFIXED_PATH},
    [TSLOT_ALLREDUCE] = {"allreduce", "data parallel gradient all-reduce: wire format and NCCL algorithm",
                         .family = SAME(TOP_ALLREDUCE), .fixed = TFIXED_CHOICE},
    [TSLOT_GRAD_NORM] = {"grad_norm", "global gradient 2-norm (clipping and logging)", .family = SAME(TOP_GRAD_NORM)},
    [TSLOT_ADAMW] = {"optimizer.adamw",
                     "AdamW update; the path is the format it reads gradients and writes weights in",
                     .family = SAME(TOP_ADAMW), .fixed = TFIXED_PATH},
    [TSLOT_MUON] = {"optimizer.muon", "Muon: Nesterov momentum orthogonalised by polar express",
                    .family = {{TOP_NONE}, {TOP_POLAR_EXPRESS, TOP_MUON_NEWTON_SCHULZ}}, .fixed = TFIXED_PATH},
    [TSLOT_WEIGHTS] = {"weights", "parameter storage", .family = SAME(TOP_WEIGHTS), .fixed = TFIXED_CHOICE},
    [TSLOT_LOSS_SCALE] = {"loss_scale", "loss scaling: none, or dynamic (halve and skip on overflow)",
                          .family = SAME(TOP_LOSS_SCALE)},
    /* delayed scaling keeps amax histories: fixed for a run */
    [TSLOT_FP8_SCALING] = {"fp8_scaling", "fp8 GEMM operand scales: current (this call's amax) or delayed (amax history)",
                           .family = SAME(TOP_FP8_SCALING), .fixed = TFIXED_CHOICE},
};

int tplan_fused_head(const tplan *p)
{
    return p->used[TSLOT_CROSS_ENTROPY] && p->slot[TSLOT_CROSS_ENTROPY].op == TOP_LINEAR_CROSS_ENTROPY;
}

const tslot_info *tslot_get(tslot s) { return (unsigned)s < TSLOT_COUNT ? &slot_table[s] : NULL; }

top_id tslot_op(tslot s, tmodel_kind model)
{
    return (unsigned)s < TSLOT_COUNT && (unsigned)model < TMODEL_COUNT ? slot_table[s].family[model][0] : TOP_NONE;
}

/* Whether op belongs to slot s's family in this model. */
static int in_family(tslot s, tmodel_kind model, top_id op)
{
    for (int k = 0; k < TSLOT_FAMILY_MAX && slot_table[s].family[model][k] != TOP_NONE; k++)
        if (slot_table[s].family[model][k] == op) return 1;
    return 0;
}

const kop *tplan_kop(const tplan *p, tslot s) { return p->used[s] ? top_lookup(p->slot[s].op) : NULL; }

/* ---- formats --------------------------------------------------------------------- */

prec_format tpath_storage(kpath p)
{
    switch (p) {
    case KPATH_FP32: return PREC_FP32;
    case KPATH_FP16: return PREC_FP16;
    case KPATH_BF16: case KPATH_FP8: default: return PREC_BF16;
    }
}

prec_format tpath_operand(kpath p, int is_gradient)
{
    if (p == KPATH_FP8) return is_gradient ? PREC_E5M2 : PREC_E4M3;
    return tpath_storage(p);
}

/* snprintf at offset n of buf[0..len): returns the offset after the text,
 * which passes len when the buffer is too small (the text is then cut, and
 * no pointer past the buffer is formed: buf + n would be undefined there,
 * and so is NULL + 0 when only the length is wanted). */
static size_t append(char *buf, size_t len, size_t n, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static size_t append(char *buf, size_t len, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const int r = n < len ? vsnprintf(buf + n, len - n, fmt, ap) : vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    return n + (r > 0 ? (size_t)r : 0);
}

static void path_names_of(const kop *op, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int p = 0; p < KPATH_COUNT; p++)
        if (op->paths & PATH_BIT(p))
            n = append(buf, len, n, "%s%s", n ? ", " : "", kpath_name((kpath)p));
}

static void variant_names_of(const kop *op, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int v = 0; v < op->n_variants; v++)
        n = append(buf, len, n, "%s%s", n ? ", " : "", op->variants[v].name);
}

/* The slots of the plan's family (only the per-layer ones when per_layer_only). */
static void slot_names_of(const tplan *p, int per_layer_only, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int s = 0; s < TSLOT_COUNT; s++)
        if (p->used[s] && (!per_layer_only || slot_table[s].per_layer))
            n = append(buf, len, n, "%s%s", n ? ", " : "", slot_table[s].name);
}

/* ---- per-layer choices ------------------------------------------------------------ */

static int choice_equal(const tslot_choice *a, const tslot_choice *b)
{
    return a->path == b->path && a->op == b->op && a->variant == b->variant;
}

/* Index of the entry for (s, layer), or -(insertion point) - 1. */
static int find_layer_choice(const tplan *p, tslot s, int layer)
{
    int lo = 0, hi = p->n_layer_choices;
    long key = (long)s * TPLAN_MAX_LAYERS + layer;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        long k = (long)p->layer_choice[mid].slot * TPLAN_MAX_LAYERS + p->layer_choice[mid].layer;
        if (k == key) return mid;
        if (k < key) lo = mid + 1;
        else hi = mid;
    }
    return -lo - 1;
}

const tslot_choice *tplan_choice_at(const tplan *p, tslot s, int layer)
{
    if (layer >= 0 && p->n_layer_choices && slot_table[s].per_layer) {
        int i = find_layer_choice(p, s, layer);
        if (i >= 0) return &p->layer_choice[i].choice;
    }
    return &p->slot[s];
}

int tplan_choice_uses_path(const tplan *p, tslot s, kpath path)
{
    if (p->slot[s].path == path) return 1;
    for (int i = 0; i < p->n_layer_choices; i++)
        if (p->layer_choice[i].slot == (short)s && p->layer_choice[i].choice.path == path) return 1;
    return 0;
}

static int set_layer_choice(tplan *p, tslot s, int layer, const tslot_choice *c, char *err, size_t errlen)
{
    int i = find_layer_choice(p, s, layer);
    if (i >= 0) {
        p->layer_choice[i].choice = *c;
        return 0;
    }
    if (p->n_layer_choices == TPLAN_MAX_LAYER_CHOICES)
        return tfail(err, errlen, "too many per-layer choices (at most %d)", TPLAN_MAX_LAYER_CHOICES);
    i = -i - 1;
    memmove(&p->layer_choice[i + 1], &p->layer_choice[i], (size_t)(p->n_layer_choices - i) * sizeof p->layer_choice[0]);
    p->layer_choice[i].slot = (short)s;
    p->layer_choice[i].layer = (short)layer;
    p->layer_choice[i].choice = *c;
    p->n_layer_choices++;
    return 0;
}

/* An override without a layer selector replaces every layer's choice. */
static void clear_layer_choices(tplan *p, tslot s)
{
    int n = 0;
    for (int i = 0; i < p->n_layer_choices; i++)
        if (p->layer_choice[i].slot != (short)s) p->layer_choice[n++] = p->layer_choice[i];
    memset(&p->layer_choice[n], 0, (size_t)(p->n_layer_choices - n) * sizeof p->layer_choice[0]);
    p->n_layer_choices = n;
}

/* ---- GPU models --------------------------------------------------------------------- */

static const char *const gpu_model_names[TGPU_COUNT] = {"native", "v100", "a100", "h100", "b200"};

const char *tgpu_model_name(tgpu_model g) { return (unsigned)g < TGPU_COUNT ? gpu_model_names[g] : "?"; }

const char *tgpu_model_names(void) { return "native, v100, a100, h100, b200"; }

int tgpu_model_parse(const char *name, tgpu_model *out)
{
    for (int g = 0; g < TGPU_COUNT; g++)
        if (name && strcmp(name, gpu_model_names[g]) == 0) {
            *out = (tgpu_model)g;
            return 0;
        }
    return -1;
}

/* matmul_mma's variant (a tmma_gen) for a GPU model other than native */
static int mma_gen_of(tgpu_model g) { return (int)g - TGPU_V100; }

/* "attention" or "attention@3", for messages */
static void unit_name(tslot s, int layer, char *buf, size_t len)
{
    if (layer >= 0) snprintf(buf, len, "%s@%d", slot_table[s].name, layer);
    else snprintf(buf, len, "%s", slot_table[s].name);
}

/* The choice slot s (layer `layer`, -1 for the slot's row) makes under GPU
 * model g, which is not native: c rewritten in place (tensor-core GEMMs to
 * matmul_mma.GEN), or -1 with the reason in err.  from: the model the plan
 * was under before (its matmul_mma choices are that model's and move to
 * g's); g itself when reading an override under g. */
static int gpu_model_map(tslot s, int layer, tslot_choice *c, tgpu_model g, tgpu_model from, char *err, size_t errlen)
{
    const char *gen = tgpu_model_name(g);
    char name[96];
    unit_name(s, layer, name, sizeof name);
    if (slot_table[s].gemm != TGEMM_NONE) {
        switch (c->op) {
        case TOP_MATMUL:
            /* fp32: CUDA-core SGEMM, PyTorch's default, not a matrix-unit GEMM;
             * bf16, fp16 and fp8 run on the matrix units */
            if (c->path == KPATH_FP32) return 0;
            /* fall through */
        case TOP_MATMUL_FAST:
            if (c->variant != KMATMUL_FUSED)
                return tfail(err, errlen, "gpu_model=%s: slot %s: variant %s has no matrix-unit model (matmul_mma runs K "
                             "in one order and rounds once): use %s=%s%s", gen, name,
                             top_lookup(c->op)->variants[c->variant].name, name, kpath_name(c->path),
                             c->op == TOP_MATMUL_FAST ? ":fast" : "");
            break;
        case TOP_MATMUL_MMA:
            if (c->variant == mma_gen_of(g) || (from != TGPU_NATIVE && c->variant == mma_gen_of(from))) break;
            return tfail(err, errlen, "gpu_model=%s: slot %s runs matmul_mma.%s, which contradicts the GPU model (under "
                         "it every tensor-core GEMM runs matmul_mma.%s): drop one of the two", gen, name,
                         matmul_mma_variants[c->variant].name, gen);
        case TOP_MATMUL_BLOCK_FP8:
            return tfail(err, errlen, "gpu_model=%s: slot %s: matmul_block_fp8 runs this GPU's own fp8 matrix units and "
                         "has no %s model: use %s=fp8 (per-tensor scales) or %s=bf16", gen, name, gen, name, name);
        default:
            return 0;
        }
        if (g == TGPU_V100 && c->path != KPATH_FP16)
            return tfail(err, errlen, "gpu_model=v100: slot %s runs a %s GEMM on the matrix units, which take fp16 only "
                         "on a V100: use --plan fp16, or %s=fp32 (CUDA-core SGEMM)", name,
                         c->path == KPATH_FP32 ? "tf32" : kpath_name(c->path), name);
        const char *fallback;
        char why[256];
        if (!tplan_mma_model(s, c->path, mma_gen_of(g), &fallback, why, sizeof why))
            return tfail(err, errlen, "gpu_model=%s: slot %s: %s", gen, name, why);
        c->op = TOP_MATMUL_MMA;
        c->variant = mma_gen_of(g);
        return 0;
    }
    /* Applying a model: a tensor-core attention falls back to the CUDA-core
     * flash of the same exp (no model of GEN's units inside attention; the
     * CUDA-core kernels' arithmetic is the same on every generation).  Read
     * under the model (an override after it), it is refused. */
    if (s == TSLOT_ATTENTION && katt_is_mma(c->variant) && g != from) {
        c->variant = katt_is_exp2(c->variant) ? KATT_FLASH_EXP2 : KATT_FLASH;
        return 0;
    }
    if (s == TSLOT_ATTENTION && katt_is_mma(c->variant))
        return tfail(err, errlen, "gpu_model=%s: slot %s: %s runs this GPU's own matrix units and has no %s model: use "
                     "%s=%s:%s (CUDA cores)", gen, name, katt_variants[c->variant].name, gen, name, kpath_name(c->path),
                     katt_is_exp2(c->variant) ? "flash_exp2" : "flash");
    if (s == TSLOT_CROSS_ENTROPY && c->op == TOP_LINEAR_CROSS_ENTROPY && c->path != KPATH_FP32)
        return tfail(err, errlen, "gpu_model=%s: slot %s: linear_cross_entropy runs its %s GEMMs on this GPU's own "
                     "matrix units (cuBLAS) and has no %s model: use %s=%s (materialised; the lm_head then runs "
                     "matmul_mma.%s)", gen, name, kpath_name(c->path), gen, name, kpath_name(c->path), gen);
    if (s == TSLOT_MUON && c->path != KPATH_FP32)
        return tfail(err, errlen, "gpu_model=%s: slot %s: its %s GEMMs run this GPU's own matrix units (cuBLAS) and have "
                     "no %s model: use %s=fp32 (CUDA-core SGEMM)", gen, name, kpath_name(c->path), gen, name);
    return 0;
}

/* Every choice of p obeys p's GPU model: 0, or -1 naming the first that
 * does not. */
static int check_gpu_model(const tplan *p, char *err, size_t errlen)
{
    if ((unsigned)p->gpu_model >= TGPU_COUNT)
        return tfail(err, errlen, "unknown GPU model #%d (%s)", (int)p->gpu_model, tgpu_model_names());
    if (p->gpu_model == TGPU_NATIVE) return 0;
    int n = TSLOT_COUNT + p->n_layer_choices;
    for (int i = 0; i < n; i++) {
        tslot s = i < TSLOT_COUNT ? (tslot)i : (tslot)p->layer_choice[i - TSLOT_COUNT].slot;
        int layer = i < TSLOT_COUNT ? -1 : p->layer_choice[i - TSLOT_COUNT].layer;
        if (!p->used[s]) continue;
        const tslot_choice *had = i < TSLOT_COUNT ? &p->slot[s] : &p->layer_choice[i - TSLOT_COUNT].choice;
        tslot_choice c = *had;
        if (gpu_model_map(s, layer, &c, p->gpu_model, p->gpu_model, err, errlen)) return -1;
        if (!choice_equal(&c, had)) {
            char name[96], v[128];
            unit_name(s, layer, name, sizeof name);
            tplan_choice_variant_string(p, s, had, v, sizeof v);
            return tfail(err, errlen, "gpu_model=%s: slot %s runs %s:%s on this GPU's own matrix units, not the %s model "
                         "(%s:matmul_mma.%s)", tgpu_model_name(p->gpu_model), name, kpath_name(had->path), v,
                         tgpu_model_name(p->gpu_model), kpath_name(had->path), tgpu_model_name(p->gpu_model));
        }
    }
    return 0;
}

/* Apply model g to p in place (the caller validates and commits). */
static int apply_gpu_model(tplan *p, tgpu_model g, char *err, size_t errlen)
{
    if ((unsigned)g >= TGPU_COUNT) return tfail(err, errlen, "unknown GPU model #%d (%s)", (int)g, tgpu_model_names());
    if (g == p->gpu_model) return 0;
    if (g == TGPU_NATIVE)
        return tfail(err, errlen, "gpu_model=native after gpu_model=%s: the native choices that model replaced are not "
                     "kept (make the native plan the base, and the GPU model the arm or --bad)",
                     tgpu_model_name(p->gpu_model));
    for (int s = 0; s < TSLOT_COUNT; s++)
        if (p->used[s] && gpu_model_map((tslot)s, -1, &p->slot[s], g, p->gpu_model, err, errlen)) return -1;
    for (int i = 0; i < p->n_layer_choices; i++) {
        tlayer_choice *e = &p->layer_choice[i];
        if (gpu_model_map((tslot)e->slot, e->layer, &e->choice, g, p->gpu_model, err, errlen)) return -1;
    }
    p->gpu_model = g;
    return 0;
}

int tplan_set_gpu_model(tplan *p, tgpu_model g, char *err, size_t errlen)
{
    tplan *next = malloc(sizeof *next);
    if (!next) return tfail(err, errlen, "out of memory");
    *next = *p;
    int rc = apply_gpu_model(next, g, err, errlen);
    if (!rc) rc = tplan_validate(next, err, errlen);
    if (!rc) *p = *next;
    free(next);
    return rc;
}

void tplan_gpu_model_note(const tplan *p, tslot s, const tslot_choice *c, char *buf, size_t len)
{
    const char *gen = tgpu_model_name(p->gpu_model);
    if (p->gpu_model == TGPU_NATIVE) {
        snprintf(buf, len, "this GPU's own units");
        return;
    }
    if (slot_table[s].gemm != TGEMM_NONE) {
        if (c->op == TOP_MATMUL_MMA) {
            const char *fallback = NULL;
            char why[256];
            const mma_model *m = tplan_mma_model(s, c->path, c->variant, &fallback, why, sizeof why);
            if (!m) snprintf(buf, len, "refused: %s", why);
            else
                snprintf(buf, len, "matrix units: the %s %s model%s%s", gen, prec_format_name(m->arith.in),
                         fallback ? "; " : "", fallback ? fallback : "");
        } else {
            snprintf(buf, len, "fp32 SGEMM on CUDA cores (no TF32, PyTorch's default): fp32 FMA on every GPU; the K order "
                     "cuBLAS picks on a real %s is not modelled", gen);
        }
        return;
    }
    if (s == TSLOT_CROSS_ENTROPY && c->op == TOP_LINEAR_CROSS_ENTROPY)
        snprintf(buf, len, "fused head: fp32 SGEMMs on CUDA cores (cuBLAS's K order on a real %s not modelled); the "
                 "cross-entropy as an sm_80 build", gen);
    else if (s == TSLOT_MUON)
        snprintf(buf, len, "fp32 SGEMMs on CUDA cores (cuBLAS's K order on a real %s not modelled); the rest as an sm_80 "
                 "build", gen);
    else if (s == TSLOT_ALLREDUCE)
        snprintf(buf, len, "NCCL sums on CUDA cores; the order NCCL picks on a real %s system is not modelled", gen);
    else if (s == TSLOT_ATTENTION)
        snprintf(buf, len, "CUDA cores: the arithmetic an sm_80 build runs (flash_mma* fall back to flash* when the model "
                 "is applied: %s's units inside attention are not modelled)", gen);
    else
        snprintf(buf, len, "CUDA cores: the arithmetic an sm_80 build runs");
}

/* ---- validation --------------------------------------------------------------------- */

/* One slot's choice against its op and the trainer's rules. */
/* The rules a choice for slot s obeys by itself: op, path and variant the
 * slot can run. */
static int check_choice(const tplan *p, tslot s, tslot_choice c, char *err, size_t errlen)
{
    char names[1024];
    if (!in_family(s, p->model, c.op))
        return tfail(err, errlen, "slot %s: op %s is not one the slot runs in model %s", slot_table[s].name,
                     top_name(c.op), tmodel_kind_name(p->model));
    const kop *op = top_lookup(c.op);
    if (!op) {
        kregistry_op_names(names, sizeof names);
        return tfail(err, errlen, "slot %s: op %s is not in the kernel registry (ops: %s)", slot_table[s].name,
                    top_name(c.op), names[0] ? names : "none registered yet");
    }
    if ((unsigned)c.path >= KPATH_COUNT || !(op->paths & PATH_BIT(c.path))) {
        path_names_of(op, names, sizeof names);
        return tfail(err, errlen, "slot %s: op %s has no %s path (paths: %s)", slot_table[s].name, op->name,
                    kpath_name(c.path), names);
    }
    if (c.variant < 0 || c.variant >= op->n_variants) {
        variant_names_of(op, names, sizeof names);
        return tfail(err, errlen, "slot %s: op %s has no variant #%d (variants: %s)", slot_table[s].name, op->name,
                    c.variant, names);
    }
    if (s == TSLOT_WEIGHTS) {
        if (c.variant == TWEIGHTS_SR && c.path == KPATH_FP32)
            return tfail(err, errlen, "slot weights: variant sr needs a narrower path than fp32 (paths: bf16, fp16)");
        if (c.variant == TWEIGHTS_MANTISSA_BUFFER && c.path != KPATH_BF16)
            return tfail(err, errlen, "slot weights: variant mantissa_buffer needs path bf16 (the 16 dropped bits of "
                                     "an fp32 master), not %s", kpath_name(c.path));
    }
    if (c.path == KPATH_FP8 && slot_table[s].gemm == TGEMM_NONE)
        return tfail(err, errlen, "slot %s: the trainer runs fp8 on GEMM slots only (activations between ops are "
                    "stored in bf16 or wider); paths here: fp32, bf16, fp16", slot_table[s].name);
    if (c.op == TOP_MATMUL_MMA) {
        const char *fallback;
        char why[256];
        if (!tplan_mma_model(s, c.path, c.variant, &fallback, why, sizeof why))
            return tfail(err, errlen, "slot %s: %s", slot_table[s].name, why);
    }
    if (s == TSLOT_GRAD_ACCUM && c.variant == TGRAD_ACCUM_GEMM_FP32 && c.path != KPATH_FP32)
        return tfail(err, errlen, "slot grad_accum: variant gemm_fp32 needs path fp32, not %s", kpath_name(c.path));
    return 0;
}

static void choice_string(const tplan *p, tslot s, const tslot_choice *c, char *buf, size_t len);

/* cross_entropy running linear_cross_entropy (choice c) computes the whole
 * head in one call: the lm_head GEMM, its dgrad and its wgrad run inside it,
 * as kmatmul's plain fused GEMM on the op's own path, so those slots must say
 * exactly that (a plan never claims what does not run); its weight gradient
 * is fp32, added into fp32 gradients only. */
static int check_fused_head(const tplan *p, tslot_choice c, char *err, size_t errlen)
{
    static const tslot head[] = {TSLOT_LM_HEAD, TSLOT_LM_HEAD_DGRAD, TSLOT_LM_HEAD_WGRAD};
    const char *path = kpath_name(c.path);
    for (size_t i = 0; i < sizeof head / sizeof head[0]; i++) {
        const tslot_choice *h = &p->slot[head[i]];
        const char *name = slot_table[head[i]].name;
        char had[160];
        choice_string(p, head[i], h, had, sizeof had);
        if (h->op == TOP_MATMUL_MMA)
            return tfail(err, errlen, "slot cross_entropy: linear_cross_entropy runs its GEMMs on this GPU's own units, "
                         "but %s is %s (a matrix-unit model%s): the fused op has no model form; use the materialised "
                         "cross_entropy=%s under a GPU model", name, had,
                         p->gpu_model != TGPU_NATIVE ? ", from gpu_model" : "", path);
        if (h->path == KPATH_FP8)
            return tfail(err, errlen, "slot cross_entropy: linear_cross_entropy has no fp8 path, and %s is %s: an fp8 "
                         "lm_head is matmul's fp8 path followed by the materialised cross_entropy (to fuse the head "
                         "on %s: lm_head*=%s sets the three)", name, had, path, path);
        if (h->op != TOP_MATMUL || h->variant != KMATMUL_FUSED || h->path != c.path)
            return tfail(err, errlen, "slot cross_entropy: linear_cross_entropy computes lm_head, lm_head.dgrad and "
                         "lm_head.wgrad inside it (plain matmul, fused, on its path %s), but %s is %s: set lm_head*=%s",
                         path, name, had, path);
    }
    if (p->slot[TSLOT_GRAD_ACCUM].path != KPATH_FP32)
        return tfail(err, errlen, "slot cross_entropy: linear_cross_entropy writes the embedding's gradient dW [V,C] in "
                     "fp32, which is added into fp32 gradients only: grad_accum is %s, set grad_accum=fp32",
                     kpath_name(p->slot[TSLOT_GRAD_ACCUM].path));
    return 0;
}

/* The rules between slots: the optimizer's path against the weights', grad_norm's against grad_accum's.
 * Checked on a whole plan only (tplan_validate, after every override of a tplan_set or a JSON): plan
 * JSON lists the slots in table order, optimizer.adamw before weights, so checking an entry against the
 * plan half-built would refuse plans that tplan_set accepts and writes. */
static int check_between_slots(const tplan *p, tslot s, tslot_choice c, char *err, size_t errlen)
{
    if (s == TSLOT_ADAMW) {
        kpath w = p->slot[TSLOT_WEIGHTS].path;
        int v = p->slot[TSLOT_WEIGHTS].variant;
        if (w == KPATH_FP32 && c.path != KPATH_FP32)
            return tfail(err, errlen, "slot optimizer.adamw: fp32 weights are updated on the fp32 path, not %s",
                        kpath_name(c.path));
        if (v != TWEIGHTS_MASTER && c.path != w)
            return tfail(err, errlen, "slot optimizer.adamw: weights=%s:%s updates the %s weights in place: set "
                        "optimizer.adamw=%s (gradients are rounded to %s for the update)", kpath_name(w),
                        v == TWEIGHTS_SR ? "sr" : "mantissa_buffer", kpath_name(w), kpath_name(w), kpath_name(w));
        if (v == TWEIGHTS_MASTER && c.path != KPATH_FP32 && c.path != w)
            return tfail(err, errlen, "slot optimizer.adamw: path %s must be fp32 (update the fp32 master) or the "
                        "weights' %s (update them with the master beside)", kpath_name(c.path), kpath_name(w));
    }
    if (s == TSLOT_CROSS_ENTROPY && c.op == TOP_LINEAR_CROSS_ENTROPY && check_fused_head(p, c, err, errlen)) return -1;
    if (s == TSLOT_GRAD_NORM && c.path != p->slot[TSLOT_GRAD_ACCUM].path)
        return tfail(err, errlen, "slot grad_norm: path %s must match grad_accum's %s (it reads those gradients); "
                    "set both, e.g. grad_accum=%s,grad_norm=%s", kpath_name(c.path),
                    kpath_name(p->slot[TSLOT_GRAD_ACCUM].path), kpath_name(p->slot[TSLOT_GRAD_ACCUM].path),
                    kpath_name(p->slot[TSLOT_GRAD_ACCUM].path));
    return 0;
}

int tplan_validate(const tplan *p, char *err, size_t errlen)
{
    if ((unsigned)p->model >= TMODEL_COUNT) return tfail(err, errlen, "unknown model family #%d", (int)p->model);
    for (int s = 0; s < TSLOT_COUNT; s++) {
        if (!p->used[s]) continue;
        if (check_choice(p, (tslot)s, p->slot[s], err, errlen) ||
            check_between_slots(p, (tslot)s, p->slot[s], err, errlen))
            return -1;
    }
    if (p->n_layer_choices < 0 || p->n_layer_choices > TPLAN_MAX_LAYER_CHOICES)
        return tfail(err, errlen, "plan holds %d per-layer choices (at most %d)", p->n_layer_choices,
                     TPLAN_MAX_LAYER_CHOICES);
    for (int i = 0; i < p->n_layer_choices; i++) {
        const tlayer_choice *e = &p->layer_choice[i];
        if ((unsigned)e->slot >= TSLOT_COUNT || !p->used[e->slot] || !slot_table[e->slot].per_layer ||
            e->layer < 0 || e->layer >= TPLAN_MAX_LAYERS)
            return tfail(err, errlen, "plan has a per-layer choice for slot #%d, layer %d, which does not exist",
                         e->slot, e->layer);
        if (check_choice(p, (tslot)e->slot, e->choice, err, errlen) ||
            check_between_slots(p, (tslot)e->slot, e->choice, err, errlen))
            return -1;
    }
    return check_gpu_model(p, err, errlen);
}

int tplan_check_layers(const tplan *p, int depth, char *err, size_t errlen)
{
    for (int i = 0; i < p->n_layer_choices; i++)
        if (p->layer_choice[i].layer >= depth)
            return tfail(err, errlen, "slot %s@%d: layer %d is outside the model's layers 0..%d (depth %d)",
                         slot_table[p->layer_choice[i].slot].name, p->layer_choice[i].layer,
                         p->layer_choice[i].layer, depth - 1, depth);
    return 0;
}

static int check_attention_choice(const char *name, const tslot_choice *c, int64_t head_dim, char *err, size_t errlen)
{
    char why[256];
    if (kattention_supports(c->path, c->variant, head_dim, why, sizeof why)) return 0;
    return tfail(err, errlen, "%s: %s; the model's head dimension is %lld (width / heads): --set attention=%s:flash "
                 "runs any", name, why, (long long)head_dim, kpath_name(c->path));
}

int tplan_check_head_dim(const tplan *p, int64_t head_dim, char *err, size_t errlen)
{
    if (!p->used[TSLOT_ATTENTION]) return 0;
    if (check_attention_choice("slot attention", &p->slot[TSLOT_ATTENTION], head_dim, err, errlen)) return -1;
    for (int i = 0; i < p->n_layer_choices; i++) {
        char name[64];
        snprintf(name, sizeof name, "slot attention@%d", p->layer_choice[i].layer);
        if (p->layer_choice[i].slot == TSLOT_ATTENTION &&
            check_attention_choice(name, &p->layer_choice[i].choice, head_dim, err, errlen))
            return -1;
    }
    return 0;
}

/* ---- presets ----------------------------------------------------------------------- */

static const char *const preset_names[] = {"fp32", "bf16", "fp16", "fp8"};

const char *tplan_preset_names(void) { return "fp32, bf16, fp16, fp8"; }

int tplan_init(tplan *p, const char *preset, tmodel_kind model, char *err, size_t errlen)
{
    int which = -1;
    for (int i = 0; i < 4; i++)
        if (preset && strcmp(preset, preset_names[i]) == 0) which = i;
    if (which < 0) return tfail(err, errlen, "unknown plan preset '%s' (presets: %s)", preset ? preset : "", tplan_preset_names());
    if ((unsigned)model >= TMODEL_COUNT) return tfail(err, errlen, "unknown model family #%d (gpt2, modern)", (int)model);
    memset(p, 0, sizeof *p);
    snprintf(p->preset, sizeof p->preset, "%s", preset);
    p->model = model;
    /* the working format of everything that is not a GEMM */
    kpath work = which == 0 ? KPATH_FP32 : which == 2 ? KPATH_FP16 : KPATH_BF16;
    kpath gemm = which == 3 ? KPATH_FP8 : work;
    for (int s = 0; s < TSLOT_COUNT; s++) {
        p->slot[s].op = slot_table[s].family[model][0];
        p->used[s] = p->slot[s].op != TOP_NONE;
        p->slot[s].path = slot_table[s].gemm != TGEMM_NONE ? gemm : work;
        p->slot[s].variant = 0;
    }
    /* Gradients, their reduction and the optimizer state stay fp32 in every
     * preset: mixed precision as llm.c / PyTorch AMP practise it. */
    p->slot[TSLOT_GRAD_ACCUM].path = KPATH_FP32;
    p->slot[TSLOT_GRAD_NORM].path = KPATH_FP32;
    p->slot[TSLOT_ALLREDUCE].path = KPATH_FP32;
    p->slot[TSLOT_ADAMW].path = KPATH_FP32;
    p->slot[TSLOT_LOSS_SCALE].path = KPATH_FP32;
    p->slot[TSLOT_LOSS_SCALE].variant = which == 2 ? TLOSS_SCALE_DYNAMIC : TLOSS_SCALE_NONE;
    p->slot[TSLOT_WEIGHTS].variant = TWEIGHTS_MASTER;
    p->slot[TSLOT_FP8_SCALING].path = KPATH_FP32;
    p->slot[TSLOT_FP8_SCALING].variant = TFP8_SCALING_CURRENT;
    /* the transpose slot's path is that of its add (the gradient fold); its
     * copy of the weights is exact in any format */
    p->slot[TSLOT_TRANSPOSE].path = KPATH_FP32;
    /* attention: flash on the tensor cores wherever they take the path's
     * format (bf16, fp16; the fp8 preset's attention runs on its bf16 working
     * path): 7-10x faster than the CUDA-core flash per call and 2.2x per
     * gpt2-124M step on an H100, within the check's matrix-unit bound
     * (docs/results-experiments.md).  flash_mma rather than flash_mma_exp2:
     * the H100 figures do not separate the two (the step was timed with
     * exp2, the kernel benchmark with expf, never side by side), and expf on
     * the unscaled score keeps one rounding fewer from the reference than
     * exp2f on the score times fp32(scale log2 e).  fp32 keeps the CUDA-core
     * flash: the tensor cores take 16-bit inputs.  (naive materialises T x T
     * scores rounded to the path's format.) */
    p->slot[TSLOT_ATTENTION].variant = work == KPATH_FP32 ? KATT_FLASH : KATT_FLASH_MMA;
    /* the modern model's per-head QK norm: one warp per row, not a 256-thread
     * block on a row of head-dimension width (17% of a 1-minute-recipe step
     * at R = 64 on an H100 with block_tree) */
    if (p->used[TSLOT_NORM_QK]) p->slot[TSLOT_NORM_QK].variant = KRMSNORM_WARP_TREE;
    /* Muon: the smaller Gram matrix of each weight, as the published recipe
     * transposes a tall one (modded-nanogpt); wide_fused formed the modern
     * model's 4C x 4C Gram matrix for mlp.up, 5.5x the flops of a 1-minute-
     * recipe step's polar express (docs/results-experiments.md) */
    if (p->used[TSLOT_MUON]) p->slot[TSLOT_MUON].variant = KPE_SMALL_FUSED;
    return tplan_validate(p, err, errlen);
}

/* ---- overrides -------------------------------------------------------------------- */

static int op_has_variant(const kop *op, const char *name)
{
    for (int v = 0; op && v < op->n_variants; v++)
        if (strcmp(op->variants[v].name, name) == 0) return 1;
    return 0;
}

/* Parse "PATH[:VARIANT]" for one slot: VARIANT is a variant of the slot's
 * op, a sibling op ("fast", "matmul_fast"), a sibling op's variant
 * ("mma.h100"), or a variant name only a sibling has ("chunk_1024"). */
static int parse_choice(const tplan *p, tslot s, const char *value, tslot_choice *out, char *err, size_t errlen)
{
    char path_str[32];
    const char *colon = strchr(value, ':');
    size_t plen = colon ? (size_t)(colon - value) : strlen(value);
    const kop *op = top_lookup(slot_table[s].family[p->model][0]);
    char names[1024];
    if (!op) return check_choice(p, s, p->slot[s], err, errlen);
    if (plen == 0 || plen >= sizeof path_str) {
        path_names_of(op, names, sizeof names);
        return tfail(err, errlen, "slot %s: missing or malformed path in '%s' (paths: %s)", slot_table[s].name, value, names);
    }
    memcpy(path_str, value, plen);
    path_str[plen] = '\0';
    kpath path;
    if (kpath_parse(path_str, &path)) {
        path_names_of(op, names, sizeof names);
        return tfail(err, errlen, "slot %s: unknown path '%s' (paths: %s)", slot_table[s].name, path_str, names);
    }
    top_id chosen = slot_table[s].family[p->model][0];
    int variant = 0;
    if (colon) {
        const char *vs = colon + 1, *dot = strchr(vs, '.');
        if (!*vs)
            return tfail(err, errlen, "slot %s: empty variant after ':' in '%s' (drop the ':' for the default)",
                         slot_table[s].name, value);
        char opname[64] = "";
        const char *vname = vs;
        if (dot && (size_t)(dot - vs) < sizeof opname) {
            memcpy(opname, vs, (size_t)(dot - vs));
            opname[dot - vs] = '\0';
            vname = dot + 1;
        } else {
            snprintf(opname, sizeof opname, "%s", vs);
            vname = NULL;
        }
        /* short names people use for the matmul siblings: lm_head=fp8:fast */
        static const struct { const char *alias, *op; } family_aliases[] = {
            {"fast", "matmul_fast"}, {"blockwise", "matmul_block_fp8"}, {"mma", "matmul_mma"}};
        for (size_t a = 0; a < sizeof family_aliases / sizeof family_aliases[0]; a++)
            if (strcmp(opname, family_aliases[a].alias) == 0) snprintf(opname, sizeof opname, "%s", family_aliases[a].op);
        /* a sibling op named (with or without a variant), else a variant of the slot's op */
        const top_id *family = slot_table[s].family[p->model];
        chosen = TOP_NONE;
        for (int k = 0; k < TSLOT_FAMILY_MAX && family[k] != TOP_NONE; k++)
            if (top_lookup(family[k]) && strcmp(top_name(family[k]), opname) == 0) chosen = family[k];
        if (chosen == TOP_NONE && !dot) {
            /* a variant of the slot's op; else a variant name only a sibling has names that sibling
             * (cross_entropy=bf16:chunk_1024 is linear_cross_entropy.chunk_1024) */
            chosen = family[0];
            vname = vs;
            for (int k = 1; !op_has_variant(top_lookup(family[0]), vs) && k < TSLOT_FAMILY_MAX && family[k] != TOP_NONE; k++)
                if (op_has_variant(top_lookup(family[k]), vs)) {
                    chosen = family[k];
                    break;
                }
        }
        const kop *vop = chosen != TOP_NONE ? top_lookup(chosen) : NULL;
        variant = vop && !vname ? 0 : -1;
        for (int v = 0; vop && vname && v < vop->n_variants; v++)
            if (strcmp(vop->variants[v].name, vname) == 0) variant = v;
        if (variant < 0) {
            variant_names_of(op, names, sizeof names);
            size_t n = strlen(names);
            for (int k = 1; k < TSLOT_FAMILY_MAX && family[k] != TOP_NONE; k++) {
                const kop *sib = top_lookup(family[k]);
                if (!sib) continue;
                n = append(names, sizeof names, n, ", %s[.", sib->name);
                for (int v = 0; v < sib->n_variants; v++)
                    n = append(names, sizeof names, n, "%s%s", v ? "|" : "", sib->variants[v].name);
                n = append(names, sizeof names, n, "]");
            }
            return tfail(err, errlen, "slot %s: no variant '%s' (variants: %s)", slot_table[s].name, vs, names);
        }
    }
    out->path = path;
    out->op = chosen;
    out->variant = variant;
    return check_choice(p, s, *out, err, errlen);
}

/* Slots a key names: a slot name, a glob over slot names, or an op name. */
static int key_matches(const tplan *p, const char *key, tslot s)
{
    if (!p->used[s]) return 0;
    if (strcmp(key, slot_table[s].name) == 0) return 1;
    if (strpbrk(key, "*?[") && fnmatch(key, slot_table[s].name, 0) == 0) return 1;
    return strcmp(key, top_name(tslot_op(s, p->model))) == 0;
}

/* "@3" or "@0-2" (after the '@'): first and last layer. */
static int parse_layers(const char *sel, int *first, int *last)
{
    const char *q = sel;
    long a = 0, b;
    if (!isdigit((unsigned char)*q)) return -1;
    while (isdigit((unsigned char)*q) && a < TPLAN_MAX_LAYERS) a = 10 * a + (*q++ - '0');
    b = a;
    if (*q == '-') {
        q++;
        if (!isdigit((unsigned char)*q)) return -1;
        b = 0;
        while (isdigit((unsigned char)*q) && b < TPLAN_MAX_LAYERS) b = 10 * b + (*q++ - '0');
    }
    if (*q || a >= TPLAN_MAX_LAYERS || b >= TPLAN_MAX_LAYERS || b < a) return -1;
    *first = (int)a;
    *last = (int)b;
    return 0;
}

/* One override: key ("mlp.up", "attn.*@11", "rmsnorm@0-2") and value. */
static int apply_override(tplan *next, const char *key_in, const char *value, char *err, size_t errlen)
{
    char key[128];
    if (strlen(key_in) >= sizeof key) return tfail(err, errlen, "override key too long: '%.40s...'", key_in);
    snprintf(key, sizeof key, "%s", key_in);
    char *at = strchr(key, '@');
    if (strncmp(key, "gpu_model", 9) == 0 && (key[9] == '\0' || key[9] == '@')) {
        tgpu_model g;
        if (at) return tfail(err, errlen, "gpu_model is plan-wide: it takes no layer selector ('%s=%s')", key_in, value);
        if (tgpu_model_parse(value, &g))
            return tfail(err, errlen, "unknown GPU model '%s' in 'gpu_model=%s' (models: %s)", value, value,
                         tgpu_model_names());
        return apply_gpu_model(next, g, err, errlen);
    }
    int first = -1, last = -1;
    if (at) {
        *at = '\0';
        if (parse_layers(at + 1, &first, &last))
            return tfail(err, errlen, "malformed layer selector '@%s' in '%s=%s' (expected SLOT@L or SLOT@A-B with "
                         "layers 0..%d, e.g. mlp.up@0=bf16 or attn.*@0-2=fp32)", at + 1, key_in, value,
                         TPLAN_MAX_LAYERS - 1);
        if (!*key) return tfail(err, errlen, "malformed override '%s=%s' (no slot before '@')", key_in, value);
    }
    int matched = 0, global_named = -1;
    char names[2048];
    for (int s = 0; s < TSLOT_COUNT; s++) {
        if (!key_matches(next, key, (tslot)s)) continue;
        if (at && !slot_table[s].per_layer) {
            /* a glob or op name applies to the per-layer slots it names; a
             * global slot named outright is an error */
            if (strcmp(key, slot_table[s].name) == 0) {
                slot_names_of(next, 1, names, sizeof names);
                return tfail(err, errlen, "slot %s is global (one choice for the whole model): it takes no layer "
                             "selector '@%s' (per-layer slots: %s)", slot_table[s].name, at + 1, names);
            }
            if (global_named < 0) global_named = s;
            continue;
        }
        matched++;
        tslot_choice c;
        if (parse_choice(next, (tslot)s, value, &c, err, errlen)) return -1;
        /* read under the plan's GPU model (first layer named, for messages) */
        if (next->gpu_model != TGPU_NATIVE &&
            gpu_model_map((tslot)s, at ? first : -1, &c, next->gpu_model, next->gpu_model, err, errlen))
            return -1;
        if (!at) {
            next->slot[s] = c;
            clear_layer_choices(next, (tslot)s);
            continue;
        }
        for (int l = first; l <= last; l++)
            if (set_layer_choice(next, (tslot)s, l, &c, err, errlen)) return -1;
    }
    if (!matched && global_named >= 0) {
        slot_names_of(next, 1, names, sizeof names);
        return tfail(err, errlen, "'%s' names only global slots (such as %s): a layer selector '@%s' needs a per-layer "
                     "slot (%s)", key, slot_table[global_named].name, at + 1, names);
    }
    if (!matched) {
        slot_names_of(next, 0, names, sizeof names);
        return tfail(err, errlen, "unknown slot '%s' for model %s (slots: %s; or an op name, or a glob such as "
                     "'attn.*'; or gpu_model=GEN)", key, tmodel_kind_name(next->model), names);
    }
    return 0;
}

int tplan_set(tplan *p, const char *overrides, char *err, size_t errlen)
{
    if (!overrides) return 0;
    tplan *next = malloc(sizeof *next);
    char *copy = strdup(overrides);
    if (!next || !copy) {
        free(next), free(copy);
        return tfail(err, errlen, "out of memory");
    }
    *next = *p;
    int rc = 0;
    /* items split on every comma: an empty item is an error, not skipped */
    char *item = copy;
    for (;;) {
        char *comma = strchr(item, ',');
        if (comma) *comma = '\0';
        while (*item == ' ') item++;
        char *eq = strchr(item, '=');
        if (!*item) {
            rc = tfail(err, errlen, "empty override in '%s' (expected SLOT[@LAYERS]=PATH[:VARIANT],..., e.g. "
                       "lm_head=fp8,mlp.up@0=bf16)", overrides);
            break;
        }
        if (!eq || eq == item) {
            rc = tfail(err, errlen, "malformed override '%s' (expected SLOT[@LAYERS]=PATH[:VARIANT], e.g. lm_head=fp8)",
                       item);
            break;
        }
        *eq = '\0';
        if (apply_override(next, item, eq + 1, err, errlen)) {
            rc = -1;
            break;
        }
        if (!comma) break;
        item = comma + 1;
    }
    if (!rc) rc = tplan_validate(next, err, errlen);
    if (!rc) *p = *next;
    free(copy);
    free(next);
    return rc;
}

/* ---- naming ------------------------------------------------------------------------ */

void tplan_choice_variant_string(const tplan *p, tslot s, const tslot_choice *c, char *buf, size_t len)
{
    const kop *op = top_lookup(c->op);
    int v = c->variant;
    const char *vn = op && v >= 0 && v < op->n_variants ? op->variants[v].name : "?";
    if (c->op != slot_table[s].family[p->model][0]) snprintf(buf, len, "%s.%s", op ? op->name : "?", vn);
    else snprintf(buf, len, "%s", vn);
}

static void choice_string(const tplan *p, tslot s, const tslot_choice *c, char *buf, size_t len)
{
    char v[128];
    tplan_choice_variant_string(p, s, c, v, sizeof v);
    snprintf(buf, len, "%s:%s", kpath_name(c->path), v);
}

void tplan_choice_string(const tplan *p, tslot s, char *buf, size_t len) { choice_string(p, s, &p->slot[s], buf, len); }

/* Every per-layer choice of a agrees with b's at that layer. */
static int layer_choices_agree(const tplan *a, const tplan *b)
{
    for (int i = 0; i < a->n_layer_choices; i++) {
        const tlayer_choice *e = &a->layer_choice[i];
        if (!choice_equal(&e->choice, tplan_choice_at(b, (tslot)e->slot, e->layer))) return 0;
    }
    return 1;
}

int tplan_equal(const tplan *a, const tplan *b)
{
    if (a->model != b->model || a->gpu_model != b->gpu_model) return 0;
    for (int s = 0; s < TSLOT_COUNT; s++) {
        if (a->used[s] != b->used[s]) return 0;
        if (a->used[s] && !choice_equal(&a->slot[s], &b->slot[s])) return 0;
    }
    return layer_choices_agree(a, b) && layer_choices_agree(b, a);
}

/* ---- JSON -------------------------------------------------------------------------- */

/* Runs of consecutive layers of one slot with the same choice: the entry
 * index where the run after `i` starts (for "mlp.up@0-3"). */
static int layer_run_end(const tplan *p, int i)
{
    int j = i + 1;
    while (j < p->n_layer_choices && p->layer_choice[j].slot == p->layer_choice[i].slot &&
           p->layer_choice[j].layer == p->layer_choice[j - 1].layer + 1 &&
           choice_equal(&p->layer_choice[j].choice, &p->layer_choice[i].choice))
        j++;
    return j;
}

static void layer_key(const tplan *p, int i, int j, char *buf, size_t len)
{
    const tlayer_choice *a = &p->layer_choice[i], *b = &p->layer_choice[j - 1];
    if (a->layer == b->layer) snprintf(buf, len, "%s@%d", slot_table[a->slot].name, a->layer);
    else snprintf(buf, len, "%s@%d-%d", slot_table[a->slot].name, a->layer, b->layer);
}

int tplan_to_json(const tplan *p, char *buf, size_t len)
{
    size_t n = 0;
#define PUT(...) n = append(buf, len, n, __VA_ARGS__)
    PUT("{\"preset\":\"%s\",\"model\":\"%s\",", p->preset, tmodel_kind_name(p->model));
    if (p->gpu_model != TGPU_NATIVE) PUT("\"gpu_model\":\"%s\",", tgpu_model_name(p->gpu_model));
    PUT("\"slots\":{");
    int first = 1;
    char choice[160], key[96];
    for (int s = 0; s < TSLOT_COUNT; s++) {
        if (!p->used[s]) continue;
        tplan_choice_string(p, (tslot)s, choice, sizeof choice);
        PUT("%s\"%s\":\"%s\"", first ? "" : ",", slot_table[s].name, choice);
        first = 0;
    }
    PUT("}");
    if (p->n_layer_choices) {
        PUT(",\"layers\":{");
        for (int i = 0, j; i < p->n_layer_choices; i = j) {
            j = layer_run_end(p, i);
            layer_key(p, i, j, key, sizeof key);
            choice_string(p, (tslot)p->layer_choice[i].slot, &p->layer_choice[i].choice, choice, sizeof choice);
            PUT("%s\"%s\":\"%s\"", i ? "," : "", key, choice);
        }
        PUT("}");
    }
    PUT("}");
#undef PUT
    return (int)n;
}

char *tplan_json_alloc(const tplan *p)
{
    int n = tplan_to_json(p, NULL, 0);
    char *s = malloc((size_t)n + 1);
    if (s) tplan_to_json(p, s, (size_t)n + 1);
    return s;
}

/* A small reader for the one shape tplan_to_json writes: an object of
 * strings and of objects of strings.  Names are ASCII without escapes;
 * anything else is rejected. */
typedef struct {
    const char *s;
} jreader;

static void jskip(jreader *r)
{
    while (*r->s == ' ' || *r->s == '\t' || *r->s == '\n' || *r->s == '\r') r->s++;
}

static int jexpect(jreader *r, char c)
{
    jskip(r);
    if (*r->s != c) return -1;
    r->s++;
    return 0;
}

static int jstring(jreader *r, char *out, size_t len)
{
    jskip(r);
    if (*r->s != '"') return -1;
    r->s++;
    size_t n = 0;
    while (*r->s && *r->s != '"') {
        if (*r->s == '\\' || n + 1 >= len) return -1;
        out[n++] = *r->s++;
    }
    if (*r->s != '"') return -1;
    r->s++;
    out[n] = '\0';
    return 0;
}

/* Skips {"key":"value",...}. */
static int jskip_string_object(jreader *r)
{
    char k[96], v[160];
    if (jexpect(r, '{')) return -1;
    jskip(r);
    if (*r->s == '}') {
        r->s++;
        return 0;
    }
    for (;;) {
        if (jstring(r, k, sizeof k) || jexpect(r, ':') || jstring(r, v, sizeof v)) return -1;
        jskip(r);
        if (*r->s == ',') {
            r->s++;
            continue;
        }
        return jexpect(r, '}');
    }
}

/* The entries of a nested object {"key":"value",...} applied to the plan as
 * overrides; `listed` (may be NULL) marks slots named exactly.  layers: the
 * keys must carry a layer selector (else must not). */
static int json_overrides(jreader *r, tplan *next, int layers, unsigned char *listed, char *err, size_t errlen)
{
    const char *what = layers ? "layers" : "slots";
    char key[96], value[160];
    if (jexpect(r, '{')) return tfail(err, errlen, "plan JSON: \"%s\" is not an object", what);
    jskip(r);
    if (*r->s == '}') {
        r->s++;
        return 0;
    }
    for (;;) {
        if (jstring(r, key, sizeof key) || jexpect(r, ':') || jstring(r, value, sizeof value))
            return tfail(err, errlen, "plan JSON: malformed %s entry", layers ? "layer" : "slot");
        if (strncmp(key, "gpu_model", 9) == 0)
            return tfail(err, errlen, "plan JSON: \"%s\" in \"%s\": gpu_model is a top-level key", key, what);
        if (!strchr(key, '@') != !layers)
            return tfail(err, errlen, "plan JSON: \"%s\" in \"%s\": %s", key, what,
                         layers ? "expected SLOT@LAYERS" : "layer selectors belong in \"layers\"");
        if (apply_override(next, key, value, err, errlen)) return -1;
        for (int s = 0; listed && s < TSLOT_COUNT; s++)
            if (strcmp(key, slot_table[s].name) == 0) listed[s] = 1;
        jskip(r);
        if (*r->s == ',') {
            r->s++;
            continue;
        }
        if (jexpect(r, '}')) return tfail(err, errlen, "plan JSON: unterminated \"%s\"", what);
        return 0;
    }
}

int tplan_from_json(tplan *p, const char *json, char *err, size_t errlen)
{
    /* preset and model first (they make the plan the entries edit): one pass
     * for the top-level strings, one to apply "slots" then "layers" */
    jreader r = {json};
    char key[64], value[160], preset[160] = "", model[160] = "", gpu_model[160] = "native";
    const char *slots_at = NULL, *layers_at = NULL;
    if (jexpect(&r, '{')) return tfail(err, errlen, "plan JSON: expected '{'");
    for (;;) {
        if (jstring(&r, key, sizeof key) || jexpect(&r, ':')) return tfail(err, errlen, "plan JSON: malformed key");
        if (strcmp(key, "slots") == 0 || strcmp(key, "layers") == 0) {
            const char **at = strcmp(key, "slots") == 0 ? &slots_at : &layers_at;
            if (*at) return tfail(err, errlen, "plan JSON: \"%s\" appears twice", key);
            jskip(&r);
            *at = r.s;
            if (jskip_string_object(&r)) return tfail(err, errlen, "plan JSON: malformed \"%s\" (an object of strings)", key);
        } else {
            if (jstring(&r, value, sizeof value)) return tfail(err, errlen, "plan JSON: \"%s\" is not a string", key);
            if (strcmp(key, "preset") == 0) snprintf(preset, sizeof preset, "%s", value);
            else if (strcmp(key, "model") == 0) snprintf(model, sizeof model, "%s", value);
            else if (strcmp(key, "gpu_model") == 0) snprintf(gpu_model, sizeof gpu_model, "%s", value);
            else return tfail(err, errlen, "plan JSON: unknown key \"%s\" (keys: preset, model, gpu_model, slots, layers)",
                              key);
        }
        jskip(&r);
        if (*r.s == ',') {
            r.s++;
            continue;
        }
        if (jexpect(&r, '}')) return tfail(err, errlen, "plan JSON: expected ',' or '}'");
        break;
    }
    jskip(&r);
    if (*r.s) return tfail(err, errlen, "plan JSON: trailing characters");
    tmodel_kind kind;
    if (tmodel_kind_parse(model, &kind)) return tfail(err, errlen, "plan JSON: unknown model '%s' (gpt2, modern)", model);
    tgpu_model gpu;
    if (tgpu_model_parse(gpu_model, &gpu))
        return tfail(err, errlen, "plan JSON: unknown gpu_model '%s' (%s)", gpu_model, tgpu_model_names());
    if (!slots_at) return tfail(err, errlen, "plan JSON: no \"slots\"");
    tplan *next = malloc(sizeof *next);
    if (!next) return tfail(err, errlen, "out of memory");
    unsigned char listed[TSLOT_COUNT] = {0};
    int rc = tplan_init(next, preset, kind, err, errlen);
    jreader rs = {slots_at}, rl = {layers_at};
    if (!rc) rc = json_overrides(&rs, next, 0, listed, err, errlen);
    if (!rc && layers_at) rc = json_overrides(&rl, next, 1, NULL, err, errlen);
    /* every slot of the family must be listed: a plan is explicit.  Plans
     * written before fp8_scaling existed have none: they ran current scaling,
     * which tplan_init left there. */
    for (int s = 0; s < TSLOT_COUNT && !rc; s++)
        if (next->used[s] && !listed[s] && s != TSLOT_FP8_SCALING) rc = tfail(err, errlen, "plan JSON: slot %s missing", slot_table[s].name);
    /* the GPU model last: the entries are read as written, never rewritten
     * by it, and must already obey it */
    next->gpu_model = gpu;
    if (!rc) rc = tplan_validate(next, err, errlen);
    if (!rc) *p = *next;
    free(next);
    return rc;
}

/* ---- explain --------------------------------------------------------------------- */

/* What slot s reads, accumulates in and writes under choice c, in words. */
static void slot_formats(const tplan *p, tslot s, const tslot_choice *c, char *buf, size_t len)
{
    kpath path = c->path;
    const char *st = prec_format_name(tpath_storage(path));
    tgemm_role role = slot_table[s].gemm;
    if (role != TGEMM_NONE && tplan_fused_head(p) && slot_table[s].forward == TSLOT_LM_HEAD) {
        snprintf(buf, len, "computed inside cross_entropy (linear_cross_entropy), chunk by chunk");
        return;
    }
    if (s == TSLOT_CROSS_ENTROPY && c->op == TOP_LINEAR_CROSS_ENTROPY) {
        snprintf(buf, len, "h %s, W %s; per %lld-row chunk: logits fp32 (the GEMM's accumulator, never stored), "
                 "softmax fp32, loss fp32, dlogits %s; dh %s; dW fp32 summed over the chunks, then added into the "
                 "fp32 grads", st, st, (long long)klce_chunk_rows(c->variant), st, st);
        return;
    }
    if (role != TGEMM_NONE) {
        int dgrad = role == TGEMM_DGRAD, wgrad = role == TGEMM_WGRAD;
        const char *a = prec_format_name(tpath_operand(path, dgrad || wgrad));
        const char *b = prec_format_name(tpath_operand(path, 0));
        const char *acc = "acc fp32";
        char mma_acc[192];
        if (c->op == TOP_MATMUL_MMA) {
            const char *fallback = NULL;
            char why[256];
            const mma_model *m = tplan_mma_model(s, path, c->variant, &fallback, why, sizeof why);
            if (!m) {
                snprintf(buf, len, "refused: %s", why);
                return;
            }
            a = b = prec_format_name(m->arith.in);
            snprintf(mma_acc, sizeof mma_acc, "%s matrix-unit model, emulated: blocks of %d in K order, %d "
                     "fraction bits, RZ to fp32%s%s", m->gen, m->arith.block, m->arith.frac_bits,
                     fallback ? "; " : "", fallback ? fallback : "");
            acc = mma_acc;
        } else if (c->op == TOP_MATMUL_FAST)
            acc = path == KPATH_FP8 ? "acc in the tensor cores, never promoted (fast accumulation)" : "inputs rounded to tf32; acc fp32";
        else if (c->op == TOP_MATMUL_BLOCK_FP8) acc = "scales per 1x128 / 128x128 tile; acc promoted to fp32 every 128";
        else if (path == KPATH_FP8) acc = "acc fp32 (cuBLASLt's periodic promotion)";
        const char *scale =
            path == KPATH_FP8 && c->op != TOP_MATMUL_BLOCK_FP8 && c->op != TOP_MATMUL_MMA ? " (per-tensor scales)" : "";
        prec_format grad = tpath_storage(p->slot[TSLOT_GRAD_ACCUM].path);
        int direct = p->slot[TSLOT_GRAD_ACCUM].variant == TGRAD_ACCUM_GEMM_FP32 && grad == PREC_FP32 &&
                     (path == KPATH_BF16 || path == KPATH_FP16);
        if (wgrad && direct)
            snprintf(buf, len, "dy %s, x %s; %s; fp32 accumulator added straight into fp32 grads (beta 1)", a, b, acc);
        else if (wgrad && grad == tpath_storage(path))
            snprintf(buf, len, "dy %s, x %s%s; %s; dW += into %s grads (beta 1)", a, b, scale, acc, prec_format_name(grad));
        else if (wgrad)
            snprintf(buf, len, "dy %s, x %s%s; %s; dW %s, then added into %s grads", a, b, scale, acc, st,
                     prec_format_name(grad));
        else if (dgrad)
            snprintf(buf, len, "dy %s, W %s%s; %s; dx %s", a, b, scale, acc, st);
        else
            snprintf(buf, len, "x %s, W %s%s; %s; y %s", a, b, scale, acc, st);
        return;
    }
    switch (s) {
    case TSLOT_WEIGHTS: {
        tweights_variant v = (tweights_variant)c->variant;
        if (path == KPATH_FP32) snprintf(buf, len, "weights fp32 (they are the master)");
        else if (v == TWEIGHTS_MASTER) snprintf(buf, len, "master fp32; working copy %s (RNE after each update)", st);
        else if (v == TWEIGHTS_SR) snprintf(buf, len, "weights %s only; update rounded stochastically", st);
        else snprintf(buf, len, "master fp32 = working %s (truncated) + 16-bit mantissa buffer", st);
        return;
    }
    case TSLOT_GRAD_ACCUM: snprintf(buf, len, "parameter gradients %s", st); return;
    case TSLOT_ALLREDUCE: snprintf(buf, len, "gradients sent and summed as %s", st); return;
    case TSLOT_GRAD_NORM: snprintf(buf, len, "reads gradients (%s); sum of squares fp32", prec_format_name(tpath_storage(p->slot[TSLOT_GRAD_ACCUM].path))); return;
    case TSLOT_ADAMW: {
        tweights_variant v = (tweights_variant)p->slot[TSLOT_WEIGHTS].variant;
        const char *kernel = v == TWEIGHTS_SR ? "adamw_sr" : v == TWEIGHTS_MANTISSA_BUFFER ? "adamw_split" : "adamw";
        if (path == KPATH_FP32 && p->slot[TSLOT_WEIGHTS].path != KPATH_FP32)
            snprintf(buf, len, "grads fp32; m, v fp32; updates the fp32 master, then working copy RNE (kernel %s)", kernel);
        else
            snprintf(buf, len, "grads read as %s; m, v fp32; update fp32, stored per weights slot (kernel %s)", st, kernel);
        return;
    }
    case TSLOT_MUON: snprintf(buf, len, "momentum fp32; polar express iterates %s, acc fp32", st); return;
    case TSLOT_LOSS_SCALE: snprintf(buf, len, "scale fp32"); return;
    case TSLOT_FP8_SCALING: {
        int fp8 = 0;
        for (int g = 0; g < TSLOT_COUNT; g++)
            if (p->used[g] && slot_table[g].gemm != TGEMM_NONE && tplan_choice_uses_path(p, (tslot)g, KPATH_FP8)) fp8 = 1;
        if (!fp8) snprintf(buf, len, "no fp8 GEMM slot in this plan: no effect");
        else if (c->variant == TFP8_SCALING_DELAYED)
            snprintf(buf, len, "scale = max amax of the last %d calls per site, operand, replica / max_finite; casts "
                     "saturate", TFP8_AMAX_HISTORY);
        else snprintf(buf, len, "scale = this call's amax / max_finite");
        return;
    }
    case TSLOT_CROSS_ENTROPY: snprintf(buf, len, "logits read as stored; softmax fp32; loss fp32; dlogits %s", st); return;
    case TSLOT_ATTENTION:
        if (c->variant == KATT_NAIVE) snprintf(buf, len, "q, k, v %s; scores and probabilities stored %s (T x T); acc fp32; out %s", st, st, st);
        else if (katt_is_mma(c->variant))
            snprintf(buf, len, "q, k, v %s; q k^T and P v on the tensor cores (mma.sync m16n8k16, acc fp32; the CPU "
                     "backend models %s units), P and dS rounded to %s; online softmax fp32 per %d keys; out %s; "
                     "lse fp32", st, TPLAN_ATTENTION_MMA_GEN, st, KATT_MMA_KEYS, st);
        else snprintf(buf, len, "q, k, v %s; scores, online softmax, acc fp32; out %s; lse fp32", st, st);
        return;
    case TSLOT_RESIDUAL: snprintf(buf, len, "stream and its gradient %s; add in fp32, rounded once", st); return;
    case TSLOT_EMBEDDING:
        snprintf(buf, len, "lookup exact%s%s; backward: per-row fp32 sums added into the %s grads",
                 p->model == TMODEL_GPT2 ? ", + positions in " : "", p->model == TMODEL_GPT2 ? st : "",
                 prec_format_name(tpath_storage(p->slot[TSLOT_GRAD_ACCUM].path)));
        return;
    case TSLOT_TRANSPOSE:
        if (tplan_fused_head(p)) snprintf(buf, len, "idle: linear_cross_entropy reads E [V,C] and adds into dE itself");
        else snprintf(buf, len, "W_lm = E^T copied exactly (working format); dW_lm^T added into dE in %s", st);
        return;
    default: snprintf(buf, len, "in %s; compute fp32; out %s", st, st); return;
    }
}

static void explain_row(const tplan *p, tslot s, const char *name, int width, const tslot_choice *c, FILE *fp)
{
    char formats[640], variant[128];
    slot_formats(p, s, c, formats, sizeof formats);
    tplan_choice_variant_string(p, s, c, variant, sizeof variant);
    const kop *op = top_lookup(c->op);
    int sibling = c->op != slot_table[s].family[p->model][0];
    fprintf(fp, "%-*s %-16s %-5s %-16s %s\n", width, name, op ? op->name : "?", kpath_name(c->path),
            sibling ? strchr(variant, '.') + 1 : variant, formats);
}

/* What the plan's GPU model covers, and what it leaves out. */
static void explain_gpu_model(const tplan *p, FILE *fp)
{
    const char *gen = tgpu_model_name(p->gpu_model);
    if (p->gpu_model == TGPU_NATIVE) {
        fprintf(fp, "gpu model native: every kernel on this GPU's own units (cuBLAS, mma.sync); --gpu-model GEN runs "
                    "the matrix-unit GEMMs as GEN's units would\n\n");
        return;
    }
    fprintf(fp, "gpu model %s: the plan as %s code runs it, as far as this GPU (or the CPU) reproduces it bit for bit\n", gen,
            gen);
    fprintf(fp, "  modelled       every GEMM slot on a tensor-core path (bf16, fp16, fp8, tf32) runs matmul_mma.%s, the\n"
                "                 %s matrix units' bit-accurate model, emulated on CUDA cores (or the CPU)\n", gen, gen);
    fprintf(fp, "  fp32 GEMMs     CUDA-core SGEMM (fp32 matmuls off TF32, PyTorch's default): fp32 FMA on every GPU\n");
    fprintf(fp, "  other kernels  the arithmetic an sm_80 build runs: no kernel branches on __CUDA_ARCH__ in its\n"
                "                 arithmetic (checked: tests/test_arch_branches.c)\n");
    fprintf(fp, "  not modelled   the algorithm cuBLAS picks on a real %s for fp32 GEMMs (K order, split-K); NCCL's\n"
                "                 reduction order\n", gen);
    fprintf(fp, "  falls back     attention flash_mma* -> flash* (CUDA cores) when the model is applied: no model of\n"
                "                 %s's units inside attention\n", gen);
    fprintf(fp, "  refused        this GPU's own matrix units with no %s model: attention flash_mma* chosen under the\n"
                "                 model, matmul_block_fp8, bf16/fp16 Muon; GEMM variants split_epilogue, split_k\n\n", gen);
}

void tplan_explain(const tplan *p, FILE *fp)
{
    fprintf(fp, "plan %s for model %s\n", p->preset, tmodel_kind_name(p->model));
    explain_gpu_model(p, fp);
    fprintf(fp, "%-16s %-16s %-5s %-16s %s\n", "slot", "op", "path", "variant", "formats (storage / compute)");
    for (int s = 0; s < TSLOT_COUNT; s++)
        if (p->used[s]) explain_row(p, (tslot)s, slot_table[s].name, 16, &p->slot[s], fp);
    /* per-layer choices that differ from their slot's row, runs of layers
     * merged, in a column as wide as their longest name */
    char key[96];
    int width = 16, shown = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0, j; i < p->n_layer_choices; i = j) {
            j = layer_run_end(p, i);
            const tlayer_choice *e = &p->layer_choice[i];
            if (choice_equal(&e->choice, &p->slot[e->slot])) continue;
            layer_key(p, i, j, key, sizeof key);
            if (pass == 0) {
                if ((int)strlen(key) > width) width = (int)strlen(key);
                continue;
            }
            if (!shown++) fprintf(fp, "\nper-layer choices (where they differ from the slot's row above)\n");
            explain_row(p, (tslot)e->slot, key, width, &e->choice, fp);
        }
    /* how each runs under the GPU model: the slots' rows, then the per-layer
     * choices that differ from them */
    if (p->gpu_model != TGPU_NATIVE) {
        char note[512];
        fprintf(fp, "\ngpu model %s, slot by slot\n", tgpu_model_name(p->gpu_model));
        for (int s = 0; s < TSLOT_COUNT; s++) {
            if (!p->used[s]) continue;
            tplan_gpu_model_note(p, (tslot)s, &p->slot[s], note, sizeof note);
            fprintf(fp, "%-*s %s\n", width, slot_table[s].name, note);
        }
        for (int i = 0, j; i < p->n_layer_choices; i = j) {
            j = layer_run_end(p, i);
            const tlayer_choice *e = &p->layer_choice[i];
            if (choice_equal(&e->choice, &p->slot[e->slot])) continue;
            layer_key(p, i, j, key, sizeof key);
            tplan_gpu_model_note(p, (tslot)e->slot, &e->choice, note, sizeof note);
            fprintf(fp, "%-*s %s\n", width, key, note);
        }
    }
    /* the tensors, in execution order */
    fprintf(fp, "\n%-38s %-14s %-6s %s\n", "tensor", "shape", "dtype", "written by");
    for (int row = 1;; row++) {
        const ttensor_info *t = NULL;
        int writer = 0;
        for (int s = 0; s < TSLOT_COUNT && !t; s++)
            for (int k = 0; k < TSLOT_TENSORS_MAX && slot_table[s].tensors[k].row; k++)
                if (slot_table[s].tensors[k].row == row) {
                    t = &slot_table[s].tensors[k];
                    writer = s;
                }
        if (!t) break;
        if (!(t->models & (1u << p->model))) continue;
        if (tplan_fused_head(p) && (writer == TSLOT_LM_HEAD || (writer == TSLOT_CROSS_ENTROPY && t->kind == GRAD))) {
            fprintf(fp, "%-38s %-14s %-6s %s\n", t->label, t->shape, "-", "not stored (linear_cross_entropy)");
            continue;
        }
        if (tplan_fused_head(p) && writer == TSLOT_LM_HEAD_DGRAD) writer = TSLOT_CROSS_ENTROPY;
        prec_format f = t->kind == TTENSOR_STATISTIC ? PREC_FP32 : tpath_storage(p->slot[writer].path);
        fprintf(fp, "%-38s %-14s %-6s %s\n", t->label, t->shape, prec_format_name(f), slot_table[writer].name);
    }
    /* parameters and their optimizer state */
    prec_format work = tpath_storage(p->slot[TSLOT_WEIGHTS].path);
    prec_format grad = tpath_storage(p->slot[TSLOT_GRAD_ACCUM].path);
    int master = p->slot[TSLOT_WEIGHTS].path != KPATH_FP32 && p->slot[TSLOT_WEIGHTS].variant != TWEIGHTS_SR;
    fprintf(fp, "%-38s %-14s %-6s %s\n", "parameters (working copy)", "", prec_format_name(work), "weights");
    if (master)
        fprintf(fp, "%-38s %-14s %-6s %s\n",
                p->slot[TSLOT_WEIGHTS].variant == TWEIGHTS_MANTISSA_BUFFER ? "parameters (low 16 mantissa bits)"
                                                                         : "parameters (master)",
                "", p->slot[TSLOT_WEIGHTS].variant == TWEIGHTS_MANTISSA_BUFFER ? "u16" : "fp32", "weights");
    fprintf(fp, "%-38s %-14s %-6s %s\n", "parameter gradients", "", prec_format_name(grad), "grad_accum");
    fprintf(fp, "%-38s %-14s %-6s %s\n", "AdamW m, v", "", "fp32", "optimizer.adamw");
    if (p->used[TSLOT_MUON]) fprintf(fp, "%-38s %-14s %-6s %s\n", "Muon momentum", "", "fp32", "optimizer.muon");
    char *json = tplan_json_alloc(p);
    fprintf(fp, "\n%s\n", json ? json : "(out of memory)");
    free(json);
}

/* ---- differences between plans ------------------------------------------------------ */

int tplan_diff(const tplan *a, const tplan *b, int depth, tplan_unit *units, int max_units)
{
    if (a->model != b->model) return -1;
    int n = 0;
    for (int s = 0; s < TSLOT_COUNT; s++) {
        if (!a->used[s]) continue;
        if (!slot_table[s].per_layer) {
            if (!choice_equal(&a->slot[s], &b->slot[s])) {
                if (n < max_units) units[n] = (tplan_unit){(tslot)s, -1};
                n++;
            }
            continue;
        }
        for (int l = 0; l < depth; l++)
            if (!choice_equal(tplan_choice_at(a, (tslot)s, l), tplan_choice_at(b, (tslot)s, l))) {
                if (n < max_units) units[n] = (tplan_unit){(tslot)s, l};
                n++;
            }
    }
    return n;
}

int tplan_apply_units(const tplan *base, const tplan *other, const tplan_unit *units, int n, tplan *out, char *err,
                      size_t errlen)
{
    if (base->model != other->model)
        return tfail(err, errlen, "plans for different model families (%s, %s)", tmodel_kind_name(base->model),
                     tmodel_kind_name(other->model));
    tplan *next = malloc(sizeof *next);
    if (!next) return tfail(err, errlen, "out of memory");
    *next = *base;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        tslot s = units[i].slot;
        int layer = units[i].layer;
        if ((unsigned)s >= TSLOT_COUNT || !base->used[s])
            rc = tfail(err, errlen, "unit %d: slot #%d is not a slot of model %s", i, (int)s,
                       tmodel_kind_name(base->model));
        else if (slot_table[s].per_layer != (layer >= 0) || layer >= TPLAN_MAX_LAYERS)
            rc = tfail(err, errlen, "unit %d: slot %s %s", i, slot_table[s].name,
                       slot_table[s].per_layer ? "is per-layer: the unit needs a layer" : "is global: it has no layers");
        else if (layer < 0)
            next->slot[s] = other->slot[s];
        else
            rc = set_layer_choice(next, s, layer, tplan_choice_at(other, s, layer), err, errlen);
    }
    if (!rc && base->gpu_model != other->gpu_model) {
        next->gpu_model = other->gpu_model;
        if (check_gpu_model(next, NULL, 0)) next->gpu_model = base->gpu_model;
        if (check_gpu_model(next, NULL, 0)) next->gpu_model = TGPU_NATIVE;
    }
    if (!rc) rc = tplan_validate(next, err, errlen);
    if (!rc) *out = *next;
    free(next);
    return rc;
}

void tplan_unit_string(const tplan_unit *u, char *buf, size_t len)
{
    const char *name = (unsigned)u->slot < TSLOT_COUNT ? slot_table[u->slot].name : "?";
    if (u->layer >= 0) snprintf(buf, len, "%s@%d", name, u->layer);
    else snprintf(buf, len, "%s", name);
}

/* ---- binding ---------------------------------------------------------------------------- */

int tplan_bind(tbinding *b, const tplan *p, int depth, char *err, size_t errlen)
{
    memset(b, 0, sizeof *b);
    if (depth < 1 || depth > TPLAN_MAX_LAYERS)
        return tfail(err, errlen, "model depth %d outside 1..%d", depth, TPLAN_MAX_LAYERS);
    if (tplan_check_layers(p, depth, err, errlen)) return -1;
    int n = 0;
    for (int s = 0; s < TSLOT_COUNT; s++) {
        b->first[s] = n;
        n += slot_table[s].per_layer ? depth : 1;
    }
    b->sites = calloc((size_t)n, sizeof *b->sites);
    if (!b->sites) return tfail(err, errlen, "out of memory");
    b->depth = depth;
    for (int s = 0; s < TSLOT_COUNT; s++) {
        int layers = slot_table[s].per_layer ? depth : 1;
        for (int l = 0; l < layers; l++) {
            tsite *at = &b->sites[b->first[s] + l];
            const tslot_choice *c = tplan_choice_at(p, (tslot)s, slot_table[s].per_layer ? l : -1);
            at->slot = (tslot)s;
            at->layer = slot_table[s].per_layer ? l : -1;
            if (!p->used[s]) continue; /* op TOP_NONE */
            at->op = c->op;
            at->path = c->path;
            at->variant = c->variant;
            at->desc = top_lookup(c->op);
            if (!at->desc) {
                tbinding_free(b);
                return tfail(err, errlen, "slot %s: op %s is not in the kernel registry", slot_table[s].name,
                             top_name(c->op));
            }
        }
    }
    return 0;
}

void tbinding_free(tbinding *b)
{
    free(b->sites);
    memset(b, 0, sizeof *b);
}

const tsite *tbinding_site(const tbinding *b, tslot s, int layer)
{
    assert((unsigned)s < TSLOT_COUNT && b->sites);
    if (!slot_table[s].per_layer) return &b->sites[b->first[s]];
    assert(layer >= 0 && layer < b->depth);
    return &b->sites[b->first[s] + layer];
}

void tsite_name(const tsite *at, char *buf, size_t len)
{
    if (at->layer >= 0) snprintf(buf, len, "slot %s@%d", slot_table[at->slot].name, at->layer);
    else snprintf(buf, len, "slot %s", slot_table[at->slot].name);
}
