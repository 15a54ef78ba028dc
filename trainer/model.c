/* trainer/model.c — see model.h.  Shapes in comments: B sequences of T
 * tokens (BT = B*T rows), width C, H heads of D = C/H, vocabulary V, MLP
 * width F = 4C, L layers. */
#include "trainer/model.h"
#include "trainer/errbuf.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>

#include "kernels/activations.h"
#include "kernels/cross_entropy.h"
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
#define N_STORAGE 3   /* the formats a path stores activations in: fp32, bf16, fp16 */

/* Scratch shared by the layers and written by a per-layer slot: one buffer
 * per storage format the slot's layers use (one, unless per-layer choices
 * differ), so that every tensor is stored in its writer's format. */
typedef struct {
    ktensor by_format[N_STORAGE];
} fpool;

struct tmodel {
    tmodel_config cfg;
    tbackend *be;
    tplan *plan;                       /* the model's own copy of the plan it runs */
    int B, T;
    tparam *params;
    tparam **param_ptrs;
    int n_params, cap_params;
    int p_wte, p_wpe, p_lnf_g, p_lnf_b;
    layer_acts *layers;
    ktensor wlm, dwlm;                 /* modern, unless the head is fused: lm_head [C,V] = wte^T and its gradient */
    /* activations (reallocated when the plan changes) */
    ktensor emb;                       /* [BT,C] */
    ktensor lnf, lnf_mean, lnf_rstd;
    ktensor logits, dlogits, losses;   /* [BT,V], [BT,V] (not with the fused head), [BT] */
    ktensor head_dw;                   /* fused head: its dW [V,C] fp32, added into the embedding's gradient */
    void *head_chunks;                 /* tmodel_measure, fused head: klinear_ce's chunk buffers, counted */
    ktensor dlnf;                      /* [BT,C] */
    fpool attn_proj, mlp_out;          /* forward scratch [BT,C] */
    fpool dres, da, dh, dln2, dtmp_mlp, dy_att, dq, dk, dv, dq_r, dk_r, dq_n, dk_n, dln1, dtmp_attn;
    fpool dqkv;                        /* [BT,3C]: the qkv dgrad's joined [dq | dk | dv] */
    ktensor wgrad_tmp[N_WGRAD_TMP];
    int64_t wgrad_tmp_numel;
    void *tokens_dev, *targets_dev;
    float *loss_host;
    tobserve_fn obs;
    void *obs_ctx;
    int measure_only;                  /* tmodel_measure: allocations counted, nothing initialised */
    int timing_fill;                   /* tmodel_create_for_timing: values filled by the backend, not drawn */
    /* CUDA graph of the training micro-batch (tmodel_set_graph) */
    int graph_on, graph_warm, graph_ready, graph_broken;
    double *graph_dloss;               /* [R]: the dloss it was recorded with */
    long graph_captures, graph_replays, graph_failures;
};

/* ---- configuration --------------------------------------------------------------------- */

static int check_sizes(tmodel_kind kind, int n_layer, int n_embd, int n_head, int vocab, int seq_len, char *err,
                       size_t errlen)
{
    if ((unsigned)kind >= TMODEL_COUNT) return tfail(err, errlen, "unknown model family %d (gpt2, modern)", (int)kind);
    if (n_layer <= 0 || n_embd <= 0 || n_head <= 0 || vocab <= 0 || seq_len <= 0)
        return tfail(err, errlen, "model sizes must be positive: depth %d, width %d, heads %d, vocab %d, seq %d",
                        n_layer, n_embd, n_head, vocab, seq_len);
    if (n_layer > TPLAN_MAX_LAYERS || n_embd > TMODEL_WIDTH_MAX || n_head > TMODEL_HEADS_MAX ||
        vocab > TMODEL_VOCAB_MAX || seq_len > TMODEL_CONTEXT_MAX)
        return tfail(err, errlen, "model sizes past their maximum: depth %d (<= %d), width %d (<= %d), heads %d (<= %d), "
                     "vocab %d (<= %d), context %d (<= %d)", n_layer, TPLAN_MAX_LAYERS, n_embd, TMODEL_WIDTH_MAX, n_head,
                     TMODEL_HEADS_MAX, vocab, TMODEL_VOCAB_MAX, seq_len, TMODEL_CONTEXT_MAX);
    if (n_embd % n_head)
        return tfail(err, errlen, "width %d is not divisible by heads %d", n_embd, n_head);
    if (kind == TMODEL_MODERN && (n_embd / n_head) % 2)
        return tfail(err, errlen, "rope needs an even head dimension, got %d", n_embd / n_head);
    return 0;
}

int tmodel_config_check(const tmodel_config *c, char *err, size_t errlen)
{
    if (check_sizes(c->kind, c->n_layer, c->n_embd, c->n_head, c->vocab, c->seq_len, err, errlen)) return -1;
    if (c->norm_gain != 0 && c->norm_gain != 1) return tfail(err, errlen, "norm_gain %d is not 0 or 1", c->norm_gain);
    if (c->kind == TMODEL_GPT2 && !c->norm_gain) return tfail(err, errlen, "gpt2's norms always have a gain");
    if (!isfinite(c->softcap) || c->softcap < 0) return tfail(err, errlen, "softcap %g is not finite and >= 0", c->softcap);
    if (!isfinite(c->rope_theta) || c->rope_theta <= 0)
        return tfail(err, errlen, "rope theta %g is not finite and > 0", c->rope_theta);
    if (!isfinite(c->norm_eps) || c->norm_eps <= 0)
        return tfail(err, errlen, "norm eps %g is not finite and > 0", c->norm_eps);
    return 0;
}

int tmodel_config_init(tmodel_config *c, tmodel_kind kind, int n_layer, int n_embd, int n_head, int vocab,
                       int seq_len, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    if (check_sizes(kind, n_layer, n_embd, n_head, vocab, seq_len, err, errlen)) return -1;
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

/* The site the plan binds slot s of layer `layer` to (-1: a global slot). */
static const tsite *site(const tmodel *m, tslot s, int layer) { return tbackend_site(m->be, s, layer); }

/* Storage format of what slot s writes in layer `layer`. */
static prec_format fmt_of(const tmodel *m, tslot s, int layer) { return tpath_storage(site(m, s, layer)->path); }

static ktensor *pool_at(fpool *p, prec_format f)
{
    return &p->by_format[f == PREC_FP32 ? 0 : f == PREC_BF16 ? 1 : 2];
}

/* The pool's buffer for what slot s writes in layer `layer`. */
static ktensor *pool_for(tmodel *m, fpool *p, tslot s, int layer) { return pool_at(p, fmt_of(m, s, layer)); }

/* The format of layer l's joined [dq | dk | dv]: theirs when they share one,
 * else fp32, which holds bf16 and fp16 values exactly (the joining rounds
 * nothing; the GEMM rounds its operands as it would have rounded each).
 * gpt2: dq, dk, dv are the attention's; modern: dq, dk the QK-norm's. */
static prec_format dqkv_format(const tmodel *m, int layer)
{
    prec_format qk = fmt_of(m, m->cfg.kind == TMODEL_GPT2 ? TSLOT_ATTENTION : TSLOT_NORM_QK, layer);
    return qk == fmt_of(m, TSLOT_ATTENTION, layer) ? qk : PREC_FP32;
}

/* ---- parameters -------------------------------------------------------------------------- */

typedef enum { INIT_NORMAL, INIT_UNIFORM, INIT_ONES, INIT_ZEROS } init_kind;

/* One replica's initial values of parameter p, drawn and encoded on a host
 * thread: the values (double, in fp32), and the stored byte images of the
 * working copy, the master and the mantissa buffer, so that the uploads are
 * plain byte copies.  Drawing and rounding cost about 0.1 us an element on
 * the host: at R = 64 replicas of a 5M-parameter model that was 40 to 55 s,
 * one replica after another. */
typedef struct {
    int64_t n;
    init_kind kind;
    double scale;
    prec_rng *rng;
    prec_format w_fmt, master_fmt; /* master_fmt PREC_NFORMATS: no master */
    int lowbits;
    int threaded; /* drawn on a thread of its own (joined before the store) */
    double *vals;
    unsigned char *w_img, *master_img;
    uint16_t *lo;
} init_draw;

static void encode_image(unsigned char *img, const double *vals, int64_t n, prec_format f)
{
    size_t w = kformat_bytes(f);
    for (int64_t i = 0; i < n; i++) {
        uint64_t bits = prec_encode(prec_rne(vals[i], f), f);
        memcpy(img + (size_t)i * w, &bits, w); /* little-endian: the low bytes hold the pattern */
    }
}

static void *draw_replica(void *arg)
{
    init_draw *d = arg;
    for (int64_t i = 0; i < d->n; i++) {
        double x = d->kind == INIT_NORMAL    ? d->scale * prec_rng_normal(d->rng)
                   : d->kind == INIT_UNIFORM ? d->scale * (2.0 * prec_rng_uniform(d->rng) - 1.0)
                   : d->kind == INIT_ONES    ? 1.0
                                             : 0.0;
        d->vals[i] = (float)x;
    }
    if (d->lowbits) {
        /* bf16 working copy = the fp32 value truncated; the 16 dropped bits beside it */
        for (int64_t i = 0; i < d->n; i++) {
            float f = (float)d->vals[i];
            uint32_t bits;
            memcpy(&bits, &f, sizeof bits);
            d->lo[i] = (uint16_t)(bits & 0xFFFF);
            d->vals[i] = prec_decode(bits >> 16, PREC_BF16);
        }
    }
    if (d->master_fmt != PREC_NFORMATS) encode_image(d->master_img, d->vals, d->n, d->master_fmt);
    encode_image(d->w_img, d->vals, d->n, d->w_fmt); /* rounds to nearest even into the working format */
    return NULL;
}

/* Stores replica r's drawn values into its slice s of the parameter. */
static int store_replica(tmodel *m, tparam *s, const init_draw *d)
{
    int rc = 0;
    if (s->lowbits) rc = m->be->raw_upload(m->be, s->lowbits, d->lo, (size_t)d->n * sizeof *d->lo);
    if (!rc && s->master.data) rc = m->be->write_bytes(m->be, &s->master, d->master_img);
    if (!rc) rc = m->be->write_bytes(m->be, &s->w, d->w_img);
    if (!rc) rc = m->be->zero(m->be, &s->grad);
    if (!rc) rc = m->be->zero(m->be, &s->m);
    if (!rc && s->v.data) rc = m->be->zero(m->be, &s->v);
    return rc;
}

/* Initial values, drawn in double, rounded to fp32 (the master format), then
 * stored as the weights slot says: replica r's from rng[r], so that it
 * starts where a single run with its seed starts.  Replicas are drawn on up
 * to 16 host threads at a time (each from its own generator: the same values
 * in any schedule), within about 1 GiB of host buffers. */
static int init_param(tmodel *m, tparam *p, init_kind kind, double scale, prec_rng *rng)
{
    const int R = m->be->replicas;
    const int64_t n = ktensor_numel(&p->w);
    if (p->w.scale || (p->master.data && p->master.scale))
        return tbackend_fail(m->be, "parameter %s: scaled weight storage is not supported", p->name);
    const size_t per = (size_t)n * (sizeof(double) + 8 + 8 + sizeof(uint16_t)) + 64;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int T = (int)(cpus < 1 ? 1 : cpus > 16 ? 16 : cpus);
    if (T > R) T = R;
    while (T > 1 && (size_t)T * per > ((size_t)1 << 30)) T--;
    init_draw *d = calloc((size_t)T, sizeof *d);
    pthread_t *th = calloc((size_t)T, sizeof *th);
    int rc = d && th ? 0 : tbackend_fail(m->be, "out of memory");
    for (int t = 0; !rc && t < T; t++) {
        d[t].vals = malloc((size_t)n * sizeof(double) + 1);
        d[t].w_img = malloc((size_t)n * 8 + 1);
        d[t].master_img = malloc((size_t)n * 8 + 1);
        d[t].lo = malloc((size_t)n * sizeof(uint16_t) + 1);
        if (!d[t].vals || !d[t].w_img || !d[t].master_img || !d[t].lo) rc = tbackend_fail(m->be, "out of memory");
    }
    for (int r0 = 0; !rc && r0 < R; r0 += T) {
        int k = R - r0 < T ? R - r0 : T;
        for (int t = 0; t < k; t++) {
            d[t].n = n, d[t].kind = kind, d[t].scale = scale, d[t].rng = &rng[r0 + t];
            d[t].w_fmt = p->w.format;
            d[t].master_fmt = p->master.data ? p->master.format : PREC_NFORMATS;
            d[t].lowbits = p->lowbits != NULL;
            /* one replica, or no thread to be had: drawn here (the same values) */
            d[t].threaded = k > 1 && pthread_create(&th[t], NULL, draw_replica, &d[t]) == 0;
            if (!d[t].threaded) draw_replica(&d[t]);
        }
        for (int t = 0; t < k; t++)
            if (d[t].threaded) pthread_join(th[t], NULL);
        for (int t = 0; !rc && t < k; t++) {
            tparam s = tbackend_param_slice(m->be, p, r0 + t);
            rc = store_replica(m, &s, &d[t]);
        }
    }
    for (int t = 0; d && t < T; t++) free(d[t].vals), free(d[t].w_img), free(d[t].master_img), free(d[t].lo);
    free(d), free(th);
    return rc ? -1 : 0;
}

/* tmodel_create_for_timing's values: uniform from a hash of (parameter,
 * index) with the draw's spread (normal: +-sqrt(3) scale, the same standard
 * deviation; uniform: +-scale), ones, zeros; the master copy and the working
 * copy the same numbers, rounded.  No seed decides them. */
static int fill_param(tmodel *m, tparam *p, init_kind kind, double scale)
{
    tbackend *be = m->be;
    if (p->lowbits) return tbackend_fail(be, "a timing model cannot fill the mantissa_buffer weights' low bits");
    const float half = (float)(kind == INIT_NORMAL ? sqrt(3.0) * scale : scale);
    const float lo = kind == INIT_ONES ? 1.0f : kind == INIT_ZEROS ? 0.0f : -half;
    const float hi = kind == INIT_ONES ? 1.0f : kind == INIT_ZEROS ? 0.0f : half;
    const uint64_t seed = 0x7131ull << 32 | (uint64_t)m->n_params;
    int rc = be->fill_uniform(be, &p->w, seed, lo, hi);
    if (!rc && p->master.data) rc = be->fill_uniform(be, &p->master, seed, lo, hi);
    if (!rc) rc = be->zero(be, &p->grad);
    if (!rc) rc = be->zero(be, &p->m);
    if (!rc && p->v.data) rc = be->zero(be, &p->v);
    be->weights_version++; /* what tbackend_guard_weights does for any write to the weights */
    return rc;
}

/* What a parameter is: decides its optimizer, weight decay and initial values. */
typedef enum {
    PARAM_EMBEDDING,  /* wte, wpe: AdamW, no decay */
    PARAM_GAIN,       /* norm gains: AdamW, no decay, ones */
    PARAM_BIAS,       /* norm biases: AdamW, no decay, zeros */
    PARAM_MATRIX,     /* block matrices: decay; Muon in modern */
    PARAM_OUT_PROJ    /* matrices writing into the residual stream (attn.out, mlp.down) */
} param_kind;

typedef struct {
    param_kind kind;
    tslot grad_slot;
} param_role;

/* Allocates a parameter with its gradient and optimizer state and draws its
 * initial values from rng: gpt2 N(0, 0.02), residual projections
 * 0.02/sqrt(2L) (GPT-2 paper, llm.c); modern uniform with std
 * 0.5/sqrt(fan_in), output projections zero (modded-nanogpt), the embedding
 * N(0, 0.02) as it doubles as the lm_head.  Returns its index or -1. */
static int add_param(tmodel *m, const char *name, int layer, int64_t rows, int64_t cols, param_role role, int blocks,
                     prec_rng *rng)
{
    if (m->n_params == m->cap_params) {
        int cap = m->cap_params ? 2 * m->cap_params : 32;
        tparam *np = realloc(m->params, (size_t)cap * sizeof *np);
        if (!np) return tbackend_fail(m->be, "out of memory");
        m->params = np;
        m->cap_params = cap;
    }
    int matrix = role.kind == PARAM_MATRIX || role.kind == PARAM_OUT_PROJ;
    int muon = matrix && m->cfg.kind == TMODEL_MODERN;
    tparam *p = &m->params[m->n_params];
    memset(p, 0, sizeof *p);
    if (layer >= 0) snprintf(p->name, sizeof p->name, "h%d.%s", layer, name);
    else snprintf(p->name, sizeof p->name, "%s", name);
    p->layer = layer;
    p->grad_slot = role.grad_slot;
    p->muon = muon;
    p->decay = matrix;
    p->blocks = blocks;
    p->rows = (int)(rows / blocks);
    p->cols = (int)(cols ? cols : 1);
    const tsite *weights = site(m, TSLOT_WEIGHTS, -1);
    kpath wpath = weights->path;
    int variant = weights->variant;
    prec_format work = tpath_storage(wpath), grad = fmt_of(m, TSLOT_GRAD_ACCUM, -1);
    if (alloc2(m, &p->w, work, rows, cols)) return -1;
    if (!m->measure_only && tbackend_mark_weights(m->be, &p->w)) return -1;
    if (wpath != KPATH_FP32 && variant == TWEIGHTS_MASTER && alloc2(m, &p->master, PREC_FP32, rows, cols)) return -1;
    /* replicas' low bits at the working copy's replica stride (tbackend_param_slice) */
    size_t low_elems = m->be->replicas > 1 ? (size_t)(p->w.replica_stride * m->be->replicas) : (size_t)(rows * (cols ? cols : 1));
    if (variant == TWEIGHTS_MANTISSA_BUFFER && m->be->alloc_raw(m->be, &p->lowbits, low_elems * sizeof(uint16_t)))
        return -1;
    if (alloc2(m, &p->grad, grad, rows, cols)) return -1;
    /* optimizer state is fp32 (the AdamW kernels keep m, v in fp32; Muon's momentum likewise) */
    if (alloc2(m, &p->m, PREC_FP32, rows, cols)) return -1;
    if (!muon && alloc2(m, &p->v, PREC_FP32, rows, cols)) return -1;
    init_kind kind = INIT_NORMAL;
    double scale = 0.02;
    if (role.kind == PARAM_GAIN) kind = INIT_ONES;
    else if (role.kind == PARAM_BIAS) kind = INIT_ZEROS;
    else if (muon) {
        kind = role.kind == PARAM_OUT_PROJ ? INIT_ZEROS : INIT_UNIFORM;
        scale = sqrt(3.0) * 0.5 / sqrt((double)p->cols);
    } else if (role.kind == PARAM_OUT_PROJ) {
        scale = 0.02 / sqrt(2.0 * (double)m->cfg.n_layer);
    }
    if (!m->measure_only && (m->timing_fill ? fill_param(m, p, kind, scale) : init_param(m, p, kind, scale, rng)))
        return -1;
    return m->n_params++;
}

static int add_params(tmodel *m, prec_rng *rng);

static int create_params(tmodel *m, const uint64_t *seeds)
{
    prec_rng *rng = malloc((size_t)m->be->replicas * sizeof *rng);
    if (!rng) return tbackend_fail(m->be, "out of memory");
    for (int r = 0; r < m->be->replicas; r++) prec_rng_seed(&rng[r], seeds ? seeds[r] : 0);
    int rc = add_params(m, rng);
    free(rng);
    return rc;
}

/* Every parameter in a fixed order (the order they draw from each replica's rng). */
static int add_params(tmodel *m, prec_rng *rng)
{
    const tmodel_config *c = &m->cfg;
    int64_t C = c->n_embd, V = c->vocab, F = 4 * (int64_t)C, L = c->n_layer;
    int gpt2 = c->kind == TMODEL_GPT2;
    /* wte's gradient is last written by the embedding backward (gpt2) or the
     * lm_head's transposed fold (modern) */
    const param_role wte = {PARAM_EMBEDDING, gpt2 ? TSLOT_EMBEDDING : TSLOT_TRANSPOSE};
    const param_role wpe = {PARAM_EMBEDDING, TSLOT_EMBEDDING};
    m->p_wte = add_param(m, "wte", -1, V, C, wte, 1, rng);
    m->p_wpe = gpt2 ? add_param(m, "wpe", -1, c->seq_len, C, wpe, 1, rng) : -1;
    if (m->p_wte < 0 || (gpt2 && m->p_wpe < 0)) return -1;
    int gains = gpt2 || c->norm_gain;
    const param_role ln1_g = {PARAM_GAIN, TSLOT_NORM_ATTN}, ln1_b = {PARAM_BIAS, TSLOT_NORM_ATTN};
    const param_role ln2_g = {PARAM_GAIN, TSLOT_NORM_MLP}, ln2_b = {PARAM_BIAS, TSLOT_NORM_MLP};
    for (int l = 0; l < L; l++) {
        layer_acts *A = &m->layers[l];
        A->ln1_g = gains ? add_param(m, "norm.attn.g", l, C, 0, ln1_g, 1, rng) : -1;
        A->ln1_b = gpt2 ? add_param(m, "norm.attn.b", l, C, 0, ln1_b, 1, rng) : -1;
        A->qkv = add_param(m, "attn.qkv.w", l, 3 * C, C, (param_role){PARAM_MATRIX, TSLOT_ATTN_QKV_WGRAD}, 3, rng);
        A->proj = add_param(m, "attn.out.w", l, C, C, (param_role){PARAM_OUT_PROJ, TSLOT_ATTN_OUT_WGRAD}, 1, rng);
        A->ln2_g = gains ? add_param(m, "norm.mlp.g", l, C, 0, ln2_g, 1, rng) : -1;
        A->ln2_b = gpt2 ? add_param(m, "norm.mlp.b", l, C, 0, ln2_b, 1, rng) : -1;
        A->up = add_param(m, "mlp.up.w", l, F, C, (param_role){PARAM_MATRIX, TSLOT_MLP_UP_WGRAD}, 1, rng);
        A->down = add_param(m, "mlp.down.w", l, C, F, (param_role){PARAM_OUT_PROJ, TSLOT_MLP_DOWN_WGRAD}, 1, rng);
        if (A->qkv < 0 || A->proj < 0 || A->up < 0 || A->down < 0) return -1;
    }
    const param_role lnf_g = {PARAM_GAIN, TSLOT_NORM_FINAL}, lnf_b = {PARAM_BIAS, TSLOT_NORM_FINAL};
    m->p_lnf_g = gains ? add_param(m, "norm.final.g", -1, C, 0, lnf_g, 1, rng) : -1;
    m->p_lnf_b = gpt2 ? add_param(m, "norm.final.b", -1, C, 0, lnf_b, 1, rng) : -1;
    m->param_ptrs = malloc((size_t)m->n_params * sizeof *m->param_ptrs);
    if (!m->param_ptrs) return tbackend_fail(m->be, "out of memory");
    for (int i = 0; i < m->n_params; i++) m->param_ptrs[i] = &m->params[i];
    return 0;
}

/* ---- activations ----------------------------------------------------------------------- */

/* relu2's store_grad variant keeps f'(x) from the forward (per layer) */
static int stores_act_grad(const tmodel *m, int layer)
{
    const tsite *at = site(m, TSLOT_ACTIVATION, layer);
    return at->op == TOP_RELU2 && at->variant == KRELU2_STORE_GRAD;
}

/* The cross-entropy's fp32_logits variant reads the lm_head's unrounded fp32
 * accumulator (bf16/fp16 GEMMs can write it; fp8 ones cannot) and writes
 * fp32 dlogits. */
static int fp32_logits(const tmodel *m)
{
    return site(m, TSLOT_CROSS_ENTROPY, -1)->variant == KCE_FP32_LOGITS && site(m, TSLOT_LM_HEAD, -1)->path != KPATH_FP8;
}

/* The plan's cross_entropy slot computes the whole head (lm_head GEMM,
 * cross-entropy, its dgrad and wgrad) in one linear_cross_entropy call on
 * the embedding E [V,C] itself: no logits, no dlogits, and in modern no
 * transposed copy W_lm = E^T (the transpose slot idles). */
static int fused_head(const tmodel *m) { return tplan_fused_head(m->plan); }

static void free_acts(tmodel *m)
{
    for (int l = 0; m->layers && l < m->cfg.n_layer; l++) {
        layer_acts *A = &m->layers[l];
        ktensor *ts[] = {&A->ln1, &A->ln1_mean, &A->ln1_rstd, &A->q, &A->k, &A->v, &A->qn, &A->kn, &A->qn_rstd,
                         &A->kn_rstd, &A->qr, &A->kr, &A->att, &A->lse, &A->mid, &A->ln2, &A->ln2_mean,
                         &A->ln2_rstd, &A->h, &A->a, &A->act_g, &A->out};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) rel(m, ts[i]);
    }
    ktensor *ts[] = {&m->emb,    &m->lnf,     &m->lnf_mean, &m->lnf_rstd, &m->logits, &m->dlogits,
                     &m->losses, &m->dlnf,    &m->head_dw,  &m->wlm,      &m->dwlm};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) rel(m, ts[i]);
    fpool *ps[] = {&m->attn_proj, &m->mlp_out, &m->dres, &m->da, &m->dh, &m->dln2, &m->dtmp_mlp, &m->dy_att, &m->dq,
                   &m->dk, &m->dv, &m->dq_r, &m->dk_r, &m->dq_n, &m->dk_n, &m->dln1, &m->dtmp_attn, &m->dqkv};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        for (int f = 0; f < N_STORAGE; f++) rel(m, &ps[i]->by_format[f]);
    for (int i = 0; i < N_WGRAD_TMP; i++) rel(m, &m->wgrad_tmp[i]);
    if (m->head_chunks) m->be->release_raw(m->be, m->head_chunks);
    m->head_chunks = NULL;
}

/* The pool's buffers for every format slot s writes in some layer. */
static int alloc_pool(tmodel *m, fpool *p, tslot s, int64_t rows, int64_t cols)
{
    for (int l = 0; l < m->cfg.n_layer; l++) {
        prec_format f = fmt_of(m, s, l);
        if (!pool_at(p, f)->data && alloc2(m, pool_at(p, f), f, rows, cols)) return -1;
    }
    return 0;
}

static int alloc_acts(tmodel *m)
{
    const tmodel_config *c = &m->cfg;
    int64_t BT = (int64_t)m->B * m->T, C = c->n_embd, F = 4 * C, V = c->vocab, H = c->n_head;
    int gpt2 = c->kind == TMODEL_GPT2;
    const prec_format f32 = PREC_FP32;
    int rc = 0;
#define A2(t, slot, layer, r, cc) (rc = rc ? rc : alloc2(m, (t), fmt_of(m, slot, layer), (r), (cc)))
#define S1(t, n) (rc = rc ? rc : alloc2(m, (t), f32, (n), 0))
#define P2(p, slot, r, cc) (rc = rc ? rc : alloc_pool(m, (p), slot, (r), (cc)))
    if (!gpt2 && !fused_head(m)) {
        /* the lm_head W_lm [C,V] = E^T in the working format, synced after every update (and
         * on a rebind that brings it back), and its gradient, folded into dE once per step */
        rc = alloc2(m, &m->wlm, fmt_of(m, TSLOT_WEIGHTS, -1), C, V) ||
             alloc2(m, &m->dwlm, fmt_of(m, TSLOT_GRAD_ACCUM, -1), C, V) || m->be->zero(m->be, &m->dwlm) ||
             (!m->measure_only && tbackend_mark_weights(m->be, &m->wlm));
    }
    /* the embedding's gradient is last written by the embedding backward, or by the transpose's fold */
    m->params[m->p_wte].grad_slot = gpt2 || fused_head(m) ? TSLOT_EMBEDDING : TSLOT_TRANSPOSE;
    for (int l = 0; l < c->n_layer; l++) {
        layer_acts *A = &m->layers[l];
        A2(&A->ln1, TSLOT_NORM_ATTN, l, BT, C);
        if (gpt2) S1(&A->ln1_mean, BT);
        S1(&A->ln1_rstd, BT);
        A2(&A->q, TSLOT_ATTN_QKV, l, BT, C);
        A2(&A->k, TSLOT_ATTN_QKV, l, BT, C);
        A2(&A->v, TSLOT_ATTN_QKV, l, BT, C);
        if (!gpt2) {
            A2(&A->qn, TSLOT_NORM_QK, l, BT, C);
            A2(&A->kn, TSLOT_NORM_QK, l, BT, C);
            S1(&A->qn_rstd, BT * H);
            S1(&A->kn_rstd, BT * H);
            A2(&A->qr, TSLOT_ROPE, l, BT, C);
            A2(&A->kr, TSLOT_ROPE, l, BT, C);
        }
        A2(&A->att, TSLOT_ATTENTION, l, BT, C);
        S1(&A->lse, BT * H);
        A2(&A->mid, TSLOT_RESIDUAL, l, BT, C);
        A2(&A->ln2, TSLOT_NORM_MLP, l, BT, C);
        if (gpt2) S1(&A->ln2_mean, BT);
        S1(&A->ln2_rstd, BT);
        A2(&A->h, TSLOT_MLP_UP, l, BT, F);
        A2(&A->a, TSLOT_ACTIVATION, l, BT, F);
        if (stores_act_grad(m, l)) A2(&A->act_g, TSLOT_ACTIVATION, l, BT, F);
        A2(&A->out, TSLOT_RESIDUAL, l, BT, C);
    }
    A2(&m->emb, TSLOT_EMBEDDING, -1, BT, C);
    A2(&m->lnf, TSLOT_NORM_FINAL, -1, BT, C);
    if (gpt2) S1(&m->lnf_mean, BT);
    S1(&m->lnf_rstd, BT);
    if (fused_head(m)) {
        /* dW [V,C] fp32 of one call; dh is dlnf, in the fused op's path */
        rc = rc ? rc : alloc2(m, &m->head_dw, f32, V, C);
        A2(&m->dlnf, TSLOT_CROSS_ENTROPY, -1, BT, C);
        if (!rc && m->measure_only) {
            /* klinear_ce's chunk buffers: logits [R,V] fp32 and, narrower paths, dlogits [R,V] (the
             * kernel's own, one set for every replica's call) */
            const tsite *ce = site(m, TSLOT_CROSS_ENTROPY, -1);
            int64_t R = klce_chunk_rows(ce->variant) < BT ? klce_chunk_rows(ce->variant) : BT;
            size_t el = ce->path == KPATH_FP32 ? 0 : m->be->elem_bytes(tpath_storage(ce->path));
            rc = m->be->alloc_raw(m->be, &m->head_chunks, (size_t)(R * V) * (sizeof(float) + el));
        }
    } else {
        if (fp32_logits(m)) {
            rc = rc ? rc : alloc2(m, &m->logits, f32, BT, V);
            rc = rc ? rc : alloc2(m, &m->dlogits, f32, BT, V);
        } else {
            A2(&m->logits, TSLOT_LM_HEAD, -1, BT, V);
            A2(&m->dlogits, TSLOT_CROSS_ENTROPY, -1, BT, V);
        }
        A2(&m->dlnf, TSLOT_LM_HEAD_DGRAD, -1, BT, C);
    }
    S1(&m->losses, BT);
    P2(&m->attn_proj, TSLOT_ATTN_OUT, BT, C);
    P2(&m->mlp_out, TSLOT_MLP_DOWN, BT, C);
    P2(&m->dres, TSLOT_RESIDUAL, BT, C); /* norm.final writes it in the last layer's residual format */
    P2(&m->da, TSLOT_MLP_DOWN_DGRAD, BT, F);
    P2(&m->dh, TSLOT_ACTIVATION, BT, F);
    P2(&m->dln2, TSLOT_MLP_UP_DGRAD, BT, C);
    P2(&m->dtmp_mlp, TSLOT_NORM_MLP, BT, C);
    P2(&m->dy_att, TSLOT_ATTN_OUT_DGRAD, BT, C);
    P2(&m->dq, TSLOT_ATTENTION, BT, C);
    P2(&m->dk, TSLOT_ATTENTION, BT, C);
    P2(&m->dv, TSLOT_ATTENTION, BT, C);
    if (!gpt2) {
        P2(&m->dq_r, TSLOT_ROPE, BT, C);
        P2(&m->dk_r, TSLOT_ROPE, BT, C);
        P2(&m->dq_n, TSLOT_NORM_QK, BT, C);
        P2(&m->dk_n, TSLOT_NORM_QK, BT, C);
    }
    P2(&m->dln1, TSLOT_ATTN_QKV_DGRAD, BT, C);
    P2(&m->dtmp_attn, TSLOT_NORM_ATTN, BT, C);
    for (int l = 0; l < c->n_layer && !rc; l++) {
        prec_format f = dqkv_format(m, l);
        if (!pool_at(&m->dqkv, f)->data) rc = alloc2(m, pool_at(&m->dqkv, f), f, BT, 3 * C);
    }
#undef A2
#undef S1
#undef P2
    /* weight-gradient GEMMs whose output format differs from grad_accum's
     * write a scratch in their own format, then add it in */
    int64_t biggest = 0;
    for (int i = 0; i < m->n_params; i++)
        if (ktensor_numel(&m->params[i].w) > biggest) biggest = ktensor_numel(&m->params[i].w);
    m->wgrad_tmp_numel = biggest;
    const prec_format tmp_formats[N_WGRAD_TMP] = {PREC_FP32, PREC_BF16, PREC_FP16};
    prec_format grad = fmt_of(m, TSLOT_GRAD_ACCUM, -1);
    for (int i = 0; i < N_WGRAD_TMP && !rc; i++) {
        if (tmp_formats[i] == grad) continue;
        int needed = 0;
        for (int s = 0; s < TSLOT_COUNT; s++) {
            if (tslot_get((tslot)s)->gemm != TGEMM_WGRAD || !m->plan->used[s]) continue;
            if (s == TSLOT_LM_HEAD_WGRAD && fused_head(m)) continue; /* runs inside the fused op */
            int layers = tslot_get((tslot)s)->per_layer ? c->n_layer : 1;
            for (int l = 0; l < layers; l++) needed |= fmt_of(m, (tslot)s, tslot_get((tslot)s)->per_layer ? l : -1) == tmp_formats[i];
        }
        if (needed) rc = alloc2(m, &m->wgrad_tmp[i], tmp_formats[i], biggest, 0);
    }
    return rc;
}

/* ---- lifecycle -------------------------------------------------------------------------- */

static tmodel *create(const tmodel_config *cfg, tbackend *be, const tplan *plan, int B, int T, const uint64_t *seeds,
                      int measure_only, int timing_fill, size_t *param_bytes, char *err, size_t errlen)
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
    if (tmodel_check_plan(cfg, plan, err, errlen)) return NULL;
    if (tbackend_bind_plan(be, plan, cfg->n_layer)) {
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
    m->measure_only = measure_only;
    m->timing_fill = timing_fill;
    m->plan = malloc(sizeof *m->plan);
    if (m->plan) *m->plan = *plan;
    m->B = B;
    m->T = T;
    m->layers = calloc((size_t)cfg->n_layer, sizeof *m->layers);
    size_t tokens = (size_t)be->replicas * B * T; /* replica r's at r*B*T */
    m->loss_host = measure_only ? NULL : malloc(tokens * sizeof *m->loss_host);
    int rc = !m->layers || (!measure_only && !m->loss_host) || !m->plan ? tbackend_fail(be, "out of memory") : 0;
    if (!rc) rc = be->alloc_raw(be, &m->tokens_dev, tokens * sizeof(int32_t));
    if (!rc) rc = be->alloc_raw(be, &m->targets_dev, tokens * sizeof(int32_t));
    size_t before_params = be->bytes_in_use;
    if (!rc) rc = create_params(m, seeds);
    if (param_bytes) *param_bytes = be->bytes_in_use - before_params;
    if (!rc) rc = alloc_acts(m);
    if (!rc && !measure_only) rc = tmodel_sync_weights(m);
    if (rc) {
        tfail(err, errlen, "%s", tbackend_error(be));
        tmodel_destroy(m);
        return NULL;
    }
    return m;
}

tmodel *tmodel_create(const tmodel_config *cfg, tbackend *be, const tplan *plan, int B, int T, const uint64_t *seeds,
                      char *err, size_t errlen)
{
    return create(cfg, be, plan, B, T, seeds, 0, 0, NULL, err, errlen);
}

tmodel *tmodel_create_for_timing(const tmodel_config *cfg, tbackend *be, const tplan *plan, int B, int T, char *err,
                                 size_t errlen)
{
    return create(cfg, be, plan, B, T, NULL, 0, 1, NULL, err, errlen);
}

/* ---- measuring ------------------------------------------------------------------------------- */

/* A backend that counts what the model would allocate on `real` (its
 * element sizes) and allocates nothing: tensors get a data pointer that is
 * never dereferenced (the model only tests it for NULL while it is built). */
typedef struct {
    tbackend be;            /* first: the model sees a tbackend */
    const tbackend *real;
    size_t largest;         /* elements of the largest tensor */
} sizer;

static char sizer_data; /* the address every counted tensor "holds"; never read or written */

/* What t takes on the real backend: every replica's copy, and an fp8 scale. */
static size_t sizer_bytes(const tbackend *be, const ktensor *t)
{
    const sizer *z = (const sizer *)be;
    int64_t elems = t->replica_stride ? t->replica_stride * be->replicas : ktensor_numel(t);
    return (size_t)elems * z->real->elem_bytes(t->format) +
           (t->format == PREC_E4M3 || t->format == PREC_E5M2 ? sizeof(float) : 0);
}

static int sizer_alloc(tbackend *be, ktensor *t, prec_format f, int ndim, const int64_t *shape)
{
    sizer *z = (sizer *)be;
    memset(t, 0, sizeof *t);
    t->format = f;
    t->ndim = ndim;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (t->shape[i] = shape[i]);
    t->data = &sizer_data;
    if (be->replicas > 1) t->replica_stride = tbackend_replica_stride(z->real, f, n);
    size_t bytes = sizer_bytes(be, t);
    be->bytes_in_use += bytes;
    if (be->bytes_in_use > be->peak_bytes) be->peak_bytes = be->bytes_in_use;
    if ((size_t)n > z->largest) z->largest = (size_t)n;
    return 0;
}

static void sizer_release(tbackend *be, ktensor *t)
{
    be->bytes_in_use -= sizer_bytes(be, t);
    memset(t, 0, sizeof *t);
}

static int sizer_alloc_raw(tbackend *be, void **ptr, size_t bytes)
{
    *ptr = &sizer_data;
    be->bytes_in_use += bytes;
    if (be->bytes_in_use > be->peak_bytes) be->peak_bytes = be->bytes_in_use;
    return 0;
}

static void sizer_release_raw(tbackend *be, void *ptr) {}
static int sizer_zero(tbackend *be, ktensor *t) { return 0; }

/* How many sites of slot s (one per layer, or one) run a GEMM on the fp8 path. */
static int fp8_gemm_sites(const tmodel *m, tslot s)
{
    int per_layer = tslot_get(s)->per_layer, n = 0;
    for (int l = 0; l < (per_layer ? m->cfg.n_layer : 1); l++) {
        const tsite *at = site(m, s, per_layer ? l : -1);
        n += at->path == KPATH_FP8 && (at->op == TOP_MATMUL || at->op == TOP_MATMUL_FAST);
    }
    return n;
}

/* The fp8 weight cache of a backend that keeps one (tbackend.fp8_weight_cache):
 * an e4m3 image [N,K] and a scale (256-byte aligned) per replica for every
 * weight operand of a forward or dgrad GEMM on the fp8 path with per-tensor
 * current scaling, which is when it caches.  An upper bound for replicas: the
 * CUDA backend's batched fp8 GEMMs quantise their weights per call and cache
 * only where they fall back to the replica loop. */
static size_t fp8_cache_bytes(const tmodel *m)
{
    const tbackend *be = m->be;
    if (!be->fp8_weight_cache || tbackend_site(be, TSLOT_FP8_SCALING, -1)->variant != TFP8_SCALING_CURRENT) return 0;
    const int64_t C = m->cfg.n_embd, F = 4 * C, V = m->cfg.vocab;
    /* (slot, images, N*K of each): q/k/v views forward, the stacked qkv in its dgrad */
    const struct {
        tslot slot;
        int images;
        int64_t nk;
    } uses[] = {{TSLOT_ATTN_QKV, 3, C * C}, {TSLOT_ATTN_OUT, 1, C * C},     {TSLOT_MLP_UP, 1, F * C},
                {TSLOT_MLP_DOWN, 1, C * F}, {TSLOT_LM_HEAD, 1, V * C},      {TSLOT_ATTN_QKV_DGRAD, 1, 3 * C * C},
                {TSLOT_ATTN_OUT_DGRAD, 1, C * C}, {TSLOT_MLP_UP_DGRAD, 1, F * C}, {TSLOT_MLP_DOWN_DGRAD, 1, C * F},
                {TSLOT_LM_HEAD_DGRAD, 1, V * C}};
    size_t total = 0;
    for (size_t u = 0; u < sizeof uses / sizeof uses[0]; u++)
        total += (size_t)fp8_gemm_sites(m, uses[u].slot) * uses[u].images * (((size_t)uses[u].nk + 255) / 256 * 256 + 256);
    return total * (size_t)be->replicas;
}

static int planted_memo_inputs_uncounted;
void tmodel_plant_memo_inputs_uncounted(int on) { planted_memo_inputs_uncounted = on; }

/* The fp8 operand memo of a backend that keeps one (tbackend.fp8_memo; one
 * replica, current scaling): its one untransposed image and a gradient's
 * transposed one in flight, each at most a [B*T, widest] byte array (the
 * widest fp8 GEMM operand: 4C, or the vocabulary where the head's dgrad is
 * fp8), and, keeping forward inputs, the transposed input of every forward
 * GEMM on the fp8 path until its weight gradient. */
static size_t fp8_memo_bytes(const tmodel *m)
{
    const tbackend *be = m->be;
    if (!be->fp8_memo || be->replicas != 1 || tbackend_site(be, TSLOT_FP8_SCALING, -1)->variant != TFP8_SCALING_CURRENT)
        return 0;
    const int64_t BT = (int64_t)m->B * m->T, C = m->cfg.n_embd, F = 4 * C;
    const struct {
        tslot slot;
        int64_t k; /* the forward GEMM's input width */
    } fwd[] = {{TSLOT_ATTN_QKV, C}, {TSLOT_ATTN_OUT, C}, {TSLOT_MLP_UP, C}, {TSLOT_MLP_DOWN, F}, {TSLOT_LM_HEAD, C}};
    int any = 0;
    size_t kept = 0;
    for (size_t u = 0; u < sizeof fwd / sizeof fwd[0]; u++) {
        int n = fp8_gemm_sites(m, fwd[u].slot);
        any |= n > 0;
        kept += (size_t)n * (((size_t)(BT * fwd[u].k) + 255) / 256 * 256 + 256);
    }
    const tsite *head = site(m, TSLOT_LM_HEAD_DGRAD, -1);
    int64_t widest = head->path == KPATH_FP8 ? (m->cfg.vocab > F ? m->cfg.vocab : F) : F;
    const int inputs = be->fp8_memo == TFP8_MEMO_INPUTS && !planted_memo_inputs_uncounted;
    return (any ? 2 * (size_t)(BT * widest) : 0) + (inputs ? kept : 0);
}

int tmodel_measure(const tmodel_config *cfg, const tbackend *be, const tplan *plan, int B, int T, tmodel_memory *out,
                   char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    sizer z = {*be, be, 0};
    memset(&z.be.bound, 0, sizeof z.be.bound);
    z.be.bytes_in_use = z.be.peak_bytes = 0;
    z.be.alloc = sizer_alloc;
    z.be.release = sizer_release;
    z.be.alloc_raw = sizer_alloc_raw;
    z.be.release_raw = sizer_release_raw;
    z.be.zero = sizer_zero;
    tmodel *m = create(cfg, &z.be, plan, B, T, NULL, 1, 0, &out->param_bytes, err, errlen);
    if (m) {
        out->total_bytes = z.be.peak_bytes + fp8_cache_bytes(m) + fp8_memo_bytes(m);
        out->largest_elems = z.largest;
        tmodel_destroy(m);
    }
    tbinding_free(&z.be.bound);
    return m ? 0 : -1;
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
    if (m->tokens_dev) m->be->release_raw(m->be, m->tokens_dev);
    if (m->targets_dev) m->be->release_raw(m->be, m->targets_dev);
    free(m->graph_dloss);
    free(m->params);
    free(m->param_ptrs);
    free(m->layers);
    free(m->loss_host);
    free(m->plan);
    free(m);
}

int tmodel_check_plan(const tmodel_config *cfg, const tplan *plan, char *err, size_t errlen)
{
    if (tplan_fused_head(plan) && cfg->softcap > 0)
        return tfail(err, errlen, "slot cross_entropy: linear_cross_entropy has no logit soft-cap, and the model has "
                     "--softcap %g: use the materialised cross_entropy=%s, or no soft-cap", cfg->softcap,
                     kpath_name(plan->slot[TSLOT_CROSS_ENTROPY].path));
    return 0;
}

int tmodel_rebind(tmodel *m, const tplan *plan, char *err, size_t errlen)
{
    m->graph_ready = 0; /* recorded with the old plan's variants */
    /* state, or (allreduce) the NCCL communicator, fixed when the run starts;
     * those slots are global (tslot_info.fixed) */
    if (plan->model != m->plan->model) return tfail(err, errlen, "plan is for another model family");
    for (int s = 0; s < TSLOT_COUNT; s++) {
        tfixed fixed = tslot_get((tslot)s)->fixed;
        if (!plan->used[s] || fixed == TFIXED_NO) continue;
        if (plan->slot[s].path != m->plan->slot[s].path ||
            (fixed == TFIXED_CHOICE && plan->slot[s].variant != m->plan->slot[s].variant))
            return tfail(err, errlen, "slot %s is fixed for the whole run (it holds training state or the NCCL "
                                         "communicator); start a run with it instead", tslot_get((tslot)s)->name);
    }
    if (tmodel_check_plan(&m->cfg, plan, err, errlen)) return -1;
    if (tbackend_bind_plan(m->be, plan, m->cfg.n_layer)) return tfail(err, errlen, "%s", tbackend_error(m->be));
    free_acts(m);
    *m->plan = *plan;
    if (alloc_acts(m)) return tfail(err, errlen, "%s", tbackend_error(m->be));
    /* a rebind that brings back the modern model's W_lm copies E^T into it */
    if (!m->measure_only && tmodel_sync_weights(m)) return tfail(err, errlen, "%s", tbackend_error(m->be));
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

/* dW (+)= op(a) op(b) for the weight-gradient GEMM `at`: straight into the
 * gradient when the GEMM's output format is the gradient's, else through a
 * scratch in the GEMM's format. */
static int wgrad(tmodel *m, const tsite *at, ktensor *grad, const ktensor *a, int a_trans, const ktensor *b, int b_trans)
{
    tbackend *be = m->be;
    prec_format f = tpath_storage(at->path);
    int direct = site(m, TSLOT_GRAD_ACCUM, -1)->variant == TGRAD_ACCUM_GEMM_FP32 && grad->format == PREC_FP32 &&
                 (at->path == KPATH_BF16 || at->path == KPATH_FP16);
    if (f == grad->format || direct) {
        TRY(be->matmul(be, at, grad, a, a_trans, b, b_trans, 1));
        OBS(at->slot, at->layer, "dW", grad);
        return 0;
    }
    ktensor *tmp = NULL;
    for (int i = 0; i < N_WGRAD_TMP; i++)
        if (m->wgrad_tmp[i].data && m->wgrad_tmp[i].format == f) tmp = &m->wgrad_tmp[i];
    if (!tmp) {
        char name[64];
        tsite_name(at, name, sizeof name);
        return tbackend_fail(be, "%s: no %s scratch for its weight gradient", name, prec_format_name(f));
    }
    ktensor t = view(m, tmp, 0, grad->shape[0], grad->ndim > 1 ? grad->shape[1] : 1);
    TRY(be->matmul(be, at, &t, a, a_trans, b, b_trans, 0));
    TRY(be->accumulate(be, site(m, TSLOT_GRAD_ACCUM, -1), grad, &t));
    OBS(at->slot, at->layer, "dW", grad);
    return 0;
}

int tmodel_qkv_dgrad(tbackend *be, const tsite *at, ktensor *dx, ktensor *joined, const ktensor *dq,
                     const ktensor *dk, const ktensor *dv, const ktensor *w_qkv)
{
    const ktensor *parts[3] = {dq, dk, dv};
    TRY(be->concat_columns(be, joined, parts, 3));       /* [BT,3C] */
    TRY(be->matmul(be, at, dx, joined, 0, w_qkv, 0, 0)); /* [BT,3C][3C,C] */
    return 0;
}

static int forward(tmodel *m, const double *dloss)
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
        ktensor *attn_proj = pool_for(m, &m->attn_proj, TSLOT_ATTN_OUT, l);
        ktensor *mlp_out = pool_for(m, &m->mlp_out, TSLOT_MLP_DOWN, l);
        TRY(be->norm_fwd(be, site(m, TSLOT_NORM_ATTN, l), &A->ln1, gpt2 ? &A->ln1_mean : NULL, &A->ln1_rstd, x,
                         pw(m, A->ln1_g), pw(m, A->ln1_b), eps));
        OBS(TSLOT_NORM_ATTN, l, "y", &A->ln1);
        const tsite *qkv_at = site(m, TSLOT_ATTN_QKV, l);
        TRY(be->matmul(be, qkv_at, &A->q, &A->ln1, 0, &wq, 1, 0));
        TRY(be->matmul(be, qkv_at, &A->k, &A->ln1, 0, &wk, 1, 0));
        TRY(be->matmul(be, qkv_at, &A->v, &A->ln1, 0, &wv, 1, 0));
        OBS(TSLOT_ATTN_QKV, l, "q", &A->q);
        OBS(TSLOT_ATTN_QKV, l, "k", &A->k);
        OBS(TSLOT_ATTN_QKV, l, "v", &A->v);
        const ktensor *qa = &A->q, *ka = &A->k;
        if (!gpt2) {
            /* QK-norm: rows of D, one per (token, head) */
            ktensor q2 = view(m, &A->q, 0, BT * H, D), k2 = view(m, &A->k, 0, BT * H, D);
            ktensor qn2 = view(m, &A->qn, 0, BT * H, D), kn2 = view(m, &A->kn, 0, BT * H, D);
            const tsite *qk_at = site(m, TSLOT_NORM_QK, l), *rope_at = site(m, TSLOT_ROPE, l);
            TRY(be->norm_fwd(be, qk_at, &qn2, NULL, &A->qn_rstd, &q2, NULL, NULL, eps));
            TRY(be->norm_fwd(be, qk_at, &kn2, NULL, &A->kn_rstd, &k2, NULL, NULL, eps));
            OBS(TSLOT_NORM_QK, l, "q", &A->qn);
            OBS(TSLOT_NORM_QK, l, "k", &A->kn);
            TRY(be->rope_fwd(be, rope_at, &A->qr, &A->qn, B, T, H, c->rope_theta));
            TRY(be->rope_fwd(be, rope_at, &A->kr, &A->kn, B, T, H, c->rope_theta));
            OBS(TSLOT_ROPE, l, "q", &A->qr);
            OBS(TSLOT_ROPE, l, "k", &A->kr);
            qa = &A->qr;
            ka = &A->kr;
        }
        TRY(be->attention_fwd(be, site(m, TSLOT_ATTENTION, l), &A->att, &A->lse, qa, ka, &A->v, B, T, H));
        OBS(TSLOT_ATTENTION, l, "y", &A->att);
        TRY(be->matmul(be, site(m, TSLOT_ATTN_OUT, l), attn_proj, &A->att, 0, pw(m, A->proj), 1, 0));
        OBS(TSLOT_ATTN_OUT, l, "y", attn_proj);
        TRY(be->residual(be, site(m, TSLOT_RESIDUAL, l), &A->mid, x, attn_proj));
        OBS(TSLOT_RESIDUAL, l, "x_mid", &A->mid);
        TRY(be->norm_fwd(be, site(m, TSLOT_NORM_MLP, l), &A->ln2, gpt2 ? &A->ln2_mean : NULL, &A->ln2_rstd, &A->mid,
                         pw(m, A->ln2_g), pw(m, A->ln2_b), eps));
        OBS(TSLOT_NORM_MLP, l, "y", &A->ln2);
        TRY(be->matmul(be, site(m, TSLOT_MLP_UP, l), &A->h, &A->ln2, 0, pw(m, A->up), 1, 0));
        OBS(TSLOT_MLP_UP, l, "y", &A->h);
        TRY(be->activation_fwd(be, site(m, TSLOT_ACTIVATION, l), &A->a, A->act_g.data ? &A->act_g : NULL, &A->h));
        OBS(TSLOT_ACTIVATION, l, "y", &A->a);
        TRY(be->matmul(be, site(m, TSLOT_MLP_DOWN, l), mlp_out, &A->a, 0, pw(m, A->down), 1, 0));
        OBS(TSLOT_MLP_DOWN, l, "y", mlp_out);
        TRY(be->residual(be, site(m, TSLOT_RESIDUAL, l), &A->out, &A->mid, mlp_out));
        OBS(TSLOT_RESIDUAL, l, "x_out", &A->out);
        x = &A->out;
    }
    TRY(be->norm_fwd(be, site(m, TSLOT_NORM_FINAL, -1), &m->lnf, gpt2 ? &m->lnf_mean : NULL, &m->lnf_rstd, x,
                     pw(m, m->p_lnf_g), pw(m, m->p_lnf_b), eps));
    OBS(TSLOT_NORM_FINAL, -1, "y", &m->lnf);
    if (fused_head(m)) {
        /* losses, dh = d(norm.final out) [BT,C] and dW [V,C] fp32 in one call on E [V,C]; dW is
         * added into E's gradient in the backward */
        TRY(be->linear_cross_entropy(be, site(m, TSLOT_CROSS_ENTROPY, -1), &m->losses, dloss ? &m->dlnf : NULL,
                                     dloss ? &m->head_dw : NULL, &m->lnf, pw(m, m->p_wte), m->targets_dev, dloss));
        OBS(TSLOT_CROSS_ENTROPY, -1, "losses", &m->losses);
        if (dloss) OBS(TSLOT_CROSS_ENTROPY, -1, "dh", &m->dlnf);
        return 0;
    }
    const tsite *lm = site(m, TSLOT_LM_HEAD, -1);
    if (gpt2) TRY(be->matmul(be, lm, &m->logits, &m->lnf, 0, pw(m, m->p_wte), 1, 0)); /* [BT,C] [V,C]^T */
    else TRY(be->matmul(be, lm, &m->logits, &m->lnf, 0, &m->wlm, 0, 0));                /* [BT,C] [C,V] */
    OBS(TSLOT_LM_HEAD, -1, "logits", &m->logits);
    TRY(be->cross_entropy(be, site(m, TSLOT_CROSS_ENTROPY, -1), &m->losses, dloss ? &m->dlogits : NULL,
                          &m->logits, m->targets_dev, c->softcap, dloss));
    OBS(TSLOT_CROSS_ENTROPY, -1, "losses", &m->losses);
    if (dloss) OBS(TSLOT_CROSS_ENTROPY, -1, "dlogits", &m->dlogits);
    return 0;
}

static int backward(tmodel *m)
{
    tbackend *be = m->be;
    const tmodel_config *c = &m->cfg;
    int B = m->B, T = m->T, H = c->n_head, gpt2 = c->kind == TMODEL_GPT2;
    int64_t BT = (int64_t)B * T, C = c->n_embd, D = C / H;
    int L = c->n_layer;
    const tsite *lm_dgrad = site(m, TSLOT_LM_HEAD_DGRAD, -1), *lm_wgrad = site(m, TSLOT_LM_HEAD_WGRAD, -1);
    if (fused_head(m)) {
        /* the fused op's fp32 dW into E's fp32 gradient (tplan_validate: grad_accum fp32) */
        TRY(be->accumulate(be, site(m, TSLOT_GRAD_ACCUM, -1), pg(m, m->p_wte), &m->head_dw));
        OBS(TSLOT_CROSS_ENTROPY, -1, "dW", pg(m, m->p_wte));
    } else if (gpt2) {
        TRY(be->matmul(be, lm_dgrad, &m->dlnf, &m->dlogits, 0, pw(m, m->p_wte), 0, 0)); /* [BT,V][V,C] */
        OBS(TSLOT_LM_HEAD_DGRAD, -1, "dx", &m->dlnf);
        TRY(wgrad(m, lm_wgrad, pg(m, m->p_wte), &m->dlogits, 1, &m->lnf, 0));         /* [V,BT][BT,C] */
    } else {
        TRY(be->matmul(be, lm_dgrad, &m->dlnf, &m->dlogits, 0, &m->wlm, 1, 0));        /* [BT,V][C,V]^T */
        OBS(TSLOT_LM_HEAD_DGRAD, -1, "dx", &m->dlnf);
        TRY(wgrad(m, lm_wgrad, &m->dwlm, &m->lnf, 1, &m->dlogits, 0));                 /* [C,BT][BT,V] */
    }
    /* d(residual stream): norm.final writes it in the last layer's residual
     * format; each layer's residual slot rewrites it in its own */
    const ktensor *xL = L ? &m->layers[L - 1].out : &m->emb;
    ktensor *dres = pool_for(m, &m->dres, TSLOT_RESIDUAL, L - 1);
    TRY(be->norm_bwd(be, site(m, TSLOT_NORM_FINAL, -1), dres, pg(m, m->p_lnf_g), pg(m, m->p_lnf_b), &m->dlnf, xL,
                     pw(m, m->p_lnf_g), gpt2 ? &m->lnf_mean : NULL, &m->lnf_rstd));
    OBS(TSLOT_NORM_FINAL, -1, "dx", dres);
    for (int l = L - 1; l >= 0; l--) {
        layer_acts *A = &m->layers[l];
        const ktensor *x = l ? &m->layers[l - 1].out : &m->emb;
        tparam *qkv = &m->params[A->qkv];
        ktensor *da = pool_for(m, &m->da, TSLOT_MLP_DOWN_DGRAD, l), *dh = pool_for(m, &m->dh, TSLOT_ACTIVATION, l);
        ktensor *dln2 = pool_for(m, &m->dln2, TSLOT_MLP_UP_DGRAD, l);
        ktensor *dtmp_mlp = pool_for(m, &m->dtmp_mlp, TSLOT_NORM_MLP, l);
        ktensor *dres_l = pool_for(m, &m->dres, TSLOT_RESIDUAL, l);
        ktensor *dy_att = pool_for(m, &m->dy_att, TSLOT_ATTN_OUT_DGRAD, l);
        ktensor *dq = pool_for(m, &m->dq, TSLOT_ATTENTION, l), *dk = pool_for(m, &m->dk, TSLOT_ATTENTION, l);
        ktensor *dv = pool_for(m, &m->dv, TSLOT_ATTENTION, l);
        ktensor *dln1 = pool_for(m, &m->dln1, TSLOT_ATTN_QKV_DGRAD, l);
        ktensor *dtmp_attn = pool_for(m, &m->dtmp_attn, TSLOT_NORM_ATTN, l);
        const tsite *residual = site(m, TSLOT_RESIDUAL, l);
        /* MLP branch: out = mid + down(act(up(norm(mid)))) */
        TRY(be->matmul(be, site(m, TSLOT_MLP_DOWN_DGRAD, l), da, dres, 0, pw(m, A->down), 0, 0)); /* [BT,C][C,F] */
        OBS(TSLOT_MLP_DOWN_DGRAD, l, "dx", da);
        TRY(wgrad(m, site(m, TSLOT_MLP_DOWN_WGRAD, l), pg(m, A->down), dres, 1, &A->a, 0));       /* [C,BT][BT,F] */
        TRY(be->activation_bwd(be, site(m, TSLOT_ACTIVATION, l), dh, da, &A->h, A->act_g.data ? &A->act_g : NULL));
        OBS(TSLOT_ACTIVATION, l, "dx", dh);
        TRY(be->matmul(be, site(m, TSLOT_MLP_UP_DGRAD, l), dln2, dh, 0, pw(m, A->up), 0, 0));      /* [BT,F][F,C] */
        OBS(TSLOT_MLP_UP_DGRAD, l, "dx", dln2);
        TRY(wgrad(m, site(m, TSLOT_MLP_UP_WGRAD, l), pg(m, A->up), dh, 1, &A->ln2, 0));            /* [F,BT][BT,C] */
        TRY(be->norm_bwd(be, site(m, TSLOT_NORM_MLP, l), dtmp_mlp, pg(m, A->ln2_g), pg(m, A->ln2_b), dln2, &A->mid,
                         pw(m, A->ln2_g), gpt2 ? &A->ln2_mean : NULL, &A->ln2_rstd));
        OBS(TSLOT_NORM_MLP, l, "dx", dtmp_mlp);
        TRY(be->residual(be, residual, dres_l, dres, dtmp_mlp)); /* in place unless the format changes */
        dres = dres_l;
        OBS(TSLOT_RESIDUAL, l, "dx_mid", dres);
        /* attention branch: mid = x + out(attn(q, k, v)) */
        TRY(be->matmul(be, site(m, TSLOT_ATTN_OUT_DGRAD, l), dy_att, dres, 0, pw(m, A->proj), 0, 0));
        OBS(TSLOT_ATTN_OUT_DGRAD, l, "dx", dy_att);
        TRY(wgrad(m, site(m, TSLOT_ATTN_OUT_WGRAD, l), pg(m, A->proj), dres, 1, &A->att, 0));
        const ktensor *qa = gpt2 ? &A->q : &A->qr, *ka = gpt2 ? &A->k : &A->kr;
        TRY(be->attention_bwd(be, site(m, TSLOT_ATTENTION, l), dq, dk, dv, dy_att, qa, ka, &A->v, &A->att, &A->lse, B,
                              T, H));
        OBS(TSLOT_ATTENTION, l, "dq", dq);
        OBS(TSLOT_ATTENTION, l, "dk", dk);
        OBS(TSLOT_ATTENTION, l, "dv", dv);
        const ktensor *dqa = dq, *dka = dk;
        if (!gpt2) {
            ktensor *dq_r = pool_for(m, &m->dq_r, TSLOT_ROPE, l), *dk_r = pool_for(m, &m->dk_r, TSLOT_ROPE, l);
            ktensor *dq_n = pool_for(m, &m->dq_n, TSLOT_NORM_QK, l), *dk_n = pool_for(m, &m->dk_n, TSLOT_NORM_QK, l);
            const tsite *qk_at = site(m, TSLOT_NORM_QK, l), *rope_at = site(m, TSLOT_ROPE, l);
            TRY(be->rope_bwd(be, rope_at, dq_r, dq, B, T, H, c->rope_theta));
            TRY(be->rope_bwd(be, rope_at, dk_r, dk, B, T, H, c->rope_theta));
            OBS(TSLOT_ROPE, l, "dq", dq_r);
            OBS(TSLOT_ROPE, l, "dk", dk_r);
            ktensor dqr2 = view(m, dq_r, 0, BT * H, D), dkr2 = view(m, dk_r, 0, BT * H, D);
            ktensor dqn2 = view(m, dq_n, 0, BT * H, D), dkn2 = view(m, dk_n, 0, BT * H, D);
            ktensor q2 = view(m, &A->q, 0, BT * H, D), k2 = view(m, &A->k, 0, BT * H, D);
            TRY(be->norm_bwd(be, qk_at, &dqn2, NULL, NULL, &dqr2, &q2, NULL, NULL, &A->qn_rstd));
            TRY(be->norm_bwd(be, qk_at, &dkn2, NULL, NULL, &dkr2, &k2, NULL, NULL, &A->kn_rstd));
            OBS(TSLOT_NORM_QK, l, "dq", dq_n);
            OBS(TSLOT_NORM_QK, l, "dk", dk_n);
            dqa = dq_n;
            dka = dk_n;
        }
        ktensor *dqkv = pool_at(&m->dqkv, dqkv_format(m, l));
        TRY(tmodel_qkv_dgrad(be, site(m, TSLOT_ATTN_QKV_DGRAD, l), dln1, dqkv, dqa, dka, dv, &qkv->w));
        OBS(TSLOT_ATTN_QKV_DGRAD, l, "dx", dln1);
        /* dW_qkv [3C,C] += [dq | dk | dv]^T ln1: one GEMM of M = 3C (each
         * element the same dot product over BT as three of M = C; one launch,
         * and the shape cuBLASLt tiles well at large BT) */
        TRY(wgrad(m, site(m, TSLOT_ATTN_QKV_WGRAD, l), &qkv->grad, dqkv, 1, &A->ln1, 0));
        TRY(be->norm_bwd(be, site(m, TSLOT_NORM_ATTN, l), dtmp_attn, pg(m, A->ln1_g), pg(m, A->ln1_b), dln1, x,
                         pw(m, A->ln1_g), gpt2 ? &A->ln1_mean : NULL, &A->ln1_rstd));
        OBS(TSLOT_NORM_ATTN, l, "dx", dtmp_attn);
        TRY(be->residual(be, residual, dres, dres, dtmp_attn));
        OBS(TSLOT_RESIDUAL, l, "dx", dres);
    }
    TRY(be->embedding_bwd(be, pg(m, m->p_wte), pg(m, m->p_wpe), dres, m->tokens_dev, B, T));
    return 0;
}

void tmodel_set_graph(tmodel *m, int on) { m->graph_on = on; }

void tmodel_graph_stats(const tmodel *m, long *captures, long *replays, long *failures)
{
    *captures = m->graph_captures;
    *replays = m->graph_replays;
    *failures = m->graph_failures;
}

static int planted_graph_stale_batch;
void tmodel_plant_graph_stale_batch(int on) { planted_graph_stale_batch = on; }

/* A training micro-batch through the CUDA graph: *ran = 1 when the graph ran
 * it (recorded now or before), 0 when the caller runs it eagerly (no graph
 * here, the first micro-batch, or a failed capture: nothing recorded ran). */
static int graph_micro(tmodel *m, const double *dloss, int *ran)
{
    tbackend *be = m->be;
    const size_t dl = (size_t)be->replicas * sizeof *dloss;
    *ran = 0;
    if (!m->graph_on || !dloss || !be->graph_replay || m->graph_broken) return 0;
    if (!m->graph_ready || !be->graph_valid(be) || memcmp(m->graph_dloss, dloss, dl)) {
        if (m->graph_warm < 2) { /* the first two eagerly: they make the workspaces and GEMM plans, and
                                  * the fp8 memo learns at the first which gradients its wgrads read
                                  * transposed and sizes their two-layout images at the second (a
                                  * buffer grown inside a capture would fail it) */
            m->graph_warm++;
            return 0;
        }
        m->graph_ready = 0;
        if (!m->graph_dloss && !(m->graph_dloss = malloc(dl))) return tbackend_fail(be, "out of memory");
        if (be->graph_begin(be)) {
            m->graph_broken = 1, m->graph_failures++;
            return 0;
        }
        int rc = forward(m, dloss);
        if (!rc) rc = backward(m);
        if (be->graph_end(be) || rc) { /* an op refused the capture (rc: or failed; it fails again eagerly) */
            m->graph_broken = 1, m->graph_failures++;
            return 0;
        }
        memcpy(m->graph_dloss, dloss, dl);
        m->graph_ready = 1;
        m->graph_captures++;
    }
    TRY(be->graph_replay(be));
    m->graph_replays++;
    *ran = 1;
    return 0;
}

int tmodel_step_micro(tmodel *m, const int32_t *tokens, const int32_t *targets, const double *dloss, double *loss)
{
    tbackend *be = m->be;
    const int R = be->replicas;
    const int64_t BT = (int64_t)m->B * m->T;
    size_t bytes = (size_t)(R * BT) * sizeof(int32_t);
    int stale = planted_graph_stale_batch && m->graph_ready && dloss && m->graph_on;
    if (!stale) {
        TRY(be->raw_upload(be, m->tokens_dev, tokens, bytes));
        TRY(be->raw_upload(be, m->targets_dev, targets, bytes));
    }
    int ran = 0;
    TRY(graph_micro(m, dloss, &ran));
    if (!ran) {
        TRY(forward(m, dloss));
        if (dloss) TRY(backward(m));
    }
    /* the replicas' losses back to back: one copy; else one per replica */
    int one_copy = R == 1 || m->losses.replica_stride == BT;
    if (one_copy) TRY(be->raw_download(be, m->loss_host, m->losses.data, (size_t)(R * BT) * sizeof(float)));
    for (int r = 0; r < R; r++) {
        ktensor lr = tbackend_slice(be, &m->losses, r);
        float *host = m->loss_host + r * BT;
        if (!one_copy) TRY(be->raw_download(be, host, lr.data, (size_t)BT * sizeof(float)));
        double sum = 0.0;
        for (int64_t i = 0; i < BT; i++) sum += host[i];
        loss[r] = sum / (double)BT;
    }
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
    if (!m->dwlm.data) return 0; /* gpt2, or the fused head: nothing to fold */
    TRY(m->be->transpose(m->be, site(m, TSLOT_TRANSPOSE, -1), &m->params[m->p_wte].grad, &m->dwlm, 1)); /* dE += dW_lm^T */
    if (m->obs) TRY(m->obs(m->obs_ctx, TSLOT_TRANSPOSE, -1, "dwte", &m->params[m->p_wte].grad));
    return 0;
}

int tmodel_sync_weights(tmodel *m)
{
    if (!m->wlm.data) return 0; /* gpt2, or the fused head: the lm_head reads E itself */
    return m->be->transpose(m->be, site(m, TSLOT_TRANSPOSE, -1), &m->wlm, &m->params[m->p_wte].w, 0); /* W_lm = E^T */
}
