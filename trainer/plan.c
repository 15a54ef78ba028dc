/* trainer/plan.c — see plan.h. */
#include "trainer/plan.h"
#include "trainer/errbuf.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

/* ---- slots -------------------------------------------------------------------- */

static const tslot_info slot_table[TSLOT_COUNT] = {
    [TSLOT_EMBEDDING] = {"embedding", "token (+ learned position) embedding lookup; backward scatters into the table"},
    [TSLOT_NORM_ATTN] = {"norm.attn", "pre-attention norm of every layer"},
    [TSLOT_ATTN_QKV] = {"attn.qkv", "q, k, v = x Wq^T, x Wk^T, x Wv^T"},
    [TSLOT_NORM_QK] = {"norm.qk", "per-head rmsnorm of q and k (QK-norm)"},
    [TSLOT_ROPE] = {"rope", "rotary position embedding of q and k"},
    [TSLOT_ATTENTION] = {"attention", "causal softmax(q k^T / sqrt(D)) v per head"},
    [TSLOT_ATTN_OUT] = {"attn.out", "attention output projection y Wo^T"},
    [TSLOT_RESIDUAL] = {"residual", "residual stream x + f(x), forward and backward"},
    [TSLOT_NORM_MLP] = {"norm.mlp", "pre-MLP norm of every layer"},
    [TSLOT_MLP_UP] = {"mlp.up", "MLP up projection x Wup^T, C -> 4C"},
    [TSLOT_ACTIVATION] = {"activation", "MLP nonlinearity"},
    [TSLOT_MLP_DOWN] = {"mlp.down", "MLP down projection a Wdown^T, 4C -> C"},
    [TSLOT_NORM_FINAL] = {"norm.final", "norm before the lm_head"},
    [TSLOT_LM_HEAD] = {"lm_head", "logits = x W_lm (the embedding, tied)"},
    [TSLOT_CROSS_ENTROPY] = {"cross_entropy", "(soft-capped) logits -> per-token loss and dlogits"},
    [TSLOT_LM_HEAD_DGRAD] = {"lm_head.dgrad", "dx = dlogits W_lm^T"},
    [TSLOT_LM_HEAD_WGRAD] = {"lm_head.wgrad", "dW_lm += x^T dlogits"},
    [TSLOT_MLP_DOWN_DGRAD] = {"mlp.down.dgrad", "da = dy Wdown"},
    [TSLOT_MLP_DOWN_WGRAD] = {"mlp.down.wgrad", "dWdown += dy^T a"},
    [TSLOT_MLP_UP_DGRAD] = {"mlp.up.dgrad", "dx = dh Wup"},
    [TSLOT_MLP_UP_WGRAD] = {"mlp.up.wgrad", "dWup += dh^T x"},
    [TSLOT_ATTN_OUT_DGRAD] = {"attn.out.dgrad", "dy_att = dx Wo"},
    [TSLOT_ATTN_OUT_WGRAD] = {"attn.out.wgrad", "dWo += dx^T y_att"},
    [TSLOT_ATTN_QKV_DGRAD] = {"attn.qkv.dgrad", "dx = dq Wq + dk Wk + dv Wv"},
    [TSLOT_ATTN_QKV_WGRAD] = {"attn.qkv.wgrad", "dWq,k,v += dq,k,v^T x"},
    [TSLOT_TRANSPOSE] = {"transpose", "transposed lm_head kept in sync: W_lm = E^T (copy), dE += dW_lm^T (add)"},
    [TSLOT_GRAD_ACCUM] = {"grad_accum", "format parameter gradients are accumulated and stored in"},
    [TSLOT_ALLREDUCE] = {"allreduce", "data parallel gradient all-reduce: wire format and NCCL algorithm"},
    [TSLOT_GRAD_NORM] = {"grad_norm", "global gradient 2-norm (clipping and logging)"},
    [TSLOT_ADAMW] = {"optimizer.adamw", "AdamW update; the path is the format it reads gradients and writes weights in"},
    [TSLOT_MUON] = {"optimizer.muon", "Muon: Nesterov momentum orthogonalised by polar express"},
    [TSLOT_WEIGHTS] = {"weights", "parameter storage"},
    [TSLOT_LOSS_SCALE] = {"loss_scale", "loss scaling: none, or dynamic (halve and skip on overflow)"},
};

const tslot_info *tslot_get(tslot s) { return (unsigned)s < TSLOT_COUNT ? &slot_table[s] : NULL; }

static int is_matmul_slot(tslot s)
{
    switch (s) {
    case TSLOT_ATTN_QKV: case TSLOT_ATTN_OUT: case TSLOT_MLP_UP: case TSLOT_MLP_DOWN: case TSLOT_LM_HEAD:
    case TSLOT_LM_HEAD_DGRAD: case TSLOT_LM_HEAD_WGRAD: case TSLOT_MLP_DOWN_DGRAD: case TSLOT_MLP_DOWN_WGRAD:
    case TSLOT_MLP_UP_DGRAD: case TSLOT_MLP_UP_WGRAD: case TSLOT_ATTN_OUT_DGRAD: case TSLOT_ATTN_OUT_WGRAD:
    case TSLOT_ATTN_QKV_DGRAD: case TSLOT_ATTN_QKV_WGRAD:
        return 1;
    default:
        return 0;
    }
}

int tslot_is_gradient_gemm(tslot s)
{
    switch (s) {
    case TSLOT_LM_HEAD_DGRAD: case TSLOT_LM_HEAD_WGRAD: case TSLOT_MLP_DOWN_DGRAD: case TSLOT_MLP_DOWN_WGRAD:
    case TSLOT_MLP_UP_DGRAD: case TSLOT_MLP_UP_WGRAD: case TSLOT_ATTN_OUT_DGRAD: case TSLOT_ATTN_OUT_WGRAD:
    case TSLOT_ATTN_QKV_DGRAD: case TSLOT_ATTN_QKV_WGRAD:
        return 1;
    default:
        return 0;
    }
}

const char *tslot_op(tslot s, tmodel_kind model)
{
    int modern = model == TMODEL_MODERN;
    if (is_matmul_slot(s)) return "matmul";
    switch (s) {
    case TSLOT_EMBEDDING: return "embedding";
    case TSLOT_NORM_ATTN: case TSLOT_NORM_MLP: case TSLOT_NORM_FINAL: return modern ? "rmsnorm" : "layernorm";
    case TSLOT_NORM_QK: return modern ? "rmsnorm" : NULL;
    case TSLOT_ROPE: return modern ? "rope" : NULL;
    case TSLOT_ATTENTION: return "attention";
    case TSLOT_RESIDUAL: return "residual";
    case TSLOT_ACTIVATION: return modern ? "relu2" : "gelu_tanh";
    case TSLOT_CROSS_ENTROPY: return "cross_entropy";
    case TSLOT_TRANSPOSE: return modern ? "transpose" : NULL;
    case TSLOT_GRAD_ACCUM: return "grad_accum";
    case TSLOT_ALLREDUCE: return "allreduce";
    case TSLOT_GRAD_NORM: return "grad_norm";
    case TSLOT_ADAMW: return "adamw";
    case TSLOT_MUON: return modern ? "polar_express" : NULL;
    case TSLOT_WEIGHTS: return "weights";
    case TSLOT_LOSS_SCALE: return "loss_scale";
    default: return NULL;
    }
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
    "fp8 GEMM slots quantise the working copy per call", weights_variants, 3};

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

const kop *tslot_kop(tslot s, tmodel_kind model)
{
    switch (s) {
    case TSLOT_WEIGHTS: return &weights_op;
    case TSLOT_GRAD_ACCUM: return &grad_accum_op;
    case TSLOT_ALLREDUCE: return &allreduce_op;
    case TSLOT_LOSS_SCALE: return &loss_scale_op;
    default: break;
    }
    const char *op = tslot_op(s, model);
    return op ? kregistry_find(op) : NULL;
}

static const char *const matmul_family[] = {"matmul", "matmul_fast", "matmul_block_fp8"};
static const char *const muon_family[] = {"polar_express", "muon_newton_schulz"};

const char *tslot_family_op(tslot s, tmodel_kind model, int k)
{
    if (k == 0) return tslot_op(s, model);
    if (k < 0) return NULL;
    if (is_matmul_slot(s)) return k < 3 ? matmul_family[k] : NULL;
    if (s == TSLOT_MUON && model == TMODEL_MODERN) return k < 2 ? muon_family[k] : NULL;
    return NULL;
}

/* Op k of the family; siblings must be registered (no stand-ins for them). */
static const kop *family_kop(tslot s, tmodel_kind model, int k)
{
    if (k == 0) return tslot_kop(s, model);
    const char *name = tslot_family_op(s, model, k);
    return name ? kregistry_find(name) : NULL;
}

const kop *tplan_kop(const tplan *p, tslot s) { return family_kop(s, p->model, p->slot[s].op); }


int tslot_is_kernel(tslot s)
{
    return s != TSLOT_WEIGHTS && s != TSLOT_GRAD_ACCUM && s != TSLOT_ALLREDUCE && s != TSLOT_LOSS_SCALE;
}

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

static void path_names_of(const kop *op, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int p = 0; p < KPATH_COUNT; p++)
        if (op->paths & PATH_BIT(p))
            n += (size_t)snprintf(buf + n, n < len ? len - n : 0, "%s%s", n ? ", " : "", kpath_name((kpath)p));
}

static void variant_names_of(const kop *op, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int v = 0; v < op->n_variants; v++)
        n += (size_t)snprintf(buf + n, n < len ? len - n : 0, "%s%s", n ? ", " : "", op->variants[v].name);
}

static void slot_names_of(const tplan *p, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int s = 0; s < TSLOT_COUNT; s++)
        if (p->used[s])
            n += (size_t)snprintf(buf + n, n < len ? len - n : 0, "%s%s", n ? ", " : "", slot_table[s].name);
}

/* ---- validation --------------------------------------------------------------------- */

/* One slot's choice against its op and the trainer's rules. */
static int check_choice(const tplan *p, tslot s, tslot_choice c, char *err, size_t errlen)
{
    const char *opname = tslot_family_op(s, p->model, c.op);
    const kop *op = family_kop(s, p->model, c.op);
    char names[1024];
    if (!op) {
        kregistry_op_names(names, sizeof names);
        return tfail(err, errlen, "slot %s: op %s is not in the kernel registry (ops: %s)", slot_table[s].name,
                    opname ? opname : "?", names[0] ? names : "none registered yet");
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
    if (c.path == KPATH_FP8 && !is_matmul_slot(s))
        return tfail(err, errlen, "slot %s: the trainer runs fp8 on GEMM slots only (activations between ops are "
                    "stored in bf16 or wider); paths here: fp32, bf16, fp16", slot_table[s].name);
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
    if (s == TSLOT_GRAD_ACCUM && c.variant == TGRAD_ACCUM_GEMM_FP32 && c.path != KPATH_FP32)
        return tfail(err, errlen, "slot grad_accum: variant gemm_fp32 needs path fp32, not %s", kpath_name(c.path));
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
        if (check_choice(p, (tslot)s, p->slot[s], err, errlen)) return -1;
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
        p->used[s] = tslot_op((tslot)s, model) != NULL;
        p->slot[s].path = is_matmul_slot((tslot)s) ? gemm : work;
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
    /* the transpose slot's path is that of its add (the gradient fold); its
     * copy of the weights is exact in any format */
    p->slot[TSLOT_TRANSPOSE].path = KPATH_FP32;
    /* attention: the flash kernel where the registry offers it (the naive one
     * materialises T x T scores, rounded to the path's format) */
    const kop *att = tslot_kop(TSLOT_ATTENTION, model);
    int flash = att ? kregistry_variant(att, "flash") : -1;
    if (flash >= 0) p->slot[TSLOT_ATTENTION].variant = flash;
    return tplan_validate(p, err, errlen);
}

/* ---- overrides -------------------------------------------------------------------- */

/* Parse "PATH[:VARIANT]" for one slot. */
static int parse_choice(const tplan *p, tslot s, const char *value, tslot_choice *out, char *err, size_t errlen)
{
    char path_str[32];
    const char *colon = strchr(value, ':');
    size_t plen = colon ? (size_t)(colon - value) : strlen(value);
    const kop *op = tslot_kop(s, p->model);
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
    int opk = 0, variant = 0;
    if (colon) {
        const char *vs = colon + 1, *dot = strchr(vs, '.');
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
            {"fast", "matmul_fast"}, {"blockwise", "matmul_block_fp8"}};
        for (size_t a = 0; a < sizeof family_aliases / sizeof family_aliases[0]; a++)
            if (strcmp(opname, family_aliases[a].alias) == 0) snprintf(opname, sizeof opname, "%s", family_aliases[a].op);
        /* a sibling op named (with or without a variant), else a variant of the slot's op */
        opk = -1;
        for (int k = 0; tslot_family_op(s, p->model, k); k++)
            if (family_kop(s, p->model, k) && strcmp(tslot_family_op(s, p->model, k), opname) == 0) opk = k;
        if (opk < 0 && !dot) {
            opk = 0;
            vname = vs;
        }
        const kop *vop = opk >= 0 ? family_kop(s, p->model, opk) : NULL;
        variant = vop && !vname ? 0 : -1;
        for (int v = 0; vop && vname && v < vop->n_variants; v++)
            if (strcmp(vop->variants[v].name, vname) == 0) variant = v;
        if (variant < 0) {
            variant_names_of(op, names, sizeof names);
            size_t n = strlen(names);
            for (int k = 1; tslot_family_op(s, p->model, k); k++) {
                const kop *sib = family_kop(s, p->model, k);
                if (!sib) continue;
                n += (size_t)snprintf(names + n, n < sizeof names ? sizeof names - n : 0, ", %s[.", sib->name);
                for (int v = 0; v < sib->n_variants; v++)
                    n += (size_t)snprintf(names + n, n < sizeof names ? sizeof names - n : 0, "%s%s", v ? "|" : "",
                                          sib->variants[v].name);
                n += (size_t)snprintf(names + n, n < sizeof names ? sizeof names - n : 0, "]");
            }
            return tfail(err, errlen, "slot %s: no variant '%s' (variants: %s)", slot_table[s].name, vs, names);
        }
    }
    out->path = path;
    out->op = opk;
    out->variant = variant;
    return check_choice(p, s, *out, err, errlen);
}

/* Slots a key names: a slot name, a glob over slot names, or an op name. */
static int key_matches(const tplan *p, const char *key, tslot s)
{
    if (!p->used[s]) return 0;
    if (strcmp(key, slot_table[s].name) == 0) return 1;
    if (strpbrk(key, "*?[") && fnmatch(key, slot_table[s].name, 0) == 0) return 1;
    const char *op = tslot_op(s, p->model);
    return op && strcmp(key, op) == 0;
}

int tplan_set(tplan *p, const char *overrides, char *err, size_t errlen)
{
    if (!overrides) return 0;
    tplan next = *p;
    char *copy = strdup(overrides);
    if (!copy) return tfail(err, errlen, "out of memory");
    int rc = 0;
    char *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item && !rc; item = strtok_r(NULL, ",", &save)) {
        while (*item == ' ') item++;
        char *eq = strchr(item, '=');
        if (!eq || eq == item) {
            rc = tfail(err, errlen, "malformed override '%s' (expected SLOT=PATH[:VARIANT], e.g. lm_head=fp8)", item);
            break;
        }
        *eq = '\0';
        const char *key = item, *value = eq + 1;
        int matched = 0;
        for (int s = 0; s < TSLOT_COUNT && !rc; s++) {
            if (!key_matches(&next, key, (tslot)s)) continue;
            matched++;
            tslot_choice c;
            if (parse_choice(&next, (tslot)s, value, &c, err, errlen)) rc = -1;
            else next.slot[s] = c;
        }
        if (!rc && !matched) {
            char names[2048];
            slot_names_of(&next, names, sizeof names);
            rc = tfail(err, errlen, "unknown slot '%s' for model %s (slots: %s; or an op name, or a glob such as "
                                   "'attn.*')", key, tmodel_kind_name(next.model), names);
        }
    }
    free(copy);
    if (rc) return -1;
    if (tplan_validate(&next, err, errlen)) return -1;
    *p = next;
    return 0;
}

/* ---- naming ------------------------------------------------------------------------ */

void tplan_variant_string(const tplan *p, tslot s, char *buf, size_t len)
{
    const kop *op = tplan_kop(p, s);
    int v = p->slot[s].variant;
    const char *vn = op && v >= 0 && v < op->n_variants ? op->variants[v].name : "?";
    if (p->slot[s].op) snprintf(buf, len, "%s.%s", op ? op->name : "?", vn);
    else snprintf(buf, len, "%s", vn);
}

void tplan_choice_string(const tplan *p, tslot s, char *buf, size_t len)
{
    char v[128];
    tplan_variant_string(p, s, v, sizeof v);
    snprintf(buf, len, "%s:%s", kpath_name(p->slot[s].path), v);
}

int tplan_equal(const tplan *a, const tplan *b)
{
    if (a->model != b->model) return 0;
    for (int s = 0; s < TSLOT_COUNT; s++) {
        if (a->used[s] != b->used[s]) return 0;
        if (a->used[s] && (a->slot[s].path != b->slot[s].path || a->slot[s].op != b->slot[s].op ||
                           a->slot[s].variant != b->slot[s].variant))
            return 0;
    }
    return 1;
}

/* ---- JSON -------------------------------------------------------------------------- */

int tplan_to_json(const tplan *p, char *buf, size_t len)
{
    size_t n = 0;
#define PUT(...) n += (size_t)snprintf(buf + (n < len ? n : len), n < len ? len - n : 0, __VA_ARGS__)
    PUT("{\"preset\":\"%s\",\"model\":\"%s\",\"slots\":{", p->preset, tmodel_kind_name(p->model));
    int first = 1;
    for (int s = 0; s < TSLOT_COUNT; s++) {
        if (!p->used[s]) continue;
        char choice[160];
        tplan_choice_string(p, (tslot)s, choice, sizeof choice);
        PUT("%s\"%s\":\"%s\"", first ? "" : ",", slot_table[s].name, choice);
        first = 0;
    }
    PUT("}}");
#undef PUT
    return (int)n;
}

/* A small reader for the one shape tplan_to_json writes: an object of
 * strings plus one nested object of strings.  Names are ASCII without
 * escapes; anything else is rejected. */
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

int tplan_from_json(tplan *p, const char *json, char *err, size_t errlen)
{
    jreader r = {json};
    char key[64], value[160], preset[160] = "", model[160] = "";
    char overrides[4096];
    size_t on = 0;
    int saw_slots = 0;
    overrides[0] = '\0';
    if (jexpect(&r, '{')) return tfail(err, errlen, "plan JSON: expected '{'");
    for (;;) {
        if (jstring(&r, key, sizeof key) || jexpect(&r, ':')) return tfail(err, errlen, "plan JSON: malformed key");
        if (strcmp(key, "slots") == 0) {
            saw_slots = 1;
            if (jexpect(&r, '{')) return tfail(err, errlen, "plan JSON: \"slots\" is not an object");
            jskip(&r);
            if (*r.s == '}') r.s++;
            else for (;;) {
                if (jstring(&r, key, sizeof key) || jexpect(&r, ':') || jstring(&r, value, sizeof value))
                    return tfail(err, errlen, "plan JSON: malformed slot entry");
                on += (size_t)snprintf(overrides + on, on < sizeof overrides ? sizeof overrides - on : 0, "%s%s=%s",
                                       on ? "," : "", key, value);
                jskip(&r);
                if (*r.s == ',') { r.s++; continue; }
                if (jexpect(&r, '}')) return tfail(err, errlen, "plan JSON: unterminated \"slots\"");
                break;
            }
        } else {
            if (jstring(&r, value, sizeof value)) return tfail(err, errlen, "plan JSON: \"%s\" is not a string", key);
            if (strcmp(key, "preset") == 0) snprintf(preset, sizeof preset, "%s", value);
            else if (strcmp(key, "model") == 0) snprintf(model, sizeof model, "%s", value);
            else return tfail(err, errlen, "plan JSON: unknown key \"%s\" (keys: preset, model, slots)", key);
        }
        jskip(&r);
        if (*r.s == ',') { r.s++; continue; }
        if (jexpect(&r, '}')) return tfail(err, errlen, "plan JSON: expected ',' or '}'");
        break;
    }
    jskip(&r);
    if (*r.s) return tfail(err, errlen, "plan JSON: trailing characters");
    if (on >= sizeof overrides) return tfail(err, errlen, "plan JSON: too many slots");
    tmodel_kind kind;
    if (tmodel_kind_parse(model, &kind)) return tfail(err, errlen, "plan JSON: unknown model '%s' (gpt2, modern)", model);
    if (!saw_slots) return tfail(err, errlen, "plan JSON: no \"slots\"");
    tplan next;
    if (tplan_init(&next, preset, kind, err, errlen)) return -1;
    if (tplan_set(&next, overrides, err, errlen)) return -1;
    /* every slot of the family must be listed: a plan is explicit */
    for (int s = 0; s < TSLOT_COUNT; s++) {
        if (!next.used[s]) continue;
        char needle[80];
        snprintf(needle, sizeof needle, "%s=", slot_table[s].name);
        int found = 0;
        for (const char *q = overrides; (q = strstr(q, needle)) != NULL; q++)
            if (q == overrides || q[-1] == ',') found = 1;
        if (!found) return tfail(err, errlen, "plan JSON: slot %s missing", slot_table[s].name);
    }
    *p = next;
    return 0;
}

/* ---- explain --------------------------------------------------------------------- */

/* A tensor of the model: who writes it and in which format (from plan
 * rules that trainer/model.c applies through the same functions). */
typedef struct {
    const char *name;
    const char *shape;
    tslot writer;      /* slot whose path decides the storage format */
    int kind;          /* 0 activation, 1 activation gradient, 2 fp32 statistic */
    int modern_only, gpt2_only;
} tensor_row;

static const tensor_row tensor_rows[] = {
    {"x (residual stream, per layer)", "B*T x C", TSLOT_RESIDUAL, 0, 0, 0},
    {"norm.attn out", "B*T x C", TSLOT_NORM_ATTN, 0, 0, 0},
    {"norm mean", "B*T", TSLOT_NORM_ATTN, 2, 0, 1},
    {"norm rstd", "B*T", TSLOT_NORM_ATTN, 2, 0, 0},
    {"q, k, v", "B*T x C each", TSLOT_ATTN_QKV, 0, 0, 0},
    {"q, k after QK-norm", "B*T*H x D", TSLOT_NORM_QK, 0, 1, 0},
    {"q, k after rope", "B*T x C", TSLOT_ROPE, 0, 1, 0},
    {"attention out", "B*T x C", TSLOT_ATTENTION, 0, 0, 0},
    {"attention logsumexp", "B*H*T", TSLOT_ATTENTION, 2, 0, 0},
    {"attn.out out", "B*T x C", TSLOT_ATTN_OUT, 0, 0, 0},
    {"norm.mlp out", "B*T x C", TSLOT_NORM_MLP, 0, 0, 0},
    {"mlp.up out (pre-activation)", "B*T x 4C", TSLOT_MLP_UP, 0, 0, 0},
    {"activation out", "B*T x 4C", TSLOT_ACTIVATION, 0, 0, 0},
    {"mlp.down out", "B*T x C", TSLOT_MLP_DOWN, 0, 0, 0},
    {"norm.final out", "B*T x C", TSLOT_NORM_FINAL, 0, 0, 0},
    {"logits", "B*T x V", TSLOT_LM_HEAD, 0, 0, 0},
    {"per-token loss", "B*T", TSLOT_CROSS_ENTROPY, 2, 0, 0},
    {"dlogits", "B*T x V", TSLOT_CROSS_ENTROPY, 1, 0, 0},
    {"dx into norm.final", "B*T x C", TSLOT_LM_HEAD_DGRAD, 1, 0, 0},
    {"d(residual stream)", "B*T x C", TSLOT_RESIDUAL, 1, 0, 0},
    {"d(activation out)", "B*T x 4C", TSLOT_MLP_DOWN_DGRAD, 1, 0, 0},
    {"d(mlp.up out)", "B*T x 4C", TSLOT_ACTIVATION, 1, 0, 0},
    {"d(norm.mlp out)", "B*T x C", TSLOT_MLP_UP_DGRAD, 1, 0, 0},
    {"d(attention out)", "B*T x C", TSLOT_ATTN_OUT_DGRAD, 1, 0, 0},
    {"dq, dk, dv", "B*T x C each", TSLOT_ATTENTION, 1, 0, 0},
    {"dq, dk before rope", "B*T x C", TSLOT_ROPE, 1, 1, 0},
    {"dq, dk before QK-norm", "B*T*H x D", TSLOT_NORM_QK, 1, 1, 0},
    {"d(norm.attn out)", "B*T x C", TSLOT_ATTN_QKV_DGRAD, 1, 0, 0},
    {"d(norm input), added to d(residual)", "B*T x C", TSLOT_NORM_ATTN, 1, 0, 0},
};

/* What a slot reads, accumulates in and writes, in words. */
static void slot_formats(const tplan *p, tslot s, char *buf, size_t len)
{
    kpath path = p->slot[s].path;
    const char *st = prec_format_name(tpath_storage(path));
    if (is_matmul_slot(s)) {
        int grad_a = s == TSLOT_LM_HEAD_DGRAD || s == TSLOT_MLP_DOWN_DGRAD || s == TSLOT_MLP_UP_DGRAD ||
                     s == TSLOT_ATTN_OUT_DGRAD || s == TSLOT_ATTN_QKV_DGRAD;
        int wgrad = s == TSLOT_LM_HEAD_WGRAD || s == TSLOT_MLP_DOWN_WGRAD || s == TSLOT_MLP_UP_WGRAD ||
                    s == TSLOT_ATTN_OUT_WGRAD || s == TSLOT_ATTN_QKV_WGRAD;
        const char *a = prec_format_name(tpath_operand(path, grad_a || wgrad));
        const char *b = prec_format_name(tpath_operand(path, 0));
        const kop *op = tplan_kop(p, s);
        const char *opn = op ? op->name : "";
        const char *acc = "acc fp32";
        if (strcmp(opn, "matmul_fast") == 0)
            acc = path == KPATH_FP8 ? "acc in the tensor cores, never promoted (fast accumulation)" : "inputs rounded to tf32; acc fp32";
        else if (strcmp(opn, "matmul_block_fp8") == 0) acc = "scales per 1x128 / 128x128 tile; acc promoted to fp32 every 128";
        else if (path == KPATH_FP8) acc = "acc fp32 (cuBLASLt's periodic promotion)";
        const char *scale = path == KPATH_FP8 && strcmp(opn, "matmul_block_fp8") != 0 ? " (per-tensor scales)" : "";
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
        else if (grad_a)
            snprintf(buf, len, "dy %s, W %s%s; %s; dx %s", a, b, scale, acc, st);
        else
            snprintf(buf, len, "x %s, W %s%s; %s; y %s", a, b, scale, acc, st);
        return;
    }
    switch (s) {
    case TSLOT_WEIGHTS: {
        tweights_variant v = (tweights_variant)p->slot[s].variant;
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
    case TSLOT_CROSS_ENTROPY: snprintf(buf, len, "logits read as stored; softmax fp32; loss fp32; dlogits %s", st); return;
    case TSLOT_ATTENTION: {
        const kop *op = tplan_kop(p, s);
        int naive = op && strcmp(op->variants[p->slot[s].variant].name, "naive") == 0;
        if (naive) snprintf(buf, len, "q, k, v %s; scores and probabilities stored %s (T x T); acc fp32; out %s", st, st, st);
        else snprintf(buf, len, "q, k, v %s; scores, online softmax, acc fp32; out %s; lse fp32", st, st);
        return;
    }
    case TSLOT_RESIDUAL: snprintf(buf, len, "stream and its gradient %s; add in fp32, rounded once", st); return;
    case TSLOT_EMBEDDING:
        snprintf(buf, len, "lookup exact%s%s; backward: per-row fp32 sums added into the %s grads",
                 p->model == TMODEL_GPT2 ? ", + positions in " : "", p->model == TMODEL_GPT2 ? st : "",
                 prec_format_name(tpath_storage(p->slot[TSLOT_GRAD_ACCUM].path)));
        return;
    case TSLOT_TRANSPOSE:
        snprintf(buf, len, "W_lm = E^T copied exactly (working format); dW_lm^T added into dE in %s", st);
        return;
    default: snprintf(buf, len, "in %s; compute fp32; out %s", st, st); return;
    }
}

void tplan_explain(const tplan *p, FILE *fp)
{
    char json[8192];
    tplan_to_json(p, json, sizeof json);
    fprintf(fp, "plan %s for model %s\n\n", p->preset, tmodel_kind_name(p->model));
    fprintf(fp, "%-16s %-16s %-5s %-16s %s\n", "slot", "op", "path", "variant", "formats (storage / compute)");
    for (int s = 0; s < TSLOT_COUNT; s++) {
        if (!p->used[s]) continue;
        char formats[256];
        slot_formats(p, (tslot)s, formats, sizeof formats);
        char variant[128];
        tplan_variant_string(p, (tslot)s, variant, sizeof variant);
        const kop *op = tplan_kop(p, (tslot)s);
        fprintf(fp, "%-16s %-16s %-5s %-16s %s\n", slot_table[s].name, op ? op->name : "?",
                kpath_name(p->slot[s].path), p->slot[s].op ? strchr(variant, '.') + 1 : variant, formats);
    }
    fprintf(fp, "\n%-38s %-14s %-6s %s\n", "tensor", "shape", "dtype", "written by");
    for (size_t i = 0; i < sizeof tensor_rows / sizeof tensor_rows[0]; i++) {
        const tensor_row *t = &tensor_rows[i];
        if (t->modern_only && p->model != TMODEL_MODERN) continue;
        if (t->gpt2_only && p->model != TMODEL_GPT2) continue;
        prec_format f = t->kind == 2 ? PREC_FP32 : tpath_storage(p->slot[t->writer].path);
        fprintf(fp, "%-38s %-14s %-6s %s\n", t->name, t->shape, prec_format_name(f), slot_table[t->writer].name);
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
    fprintf(fp, "%-38s %-14s %-6s %s\n", "AdamW m, v", "", "fp32",
            "optimizer.adamw");
    if (p->used[TSLOT_MUON]) fprintf(fp, "%-38s %-14s %-6s %s\n", "Muon momentum", "", "fp32", "optimizer.muon");
    fprintf(fp, "\n%s\n", json);
}
