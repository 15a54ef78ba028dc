/* studies/trace.c — `ulpscope trace`: the tap, the two passes, the replay
 * and the amplification table (studies/trace.h). */
#include "studies/trace.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "precision/format.h"
#include "studies/trace_tap.h"

/* ---- the tap ------------------------------------------------------------------------------ */

typedef enum { PASS_STATES, PASS_OPS } tap_pass;

typedef struct {
    tbackend *be;
    tbackend orig;                 /* the backend's entry points before wrapping */
    tmodel *m;
    const ttrain_config *cfg;
    const trace_config *tc;
    int is_b;
    tap_pass pass;
    int record_states;             /* recording: state hashes beside the op hashes */
    int (*user_after_init)(tmodel *m, void *ctx);
    void *user_ctx;
    /* where the run is */
    long step;
    int micro;
    int after_norm;                /* grad_norm ran: the next forward starts a step */
    int *site_calls;               /* [TSLOT_COUNT][depth + 1]: calls in this micro-batch */
    /* pass 1: state hash at the start of each step, [steps + 1] (the last: after the run) */
    uint64_t *state_hash;
    /* pass 2 (and recording): op hashes of steps [ops_from, ops_to) */
    long ops_from, ops_to;
    trace_op *ops;
    long n_ops, cap_ops;
    FILE *rec;                     /* recording: op records go here instead */
    /* B: A's records to match, the report to fill */
    const trace_op *ref;
    long n_ref, ref_cursor;
    trace_report *rep;
    int found;                     /* culprit located (or, under the twin, blamed) */
    int first_diff_seen;
    tbinding bind_a;               /* A's plan bound at B's depth, for the replay */
    /* amplification: A stores, B compares; [amp_steps][depth][elems] */
    long amp_from;
    int amp_steps;
    double *amp;
    double *amp_buf;
    /* scratch */
    unsigned char *img[TRACE_MAX_IN];
    size_t img_len[TRACE_MAX_IN], img_cap[TRACE_MAX_IN];
    unsigned char *obuf;
    size_t obuf_cap;
    int failed;
    char error[1024];
} tap;

/* The tap of the run in progress: entry points get only the backend, and one
 * trace runs at a time in a process (runs are sequential). */
static tap *active_tap;

static int tap_fail(tap *t, const char *fmt, const char *what)
{
    if (!t->failed) snprintf(t->error, sizeof t->error, fmt, what);
    t->failed = 1;
    return tbackend_fail(t->be, fmt, what);
}

static int grow(unsigned char **buf, size_t *cap, size_t n)
{
    if (n <= *cap) return 0;
    unsigned char *p = realloc(*buf, n);
    if (!p) return -1;
    *buf = p;
    *cap = n;
    return 0;
}

/* The storage image of tensor x in *buf (its length in *len). */
static int tensor_image(tap *t, const ktensor *x, unsigned char **buf, size_t *cap, size_t *len)
{
    *len = tensor_image_bytes(x);
    if (grow(buf, cap, *len ? *len : 1)) return tap_fail(t, "trace: out of memory for %s", "a tensor image");
    if (t->orig.sync(t->be) || t->orig.read_bytes(t->be, x, *buf)) return -1;
    return 0;
}

static uint64_t state_hash(tap *t)
{
    uint64_t h = TTRAIN_FNV_OFFSET;
    for (int i = 0; i < tmodel_n_params(t->m); i++) {
        tparam *p = tmodel_param(t->m, i);
        const ktensor *parts[4] = {&p->w, &p->master, &p->m, &p->v};
        for (int k = 0; k < 4; k++) {
            size_t len;
            if (!parts[k]->data) continue;
            if (tensor_image(t, parts[k], &t->obuf, &t->obuf_cap, &len)) return 0;
            h = ttrain_fnv1a(h, t->obuf, len);
        }
        if (p->lowbits) {
            size_t len = (size_t)ktensor_numel(&p->w) * sizeof(uint16_t);
            if (grow(&t->obuf, &t->obuf_cap, len) || t->orig.raw_download(t->be, t->obuf, p->lowbits, len)) {
                tap_fail(t, "trace: %s", "reading the mantissa buffer failed");
                return 0;
            }
            h = ttrain_fnv1a(h, t->obuf, len);
        }
    }
    return h;
}

static int *calls_of(tap *t, tslot s, int layer)
{
    int depth = t->cfg->model.n_layer;
    return &t->site_calls[(int)s * (depth + 1) + (layer < 0 ? depth : layer)];
}

/* Advances the position on a micro-batch's first op or the gradient norm. */
static void advance(tap *t, tap_kind kind)
{
    int depth = t->cfg->model.n_layer;
    if (kind == TAP_EMBEDDING_FWD) {
        if (t->after_norm) {
            t->step++;
            t->micro = 0;
            t->after_norm = 0;
        } else t->micro++;
        memset(t->site_calls, 0, sizeof(int) * TSLOT_COUNT * (size_t)(depth + 1));
        if ((t->pass == PASS_STATES || t->record_states) && t->micro == 0 && t->step < t->cfg->steps)
            t->state_hash[t->step] = state_hash(t);
    } else if (kind == TAP_GRAD_NORM) {
        t->after_norm = 1;
        t->micro = -1;
        memset(t->site_calls, 0, sizeof(int) * TSLOT_COUNT * (size_t)(depth + 1));
    }
}

static int same_key(const trace_op *a, const trace_op *b)
{
    return a->step == b->step && a->micro == b->micro && a->slot == b->slot && a->layer == b->layer &&
           a->call == b->call && strcmp(a->op, b->op) == 0;
}

static const trace_op *find_ref(tap *t, const trace_op *k)
{
    for (long i = t->ref_cursor; i < t->n_ref; i++)
        if (same_key(&t->ref[i], k)) {
            t->ref_cursor = i + 1;
            return &t->ref[i];
        }
    for (long i = 0; i < t->ref_cursor && i < t->n_ref; i++)
        if (same_key(&t->ref[i], k)) return &t->ref[i];
    return NULL;
}

static const char *const kind_names[TAP_COUNT] = {
    "embedding_fwd", "embedding_bwd", "norm_fwd", "norm_bwd", "matmul", "attention_fwd", "attention_bwd",
    "rope_fwd", "rope_bwd", "activation_fwd", "activation_bwd", "residual", "cross_entropy", "linear_cross_entropy",
    "transpose",
    "accumulate", "grad_norm", "adamw", "muon"};

static void replay(tap *t, const tap_call *c, const trace_op *ra, const trace_op *rb);

/* Layer outputs for the amplification table: the residual stream after each
 * layer (the layer's second residual call) in the first micro-batch. */
static void amplify(tap *t, const tap_call *c)
{
    const trace_config *tc = t->tc;
    if (!t->amp || t->micro != 0 || c->kind != TAP_RESIDUAL || c->layer < 0 || *calls_of(t, c->slot, c->layer) != 2)
        return;
    long k = t->step - t->amp_from;
    if (k < 0 || k >= t->amp_steps || t->step >= t->cfg->steps) return; /* the last validation is no step */
    const ktensor *y = c->out[0];
    long n = (long)ktensor_numel(y);
    if (n > tc->amplify_elems) n = tc->amplify_elems;
    double *full = malloc((size_t)ktensor_numel(y) * sizeof *full);
    if (!full || t->orig.sync(t->be) || t->orig.download(t->be, y, full)) {
        free(full);
        tap_fail(t, "trace: %s", "reading a layer output failed");
        return;
    }
    double *slot = t->amp + ((size_t)k * t->cfg->model.n_layer + c->layer) * tc->amplify_elems;
    if (!t->is_b) {
        memcpy(slot, full, (size_t)n * sizeof *full);
    } else {
        double dmax = 0, amax = 0, d2 = 0, a2 = 0;
        for (long i = 0; i < n; i++) {
            double d = fabs(full[i] - slot[i]);
            dmax = fmax(dmax, d);
            amax = fmax(amax, fabs(slot[i]));
            d2 += d * d;
            a2 += slot[i] * slot[i];
        }
        size_t at = (size_t)k * t->cfg->model.n_layer + c->layer;
        t->rep->amp_max_rel[at] = amax > 0 ? dmax / amax : dmax;
        t->rep->amp_rms_rel[at] = a2 > 0 ? sqrt(d2 / a2) : sqrt(d2);
    }
    free(full);
}

/* Every wrapped entry point ends here. */
static int tap_exec(tbackend *be, tap_call *c)
{
    tap *t = active_tap;
    advance(t, c->kind);
    int *calls = calls_of(t, c->slot, c->layer);
    int call_index = (*calls)++;
    int hash_ops = !t->failed && t->pass == PASS_OPS && t->step >= t->ops_from && t->step < t->ops_to &&
                   t->step < t->cfg->steps;
    if (!hash_ops) {
        int rc = tap_invoke(be, &t->orig, c, c->at);
        if (!rc) amplify(t, c);
        return rc;
    }
    trace_op o;
    memset(&o, 0, sizeof o);
    o.step = t->step;
    o.micro = t->micro;
    o.slot = (short)c->slot;
    o.layer = (short)c->layer;
    o.call = call_index;
    snprintf(o.op, sizeof o.op, "%s", kind_names[c->kind]);
    o.n_in = c->n_in;
    o.n_out = c->n_out;
    for (int i = 0; i < c->n_in; i++) {
        if (c->in[i]) {
            if (tensor_image(t, c->in[i], &t->img[i], &t->img_cap[i], &t->img_len[i])) return -1;
        } else {
            t->img_len[i] = c->in_raw_len[i];
            if (grow(&t->img[i], &t->img_cap[i], t->img_len[i] ? t->img_len[i] : 1))
                return tap_fail(t, "trace: out of memory for %s", "an input");
            memcpy(t->img[i], c->in_raw[i], t->img_len[i]);
        }
        o.in_hash[i] = ttrain_fnv1a(TTRAIN_FNV_OFFSET, t->img[i], t->img_len[i]);
    }
    int rc = tap_invoke(be, &t->orig, c, c->at);
    if (rc) return rc;
    for (int i = 0; i < c->n_out; i++) {
        snprintf(o.out_name[i], sizeof o.out_name[i], "%s", c->out_name[i]);
        size_t len;
        if (c->out[i]) {
            if (tensor_image(t, c->out[i], &t->obuf, &t->obuf_cap, &len)) return -1;
            o.out_hash[i] = ttrain_fnv1a(TTRAIN_FNV_OFFSET, t->obuf, len);
            o.out_format[i] = (signed char)c->out[i]->format;
        } else {
            o.out_hash[i] = ttrain_fnv1a(TTRAIN_FNV_OFFSET, c->out_scalar, sizeof *c->out_scalar);
            o.out_format[i] = -1;
        }
    }
    amplify(t, c);
    if (t->rec) {
        trace_write_op_record(t->rec, &o);
    } else if (!t->is_b) {
        if (t->n_ops == t->cap_ops) {
            long cap = t->cap_ops ? 2 * t->cap_ops : 1024;
            trace_op *p = realloc(t->ops, (size_t)cap * sizeof *p);
            if (!p) return tap_fail(t, "trace: out of memory for %s", "op records");
            t->ops = p;
            t->cap_ops = cap;
        }
        t->ops[t->n_ops++] = o;
    } else if (!t->found) {
        const trace_op *ra = find_ref(t, &o);
        if (!ra || ra->n_in != o.n_in || ra->n_out != o.n_out) return 0;
        int inputs_equal = 1, out_diff = -1;
        for (int i = 0; i < o.n_in; i++) inputs_equal &= ra->in_hash[i] == o.in_hash[i];
        for (int i = 0; i < o.n_out && out_diff < 0; i++)
            if (ra->out_hash[i] != o.out_hash[i]) out_diff = i;
        if (out_diff < 0) return 0;
        trace_report *r = t->rep;
        if (!t->first_diff_seen) {
            /* the first differing call, whatever its inputs: context when no culprit is found */
            t->first_diff_seen = 1;
            r->op_a = *ra;
            r->op_b = o;
            r->out_index = out_diff;
            r->inputs_differ = !inputs_equal;
        }
        if (inputs_equal || t->tc->bug == TRACE_BUG_NO_INPUT_CHECK) {
            t->found = 1;
            r->located = 1;
            r->inputs_differ = !inputs_equal;
            r->op_a = *ra;
            r->op_b = o;
            r->out_index = out_diff;
            if (inputs_equal) replay(t, c, ra, &o);
        }
    }
    return 0;
}

/* ---- the wrappers ------------------------------------------------------------------------- */

#define IN(name, x)                                                                                             \
    do {                                                                                                        \
        if ((x) && (x)->data) {                                                                                 \
            c.in_name[c.n_in] = name;                                                                           \
            c.in[c.n_in++] = (ktensor *)(x);                                                                    \
        }                                                                                                       \
    } while (0)
#define IN_RAW(name, p, len)                                                                                    \
    do {                                                                                                        \
        c.in_name[c.n_in] = name;                                                                               \
        c.in_raw[c.n_in] = p;                                                                                   \
        c.in_raw_len[c.n_in++] = len;                                                                           \
    } while (0)
#define OUT(name, x)                                                                                            \
    do {                                                                                                        \
        if ((x) && (x)->data) {                                                                                 \
            c.out_name[c.n_out] = name;                                                                         \
            c.out[c.n_out++] = (ktensor *)(x);                                                                  \
        }                                                                                                       \
    } while (0)
#define SITE(a) c.at = (a), c.slot = (a)->slot, c.layer = (a)->layer

/* ids live where the backend keeps raw buffers: hashed from a host copy */
static int ids_copy(tbackend *be, const int32_t *ids, size_t n, int32_t **host)
{
    tap *t = active_tap;
    *host = malloc(n * sizeof **host + 1);
    if (!*host) return tap_fail(t, "trace: out of memory for %s", "ids");
    if (t->orig.raw_download(be, *host, ids, n * sizeof **host)) {
        free(*host);
        return -1;
    }
    return 0;
}

static int w_embedding_fwd(tbackend *be, ktensor *x, const int32_t *tokens, const ktensor *wte, const ktensor *wpe,
                           int B, int T)
{
    tap_call c = {.kind = TAP_EMBEDDING_FWD, .slot = TSLOT_EMBEDDING, .layer = -1, .ids = tokens, .B = B, .T = T};
    int32_t *host;
    if (ids_copy(be, tokens, (size_t)B * T, &host)) return -1;
    c.t[0] = x, c.t[1] = (ktensor *)wte, c.t[2] = (ktensor *)wpe;
    IN_RAW("tokens", host, (size_t)B * T * sizeof *host);
    IN("wte", wte);
    IN("wpe", wpe);
    OUT("x", x);
    int rc = tap_exec(be, &c);
    free(host);
    return rc;
}

static int w_embedding_bwd(tbackend *be, ktensor *dwte, ktensor *dwpe, const ktensor *dx, const int32_t *tokens,
                           int B, int T)
{
    tap_call c = {.kind = TAP_EMBEDDING_BWD, .slot = TSLOT_EMBEDDING, .layer = -1, .ids = tokens, .B = B, .T = T};
    int32_t *host;
    if (ids_copy(be, tokens, (size_t)B * T, &host)) return -1;
    c.t[0] = dwte, c.t[1] = dwpe, c.t[2] = (ktensor *)dx;
    IN_RAW("tokens", host, (size_t)B * T * sizeof *host);
    IN("dx", dx);
    IN("dwte", dwte);
    IN("dwpe", dwpe);
    OUT("dwte", dwte);
    OUT("dwpe", dwpe);
    int rc = tap_exec(be, &c);
    free(host);
    return rc;
}

static int w_norm_fwd(tbackend *be, const tsite *at, ktensor *y, ktensor *mean, ktensor *rstd, const ktensor *x,
                      const ktensor *gain, const ktensor *bias, double eps)
{
    tap_call c = {.kind = TAP_NORM_FWD, .eps = eps};
    SITE(at);
    c.t[0] = y, c.t[1] = mean, c.t[2] = rstd, c.t[3] = (ktensor *)x, c.t[4] = (ktensor *)gain, c.t[5] = (ktensor *)bias;
    IN("x", x);
    IN("gain", gain);
    IN("bias", bias);
    IN_RAW("eps", &c.eps, sizeof c.eps);
    OUT("y", y);
    OUT("mean", mean);
    OUT("rstd", rstd);
    return tap_exec(be, &c);
}

static int w_norm_bwd(tbackend *be, const tsite *at, ktensor *dx, ktensor *dgain, ktensor *dbias, const ktensor *dy,
                      const ktensor *x, const ktensor *gain, const ktensor *mean, const ktensor *rstd)
{
    tap_call c = {.kind = TAP_NORM_BWD};
    SITE(at);
    c.t[0] = dx, c.t[1] = dgain, c.t[2] = dbias, c.t[3] = (ktensor *)dy, c.t[4] = (ktensor *)x,
    c.t[5] = (ktensor *)gain, c.t[6] = (ktensor *)mean, c.t[7] = (ktensor *)rstd;
    IN("dy", dy);
    IN("x", x);
    IN("gain", gain);
    IN("mean", mean);
    IN("rstd", rstd);
    IN("dgain", dgain);
    IN("dbias", dbias);
    OUT("dx", dx);
    OUT("dgain", dgain);
    OUT("dbias", dbias);
    return tap_exec(be, &c);
}

static int w_matmul(tbackend *be, const tsite *at, ktensor *y, const ktensor *a, int a_trans, const ktensor *b,
                    int b_trans, int accumulate)
{
    tap_call c = {.kind = TAP_MATMUL, .a_trans = a_trans, .b_trans = b_trans, .accumulate = accumulate};
    SITE(at);
    c.t[0] = y, c.t[1] = (ktensor *)a, c.t[2] = (ktensor *)b;
    IN("a", a);
    IN("b", b);
    int shape[3] = {a_trans, b_trans, accumulate};
    IN_RAW("layout", shape, sizeof shape);
    if (accumulate) IN("y", y);
    OUT("y", y);
    return tap_exec(be, &c);
}

static int w_attention_fwd(tbackend *be, const tsite *at, ktensor *y, ktensor *lse, const ktensor *q,
                           const ktensor *k, const ktensor *v, int B, int T, int H)
{
    tap_call c = {.kind = TAP_ATTENTION_FWD, .B = B, .T = T, .H = H};
    SITE(at);
    c.t[0] = y, c.t[1] = lse, c.t[2] = (ktensor *)q, c.t[3] = (ktensor *)k, c.t[4] = (ktensor *)v;
    IN("q", q);
    IN("k", k);
    IN("v", v);
    OUT("y", y);
    OUT("lse", lse);
    return tap_exec(be, &c);
}

static int w_attention_bwd(tbackend *be, const tsite *at, ktensor *dq, ktensor *dk, ktensor *dv, const ktensor *dy,
                           const ktensor *q, const ktensor *k, const ktensor *v, const ktensor *y,
                           const ktensor *lse, int B, int T, int H)
{
    tap_call c = {.kind = TAP_ATTENTION_BWD, .B = B, .T = T, .H = H};
    SITE(at);
    c.t[0] = dq, c.t[1] = dk, c.t[2] = dv, c.t[3] = (ktensor *)dy, c.t[4] = (ktensor *)q, c.t[5] = (ktensor *)k,
    c.t[6] = (ktensor *)v, c.t[7] = (ktensor *)y, c.t[8] = (ktensor *)lse;
    IN("dy", dy);
    IN("q", q);
    IN("k", k);
    IN("v", v);
    IN("y", y);
    IN("lse", lse);
    OUT("dq", dq);
    OUT("dk", dk);
    OUT("dv", dv);
    return tap_exec(be, &c);
}

static int w_rope(tbackend *be, tap_kind kind, const tsite *at, ktensor *y, const ktensor *x, int B, int T, int H,
                  double theta)
{
    tap_call c = {.kind = kind, .B = B, .T = T, .H = H, .theta = theta};
    SITE(at);
    c.t[0] = y, c.t[1] = (ktensor *)x;
    IN("x", x);
    IN_RAW("theta", &c.theta, sizeof c.theta);
    OUT("y", y);
    return tap_exec(be, &c);
}

static int w_rope_fwd(tbackend *be, const tsite *at, ktensor *y, const ktensor *x, int B, int T, int H, double theta)
{
    return w_rope(be, TAP_ROPE_FWD, at, y, x, B, T, H, theta);
}

static int w_rope_bwd(tbackend *be, const tsite *at, ktensor *dx, const ktensor *dy, int B, int T, int H,
                      double theta)
{
    return w_rope(be, TAP_ROPE_BWD, at, dx, dy, B, T, H, theta);
}

static int w_activation_fwd(tbackend *be, const tsite *at, ktensor *y, ktensor *g, const ktensor *x)
{
    tap_call c = {.kind = TAP_ACTIVATION_FWD};
    SITE(at);
    c.t[0] = y, c.t[1] = g, c.t[2] = (ktensor *)x;
    IN("x", x);
    OUT("y", y);
    OUT("g", g);
    return tap_exec(be, &c);
}

static int w_activation_bwd(tbackend *be, const tsite *at, ktensor *dx, const ktensor *dy, const ktensor *x,
                            const ktensor *g)
{
    tap_call c = {.kind = TAP_ACTIVATION_BWD};
    SITE(at);
    c.t[0] = dx, c.t[1] = (ktensor *)dy, c.t[2] = (ktensor *)x, c.t[3] = (ktensor *)g;
    IN("dy", dy);
    IN("x", x);
    IN("g", g);
    OUT("dx", dx);
    return tap_exec(be, &c);
}

static int w_residual(tbackend *be, const tsite *at, ktensor *y, const ktensor *a, const ktensor *b)
{
    tap_call c = {.kind = TAP_RESIDUAL};
    SITE(at);
    c.t[0] = y, c.t[1] = (ktensor *)a, c.t[2] = (ktensor *)b;
    IN("a", a);
    IN("b", b);
    OUT("y", y);
    return tap_exec(be, &c);
}

static int w_cross_entropy(tbackend *be, const tsite *at, ktensor *losses, ktensor *dlogits, const ktensor *logits,
                           const int32_t *targets, double softcap, const double *dloss_in)
{
    /* a single run (trace runs no replicas): one dloss, or none (forward only) */
    double dloss = dloss_in ? *dloss_in : 0.0;
    tap_call c = {.kind = TAP_CROSS_ENTROPY, .ids = targets, .softcap = softcap, .dloss = dloss,
                  .has_dloss = dloss_in != NULL};
    SITE(at);
    int32_t *host;
    size_t rows = (size_t)logits->shape[0];
    if (ids_copy(be, targets, rows, &host)) return -1;
    c.t[0] = losses, c.t[1] = dlogits, c.t[2] = (ktensor *)logits;
    double scalars[2] = {softcap, dloss};
    IN("logits", logits);
    IN_RAW("targets", host, rows * sizeof *host);
    IN_RAW("softcap,dloss", scalars, sizeof scalars);
    OUT("losses", losses);
    OUT("dlogits", dlogits);
    int rc = tap_exec(be, &c);
    free(host);
    return rc;
}

static int w_linear_cross_entropy(tbackend *be, const tsite *at, ktensor *losses, ktensor *dh, ktensor *dW,
                                  const ktensor *h, const ktensor *W, const int32_t *targets, const double *dloss_in)
{
    /* a single run (trace runs no replicas): one dloss, or none (forward only) */
    double dloss = dloss_in ? *dloss_in : 0.0;
    tap_call c = {.kind = TAP_LINEAR_CROSS_ENTROPY, .ids = targets, .dloss = dloss, .has_dloss = dloss_in != NULL};
    SITE(at);
    int32_t *host;
    size_t rows = (size_t)h->shape[0];
    if (ids_copy(be, targets, rows, &host)) return -1;
    c.t[0] = losses, c.t[1] = dh, c.t[2] = dW, c.t[3] = (ktensor *)h, c.t[4] = (ktensor *)W;
    IN("h", h);
    IN("W", W);
    IN_RAW("targets", host, rows * sizeof *host);
    IN_RAW("dloss", &dloss, sizeof dloss);
    OUT("losses", losses);
    OUT("dh", dh);
    OUT("dW", dW);
    int rc = tap_exec(be, &c);
    free(host);
    return rc;
}

static int w_transpose(tbackend *be, const tsite *at, ktensor *out, const ktensor *in, int accumulate)
{
    tap_call c = {.kind = TAP_TRANSPOSE, .accumulate = accumulate};
    SITE(at);
    c.t[0] = out, c.t[1] = (ktensor *)in;
    IN("in", in);
    if (accumulate) IN("out", out);
    OUT("out", out);
    return tap_exec(be, &c);
}

static int w_accumulate(tbackend *be, const tsite *at, ktensor *dst, const ktensor *src)
{
    tap_call c = {.kind = TAP_ACCUMULATE};
    SITE(at);
    c.t[0] = dst, c.t[1] = (ktensor *)src;
    IN("src", src);
    IN("dst", dst);
    OUT("dst", dst);
    return tap_exec(be, &c);
}

/* The gradient norm reads every gradient: they are hashed together as one input. */
static int w_grad_norm(tbackend *be, const tsite *at, tparam *const *params, int n, double *norm)
{
    tap *t = active_tap;
    tap_call c = {.kind = TAP_GRAD_NORM, .params = params, .n_params = n, .out_scalar = norm};
    SITE(at);
    uint64_t h = TTRAIN_FNV_OFFSET;
    int hash = t->pass == PASS_OPS && t->step + (t->after_norm ? 1 : 0) >= t->ops_from;
    for (int i = 0; hash && i < n; i++) {
        size_t len;
        if (tensor_image(t, &params[i]->grad, &t->obuf, &t->obuf_cap, &len)) return -1;
        h = ttrain_fnv1a(h, t->obuf, len);
    }
    IN_RAW("grads", &h, sizeof h);
    c.out_name[0] = "norm";
    c.n_out = 1;
    return tap_exec(be, &c);
}

static void opt_inputs(tap_call *cp, tparam *p)
{
    tap_call c = *cp;
    IN("w", &p->w);
    IN("master", &p->master);
    IN("grad", &p->grad);
    IN("m", &p->m);
    IN("v", &p->v);
    OUT("w", &p->w);
    OUT("master", &p->master);
    OUT("m", &p->m);
    OUT("v", &p->v);
    *cp = c;
}

static int w_adamw(tbackend *be, tparam *p, const tadamw_args *a)
{
    tap_call c = {.kind = TAP_ADAMW, .slot = TSLOT_ADAMW, .layer = p->layer, .param = p, .adamw = a};
    opt_inputs(&c, p);
    double args[8] = {a->lr, a->beta1, a->beta2, a->eps, a->weight_decay, (double)a->step, a->grad_scale,
                      (double)a->seed};
    IN_RAW("args", args, sizeof args);
    return tap_exec(be, &c);
}

static int w_muon(tbackend *be, tparam *p, const tmuon_args *a)
{
    tap_call c = {.kind = TAP_MUON, .slot = TSLOT_MUON, .layer = p->layer, .param = p, .muon = a};
    opt_inputs(&c, p);
    double args[5] = {a->lr, a->momentum, a->weight_decay, a->grad_scale, (double)a->seed};
    IN_RAW("args", args, sizeof args);
    return tap_exec(be, &c);
}

int tap_invoke(tbackend *be, const tbackend *o, const tap_call *c, const tsite *at)
{
    ktensor *const *t = c->t;
    switch (c->kind) {
    case TAP_EMBEDDING_FWD: return o->embedding_fwd(be, t[0], c->ids, t[1], t[2], c->B, c->T);
    case TAP_EMBEDDING_BWD: return o->embedding_bwd(be, t[0], t[1], t[2], c->ids, c->B, c->T);
    case TAP_NORM_FWD: return o->norm_fwd(be, at, t[0], t[1], t[2], t[3], t[4], t[5], c->eps);
    case TAP_NORM_BWD: return o->norm_bwd(be, at, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]);
    case TAP_MATMUL: return o->matmul(be, at, t[0], t[1], c->a_trans, t[2], c->b_trans, c->accumulate);
    case TAP_ATTENTION_FWD: return o->attention_fwd(be, at, t[0], t[1], t[2], t[3], t[4], c->B, c->T, c->H);
    case TAP_ATTENTION_BWD:
        return o->attention_bwd(be, at, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], c->B, c->T, c->H);
    case TAP_ROPE_FWD: return o->rope_fwd(be, at, t[0], t[1], c->B, c->T, c->H, c->theta);
    case TAP_ROPE_BWD: return o->rope_bwd(be, at, t[0], t[1], c->B, c->T, c->H, c->theta);
    case TAP_ACTIVATION_FWD: return o->activation_fwd(be, at, t[0], t[1], t[2]);
    case TAP_ACTIVATION_BWD: return o->activation_bwd(be, at, t[0], t[1], t[2], t[3]);
    case TAP_RESIDUAL: return o->residual(be, at, t[0], t[1], t[2]);
    case TAP_CROSS_ENTROPY:
        return o->cross_entropy(be, at, t[0], t[1], t[2], c->ids, c->softcap, c->has_dloss ? &c->dloss : NULL);
    case TAP_LINEAR_CROSS_ENTROPY:
        return o->linear_cross_entropy(be, at, t[0], t[1], t[2], t[3], t[4], c->ids, c->has_dloss ? &c->dloss : NULL);
    case TAP_TRANSPOSE: return o->transpose(be, at, t[0], t[1], c->accumulate);
    case TAP_ACCUMULATE: return o->accumulate(be, at, t[0], t[1]);
    case TAP_GRAD_NORM: return o->grad_norm(be, at, c->params, c->n_params, c->out_scalar);
    case TAP_ADAMW: return o->adamw(be, c->param, c->adamw);
    case TAP_MUON: return o->muon(be, c->param, c->muon);
    case TAP_COUNT: break;
    }
    return tbackend_fail(be, "trace: unknown op");
}

static int tap_after_init(tmodel *m, void *ctx)
{
    tap *t = ctx;
    if (t->user_after_init && t->user_after_init(m, t->user_ctx)) return 1;
    tbackend *be = tmodel_backend(m);
    t->be = be;
    t->m = m;
    t->orig = *be;
    be->embedding_fwd = w_embedding_fwd;
    be->embedding_bwd = w_embedding_bwd;
    be->norm_fwd = w_norm_fwd;
    be->norm_bwd = w_norm_bwd;
    be->matmul = w_matmul;
    be->attention_fwd = w_attention_fwd;
    be->attention_bwd = w_attention_bwd;
    be->rope_fwd = w_rope_fwd;
    be->rope_bwd = w_rope_bwd;
    be->activation_fwd = w_activation_fwd;
    be->activation_bwd = w_activation_bwd;
    be->residual = w_residual;
    be->cross_entropy = w_cross_entropy;
    be->linear_cross_entropy = w_linear_cross_entropy;
    be->transpose = w_transpose;
    be->accumulate = w_accumulate;
    be->grad_norm = w_grad_norm;
    be->adamw = w_adamw;
    be->muon = w_muon;
    if (t->is_b && t->pass == PASS_OPS) {
        char err[512];
        if (tplan_bind(&t->bind_a, &t->tc->a.plan, t->cfg->model.n_layer, err, sizeof err)) {
            snprintf(t->error, sizeof t->error, "binding A's plan for the replay: %s", err);
            t->failed = 1;
            return 1;
        }
    }
    return 0;
}

/* ---- replay ---------------------------------------------------------------------------------- */

typedef struct {
    const ktensor *orig[TRACE_MAX_IN + TRACE_MAX_OUT + 10];
    ktensor copy[TRACE_MAX_IN + TRACE_MAX_OUT + 10];
    int n;
    void *raw[2];
    tparam param;
} clone_set;

static ktensor *clone_of(clone_set *s, const ktensor *x)
{
    for (int i = 0; i < s->n; i++)
        if (s->orig[i] == x) return &s->copy[i];
    return NULL;
}

static void clones_free(tap *t, clone_set *s)
{
    for (int i = 0; i < s->n; i++)
        if (s->copy[i].data) t->orig.release(t->be, &s->copy[i]);
    for (int i = 0; i < 2; i++)
        if (s->raw[i]) t->orig.release_raw(t->be, s->raw[i]);
    memset(s, 0, sizeof *s);
}

/* The format of c's tensor x in the run that recorded `rec`: an output that
 * is not also an input takes the recorded run's format (A's slot may store
 * it in another than B's); everything else B's. */
static prec_format run_format(const tap_call *c, const trace_op *rec, const ktensor *x)
{
    if (!rec) return x->format;
    for (int i = 0; i < c->n_in; i++)
        if (c->in[i] == x) return x->format;
    for (int i = 0; i < c->n_out && i < rec->n_out; i++)
        if (c->out[i] == x && rec->out_format[i] >= 0) return (prec_format)rec->out_format[i];
    return x->format;
}

/* Fresh tensors for every tensor of c (inputs filled with their recorded
 * images, outputs poisoned, of the formats of the run that recorded `rec`:
 * NULL for B's own) and the call on them in *out. */
static int clone_call(tap *t, const tap_call *c, const trace_op *rec, clone_set *s, tap_call *out)
{
    memset(s, 0, sizeof *s);
    *out = *c;
    for (int i = 0; i < 10; i++) {
        const ktensor *x = c->t[i];
        if (!x || !x->data || clone_of(s, x)) continue;
        s->orig[s->n] = x;
        if (t->orig.alloc(t->be, &s->copy[s->n], run_format(c, rec, x), x->ndim, x->shape)) return -1;
        s->n++;
    }
    if (c->param) {
        const ktensor *parts[5] = {&c->param->w, &c->param->master, &c->param->grad, &c->param->m, &c->param->v};
        for (int i = 0; i < 5; i++) {
            if (!parts[i]->data) continue;
            s->orig[s->n] = parts[i];
            if (t->orig.alloc(t->be, &s->copy[s->n], parts[i]->format, parts[i]->ndim, parts[i]->shape)) return -1;
            s->n++;
        }
        s->param = *c->param;
        ktensor *dst[5] = {&s->param.w, &s->param.master, &s->param.grad, &s->param.m, &s->param.v};
        for (int i = 0; i < 5; i++)
            if (parts[i]->data) *dst[i] = *clone_of(s, parts[i]);
        if (c->param->lowbits) {
            size_t len = (size_t)ktensor_numel(&c->param->w) * sizeof(uint16_t);
            unsigned char *tmp = malloc(len);
            int rc = !tmp || t->orig.alloc_raw(t->be, &s->raw[0], len) ||
                     t->orig.raw_download(t->be, tmp, c->param->lowbits, len) ||
                     t->orig.raw_upload(t->be, s->raw[0], tmp, len);
            free(tmp);
            if (rc) return -1;
            s->param.lowbits = s->raw[0];
        }
        out->param = &s->param;
    }
    if (c->ids) {
        int64_t rows = c->kind == TAP_CROSS_ENTROPY          ? c->t[2]->shape[0]
                       : c->kind == TAP_LINEAR_CROSS_ENTROPY ? c->t[3]->shape[0]
                                                             : (int64_t)c->B * c->T;
        size_t n = (size_t)rows * sizeof(int32_t);
        unsigned char *tmp = malloc(n);
        int rc = !tmp || t->orig.alloc_raw(t->be, &s->raw[1], n) || t->orig.raw_download(t->be, tmp, c->ids, n) ||
                 t->orig.raw_upload(t->be, s->raw[1], tmp, n);
        free(tmp);
        if (rc) return -1;
        out->ids = s->raw[1];
    }
    for (int i = 0; i < 10; i++)
        if (c->t[i] && c->t[i]->data) out->t[i] = clone_of(s, c->t[i]);
    for (int i = 0; i < c->n_in; i++)
        if (c->in[i]) {
            ktensor *x = clone_of(s, c->in[i]);
            if (!x || t->orig.write_bytes(t->be, x, t->img[i])) return -1;
        }
    for (int i = 0; i < c->n_out; i++) out->out[i] = c->out[i] ? clone_of(s, c->out[i]) : NULL;
    return 0;
}

/* Runs the op at A's site (with A's binding in force, for the ops that read
 * theirs from the backend) or B's; the output `which` as doubles (malloc'd)
 * and the hash of its image. */
static int replay_one(tap *t, const tap_call *c, const trace_op *ra, int as_a, int which, double **values,
                      uint64_t *hash, clone_set *s, tap_call *cc)
{
    *values = NULL;
    if (clone_call(t, c, as_a ? ra : NULL, s, cc)) return -1;
    tbinding saved = t->be->bound;
    const tsite *at = c->at;
    if (as_a) {
        t->be->bound = t->bind_a;
        if (at) at = tbinding_site(&t->bind_a, c->slot, c->layer);
    }
    int rc = tap_invoke(t->be, &t->orig, cc, at);
    t->be->bound = saved;
    if (rc || t->orig.sync(t->be)) return -1;
    const ktensor *y = cc->out[which];
    size_t len;
    if (tensor_image(t, y, &t->obuf, &t->obuf_cap, &len)) return -1;
    *hash = ttrain_fnv1a(TTRAIN_FNV_OFFSET, t->obuf, len);
    *values = malloc((size_t)ktensor_numel(y) * sizeof **values + 1);
    if (!*values || t->orig.download(t->be, y, *values)) return -1;
    return 0;
}

/* Distance in units in the last place of format f at the larger of a and b. */
static double ulp_distance(double a, double b, prec_format f)
{
    if (a == b) return 0;
    if (!isfinite(a) || !isfinite(b)) return INFINITY;
    const prec_format_info *fi = prec_format_get(f);
    double m = fmax(fabs(a), fabs(b));
    int e;
    frexp(m, &e); /* m in [2^(e-1), 2^e) */
    double ulp = ldexp(1.0, e - fi->precision);
    if (ulp < fi->min_subnormal) ulp = fi->min_subnormal;
    return fabs(a - b) / ulp;
}

static void describe_site(const tplan *p, const tsite *at, tslot slot, int layer, char *buf, size_t len)
{
    char choice[64] = "";
    if (at && at->desc)
        snprintf(choice, sizeof choice, " %s:%s", kpath_name(at->path), at->desc->variants[at->variant].name);
    (void)p;
    if (layer >= 0) snprintf(buf, len, "%s@%d%s", tslot_get(slot)->name, layer, choice);
    else snprintf(buf, len, "%s%s", tslot_get(slot)->name, choice);
}

/* Why an op gets no MPFR verdict. */
static const char *no_verdict_reason(tap_kind kind)
{
    switch (kind) {
    case TAP_ACTIVATION_FWD:
    case TAP_ACTIVATION_BWD:
        return "trace does not yet describe the backends' activations to kernels/check/compare_activation.h";
    case TAP_RESIDUAL: return "trace does not yet describe the backends' residual to kernels/check/compare_residual.h";
    case TAP_ACCUMULATE: return "gradient accumulation is one rounded addition per element, with no shared comparison yet";
    case TAP_TRANSPOSE: return "a transpose copies (accumulating: adds) elementwise, with no shared comparison yet";
    case TAP_ADAMW: return "trace does not yet describe the backends' adamw to kernels/check/compare_adamw.h";
    case TAP_LINEAR_CROSS_ENTROPY:
        return "the fused head (its GEMMs and cross-entropy in chunks) has no shared comparison yet; `ulpscope check "
               "linear_cross_entropy` checks the kernel";
    default: return "no shared comparison for it yet";
    }
}

/* A tensor's values as doubles (malloc'd; NULL when reading failed). */
static double *values_of(tap *t, const ktensor *x)
{
    double *v = malloc((size_t)ktensor_numel(x) * sizeof *v + 1);
    if (v && t->orig.download(t->be, x, v)) {
        free(v);
        return NULL;
    }
    return v;
}

/* The recorded input `name` of c (its value before the op, also for an
 * output it accumulates into) as doubles, through a fresh tensor; NULL when
 * c has no such input or reading failed. */
static double *recorded_input(tap *t, const tap_call *c, const char *name)
{
    for (int i = 0; i < c->n_in; i++) {
        if (!c->in[i] || strcmp(c->in_name[i], name) != 0) continue;
        const ktensor *x = c->in[i];
        ktensor tmp;
        if (t->orig.alloc(t->be, &tmp, x->format, x->ndim, x->shape)) return NULL;
        double *v = t->orig.write_bytes(t->be, &tmp, t->img[i]) ? NULL : values_of(t, &tmp);
        t->orig.release(t->be, &tmp);
        return v;
    }
    return NULL;
}

/* The MPFR verdict on the replays (trace_verdict.c), or why there is none.
 * ca, cb: the replayed calls (their tensors hold the inputs, and the
 * outputs each replay wrote); ya, yb: the differing output of each. */
static void judge(tap *t, const tap_call *c, const tap_call *ca, const tap_call *cb, const tsite *site_a,
                  const tsite *site_b, const double *ya, const double *yb)
{
    trace_report *r = t->rep;
    const char *backend = t->be->name;
    trace_bug bug = t->tc->bug;
    switch (c->kind) {
    case TAP_MATMUL: {
        /* the inputs as doubles in stored units, from the clones (they still hold them: only y is written) */
        double *a = values_of(t, ca->t[1]), *b = values_of(t, ca->t[2]);
        double *yin = c->accumulate ? recorded_input(t, c, "y") : NULL;
        if (a && b && (yin || !c->accumulate))
            trace_judge_matmul(r, backend, site_a, site_b, c, (prec_format[2]){ca->t[0]->format, cb->t[0]->format}, a,
                               b, yin, ya, yb, bug);
        else snprintf(r->verdict_note, sizeof r->verdict_note, "reading the replay's inputs failed");
        free(a), free(b), free(yin);
        return;
    }
    case TAP_ATTENTION_FWD:
    case TAP_ATTENTION_BWD: {
        /* the inputs from A's clones (only the outputs are written), every output of each replay */
        const int bwd = c->kind == TAP_ATTENTION_BWD, n_out = bwd ? 3 : 2, first_in = bwd ? 3 : 2;
        double *in[6] = {NULL}, *oa[3] = {NULL}, *ob[3] = {NULL};
        int ok = 1;
        for (int i = 0; i < (bwd ? 6 : 3); i++) ok = (in[i] = values_of(t, ca->t[first_in + i])) && ok;
        for (int i = 0; i < n_out; i++) ok = (oa[i] = values_of(t, ca->t[i])) && (ob[i] = values_of(t, cb->t[i])) && ok;
        if (ok) {
            const double *q = bwd ? in[1] : in[0], *k = bwd ? in[2] : in[1], *v = bwd ? in[3] : in[2];
            const double *const out_a[3] = {oa[0], oa[1], oa[2]}, *const out_b[3] = {ob[0], ob[1], ob[2]};
            trace_judge_attention(r, backend, site_a, site_b, c->B, c->T, c->H, ca->t[first_in]->shape[1] / c->H,
                                  q, k, v, bwd ? in[0] : NULL, bwd ? in[4] : NULL, bwd ? in[5] : NULL, out_a, out_b,
                                  bug);
        } else snprintf(r->verdict_note, sizeof r->verdict_note, "reading the replay's inputs failed");
        for (int i = 0; i < 6; i++) free(in[i]);
        for (int i = 0; i < 3; i++) free(oa[i]), free(ob[i]);
        return;
    }
    case TAP_NORM_FWD:
    case TAP_NORM_BWD: {
        /* the inputs from A's clones (only the outputs are written), every output of each replay; dgain and
         * dbias add into the gradients: judged only where those were zero (their recorded values) */
        const int bwd = c->kind == TAP_NORM_BWD;
        const ktensor *X = ca->t[bwd ? 4 : 3];
        trace_norm_data d = {X->shape[0], X->shape[1], bwd ? t->cfg->model.norm_eps : c->eps, NULL, NULL, NULL,
                             NULL, NULL, NULL, {{NULL}}, 0};
        double *in[5] = {NULL}, *out[2][3] = {{NULL}};
        int ok = 1;
        for (int i = 0; i < (bwd ? 5 : 3); i++) {
            const ktensor *x = ca->t[3 + i];
            if (x && x->data) ok = (in[i] = values_of(t, x)) && ok;
        }
        for (int o = 0; o < 3; o++) {
            const ktensor *ya_t = ca->t[o], *yb_t = cb->t[o];
            if (!ya_t || !ya_t->data) continue;
            if (bwd && o > 0) {
                double *before = recorded_input(t, c, o == 1 ? "dgain" : "dbias");
                int zero = before != NULL;
                for (int64_t i = 0; zero && i < ktensor_numel(ya_t); i++) zero = before[i] == 0;
                ok = before && ok;
                free(before);
                if (!zero) {
                    d.accumulated_grads = 1;
                    continue;
                }
            }
            ok = (out[0][o] = values_of(t, ya_t)) && (out[1][o] = values_of(t, yb_t)) && ok;
        }
        if (ok) {
            if (bwd) d.dy = in[0], d.x = in[1], d.gain = in[2], d.mean = in[3], d.rstd = in[4];
            else d.x = in[0], d.gain = in[1], d.bias = in[2];
            for (int side = 0; side < 2; side++)
                for (int o = 0; o < 3; o++) d.out[side][o] = out[side][o];
            trace_judge_norm(r, backend, site_a, site_b, &d, bug);
        } else snprintf(r->verdict_note, sizeof r->verdict_note, "reading the replay's inputs failed");
        for (int i = 0; i < 5; i++) free(in[i]);
        for (int o = 0; o < 3; o++) free(out[0][o]), free(out[1][o]);
        return;
    }
    case TAP_CROSS_ENTROPY: {
        /* the logits from A's clone; the targets as recorded (host copy) */
        const ktensor *L = ca->t[2];
        const int32_t *targets = NULL;
        for (int i = 0; i < c->n_in; i++)
            if (!c->in[i] && strcmp(c->in_name[i], "targets") == 0) targets = c->in_raw[i];
        double *logits = values_of(t, L), *oa[2] = {NULL}, *ob[2] = {NULL};
        int ok = logits && targets;
        for (int o = 0; o < (c->has_dloss ? 2 : 1); o++)
            ok = (oa[o] = values_of(t, ca->t[o])) && (ob[o] = values_of(t, cb->t[o])) && ok;
        if (ok) {
            const double *const out_a[2] = {oa[0], oa[1]}, *const out_b[2] = {ob[0], ob[1]};
            trace_judge_cross_entropy(r, backend, site_a, site_b, L->shape[0], L->shape[1], logits, targets,
                                      c->softcap, c->has_dloss ? &c->dloss : NULL, out_a, out_b, bug);
        } else snprintf(r->verdict_note, sizeof r->verdict_note, "reading the replay's inputs failed");
        free(logits);
        for (int o = 0; o < 2; o++) free(oa[o]), free(ob[o]);
        return;
    }
    case TAP_ROPE_FWD:
    case TAP_ROPE_BWD: {
        /* the input from A's clone (only the output is written) */
        double *x = values_of(t, ca->t[1]), *oa = values_of(t, ca->t[0]), *ob = values_of(t, cb->t[0]);
        if (x && oa && ob)
            trace_judge_rope(r, backend, site_a, site_b, c->B, c->T, c->H, ca->t[1]->shape[1], c->theta,
                             c->kind == TAP_ROPE_BWD, x, oa, ob, bug);
        else snprintf(r->verdict_note, sizeof r->verdict_note, "reading the replay's inputs failed");
        free(x), free(oa), free(ob);
        return;
    }
    case TAP_MUON: {
        /* the gradient is only read; the momentum before the op is the recorded one */
        double *grad = values_of(t, &ca->param->grad), *m_before = recorded_input(t, c, "m");
        double *m_after = values_of(t, &ca->param->m);
        if (grad && m_before && m_after)
            trace_judge_muon(r, backend, site_a, site_b, c->param, grad, m_before, m_after, c->muon, bug);
        else snprintf(r->verdict_note, sizeof r->verdict_note, "reading the replay's inputs failed");
        free(grad), free(m_before), free(m_after);
        return;
    }
    default: break;
    }
    (void)cb;
    snprintf(r->verdict_note, sizeof r->verdict_note, "no verdict for %s: %s", kind_names[c->kind],
             no_verdict_reason(c->kind));
}

static void replay(tap *t, const tap_call *c, const trace_op *ra, const trace_op *rb)
{
    trace_report *r = t->rep;
    int which = r->out_index;
    const tsite *site_b = c->at ? c->at : tbackend_site(t->be, c->slot, c->layer);
    const tsite *site_a = tbinding_site(&t->bind_a, c->slot, c->layer);
    describe_site(&t->tc->a.plan, site_a, c->slot, c->layer, r->site_a, sizeof r->site_a);
    describe_site(&t->tc->b.plan, site_b, c->slot, c->layer, r->site_b, sizeof r->site_b);
    if (c->kind == TAP_EMBEDDING_FWD || c->kind == TAP_EMBEDDING_BWD || c->kind == TAP_GRAD_NORM || !c->out[which]) {
        snprintf(r->verdict_note, sizeof r->verdict_note, "no replay for %s", kind_names[c->kind]);
        return;
    }
    clone_set sa, sb;
    tap_call ca, cb;
    double *ya = NULL, *yb = NULL;
    uint64_t ha = 0, hb = 0;
    int rc = replay_one(t, c, ra, 1, which, &ya, &ha, &sa, &ca);
    if (!rc) rc = replay_one(t, c, ra, 0, which, &yb, &hb, &sb, &cb);
    if (rc) {
        snprintf(r->verdict_note, sizeof r->verdict_note, "replay failed: %s", tbackend_error(t->be));
        free(ya), free(yb);
        clones_free(t, &sa), clones_free(t, &sb);
        return;
    }
    r->replayed = 1;
    r->replay_a_exact = ha == ra->out_hash[which];
    r->replay_b_exact = hb == rb->out_hash[which];
    const ktensor *y = c->out[which];
    /* ulps of the coarser of the two outputs' formats */
    const prec_format fa = ca.out[which]->format, fb = cb.out[which]->format;
    const prec_format f_ulp = prec_format_get(fa)->precision < prec_format_get(fb)->precision ? fa : fb;
    r->n_elems = (long)ktensor_numel(y);
    r->max_ulps = 0;
    for (long i = 0; i < r->n_elems; i++) {
        if (memcmp(&ya[i], &yb[i], sizeof ya[i]) == 0) continue;
        double d = ulp_distance(ya[i], yb[i], f_ulp);
        r->max_ulps = fmax(r->max_ulps, d);
        if (r->n_diffs < TRACE_MAX_DIFFS) {
            r->diff_index[r->n_diffs] = i;
            r->diff_a[r->n_diffs] = ya[i];
            r->diff_b[r->n_diffs] = yb[i];
            r->diff_ulps[r->n_diffs++] = d;
        }
        r->n_differing++;
    }
    judge(t, c, &ca, &cb, site_a, site_b, ya, yb);
    free(ya), free(yb);
    clones_free(t, &sa), clones_free(t, &sb);
}

/* ---- runs ----------------------------------------------------------------------------------- */

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void tap_free(tap *t)
{
    free(t->site_calls);
    free(t->state_hash);
    free(t->ops);
    for (int i = 0; i < TRACE_MAX_IN; i++) free(t->img[i]);
    free(t->obuf);
    tbinding_free(&t->bind_a);
}

/* One run of cfg with tap t; res is freed by the caller.  0 or a status. */
static int tapped_run(const trace_config *tc, const ttrain_config *cfg, tap *t, long stop_after, ttrain_result *res,
                      char *err, size_t errlen)
{
    ttrain_config run = *cfg;
    run.log_path = NULL;
    run.progress = NULL;
    run.ckpt_path = NULL;
    run.resume_path = NULL;
    run.dump_dir = NULL;
    memset(run.hash_slot, 0, sizeof run.hash_slot);
    memset(run.dump_slot, 0, sizeof run.dump_slot);
    run.n_at_steps = 0;
    run.val_every = 0; /* validation only after the last step: it never falls between two steps' ops */
    run.stop_after = stop_after;
    t->user_after_init = cfg->after_init;
    t->user_ctx = cfg->after_init_ctx;
    run.after_init = tap_after_init;
    run.after_init_ctx = t;
    t->cfg = &run;
    t->tc = tc;
    t->step = 0;
    t->micro = -1;
    t->site_calls = calloc((size_t)TSLOT_COUNT * (run.model.n_layer + 1), sizeof *t->site_calls);
    int states = t->pass == PASS_STATES || t->record_states;
    if (states) t->state_hash = calloc((size_t)run.steps + 1, sizeof *t->state_hash);
    if (!t->site_calls || (states && !t->state_hash)) {
        snprintf(err, errlen, "out of memory");
        return 1;
    }
    active_tap = t;
    if (tc) kernels_set_planted_bug(tc->planted); /* recording (no tc) keeps the caller's */
    double t0 = now_seconds();
    int rc = ttrain_run(&run, res);
    if (tc) kernels_set_planted_bug(KBUG_NONE);
    active_tap = NULL;
    if (!rc && states) t->state_hash[run.steps] = res->param_hash;
    if (tc && tc->progress)
        fprintf(tc->progress, "trace: run %s (%s) %ld steps, %.1f s\n", t->is_b ? "B" : "A",
                t->pass == PASS_STATES ? "state hashes" : "op hashes", res->steps_done, now_seconds() - t0);
    if (t->failed) {
        snprintf(err, errlen, "%s", t->error);
        return rc ? rc : 1;
    }
    if (rc) snprintf(err, errlen, "run %s: %s", t->is_b ? "B" : "A", res->error);
    return rc;
}

int trace_run(const trace_config *c, trace_report *r, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    double t0 = now_seconds();
    if (c->a.seed != c->b.seed || c->a.data_seed != c->b.data_seed) {
        snprintf(err, errlen, "the two configurations must start from the same seed");
        return 2;
    }
    if (c->a.steps != c->b.steps || c->a.model.n_layer != c->b.model.n_layer) {
        snprintf(err, errlen, "the two configurations must train the same model for the same steps");
        return 2;
    }
    if (c->amplify_steps < 1 || c->amplify_elems < 1) {
        snprintf(err, errlen, "amplification needs at least one step and one element");
        return 2;
    }
    long steps = c->a.steps;
    int depth = c->a.model.n_layer;
    r->steps = steps;
    r->part_step = -1;
    r->loss_a = malloc((size_t)steps * sizeof *r->loss_a);
    r->loss_b = malloc((size_t)steps * sizeof *r->loss_b);
    if (!r->loss_a || !r->loss_b) {
        snprintf(err, errlen, "out of memory");
        return 1;
    }
    /* pass 1: state hashes and losses */
    tap ta, tb;
    memset(&ta, 0, sizeof ta);
    memset(&tb, 0, sizeof tb);
    tb.is_b = 1;
    ttrain_result res_a, res_b;
    int rc = tapped_run(c, &c->a, &ta, 0, &res_a, err, errlen);
    if (!rc) rc = tapped_run(c, &c->b, &tb, 0, &res_b, err, errlen);
    r->runs += 2;
    if (!rc) {
        for (long s = 0; s < steps; s++) {
            r->loss_a[s] = res_a.loss[s];
            r->loss_b[s] = res_b.loss[s];
        }
        for (long s = 0; s < steps && r->part_step < 0; s++) {
            if (ta.state_hash[s] != tb.state_hash[s]) r->part_step = s > 0 ? s - 1 : 0; /* s == 0: the initial states */
            else if (memcmp(&r->loss_a[s], &r->loss_b[s], sizeof(double)) != 0 ||
                     ta.state_hash[s + 1] != tb.state_hash[s + 1])
                r->part_step = s;
        }
        r->identical = r->part_step < 0;
    }
    ttrain_result_free(&res_a);
    ttrain_result_free(&res_b);
    tap_free(&ta);
    tap_free(&tb);
    if (rc || r->identical) {
        r->seconds = now_seconds() - t0;
        return rc;
    }
    /* pass 2: op hashes of the parting step, amplification from it */
    long amp_end = r->part_step + c->amplify_steps;
    if (amp_end > steps) amp_end = steps;
    r->amp_steps = (int)(amp_end - r->part_step);
    r->amp_layers = depth;
    size_t cells = (size_t)r->amp_steps * depth;
    r->amp_max_rel = calloc(cells ? cells : 1, sizeof *r->amp_max_rel);
    r->amp_rms_rel = calloc(cells ? cells : 1, sizeof *r->amp_rms_rel);
    double *amp = malloc(cells * (size_t)c->amplify_elems * sizeof *amp + 1);
    if (!r->amp_max_rel || !r->amp_rms_rel || !amp) {
        free(amp);
        snprintf(err, errlen, "out of memory for the amplification table (lower --amplify-elems)");
        return 1;
    }
    for (size_t i = 0; i < cells; i++) r->amp_max_rel[i] = r->amp_rms_rel[i] = NAN;
    memset(&ta, 0, sizeof ta);
    memset(&tb, 0, sizeof tb);
    ta.pass = tb.pass = PASS_OPS;
    tb.is_b = 1;
    ta.ops_from = tb.ops_from = r->part_step;
    ta.ops_to = tb.ops_to = r->part_step + 1;
    ta.amp_from = tb.amp_from = r->part_step;
    ta.amp = tb.amp = amp;
    ta.amp_steps = tb.amp_steps = r->amp_steps;
    tb.rep = r;
    rc = tapped_run(c, &c->a, &ta, amp_end, &res_a, err, errlen);
    ttrain_result_free(&res_a);
    if (!rc) {
        tb.ref = ta.ops;
        tb.n_ref = ta.n_ops;
        rc = tapped_run(c, &c->b, &tb, amp_end, &res_b, err, errlen);
        ttrain_result_free(&res_b);
    }
    r->runs += 2;
    free(amp);
    tap_free(&ta);
    tap_free(&tb);
    r->seconds = now_seconds() - t0;
    return rc;
}

void trace_report_free(trace_report *r)
{
    free(r->amp_max_rel);
    free(r->amp_rms_rel);
    free(r->loss_a);
    free(r->loss_b);
    memset(r, 0, sizeof *r);
}

/* ---- output -------------------------------------------------------------------------------- */

static void op_key(const trace_op *o, char *buf, size_t len)
{
    char micro[16];
    if (o->micro < 0) snprintf(micro, sizeof micro, "after");
    else snprintf(micro, sizeof micro, "%d", o->micro);
    const char *slot = o->slot >= 0 && o->slot < TSLOT_COUNT ? tslot_get((tslot)o->slot)->name : "?";
    if (o->layer >= 0)
        snprintf(buf, len, "step %ld, micro-batch %s, layer %d, slot %s (%s call %d)", o->step, micro, o->layer, slot,
                 o->op, o->call);
    else snprintf(buf, len, "step %ld, micro-batch %s, slot %s (%s call %d)", o->step, micro, slot, o->op, o->call);
}

/* "12 elements over" (matmul), "at x3 block 1; 2 outputs over" (the others). */
static const char *over_text(const trace_judgement *j, char *buf, size_t len)
{
    if (j->worst_output[0]) snprintf(buf, len, "at %s; %ld output%s over", j->worst_output, j->over, j->over == 1 ? "" : "s");
    else snprintf(buf, len, "%ld elements over", j->over);
    return buf;
}

const char *trace_verdict_line(const trace_report *r, char *buf, size_t len)
{
    char over[96];
    switch (r->verdict) {
    case TRACE_VERDICT_CHAOS:
        snprintf(buf, len, "both within their bounds (A %.3g, B %.3g of the bound): a legitimate reordering (chaos)",
                 r->judge[0].ratio, r->judge[1].ratio);
        break;
    case TRACE_VERDICT_BUG_A:
        snprintf(buf, len, "A exceeds its bound by %.3gx (%s): a precision bug in A", r->judge[0].ratio,
                 over_text(&r->judge[0], over, sizeof over));
        break;
    case TRACE_VERDICT_BUG_B:
        snprintf(buf, len, "B exceeds its bound by %.3gx (%s): a precision bug in B", r->judge[1].ratio,
                 over_text(&r->judge[1], over, sizeof over));
        break;
    case TRACE_VERDICT_BUG_BOTH:
        snprintf(buf, len, "both exceed their bounds (A %.3gx, B %.3gx): precision bugs in A and in B",
                 r->judge[0].ratio, r->judge[1].ratio);
        break;
    case TRACE_VERDICT_NONE:
        /* the notes of the ops without a verdict say so themselves ("no verdict for rope_fwd: ...") */
        if (strncmp(r->verdict_note, "no verdict", 10) == 0) snprintf(buf, len, "%s", r->verdict_note);
        else snprintf(buf, len, "no verdict: %s", r->verdict_note[0] ? r->verdict_note : "-");
        break;
    }
    return buf;
}

void trace_print(FILE *fp, const trace_config *c, const trace_report *r)
{
    (void)c;
    char key[256], line[512];
    if (r->identical) {
        fprintf(fp, "trace: the runs are bit-identical over %ld steps (every step's state and loss)\n", r->steps);
        return;
    }
    fprintf(fp, "trace: the runs part in step %ld\n", r->part_step);
    if (!r->located) {
        if (r->op_b.op[0]) {
            op_key(&r->op_b, key, sizeof key);
            fprintf(fp, "  no op has bit-identical inputs and different outputs: the first differing one, %s,\n"
                        "  already read different inputs (the states differed before it: initialisation or storage)\n",
                    key);
        } else fprintf(fp, "  no op call of that step differs (the difference is outside the traced ops)\n");
    } else {
        op_key(&r->op_b, key, sizeof key);
        fprintf(fp, "  first op with bit-identical inputs and different outputs:\n    %s, tensor %s\n", key,
                r->op_b.out_name[r->out_index]);
        if (r->site_a[0]) fprintf(fp, "    A runs %s; B runs %s\n", r->site_a, r->site_b);
        if (r->replayed) {
            fprintf(fp, "  replay of the recorded inputs: A's kernel %s its run's output, B's %s\n",
                    r->replay_a_exact ? "reproduces" : "DOES NOT reproduce",
                    r->replay_b_exact ? "reproduces" : "DOES NOT reproduce");
            fprintf(fp, "    %ld of %ld elements differ, at most %.3g ulp apart; first ones:\n", r->n_differing,
                    r->n_elems, r->max_ulps);
            for (int i = 0; i < r->n_diffs; i++)
                fprintf(fp, "      [%ld] A %.9g  B %.9g  (%.3g ulp)\n", r->diff_index[i], r->diff_a[i], r->diff_b[i],
                        r->diff_ulps[i]);
            if (r->verdict != TRACE_VERDICT_NONE)
                for (int k = 0; k < 2; k++)
                    fprintf(fp, "    %s vs MPFR: worst element [%ld]%s%s error %.3g u, bound %.3g u (%.3g of the bound)\n",
                            k ? "B" : "A", r->judge[k].worst, r->judge[k].worst_output[0] ? " of " : "",
                            r->judge[k].worst_output, r->judge[k].err_u, r->judge[k].bound_u, r->judge[k].ratio);
        }
        fprintf(fp, "  verdict: %s\n", trace_verdict_line(r, line, sizeof line));
        if (r->verdict != TRACE_VERDICT_NONE && r->verdict_note[0]) fprintf(fp, "    (%s)\n", r->verdict_note);
    }
    if (r->amp_steps > 0) {
        fprintf(fp, "  amplification (layer outputs, first micro-batch: max / RMS relative difference; loss B - A):\n");
        fprintf(fp, "    %6s", "step");
        for (int l = 0; l < r->amp_layers; l++) fprintf(fp, "  %-19s", (snprintf(line, sizeof line, "layer %d", l), line));
        fprintf(fp, "  %s\n", "loss diff");
        for (int k = 0; k < r->amp_steps; k++) {
            long s = r->part_step + k;
            fprintf(fp, "    %6ld", s);
            for (int l = 0; l < r->amp_layers; l++) {
                size_t i = (size_t)k * r->amp_layers + l;
                fprintf(fp, "  %9.3g %9.3g", r->amp_max_rel[i], r->amp_rms_rel[i]);
            }
            fprintf(fp, "  %+.3g\n", r->loss_b[s] - r->loss_a[s]);
        }
    }
    fprintf(fp, "  (%d runs, %.1f s)\n", r->runs, r->seconds);
}

/* ---- recording (the file format is trace_file.c's) ------------------------------------------- */

int trace_record_run(const ttrain_config *cfg, long op_steps, FILE *fp, uint64_t **state_hash, double **loss,
                     char *err, size_t errlen)
{
    tap t;
    memset(&t, 0, sizeof t);
    t.pass = PASS_OPS;
    t.ops_from = 0;
    t.ops_to = op_steps > 0 ? op_steps : cfg->steps;
    t.rec = fp;
    /* the state hashes come from a states pass of the same run: ops and states
     * are hashed in one run here, so the tap hashes states too */
    t.record_states = 1;
    ttrain_result res;
    int rc = tapped_run(NULL, cfg, &t, 0, &res, err, errlen);
    if (!rc) {
        *state_hash = t.state_hash;
        t.state_hash = NULL;
        *loss = malloc((size_t)cfg->steps * sizeof **loss + 1);
        if (!*loss) rc = 1;
        for (long s = 0; !rc && s < cfg->steps; s++) (*loss)[s] = res.loss[s];
    }
    ttrain_result_free(&res);
    tap_free(&t);
    return rc;
}
