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
 *   accumulate (y += ...): one fp32 addition, u32 (|ref| + e);
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

#include "precision/bounds.h"
#include "precision/format.h"
#include "reference/matmul.h"
#include "studies/trace_tap.h"

#define TRACE_JUDGE_ROWS 256

static double operand_unit(prec_format stored, prec_format operand)
{
    if (operand == PREC_TF32) return stored == PREC_TF32 ? 0 : 0x1p-10;
    const prec_format_info *s = prec_format_get(stored), *o = prec_format_get(operand);
    return s->precision > o->precision ? o->unit_roundoff : 0;
}

void trace_judge_matmul(trace_report *r, const char *backend, const tsite *site_a, const tsite *site_b,
                        const tap_call *c, const double *a, const double *b, const double *y_in, const double *ya,
                        const double *yb, trace_bug bug)
{
    const ktensor *Y = c->t[0], *A = c->t[1], *B = c->t[2];
    const long M = (long)Y->shape[0], N = (long)Y->shape[1], K = (long)(c->a_trans ? A->shape[0] : A->shape[1]);
    const long a_rs = c->a_trans ? 1 : K, a_cs = c->a_trans ? M : 1;
    const long b_rs = c->b_trans ? 1 : N, b_cs = c->b_trans ? K : 1;
    const tsite *sites[2] = {site_a, site_b};
    double G[2];
    for (int k = 0; k < 2; k++) {
        const tsite *at = sites[k];
        if (at->path == KPATH_FP8 || at->op == TOP_MATMUL_BLOCK_FP8) {
            snprintf(r->verdict_note, sizeof r->verdict_note, "no verdict for fp8 GEMMs (scaled operands)");
            return;
        }
        prec_format op = at->op == TOP_MATMUL_FAST ? PREC_TF32 : tpath_operand(at->path, tslot_is_gradient_gemm(c->slot));
        double ua = operand_unit(A->format, op), ub = operand_unit(B->format, op);
        double uprod = (1 + ua) * (1 + ub) - 1;
        int tensor_cores = strcmp(backend, "cuda") == 0 && !(at->path == KPATH_FP32 && at->op == TOP_MATMUL);
        double g = tensor_cores ? prec_gamma((double)(K + 2 * ((K + 3) / 4)), 0x1p-23) : prec_gamma((double)K, 0x1p-24);
        G[k] = (1 + uprod) * (1 + g) - 1;
    }
    snprintf(r->verdict_note, sizeof r->verdict_note, "matmul bound: %s accumulation model, K = %ld",
             strcmp(backend, "cuda") == 0 ? "tensor-core / SIMT" : "fp32 (CPU)", K);
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
    const prec_format_info *fo = prec_format_get(Y->format);
    const double u = fo->unit_roundoff;
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
                double e = G[k] * P + (double)K * 0x1p-150;
                if (y_in) e += 0x1p-24 * (fabs(ref) + e) + 0x1p-52 * fabs(ref);
                if (Y->format != PREC_FP32) e += u * (fabs(ref) + e) + fo->min_subnormal / 2;
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
