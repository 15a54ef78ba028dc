/* tests/test_train_qkv.c — attn.qkv.dgrad rounds its result once.
 *
 * dx = dq Wq + dk Wk + dv Wv is one dot product of length 3C; the trainer
 * runs it as one GEMM over the joined [dq | dk | dv] (tmodel_qkv_dgrad).
 *  1. concat_columns joins column blocks exactly (mixed formats into fp32,
 *     replicas), and refuses an output format that would round a part;
 *  2. on data built to cancel (dk = -dq, Wk = Wq, dv small) the result is
 *     within the bound of one GEMM over K = 3C rounded once, against the
 *     exact (MPFR) sum; twin: the former three GEMMs, the second and third
 *     accumulating into dx, are far over it (CPU; the same on the GPU with
 *     the tensor-core bound, where cuBLASLt's epilogue rounds twice more);
 *  3. in a training step of a tiny model (gpt2, modern, mixed formats,
 *     split_k, matmul_mma), every layer's dx is bit for bit the once-rounded
 *     sum over the joined operands the step recorded; twin: the three-GEMM
 *     rounding of the same operands differs somewhere. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "kernels/matmul.h"
#include "precision/bounds.h"
#include "precision/mma.h"
#include "precision/rng.h"
#include "reference/matmul.h"
#include "tests/test_util.h"
#include "trainer/backend.h"
#include "trainer/model.h"

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) fail_msg("out of memory");
    return p;
}

static void alloc_up(tbackend *be, ktensor *t, prec_format f, int64_t rows, int64_t cols, const double *values)
{
    const int64_t shape[2] = {rows, cols};
    if (be->alloc(be, t, f, 2, shape) || (values && be->upload(be, t, values)))
        fail_msg("%s: %s", be->name, tbackend_error(be));
}

static double *down(tbackend *be, const ktensor *t, int64_t n)
{
    double *v = xmalloc((size_t)n * sizeof *v);
    if (be->download(be, t, v)) fail_msg("%s: %s", be->name, tbackend_error(be));
    return v;
}

/* ---- 1. concat_columns ------------------------------------------------------------------ */

/* Parts bf16 [M,5], fp16 [M,3], bf16 [M,7] joined into fp32 [M,15], on
 * backend be (replicated when R > 1: each replica its own values). */
static void check_concat(tbackend *be, unsigned long long seed)
{
    enum { M = 37, N_PARTS = 3 };
    const int64_t widths[N_PARTS] = {5, 3, 7}, W = 15;
    const prec_format formats[N_PARTS] = {PREC_BF16, PREC_FP16, PREC_BF16};
    const int R = be->replicas;
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    ktensor parts[N_PARTS], y;
    const ktensor *ptrs[N_PARTS];
    double *vals[N_PARTS];
    for (int i = 0; i < N_PARTS; i++) {
        const int64_t n = (int64_t)R * M * widths[i];
        vals[i] = xmalloc((size_t)n * sizeof(double));
        for (int64_t j = 0; j < n; j++) vals[i][j] = prec_rne(prec_rng_normal(&rng) * 100, formats[i]);
        alloc_up(be, &parts[i], formats[i], M, widths[i], vals[i]);
        ptrs[i] = &parts[i];
    }
    alloc_up(be, &y, PREC_FP32, M, W, NULL);
    if (be->concat_columns(be, &y, ptrs, N_PARTS)) fail_msg("%s: %s", be->name, tbackend_error(be));
    double *got = down(be, &y, (int64_t)R * M * W);
    long bad = 0;
    for (int r = 0; r < R; r++)
        for (int64_t m = 0; m < M; m++) {
            int64_t col = 0;
            for (int i = 0; i < N_PARTS; i++)
                for (int64_t c = 0; c < widths[i]; c++, col++) {
                    double want = vals[i][((int64_t)r * M + m) * widths[i] + c];
                    bad += memcmp(&got[((int64_t)r * M + m) * W + col], &want, sizeof want) != 0;
                }
        }
    print_message("%s, %d replica%s: %ld of %lld joined elements differ from their part\n", be->name, R,
                  R > 1 ? "s" : "", bad, (long long)R * M * W);
    assert_int_equal(bad, 0);

    /* refusals: an output that would round a part, widths that do not add up */
    ktensor narrow, wide;
    alloc_up(be, &narrow, PREC_BF16, M, W, NULL);
    alloc_up(be, &wide, PREC_FP32, M, W + 1, NULL);
    assert_int_equal(be->concat_columns(be, &narrow, ptrs, N_PARTS), -1);
    print_message("refused: %s\n", tbackend_error(be));
    assert_non_null(strstr(tbackend_error(be), "part 1 is fp16, which a bf16 output cannot hold exactly"));
    assert_int_equal(be->concat_columns(be, &wide, ptrs, N_PARTS), -1);
    assert_non_null(strstr(tbackend_error(be), "15 columns wide together, the output 16"));
    be->release(be, &narrow);
    be->release(be, &wide);
    be->release(be, &y);
    for (int i = 0; i < N_PARTS; i++) {
        be->release(be, &parts[i]);
        free(vals[i]);
    }
    free(got);
}

static void test_concat_columns(void **state)
{
    (void)state;
    const unsigned long long seed = test_seed("concat_columns cpu");
    for (int R = 1; R <= 3; R += 2) {
        tbackend *be = tbackend_cpu_create();
        assert_non_null(be);
        if (tbackend_set_replicas(be, R)) fail_msg("%s", tbackend_error(be));
        check_concat(be, seed + (unsigned)R);
        be->destroy(be);
    }
}

static void test_concat_columns_cuda(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    const unsigned long long seed = test_seed("concat_columns cuda");
    /* R = 3: the batched form folds the replicas' rows into one call */
    for (int R = 1; R <= 3; R += 2) {
        char why[256];
        tbackend *be = tbackend_cuda_create(why, sizeof why);
        if (!be) fail_msg("cuda backend: %s", why);
        if (tbackend_set_replicas(be, R)) fail_msg("%s", tbackend_error(be));
        check_concat(be, seed + (unsigned)R);
        be->destroy(be);
    }
}

/* ---- 2. cancelling data against the exact sum ---------------------------------------------- */

enum { CM = 48, CC = 32, CK = 3 * CC }; /* rows BT, width C, joined K */

/* The former arithmetic, the twin: three GEMMs into dx, the 2nd and 3rd accumulating. */
static int three_gemms(tbackend *be, const tsite *at, ktensor *dx, const ktensor *const *d, const ktensor *w)
{
    for (int i = 0; i < 3; i++) {
        ktensor wi = *w;
        wi.data = (char *)w->data + (size_t)(i * CC * CC) * be->elem_bytes(w->format);
        wi.shape[0] = CC;
        if (be->matmul(be, at, dx, d[i], 0, &wi, 0, i > 0)) return -1;
    }
    return 0;
}

typedef struct {
    long over;        /* elements over their bound */
    double ratio;     /* the largest error / bound */
} judged;

/* dx against the exact joined sum: bound G P + u (|S| + G P) + half y's
 * smallest subnormal per element (operands already in the path's format),
 * G = gamma_K(2^-24) for the CPU's fp32 sum, gamma_{K + 2 ceil(K/4)}(2^-23)
 * for the tensor cores (trace_verdict.c's accumulation models). */
static judged judge(const double *a, const double *b, const double *y, prec_format yf, int tensor_cores)
{
    double *S = xmalloc(CM * CC * sizeof *S);
    ref_ctx ctx = REF_CTX_DEFAULT;
    ref_matmul(&ctx, CM, CC, CK, a, CK, 1, b, CC, 1, S, CC);
    const double G = tensor_cores ? prec_gamma(CK + 2 * ((CK + 3) / 4), 0x1p-23) : prec_gamma(CK, 0x1p-24);
    const prec_format_info *fi = prec_format_get(yf);
    judged j = {0, 0};
    for (long m = 0; m < CM; m++)
        for (long n = 0; n < CC; n++) {
            double P = 0;
            for (long k = 0; k < CK; k++) P += fabs(a[m * CK + k] * b[k * CC + n]);
            double e = G * P * (1 + 0x1p-50);
            e += fi->unit_roundoff * (fabs(S[m * CC + n]) + e) + fi->min_subnormal / 2;
            double err = fabs(y[m * CC + n] - S[m * CC + n]);
            if (!(err <= e)) j.over++;
            if (!(err / e <= j.ratio)) j.ratio = err / e;
        }
    free(S);
    assert_int_equal(ctx.unproven, 0);
    return j;
}

/* Runs the trainer's qkv dgrad (or the twin) on cancelling data on be at
 * site attn.qkv.dgrad of plan `preset`; returns the judgement. */
static judged cancelling_run(tbackend *be, const char *preset, unsigned long long seed, int twin)
{
    char err[512];
    tplan plan;
    if (tplan_init(&plan, preset, TMODEL_GPT2, err, sizeof err)) fail_msg("%s", err);
    if (tbackend_bind_plan(be, &plan, 1)) fail_msg("%s: %s", be->name, tbackend_error(be));
    const tsite *at = tbackend_site(be, TSLOT_ATTN_QKV_DGRAD, 0);
    const prec_format f = tpath_storage(at->path);
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    /* joined a [CM, 3C] = [dq | -dq' | dv / 256], b [3C, C] = [Wq; Wq; Wv], dq'
     * dq moved by 1 to 3 of its ulps: the q and k terms nearly cancel, leaving
     * (dq - dq') Wq + dv Wv, about 2^-8 of each; dq and Wq positive, so that each
     * third is as large as its terms allow.  Not an exact cancellation: with
     * dq' = dq, the rounding of the q term would cancel against the same
     * rounding of the k term in an accumulation that rounds the product before
     * adding (cuBLASLt's), hiding the twin's extra roundings. */
    const double u = prec_format_get(f)->unit_roundoff;
    double *a = xmalloc(CM * CK * sizeof *a), *b = xmalloc(CK * CC * sizeof *b);
    double *part[3];
    for (int i = 0; i < 3; i++) part[i] = xmalloc(CM * CC * sizeof(double));
    for (long m = 0; m < CM; m++)
        for (long c = 0; c < CC; c++) {
            double q = prec_rne(0.5 + fabs(prec_rng_normal(&rng)), f), v = prec_rne(ldexp(prec_rng_normal(&rng), -8), f);
            part[0][m * CC + c] = a[m * CK + c] = q;
            const int j = 1 + (int)(prec_rng_next(&rng) % 3);
            const double q_moved = prec_rne(q * (1 + (prec_rng_next(&rng) & 1 ? 2 : -2) * u * j), f);
            part[1][m * CC + c] = a[m * CK + CC + c] = -q_moved;
            part[2][m * CC + c] = a[m * CK + 2 * CC + c] = v;
        }
    for (long r = 0; r < CC; r++)
        for (long n = 0; n < CC; n++) {
            double wq = prec_rne((0.5 + fabs(prec_rng_normal(&rng))) / 4, f), wv = prec_rne(prec_rng_normal(&rng) / 4, f);
            b[r * CC + n] = b[(CC + r) * CC + n] = wq;
            b[(2 * CC + r) * CC + n] = wv;
        }
    ktensor d[3], w, dx, joined;
    const ktensor *dp[3] = {&d[0], &d[1], &d[2]};
    for (int i = 0; i < 3; i++) alloc_up(be, &d[i], f, CM, CC, part[i]);
    alloc_up(be, &w, f, CK, CC, b);
    alloc_up(be, &dx, f, CM, CC, NULL);
    alloc_up(be, &joined, f, CM, CK, NULL);
    int rc = twin ? three_gemms(be, at, &dx, dp, &w) : tmodel_qkv_dgrad(be, at, &dx, &joined, dp[0], dp[1], dp[2], &w);
    if (rc) fail_msg("%s: %s", be->name, tbackend_error(be));
    double *y = down(be, &dx, CM * CC);
    judged j = judge(a, b, y, f, strcmp(be->name, "cuda") == 0);
    print_message("%s %s%s: %ld of %d outputs over the once-rounded K = %d bound, worst %.3g of it\n", be->name,
                  preset, twin ? " (twin: three GEMMs accumulating)" : "", j.over, CM * CC, CK, j.ratio);
    for (int i = 0; i < 3; i++) be->release(be, &d[i]), free(part[i]);
    be->release(be, &w), be->release(be, &dx), be->release(be, &joined);
    free(a), free(b), free(y);
    return j;
}

static void cancelling(tbackend *be, unsigned long long seed)
{
    static const char *const presets[] = {"bf16", "fp16"};
    for (int p = 0; p < 2; p++) {
        judged once = cancelling_run(be, presets[p], seed + (unsigned)p, 0);
        judged twin = cancelling_run(be, presets[p], seed + (unsigned)p, 1);
        if (once.over) fail_msg("%s %s: the joined GEMM is over its bound", be->name, presets[p]);
        /* the q and k rounding errors alone are about 2^-8 / u_fp32 = 2^16 times
         * what the bound allows for them: nearly every output is over */
        if (twin.over < CM * CC / 2 || twin.ratio < 10)
            fail_msg("%s %s: the three-GEMM twin is within the bound (%ld over, worst %.3g): the check cannot fail",
                     be->name, presets[p], twin.over, twin.ratio);
    }
}

static void test_cancelling_rounds_once(void **state)
{
    (void)state;
    const unsigned long long seed = test_seed("qkv dgrad cancelling cpu");
    tbackend *be = tbackend_cpu_create();
    assert_non_null(be);
    cancelling(be, seed);
    be->destroy(be);
}

static void test_cancelling_rounds_once_cuda(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    const unsigned long long seed = test_seed("qkv dgrad cancelling cuda");
    char why[256];
    tbackend *be = tbackend_cuda_create(why, sizeof why);
    if (!be) fail_msg("cuda backend: %s", why);
    cancelling(be, seed);
    be->destroy(be);
}

/* ---- 3. a training step: dx is the once-rounded joined sum, bit for bit ---------------------- */

/* One output of the GEMM at `at` (CPU backend order) over k in [k0, k1) of
 * the operand rows ar, bc (values of the operand formats), unrounded: fp32
 * sequential, in split_k's slices of the full K, or the matrix-unit model's
 * chain of blocks. */
static float partial(const tsite *at, const double *ar, const double *bc, long k0, long k1, long K)
{
    if (at->op == TOP_MATMUL_MMA) {
        const char *fallback;
        char why[256];
        const mma_model *model = tplan_mma_model(at->slot, at->path, at->variant, &fallback, why, sizeof why);
        if (!model) fail_msg("%s", why);
        return (float)mma_dot_values(&model->arith, (int)(k1 - k0), ar + k0, bc + k0, 0.0);
    }
    const int slices = at->variant == KMATMUL_SPLIT_K ? KMATMUL_SPLIT_K_SLICES : 1;
    const long slice = (K + slices - 1) / slices;
    float acc = 0.0f;
    for (long s0 = k0; s0 < k1; s0 = (s0 / slice + 1) * slice) {
        float part = 0.0f;
        for (long k = s0; k < k1 && k < (s0 / slice + 1) * slice; k++) part += (float)ar[k] * (float)bc[k];
        acc += part;
    }
    return acc;
}

typedef struct {
    tmodel *m;
    tbackend *be;
    int gpt2, C, BT;
    double *d[3];             /* dq, dk, dv of the layer in progress [BT*C] */
    long outputs, mismatches, twin_mismatches;
    int layers;
} capture;

static void take(capture *c, int i, const ktensor *t)
{
    free(c->d[i]);
    c->d[i] = down(c->be, t, (int64_t)c->BT * c->C);
}

/* The layer's dx against the once-rounded joined sum of what was recorded. */
static void check_layer(capture *c, int layer, const ktensor *dx)
{
    tbackend *be = c->be;
    const long C = c->C, BT = c->BT, K = 3 * C;
    const tsite *at = tbackend_site(be, TSLOT_ATTN_QKV_DGRAD, layer);
    char name[32];
    snprintf(name, sizeof name, "h%d.attn.qkv.w", layer);
    const tparam *w = NULL;
    for (int i = 0; i < tmodel_n_params(c->m); i++)
        if (strcmp(tmodel_param(c->m, i)->name, name) == 0) w = tmodel_param(c->m, i);
    assert_non_null(w);
    double *wv = down(be, &w->w, K * C), *got = down(be, dx, BT * C);
    prec_format fa = tpath_operand(at->path, 1), fb = tpath_operand(at->path, 0);
    if (at->op == TOP_MATMUL_MMA) {
        const char *fallback;
        char why[256];
        fa = fb = tplan_mma_model(at->slot, at->path, at->variant, &fallback, why, sizeof why)->arith.in;
    }
    double *ar = xmalloc((size_t)K * sizeof *ar), *bc = xmalloc((size_t)K * sizeof *bc);
    for (long m = 0; m < BT; m++) {
        for (long k = 0; k < K; k++) ar[k] = prec_rne(c->d[k / C][m * C + k % C], fa);
        for (long n = 0; n < C; n++) {
            for (long k = 0; k < K; k++) bc[k] = prec_rne(wv[k * C + n], fb);
            double once = prec_rne(partial(at, ar, bc, 0, K, K), dx->format);
            /* twin: each third rounded into dx, added to what dx held (fp32 add) */
            double three = 0;
            for (int i = 0; i < 3; i++) {
                float pi = at->op == TOP_MATMUL_MMA || at->variant == KMATMUL_SPLIT_K
                               ? partial(at, ar + i * C, bc + i * C, 0, C, C)
                               : partial(at, ar, bc, i * C, (i + 1) * C, K);
                three = prec_rne(i ? (double)(pi + (float)three) : (double)pi, dx->format);
            }
            c->mismatches += memcmp(&got[m * C + n], &once, sizeof once) != 0;
            c->twin_mismatches += memcmp(&three, &once, sizeof once) != 0;
            c->outputs++;
        }
    }
    c->layers++;
    free(wv), free(got), free(ar), free(bc);
}

static int observe(void *ctx, tslot slot, int layer, const char *tensor, const ktensor *t)
{
    capture *c = ctx;
    const int grad_of_qk = strcmp(tensor, "dq") == 0 ? 0 : strcmp(tensor, "dk") == 0 ? 1 : -1;
    /* gpt2 multiplies the attention's dq, dk; modern the QK-norm's (dv: the attention's) */
    if (slot == TSLOT_ATTENTION && strcmp(tensor, "dv") == 0) take(c, 2, t);
    if (grad_of_qk >= 0 && slot == (c->gpt2 ? TSLOT_ATTENTION : TSLOT_NORM_QK)) take(c, grad_of_qk, t);
    if (slot == TSLOT_ATTN_QKV_DGRAD && strcmp(tensor, "dx") == 0) check_layer(c, layer, t);
    return 0;
}

/* One forward and backward of a 2-layer model of width 32 on random tokens
 * under `preset` + `set`; every layer checked. */
static void step_checks(tmodel_kind kind, const char *preset, const char *set, unsigned long long seed)
{
    enum { B = 2, T = 16, C = 32, V = 256 };
    char err[1024];
    tmodel_config cfg;
    tplan plan;
    if (tmodel_config_init(&cfg, kind, 2, C, 2, V, T, err, sizeof err) ||
        tplan_init(&plan, preset, kind, err, sizeof err) || (set && tplan_set(&plan, set, err, sizeof err)))
        fail_msg("%s", err);
    tbackend *be = tbackend_cpu_create();
    assert_non_null(be);
    const uint64_t seeds[1] = {seed};
    tmodel *m = tmodel_create(&cfg, be, &plan, B, T, seeds, err, sizeof err);
    if (!m) fail_msg("%s", err);
    prec_rng rng;
    prec_rng_seed(&rng, seed ^ 0x9e37);
    /* modern starts its output projections at zero, which would zero dq, dk, dv */
    for (int i = 0; i < tmodel_n_params(m); i++) {
        tparam *p = tmodel_param(m, i);
        if (!strstr(p->name, "attn.out.w")) continue;
        const int64_t n = ktensor_numel(&p->w);
        double *v = xmalloc((size_t)n * sizeof *v);
        for (int64_t j = 0; j < n; j++) v[j] = 0.05 * prec_rng_normal(&rng);
        if (be->upload(be, &p->w, v)) fail_msg("%s", tbackend_error(be));
        free(v);
    }
    int32_t tokens[B * T], targets[B * T];
    for (int i = 0; i < B * T; i++) {
        tokens[i] = (int32_t)(prec_rng_uniform(&rng) * V) % V;
        targets[i] = (int32_t)(prec_rng_uniform(&rng) * V) % V;
    }
    capture cap = {m, be, kind == TMODEL_GPT2, C, B * T, {NULL, NULL, NULL}, 0, 0, 0, 0};
    tmodel_set_observer(m, observe, &cap);
    const double dloss = 1.0 / (B * T);
    double loss;
    if (tmodel_step_micro(m, tokens, targets, &dloss, &loss)) fail_msg("%s", tbackend_error(be));
    print_message("%s %s%s%s: %d layers, %ld dx outputs, %ld differ from the once-rounded joined sum; the three-GEMM "
                  "rounding would differ on %ld\n",
                  tmodel_kind_name(kind), preset, set ? " + " : "", set ? set : "", cap.layers, cap.outputs,
                  cap.mismatches, cap.twin_mismatches);
    assert_int_equal(cap.layers, 2);
    assert_int_equal(cap.mismatches, 0);
    if (!cap.twin_mismatches) fail_msg("the three-GEMM rounding agreed everywhere: the check cannot tell them apart");
    for (int i = 0; i < 3; i++) free(cap.d[i]);
    tmodel_destroy(m);
    be->destroy(be);
}

static void test_step_rounds_once(void **state)
{
    (void)state;
    const unsigned long long seed = test_seed("qkv dgrad in a step");
    step_checks(TMODEL_GPT2, "bf16", NULL, seed);
    step_checks(TMODEL_GPT2, "fp16", NULL, seed + 1);
    /* per-layer formats: layer 1's dq, dk, dv in fp16 under a bf16 dgrad, layer 0 split_k */
    step_checks(TMODEL_GPT2, "bf16", "attention@1=fp16,attn.qkv.dgrad@0=bf16:split_k", seed + 2);
    step_checks(TMODEL_GPT2, "bf16", "attn.qkv.dgrad=bf16:mma.h100", seed + 3);
    step_checks(TMODEL_MODERN, "bf16", NULL, seed + 4);
    /* QK-norm's dq, dk in fp32 beside the attention's bf16 dv: joined in fp32 */
    step_checks(TMODEL_MODERN, "bf16", "norm.qk=fp32", seed + 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concat_columns),        cmocka_unit_test(test_cancelling_rounds_once),
        cmocka_unit_test(test_step_rounds_once),      cmocka_unit_test(test_concat_columns_cuda),
        cmocka_unit_test(test_cancelling_rounds_once_cuda),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
