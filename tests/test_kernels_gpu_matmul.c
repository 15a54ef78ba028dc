/* tests/test_kernels_gpu_matmul.c — GPU tests of H5's kernels beyond their
 * checks: bitwise determinism, the fp8 scale from the current amax, the
 * transposing quantisers (tile and 32 x 32, one layout or both), the
 * quantising entry point against the manual one, argument errors, stochastic
 * rounding's determinism and unbiasedness, quantisation with a given scale
 * (delayed scaling) and the GEMM with a given operand, and polar express as the
 * composition of its parts.  Skipped visibly without a GPU. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/common/ktensor_io.h"
#include "kernels/matmul.h"
#include "kernels/polar_express.h"
#include "precision/format.h"
#include "precision/rng.h"
#include "tests/test_util.h"

static void fill(prec_rng *rng, double *x, int64_t n, prec_format f)
{
    for (int64_t i = 0; i < n; i++) x[i] = prec_rne(prec_rng_normal(rng), f);
}

static ktensor upload_random(prec_rng *rng, prec_format f, int64_t r, int64_t c)
{
    int64_t shp[2] = {r, c};
    ktensor t = {0};
    double *x = malloc(r * c * sizeof(double));
    assert_non_null(x);
    fill(rng, x, r * c, f);
    assert_int_equal(ktensor_alloc(&t, f, 2, shp), 0);
    assert_int_equal(ktensor_upload(&t, x), 0);
    free(x);
    return t;
}

static void download_bits(const ktensor *t, double *out) { assert_int_equal(ktensor_download(t, out), 0); }

static void test_matmul_deterministic(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("gpu matmul determinism"));
    const int64_t M = 100, N = 130, K = 257;
    ktensor A = upload_random(&rng, PREC_BF16, M, K), B = upload_random(&rng, PREC_BF16, N, K);
    int64_t sy[2] = {M, N};
    ktensor Y = {0};
    assert_int_equal(ktensor_alloc(&Y, PREC_BF16, 2, sy), 0);
    double *y1 = malloc(M * N * sizeof(double)), *y2 = malloc(M * N * sizeof(double));
    for (int variant = 0; variant < KMATMUL_NVARIANTS; variant++) {
        kmatmul_args x = {M, N, K, 0, 1, A.data, B.data, Y.data, NULL, 1.0f, 0.0f, NULL, 0,
                          PREC_FP32, PREC_FP32, NULL, NULL, 0};
        assert_int_equal(kmatmul(KPATH_BF16, KMATMUL_ACC_DEFAULT, variant, &x), 0);
        download_bits(&Y, y1);
        assert_int_equal(ktensor_poison(&Y), 0);
        assert_int_equal(kmatmul(KPATH_BF16, KMATMUL_ACC_DEFAULT, variant, &x), 0);
        download_bits(&Y, y2);
        assert_memory_equal(y1, y2, M * N * sizeof(double));
    }
    free(y1); free(y2);
    ktensor_free(&A); ktensor_free(&B); ktensor_free(&Y);
}

static void test_fp8_scale_from_amax(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("gpu fp8 scale"));
    const int64_t R = 33, C = 48;
    double *x = malloc(R * C * sizeof(double)), *q = malloc(R * C * sizeof(double));
    fill(&rng, x, R * C, PREC_BF16);
    int64_t shp[2] = {R, C}, shq[2] = {C, R};
    ktensor X = {0}, Q = {0};
    assert_int_equal(ktensor_alloc(&X, PREC_BF16, 2, shp), 0);
    assert_int_equal(ktensor_alloc(&Q, PREC_E4M3, 2, shq), 0);
    assert_int_equal(ktensor_upload(&X, x), 0);
    assert_int_equal(kfp8_quantize_tensor(X.data, PREC_BF16, R, C, 1, PREC_E4M3, Q.data, Q.scale), 0);
    float scale;
    assert_int_equal(ktensor_get_scale(&Q, &scale), 0);
    download_bits(&Q, q);
    double amax = 0;
    for (int64_t i = 0; i < R * C; i++) amax = fmax(amax, fabs(x[i]));
    assert_true(scale == (float)(amax / 448.0));
    prec_rounding sat = {PREC_RNE, PREC_OVF_SATURATE, false};
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) {
            double want = prec_round((double)((float)x[r * C + c] / scale), PREC_E4M3, sat, 0);
            assert_true(q[c * R + r] == want); /* transposed on the way */
        }
    free(x); free(q);
    ktensor_free(&X); ktensor_free(&Q);
}

/* Mismatches of the transposing quantiser's output q [C,R] (and, given, of
 * the untransposed qf [R,C]) against round(x / scale) computed here, with
 * the scale checked against amax / max_finite; outputs poisoned first.
 * Shapes with sides multiples of 64 run the 64 x 64 tile kernel, the others
 * the 32 x 32 one. */
static int64_t tile_quantiser_mismatches(prec_rng *rng, prec_format xf, prec_format fp8, int64_t R, int64_t C, int dual)
{
    double *x = malloc(R * C * sizeof(double)), *q = malloc(R * C * sizeof(double)), *qf = malloc(R * C * sizeof(double));
    assert_non_null(x), assert_non_null(q), assert_non_null(qf);
    for (int64_t i = 0; i < R * C; i++) x[i] = prec_rne(ldexp(prec_rng_normal(rng), (int)(i % 7) - 3), xf);
    int64_t shp[2] = {R, C}, shq[2] = {C, R};
    ktensor X = {0}, Q = {0}, QF = {0};
    assert_int_equal(ktensor_alloc(&X, xf, 2, shp), 0);
    assert_int_equal(ktensor_alloc(&Q, fp8, 2, shq), 0);
    assert_int_equal(ktensor_alloc(&QF, fp8, 2, shp), 0);
    assert_int_equal(ktensor_upload(&X, x), 0);
    assert_int_equal(kdevice_fill_bytes(Q.data, 0x7f, (size_t)(R * C), "poison"), 0);
    assert_int_equal(kdevice_fill_bytes(QF.data, 0x7f, (size_t)(R * C), "poison"), 0);
    if (dual) assert_int_equal(kfp8_quantize_tensor_dual(X.data, xf, R, C, fp8, QF.data, Q.data, Q.scale), 0);
    else assert_int_equal(kfp8_quantize_tensor(X.data, xf, R, C, 1, fp8, Q.data, Q.scale), 0);
    float scale;
    assert_int_equal(ktensor_get_scale(&Q, &scale), 0);
    download_bits(&Q, q);
    if (dual) download_bits(&QF, qf);
    double amax = 0;
    for (int64_t i = 0; i < R * C; i++) amax = fmax(amax, fabs(x[i]));
    assert_true(scale == (float)(amax / prec_format_get(fp8)->max_finite));
    prec_rounding sat = {PREC_RNE, PREC_OVF_SATURATE, false};
    int64_t bad = 0;
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) {
            double want = prec_round((double)((float)x[r * C + c] / scale), fp8, sat, 0);
            bad += !(q[c * R + r] == want);
            if (dual) bad += !(qf[r * C + c] == want);
        }
    free(x), free(q), free(qf);
    ktensor_free(&X), ktensor_free(&Q), ktensor_free(&QF);
    return bad;
}

/* Every element of both quantisers (tile and 32 x 32), transposed and in both
 * layouts at once, bf16 and fp32 in, e4m3 and e5m2 out, is round(x / scale);
 * the twin, two row chunks of the tile kernel's output swapped, must miss. */
static void test_fp8_transposing_quantisers(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("gpu fp8 transposing quantisers"));
    const int64_t shapes[][2] = {{33, 48}, {128, 192}, {64, 320}, {192, 72}};
    const prec_format xfs[] = {PREC_BF16, PREC_FP32}, fp8s[] = {PREC_E4M3, PREC_E5M2};
    for (int s = 0; s < 4; s++)
        for (int xi = 0; xi < 2; xi++)
            for (int fi = 0; fi < 2; fi++)
                for (int dual = 0; dual < 2; dual++) {
                    int64_t bad = tile_quantiser_mismatches(&rng, xfs[xi], fp8s[fi], shapes[s][0], shapes[s][1], dual);
                    if (bad) print_message("%lld x %lld %s->%s%s: %lld mismatches\n", (long long)shapes[s][0],
                                           (long long)shapes[s][1], prec_format_name(xfs[xi]),
                                           prec_format_name(fp8s[fi]), dual ? " (both layouts)" : "", (long long)bad);
                    assert_int_equal(bad, 0);
                }
    kfp8_plant_tile_transpose_bug(1);
    int64_t planted = tile_quantiser_mismatches(&rng, PREC_BF16, PREC_E4M3, 128, 192, 1);
    kfp8_plant_tile_transpose_bug(0);
    print_message("planted tile transpose bug: %lld mismatches\n", (long long)planted);
    assert_true(planted > 0);
}

static void test_quantized_entry_point(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("gpu fp8 quantized"));
    const int64_t M = 40, N = 64, K = 96;
    /* dW-like layout: A stored [K,M], B stored [K,N] */
    ktensor A = upload_random(&rng, PREC_BF16, K, M), B = upload_random(&rng, PREC_BF16, K, N);
    int64_t sy[2] = {M, N}, sqa[2] = {M, K}, sqb[2] = {N, K};
    ktensor Y1 = {0}, Y2 = {0}, QA = {0}, QB = {0};
    assert_int_equal(ktensor_alloc(&Y1, PREC_BF16, 2, sy), 0);
    assert_int_equal(ktensor_alloc(&Y2, PREC_BF16, 2, sy), 0);
    assert_int_equal(ktensor_alloc(&QA, PREC_E5M2, 2, sqa), 0);
    assert_int_equal(ktensor_alloc(&QB, PREC_E4M3, 2, sqb), 0);
    kmatmul_args x = {M, N, K, 1, 0, A.data, B.data, Y1.data, NULL, 1.0f, 0.0f, NULL, 0,
                      PREC_FP32, PREC_FP32, NULL, NULL, 0};
    assert_int_equal(kmatmul_quantized(KMATMUL_ACC_DEFAULT, KMATMUL_FUSED, &x, PREC_BF16, PREC_E5M2, PREC_E4M3), 0);
    assert_int_equal(kfp8_quantize_tensor(A.data, PREC_BF16, K, M, 1, PREC_E5M2, QA.data, QA.scale), 0);
    assert_int_equal(kfp8_quantize_tensor(B.data, PREC_BF16, K, N, 1, PREC_E4M3, QB.data, QB.scale), 0);
    kmatmul_args m = {M, N, K, 0, 1, QA.data, QB.data, Y2.data, NULL, 1.0f, 0.0f, NULL, 0,
                      PREC_E5M2, PREC_E4M3, QA.scale, QB.scale, 0};
    assert_int_equal(kmatmul(KPATH_FP8, KMATMUL_ACC_DEFAULT, KMATMUL_FUSED, &m), 0);
    double *y1 = malloc(M * N * sizeof(double)), *y2 = malloc(M * N * sizeof(double));
    download_bits(&Y1, y1);
    download_bits(&Y2, y2);
    assert_memory_equal(y1, y2, M * N * sizeof(double));
    free(y1); free(y2);
    ktensor_free(&A); ktensor_free(&B); ktensor_free(&Y1); ktensor_free(&Y2); ktensor_free(&QA); ktensor_free(&QB);
}

/* Quantisation with a given scale (delayed scaling's one-pass kernel): with
 * the scale the current amax gives, the bytes of the current path and its
 * amax recorded; kmatmul_quantized_ex with B given as that image, and with
 * a delayed history's first call, the bits of kmatmul_quantized.  Twin: a
 * stale scale (a quarter of it) saturates values, and the comparison sees it. */
static int given_scale_case(unsigned long long seed, float scale_factor, long *saturated)
{
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    const int64_t R = 48, C = 80;
    double *x = malloc(R * C * sizeof(double)), *q1 = malloc(R * C * sizeof(double)), *q2 = malloc(R * C * sizeof(double));
    assert_non_null(x), assert_non_null(q1), assert_non_null(q2);
    fill(&rng, x, R * C, PREC_BF16);
    int64_t shp[2] = {R, C}, shq[2] = {C, R};
    ktensor X = {0}, Q1 = {0}, Q2 = {0};
    assert_int_equal(ktensor_alloc(&X, PREC_BF16, 2, shp), 0);
    assert_int_equal(ktensor_alloc(&Q1, PREC_E4M3, 2, shq), 0);
    assert_int_equal(ktensor_alloc(&Q2, PREC_E4M3, 2, shq), 0);
    assert_int_equal(ktensor_upload(&X, x), 0);
    assert_int_equal(kfp8_quantize_tensor(X.data, PREC_BF16, R, C, 1, PREC_E4M3, Q1.data, Q1.scale), 0);
    double amax = 0;
    for (int64_t i = 0; i < R * C; i++) amax = fmax(amax, fabs(x[i]));
    assert_int_equal(ktensor_set_scale(&Q2, (float)(amax / 448.0) * scale_factor), 0);
    float *amax_dev = NULL, amax_got = -1.0f;
    assert_int_equal(kdevice_alloc((void **)&amax_dev, sizeof(float), "test amax"), 0);
    assert_int_equal(kdevice_fill_bytes(amax_dev, 0, sizeof(float), "test amax"), 0);
    assert_int_equal(kfp8_quantize_tensor_scaled(X.data, PREC_BF16, R, C, 1, PREC_E4M3, Q2.scale, Q2.data, amax_dev), 0);
    assert_int_equal(kdevice_download(&amax_got, amax_dev, sizeof(float), "test amax"), 0);
    assert_true(amax_got == (float)amax);
    download_bits(&Q1, q1);
    download_bits(&Q2, q2);
    *saturated = 0;
    for (int64_t i = 0; i < R * C; i++) *saturated += fabs(q2[i]) == 448.0 && fabs(q1[i]) != 448.0;
    int same = memcmp(q1, q2, R * C * sizeof(double)) == 0;
    kdevice_free(amax_dev);
    free(x), free(q1), free(q2);
    ktensor_free(&X), ktensor_free(&Q1), ktensor_free(&Q2);
    return same;
}

static void test_given_scale(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    unsigned long long seed = test_seed("gpu fp8 given scale");
    long sat = 0;
    assert_true(given_scale_case(seed, 1.0f, &sat));
    assert_int_equal(sat, 0);
    int twin = given_scale_case(seed, 0.25f, &sat);
    print_message("stale scale (x 1/4): %ld values saturated; bytes %s\n", sat, twin ? "equal" : "differ");
    assert_false(twin);
    assert_true(sat > 0);

    /* the GEMM with B given as its current image, and with delayed A and B on a fresh history */
    prec_rng rng;
    prec_rng_seed(&rng, seed ^ 1u);
    const int64_t M = 40, N = 64, K = 96;
    ktensor A = upload_random(&rng, PREC_BF16, M, K), B = upload_random(&rng, PREC_BF16, K, N);
    int64_t sy[2] = {M, N}, sqb[2] = {N, K};
    ktensor Y1 = {0}, Y2 = {0}, Y3 = {0}, QB = {0};
    assert_int_equal(ktensor_alloc(&Y1, PREC_BF16, 2, sy), 0);
    assert_int_equal(ktensor_alloc(&Y2, PREC_BF16, 2, sy), 0);
    assert_int_equal(ktensor_alloc(&Y3, PREC_BF16, 2, sy), 0);
    assert_int_equal(ktensor_alloc(&QB, PREC_E4M3, 2, sqb), 0);
    kmatmul_args x = {M, N, K, 0, 0, A.data, B.data, Y1.data, NULL, 1.0f, 0.0f, NULL, 0,
                      PREC_FP32, PREC_FP32, NULL, NULL, 0};
    assert_int_equal(kmatmul_quantized(KMATMUL_ACC_DEFAULT, KMATMUL_FUSED, &x, PREC_BF16, PREC_E4M3, PREC_E4M3), 0);
    assert_int_equal(kfp8_quantize_tensor(B.data, PREC_BF16, K, N, 1, PREC_E4M3, QB.data, QB.scale), 0);
    kfp8_operand given = {QB.data, QB.scale, NULL};
    x.y = Y2.data;
    assert_int_equal(kmatmul_quantized_ex(KMATMUL_ACC_DEFAULT, KMATMUL_FUSED, &x, PREC_BF16, PREC_E4M3, PREC_E4M3,
                                          NULL, &given), 0);
    kfp8_history ha, hb;
    assert_int_equal(kfp8_history_init(&ha), 0);
    assert_int_equal(kfp8_history_init(&hb), 0);
    kfp8_operand da = {NULL, NULL, &ha}, db = {NULL, NULL, &hb};
    x.y = Y3.data;
    assert_int_equal(kmatmul_quantized_ex(KMATMUL_ACC_DEFAULT, KMATMUL_FUSED, &x, PREC_BF16, PREC_E4M3, PREC_E4M3,
                                          &da, &db), 0);
    assert_true(ha.calls == 1 && hb.calls == 1);
    double *y1 = malloc(M * N * sizeof(double)), *y2 = malloc(M * N * sizeof(double)), *y3 = malloc(M * N * sizeof(double));
    download_bits(&Y1, y1), download_bits(&Y2, y2), download_bits(&Y3, y3);
    assert_memory_equal(y1, y2, M * N * sizeof(double));
    assert_memory_equal(y1, y3, M * N * sizeof(double)); /* a first delayed call scales by its own amax */
    /* the second delayed call on the same tensors: the history holds that same amax, the same bits again */
    x.y = Y3.data;
    assert_int_equal(ktensor_poison(&Y3), 0);
    assert_int_equal(kmatmul_quantized_ex(KMATMUL_ACC_DEFAULT, KMATMUL_FUSED, &x, PREC_BF16, PREC_E4M3, PREC_E4M3,
                                          &da, &db), 0);
    download_bits(&Y3, y3);
    assert_memory_equal(y1, y3, M * N * sizeof(double));
    kfp8_history_free(&ha), kfp8_history_free(&hb);
    free(y1), free(y2), free(y3);
    ktensor_free(&A), ktensor_free(&B), ktensor_free(&Y1), ktensor_free(&Y2), ktensor_free(&Y3), ktensor_free(&QB);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    char why[160];
    assert_false(kmatmul_supports(KPATH_BF16, KMATMUL_ACC_FAST, KMATMUL_FUSED, why, sizeof why));
    assert_non_null(strstr(why, "fp32"));
    kmatmul_args x = {16, 32, 20, 0, 1, (void *)16, (void *)16, (void *)16, NULL, 1.0f, 0.0f, NULL, 0,
                      PREC_E4M3, PREC_E4M3, (const float *)16, (const float *)16, 0};
    assert_int_equal(kmatmul(KPATH_FP8, KMATMUL_ACC_DEFAULT, KMATMUL_FUSED, &x), -1);
    assert_non_null(strstr(kernels_last_error(), "K % 16"));
    assert_non_null(strstr(kernels_last_error(), "K=20"));
    x.K = 0;
    assert_int_equal(kmatmul(KPATH_BF16, KMATMUL_ACC_DEFAULT, KMATMUL_FUSED, &x), -1);
    assert_non_null(strstr(kernels_last_error(), "positive"));
}

/* Stochastic rounding: the same seed gives the same bits; over 2^16 copies of
 * one element (one random draw each) the mean lands on the exact value. */
static void test_adamw_stochastic_rounding(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    const int64_t n = 1 << 16;
    double *p = malloc(n * sizeof(double)), *g = malloc(n * sizeof(double)), *z = calloc(n, sizeof(double));
    double *out1 = malloc(n * sizeof(double)), *out2 = malloc(n * sizeof(double));
    for (int64_t i = 0; i < n; i++) {
        p[i] = 1.0;
        g[i] = 1.0;
    }
    int64_t shp[1] = {n};
    ktensor P = {0}, G = {0}, M = {0}, V = {0};
    assert_int_equal(ktensor_alloc(&P, PREC_BF16, 1, shp), 0);
    assert_int_equal(ktensor_alloc(&G, PREC_BF16, 1, shp), 0);
    assert_int_equal(ktensor_alloc(&M, PREC_FP32, 1, shp), 0);
    assert_int_equal(ktensor_alloc(&V, PREC_FP32, 1, shp), 0);
    /* first step, eps = 0, wd = 0: p' = 1 - lr exactly in fp32 arithmetic */
    kadamw_hparams h = {0.001f, 0.9f, 0.95f, 0.0f, 0.0f, 1, 1234};
    for (int run = 0; run < 2; run++) {
        assert_int_equal(ktensor_upload(&P, p), 0);
        assert_int_equal(ktensor_upload(&G, g), 0);
        assert_int_equal(ktensor_upload(&M, z), 0);
        assert_int_equal(ktensor_upload(&V, z), 0);
        assert_int_equal(kadamw_step(KPATH_BF16, KADAMW_STOCHASTIC, KADAMW_LLMC, n, P.data, NULL, NULL, M.data,
                                     V.data, G.data, &h), 0);
        download_bits(&P, run ? out2 : out1);
    }
    assert_memory_equal(out1, out2, n * sizeof(double));
    double exact = (double)(1.0f - 0.001f), down = 1.0 - 0x1p-8, up = 1.0;
    double mean = 0;
    for (int64_t i = 0; i < n; i++) {
        assert_true(out1[i] == down || out1[i] == up);
        mean += out1[i];
    }
    mean /= (double)n;
    double f = (exact - down) / (up - down), sigma = (up - down) * sqrt(f * (1 - f) / (double)n);
    assert_true(fabs(mean - exact) < 6 * sigma); /* fails by chance with probability ~2e-9 */
    free(p); free(g); free(z); free(out1); free(out2);
    ktensor_free(&P); ktensor_free(&G); ktensor_free(&M); ktensor_free(&V);
}

static void test_polar_express_composition(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("gpu polar express"));
    const int64_t R = 24, C = 40;
    ktensor G = upload_random(&rng, PREC_BF16, R, C);
    int64_t shp[2] = {R, C};
    ktensor X = {0}, Y = {0}, Z = {0};
    assert_int_equal(ktensor_alloc(&X, PREC_BF16, 2, shp), 0);
    assert_int_equal(ktensor_alloc(&Y, PREC_BF16, 2, shp), 0);
    assert_int_equal(ktensor_alloc(&Z, PREC_BF16, 2, shp), 0);
    assert_int_equal(kpolar_express(KPATH_BF16, KPE_TALL_SPLIT, KPE_POLAR_EXPRESS, R, C, G.data, X.data), 0);
    float abc[KPE_STEPS][3];
    kpe_coefficients(KPE_POLAR_EXPRESS, abc);
    assert_int_equal(kpolar_express_normalize(KPATH_BF16, R, C, G.data, Y.data), 0);
    for (int s = 0; s < KPE_STEPS; s++) {
        assert_int_equal(kpolar_express_step(KPATH_BF16, KPE_TALL_SPLIT, R, C, abc[s][0], abc[s][1], abc[s][2],
                                             s % 2 ? Z.data : Y.data, s % 2 ? Y.data : Z.data), 0);
    }
    double *a = malloc(R * C * sizeof(double)), *b = malloc(R * C * sizeof(double));
    download_bits(&X, a);
    download_bits(&Z, b); /* five steps end in Z */
    assert_memory_equal(a, b, R * C * sizeof(double));
    /* orthogonalised: the singular values are near 1, so |X|_F^2 ~ min(R, C) */
    double f2 = 0;
    for (int64_t i = 0; i < R * C; i++) f2 += a[i] * a[i];
    assert_true(f2 > 0.5 * R && f2 < 1.5 * R);
    free(a); free(b);
    ktensor_free(&G); ktensor_free(&X); ktensor_free(&Y); ktensor_free(&Z);
}

static void test_attention_deterministic(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("gpu attention determinism"));
    const int64_t BH = 3, T = 45, D = 64;
    ktensor Q = upload_random(&rng, PREC_BF16, BH * T, D), K = upload_random(&rng, PREC_BF16, BH * T, D);
    ktensor V = upload_random(&rng, PREC_BF16, BH * T, D), G = upload_random(&rng, PREC_BF16, BH * T, D);
    int64_t shp[2] = {BH * T, D}, sl[1] = {BH * T};
    ktensor O = {0}, L = {0}, DQ = {0}, DK = {0}, DV = {0};
    assert_int_equal(ktensor_alloc(&O, PREC_BF16, 2, shp), 0);
    assert_int_equal(ktensor_alloc(&L, PREC_FP32, 1, sl), 0);
    assert_int_equal(ktensor_alloc(&DQ, PREC_BF16, 2, shp), 0);
    assert_int_equal(ktensor_alloc(&DK, PREC_BF16, 2, shp), 0);
    assert_int_equal(ktensor_alloc(&DV, PREC_BF16, 2, shp), 0);
    double *r1 = malloc(3 * BH * T * D * sizeof(double)), *r2 = malloc(3 * BH * T * D * sizeof(double));
    for (int run = 0; run < 2; run++) {
        double *r = run ? r2 : r1;
        assert_int_equal(kattention_forward(KPATH_BF16, KATT_FLASH, BH, T, D, 0.125f, Q.data, K.data, V.data, O.data,
                                            L.data), 0);
        assert_int_equal(kattention_backward(KPATH_BF16, KATT_FLASH, BH, T, D, 0.125f, Q.data, K.data, V.data,
                                             O.data, G.data, L.data, DQ.data, DK.data, DV.data), 0);
        download_bits(&DQ, r);
        download_bits(&DK, r + BH * T * D);
        download_bits(&DV, r + 2 * BH * T * D);
    }
    assert_memory_equal(r1, r2, 3 * BH * T * D * sizeof(double));
    free(r1); free(r2);
    ktensor_free(&Q); ktensor_free(&K); ktensor_free(&V); ktensor_free(&G);
    ktensor_free(&O); ktensor_free(&L); ktensor_free(&DQ); ktensor_free(&DK); ktensor_free(&DV);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_deterministic),
        cmocka_unit_test(test_fp8_scale_from_amax),
        cmocka_unit_test(test_fp8_transposing_quantisers),
        cmocka_unit_test(test_quantized_entry_point),
        cmocka_unit_test(test_given_scale),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_adamw_stochastic_rounding),
        cmocka_unit_test(test_polar_express_composition),
        cmocka_unit_test(test_attention_deterministic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
