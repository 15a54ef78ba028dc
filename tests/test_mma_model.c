/* tests/test_mma_model.c — the matrix-unit models (precision/mma.h) on the
 * CPU:
 *  1. every published feature, probed through the same probe families the
 *     GPU runs, comes out as published for each generation (each row cites
 *     its source), and a model with one parameter off fails its row;
 *  2. the integer block arithmetic equals an independent double-precision
 *     transcription of the truncated fused dot-product-add (MMA-Sim's
 *     t_fdpa: trunc(s * 2^(e - emax + F)) summed, then rounded), on random
 *     inputs, and a floor-instead-of-truncate reference differs;
 *  3. with enough alignment bits and one block the model is a correctly
 *     rounded dot product (RNE and RZ against prec_round2 of the exact sum),
 *     and with too few bits it is not. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/probe/probe_fingerprint.h"
#include "precision/mma.h"
#include "precision/rng.h"
#include "tests/test_util.h"

/* ---- fingerprints through an arbitrary arithmetic --------------------------- */

static int run_arith(void *ctx, const probe_target *t, int n, const void *a, const void *b, const uint32_t *c,
                     uint32_t *d, char *err, size_t err_len)
{
    (void)err;
    (void)err_len;
    const mma_arith *p = ctx;
    const int sz = mma_elem_bytes(t->in);
    for (int i = 0; i < n; i++)
        d[i] = mma_dot(p, t->k, (const uint8_t *)a + (size_t)i * t->k * sz, (const uint8_t *)b + (size_t)i * t->k * sz,
                       c[i]);
    return 0;
}

/* The value text of one property of a fingerprint held in buf, or "" when
 * absent. */
static void value_of(const char *buf, const char *route, const char *in, const char *out, const char *prop, char *val,
                     size_t len)
{
    char key[256];
    snprintf(key, sizeof key,
             "{\"record\":\"property\",\"route\":\"%s\",\"in\":\"%s\",\"out\":\"%s\",\"property\":\"%s\",\"value\":",
             route, in, out, prop);
    const char *p = strstr(buf, key);
    val[0] = '\0';
    if (!p) return;
    p += strlen(key);
    const char *e = strstr(p, ",\"detail\"");
    size_t n = e ? (size_t)(e - p) : 0;
    if (n >= len) n = len - 1;
    memcpy(val, p, n);
    val[n] = '\0';
}

/* Fingerprint of one target under arithmetic p, into a malloc'd buffer. */
static char *fingerprint_of(const mma_arith *p, const char *route, int k)
{
    char *buf = NULL, err[256];
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    assert_non_null(mem);
    probe_exec ex = {"test", run_arith, (void *)p};
    probe_target t = {route, p->in, p->out, k};
    assert_int_equal(probe_fingerprint_target(mem, &ex, &t, err, sizeof err), 0);
    fclose(mem);
    return buf;
}

/* ---- the published features ------------------------------------------------ */

typedef struct {
    const char *gen, *route, *in, *out, *property, *value;
    const char *source;
} published;

/* Sources:
 *  [F21]  Fasi, Higham, Mikaitis, Pranesh, "Numerical behavior of NVIDIA
 *         tensor cores", PeerJ Comput. Sci. 7:e330 (2021).
 *  [SIM]  Xie et al., MMA-Sim, arXiv:2511.10909 (2025), nv_ptx/sim.py
 *         (F_table, L_max_table, rho) and arithmetic/fdpa.py (e_zero).
 *  [KM]   Khattak and Mikaitis, "Accurate models of NVIDIA tensor cores",
 *         arXiv:2512.07004 (2025); models V100TC.m, A100TC.m, H100TC.m,
 *         B200TC.m (neab = F - 23, fma = L, frmode, min_exp_limit).
 *  [FTTN] Li et al., arXiv:2403.00232 (2024): H100 keeps more extra bits
 *         than V100 and A100 (their matmul test: 191.875 vs 0).
 *  [DSV3] DeepSeek-AI, DeepSeek-V3 technical report, arXiv:2412.19437,
 *         sec. 3.3.2: FP8 GEMM on Hopper keeps about 14 bits (13 fraction
 *         bits) in accumulation.
 * Block sizes equal to the instruction's K read ">=K": the probe cannot see
 * past one instruction, and the published L equals K there. */
static const published table[] = {
    /* V100 */
    {"v100", "mma.sync", "fp16", "fp32", "products_exact", "\"exact\"", "[F21] sec. 4: products exact"},
    {"v100", "mma.sync", "fp16", "fp32", "alignment_frac_bits", "23", "[SIM] F=23 Volta; [KM] V100TC neab=0"},
    {"v100", "mma.sync", "fp16", "fp32", "alignment_rounding", "\"truncate\"", "[F21]: shifted-out bits truncated"},
    {"v100", "mma.sync", "fp16", "fp32", "output_rounding", "\"rz\"", "[F21]: normalisation rounds toward zero"},
    {"v100", "mma.sync", "fp16", "fp32", "block_size", "\">=4\"", "[F21] 4-term inner products; [KM] fma=4"},
    {"v100", "mma.sync", "fp16", "fp32", "inner_normalisation", "\"none (fused)\"", "[F21]: no normalisation inside"},
    {"v100", "mma.sync", "fp16", "fp32", "monotonicity", "\"violated\"", "[F21] sec. 6: non-monotonic sums"},
    {"v100", "mma.sync", "fp16", "fp32", "subnormal_inputs", "\"kept\"", "[F21]: subnormal inputs supported"},
    {"v100", "mma.sync", "fp16", "fp16", "output_rounding", "\"rne\"", "[SIM] RNE-FP16; [KM] V100TC frmode rne"},
    /* A100 */
    {"a100", "mma.sync", "fp16", "fp32", "alignment_frac_bits", "24", "[SIM] F=24 Ampere; [KM] A100TC neab=1"},
    {"a100", "mma.sync", "fp16", "fp32", "block_size", "8", "[F21] 8-term blocks on A100; [KM] fma=8"},
    {"a100", "mma.sync", "bf16", "fp32", "block_size", "8", "[F21]; [SIM] 16 bytes / 2; [KM] fma=8"},
    {"a100", "mma.sync", "tf32", "fp32", "block_size", "4", "[F21] 4-term tf32 blocks; [KM] tf32 fma=4"},
    {"a100", "mma.sync", "fp16", "fp32", "output_rounding", "\"rz\"", "[F21]: RZ on A100"},
    {"a100", "mma.sync", "tf32", "fp32", "tf32_conversion", "\"truncate\"", "[SIM] truncate_fp32_to_tf32; [KM] RZ"},
    {"a100", "mma.sync", "bf16", "fp32", "zero_exponent", "-132", "[SIM] e_zero -132 (Ampere)"},
    {"a100", "mma.sync", "bf16", "fp32", "subnormal_outputs", "\"kept\"", "[F21]: subnormal outputs supported"},
    /* H100 */
    {"h100", "mma.sync", "fp16", "fp32", "alignment_frac_bits", "25", "[SIM] F=25 Hopper; [KM] H100TC neab=2"},
    {"h100", "wgmma", "fp16", "fp32", "alignment_frac_bits", "25", "[SIM] WGMMA F=25; [KM] neab=2"},
    {"h100", "wgmma", "bf16", "fp32", "block_size", "\">=16\"", "[SIM] 32 bytes / 2; [KM] fma=16"},
    {"h100", "wgmma", "tf32", "fp32", "block_size", "\">=8\"", "[SIM] 32 bytes / 4; [KM] tf32 fma=8"},
    {"h100", "wgmma", "e4m3", "fp32", "alignment_frac_bits", "13", "[SIM] fp8 F=13; [KM] H100TC fp8 neab=-10"},
    {"h100", "wgmma", "e4m3", "fp32", "output_frac_bits", "13", "[SIM] RZ-E8M13; [DSV3] ~14 bits"},
    {"h100", "wgmma", "e5m2", "fp32", "output_frac_bits", "13", "[SIM] RZ-E8M13"},
    {"h100", "wgmma", "e4m3", "fp32", "block_size", "\">=32\"", "[SIM] 32 bytes / 1; [KM] fp8 fma=32"},
    {"h100", "wgmma", "e4m3", "fp16", "output_rounding", "\"rne\"", "[SIM] RNE-FP16; [KM] frmode rne"},
    {"h100", "wgmma", "bf16", "fp32", "zero_exponent", "-133", "[SIM] e_zero -133; [KM] min_exp_limit -133"},
    /* B200 */
    {"b200", "tcgen05", "e4m3", "fp32", "alignment_frac_bits", "25", "[SIM] tcgen05 F=25; [KM] B200TC neab=2"},
    {"b200", "tcgen05", "e4m3", "fp32", "output_frac_bits", "23", "[SIM] tcgen05 fp8 rho RZ-FP32"},
    {"b200", "tcgen05", "fp16", "fp32", "output_rounding", "\"rz\"", "[SIM] RZ-FP32; [KM] frmode rz"},
    {"b200", "tcgen05", "tf32", "fp32", "block_size", "\">=8\"", "[KM] B200TC tf32 fma=8"},
};

static void check_published_row(const published *row, const mma_arith *p, int k, int expect_match)
{
    char *buf = fingerprint_of(p, row->route, k);
    char val[96];
    value_of(buf, row->route, row->in, row->out, row->property, val, sizeof val);
    free(buf);
    if (expect_match && strcmp(val, row->value) != 0)
        fail_msg("%s %s %s->%s %s: model gives %s, published %s (%s)", row->gen, row->route, row->in, row->out,
                 row->property, val[0] ? val : "(no record)", row->value, row->source);
    if (!expect_match && strcmp(val, row->value) == 0)
        fail_msg("planted twin of %s %s %s->%s still gives the published %s = %s: the check cannot fail", row->gen,
                 row->route, row->in, row->out, row->property, val);
}

static const mma_model *model_of(const published *row)
{
    prec_format in, out;
    assert_int_equal(prec_format_parse(row->in, &in), 0);
    assert_int_equal(prec_format_parse(row->out, &out), 0);
    const mma_model *m = mma_model_find(row->gen, row->route, in, out);
    if (!m) fail_msg("no model %s %s %s->%s", row->gen, row->route, row->in, row->out);
    return m;
}

static void test_published_features(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        const mma_model *m = model_of(&table[i]);
        check_published_row(&table[i], &m->arith, m->instr_k, 1);
    }
}

/* [FTTN]: H100 keeps more extra alignment bits than A100, A100 more than V100. */
static void test_fttn_ordering(void **state)
{
    (void)state;
    const char *gens[3] = {"v100", "a100", "h100"};
    int F[3];
    for (int g = 0; g < 3; g++) {
        const mma_model *m = mma_model_find(gens[g], "mma.sync", PREC_FP16, PREC_FP32);
        assert_non_null(m);
        char *buf = fingerprint_of(&m->arith, "mma.sync", m->instr_k), val[32];
        value_of(buf, "mma.sync", "fp16", "fp32", "alignment_frac_bits", val, sizeof val);
        free(buf);
        F[g] = atoi(val);
    }
    assert_true(F[0] < F[1] && F[1] < F[2]);
}

/* Planted twins: each published row whose model is given one wrong
 * parameter must no longer match. */
static void test_published_twins(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        const published *row = &table[i];
        const mma_model *m = model_of(row);
        mma_arith bad = m->arith;
        const char *p = row->property;
        if (strcmp(p, "alignment_frac_bits") == 0) bad.frac_bits -= 1;
        else if (strcmp(p, "alignment_rounding") == 0) bad.align = MMA_ALIGN_FLOOR;
        else if (strcmp(p, "output_rounding") == 0) bad.out_mode = bad.out_mode == PREC_RZ ? PREC_RNE : PREC_RZ;
        else if (strcmp(p, "block_size") == 0) bad.block = bad.block / 2;
        else if (strcmp(p, "output_frac_bits") == 0) bad.out_frac_bits -= 1;
        else if (strcmp(p, "zero_exponent") == 0) bad.zero_exp += 1;
        else if (strcmp(p, "subnormal_inputs") == 0) bad.flush_in_subnormals = true;
        else if (strcmp(p, "subnormal_outputs") == 0) bad.flush_out_subnormals = true;
        else if (strcmp(p, "monotonicity") == 0 || strcmp(p, "inner_normalisation") == 0) bad.block = 1;
        else if (strcmp(p, "products_exact") == 0) bad.frac_bits = 8;
        else if (strcmp(p, "tf32_conversion") == 0) continue; /* a format fact, not a parameter */
        else fail_msg("no planted twin for property %s", p);
        check_published_row(row, &bad, m->instr_k, 0);
    }
}

/* ---- the integer arithmetic against an independent transcription -------- */

/* MMA-Sim's t_fdpa in doubles (fdpa.py, e_zero revision), ours to compare:
 * significands s in [1,2) (subnormals scaled), products s_a s_b with
 * exponents e_a + e_b, zeros at e_zero; trunc(s 2^(e - emax + F)) 2^-F
 * summed; RZ into fp32 keeping q fraction bits.  floor_twin drops bits
 * toward -inf instead. */
static double sig_exp(double x, int emin, int *e)
{
    if (x == 0.0) {
        *e = emin;
        return 0.0;
    }
    int ex;
    double s = frexp(x, &ex) * 2.0;
    ex -= 1;
    if (ex < emin) {
        s = ldexp(s, ex - emin);
        ex = emin;
    }
    *e = ex;
    return s;
}

static double ref_block(const mma_arith *p, int n, const double *a, const double *b, double c, int floor_twin)
{
    const prec_format_info *fi = prec_format_get(p->in);
    double s[65];
    int e[65], zero[65];
    for (int i = 0; i < n; i++) {
        int ea, eb;
        const double sa = sig_exp(a[i], fi->emin, &ea), sb = sig_exp(b[i], fi->emin, &eb);
        s[i] = sa * sb;
        e[i] = ea + eb;
        zero[i] = s[i] == 0.0;
    }
    s[n] = sig_exp(c, -126, &e[n]);
    zero[n] = c == 0.0;
    int emax = -100000;
    for (int i = 0; i <= n; i++) {
        if (zero[i]) e[i] = p->zero_exp;
        if (e[i] > emax) emax = e[i];
    }
    double sum = 0.0; /* exact: every term is a multiple of 2^-F below 2^8 */
    for (int i = 0; i <= n; i++) {
        const double v = ldexp(s[i], e[i] - emax + p->frac_bits);
        sum += ldexp(floor_twin ? floor(v) : trunc(v), -p->frac_bits);
    }
    /* RZ into fp32 with q fraction bits, subnormals at 2^-126 */
    const double x = ldexp(sum, emax);
    if (x == 0.0) return 0.0;
    int ex = ilogb(x);
    if (ex < -126) ex = -126;
    const double unit = ldexp(1.0, ex - p->out_frac_bits);
    return trunc(x / unit) * unit;
}

/* A split instruction (mma.h, mma_split): sub-blocks over k % 4 < 2 and
 * k % 4 >= 2 from zero, then float adds in the named order. */
static double ref_split(const mma_arith *p, int n, const double *a, const double *b, double c, int floor_twin)
{
    double a1[32], b1[32], a2[32], b2[32];
    int n1 = 0, n2 = 0;
    for (int i = 0; i < n; i++) {
        if (i % 4 < 2) { a1[n1] = a[i]; b1[n1++] = b[i]; }
        else { a2[n2] = a[i]; b2[n2++] = b[i]; }
    }
    mma_arith sub = *p;
    sub.split = MMA_SPLIT_NONE;
    const float fc = (float)c;
    switch (p->split) {
    case MMA_SPLIT_CHAIN12: return fc + (float)ref_block(&sub, n2, a2, b2, ref_block(&sub, n1, a1, b1, 0.0, floor_twin), floor_twin);
    case MMA_SPLIT_CHAIN21: return fc + (float)ref_block(&sub, n1, a1, b1, ref_block(&sub, n2, a2, b2, 0.0, floor_twin), floor_twin);
    default: break;
    }
    const float P1 = (float)ref_block(&sub, n1, a1, b1, 0.0, floor_twin), P2 = (float)ref_block(&sub, n2, a2, b2, 0.0, floor_twin);
    switch (p->split) {
    case MMA_SPLIT_C_P1P2: return fc + (P1 + P2);
    case MMA_SPLIT_C_P2_P1: return (fc + P2) + P1;
    default: return (fc + P1) + P2;
    }
}

static double random_value(prec_rng *rng, prec_format f)
{
    const prec_rounding sat = {PREC_RNE, PREC_OVF_SATURATE, false};
    const prec_format_info *fi = prec_format_get(f);
    if (prec_rng_next(rng) % 8 == 0) return 0.0;
    const int lo = fi->emin - fi->fraction_bits, hi = fi->emax < 12 ? fi->emax : 12;
    const int ex = lo + (int)(prec_rng_next(rng) % (uint64_t)(hi - lo + 1));
    const double mag = ldexp(1.0 + prec_rng_uniform(rng), ex);
    const double v = (prec_rng_next(rng) & 1) ? -mag : mag;
    return prec_round(v, f, sat, 0);
}

static void compare_with_reference(int floor_twin, int *mismatches, int *trials)
{
    prec_rng rng;
    prec_rng_seed(&rng, test_seed(floor_twin ? "reference twin" : "reference"));
    static const char *const gens[] = {"v100", "a100", "h100", "b200"};
    *mismatches = *trials = 0;
    for (int i = 0; i < mma_model_count(); i++) {
        const mma_model *m = mma_model_at(i);
        if (m->arith.out != PREC_FP32 || m->arith.in == PREC_TF32) continue;
        const int split = m->arith.split != MMA_SPLIT_NONE;
        int known = 0;
        for (int g = 0; g < 4; g++) known |= strcmp(m->gen, gens[g]) == 0;
        assert_true(known);
        const int n = split ? m->arith.split_k : m->arith.block;
        for (int trial = 0; trial < 400; trial++) {
            double a[64], b[64], c = random_value(&rng, PREC_FP16);
            c *= ldexp(1.0, (int)(prec_rng_next(&rng) % 20) - 10);
            for (int j = 0; j < n; j++) {
                a[j] = random_value(&rng, m->arith.in);
                b[j] = random_value(&rng, m->arith.in);
            }
            const double got = mma_dot_values(&m->arith, n, a, b, c);
            const double want = split ? ref_split(&m->arith, n, a, b, c, floor_twin)
                                      : ref_block(&m->arith, n, a, b, c, floor_twin);
            (*trials)++;
            if (got != want) {
                (*mismatches)++;
                if (!floor_twin && *mismatches <= 3)
                    print_message("%s %s %s: model %.17g, reference %.17g (c=%.17g)\n", m->gen, m->route,
                                  prec_format_name(m->arith.in), got, want, c);
            }
        }
    }
}

static void test_matches_reference(void **state)
{
    (void)state;
    int bad, n;
    compare_with_reference(0, &bad, &n);
    assert_true(n > 1000);
    assert_int_equal(bad, 0);
}

static void test_reference_twin_floor(void **state)
{
    (void)state;
    int bad, n;
    compare_with_reference(1, &bad, &n);
    if (bad == 0) fail_msg("a floor-instead-of-truncate reference agreed on all %d blocks: the check cannot fail", n);
}

/* ---- correctly rounded with enough bits ---------------------------------- */

static int rounded_dots(int frac_bits, prec_round_mode mode)
{
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("correct rounding"));
    mma_arith p = {.in = PREC_FP16, .out = PREC_FP32, .block = 16, .frac_bits = frac_bits,
                   .align = MMA_ALIGN_TRUNCATE, .out_mode = mode, .out_frac_bits = 23, .zero_exp = -133};
    int mismatches = 0;
    for (int trial = 0; trial < 2000; trial++) {
        /* |values| >= 2^-4: every product bit lies above 2^-30, so with
         * emax <= 5, 40 alignment bits keep all of them */
        double a[16], b[16], c;
        for (int j = 0; j < 16; j++) {
            do a[j] = prec_rne(prec_rng_normal(&rng), PREC_FP16); while (fabs(a[j]) < 0.0625);
            do b[j] = prec_rne(prec_rng_normal(&rng), PREC_FP16); while (fabs(b[j]) < 0.0625);
        }
        do c = prec_rne(prec_rng_normal(&rng), PREC_FP32); while (fabs(c) < 0.0625);
        /* exact sum as a double-double (products of fp16 are exact doubles) */
        double hi = c, lo = 0.0;
        for (int j = 0; j < 16; j++) {
            const double x = a[j] * b[j], s = hi + x, bb = s - hi;
            lo += (hi - (s - bb)) + (x - bb);
            hi = s;
        }
        const double s = hi + lo;
        const double exact_lo = lo - (s - hi);
        const prec_rounding r = {mode, PREC_OVF_IEEE, false};
        const double want = prec_round2(s, exact_lo, PREC_FP32, r, 0);
        mismatches += mma_dot_values(&p, 16, a, b, c) != want;
    }
    return mismatches;
}

static void test_correct_rounding_with_wide_alignment(void **state)
{
    (void)state;
    assert_int_equal(rounded_dots(40, PREC_RNE), 0);
    assert_int_equal(rounded_dots(40, PREC_RZ), 0);
}

static void test_correct_rounding_twin_narrow(void **state)
{
    (void)state;
    const int bad = rounded_dots(20, PREC_RNE);
    if (bad == 0) fail_msg("20 alignment bits still gave correctly rounded dots: the check cannot fail");
}

/* ---- edge cases named in the model ---------------------------------------- */

static void test_special_values(void **state)
{
    (void)state;
    const mma_model *m = mma_model_find("h100", "wgmma", PREC_FP16, PREC_FP32);
    assert_non_null(m);
    double a[16] = {0}, b[16] = {0};
    a[0] = INFINITY;
    b[0] = 1.0;
    assert_true(isinf(mma_dot_values(&m->arith, 16, a, b, 0.0)));
    b[0] = 0.0; /* inf * 0 */
    assert_true(isnan(mma_dot_values(&m->arith, 16, a, b, 0.0)));
    a[0] = 65504.0;
    b[0] = 65504.0;
    a[1] = 65504.0;
    b[1] = 65504.0; /* 2 * 65504^2 ~ 2^33: finite in fp32 */
    assert_true(isfinite(mma_dot_values(&m->arith, 16, a, b, 0.0)));
    /* fp32 overflow of the sum: 2^127 + 2^127 = 2^128 */
    const mma_model *mb = mma_model_find("h100", "wgmma", PREC_BF16, PREC_FP32);
    assert_non_null(mb);
    a[0] = ldexp(1.0, 127);
    b[0] = 1.0;
    a[1] = b[1] = 0.0;
    assert_true(isinf(mma_dot_values(&mb->arith, 16, a, b, ldexp(1.0, 127))));
    /* just below: RZ keeps the largest finite value, never infinity */
    assert_true(isfinite(mma_dot_values(&mb->arith, 16, a, b, ldexp(1.0, 126))));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_published_features),
        cmocka_unit_test(test_fttn_ordering),
        cmocka_unit_test(test_published_twins),
        cmocka_unit_test(test_matches_reference),
        cmocka_unit_test(test_reference_twin_floor),
        cmocka_unit_test(test_correct_rounding_with_wide_alignment),
        cmocka_unit_test(test_correct_rounding_twin_narrow),
        cmocka_unit_test(test_special_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
