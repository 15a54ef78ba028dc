/* tests/test_norms_study.c — the norm-stability study's computations:
 *   - its fast rounding equals prec_rne (twin: a truncating rounding differs);
 *   - the fp32-accumulated two-pass LayerNorm with one cast at the end stays
 *     within its error bound (derived below), and the same variant with a
 *     dropped term (the planted bug) exceeds it;
 *   - qualitative facts that follow from the error analysis: one-pass
 *     variance loses to two passes at large mean/std (error ~ ratio^2 u
 *     against ~ ratio u), storage-format accumulation stagnates as the width
 *     grows, x^2 overflows an fp16 accumulator and is reported;
 *   - determinism of the whole run. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "precision/bounds.h"
#include "precision/rng.h"
#include "studies/norms.h"
#include "tests/test_util.h"

typedef struct {
    norms_error err;
    long stats_nonfinite;
    double rho; /* max over rows of mean|x| / sqrt(var + eps), from the stored inputs */
} outcome;

/* One variant on one case: the forward y (pass NORMS_FWD) or the backward dx. */
static outcome run_one(norms_variant v, long width, double ratio, norms_data data, uint64_t seed,
                       norms_pass pass)
{
    norms_case c = {4, width, ratio, data, seed, (double)1e-5f};
    norms_inputs in;
    norms_reference ref;
    assert_int_equal(norms_inputs_make(&c, v.format, &in), 0);
    assert_int_equal(norms_reference_make(v.norm, &in, c.eps, pass == NORMS_BWD, &ref), 0);
    assert_int_equal(ref.unproven, 0);
    long total = c.rows * width;
    double *got = malloc((size_t)total * sizeof *got), *dg = malloc((size_t)width * sizeof *dg);
    double *db = malloc((size_t)width * sizeof *db);
    for (long i = 0; i < total; i++) got[i] = NAN; /* poison */
    outcome o;
    double u = prec_format_get(v.format)->unit_roundoff;
    if (pass == NORMS_FWD) {
        o.stats_nonfinite = norms_forward(&v, &in, c.eps, got);
        o.err = norms_compare(got, ref.y, ref.s_y, total, u);
    } else {
        o.stats_nonfinite = norms_backward(&v, &in, c.eps, got, dg, db);
        o.err = norms_compare(got, ref.dx, ref.s_dx, total, u);
    }
    o.rho = 0.0;
    for (long r = 0; r < c.rows; r++) {
        double mean = 0, abs_mean = 0, var = 0;
        for (long j = 0; j < width; j++) mean += in.x[r * width + j] / width;
        for (long j = 0; j < width; j++) {
            double d = in.x[r * width + j] - mean;
            abs_mean += fabs(in.x[r * width + j]) / width;
            var += d * d / width;
        }
        double rho = abs_mean / sqrt(var + c.eps);
        if (rho > o.rho) o.rho = rho;
    }
    free(got), free(dg), free(db);
    norms_reference_free(&ref);
    norms_inputs_free(&in);
    return o;
}

static norms_variant layernorm(prec_format f, norms_acc a, norms_variance var, norms_upcast up)
{
    return (norms_variant){NORMS_LAYERNORM, f, a, var, up, false};
}

/* ---- the fast rounding ------------------------------------------------------- */

static long rounding_mismatches(prec_round_mode mode, uint64_t seed)
{
    static const prec_format fmts[] = {PREC_FP32, PREC_BF16, PREC_FP16, PREC_E4M3, PREC_E5M2};
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    prec_rounding r = {mode, PREC_OVF_IEEE, false};
    long bad = 0;
    for (size_t k = 0; k < sizeof fmts / sizeof fmts[0]; k++) {
        prec_format f = fmts[k];
        const prec_format_info *fi = prec_format_get(f);
        /* edges: max finite and just beyond, ties at 1, subnormal boundary */
        double edges[] = {fi->max_finite, nextafter(fi->max_finite, INFINITY), fi->max_finite * (1 + fi->unit_roundoff),
                          1.0 + fi->unit_roundoff, 1.0 + 3 * fi->unit_roundoff, fi->min_normal,
                          nextafter(fi->min_normal, 0.0), fi->min_subnormal * 1.5, 0.0, -0.0, INFINITY, NAN};
        for (size_t e = 0; e < sizeof edges / sizeof edges[0]; e++) {
            double a = norms_round_rne(edges[e], f), b = prec_round(edges[e], f, r, 0);
            bad += !(a == b || (isnan(a) && isnan(b)));
        }
        for (int i = 0; i < 200000; i++) {
            int span = fi->emax - fi->emin + 8;
            const int e = fi->emin - 4 + (int)(prec_rng_next(&rng) % (uint64_t)span); /* before the mantissa */
            double x = ldexp(prec_rng_uniform(&rng) + 0.5, e);
            if (prec_rng_next(&rng) & 1) x = -x;
            double a = norms_round_rne(x, f), b = prec_round(x, f, r, 0);
            bad += !(a == b || (isnan(a) && isnan(b)));
        }
    }
    return bad;
}

static void test_fast_rounding(void **state)
{
    (void)state;
    uint64_t seed = test_seed("norms_fast_rounding");
    assert_int_equal(rounding_mismatches(PREC_RNE, seed), 0);
    assert_true(rounding_mismatches(PREC_RZ, seed) > 0); /* twin: a wrong rounding shows */
}

/* ---- the bound ----------------------------------------------------------------
 * Two-pass LayerNorm forward computed entirely in a format of unit roundoff w
 * (recursive sums, every operation rounded once), then rounded once into F
 * (unit roundoff u).  With rho = mean|x| / sqrt(var + eps), delta the error
 * of the mean and g_k = gamma_k(w):
 *   |delta| <= g_n mean|x|                         (n-1 additions, 1 division)
 *   sum (x_j - mu - delta)^2 = n var + n delta^2    (the deviations sum to 0),
 *     so the computed variance has relative error <= g_{n+3} + (g_n rho)^2
 *     (products, sum, division, and the rounding of each x_j - mu);
 *   rstd then carries half of that plus the eps addition and the rsqrt:
 *     E_r = (g_{n+4} + (g_n rho)^2) / 2 + w (1 + 2^-29, the rsqrt's double rounding);
 *   |xhat error| <= g_n rho (1 + w) + |xhat| (2w + E_r);
 *   the gain and bias add 2w to the scale |gamma| (1 + |xhat|) + |beta|,
 * so the result before the cast is within I s of the exact value, with
 *   I = (g_n rho (1 + w) + E_r + 4w) (1 + w)^3   (+ O(w^2)),
 * and the cast adds u |y'| <= u (1 + I) s; in units of u and of the scale:
 *   |y - ref| / (u s) <= 1 + I + I / u. */
static double twopass_bound_u(long n, double rho, double w, double u)
{
    double gn = prec_gamma((double)n, w);
    double er = (prec_gamma((double)n + 4, w) + gn * rho * gn * rho) / 2 + w * (1 + 0x1p-29);
    double inner = (gn * rho * (1 + w) + er + 4 * w) * pow(1 + w, 3);
    return 1 + inner + inner / u;
}

/* RMSNorm the same way: the sum of squares and its division carry g_{n+1},
 * the eps addition and rsqrt halve it and add w, x rstd and the gain add 2w:
 *   I = ((g_{n+2} / 2 + w (1 + 2^-29)) + 2w) (1 + w)^2,  bound 1 + I + I / u. */
static double rms_bound_u(long n, double w, double u)
{
    double inner = (prec_gamma((double)n + 2, w) / 2 + w * (1 + 0x1p-29) + 2 * w) * pow(1 + w, 2);
    return 1 + inner + inner / u;
}

static void test_within_bound(void **state)
{
    (void)state;
    uint64_t seed = test_seed("norms_within_bound");
    const double ratios[] = {0, 1, 10, 100};
    const prec_format fmts[] = {PREC_FP32, PREC_BF16, PREC_FP16};
    for (size_t k = 0; k < 3; k++)
        for (size_t i = 0; i < 4; i++) {
            prec_format f = fmts[k];
            norms_variant v = layernorm(f, NORMS_ACC_FP32, NORMS_TWOPASS,
                                        f == PREC_FP32 ? NORMS_UPCAST_NONE : NORMS_UPCAST_GEMMA);
            outcome o = run_one(v, 1024, ratios[i], NORMS_DATA_NORMAL, seed + i, NORMS_FWD);
            double bound = twopass_bound_u(1024, o.rho, 0x1p-24, prec_format_get(f)->unit_roundoff);
            print_message("%s ratio %g: max %.3g u, bound %.3g u\n", prec_format_name(f), ratios[i],
                          o.err.max_err_u, bound);
            assert_int_equal(o.err.nonfinite, 0);
            assert_true(o.err.max_err_u <= bound);
            if (ratios[i] >= 10 && f != PREC_FP16) { /* twin: the dropped term is visible there */
                v.drop_term = true;
                outcome twin = run_one(v, 1024, ratios[i], NORMS_DATA_NORMAL, seed + i, NORMS_FWD);
                assert_true(twin.err.max_err_u > bound);
            }
        }
}

/* ---- facts from the error analysis ------------------------------------------- */

/* One pass: var = E[x^2] - mu^2 loses ~2 log2(ratio) bits, so its error grows
 * like ratio^2 w (w the accumulator's unit roundoff); two passes lose only
 * the mean's error, ~ratio w.  In fp32 that shows from ratio 100 on; bf16
 * data accumulated in fp32 hides it until ratio^2 w exceeds bf16's u (ratio
 * ~ 2^8: the squares of 8-bit values are exact in fp32, only the long sum
 * rounds), so there ratio 300 at width 1024. */
static void test_twopass_beats_onepass(void **state)
{
    (void)state;
    uint64_t seed = test_seed("norms_twopass_beats_onepass");
    struct { prec_format f; norms_upcast up; double ratio; } setups[] = {
        {PREC_FP32, NORMS_UPCAST_NONE, 100}, {PREC_FP32, NORMS_UPCAST_NONE, 1e4}, {PREC_BF16, NORMS_UPCAST_GEMMA, 300}};
    for (int s = 0; s < 3; s++) {
        norms_variant v = layernorm(setups[s].f, NORMS_ACC_FP32, NORMS_ONEPASS, setups[s].up);
        outcome one = run_one(v, 1024, setups[s].ratio, NORMS_DATA_NORMAL, seed, NORMS_FWD);
        v.variance = NORMS_TWOPASS;
        outcome two = run_one(v, 1024, setups[s].ratio, NORMS_DATA_NORMAL, seed, NORMS_FWD);
        v.variance = NORMS_WELFORD;
        outcome wel = run_one(v, 1024, setups[s].ratio, NORMS_DATA_NORMAL, seed, NORMS_FWD);
        double bound = twopass_bound_u(1024, two.rho, 0x1p-24, prec_format_get(setups[s].f)->unit_roundoff);
        print_message("%s ratio %g: onepass %.3g u, twopass %.3g u (bound %.3g), welford %.3g u\n",
                      prec_format_name(setups[s].f), setups[s].ratio, one.err.max_err_u, two.err.max_err_u,
                      bound, wel.err.max_err_u);
        assert_true(two.err.max_err_u <= bound);
        assert_true(two.err.max_err_u * 10 < one.err.max_err_u);
        assert_true(wel.err.max_err_u * 10 < one.err.max_err_u);
    }
    /* in fp32 the one-pass error grows ~ratio^2: 100x the ratio, >= 1000x the error */
    outcome lo = run_one(layernorm(PREC_FP32, NORMS_ACC_FP32, NORMS_ONEPASS, NORMS_UPCAST_NONE), 1024, 10,
                         NORMS_DATA_NORMAL, seed, NORMS_FWD);
    outcome hi = run_one(layernorm(PREC_FP32, NORMS_ACC_FP32, NORMS_ONEPASS, NORMS_UPCAST_NONE), 1024, 1000,
                         NORMS_DATA_NORMAL, seed, NORMS_FWD);
    assert_true(hi.err.max_err_u > 1000 * lo.err.max_err_u);
}

/* Recursive summation in bf16 stagnates once the running sum is 2^8 times
 * the addends: RMSNorm's sum of squares accumulated in bf16 gets worse with
 * the width, while an fp32 accumulator stays within a few u. */
static void test_storage_accumulation_stagnates(void **state)
{
    (void)state;
    uint64_t seed = test_seed("norms_storage_accumulation");
    norms_variant in_bf16 = {NORMS_RMSNORM, PREC_BF16, NORMS_ACC_STORAGE, NORMS_SUMSQ, NORMS_UPCAST_GEMMA, false};
    norms_variant in_fp32 = in_bf16;
    in_fp32.acc = NORMS_ACC_FP32;
    outcome narrow = run_one(in_bf16, 64, 0, NORMS_DATA_NORMAL, seed, NORMS_FWD);
    outcome wide = run_one(in_bf16, 16384, 0, NORMS_DATA_NORMAL, seed, NORMS_FWD);
    outcome wide32 = run_one(in_fp32, 16384, 0, NORMS_DATA_NORMAL, seed, NORMS_FWD);
    print_message("rmsnorm bf16: storage acc width 64 %.3g u, 16384 %.3g u; fp32 acc 16384 %.3g u\n",
                  narrow.err.max_err_u, wide.err.max_err_u, wide32.err.max_err_u);
    assert_true(wide.err.max_err_u > 10 * narrow.err.max_err_u);
    assert_true(wide32.err.max_err_u <= rms_bound_u(16384, 0x1p-24, 0x1p-8));
}

/* x ~ 512 in fp16: x^2 ~ 2.6e5 > 65504.  An fp16 accumulator overflows and
 * the study reports it (stats_nonfinite); fp32 statistics do not. */
static void test_fp16_square_overflow_reported(void **state)
{
    (void)state;
    uint64_t seed = test_seed("norms_fp16_overflow");
    for (int nm = 0; nm < NORMS_NNORMS; nm++) {
        norms_variance var = nm == NORMS_LAYERNORM ? NORMS_ONEPASS : NORMS_SUMSQ;
        norms_variant f16 = {(norms_norm)nm, PREC_FP16, NORMS_ACC_STORAGE, var, NORMS_UPCAST_NONE, false};
        outcome o = run_one(f16, 256, 0, NORMS_DATA_LARGE, seed, NORMS_FWD);
        assert_true(o.stats_nonfinite > 0);
        assert_true(o.err.max_err_u > 100 || o.err.nonfinite > 0); /* garbage, however it shows */
        norms_variant f32 = f16;
        f32.acc = NORMS_ACC_FP32;
        f32.upcast = NORMS_UPCAST_GEMMA;
        if (nm == NORMS_LAYERNORM) f32.variance = NORMS_TWOPASS;
        outcome ok = run_one(f32, 256, 0, NORMS_DATA_LARGE, seed, NORMS_FWD);
        assert_int_equal(ok.stats_nonfinite, 0);
        assert_int_equal(ok.err.nonfinite, 0);
        double bound = nm == NORMS_LAYERNORM ? twopass_bound_u(256, ok.rho, 0x1p-24, 0x1p-11)
                                             : rms_bound_u(256, 0x1p-24, 0x1p-11);
        assert_true(ok.err.max_err_u <= bound);
    }
}

/* ---- determinism -------------------------------------------------------------- */

typedef struct {
    double sum[4];
    long n;
} digest;

static void digest_record(const norms_record *r, void *arg)
{
    digest *d = arg;
    d->sum[0] += r->err.max_err_u * (double)(d->n + 1);
    d->sum[1] += r->err.rms_err_u * (double)(d->n + 1);
    d->sum[2] += (double)r->err.nonfinite + (double)r->stats_nonfinite;
    d->sum[3] += (double)r->err.worst_index;
    d->n++;
}

static void test_deterministic(void **state)
{
    (void)state;
    uint64_t seed = test_seed("norms_deterministic");
    norms_case cases[2] = {{2, 100, 10, NORMS_DATA_OUTLIERS, seed, 1e-5}, {2, 37, 0, NORMS_DATA_LARGE, seed, 1e-5}};
    norms_plan plan;
    memset(&plan, 0, sizeof plan);
    for (int i = 0; i < NORMS_NNORMS; i++) plan.norms[i] = true;
    for (int i = 0; i < NORMS_NPASSES; i++) plan.passes[i] = true;
    for (int i = 0; i < PREC_NFORMATS; i++) plan.formats[i] = norms_format_supported((prec_format)i);
    for (int i = 0; i < NORMS_NVARIANCES; i++) plan.variances[i] = true;
    for (int i = 0; i < NORMS_NACCS; i++) plan.accs[i] = true;
    for (int i = 0; i < NORMS_NUPCASTS; i++) plan.upcasts[i] = true;
    plan.cases = cases;
    plan.ncases = 2;
    digest a = {{0}, 0}, b = {{0}, 0};
    assert_int_equal(norms_run(&plan, digest_record, &a), 0);
    assert_int_equal(norms_run(&plan, digest_record, &b), 0);
    /* per case, LayerNorm: fp32 3 variance algorithms x 4 outputs, other formats
     * 18 variants x 4; RMSNorm: fp32 1 x 3, others 6 x 3 */
    assert_int_equal(a.n, 2 * ((3 * 4 + 4 * 18 * 4) + (3 + 4 * 6 * 3)));
    assert_int_equal(a.n, b.n);
    assert_memory_equal(a.sum, b.sum, sizeof a.sum);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fast_rounding),
        cmocka_unit_test(test_within_bound),
        cmocka_unit_test(test_twopass_beats_onepass),
        cmocka_unit_test(test_storage_accumulation_stagnates),
        cmocka_unit_test(test_fp16_square_overflow_reported),
        cmocka_unit_test(test_deterministic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
