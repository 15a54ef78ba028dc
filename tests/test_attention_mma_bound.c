/* tests/test_attention_mma_bound.c — the flash_mma check bound
 * (kernels/check/compare_attention_mma.c) against the host emulation of the
 * kernels' arithmetic (kernels/attention_mma_arith.h, the library code the
 * trainer's CPU backend runs), without a GPU.  The emulation follows
 * kernels/attention_mma.cu operation by operation: score and product chains
 * through the bit-accurate matrix-unit model (precision/mma.h, one k16
 * instruction at a time with the running accumulator as c), the online
 * softmax over 64-key tiles with fp32 float operations, the row sum in the
 * kernel's order (4 threads of 16 sequential terms, a butterfly), P and dS
 * rounded into the path's format, the 16-key chunks past a row skipped, the
 * delta warp sum.  Host expf and
 * logf stand for CUDA's (both within the bound's 2 and 1 ulps).  Every
 * output (o, lse, dq, dk, dv) must pass kcheck's verdict (every element
 * within its bound, RMS within the probabilistic one) against the MPFR
 * reference, for the A100 and H100 models, bf16 and fp16, flash_mma and
 * flash_mma_exp2.  Twins: the emulation with the planted drop-term bug
 * (every score loses its last term) and with truncated stores must fail. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/attention_mma_arith.h"
#include "kernels/check/check.h"
#include "kernels/check/check_attention_mma.h"
#include "precision/format.h"
#include "precision/mma.h"
#include "precision/rng.h"
#include "reference/attention.h"
#include "tests/attention_mma_verdict.h"
#include "tests/test_util.h"

typedef mma_verdicts verdicts;

/* One head: emulate, bound, compare; rows into v. */
static void run_head(const katt_mma_arith *e, prec_rng *rng, verdicts *v)
{
    const int64_t T = e->T, D = e->D, n = T * D;
    double *q = malloc(n * 8), *k = malloc(n * 8), *vv = malloc(n * 8), *g = malloc(n * 8), *o = malloc(n * 8),
           *lse = malloc(T * 8), *dq = malloc(n * 8), *dk = malloc(n * 8), *dv = malloc(n * 8);
    assert_true(q && k && vv && g && o && lse && dq && dk && dv);
    kcheck_fill_normal(rng, q, n, 0, 1, e->f);
    kcheck_fill_normal(rng, k, n, 0, 1, e->f);
    kcheck_fill_normal(rng, vv, n, 0, 1, e->f);
    kcheck_fill_normal(rng, g, n, 0, 1, e->f);
    assert_int_equal(katt_mma_arith_forward(e, q, k, vv, o, lse), 0);
    assert_int_equal(katt_mma_arith_backward(e, q, k, vv, g, o, lse, dq, dk, dv), 0);
    const katt_mma_head h = {q, k, vv, g, T, D, e->scale, e->exp2, e->f, e->mma};
    mma_verdict_head(&h, o, lse, dq, dk, dv, v, NULL);
    free(q); free(k); free(vv); free(g); free(o); free(lse); free(dq); free(dk); free(dv);
}

typedef struct {
    const char *gen;
    prec_format f;
    int exp2;
    int long_shapes; /* also the multi-tile shapes (T 130: three 64-key tiles) */
} config;

static const int64_t shapes[][2] = {{70, 16}, {20, 128}, {33, 32}, {130, 64}};

/* Every config on its shapes; returns the verdicts (heads: *heads). */
static verdicts run_all(const config *cfg, int n_cfg, int bug, unsigned long long seed, int *heads)
{
    verdicts all = {0, 0, ""};
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    *heads = 0;
    for (int c = 0; c < n_cfg; c++) {
        const mma_model *m = mma_model_find(cfg[c].gen, "mma.sync", cfg[c].f, PREC_FP32);
        assert_non_null(m);
        print_message("%s %s %s%s\n", cfg[c].gen, prec_format_name(cfg[c].f), cfg[c].exp2 ? "flash_mma_exp2" : "flash_mma",
                      bug ? " (planted bug)" : "");
        const size_t n_shapes = cfg[c].long_shapes ? 4 : 3;
        for (size_t s = 0; s < n_shapes; s++) {
            katt_mma_arith e = {&m->arith, cfg[c].f, cfg[c].exp2, bug, shapes[s][0], shapes[s][1],
                     (float)(1.0 / sqrt((double)shapes[s][1]))};
            verdicts v = {0, 0, ""};
            run_head(&e, &rng, &v);
            (*heads)++;
            all.rows += v.rows;
            if (v.failed && all.failed++ == 0) snprintf(all.first_fail, sizeof all.first_fail, "%.150s", v.first_fail);
        }
    }
    return all;
}

/* H100 (the device the project measures on) in full, A100 on the short shapes. */
static const config full[] = {
    {"h100", PREC_BF16, 0, 1}, {"h100", PREC_BF16, 1, 1}, {"h100", PREC_FP16, 0, 1}, {"h100", PREC_FP16, 1, 1},
    {"a100", PREC_BF16, 0, 0}, {"a100", PREC_FP16, 1, 0},
};
static const config twins[] = {{"h100", PREC_BF16, 0, 0}, {"a100", PREC_FP16, 1, 0}};

static void test_emulated_kernels_within_bound(void **state)
{
    (void)state;
    int heads;
    verdicts v = run_all(full, 6, KBUG_NONE, test_seed("attention_mma_bound"), &heads);
    if (v.failed) fail_msg("%d heads with a FAIL row; first: %s", v.failed, v.first_fail);
}

static void test_twin_drop_term_fails(void **state)
{
    (void)state;
    int heads;
    verdicts v = run_all(twins, 2, KBUG_DROP_TERM, test_seed("attention_mma_bound_drop"), &heads);
    print_message("drop-term: %d of %d heads with a FAIL row\n", v.failed, heads);
    assert_int_equal(v.failed, heads); /* every head */
}

static void test_twin_truncate_output_fails(void **state)
{
    (void)state;
    int heads;
    verdicts v = run_all(twins, 2, KBUG_TRUNCATE_OUTPUT, test_seed("attention_mma_bound_trunc"), &heads);
    print_message("truncate-output: %d of %d heads with a FAIL row\n", v.failed, heads);
    assert_true(v.failed > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_emulated_kernels_within_bound),
        cmocka_unit_test(test_twin_drop_term_fails),
        cmocka_unit_test(test_twin_truncate_output_fails),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
