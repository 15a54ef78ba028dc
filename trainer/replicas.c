/* trainer/replicas.c — R runs through one backend (backend.h, "Replicas").
 *
 * tbackend_set_replicas keeps the backend's own ops in be->one and installs
 * loops in their place: replica r's call is the single-replica op on the
 * replica's slices, so every backend runs replicas with the bits of single
 * runs by construction (the CPU backend runs them this way).  A backend with
 * batched forms (batch_replicas) then replaces the loops it can do in one
 * launch; those forms carry the same bit-for-bit promise (their own tests).
 * A call on tensors that are not replicated (slices) goes straight to the
 * single op. */
#include "trainer/backend.h"

#include <stdlib.h>
#include <string.h>

int64_t tbackend_replica_stride(const tbackend *be, prec_format f, int64_t n)
{
    const int64_t align = 256;
    int64_t eb = (int64_t)be->elem_bytes(f);
    int64_t bytes = (n * eb + align - 1) / align * align;
    return bytes / eb;
}

ktensor tbackend_slice(const tbackend *be, const ktensor *t, int r)
{
    ktensor s = *t;
    if (!t->data || !t->replica_stride) return s;
    s.data = (char *)t->data + (size_t)(r * t->replica_stride) * be->elem_bytes(t->format);
    s.replica_stride = 0;
    return s;
}

tparam tbackend_param_slice(const tbackend *be, const tparam *p, int r)
{
    tparam s = *p;
    s.w = tbackend_slice(be, &p->w, r);
    s.master = tbackend_slice(be, &p->master, r);
    s.grad = tbackend_slice(be, &p->grad, r);
    s.m = tbackend_slice(be, &p->m, r);
    s.v = tbackend_slice(be, &p->v, r);
    /* the model lays the 16 low bits out at the working copy's stride */
    if (p->lowbits && p->w.replica_stride) s.lowbits = (uint16_t *)p->lowbits + (size_t)(r * p->w.replica_stride);
    return s;
}

/* Replica r's slice of t in *buf (NULL stays NULL). */
static ktensor *sl(const tbackend *be, const ktensor *t, int r, ktensor *buf)
{
    if (!t) return NULL;
    *buf = tbackend_slice(be, t, r);
    return buf;
}

static int replicated(const ktensor *t) { return t && t->data && t->replica_stride > 0; }

/* ---- memory ------------------------------------------------------------------------------- */

static int rep_alloc(tbackend *be, ktensor *t, prec_format f, int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    int64_t stride = tbackend_replica_stride(be, f, n);
    int64_t flat = stride * be->replicas;
    if (be->one->alloc(be, t, f, 1, &flat)) return -1;
    if (t->scale) {
        be->one->release(be, t);
        return tbackend_fail(be, "replicas: tensors with a per-tensor scale are not replicated");
    }
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->replica_stride = stride;
    return 0;
}

static void rep_release(tbackend *be, ktensor *t)
{
    if (replicated(t)) {
        t->ndim = 1;
        t->shape[0] = t->replica_stride * be->replicas;
        t->replica_stride = 0;
    }
    be->one->release(be, t);
}

static int rep_upload(tbackend *be, ktensor *t, const double *values)
{
    if (!replicated(t)) return be->one->upload(be, t, values);
    int64_t n = ktensor_numel(t);
    for (int r = 0; r < be->replicas; r++) {
        ktensor s = tbackend_slice(be, t, r);
        if (be->one->upload(be, &s, values + r * n)) return -1;
    }
    return 0;
}

static int rep_download(tbackend *be, const ktensor *t, double *values)
{
    if (!replicated(t)) return be->one->download(be, t, values);
    int64_t n = ktensor_numel(t);
    for (int r = 0; r < be->replicas; r++) {
        ktensor s = tbackend_slice(be, t, r);
        if (be->one->download(be, &s, values + r * n)) return -1;
    }
    return 0;
}

static int rep_read_bytes(tbackend *be, const ktensor *t, void *dst)
{
    if (!replicated(t)) return be->one->read_bytes(be, t, dst);
    for (int r = 0; r < be->replicas; r++) {
        ktensor s = tbackend_slice(be, t, r);
        if (be->one->read_bytes(be, &s, (char *)dst + (size_t)r * tensor_image_bytes(&s))) return -1;
    }
    return 0;
}

static int rep_write_bytes(tbackend *be, ktensor *t, const void *src)
{
    if (!replicated(t)) return be->one->write_bytes(be, t, src);
    for (int r = 0; r < be->replicas; r++) {
        ktensor s = tbackend_slice(be, t, r);
        if (be->one->write_bytes(be, &s, (const char *)src + (size_t)r * tensor_image_bytes(&s))) return -1;
    }
    return 0;
}

/* A replicated tensor is one flat allocation of R strides (rep_alloc, no
 * scale): zeroed in one call, the padding between replicas with it.  One
 * call per replica took 8.9 ms a step at R = 64 on an H100 (3500 memsets). */
static int rep_zero(tbackend *be, ktensor *t)
{
    if (!replicated(t)) return be->one->zero(be, t);
    ktensor flat = tbackend_slice(be, t, 0);
    flat.ndim = 1;
    flat.shape[0] = t->replica_stride * be->replicas;
    return be->one->zero(be, &flat);
}

static int rep_fill_uniform(tbackend *be, ktensor *t, uint64_t seed, float lo, float hi)
{
    if (!replicated(t)) return be->one->fill_uniform(be, t, seed, lo, hi);
    for (int r = 0; r < be->replicas; r++) {
        ktensor s = tbackend_slice(be, t, r);
        if (be->one->fill_uniform(be, &s, seed + (uint64_t)r, lo, hi)) return -1;
    }
    return 0;
}

static int rep_count_nonfinite(tbackend *be, const ktensor *t, int64_t *count)
{
    if (!replicated(t)) return be->one->count_nonfinite(be, t, count);
    *count = 0;
    for (int r = 0; r < be->replicas; r++) {
        ktensor s = tbackend_slice(be, t, r);
        int64_t c = 0;
        if (be->one->count_nonfinite(be, &s, &c)) return -1;
        *count += c;
    }
    return 0;
}

/* ---- ops: replica r's call on replica r's slices -------------------------------------------- */

#define EACH_REPLICA(ref, single_call, replica_call)                                                          \
    do {                                                                                                     \
        if (!replicated(ref)) return single_call;                                                            \
        for (int r = 0; r < be->replicas; r++) {                                                             \
            ktensor b0, b1, b2, b3, b4, b5, b6, b7, b8, b9;                                                  \
            (void)b0, (void)b1, (void)b2, (void)b3, (void)b4, (void)b5, (void)b6, (void)b7, (void)b8, (void)b9; \
            if (replica_call) return -1;                                                                     \
        }                                                                                                    \
        return 0;                                                                                            \
    } while (0)
#define S(i, t) sl(be, (t), r, &b##i)

static int rep_embedding_fwd(tbackend *be, ktensor *x, const int32_t *tokens, const ktensor *wte, const ktensor *wpe,
                             int B, int T)
{
    EACH_REPLICA(x, be->one->embedding_fwd(be, x, tokens, wte, wpe, B, T),
                 be->one->embedding_fwd(be, S(0, x), tokens + (size_t)r * B * T, S(1, wte), S(2, wpe), B, T));
}

static int rep_embedding_bwd(tbackend *be, ktensor *dwte, ktensor *dwpe, const ktensor *dx, const int32_t *tokens,
                             int B, int T)
{
    EACH_REPLICA(dx, be->one->embedding_bwd(be, dwte, dwpe, dx, tokens, B, T),
                 be->one->embedding_bwd(be, S(0, dwte), S(1, dwpe), S(2, dx), tokens + (size_t)r * B * T, B, T));
}

static int rep_norm_fwd(tbackend *be, const tsite *at, ktensor *y, ktensor *mean, ktensor *rstd, const ktensor *x,
                        const ktensor *gain, const ktensor *bias, double eps)
{
    EACH_REPLICA(y, be->one->norm_fwd(be, at, y, mean, rstd, x, gain, bias, eps),
                 be->one->norm_fwd(be, at, S(0, y), S(1, mean), S(2, rstd), S(3, x), S(4, gain), S(5, bias), eps));
}

static int rep_norm_bwd(tbackend *be, const tsite *at, ktensor *dx, ktensor *dgain, ktensor *dbias, const ktensor *dy,
                        const ktensor *x, const ktensor *gain, const ktensor *mean, const ktensor *rstd)
{
    EACH_REPLICA(dx, be->one->norm_bwd(be, at, dx, dgain, dbias, dy, x, gain, mean, rstd),
                 be->one->norm_bwd(be, at, S(0, dx), S(1, dgain), S(2, dbias), S(3, dy), S(4, x), S(5, gain),
                                   S(6, mean), S(7, rstd)));
}

/* The only loop that says which replica runs: fp8 GEMMs keep per-replica
 * state (amax histories, cached weight images). */
static int rep_matmul(tbackend *be, const tsite *at, ktensor *y, const ktensor *a, int a_trans, const ktensor *b,
                      int b_trans, int accumulate)
{
    if (!replicated(y)) return be->one->matmul(be, at, y, a, a_trans, b, b_trans, accumulate);
    int rc = 0;
    for (int r = 0; r < be->replicas && !rc; r++) {
        ktensor b0, b1, b2;
        be->replica_now = r;
        rc = be->one->matmul(be, at, sl(be, y, r, &b0), sl(be, a, r, &b1), a_trans, sl(be, b, r, &b2), b_trans,
                             accumulate);
    }
    be->replica_now = 0;
    return rc ? -1 : 0;
}

static int rep_attention_fwd(tbackend *be, const tsite *at, ktensor *y, ktensor *lse, const ktensor *q,
                             const ktensor *k, const ktensor *v, int B, int T, int H)
{
    EACH_REPLICA(y, be->one->attention_fwd(be, at, y, lse, q, k, v, B, T, H),
                 be->one->attention_fwd(be, at, S(0, y), S(1, lse), S(2, q), S(3, k), S(4, v), B, T, H));
}

static int rep_attention_bwd(tbackend *be, const tsite *at, ktensor *dq, ktensor *dk, ktensor *dv, const ktensor *dy,
                             const ktensor *q, const ktensor *k, const ktensor *v, const ktensor *y,
                             const ktensor *lse, int B, int T, int H)
{
    EACH_REPLICA(dq, be->one->attention_bwd(be, at, dq, dk, dv, dy, q, k, v, y, lse, B, T, H),
                 be->one->attention_bwd(be, at, S(0, dq), S(1, dk), S(2, dv), S(3, dy), S(4, q), S(5, k), S(6, v),
                                        S(7, y), S(8, lse), B, T, H));
}

static int rep_rope_fwd(tbackend *be, const tsite *at, ktensor *y, const ktensor *x, int B, int T, int H, double theta)
{
    EACH_REPLICA(y, be->one->rope_fwd(be, at, y, x, B, T, H, theta),
                 be->one->rope_fwd(be, at, S(0, y), S(1, x), B, T, H, theta));
}

static int rep_rope_bwd(tbackend *be, const tsite *at, ktensor *dx, const ktensor *dy, int B, int T, int H,
                        double theta)
{
    EACH_REPLICA(dx, be->one->rope_bwd(be, at, dx, dy, B, T, H, theta),
                 be->one->rope_bwd(be, at, S(0, dx), S(1, dy), B, T, H, theta));
}

static int rep_activation_fwd(tbackend *be, const tsite *at, ktensor *y, ktensor *g, const ktensor *x)
{
    EACH_REPLICA(y, be->one->activation_fwd(be, at, y, g, x),
                 be->one->activation_fwd(be, at, S(0, y), S(1, g), S(2, x)));
}

static int rep_activation_bwd(tbackend *be, const tsite *at, ktensor *dx, const ktensor *dy, const ktensor *x,
                              const ktensor *g)
{
    EACH_REPLICA(dx, be->one->activation_bwd(be, at, dx, dy, x, g),
                 be->one->activation_bwd(be, at, S(0, dx), S(1, dy), S(2, x), S(3, g)));
}

static int rep_residual(tbackend *be, const tsite *at, ktensor *y, const ktensor *a, const ktensor *b)
{
    EACH_REPLICA(y, be->one->residual(be, at, y, a, b), be->one->residual(be, at, S(0, y), S(1, a), S(2, b)));
}

static int rep_cross_entropy(tbackend *be, const tsite *at, ktensor *losses, ktensor *dlogits, const ktensor *logits,
                             const int32_t *targets, double softcap, const double *dloss)
{
    size_t rows = (size_t)logits->shape[0];
    EACH_REPLICA(losses, be->one->cross_entropy(be, at, losses, dlogits, logits, targets, softcap, dloss),
                 be->one->cross_entropy(be, at, S(0, losses), S(1, dlogits), S(2, logits), targets + r * rows,
                                        softcap, dloss ? dloss + r : NULL));
}

/* klinear_ce multiplies by one W: a call per replica (kernels/cross_entropy.h) */
static int rep_linear_cross_entropy(tbackend *be, const tsite *at, ktensor *losses, ktensor *dh, ktensor *dW,
                                    const ktensor *h, const ktensor *W, const int32_t *targets, const double *dloss)
{
    size_t rows = (size_t)h->shape[0];
    EACH_REPLICA(losses, be->one->linear_cross_entropy(be, at, losses, dh, dW, h, W, targets, dloss),
                 be->one->linear_cross_entropy(be, at, S(0, losses), S(1, dh), S(2, dW), S(3, h), S(4, W),
                                               targets + r * rows, dloss ? dloss + r : NULL));
}

static int rep_transpose(tbackend *be, const tsite *at, ktensor *out, const ktensor *in, int accumulate)
{
    EACH_REPLICA(out, be->one->transpose(be, at, out, in, accumulate),
                 be->one->transpose(be, at, S(0, out), S(1, in), accumulate));
}

static int rep_accumulate(tbackend *be, const tsite *at, ktensor *dst, const ktensor *src)
{
    EACH_REPLICA(dst, be->one->accumulate(be, at, dst, src), be->one->accumulate(be, at, S(0, dst), S(1, src)));
}

#undef S
#undef EACH_REPLICA

static int rep_concat_columns(tbackend *be, ktensor *y, const ktensor *const *x, int n)
{
    if (!replicated(y) || n < 1 || n > 4) return be->one->concat_columns(be, y, x, n);
    for (int r = 0; r < be->replicas; r++) {
        ktensor ys = tbackend_slice(be, y, r), parts[4];
        const ktensor *ptrs[4];
        for (int i = 0; i < n; i++) {
            parts[i] = tbackend_slice(be, x[i], r);
            ptrs[i] = &parts[i];
        }
        if (be->one->concat_columns(be, &ys, ptrs, n)) return -1;
    }
    return 0;
}

static int rep_grad_norm(tbackend *be, const tsite *at, tparam *const *params, int n, double *norm)
{
    if (n == 0 || !replicated(&params[0]->grad)) return be->one->grad_norm(be, at, params, n, norm);
    tparam *slices = malloc((size_t)n * sizeof *slices);
    tparam **ptrs = malloc((size_t)n * sizeof *ptrs);
    int rc = !slices || !ptrs ? tbackend_fail(be, "out of memory") : 0;
    for (int r = 0; r < be->replicas && !rc; r++) {
        for (int i = 0; i < n; i++) {
            slices[i] = tbackend_param_slice(be, params[i], r);
            ptrs[i] = &slices[i];
        }
        rc = be->one->grad_norm(be, at, ptrs, n, &norm[r]);
    }
    free(slices);
    free(ptrs);
    return rc;
}

static int rep_adamw(tbackend *be, tparam *p, const tadamw_args *a)
{
    if (!replicated(&p->w)) return a->skip ? 0 : be->one->adamw(be, p, a);
    for (int r = 0; r < be->replicas; r++) {
        if (a[r].skip) continue;
        tparam s = tbackend_param_slice(be, p, r);
        if (be->one->adamw(be, &s, &a[r])) return -1;
    }
    return 0;
}

static int rep_muon(tbackend *be, tparam *p, const tmuon_args *a)
{
    if (!replicated(&p->w)) return a->skip ? 0 : be->one->muon(be, p, a);
    for (int r = 0; r < be->replicas; r++) {
        if (a[r].skip) continue;
        tparam s = tbackend_param_slice(be, p, r);
        if (be->one->muon(be, &s, &a[r])) return -1;
    }
    return 0;
}

static int rep_dp_init(tbackend *be, int world, int rank, const char *id_file)
{
    return tbackend_fail(be, "replicas run in one process: data parallelism (--world %d) cannot be combined with "
                             "--replicas %d", world, be->replicas);
}

static void rep_destroy(tbackend *be)
{
    tbackend *one = be->one;
    void (*destroy)(tbackend *) = one->destroy;
    be->one = NULL;
    free(one);
    destroy(be);
}

int tbackend_set_replicas(tbackend *be, int R)
{
    if (R < 1) return tbackend_fail(be, "replicas: %d (at least 1)", R);
    if (R == 1) return 0;
    if (be->one || be->bytes_in_use) return tbackend_fail(be, "replicas: set once, before anything is allocated");
    be->one = malloc(sizeof *be->one);
    if (!be->one) return tbackend_fail(be, "out of memory");
    /* the single ops unguarded; the guard goes over the loops and batched forms */
    tbackend_unguard_weights(be);
    *be->one = *be;
    be->replicas = R;
    be->alloc = rep_alloc;
    be->release = rep_release;
    be->upload = rep_upload;
    be->download = rep_download;
    be->read_bytes = rep_read_bytes;
    be->write_bytes = rep_write_bytes;
    be->zero = rep_zero;
    be->fill_uniform = rep_fill_uniform;
    be->count_nonfinite = rep_count_nonfinite;
    be->embedding_fwd = rep_embedding_fwd;
    be->embedding_bwd = rep_embedding_bwd;
    be->norm_fwd = rep_norm_fwd;
    be->norm_bwd = rep_norm_bwd;
    be->matmul = rep_matmul;
    be->attention_fwd = rep_attention_fwd;
    be->attention_bwd = rep_attention_bwd;
    be->rope_fwd = rep_rope_fwd;
    be->rope_bwd = rep_rope_bwd;
    be->activation_fwd = rep_activation_fwd;
    be->activation_bwd = rep_activation_bwd;
    be->residual = rep_residual;
    be->cross_entropy = rep_cross_entropy;
    be->linear_cross_entropy = rep_linear_cross_entropy;
    be->transpose = rep_transpose;
    be->accumulate = rep_accumulate;
    be->concat_columns = rep_concat_columns;
    be->grad_norm = rep_grad_norm;
    be->adamw = rep_adamw;
    be->muon = rep_muon;
    be->dp_init = rep_dp_init;
    be->destroy = rep_destroy;
    int rc = be->batch_replicas ? be->batch_replicas(be) : 0;
    tbackend_guard_weights(be);
    return rc;
}
