/* verify/verify.c — ulp_verify: a user's kernel outputs against the MPFR
 * reference, with the bound of the kernel the user declares (verify.h).
 *
 * The comparison and the bound are the ones `ulpscope check` uses for its
 * own kernels (kernels/check/compare_<op>.c); what differs is where the
 * description comes from: check derives it from the variant it launched,
 * verify from the declaration.  An "unknown" part of the declaration gives
 * two descriptions, the tightest and the loosest. */
#include "verify/verify.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/check/compare_activation.h"
#include "kernels/check/compare_adamw.h"
#include "kernels/check/compare_attention.h"
#include "kernels/check/compare_cross_entropy.h"
#include "kernels/check/compare_embedding.h"
#include "kernels/check/compare_grad_norm.h"
#include "kernels/check/compare_layernorm.h"
#include "kernels/check/compare_logsumexp.h"
#include "kernels/check/compare_matmul.h"
#include "kernels/check/compare_polar_express.h"
#include "kernels/check/compare_residual.h"
#include "kernels/check/check_kexp.h"
#include "kernels/check/compare_rmsnorm.h"
#include "kernels/check/compare_rope.h"
#include "kernels/check/compare_softmax.h"
#include "kernels/check/compare_transpose.h"
#include "kernels/polar_express.h"
#include "precision/format.h"

static int bad(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && errlen) vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return ULP_BAD_INPUT;
}

/* ---- the op table ------------------------------------------------------------------- */

/* A tensor of an op's pass: its name, whether it may be left out, and the
 * format its values must be values of. */
typedef enum {
    T_STORAGE, /* the path's format (fp8 path: bf16) */
    T_FP32,
    T_OPERAND, /* a GEMM operand: the path's format; on the fp8 path the dequantised values, any finite */
    T_INDEX    /* integers (cross_entropy's targets, -1: an ignored row; embedding's tokens) */
} tformat;

typedef struct {
    const char *name;
    int optional;
    tformat format;
} vtensor;

#define VMAX_TENSORS 6
typedef struct {
    const char *inputs_help, *outputs_help; /* NULL: the op has no such pass (summary says why) */
    vtensor inputs[VMAX_TENSORS], outputs[VMAX_TENSORS];
} vpass;

typedef enum {
    OP_MATMUL, OP_LAYERNORM, OP_RMSNORM, OP_SOFTMAX, OP_CROSS_ENTROPY,
    OP_GELU_TANH, OP_GELU_ERF, OP_RELU2, OP_LEAKY_RELU2, /* the activations, in kcmp_act_op's order */
    OP_RESIDUAL, OP_ADAMW, OP_LOGSUMEXP, OP_ATTENTION, OP_ROPE, OP_GRAD_NORM, OP_EMBEDDING, OP_TRANSPOSE,
    OP_POLAR_EXPRESS
} op_id;

static int has_exp_form(op_id op) { return op == OP_SOFTMAX || op == OP_LOGSUMEXP; }

static int is_activation(op_id op) { return op >= OP_GELU_TANH && op <= OP_LEAKY_RELU2; }
static int is_gelu(op_id op) { return op == OP_GELU_TANH || op == OP_GELU_ERF; }
static int is_elementwise(op_id op) { return is_activation(op) || op == OP_RESIDUAL; }

typedef struct {
    const char *name;
    op_id id;
    const char *summary;
    vpass pass[2];           /* fwd, bwd */
    const char *why_no_bwd;  /* an op without a bwd pass: what to verify instead */
} vop;

static const vop ops[] = {
    {"matmul", OP_MATMUL,
     "GEMM y = epi(alpha A B + beta C), epi: + bias, then GELU (--gelu); --layout AB, AtB, ABt, AtBt; the "
     "backward is two GEMMs: verify each as a matmul",
     {{"a (M, K; At: K, M), b (K, N; Bt: N, K), c (M, N, with --beta, optional), bias (N, optional)", "y (M, N)",
       {{"a", 0, T_OPERAND}, {"b", 0, T_OPERAND}, {"c", 1, T_STORAGE}, {"bias", 1, T_STORAGE}},
       {{"y", 0, T_STORAGE}}},
      {NULL, NULL, {{0}}, {{0}}}},
     "its backward is two GEMMs, dA = dy B^T (--layout ABt, a = dy, b = B) and dB = A^T dy (--layout AtB, a = A, "
     "b = dy): verify each as a matmul fwd"},
    {"layernorm", OP_LAYERNORM,
     "LayerNorm y = gain (x - mean) rstd + bias, rstd = 1 / sqrt(var + eps), per row of C (any leading shape); "
     "backward dx, dgain, dbias",
     {{"x (N.., C), gain (C, optional), bias (C, optional)", "y (as x), mean, rstd (N.., fp32, optional)",
       {{"x", 0, T_STORAGE}, {"gain", 1, T_STORAGE}, {"bias", 1, T_STORAGE}},
       {{"y", 0, T_STORAGE}, {"mean", 1, T_FP32}, {"rstd", 1, T_FP32}}},
      {"x, gain (optional), dy (as x), mean, rstd (the stored fp32 statistics the backward read, optional)",
       "dx (as x), dgain (C, needs gain, optional), dbias (C, optional)",
       {{"x", 0, T_STORAGE}, {"gain", 1, T_STORAGE}, {"dy", 0, T_STORAGE}, {"mean", 1, T_FP32}, {"rstd", 1, T_FP32}},
       {{"dx", 0, T_STORAGE}, {"dgain", 1, T_STORAGE}, {"dbias", 1, T_STORAGE}}}},
     NULL},
    {"rmsnorm", OP_RMSNORM,
     "RMSNorm y = gain x / sqrt(mean(x^2) + eps) per row of C (any leading shape); backward dx, dgain",
     {{"x (N.., C), gain (C, optional)", "y (as x), rstd (N.., fp32, optional)",
       {{"x", 0, T_STORAGE}, {"gain", 1, T_STORAGE}}, {{"y", 0, T_STORAGE}, {"rstd", 1, T_FP32}}},
      {"x, gain (optional), dy (as x), rstd (the stored fp32 rstd the backward read, optional)",
       "dx (as x), dgain (C, needs gain, optional)",
       {{"x", 0, T_STORAGE}, {"gain", 1, T_STORAGE}, {"dy", 0, T_STORAGE}, {"rstd", 1, T_FP32}},
       {{"dx", 0, T_STORAGE}, {"dgain", 1, T_STORAGE}}}},
     NULL},
    {"cross_entropy", OP_CROSS_ENTROPY,
     "loss = logsumexp(logits) - logits[target] per row of V, dlogits = (softmax(logits) - onehot(target)) dloss, "
     "both from the one pass (--dloss; --online: one pass over the row, rescaling at each new maximum; --softcap C: "
     "logits capped as C tanhf(logit / C) first)",
     {{"logits (N.., V), targets (N.., integers; -1: an ignored row)",
       "loss (N.., fp32, optional), dlogits (as logits, needs --dloss, optional)",
       {{"logits", 0, T_STORAGE}, {"targets", 0, T_INDEX}}, {{"loss", 1, T_FP32}, {"dlogits", 1, T_STORAGE}}},
      {NULL, NULL, {{0}}, {{0}}}},
     "the kernel computes the loss and dlogits together: verify both as outputs of --pass fwd"},
    {"softmax", OP_SOFTMAX, "softmax y = exp(x - max) / sum exp(x - max) per row of C (any leading shape); backward dx",
     {{"x (N.., C)", "y (as x)", {{"x", 0, T_STORAGE}}, {{"y", 0, T_STORAGE}}},
      {"y (the forward output the backward read), dy (as y)", "dx (as y)", {{"y", 0, T_STORAGE}, {"dy", 0, T_STORAGE}},
       {{"dx", 0, T_STORAGE}}}},
     NULL},
#define ACT_FWD {"x (any shape)", "y (as x)", {{"x", 0, T_STORAGE}}, {{"y", 0, T_STORAGE}}}
#define ACT_BWD {"x (the forward's input), dy (as x)", "dx (as x)", {{"x", 0, T_STORAGE}, {"dy", 0, T_STORAGE}}, {{"dx", 0, T_STORAGE}}}
    {"gelu_tanh", OP_GELU_TANH,
     "y = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), elementwise; backward dx = dy f'(x); --function tanh "
     "(tanhf), tanh-approx (tanh.approx.f32), sigmoid (x / (1 + expf(-2z)))",
     {ACT_FWD, ACT_BWD}, NULL},
    {"gelu_erf", OP_GELU_ERF,
     "y = x/2 (1 + erf(x / sqrt 2)) = x Phi(x), elementwise; backward dx = dy f'(x); --function erf (erff; expf "
     "for the backward's pdf), normcdf (normcdff)",
     {ACT_FWD, ACT_BWD}, NULL},
#define RELU2_FWD                                                                                               \
    {"x (any shape)", "y (as x), grad (as x, the gradient branch f'(x) a store_grad forward keeps, optional)", \
     {{"x", 0, T_STORAGE}}, {{"y", 0, T_STORAGE}, {"grad", 1, T_STORAGE}}}
#define RELU2_BWD                                                                                                   \
    {"x (the forward's input), dy (as x), grad (the stored gradient branch the backward read, optional: without "  \
     "it the backward computes f'(x) from x)", "dx (as x)",                                                        \
     {{"x", 0, T_STORAGE}, {"dy", 0, T_STORAGE}, {"grad", 1, T_STORAGE}}, {{"dx", 0, T_STORAGE}}}
    {"relu2", OP_RELU2, "y = max(x, 0)^2, elementwise; backward dx = dy 2 max(x, 0)", {RELU2_FWD, RELU2_BWD}, NULL},
    {"leaky_relu2", OP_LEAKY_RELU2, "y = (x > 0 ? x : x/2)^2, elementwise; backward dx = dy (x > 0 ? 2x : x/2)",
     {RELU2_FWD, RELU2_BWD}, NULL},
    {"residual", OP_RESIDUAL, "y = a + b, elementwise (--accum: the addition's format)",
     {{"a (any shape), b (as a)", "y (as a)", {{"a", 0, T_STORAGE}, {"b", 0, T_STORAGE}}, {{"y", 0, T_STORAGE}}},
      {NULL, NULL, {{0}}, {{0}}}},
     "the backward of an add is the identity on both inputs: there is no kernel to verify"},
    {"adamw", OP_ADAMW,
     "one AdamW step, elementwise (--lr --beta1 --beta2 --eps --weight-decay --step; --order llmc or torch; --store "
     "nearest, stochastic or truncate; --accum: the update's arithmetic and m, v)",
     {{"p (the weights the step read; optional with master), g (as p), m, v (fp32, as p), master (the fp32 master the "
       "step read, optional)",
       "p (the new weights), m, v (fp32, optional), master (the new fp32 master, optional)",
       {{"p", 1, T_STORAGE}, {"g", 0, T_STORAGE}, {"m", 0, T_FP32}, {"v", 0, T_FP32}, {"master", 1, T_FP32}},
       {{"p", 0, T_STORAGE}, {"m", 1, T_FP32}, {"v", 1, T_FP32}, {"master", 1, T_FP32}}},
      {NULL, NULL, {{0}}, {{0}}}},
     "an optimizer step has no backward: verify the step (--pass fwd)"},
    {"logsumexp", OP_LOGSUMEXP,
     "lse = max + log sum exp(x - max) per row of C (any leading shape), in fp32; backward dx = dlse exp(x - lse) "
     "from the stored lse",
     {{"x (N.., C)", "lse (N.., fp32)", {{"x", 0, T_STORAGE}}, {{"lse", 0, T_FP32}}},
      {"x, lse (the stored fp32 lse the backward read), dlse (N.., fp32)", "dx (as x)",
       {{"x", 0, T_STORAGE}, {"lse", 0, T_FP32}, {"dlse", 0, T_FP32}}, {{"dx", 0, T_STORAGE}}}},
     NULL},
    {"attention", OP_ATTENTION,
     "causal self-attention o = softmax(scale q k^T) v per head (keys j <= i), lse = log sum exp(scale q k^T); "
     "backward dq, dk, dv (--softmax materialised, online or two-pass; --accum fp32 or tensor-core; --exp; --scale)",
     {{"q, k, v (N.., T, D)", "o (as q), lse (N.., T, fp32, optional)",
       {{"q", 0, T_STORAGE}, {"k", 0, T_STORAGE}, {"v", 0, T_STORAGE}}, {{"o", 0, T_STORAGE}, {"lse", 1, T_FP32}}},
      {"q, k, v, o (the forward output the backward read), lse (the stored fp32 lse it read), do (as q)",
       "dq, dk, dv (as q, each optional)",
       {{"q", 0, T_STORAGE}, {"k", 0, T_STORAGE}, {"v", 0, T_STORAGE}, {"o", 0, T_STORAGE}, {"lse", 0, T_FP32},
        {"do", 0, T_STORAGE}},
       {{"dq", 1, T_STORAGE}, {"dk", 1, T_STORAGE}, {"dv", 1, T_STORAGE}}}},
     NULL},
#define ROPE_TABLES {"cos", 1, T_FP32}, {"sin", 1, T_FP32}, {"inv_freq", 1, T_FP32}
    {"rope", OP_ROPE,
     "rotary position embedding, half-split pairs (i, i + D/2): y_i = x_i cos - x_{i+D/2} sin, y_{i+D/2} = x_i sin + "
     "x_{i+D/2} cos, theta = pos base^(-2i/D), pos the index along T; backward rotates by -theta (--angle table or "
     "fp32; --base; --accum: the rotation's arithmetic)",
     {{"x (..., T, H, D), cos, sin (T', D/2 with T' >= T, fp32: the table the kernel read, optional), inv_freq (D/2, "
       "fp32: the frequencies it multiplied positions by, optional)", "y (as x)",
       {{"x", 0, T_STORAGE}, ROPE_TABLES}, {{"y", 0, T_STORAGE}}},
      {"dy (..., T, H, D), cos, sin, inv_freq (as the forward's, optional)", "dx (as dy)",
       {{"dy", 0, T_STORAGE}, ROPE_TABLES}, {{"dx", 0, T_STORAGE}}}},
     NULL},
    {"grad_norm", OP_GRAD_NORM,
     "the global gradient norm sqrt(sum g^2) over every element of g (a model's gradients concatenated), in fp32, "
     "sqrt correctly rounded (--accum, --reduce: the sum of squares)",
     {{"g (any shape: every gradient element)", "norm (1 element, fp32)", {{"g", 0, T_STORAGE}}, {{"norm", 0, T_FP32}}},
      {NULL, NULL, {{0}}, {{0}}}},
     "the norm is a forward computation (clipping scales by it): verify the norm (--pass fwd)"},
    {"embedding", OP_EMBEDDING,
     "lookup out[t] = table[tokens[t]] (exact: any difference is a bug); backward dtable[v] = dtable0[v] + the sum of "
     "dout[t] over the tokens t with id v (a scatter-add: --accum, --reduce the order of each row's sum)",
     {{"table (V, C), tokens (N.., integers in [0, V))", "out (N.., C)", {{"table", 0, T_STORAGE}, {"tokens", 0, T_INDEX}},
       {{"out", 0, T_STORAGE}}},
      {"tokens (N..), dout (N.., C), dtable0 (V, C: the gradient the kernel added into, optional: zeros)", "dtable (V, C)",
       {{"tokens", 0, T_INDEX}, {"dout", 0, T_STORAGE}, {"dtable0", 1, T_STORAGE}}, {{"dtable", 0, T_STORAGE}}}},
     NULL},
    {"transpose", OP_TRANSPOSE,
     "y = x^T (a copy: exact, any difference is a bug), or y = y0 + x^T (an add: --accum its addition's format)",
     {{"x (M, N), y0 (N, M: the add's old values, optional)", "y (N, M)", {{"x", 0, T_STORAGE}, {"y0", 1, T_STORAGE}},
       {{"y", 0, T_STORAGE}}},
      {NULL, NULL, {{0}}, {{0}}}},
     "the backward of a transpose is a transpose: verify it as --pass fwd with x = dy"},
    {"polar_express", OP_POLAR_EXPRESS,
     "Muon's orthogonalisation: x0 = G / (1.02 |G|_F + 1e-6), then five steps x' = a x + (b A + c A^2) x, A = x x^T "
     "(--form wide) or x^T x (tall), each judged from the kernel's own previous iterate (--coeffs; --epilogue single: "
     "x' in one GEMM, rounded: B x rounded, then + a x; --accum: the GEMMs'; --reduce: the norm's sum of squares; "
     "--upcast fp32 or none: the rest of the normalisation)",
     {{"G (rows, cols)", "x0 (the normalised G), x1, ..., x5 (the iterates), each optional (x<k> needs x<k-1>)",
       {{"G", 0, T_STORAGE}},
       {{"x0", 1, T_STORAGE}, {"x1", 1, T_STORAGE}, {"x2", 1, T_STORAGE}, {"x3", 1, T_STORAGE}, {"x4", 1, T_STORAGE},
        {"x5", 1, T_STORAGE}}},
      {NULL, NULL, {{0}}, {{0}}}},
     "Muon applies the orthogonalised momentum as its update; nothing differentiates through it: verify the stages "
     "(--pass fwd)"},
#undef ROPE_TABLES
#undef ACT_FWD
#undef ACT_BWD
#undef RELU2_FWD
#undef RELU2_BWD
};
static const int n_ops = (int)(sizeof ops / sizeof ops[0]);

const char *ulp_op_names(void)
{
    return "adamw, attention, cross_entropy, embedding, gelu_erf, gelu_tanh, grad_norm, layernorm, leaky_relu2, "
           "logsumexp, matmul, polar_express, relu2, residual, rmsnorm, rope, softmax, transpose";
}

void ulp_op_help(FILE *fp)
{
    for (int i = 0; i < n_ops; i++) {
        fprintf(fp, "%s: %s\n", ops[i].name, ops[i].summary);
        for (int p = 0; p < 2; p++)
            if (ops[i].pass[p].inputs_help)
                fprintf(fp, "  --pass %s: inputs %s; outputs %s\n", p ? "bwd" : "fwd", ops[i].pass[p].inputs_help,
                        ops[i].pass[p].outputs_help);
    }
}

int ulp_op_tensors(const char *op, const char *pass, int role, const char **names, int max)
{
    int p = pass && strcmp(pass, "bwd") == 0 ? 1 : pass && strcmp(pass, "fwd") == 0 ? 0 : -1;
    for (int i = 0; i < n_ops && p >= 0; i++) {
        if (!op || strcmp(op, ops[i].name) != 0) continue;
        if (!ops[i].pass[p].inputs_help) return -1;
        const vtensor *t = role ? ops[i].pass[p].outputs : ops[i].pass[p].inputs;
        int n = 0;
        for (; n < VMAX_TENSORS && t[n].name && n + 1 < max; n++) names[n] = t[n].name;
        if (max > 0) names[n] = NULL;
        return n;
    }
    return -1;
}

/* ---- declarations ------------------------------------------------------------------- */

static int parse_format(const char *s, prec_format *f)
{
    static const struct {
        const char *name;
        prec_format f;
    } names[] = {{"fp64", PREC_FP64}, {"fp32", PREC_FP32}, {"bf16", PREC_BF16}, {"fp16", PREC_FP16}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i].name) == 0) {
            *f = names[i].f;
            return 0;
        }
    return -1;
}

/* A positive count after a prefix ("blocks:32"); -1: malformed. */
static int64_t parse_count(const char *s, const char *prefix, int64_t max)
{
    size_t n = strlen(prefix);
    if (strncmp(s, prefix, n) != 0 || s[n] == '+' || s[n] == '-') return -1;
    char *end;
    long long v = strtoll(s + n, &end, 10);
    if (end == s + n || *end || v < 1 || v > max) return -1;
    return v;
}

/* A reduction shape as a rounding depth over n terms; -1: malformed.
 * "unknown" gives the tightest (pairwise) or the loosest (sequential). */
static int64_t parse_reduce(const char *s, int64_t n, int tightest)
{
    if (n < 1) n = 1;
    int64_t log2n = 0;
    while ((1ll << log2n) < n) log2n++;
    if (strcmp(s, "sequential") == 0) return n; /* the first term's rounding (an fma into 0) counts */
    if (strcmp(s, "pairwise") == 0) return log2n + 1;
    if (strcmp(s, "unknown") == 0) return tightest ? log2n + 1 : n;
    int64_t v;
    if ((v = parse_count(s, "blocks:", 1 << 20)) > 0) return kcheck_row_depth(n, (int)v, 1);
    if ((v = parse_count(s, "blocked:", 1ll << 40)) > 0) return (v < n ? v : n) + (n + v - 1) / v - 1;
    if (strncmp(s, "depth:", 6) == 0) {
        if (strcmp(s, "depth:0") == 0) return 0;
        return parse_count(s, "depth:", 1ll << 40);
    }
    return -1;
}

#define REDUCE_SYNTAX "sequential, pairwise, blocked:B, blocks:T, depth:D or unknown"

/* matmul's matrix-unit models (an --accum that is not a rounded accumulator):
 * 1 and *m filled, 0 when s names none, -1 when malformed. */
static int parse_dot_model(const char *s, prec_dot_model *m)
{
    memset(m, 0, sizeof *m);
    m->acc = PREC_FP32;
    if (strcmp(s, "tensor-core") == 0 || strcmp(s, "tf32") == 0) {
        m->kind = PREC_DOT_TENSOR_CORE;
        m->u_in = s[1] == 'f' ? 0x1p-10 : 0.0;
        return 1;
    }
    if (strcmp(s, "fp8-fast") == 0) {
        m->kind = PREC_DOT_FP8;
        return 1;
    }
    if (strncmp(s, "fp8-promote:", 12) == 0 || strncmp(s, "fp8-groups:", 11) == 0) {
        int groups = s[4] == 'g';
        m->kind = groups ? PREC_DOT_FP8_GROUPS : PREC_DOT_FP8;
        m->interval = parse_count(s, groups ? "fp8-groups:" : "fp8-promote:", 1 << 20);
        return m->interval > 0 ? 1 : -1;
    }
    return 0;
}

typedef struct {
    prec_format storage; /* every tensor's but the fp32 ones' and the fp8 path's operands */
    int fp8;             /* path fp8: a and b are dequantised fp8 operands */
    const char *path, *accum, *reduce, *col_reduce, *upcast, *epilogue, *layout, *variance, *exp_form, *function;
    const char *order, *store; /* adamw */
    double lr, beta1, beta2, weight_decay;
    int64_t step;
    const char *softmax; /* attention's softmax form */
    double math_ulps, eps, alpha, beta;
    double scale;        /* attention: 0 for fp32(1/sqrt(D)) */
    int gelu, split_k, online;
    double dloss, softcap;
    const char *coeffs, *form; /* polar_express */
    double abc[KPE_STEPS][3];  /* its coefficients per step, as fp32 values (coeffs declared) */
    int has_coeffs;
    const char *angle;         /* rope */
    double base;
} decl;

/* layernorm's variance algorithm: 0 and *k's fields filled, -1 malformed. */
static int parse_variance(const char *s, kcmp_layernorm_kernel *k)
{
    k->welford_threads = k->welford_vec = 1;
    if (strcmp(s, "two-pass") == 0 || strcmp(s, "unknown") == 0) k->variance = KCMP_LN_TWO_PASS;
    else if (strcmp(s, "one-pass") == 0) k->variance = KCMP_LN_ONE_PASS;
    else if (strcmp(s, "welford") == 0) k->variance = KCMP_LN_WELFORD;
    else if (strncmp(s, "welford:", 8) == 0) {
        k->variance = KCMP_LN_WELFORD;
        char threads[16];
        const char *x = strchr(s + 8, 'x');
        size_t len = x ? (size_t)(x - (s + 8)) : strlen(s + 8);
        if (len == 0 || len >= sizeof threads) return -1;
        memcpy(threads, s + 8, len);
        threads[len] = '\0';
        char with_prefix[24];
        snprintf(with_prefix, sizeof with_prefix, "t:%s", threads);
        int64_t t = parse_count(with_prefix, "t:", 1024), v = x ? parse_count(x, "x", 64) : 1;
        if (t < 0 || v < 0 || (t != 1 && t % 32 != 0)) return -1;
        k->welford_threads = (int)t;
        k->welford_vec = (int)v;
    } else return -1;
    return 0;
}

static int is_one_of(const char *s, const char *const *list)
{
    for (; *list; list++)
        if (strcmp(s, *list) == 0) return 1;
    return 0;
}

static int ops_decl(const ulp_kernel *k, op_id op, const char *name, decl *d, char *err, size_t errlen);

/* attention's declaration (the path and accum already read into d): the
 * other ops' options refused, its own checked. */
static int attention_decl(const ulp_kernel *k, decl *d, char *err, size_t errlen)
{
    static const char *const accums[] = {"fp32", "tensor-core", "unknown", NULL};
    if (!is_one_of(d->accum, accums))
        return bad(err, errlen, "attention's accumulation '%s' is not offered (fp32, tensor-core, unknown)", d->accum);
    if (strcmp(d->accum, "tensor-core") == 0 && d->storage != PREC_BF16 && d->storage != PREC_FP16)
        return bad(err, errlen, "accumulation 'tensor-core' needs --path bf16 or fp16, not %s", d->path);
    d->reduce = k->reduce ? k->reduce : "unknown";
    if (strncmp(d->reduce, "blocked:", 8) == 0 || parse_reduce(d->reduce, 8, 0) < 0)
        return bad(err, errlen, "unknown reduction '%s' for attention (sequential, pairwise, blocks:T, depth:D or unknown)",
                   d->reduce);
    d->softmax = k->softmax ? k->softmax : "unknown";
    static const char *const forms[] = {"materialised", "online", "two-pass", "unknown", NULL};
    if (!is_one_of(d->softmax, forms))
        return bad(err, errlen, "unknown softmax form '%s' (materialised, online, two-pass, unknown)", d->softmax);
    if (strcmp(d->accum, "tensor-core") == 0 && strcmp(d->softmax, "online") != 0 && strcmp(d->softmax, "unknown") != 0)
        return bad(err, errlen, "accumulation 'tensor-core' is the online (flash) form on the tensor cores: --softmax online or "
                                "unknown, not %s", d->softmax);
    d->exp_form = k->exp_form ? k->exp_form : "unknown";
    static const char *const exps[] = {"exp", "exp2", "unknown", NULL};
    if (!is_one_of(d->exp_form, exps)) return bad(err, errlen, "unknown exp '%s' for attention (exp, exp2, unknown)", d->exp_form);
    if (!(k->math_ulps >= 0 && k->math_ulps <= 1e6))
        return bad(err, errlen, "math function error %g ulps is outside 0..1e6", k->math_ulps);
    d->math_ulps = k->math_ulps;
    if (k->causal != 1)
        return bad(err, errlen, "non-causal attention is not offered: the MPFR reference (reference/attention.h) attends to "
                                "keys j <= i only");
    if (k->scale != 0 && (!isfinite(k->scale) || prec_rne(k->scale, PREC_FP32) != k->scale))
        return bad(err, errlen, "scale %.17g is not an fp32 value (kernels take it as a float: give that float's value)", k->scale);
    d->scale = k->scale;
    d->col_reduce = k->col_reduce ? k->col_reduce : "unknown";
    d->upcast = k->upcast ? k->upcast : "unknown";
    d->epilogue = k->epilogue ? k->epilogue : "unknown";
    d->layout = k->layout ? k->layout : "AB";
    d->variance = k->variance ? k->variance : "unknown";
    d->function = k->function ? k->function : "unknown";
    d->order = k->order ? k->order : "unknown";
    d->store = k->store ? k->store : "unknown";
    if (strcmp(d->col_reduce, "unknown") || strcmp(d->upcast, "unknown") || strcmp(d->epilogue, "unknown") ||
        strcmp(d->layout, "AB") || strcmp(d->variance, "unknown") || k->alpha != 1.0 || k->beta != 0.0 || k->gelu ||
        k->split_k != 1 || k->dloss != 0 || k->online || strcmp(d->function, "unknown") || strcmp(d->order, "unknown") ||
        strcmp(d->store, "unknown") || k->lr != 0 || k->beta1 != 0 || k->beta2 != 0 || k->weight_decay != 0 || k->step != 0)
        return bad(err, errlen, "col-reduce, upcast, epilogue, layout, alpha, beta, gelu, split-k, variance, dloss, online, "
                                "function, lr, beta1, beta2, weight-decay, step, order and store are other ops'; attention "
                                "has none of them");
    if (k->eps != (double)1e-5f) return bad(err, errlen, "eps is the norms'; attention has none");
    return ops_decl(k, OP_ATTENTION, "attention", d, err, errlen);
}

/* polar_express's --coeffs: a named table or one triple "a,b,c" for every
 * step, each rounded to fp32 (kernels take them as floats). */
static int parse_coeffs(const char *s, decl *d)
{
    float abc[KPE_STEPS][3];
    if (strcmp(s, "polar-express") == 0 || strcmp(s, "muon-quintic") == 0) {
        kpe_coefficients(s[0] == 'p' ? KPE_POLAR_EXPRESS : KPE_MUON_QUINTIC, abc);
    } else {
        double v[3];
        const char *p = s;
        for (int i = 0; i < 3; i++) {
            char *end;
            v[i] = strtod(p, &end);
            if (end == p || !isfinite(v[i]) || fabs(v[i]) > 1e30 || *end != (i < 2 ? ',' : '\0')) return -1;
            p = end + 1;
        }
        for (int st = 0; st < KPE_STEPS; st++)
            for (int i = 0; i < 3; i++) abc[st][i] = (float)v[i];
    }
    for (int st = 0; st < KPE_STEPS; st++)
        for (int i = 0; i < 3; i++) d->abc[st][i] = abc[st][i];
    d->has_coeffs = 1;
    return 0;
}

/* The options of rope, grad_norm, embedding, transpose and polar_express
 * (the older ops' already checked by check_decl), and theirs refused
 * elsewhere. */
static int ops_decl(const ulp_kernel *k, op_id op, const char *name, decl *d, char *err, size_t errlen)
{
    d->coeffs = k->coeffs ? k->coeffs : "unknown";
    d->form = k->form ? k->form : "unknown";
    d->angle = k->angle ? k->angle : "unknown";
    d->base = k->base;
    if (op != OP_POLAR_EXPRESS && (strcmp(d->coeffs, "unknown") != 0 || strcmp(d->form, "unknown") != 0))
        return bad(err, errlen, "coeffs and form are polar_express's; %s has neither", name);
    if (op != OP_ROPE && (strcmp(d->angle, "unknown") != 0 || (k->base != 10000.0 && k->base != 0)))
        return bad(err, errlen, "angle and base are rope's; %s has neither", name);
    if ((op == OP_GRAD_NORM || op == OP_POLAR_EXPRESS) && d->math_ulps != 2.0)
        return bad(err, errlen, "%s's square root is correctly rounded (sqrtf); --math-ulps does not apply", name);
    if (op == OP_ROPE) {
        static const char *const angles[] = {"table", "fp32", "unknown", NULL};
        if (!is_one_of(d->angle, angles)) return bad(err, errlen, "unknown angle '%s' (table, fp32, unknown)", d->angle);
        if (!(k->base > 1 && k->base < 1e30)) return bad(err, errlen, "base %g is outside (1, 1e30)", k->base);
    }
    if (op == OP_POLAR_EXPRESS) {
        static const char *const forms[] = {"wide", "tall", "any", "unknown", NULL};
        static const char *const epilogues[] = {"single", "rounded", "unknown", NULL};
        if (!is_one_of(d->form, forms)) return bad(err, errlen, "unknown form '%s' (wide, tall, any, unknown)", d->form);
        if (!is_one_of(d->epilogue, epilogues))
            return bad(err, errlen, "polar_express's epilogue is single (x' = B x + a x in one GEMM), rounded (B x rounded, "
                                    "then + a x) or unknown, not %s", d->epilogue);
        if (strcmp(d->coeffs, "unknown") != 0 && parse_coeffs(d->coeffs, d) != 0)
            return bad(err, errlen, "unknown coeffs '%s' (polar-express, muon-quintic, or a,b,c: one triple for every step)",
                       d->coeffs);
    }
    return 0;
}

static int check_decl(const ulp_kernel *k, op_id op, decl *d, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    d->path = k->path ? k->path : "";
    if (strcmp(d->path, "fp8") == 0) {
        if (op != OP_MATMUL) return bad(err, errlen, "path fp8 is a matmul path (paths: fp32, bf16, fp16)");
        d->fp8 = 1;
        d->storage = PREC_BF16;
    } else if (parse_format(d->path, &d->storage) != 0 || d->storage == PREC_FP64) {
        return bad(err, errlen, "unknown path '%s' (paths: fp32, bf16, fp16%s)", d->path, op == OP_MATMUL ? ", fp8" : "");
    }
    d->accum = k->accum ? k->accum : "unknown";
    prec_format f;
    prec_dot_model model;
    int is_model = parse_dot_model(d->accum, &model);
    if (op == OP_ATTENTION) return attention_decl(k, d, err, errlen);
    /* polar_express's GEMMs: the 16-bit and tf32 tensor cores (its paths have no fp8) */
    const int gemm_model_ok = op == OP_MATMUL || (op == OP_POLAR_EXPRESS && model.kind == PREC_DOT_TENSOR_CORE);
    if (is_model > 0 && !gemm_model_ok)
        return bad(err, errlen, "accumulation '%s' is a matrix-unit model of matmul (fp64, fp32, bf16, fp16, storage, %sunknown)",
                   d->accum, op == OP_POLAR_EXPRESS ? "tensor-core, tf32, " : "");
    if (is_model < 0 || (!is_model && strcmp(d->accum, "unknown") != 0 && strcmp(d->accum, "storage") != 0 &&
                         parse_format(d->accum, &f) != 0))
        return bad(err, errlen, "unknown accumulation '%s' (fp64, fp32, bf16, fp16, storage, unknown%s)", d->accum,
                   op == OP_MATMUL ? ", tensor-core, tf32, fp8-promote:N, fp8-fast, fp8-groups:N"
                   : op == OP_POLAR_EXPRESS ? ", tensor-core, tf32" : "");
    if (is_model) {
        const char *needs = model.kind == PREC_DOT_TENSOR_CORE ? (model.u_in > 0 ? "fp32" : "bf16 or fp16") : "fp8";
        int ok = model.kind == PREC_DOT_TENSOR_CORE
                     ? (model.u_in > 0 ? strcmp(d->path, "fp32") == 0 : (d->storage == PREC_BF16 || d->storage == PREC_FP16) && !d->fp8)
                     : d->fp8;
        if (!ok) return bad(err, errlen, "accumulation '%s' needs --path %s, not %s", d->accum, needs, d->path);
    }
    d->reduce = k->reduce ? k->reduce : "unknown";
    d->col_reduce = k->col_reduce ? k->col_reduce : "unknown";
    if (parse_reduce(d->reduce, 8, 0) < 0)
        return bad(err, errlen, "unknown reduction '%s' (" REDUCE_SYNTAX ")", d->reduce);
    if (parse_reduce(d->col_reduce, 8, 0) < 0)
        return bad(err, errlen, "unknown column reduction '%s' (" REDUCE_SYNTAX ")", d->col_reduce);
    d->upcast = k->upcast ? k->upcast : "unknown";
    static const char *const upcasts[] = {"gemma", "llama", "none", "unknown", NULL};
    static const char *const pe_upcasts[] = {"fp32", "none", "unknown", NULL};
    if (op == OP_POLAR_EXPRESS && !is_one_of(d->upcast, pe_upcasts))
        return bad(err, errlen, "polar_express's upcast is fp32 (the normalisation in fp32), none (in the storage format) "
                                "or unknown, not %s", d->upcast);
    if (op != OP_POLAR_EXPRESS && !is_one_of(d->upcast, upcasts))
        return bad(err, errlen, "unknown upcast '%s' (gemma, llama, none, unknown)", d->upcast);
    if (!(k->math_ulps >= 0 && k->math_ulps <= 1e6))
        return bad(err, errlen, "math function error %g ulps is outside 0..1e6", k->math_ulps);
    if (!(k->eps >= 0 && k->eps < 1e6)) return bad(err, errlen, "eps %g is outside [0, 1e6)", k->eps);
    d->math_ulps = k->math_ulps;
    d->eps = k->eps;
    d->epilogue = k->epilogue ? k->epilogue : "unknown";
    static const char *const epilogues[] = {"single", "rounded", "cublaslt", "unknown", NULL};
    if (!is_one_of(d->epilogue, epilogues))
        return bad(err, errlen, "unknown epilogue '%s' (single, rounded, cublaslt, unknown)", d->epilogue);
    d->layout = k->layout ? k->layout : "AB";
    static const char *const layouts[] = {"AB", "AtB", "ABt", "AtBt", NULL};
    if (!is_one_of(d->layout, layouts)) return bad(err, errlen, "unknown layout '%s' (AB, AtB, ABt, AtBt)", d->layout);
    /* alpha and beta reach a kernel as floats: the bound takes them exact */
    if (!isfinite(k->alpha) || prec_rne(k->alpha, PREC_FP32) != k->alpha)
        return bad(err, errlen, "alpha %.17g is not an fp32 value (kernels take it as a float: give that float's value)", k->alpha);
    if (!isfinite(k->beta) || prec_rne(k->beta, PREC_FP32) != k->beta)
        return bad(err, errlen, "beta %.17g is not an fp32 value (kernels take it as a float: give that float's value)", k->beta);
    d->alpha = k->alpha;
    d->beta = k->beta;
    d->gelu = k->gelu;
    d->split_k = k->split_k;
    if (k->gelu != 0 && k->gelu != 1) return bad(err, errlen, "gelu is %d (0 or 1)", k->gelu);
    if (k->split_k < 1 || k->split_k > (1 << 20)) return bad(err, errlen, "split-k %d is outside 1..2^20", k->split_k);
    d->variance = k->variance ? k->variance : "unknown";
    kcmp_layernorm_kernel ln;
    if (parse_variance(d->variance, &ln) != 0)
        return bad(err, errlen, "unknown variance '%s' (two-pass, one-pass, welford, welford:T, welford:TxV with T 1 or "
                                "a multiple of 32 up to 1024, V up to 64, unknown)", d->variance);
    d->exp_form = k->exp_form ? k->exp_form : "unknown";
    static const char *const exp_forms[] = {"exp", "exp2", "fast", "unknown", NULL};
    if (!is_one_of(d->exp_form, exp_forms)) return bad(err, errlen, "unknown exp '%s' (exp, exp2, fast, unknown)", d->exp_form);
    d->dloss = k->dloss;
    d->online = k->online;
    d->softcap = k->softcap;
    if (!(k->softcap >= 0) || !isfinite(k->softcap) || prec_rne(k->softcap, PREC_FP32) != k->softcap)
        return bad(err, errlen, "softcap %.17g is not a finite fp32 value >= 0 (0: none)", k->softcap);
    d->softmax = "unknown";
    if ((k->softmax && strcmp(k->softmax, "unknown") != 0) || k->scale != 0 || k->causal != 1)
        return bad(err, errlen, "softmax, scale and causal are attention's; this op has none of them");
    if (!isfinite(k->dloss) || prec_rne(k->dloss, PREC_FP32) != k->dloss)
        return bad(err, errlen, "dloss %.17g is not an fp32 value (kernels take it as a float: give that float's value)", k->dloss);
    if (k->online != 0 && k->online != 1) return bad(err, errlen, "online is %d (0 or 1)", k->online);
    /* the other ops' options: refused rather than silently ignored */
    static const char *const op_names[] = {"matmul", "layernorm", "rmsnorm", "softmax", "cross_entropy",
                                           "gelu_tanh", "gelu_erf", "relu2", "leaky_relu2", "residual", "adamw",
                                           "logsumexp", "attention", "rope", "grad_norm", "embedding", "transpose",
                                           "polar_express"};
    d->order = k->order ? k->order : "unknown";
    d->store = k->store ? k->store : "unknown";
    static const char *const orders[] = {"llmc", "torch", "any", "unknown", NULL};
    static const char *const stores[] = {"nearest", "stochastic", "truncate", "unknown", NULL};
    if (!is_one_of(d->order, orders)) return bad(err, errlen, "unknown order '%s' (llmc, torch, any, unknown)", d->order);
    if (!is_one_of(d->store, stores))
        return bad(err, errlen, "unknown store '%s' (nearest, stochastic, truncate, unknown)", d->store);
    if (op != OP_ADAMW && (k->lr != 0 || k->beta1 != 0 || k->beta2 != 0 || k->weight_decay != 0 || k->step != 0 ||
                           strcmp(d->order, "unknown") != 0 || strcmp(d->store, "unknown") != 0))
        return bad(err, errlen, "lr, beta1, beta2, weight-decay, step, order and store are adamw's; %s has none of them",
                   op_names[op]);
    if (op == OP_ADAMW) {
        const struct {
            const char *name;
            double v;
        } hp[] = {{"lr", k->lr}, {"beta1", k->beta1}, {"beta2", k->beta2}, {"eps", k->eps}, {"weight-decay", k->weight_decay}};
        for (size_t i = 0; i < sizeof hp / sizeof hp[0]; i++)
            if (!isfinite(hp[i].v) || hp[i].v < 0 || prec_rne(hp[i].v, PREC_FP32) != hp[i].v)
                return bad(err, errlen, "%s %.17g is not a non-negative fp32 value (kernels take it as a float: give that "
                                        "float's value)", hp[i].name, hp[i].v);
        if (k->beta1 >= 1 || k->beta2 >= 1) return bad(err, errlen, "beta1 and beta2 must be below 1");
        if (k->step < 1 || k->step > (1ll << 40))
            return bad(err, errlen, "adamw needs --step t >= 1 (the bias corrections 1 - beta^t), not %lld", (long long)k->step);
        if (k->lr == 0) return bad(err, errlen, "adamw needs --lr (the learning rate the step took)");
        d->lr = k->lr;
        d->beta1 = k->beta1;
        d->beta2 = k->beta2;
        d->weight_decay = k->weight_decay;
        d->step = k->step;
    }
    d->function = k->function ? k->function : "unknown";
    static const char *const tanh_forms[] = {"tanh", "tanh-approx", "sigmoid", "any", "unknown", NULL};
    static const char *const erf_forms[] = {"erf", "normcdf", "any", "unknown", NULL};
    if (op == OP_GELU_TANH && !is_one_of(d->function, tanh_forms))
        return bad(err, errlen, "unknown function '%s' for gelu_tanh (tanh, tanh-approx, sigmoid, any, unknown)", d->function);
    if (op == OP_GELU_ERF && !is_one_of(d->function, erf_forms))
        return bad(err, errlen, "unknown function '%s' for gelu_erf (erf, normcdf, any, unknown)", d->function);
    if (!is_gelu(op) && strcmp(d->function, "unknown") != 0)
        return bad(err, errlen, "function is the GELUs' (gelu_tanh, gelu_erf); %s has none", op_names[op]);
    const int no_sums = is_elementwise(op) || op == OP_ADAMW || op == OP_ROPE || op == OP_TRANSPOSE;
    if (no_sums && (strcmp(d->reduce, "unknown") != 0 || strcmp(d->col_reduce, "unknown") != 0))
        return bad(err, errlen, "reduce and col-reduce are the orders of sums; %s is elementwise and has none (--accum is "
                                "the format of its arithmetic)", op_names[op]);
    if ((is_elementwise(op) || op == OP_ADAMW || op == OP_TRANSPOSE || op == OP_EMBEDDING) && !is_gelu(op) &&
        d->math_ulps != 2.0)
        return bad(err, errlen, "%s calls no math function; --math-ulps does not apply", op_names[op]);
    if (op != OP_CROSS_ENTROPY && (d->dloss != 0 || d->online || d->softcap != 0))
        return bad(err, errlen, "dloss, online and softcap are cross_entropy's; %s has none of them", op_names[op]);
    if (op == OP_CROSS_ENTROPY && d->math_ulps != 2.0)
        return bad(err, errlen, "cross_entropy's expf and logf have CUDA's figures (2 and 1 ulps); --math-ulps does not apply");
    if (!has_exp_form(op) && strcmp(d->exp_form, "unknown") != 0)
        return bad(err, errlen, "exp is softmax's, logsumexp's and attention's; %s has none", op_names[op]);
    if (has_exp_form(op) && d->math_ulps != 2.0)
        return bad(err, errlen, "%s's exponential and logarithm have the errors of its --exp form (CUDA's figures); "
                                "--math-ulps does not apply", op_names[op]);
    if (has_exp_form(op) && strcmp(d->col_reduce, "unknown") != 0)
        return bad(err, errlen, "col-reduce is for the sums over rows of a normalisation's backward; %s has none", op_names[op]);
    if ((op != OP_MATMUL && op != OP_POLAR_EXPRESS && strcmp(d->epilogue, "unknown") != 0) ||
        (op != OP_MATMUL && (strcmp(d->layout, "AB") != 0 || d->alpha != 1.0 || d->beta != 0.0 || d->gelu || d->split_k != 1)))
        return bad(err, errlen, "epilogue, layout, alpha, beta, gelu and split-k are matmul's; %s has none of them",
                   op_names[op]);
    if (op != OP_RMSNORM && op != OP_POLAR_EXPRESS && strcmp(d->upcast, "unknown") != 0)
        return bad(err, errlen, "upcast is rmsnorm's and polar_express's; %s has none", op_names[op]);
    if ((op == OP_MATMUL || op == OP_CROSS_ENTROPY || op >= OP_ROPE) && strcmp(d->col_reduce, "unknown") != 0)
        return bad(err, errlen, "col-reduce is for the sums over rows of a normalisation's backward; %s has none",
                   op_names[op]);
    if (op != OP_LAYERNORM && strcmp(d->variance, "unknown") != 0)
        return bad(err, errlen, "variance is layernorm's; %s has none", op_names[op]);
    return ops_decl(k, op, op_names[op], d, err, errlen);
}

/* ---- what one call compares ------------------------------------------------------- */

typedef struct {
    const ulp_tensor *t; /* NULL: not given */
    double *v;           /* its values as doubles */
    int64_t n;
} bound_tensor;

/* What one verify call compares: the op, the pass, the bound tensors and
 * the dimensions their shapes gave. */
typedef struct {
    op_id op;
    int bwd;
    const vtensor *outputs; /* the pass's output names */
    const bound_tensor *in, *out;
    int64_t N, C;              /* rmsnorm: rows, row length */
    int64_t M, cols, K;        /* matmul: y is (M, cols) */
    long a_rs, a_cs, b_rs, b_cs; /* matmul: A[m,k] = a[m a_rs + k a_cs], B[k,n] = b[k b_rs + n b_cs] */
    int has_bias;
    int has_stats;             /* layernorm bwd: the stored mean and rstd are given */
    int32_t *targets;          /* cross_entropy: the targets, embedding: the tokens as integers (owned) */
    int64_t BH, T, D;          /* attention: heads (the leading dimensions), tokens, head dimension; rope: T, D */
    int64_t H, V;              /* rope: heads; embedding: table rows (N, C: tokens, row length) */
    int has_y0;                /* transpose: an add (else a copy; M, cols: x is (M, cols)) */
    int has_x0, has_steps;     /* polar_express: x0, some x<k> given (N, C: G is (N, C)) */
    char shape[96];
} problem;

static int accum_is_model(const decl *d)
{
    prec_dot_model m;
    return parse_dot_model(d->accum, &m) > 0;
}

/* Which parts of the declaration the bound depends on: col_reduce matters
 * to a backward only (dgain, dbias), upcast to rmsnorm, the variance to
 * layernorm (in the backward only when it replays statistics not given:
 * has_stats says both were), the epilogue to a matmul with a bias or GELU,
 * the reduction to a rounded accumulator; nothing to a gather or a copy. */
static int is_unknown(const decl *d, const problem *pb)
{
    const op_id op = pb->op;
    const int bwd = pb->bwd, has_bias = pb->has_bias, has_stats = pb->has_stats;
    if ((op == OP_EMBEDDING && !bwd) || (op == OP_TRANSPOSE && !pb->has_y0)) return 0; /* a gather, a copy: exact */
    if (op == OP_TRANSPOSE || op == OP_ROPE)
        return strcmp(d->accum, "unknown") == 0 || (op == OP_ROPE && strcmp(d->angle, "unknown") == 0);
    if (op == OP_GRAD_NORM || op == OP_EMBEDDING) return strcmp(d->accum, "unknown") == 0 || strcmp(d->reduce, "unknown") == 0;
    if (op == OP_POLAR_EXPRESS)
        return strcmp(d->accum, "unknown") == 0 ||
               (pb->has_x0 && (strcmp(d->reduce, "unknown") == 0 || strcmp(d->upcast, "unknown") == 0)) ||
               (pb->has_steps && (strcmp(d->epilogue, "unknown") == 0 || strcmp(d->form, "unknown") == 0));
    if (op == OP_ATTENTION) /* the tensor cores' bound takes neither the softmax form nor the reduction */
        return strcmp(d->accum, "unknown") == 0 || strcmp(d->exp_form, "unknown") == 0 ||
               (strcmp(d->accum, "tensor-core") != 0 &&
                (strcmp(d->softmax, "unknown") == 0 || strcmp(d->reduce, "unknown") == 0));
    if (op == OP_LOGSUMEXP && bwd) return strcmp(d->exp_form, "unknown") == 0; /* no sum: the exponential alone */
    if (strcmp(d->accum, "unknown") == 0) return 1;
    if (is_elementwise(op)) return is_gelu(op) && strcmp(d->function, "unknown") == 0;
    if (op == OP_ADAMW) return strcmp(d->order, "unknown") == 0 || strcmp(d->store, "unknown") == 0;
    if (op == OP_MATMUL)
        return (!accum_is_model(d) && strcmp(d->reduce, "unknown") == 0) ||
               ((has_bias || d->gelu) && strcmp(d->epilogue, "unknown") == 0);
    if (op == OP_LOGSUMEXP) return strcmp(d->exp_form, "unknown") == 0 || strcmp(d->reduce, "unknown") == 0;
    if (strcmp(d->reduce, "unknown") == 0 || (bwd && op != OP_SOFTMAX && strcmp(d->col_reduce, "unknown") == 0)) return 1;
    /* (cross_entropy has no bwd pass) */
    if (op == OP_LAYERNORM) return strcmp(d->variance, "unknown") == 0 && (!bwd || !has_stats);
    if (op == OP_SOFTMAX) return !bwd && strcmp(d->exp_form, "unknown") == 0;
    if (op == OP_CROSS_ENTROPY) return 0;
    return strcmp(d->upcast, "unknown") == 0;
}

/* The declaration with its unknown parts resolved to the tightest or the loosest. */
static decl resolve(const decl *d, const problem *pb, int tightest)
{
    const op_id op = pb->op;
    decl r = *d;
    if (op == OP_ATTENTION) {
        /* an unknown accumulation is fp32 at both ends: the tensor cores' bound is declared, never assumed */
        if (strcmp(r.accum, "unknown") == 0) r.accum = "fp32";
        if (strcmp(r.softmax, "unknown") == 0)
            r.softmax = strcmp(r.accum, "tensor-core") == 0 || tightest ? "two-pass" : "materialised";
        if (strcmp(r.accum, "tensor-core") == 0) r.softmax = "online";
        if (strcmp(r.reduce, "unknown") == 0) r.reduce = tightest ? "pairwise" : "sequential";
        if (strcmp(r.exp_form, "unknown") == 0) r.exp_form = tightest ? "exp" : "exp2";
        return r;
    }
    if (strcmp(r.accum, "unknown") == 0) r.accum = tightest ? "fp32" : "storage";
    if (strcmp(r.reduce, "unknown") == 0) r.reduce = tightest ? "pairwise" : "sequential";
    if ((op == OP_LAYERNORM || op == OP_RMSNORM) && strcmp(r.col_reduce, "unknown") == 0)
        r.col_reduce = tightest ? "pairwise" : "sequential";
    if (has_exp_form(op) && strcmp(r.exp_form, "unknown") == 0) r.exp_form = tightest ? "exp" : "fast";
    if (op == OP_RMSNORM && strcmp(r.upcast, "unknown") == 0) r.upcast = tightest ? "gemma" : "none";
    if (op == OP_LAYERNORM && strcmp(r.variance, "unknown") == 0) r.variance = tightest ? "two-pass" : "one-pass";
    if (op == OP_MATMUL && strcmp(r.epilogue, "unknown") == 0) r.epilogue = tightest ? "single" : "cublaslt";
    /* a GELU's forms: none is the loosest everywhere (erff's 1 + erf cancels for x < 0, normcdff does not),
     * so the loosest is the largest of their bounds element by element */
    if (op == OP_ADAMW && strcmp(r.order, "unknown") == 0) r.order = tightest ? "llmc" : "any";
    if (op == OP_ADAMW && strcmp(r.store, "unknown") == 0) r.store = tightest ? "nearest" : "stochastic";
    if (is_gelu(op) && strcmp(r.function, "unknown") == 0) r.function = !tightest ? "any" : op == OP_GELU_TANH ? "tanh" : "erf";
    if (op == OP_ROPE && strcmp(r.angle, "unknown") == 0) r.angle = tightest ? "table" : "fp32";
    if (op == OP_POLAR_EXPRESS && strcmp(r.epilogue, "unknown") == 0) r.epilogue = tightest ? "single" : "rounded";
    if (op == OP_POLAR_EXPRESS && strcmp(r.upcast, "unknown") == 0) r.upcast = tightest ? "fp32" : "none";
    /* the tightest form: the smaller Gram matrix, as modded-nanogpt's transpose of a tall G makes it */
    if (op == OP_POLAR_EXPRESS && strcmp(r.form, "unknown") == 0) r.form = !tightest ? "any" : pb->N <= pb->C ? "wide" : "tall";
    return r;
}

static void describe(const decl *d, const problem *pb, char *out, size_t len)
{
    const op_id op = pb->op;
    const int bwd = pb->bwd, has_bias = pb->has_bias;
    if ((op == OP_EMBEDDING && !bwd) || (op == OP_TRANSPOSE && !pb->has_y0)) {
        snprintf(out, len, "exact (%s)", op == OP_EMBEDDING ? "a gather" : "a copy");
        return;
    }
    size_t k = 0;
#define APPEND(...)                                                                 \
    do {                                                                            \
        if (k < len) {                                                              \
            int w_ = snprintf(out + k, len - k, __VA_ARGS__);                       \
            k = w_ < 0 ? len : k + (size_t)w_;                                      \
        }                                                                           \
    } while (0)
    out[0] = '\0';
    APPEND("--accum %s", d->accum);
    if (op == OP_ATTENTION) {
        if (strcmp(d->accum, "tensor-core") != 0) APPEND(" --softmax %s --reduce %s", d->softmax, d->reduce);
        APPEND(" --exp %s", d->exp_form);
    } else if (is_gelu(op)) {
        APPEND(" --function %s", d->function);
        if (d->math_ulps != 2.0) APPEND(" --math-ulps %g", d->math_ulps);
    } else if (op == OP_ADAMW) {
        APPEND(" --order %s --store %s", d->order, d->store);
    } else if (is_elementwise(op)) {
        /* the arithmetic's format alone */
    } else if (op == OP_SOFTMAX) {
        APPEND(" --reduce %s", d->reduce);
        if (!bwd) APPEND(" --exp %s", d->exp_form);
    } else if (op == OP_LOGSUMEXP) {
        if (bwd) {
            out[0] = '\0'; /* dx = dlse exp(x - lse): neither sum nor accumulator */
            k = 0;
        } else {
            APPEND(" --reduce %s", d->reduce);
        }
        APPEND("%s--exp %s", k ? " " : "", d->exp_form);
    } else if (op == OP_CROSS_ENTROPY) {
        APPEND(" --reduce %s%s", d->reduce, d->online ? " --online" : "");
        if (d->softcap > 0) APPEND(" --softcap %.9g", d->softcap);
    } else if (op == OP_ROPE) {
        APPEND(" --angle %s", d->angle);
        if (strcmp(d->angle, "fp32") == 0 && d->math_ulps != 2.0) APPEND(" --math-ulps %g", d->math_ulps);
    } else if (op == OP_TRANSPOSE) {
        /* the add's format alone */
    } else if (op == OP_GRAD_NORM || op == OP_EMBEDDING) {
        APPEND(" --reduce %s", d->reduce);
    } else if (op == OP_POLAR_EXPRESS) {
        if (pb->has_steps) APPEND(" --form %s --epilogue %s", d->form, d->epilogue);
        if (pb->has_x0) APPEND(" --reduce %s --upcast %s", d->reduce, d->upcast);
    } else if (op != OP_MATMUL) {
        APPEND(" --reduce %s", d->reduce);
        if (bwd) APPEND(" --col-reduce %s", d->col_reduce);
        if (op == OP_RMSNORM) APPEND(" --upcast %s", d->upcast);
        else APPEND(" --variance %s", d->variance);
    } else {
        if (!accum_is_model(d)) APPEND(" --reduce %s", d->reduce);
        if (d->split_k > 1) APPEND(" --split-k %d", d->split_k);
        if (has_bias || d->gelu) APPEND(" --epilogue %s", d->epilogue);
    }
#undef APPEND
}

static kcmp_rmsnorm_kernel rmsnorm_kernel(const decl *d, int64_t N, int64_t C)
{
    kcmp_rmsnorm_kernel k = {0};
    k.storage = d->storage;
    if (strcmp(d->accum, "storage") == 0) k.acc = d->storage;
    else parse_format(d->accum, &k.acc);
    k.stats_in_storage = strcmp(d->upcast, "none") == 0;
    k.round_normalized = strcmp(d->upcast, "gemma") != 0;
    k.fwd_depth = k.bwd_depth = parse_reduce(d->reduce, C, 0);
    k.col_depth = parse_reduce(d->col_reduce, N, 0);
    k.rsqrt_ulps = d->math_ulps;
    k.eps = d->eps;
    return k;
}

static kcmp_layernorm_kernel layernorm_kernel(const decl *d, int64_t N, int64_t C)
{
    kcmp_layernorm_kernel k = {0};
    k.storage = d->storage;
    if (strcmp(d->accum, "storage") == 0) k.acc = d->storage;
    else parse_format(d->accum, &k.acc);
    parse_variance(d->variance, &k);
    k.fwd_depth = k.bwd_depth = parse_reduce(d->reduce, C, 0);
    k.col_depth = parse_reduce(d->col_reduce, N, 0);
    k.rsqrt_ulps = d->math_ulps;
    k.eps = d->eps;
    return k;
}

/* An activation as declared: --accum the format of its arithmetic. */
static kcmp_act_kernel activation_kernel(const decl *d, op_id op)
{
    kcmp_act_kernel k = {0};
    k.op = (kcmp_act_op)(op - OP_GELU_TANH);
    static const struct {
        const char *name;
        kcmp_act_fn fn;
    } forms[] = {{"tanh", KCMP_FN_TANH}, {"tanh-approx", KCMP_FN_TANH_APPROX}, {"sigmoid", KCMP_FN_SIGMOID},
                 {"erf", KCMP_FN_ERF},   {"normcdf", KCMP_FN_NORMCDF},         {"any", KCMP_FN_ANY}};
    k.fn = KCMP_FN_NONE;
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++)
        if (is_gelu(op) && strcmp(d->function, forms[i].name) == 0) k.fn = forms[i].fn;
    k.math_ulps = d->math_ulps;
    if (strcmp(d->accum, "storage") == 0) k.arith = d->storage;
    else parse_format(d->accum, &k.arith);
    k.act = k.grad = d->storage;
    k.x_scale = k.y_scale = k.g_scale = k.dy_scale = k.dx_scale = 1.0;
    return k;
}

static kcmp_lse_kernel logsumexp_kernel(const decl *d, int64_t C)
{
    kcmp_lse_kernel k = {0};
    k.storage = k.acc = d->storage;
    if (strcmp(d->accum, "storage") != 0) parse_format(d->accum, &k.acc);
    k.exp_variant = strcmp(d->exp_form, "exp2") == 0 ? KCHECK_EXP2 : strcmp(d->exp_form, "fast") == 0 ? KCHECK_FAST_EXP : KCHECK_EXP;
    k.depth = parse_reduce(d->reduce, C, 0);
    return k;
}

static kcmp_adamw_kernel adamw_kernel(const decl *d)
{
    kcmp_adamw_kernel k = {0};
    k.storage = k.arith = d->storage;
    if (strcmp(d->accum, "storage") != 0) parse_format(d->accum, &k.arith);
    k.order = strcmp(d->order, "llmc") == 0 ? KCMP_ADAMW_LLMC : strcmp(d->order, "torch") == 0 ? KCMP_ADAMW_TORCH : KCMP_ADAMW_ANY;
    k.store = strcmp(d->store, "stochastic") == 0 ? KCMP_ADAMW_STOCHASTIC
              : strcmp(d->store, "truncate") == 0 ? KCMP_ADAMW_TRUNCATE
                                                  : KCMP_ADAMW_NEAREST;
    k.lr = d->lr;
    k.beta1 = d->beta1;
    k.beta2 = d->beta2;
    k.eps = d->eps;
    k.weight_decay = d->weight_decay;
    k.step = d->step;
    return k;
}

static kcmp_residual_kernel residual_kernel(const decl *d)
{
    kcmp_residual_kernel k = {d->storage, d->storage};
    if (strcmp(d->accum, "storage") != 0) parse_format(d->accum, &k.arith);
    return k;
}

static kcmp_ce_kernel cross_entropy_kernel(const decl *d, int64_t V)
{
    kcmp_ce_kernel k = {0};
    k.logits = d->storage;
    if (strcmp(d->accum, "storage") == 0) k.acc = d->storage;
    else parse_format(d->accum, &k.acc);
    k.depth = parse_reduce(d->reduce, V, 0);
    k.online = d->online;
    k.dloss = d->dloss;
    k.softcap = d->softcap;
    return k;
}

static kcmp_softmax_kernel softmax_kernel(const decl *d, int64_t C)
{
    kcmp_softmax_kernel k = {0};
    k.storage = d->storage;
    if (strcmp(d->accum, "storage") == 0) k.acc = d->storage;
    else parse_format(d->accum, &k.acc);
    k.exp_variant = strcmp(d->exp_form, "exp2") == 0 ? KCHECK_EXP2 : strcmp(d->exp_form, "fast") == 0 ? KCHECK_FAST_EXP : KCHECK_EXP;
    k.fwd_depth = k.bwd_depth = parse_reduce(d->reduce, C, 0);
    return k;
}

/* The GEMM as declared, for a K-term dot product: split into slices of
 * ceil(K / split_k); a rounded accumulator adds its slices in its own
 * format, the matrix units in fp32. */
static kcmp_matmul_kernel matmul_kernel(const decl *d, int64_t K)
{
    kcmp_matmul_kernel k = {0};
    k.out = d->storage;
    k.slice = (K + d->split_k - 1) / d->split_k;
    const int64_t last = K % k.slice ? K % k.slice : k.slice;
    if (parse_dot_model(d->accum, &k.dot) > 0) {
        k.dot.depth = k.slice;
        k.slice_sum = PREC_FP32;
    } else {
        k.dot.kind = PREC_DOT_ROUNDED;
        if (strcmp(d->accum, "storage") == 0) k.dot.acc = d->storage;
        else parse_format(d->accum, &k.dot.acc);
        k.dot.depth = parse_reduce(d->reduce, k.slice, 0);
        k.slice_sum = k.dot.acc;
    }
    k.dot_last = k.dot;
    if (k.dot.kind == PREC_DOT_ROUNDED) k.dot_last.depth = parse_reduce(d->reduce, last, 0);
    k.alpha = d->alpha;
    k.beta = d->beta;
    k.gelu = d->gelu;
    k.round_product = strcmp(d->epilogue, "single") != 0;
    k.tanh_rel_err = strcmp(d->epilogue, "cublaslt") == 0 ? pow(2.0, -10.987) : 0.0;
    return k;
}

/* attention as declared (compare_attention.h), for head dimension D.
 * tensor-core: flash_mma's arithmetic on the H100's matrix units
 * (mma.sync, fp32 accumulators).  The softmax sum and the backward's delta
 * take the declared reduction over their terms. */
static kcmp_attention_kernel attention_kernel(const decl *d, int64_t D)
{
    kcmp_attention_kernel k = {0};
    k.storage = d->storage;
    k.scale = d->scale != 0 ? d->scale : (double)(float)(1.0 / sqrt((double)D));
    k.exp2 = strcmp(d->exp_form, "exp2") == 0;
    k.exp_ulps = d->math_ulps;
    k.log_ulps = 1.0;
    if (strcmp(d->accum, "tensor-core") == 0) {
        const mma_model *m = mma_model_find("h100", "mma.sync", d->storage, PREC_FP32);
        k.mma = m ? &m->arith : NULL;
        return k;
    }
    kcmp_att_reduce r = {1, 1, -1};
    int64_t v;
    if (strcmp(d->reduce, "pairwise") == 0) r.threads = KCMP_ATT_PAIRWISE;
    else if ((v = parse_count(d->reduce, "blocks:", 1 << 20)) > 0) r.threads = (int)v;
    else if (strncmp(d->reduce, "depth:", 6) == 0) r.fixed = parse_reduce(d->reduce, 1, 0);
    k.sum_reduce = k.delta_reduce = r;
    k.bwd_probs = KCMP_ATT_P_FROM_LSE;
    const int materialised = strcmp(d->softmax, "materialised") == 0;
    k.store_scores = k.store_probs = k.store_dprobs = materialised;
    k.delta = materialised ? KCMP_ATT_DELTA_PDP : KCMP_ATT_DELTA_DOUT_O;
    if (strcmp(d->softmax, "online") == 0) k.online_tile = KATT_TILE;
    return k;
}

/* The format of an op's sums or arithmetic as declared ("storage": the path's). */
static prec_format accum_format(const decl *d)
{
    prec_format f = d->storage;
    if (strcmp(d->accum, "storage") != 0) parse_format(d->accum, &f);
    return f;
}

static kcmp_rope_kernel rope_kernel(const decl *d)
{
    kcmp_rope_kernel k = {d->storage, accum_format(d), strcmp(d->angle, "table") == 0 ? KCMP_ROPE_TABLE : KCMP_ROPE_FP32_ANGLE,
                          d->base, d->math_ulps};
    return k;
}

/* The rows a scatter-add sums are added, not multiplied: each sum starts
 * from its first row exactly, one rounding fewer than parse_reduce counts
 * (a declared depth:D is taken as given). */
static int64_t embedding_depth(int64_t k, const void *user)
{
    const decl *d = user;
    const int64_t depth = parse_reduce(d->reduce, k, 0);
    return strncmp(d->reduce, "depth:", 6) == 0 || depth < 1 ? depth : depth - 1;
}

static kcmp_embedding_kernel embedding_kernel(const decl *d)
{
    kcmp_embedding_kernel k = {d->storage, accum_format(d), embedding_depth, d};
    return k;
}

/* polar_express as declared, for G of n elements: the GEMMs' accumulation
 * over their whole K (any order); the normalisation after its fp32 sum of
 * squares in fp32 (--upcast fp32) or in the storage format (none: PyTorch's
 * X / (X.norm() * 1.02 + 1e-6) on a bf16 X). */
static kcmp_pe_kernel pe_kernel(const decl *d, int64_t n)
{
    kcmp_pe_kernel k = {0};
    k.storage = d->storage;
    k.tall = strcmp(d->form, "tall") == 0;
    k.either_form = strcmp(d->form, "any") == 0;
    k.fused = strcmp(d->epilogue, "single") == 0;
    if (parse_dot_model(d->accum, &k.gemm) <= 0) {
        memset(&k.gemm, 0, sizeof k.gemm);
        k.gemm.kind = PREC_DOT_ROUNDED;
        k.gemm.acc = accum_format(d);
    }
    k.norm_arith = strcmp(d->upcast, "none") == 0 ? d->storage : PREC_FP32;
    k.norm_depth = parse_reduce(d->reduce, n, 0);
    return k;
}

/* ---- tensors ----------------------------------------------------------------------- */

static double element(const ulp_tensor *t, int64_t i)
{
    switch (t->dtype) {
    case ULP_F64: return ((const double *)t->data)[i];
    case ULP_F32: return ((const float *)t->data)[i];
    case ULP_BF16_BITS: {
        uint32_t bits = (uint32_t)((const uint16_t *)t->data)[i] << 16;
        float f;
        memcpy(&f, &bits, sizeof f);
        return f;
    }
    case ULP_F16_BITS: {
        uint16_t h = ((const uint16_t *)t->data)[i];
        int e = (h >> 10) & 0x1f, m = h & 0x3ff;
        double v = e == 0x1f ? (m ? NAN : INFINITY) : e == 0 ? ldexp(m, -24) : ldexp(m | 0x400, e - 25);
        return h & 0x8000 ? -v : v;
    }
    }
    return NAN;
}

/* Binds the given tensors to the pass's names, converts them and checks
 * that every value is one the declared format holds. */
static int bind(const vtensor *want, const ulp_tensor *given, int n_given, const char *role, const decl *d,
                int is_output, bound_tensor *out, char *err, size_t errlen)
{
    for (int g = 0; g < n_given; g++) {
        int found = -1;
        for (int w = 0; w < VMAX_TENSORS && want[w].name; w++)
            if (given[g].name && strcmp(given[g].name, want[w].name) == 0) found = w;
        if (found < 0) {
            char names[128] = "";
            for (int w = 0; w < VMAX_TENSORS && want[w].name; w++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", w ? ", " : "", want[w].name);
            return bad(err, errlen, "%s tensor '%s' is not one of this pass's %ss (%s)", role,
                       given[g].name ? given[g].name : "(no name)", role, names);
        }
        if (out[found].t) return bad(err, errlen, "%s tensor '%s' given twice", role, given[g].name);
        const ulp_tensor *t = &given[g];
        if (t->ndim < 0 || t->ndim > ULP_MAX_DIMS) return bad(err, errlen, "tensor '%s': %d dimensions", t->name, t->ndim);
        if ((unsigned)t->dtype > ULP_F16_BITS) return bad(err, errlen, "tensor '%s': unknown dtype %d", t->name, (int)t->dtype);
        int64_t n = 1;
        for (int k = 0; k < t->ndim; k++) {
            if (t->shape[k] < 0 || (t->shape[k] && n > (1ll << 40) / t->shape[k]))
                return bad(err, errlen, "tensor '%s': bad shape (dimension %d = %lld)", t->name, k, (long long)t->shape[k]);
            n *= t->shape[k];
        }
        if (n > 0 && !t->data) return bad(err, errlen, "tensor '%s': no data", t->name);
        out[found].t = t;
        out[found].n = n;
    }
    for (int w = 0; w < VMAX_TENSORS && want[w].name; w++) {
        if (!out[w].t) {
            if (!want[w].optional) return bad(err, errlen, "missing %s tensor '%s'", role, want[w].name);
            continue;
        }
        const ulp_tensor *t = out[w].t;
        const prec_format f = want[w].format == T_FP32 ? PREC_FP32 : d->storage;
        const int any_value = want[w].format == T_OPERAND && d->fp8; /* dequantised: code times scale */
        const int index = want[w].format == T_INDEX;
        out[w].v = malloc((out[w].n ? out[w].n : 1) * sizeof(double));
        if (!out[w].v) return bad(err, errlen, "out of memory for tensor '%s'", t->name);
        for (int64_t i = 0; i < out[w].n; i++) {
            double v = element(t, i);
            out[w].v[i] = v;
            if (!isfinite(v)) {
                if (is_output) continue; /* a non-finite output is a finding, not bad input */
                return bad(err, errlen, "input '%s' element %lld is %g: the reference needs finite inputs", t->name,
                           (long long)i, v);
            }
            if (index && (v != floor(v) || v < -1 || v > 2147483647.0))
                return bad(err, errlen, "%s '%s' element %lld = %.17g is not an index (an integer, -1 for none)", role,
                           t->name, (long long)i, v);
            if (!any_value && !index && prec_rne(v, f) != v)
                return bad(err, errlen, "%s '%s' element %lld = %.17g is not a %s value: the declared %s cannot have %s it",
                           role, t->name, (long long)i, v, prec_format_get(f)->name,
                           want[w].format == T_FP32 ? "fp32 tensor" : "path", is_output ? "written" : "seen");
        }
    }
    return 0;
}

static void free_bound(bound_tensor *b)
{
    for (int i = 0; i < VMAX_TENSORS; i++) free(b[i].v);
}

/* Shape rules of rmsnorm: x (..., C); gain (C); dy, y, dx as x; rstd the
 * number of rows; dgain (C). */
static int rmsnorm_shapes(const bound_tensor *in, const bound_tensor *out, int bwd, int64_t *N, int64_t *C,
                          char *err, size_t errlen)
{
    const ulp_tensor *x = in[0].t;
    if (x->ndim < 1) return bad(err, errlen, "x must have at least one dimension (..., C)");
    *C = x->shape[x->ndim - 1];
    *N = *C ? in[0].n / *C : 0;
    if (*N < 1 || *C < 1) return bad(err, errlen, "x has no elements (shape needs N, C >= 1)");
    if (in[1].t && (in[1].n != *C))
        return bad(err, errlen, "gain has %lld elements, x's rows have C = %lld", (long long)in[1].n, (long long)*C);
    const bound_tensor *rstd = bwd ? &in[3] : &out[1];
    if (rstd->t && rstd->n != *N)
        return bad(err, errlen, "rstd has %lld elements, x has N = %lld rows", (long long)rstd->n, (long long)*N);
    const bound_tensor *same[3] = {bwd ? &in[2] : &out[0], bwd ? &out[0] : NULL, NULL};
    for (int s = 0; s < 3 && same[s]; s++) {
        const ulp_tensor *t = same[s]->t;
        if (!t) continue;
        int ok = t->ndim == x->ndim;
        for (int k = 0; ok && k < x->ndim; k++) ok = t->shape[k] == x->shape[k];
        if (!ok) return bad(err, errlen, "%s's shape differs from x's", t->name);
    }
    if (bwd && out[1].t) {
        if (!in[1].t) return bad(err, errlen, "dgain needs gain (a kernel without a gain has no dgain)");
        if (out[1].n != *C)
            return bad(err, errlen, "dgain has %lld elements, x's rows have C = %lld", (long long)out[1].n, (long long)*C);
    }
    return 0;
}

static void copy_row(ulp_row *r, const kcheck_row *k, const char *assumption)
{
    memset(r, 0, sizeof *r);
    snprintf(r->output, sizeof r->output, "%s", k->output);
    snprintf(r->assumption, sizeof r->assumption, "%s", assumption);
    snprintf(r->shape, sizeof r->shape, "%s", k->shape);
    r->n = k->n;
    r->unit_roundoff = k->unit_roundoff;
    r->max_err_u = k->max_err_u;
    r->rms_err_u = k->rms_err_u;
    r->max_bound_u = k->max_bound_u;
    r->rms_bound_u = k->rms_bound_u;
    r->worst_ratio = k->worst_ratio;
    r->worst_index = k->worst_index;
    snprintf(r->worst_detail, sizeof r->worst_detail, "%s", k->worst_detail);
    r->nonfinite = k->nonfinite;
    r->pass = k->pass;
    /* A declaration can have no finite bound (a bf16 accumulator over more
     * than 1/u terms): the replay then carries inf or NaN.  Every finite
     * output is within an infinite bound; the row says so (vacuous). */
    if (!isfinite(k->max_bound_u) || !isfinite(k->rms_bound_u)) {
        r->max_bound_u = r->rms_bound_u = INFINITY;
        r->worst_ratio = r->nonfinite ? INFINITY : 0.0;
        r->pass = r->nonfinite == 0;
        r->vacuous = 1;
    }
}

/* Every tensor shaped as the first input (..., C): softmax. */
static int same_shapes(const bound_tensor *in, const bound_tensor *out, int64_t *N, int64_t *C, char *err, size_t errlen)
{
    const ulp_tensor *x = in[0].t;
    if (x->ndim < 1) return bad(err, errlen, "%s must have at least one dimension (..., C)", x->name);
    *C = x->shape[x->ndim - 1];
    *N = *C ? in[0].n / *C : 0;
    if (*N < 1 || *C < 1) return bad(err, errlen, "%s has no elements (shape needs N, C >= 1)", x->name);
    for (int role = 0; role < 2; role++)
        for (int i = 0; i < VMAX_TENSORS; i++) {
            const ulp_tensor *t = (role ? out : in)[i].t;
            if (!t) continue;
            int ok = t->ndim == x->ndim;
            for (int k = 0; ok && k < x->ndim; k++) ok = t->shape[k] == x->shape[k];
            if (!ok) return bad(err, errlen, "%s's shape differs from %s's", t->name, x->name);
        }
    return 0;
}

/* Shape rules of layernorm: x (..., C); gain, bias, dgain, dbias (C); y,
 * dy, dx as x; mean and rstd the number of rows. */
static int layernorm_shapes(const bound_tensor *in, const bound_tensor *out, int bwd, int64_t *N, int64_t *C,
                            char *err, size_t errlen)
{
    const ulp_tensor *x = in[0].t;
    if (x->ndim < 1) return bad(err, errlen, "x must have at least one dimension (..., C)");
    *C = x->shape[x->ndim - 1];
    *N = *C ? in[0].n / *C : 0;
    if (*N < 1 || *C < 1) return bad(err, errlen, "x has no elements (shape needs N, C >= 1)");
    /* per pass: the (C) tensors, the (N) statistics, the tensors shaped as x */
    const bound_tensor *per_col[3] = {&in[1], bwd ? &out[1] : &in[2], bwd ? &out[2] : NULL};
    const bound_tensor *per_row[2] = {bwd ? &in[3] : &out[1], bwd ? &in[4] : &out[2]};
    const bound_tensor *like_x[2] = {bwd ? &in[2] : &out[0], bwd ? &out[0] : NULL};
    for (int i = 0; i < 3; i++)
        if (per_col[i] && per_col[i]->t && per_col[i]->n != *C)
            return bad(err, errlen, "%s has %lld elements, x's rows have C = %lld", per_col[i]->t->name,
                       (long long)per_col[i]->n, (long long)*C);
    for (int i = 0; i < 2; i++)
        if (per_row[i]->t && per_row[i]->n != *N)
            return bad(err, errlen, "%s has %lld elements, x has N = %lld rows", per_row[i]->t->name,
                       (long long)per_row[i]->n, (long long)*N);
    for (int i = 0; i < 2; i++) {
        const ulp_tensor *t = like_x[i] ? like_x[i]->t : NULL;
        if (!t) continue;
        int ok = t->ndim == x->ndim;
        for (int k = 0; ok && k < x->ndim; k++) ok = t->shape[k] == x->shape[k];
        if (!ok) return bad(err, errlen, "%s's shape differs from x's", t->name);
    }
    if (bwd && out[1].t && !in[1].t) return bad(err, errlen, "dgain needs gain (a kernel without a gain has no dgain)");
    return 0;
}

/* Shape rules of matmul (--layout): a (M, K) or (K, M), b (K, N) or (N, K),
 * c and y (M, N), bias (N); c exactly when beta != 0. */
static int matmul_shapes(const decl *d, problem *pb, char *err, size_t errlen)
{
    const ulp_tensor *a = pb->in[0].t, *b = pb->in[1].t;
    if (a->ndim != 2 || b->ndim != 2)
        return bad(err, errlen, "%s must be a matrix (2 dimensions), it has %d", a->ndim != 2 ? "a" : "b",
                   a->ndim != 2 ? a->ndim : b->ndim);
    const int at = strncmp(d->layout, "At", 2) == 0, bt = d->layout[strlen(d->layout) - 1] == 't';
    const int64_t M = at ? a->shape[1] : a->shape[0], Ka = at ? a->shape[0] : a->shape[1];
    const int64_t Kb = bt ? b->shape[1] : b->shape[0], N = bt ? b->shape[0] : b->shape[1];
    if (Ka != Kb)
        return bad(err, errlen, "a gives K = %lld, b gives K = %lld (--layout %s: a is %s, b is %s)", (long long)Ka,
                   (long long)Kb, d->layout, at ? "(K, M)" : "(M, K)", bt ? "(N, K)" : "(K, N)");
    if (M < 1 || N < 1 || Ka < 1)
        return bad(err, errlen, "empty product: M = %lld, N = %lld, K = %lld (each needs >= 1)", (long long)M,
                   (long long)N, (long long)Ka);
    const ulp_tensor *mn[2] = {pb->in[2].t, pb->out[0].t};
    for (int i = 0; i < 2; i++)
        if (mn[i] && (mn[i]->ndim != 2 || mn[i]->shape[0] != M || mn[i]->shape[1] != N))
            return bad(err, errlen, "%s's shape differs from (M, N) = (%lld, %lld), which a and b give (--layout %s)",
                       mn[i]->name, (long long)M, (long long)N, d->layout);
    if (d->beta != 0 && !pb->in[2].t) return bad(err, errlen, "beta %g needs the tensor c (y = alpha A B + beta C)", d->beta);
    if (d->beta == 0 && pb->in[2].t)
        return bad(err, errlen, "c given but beta is 0: declare the beta the kernel used (--beta)");
    if (pb->in[3].t && (pb->in[3].t->ndim != 1 || pb->in[3].n != N))
        return bad(err, errlen, "bias has %lld elements in %d dimensions, y has N = %lld columns (bias is (N))",
                   (long long)pb->in[3].n, pb->in[3].t->ndim, (long long)N);
    pb->M = M;
    pb->cols = N;
    pb->K = Ka;
    pb->a_rs = at ? 1 : (long)Ka;
    pb->a_cs = at ? (long)M : 1;
    pb->b_rs = bt ? 1 : (long)N;
    pb->b_cs = bt ? (long)Ka : 1;
    pb->has_bias = pb->in[3].t != NULL;
    snprintf(pb->shape, sizeof pb->shape, "M=%lld N=%lld K=%lld %s%s%s%s%s", (long long)M, (long long)N, (long long)Ka,
             at ? "At" : "A", bt ? "Bt" : "B", pb->has_bias ? " bias" : "", d->gelu ? " gelu" : "",
             d->beta != 0 ? " +C" : "");
    return 0;
}

/* Shape rules of cross_entropy: logits (..., V); targets and loss one per
 * row; dlogits as logits; every target in [-1, V). */
static int cross_entropy_shapes(const decl *d, problem *pb, char *err, size_t errlen)
{
    const bound_tensor *in = pb->in, *out = pb->out;
    const ulp_tensor *z = in[0].t;
    if (z->ndim < 1) return bad(err, errlen, "logits must have at least one dimension (..., V)");
    const int64_t V = z->shape[z->ndim - 1], N = V ? in[0].n / V : 0;
    if (N < 1 || V < 1) return bad(err, errlen, "logits have no elements (shape needs N, V >= 1)");
    if (in[1].n != N) return bad(err, errlen, "targets has %lld elements, logits have N = %lld rows", (long long)in[1].n, (long long)N);
    if (out[0].t && out[0].n != N)
        return bad(err, errlen, "loss has %lld elements, logits have N = %lld rows", (long long)out[0].n, (long long)N);
    if (out[1].t) {
        int ok = out[1].t->ndim == z->ndim;
        for (int k = 0; ok && k < z->ndim; k++) ok = out[1].t->shape[k] == z->shape[k];
        if (!ok) return bad(err, errlen, "dlogits's shape differs from logits's");
        if (d->dloss == 0)
            return bad(err, errlen, "dlogits need --dloss, the loss gradient the kernel scaled them by (1/N for a mean over N rows)");
    }
    for (int64_t i = 0; i < N; i++)
        if (in[1].v[i] < -1 || in[1].v[i] >= (double)V)
            return bad(err, errlen, "target %lld is %.17g: targets are -1 (ignored) or in [0, V = %lld)", (long long)i,
                       in[1].v[i], (long long)V);
    pb->targets = malloc((size_t)N * sizeof(int32_t));
    if (!pb->targets) return bad(err, errlen, "out of memory");
    for (int64_t i = 0; i < N; i++) pb->targets[i] = (int32_t)in[1].v[i];
    pb->N = N;
    pb->C = V;
    snprintf(pb->shape, sizeof pb->shape, "N=%lld V=%lld", (long long)N, (long long)V);
    return 0;
}

/* Shape rules of attention: q (..., T, D); k, v, o, do, dq, dk, dv as q;
 * lse q's shape without D. */
static int attention_shapes(problem *pb, char *err, size_t errlen)
{
    const ulp_tensor *q = pb->in[0].t;
    if (q->ndim < 2) return bad(err, errlen, "q must have at least two dimensions (..., T, D)");
    const int64_t T = q->shape[q->ndim - 2], D = q->shape[q->ndim - 1];
    if (T < 1 || D < 1 || pb->in[0].n < 1) return bad(err, errlen, "q has no elements (shape needs T, D >= 1)");
    for (int role = 0; role < 2; role++)
        for (int i = 0; i < VMAX_TENSORS; i++) {
            const ulp_tensor *t = (role ? pb->out : pb->in)[i].t;
            if (!t || t == q) continue;
            const int lse = strcmp(t->name, "lse") == 0, nd = lse ? q->ndim - 1 : q->ndim;
            int ok = t->ndim == nd;
            for (int d = 0; ok && d < nd; d++) ok = t->shape[d] == q->shape[d];
            if (!ok)
                return bad(err, errlen, "%s's shape differs from %s (q's%s)", t->name, lse ? "(..., T)" : "(..., T, D)",
                           lse ? " without D" : "");
        }
    pb->D = D;
    pb->T = T;
    pb->BH = pb->in[0].n / (T * D);
    snprintf(pb->shape, sizeof pb->shape, "BH=%lld T=%lld D=%lld", (long long)pb->BH, (long long)T, (long long)D);
    return 0;
}

static int same_dims(const ulp_tensor *t, int ndim, const int64_t *dims)
{
    if (t->ndim != ndim) return 0;
    for (int k = 0; k < ndim; k++)
        if (t->shape[k] != dims[k]) return 0;
    return 1;
}

/* Shape rules of rope: x (dy) (..., T, H, D) with D even, y (dx) as x; cos,
 * sin (T', D/2) with T' >= T, both or neither; inv_freq (D/2).  Tables
 * given with an unknown angle: the kernel read them (a table, or the fp32
 * angle from those frequencies). */
static int rope_shapes(decl *d, problem *pb, char *err, size_t errlen)
{
    const bound_tensor *in = pb->in;
    const ulp_tensor *x = in[0].t;
    if (x->ndim < 3) return bad(err, errlen, "%s must have at least three dimensions (..., T, H, D)", x->name);
    const int64_t T = x->shape[x->ndim - 3], H = x->shape[x->ndim - 2], D = x->shape[x->ndim - 1];
    if (in[0].n < 1) return bad(err, errlen, "%s has no elements", x->name);
    if (D % 2) return bad(err, errlen, "%s's head dimension D = %lld is odd: pairs (i, i + D/2) need it even", x->name, (long long)D);
    if (!same_dims(pb->out[0].t, x->ndim, x->shape)) return bad(err, errlen, "%s's shape differs from %s's", pb->out[0].t->name, x->name);
    if (!in[1].t != !in[2].t) return bad(err, errlen, "cos and sin come together (the table the kernel read)");
    for (int i = 1; i < 3; i++)
        if (in[i].t && (in[i].t->ndim != 2 || in[i].t->shape[1] != D / 2 || in[i].t->shape[0] < T))
            return bad(err, errlen, "%s must be (T', D/2) with T' >= T = %lld and D/2 = %lld", in[i].t->name, (long long)T,
                       (long long)(D / 2));
    if (in[3].t && in[3].n != D / 2)
        return bad(err, errlen, "inv_freq has %lld elements, D/2 = %lld", (long long)in[3].n, (long long)(D / 2));
    if (in[1].t && in[3].t) return bad(err, errlen, "cos, sin and inv_freq: a kernel reads a table or forms the angle, give one");
    if (in[1].t && strcmp(d->angle, "fp32") == 0) return bad(err, errlen, "cos and sin are a table: --angle table (or unknown)");
    if (in[3].t && strcmp(d->angle, "table") == 0) return bad(err, errlen, "inv_freq is the fp32 angle's: --angle fp32 (or unknown)");
    if (strcmp(d->angle, "unknown") == 0 && (in[1].t || in[3].t)) d->angle = in[1].t ? "table" : "fp32";
    pb->T = T;
    pb->H = H;
    pb->D = D;
    pb->N = in[0].n / (H * D);
    snprintf(pb->shape, sizeof pb->shape, "B=%lld T=%lld H=%lld D=%lld", (long long)(pb->N / T), (long long)T, (long long)H,
             (long long)D);
    return 0;
}

/* Shape rules of embedding: table (V, C), tokens (N..) in [0, V), out
 * (N.., C); backward dout (N.., C), dtable0 and dtable (V, C). */
static int embedding_shapes(problem *pb, char *err, size_t errlen)
{
    const bound_tensor *in = pb->in, *out = pb->out;
    const bound_tensor *tok = pb->bwd ? &in[0] : &in[1], *rows = pb->bwd ? &in[1] : &out[0];
    const ulp_tensor *tab = pb->bwd ? out[0].t : in[0].t;
    if (tab->ndim != 2) return bad(err, errlen, "%s must be (V, C), it has %d dimensions", tab->name, tab->ndim);
    const int64_t V = tab->shape[0], C = tab->shape[1], N = tok->n;
    if (V < 1 || C < 1 || N < 1) return bad(err, errlen, "empty lookup: V = %lld, C = %lld, %lld tokens", (long long)V,
                                            (long long)C, (long long)N);
    int64_t dims[ULP_MAX_DIMS + 1];
    const ulp_tensor *t = tok->t;
    if (t->ndim >= ULP_MAX_DIMS) return bad(err, errlen, "tokens have %d dimensions (at most %d)", t->ndim, ULP_MAX_DIMS - 1);
    for (int k = 0; k < t->ndim; k++) dims[k] = t->shape[k];
    dims[t->ndim] = C;
    if (!same_dims(rows->t, t->ndim + 1, dims)) return bad(err, errlen, "%s's shape differs from (tokens..., C = %lld)",
                                                           rows->t->name, (long long)C);
    if (pb->bwd && in[2].t && !same_dims(in[2].t, 2, tab->shape)) return bad(err, errlen, "dtable0's shape differs from dtable's");
    pb->targets = malloc((size_t)N * sizeof(int32_t));
    if (!pb->targets) return bad(err, errlen, "out of memory");
    for (int64_t i = 0; i < N; i++) {
        if (tok->v[i] < 0 || tok->v[i] >= (double)V)
            return bad(err, errlen, "token %lld is %.17g: tokens are in [0, V = %lld)", (long long)i, tok->v[i], (long long)V);
        pb->targets[i] = (int32_t)tok->v[i];
    }
    pb->V = V;
    pb->N = N;
    pb->C = C;
    snprintf(pb->shape, sizeof pb->shape, "V=%lld N=%lld C=%lld", (long long)V, (long long)N, (long long)C);
    return 0;
}

/* Shape rules of transpose: x (M, N); y0 and y (N, M). */
static int transpose_shapes(problem *pb, char *err, size_t errlen)
{
    const ulp_tensor *x = pb->in[0].t;
    if (x->ndim != 2) return bad(err, errlen, "x must be a matrix (2 dimensions), it has %d", x->ndim);
    const int64_t M = x->shape[0], N = x->shape[1], yt[2] = {N, M};
    if (M < 1 || N < 1) return bad(err, errlen, "x has no elements (M, N >= 1)");
    const ulp_tensor *ys[2] = {pb->in[1].t, pb->out[0].t};
    for (int i = 0; i < 2; i++)
        if (ys[i] && !same_dims(ys[i], 2, yt))
            return bad(err, errlen, "%s's shape differs from x^T's (N, M) = (%lld, %lld)", ys[i]->name, (long long)N, (long long)M);
    pb->M = M;
    pb->cols = N;
    pb->has_y0 = pb->in[1].t != NULL;
    snprintf(pb->shape, sizeof pb->shape, "M=%lld N=%lld", (long long)M, (long long)N);
    return 0;
}

/* Shape rules of polar_express: G (rows, cols), every stage as G; x<k>
 * needs x<k-1> (its input); the steps need the coefficients. */
static int pe_shapes(const decl *d, problem *pb, char *err, size_t errlen)
{
    const ulp_tensor *g = pb->in[0].t;
    if (g->ndim != 2) return bad(err, errlen, "G must be a matrix (rows, cols), it has %d dimensions", g->ndim);
    if (g->shape[0] < 1 || g->shape[1] < 1) return bad(err, errlen, "G has no elements (rows, cols >= 1)");
    for (int st = 0; st <= KPE_STEPS; st++) {
        const ulp_tensor *x = pb->out[st].t;
        if (!x) continue;
        if (!same_dims(x, 2, g->shape)) return bad(err, errlen, "%s's shape differs from G's", x->name);
        if (st > 0 && !pb->out[st - 1].t)
            return bad(err, errlen, "x%d needs x%d: each step is judged from the kernel's own previous iterate", st, st - 1);
        if (st > 0) pb->has_steps = 1;
    }
    if (pb->has_steps && !d->has_coeffs)
        return bad(err, errlen, "the steps need --coeffs (polar-express, muon-quintic, or a,b,c): the coefficients the kernel used");
    pb->has_x0 = pb->out[0].t != NULL;
    pb->N = g->shape[0];
    pb->C = g->shape[1];
    snprintf(pb->shape, sizeof pb->shape, "rows=%lld cols=%lld", (long long)pb->N, (long long)pb->C);
    return 0;
}

/* Runs the op's comparison under declaration d; appends its rows (only the
 * pass's outputs) to rep; returns 1 when all of them pass, 0 when one
 * fails, -1 when out of memory. */
static int op_rows(const decl *d, const problem *pb, ulp_report *rep, int *vacuous)
{
    kcheck_acc rows[KCMP_LAYERNORM_MAX_ROWS]; /* the most of any op */
    _Static_assert(KCMP_ADAMW_MAX_ROWS <= KCMP_LAYERNORM_MAX_ROWS && KCMP_ACT_MAX_ROWS <= KCMP_LAYERNORM_MAX_ROWS &&
                       KCMP_ATTENTION_MAX_ROWS <= KCMP_LAYERNORM_MAX_ROWS && KPE_STEPS + 1 <= KCMP_LAYERNORM_MAX_ROWS &&
                       KCMP_EMBEDDING_MAX_ROWS <= KCMP_LAYERNORM_MAX_ROWS,
                   "rows[] holds every op's rows");
    int n;
    const bound_tensor *in = pb->in, *out = pb->out;
    const int bwd = pb->bwd;
    if (pb->op == OP_POLAR_EXPRESS) {
        const kcmp_pe_kernel k = pe_kernel(d, pb->N * pb->C);
        n = 0;
        for (int st = 0; st <= KPE_STEPS && n >= 0; st++) {
            if (!out[st].t) continue;
            const double *a = st ? d->abc[st - 1] : NULL;
            kcmp_pe_data data = {pb->N, pb->C, st, st ? out[st - 1].v : in[0].v, a ? a[0] : 0, a ? a[1] : 0, a ? a[2] : 0,
                                 out[st].v};
            if (kcmp_polar_express(&k, &data, pb->shape, &rows[n++]) < 0) n = -1;
        }
    } else if (pb->op == OP_ROPE) {
        const kcmp_rope_kernel k = rope_kernel(d);
        kcmp_rope_data data = {pb->N, pb->H, pb->D, pb->T, in[0].v, in[1].v, in[2].v, in[3].v, out[0].v, bwd};
        n = kcmp_rope(&k, &data, pb->shape, rows);
    } else if (pb->op == OP_GRAD_NORM) {
        const int64_t size = in[0].n;
        const double *g[1] = {in[0].v};
        kcmp_grad_norm_kernel k = {accum_format(d), parse_reduce(d->reduce, size, 0)};
        kcmp_grad_norm_data data = {1, &size, g, out[0].v[0]};
        n = kcmp_grad_norm(&k, &data, pb->shape, rows);
    } else if (pb->op == OP_EMBEDDING) {
        const kcmp_embedding_kernel k = embedding_kernel(d);
        kcmp_embedding_data data = {pb->V, pb->N, pb->C, pb->targets, bwd ? NULL : in[0].v, bwd ? NULL : out[0].v,
                                    bwd ? in[1].v : NULL, bwd ? in[2].v : NULL, bwd ? out[0].v : NULL};
        n = kcmp_embedding(&k, &data, pb->shape, rows);
    } else if (pb->op == OP_TRANSPOSE) {
        const kcmp_transpose_kernel k = {d->storage, accum_format(d)};
        kcmp_transpose_data data = {pb->M, pb->cols, in[0].v, in[1].v, out[0].v, "y"};
        n = kcmp_transpose(&k, &data, pb->shape, rows);
    } else if (pb->op == OP_ATTENTION) {
        kcmp_attention_kernel k = attention_kernel(d, pb->D);
        kcmp_attention_data data = {pb->BH, pb->T, pb->D, in[0].v, in[1].v, in[2].v,
                                    bwd ? in[3].v : out[0].v, bwd ? in[4].v : out[1].v, !bwd,
                                    bwd ? in[5].v : NULL, bwd ? out[0].v : NULL, bwd ? out[1].v : NULL,
                                    bwd ? out[2].v : NULL};
        n = kcmp_attention(&k, &data, pb->shape, rows);
    } else if (pb->op == OP_MATMUL) {
        kcmp_matmul_kernel k = matmul_kernel(d, pb->K);
        kcmp_matmul_data data = {pb->M, pb->cols, pb->K, in[0].v, pb->a_rs, pb->a_cs, in[1].v, pb->b_rs, pb->b_cs,
                                 in[2].v, in[3].v, out[0].v, NULL};
        n = kcmp_matmul(&k, &data, pb->shape, &rows[0]);
    } else if (pb->op == OP_CROSS_ENTROPY) {
        kcmp_ce_kernel k = cross_entropy_kernel(d, pb->C);
        kcmp_ce_data data = {pb->N, pb->C, in[0].v, pb->targets, out[0].v, out[1].v};
        n = kcmp_cross_entropy(&k, &data, pb->shape, rows);
    } else if (pb->op == OP_LOGSUMEXP) {
        kcmp_lse_kernel k = logsumexp_kernel(d, pb->C);
        kcmp_lse_data data = {pb->N, pb->C, in[0].v, bwd ? in[1].v : out[0].v, bwd ? in[2].v : NULL,
                              bwd ? out[0].v : NULL, !bwd};
        n = kcmp_logsumexp(&k, &data, pb->shape, rows);
    } else if (pb->op == OP_ADAMW) {
        kcmp_adamw_kernel k = adamw_kernel(d);
        /* the update starts from the fp32 master where the kernel keeps one */
        kcmp_adamw_data data = {pb->N * pb->C, in[4].v ? in[4].v : in[0].v, in[1].v, in[2].v, in[3].v,
                                out[0].v, out[1].v, out[2].v, out[3].v};
        n = kcmp_adamw(&k, &data, pb->shape, rows);
    } else if (pb->op == OP_RESIDUAL) {
        kcmp_residual_kernel k = residual_kernel(d);
        kcmp_residual_data data = {pb->N * pb->C, in[0].v, in[1].v, out[0].v};
        n = kcmp_residual(&k, &data, pb->shape, rows);
    } else if (is_activation(pb->op)) {
        kcmp_act_kernel k = activation_kernel(d, pb->op);
        /* fwd: x -> y (and grad); bwd: x, dy (and the stored grad) -> dx */
        kcmp_act_data data = {pb->N * pb->C, in[0].v, bwd ? NULL : out[0].v, bwd ? in[2].v : out[1].v,
                              bwd ? in[1].v : NULL, bwd ? out[0].v : NULL};
        n = kcmp_activation(&k, &data, pb->shape, rows);
    } else if (pb->op == OP_SOFTMAX) {
        kcmp_softmax_kernel k = softmax_kernel(d, pb->C);
        kcmp_softmax_data data = {pb->N, pb->C, bwd ? NULL : in[0].v, bwd ? in[0].v : out[0].v, bwd ? in[1].v : NULL,
                                  bwd ? out[0].v : NULL};
        n = kcmp_softmax(&k, &data, pb->shape, rows);
    } else if (pb->op == OP_LAYERNORM) {
        kcmp_layernorm_kernel k = layernorm_kernel(d, pb->N, pb->C);
        kcmp_layernorm_data data = {pb->N, pb->C, in[0].v, in[1].v, bwd ? NULL : in[2].v, bwd ? in[2].v : NULL,
                                    bwd ? NULL : out[0].v, bwd ? in[3].v : out[1].v, bwd ? in[4].v : out[2].v,
                                    bwd ? out[0].v : NULL, bwd ? out[1].v : NULL, bwd ? out[2].v : NULL};
        n = kcmp_layernorm(&k, &data, pb->shape, rows);
    } else {
        kcmp_rmsnorm_kernel k = rmsnorm_kernel(d, pb->N, pb->C);
        kcmp_rmsnorm_data data = {pb->N, pb->C, in[0].v, in[1].v, bwd ? in[2].v : NULL,
                                  bwd ? NULL : out[0].v, bwd ? in[3].v : out[1].v, bwd ? out[0].v : NULL,
                                  bwd ? out[1].v : NULL};
        n = kcmp_rmsnorm(&k, &data, pb->shape, rows);
    }
    if (n < 0) return -1;
    char assumption[200];
    describe(d, pb, assumption, sizeof assumption);
    int all = 1;
    for (int i = 0; i < n; i++) {
        const char *o = rows[i].row.output;
        int wanted = 0; /* only the pass's outputs: the norms' comparisons also row the forward's stored statistics */
        for (int w = 0; w < VMAX_TENSORS && pb->outputs[w].name; w++) wanted |= strcmp(o, pb->outputs[w].name) == 0;
        if (!wanted || rep->n_rows >= ULP_MAX_ROWS) continue;
        ulp_row *r = &rep->rows[rep->n_rows++];
        copy_row(r, &rows[i].row, assumption);
        all &= r->pass;
        *vacuous |= r->vacuous;
    }
    return all;
}

/* A looser declaration to try after a FAIL, and what fitting it would mean
 * (NULL: said from the parts that differ: accumulation, order, upcast). */
typedef struct {
    decl d;
    const char *meaning;
} attempt;

#define MAX_ATTEMPTS 8
/* attention's: the storage-format softmax, a sequential reduction, exp2
 * (its folded constant), then all three (the tensor cores' bound has none
 * to loosen: nothing). */
static int attention_looser(const decl *d, attempt *a)
{
    int n = 0;
    if (strcmp(d->accum, "tensor-core") == 0) return 0;
    if (strcmp(d->softmax, "materialised") != 0) {
        a[n].d = *d;
        a[n].d.softmax = "materialised";
        a[n++].meaning = "the kernel likely rounds the scores and probabilities to the storage format (materialised)";
    }
    a[n].d = *d;
    a[n].d.reduce = "sequential";
    a[n++].meaning = "the kernel likely sums its softmax rows and deltas sequentially";
    a[n].d = *d;
    a[n].d.softmax = "materialised";
    a[n].d.reduce = "sequential";
    a[n].d.exp_form = "exp2";
    a[n++].meaning = "the kernel likely materialises S and P, sums sequentially and folds log2(e) into the scale";
    return n;
}

static int looser_declarations(const decl *d, const problem *pb, attempt *a)
{
    if (pb->op == OP_ATTENTION) return attention_looser(d, a);
    if ((pb->op == OP_EMBEDDING && !pb->bwd) || (pb->op == OP_TRANSPOSE && !pb->has_y0)) return 0; /* exact */
    int n = 0;
    const int rounded = !accum_is_model(d);
    if (pb->op == OP_ROPE) {
        if (strcmp(d->angle, "fp32") != 0) {
            a[n].d = *d;
            a[n].d.angle = "fp32";
            a[n++].meaning = "the kernel likely forms the angle pos inv_freq in fp32 and calls sincosf (or reads a table "
                             "no better than that)";
        }
        a[n].d = *d;
        a[n].d.accum = "storage";
        a[n++].meaning = NULL;
        a[n].d = a[n - 1].d;
        a[n].d.angle = "fp32";
        a[n++].meaning = NULL;
        return n;
    }
    if (pb->op == OP_POLAR_EXPRESS) {
        const int wide = rounded && (strcmp(d->accum, "fp32") == 0 || strcmp(d->accum, "fp64") == 0);
        if (wide) {
            a[n].d = *d;
            a[n].d.accum = strcmp(d->path, "fp32") == 0 ? "tf32" : "tensor-core";
            a[n++].meaning = strcmp(d->path, "fp32") == 0 ? "the kernel's GEMMs likely round their fp32 inputs to tf32"
                                                          : "the kernel's GEMMs likely run on tensor cores (block FMAs that "
                                                            "truncate)";
        }
        if (pb->has_steps && strcmp(d->epilogue, "rounded") != 0) {
            a[n].d = *d;
            a[n].d.epilogue = "rounded";
            a[n++].meaning = "the kernel likely rounds B x to the storage format before adding a x";
        }
        if (pb->has_steps && strcmp(d->form, "any") != 0) {
            a[n].d = *d;
            a[n].d.form = "any";
            a[n++].meaning = "the kernel likely forms the other Gram matrix than declared";
        }
        if (pb->has_x0 && strcmp(d->upcast, "none") != 0) {
            a[n].d = *d;
            a[n].d.upcast = "none";
            a[n++].meaning = "the kernel likely normalises in the storage format (as X / (X.norm() * 1.02 + 1e-6) on a "
                             "bf16 X in PyTorch)";
        }
        a[n].d = *d;
        a[n].d.accum = "storage";
        a[n++].meaning = NULL;
        a[n].d = a[n - 1].d;
        a[n].d.epilogue = "rounded";
        a[n].d.form = "any";
        a[n].d.reduce = "sequential";
        a[n].d.upcast = "none";
        a[n++].meaning = NULL;
        return n;
    }
    if (pb->op == OP_TRANSPOSE) {
        a[n].d = *d;
        a[n].d.accum = "storage";
        a[n++].meaning = NULL;
        return n;
    }
    if (pb->op == OP_MATMUL) {
        const int wide = rounded && (strcmp(d->accum, "fp32") == 0 || strcmp(d->accum, "fp64") == 0);
        if (wide && strcmp(d->path, "fp32") == 0) {
            a[n].d = *d;
            a[n].d.accum = "tf32";
            a[n++].meaning = "the kernel likely rounds its fp32 inputs to tf32 (tensor cores)";
        }
        if (wide && !d->fp8 && strcmp(d->path, "fp32") != 0) {
            a[n].d = *d;
            a[n].d.accum = "tensor-core";
            a[n++].meaning = "the kernel likely runs on tensor cores (block FMAs that truncate)";
        }
        if (d->fp8 && strcmp(d->accum, "fp8-fast") != 0) {
            a[n].d = *d;
            a[n].d.accum = "fp8-fast";
            a[n++].meaning = "the kernel likely accumulates in the fp8 tensor cores' ~14 bits without promotion to fp32";
        }
        if ((pb->has_bias || d->gelu) && strcmp(d->epilogue, "cublaslt") != 0) {
            a[n].d = *d;
            a[n].d.epilogue = "cublaslt";
            a[n++].meaning = "the kernel likely rounds alpha A B + beta C to the output format before the bias or GELU";
        }
    }
    if (pb->op == OP_ADAMW) {
        if (strcmp(d->order, "any") != 0) {
            a[n].d = *d;
            a[n].d.order = "any";
            a[n++].meaning = "the kernel likely updates in the other order (llm.c's or torch.optim.AdamW's)";
        }
        if (strcmp(d->store, "nearest") == 0) {
            a[n].d = *d;
            a[n].d.store = "stochastic";
            a[n++].meaning = "the kernel likely rounds the new weights stochastically or truncates them";
        }
        a[n].d = *d;
        a[n].d.accum = "storage";
        a[n++].meaning = NULL;
        return n;
    }
    if (is_elementwise(pb->op)) {
        /* no sums: the arithmetic's format and the GELU's function are all there is to loosen */
        if (pb->op == OP_GELU_TANH && strcmp(d->function, "tanh-approx") != 0 && strcmp(d->function, "any") != 0) {
            a[n].d = *d;
            a[n].d.function = "tanh-approx";
            a[n++].meaning = "the kernel's tanh is likely tanh.approx.f32 (fast math)";
        }
        if (is_gelu(pb->op) && strcmp(d->function, "any") != 0) {
            a[n].d = *d;
            a[n].d.function = "any";
            a[n++].meaning = "the kernel likely computes the GELU by another formula than declared";
        }
        a[n].d = *d;
        a[n].d.accum = "storage";
        a[n++].meaning = NULL;
        if (is_gelu(pb->op)) {
            a[n].d = *d;
            a[n].d.accum = "storage";
            a[n].d.function = "any";
            a[n++].meaning = NULL;
        }
        return n;
    }
    a[n].d = *d;
    a[n].d.accum = "storage";
    a[n++].meaning = NULL;
    a[n].d = *d;
    a[n].d.reduce = a[n].d.col_reduce = "sequential";
    if (pb->op == OP_MATMUL && !rounded) a[n].d.accum = "storage"; /* a matrix unit has no order to loosen */
    a[n++].meaning = NULL;
    if (pb->op == OP_RMSNORM) {
        a[n].d = *d;
        a[n].d.upcast = "none";
        a[n++].meaning = NULL;
    }
    if (((pb->op == OP_SOFTMAX && !pb->bwd) || pb->op == OP_LOGSUMEXP) && strcmp(d->exp_form, "fast") != 0) {
        a[n].d = *d;
        a[n].d.exp_form = "fast";
        a[n++].meaning = "the kernel's exponential is likely less accurate than declared (__expf or the like)";
    }
    if (pb->op == OP_LAYERNORM && strcmp(d->variance, "one-pass") != 0) {
        a[n].d = *d;
        a[n].d.variance = "one-pass";
        a[n++].meaning = "the kernel likely computes the variance in one pass (E[x^2] - mean^2)";
    }
    a[n].d = *d;
    a[n].d.accum = "storage";
    a[n].d.reduce = a[n].d.col_reduce = "sequential";
    if (pb->op == OP_RMSNORM) a[n].d.upcast = "none";
    if (pb->op == OP_LAYERNORM) a[n].d.variance = "one-pass";
    if (pb->op == OP_MATMUL && (pb->has_bias || d->gelu)) a[n].d.epilogue = "cublaslt";
    a[n++].meaning = NULL;
    return n;
}

static int same_decl(const decl *a, const decl *b)
{
    return strcmp(a->accum, b->accum) == 0 && strcmp(a->reduce, b->reduce) == 0 &&
           strcmp(a->col_reduce, b->col_reduce) == 0 && strcmp(a->upcast, b->upcast) == 0 &&
           strcmp(a->epilogue, b->epilogue) == 0 && strcmp(a->variance, b->variance) == 0 &&
           strcmp(a->exp_form, b->exp_form) == 0 && strcmp(a->function, b->function) == 0 &&
           strcmp(a->order, b->order) == 0 && strcmp(a->store, b->store) == 0 && strcmp(a->softmax, b->softmax) == 0 &&
           strcmp(a->form, b->form) == 0 && strcmp(a->angle, b->angle) == 0;
}

int ulp_verify(const char *op_name, const ulp_kernel *k, const ulp_tensor *inputs, int n_inputs,
               const ulp_tensor *outputs, int n_outputs, ulp_report *rep, char *err, size_t errlen)
{
    memset(rep, 0, sizeof *rep);
    if (err && errlen) err[0] = '\0';
    const vop *op = NULL;
    for (int i = 0; i < n_ops; i++)
        if (op_name && strcmp(op_name, ops[i].name) == 0) op = &ops[i];
    if (!op) return bad(err, errlen, "unknown op '%s' (ops: %s)", op_name ? op_name : "(none)", ulp_op_names());
    if (!k) return bad(err, errlen, "no kernel declaration");
    const char *pass = k->pass ? k->pass : "fwd";
    int bwd;
    if (strcmp(pass, "fwd") == 0) bwd = 0;
    else if (strcmp(pass, "bwd") == 0) bwd = 1;
    else return bad(err, errlen, "unknown pass '%s' (fwd, bwd)", pass);
    if (!op->pass[bwd].inputs_help) return bad(err, errlen, "%s has no %s pass: %s", op->name, pass, op->why_no_bwd);
    decl d;
    int rc = check_decl(k, op->id, &d, err, errlen);
    if (rc) return rc;
    if (n_inputs < 0 || n_outputs < 0 || (n_inputs && !inputs) || (n_outputs && !outputs))
        return bad(err, errlen, "bad tensor list");
    if (n_outputs == 0) return bad(err, errlen, "no output tensors to verify");
    snprintf(rep->op, sizeof rep->op, "%s", op->name);
    snprintf(rep->pass, sizeof rep->pass, "%s", pass);

    bound_tensor in[VMAX_TENSORS] = {{0}}, out[VMAX_TENSORS] = {{0}};
    problem pb;
    memset(&pb, 0, sizeof pb);
    pb.op = op->id;
    pb.bwd = bwd;
    pb.outputs = op->pass[bwd].outputs;
    pb.in = in;
    pb.out = out;
    rc = bind(op->pass[bwd].inputs, inputs, n_inputs, "input", &d, 0, in, err, errlen);
    if (!rc) rc = bind(op->pass[bwd].outputs, outputs, n_outputs, "output", &d, 1, out, err, errlen);
    if (!rc && op->id == OP_MATMUL) rc = matmul_shapes(&d, &pb, err, errlen);
    if (!rc && op->id == OP_CROSS_ENTROPY) rc = cross_entropy_shapes(&d, &pb, err, errlen);
    if (!rc && op->id == OP_ADAMW) {
        if (!in[0].t && !in[4].t)
            rc = bad(err, errlen, "the weights the step read are missing: give p, or master where the kernel keeps one");
        /* every tensor shaped as g */
        bound_tensor by_g[VMAX_TENSORS] = {in[1], in[0], in[2], in[3], in[4]};
        if (!rc) rc = same_shapes(by_g, out, &pb.N, &pb.C, err, errlen);
        snprintf(pb.shape, sizeof pb.shape, "n=%lld step=%lld", (long long)(pb.N * pb.C), (long long)d.step);
    }
    if (!rc && is_elementwise(op->id)) {
        rc = same_shapes(in, out, &pb.N, &pb.C, err, errlen);
        snprintf(pb.shape, sizeof pb.shape, "n=%lld", (long long)(pb.N * pb.C));
    }
    if (!rc && op->id == OP_LOGSUMEXP) {
        /* x (N.., C) and dx as x; lse and dlse one per row */
        const bound_tensor like_x[VMAX_TENSORS] = {in[0]}, none[VMAX_TENSORS] = {{0}};
        const bound_tensor *per_row[2] = {bwd ? &in[1] : &out[0], bwd ? &in[2] : NULL};
        rc = same_shapes(like_x, bwd ? out : none, &pb.N, &pb.C, err, errlen);
        for (int i = 0; i < 2 && !rc; i++)
            if (per_row[i] && per_row[i]->n != pb.N)
                rc = bad(err, errlen, "%s has %lld elements, x has N = %lld rows", per_row[i]->t->name,
                         (long long)per_row[i]->n, (long long)pb.N);
        snprintf(pb.shape, sizeof pb.shape, "N=%lld C=%lld", (long long)pb.N, (long long)pb.C);
    }
    if (!rc && op->id == OP_ATTENTION) rc = attention_shapes(&pb, err, errlen);
    if (!rc && op->id == OP_ROPE) rc = rope_shapes(&d, &pb, err, errlen);
    if (!rc && op->id == OP_EMBEDDING) rc = embedding_shapes(&pb, err, errlen);
    if (!rc && op->id == OP_TRANSPOSE) rc = transpose_shapes(&pb, err, errlen);
    if (!rc && op->id == OP_POLAR_EXPRESS) rc = pe_shapes(&d, &pb, err, errlen);
    if (!rc && op->id == OP_GRAD_NORM) {
        if (in[0].n < 1) rc = bad(err, errlen, "g has no elements");
        else if (out[0].n != 1) rc = bad(err, errlen, "norm has %lld elements, the norm is one number", (long long)out[0].n);
        snprintf(pb.shape, sizeof pb.shape, "n=%lld", (long long)in[0].n);
    }
    if (!rc && op->id == OP_SOFTMAX) {
        rc = same_shapes(in, out, &pb.N, &pb.C, err, errlen);
        snprintf(pb.shape, sizeof pb.shape, "N=%lld C=%lld", (long long)pb.N, (long long)pb.C);
    }
    if (!rc && op->id == OP_LAYERNORM) {
        rc = layernorm_shapes(in, out, bwd, &pb.N, &pb.C, err, errlen);
        snprintf(pb.shape, sizeof pb.shape, "N=%lld C=%lld%s%s", (long long)pb.N, (long long)pb.C,
                 in[1].t ? "" : " nogain", !bwd && !in[2].t ? " nobias" : "");
        pb.has_stats = bwd && in[3].t && in[4].t;
    }
    if (!rc && op->id == OP_RMSNORM) {
        rc = rmsnorm_shapes(in, out, bwd, &pb.N, &pb.C, err, errlen);
        snprintf(pb.shape, sizeof pb.shape, "N=%lld C=%lld%s", (long long)pb.N, (long long)pb.C, in[1].t ? "" : " nogain");
    }
    if (rc) {
        free_bound(in);
        free_bound(out);
        free(pb.targets);
        memset(rep, 0, sizeof *rep);
        return rc;
    }
    rep->unknown = is_unknown(&d, &pb);
    int verdict;
    if (rep->unknown) {
        decl tight = resolve(&d, &pb, 1), loose = resolve(&d, &pb, 0);
        int vt = 0, vl = 0;
        int t = op_rows(&tight, &pb, rep, &vt);
        int l = t < 0 ? -1 : op_rows(&loose, &pb, rep, &vl);
        if (t < 0 || l < 0) goto oom;
        /* The loosest description is not the loosest at every element (attention's materialised
         * backward rounds P where a two-pass kernel does not, so a two-pass kernel's dq can sit
         * outside it at an element): outputs within the tightest bound everywhere pass too. */
        verdict = l || t;
        char dt[200], dl[200];
        describe(&tight, &pb, dt, sizeof dt);
        describe(&loose, &pb, dl, sizeof dl);
        if (l || !t)
            snprintf(rep->verdict, sizeof rep->verdict, "%s against the loosest bound (%s)%s; the tightest (%s) %s",
                     l ? "PASS" : "FAIL", dl, vl ? ", which is infinite for some outputs (no claim there)" : "", dt,
                     t ? "holds too" : "does not hold");
        else
            snprintf(rep->verdict, sizeof rep->verdict,
                     "PASS against the tightest bound (%s); the loosest (%s) does not hold at every element: its "
                     "replay is not the loosest everywhere",
                     dt, dl);
    } else {
        int vd = 0;
        int r = op_rows(&d, &pb, rep, &vd);
        if (r < 0) goto oom;
        verdict = r;
        char dd[200];
        describe(&d, &pb, dd, sizeof dd);
        snprintf(rep->verdict, sizeof rep->verdict, "%s against the bound of the declared kernel (%s)%s",
                 r ? "PASS" : "FAIL", dd, vd ? ", which is infinite for some outputs (no claim there)" : "");
        if (!r) {
            /* Which looser declaration do the outputs fit?  Tried from the
             * smallest loosening to the largest. */
            attempt tries[MAX_ATTEMPTS];
            int n_tries = looser_declarations(&d, &pb, tries);
            const char *tried =
                op->id == OP_MATMUL          ? "matrix-unit models, storage accumulation, sequential reduction, cuBLASLt's epilogue"
                : is_gelu(op->id)            ? "arithmetic in the storage format, tanh.approx, any GELU formula"
                : is_elementwise(op->id)     ? "arithmetic in the storage format"
                : op->id == OP_ADAMW         ? "either update order, stochastic or truncating stores, arithmetic in the storage format"
                : op->id == OP_LAYERNORM     ? "storage accumulation, sequential reduction, one-pass variance"
                : has_exp_form(op->id)       ? "storage accumulation, sequential reduction, a fast exponential"
                : op->id == OP_CROSS_ENTROPY ? "storage accumulation, sequential reduction"
                : op->id == OP_ATTENTION     ? "materialised softmax, sequential reduction, exp2"
                : op->id == OP_ROPE          ? "arithmetic in the storage format, an fp32 angle"
                : op->id == OP_TRANSPOSE     ? "arithmetic in the storage format"
                : op->id == OP_POLAR_EXPRESS ? "tensor cores, storage accumulation, a rounded epilogue, either form, "
                                               "sequential reduction, no upcast"
                : op->id == OP_GRAD_NORM || op->id == OP_EMBEDDING ? "storage accumulation, sequential reduction"
                                             : "storage accumulation, sequential reduction, no upcast";
            if ((op->id == OP_EMBEDDING && !bwd) || (op->id == OP_TRANSPOSE && !pb.has_y0))
                snprintf(rep->diagnosis, sizeof rep->diagnosis,
                         "%s is exact: any difference is a bug (a wrong index, a dropped or altered element)",
                         op->id == OP_EMBEDDING ? "a gather" : "a copy");
            else
                snprintf(rep->diagnosis, sizeof rep->diagnosis,
                         "no looser declaration with a finite bound (%s) explains the errors: a bug beyond accumulation "
                         "(a dropped term, a truncated output, a wrong formula), or an accumulation too long for its "
                         "format to bound",
                         tried);
            for (int i = 0; i < n_tries; i++) {
                const decl *t = &tries[i].d;
                if (same_decl(t, &d)) continue; /* the declaration itself */
                static ulp_report scratch;
                memset(&scratch, 0, sizeof scratch);
                int vacuous = 0;
                int r2 = op_rows(t, &pb, &scratch, &vacuous);
                if (r2 < 0) goto oom;
                if (!r2 || vacuous) continue; /* an infinite bound fits anything: no evidence */
                char dt[200];
                describe(t, &pb, dt, sizeof dt);
                if (tries[i].meaning) {
                    snprintf(rep->diagnosis, sizeof rep->diagnosis, "the outputs fit %s: %s", dt, tries[i].meaning);
                } else {
                    const char *acc_name = strcmp(t->accum, "storage") == 0 ? prec_format_get(d.storage)->name : t->accum;
                    snprintf(rep->diagnosis, sizeof rep->diagnosis, "the outputs fit %s: the kernel likely %s in %s%s%s%s",
                             dt, is_elementwise(op->id) || op->id == OP_ADAMW || op->id == OP_ROPE || op->id == OP_TRANSPOSE
                                     ? "computes" : "accumulates", acc_name,
                             strcmp(t->reduce, d.reduce) ? ", sequentially" : "",
                             strcmp(t->upcast, d.upcast) ? ", without upcast" : "",
                             strcmp(t->function, d.function) ? ", by another GELU formula than declared" : "");
                }
                break;
            }
        }
    }
    rep->pass_verdict = verdict;
    free_bound(in);
    free_bound(out);
    free(pb.targets);
    return verdict ? ULP_PASS : ULP_FAIL;
oom:
    free_bound(in);
    free_bound(out);
    free(pb.targets);
    memset(rep, 0, sizeof *rep);
    return bad(err, errlen, "out of memory");
}

void ulp_report_print(FILE *fp, const ulp_report *rep)
{
    const int op_width = strlen(rep->op) > 8 ? (int)strlen(rep->op) : 8; /* cross_entropy */
    fprintf(fp, "%-*s %-4s %-7s %-22s %9s %9s %9s %9s %9s %7s  %s\n", op_width, "op", "pass", "output", "shape", "n",
            "max_err_u", "rms_err_u", "bound_u", "rms_bnd_u", "ratio", "verdict");
    const char *last = "";
    for (int i = 0; i < rep->n_rows; i++) {
        const ulp_row *r = &rep->rows[i];
        if (strcmp(r->assumption, last) != 0) {
            fprintf(fp, "bound: %s%s\n", r->assumption,
                    rep->unknown ? (i == 0 ? "  (tightest)" : "  (loosest)") : "");
            last = r->assumption;
        }
        fprintf(fp, "%-*s %-4s %-7s %-22s %9lld %9.3g %9.3g %9.3g %9.3g %7.3g  %s%s\n", op_width, rep->op, rep->pass,
                r->output, r->shape, (long long)r->n, r->max_err_u, r->rms_err_u, r->max_bound_u, r->rms_bound_u,
                r->worst_ratio, r->pass ? "PASS" : "FAIL", r->vacuous ? " (no finite bound)" : "");
        if (!r->pass) {
            fprintf(fp, "    worst [%lld]: %s", (long long)r->worst_index, r->worst_detail);
            if (r->nonfinite) fprintf(fp, " (%lld non-finite outputs)", (long long)r->nonfinite);
            if (r->rms_err_u > r->rms_bound_u) fprintf(fp, " (RMS over its bound)");
            fputc('\n', fp);
        }
    }
    fprintf(fp, "verify: %s\n", rep->verdict);
    if (rep->diagnosis[0]) fprintf(fp, "verify: %s\n", rep->diagnosis);
}
