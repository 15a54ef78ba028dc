/* tests/test_kernels_gpu.c — on a GPU: the check matrix (quick shapes) of
 * the embedding, norm, softmax, activation, residual, transpose, rope and
 * grad-norm ops passes; each planted-bug twin fails; and kernels whose
 * order is fixed are bitwise repeatable.  Skips visibly without a GPU. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/check/check.h"
#include "kernels/common/ktensor_io.h"
#include "kernels/embedding.h"
#include "kernels/grad_norm.h"
#include "kernels/layernorm.h"
#include "tests/test_util.h"

static const char *const my_ops[] = {"embedding", "rmsnorm", "layernorm", "softmax", "logsumexp", "gelu_tanh",
                                     "gelu_erf", "relu2", "leaky_relu2", "residual", "transpose", "grad_norm", "rope"};
static const int n_my_ops = (int)(sizeof my_ops / sizeof my_ops[0]);

static int run_matrix(const char *op, kbug bug, uint64_t seed, kcheck_summary *s)
{
    kcheck_options o = {0};
    o.op = op;
    o.path = -1;
    o.bug = bug;
    o.seed = seed;
    o.quick = 1;
    o.table = stdout;
    return kcheck_run(&o, s);
}

static void test_matrix_passes(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    uint64_t seed = test_seed("matrix_passes");
    for (int i = 0; i < n_my_ops; i++) {
        kcheck_summary s;
        int status = run_matrix(my_ops[i], KBUG_NONE, seed, &s);
        print_message("%s: %d rows, %d FAIL, %d errors\n", my_ops[i], s.rows, s.failed_rows, s.errors);
        assert_int_equal(s.errors, 0);
        assert_int_equal(s.failed_rows, 0);
        assert_true(s.rows > 0);
        assert_int_equal(status, 0);
    }
}

static void test_planted_bugs_fail(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    uint64_t seed = test_seed("planted_bugs_fail");
    for (int b = KBUG_DROP_TERM; b < KBUG_COUNT; b++)
        for (int i = 0; i < n_my_ops; i++) {
            kcheck_summary s;
            int status = run_matrix(my_ops[i], (kbug)b, seed, &s);
            print_message("%s --bug %s: %d of %d twins caught\n", my_ops[i], kbug_name((kbug)b), s.twins_caught, s.twins);
            assert_int_equal(s.errors, 0);
            assert_int_equal(s.twins_caught, s.twins); /* every twin FAILs at least one row */
            assert_int_equal(status, 0);
        }
    assert_int_equal(kernels_planted_bug(), KBUG_NONE); /* the harness resets it */
}

/* Same inputs, same variant: identical bytes, for the ops with reductions. */
static void test_bitwise_repeatable(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("bitwise_repeatable"));
    const int64_t N = 300, V = 40, C = 257;
    int64_t nc[2] = {N, C}, vc[2] = {V, C};
    double *x = malloc(N * C * sizeof(double)), *a = malloc(V * C * sizeof(double)), *b = malloc(V * C * sizeof(double));
    int32_t tok[300];
    assert_non_null(x);
    assert_non_null(a);
    assert_non_null(b);
    for (int64_t t = 0; t < N; t++) tok[t] = (int32_t)(prec_rng_uniform(&rng) * prec_rng_uniform(&rng) * V);
    kcheck_fill_normal(&rng, x, N * C, 0.0, 1.0, PREC_BF16);
    kcheck_fill_normal(&rng, a, V * C, 0.0, 1.0, PREC_BF16);
    ktensor dout = {0}, dt = {0}, g[2] = {{0}};
    int32_t *dtok = NULL;
    void *ws = NULL, *ws2 = NULL;
    float *norm = NULL, n1, n2;
    assert_int_equal(ktensor_alloc(&dout, PREC_BF16, 2, nc), 0);
    assert_int_equal(ktensor_alloc(&dt, PREC_BF16, 2, vc), 0);
    assert_int_equal(ktensor_upload(&dout, x), 0);
    assert_int_equal(kdevice_alloc((void **)&dtok, sizeof tok, "tokens"), 0);
    assert_int_equal(kdevice_upload(dtok, tok, sizeof tok, "tokens"), 0);
    size_t wsb = kembedding_backward_workspace(N, V, KEMBED_SORTED);
    assert_int_equal(kdevice_alloc(&ws, wsb, "ws"), 0);
    for (int rep = 0; rep < 2; rep++) {
        assert_int_equal(ktensor_upload(&dt, a), 0);
        assert_int_equal(kembedding_backward(&dt, &dout, dtok, ws, wsb, KEMBED_SORTED), 0);
        assert_int_equal(kernels_sync("embedding"), 0);
        assert_int_equal(ktensor_download(&dt, rep ? b : x), 0); /* x reused as the first result */
    }
    assert_memory_equal(x, b, V * C * sizeof(double));
    /* grad norm over two tensors, block tree */
    g[0] = dout;
    g[1] = dt;
    size_t gwb = kgrad_norm_workspace(g, 2, KGRADNORM_BLOCK_TREE);
    assert_int_equal(kdevice_alloc(&ws2, gwb, "ws2"), 0);
    assert_int_equal(kdevice_alloc((void **)&norm, sizeof(float), "norm"), 0);
    assert_int_equal(kgrad_norm(norm, g, 2, ws2, gwb, KGRADNORM_BLOCK_TREE), 0);
    assert_int_equal(kdevice_download(&n1, norm, sizeof n1, "norm"), 0);
    assert_int_equal(kgrad_norm(norm, g, 2, ws2, gwb, KGRADNORM_BLOCK_TREE), 0);
    assert_int_equal(kdevice_download(&n2, norm, sizeof n2, "norm"), 0);
    assert_memory_equal(&n1, &n2, sizeof n1);
    ktensor_free(&dout);
    ktensor_free(&dt);
    kdevice_free(dtok);
    kdevice_free(ws);
    kdevice_free(ws2);
    kdevice_free(norm);
    free(x);
    free(a);
    free(b);
}

/* The embedding backward's two variants give the same bits (embedding.h):
 * skewed tokens (one token holds about a third of 5000 rows, so its run
 * spans many of the sorted kernel's 32-row batches), 769 columns (a partial
 * column tile), out-of-range tokens.  Twin: the sorted variant with the
 * planted drop-term against the clean row_owner must differ. */
static int embedding_variants_differ(prec_format f, kbug sorted_bug, prec_rng *rng)
{
    const int64_t N = 5000, V = 70, C = 769;
    int64_t nc[2] = {N, C}, vc[2] = {V, C};
    double *x = malloc(N * C * sizeof(double)), *a = malloc(V * C * sizeof(double));
    double *got[KEMBED_NVARIANTS] = {malloc(V * C * sizeof(double)), malloc(V * C * sizeof(double))};
    int32_t *tok = malloc(N * sizeof(int32_t));
    assert_true(x && a && got[0] && got[1] && tok);
    for (int64_t t = 0; t < N; t++) {
        double u = prec_rng_uniform(rng);
        tok[t] = u < 0.01 ? -1 : u < 0.02 ? (int32_t)V : (int32_t)(u * u * u * V);
    }
    kcheck_fill_normal(rng, x, N * C, 0.0, 1.0, f);
    kcheck_fill_normal(rng, a, V * C, 0.0, 1.0, f);
    ktensor dout = {0}, dt = {0};
    int32_t *dtok = NULL;
    assert_int_equal(ktensor_alloc(&dout, f, 2, nc), 0);
    assert_int_equal(ktensor_alloc(&dt, f, 2, vc), 0);
    assert_int_equal(ktensor_upload(&dout, x), 0);
    assert_int_equal(kdevice_alloc((void **)&dtok, N * sizeof(int32_t), "tokens"), 0);
    assert_int_equal(kdevice_upload(dtok, tok, N * sizeof(int32_t), "tokens"), 0);
    for (int v = 0; v < KEMBED_NVARIANTS; v++) {
        void *ws = NULL;
        size_t wsb = kembedding_backward_workspace(N, V, v);
        if (wsb) assert_int_equal(kdevice_alloc(&ws, wsb, "ws"), 0);
        assert_int_equal(ktensor_upload(&dt, a), 0);
        kernels_set_planted_bug(v == KEMBED_SORTED ? sorted_bug : KBUG_NONE);
        int rc = kembedding_backward(&dt, &dout, dtok, ws, wsb, v);
        kernels_set_planted_bug(KBUG_NONE);
        assert_int_equal(rc, 0);
        assert_int_equal(kernels_sync("embedding"), 0);
        assert_int_equal(ktensor_download(&dt, got[v]), 0);
        kdevice_free(ws);
    }
    int64_t differ = 0;
    for (int64_t i = 0; i < V * C; i++) differ += memcmp(&got[0][i], &got[1][i], sizeof(double)) != 0;
    print_message("embedding %s sorted%s vs row_owner: %lld of %lld elements differ\n", prec_format_name(f),
                  sorted_bug == KBUG_DROP_TERM ? " (drop-term twin)" : "", (long long)differ, (long long)(V * C));
    ktensor_free(&dout);
    ktensor_free(&dt);
    kdevice_free(dtok);
    free(x), free(a), free(got[0]), free(got[1]), free(tok);
    return differ != 0;
}

static void test_embedding_variants_same_bits(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("embedding variants same bits"));
    const prec_format fs[] = {PREC_FP32, PREC_BF16, PREC_FP16};
    for (int i = 0; i < 3; i++) {
        assert_false(embedding_variants_differ(fs[i], KBUG_NONE, &rng));
        assert_true(embedding_variants_differ(fs[i], KBUG_DROP_TERM, &rng));
    }
}

/* Wrong shapes are refused with a message, not run. */
static void test_bad_shapes_refused(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    ktensor x = {0}, y = {0}, g = {0}, bias = {0};
    int64_t s1[2] = {4, 8}, s2[2] = {4, 9}, c[1] = {8};
    float *stats = NULL;
    assert_int_equal(ktensor_alloc(&x, PREC_BF16, 2, s1), 0);
    assert_int_equal(ktensor_alloc(&y, PREC_BF16, 2, s2), 0);
    assert_int_equal(ktensor_alloc(&g, PREC_BF16, 1, c), 0);
    assert_int_equal(ktensor_alloc(&bias, PREC_BF16, 1, c), 0);
    assert_int_equal(kdevice_alloc((void **)&stats, 8 * sizeof(float), "stats"), 0);
    assert_int_equal(klayernorm_forward(&y, stats, stats + 4, &x, &g, &bias, 1e-5f, 0), -1);
    assert_non_null(strstr(kernels_last_error(), "layernorm"));
    assert_int_equal(klayernorm_forward(&x, stats, stats + 4, &x, &g, &bias, 1e-5f, 99), -1);
    ktensor_free(&x);
    ktensor_free(&y);
    ktensor_free(&g);
    ktensor_free(&bias);
    kdevice_free(stats);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matrix_passes),
        cmocka_unit_test(test_planted_bugs_fail),
        cmocka_unit_test(test_bitwise_repeatable),
        cmocka_unit_test(test_embedding_variants_same_bits),
        cmocka_unit_test(test_bad_shapes_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
