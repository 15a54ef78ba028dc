/* trainer/plan.h — the numerics plan: which path (storage format) and which
 * variant every kernel slot of the model runs.
 *
 * A slot is one role in the model, e.g. "attn.qkv" (the forward qkv GEMM of
 * every layer), "attn.qkv.dgrad" (its input-gradient GEMM), "norm.mlp",
 * "optimizer.adamw" or "weights" (how parameters are stored).  Slots that run
 * a GPU kernel name an op of the kernel registry (kernels/registry.h) and
 * are validated against it: the op's paths and variants are the accepted
 * values.  A few slots are the trainer's own (weight storage, gradient
 * accumulation, all-reduce, loss scaling); their paths and variants are
 * listed here and validated the same way.
 *
 * A plan starts from a preset (fp32, bf16, fp16, fp8) for a model family and
 * takes overrides "KEY=PATH[:VARIANT],..." where KEY is a slot name, a glob
 * over slot names ("attn.*") or an op name ("rmsnorm": every slot running
 * that op).  It serialises to one JSON object and parses back. */
#ifndef ULPSCOPE_TRAINER_PLAN_H
#define ULPSCOPE_TRAINER_PLAN_H

#include <stddef.h>
#include <stdio.h>

#include "kernels/registry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Model families: they decide which ops some slots run (layernorm or
 * rmsnorm, gelu or relu^2) and which slots exist at all (rope, QK-norm and
 * Muon only in modern). */
typedef enum { TMODEL_GPT2 = 0, TMODEL_MODERN, TMODEL_COUNT } tmodel_kind;
const char *tmodel_kind_name(tmodel_kind k);
int tmodel_kind_parse(const char *name, tmodel_kind *out);

/* Slots in the order the model runs them (forward, backward, update). */
typedef enum {
    TSLOT_EMBEDDING = 0,  /* token (+ position) embedding lookup and its backward */
    TSLOT_NORM_ATTN,      /* pre-attention norm of every layer */
    TSLOT_ATTN_QKV,       /* q, k, v = x Wq^T, x Wk^T, x Wv^T */
    TSLOT_NORM_QK,        /* modern: per-head rmsnorm of q and k */
    TSLOT_ROPE,           /* modern: rotary positions on q and k */
    TSLOT_ATTENTION,      /* causal softmax(q k^T / sqrt(d)) v */
    TSLOT_ATTN_OUT,       /* attention output projection */
    TSLOT_RESIDUAL,       /* the residual stream: x + f(x) */
    TSLOT_NORM_MLP,       /* pre-MLP norm */
    TSLOT_MLP_UP,         /* C -> 4C */
    TSLOT_ACTIVATION,     /* gelu (gpt2) or relu^2 (modern) */
    TSLOT_MLP_DOWN,       /* 4C -> C */
    TSLOT_NORM_FINAL,     /* norm before the lm_head */
    TSLOT_LM_HEAD,        /* logits = x W_lm */
    TSLOT_CROSS_ENTROPY,  /* (soft-capped) logits -> loss and dlogits */
    TSLOT_LM_HEAD_DGRAD,  /* backward GEMMs: dgrad = input gradient, */
    TSLOT_LM_HEAD_WGRAD,  /*                 wgrad = weight gradient */
    TSLOT_MLP_DOWN_DGRAD,
    TSLOT_MLP_DOWN_WGRAD,
    TSLOT_MLP_UP_DGRAD,
    TSLOT_MLP_UP_WGRAD,
    TSLOT_ATTN_OUT_DGRAD,
    TSLOT_ATTN_OUT_WGRAD,
    TSLOT_ATTN_QKV_DGRAD,
    TSLOT_ATTN_QKV_WGRAD,
    TSLOT_TRANSPOSE,      /* modern: lm_head = embedding^T (copy) and its gradient (add) */
    TSLOT_GRAD_ACCUM,     /* format gradients are accumulated and stored in */
    TSLOT_ALLREDUCE,      /* data parallel gradient all-reduce: format and NCCL algorithm */
    TSLOT_GRAD_NORM,      /* global gradient norm (clipping, logging) */
    TSLOT_ADAMW,          /* AdamW update (all parameters in gpt2; embeddings, gains in modern) */
    TSLOT_MUON,           /* modern: Muon with polar express on the matrices */
    TSLOT_WEIGHTS,        /* parameter storage: fp32 master, bf16 + SR, bf16 + mantissa buffer */
    TSLOT_LOSS_SCALE,     /* none, or dynamic loss scaling (fp16) */
    TSLOT_COUNT
} tslot;

typedef struct {
    const char *name;    /* "attn.qkv" */
    const char *summary; /* one line */
} tslot_info;

const tslot_info *tslot_get(tslot s);
/* The op a slot runs in a model family ("matmul", "rmsnorm", "weights", ...);
 * NULL when the slot does not exist in that family. */
const char *tslot_op(tslot s, tmodel_kind model);
/* Whether a matmul slot is a backward GEMM whose first operand is a gradient
 * (the *_DGRAD and *_WGRAD slots): under fp8 that operand is e5m2. */
int tslot_is_gradient_gemm(tslot s);
/* 1 for slots that run a registry op (validated against kernels/registry.h),
 * 0 for the trainer's own slots (weights, grad_accum, allreduce, loss_scale). */
int tslot_is_kernel(tslot s);
/* The op description: the registry's entry or the trainer's own; NULL
 * when the registry lacks it. */
const kop *tslot_kop(tslot s, tmodel_kind model);
/* A slot's op family: op k (0: tslot_op) or NULL past the end.  GEMM slots
 * may run matmul, matmul_fast (tf32 / fp8 fast accumulation) or
 * matmul_block_fp8 (block-scaled fp8), the Muon slot polar_express or
 * muon_newton_schulz (Muon's quintic); a plan names a sibling op in the
 * variant: "fp8:matmul_fast" or "fp8:matmul_fast.split_k". */
const char *tslot_family_op(tslot s, tmodel_kind model, int k);


typedef struct {
    kpath path;
    int op;              /* which op of the slot's family (0: the slot's own op) */
    int variant;         /* index into that op's variants */
} tslot_choice;

typedef struct {
    char preset[16];     /* the preset the plan started from */
    tmodel_kind model;
    unsigned char used[TSLOT_COUNT];  /* slot exists in this model family */
    tslot_choice slot[TSLOT_COUNT];
} tplan;

/* The op a plan runs in slot s (its family op), or NULL. */
const kop *tplan_kop(const tplan *p, tslot s);

/* Preset names: "fp32, bf16, fp16, fp8". */
const char *tplan_preset_names(void);

/* Fill a plan from a preset.  Returns 0, or -1 with a one-line message in err
 * (unknown preset; a slot whose op or path the registry lacks). */
int tplan_init(tplan *p, const char *preset, tmodel_kind model, char *err, size_t errlen);

/* Apply overrides "KEY=PATH[:VARIANT][,KEY=...]".  A key matching no slot, a
 * path the op lacks or an unknown variant is an error that lists the accepted
 * names; the plan is left unchanged on error.  Returns 0 or -1. */
int tplan_set(tplan *p, const char *overrides, char *err, size_t errlen);

/* Check every used slot against the registry and the trainer's rules.
 * tplan_init/tplan_set/tplan_from_json call it; exposed for callers that
 * edit a plan by hand. */
int tplan_validate(const tplan *p, char *err, size_t errlen);

/* "two_pass", or "matmul_fast.fused" for a sibling op */
void tplan_variant_string(const tplan *p, tslot s, char *buf, size_t len);
/* "bf16:two_pass" */
void tplan_choice_string(const tplan *p, tslot s, char *buf, size_t len);
int tplan_equal(const tplan *a, const tplan *b);

/* Storage format of a path's outputs: fp8 ops write bf16. */
prec_format tpath_storage(kpath p);
/* Format of a GEMM operand under a path: fp8 stores activations and weights
 * as e4m3 and gradients as e5m2 (each with a per-tensor scale). */
prec_format tpath_operand(kpath p, int is_gradient);

/* Named trainer-slot variants, for the code that acts on them. */
typedef enum { TWEIGHTS_MASTER = 0, TWEIGHTS_SR, TWEIGHTS_MANTISSA_BUFFER } tweights_variant;
typedef enum { TALLREDUCE_RING = 0, TALLREDUCE_TREE } tallreduce_variant;
typedef enum { TGRAD_ACCUM_SUM = 0, TGRAD_ACCUM_GEMM_FP32 } tgrad_accum_variant;
typedef enum { TLOSS_SCALE_NONE = 0, TLOSS_SCALE_DYNAMIC } tloss_scale_variant;

/* JSON: {"preset":"bf16","model":"gpt2","slots":{"embedding":"bf16:default",...}}
 * (slots of the model family only).  tplan_to_json returns the length it
 * needed (snprintf semantics). */
int tplan_to_json(const tplan *p, char *buf, size_t len);
int tplan_from_json(tplan *p, const char *json, char *err, size_t errlen);

/* Print the plan: one row per slot (op, path, variant, operand, accumulate
 * and output formats), then every tensor of the model with its storage
 * format and the slot that writes it. */
void tplan_explain(const tplan *p, FILE *fp);

#ifdef __cplusplus
}
#endif
#endif
