/* trainer/plan.h — the numerics plan: which path (storage format) and which
 * variant every kernel slot of the model runs, per layer where wanted.
 *
 * A slot is one role in the model, e.g. "attn.qkv" (the forward qkv GEMM),
 * "attn.qkv.dgrad" (its input-gradient GEMM), "norm.mlp", "optimizer.adamw"
 * or "weights" (how parameters are stored).  One descriptor table (tslot_get)
 * holds every fact about a slot: the op it runs in each model family and the
 * sibling ops a plan may name instead, whether it is a GEMM and in which
 * role, whether it runs once per layer, whether it holds training state, and
 * the tensors it writes.  Slots that run a GPU kernel name an op of the
 * kernel registry (kernels/registry.h) and are validated against it: the
 * op's paths and variants are the accepted values.  A few slots are the
 * trainer's own (weight storage, gradient accumulation, all-reduce, loss
 * scaling); their paths and variants are described here the same way.
 *
 * A plan starts from a preset (fp32, bf16, fp16, fp8) for a model family and
 * takes overrides "KEY[@LAYERS]=PATH[:VARIANT],..." where KEY is a slot name,
 * a glob over slot names ("attn.*") or an op name ("rmsnorm": every slot
 * running that op), and LAYERS one layer ("3") or a range ("0-2") of a
 * per-layer slot.  Later overrides win; an override without a selector
 * replaces every layer's choice of the slots it names.  A plan serialises to
 * one JSON object and parses back.
 *
 * Binding a plan to a model depth (tplan_bind) resolves every (slot, layer)
 * once into a tsite: the op as a typed handle (top_id) with its registry
 * entry, path and variant.  The backends dispatch on those handles and on
 * the kernels' variant enums, never on names. */
#ifndef ULPSCOPE_TRAINER_PLAN_H
#define ULPSCOPE_TRAINER_PLAN_H

#include <stddef.h>
#include <stdio.h>

#include "kernels/registry.h"
#include "precision/mma.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Model families: they decide which ops some slots run (layernorm or
 * rmsnorm, gelu or relu^2) and which slots exist at all (rope, QK-norm and
 * Muon only in modern). */
typedef enum { TMODEL_GPT2 = 0, TMODEL_MODERN, TMODEL_COUNT } tmodel_kind;
const char *tmodel_kind_name(tmodel_kind k);
int tmodel_kind_parse(const char *name, tmodel_kind *out);

/* ---- ops: the typed handles the backends dispatch on ---------------------------------- */

/* Every op a slot can run.  The registry ops are found by name in one place
 * (top_lookup); the trainer's own ops (TOP_WEIGHTS and after) are described
 * in trainer/plan.c.  A variant index is the op's own kernel enum
 * (kmatmul_variant, katt_variant, ...), the registry's order. */
typedef enum {
    TOP_NONE = 0,
    TOP_EMBEDDING,
    TOP_LAYERNORM,
    TOP_RMSNORM,
    TOP_MATMUL,
    TOP_MATMUL_FAST,       /* tf32 inputs, or fp8 fast accumulation */
    TOP_MATMUL_BLOCK_FP8,  /* block-scaled fp8 */
    TOP_ROPE,
    TOP_ATTENTION,
    TOP_RESIDUAL,
    TOP_GELU_TANH,
    TOP_RELU2,
    TOP_CROSS_ENTROPY,
    TOP_LINEAR_CROSS_ENTROPY, /* lm_head GEMM, cross-entropy, dgrad and wgrad in one chunked call */
    TOP_TRANSPOSE,
    TOP_GRAD_NORM,
    TOP_ADAMW,
    TOP_POLAR_EXPRESS,
    TOP_MUON_NEWTON_SCHULZ, /* polar express' iteration with Muon's quintic */
    TOP_MATMUL_MMA,        /* a generation's matrix-unit model on CUDA cores (variant = generation) */
    TOP_WEIGHTS,           /* the trainer's own from here on */
    TOP_GRAD_ACCUM,
    TOP_ALLREDUCE,
    TOP_LOSS_SCALE,
    TOP_FP8_SCALING,
    TOP_COUNT
} top_id;

const char *top_name(top_id op); /* "matmul_fast"; "?" for TOP_NONE */
/* 1 for registry ops (a GPU kernel), 0 for the trainer's own. */
int top_is_kernel(top_id op);
/* The op's description: the registry entry, looked up by name here and only
 * here, or the trainer's own; NULL when the registry lacks it. */
const kop *top_lookup(top_id op);

/* ---- slots ------------------------------------------------------------------------------ */

/* Slots in the order the model runs them (forward, backward, update). */
typedef enum {
    TSLOT_EMBEDDING = 0,
    TSLOT_NORM_ATTN,
    TSLOT_ATTN_QKV,
    TSLOT_NORM_QK,
    TSLOT_ROPE,
    TSLOT_ATTENTION,
    TSLOT_ATTN_OUT,
    TSLOT_RESIDUAL,
    TSLOT_NORM_MLP,
    TSLOT_MLP_UP,
    TSLOT_ACTIVATION,
    TSLOT_MLP_DOWN,
    TSLOT_NORM_FINAL,
    TSLOT_LM_HEAD,
    TSLOT_CROSS_ENTROPY,
    TSLOT_LM_HEAD_DGRAD,
    TSLOT_LM_HEAD_WGRAD,
    TSLOT_MLP_DOWN_DGRAD,
    TSLOT_MLP_DOWN_WGRAD,
    TSLOT_MLP_UP_DGRAD,
    TSLOT_MLP_UP_WGRAD,
    TSLOT_ATTN_OUT_DGRAD,
    TSLOT_ATTN_OUT_WGRAD,
    TSLOT_ATTN_QKV_DGRAD,
    TSLOT_ATTN_QKV_WGRAD,
    TSLOT_TRANSPOSE,
    TSLOT_GRAD_ACCUM,
    TSLOT_ALLREDUCE,
    TSLOT_GRAD_NORM,
    TSLOT_ADAMW,
    TSLOT_MUON,
    TSLOT_WEIGHTS,
    TSLOT_LOSS_SCALE,
    TSLOT_FP8_SCALING,
    TSLOT_COUNT
} tslot;

/* A GEMM slot's role: the forward product, the input gradient (dgrad) or the
 * weight gradient (wgrad).  The first operand of dgrad and wgrad is a
 * gradient (e5m2 under fp8). */
typedef enum { TGEMM_NONE = 0, TGEMM_FORWARD, TGEMM_DGRAD, TGEMM_WGRAD } tgemm_role;

/* Slots that hold training state (or the NCCL communicator) cannot change
 * mid-run: their path, or their whole choice. */
typedef enum { TFIXED_NO = 0, TFIXED_PATH, TFIXED_CHOICE } tfixed;

typedef enum { TTENSOR_ACTIVATION = 0, TTENSOR_GRADIENT, TTENSOR_STATISTIC /* fp32 always */ } ttensor_kind;

/* A tensor a slot writes, as tplan_explain lists it. */
typedef struct {
    const char *label;    /* "norm.attn out" */
    const char *shape;    /* "B*T x C" */
    ttensor_kind kind;
    unsigned models;      /* bit (1 << tmodel_kind) per family that has it */
    int row;              /* its place in execution order: explain's row; 0 ends the list */
} ttensor_info;

#define TSLOT_FAMILY_MAX 4
#define TSLOT_TENSORS_MAX 4

typedef struct {
    const char *name;     /* "attn.qkv" */
    const char *summary;  /* one line */
    /* per family: [0] the slot's own op (TOP_NONE: the slot does not exist
     * there), then sibling ops a plan may name instead ("fp8:matmul_fast") */
    top_id family[TMODEL_COUNT][TSLOT_FAMILY_MAX];
    tgemm_role gemm;      /* TGEMM_NONE: not a GEMM */
    tslot forward;        /* a GEMM's forward slot (its own for the forward role) */
    int per_layer;        /* runs in every layer, one choice per layer */
    tfixed fixed;
    ttensor_info tensors[TSLOT_TENSORS_MAX]; /* what it writes (row 1 upward) */
} tslot_info;

const tslot_info *tslot_get(tslot s);
/* The slot's own op in a model family; TOP_NONE where the slot is absent. */
top_id tslot_op(tslot s, tmodel_kind model);
/* dgrad and wgrad GEMMs: their first operand is a gradient. */
static inline int tslot_is_gradient_gemm(tslot s)
{
    tgemm_role r = tslot_get(s)->gemm;
    return r == TGEMM_DGRAD || r == TGEMM_WGRAD;
}

/* ---- plans ------------------------------------------------------------------------------- */

typedef struct {
    kpath path;
    top_id op;           /* a member of the slot's family (family[model][0] unless a sibling was named) */
    int variant;         /* index into that op's variants */
} tslot_choice;

/* Layer selectors accept layers 0..TPLAN_MAX_LAYERS-1 before a depth is
 * known; binding to a model checks them against its depth. */
#define TPLAN_MAX_LAYERS 1024
#define TPLAN_MAX_LAYER_CHOICES 2048

typedef struct {
    short slot;          /* a per-layer tslot */
    short layer;
    tslot_choice choice;
} tlayer_choice;

/* The GPU a plan runs as (see "GPU models" below); native: this GPU's own
 * units. */
typedef enum { TGPU_NATIVE = 0, TGPU_V100, TGPU_A100, TGPU_H100, TGPU_B200, TGPU_COUNT } tgpu_model;

typedef struct {
    char preset[16];     /* the preset the plan started from */
    tmodel_kind model;
    tgpu_model gpu_model; /* every choice below obeys it (tplan_validate) */
    unsigned char used[TSLOT_COUNT];  /* slot exists in this model family */
    tslot_choice slot[TSLOT_COUNT];   /* every layer's choice unless layer_choice says otherwise */
    int n_layer_choices;
    /* per-layer overrides, sorted by (slot, layer), one per pair; an entry
     * may equal the slot's choice (it still names a layer the depth must have) */
    tlayer_choice layer_choice[TPLAN_MAX_LAYER_CHOICES];
} tplan;

/* The plan's cross_entropy slot runs linear_cross_entropy: the lm_head GEMM,
 * the cross-entropy, lm_head.dgrad and lm_head.wgrad in one chunked call
 * (kernels/cross_entropy.h, klinear_ce) that never stores the logits.  Its
 * rules (tplan_validate): lm_head, lm_head.dgrad and lm_head.wgrad say what
 * runs inside it, the plain fused matmul on its path (so no fp8 and no
 * matmul_mma: no GPU model but on fp32), and grad_accum is fp32 (its dW
 * [V,C] is fp32).  The model also needs no logit soft-cap (the op has none). */
int tplan_fused_head(const tplan *p);

/* The choice a plan makes for slot s in layer `layer` (-1 or a global slot:
 * the slot's own choice). */
const tslot_choice *tplan_choice_at(const tplan *p, tslot s, int layer);
/* 1 when slot s runs path `path` in some layer (its own choice or a per-layer one). */
int tplan_choice_uses_path(const tplan *p, tslot s, kpath path);
/* The op a plan runs in slot s (its layers' default), or NULL. */
const kop *tplan_kop(const tplan *p, tslot s);

/* Preset names: "fp32, bf16, fp16, fp8". */
const char *tplan_preset_names(void);

/* Fill a plan from a preset.  Returns 0, or -1 with a one-line message in err
 * (unknown preset; a slot whose op or path the registry lacks). */
int tplan_init(tplan *p, const char *preset, tmodel_kind model, char *err, size_t errlen);

/* Apply overrides "KEY[@LAYERS]=PATH[:VARIANT][,KEY=...]".  A key matching
 * no slot, a path the op lacks, an unknown variant, a selector on a global
 * slot or an empty item is an error that names it and lists the accepted
 * names; the plan is left unchanged on error.  The item "gpu_model=GEN"
 * applies a GPU model where it stands (tplan_set_gpu_model); every item
 * after it is read under that model.  Returns 0 or -1. */
int tplan_set(tplan *p, const char *overrides, char *err, size_t errlen);

/* Check every used slot (and per-layer choice) against the registry and the
 * trainer's rules.  tplan_init/tplan_set/tplan_from_json call it. */
int tplan_validate(const tplan *p, char *err, size_t errlen);
/* Every per-layer choice names a layer below depth: 0, or -1 naming the
 * slot, the layer and the valid range. */
int tplan_check_layers(const tplan *p, int depth, char *err, size_t errlen);
/* Every attention choice (the slot's and the per-layer ones) runs at the
 * model's head dimension (width / heads): 0, or -1 naming the slot and what
 * the variant needs (flash_mma: a multiple of 8). */
int tplan_check_head_dim(const tplan *p, int64_t head_dim, char *err, size_t errlen);

/* "two_pass", or "matmul_fast.fused" for a sibling op */
void tplan_choice_variant_string(const tplan *p, tslot s, const tslot_choice *c, char *buf, size_t len);
/* "bf16:two_pass" */
void tplan_choice_string(const tplan *p, tslot s, char *buf, size_t len);
/* Same model family and the same choice for every slot and every layer any
 * of the two plans names. */
int tplan_equal(const tplan *a, const tplan *b);

/* Storage format of a path's outputs: fp8 ops write bf16. */
prec_format tpath_storage(kpath p);
/* Format of a GEMM operand under a path: fp8 stores activations and weights
 * as e4m3 and gradients as e5m2 (each with a per-tensor scale). */
prec_format tpath_operand(kpath p, int is_gradient);

/* matmul_mma: the slot's GEMMs through the bit-accurate matrix-unit model of
 * a GPU generation (precision/mma.h), on the CUDA cores of whatever GPU runs
 * (kernels/mma_emulate.h, its K order) or on the CPU.  Its variants are the
 * generations; the path picks the model's input format as real code on that
 * generation would get it:
 *   fp16 -> fp16 blocks; bf16 -> bf16 blocks; fp32 -> tf32 blocks (the
 *   matrix units take fp32 data as tf32, as TF32-enabled cuBLAS does);
 *   fp8 on a100 -> bf16 blocks on the unquantised bf16 operands (the A100
 *   has no fp8 units: fp8 recipes run their GEMMs in bf16 there).
 * Refused, with the reason: v100 with any path but fp16 (its units take
 * fp16 only); fp8 on v100, h100, b200 (the trainer's fp8 GEMMs mix e5m2
 * gradients with e4m3, which the one-format models do not describe).
 * Every model runs the mma.sync route with fp32 output. */
typedef enum { TMMA_V100 = 0, TMMA_A100, TMMA_H100, TMMA_B200, TMMA_COUNT } tmma_gen;
/* The model slot s runs under (path, gen) with the fallback it takes (NULL
 * when none) in *fallback; NULL with the reason in why when refused. */
const mma_model *tplan_mma_model(tslot s, kpath path, int gen, const char **fallback, char *why, size_t why_len);

/* ---- GPU models: a plan run as another generation would run it ----------------------------
 *
 * gpu_model=GEN (--gpu-model GEN) makes the plan run as real code on that
 * generation would, as far as this GPU (or the CPU) can say bit for bit:
 *   - every GEMM slot on a tensor-core path (bf16, fp16, fp8 with the plain
 *     matmul, and matmul_fast: tf32 or fp8 fast accumulation) runs
 *     matmul_mma.GEN on its path, with tplan_mma_model's fallbacks (fp8 on
 *     a100: the bf16 model) and refusals (v100: fp16 only; fp8 on v100,
 *     h100, b200);
 *   - fp32 GEMMs with the plain matmul stay: CUDA-core SGEMM, as PyTorch's
 *     default (fp32 matmuls off TF32) runs them, fp32 FMA on every
 *     generation (the K order cuBLAS picks on that generation is not
 *     modelled);
 *   - kernels that run this GPU's own matrix units and have no generation
 *     model are refused, naming the slot and what to use instead: attention
 *     flash_mma and flash_mma_exp2 (use flash), matmul_block_fp8 (use the
 *     plain fp8 matmul), bf16/fp16 Muon (cuBLAS GEMMs; use
 *     optimizer.muon=fp32), GEMM variants split_epilogue and split_k (no
 *     model form: use fused);
 *   - every other kernel runs the arithmetic an sm_80 build runs: no kernel
 *     branches on __CUDA_ARCH__ in its arithmetic (tests/test_arch_branches.c).
 * Order: the model rewrites the plan's choices when it is applied; every
 * override after it is read under the model (lm_head=fp8 becomes
 * fp8:matmul_mma.a100) and one that contradicts it (lm_head=bf16:mma.h100
 * under a100, attention=bf16:flash_mma) is refused.  A model can replace
 * another (a100 -> h100); native cannot follow a model (the choices it
 * replaced are not kept).  The choices it made are the plan's: JSON and
 * logs list them, with "gpu_model" beside "model". */
const char *tgpu_model_name(tgpu_model g);  /* "a100"; "?" out of range */
int tgpu_model_parse(const char *name, tgpu_model *out);
const char *tgpu_model_names(void);        /* "native, v100, a100, h100, b200" */
/* Apply model g to plan p as described above.  Returns 0, or -1 with one
 * line naming the slot that cannot run under g (p unchanged). */
int tplan_set_gpu_model(tplan *p, tgpu_model g, char *err, size_t errlen);
/* How slot s's choice c runs under the plan's GPU model, in words (one line). */
void tplan_gpu_model_note(const tplan *p, tslot s, const tslot_choice *c, char *buf, size_t len);
/* The matrix units behind the tensor-core attention (variants flash_mma,
 * flash_mma_exp2) where they are modelled rather than run: the CPU backend.
 * A plan names no GPU, so one generation stands for "the GPU's matrix
 * units": the H100's (mma.sync, inputs of the path's format, fp32 out), the
 * GPU the CUDA backend's figures come from (sm_90; docs/results-experiments.md).
 * On an A100 or a B200 the CUDA backend's bits may differ from the CPU's in
 * the last place of a block sum (precision/mma.h: A100 blocks of 8 with 24
 * fraction bits; B200 no +0 rule).  NULL with the reason for a path the
 * kernels do not offer (fp32, fp8). */
#define TPLAN_ATTENTION_MMA_GEN "h100"
const mma_model *tplan_attention_mma_model(kpath path, char *why, size_t why_len);

/* Named trainer-slot variants, for the code that acts on them. */
typedef enum { TWEIGHTS_MASTER = 0, TWEIGHTS_SR, TWEIGHTS_MANTISSA_BUFFER } tweights_variant;
typedef enum { TALLREDUCE_RING = 0, TALLREDUCE_TREE } tallreduce_variant;
typedef enum { TGRAD_ACCUM_SUM = 0, TGRAD_ACCUM_GEMM_FP32 } tgrad_accum_variant;
typedef enum { TLOSS_SCALE_NONE = 0, TLOSS_SCALE_DYNAMIC } tloss_scale_variant;
/* fp8_scaling: where the per-tensor scale of an fp8 GEMM operand comes from.
 * current: amax of this tensor at this call.  delayed: Transformer Engine's
 * DelayedScaling recipe (NVIDIA Transformer Engine documentation,
 * "transformer_engine.common.recipe.DelayedScaling", amax_compute_algo "max"):
 * the max of the amaxes of the last TFP8_AMAX_HISTORY calls of this site's
 * operand (slot x layer x operand A/B x replica), this call's amax recorded
 * for the next ones; a site's first call uses its own amax. */
typedef enum { TFP8_SCALING_CURRENT = 0, TFP8_SCALING_DELAYED } tfp8_scaling_variant;
#define TFP8_AMAX_HISTORY 16

/* JSON: {"preset":"bf16","model":"gpt2","slots":{"embedding":"bf16:sorted",...}}
 * (slots of the model family only), plus "layers":{"mlp.up@0-1":"fp32:fused",...}
 * when the plan has per-layer choices and "gpu_model":"a100" after "model"
 * when the plan has a GPU model.  tplan_to_json returns the length it
 * needed (snprintf semantics); TPLAN_JSON_MAX always suffices. */
#define TPLAN_JSON_MAX 131072
int tplan_to_json(const tplan *p, char *buf, size_t len);
/* The JSON in a fresh malloc'd string (NULL when out of memory). */
char *tplan_json_alloc(const tplan *p);
/* Parses JSON of that shape; "layers" is optional (plans written before
 * per-layer slots have none). */
int tplan_from_json(tplan *p, const char *json, char *err, size_t errlen);

/* Print the plan: one row per slot (op, path, variant, operand, accumulate
 * and output formats), then the per-layer choices that differ from their
 * slot's row, then every tensor of the model with its storage format and the
 * slot that writes it. */
void tplan_explain(const tplan *p, FILE *fp);

/* ---- differences between plans, for bisection -------------------------------------------- */

/* One assignment: a global slot (layer -1), or one layer of a per-layer
 * slot.  GEMM roles are slots of their own (mlp.up, mlp.up.dgrad,
 * mlp.up.wgrad). */
typedef struct {
    tslot slot;
    int layer;
} tplan_unit;

/* The units where a and b (same model family) assign differently, for a
 * model of `depth` layers, in slot then layer order.  Writes at most
 * max_units and returns how many there are; -1 when the families differ. */
int tplan_diff(const tplan *a, const tplan *b, int depth, tplan_unit *units, int max_units);
/* out = base with the n units assigned as in other.  Returns 0, or -1 with
 * a message when the mixture breaks a rule of the trainer (for example
 * weights=bf16:sr without its optimizer.adamw=bf16).  When the two plans'
 * GPU models differ, the mixture gets the first whose rules its choices
 * obey: other's, base's, else native (the choices say what runs). */
int tplan_apply_units(const tplan *base, const tplan *other, const tplan_unit *units, int n, tplan *out, char *err,
                      size_t errlen);
/* "mlp.up@3" or "lm_head" */
void tplan_unit_string(const tplan_unit *u, char *buf, size_t len);

/* ---- binding: every (slot, layer) resolved once ------------------------------------------ */

typedef struct {
    tslot slot;
    int layer;           /* -1 for global slots */
    top_id op;           /* TOP_NONE: the slot does not exist in this family */
    const kop *desc;     /* the op's registry entry (or the trainer's own) */
    kpath path;
    int variant;         /* index into desc->variants = the kernel's variant enum */
} tsite;

typedef struct {
    int depth;
    tsite *sites;        /* global slots one site, per-layer slots `depth` */
    int first[TSLOT_COUNT];
} tbinding;

/* Resolve every (slot, layer) of plan p for a model of depth layers.
 * Returns 0, or -1 with a message (a layer past the depth, an op the
 * registry lacks). */
int tplan_bind(tbinding *b, const tplan *p, int depth, char *err, size_t errlen);
void tbinding_free(tbinding *b);
/* The site of slot s in layer `layer` (ignored for global slots; a
 * per-layer slot needs 0 <= layer < depth). */
const tsite *tbinding_site(const tbinding *b, tslot s, int layer);
/* "slot mlp.up" or "slot mlp.up@3", for messages */
void tsite_name(const tsite *at, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
