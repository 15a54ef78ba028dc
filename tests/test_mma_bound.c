/* tests/test_mma_bound.c — the block error bound of the matrix-unit models
 * (precision/mma.h: mma_block_bound and its parts) against the bit-accurate
 * model itself, on the CPU.  For each native mma.sync model with 16-bit
 * inputs (A100 and H100, fp16 and bf16, fp32 out; fp16 out too), random
 * blocks and chains of blocks go through mma_block / mma_dot, and the
 * difference from the exact c + sum a_i b_i (reference/exact.h, then one
 * rounding to double) must stay within the bound.  The inputs mix three
 * families: generic (random exponents and signs), cancelling (two large
 * products that cancel exactly plus small positive ones, so the alignment
 * truncation dominates the error) and tiny (subnormal inputs, zeros).
 * Twins: the same bound computed with F two bits larger than the model's,
 * or without the alignment term, must be exceeded on some block. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "precision/format.h"
#include "precision/mma.h"
#include "precision/rng.h"
#include "reference/exact.h"
#include "tests/test_util.h"

enum { BLOCKS = 20000, CHAIN_K = 64 };

/* A random value of f: sign, a uniform mantissa, exponent in [lo, hi]. */
static double random_value(prec_rng *r, prec_format f, int lo, int hi)
{
    const int fb = f == PREC_FP16 ? 10 : 7;
    const double mant = 1.0 + floor(prec_rng_uniform(r) * (double)(1 << fb)) / (double)(1 << fb);
    const int e = lo + (int)floor(prec_rng_uniform(r) * (double)(hi - lo + 1));
    double x = ldexp(mant, e);
    if (prec_rng_uniform(r) < 0.5) x = -x;
    return prec_rne(x, f); /* exact except at the format's edges */
}

typedef enum { FAM_GENERIC, FAM_CANCEL, FAM_TINY, FAM_COUNT } family;

/* n products a_i b_i and an fp32 (or fp16) accumulator c. */
static void draw_block(prec_rng *r, const mma_arith *p, family fam, int n, double *a, double *b, double *c)
{
    /* products well inside the output's range (fp16 out: |c + sum| < 2^15) */
    const int e_hi = p->out == PREC_FP16 ? 5 : p->in == PREC_FP16 ? 12 : 40;
    switch (fam) {
    case FAM_GENERIC:
        for (int i = 0; i < n; i++) {
            a[i] = random_value(r, p->in, -e_hi, e_hi);
            b[i] = random_value(r, p->in, -e_hi, e_hi);
        }
        *c = prec_rng_uniform(r) < 0.2 ? 0.0 : prec_rne(random_value(r, p->in, -e_hi, e_hi) * 3.7, p->out);
        break;
    case FAM_CANCEL: {
        /* a0 b0 + a1 b1 = 0 exactly, both at the block's top exponent; the
         * others positive, 2 to 30 binades below, so most lose bits */
        const int top = p->out == PREC_FP16 ? 5 : p->in == PREC_FP16 ? 6 : 20;
        a[0] = fabs(random_value(r, p->in, top, top));
        b[0] = fabs(random_value(r, p->in, top, top));
        a[1] = -a[0];
        b[1] = b[0];
        for (int i = 2; i < n; i++) {
            int drop = 2 + (int)floor(prec_rng_uniform(r) * 29.0);
            int ea = top - drop / 2, eb = top - (drop - drop / 2);
            if (p->in == PREC_FP16 && ea < -14) ea = -14;
            if (p->in == PREC_FP16 && eb < -14) eb = -14;
            a[i] = fabs(random_value(r, p->in, ea, ea));
            b[i] = fabs(random_value(r, p->in, eb, eb));
        }
        *c = 0.0;
        break;
    }
    default: /* tiny: subnormal and zero inputs beside small normal ones */
        for (int i = 0; i < n; i++) {
            const double u = prec_rng_uniform(r);
            const prec_format_info *fi = prec_format_get(p->in);
            if (u < 0.2) a[i] = 0.0;
            else if (u < 0.6) a[i] = prec_rne((prec_rng_uniform(r) - 0.5) * 8 * fi->min_subnormal * 64, p->in);
            else a[i] = random_value(r, p->in, p->in == PREC_FP16 ? -14 : -126, p->in == PREC_FP16 ? -8 : -110);
            b[i] = random_value(r, p->in, p->in == PREC_FP16 ? -14 : -20, p->in == PREC_FP16 ? 2 : 20);
        }
        *c = prec_rng_uniform(r) < 0.5 ? 0.0 : prec_rne(ldexp(prec_rng_uniform(r) - 0.5, -130), p->out);
        break;
    }
}

/* |d - (c + sum a_i b_i)| as a double (the exact difference, rounded once),
 * and |c + sum a_i b_i| likewise. */
static void exact_error(int n, const double *a, const double *b, double c, double d, double *err, double *y_abs)
{
    exact_acc acc;
    exact_acc_init(&acc);
    exact_acc_add(&acc, c);
    for (int i = 0; i < n; i++) exact_acc_add_product(&acc, a[i], b[i]);
    *y_abs = fabs(exact_acc_round(&acc, PREC_RNE));
    exact_acc_add(&acc, -d);
    *err = fabs(exact_acc_round(&acc, PREC_RNE));
}

typedef enum { TWIN_NONE, TWIN_F_PLUS_2, TWIN_NO_ALIGN } twin;

/* The bound as the twin computes it. */
static double bound_of(const mma_arith *p, twin tw, int n, const double *a, const double *b, double c_abs, double y_abs)
{
    mma_arith q = *p;
    if (tw == TWIN_F_PLUS_2) q.frac_bits += 2;
    if (tw == TWIN_NO_ALIGN) return mma_out_bound(&q, y_abs);
    return mma_block_bound(&q, n, a, b, c_abs, y_abs);
}

/* Blocks of every family through model m; returns how many exceeded the
 * (twin's) bound, and the largest error / bound ratio in *worst. */
static int run_blocks(const mma_model *m, twin tw, prec_rng *r, double *worst)
{
    const mma_arith *p = &m->arith;
    int over = 0;
    *worst = 0;
    for (int it = 0; it < BLOCKS; it++) {
        double a[64], b[64], c;
        const int n = p->block;
        draw_block(r, p, (family)(it % FAM_COUNT), n, a, b, &c);
        const double d = mma_dot_values(p, n, a, b, c); /* one block: n = L */
        double err, y_abs;
        exact_error(n, a, b, c, d, &err, &y_abs);
        const double B = bound_of(p, tw, n, a, b, fabs(c), y_abs) * (1 + 0x1p-40);
        if (!(err <= B)) over++;
        if (B > 0 && err / B > *worst) *worst = err / B;
    }
    return over;
}

/* Chains of CHAIN_K products (several blocks), the bound accumulated block by
 * block with the previous block's bound as c's error. */
static int run_chains(const mma_model *m, prec_rng *r, double *worst)
{
    const mma_arith *p = &m->arith;
    int over = 0;
    *worst = 0;
    for (int it = 0; it < BLOCKS / 10; it++) {
        double a[CHAIN_K], b[CHAIN_K], c;
        for (int s = 0; s < CHAIN_K; s += p->block) draw_block(r, p, (family)((it + s) % FAM_COUNT), p->block, a + s, b + s, &c);
        c = 0.0;
        const double d = mma_dot_values(p, CHAIN_K, a, b, c);
        double e = 0, y_abs = 0, err;
        exact_acc acc;
        exact_acc_init(&acc);
        for (int s = 0; s < CHAIN_K; s += p->block) {
            const double c_abs = s == 0 ? 0.0 : y_abs + e; /* |c computed| */
            for (int i = s; i < s + p->block; i++) exact_acc_add_product(&acc, a[i], b[i]);
            exact_acc tmp = acc;
            const double y_new = fabs(exact_acc_round(&tmp, PREC_RNE)) * (1 + 0x1p-52);
            e += mma_block_bound(p, p->block, a + s, b + s, c_abs, y_new + e);
            y_abs = y_new;
        }
        exact_error(CHAIN_K, a, b, 0.0, d, &err, &y_abs);
        const double B = e * (1 + 0x1p-40);
        if (!(err <= B)) over++;
        if (B > 0 && err / B > *worst) *worst = err / B;
    }
    return over;
}

static const struct {
    const char *gen;
    prec_format in, out;
} cases[] = {
    {"a100", PREC_BF16, PREC_FP32}, {"a100", PREC_FP16, PREC_FP32}, {"h100", PREC_BF16, PREC_FP32},
    {"h100", PREC_FP16, PREC_FP32}, {"h100", PREC_FP16, PREC_FP16}, {"a100", PREC_FP16, PREC_FP16},
};

static void test_block_bound_holds(void **state)
{
    (void)state;
    prec_rng r;
    prec_rng_seed(&r, test_seed("mma_block_bound"));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const mma_model *m = mma_model_find(cases[i].gen, "mma.sync", cases[i].in, cases[i].out);
        assert_non_null(m);
        double worst;
        int over = run_blocks(m, TWIN_NONE, &r, &worst);
        print_message("%s %s->%s: %d blocks, worst error/bound %.3f\n", cases[i].gen, prec_format_name(cases[i].in),
                      prec_format_name(cases[i].out), BLOCKS, worst);
        if (over) fail_msg("%s %s: %d of %d blocks over the bound", cases[i].gen, prec_format_name(cases[i].in), over, BLOCKS);
        /* the bound is not vacuous: some block uses a fair share of it */
        assert_true(worst > 0.05);
        if (cases[i].out == PREC_FP32) {
            over = run_chains(m, &r, &worst);
            print_message("  chains of %d: worst error/bound %.3f\n", CHAIN_K, worst);
            if (over) fail_msg("%s %s: %d chains over the bound", cases[i].gen, prec_format_name(cases[i].in), over);
        }
    }
}

static void test_twin_f_plus_2_fails(void **state)
{
    (void)state;
    prec_rng r;
    prec_rng_seed(&r, test_seed("mma_block_bound_twin_f"));
    for (size_t i = 0; i < 4; i++) { /* the fp32-out cases */
        const mma_model *m = mma_model_find(cases[i].gen, "mma.sync", cases[i].in, cases[i].out);
        double worst;
        int over = run_blocks(m, TWIN_F_PLUS_2, &r, &worst);
        print_message("twin F+2 %s %s: %d blocks over, worst %.3f\n", cases[i].gen, prec_format_name(cases[i].in), over,
                      worst);
        if (over == 0) fail_msg("twin: a bound claiming F+2 alignment bits held on every block (%s %s)", cases[i].gen,
                                prec_format_name(cases[i].in));
    }
}

static void test_twin_no_alignment_term_fails(void **state)
{
    (void)state;
    prec_rng r;
    prec_rng_seed(&r, test_seed("mma_block_bound_twin_align"));
    for (size_t i = 0; i < 4; i++) {
        const mma_model *m = mma_model_find(cases[i].gen, "mma.sync", cases[i].in, cases[i].out);
        double worst;
        int over = run_blocks(m, TWIN_NO_ALIGN, &r, &worst);
        if (over == 0) fail_msg("twin: the output rounding alone bounded every block (%s %s)", cases[i].gen,
                                prec_format_name(cases[i].in));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_bound_holds),
        cmocka_unit_test(test_twin_f_plus_2_fails),
        cmocka_unit_test(test_twin_no_alignment_term_fails),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
