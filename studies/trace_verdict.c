/* studies/trace_verdict.c — is a replayed matmul within its bound?
 *
 * Reference: reference/matmul.h, the exact dot product of the inputs as
 * stored, correctly rounded to double.  Bound per output element, from the
 * inputs (P = sum_k |a_k b_k|), as kernels/check/check_matmul.c states the
 * accumulation models:
 *   operands: when a tensor's stored format is wider than the path's operand
 *     format the kernel rounds it first (tf32: truncated to 11 bits), a
 *     relative error u_op per operand, (1 + u_a)(1 + u_b) - 1 per product;
 *   accumulation: the CPU backend and SIMT fp32 sum in fp32 with round to
 *     nearest (in any order, split_k included): gamma_K(2^-24); tensor cores
 *     (CUDA, bf16/fp16/tf32) align and truncate per block of 4:
 *     gamma_{K + 2 ceil(K/4)}(2^-23);
 *     matmul_mma (a generation's modelled units, CUDA emulation or CPU): the
 *     same form with the model's block L and fraction bits F:
 *     gamma_{K + 2 ceil(K/L)}(2^(2-F));
 *   accumulate (y += ...): one fp32 addition, u32 (|ref| + e); cuBLASLt's
 *     fused epilogue (CUDA, plain and fast matmuls into a 16-bit y) may also
 *     round the product into y's format before adding y's old value: u_out
 *     (|S| + G P), the allowance check_matmul makes after measuring it (its
 *     "Epilogue models"; on the H100 the trainer's former accumulating qkv
 *     dgrad GEMMs rounded every element so, traced against the H100's own
 *     model).  The trainer's accumulating GEMMs are now its weight gradients
 *     (dW += ...): attn.qkv.dgrad is one GEMM over K = 3C, judged as any
 *     other non-accumulating GEMM;
 *   output: rounding to nearest into y's format, u_out (|ref| + e), plus half
 *     its smallest subnormal.
 * fp8 paths (scaled operands) get no verdict.  A large GEMM is judged on at
 * most TRACE_JUDGE_ROWS rows: those holding differences first.
 *
 * Verdict: both replays within their bounds everywhere is a legitimate
 * reordering (chaos); one over is a precision bug in it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/check/check_attention_mma.h"
#include "kernels/check/compare_attention.h"
#include "kernels/check/compare_polar_express.h"
#include "kernels/common/ktensor_io.h"
#include "kernels/polar_express.h"
#include "precision/bounds.h"
#include "precision/format.h"
#include "reference/matmul.h"
#include "studies/trace_tap.h"

static double operand_unit(prec_format stored, prec_format operand)
{
    if (operand == PREC_TF32) return stored == PREC_TF32 ? 0 : 0x1p-10;
    const prec_format_info *s = prec_format_get(stored), *o = prec_format_get(operand);
    return s->precision > o->precision ? o->unit_roundoff : 0;
}

void trace_judge_matmul(trace_report *r, const char *backend, const tsite *site_a, const tsite *site_b,
                        const tap_call *c, const prec_format y_format[2], const double *a, const double *b,
                        const double *y_in, const double *ya, const double *yb, trace_bug bug)
{
    const ktensor *Y = c->t[0], *A = c->t[1], *B = c->t[2];
    const long M = (long)Y->shape[0], N = (long)Y->shape[1], K = (long)(c->a_trans ? A->shape[0] : A->shape[1]);
    const long a_rs = c->a_trans ? 1 : K, a_cs = c->a_trans ? M : 1;
    const long b_rs = c->b_trans ? 1 : N, b_cs = c->b_trans ? K : 1;
    const tsite *sites[2] = {site_a, site_b};
    double G[2];
    int epilogue_rounds[2] = {0, 0};
    char models[2][64];
    for (int k = 0; k < 2; k++) {
        const tsite *at = sites[k];
        if (at->path == KPATH_FP8 || at->op == TOP_MATMUL_BLOCK_FP8) {
            snprintf(r->verdict_note, sizeof r->verdict_note, "no verdict for fp8 GEMMs (scaled operands)");
            return;
        }
        prec_format op = at->op == TOP_MATMUL_FAST ? PREC_TF32 : tpath_operand(at->path, tslot_is_gradient_gemm(c->slot));
        double ua = operand_unit(A->format, op), ub = operand_unit(B->format, op);
        double uprod = (1 + ua) * (1 + ub) - 1;
        int cuda = strcmp(backend, "cuda") == 0;
        double g;
        if (at->op == TOP_MATMUL_MMA) {
            const char *fallback;
            char why[256];
            const mma_model *m = tplan_mma_model(c->slot, at->path, at->variant, &fallback, why, sizeof why);
            if (!m) {
                snprintf(r->verdict_note, sizeof r->verdict_note, "no verdict: %.200s", why);
                return;
            }
            const long L = m->arith.block;
            g = prec_gamma((double)(K + 2 * ((K + L - 1) / L)), ldexp(1.0, 2 - m->arith.frac_bits));
            snprintf(models[k], sizeof models[k], "%s model", m->gen);
        } else {
            int tensor_cores = cuda && !(at->path == KPATH_FP32 && at->op == TOP_MATMUL);
            g = tensor_cores ? prec_gamma((double)(K + 2 * ((K + 3) / 4)), 0x1p-23) : prec_gamma((double)K, 0x1p-24);
            epilogue_rounds[k] = cuda && y_format[k] != PREC_FP32;
            snprintf(models[k], sizeof models[k], "%s%s", !cuda ? "fp32 (CPU)" : tensor_cores ? "tensor-core" : "SIMT fp32",
                     epilogue_rounds[k] && y_in ? " + cuBLASLt epilogue" : "");
        }
        G[k] = (1 + uprod) * (1 + g) - 1;
    }
    snprintf(r->verdict_note, sizeof r->verdict_note, "matmul bound: A %s, B %s accumulation models, K = %ld", models[0],
             models[1], K);
    /* rows to judge: those with differences first */
    long *rows = malloc((size_t)(M < TRACE_JUDGE_ROWS ? M : TRACE_JUDGE_ROWS) * sizeof *rows + sizeof *rows);
    double *S = malloc((size_t)N * sizeof *S + 1);
    char *taken = calloc((size_t)M + 1, 1);
    if (!rows || !S || !taken) {
        free(rows), free(S), free(taken);
        snprintf(r->verdict_note, sizeof r->verdict_note, "no verdict: out of memory");
        return;
    }
    long n_rows = 0;
    for (long m = 0; m < M && n_rows < TRACE_JUDGE_ROWS; m++)
        for (long n = 0; n < N; n++)
            if (memcmp(&ya[m * N + n], &yb[m * N + n], sizeof(double)) != 0) {
                rows[n_rows++] = m;
                taken[m] = 1;
                break;
            }
    for (long m = 0; m < M && n_rows < TRACE_JUDGE_ROWS; m++)
        if (!taken[m]) rows[n_rows++] = m;
    double sum_err[2] = {0, 0};
    trace_judgement *J = r->judge;
    memset(J, 0, 2 * sizeof *J);
    J[0].ratio = J[1].ratio = 0;
    ref_ctx ctx = REF_CTX_DEFAULT;
    for (long i = 0; i < n_rows; i++) {
        long m = rows[i];
        ref_matmul(&ctx, 1, N, K, a + m * a_rs, a_rs, a_cs, b, b_rs, b_cs, S, N);
        for (long n = 0; n < N; n++) {
            double P = 0;
            for (long k = 0; k < K; k++) P += fabs(a[m * a_rs + k * a_cs] * b[k * b_rs + n * b_cs]);
            P *= 1 + 0x1p-50; /* P itself summed in double */
            double ref = S[n] + (y_in ? y_in[m * N + n] : 0);
            for (int k = 0; k < 2; k++) {
                const prec_format_info *fo = prec_format_get(y_format[k]);
                const double u = fo->unit_roundoff;
                double e = G[k] * P + (double)K * 0x1p-150;
                if (y_in && epilogue_rounds[k]) e += u * (fabs(S[n]) + e);
                if (y_in) e += 0x1p-24 * (fabs(ref) + e) + 0x1p-52 * fabs(ref);
                if (y_format[k] != PREC_FP32) e += u * (fabs(ref) + e) + fo->min_subnormal / 2;
                double got = (k ? yb : ya)[m * N + n];
                double err = fabs(got - ref);
                if (!(err == err)) err = INFINITY;
                sum_err[k] += err;
                double ratio = e > 0 ? err / e : (err > 0 ? INFINITY : 0);
                if (ratio > 1) J[k].over++;
                if (ratio > J[k].ratio || (i == 0 && n == 0)) {
                    J[k].ratio = ratio;
                    J[k].worst = m * N + n;
                    double scale = u * (fabs(ref) > 0 ? fabs(ref) : fo->min_subnormal);
                    J[k].err_u = err / scale;
                    J[k].bound_u = e / scale;
                }
            }
        }
    }
    free(rows), free(S), free(taken);
    if (bug == TRACE_BUG_IGNORE_BOUND) {
        /* twin: whichever replay is further from the reference in total is "the bug" */
        r->verdict = sum_err[0] > sum_err[1] ? TRACE_VERDICT_BUG_A
                     : sum_err[1] > sum_err[0] ? TRACE_VERDICT_BUG_B
                                               : TRACE_VERDICT_CHAOS;
        return;
    }
    int over_a = J[0].over > 0, over_b = J[1].over > 0;
    r->verdict = over_a && over_b ? TRACE_VERDICT_BUG_BOTH
                 : over_a         ? TRACE_VERDICT_BUG_A
                 : over_b         ? TRACE_VERDICT_BUG_B
                                  : TRACE_VERDICT_CHAOS;
    if (ctx.unproven)
        snprintf(r->verdict_note + strlen(r->verdict_note), sizeof r->verdict_note - strlen(r->verdict_note),
                 "; %ld reference outputs unproven", ctx.unproven);
}

/* ---- the other ops: the comparisons `ulpscope check` shares (kernels/check/compare_*.h) ---- */

/* How far a row is over its bound: the worst element's ratio, or the RMS
 * error's over the RMS bound when larger (check's verdict needs both within);
 * a non-finite output where the reference is finite is infinitely over. */
static double row_ratio(const kcheck_row *row)
{
    double ratio = row->worst_ratio;
    if (row->rms_bound_u > 0 && row->rms_err_u / row->rms_bound_u > ratio) ratio = row->rms_err_u / row->rms_bound_u;
    if (row->nonfinite > 0 || !(ratio == ratio)) ratio = INFINITY;
    return ratio;
}

void trace_judge_start(trace_report *r)
{
    memset(r->judge, 0, sizeof r->judge);
    r->judge_err_sum[0] = r->judge_err_sum[1] = 0;
}

void trace_judge_row(trace_report *r, int side, const kcheck_row *row, const char *where)
{
    trace_judgement *J = &r->judge[side];
    double ratio = row_ratio(row);
    if (ratio > 1) J->over++;
    r->judge_err_sum[side] += row->rms_err_u;
    if (ratio > J->ratio || !J->worst_output[0]) {
        J->ratio = ratio;
        J->err_u = row->max_err_u;
        J->bound_u = row->max_bound_u;
        J->worst = (long)row->worst_index;
        snprintf(J->worst_output, sizeof J->worst_output, "%s%s%s", row->output, where && where[0] ? " " : "",
                 where ? where : "");
    }
}

void trace_judge_finish(trace_report *r, trace_bug bug)
{
    if (bug == TRACE_BUG_IGNORE_BOUND) {
        /* twin: whichever replay is further from the reference in total is "the bug" */
        const double *s = r->judge_err_sum;
        r->verdict = s[0] > s[1] ? TRACE_VERDICT_BUG_A : s[1] > s[0] ? TRACE_VERDICT_BUG_B : TRACE_VERDICT_CHAOS;
        return;
    }
    int over_a = r->judge[0].over > 0, over_b = r->judge[1].over > 0;
    r->verdict = over_a && over_b ? TRACE_VERDICT_BUG_BOTH
                 : over_a         ? TRACE_VERDICT_BUG_A
                 : over_b         ? TRACE_VERDICT_BUG_B
                                  : TRACE_VERDICT_CHAOS;
}

/* ---- optimizer.muon: its polar express, stage by stage ---- */

/* Largest matrix whose stages are judged: the MPFR step costs about
 * min(rows, cols)^2 max(rows, cols) exact products per stage and block. */
#define TRACE_PE_MAX_WORK (1L << 26)

/* One stage of the backend's own polar express at site `at` on x [rows,
 * cols] (values of the path's format), in place. */
static int pe_stage(const char *backend, const tsite *at, double *x, int rows, int cols, int stage)
{
    const long n = (long)rows * cols;
    if (strcmp(backend, "cpu") == 0) {
        float *X = malloc((size_t)n * sizeof *X);
        if (!X) return -1;
        for (long i = 0; i < n; i++) X[i] = (float)x[i];
        int rc = tbackend_cpu_polar_express_stage(at, X, rows, cols, stage);
        for (long i = 0; !rc && i < n; i++) x[i] = X[i];
        free(X);
        return rc;
    }
    /* CUDA: the kernels the CUDA backend's Muon calls (kpolar_express), one stage each */
    prec_format f = tpath_storage(at->path);
    int64_t shape[2] = {rows, cols};
    ktensor X = {0}, Y = {0};
    int rc = ktensor_alloc(&X, f, 2, shape) || ktensor_alloc(&Y, f, 2, shape) || ktensor_upload(&X, x);
    if (!rc && stage == 0) {
        rc = kpolar_express_normalize(at->path, rows, cols, X.data, Y.data) != 0;
    } else if (!rc) {
        float abc[KPE_STEPS][3];
        kpe_coefficients(at->op == TOP_MUON_NEWTON_SCHULZ ? KPE_MUON_QUINTIC : KPE_POLAR_EXPRESS, abc);
        const float *s = abc[stage - 1];
        rc = kpolar_express_step(at->path, at->variant, rows, cols, s[0], s[1], s[2], X.data, Y.data) != 0;
    }
    rc = rc || kernels_sync("trace: polar express stage") || ktensor_download(&Y, x);
    ktensor_free(&X);
    ktensor_free(&Y);
    return rc ? -1 : 0;
}

/* The kernel the backend runs at `at`, as compare_polar_express.h describes it. */
static kcmp_pe_kernel pe_kernel(const char *backend, const tsite *at, int rows, int cols)
{
    kcmp_pe_kernel k = kcheck_polar_express_kernel(at->path, at->variant, rows, cols);
    if (strcmp(backend, "cpu") == 0) {
        /* backend_cpu.c: every GEMM a sequential fp32 fma chain, the norm's sum of squares too */
        k.gemm = (prec_dot_model){PREC_DOT_ROUNDED, PREC_FP32, 0, 0.0, 0};
        k.norm_depth = (int64_t)rows * cols;
    }
    return k;
}

void trace_judge_muon(trace_report *r, const char *backend, const tsite *site_a, const tsite *site_b, const tparam *p,
                      const double *grad, const double *m_before, const double *m_after, const tmuon_args *args,
                      trace_bug bug)
{
    const int R = p->rows, C = p->cols;
    const long block = (long)R * C;
    const long edge = R < C ? R : C;
    if (site_a->path != site_b->path) {
        snprintf(r->verdict_note, sizeof r->verdict_note,
                 "no verdict for muon: A and B orthogonalise in different formats (%s, %s), so their polar express "
                 "inputs differ",
                 kpath_name(site_a->path), kpath_name(site_b->path));
        return;
    }
    if (edge * edge * (block / edge) * p->blocks > TRACE_PE_MAX_WORK) {
        snprintf(r->verdict_note, sizeof r->verdict_note,
                 "no verdict for muon: [%d, %d] x %d blocks is too large for the stage-by-stage MPFR reference", R, C,
                 p->blocks);
        return;
    }
    /* The Nesterov update U, polar express's input, from the recorded
     * gradient and momentum: the fp32 operations both backends document
     * (backend_cpu.c's cpu_muon, glue.cu's muon_momentum_kernel), one
     * rounding each; the momentum they give must be the replay's, bit for bit. */
    const prec_format f = tpath_storage(site_a->path);
    const float mu = (float)args->momentum, gs = (float)args->grad_scale;
    const long n = block * p->blocks;
    double *u = malloc((size_t)n * sizeof *u), *xa = malloc((size_t)block * sizeof *xa);
    double *xb = malloc((size_t)block * sizeof *xb), *xin = malloc((size_t)block * sizeof *xin);
    if (!u || !xa || !xb || !xin) {
        snprintf(r->verdict_note, sizeof r->verdict_note, "no verdict: out of memory");
        goto done;
    }
    for (long i = 0; i < n; i++) {
        float g = (float)grad[i];
        if (args->grad_scale != 1.0) g = (float)prec_rne((double)(g * gs), p->grad.format);
        float kept = mu * (float)m_before[i];
        float fresh = (1.0f - mu) * g;
        float m = kept + fresh;
        if (memcmp(&(double){m}, &m_after[i], sizeof(double)) != 0) {
            snprintf(r->verdict_note, sizeof r->verdict_note,
                     "no verdict for muon: the momentum could not be reproduced (element %ld: %.9g, the replay %.9g), "
                     "so neither could polar express's input",
                     i, (double)m, m_after[i]);
            goto done;
        }
        float look = mu * m;
        u[i] = prec_rne((double)(fresh + look), f);
    }
    snprintf(r->verdict_note, sizeof r->verdict_note,
             "muon judged on its polar express: %d block%s of [%d, %d], 6 stages each from each kernel's own iterate; "
             "%s GEMM model",
             p->blocks, p->blocks > 1 ? "s" : "", R, C, strcmp(backend, "cpu") == 0 ? "fp32 (CPU)" : "kmatmul");
    trace_judge_start(r);
    int same_result = 1; /* polar express gave A and B the same bits for every block */
    const tsite *sites[2] = {site_a, site_b};
    char shape[96], where[40];
    snprintf(shape, sizeof shape, "rows=%d cols=%d", R, C);
    for (int blk = 0; blk < p->blocks; blk++) {
        for (int side = 0; side < 2; side++) {
            const tsite *at = sites[side];
            const kcmp_pe_kernel k = pe_kernel(backend, at, R, C);
            double *x = side ? xb : xa;
            float abc[KPE_STEPS][3];
            kpe_coefficients(at->op == TOP_MUON_NEWTON_SCHULZ ? KPE_MUON_QUINTIC : KPE_POLAR_EXPRESS, abc);
            memcpy(x, u + blk * block, (size_t)block * sizeof *x);
            for (int stage = 0; stage <= KPE_STEPS; stage++) {
                memcpy(xin, x, (size_t)block * sizeof *x);
                if (pe_stage(backend, at, x, R, C, stage)) {
                    snprintf(r->verdict_note, sizeof r->verdict_note, "no verdict: replaying polar express stage %d failed",
                             stage);
                    goto done;
                }
                /* twin: the reference of the stage from the input negated */
                if (bug == TRACE_BUG_WRONG_REFERENCE)
                    for (long i = 0; i < block; i++) xin[i] = -xin[i];
                kcmp_pe_data d = {R, C, stage, xin, 0, 0, 0, x};
                if (stage > 0) d.a = abc[stage - 1][0], d.b = abc[stage - 1][1], d.c = abc[stage - 1][2];
                kcheck_acc row;
                if (kcmp_polar_express(&k, &d, shape, &row) < 0) {
                    snprintf(r->verdict_note, sizeof r->verdict_note, "no verdict: out of memory");
                    goto done;
                }
                snprintf(where, sizeof where, "block %d", blk);
                trace_judge_row(r, side, &row.row, where);
            }
        }
        same_result &= memcmp(xa, xb, (size_t)block * sizeof *xa) == 0;
    }
    if (same_result) {
        memset(r->judge, 0, sizeof r->judge);
        snprintf(r->verdict_note, sizeof r->verdict_note,
                 "no verdict for muon: its polar express gives A and B the same bits, so they part in the weight "
                 "update, which has no shared comparison yet");
        goto done;
    }
    trace_judge_finish(r, bug);
done:
    free(u), free(xa), free(xb), free(xin);
}

/* ---- attention: forward (o, lse) or backward (dq, dk, dv) ---- */

/* The kernel the backend runs at `at`, as compare_attention.h describes it;
 * NULL description (why says why) when there is none. */
static int attention_kernel(const char *backend, const tsite *at, double scale, kcmp_attention_kernel *k, char *why,
                            size_t why_len)
{
    const prec_format f = tpath_storage(at->path);
    const int cpu = strcmp(backend, "cpu") == 0;
    if (!cpu || katt_is_mma(at->variant)) {
        /* CUDA: kernels/attention.cu's kernels, as check describes them, the
         * tensor-core variants on the GPU's matrix units.  CPU flash_mma and
         * flash_mma_exp2: backend_cpu.c runs the same kernels' arithmetic
         * (kernels/attention_mma_arith.h) on tplan_attention_mma_model's
         * units (the H100's), so check's description with that model. */
        const mma_arith *mma = NULL;
        if (katt_is_mma(at->variant)) {
            const mma_model *m = cpu ? tplan_attention_mma_model(at->path, why, why_len) : NULL;
            mma = cpu ? (m ? &m->arith : NULL) : katt_mma_model(f, why, why_len);
            if (!mma) return -1;
        }
        *k = kcheck_attention_kernel(f, at->variant, scale, mma);
        return 0;
    }
    /* backend_cpu.c's cpu_attention_fwd and _bwd: every dot product a
     * sequential fmaf chain from zero, the softmax sum sum += e from zero
     * (n - 1 roundings), lse = max + logf(sum), P = e / sum normalised before
     * P v (two passes where the GPU's flash rescales online); the backward
     * takes P = expf(s - lse) from the stored lse and delta as a sequential
     * fmaf chain.  naive rounds S, P, dP and dS into the path's format (sum_j
     * P dP for delta); flash keeps them fp32 (dout . o for delta) and
     * computes with expf (the CPU backend runs no flash_exp2).  expf and logf
     * are taken at CUDA's 2 and 1 ulps. */
    memset(k, 0, sizeof *k);
    k->storage = f;
    k->scale = scale;
    k->exp_ulps = 2.0;
    k->log_ulps = 1.0;
    k->sum_reduce = (kcmp_att_reduce){1, 0, -1};
    k->delta_reduce = (kcmp_att_reduce){1, 1, -1};
    k->bwd_probs = KCMP_ATT_P_FROM_LSE;
    const int naive = at->variant == KATT_NAIVE;
    k->store_scores = k->store_probs = k->store_dprobs = naive;
    k->delta = naive ? KCMP_ATT_DELTA_PDP : KCMP_ATT_DELTA_DOUT_O;
    return 0;
}

/* [B, T, H, D] (the trainer's layout) into [B, H, T, D] (the kernels'),
 * rounded into f as the backends round operands. */
static void to_heads(const double *x, double *y, int B, int T, int H, int64_t D, prec_format f)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++)
                for (int64_t d = 0; d < D; d++)
                    y[(((int64_t)b * H + h) * T + t) * D + d] = prec_rne(x[(((int64_t)b * T + t) * H + h) * D + d], f);
}

void trace_judge_attention(trace_report *r, const char *backend, const tsite *site_a, const tsite *site_b, int B,
                           int T, int H, int64_t D, const double *q, const double *k, const double *v,
                           const double *dy, const double *y_in, const double *lse_in, const double *const out_a[3],
                           const double *const out_b[3], trace_bug bug)
{
    const int backward = dy != NULL;
    const char *pass = backward ? "backward" : "forward";
    if (site_a->path != site_b->path) {
        snprintf(r->verdict_note, sizeof r->verdict_note,
                 "no verdict for attention: A and B compute in different formats (%s, %s), so their kernels saw "
                 "different inputs",
                 kpath_name(site_a->path), kpath_name(site_b->path));
        return;
    }
    const prec_format f = tpath_storage(site_a->path);
    const double scale = (double)(1.0f / sqrtf((float)D)); /* as both backends form it */
    const int64_t n = (int64_t)B * T * H * D, BH = (int64_t)B * H;
    const int n_out = backward ? 3 : 2;
    kcmp_attention_kernel kd[2];
    char why[200];
    const tsite *sites[2] = {site_a, site_b};
    for (int side = 0; side < 2; side++)
        if (attention_kernel(backend, sites[side], scale, &kd[side], why, sizeof why)) {
            snprintf(r->verdict_note, sizeof r->verdict_note, "no verdict for attention: %s", why);
            return;
        }
    /* the outputs must be values of the path's format (lse: fp32), which the comparison describes */
    for (int side = 0; side < 2; side++)
        for (int o = 0; o < n_out; o++) {
            const double *y = (side ? out_b : out_a)[o];
            const int is_lse = !backward && o == 1;
            for (int64_t i = 0; i < (is_lse ? BH * T : n); i++)
                if (isfinite(y[i]) && prec_rne(y[i], is_lse ? PREC_FP32 : f) != y[i]) {
                    snprintf(r->verdict_note, sizeof r->verdict_note,
                             "no verdict for attention: %s's output is stored in a narrower format than the path's %s",
                             side ? "B" : "A", prec_format_get(f)->name);
                    return;
                }
        }
    double *buf = malloc((size_t)(13 * n) * sizeof *buf);
    if (!buf) {
        snprintf(r->verdict_note, sizeof r->verdict_note, "no verdict: out of memory");
        return;
    }
    double *hq = buf, *hk = hq + n, *hv = hk + n, *hdy = hv + n, *hy = hdy + n, *outs = hy + n; /* outs: 2 sides x 3 */
    to_heads(q, hq, B, T, H, D, f);
    to_heads(k, hk, B, T, H, D, f);
    to_heads(v, hv, B, T, H, D, f);
    if (backward) {
        to_heads(dy, hdy, B, T, H, D, f);
        to_heads(y_in, hy, B, T, H, D, f);
    }
    for (int side = 0; side < 2; side++)
        for (int o = 0; o < n_out; o++) {
            double *dst = outs + (side * 3 + o) * n;
            const double *src = (side ? out_b : out_a)[o];
            if (!backward && o == 1) memcpy(dst, src, (size_t)(BH * T) * sizeof *dst); /* lse is [B, H, T] already */
            else to_heads(src, dst, B, T, H, D, PREC_FP64);
        }
    /* twin: the reference (and bound) from the first input negated */
    if (bug == TRACE_BUG_WRONG_REFERENCE)
        for (int64_t i = 0; i < n; i++) hq[i] = -hq[i];
    snprintf(r->verdict_note, sizeof r->verdict_note,
             "attention %s judged with check's comparison (compare_attention.h): BH = %lld, T = %d, D = %lld; %s",
             pass, (long long)BH, T, (long long)D,
             strcmp(backend, "cpu") == 0 ? "the CPU backend's arithmetic" : "the CUDA kernels' arithmetic");
    trace_judge_start(r);
    char shape[96];
    snprintf(shape, sizeof shape, "BH=%lld T=%d D=%lld", (long long)BH, T, (long long)D);
    for (int side = 0; side < 2; side++) {
        const double *o0 = outs + (side * 3) * n, *o1 = o0 + n, *o2 = o1 + n;
        kcmp_attention_data d = {BH, T, D, hq, hk, hv, NULL, NULL, 0, NULL, NULL, NULL, NULL};
        if (backward) {
            d.o = hy;
            d.lse = lse_in; /* the backward's o and lse: read with their actual errors */
            d.dout = hdy;
            d.dq = o0, d.dk = o1, d.dv = o2;
        } else {
            d.o = o0;
            d.lse = o1;
            d.forward_rows = 1;
        }
        kcheck_acc rows[KCMP_ATTENTION_MAX_ROWS];
        int n_rows = kcmp_attention(&kd[side], &d, shape, rows);
        if (n_rows < 0) {
            snprintf(r->verdict_note, sizeof r->verdict_note, "no verdict: out of memory");
            free(buf);
            return;
        }
        for (int i = 0; i < n_rows; i++) trace_judge_row(r, side, &rows[i].row, "");
    }
    free(buf);
    trace_judge_finish(r, bug);
}
