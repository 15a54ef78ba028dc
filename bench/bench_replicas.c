/* bench/bench_replicas.c — R replicas of one op in one launch (the replica
 * forms of kernels/) against the same R replicas as R launches one after
 * another, at the shapes of the 1-minute recipe (per replica: 32 x 256
 * tokens, width 256, 4 heads of 64, vocabulary 256 bytes, bf16):
 *   the GEMMs of a layer, forward (tokens x in -> out), dgrad and wgrad:
 *   8192x256x768 (qkv), 8192x256x256 (attention projection), 8192x256x1024
 *   (MLP up), 8192x1024x256 (MLP down); Muon's polar express on 256x256 and
 *   256x1024; layernorm, rmsnorm, embedding, flash attention (forward and
 *   backward), cross-entropy, transpose, gradient norm and AdamW.
 * R = 1, 8, 16, 32, 64.  Each figure is the median of REPS event-timed runs
 * after WARMUP runs: "batched" times one replica-form call, "sequential" the
 * loop of R single-replica calls on the same buffers (replica r's operands
 * at its offset).  The GEMM column "how" says how the batched GEMMs ran
 * (kmatmul_batch_stats: one strided-batched cuBLASLt call pinned to the
 * single call's algorithm, or with one the probe found bit-identical to it
 * (kernels/matmul.h), or single calls where cuBLASLt refused the algorithm
 * for the batched layout).  Inputs are random (never zeros),
 * allocated once per op for R = 64.  Without a GPU: one line, exit 0. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/common/ktensor_io.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/grad_norm.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/polar_express.h"
#include "kernels/rmsnorm.h"
#include "kernels/transpose.h"
#include "precision/rng.h"

enum { WARMUP = 2, REPS = 9, R_MAX = 64, MAX_BUFS = 10 };
static const int64_t replica_counts[] = {1, 8, 16, 32, 64};
enum { N_COUNTS = sizeof replica_counts / sizeof replica_counts[0] };

/* The recipe, per replica. */
enum { TOKENS = 32 * 256, WIDTH = 256, HEADS = 4, HEAD_DIM = 64, SEQ = 256, BATCH = 32, VOCAB = 256 };

static int die(const char *what)
{
    fprintf(stderr, "bench_replicas: %s: %s\n", what, kernels_last_error());
    return 1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One op: its buffers (each R_MAX replicas of n[i] elements of f[i]) and the
 * two ways to run R replicas. */
typedef struct bop bop;
struct bop {
    const char *name;
    char shape[64];
    int n_bufs;
    prec_format f[MAX_BUFS];
    int64_t n[MAX_BUFS];
    int tokens[MAX_BUFS]; /* int32 tokens (targets) in [0, VOCAB) instead of values */
    void *buf[MAX_BUFS];
    int gemm;                       /* a kmatmul op: report how its batched GEMMs ran */
    int64_t M, N, K;                /* GEMM shape, or op sizes */
    int a_trans, b_trans, variant;
    void *ws;
    size_t ws_bytes;
    int (*batched)(bop *o, int64_t R);
    int (*one)(bop *o, int64_t r);
};

static void *at(const bop *o, int i, int64_t r) { return (char *)o->buf[i] + r * o->n[i] * (int64_t)kformat_bytes(o->f[i]); }

static ktensor view(void *dev, prec_format f, int64_t rows, int64_t cols)
{
    ktensor t;
    memset(&t, 0, sizeof t);
    t.data = dev;
    t.format = f;
    t.ndim = 2;
    t.shape[0] = rows;
    t.shape[1] = cols;
    return t;
}

/* ---- GEMMs: buffers A, B, Y ---------------------------------------------------------------- */

static kmatmul_args gemm_args(const bop *o, int64_t r)
{
    kmatmul_args x = {o->M, o->N, o->K, o->a_trans, o->b_trans, at(o, 0, r), at(o, 1, r), at(o, 2, r), NULL, 1.0f, 0.0f,
                      NULL, 0, PREC_FP32, PREC_FP32, NULL, NULL, 0};
    return x;
}
static int gemm_batched(bop *o, int64_t R)
{
    kmatmul_args x = gemm_args(o, 0);
    kmatmul_batch b = {R, o->n[0], o->n[1], 0, o->n[2], 0, 0, 0};
    return kmatmul_batched(KPATH_BF16, KMATMUL_ACC_DEFAULT, KMATMUL_FUSED, &x, &b);
}
static int gemm_one(bop *o, int64_t r)
{
    kmatmul_args x = gemm_args(o, r);
    return kmatmul(KPATH_BF16, KMATMUL_ACC_DEFAULT, KMATMUL_FUSED, &x);
}

/* ---- polar express: buffers G, X ------------------------------------------------------------ */

static int pe_batched(bop *o, int64_t R)
{
    return kpolar_express_batched(KPATH_BF16, KPE_WIDE_FUSED, KPE_POLAR_EXPRESS, R, o->M, o->N, o->n[0], o->buf[0],
                                  o->buf[1]);
}
static int pe_one(bop *o, int64_t r)
{
    return kpolar_express(KPATH_BF16, KPE_WIDE_FUSED, KPE_POLAR_EXPRESS, o->M, o->N, at(o, 0, r), at(o, 1, r));
}

/* ---- norms: x, gain, bias, y, mean, rstd, dy, dx, dgain, dbias ---------------------------- */

static int ln_fwd(bop *o, int64_t R, int64_t r)
{
    ktensor x = view(at(o, 0, r), PREC_BF16, R * TOKENS, WIDTH), y = view(at(o, 3, r), PREC_BF16, R * TOKENS, WIDTH);
    ktensor g = view(at(o, 1, r), PREC_BF16, R, WIDTH), b = view(at(o, 2, r), PREC_BF16, R, WIDTH);
    return klayernorm_forward_replicas(R, &y, at(o, 4, r), at(o, 5, r), &x, &g, &b, 1e-5f, KLAYERNORM_TWO_PASS);
}
static int ln_bwd(bop *o, int64_t R, int64_t r)
{
    ktensor x = view(at(o, 0, r), PREC_BF16, R * TOKENS, WIDTH), dy = view(at(o, 6, r), PREC_BF16, R * TOKENS, WIDTH);
    ktensor dx = view(at(o, 7, r), PREC_BF16, R * TOKENS, WIDTH), g = view(at(o, 1, r), PREC_BF16, R, WIDTH);
    ktensor dg = view(at(o, 8, r), PREC_BF16, R, WIDTH), db = view(at(o, 9, r), PREC_BF16, R, WIDTH);
    return klayernorm_backward_replicas(R, &dx, &dg, &db, &dy, &x, &g, at(o, 4, r), at(o, 5, r), KLAYERNORM_TWO_PASS);
}
static int rms_fwd(bop *o, int64_t R, int64_t r)
{
    ktensor x = view(at(o, 0, r), PREC_BF16, R * TOKENS, WIDTH), y = view(at(o, 3, r), PREC_BF16, R * TOKENS, WIDTH);
    ktensor g = view(at(o, 1, r), PREC_BF16, R, WIDTH);
    return krmsnorm_forward_replicas(R, &y, at(o, 5, r), &x, &g, 1e-5f, KRMSNORM_BLOCK_TREE);
}
static int rms_bwd(bop *o, int64_t R, int64_t r)
{
    ktensor x = view(at(o, 0, r), PREC_BF16, R * TOKENS, WIDTH), dy = view(at(o, 6, r), PREC_BF16, R * TOKENS, WIDTH);
    ktensor dx = view(at(o, 7, r), PREC_BF16, R * TOKENS, WIDTH), g = view(at(o, 1, r), PREC_BF16, R, WIDTH);
    ktensor dg = view(at(o, 8, r), PREC_BF16, R, WIDTH);
    return krmsnorm_backward_replicas(R, &dx, &dg, &dy, &x, &g, at(o, 5, r), KRMSNORM_BLOCK_TREE);
}
static int ln_fwd_b(bop *o, int64_t R) { return ln_fwd(o, R, 0); }
static int ln_fwd_1(bop *o, int64_t r) { return ln_fwd(o, 1, r); }
static int ln_bwd_b(bop *o, int64_t R) { return ln_bwd(o, R, 0); }
static int ln_bwd_1(bop *o, int64_t r) { return ln_bwd(o, 1, r); }
static int rms_fwd_b(bop *o, int64_t R) { return rms_fwd(o, R, 0); }
static int rms_fwd_1(bop *o, int64_t r) { return rms_fwd(o, 1, r); }
static int rms_bwd_b(bop *o, int64_t R) { return rms_bwd(o, R, 0); }
static int rms_bwd_1(bop *o, int64_t r) { return rms_bwd(o, 1, r); }

/* ---- embedding: table, tokens, out, dtable; workspace for R_MAX ------------------------- */

static int emb_fwd(bop *o, int64_t R, int64_t r)
{
    ktensor table = view(at(o, 0, r), PREC_BF16, R * VOCAB, WIDTH), out = view(at(o, 2, r), PREC_BF16, R * TOKENS, WIDTH);
    return kembedding_forward_replicas(R, &out, &table, at(o, 1, r), KEMBED_SORTED);
}
static int emb_bwd(bop *o, int64_t R, int64_t r)
{
    ktensor dtable = view(at(o, 3, r), PREC_BF16, R * VOCAB, WIDTH), dout = view(at(o, 2, r), PREC_BF16, R * TOKENS, WIDTH);
    return kembedding_backward_replicas(R, &dtable, &dout, at(o, 1, r), o->ws, o->ws_bytes, KEMBED_SORTED);
}
static int emb_fwd_b(bop *o, int64_t R) { return emb_fwd(o, R, 0); }
static int emb_fwd_1(bop *o, int64_t r) { return emb_fwd(o, 1, r); }
static int emb_bwd_b(bop *o, int64_t R) { return emb_bwd(o, R, 0); }
static int emb_bwd_1(bop *o, int64_t r) { return emb_bwd(o, 1, r); }

/* ---- flash attention: q, k, v, o, lse, dout, dq, dk, dv (per replica BATCH x HEADS) ------- */

static int att_fwd(bop *o, int64_t R, int64_t r)
{
    return kattention_forward(KPATH_BF16, KATT_FLASH, R * BATCH * HEADS, SEQ, HEAD_DIM, 0.125f, at(o, 0, r),
                              at(o, 1, r), at(o, 2, r), at(o, 3, r), at(o, 4, r));
}
static int att_bwd(bop *o, int64_t R, int64_t r)
{
    return kattention_backward(KPATH_BF16, KATT_FLASH, R * BATCH * HEADS, SEQ, HEAD_DIM, 0.125f, at(o, 0, r),
                               at(o, 1, r), at(o, 2, r), at(o, 3, r), at(o, 5, r), at(o, 4, r), at(o, 6, r),
                               at(o, 7, r), at(o, 8, r));
}
static int att_fwd_b(bop *o, int64_t R) { return att_fwd(o, R, 0); }
static int att_fwd_1(bop *o, int64_t r) { return att_fwd(o, 1, r); }
static int att_bwd_b(bop *o, int64_t R) { return att_bwd(o, R, 0); }
static int att_bwd_1(bop *o, int64_t r) { return att_bwd(o, 1, r); }

/* ---- cross-entropy: logits, targets, losses (dlogits in place) --------------------------- */

static int ce(bop *o, int64_t R, int64_t r)
{
    return kce_forward_backward(KPATH_BF16, KCE_TWO_PASS, R * TOKENS, VOCAB, at(o, 0, r), at(o, 1, r), at(o, 2, r),
                                at(o, 0, r), 1.0f / TOKENS, 0.0f);
}
static int ce_b(bop *o, int64_t R) { return ce(o, R, 0); }
static int ce_1(bop *o, int64_t r) { return ce(o, 1, r); }

/* ---- transpose (the tied lm_head's gradient folded back): x [V,C], y [C,V] --------------- */

static int tr(bop *o, int64_t R, int64_t r)
{
    ktensor x = view(at(o, 0, r), PREC_BF16, R * VOCAB, WIDTH), y = view(at(o, 1, r), PREC_BF16, R * WIDTH, VOCAB);
    return ktranspose_add_replicas(R, &y, &x, KTRANSPOSE_SMEM_TILE);
}
static int tr_b(bop *o, int64_t R) { return tr(o, R, 0); }
static int tr_1(bop *o, int64_t r) { return tr(o, 1, r); }

/* ---- gradient norm over a layer's weight gradients, and AdamW over them ----------------- */

static const int64_t layer_params[4] = {WIDTH * 3 * WIDTH, WIDTH * WIDTH, WIDTH * 4 * WIDTH, 4 * WIDTH * WIDTH};

static int gn(bop *o, int64_t R, int64_t r)
{
    ktensor g[4];
    for (int i = 0; i < 4; i++) g[i] = view(at(o, i, r), PREC_BF16, R, layer_params[i]);
    return kgrad_norm_replicas(R, at(o, 4, r), g, 4, o->ws, o->ws_bytes, KGRADNORM_BLOCK_TREE);
}
static int gn_b(bop *o, int64_t R) { return gn(o, R, 0); }
static int gn_1(bop *o, int64_t r) { return gn(o, 1, r); }

/* params bf16, master, m, v fp32, grad bf16; per-replica scale and seed */
static int adamw(bop *o, int64_t R, int64_t r)
{
    kadamw_hparams h = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 10, 0};
    kadamw_replicas rep = {at(o, 5, r), (const uint64_t *)at(o, 6, r), NULL, NULL, NULL, PREC_FP32};
    return kadamw_step_replicas(KPATH_BF16, KADAMW_MASTER_FP32, KADAMW_LLMC, R, o->M, at(o, 0, r), at(o, 1, r), NULL,
                                at(o, 2, r), at(o, 3, r), at(o, 4, r), &h, &rep);
}
static int adamw_b(bop *o, int64_t R) { return adamw(o, R, 0); }
static int adamw_1(bop *o, int64_t r) { return adamw(o, 1, r); }

/* ---- the table ---------------------------------------------------------------------------- */

static void add(bop *o, prec_format f, int64_t n)
{
    o->f[o->n_bufs] = f;
    o->n[o->n_bufs++] = n;
}

static void add_tokens(bop *o, int64_t n)
{
    o->tokens[o->n_bufs] = 1;
    add(o, PREC_FP32, n); /* 4-byte elements */
}

/* Every buffer for R_MAX replicas: values uniform in [-1, 1) (fp32 ones, the
 * optimizer's moments and scales among them, in [0, 1)), or tokens. */
static int setup(bop *o, prec_rng *rng)
{
    for (int i = 0; i < o->n_bufs; i++) {
        int64_t shape[1] = {R_MAX * o->n[i]};
        ktensor t;
        if (ktensor_alloc(&t, o->f[i], 1, shape)) return -1;
        o->buf[i] = t.data;
        if (o->tokens[i]) {
            int32_t *tok = malloc((size_t)(R_MAX * o->n[i]) * sizeof *tok);
            if (!tok) return kernels_fail("out of host memory");
            for (int64_t k = 0; k < R_MAX * o->n[i]; k++) tok[k] = (int32_t)(prec_rng_next(rng) % VOCAB);
            int rc = kdevice_upload(t.data, tok, (size_t)(R_MAX * o->n[i]) * sizeof *tok, "tokens");
            free(tok);
            if (rc) return -1;
        } else if (ktensor_fill_uniform(&t, prec_rng_next(rng), o->f[i] == PREC_FP32 ? 0.0f : -1.0f, 1.0f)) {
            return -1;
        }
    }
    return 0;
}

static void teardown(bop *o)
{
    for (int i = 0; i < o->n_bufs; i++) kdevice_free(o->buf[i]);
    kdevice_free(o->ws);
    o->ws = NULL;
}

static int time_one(bop *o, int64_t R, int seq, ktimer *tm, double *median)
{
    double t[REPS];
    for (int k = 0; k < WARMUP + REPS; k++) {
        float ms = 0;
        if (ktimer_start(tm)) return -1;
        if (seq) {
            for (int64_t r = 0; r < R; r++)
                if (o->one(o, r)) return -1;
        } else if (o->batched(o, R)) {
            return -1;
        }
        if (ktimer_stop(tm, &ms)) return -1;
        if (k >= WARMUP) t[k - WARMUP] = ms;
    }
    qsort(t, REPS, sizeof t[0], cmp_double);
    *median = t[REPS / 2];
    return 0;
}

static int run(bop *o, prec_rng *rng, ktimer *tm)
{
    if (setup(o, rng)) return -1;
    for (int c = 0; c < N_COUNTS; c++) {
        const int64_t R = replica_counts[c];
        double b = 0, s = 0;
        kmatmul_batch_stats_reset();
        if (time_one(o, R, 0, tm, &b)) return -1;
        kmatmul_batch_stats st;
        kmatmul_batch_stats_get(&st);
        if (time_one(o, R, 1, tm, &s)) return -1;
        const char *how = !o->gemm || R == 1       ? ""
                          : st.loop_fallback         ? "single calls (fallback)"
                          : st.strided_checked       ? "strided, checked algorithm"
                                                     : "strided, pinned";
        printf("%-24s %-24s %3lld %11.4f %11.4f %8.2fx %11.2f  %s\n", o->name, o->shape, (long long)R, b, s, s / b,
               1e3 * b / (double)R, how);
    }
    teardown(o);
    return 0;
}

int main(void)
{
    char why[256];
    if (!kernels_gpu_available(why, sizeof why)) {
        printf("bench_replicas: skipped: %s\n", why);
        return 0;
    }
    kdevice_props prop;
    if (kdevice_describe(&prop)) return die("kdevice_describe");
    printf("bench_replicas: %s (sm_%d%d, %d SMs, runtime %d); bf16; medians of %d event-timed runs after %d "
           "warm-ups\n",
           prop.name, prop.cc_major, prop.cc_minor, prop.multiprocessors, prop.runtime_version, REPS, WARMUP);
    printf("%-24s %-24s %3s %11s %11s %9s %11s  %s\n", "op", "shape (per replica)", "R", "batched ms", "seq ms",
           "speedup", "us/replica", "batched GEMMs");
    prec_rng rng;
    prec_rng_seed(&rng, 0x7e91ca5ull);
    ktimer *tm;
    if (ktimer_create(&tm)) return die("ktimer_create");

    /* GEMMs: forward y = x W^T (tokens x in -> out), dgrad dx = dy W, wgrad dW = dy^T x */
    static const struct {
        const char *name;
        int64_t in, out;
    } linears[4] = {{"qkv", WIDTH, 3 * WIDTH}, {"attn proj", WIDTH, WIDTH}, {"mlp up", WIDTH, 4 * WIDTH},
                    {"mlp down", 4 * WIDTH, WIDTH}};
    for (int l = 0; l < 4; l++)
        for (int pass = 0; pass < 3; pass++) {
            static const char *const pass_names[3] = {"fwd", "dgrad", "wgrad"};
            const int64_t in = linears[l].in, out = linears[l].out;
            bop o;
            memset(&o, 0, sizeof o);
            char name[40];
            snprintf(name, sizeof name, "matmul %s %s", linears[l].name, pass_names[pass]);
            o.name = name;
            o.gemm = 1;
            o.batched = gemm_batched;
            o.one = gemm_one;
            if (pass == 0) { /* y [T,out] = x [T,in] W^T, W [out,in] */
                o.M = TOKENS, o.N = out, o.K = in, o.a_trans = 0, o.b_trans = 1;
                add(&o, PREC_BF16, TOKENS * in);
                add(&o, PREC_BF16, out * in);
            } else if (pass == 1) { /* dx [T,in] = dy [T,out] W [out,in] */
                o.M = TOKENS, o.N = in, o.K = out, o.a_trans = 0, o.b_trans = 0;
                add(&o, PREC_BF16, TOKENS * out);
                add(&o, PREC_BF16, out * in);
            } else { /* dW [out,in] = dy^T [out,T] x [T,in] */
                o.M = out, o.N = in, o.K = TOKENS, o.a_trans = 1, o.b_trans = 0;
                add(&o, PREC_BF16, TOKENS * out);
                add(&o, PREC_BF16, TOKENS * in);
            }
            add(&o, PREC_BF16, o.M * o.N);
            snprintf(o.shape, sizeof o.shape, "M=%lld N=%lld K=%lld", (long long)o.M, (long long)o.N, (long long)o.K);
            if (run(&o, &rng, tm)) return die(name);
        }
    /* Muon: polar express per weight matrix */
    static const int64_t muon[2][2] = {{WIDTH, WIDTH}, {WIDTH, 4 * WIDTH}};
    for (int m = 0; m < 2; m++) {
        bop o;
        memset(&o, 0, sizeof o);
        o.name = "polar_express";
        o.M = muon[m][0], o.N = muon[m][1];
        snprintf(o.shape, sizeof o.shape, "%lldx%lld wide_fused", (long long)o.M, (long long)o.N);
        add(&o, PREC_BF16, o.M * o.N);
        add(&o, PREC_BF16, o.M * o.N);
        o.gemm = 1;
        o.batched = pe_batched;
        o.one = pe_one;
        if (run(&o, &rng, tm)) return die("polar_express");
    }
    /* norms */
    {
        bop o;
        memset(&o, 0, sizeof o);
        const prec_format fs[10] = {PREC_BF16, PREC_BF16, PREC_BF16, PREC_BF16, PREC_FP32,
                                    PREC_FP32, PREC_BF16, PREC_BF16, PREC_BF16, PREC_BF16};
        const int64_t ns[10] = {TOKENS * WIDTH, WIDTH, WIDTH, TOKENS * WIDTH, TOKENS,
                                TOKENS, TOKENS * WIDTH, TOKENS * WIDTH, WIDTH, WIDTH};
        for (int i = 0; i < 10; i++) add(&o, fs[i], ns[i]);
        snprintf(o.shape, sizeof o.shape, "N=%d C=%d", TOKENS, WIDTH);
        static const char *const names[4] = {"layernorm fwd", "layernorm bwd", "rmsnorm fwd", "rmsnorm bwd"};
        int (*const bf[4])(bop *, int64_t) = {ln_fwd_b, ln_bwd_b, rms_fwd_b, rms_bwd_b};
        int (*const of[4])(bop *, int64_t) = {ln_fwd_1, ln_bwd_1, rms_fwd_1, rms_bwd_1};
        for (int k = 0; k < 4; k++) {
            bop c = o;
            c.name = names[k];
            c.batched = bf[k];
            c.one = of[k];
            if (run(&c, &rng, tm)) return die(names[k]);
        }
    }
    /* embedding */
    for (int k = 0; k < 2; k++) {
        bop o;
        memset(&o, 0, sizeof o);
        o.name = k ? "embedding bwd (sorted)" : "embedding fwd";
        add(&o, PREC_BF16, VOCAB * WIDTH);
        add_tokens(&o, TOKENS);
        add(&o, PREC_BF16, TOKENS * WIDTH);
        add(&o, PREC_BF16, VOCAB * WIDTH);
        snprintf(o.shape, sizeof o.shape, "N=%d V=%d C=%d", TOKENS, VOCAB, WIDTH);
        o.batched = k ? emb_bwd_b : emb_fwd_b;
        o.one = k ? emb_bwd_1 : emb_fwd_1;
        o.ws_bytes = kembedding_backward_workspace_replicas(R_MAX, TOKENS, VOCAB, KEMBED_SORTED);
        if (kdevice_alloc(&o.ws, o.ws_bytes, "embedding workspace")) return die("embedding workspace");
        if (run(&o, &rng, tm)) return die(o.name);
    }
    /* flash attention */
    for (int k = 0; k < 2; k++) {
        bop o;
        memset(&o, 0, sizeof o);
        o.name = k ? "attention bwd (flash)" : "attention fwd (flash)";
        const int64_t n = (int64_t)BATCH * HEADS * SEQ * HEAD_DIM;
        for (int i = 0; i < 9; i++) add(&o, i == 4 ? PREC_FP32 : PREC_BF16, i == 4 ? (int64_t)BATCH * HEADS * SEQ : n);
        snprintf(o.shape, sizeof o.shape, "BH=%d T=%d D=%d", BATCH * HEADS, SEQ, HEAD_DIM);
        o.batched = k ? att_bwd_b : att_fwd_b;
        o.one = k ? att_bwd_1 : att_fwd_1;
        if (run(&o, &rng, tm)) return die(o.name);
    }
    /* cross-entropy, dlogits in place */
    {
        bop o;
        memset(&o, 0, sizeof o);
        o.name = "cross_entropy";
        add(&o, PREC_BF16, (int64_t)TOKENS * VOCAB);
        add_tokens(&o, TOKENS);
        add(&o, PREC_FP32, TOKENS);
        snprintf(o.shape, sizeof o.shape, "N=%d V=%d two_pass", TOKENS, VOCAB);
        o.batched = ce_b;
        o.one = ce_1;
        if (run(&o, &rng, tm)) return die(o.name);
    }
    /* transpose-add */
    {
        bop o;
        memset(&o, 0, sizeof o);
        o.name = "transpose add";
        add(&o, PREC_BF16, VOCAB * WIDTH);
        add(&o, PREC_BF16, VOCAB * WIDTH);
        snprintf(o.shape, sizeof o.shape, "%dx%d", VOCAB, WIDTH);
        o.batched = tr_b;
        o.one = tr_1;
        if (run(&o, &rng, tm)) return die(o.name);
    }
    /* gradient norm over one layer's four weight gradients; AdamW over the MLP up weight */
    {
        bop o;
        memset(&o, 0, sizeof o);
        o.name = "grad_norm";
        for (int i = 0; i < 4; i++) add(&o, PREC_BF16, layer_params[i]);
        add(&o, PREC_FP32, 1);
        snprintf(o.shape, sizeof o.shape, "4 tensors, %d", (int)(layer_params[0] + layer_params[1] + layer_params[2] +
                                                                layer_params[3]));
        ktensor g[4];
        for (int i = 0; i < 4; i++) g[i] = view(NULL, PREC_BF16, R_MAX, layer_params[i]);
        o.ws_bytes = kgrad_norm_workspace_replicas(R_MAX, g, 4, KGRADNORM_BLOCK_TREE);
        if (kdevice_alloc(&o.ws, o.ws_bytes, "grad norm workspace")) return die("grad norm workspace");
        o.batched = gn_b;
        o.one = gn_1;
        if (run(&o, &rng, tm)) return die(o.name);
    }
    {
        bop o;
        memset(&o, 0, sizeof o);
        o.name = "adamw";
        o.M = layer_params[2];
        add(&o, PREC_BF16, o.M);
        add(&o, PREC_FP32, o.M);
        add(&o, PREC_FP32, o.M);
        add(&o, PREC_FP32, o.M);
        add(&o, PREC_BF16, o.M);
        add(&o, PREC_FP32, 1); /* gradient scale, in [0, 1) */
        add(&o, PREC_FP32, 2); /* the stochastic-rounding seed: any 64 bits (unused by master_fp32) */
        snprintf(o.shape, sizeof o.shape, "n=%lld master_fp32", (long long)o.M);
        o.batched = adamw_b;
        o.one = adamw_1;
        if (run(&o, &rng, tm)) return die(o.name);
    }
    ktimer_destroy(tm);
    return 0;
}
