/* trainer/backend_cpu.c — the CPU backend: every op in fp32 (fp64 where a
 * value is a sum of many terms that the GPU also keeps wide: the gradient
 * norm), with every stored tensor rounded into its slot's format through
 * precision/format.h.  It is for tiny models: CI trains, checkpoints and
 * bisects without a GPU.
 *
 * Tensors hold floats; a tensor of format F holds values of F (fp8 tensors
 * hold stored values, real = stored * scale).  Reductions run in a fixed
 * sequential order, so results are deterministic and independent of the
 * machine.  An op's default variant is computed in that order; other
 * variants are modelled only where listed in cpu_models[] (tf32 inputs,
 * split-K slices, block-scaled fp8, ...).  Everything else is refused when
 * the plan is bound, never run as something else.  Ops dispatch on the
 * site's op handle and the kernels' variant enums. */
#include "trainer/backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/attention_mma_arith.h"
#include "kernels/cross_entropy.h"
#include "kernels/grad_norm.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "precision/mma.h"
#include "kernels/polar_express.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/activations.h"


/* ---- rounding -------------------------------------------------------------------- */

/* Round into f as the GPU kernels store: RNE; fp8 saturates (kelem.cuh).
 * Under the planted bug KBUG_TRUNCATE_OUTPUT (kernels.h), narrow stores
 * truncate toward zero as the kernels then do: a systematic bias that
 * experiments' self-tests must detect (compare --plant). */
static _Thread_local int truncating; /* the op running now truncates its stores (planted) */
static struct {
    int slot, layer, variant; /* -1: any */
} planted_site = {-1, -1, -1};

void tbackend_cpu_plant_site(int slot, int layer, int variant)
{
    planted_site.slot = slot;
    planted_site.layer = layer;
    planted_site.variant = variant;
}

/* At the start of every op: whether its stores truncate.  at == NULL: an op
 * outside the plan's sites (embedding, optimizer), planted only when no site
 * is singled out. */
static void enter(const tsite *at)
{
    truncating = kernels_planted_bug() == KBUG_TRUNCATE_OUTPUT &&
                 (planted_site.slot < 0 ||
                  (at && (int)at->slot == planted_site.slot && (planted_site.layer < 0 || at->layer == planted_site.layer) &&
                   (planted_site.variant < 0 || at->variant == planted_site.variant)));
}

static inline float rnd(double x, prec_format f)
{
    if (f == PREC_FP32) return (float)x;
    int truncate = truncating;
    if (f == PREC_E4M3 || f == PREC_E5M2 || truncate)
        return (float)prec_round(x, f, (prec_rounding){truncate ? PREC_RZ : PREC_RNE, PREC_OVF_SATURATE, false}, 0);
    return (float)prec_rne(x, f);
}

/* Round into the path's storage format f, then into the output tensor's own
 * format when it differs (backend.h). */
static inline float rnd2(double x, prec_format f, prec_format out)
{
    float r = rnd(x, f);
    return out == f ? r : rnd(r, out);
}

static inline float *fdata(const ktensor *t) { return (float *)t->data; }

/* Real value of element i. */
static inline float val(const ktensor *t, int64_t i)
{
    float x = fdata(t)[i];
    return t->scale ? x * *t->scale : x;
}

/* Real value of element i as an operand of format f: rounded into f unless
 * the tensor already stores f (the common case, which costs nothing). */
static inline float ld(const ktensor *t, int64_t i, prec_format f)
{
    return t->format == f && !t->scale ? fdata(t)[i] : rnd(val(t, i), f);
}

static int64_t numel(const ktensor *t) { return ktensor_numel(t); }

static prec_format site_fmt(const tsite *at) { return tpath_storage(at->path); }

/* Real values of t rounded into f (the path's operand format): a fresh array. */
static float *operand(const ktensor *t, prec_format f)
{
    int64_t n = numel(t);
    float *out = malloc((size_t)(n ? n : 1) * sizeof *out);
    if (!out) return NULL;
    int same = t->format == f && !t->scale;
    for (int64_t i = 0; i < n; i++) out[i] = same ? fdata(t)[i] : ld(t, i, f);
    return out;
}

/* ---- memory -------------------------------------------------------------------- */

static size_t cpu_elem_bytes(prec_format f) { return sizeof(float); }

static int cpu_alloc(tbackend *be, ktensor *t, prec_format f, int ndim, const int64_t *shape)
{
    memset(t, 0, sizeof *t);
    t->format = f;
    t->ndim = ndim;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        n *= shape[i];
    }
    t->data = malloc((size_t)(n ? n : 1) * sizeof(float));
    if (!t->data) return tbackend_fail(be, "cpu: out of memory allocating %lld elements", (long long)n);
    for (int64_t i = 0; i < n; i++) fdata(t)[i] = NAN;
    if (f == PREC_E4M3 || f == PREC_E5M2) {
        t->scale = malloc(sizeof(float));
        if (!t->scale) return tbackend_fail(be, "cpu: out of memory");
        *t->scale = 1.0f;
    }
    be->bytes_in_use += (size_t)n * kformat_bytes(f);
    if (be->bytes_in_use > be->peak_bytes) be->peak_bytes = be->bytes_in_use;
    return 0;
}

static void cpu_release(tbackend *be, ktensor *t)
{
    if (!t->data) return;
    be->bytes_in_use -= (size_t)numel(t) * kformat_bytes(t->format);
    free(t->data);
    free(t->scale);
    memset(t, 0, sizeof *t);
}

static int cpu_alloc_raw(tbackend *be, void **ptr, size_t bytes)
{
    *ptr = calloc(bytes ? bytes : 1, 1);
    if (!*ptr) return tbackend_fail(be, "cpu: out of memory allocating %zu bytes", bytes);
    return 0;
}

static void cpu_release_raw(tbackend *be, void *ptr) { free(ptr); }

static int cpu_raw_copy(tbackend *be, void *dst, const void *src, size_t bytes)
{
    memcpy(dst, src, bytes);
    return 0;
}

static int cpu_upload(tbackend *be, ktensor *t, const double *values)
{
    /* no kernel's store: nearest even (backend.h), whatever the last op of
     * this thread left planted (a planted run's state must not leak into the
     * initialisation of the next run in the process) */
    truncating = 0;
    int64_t n = numel(t);
    for (int64_t i = 0; i < n; i++) fdata(t)[i] = rnd(values[i], t->format);
    return 0;
}

static int cpu_download(tbackend *be, const ktensor *t, double *values)
{
    int64_t n = numel(t);
    for (int64_t i = 0; i < n; i++) values[i] = fdata(t)[i];
    return 0;
}

static int cpu_read_bytes(tbackend *be, const ktensor *t, void *dst)
{
    int64_t n = numel(t);
    size_t w = kformat_bytes(t->format);
    unsigned char *out = dst;
    for (int64_t i = 0; i < n; i++) {
        uint64_t bits = prec_encode(fdata(t)[i], t->format);
        for (size_t b = 0; b < w; b++) out[(size_t)i * w + b] = (unsigned char)(bits >> (8 * b));
    }
    if (t->scale) memcpy(out + (size_t)n * w, t->scale, sizeof(float));
    return 0;
}

static int cpu_write_bytes(tbackend *be, ktensor *t, const void *src)
{
    int64_t n = numel(t);
    size_t w = kformat_bytes(t->format);
    const unsigned char *in = src;
    for (int64_t i = 0; i < n; i++) {
        uint64_t bits = 0;
        for (size_t b = 0; b < w; b++) bits |= (uint64_t)in[(size_t)i * w + b] << (8 * b);
        fdata(t)[i] = (float)prec_decode(bits, t->format);
    }
    if (t->scale) memcpy(t->scale, in + (size_t)n * w, sizeof(float));
    return 0;
}

static int cpu_zero(tbackend *be, ktensor *t)
{
    memset(t->data, 0, (size_t)numel(t) * sizeof(float));
    if (t->scale) *t->scale = 1.0f;
    return 0;
}

/* The CUDA fill's hash (kernels/common/ktensor_io.cu): splitmix64 of
 * (seed, i), 24 bits of it as u in [0, 1), lo + (hi - lo) u. */
static int cpu_fill_uniform(tbackend *be, ktensor *t, uint64_t seed, float lo, float hi)
{
    (void)be;
    float *x = t->data;
    for (int64_t i = 0; i < numel(t); i++) {
        uint64_t z = seed + 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        float u = (float)(z >> 40) * 0x1p-24f;
        x[i] = rnd(lo + (hi - lo) * u, t->format);
    }
    if (t->scale) *t->scale = 1.0f;
    return 0;
}

static int cpu_count_nonfinite(tbackend *be, const ktensor *t, int64_t *count)
{
    int64_t n = numel(t), c = 0;
    for (int64_t i = 0; i < n; i++) c += !isfinite(fdata(t)[i]);
    *count = c;
    return 0;
}

static int cpu_sync(tbackend *be) { return 0; }

static int cpu_mem_used(tbackend *be, size_t *bytes)
{
    *bytes = 0;
    return 0;
}

/* ---- what the CPU models ----------------------------------------------------------- */

/* (op, variant) pairs the CPU models; -1 = every variant of the op.
 * Defaults run in the CPU's sequential order; the other variants listed
 * change what is rounded or how (and are modelled as the kernels document
 * them), or are bit-identical reorganisations of memory access. */
#define ANY_VARIANT (-1)
static const struct {
    top_id op;
    int variant;
} cpu_models[] = {
    {TOP_MATMUL, ANY_VARIANT},           /* no epilogue here: split_epilogue rounds as fused; split_k in 4 fp32 slices */
    {TOP_MATMUL_FAST, ANY_VARIANT},      /* fp32 path only (tf32 inputs), not split_k: cpu_supports */
    {TOP_MATMUL_BLOCK_FP8, ANY_VARIANT}, /* 1x128 / 128x128 scales, fp32 promotion every 128 */
    {TOP_MATMUL_MMA, ANY_VARIANT},       /* the matrix-unit model itself (mma_dot), as the CUDA emulation */
    {TOP_LAYERNORM, KLAYERNORM_TWO_PASS}, {TOP_LAYERNORM, KLAYERNORM_SEQUENTIAL}, {TOP_LAYERNORM, KLAYERNORM_ONE_PASS},
    {TOP_RMSNORM, KRMSNORM_BLOCK_TREE},  {TOP_RMSNORM, KRMSNORM_SEQUENTIAL},   {TOP_RMSNORM, KRMSNORM_LLAMA},
    {TOP_RMSNORM, KRMSNORM_NONE},
    {TOP_RMSNORM, KRMSNORM_WARP_TREE},   /* its kernel's row sums in their order: cpu_norm_fwd, cpu_norm_bwd */
    {TOP_EMBEDDING, ANY_VARIANT},        /* both variants sum in token order: the same bits */
    {TOP_ATTENTION, KATT_NAIVE},         {TOP_ATTENTION, KATT_FLASH},
    {TOP_ATTENTION, KATT_FLASH_MMA},     {TOP_ATTENTION, KATT_FLASH_MMA_EXP2}, /* the kernels' arithmetic, H100 units */
    {TOP_ROPE, ANY_VARIANT},             {TOP_RESIDUAL, ANY_VARIANT},          {TOP_TRANSPOSE, ANY_VARIANT},
    {TOP_GELU_TANH, KGELU_TANH_TANHF},   {TOP_RELU2, ANY_VARIANT},
    {TOP_CROSS_ENTROPY, KCE_TWO_PASS},   {TOP_CROSS_ENTROPY, KCE_FP32_LOGITS},
    {TOP_LINEAR_CROSS_ENTROPY, ANY_VARIANT}, /* the chunk size changes dW's grouping: modelled */
    {TOP_GRAD_NORM, KGRADNORM_BLOCK_TREE}, {TOP_GRAD_NORM, KGRADNORM_SEQUENTIAL},
    {TOP_ADAMW, ANY_VARIANT},            {TOP_POLAR_EXPRESS, ANY_VARIANT},     {TOP_MUON_NEWTON_SCHULZ, ANY_VARIANT},
};

static int cpu_supports(tbackend *be, const tbinding *b, const tsite *at, char *why, size_t len)
{
    if (!top_is_kernel(at->op)) return 0;
    const kop *op = at->desc;
    if (at->op == TOP_MATMUL_FAST && (at->path != KPATH_FP32 || at->variant == KMATMUL_SPLIT_K)) {
        snprintf(why, len, "the CPU backend models matmul_fast only on the fp32 path (tf32 inputs) without split_k; "
                           "fp8 fast accumulation needs a tensor-core model: run it with --backend cuda");
        return -1;
    }
    if (at->op == TOP_ATTENTION && !kattention_supports(at->path, at->variant, 0, why, len)) return -1;
    char list[512] = "";
    size_t n = 0;
    for (size_t i = 0; i < sizeof cpu_models / sizeof cpu_models[0]; i++) {
        if (cpu_models[i].op != at->op) continue;
        if (cpu_models[i].variant == ANY_VARIANT || cpu_models[i].variant == at->variant) return 0;
        n += (size_t)snprintf(list + n, n < sizeof list ? sizeof list - n : 0, "%s%s", n ? ", " : "",
                              op->variants[cpu_models[i].variant].name);
    }
    snprintf(why, len, "the CPU backend does not model variant %s of op %s (it models: %s); run it with --backend cuda",
             op->variants[at->variant].name, op->name, n ? list : "none");
    return -1;
}

/* ---- embedding --------------------------------------------------------------------- */

static int cpu_embedding_fwd(tbackend *be, ktensor *x, const int32_t *tokens, const ktensor *wte, const ktensor *wpe,
                             int B, int T)
{
    enter(NULL);
    int64_t C = wte->shape[1];
    prec_format f = site_fmt(tbackend_site(be, TSLOT_EMBEDDING, -1));
    for (int64_t bt = 0; bt < (int64_t)B * T; bt++) {
        int32_t tok = tokens[bt];
        if (tok < 0 || tok >= wte->shape[0])
            return tbackend_fail(be, "slot embedding: token %d at position %lld outside vocabulary %lld", tok,
                                 (long long)bt, (long long)wte->shape[0]);
        for (int64_t c = 0; c < C; c++) {
            float e = ld(wte, tok * C + c, f);
            if (wpe) e = rnd((double)e + ld(wpe, (bt % T) * C + c, f), f);
            fdata(x)[bt * C + c] = rnd2(e, f, x->format);
        }
    }
    return 0;
}

/* As kernels/embedding.h: each table row's gradient is the fp32 sum, in
 * token order, of the rows of dx that looked it up, then one addition to
 * the stored gradient (rounded into its format). */
static int scatter_rows(ktensor *dtable, const ktensor *dx, const int32_t *rows_of, int64_t n, int64_t C)
{
    int64_t V = dtable->shape[0];
    float *acc = calloc((size_t)(V * C), sizeof *acc);
    unsigned char *hit = calloc((size_t)V, 1);
    if (!acc || !hit) {
        free(acc), free(hit);
        return -1;
    }
    for (int64_t t = 0; t < n; t++) {
        int64_t v = rows_of[t];
        hit[v] = 1;
        for (int64_t c = 0; c < C; c++) acc[v * C + c] += val(dx, t * C + c);
    }
    for (int64_t v = 0; v < V; v++)
        if (hit[v])
            for (int64_t c = 0; c < C; c++)
                fdata(dtable)[v * C + c] = rnd((double)fdata(dtable)[v * C + c] + acc[v * C + c], dtable->format);
    free(acc), free(hit);
    return 0;
}

static int cpu_embedding_bwd(tbackend *be, ktensor *dwte, ktensor *dwpe, const ktensor *dx, const int32_t *tokens,
                             int B, int T)
{
    enter(NULL);
    int64_t n = (int64_t)B * T, C = dwte->shape[1];
    int32_t *pos = malloc((size_t)n * sizeof *pos);
    if (!pos) return tbackend_fail(be, "cpu: out of memory");
    for (int64_t t = 0; t < n; t++) pos[t] = (int32_t)(t % T);
    int rc = scatter_rows(dwte, dx, tokens, n, C);
    if (!rc && dwpe) rc = scatter_rows(dwpe, dx, pos, n, C);
    free(pos);
    return rc ? tbackend_fail(be, "cpu: out of memory") : 0;
}

/* ---- norms -------------------------------------------------------------------------- */

/* sum_c a[c] b[c] over a row of C as one warp of the warp_tree rmsnorm
 * kernels forms it (kernels/rmsnorm.cu, kernels/common/kreduce.cuh): lane l
 * owns elements [l V, l V + V) of every chunk of 32 V and sums them in order
 * with fp32 fma from zero (V = 16 bytes / element size of the row's format f
 * when C is a multiple of it, else 1); then the butterfly over offsets 16 .. 1
 * (every lane ends with the same bits: each level adds the same two partials). */
static float warp_row_dot(const float *a, const float *b, int64_t C, prec_format f)
{
    const int64_t w = 16 / (int64_t)kformat_bytes(f), V = C % w == 0 ? w : 1;
    float lane[32];
    for (int l = 0; l < 32; l++) {
        float acc = 0.0f;
        for (int64_t base = l * V; base < C; base += 32 * V)
            for (int64_t j = 0; j < V; j++) acc = fmaf(a[base + j], b[base + j], acc);
        lane[l] = acc;
    }
    for (int off = 16; off > 0; off >>= 1) {
        float next[32];
        for (int l = 0; l < 32; l++) next[l] = lane[l] + lane[l ^ off];
        memcpy(lane, next, sizeof lane);
    }
    return lane[0];
}

/* Forward of layernorm (two_pass, sequential: two passes in fp32;
 * one_pass: var = E[x^2] - mean^2, clamped at 0) and rmsnorm (block_tree,
 * sequential: fp32 throughout, one rounding of y; warp_tree: the same with
 * the kernel's own sum of squares, warp_row_dot; llama: x * rstd rounded
 * to the storage format, then times the gain and rounded again; none: every
 * elementwise step rounded, only the sum of squares in fp32).  1 / sqrtf
 * stands for the kernels' rsqrtf (an approximation, not correctly rounded). */
static int cpu_norm_fwd(tbackend *be, const tsite *at, ktensor *y, ktensor *mean, ktensor *rstd, const ktensor *x,
                        const ktensor *gain, const ktensor *bias, double eps)
{
    enter(at);
    prec_format f = site_fmt(at);
    int64_t N = x->shape[0], C = x->shape[1];
    int layer = at->op == TOP_LAYERNORM;
    int one_pass = layer && at->variant == KLAYERNORM_ONE_PASS;
    int llama = !layer && at->variant == KRMSNORM_LLAMA, none = !layer && at->variant == KRMSNORM_NONE;
    int warp = !layer && at->variant == KRMSNORM_WARP_TREE;
    float *xin = operand(x, f);
    if (!xin) return tbackend_fail(be, "cpu: out of memory");
    for (int64_t r = 0; r < N; r++) {
        const float *xr = xin + r * C;
        float mu = 0.0f, rs;
        if (layer && one_pass) {
            float s1 = 0.0f, s2 = 0.0f;
            for (int64_t c = 0; c < C; c++) s1 += xr[c], s2 = fmaf(xr[c], xr[c], s2);
            mu = s1 / (float)C;
            float var = fmaxf(s2 / (float)C - mu * mu, 0.0f);
            rs = 1.0f / sqrtf(var + (float)eps);
        } else if (none) {
            float ss = 0.0f;
            for (int64_t c = 0; c < C; c++) ss += rnd(xr[c] * xr[c], f);
            float ms = rnd(ss / (float)C, f);
            rs = rnd(1.0f / sqrtf(rnd(ms + (float)eps, f)), f);
        } else if (warp) {
            rs = 1.0f / sqrtf(warp_row_dot(xr, xr, C, f) / (float)C + (float)eps);
        } else {
            if (layer) {
                float s1 = 0.0f;
                for (int64_t c = 0; c < C; c++) s1 += xr[c];
                mu = s1 / (float)C;
            }
            float ss = 0.0f;
            for (int64_t c = 0; c < C; c++) ss = fmaf(xr[c] - mu, xr[c] - mu, ss);
            rs = 1.0f / sqrtf(ss / (float)C + (float)eps);
        }
        if (mean) fdata(mean)[r] = mu;
        fdata(rstd)[r] = rs;
        for (int64_t c = 0; c < C; c++) {
            float n = (xr[c] - mu) * rs;
            if (llama || none) n = rnd(n, f);
            if (gain) n = n * ld(gain, c, f);
            if (bias) n = n + ld(bias, c, f);
            fdata(y)[r * C + c] = rnd2(n, f, y->format);
        }
    }
    free(xin);
    return 0;
}

/* Backward: dx from the row sums of dn = gain dy and dn xhat in fp32, except
 * warp_tree, which follows its kernel (above; ptxas may fuse one of the two
 * products of rstd g - k x into the difference, PTX mul and sub carrying no
 * rounding modifier: one rounding the model cannot know).  dgain and dbias:
 * fp32 sums over the rows in order, for every variant. */
static int cpu_norm_bwd(tbackend *be, const tsite *at, ktensor *dx, ktensor *dgain, ktensor *dbias, const ktensor *dy,
                        const ktensor *x, const ktensor *gain, const ktensor *mean, const ktensor *rstd)
{
    enter(at);
    prec_format f = site_fmt(at);
    int64_t N = x->shape[0], C = x->shape[1];
    float *xin = operand(x, f), *dyin = operand(dy, f);
    float *dg = calloc((size_t)C, sizeof *dg), *db = calloc((size_t)C, sizeof *db), *gd = malloc((size_t)C * sizeof *gd);
    int warp = at->op == TOP_RMSNORM && at->variant == KRMSNORM_WARP_TREE;
    if (!xin || !dyin || !dg || !db || !gd) {
        free(xin), free(dyin), free(dg), free(db), free(gd);
        return tbackend_fail(be, "cpu: out of memory");
    }
    for (int64_t r = 0; r < N; r++) {
        const float *xr = xin + r * C, *dyr = dyin + r * C;
        float mu = mean ? fdata(mean)[r] : 0.0f, rs = fdata(rstd)[r];
        float sum_dn = 0.0f, sum_dn_xhat = 0.0f;
        for (int64_t c = 0; c < C; c++) {
            float xhat = (xr[c] - mu) * rs;
            float dn = gain ? dyr[c] * ld(gain, c, f) : dyr[c];
            sum_dn += dn;
            sum_dn_xhat += dn * xhat;
            dg[c] += dyr[c] * xhat;
            db[c] += dyr[c];
        }
        if (warp) {
            /* the warp_tree kernel's own formula and order: g = gain dy,
             * k = ((sum g x) rstd rstd rstd) / C, dx = rstd g - k x */
            for (int64_t c = 0; c < C; c++) gd[c] = gain ? ld(gain, c, f) * dyr[c] : dyr[c];
            const float k = warp_row_dot(gd, xr, C, f) * rs * rs * rs / (float)C;
            for (int64_t c = 0; c < C; c++) fdata(dx)[r * C + c] = rnd2(rs * gd[c] - k * xr[c], f, dx->format);
            continue;
        }
        float mean_dn = mean ? sum_dn / (float)C : 0.0f, mean_dn_xhat = sum_dn_xhat / (float)C;
        for (int64_t c = 0; c < C; c++) {
            float xhat = (xr[c] - mu) * rs;
            float dn = gain ? dyr[c] * ld(gain, c, f) : dyr[c];
            fdata(dx)[r * C + c] = rnd2((dn - mean_dn - xhat * mean_dn_xhat) * rs, f, dx->format);
        }
    }
    /* the kernels write dgain, dbias in the path's format; the model adds them to its gradients */
    for (int64_t c = 0; c < C; c++) {
        if (dgain) fdata(dgain)[c] = rnd((double)fdata(dgain)[c] + rnd(dg[c], f), dgain->format);
        if (dbias) fdata(dbias)[c] = rnd((double)fdata(dbias)[c] + rnd(db[c], f), dbias->format);
    }
    free(xin), free(dyin), free(dg), free(db), free(gd);
    return 0;
}

/* ---- matmul ------------------------------------------------------------------------- */

/* fp8_scaling=delayed: every (site, operand, replica)'s last TFP8_AMAX_HISTORY
 * amaxes (ring) and how many calls recorded one (tbackend_fp8_history_index). */
typedef struct {
    int64_t n;
    float *amax;     /* [n][TFP8_AMAX_HISTORY] */
    int64_t *calls;  /* [n] */
    float *saved_amax;     /* fp8_histories_save's copy (NULL: none yet) */
    int64_t *saved_calls;
    int64_t saved_n;
} cpu_histories;

/* The history an fp8 operand of site `at` scales from, or NULL (current scaling). */
typedef struct {
    float *amax;
    int64_t *calls;
    int frozen; /* be->fp8_frozen: scale from the history, record nothing */
} amax_history;

/* Test hooks (backend.h): the planted shared history, the last fp8 GEMM's scales. */
static int shared_history_planted;
static float last_fp8_scales[2];

void tbackend_cpu_plant_shared_fp8_history(int on) { shared_history_planted = on; }

void tbackend_cpu_last_fp8_scales(float *a, float *b)
{
    *a = last_fp8_scales[0];
    *b = last_fp8_scales[1];
}

static int history_of(tbackend *be, const tsite *at, int operand, amax_history *out)
{
    cpu_histories *h = be->impl;
    int64_t n = tbackend_fp8_history_count(be);
    if (h->n != n) { /* first delayed GEMM, or another depth or replica count bound */
        free(h->amax), free(h->calls);
        h->amax = calloc((size_t)n * TFP8_AMAX_HISTORY, sizeof *h->amax);
        h->calls = calloc((size_t)n, sizeof *h->calls);
        h->n = h->amax && h->calls ? n : 0;
        if (!h->n) return tbackend_fail(be, "cpu: out of memory");
    }
    int64_t i = shared_history_planted ? operand : tbackend_fp8_history_index(be, at, operand);
    *out = (amax_history){h->amax + i * TFP8_AMAX_HISTORY, h->calls + i, be->fp8_frozen};
    return 0;
}

/* An operand as real values [rows, K] (K contiguous), rounded into the path's
 * operand format.  fp8: per-tensor scale amax / max_finite, or with block =
 * (br, 128) one scale per br x 128 tile; scales[] gets them, q the stored values.
 * hist (per tensor only; NULL: current scaling): the amax in the scale is the
 * max of the history's recorded amaxes (this tensor's own on the first call),
 * and this tensor's amax is recorded. */
static int gemm_operand(const ktensor *t, int trans, int64_t rows, int64_t K, prec_format f, int block_rows,
                        const amax_history *hist, float *q, float *scales)
{
    /* gather real values in [rows, K] orientation */
    int fp8 = f == PREC_E4M3 || f == PREC_E5M2;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < K; k++) {
            int64_t i = trans ? k * rows + r : r * K + k;
            q[r * K + k] = fp8 ? val(t, i) : ld(t, i, f);
        }
    if (!fp8) return 0;
    double maxf = prec_format_get(f)->max_finite;
    int64_t br = block_rows ? block_rows : rows, bk = block_rows ? KMATMUL_FP8_BLOCK : K;
    int64_t nkb = (K + bk - 1) / bk;
    for (int64_t r0 = 0; r0 < rows; r0 += br)
        for (int64_t k0 = 0; k0 < K; k0 += bk) {
            float amax = 0.0f;
            for (int64_t r = r0; r < r0 + br && r < rows; r++)
                for (int64_t k = k0; k < k0 + bk && k < K; k++) amax = fmaxf(amax, fabsf(q[r * K + k]));
            float scaled_by = amax;
            if (hist) {
                int64_t recorded = *hist->calls < TFP8_AMAX_HISTORY ? *hist->calls : TFP8_AMAX_HISTORY;
                if (recorded) scaled_by = 0.0f;
                for (int64_t i = 0; i < recorded; i++) scaled_by = fmaxf(scaled_by, hist->amax[i]);
                if (!hist->frozen) {
                    hist->amax[*hist->calls % TFP8_AMAX_HISTORY] = amax;
                    ++*hist->calls;
                }
            }
            float sc = scaled_by > 0.0f ? (float)(scaled_by / maxf) : 1.0f;
            scales[(r0 / br) * nkb + k0 / bk] = sc;
            for (int64_t r = r0; r < r0 + br && r < rows; r++)
                for (int64_t k = k0; k < k0 + bk && k < K; k++) q[r * K + k] = rnd(q[r * K + k] / sc, f);
        }
    return 0;
}

/* matmul_mma: each output the model's chain of blocks over K in order
 * (mma_dot), from a zero accumulator, on the operands in the model's input
 * format (tf32: their fp32 words); then, as kernels/mma_emulate.h's
 * epilogue, y = round(fp32(D + y_old)) into y's format. */
static int cpu_matmul_mma(tbackend *be, const tsite *at, ktensor *y, const ktensor *a, int a_trans, const ktensor *b,
                          int b_trans, int64_t M, int64_t N, int64_t K, int accumulate)
{
    const char *fallback;
    char why[256], name[64];
    const mma_model *model = tplan_mma_model(at->slot, at->path, at->variant, &fallback, why, sizeof why);
    if (!model) {
        tsite_name(at, name, sizeof name);
        return tbackend_fail(be, "%s: %s", name, why);
    }
    const prec_format in = model->arith.in, load = in == PREC_TF32 ? PREC_FP32 : in;
    const size_t esz = (size_t)mma_elem_bytes(in);
    uint8_t *qa = malloc((size_t)(M * K) * esz + 1), *qb = malloc((size_t)(N * K) * esz + 1);
    if (!qa || !qb) {
        free(qa), free(qb);
        return tbackend_fail(be, "cpu: out of memory");
    }
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) mma_store(in, qa, (long)(m * K + k), ld(a, a_trans ? k * M + m : m * K + k, load));
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) mma_store(in, qb, (long)(n * K + k), ld(b, b_trans ? n * K + k : k * N + n, load));
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            const uint32_t bits = mma_dot(&model->arith, (int)K, qa + (size_t)(m * K) * esz, qb + (size_t)(n * K) * esz, 0u);
            float d;
            memcpy(&d, &bits, sizeof d);
            float *dst = &fdata(y)[m * N + n];
            const float t = accumulate ? d + *dst : d; /* fp32 add, as the GPU epilogue */
            *dst = rnd(t, y->format);
        }
    free(qa), free(qb);
    return 0;
}

static int cpu_matmul(tbackend *be, const tsite *at, ktensor *y, const ktensor *a, int a_trans, const ktensor *b,
                      int b_trans, int accumulate)
{
    enter(at);
    kpath path = at->path;
    char name[64];
    int64_t M = a_trans ? a->shape[1] : a->shape[0], K = a_trans ? a->shape[0] : a->shape[1];
    int64_t Kb = b_trans ? b->shape[1] : b->shape[0], N = b_trans ? b->shape[0] : b->shape[1];
    int y_fp32 = y->format == PREC_FP32 && (path == KPATH_BF16 || path == KPATH_FP16);
    if (K != Kb || y->shape[0] != M || y->shape[1] != N || (y->format != tpath_storage(path) && !y_fp32)) {
        tsite_name(at, name, sizeof name);
        return tbackend_fail(be, "%s: matmul shapes/formats disagree: A %lldx%lld%s, B %lldx%lld%s, y %lldx%lld %s",
                             name, (long long)a->shape[0], (long long)a->shape[1], a_trans ? "^T" : "",
                             (long long)b->shape[0], (long long)b->shape[1], b_trans ? "^T" : "",
                             (long long)y->shape[0], (long long)y->shape[1], prec_format_name(y->format));
    }
    if (at->op == TOP_MATMUL_MMA) return cpu_matmul_mma(be, at, y, a, a_trans, b, b_trans, M, N, K, accumulate);
    int grad = tslot_is_gradient_gemm(at->slot);
    prec_format fa = tpath_operand(path, grad), fb = tpath_operand(path, 0);
    if (at->op == TOP_MATMUL_FAST) fa = fb = PREC_TF32; /* supports(): fp32 path only */
    int blocked = at->op == TOP_MATMUL_BLOCK_FP8;
    int64_t nkb = (K + KMATMUL_FP8_BLOCK - 1) / KMATMUL_FP8_BLOCK;
    float *qa = malloc((size_t)(M * K + 1) * sizeof *qa), *qb = malloc((size_t)(N * K + 1) * sizeof *qb);
    float *sa = malloc((size_t)((M + 1) * (nkb + 1)) * sizeof *sa);
    float *sb = malloc((size_t)((N / KMATMUL_FP8_BLOCK + 2) * (nkb + 1)) * sizeof *sb);
    if (!qa || !qb || !sa || !sb) {
        free(qa), free(qb), free(sa), free(sb);
        return tbackend_fail(be, "cpu: out of memory");
    }
    amax_history ha, hb;
    int delayed = tbackend_fp8_delayed(be, at);
    if (delayed && (history_of(be, at, 0, &ha) || history_of(be, at, 1, &hb))) {
        free(qa), free(qb), free(sa), free(sb);
        return -1;
    }
    /* B as [N, K]: transposed relative to its [K, N] math shape unless b_trans */
    gemm_operand(a, a_trans, M, K, fa, blocked ? 1 : 0, delayed ? &ha : NULL, qa, sa);
    gemm_operand(b, !b_trans, N, K, fb, blocked ? KMATMUL_FP8_BLOCK : 0, delayed ? &hb : NULL, qb, sb);
    int fp8 = path == KPATH_FP8;
    if (fp8 && !blocked) last_fp8_scales[0] = sa[0], last_fp8_scales[1] = sb[0];
    int slices = !blocked && at->variant == KMATMUL_SPLIT_K ? KMATMUL_SPLIT_K_SLICES : 1;
    int64_t slice = (K + slices - 1) / slices;
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            const float *ar = qa + m * K, *br = qb + n * K;
            float acc = 0.0f;
            if (blocked) {
                /* each 128-wide K group summed in fp32, scaled, added to the fp32 accumulator */
                for (int64_t kb = 0; kb < nkb; kb++) {
                    float part = 0.0f;
                    for (int64_t k = kb * KMATMUL_FP8_BLOCK; k < (kb + 1) * KMATMUL_FP8_BLOCK && k < K; k++)
                        part += ar[k] * br[k];
                    acc += part * (sa[m * nkb + kb] * sb[(n / KMATMUL_FP8_BLOCK) * nkb + kb]);
                }
            } else {
                for (int s = 0; s < slices; s++) {
                    float part = 0.0f;
                    for (int64_t k = s * slice; k < (s + 1) * slice && k < K; k++) part += ar[k] * br[k];
                    acc += part;
                }
                if (fp8) acc *= sa[0] * sb[0];
            }
            float *dst = &fdata(y)[m * N + n];
            *dst = rnd(accumulate ? acc + *dst : acc, y->format);
        }
    free(qa), free(qb), free(sa), free(sb);
    return 0;
}

/* ---- attention ------------------------------------------------------------------------ */

/* flash_mma, flash_mma_exp2: the kernels' arithmetic (kernels/attention_mma_arith.h)
 * on the matrix units of tplan_attention_mma_model (the H100's), one head at
 * a time; what the kernels refuse (fp32, D not a multiple of 8 or above 128)
 * is refused here, naming the site. */
static int mma_attention_arith(tbackend *be, const tsite *at, int64_t T, int64_t D, katt_mma_arith *e)
{
    char why[256], name[64];
    const mma_model *m = NULL;
    if (!kattention_supports(at->path, at->variant, D, why, sizeof why) ||
        !(m = tplan_attention_mma_model(at->path, why, sizeof why))) {
        tsite_name(at, name, sizeof name);
        return tbackend_fail(be, "%s: %s (head dimension %lld; --set attention=%s:flash runs any)", name, why,
                             (long long)D, kpath_name(at->path));
    }
    *e = (katt_mma_arith){&m->arith, site_fmt(at), katt_is_exp2(at->variant),
                          truncating ? KBUG_TRUNCATE_OUTPUT : KBUG_NONE, T, D, 1.0f / sqrtf((float)D)};
    return 0;
}

/* Head h of batch b of a [B,T,H,D] tensor (row stride C) into or out of [T,D]. */
static void head_get(double *dst, const float *src, int b, int h, int T, int64_t C, int64_t D)
{
    for (int t = 0; t < T; t++)
        for (int64_t d = 0; d < D; d++) dst[t * D + d] = src[((int64_t)b * T + t) * C + h * D + d];
}

static void head_put(ktensor *dst, const double *src, int b, int h, int T, int64_t C, int64_t D, prec_format f)
{
    for (int t = 0; t < T; t++)
        for (int64_t d = 0; d < D; d++)
            fdata(dst)[((int64_t)b * T + t) * C + h * D + d] = rnd2(src[t * D + d], f, dst->format);
}

static int cpu_attention_mma_fwd(tbackend *be, const tsite *at, ktensor *y, ktensor *lse, const ktensor *q,
                                 const ktensor *k, const ktensor *v, int B, int T, int H)
{
    const prec_format f = site_fmt(at);
    const int64_t C = q->shape[1], D = C / H, n = (int64_t)T * D;
    katt_mma_arith e;
    if (mma_attention_arith(be, at, T, D, &e)) return -1;
    float *Q = operand(q, f), *K = operand(k, f), *V = operand(v, f);
    double *hq = malloc(sizeof(double) * (size_t)(n + 1)), *hk = malloc(sizeof(double) * (size_t)(n + 1)),
           *hv = malloc(sizeof(double) * (size_t)(n + 1)), *ho = malloc(sizeof(double) * (size_t)(n + 1)),
           *hl = malloc(sizeof(double) * (size_t)(T + 1));
    int rc = Q && K && V && hq && hk && hv && ho && hl ? 0 : -1;
    for (int b = 0; !rc && b < B; b++)
        for (int h = 0; !rc && h < H; h++) {
            head_get(hq, Q, b, h, T, C, D);
            head_get(hk, K, b, h, T, C, D);
            head_get(hv, V, b, h, T, C, D);
            rc = katt_mma_arith_forward(&e, hq, hk, hv, ho, hl);
            if (rc) break;
            head_put(y, ho, b, h, T, C, D, f);
            for (int t = 0; t < T; t++) fdata(lse)[((int64_t)b * H + h) * T + t] = (float)hl[t];
        }
    free(Q), free(K), free(V), free(hq), free(hk), free(hv), free(ho), free(hl);
    return rc ? tbackend_fail(be, "cpu: out of memory") : 0;
}

static int cpu_attention_mma_bwd(tbackend *be, const tsite *at, ktensor *dq, ktensor *dk, ktensor *dv,
                                 const ktensor *dy, const ktensor *q, const ktensor *k, const ktensor *v,
                                 const ktensor *y, const ktensor *lse, int B, int T, int H)
{
    const prec_format f = site_fmt(at);
    const int64_t C = q->shape[1], D = C / H, n = (int64_t)T * D;
    katt_mma_arith e;
    if (mma_attention_arith(be, at, T, D, &e)) return -1;
    float *src[5] = {operand(q, f), operand(k, f), operand(v, f), operand(dy, f), operand(y, f)};
    double *hd[8], *hl = malloc(sizeof(double) * (size_t)(T + 1)); /* q k v g o, dq dk dv of one head */
    int rc = hl ? 0 : -1;
    for (int i = 0; i < 8; i++) {
        hd[i] = malloc(sizeof(double) * (size_t)(n + 1));
        if (!hd[i] || (i < 5 && !src[i])) rc = -1;
    }
    for (int b = 0; !rc && b < B; b++)
        for (int h = 0; !rc && h < H; h++) {
            for (int i = 0; i < 5; i++) head_get(hd[i], src[i], b, h, T, C, D);
            for (int t = 0; t < T; t++) hl[t] = fdata(lse)[((int64_t)b * H + h) * T + t];
            rc = katt_mma_arith_backward(&e, hd[0], hd[1], hd[2], hd[3], hd[4], hl, hd[5], hd[6], hd[7]);
            if (rc) break;
            head_put(dq, hd[5], b, h, T, C, D, f);
            head_put(dk, hd[6], b, h, T, C, D, f);
            head_put(dv, hd[7], b, h, T, C, D, f);
        }
    for (int i = 0; i < 8; i++) {
        if (i < 5) free(src[i]);
        free(hd[i]);
    }
    free(hl);
    return rc ? tbackend_fail(be, "cpu: out of memory") : 0;
}

/* q, k, v, y: [B,T,H,D]; per (b, h) and query t, keys j <= t.
 * flash_mma, flash_mma_exp2: above.  naive (kernels/attention.h): scores S and probabilities P rounded to the
 * path's format, as that kernel materialises them; flash: S and P stay fp32
 * (two passes here where the kernel rescales online; same precision class). */
static int cpu_attention_fwd(tbackend *be, const tsite *at, ktensor *y, ktensor *lse, const ktensor *q, const ktensor *k,
                             const ktensor *v, int B, int T, int H)
{
    enter(at);
    if (katt_is_mma(at->variant)) return cpu_attention_mma_fwd(be, at, y, lse, q, k, v, B, T, H);
    prec_format f = site_fmt(at);
    int naive = at->variant == KATT_NAIVE;
    int64_t C = q->shape[1], D = C / H;
    float *Q = operand(q, f), *Kt = operand(k, f), *V = operand(v, f);
    float *p = malloc((size_t)T * sizeof *p), *acc = malloc((size_t)D * sizeof *acc);
    if (!Q || !Kt || !V || !p || !acc) {
        free(Q), free(Kt), free(V), free(p), free(acc);
        return tbackend_fail(be, "cpu: out of memory");
    }
    float scale = 1.0f / sqrtf((float)D);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                const float *qt = Q + ((int64_t)b * T + t) * C + h * D;
                float mx = -INFINITY;
                for (int j = 0; j <= t; j++) {
                    const float *kj = Kt + ((int64_t)b * T + j) * C + h * D;
                    float s = 0.0f;
                    for (int64_t d = 0; d < D; d++) s = fmaf(qt[d], kj[d], s);
                    p[j] = naive ? rnd(scale * s, f) : scale * s;
                    mx = fmaxf(mx, p[j]);
                }
                float sum = 0.0f;
                for (int j = 0; j <= t; j++) {
                    p[j] = expf(p[j] - mx);
                    sum += p[j];
                }
                float L = mx + logf(sum);
                for (int j = 0; j <= t; j++) p[j] = naive ? rnd(p[j] / sum, f) : p[j] / sum;
                for (int64_t d = 0; d < D; d++) acc[d] = 0.0f;
                for (int j = 0; j <= t; j++) {
                    const float *vj = V + ((int64_t)b * T + j) * C + h * D;
                    for (int64_t d = 0; d < D; d++) acc[d] = fmaf(p[j], vj[d], acc[d]);
                }
                for (int64_t d = 0; d < D; d++) fdata(y)[((int64_t)b * T + t) * C + h * D + d] = rnd2(acc[d], f, y->format);
                fdata(lse)[((int64_t)b * H + h) * T + t] = L;
            }
    free(Q), free(Kt), free(V), free(p), free(acc);
    return 0;
}

/* Backward from lse: P = exp(S - lse); naive rounds P, dP and dS to the
 * path's format and uses rowsum(P dP); flash keeps them fp32 and uses
 * rowsum(dout o) with the stored (rounded) o. */
static int cpu_attention_bwd(tbackend *be, const tsite *at, ktensor *dq, ktensor *dk, ktensor *dv, const ktensor *dy,
                             const ktensor *q, const ktensor *k, const ktensor *v, const ktensor *y,
                             const ktensor *lse, int B, int T, int H)
{
    enter(at);
    if (katt_is_mma(at->variant)) return cpu_attention_mma_bwd(be, at, dq, dk, dv, dy, q, k, v, y, lse, B, T, H);
    prec_format f = site_fmt(at);
    int naive = at->variant == KATT_NAIVE;
    int64_t C = q->shape[1], D = C / H, n = (int64_t)B * T * C;
    float *Q = operand(q, f), *Kt = operand(k, f), *V = operand(v, f), *Y = operand(y, f), *dY = operand(dy, f);
    float *gq = calloc((size_t)n, sizeof *gq), *gk = calloc((size_t)n, sizeof *gk), *gv = calloc((size_t)n, sizeof *gv);
    float *P = malloc((size_t)T * sizeof *P), *dP = malloc((size_t)T * sizeof *dP);
    if (!Q || !Kt || !V || !Y || !dY || !gq || !gk || !gv || !P || !dP) {
        free(Q), free(Kt), free(V), free(Y), free(dY), free(gq), free(gk), free(gv), free(P), free(dP);
        return tbackend_fail(be, "cpu: out of memory");
    }
    float scale = 1.0f / sqrtf((float)D);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                int64_t rt = ((int64_t)b * T + t) * C + h * D;
                float L = fdata(lse)[((int64_t)b * H + h) * T + t];
                float Dt = 0.0f;
                for (int j = 0; j <= t; j++) {
                    int64_t rj = ((int64_t)b * T + j) * C + h * D;
                    float s = 0.0f, dp = 0.0f;
                    for (int64_t d = 0; d < D; d++) s = fmaf(Q[rt + d], Kt[rj + d], s);
                    for (int64_t d = 0; d < D; d++) dp = fmaf(dY[rt + d], V[rj + d], dp);
                    P[j] = naive ? rnd(expf(rnd(scale * s, f) - L), f) : expf(scale * s - L);
                    dP[j] = naive ? rnd(dp, f) : dp;
                    if (naive) Dt = fmaf(P[j], dP[j], Dt);
                }
                if (!naive)
                    for (int64_t d = 0; d < D; d++) Dt = fmaf(dY[rt + d], Y[rt + d], Dt);
                for (int j = 0; j <= t; j++) {
                    int64_t rj = ((int64_t)b * T + j) * C + h * D;
                    float ds = P[j] * (dP[j] - Dt);
                    if (naive) ds = rnd(ds, f);
                    for (int64_t d = 0; d < D; d++) {
                        gq[rt + d] = fmaf(ds, Kt[rj + d], gq[rt + d]);
                        gk[rj + d] = fmaf(ds, Q[rt + d], gk[rj + d]);
                        gv[rj + d] = fmaf(P[j], dY[rt + d], gv[rj + d]);
                    }
                }
            }
    for (int64_t i = 0; i < n; i++) {
        fdata(dq)[i] = rnd2(scale * gq[i], f, dq->format);
        fdata(dk)[i] = rnd2(scale * gk[i], f, dk->format);
        fdata(dv)[i] = rnd2(gv[i], f, dv->format);
    }
    free(Q), free(Kt), free(V), free(Y), free(dY), free(gq), free(gk), free(gv), free(P), free(dP);
    return 0;
}

/* ---- rope ---------------------------------------------------------------------------- */

/* kernels/rope.h: table = cos, sin of p base^(-2i/D) computed in double,
 * rounded to fp32 (krope_tables_host, the kernels' own table);
 * fp32_angle = sincosf of the angle formed in fp32 from an fp32 frequency. */
static int rope_apply(tbackend *be, const tsite *at, ktensor *y, const ktensor *x, int B, int T, int H, double theta,
                      float sign)
{
    prec_format f = site_fmt(at);
    int table = at->variant != KROPE_FP32_ANGLE;
    int64_t C = x->shape[1], D = C / H, half = D / 2;
    float *X = operand(x, f), *cs = malloc((size_t)(T * half) * sizeof *cs), *sn = malloc((size_t)(T * half) * sizeof *sn);
    float *inv = malloc((size_t)half * sizeof *inv);
    if (!X || !cs || !sn || !inv) {
        free(X), free(cs), free(sn), free(inv);
        return tbackend_fail(be, "cpu: out of memory");
    }
    krope_tables_host(cs, sn, inv, T, D, theta);
    for (int64_t bt = 0; bt < (int64_t)B * T; bt++) {
        int t = (int)(bt % T);
        for (int h = 0; h < H; h++)
            for (int64_t i = 0; i < half; i++) {
                float c, s;
                if (table) {
                    c = cs[t * half + i];
                    s = sn[t * half + i];
                } else {
                    float ang = (float)t * inv[i];
                    c = cosf(ang);
                    s = sinf(ang);
                }
                s *= sign;
                int64_t o = bt * C + h * D;
                float x1 = X[o + i], x2 = X[o + i + half];
                fdata(y)[o + i] = rnd2(x1 * c - x2 * s, f, y->format);
                fdata(y)[o + i + half] = rnd2(x1 * s + x2 * c, f, y->format);
            }
    }
    free(X), free(cs), free(sn), free(inv);
    return 0;
}

static int cpu_rope_fwd(tbackend *be, const tsite *at, ktensor *y, const ktensor *x, int B, int T, int H, double theta)
{
    enter(at);
    return rope_apply(be, at, y, x, B, T, H, theta, 1.0f);
}

static int cpu_rope_bwd(tbackend *be, const tsite *at, ktensor *dx, const ktensor *dy, int B, int T, int H, double theta)
{
    enter(at);
    return rope_apply(be, at, dx, dy, B, T, H, theta, -1.0f);
}

/* ---- activation, residual, transpose ---------------------------------------------------- */

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

static int cpu_activation_fwd(tbackend *be, const tsite *at, ktensor *y, ktensor *g, const ktensor *x)
{
    enter(at);
    prec_format f = site_fmt(at);
    int gelu = at->op == TOP_GELU_TANH;
    for (int64_t i = 0; i < numel(x); i++) {
        float z = ld(x, i, f), r;
        if (gelu) r = 0.5f * z * (1.0f + tanhf(GELU_K * (z + 0.044715f * z * z * z)));
        else r = z > 0.0f ? z * z : 0.0f;
        fdata(y)[i] = rnd2(r, f, y->format);
        if (g) fdata(g)[i] = rnd2(z > 0.0f ? 2.0f * z : 0.0f, f, g->format); /* relu2 store_grad: f'(x) */
    }
    return 0;
}

static int cpu_activation_bwd(tbackend *be, const tsite *at, ktensor *dx, const ktensor *dy, const ktensor *x,
                              const ktensor *g)
{
    enter(at);
    prec_format f = site_fmt(at);
    int gelu = at->op == TOP_GELU_TANH;
    for (int64_t i = 0; i < numel(x); i++) {
        float z = ld(x, i, f), gy = ld(dy, i, f), d;
        if (g) {
            d = ld(g, i, f);
        } else if (gelu) {
            float u = GELU_K * (z + 0.044715f * z * z * z), th = tanhf(u);
            d = 0.5f * (1.0f + th) + 0.5f * z * (1.0f - th * th) * GELU_K * (1.0f + 3.0f * 0.044715f * z * z);
        } else {
            d = z > 0.0f ? 2.0f * z : 0.0f;
        }
        fdata(dx)[i] = rnd2(gy * d, f, dx->format);
    }
    return 0;
}

static int cpu_residual(tbackend *be, const tsite *at, ktensor *y, const ktensor *a, const ktensor *b)
{
    enter(at);
    prec_format f = site_fmt(at);
    for (int64_t i = 0; i < numel(y); i++)
        fdata(y)[i] = rnd2((double)ld(a, i, f) + ld(b, i, f), f, y->format);
    return 0;
}

static int cpu_transpose(tbackend *be, const tsite *at, ktensor *out, const ktensor *in, int accumulate)
{
    enter(at);
    int64_t R = in->shape[0], C = in->shape[1];
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) {
            float *dst = &fdata(out)[c * R + r];
            double x = val(in, r * C + c);
            *dst = rnd(accumulate ? *dst + x : x, out->format);
        }
    return 0;
}

static int cpu_accumulate(tbackend *be, const tsite *at, ktensor *dst, const ktensor *src)
{
    enter(at);
    for (int64_t i = 0; i < numel(dst); i++) fdata(dst)[i] = rnd((double)fdata(dst)[i] + val(src, i), dst->format);
    return 0;
}

/* A copy: every value fits y's format (tbackend_check_concat), so nothing rounds. */
static int cpu_concat_columns(tbackend *be, ktensor *y, const ktensor *const *x, int n)
{
    if (tbackend_check_concat(be, y, x, n)) return -1;
    const int64_t rows = y->shape[0], width = y->shape[1];
    int64_t col0 = 0;
    for (int i = 0; i < n; i++) {
        const int64_t w = x[i]->shape[1];
        for (int64_t r = 0; r < rows; r++)
            memcpy(fdata(y) + r * width + col0, fdata(x[i]) + r * w, (size_t)w * sizeof(float));
        col0 += w;
    }
    return 0;
}

/* ---- cross-entropy ------------------------------------------------------------------------ */

static int cpu_cross_entropy(tbackend *be, const tsite *at, ktensor *losses, ktensor *dlogits, const ktensor *logits,
                             const int32_t *targets, double softcap, const double *dloss)
{
    enter(at);
    /* fp32_logits reads the lm_head's fp32 accumulator and writes fp32 dlogits */
    prec_format f = at->variant == KCE_FP32_LOGITS ? PREC_FP32 : site_fmt(at);
    int64_t N = logits->shape[0], V = logits->shape[1];
    float *z = malloc((size_t)V * sizeof *z);
    if (!z) return tbackend_fail(be, "cpu: out of memory");
    for (int64_t r = 0; r < N; r++) {
        int32_t tgt = targets[r];
        if (tgt < 0 || tgt >= V) {
            free(z);
            return tbackend_fail(be, "slot cross_entropy: target %d at row %lld outside vocabulary %lld", tgt,
                                 (long long)r, (long long)V);
        }
        float mx = -INFINITY;
        for (int64_t j = 0; j < V; j++) { /* the soft-cap of kernels/cross_entropy.h: cap tanhf(l / cap) */
            float l = ld(logits, r * V + j, f);
            z[j] = softcap > 0 ? (float)softcap * tanhf(l / (float)softcap) : l;
            mx = fmaxf(mx, z[j]);
        }
        float sum = 0.0f;
        for (int64_t j = 0; j < V; j++) sum += expf(z[j] - mx);
        float lse = mx + logf(sum);
        fdata(losses)[r] = lse - z[tgt];
        if (!dlogits) continue;
        for (int64_t j = 0; j < V; j++) {
            float g = expf(z[j] - lse) - (j == tgt ? 1.0f : 0.0f);
            if (softcap > 0) { /* times dz/dl = 1 - th^2, th = tanhf(l / cap) recomputed as the kernel does */
                float th = tanhf(ld(logits, r * V + j, f) / (float)softcap);
                g *= 1.0f - th * th;
            }
            fdata(dlogits)[r * V + j] = rnd2(g * (float)*dloss, f, dlogits->format);
        }
    }
    free(z);
    return 0;
}

/* The fused head, as kernels/cross_entropy.h documents klinear_ce: rows in
 * chunks of the variant's size; per chunk the logits [r,V] in fp32 (the
 * GEMM's fp32 accumulator, summed over C in order, as cpu_matmul), the
 * cross-entropy on them as cpu_cross_entropy (no soft-cap), dlogits rounded
 * into the path's format, dh[chunk] = dlogits W rounded into it, and
 * dW = its fp32 value plus the chunk's fp32 sum dlogits^T h[chunk] (the
 * first chunk overwrites).  Under the planted bug KBUG_DROP_TERM each row's
 * sum leaves the last vocabulary entry out, as the kernel's does. */
static int cpu_linear_cross_entropy(tbackend *be, const tsite *at, ktensor *losses, ktensor *dh, ktensor *dW,
                                    const ktensor *h, const ktensor *W, const int32_t *targets, const double *dloss)
{
    enter(at);
    const prec_format f = site_fmt(at);
    const int64_t N = h->shape[0], C = h->shape[1], V = W->shape[0];
    const int64_t R = klce_chunk_rows(at->variant) < N ? klce_chunk_rows(at->variant) : N;
    const int64_t terms = kernels_planted_bug() == KBUG_DROP_TERM ? V - 1 : V;
    if (W->shape[1] != C || losses->shape[0] != N || (dh && (dh->shape[0] != N || dh->shape[1] != C)) ||
        (dW && (dW->shape[0] != V || dW->shape[1] != C || dW->format != PREC_FP32)) || (dh && !dloss))
        return tbackend_fail(be, "slot cross_entropy: linear_cross_entropy arguments disagree: h %lldx%lld, W "
                             "%lldx%lld, losses %lld, dh %s, dW %s", (long long)N, (long long)C, (long long)W->shape[0],
                             (long long)W->shape[1], (long long)losses->shape[0], dh ? "given" : "none",
                             dW ? prec_format_name(dW->format) : "none");
    float *hq = operand(h, f), *wq = operand(W, f);       /* [N,C], [V,C] in the path's format */
    float *z = malloc((size_t)(R * V) * sizeof *z);      /* a chunk's logits [R,V] fp32, then its dlogits */
    int rc = hq && wq && z ? 0 : tbackend_fail(be, "cpu: out of memory");
    const float dl = dloss ? (float)*dloss : 0.0f;
    for (int64_t c0 = 0; !rc && c0 < N; c0 += R) {
        const int64_t r = N - c0 < R ? N - c0 : R;
        for (int64_t i = 0; i < r; i++)
            for (int64_t j = 0; j < V; j++) {
                const float *a = hq + (c0 + i) * C, *b = wq + j * C;
                float acc = 0.0f;
                for (int64_t k = 0; k < C; k++) acc += a[k] * b[k];
                z[i * V + j] = acc;
            }
        for (int64_t i = 0; i < r && !rc; i++) {
            const int32_t tgt = targets[c0 + i];
            float *zi = z + i * V;
            if (tgt >= V) {
                rc = tbackend_fail(be, "slot cross_entropy: target %d at row %lld outside vocabulary %lld", tgt,
                                   (long long)(c0 + i), (long long)V);
                break;
            }
            if (tgt < 0) { /* an ignored row: loss and gradients 0 */
                fdata(losses)[c0 + i] = 0.0f;
                for (int64_t j = 0; j < V; j++) zi[j] = 0.0f;
                continue;
            }
            float mx = -INFINITY;
            for (int64_t j = 0; j < V; j++) mx = fmaxf(mx, zi[j]);
            float sum = 0.0f;
            for (int64_t j = 0; j < terms; j++) sum += expf(zi[j] - mx);
            const float lse = mx + logf(sum);
            fdata(losses)[c0 + i] = lse - zi[tgt];
            for (int64_t j = 0; dh && j < V; j++)
                zi[j] = rnd((expf(zi[j] - lse) - (j == tgt ? 1.0f : 0.0f)) * dl, f);
        }
        if (rc || !dh) continue;
        for (int64_t i = 0; i < r; i++) /* dh[chunk] [r,C] = dlogits [r,V] W [V,C] */
            for (int64_t k = 0; k < C; k++) {
                float acc = 0.0f;
                for (int64_t j = 0; j < V; j++) acc += z[i * V + j] * wq[j * C + k];
                fdata(dh)[(c0 + i) * C + k] = rnd2(acc, f, dh->format);
            }
        for (int64_t j = 0; dW && j < V; j++) /* dW [V,C] (+)= dlogits^T [V,r] h[chunk] [r,C], fp32 */
            for (int64_t k = 0; k < C; k++) {
                float acc = 0.0f;
                for (int64_t i = 0; i < r; i++) acc += z[i * V + j] * hq[(c0 + i) * C + k];
                float *dst = &fdata(dW)[j * C + k];
                *dst = c0 > 0 ? acc + *dst : acc;
            }
    }
    free(hq), free(wq), free(z);
    return rc;
}

/* ---- gradient norm ------------------------------------------------------------------------- */

/* The sequential order of kernels/grad_norm.h: each tensor summed left to
 * right with fp32 fma, the per-tensor sums added in order, fp32 sqrt. */
static int cpu_grad_norm(tbackend *be, const tsite *at, tparam *const *params, int n, double *norm)
{
    enter(at);
    float total = 0.0f;
    for (int i = 0; i < n; i++) {
        const ktensor *g = &params[i]->grad;
        float s = 0.0f;
        for (int64_t j = 0; j < numel(g); j++) s = fmaf(val(g, j), val(g, j), s);
        total += s;
    }
    *norm = sqrtf(total);
    return 0;
}

/* ---- weight storage ---------------------------------------------------------------------------- */

/* The fp32 value the optimizer updates: master, the mantissa-buffer
 * reconstruction, or the working copy itself. */
static float master_value(const tparam *p, int64_t i)
{
    if (p->lowbits) {
        uint32_t hi = (uint32_t)prec_encode(fdata(&p->w)[i], PREC_BF16);
        uint32_t bits = (hi << 16) | ((const uint16_t *)p->lowbits)[i];
        float x;
        memcpy(&x, &bits, sizeof x);
        return x;
    }
    return p->master.data ? fdata(&p->master)[i] : fdata(&p->w)[i];
}

/* Store the updated value according to the weights slot.  x is the new
 * value p - step formed exactly (in double, from fp32 p and step): a master
 * or fp32 weights get it rounded to fp32, stochastic rounding rounds it
 * straight into the working format (as the kernels do from TwoSum). */
static void store_weight(tbackend *be, tparam *p, int64_t i, double x, uint64_t seed)
{
    if (p->lowbits) {
        float f = (float)x;
        uint32_t bits;
        memcpy(&bits, &f, sizeof bits);
        fdata(&p->w)[i] = (float)prec_decode(bits >> 16, PREC_BF16);
        ((uint16_t *)p->lowbits)[i] = (uint16_t)(bits & 0xFFFF);
    } else if (p->master.data) {
        fdata(&p->master)[i] = (float)x;
        fdata(&p->w)[i] = rnd((float)x, p->w.format);
    } else if (tbackend_site(be, TSLOT_WEIGHTS, -1)->variant == TWEIGHTS_SR && p->w.format != PREC_FP32) {
        prec_rounding sr = {PREC_SR, PREC_OVF_IEEE, false};
        fdata(&p->w)[i] = (float)prec_round(x, p->w.format, sr, tbackend_sr_bits(seed, (uint64_t)i));
    } else {
        fdata(&p->w)[i] = rnd((float)x, p->w.format);
    }
}

/* ---- AdamW -------------------------------------------------------------------------------------- */

/* AdamW in the kernels' two operation orders (kernels/adamw.h): llmc and
 * torch.  Gradients are scaled (loss scale, clipping) in their own format,
 * then read in the slot's path format; the update is formed in fp32. */
static int cpu_adamw(tbackend *be, tparam *p, const tadamw_args *a)
{
    const tsite *at = tbackend_site(be, TSLOT_ADAMW, -1);
    enter(at);
    prec_format f = site_fmt(at);
    int torch = at->variant == KADAMW_TORCH;
    float b1 = (float)a->beta1, b2 = (float)a->beta2;
    float c1 = (float)(1.0 - pow(a->beta1, (double)a->step)), c2 = (float)(1.0 - pow(a->beta2, (double)a->step));
    float lr = (float)a->lr, eps = (float)a->eps, wd = p->decay ? (float)a->weight_decay : 0.0f;
    for (int64_t i = 0; i < numel(&p->w); i++) {
        float gs = a->grad_scale == 1.0 ? val(&p->grad, i) : rnd(val(&p->grad, i) * (float)a->grad_scale, p->grad.format);
        float g = rnd(gs, f);
        float m = fdata(&p->m)[i], v = fdata(&p->v)[i];
        float w = master_value(p, i), step;
        if (torch) {
            w = w * (1.0f - lr * wd);
            m = m + (1.0f - b1) * (g - m);
            v = v + (1.0f - b2) * (g * g - v);
            step = (lr / c1) * m / (sqrtf(v) / sqrtf(c2) + eps);
        } else {
            m = b1 * m + (1.0f - b1) * g;
            v = b2 * v + (1.0f - b2) * g * g;
            step = lr * ((m / c1) / (sqrtf(v / c2) + eps) + wd * w);
        }
        fdata(&p->m)[i] = m;
        fdata(&p->v)[i] = v;
        store_weight(be, p, i, (double)w - (double)step, a->seed);
    }
    return 0;
}

/* ---- Muon / polar express -------------------------------------------------------------------------- */

/* C[r, c] = alpha A[r, k] B[k, c] + beta D[r, c] (B given as [k, c] or
 * transposed; D may be NULL), fp32 fma sums, one rounding into f: the
 * kmatmul GEMM the polar-express kernels issue. */
static void small_gemm(const float *A, const float *B, int b_trans, const float *Dm, float alpha, float beta, float *Cm,
                       int r, int k, int c, prec_format f)
{
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++) {
            float s = 0.0f;
            for (int l = 0; l < k; l++) s = fmaf(A[i * k + l], b_trans ? B[j * k + l] : B[l * c + j], s);
            float out = alpha * s;
            if (Dm) out = fmaf(beta, Dm[i * c + j], out);
            Cm[i * c + j] = rnd(out, f);
        }
}

/* kernels/polar_express.h on X [r, c] in place, one stage (0: X0 = G /
 * (1.02 |G|_F + 1e-6); 1 to 5: the step with the kernels' own coefficients,
 * kpe_coefficients):
 *   wide: A = X X^T, B = c A A + b A, X' = B X + a X
 *   tall: A = X^T X, B = c A A + b A, X' = X B + a X
 * fused forms X' in one GEMM (beta = a); split rounds B X first and adds a X
 * elementwise. */
static int polar_express_stage(float *X, int r, int c, prec_format f, kpe_coeffs which, int tall, int split, int stage)
{
    if (stage == 0) {
        float ss = 0.0f;
        for (int i = 0; i < r * c; i++) ss = fmaf(X[i], X[i], ss);
        float den = KPE_NORM_SAFETY * sqrtf(ss) + KPE_NORM_EPS;
        for (int i = 0; i < r * c; i++) X[i] = rnd(X[i] / den, f);
        return 0;
    }
    int g = tall ? c : r; /* Gram size */
    float *A = malloc((size_t)g * g * sizeof *A), *Bm = malloc((size_t)g * g * sizeof *Bm);
    float *T = malloc((size_t)r * c * sizeof *T), *Xn = malloc((size_t)r * c * sizeof *Xn);
    if (!A || !Bm || !T || !Xn) {
        free(A), free(Bm), free(T), free(Xn);
        return -1;
    }
    float abc[KPE_STEPS][3];
    kpe_coefficients(which, abc);
    float a = abc[stage - 1][0], b = abc[stage - 1][1], cc = abc[stage - 1][2];
    float *Xt = T; /* X^T for the tall form */
    if (tall) {
        for (int i = 0; i < r; i++)
            for (int j = 0; j < c; j++) Xt[j * r + i] = X[i * c + j];
        small_gemm(Xt, Xt, 1, NULL, 1.0f, 0.0f, A, c, r, c, f);       /* A = X^T X [c,c] */
    } else {
        small_gemm(X, X, 1, NULL, 1.0f, 0.0f, A, r, c, r, f);         /* A = X X^T [r,r] */
    }
    small_gemm(A, A, 0, A, cc, b, Bm, g, g, g, f);                    /* B = c A A + b A */
    if (!split) {
        if (tall) small_gemm(X, Bm, 0, X, 1.0f, a, Xn, r, c, c, f);   /* X B + a X */
        else small_gemm(Bm, X, 0, X, 1.0f, a, Xn, r, r, c, f);        /* B X + a X */
    } else {
        if (tall) small_gemm(X, Bm, 0, NULL, 1.0f, 0.0f, Xn, r, c, c, f);
        else small_gemm(Bm, X, 0, NULL, 1.0f, 0.0f, Xn, r, r, c, f);
        for (int i = 0; i < r * c; i++) Xn[i] = rnd(fmaf(a, X[i], Xn[i]), f);
    }
    memcpy(X, Xn, (size_t)r * c * sizeof *X);
    free(A), free(Bm), free(T), free(Xn);
    return 0;
}

static int site_polar_express_stage(const tsite *at, float *X, int r, int c, int stage)
{
    kpe_coeffs which = at->op == TOP_MUON_NEWTON_SCHULZ ? KPE_MUON_QUINTIC : KPE_POLAR_EXPRESS;
    return polar_express_stage(X, r, c, site_fmt(at), which, kpe_is_tall(at->variant, r, c), !kpe_is_fused(at->variant),
                               stage);
}

int tbackend_cpu_polar_express_stage(const tsite *at, float *X, int rows, int cols, int stage)
{
    if (stage < 0 || stage > KPE_STEPS) return -1;
    enter(at);
    return site_polar_express_stage(at, X, rows, cols, stage);
}

/* Muon (Jordan et al. 2024; modded-nanogpt): momentum buf = mu buf + (1-mu) g
 * in fp32, Nesterov u = (1-mu) g + mu buf rounded into the slot's path,
 * orthogonalised per [rows, cols] block, W <- W (1 - lr wd) - lr
 * sqrt(max(1, rows/cols)) O stored as the weights slot says. */
static int cpu_muon(tbackend *be, tparam *p, const tmuon_args *a)
{
    const tsite *at = tbackend_site(be, TSLOT_MUON, -1);
    enter(at);
    prec_format f = site_fmt(at);
    int R = p->rows, Cn = p->cols;
    float mu = (float)a->momentum;
    float *U = malloc((size_t)R * Cn * sizeof *U);
    if (!U) return tbackend_fail(be, "cpu: out of memory");
    float scale = sqrtf(fmaxf(1.0f, (float)R / (float)Cn));
    for (int blk = 0; blk < p->blocks; blk++) {
        int64_t off = (int64_t)blk * R * Cn;
        for (int64_t i = 0; i < (int64_t)R * Cn; i++) {
            float g = a->grad_scale == 1.0 ? val(&p->grad, off + i)
                                           : rnd(val(&p->grad, off + i) * (float)a->grad_scale, p->grad.format);
            float m = mu * fdata(&p->m)[off + i] + (1.0f - mu) * g;
            fdata(&p->m)[off + i] = m;
            U[i] = rnd((1.0f - mu) * g + mu * m, f);
        }
        for (int stage = 0; stage <= KPE_STEPS; stage++)
            if (site_polar_express_stage(at, U, R, Cn, stage)) {
                free(U);
                return tbackend_fail(be, "cpu: out of memory");
            }
        float lr = (float)a->lr, wd = p->decay ? (float)a->weight_decay : 0.0f;
        for (int64_t i = 0; i < (int64_t)R * Cn; i++) {
            float w = master_value(p, off + i);
            store_weight(be, p, off + i, (double)(w * (1.0f - lr * wd)) - (double)(lr * scale * U[i]), a->seed);
        }
    }
    free(U);
    return 0;
}

static int cpu_dp_init(tbackend *be, int world, int rank, const char *id_file)
{
    return tbackend_fail(be, "the CPU backend runs one process; data parallel (world %d) needs --backend cuda", world);
}

static int cpu_allreduce(tbackend *be, tparam *const *params, int n) { return 0; }

static int cpu_mem_available(tbackend *be, size_t *bytes, char *what, size_t what_len)
{
    return tbackend_host_available(bytes, what, what_len) ? tbackend_fail(be, "cannot read the available memory") : 0;
}

/* saved_n 0: the save found no history yet (restore empties them). */
static int cpu_fp8_histories_save(tbackend *be)
{
    cpu_histories *h = be->impl;
    if (h->n && h->saved_n != h->n) {
        free(h->saved_amax), free(h->saved_calls);
        h->saved_amax = malloc((size_t)h->n * TFP8_AMAX_HISTORY * sizeof *h->saved_amax);
        h->saved_calls = malloc((size_t)h->n * sizeof *h->saved_calls);
        if (!h->saved_amax || !h->saved_calls) {
            h->saved_n = 0;
            return tbackend_fail(be, "cpu: out of memory");
        }
    }
    h->saved_n = h->n;
    if (!h->n) return 0;
    memcpy(h->saved_amax, h->amax, (size_t)h->n * TFP8_AMAX_HISTORY * sizeof *h->amax);
    memcpy(h->saved_calls, h->calls, (size_t)h->n * sizeof *h->calls);
    return 0;
}

static int cpu_fp8_histories_restore(tbackend *be)
{
    cpu_histories *h = be->impl;
    if (!h->n) return 0;
    if (!h->saved_n) {
        memset(h->amax, 0, (size_t)h->n * TFP8_AMAX_HISTORY * sizeof *h->amax);
        memset(h->calls, 0, (size_t)h->n * sizeof *h->calls);
        return 0;
    }
    if (h->saved_n != h->n) return tbackend_fail(be, "cpu: fp8 amax histories restored from a save of another size");
    memcpy(h->amax, h->saved_amax, (size_t)h->n * TFP8_AMAX_HISTORY * sizeof *h->amax);
    memcpy(h->calls, h->saved_calls, (size_t)h->n * sizeof *h->calls);
    return 0;
}

static void cpu_destroy(tbackend *be)
{
    cpu_histories *h = be->impl;
    free(h->amax), free(h->calls), free(h->saved_amax), free(h->saved_calls), free(h);
    free(be->weight_ranges);
    tbinding_free(&be->bound);
    free(be);
}

tbackend *tbackend_cpu_create(void)
{
    tbackend *be = calloc(1, sizeof *be);
    cpu_histories *h = calloc(1, sizeof *h);
    if (!be || !h) {
        free(be), free(h);
        return NULL;
    }
    be->impl = h;
    be->name = "cpu";
    be->supports = cpu_supports;
    be->elem_bytes = cpu_elem_bytes;
    be->alloc = cpu_alloc;
    be->release = cpu_release;
    be->alloc_raw = cpu_alloc_raw;
    be->release_raw = cpu_release_raw;
    be->raw_upload = cpu_raw_copy;
    be->raw_download = cpu_raw_copy;
    be->upload = cpu_upload;
    be->download = cpu_download;
    be->read_bytes = cpu_read_bytes;
    be->write_bytes = cpu_write_bytes;
    be->zero = cpu_zero;
    be->fill_uniform = cpu_fill_uniform;
    be->count_nonfinite = cpu_count_nonfinite;
    be->sync = cpu_sync;
    be->mem_used = cpu_mem_used;
    be->mem_available = cpu_mem_available;
    be->embedding_fwd = cpu_embedding_fwd;
    be->embedding_bwd = cpu_embedding_bwd;
    be->norm_fwd = cpu_norm_fwd;
    be->norm_bwd = cpu_norm_bwd;
    be->matmul = cpu_matmul;
    be->attention_fwd = cpu_attention_fwd;
    be->attention_bwd = cpu_attention_bwd;
    be->rope_fwd = cpu_rope_fwd;
    be->rope_bwd = cpu_rope_bwd;
    be->activation_fwd = cpu_activation_fwd;
    be->activation_bwd = cpu_activation_bwd;
    be->residual = cpu_residual;
    be->cross_entropy = cpu_cross_entropy;
    be->linear_cross_entropy = cpu_linear_cross_entropy;
    be->transpose = cpu_transpose;
    be->accumulate = cpu_accumulate;
    be->concat_columns = cpu_concat_columns;
    be->grad_norm = cpu_grad_norm;
    be->adamw = cpu_adamw;
    be->muon = cpu_muon;
    be->dp_init = cpu_dp_init;
    be->allreduce = cpu_allreduce;
    be->replicas = 1;
    be->destroy = cpu_destroy;
    be->fp8_histories_save = cpu_fp8_histories_save;
    be->fp8_histories_restore = cpu_fp8_histories_restore;
    tbackend_guard_weights(be);
    return be;
}
