/* trainer/model.c — see model.h.  Shapes in comments: B sequences of T
 * tokens (BT = B*T rows), width C, H heads of D = C/H, vocabulary V, MLP
 * width F = 4C, L layers. */
#include "trainer/model.h"
#include "trainer/errbuf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "precision/rng.h"

typedef struct {
    int ln1_g, ln1_b, qkv, proj, ln2_g, ln2_b, up, down; /* parameter indices, -1 when absent */
    ktensor ln1, ln1_mean, ln1_rstd;   /* [BT,C], [BT], [BT] */
    ktensor q, k, v;                   /* [BT,C] each */
    ktensor qn, kn, qn_rstd, kn_rstd;  /* modern: QK-norm out [BT,C], rstd [BT*H] */
    ktensor qr, kr;                    /* modern: after rope [BT,C] */
    ktensor att, lse;                  /* [BT,C], [B*H*T] */
    ktensor mid;                       /* residual after attention [BT,C] */
    ktensor ln2, ln2_mean, ln2_rstd;
    ktensor h, a;                      /* [BT,F] before and after the activation */
    ktensor act_g;                     /* [BT,F] f'(h) when the activation stores it (relu2 store_grad) */
    ktensor out;                       /* residual after the MLP [BT,C] */
} layer_acts;

#define N_WGRAD_TMP 3 /* one scratch per GEMM output format: fp32, bf16, fp16 */

struct tmodel {
    tmodel_config cfg;
    tbackend *be;
    const tplan *plan;
    int B, T;
    tparam *params;
    tparam **param_ptrs;
    int n_params, cap_params;
    int p_wte, p_wpe, p_lnf_g, p_lnf_b;
    layer_acts *layers;
    ktensor wlm, dwlm;                 /* modern: lm_head [C,V] = wte^T and its gradient */
    /* activations (reallocated when the plan changes) */
    ktensor emb;                       /* [BT,C] */
    ktensor lnf, lnf_mean, lnf_rstd;
    ktensor logits, dlogits, losses;   /* [BT,V], [BT,V], [BT] */
    ktensor attn_proj, mlp_out;        /* forward scratch [BT,C] */
    ktensor dres, dlnf, da, dh, dln2, dtmp_mlp, dy_att, dq, dk, dv, dq_r, dk_r, dq_n, dk_n, dln1, dtmp_attn;
    ktensor wgrad_tmp[N_WGRAD_TMP];
    int64_t wgrad_tmp_numel;
    void *tokens_dev, *targets_dev;
    float *loss_host;
    tobserve_fn obs;
    void *obs_ctx;
};

/* ---- configuration --------------------------------------------------------------------- */

int tmodel_config_init(tmodel_config *c, tmodel_kind kind, int n_layer, int n_embd, int n_head, int vocab,
                       int seq_len, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    if ((unsigned)kind >= TMODEL_COUNT) return tfail(err, errlen, "unknown model family (gpt2, modern)");
    if (n_layer <= 0 || n_embd <= 0 || n_head <= 0 || vocab <= 0 || seq_len <= 0)
        return tfail(err, errlen, "model sizes must be positive: depth %d, width %d, heads %d, vocab %d, seq %d",
                        n_layer, n_embd, n_head, vocab, seq_len);
    if (n_embd % n_head)
        return tfail(err, errlen, "width %d is not divisible by heads %d", n_embd, n_head);
    if (kind == TMODEL_MODERN && (n_embd / n_head) % 2)
        return tfail(err, errlen, "rope needs an even head dimension, got %d", n_embd / n_head);
    c->kind = kind;
    c->n_layer = n_layer;
    c->n_embd = n_embd;
    c->n_head = n_head;
    c->vocab = vocab;
    c->seq_len = seq_len;
    c->norm_gain = kind == TMODEL_GPT2;
    c->softcap = 0.0;
    c->rope_theta = 10000.0;
    c->norm_eps = kind == TMODEL_GPT2 ? 1e-5 : 1e-6;
    return 0;
}

int64_t tmodel_param_count(const tmodel_config *c)
{
    int64_t C = c->n_embd, L = c->n_layer;
    int64_t n = (int64_t)c->vocab * C + 12 * L * C * C;
    if (c->kind == TMODEL_GPT2) n += (int64_t)c->seq_len * C + L * 4 * C + 2 * C;
    else if (c->norm_gain) n += L * 2 * C + C;
    return n;
}

double tmodel_flops_per_token(const tmodel_config *c)
{
    double C = c->n_embd, L = c->n_layer;
    double matmul_params = 12.0 * L * C * C + (double)c->vocab * C;
    return 6.0 * matmul_params + 12.0 * L * c->seq_len * C;
}

/* ---- tensors --------------------------------------------------------------------------- */

static int alloc2(tmodel *m, ktensor *t, prec_format f, int64_t r, int64_t c)
{
    int64_t shape[2] = {r, c};
    return m->be->alloc(m->be, t, f, c ? 2 : 1, shape);
}

static void rel(tmodel *m, ktensor *t)
{
    if (t->data) m->be->release(m->be, t);
}

/* A [rows, cols] view of t starting at element offset (shares data). */
static ktensor view(const tmodel *m, const ktensor *t, int64_t offset, int64_t rows, int64_t cols)
{
    ktensor v = *t;
    v.data = (char *)t->data + (size_t)offset * m->be->elem_bytes(t->format);
    v.ndim = 2;
    v.shape[0] = rows;
    v.shape[1] = cols;
    return v;
}

static prec_format fmt_of(const tmodel *m, tslot s) { return tpath_storage(m->plan->slot[s].path); }

/* ---- parameters -------------------------------------------------------------------------- */

typedef enum { INIT_NORMAL, INIT_UNIFORM, INIT_ONES, INIT_ZEROS } init_kind;

static int add_param(tmodel *m, const char *name, int layer, int64_t rows, int64_t cols, int muon, int decay,
                     int blocks)
{
    if (m->n_params == m->cap_params) {
        int cap = m->cap_params ? 2 * m->cap_params : 32;
        tparam *np = realloc(m->params, (size_t)cap * sizeof *np);
        if (!np) return tbackend_fail(m->be, "out of memory");
        m->params = np;
        m->cap_params = cap;
    }
    tparam *p = &m->params[m->n_params];
    memset(p, 0, sizeof *p);
    if (layer >= 0) snprintf(p->name, sizeof p->name, "h%d.%s", layer, name);
    else snprintf(p->name, sizeof p->name, "%s", name);
    p->layer = layer;
    p->muon = muon;
    p->decay = decay;
    p->blocks = blocks;
    p->rows = (int)(rows / blocks);
    p->cols = (int)(cols ? cols : 1);
    const tplan *pl = m->plan;
    kpath wpath = pl->slot[TSLOT_WEIGHTS].path;
    int variant = pl->slot[TSLOT_WEIGHTS].variant;
    prec_format work = tpath_storage(wpath), grad = fmt_of(m, TSLOT_GRAD_ACCUM);
    if (alloc2(m, &p->w, work, rows, cols)) return -1;
    if (wpath != KPATH_FP32 && variant == TWEIGHTS_MASTER && alloc2(m, &p->master, PREC_FP32, rows, cols)) return -1;
    if (variant == TWEIGHTS_MANTISSA_BUFFER &&
        m->be->alloc_raw(m->be, &p->lowbits, (size_t)(rows * (cols ? cols : 1)) * sizeof(uint16_t)))
        return -1;
    if (alloc2(m, &p->grad, grad, rows, cols)) return -1;
    /* optimizer state is fp32 (the AdamW kernels keep m, v in fp32; Muon's momentum likewise) */
    if (alloc2(m, &p->m, PREC_FP32, rows, cols)) return -1;
    if (!muon && alloc2(m, &p->v, PREC_FP32, rows, cols)) return -1;
    return m->n_params++;
}

/* Initial values, drawn in double, rounded to fp32 (the master format), then
 * stored as the weights slot says. */
static int init_param(tmodel *m, tparam *p, init_kind kind, double scale, prec_rng *rng)
{
    int64_t n = ktensor_numel(&p->w);
    double *vals = malloc((size_t)n * sizeof *vals);
    if (!vals) return tbackend_fail(m->be, "out of memory");
    for (int64_t i = 0; i < n; i++) {
        double x = kind == INIT_NORMAL    ? scale * prec_rng_normal(rng)
                   : kind == INIT_UNIFORM ? scale * (2.0 * prec_rng_uniform(rng) - 1.0)
                   : kind == INIT_ONES    ? 1.0
                                          : 0.0;
        vals[i] = (float)x;
    }
    int rc = 0;
    if (p->lowbits) {
        /* bf16 working copy = the fp32 value truncated; the 16 dropped bits beside it */
        uint16_t *lo = malloc((size_t)n * sizeof *lo);
        if (!lo) rc = tbackend_fail(m->be, "out of memory");
        for (int64_t i = 0; !rc && i < n; i++) {
            float f = (float)vals[i];
            uint32_t bits;
            memcpy(&bits, &f, sizeof bits);
            lo[i] = (uint16_t)(bits & 0xFFFF);
            vals[i] = prec_decode(bits >> 16, PREC_BF16);
        }
        if (!rc) rc = m->be->raw_upload(m->be, p->lowbits, lo, (size_t)n * sizeof *lo);
        free(lo);
    }
    if (!rc && p->master.data) rc = m->be->upload(m->be, &p->master, vals);
    if (!rc) rc = m->be->upload(m->be, &p->w, vals); /* rounds to nearest even into the working format */
    if (!rc) rc = m->be->zero(m->be, &p->grad);
    if (!rc) rc = m->be->zero(m->be, &p->m);
    if (!rc && p->v.data) rc = m->be->zero(m->be, &p->v);
    free(vals);
    return rc;
}

static int create_params(tmodel *m, uint64_t seed)
{
    const tmodel_config *c = &m->cfg;
    int64_t C = c->n_embd, V = c->vocab, F = 4 * (int64_t)C, L = c->n_layer;
    int gpt2 = c->kind == TMODEL_GPT2;
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    m->p_wte = add_param(m, "wte", -1, V, C, 0, 0, 1);
    m->p_wpe = gpt2 ? add_param(m, "wpe", -1, c->seq_len, C, 0, 0, 1) : -1;
    if (m->p_wte < 0 || (gpt2 && m->p_wpe < 0)) return -1;
    int gains = gpt2 || c->norm_gain;
    for (int l = 0; l < L; l++) {
        layer_acts *A = &m->layers[l];
        A->ln1_g = gains ? add_param(m, "norm.attn.g", l, C, 0, 0, 0, 1) : -1;
        A->ln1_b = gpt2 ? add_param(m, "norm.attn.b", l, C, 0, 0, 0, 1) : -1;
        A->qkv = add_param(m, "attn.qkv.w", l, 3 * C, C, !gpt2, 1, 3);
        A->proj = add_param(m, "attn.out.w", l, C, C, !gpt2, 1, 1);
        A->ln2_g = gains ? add_param(m, "norm.mlp.g", l, C, 0, 0, 0, 1) : -1;
        A->ln2_b = gpt2 ? add_param(m, "norm.mlp.b", l, C, 0, 0, 0, 1) : -1;
        A->up = add_param(m, "mlp.up.w", l, F, C, !gpt2, 1, 1);
        A->down = add_param(m, "mlp.down.w", l, C, F, !gpt2, 1, 1);
        if (A->qkv < 0 || A->proj < 0 || A->up < 0 || A->down < 0) return -1;
    }
    m->p_lnf_g = gains ? add_param(m, "norm.final.g", -1, C, 0, 0, 0, 1) : -1;
    m->p_lnf_b = gpt2 ? add_param(m, "norm.final.b", -1, C, 0, 0, 0, 1) : -1;
    m->param_ptrs = malloc((size_t)m->n_params * sizeof *m->param_ptrs);
    if (!m->param_ptrs) return tbackend_fail(m->be, "out of memory");
    for (int i = 0; i < m->n_params; i++) m->param_ptrs[i] = &m->params[i];
    /* gpt2: N(0, 0.02), residual projections 0.02/sqrt(2L) (GPT-2 paper, llm.c);
     * modern: uniform with std 0.5/sqrt(fan_in), output projections zero
     * (modded-nanogpt), embedding N(0, 0.02) as it doubles as the lm_head */
    for (int i = 0; i < m->n_params; i++) {
        tparam *p = &m->params[i];
        const char *nm = strchr(p->name, '.') && p->layer >= 0 ? strchr(p->name, '.') + 1 : p->name;
        init_kind kind = INIT_NORMAL;
        double scale = 0.02;
        if (strstr(nm, ".g")) kind = INIT_ONES;
        else if (strstr(nm, ".b")) kind = INIT_ZEROS;
        else if (!gpt2 && p->muon) {
            int out = strcmp(nm, "attn.out.w") == 0 || strcmp(nm, "mlp.down.w") == 0;
            kind = out ? INIT_ZEROS : INIT_UNIFORM;
            scale = sqrt(3.0) * 0.5 / sqrt((double)p->cols);
        } else if (gpt2 && (strcmp(nm, "attn.out.w") == 0 || strcmp(nm, "mlp.down.w") == 0)) {
            scale = 0.02 / sqrt(2.0 * (double)L);
        }
        if (init_param(m, p, kind, scale, &rng)) return -1;
    }
    if (!gpt2) {
        prec_format work = fmt_of(m, TSLOT_WEIGHTS), grad = fmt_of(m, TSLOT_GRAD_ACCUM);
        if (alloc2(m, &m->wlm, work, C, V) || alloc2(m, &m->dwlm, grad, C, V)) return -1;
        if (m->be->zero(m->be, &m->dwlm)) return -1;
    }
    return 0;
}

/* ---- activations ----------------------------------------------------------------------- */

static const char *variant_name(const tmodel *m, tslot s)
{
    const kop *op = tplan_kop(m->plan, s);
    return op ? op->variants[m->plan->slot[s].variant].name : "";
}

/* relu2's store_grad variant keeps f'(x) from the forward */
static int stores_act_grad(const tmodel *m) { return strcmp(variant_name(m, TSLOT_ACTIVATION), "store_grad") == 0; }

/* The cross-entropy's fp32_logits variant reads the lm_head's unrounded fp32
 * accumulator (bf16/fp16 GEMMs can write it; fp8 ones cannot) and writes
 * fp32 dlogits. */
static int fp32_logits(const tmodel *m)
{
    kpath lm = m->plan->slot[TSLOT_LM_HEAD].path;
    return strcmp(variant_name(m, TSLOT_CROSS_ENTROPY), "fp32_logits") == 0 && lm != KPATH_FP8;
}

static void free_acts(tmodel *m)
{
    for (int l = 0; m->layers && l < m->cfg.n_layer; l++) {
        layer_acts *A = &m->layers[l];
        ktensor *ts[] = {&A->ln1, &A->ln1_mean, &A->ln1_rstd, &A->q, &A->k, &A->v, &A->qn, &A->kn, &A->qn_rstd,
                         &A->kn_rstd, &A->qr, &A->kr, &A->att, &A->lse, &A->mid, &A->ln2, &A->ln2_mean,
                         &A->ln2_rstd, &A->h, &A->a, &A->act_g, &A->out};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) rel(m, ts[i]);
    }
    ktensor *ts[] = {&m->emb, &m->lnf, &m->lnf_mean, &m->lnf_rstd, &m->logits, &m->dlogits, &m->losses,
                     &m->attn_proj, &m->mlp_out, &m->dres, &m->dlnf, &m->da, &m->dh, &m->dln2, &m->dtmp_mlp,
                     &m->dy_att, &m->dq, &m->dk, &m->dv, &m->dq_r, &m->dk_r, &m->dq_n, &m->dk_n, &m->dln1,
                     &m->dtmp_attn};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) rel(m, ts[i]);
    for (int i = 0; i < N_WGRAD_TMP; i++) rel(m, &m->wgrad_tmp[i]);
}

static int alloc_acts(tmodel *m)
{
    const tmodel_config *c = &m->cfg;
    int64_t BT = (int64_t)m->B * m->T, C = c->n_embd, F = 4 * C, V = c->vocab, H = c->n_head;
    int gpt2 = c->kind == TMODEL_GPT2;
    const prec_format f32 = PREC_FP32;
    int rc = 0;
#define A2(t, slot, r, cc) (rc = rc ? rc : alloc2(m, (t), fmt_of(m, slot), (r), (cc)))
#define S1(t, n) (rc = rc ? rc : alloc2(m, (t), f32, (n), 0))
    for (int l = 0; l < c->n_layer; l++) {
        layer_acts *A = &m->layers[l];
        A2(&A->ln1, TSLOT_NORM_ATTN, BT, C);
        if (gpt2) S1(&A->ln1_mean, BT);
        S1(&A->ln1_rstd, BT);
        A2(&A->q, TSLOT_ATTN_QKV, BT, C);
        A2(&A->k, TSLOT_ATTN_QKV, BT, C);
        A2(&A->v, TSLOT_ATTN_QKV, BT, C);
        if (!gpt2) {
            A2(&A->qn, TSLOT_NORM_QK, BT, C);
            A2(&A->kn, TSLOT_NORM_QK, BT, C);
            S1(&A->qn_rstd, BT * H);
            S1(&A->kn_rstd, BT * H);
            A2(&A->qr, TSLOT_ROPE, BT, C);
            A2(&A->kr, TSLOT_ROPE, BT, C);
        }
        A2(&A->att, TSLOT_ATTENTION, BT, C);
        S1(&A->lse, BT * H);
        A2(&A->mid, TSLOT_RESIDUAL, BT, C);
        A2(&A->ln2, TSLOT_NORM_MLP, BT, C);
        if (gpt2) S1(&A->ln2_mean, BT);
        S1(&A->ln2_rstd, BT);
        A2(&A->h, TSLOT_MLP_UP, BT, F);
        A2(&A->a, TSLOT_ACTIVATION, BT, F);
        if (stores_act_grad(m)) A2(&A->act_g, TSLOT_ACTIVATION, BT, F);
        A2(&A->out, TSLOT_RESIDUAL, BT, C);
    }
    A2(&m->emb, TSLOT_EMBEDDING, BT, C);
    A2(&m->lnf, TSLOT_NORM_FINAL, BT, C);
    if (gpt2) S1(&m->lnf_mean, BT);
    S1(&m->lnf_rstd, BT);
    if (fp32_logits(m)) {
        rc = rc ? rc : alloc2(m, &m->logits, f32, BT, V);
        rc = rc ? rc : alloc2(m, &m->dlogits, f32, BT, V);
    } else {
        A2(&m->logits, TSLOT_LM_HEAD, BT, V);
        A2(&m->dlogits, TSLOT_CROSS_ENTROPY, BT, V);
    }
    S1(&m->losses, BT);
    A2(&m->attn_proj, TSLOT_ATTN_OUT, BT, C);
    A2(&m->mlp_out, TSLOT_MLP_DOWN, BT, C);
    A2(&m->dres, TSLOT_RESIDUAL, BT, C);
    A2(&m->dlnf, TSLOT_LM_HEAD_DGRAD, BT, C);
    A2(&m->da, TSLOT_MLP_DOWN_DGRAD, BT, F);
    A2(&m->dh, TSLOT_ACTIVATION, BT, F);
    A2(&m->dln2, TSLOT_MLP_UP_DGRAD, BT, C);
    A2(&m->dtmp_mlp, TSLOT_NORM_MLP, BT, C);
    A2(&m->dy_att, TSLOT_ATTN_OUT_DGRAD, BT, C);
    A2(&m->dq, TSLOT_ATTENTION, BT, C);
    A2(&m->dk, TSLOT_ATTENTION, BT, C);
    A2(&m->dv, TSLOT_ATTENTION, BT, C);
    if (!gpt2) {
        A2(&m->dq_r, TSLOT_ROPE, BT, C);
        A2(&m->dk_r, TSLOT_ROPE, BT, C);
        A2(&m->dq_n, TSLOT_NORM_QK, BT, C);
        A2(&m->dk_n, TSLOT_NORM_QK, BT, C);
    }
    A2(&m->dln1, TSLOT_ATTN_QKV_DGRAD, BT, C);
    A2(&m->dtmp_attn, TSLOT_NORM_ATTN, BT, C);
#undef A2
#undef S1
    /* weight-gradient GEMMs whose output format differs from grad_accum's
     * write a scratch in their own format, then add it in */
    int64_t biggest = 0;
    for (int i = 0; i < m->n_params; i++)
        if (ktensor_numel(&m->params[i].w) > biggest) biggest = ktensor_numel(&m->params[i].w);
    m->wgrad_tmp_numel = biggest;
    const prec_format tmp_formats[N_WGRAD_TMP] = {PREC_FP32, PREC_BF16, PREC_FP16};
    prec_format grad = fmt_of(m, TSLOT_GRAD_ACCUM);
    const tslot wgrads[] = {TSLOT_LM_HEAD_WGRAD, TSLOT_MLP_DOWN_WGRAD, TSLOT_MLP_UP_WGRAD, TSLOT_ATTN_OUT_WGRAD,
                            TSLOT_ATTN_QKV_WGRAD};
    for (int i = 0; i < N_WGRAD_TMP && !rc; i++) {
        int needed = 0;
        for (size_t s = 0; s < sizeof wgrads / sizeof wgrads[0]; s++)
            needed |= fmt_of(m, wgrads[s]) == tmp_formats[i] && tmp_formats[i] != grad;
        if (needed) rc = alloc2(m, &m->wgrad_tmp[i], tmp_formats[i], biggest, 0);
    }
    return rc;
}

/* ---- lifecycle -------------------------------------------------------------------------- */

tmodel *tmodel_create(const tmodel_config *cfg, tbackend *be, const tplan *plan, int B, int T, uint64_t seed,
                      char *err, size_t errlen)
{
    if (plan->model != cfg->kind) {
        tfail(err, errlen, "plan is for model %s, model is %s", tmodel_kind_name(plan->model),
                 tmodel_kind_name(cfg->kind));
        return NULL;
    }
    if (B <= 0 || T <= 0 || T > cfg->seq_len) {
        tfail(err, errlen, "micro-batch %d x %d: both must be positive and T <= context %d", B, T, cfg->seq_len);
        return NULL;
    }
    if (tbackend_bind_plan(be, plan)) {
        tfail(err, errlen, "%s", tbackend_error(be));
        return NULL;
    }
    tmodel *m = calloc(1, sizeof *m);
    if (!m) {
        tfail(err, errlen, "out of memory");
        return NULL;
    }
    m->cfg = *cfg;
    m->be = be;
    m->plan = plan;
    m->B = B;
    m->T = T;
    m->layers = calloc((size_t)cfg->n_layer, sizeof *m->layers);
    m->loss_host = malloc((size_t)B * T * sizeof *m->loss_host);
    int rc = !m->layers || !m->loss_host ? tbackend_fail(be, "out of memory") : 0;
    if (!rc) rc = be->alloc_raw(be, &m->tokens_dev, (size_t)B * T * sizeof(int32_t));
    if (!rc) rc = be->alloc_raw(be, &m->targets_dev, (size_t)B * T * sizeof(int32_t));
    if (!rc) rc = create_params(m, seed);
    if (!rc) rc = alloc_acts(m);
    if (!rc) rc = tmodel_sync_weights(m);
    if (rc) {
        tfail(err, errlen, "%s", tbackend_error(be));
        tmodel_destroy(m);
        return NULL;
    }
    return m;
}

void tmodel_destroy(tmodel *m)
{
    if (!m) return;
    free_acts(m);
    for (int i = 0; i < m->n_params; i++) {
        tparam *p = &m->params[i];
        rel(m, &p->w), rel(m, &p->master), rel(m, &p->grad), rel(m, &p->m), rel(m, &p->v);
        if (p->lowbits) m->be->release_raw(m->be, p->lowbits);
    }
    rel(m, &m->wlm), rel(m, &m->dwlm);
    if (m->tokens_dev) m->be->release_raw(m->be, m->tokens_dev);
    if (m->targets_dev) m->be->release_raw(m->be, m->targets_dev);
    free(m->params);
    free(m->param_ptrs);
    free(m->layers);
    free(m->loss_host);
    free(m);
}

int tmodel_rebind(tmodel *m, const tplan *plan, char *err, size_t errlen)
{
    /* state, or (allreduce) the NCCL communicator, fixed when the run starts */
    static const tslot stateful[] = {TSLOT_WEIGHTS, TSLOT_GRAD_ACCUM, TSLOT_ADAMW, TSLOT_MUON, TSLOT_ALLREDUCE};
    if (plan->model != m->plan->model) return tfail(err, errlen, "plan is for another model family");
    for (size_t i = 0; i < sizeof stateful / sizeof stateful[0]; i++) {
        tslot s = stateful[i];
        if (plan->used[s] && (plan->slot[s].path != m->plan->slot[s].path ||
                              ((s == TSLOT_WEIGHTS || s == TSLOT_ALLREDUCE) &&
                               plan->slot[s].variant != m->plan->slot[s].variant)))
            return tfail(err, errlen, "slot %s is fixed for the whole run (it holds training state or the NCCL "
                                         "communicator); start a run with it instead", tslot_get(s)->name);
    }
    if (tbackend_bind_plan(m->be, plan)) return tfail(err, errlen, "%s", tbackend_error(m->be));
    free_acts(m);
    m->plan = plan;
    if (alloc_acts(m)) return tfail(err, errlen, "%s", tbackend_error(m->be));
    return 0;
}

void tmodel_set_observer(tmodel *m, tobserve_fn fn, void *ctx)
{
    m->obs = fn;
    m->obs_ctx = ctx;
}

int tmodel_n_params(const tmodel *m) { return m->n_params; }
tbackend *tmodel_backend(tmodel *m) { return m->be; }
tparam *tmodel_param(tmodel *m, int i) { return &m->params[i]; }
tparam *const *tmodel_params(tmodel *m) { return m->param_ptrs; }

/* ---- passes ------------------------------------------------------------------------------ */

#define TRY(expr)                        \
    do {                                 \
        int rc_ = (expr);                \
        if (rc_) return rc_;             \
    } while (0)
#define OBS(slot, layer, name, t) TRY(m->obs ? m->obs(m->obs_ctx, (slot), (layer), (name), (t)) : 0)

static const ktensor *pw(const tmodel *m, int i) { return i >= 0 ? &m->params[i].w : NULL; }
static ktensor *pg(tmodel *m, int i) { return i >= 0 ? &m->params[i].grad : NULL; }

/* dW (+)= op(a) op(b): straight into the gradient when the GEMM's output
 * format is the gradient's, else through a scratch in the GEMM's format. */
static int wgrad(tmodel *m, tslot slot, ktensor *grad, const ktensor *a, int a_trans, const ktensor *b, int b_trans)
{
    tbackend *be = m->be;
    prec_format f = fmt_of(m, slot);
    kpath path = m->plan->slot[slot].path;
    int direct = m->plan->slot[TSLOT_GRAD_ACCUM].variant == TGRAD_ACCUM_GEMM_FP32 && grad->format == PREC_FP32 &&
                 (path == KPATH_BF16 || path == KPATH_FP16);
    if (f == grad->format || direct) {
        TRY(be->matmul(be, slot, grad, a, a_trans, b, b_trans, 1));
        OBS(slot, -1, "dW", grad);
        return 0;
    }
    ktensor *tmp = NULL;
    for (int i = 0; i < N_WGRAD_TMP; i++)
        if (m->wgrad_tmp[i].data && m->wgrad_tmp[i].format == f) tmp = &m->wgrad_tmp[i];
    if (!tmp) return tbackend_fail(be, "slot %s: no %s scratch for its weight gradient", tslot_get(slot)->name,
                                   prec_format_name(f));
    ktensor t = view(m, tmp, 0, grad->shape[0], grad->ndim > 1 ? grad->shape[1] : 1);
    TRY(be->matmul(be, slot, &t, a, a_trans, b, b_trans, 0));
    TRY(be->accumulate(be, TSLOT_GRAD_ACCUM, grad, &t));
    OBS(slot, -1, "dW", grad);
    return 0;
}

static int forward(tmodel *m, double dloss)
{
    tbackend *be = m->be;
    const tmodel_config *c = &m->cfg;
    int B = m->B, T = m->T, H = c->n_head, gpt2 = c->kind == TMODEL_GPT2;
    int64_t BT = (int64_t)B * T, C = c->n_embd, D = C / H;
    double eps = c->norm_eps;
    TRY(be->embedding_fwd(be, &m->emb, m->tokens_dev, pw(m, m->p_wte), pw(m, m->p_wpe), B, T));
    OBS(TSLOT_EMBEDDING, -1, "x", &m->emb);
    const ktensor *x = &m->emb;
    for (int l = 0; l < c->n_layer; l++) {
        layer_acts *A = &m->layers[l];
        const tparam *qkv = &m->params[A->qkv];
        ktensor wq = view(m, &qkv->w, 0, C, C), wk = view(m, &qkv->w, C * C, C, C), wv = view(m, &qkv->w, 2 * C * C, C, C);
        TRY(be->norm_fwd(be, TSLOT_NORM_ATTN, &A->ln1, gpt2 ? &A->ln1_mean : NULL, &A->ln1_rstd, x, pw(m, A->ln1_g),
                         pw(m, A->ln1_b), eps));
        OBS(TSLOT_NORM_ATTN, l, "y", &A->ln1);
        TRY(be->matmul(be, TSLOT_ATTN_QKV, &A->q, &A->ln1, 0, &wq, 1, 0));
        TRY(be->matmul(be, TSLOT_ATTN_QKV, &A->k, &A->ln1, 0, &wk, 1, 0));
        TRY(be->matmul(be, TSLOT_ATTN_QKV, &A->v, &A->ln1, 0, &wv, 1, 0));
        OBS(TSLOT_ATTN_QKV, l, "q", &A->q);
        OBS(TSLOT_ATTN_QKV, l, "k", &A->k);
        OBS(TSLOT_ATTN_QKV, l, "v", &A->v);
        const ktensor *qa = &A->q, *ka = &A->k;
        if (!gpt2) {
            /* QK-norm: rows of D, one per (token, head) */
            ktensor q2 = view(m, &A->q, 0, BT * H, D), k2 = view(m, &A->k, 0, BT * H, D);
            ktensor qn2 = view(m, &A->qn, 0, BT * H, D), kn2 = view(m, &A->kn, 0, BT * H, D);
            TRY(be->norm_fwd(be, TSLOT_NORM_QK, &qn2, NULL, &A->qn_rstd, &q2, NULL, NULL, eps));
            TRY(be->norm_fwd(be, TSLOT_NORM_QK, &kn2, NULL, &A->kn_rstd, &k2, NULL, NULL, eps));
            OBS(TSLOT_NORM_QK, l, "q", &A->qn);
            OBS(TSLOT_NORM_QK, l, "k", &A->kn);
            TRY(be->rope_fwd(be, TSLOT_ROPE, &A->qr, &A->qn, B, T, H, c->rope_theta));
            TRY(be->rope_fwd(be, TSLOT_ROPE, &A->kr, &A->kn, B, T, H, c->rope_theta));
            OBS(TSLOT_ROPE, l, "q", &A->qr);
            OBS(TSLOT_ROPE, l, "k", &A->kr);
            qa = &A->qr;
            ka = &A->kr;
        }
        TRY(be->attention_fwd(be, TSLOT_ATTENTION, &A->att, &A->lse, qa, ka, &A->v, B, T, H));
        OBS(TSLOT_ATTENTION, l, "y", &A->att);
        TRY(be->matmul(be, TSLOT_ATTN_OUT, &m->attn_proj, &A->att, 0, pw(m, A->proj), 1, 0));
        OBS(TSLOT_ATTN_OUT, l, "y", &m->attn_proj);
        TRY(be->residual(be, TSLOT_RESIDUAL, &A->mid, x, &m->attn_proj));
        OBS(TSLOT_RESIDUAL, l, "x_mid", &A->mid);
        TRY(be->norm_fwd(be, TSLOT_NORM_MLP, &A->ln2, gpt2 ? &A->ln2_mean : NULL, &A->ln2_rstd, &A->mid,
                         pw(m, A->ln2_g), pw(m, A->ln2_b), eps));
        OBS(TSLOT_NORM_MLP, l, "y", &A->ln2);
        TRY(be->matmul(be, TSLOT_MLP_UP, &A->h, &A->ln2, 0, pw(m, A->up), 1, 0));
        OBS(TSLOT_MLP_UP, l, "y", &A->h);
        TRY(be->activation_fwd(be, TSLOT_ACTIVATION, &A->a, A->act_g.data ? &A->act_g : NULL, &A->h));
        OBS(TSLOT_ACTIVATION, l, "y", &A->a);
        TRY(be->matmul(be, TSLOT_MLP_DOWN, &m->mlp_out, &A->a, 0, pw(m, A->down), 1, 0));
        OBS(TSLOT_MLP_DOWN, l, "y", &m->mlp_out);
        TRY(be->residual(be, TSLOT_RESIDUAL, &A->out, &A->mid, &m->mlp_out));
        OBS(TSLOT_RESIDUAL, l, "x_out", &A->out);
        x = &A->out;
    }
    TRY(be->norm_fwd(be, TSLOT_NORM_FINAL, &m->lnf, gpt2 ? &m->lnf_mean : NULL, &m->lnf_rstd, x, pw(m, m->p_lnf_g),
                     pw(m, m->p_lnf_b), eps));
    OBS(TSLOT_NORM_FINAL, -1, "y", &m->lnf);
    if (gpt2) TRY(be->matmul(be, TSLOT_LM_HEAD, &m->logits, &m->lnf, 0, pw(m, m->p_wte), 1, 0)); /* [BT,C] [V,C]^T */
    else TRY(be->matmul(be, TSLOT_LM_HEAD, &m->logits, &m->lnf, 0, &m->wlm, 0, 0));                /* [BT,C] [C,V] */
    OBS(TSLOT_LM_HEAD, -1, "logits", &m->logits);
    TRY(be->cross_entropy(be, TSLOT_CROSS_ENTROPY, &m->losses, dloss != 0.0 ? &m->dlogits : NULL, &m->logits,
                          m->targets_dev, c->softcap, dloss));
    OBS(TSLOT_CROSS_ENTROPY, -1, "losses", &m->losses);
    if (dloss != 0.0) OBS(TSLOT_CROSS_ENTROPY, -1, "dlogits", &m->dlogits);
    return 0;
}

static int backward(tmodel *m)
{
    tbackend *be = m->be;
    const tmodel_config *c = &m->cfg;
    int B = m->B, T = m->T, H = c->n_head, gpt2 = c->kind == TMODEL_GPT2;
    int64_t BT = (int64_t)B * T, C = c->n_embd, D = C / H;
    int L = c->n_layer;
    if (gpt2) {
        TRY(be->matmul(be, TSLOT_LM_HEAD_DGRAD, &m->dlnf, &m->dlogits, 0, pw(m, m->p_wte), 0, 0)); /* [BT,V][V,C] */
        OBS(TSLOT_LM_HEAD_DGRAD, -1, "dx", &m->dlnf);
        TRY(wgrad(m, TSLOT_LM_HEAD_WGRAD, pg(m, m->p_wte), &m->dlogits, 1, &m->lnf, 0));         /* [V,BT][BT,C] */
    } else {
        TRY(be->matmul(be, TSLOT_LM_HEAD_DGRAD, &m->dlnf, &m->dlogits, 0, &m->wlm, 1, 0));        /* [BT,V][C,V]^T */
        OBS(TSLOT_LM_HEAD_DGRAD, -1, "dx", &m->dlnf);
        TRY(wgrad(m, TSLOT_LM_HEAD_WGRAD, &m->dwlm, &m->lnf, 1, &m->dlogits, 0));                 /* [C,BT][BT,V] */
    }
    const ktensor *xL = L ? &m->layers[L - 1].out : &m->emb;
    TRY(be->norm_bwd(be, TSLOT_NORM_FINAL, &m->dres, pg(m, m->p_lnf_g), pg(m, m->p_lnf_b), &m->dlnf, xL,
                     pw(m, m->p_lnf_g), gpt2 ? &m->lnf_mean : NULL, &m->lnf_rstd));
    OBS(TSLOT_NORM_FINAL, -1, "dx", &m->dres);
    for (int l = L - 1; l >= 0; l--) {
        layer_acts *A = &m->layers[l];
        const ktensor *x = l ? &m->layers[l - 1].out : &m->emb;
        tparam *qkv = &m->params[A->qkv];
        /* MLP branch: out = mid + down(act(up(norm(mid)))) */
        TRY(be->matmul(be, TSLOT_MLP_DOWN_DGRAD, &m->da, &m->dres, 0, pw(m, A->down), 0, 0)); /* [BT,C][C,F] */
        OBS(TSLOT_MLP_DOWN_DGRAD, l, "dx", &m->da);
        TRY(wgrad(m, TSLOT_MLP_DOWN_WGRAD, pg(m, A->down), &m->dres, 1, &A->a, 0));           /* [C,BT][BT,F] */
        TRY(be->activation_bwd(be, TSLOT_ACTIVATION, &m->dh, &m->da, &A->h, A->act_g.data ? &A->act_g : NULL));
        OBS(TSLOT_ACTIVATION, l, "dx", &m->dh);
        TRY(be->matmul(be, TSLOT_MLP_UP_DGRAD, &m->dln2, &m->dh, 0, pw(m, A->up), 0, 0));      /* [BT,F][F,C] */
        OBS(TSLOT_MLP_UP_DGRAD, l, "dx", &m->dln2);
        TRY(wgrad(m, TSLOT_MLP_UP_WGRAD, pg(m, A->up), &m->dh, 1, &A->ln2, 0));              /* [F,BT][BT,C] */
        TRY(be->norm_bwd(be, TSLOT_NORM_MLP, &m->dtmp_mlp, pg(m, A->ln2_g), pg(m, A->ln2_b), &m->dln2, &A->mid,
                         pw(m, A->ln2_g), gpt2 ? &A->ln2_mean : NULL, &A->ln2_rstd));
        OBS(TSLOT_NORM_MLP, l, "dx", &m->dtmp_mlp);
        TRY(be->residual(be, TSLOT_RESIDUAL, &m->dres, &m->dres, &m->dtmp_mlp));
        OBS(TSLOT_RESIDUAL, l, "dx_mid", &m->dres);
        /* attention branch: mid = x + out(attn(q, k, v)) */
        TRY(be->matmul(be, TSLOT_ATTN_OUT_DGRAD, &m->dy_att, &m->dres, 0, pw(m, A->proj), 0, 0));
        OBS(TSLOT_ATTN_OUT_DGRAD, l, "dx", &m->dy_att);
        TRY(wgrad(m, TSLOT_ATTN_OUT_WGRAD, pg(m, A->proj), &m->dres, 1, &A->att, 0));
        const ktensor *qa = gpt2 ? &A->q : &A->qr, *ka = gpt2 ? &A->k : &A->kr;
        TRY(be->attention_bwd(be, TSLOT_ATTENTION, &m->dq, &m->dk, &m->dv, &m->dy_att, qa, ka, &A->v, &A->att,
                              &A->lse, B, T, H));
        OBS(TSLOT_ATTENTION, l, "dq", &m->dq);
        OBS(TSLOT_ATTENTION, l, "dk", &m->dk);
        OBS(TSLOT_ATTENTION, l, "dv", &m->dv);
        const ktensor *dqa = &m->dq, *dka = &m->dk;
        if (!gpt2) {
            TRY(be->rope_bwd(be, TSLOT_ROPE, &m->dq_r, &m->dq, B, T, H, c->rope_theta));
            TRY(be->rope_bwd(be, TSLOT_ROPE, &m->dk_r, &m->dk, B, T, H, c->rope_theta));
            OBS(TSLOT_ROPE, l, "dq", &m->dq_r);
            OBS(TSLOT_ROPE, l, "dk", &m->dk_r);
            ktensor dqr2 = view(m, &m->dq_r, 0, BT * H, D), dkr2 = view(m, &m->dk_r, 0, BT * H, D);
            ktensor dqn2 = view(m, &m->dq_n, 0, BT * H, D), dkn2 = view(m, &m->dk_n, 0, BT * H, D);
            ktensor q2 = view(m, &A->q, 0, BT * H, D), k2 = view(m, &A->k, 0, BT * H, D);
            TRY(be->norm_bwd(be, TSLOT_NORM_QK, &dqn2, NULL, NULL, &dqr2, &q2, NULL, NULL, &A->qn_rstd));
            TRY(be->norm_bwd(be, TSLOT_NORM_QK, &dkn2, NULL, NULL, &dkr2, &k2, NULL, NULL, &A->kn_rstd));
            OBS(TSLOT_NORM_QK, l, "dq", &m->dq_n);
            OBS(TSLOT_NORM_QK, l, "dk", &m->dk_n);
            dqa = &m->dq_n;
            dka = &m->dk_n;
        }
        ktensor wq = view(m, &qkv->w, 0, C, C), wk = view(m, &qkv->w, C * C, C, C), wv = view(m, &qkv->w, 2 * C * C, C, C);
        ktensor gq = view(m, &qkv->grad, 0, C, C), gk = view(m, &qkv->grad, C * C, C, C),
                gv = view(m, &qkv->grad, 2 * C * C, C, C);
        TRY(be->matmul(be, TSLOT_ATTN_QKV_DGRAD, &m->dln1, dqa, 0, &wq, 0, 0));
        TRY(be->matmul(be, TSLOT_ATTN_QKV_DGRAD, &m->dln1, dka, 0, &wk, 0, 1));
        TRY(be->matmul(be, TSLOT_ATTN_QKV_DGRAD, &m->dln1, &m->dv, 0, &wv, 0, 1));
        OBS(TSLOT_ATTN_QKV_DGRAD, l, "dx", &m->dln1);
        TRY(wgrad(m, TSLOT_ATTN_QKV_WGRAD, &gq, dqa, 1, &A->ln1, 0));
        TRY(wgrad(m, TSLOT_ATTN_QKV_WGRAD, &gk, dka, 1, &A->ln1, 0));
        TRY(wgrad(m, TSLOT_ATTN_QKV_WGRAD, &gv, &m->dv, 1, &A->ln1, 0));
        TRY(be->norm_bwd(be, TSLOT_NORM_ATTN, &m->dtmp_attn, pg(m, A->ln1_g), pg(m, A->ln1_b), &m->dln1, x,
                         pw(m, A->ln1_g), gpt2 ? &A->ln1_mean : NULL, &A->ln1_rstd));
        OBS(TSLOT_NORM_ATTN, l, "dx", &m->dtmp_attn);
        TRY(be->residual(be, TSLOT_RESIDUAL, &m->dres, &m->dres, &m->dtmp_attn));
        OBS(TSLOT_RESIDUAL, l, "dx", &m->dres);
    }
    TRY(be->embedding_bwd(be, pg(m, m->p_wte), pg(m, m->p_wpe), &m->dres, m->tokens_dev, B, T));
    return 0;
}

int tmodel_step_micro(tmodel *m, const int32_t *tokens, const int32_t *targets, double dloss, double *loss)
{
    tbackend *be = m->be;
    size_t bytes = (size_t)m->B * m->T * sizeof(int32_t);
    TRY(be->raw_upload(be, m->tokens_dev, tokens, bytes));
    TRY(be->raw_upload(be, m->targets_dev, targets, bytes));
    TRY(forward(m, dloss));
    if (dloss != 0.0) TRY(backward(m));
    TRY(be->raw_download(be, m->loss_host, m->losses.data, (size_t)m->B * m->T * sizeof(float)));
    double sum = 0.0;
    for (int64_t i = 0; i < (int64_t)m->B * m->T; i++) sum += m->loss_host[i];
    *loss = sum / ((double)m->B * m->T);
    return 0;
}

int tmodel_zero_grads(tmodel *m)
{
    for (int i = 0; i < m->n_params; i++) TRY(m->be->zero(m->be, &m->params[i].grad));
    if (m->dwlm.data) TRY(m->be->zero(m->be, &m->dwlm));
    return 0;
}

int tmodel_finish_grads(tmodel *m)
{
    if (m->cfg.kind != TMODEL_MODERN) return 0;
    TRY(m->be->transpose(m->be, TSLOT_TRANSPOSE, &m->params[m->p_wte].grad, &m->dwlm, 1)); /* dE += dW_lm^T */
    if (m->obs) TRY(m->obs(m->obs_ctx, TSLOT_TRANSPOSE, -1, "dwte", &m->params[m->p_wte].grad));
    return 0;
}

int tmodel_sync_weights(tmodel *m)
{
    if (m->cfg.kind != TMODEL_MODERN) return 0;
    return m->be->transpose(m->be, TSLOT_TRANSPOSE, &m->wlm, &m->params[m->p_wte].w, 0); /* W_lm = E^T */
}
