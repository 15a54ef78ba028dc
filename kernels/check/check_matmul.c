/* kernels/check/check_matmul.c — the checks of the matmul family (matmul,
 * matmul_fast, matmul_block_fp8; registry entries in kernels/matmul.cu).
 *
 * Inputs: A, B, C, bias ~ N(0,1) in the path's format (one shape draws
 * N(1, 0.25) for all of them so that |y| = sum |a b| and a truncated output
 * rounding stands out), y poisoned.  fp8: A and B are drawn in bf16 and
 * quantised on the GPU (kfp8_quantize_tensor / kfp8_quantize_blocks, scales
 * from the current amax); the check reads back the fp8 codes and scales and
 * compares y with the reference on the DEQUANTISED values the GEMM saw, and
 * reports the quantisation itself as rows a_q / b_q (error of q * scale
 * against the bf16 input, bound: the fp32 division and the fp8 rounding).
 *
 * The comparison of y (the MPFR reference, reference/matmul.h and
 * reference/matmul_epilogue.h, and the bound) is kcmp_matmul
 * (compare_matmul.h, shared with `ulpscope verify matmul`), with each
 * (path, accumulation, variant) described as kcheck_matmul_kernel says.
 *
 * Bound per output element from the actual inputs, P = sum_k |a_k b_k|:
 * the dot part G P, then the epilogue's operations replayed on kval numbers
 * (check.h), then the output rounding.  G depends on the accumulation model
 * the path and scheme imply (precision/dot_bound.h computes it); each is a
 * claim about the hardware, stated here:
 *  - fp32 (SIMT FFMA, RNE): G = gamma_K(2^-24).
 *  - bf16, fp16 and tf32 tensor cores: products exact (tf32: each input first
 *    truncated to 11 bits, u_prod = (1 + 2^-10)^2 - 1), then block FMAs that
 *    align the products of a block of n_b >= 4 to the largest exponent and
 *    truncate to fp32's 24 bits (Fasi, Higham, Mikaitis, Pranesh, "Numerical
 *    behavior of NVIDIA tensor cores", PeerJ CS 7:e330, 2021): each block
 *    loses < (n_b + 2) 2^-23 of the running magnitude, so over K terms
 *    G = (1 + u_prod)(1 + gamma_{K + 2 ceil(K/4)}(2^-23)) - 1.
 *  - fp8 tensor cores accumulate in about 14 significant bits (DeepSeek-V3
 *    report, section 3.3.2: "around 14 bits"; 13 stored fraction bits), with
 *    the same truncation: unit 2^-13.  cuBLASLt's default mode promotes the
 *    partial sums to fp32 at an interval it does not document: the bound
 *    assumes at most N_c = 128 products between promotions (DeepSeek's own
 *    interval), so G = (1 + gamma_{1.5 N_c}(2^-13))(1 + gamma_{K/N_c}(2^-24))
 *    (1 + 2^-24)^3 - 1 (three fp32 roundings for the two scales and alpha).
 *    An element over it means cuBLASLt promotes less often than that: a
 *    finding.  fast_accum: no promotion, gamma_{1.5 K}(2^-13).  Our
 *    block-scaled kernel: gamma_{1.5 * 128}(2^-13) per group, then one fp32
 *    fma per group with the fp32 product of the two scales: gamma_{G+1}(2^-24).
 * The probabilistic (RMS) bound is gamma~ (check.h) for the RNE fp32 case;
 * truncation errors are biased, which voids Higham and Mary's mean-zero
 * assumption, so the truncating models use their worst case for the RMS too.
 *
 * Epilogue models: cuBLASLt's fused epilogue is not always one rounding.
 * Finding (H200, CUDA 13.0, cuBLASLt algo 16 for a bf16 AtB GEMM with
 * GELU_BIAS, seed 0x5eed, shape M=100 N=130 K=257): alpha*AB = 4.05 came out
 * as if rounded to bf16 (4.0625) before the bias -2.72 was added, so the
 * output was 2.3 bf16 ulps off; our single-rounding bound was exceeded by
 * 1.88x.  The fused model therefore allows the same intermediate rounding
 * of alpha*AB + beta*C into the output format as split_epilogue (one
 * rounding of the product into y's format, then bias and GELU in fp32).
 * cuBLASLt's GELU has undocumented accuracy; the bound assumes tanh no
 * worse than PTX's tanh.approx.f32 (relative error 2^-10.987), plus about
 * 5 fp32 roundings around it.  Our own GELU uses
 * tanhf (2 ulps, CUDA C++ Programming Guide): 5 u |z| + u |y| in all.
 * sup |gelu'| = 1.12899... (at z ~ 1.42) bounds how the argument's error
 * propagates. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/check/checks.h"
#include "kernels/check/compare_matmul.h"
#include "kernels/common/ktensor_io.h"
#include "kernels/matmul.h"

typedef struct {
    int64_t M, N, K;
    int a_trans, b_trans, bias, gelu;
    double alpha, beta;
    int positive;
    prec_format a8, b8; /* fp8 shapes */
} mm_shape;

/* Sizes that are no multiple of any tile (7, 37, 45, 257, 2049) beside
 * model-like ones; K = 7, 9 and 16 make a single dropped term visible even
 * against a bf16 bound; every layout of the linear layer appears; the last,
 * all positive with K = 4096, makes partial sums grow so that an accumulator
 * narrower than fp32 (fp8 fast accumulation) shows its drift. */
static const mm_shape shapes[] = {
    {37, 45, 70, 0, 1, 1, 0, 1.0, 0.0, 0, 0, 0},
    {16, 24, 7, 0, 0, 0, 0, 1.0, 0.0, 0, 0, 0},
    {23, 40, 9, 0, 1, 0, 0, 1.0, 0.0, 1, 0, 0},
    {100, 130, 257, 1, 0, 1, 1, 0.5, 0.0, 0, 0, 0},
    {48, 64, 1000, 0, 1, 0, 1, 1.0, 0.5, 0, 0, 0},
    {33, 50, 2049, 1, 1, 1, 0, 1.0, 1.0, 0, 0, 0},
    {64, 64, 4096, 0, 1, 0, 0, 1.0, 0.0, 1, 0, 0},
};

/* fp8: K and N multiples of 16 (the fp8 GEMMs' 16-byte rows), M free; the
 * bf16 sources come in every layout and the quantiser transposes. */
static const mm_shape fp8_shapes[] = {
    {37, 48, 80, 0, 1, 1, 0, 1.0, 0.0, 0, PREC_E4M3, PREC_E4M3},
    {16, 32, 16, 0, 0, 0, 0, 1.0, 0.0, 0, PREC_E5M2, PREC_E4M3},
    {23, 32, 16, 0, 1, 0, 0, 1.0, 0.0, 1, PREC_E4M3, PREC_E4M3},
    {100, 144, 272, 1, 0, 1, 1, 0.5, 0.0, 0, PREC_E5M2, PREC_E4M3},
    {48, 64, 1024, 0, 1, 0, 1, 1.0, 0.5, 0, PREC_E4M3, PREC_E4M3},
    {33, 48, 2048, 1, 1, 1, 0, 1.0, 1.0, 0, PREC_E5M2, PREC_E4M3},
    {64, 64, 4096, 0, 1, 0, 0, 1.0, 0.0, 1, PREC_E4M3, PREC_E4M3},
};

#define N_SHAPES(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const double U32 = 0x1p-24;

typedef struct {
    double *A, *B, *C, *bias; /* exact values the GEMM saw (fp8: dequantised) */
    double *src_a, *src_b;    /* fp8: the bf16 values before quantisation */
    double *y;                /* kernel output */
    double *qa_scale, *qb_scale; /* fp8 scales as read back (1 or per tile) */
    int64_t n_sa, n_sb;
    char algo[200];              /* the cuBLASLt algorithm that ran (kmatmul_last_algo) */
} mm_buffers;

static void free_mm(mm_buffers *b)
{
    free(b->A); free(b->B); free(b->C); free(b->bias); free(b->src_a); free(b->src_b);
    free(b->y); free(b->qa_scale); free(b->qb_scale);
}

/* Fills a stored tensor of n values in format f. */
static void draw(prec_rng *rng, double *x, int64_t n, int positive, prec_format f)
{
    if (positive) kcheck_fill_normal(rng, x, n, 1.0, 0.25, f);
    else kcheck_fill_normal(rng, x, n, 0.0, 1.0, f);
}

/* Runs the GPU side for the non-fp8 paths: inputs already in b. */
static int run_plain(const mm_shape *s, kpath path, kmatmul_accum accum, int variant, mm_buffers *b)
{
    const prec_format f = kcheck_path_format(path);
    int64_t sa[2] = {s->a_trans ? s->K : s->M, s->a_trans ? s->M : s->K};
    int64_t sb[2] = {s->b_trans ? s->N : s->K, s->b_trans ? s->K : s->N};
    int64_t sy[2] = {s->M, s->N}, sn[1] = {s->N};
    ktensor A = {0}, B = {0}, C = {0}, bias = {0}, Y = {0};
    int rc = -1;
    if (ktensor_alloc(&A, f, 2, sa) || ktensor_alloc(&B, f, 2, sb) || ktensor_alloc(&Y, f, 2, sy) ||
        (s->beta != 0 && ktensor_alloc(&C, f, 2, sy)) || (s->bias && ktensor_alloc(&bias, f, 1, sn)))
        goto done;
    if (ktensor_upload(&A, b->A) || ktensor_upload(&B, b->B) || (s->beta != 0 && ktensor_upload(&C, b->C)) ||
        (s->bias && ktensor_upload(&bias, b->bias)))
        goto done;
    kmatmul_args x = {s->M, s->N, s->K, s->a_trans, s->b_trans, A.data, B.data, Y.data, s->beta != 0 ? C.data : NULL,
                      (float)s->alpha, (float)s->beta, s->bias ? bias.data : NULL, s->gelu,
                      PREC_FP32, PREC_FP32, NULL, NULL, 0};
    if (kmatmul(path, accum, variant, &x) || kernels_sync("matmul") || ktensor_download(&Y, b->y)) goto done;
    snprintf(b->algo, sizeof b->algo, "%s", kmatmul_last_algo());
    rc = 0;
done:
    ktensor_free(&A); ktensor_free(&B); ktensor_free(&C); ktensor_free(&bias); ktensor_free(&Y);
    return rc;
}

/* fp8: bf16 sources (b->src_a, b->src_b, stored layouts) quantised on the GPU;
 * the dequantised operands land in b->A [M,K] and b->B [N,K]. */
static int run_fp8(const mm_shape *s, kmatmul_accum accum, int variant, mm_buffers *b)
{
    const int block = accum == KMATMUL_ACC_BLOCK_SCALED;
    const int64_t M = s->M, N = s->N, K = s->K, G = (K + KMATMUL_FP8_BLOCK - 1) / KMATMUL_FP8_BLOCK;
    int64_t sa[2] = {s->a_trans ? K : M, s->a_trans ? M : K};
    int64_t sb[2] = {s->b_trans ? N : K, s->b_trans ? K : N};
    int64_t qa_shape[2] = {M, K}, qb_shape[2] = {N, K}, sy[2] = {M, N}, sn[1] = {N};
    ktensor A = {0}, B = {0}, QA = {0}, QB = {0}, C = {0}, bias = {0}, Y = {0};
    float *sa_dev = NULL, *sb_dev = NULL;
    float *sa_host = NULL, *sb_host = NULL;
    double *qa = NULL, *qb = NULL;
    int rc = -1;
    b->n_sa = block ? M * G : 1;
    b->n_sb = block ? ((N + KMATMUL_FP8_BLOCK - 1) / KMATMUL_FP8_BLOCK) * G : 1;
    sa_host = malloc(b->n_sa * sizeof(float));
    sb_host = malloc(b->n_sb * sizeof(float));
    qa = malloc(M * K * sizeof(double));
    qb = malloc(N * K * sizeof(double));
    b->qa_scale = malloc(b->n_sa * sizeof(double));
    b->qb_scale = malloc(b->n_sb * sizeof(double));
    if (!sa_host || !sb_host || !qa || !qb || !b->qa_scale || !b->qb_scale) {
        kernels_fail("matmul check: out of host memory");
        goto done;
    }
    if (ktensor_alloc(&A, PREC_BF16, 2, sa) || ktensor_alloc(&B, PREC_BF16, 2, sb) ||
        ktensor_alloc(&QA, s->a8, 2, qa_shape) || ktensor_alloc(&QB, s->b8, 2, qb_shape) ||
        ktensor_alloc(&Y, PREC_BF16, 2, sy) || (s->beta != 0 && ktensor_alloc(&C, PREC_BF16, 2, sy)) ||
        (s->bias && ktensor_alloc(&bias, PREC_BF16, 1, sn)))
        goto done;
    if (kdevice_alloc((void **)&sa_dev, b->n_sa * sizeof(float), "matmul check scales") ||
        kdevice_alloc((void **)&sb_dev, b->n_sb * sizeof(float), "matmul check scales"))
        goto done;
    if (ktensor_upload(&A, b->src_a) || ktensor_upload(&B, b->src_b) || (s->beta != 0 && ktensor_upload(&C, b->C)) ||
        (s->bias && ktensor_upload(&bias, b->bias)))
        goto done;
    if (block) {
        if (kfp8_quantize_blocks(A.data, PREC_BF16, M, K, s->a_trans, 1, s->a8, QA.data, sa_dev) ||
            kfp8_quantize_blocks(B.data, PREC_BF16, N, K, !s->b_trans, KMATMUL_FP8_BLOCK, s->b8, QB.data, sb_dev))
            goto done;
    } else {
        if (kfp8_quantize_tensor(A.data, PREC_BF16, sa[0], sa[1], s->a_trans, s->a8, QA.data, sa_dev) ||
            kfp8_quantize_tensor(B.data, PREC_BF16, sb[0], sb[1], !s->b_trans, s->b8, QB.data, sb_dev))
            goto done;
    }
    kmatmul_args x = {M, N, K, 0, 1, QA.data, QB.data, Y.data, s->beta != 0 ? C.data : NULL, (float)s->alpha,
                      (float)s->beta, s->bias ? bias.data : NULL, s->gelu, s->a8, s->b8, sa_dev, sb_dev, 0};
    if (kmatmul(KPATH_FP8, accum, variant, &x) || kernels_sync("matmul fp8") || ktensor_download(&Y, b->y) ||
        ktensor_download(&QA, qa) || ktensor_download(&QB, qb) ||
        kdevice_download(sa_host, sa_dev, b->n_sa * sizeof(float), "matmul check scales") ||
        kdevice_download(sb_host, sb_dev, b->n_sb * sizeof(float), "matmul check scales"))
        goto done;
    snprintf(b->algo, sizeof b->algo, "%s", accum == KMATMUL_ACC_BLOCK_SCALED ? "own kernel" : kmatmul_last_algo());
    for (int64_t i = 0; i < b->n_sa; i++) b->qa_scale[i] = sa_host[i];
    for (int64_t i = 0; i < b->n_sb; i++) b->qb_scale[i] = sb_host[i];
    /* dequantise: code * scale is exact in double (4-bit significand times fp32) */
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++)
            b->A[m * K + k] = qa[m * K + k] * b->qa_scale[block ? m * G + k / KMATMUL_FP8_BLOCK : 0];
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++)
            b->B[n * K + k] = qb[n * K + k] *
                              b->qb_scale[block ? (n / KMATMUL_FP8_BLOCK) * G + k / KMATMUL_FP8_BLOCK : 0];
    rc = 0;
done:
    ktensor_free(&A); ktensor_free(&B); ktensor_free(&QA); ktensor_free(&QB);
    ktensor_free(&C); ktensor_free(&bias); ktensor_free(&Y);
    kdevice_free(sa_dev); kdevice_free(sb_dev);
    free(sa_host); free(sb_host); free(qa); free(qb);
    return rc;
}

/* Rows a_q / b_q: each dequantised operand against its bf16 source.  The
 * quantiser computes x / scale in fp32 and rounds that into the fp8 format
 * (saturating, which only moves a value back toward the exact quotient);
 * dequantising multiplies exactly. */
static void report_quantisation(kcheck_ctx *ctx, const char *output, const char *shape_name, const double *deq,
                                const double *src, int64_t R, int64_t K, int src_transposed, const double *scales,
                                int block_rows, int block, prec_format f8)
{
    kcheck_acc acc;
    kcheck_acc_init(&acc, output, shape_name, prec_format_get(f8)->unit_roundoff);
    int64_t G = (K + KMATMUL_FP8_BLOCK - 1) / KMATMUL_FP8_BLOCK;
    for (int64_t r = 0; r < R; r++)
        for (int64_t k = 0; k < K; k++) {
            double x = src_transposed ? src[k * R + r] : src[r * K + k];
            double s = scales[block ? (r / block_rows) * G + k / KMATMUL_FP8_BLOCK : 0];
            kval q = kval_round(kval_div(kval_exact(x), kval_exact(s), PREC_FP32), f8);
            double bound = q.e * s, prob = q.p * s;
            int64_t i = r * K + k;
            if (kcheck_acc_add(&acc, i, deq[i], x, bound, prob, fabs(x)))
                kcheck_acc_detail(&acc, "row %lld k %lld: x=%.9g scale=%.9g dequantised %.9g", (long long)r,
                                  (long long)k, x, s, deq[i]);
        }
    kcheck_acc_report(ctx, &acc);
}

/* Row a_scale (per-tensor scales): the scale against amax / max_finite of the
 * source, rounded once into fp32. */
static void report_scale(kcheck_ctx *ctx, const char *output, const char *shape_name, const double *src, int64_t n,
                         double got, prec_format f8)
{
    kcheck_acc acc;
    kcheck_acc_init(&acc, output, shape_name, U32);
    double amax = 0;
    for (int64_t i = 0; i < n; i++) amax = fmax(amax, fabs(src[i]));
    double ref = amax > 0 ? amax / prec_format_get(f8)->max_finite : 1.0;
    kval s = kval_round(kval_exact(ref), PREC_FP32);
    if (kcheck_acc_add(&acc, 0, got, ref, s.e, s.p, fabs(ref)))
        kcheck_acc_detail(&acc, "amax %.9g: got %.9g ref %.17g", amax, got, ref);
    kcheck_acc_report(ctx, &acc);
}

kcmp_matmul_kernel kcheck_matmul_kernel(kpath path, int accum, int variant, int64_t K, double alpha, double beta,
                                        int gelu)
{
    const int fp8 = path == KPATH_FP8, block = accum == KMATMUL_ACC_BLOCK_SCALED;
    kcmp_matmul_kernel k = {0};
    k.out = fp8 ? PREC_BF16 : kcheck_path_format(path);
    /* split_k: KMATMUL_SPLIT_K_SLICES slices (fp8: of a multiple of 16 terms, the fp8 GEMMs' rows) added in fp32 */
    k.slice = variant == KMATMUL_SPLIT_K ? ((K + KMATMUL_SPLIT_K_SLICES - 1) / KMATMUL_SPLIT_K_SLICES + (fp8 ? 15 : 0)) /
                                               (fp8 ? 16 : 1) * (fp8 ? 16 : 1)
                                         : K;
    if (k.slice > K) k.slice = K;
    k.slice_sum = PREC_FP32;
    /* the model of kmatmul_error_factor (matmul.cu), which the other checks use */
    prec_dot_model m = {PREC_DOT_TENSOR_CORE, PREC_FP32, k.slice, 0.0, 0};
    if (block) {
        m.kind = PREC_DOT_FP8_GROUPS;
        m.interval = KMATMUL_FP8_BLOCK;
    } else if (fp8) {
        m.kind = PREC_DOT_FP8;
        m.interval = accum == KMATMUL_ACC_FAST ? 0 : 128;
    } else if (path == KPATH_FP32 && accum == KMATMUL_ACC_DEFAULT) {
        m.kind = PREC_DOT_ROUNDED;
    } else if (path == KPATH_FP32) {
        m.u_in = 0x1p-10;
    }
    k.dot = k.dot_last = m;
    k.dot_last.depth = K % k.slice ? K % k.slice : k.slice;
    k.alpha = alpha;
    k.beta = beta;
    k.gelu = gelu;
    /* the GEMM's own output rounding before bias and GELU: split_epilogue by
     * construction, cuBLASLt's fused epilogue as observed (above) */
    k.round_product = (variant == KMATMUL_SPLIT_EPILOGUE || variant == KMATMUL_FUSED) && !block;
    k.tanh_rel_err = variant == KMATMUL_FUSED && !block ? pow(2.0, -10.987) : 0.0;
    return k;
}

static int check_shape(kcheck_ctx *ctx, const mm_shape *s, kpath path, kmatmul_accum accum, int variant)
{
    const int fp8 = path == KPATH_FP8;
    const prec_format f = fp8 ? PREC_BF16 : kcheck_path_format(path);
    const int64_t M = s->M, N = s->N, K = s->K;
    mm_buffers b;
    memset(&b, 0, sizeof b);
    b.A = malloc(M * K * sizeof(double));
    b.B = malloc(K * N * sizeof(double));
    b.C = malloc(M * N * sizeof(double));
    b.bias = malloc(N * sizeof(double));
    b.y = malloc(M * N * sizeof(double));
    if (fp8) {
        b.src_a = malloc(M * K * sizeof(double));
        b.src_b = malloc(K * N * sizeof(double));
    }
    if (!b.A || !b.B || !b.C || !b.bias || !b.y || (fp8 && (!b.src_a || !b.src_b))) {
        free_mm(&b);
        return kernels_fail("matmul check: out of host memory");
    }
    prec_rng rng;
    kcheck_rng(ctx, &rng);
    draw(&rng, fp8 ? b.src_a : b.A, M * K, s->positive, f);
    draw(&rng, fp8 ? b.src_b : b.B, K * N, s->positive, f);
    draw(&rng, b.C, M * N, s->positive, f);
    draw(&rng, b.bias, N, s->positive, f);

    int rc = fp8 ? run_fp8(s, accum, variant, &b) : run_plain(s, path, accum, variant, &b);
    if (rc != 0) {
        free_mm(&b);
        return -1;
    }
    /* operand strides as the reference sees them: fp8 operands are [M,K] and [N,K] */
    long a_rs, a_cs, b_rs, b_cs;
    if (fp8 || !s->a_trans) { a_rs = K; a_cs = 1; } else { a_rs = 1; a_cs = M; }
    if (fp8 || s->b_trans) { b_rs = 1; b_cs = K; } else { b_rs = N; b_cs = 1; }
    char shape_name[96];
    snprintf(shape_name, sizeof shape_name, "M=%lld N=%lld K=%lld %s%s%s%s%s", (long long)M, (long long)N,
             (long long)K, s->a_trans ? "At" : "A", s->b_trans ? "Bt" : "B", s->bias ? " bias" : "",
             s->gelu ? " gelu" : "", s->beta != 0 ? " +C" : "");
    if (fp8) {
        char tail[24];
        snprintf(tail, sizeof tail, " %sx%s", prec_format_name(s->a8), prec_format_name(s->b8));
        strncat(shape_name, tail, sizeof shape_name - strlen(shape_name) - 1);
        const int block = accum == KMATMUL_ACC_BLOCK_SCALED;
        /* the sources in [R,K] orientation for the rows below */
        report_quantisation(ctx, "a_q", shape_name, b.A, b.src_a, M, K, s->a_trans, b.qa_scale, 1, block, s->a8);
        report_quantisation(ctx, "b_q", shape_name, b.B, b.src_b, N, K, !s->b_trans, b.qb_scale, KMATMUL_FP8_BLOCK,
                            block, s->b8);
        if (!block) {
            report_scale(ctx, "a_scale", shape_name, b.src_a, M * K, b.qa_scale[0], s->a8);
            report_scale(ctx, "b_scale", shape_name, b.src_b, K * N, b.qb_scale[0], s->b8);
        }
    }

    const kcmp_matmul_kernel k = kcheck_matmul_kernel(path, accum, variant, K, s->alpha, s->beta, s->gelu);
    const kcmp_matmul_data d = {M, N, K, b.A, a_rs, a_cs, b.B, b_rs, b_cs, s->beta != 0 ? b.C : NULL,
                                s->bias ? b.bias : NULL, b.y, variant == KMATMUL_SPLIT_K ? "split_k slices" : b.algo};
    kcheck_acc acc;
    if (kcmp_matmul(&k, &d, shape_name, &acc) < 0) {
        free_mm(&b);
        return kernels_fail("matmul check: out of host memory");
    }
    kcheck_report(ctx, &acc.row);
    free_mm(&b);
    return 0;
}

static int check_family(kcheck_ctx *ctx, kpath path, kmatmul_accum accum, int variant)
{
    char why[160];
    if (!kmatmul_supports(path, accum, variant, why, sizeof why))
        return kernels_fail("matmul check %s/%s: %s", kpath_name(path), kmatmul_accum_name(accum), why);
    const mm_shape *list = path == KPATH_FP8 ? fp8_shapes : shapes;
    int n = path == KPATH_FP8 ? N_SHAPES(fp8_shapes) : N_SHAPES(shapes);
    if (kcheck_quick(ctx)) n = 3;
    for (int i = 0; i < n; i++)
        if (check_shape(ctx, &list[i], path, accum, variant) != 0) return -1;
    return 0;
}

int kcheck_matmul(kcheck_ctx *ctx, kpath path, int variant)
{
    return check_family(ctx, path, KMATMUL_ACC_DEFAULT, variant);
}

int kcheck_matmul_fast(kcheck_ctx *ctx, kpath path, int variant)
{
    return check_family(ctx, path, KMATMUL_ACC_FAST, variant);
}

int kcheck_matmul_block_fp8(kcheck_ctx *ctx, kpath path, int variant)
{
    (void)variant; /* one variant: the kernel's fused epilogue */
    return check_family(ctx, path, KMATMUL_ACC_BLOCK_SCALED, KMATMUL_FUSED);
}
