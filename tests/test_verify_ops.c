/* tests/test_verify_ops.c — `ulpscope verify` for rope, grad_norm,
 * embedding, transpose and polar_express: verify, declared as `ulpscope
 * check` describes its own kernels, reports check's rows bit for bit on the
 * same data (both call kernels/check/compare_<op>.c); an emulated correct
 * kernel PASSes as declared; the planted twins FAIL (a dropped term, a
 * truncated output, a bf16 accumulation or arithmetic declared as fp32, and
 * for the exact ops a wrong element); the command line reads their files and
 * refuses bad input (shape mismatch, wrong tensor count, dtype) with one line
 * and exit status 2, leaving nothing behind. */
#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "base/tensor_file.h"
#include "kernels/check/compare_embedding.h"
#include "kernels/check/compare_grad_norm.h"
#include "kernels/check/compare_polar_express.h"
#include "kernels/check/compare_rope.h"
#include "kernels/check/compare_transpose.h"
#include "kernels/embedding.h"
#include "kernels/grad_norm.h"
#include "kernels/polar_express.h"
#include "kernels/rope.h"
#include "kernels/transpose.h"
#include "precision/format.h"
#include "precision/rng.h"
#include "tests/test_util.h"
#include "verify/verify.h"

static char dir[256];

static int setup_dir(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/ulpscope-test-verify-ops-%ld", (long)getpid());
    return mkdir(dir, 0700);
}

static int remove_dir(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

enum { OK, DROP_TERM, TRUNCATE, BF16_ACC, WRONG_ELEMENT };

static const prec_format formats[] = {PREC_FP32, PREC_BF16, PREC_FP16};
static const char *const paths[] = {"fp32", "bf16", "fp16"};
static const prec_rounding rz = {PREC_RZ, PREC_OVF_IEEE, false};

/* The kernel's store into f: to nearest, or truncated (an fp32 output, which
 * has no narrower rounding step, truncated to bf16 precision). */
static double store(double v, prec_format f, int bug)
{
    return bug == TRUNCATE ? prec_round(v, f == PREC_FP32 ? PREC_BF16 : f, rz, 0) : prec_rne(v, f);
}

/* One fp32 operation, or a bf16 one for the accumulation twin. */
static float op32(double v, int bug) { return (float)(bug == BF16_ACC ? prec_rne(v, PREC_BF16) : prec_rne(v, PREC_FP32)); }

static void assert_rows_equal(const kcheck_row *c, const ulp_row *u, const char *what)
{
    if (strcmp(c->output, u->output) != 0 || c->max_err_u != u->max_err_u || c->rms_err_u != u->rms_err_u ||
        c->max_bound_u != u->max_bound_u || c->rms_bound_u != u->rms_bound_u || c->worst_ratio != u->worst_ratio ||
        c->pass != u->pass || c->worst_index != u->worst_index || c->n != u->n || strcmp(c->shape, u->shape) != 0 ||
        strcmp(c->worst_detail, u->worst_detail) != 0)
        fail_msg("%s: check %s [%s] %.17g u (bound %.17g, rms %.17g) [%s] vs verify %s [%s] %.17g u (bound %.17g, rms "
                 "%.17g) [%s]",
                 what, c->output, c->shape, c->max_err_u, c->max_bound_u, c->rms_bound_u, c->worst_detail, u->output,
                 u->shape, u->max_err_u, u->max_bound_u, u->rms_bound_u, u->worst_detail);
}

static ulp_report rep;

static int run_verify(const char *op, const ulp_kernel *k, const ulp_tensor *in, int n_in, const ulp_tensor *out, int n_out)
{
    char err[512];
    int rc = ulp_verify(op, k, in, n_in, out, n_out, &rep, err, sizeof err);
    if (rc == ULP_BAD_INPUT) fail_msg("%s: bad input: %s", op, err);
    return rc;
}

/* rc must be want; else the report is printed and the test fails. */
static void expect(int rc, int want, const char *what)
{
    if (rc == want) return;
    ulp_report_print(stdout, &rep);
    fail_msg("%s: %s, want %s", what, rc == ULP_PASS ? "PASS" : "FAIL", want == ULP_PASS ? "PASS" : "FAIL");
}

static double *alloc_doubles(int64_t n)
{
    double *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    assert_non_null(p);
    return p;
}

/* ---- rope ---------------------------------------------------------------------------------- */

enum { RB = 2, RT = 37, RH = 3, RD = 18, RHALF = RD / 2, RN = RB * RT * RH * RD };

/* RoPE as a kernel of storage f computes it in fp32 (x (B, T, H, D)): cos
 * and sin from the fp32 table, or (fp32_angle) of the angle fl(pos
 * inv_freq); two products and a sum in fp32 (bf16 for the twin), the store.
 * The dropped-term twin leaves x_{i+D/2} sin out of the element where it is
 * largest. */
static void emulate_rope(const double *in, int bwd, int variant, const float *ct, const float *st, const float *inv,
                         prec_format f, int bug, double *y)
{
    int64_t drop = -1; /* the first element of the pair with the largest |x_{i+D/2} sin| (table sin) */
    double largest = -1;
    for (int64_t nh = 0; nh < RB * RT * RH; nh++)
        for (int64_t i = 0; i < RHALF; i++) {
            const double t = fabs(in[nh * RD + i + RHALF] * st[((nh / RH) % RT) * RHALF + i]);
            if (bug == DROP_TERM && t > largest) {
                largest = t;
                drop = nh * RD + i;
            }
        }
    for (int64_t nh = 0; nh < RB * RT * RH; nh++)
        for (int64_t i = 0; i < RHALF; i++) {
            const int64_t pos = (nh / RH) % RT, a = nh * RD + i, b = a + RHALF;
            float c, s;
            if (variant == KROPE_TABLE) {
                c = ct[pos * RHALF + i];
                s = st[pos * RHALF + i];
            } else {
                float angle = (float)pos * inv[i];
                c = cosf(angle);
                s = sinf(angle);
            }
            if (bwd) s = -s;
            const float x1 = (float)in[a], x2 = (float)in[b];
            const float x2s = a == drop ? 0.0f : op32((double)x2 * s, bug);
            y[a] = store(op32((double)op32((double)x1 * c, bug) - x2s, bug), f, bug);
            y[b] = store(op32((double)op32((double)x1 * s, bug) + op32((double)x2 * c, bug), bug), f, bug);
        }
}

static int rope_verify(const double *in, const double *y, int bwd, const double *cos_d, const double *sin_d,
                       const double *inv_d, const ulp_kernel *k)
{
    ulp_tensor tin[4] = {ULP_TENSOR(bwd ? "dy" : "x", ULP_F64, in, RB, RT, RH, RD)};
    int n = 1;
    if (cos_d) {
        tin[n++] = ULP_TENSOR("cos", ULP_F64, cos_d, RT, RHALF);
        tin[n++] = ULP_TENSOR("sin", ULP_F64, sin_d, RT, RHALF);
    }
    if (inv_d) tin[n++] = ULP_TENSOR("inv_freq", ULP_F64, inv_d, RHALF);
    ulp_tensor out[1] = {ULP_TENSOR(bwd ? "dx" : "y", ULP_F64, y, RB, RT, RH, RD)};
    return run_verify("rope", k, tin, n, out, 1);
}

static void rope_agrees_with_check_and_twins_fail(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("rope_agrees_with_check_and_twins_fail"));
    float ct[RT * RHALF], st[RT * RHALF], inv[RHALF];
    double cos_d[RT * RHALF], sin_d[RT * RHALF], inv_d[RHALF];
    krope_tables_host(ct, st, inv, RT, RD, 10000.0);
    for (int i = 0; i < RT * RHALF; i++) {
        cos_d[i] = ct[i];
        sin_d[i] = st[i];
    }
    for (int i = 0; i < RHALF; i++) inv_d[i] = inv[i];
    double *x = alloc_doubles(RN), *y = alloc_doubles(RN);
    char shape[96];
    snprintf(shape, sizeof shape, "B=%d T=%d H=%d D=%d", RB, RT, RH, RD);
    int compared = 0;
    for (int fi = 0; fi < 3; fi++)
        for (int variant = 0; variant < KROPE_NVARIANTS; variant++)
            for (int bwd = 0; bwd < 2; bwd++) {
                const prec_format f = formats[fi];
                const int table = variant == KROPE_TABLE;
                for (int64_t i = 0; i < RN; i++) x[i] = prec_rne(prec_rng_normal(&rng), f);
                emulate_rope(x, bwd, variant, ct, st, inv, f, OK, y);
                ulp_kernel k = ULP_KERNEL_DEFAULT;
                k.path = paths[fi];
                k.pass = bwd ? "bwd" : "fwd";
                k.accum = "fp32";
                k.angle = table ? "table" : "fp32";
                const kcmp_rope_kernel ck = kcheck_rope_kernel(f, variant, 10000.0);
                const kcmp_rope_data cd = {RB * RT, RH, RD, RT, x, table ? cos_d : NULL, table ? sin_d : NULL,
                                           table ? NULL : inv_d, y, bwd};
                kcheck_acc row;
                assert_int_equal(kcmp_rope(&ck, &cd, shape, &row), 1);
                char what[64];
                snprintf(what, sizeof what, "rope %s variant %d %s", paths[fi], variant, k.pass);
                expect(rope_verify(x, y, bwd, table ? cos_d : NULL, sin_d, table ? NULL : inv_d, &k), ULP_PASS, what);
                assert_int_equal(rep.n_rows, 1);
                assert_rows_equal(&row.row, &rep.rows[0], what);
                compared++;
                /* the tables given with an unknown angle: the kernel read them, one bound */
                k.angle = "unknown";
                expect(rope_verify(x, y, bwd, table ? cos_d : NULL, sin_d, table ? NULL : inv_d, &k), ULP_PASS, what);
                assert_int_equal(rep.unknown, 0);
                /* nothing given and nothing declared: the table and the fp32 angle, the verdict on the latter */
                k.accum = "unknown";
                expect(rope_verify(x, y, bwd, NULL, NULL, NULL, &k), ULP_PASS, what);
                assert_int_equal(rep.n_rows, 2);
                assert_non_null(strstr(rep.rows[1].assumption, "--accum storage --angle fp32"));
                for (int bug = DROP_TERM; bug <= BF16_ACC; bug++) {
                    if (bug == BF16_ACC && f != PREC_FP32) continue; /* a bf16 store rounds the same bits away */
                    emulate_rope(x, bwd, variant, ct, st, inv, f, bug, y);
                    k.accum = "fp32";
                    k.angle = table ? "table" : "fp32";
                    snprintf(what, sizeof what, "rope %s variant %d %s bug %d", paths[fi], variant, k.pass, bug);
                    expect(rope_verify(x, y, bwd, table ? cos_d : NULL, sin_d, table ? NULL : inv_d, &k), ULP_FAIL, what);
                }
            }
    assert_int_equal(compared, 3 * 2 * 2);
    free(x);
    free(y);
}

/* ---- grad_norm --------------------------------------------------------------------------- */

/* The norm as one thread computes it: an fp32 fma chain of the squares (a
 * bf16 sum for the twin), sqrtf.  The dropped-term twin leaves the largest
 * square out. */
static double emulate_grad_norm(const double *g, int64_t n, int bug)
{
    int64_t biggest = 0;
    for (int64_t i = 0; i < n; i++)
        if (fabs(g[i]) > fabs(g[biggest])) biggest = i;
    float ss = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        if (bug == DROP_TERM && i == biggest) continue;
        ss = bug == BF16_ACC ? (float)prec_rne(fma(g[i], g[i], ss), PREC_BF16) : fmaf((float)g[i], (float)g[i], ss);
    }
    return store(sqrtf(ss), PREC_FP32, bug);
}

static int grad_norm_verify(const double *g, int64_t n, double norm, const ulp_kernel *k)
{
    ulp_tensor in[1] = {ULP_TENSOR("g", ULP_F64, g, n)};
    ulp_tensor out[1] = {ULP_TENSOR("norm", ULP_F64, &norm, 1)};
    return run_verify("grad_norm", k, in, 1, out, 1);
}

static void grad_norm_agrees_with_check_and_twins_fail(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("grad_norm_agrees_with_check_and_twins_fail"));
    const int64_t n = 4099;
    double *g = alloc_doubles(n);
    for (int fi = 0; fi < 3; fi++) {
        const prec_format f = formats[fi];
        for (int64_t i = 0; i < n; i++) g[i] = prec_rne(0.3 * prec_rng_normal(&rng), f);
        const double norm = emulate_grad_norm(g, n, OK);
        ulp_kernel k = ULP_KERNEL_DEFAULT;
        k.path = paths[fi];
        k.accum = "fp32";
        char shape[32], what[64];
        snprintf(shape, sizeof shape, "n=%lld", (long long)n);
        for (int variant = 0; variant < KGRADNORM_NVARIANTS; variant++) {
            const kcmp_grad_norm_kernel ck = kcheck_grad_norm_kernel(&n, 1, variant);
            const double *gs[1] = {g};
            const kcmp_grad_norm_data cd = {1, &n, gs, norm};
            kcheck_acc row;
            assert_int_equal(kcmp_grad_norm(&ck, &cd, shape, &row), 1);
            char reduce[32];
            snprintf(reduce, sizeof reduce, "depth:%lld", (long long)ck.depth);
            k.reduce = reduce;
            snprintf(what, sizeof what, "grad_norm %s variant %d", paths[fi], variant);
            grad_norm_verify(g, n, norm, &k);
            assert_int_equal(rep.n_rows, 1);
            assert_rows_equal(&row.row, &rep.rows[0], what);
        }
        k.reduce = "sequential";
        expect(grad_norm_verify(g, n, norm, &k), ULP_PASS, paths[fi]);
        for (int bug = DROP_TERM; bug <= BF16_ACC; bug++) {
            snprintf(what, sizeof what, "grad_norm %s bug %d", paths[fi], bug);
            if (bug != TRUNCATE) {
                expect(grad_norm_verify(g, n, emulate_grad_norm(g, n, bug), &k), ULP_FAIL, what);
                continue;
            }
            /* One number truncated to bf16 precision escapes a bound of relative size depth u32 when
             * it lies that close above a bf16 value: on 7 elements about one draw in 10^4, so three draws. */
            int caught = 0;
            for (int draw = 0; draw < 3; draw++) {
                double few[7];
                for (int i = 0; i < 7; i++) few[i] = prec_rne(prec_rng_normal(&rng), f);
                caught += grad_norm_verify(few, 7, emulate_grad_norm(few, 7, bug), &k) == ULP_FAIL;
            }
            if (!caught) fail_msg("%s passed three draws", what);
        }
        k.accum = k.reduce = "unknown";
        expect(grad_norm_verify(g, n, norm, &k), ULP_PASS, paths[fi]);
        assert_int_equal(rep.n_rows, 2);
        assert_non_null(strstr(rep.rows[1].assumption, "--accum storage --reduce sequential"));
    }
    free(g);
}

/* ---- embedding --------------------------------------------------------------------------- */

enum { EV = 50, EN = 300, EC = 16 };

typedef struct {
    int32_t tok[EN];
    double tokens[EN];
    double *table, *out, *dout, *dt0, *dt;
} emb_data;

/* Tokens skewed to small ids (some rows gather many gradient rows); the
 * lookup exact (the wrong-element twin reads the next row for one token);
 * the backward's fp32 sum of a row's gradients in token order (bf16 for the
 * twin; the dropped-term twin leaves each row's first token out), plus the
 * old value, then the store. */
static emb_data emb_make(prec_rng *rng, prec_format f, int bug)
{
    emb_data d;
    d.table = alloc_doubles(EV * EC);
    d.dt0 = alloc_doubles(EV * EC);
    d.dt = alloc_doubles(EV * EC);
    d.out = alloc_doubles(EN * EC);
    d.dout = alloc_doubles(EN * EC);
    for (int t = 0; t < EN; t++) {
        double u = prec_rng_uniform(rng);
        d.tok[t] = (int32_t)floor(EV * u * u);
        d.tokens[t] = d.tok[t];
    }
    for (int i = 0; i < EV * EC; i++) {
        d.table[i] = prec_rne(prec_rng_normal(rng), f);
        d.dt0[i] = prec_rne(prec_rng_normal(rng), f);
    }
    for (int i = 0; i < EN * EC; i++) d.dout[i] = prec_rne(prec_rng_normal(rng), f);
    for (int t = 0; t < EN; t++)
        for (int c = 0; c < EC; c++) {
            const int row = bug == WRONG_ELEMENT && t == 7 ? (d.tok[t] + 1) % EV : d.tok[t];
            d.out[t * EC + c] = d.table[row * EC + c];
        }
    for (int v = 0; v < EV; v++)
        for (int c = 0; c < EC; c++) {
            float sum = 0.0f;
            int seen = 0;
            for (int t = 0; t < EN; t++) {
                if (d.tok[t] != v) continue;
                if (!(bug == DROP_TERM && seen++ == 0)) sum = op32((double)sum + d.dout[t * EC + c], bug);
            }
            d.dt[v * EC + c] = store(op32((double)sum + d.dt0[v * EC + c], bug), f, bug);
        }
    return d;
}

static void emb_free(emb_data *d) { free(d->table); free(d->out); free(d->dout); free(d->dt0); free(d->dt); }

static int emb_verify(const emb_data *d, const ulp_kernel *k)
{
    if (strcmp(k->pass, "fwd") == 0) {
        ulp_tensor in[2] = {ULP_TENSOR("table", ULP_F64, d->table, EV, EC), ULP_TENSOR("tokens", ULP_F64, d->tokens, EN)};
        ulp_tensor out[1] = {ULP_TENSOR("out", ULP_F64, d->out, EN, EC)};
        return run_verify("embedding", k, in, 2, out, 1);
    }
    ulp_tensor in[3] = {ULP_TENSOR("tokens", ULP_F64, d->tokens, EN), ULP_TENSOR("dout", ULP_F64, d->dout, EN, EC),
                        ULP_TENSOR("dtable0", ULP_F64, d->dt0, EV, EC)};
    ulp_tensor out[1] = {ULP_TENSOR("dtable", ULP_F64, d->dt, EV, EC)};
    return run_verify("embedding", k, in, 3, out, 1);
}

static void embedding_agrees_with_check_and_twins_fail(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("embedding_agrees_with_check_and_twins_fail"));
    char shape[64], what[64];
    snprintf(shape, sizeof shape, "V=%d N=%d C=%d", EV, EN, EC);
    for (int fi = 0; fi < 3; fi++) {
        const prec_format f = formats[fi];
        emb_data d = emb_make(&rng, f, OK);
        const kcmp_embedding_kernel ck = kcheck_embedding_kernel(f, 0);
        const kcmp_embedding_data cd = {EV, EN, EC, d.tok, d.table, d.out, d.dout, d.dt0, d.dt};
        kcheck_acc rows[KCMP_EMBEDDING_MAX_ROWS];
        assert_int_equal(kcmp_embedding(&ck, &cd, shape, rows), 2);
        ulp_kernel k = ULP_KERNEL_DEFAULT;
        k.path = paths[fi];
        k.accum = "fp32";
        k.reduce = "sequential";
        for (int bwd = 0; bwd < 2; bwd++) {
            k.pass = bwd ? "bwd" : "fwd";
            snprintf(what, sizeof what, "embedding %s %s", paths[fi], k.pass);
            expect(emb_verify(&d, &k), ULP_PASS, what);
            assert_int_equal(rep.n_rows, 1);
            assert_rows_equal(&rows[bwd].row, &rep.rows[0], what);
        }
        /* the gather is exact whatever is declared; the backward's unknowns give two rows */
        k.accum = k.reduce = "unknown";
        k.pass = "fwd";
        expect(emb_verify(&d, &k), ULP_PASS, "embedding fwd unknown");
        assert_int_equal(rep.unknown, 0);
        assert_non_null(strstr(rep.rows[0].assumption, "exact (a gather)"));
        k.pass = "bwd";
        expect(emb_verify(&d, &k), ULP_PASS, "embedding bwd unknown");
        assert_int_equal(rep.n_rows, 2);
        emb_free(&d);
        k.accum = "fp32";
        k.reduce = "sequential";
        for (int bug = DROP_TERM; bug <= WRONG_ELEMENT; bug++) {
            if (bug == BF16_ACC && f != PREC_FP32) continue; /* a 16-bit store rounds most of it away */
            d = emb_make(&rng, f, bug);
            k.pass = bug == WRONG_ELEMENT ? "fwd" : "bwd";
            snprintf(what, sizeof what, "embedding %s bug %d", paths[fi], bug);
            expect(emb_verify(&d, &k), ULP_FAIL, what);
            if (bug == WRONG_ELEMENT && !strstr(rep.diagnosis, "a gather is exact")) fail_msg("%s: %s", what, rep.diagnosis);
            emb_free(&d);
        }
    }
}

/* ---- transpose --------------------------------------------------------------------------- */

enum { TM = 37, TNC = 65 };

/* y = x^T (copy) or y0 + x^T in fp32 (bf16 for the twin), stored.  Twins:
 * the copy with one element's last bit flipped (wrong element), the add
 * leaving x out of its largest element (dropped term). */
static void emulate_transpose(const double *x, const double *y0, prec_format f, int bug, double *y)
{
    int64_t biggest = 0;
    for (int64_t i = 0; i < TM * TNC; i++)
        if (fabs(x[i]) > fabs(x[biggest])) biggest = i;
    for (int64_t r = 0; r < TNC; r++)
        for (int64_t c = 0; c < TM; c++) {
            const double xv = x[c * TNC + r];
            double *out = &y[r * TM + c];
            if (!y0) *out = xv;
            else if (bug == DROP_TERM && c * TNC + r == biggest) *out = y0[r * TM + c];
            else *out = store(op32(y0[r * TM + c] + xv, bug), f, bug);
        }
    if (!y0 && bug == WRONG_ELEMENT) y[3] = prec_round(y[3] * (1 + 0x1p-7), f, rz, 0); /* a few ulps off */
}

static int transpose_verify(const double *x, const double *y0, const double *y, const ulp_kernel *k)
{
    ulp_tensor in[2] = {ULP_TENSOR("x", ULP_F64, x, TM, TNC), ULP_TENSOR("y0", ULP_F64, y0, TNC, TM)};
    ulp_tensor out[1] = {ULP_TENSOR("y", ULP_F64, y, TNC, TM)};
    return run_verify("transpose", k, in, y0 ? 2 : 1, out, 1);
}

static void transpose_agrees_with_check_and_twins_fail(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("transpose_agrees_with_check_and_twins_fail"));
    double *x = alloc_doubles(TM * TNC), *y0 = alloc_doubles(TM * TNC), *y = alloc_doubles(TM * TNC);
    char shape[64], what[64];
    snprintf(shape, sizeof shape, "M=%d N=%d", TM, TNC);
    for (int fi = 0; fi < 3; fi++) {
        const prec_format f = formats[fi];
        for (int64_t i = 0; i < TM * TNC; i++) {
            x[i] = prec_rne(prec_rng_normal(&rng), f);
            y0[i] = prec_rne(prec_rng_normal(&rng), f);
        }
        ulp_kernel k = ULP_KERNEL_DEFAULT;
        k.path = paths[fi];
        k.accum = "fp32";
        const kcmp_transpose_kernel ck = kcheck_transpose_kernel(f, 0);
        for (int add = 0; add < 2; add++) {
            emulate_transpose(x, add ? y0 : NULL, f, OK, y);
            const kcmp_transpose_data cd = {TM, TNC, x, add ? y0 : NULL, y, "y"};
            kcheck_acc row;
            assert_int_equal(kcmp_transpose(&ck, &cd, shape, &row), 1);
            snprintf(what, sizeof what, "transpose %s %s", paths[fi], add ? "add" : "copy");
            expect(transpose_verify(x, add ? y0 : NULL, y, &k), ULP_PASS, what);
            assert_rows_equal(&row.row, &rep.rows[0], what);
        }
        for (int bug = DROP_TERM; bug <= WRONG_ELEMENT; bug++) {
            if (bug == BF16_ACC && f != PREC_FP32) continue; /* a 16-bit store rounds most of it away */
            const int add = bug != WRONG_ELEMENT;
            emulate_transpose(x, add ? y0 : NULL, f, bug, y);
            snprintf(what, sizeof what, "transpose %s bug %d", paths[fi], bug);
            expect(transpose_verify(x, add ? y0 : NULL, y, &k), ULP_FAIL, what);
            if (!add && !strstr(rep.diagnosis, "a copy is exact")) fail_msg("%s: %s", what, rep.diagnosis);
        }
    }
    free(x);
    free(y0);
    free(y);
}

/* ---- polar_express ----------------------------------------------------------------------- */

/* One wide step on X [m, n] as a kernel computes it: every GEMM a fp32 fma
 * chain from zero (bf16 for the twin; the dropped-term twin leaves the first
 * term out of each), its output stored; B = fl(c A A) + fl(b A) in fp32;
 * X' = (B X) + fl(a X) in fp32 (fused) or after storing B X (split). */
static void pe_wide_step(const double *X, int64_t m, int64_t n, const float abc[3], int fused, prec_format f, int bug,
                         double *out)
{
    double *A = alloc_doubles(m * m), *B = alloc_doubles(m * m);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < m; j++) {
            float acc = 0.0f;
            for (int64_t q = bug == DROP_TERM; q < n; q++) acc = op32(fma(X[i * n + q], X[j * n + q], acc), bug);
            A[i * m + j] = store(acc, f, bug);
        }
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < m; j++) {
            float acc = 0.0f;
            for (int64_t q = bug == DROP_TERM; q < m; q++) acc = op32(fma(A[i * m + q], A[q * m + j], acc), bug);
            B[i * m + j] = store((double)(float)((double)abc[2] * acc) + (double)(float)((double)abc[1] * A[i * m + j]), f, bug);
        }
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int64_t q = bug == DROP_TERM; q < m; q++) acc = op32(fma(B[i * m + q], X[q * n + j], acc), bug);
            const float ax = (float)((double)abc[0] * X[i * n + j]);
            const double bx = fused ? (double)acc : store(acc, f, bug);
            out[i * n + j] = store((double)(float)(bx + ax), f, bug);
        }
    free(A);
    free(B);
}

/* Stage 0 (normalisation) and the five steps, each from the previous output. */
static void emulate_pe(const double *G, int64_t R, int64_t C, int tall, int fused, prec_format f, int bug, double *xs[6])
{
    float ss = 0.0f;
    for (int64_t i = 0; i < R * C; i++) ss = fmaf((float)G[i], (float)G[i], ss);
    const float den = KPE_NORM_SAFETY * sqrtf(ss) + KPE_NORM_EPS;
    for (int64_t i = 0; i < R * C; i++) xs[0][i] = store((float)G[i] / den, f, bug);
    float abc[KPE_STEPS][3];
    kpe_coefficients(KPE_POLAR_EXPRESS, abc);
    double *t = alloc_doubles(R * C), *tn = alloc_doubles(R * C);
    for (int st = 1; st <= KPE_STEPS; st++) {
        if (!tall) {
            pe_wide_step(xs[st - 1], R, C, abc[st - 1], fused, f, bug, xs[st]);
            continue;
        }
        for (int64_t i = 0; i < R; i++)
            for (int64_t j = 0; j < C; j++) t[j * R + i] = xs[st - 1][i * C + j];
        pe_wide_step(t, C, R, abc[st - 1], fused, f, bug, tn);
        for (int64_t i = 0; i < R; i++)
            for (int64_t j = 0; j < C; j++) xs[st][i * C + j] = tn[j * R + i];
    }
    free(t);
    free(tn);
}

static int pe_verify(const double *G, int64_t R, int64_t C, double *xs[6], const ulp_kernel *k)
{
    ulp_tensor in[1] = {ULP_TENSOR("G", ULP_F64, G, R, C)};
    static const char *const names[6] = {"x0", "x1", "x2", "x3", "x4", "x5"};
    ulp_tensor out[6];
    for (int st = 0; st < 6; st++) out[st] = ULP_TENSOR(names[st], ULP_F64, xs[st], R, C);
    return run_verify("polar_express", k, in, 1, out, 6);
}

static void polar_express_agrees_with_check_and_twins_fail(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("polar_express_agrees_with_check_and_twins_fail"));
    static const int64_t shapes[2][2] = {{8, 13}, {13, 8}};
    static const kpath kpaths[2] = {KPATH_FP32, KPATH_BF16};
    char what[96];
    for (int s = 0; s < 2; s++)
        for (int pi = 0; pi < 2; pi++) {
            const int64_t R = shapes[s][0], C = shapes[s][1], n = R * C;
            const prec_format f = formats[pi];
            double *G = alloc_doubles(n), *xs[6];
            for (int st = 0; st < 6; st++) xs[st] = alloc_doubles(n);
            for (int64_t i = 0; i < n; i++) G[i] = prec_rne(prec_rng_normal(&rng), f);
            for (int variant = 0; variant < KPE_NVARIANTS; variant++) {
                const int tall = kpe_is_tall(variant, R, C), fused = kpe_is_fused(variant);
                emulate_pe(G, R, C, tall, fused, f, OK, xs);
                /* check's description of its own kernel (tensor cores off fp32), on the same data */
                const kcmp_pe_kernel ck = kcheck_polar_express_kernel(kpaths[pi], variant, R, C);
                char shape[64], reduce[32];
                snprintf(shape, sizeof shape, "rows=%lld cols=%lld", (long long)R, (long long)C);
                snprintf(reduce, sizeof reduce, "depth:%lld", (long long)ck.norm_depth);
                ulp_kernel k = ULP_KERNEL_DEFAULT;
                k.path = paths[pi];
                k.accum = pi ? "tensor-core" : "fp32";
                k.reduce = reduce;
                k.form = tall ? "tall" : "wide";
                k.epilogue = fused ? "single" : "rounded";
                k.coeffs = "polar-express";
                k.upcast = "fp32";
                pe_verify(G, R, C, xs, &k);
                assert_int_equal(rep.n_rows, 6);
                float abc[KPE_STEPS][3];
                kpe_coefficients(KPE_POLAR_EXPRESS, abc);
                for (int st = 0; st <= KPE_STEPS; st++) {
                    const kcmp_pe_data cd = {R, C, st, st ? xs[st - 1] : G, st ? abc[st - 1][0] : 0, st ? abc[st - 1][1] : 0,
                                             st ? abc[st - 1][2] : 0, xs[st]};
                    kcheck_acc row;
                    assert_int_equal(kcmp_polar_express(&ck, &cd, shape, &row), 1);
                    snprintf(what, sizeof what, "polar_express %s variant %d stage %d", paths[pi], variant, st);
                    assert_rows_equal(&row.row, &rep.rows[st], what);
                }
                /* the emulation's own arithmetic (fp32 fma chains) as declared passes */
                k.accum = "fp32";
                k.reduce = "sequential";
                snprintf(what, sizeof what, "polar_express %s %lldx%lld variant %d", paths[pi], (long long)R, (long long)C,
                         variant);
                expect(pe_verify(G, R, C, xs, &k), ULP_PASS, what);
                if (variant == KPE_WIDE_FUSED) {
                    k.form = k.epilogue = k.accum = k.reduce = k.upcast = "unknown";
                    expect(pe_verify(G, R, C, xs, &k), ULP_PASS, what);
                    assert_int_equal(rep.n_rows, 12);
                    assert_non_null(strstr(rep.rows[6].assumption, "--form any --epilogue rounded"));
                }
            }
            for (int bug = DROP_TERM; bug <= BF16_ACC; bug++) {
                if (bug == BF16_ACC && f != PREC_FP32) continue; /* bf16 GEMM outputs hide most of a bf16 sum */
                emulate_pe(G, R, C, 0, 1, f, bug, xs);
                ulp_kernel k = ULP_KERNEL_DEFAULT;
                k.path = paths[pi];
                k.accum = "fp32";
                k.reduce = "sequential";
                k.form = "wide";
                k.epilogue = "single";
                k.coeffs = "polar-express";
                k.upcast = "fp32";
                snprintf(what, sizeof what, "polar_express %s %lldx%lld bug %d", paths[pi], (long long)R, (long long)C, bug);
                expect(pe_verify(G, R, C, xs, &k), ULP_FAIL, what);
            }
            free(G);
            for (int st = 0; st < 6; st++) free(xs[st]);
        }
}

/* PyTorch's normalisation of a bf16 X, X / (X.norm() * 1.02 + 1e-6): the
 * norm (an fp32 sum of squares), its scaling and the division each rounded
 * to bf16.  Declared --upcast none it passes; declared fp32 it fails (when
 * the norm lies far enough from a bf16 value: in one of eight draws) and the
 * storage-format normalisation is named. */
static void polar_express_torch_normalisation(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("polar_express_torch_normalisation"));
    double G[8 * 13], x0[8 * 13];
    ulp_tensor in[1] = {ULP_TENSOR("G", ULP_F64, G, 8, 13)};
    ulp_tensor out[1] = {ULP_TENSOR("x0", ULP_F64, x0, 8, 13)};
    ulp_kernel k = ULP_KERNEL_DEFAULT;
    k.path = "bf16";
    k.accum = "fp32";
    k.reduce = "sequential";
    int caught = 0;
    for (int draw = 0; draw < 8; draw++) {
        float ss = 0.0f;
        for (int i = 0; i < 8 * 13; i++) {
            G[i] = prec_rne(prec_rng_normal(&rng), PREC_BF16);
            ss = fmaf((float)G[i], (float)G[i], ss);
        }
        const double norm = prec_rne(sqrtf(ss), PREC_BF16);
        const double den = prec_rne((float)prec_rne((float)norm * KPE_NORM_SAFETY, PREC_BF16) + KPE_NORM_EPS, PREC_BF16);
        for (int i = 0; i < 8 * 13; i++) x0[i] = prec_rne((float)G[i] / (float)den, PREC_BF16);
        k.upcast = "none";
        expect(run_verify("polar_express", &k, in, 1, out, 1), ULP_PASS, "the bf16 normalisation declared as such");
        k.upcast = "fp32";
        if (run_verify("polar_express", &k, in, 1, out, 1) == ULP_FAIL) {
            caught++;
            if (!strstr(rep.diagnosis, "normalises in the storage format")) fail_msg("diagnosis: %s", rep.diagnosis);
        }
    }
    if (!caught) fail_msg("the bf16 normalisation passed as fp32 in eight draws");
}

/* The coefficients verify declares by name are the kernels' own. */
static void polar_express_coefficients(void **state)
{
    (void)state;
    double G[6] = {1, 0, 0, 0, 1, 0}, x0[6], x1[6];
    ulp_kernel k = ULP_KERNEL_DEFAULT;
    k.coeffs = "3.4445,-4.7750,2.0315";
    ulp_tensor in[1] = {ULP_TENSOR("G", ULP_F64, G, 2, 3)};
    ulp_tensor out[2] = {ULP_TENSOR("x0", ULP_F64, x0, 2, 3), ULP_TENSOR("x1", ULP_F64, x1, 2, 3)};
    char err[512];
    /* bad coefficient lists are refused */
    static const char *const bad_coeffs[] = {"3,4", "3,4,5,6", "a,b,c", "polar", "1,2,", "1e99,1,1"};
    memcpy(x0, G, sizeof G);
    memcpy(x1, G, sizeof G);
    for (size_t i = 0; i < sizeof bad_coeffs / sizeof bad_coeffs[0]; i++) {
        k.coeffs = bad_coeffs[i];
        assert_int_equal(ulp_verify("polar_express", &k, in, 1, out, 2, &rep, err, sizeof err), ULP_BAD_INPUT);
        assert_non_null(strstr(err, "unknown coeffs"));
    }
    k.coeffs = "unknown";
    assert_int_equal(ulp_verify("polar_express", &k, in, 1, out, 2, &rep, err, sizeof err), ULP_BAD_INPUT);
    assert_non_null(strstr(err, "need --coeffs"));
    /* the quintic by name and by value give the same rows */
    k.accum = "fp32";
    k.reduce = "sequential";
    k.form = "wide";
    k.epilogue = "single";
    k.coeffs = "muon-quintic";
    assert_int_not_equal(ulp_verify("polar_express", &k, in, 1, out, 2, &rep, err, sizeof err), ULP_BAD_INPUT);
    const double by_name = rep.rows[1].max_bound_u;
    k.coeffs = "3.4445,-4.7750,2.0315";
    assert_int_not_equal(ulp_verify("polar_express", &k, in, 1, out, 2, &rep, err, sizeof err), ULP_BAD_INPUT);
    assert_true(rep.rows[1].max_bound_u == by_name);
}

/* ---- the command line ------------------------------------------------------------------------ */

static void write_case(const char *name, tfile_dtype t, int ndim, const int64_t *shape, const double *v)
{
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (tfile_write_npy(path, t, ndim, shape, v, err, sizeof err) != 0) fail_msg("%s", err);
}

static void run_expect(const char *args, int want_rc, const char *want_text)
{
    char out[16384];
    int rc = test_run_cli("verify", args, out, sizeof out);
    if (rc != want_rc || !strstr(out, want_text)) fail_msg("verify %s: exit %d (want %d, '%s'): %s", args, rc, want_rc, want_text, out);
}

/* Each op from .npy files: the correct kernel PASSes, a twin FAILs. */
static void cli_verifies_files(void **state)
{
    (void)state;
    TEST_REQUIRE_BIN();
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("cli_verifies_files"));
    char args[4096];
    /* embedding: tokens as float64 integers, bf16 tables */
    emb_data good = emb_make(&rng, PREC_BF16, OK), bad = emb_make(&rng, PREC_BF16, WRONG_ELEMENT);
    const int64_t vc[2] = {EV, EC}, nc[2] = {EN, EC}, n1[1] = {EN};
    write_case("table.npy", TFILE_BF16, 2, vc, good.table);
    write_case("tokens.npy", TFILE_F64, 1, n1, good.tokens);
    write_case("out.npy", TFILE_BF16, 2, nc, good.out);
    write_case("dout.npy", TFILE_BF16, 2, nc, good.dout);
    write_case("dt0.npy", TFILE_BF16, 2, vc, good.dt0);
    write_case("dt.npy", TFILE_BF16, 2, vc, good.dt);
    write_case("badtokens.npy", TFILE_F64, 1, n1, bad.tokens);
    write_case("badtable.npy", TFILE_BF16, 2, vc, bad.table);
    write_case("badout.npy", TFILE_BF16, 2, nc, bad.out);
    snprintf(args, sizeof args, "embedding --path bf16 --inputs %s/table.npy,%s/tokens.npy --outputs %s/out.npy", dir, dir, dir);
    run_expect(args, 0, "verify: PASS");
    snprintf(args, sizeof args, "embedding --path bf16 --pass bwd --accum fp32 --reduce sequential --inputs %s/tokens.npy,"
             "%s/dout.npy,dtable0=%s/dt0.npy --outputs %s/dt.npy", dir, dir, dir, dir);
    run_expect(args, 0, "verify: PASS");
    snprintf(args, sizeof args, "embedding --path bf16 --inputs %s/badtable.npy,%s/badtokens.npy --outputs %s/badout.npy", dir,
             dir, dir);
    run_expect(args, 1, "a gather is exact");
    emb_free(&good);
    emb_free(&bad);
    /* grad_norm: fp32 gradients, the largest square left out */
    double g[1000], norm;
    for (int i = 0; i < 1000; i++) g[i] = prec_rne(prec_rng_normal(&rng), PREC_FP32);
    const int64_t s1000[1] = {1000}, s1[1] = {1};
    write_case("g.npy", TFILE_F32, 1, s1000, g);
    norm = emulate_grad_norm(g, 1000, OK);
    write_case("norm.npy", TFILE_F32, 1, s1, &norm);
    norm = emulate_grad_norm(g, 1000, DROP_TERM);
    write_case("badnorm.npy", TFILE_F32, 1, s1, &norm);
    snprintf(args, sizeof args, "grad_norm --path fp32 --accum fp32 --reduce sequential --inputs %s/g.npy --outputs %s/norm.npy",
             dir, dir);
    run_expect(args, 0, "verify: PASS");
    snprintf(args, sizeof args, "grad_norm --path fp32 --accum fp32 --reduce sequential --inputs %s/g.npy --outputs "
             "%s/badnorm.npy", dir, dir);
    run_expect(args, 1, "FAIL");
    /* transpose: a copy off by one ulp */
    double *x = alloc_doubles(TM * TNC), *y = alloc_doubles(TM * TNC);
    for (int64_t i = 0; i < TM * TNC; i++) x[i] = prec_rne(prec_rng_normal(&rng), PREC_FP16);
    const int64_t xs[2] = {TM, TNC}, ys[2] = {TNC, TM};
    write_case("tx.npy", TFILE_F16, 2, xs, x);
    emulate_transpose(x, NULL, PREC_FP16, OK, y);
    write_case("ty.npy", TFILE_F16, 2, ys, y);
    emulate_transpose(x, NULL, PREC_FP16, WRONG_ELEMENT, y);
    write_case("tybad.npy", TFILE_F16, 2, ys, y);
    snprintf(args, sizeof args, "transpose --path fp16 --inputs %s/tx.npy --outputs %s/ty.npy", dir, dir);
    run_expect(args, 0, "verify: PASS against the bound of the declared kernel (exact (a copy))");
    snprintf(args, sizeof args, "transpose --path fp16 --inputs %s/tx.npy --outputs %s/tybad.npy", dir, dir);
    run_expect(args, 1, "a copy is exact");
    free(x);
    free(y);
    /* rope: bf16, the fp32 angle from the frequencies given */
    float ct[RT * RHALF], st[RT * RHALF], inv[RHALF];
    double inv_d[RHALF];
    krope_tables_host(ct, st, inv, RT, RD, 10000.0);
    for (int i = 0; i < RHALF; i++) inv_d[i] = inv[i];
    double *rx = alloc_doubles(RN), *ry = alloc_doubles(RN);
    for (int64_t i = 0; i < RN; i++) rx[i] = prec_rne(prec_rng_normal(&rng), PREC_BF16);
    const int64_t rs[4] = {RB, RT, RH, RD}, hs[1] = {RHALF};
    write_case("rx.npy", TFILE_BF16, 4, rs, rx);
    write_case("rinv.npy", TFILE_F32, 1, hs, inv_d);
    emulate_rope(rx, 0, KROPE_FP32_ANGLE, ct, st, inv, PREC_BF16, OK, ry);
    write_case("ry.npy", TFILE_BF16, 4, rs, ry);
    emulate_rope(rx, 0, KROPE_FP32_ANGLE, ct, st, inv, PREC_BF16, DROP_TERM, ry);
    write_case("rybad.npy", TFILE_BF16, 4, rs, ry);
    snprintf(args, sizeof args, "rope --path bf16 --accum fp32 --inputs %s/rx.npy,inv_freq=%s/rinv.npy --outputs %s/ry.npy", dir,
             dir, dir);
    run_expect(args, 0, "verify: PASS against the bound of the declared kernel (--accum fp32 --angle fp32)");
    snprintf(args, sizeof args, "rope --path bf16 --accum fp32 --inputs %s/rx.npy,inv_freq=%s/rinv.npy --outputs %s/rybad.npy",
             dir, dir, dir);
    run_expect(args, 1, "FAIL");
    free(rx);
    free(ry);
    /* polar_express: the normalisation and the first two steps */
    double G[8 * 13], *px[6];
    for (int st_ = 0; st_ < 6; st_++) px[st_] = alloc_doubles(8 * 13);
    for (int i = 0; i < 8 * 13; i++) G[i] = prec_rne(prec_rng_normal(&rng), PREC_BF16);
    emulate_pe(G, 8, 13, 0, 0, PREC_BF16, OK, px);
    const int64_t gs[2] = {8, 13};
    write_case("G.npy", TFILE_BF16, 2, gs, G);
    write_case("x0.npy", TFILE_BF16, 2, gs, px[0]);
    write_case("x1.npy", TFILE_BF16, 2, gs, px[1]);
    write_case("x2.npy", TFILE_BF16, 2, gs, px[2]);
    emulate_pe(G, 8, 13, 0, 0, PREC_BF16, TRUNCATE, px);
    write_case("x0bad.npy", TFILE_BF16, 2, gs, px[0]);
    snprintf(args, sizeof args, "polar_express --path bf16 --accum fp32 --reduce sequential --form wide --epilogue rounded --upcast fp32 "
             "--coeffs polar-express --inputs %s/G.npy --outputs x0=%s/x0.npy,x1=%s/x1.npy,x2=%s/x2.npy", dir, dir, dir, dir);
    run_expect(args, 0, "verify: PASS");
    snprintf(args, sizeof args, "polar_express --path bf16 --accum fp32 --reduce sequential --form wide --epilogue rounded --upcast fp32 "
             "--coeffs polar-express --inputs %s/G.npy --outputs x1=%s/x1.npy,x2=%s/x2.npy", dir, dir, dir);
    run_expect(args, 2, "x1 needs x0");
    snprintf(args, sizeof args, "polar_express --path bf16 --accum fp32 --reduce sequential --form wide --epilogue rounded --upcast fp32 "
             "--coeffs polar-express --inputs %s/G.npy --outputs x0=%s/x0bad.npy", dir, dir);
    run_expect(args, 1, "FAIL");
    for (int st_ = 0; st_ < 6; st_++) free(px[st_]);
}

static void cli_refuses_bad_input(void **state)
{
    (void)state;
    TEST_REQUIRE_BIN();
    const double v[24] = {1, 2, 3, -1, 0.5, 0.25, 1, 2, 3, 4, 5, 6, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1};
    const double half[1] = {0.5}, odd[1] = {1.0009765625};
    const int64_t s23[2] = {2, 3}, s32[2] = {3, 2}, s3[1] = {3}, s2[1] = {2}, s1[1] = {1}, s4d[4] = {1, 2, 3, 4};
    const int64_t s2222[4] = {1, 2, 2, 2}, s22[2] = {2, 2}, s12[2] = {1, 2}, s6[1] = {6};
    write_case("m23.npy", TFILE_F32, 2, s23, v);
    write_case("m32.npy", TFILE_F32, 2, s32, v);
    write_case("v3.npy", TFILE_F32, 1, s3, v);
    write_case("v2.npy", TFILE_F32, 1, s2, v);
    write_case("v6.npy", TFILE_F32, 1, s6, v);
    write_case("one.npy", TFILE_F32, 1, s1, v);
    write_case("half.npy", TFILE_F32, 1, s1, half);
    write_case("odd.npy", TFILE_F32, 1, s1, odd);
    write_case("r4.npy", TFILE_F32, 4, s4d, v);       /* (1, 2, 3, 4): T 2, H 3, D 4 */
    write_case("r2.npy", TFILE_F32, 4, s2222, v);     /* D = 2 */
    write_case("c22.npy", TFILE_F32, 2, s22, v);
    write_case("c12.npy", TFILE_F32, 2, s12, v);
    unsigned char buf[256];
    const char *header = "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }\n";
    size_t h = strlen(header);
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (unsigned char)h;
    buf[9] = 0;
    memcpy(buf + 10, header, h);
    memset(buf + 10 + h, 0, 24);
    char ipath[512];
    snprintf(ipath, sizeof ipath, "%s/int.npy", dir);
    FILE *fp = fopen(ipath, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(buf, 1, 10 + h + 24, fp), 10 + h + 24);
    fclose(fp);
    static const test_cli_case cases[] = {
        /* rope */
        {"rope --path fp32 --inputs D/m23.npy --outputs D/m23.npy", "x must have at least three dimensions"},
        {"rope --path fp32 --inputs D/r4.npy --outputs D/r2.npy", "y's shape differs from x's"},
        {"rope --path fp32 --inputs D/r4.npy,cos=D/c22.npy --outputs D/r4.npy", "cos and sin come together"},
        {"rope --path fp32 --inputs D/r4.npy,cos=D/c12.npy,sin=D/c12.npy --outputs D/r4.npy", "T' >= T = 2"},
        {"rope --path fp32 --inputs D/r4.npy,inv_freq=D/v3.npy --outputs D/r4.npy", "inv_freq has 3 elements, D/2 = 2"},
        {"rope --path fp32 --angle table --inputs D/r4.npy,inv_freq=D/v2.npy --outputs D/r4.npy", "--angle fp32"},
        {"rope --path fp32 --angle sincos --inputs D/r4.npy --outputs D/r4.npy", "unknown angle 'sincos'"},
        {"rope --path fp32 --base 0.5 --inputs D/r4.npy --outputs D/r4.npy", "base 0.5 is outside"},
        {"rope --path fp32 --reduce sequential --inputs D/r4.npy --outputs D/r4.npy", "rope is elementwise"},
        {"rope --path fp32 --pass bwd --inputs D/r4.npy --outputs y=D/r4.npy", "not one of this pass's outputs"},
        {"rope --path fp32 --inputs D/r4.npy,D/r4.npy,D/r4.npy,D/r4.npy,D/r4.npy --outputs D/r4.npy", "more files than"},
        {"rope --path fp32 --inputs D/int.npy --outputs D/r4.npy", "dtype i4 is not a floating-point"},
        {"rope --path bf16 --inputs D/odd.npy --outputs D/r4.npy", "is not a bf16 value"},
        {"matmul --path fp32 --base 500 --inputs D/m23.npy,D/m32.npy --outputs D/c22.npy", "angle and base are rope's"},
        /* grad_norm */
        {"grad_norm --path fp32 --inputs D/v6.npy --outputs D/v2.npy", "norm has 2 elements"},
        {"grad_norm --path fp32 --inputs D/v6.npy --outputs D/one.npy,D/one.npy", "more files than"},
        {"grad_norm --path fp32 --pass bwd --inputs D/v6.npy --outputs D/one.npy", "grad_norm has no bwd pass"},
        {"grad_norm --path fp32 --math-ulps 3 --inputs D/v6.npy --outputs D/one.npy", "--math-ulps does not apply"},
        {"grad_norm --path fp32 --col-reduce pairwise --inputs D/v6.npy --outputs D/one.npy", "grad_norm has none"},
        {"grad_norm --path fp32 --inputs D/int.npy --outputs D/one.npy", "dtype i4 is not a floating-point"},
        /* embedding: table m23 (V 2, C 3) */
        {"embedding --path fp32 --inputs D/m23.npy,D/v2.npy --outputs D/m23.npy", "token 1 is 2: tokens are in [0, V = 2)"},
        {"embedding --path fp32 --inputs D/m23.npy,D/half.npy --outputs D/m23.npy", "is not an index"},
        {"embedding --path fp32 --inputs D/m23.npy,D/one.npy --outputs D/m23.npy", "out's shape differs from (tokens..., C = 3)"},
        {"embedding --path fp32 --inputs D/v3.npy,D/one.npy --outputs D/m23.npy", "table must be (V, C)"},
        {"embedding --path fp32 --inputs D/m23.npy --outputs D/m23.npy", "missing input tensor 'tokens'"},
        {"embedding --path fp32 --pass bwd --inputs D/one.npy,D/m23.npy,D/m23.npy --outputs D/m23.npy",
         "dout's shape differs from (tokens..., C = 3)"},
        {"embedding --path fp32 --pass bwd --inputs D/v2.npy,D/m23.npy,D/m32.npy --outputs D/m23.npy", "dtable0's shape differs"},
        {"embedding --path fp32 --exp fast --inputs D/m23.npy,D/one.npy --outputs D/m23.npy", "embedding has none"},
        /* transpose: x m23 (M 2, N 3) */
        {"transpose --path fp32 --inputs D/m23.npy --outputs D/m23.npy", "y's shape differs from x^T's (N, M) = (3, 2)"},
        {"transpose --path fp32 --inputs D/m23.npy,D/m23.npy --outputs D/m32.npy", "y0's shape differs"},
        {"transpose --path fp32 --inputs D/v3.npy --outputs D/v3.npy", "x must be a matrix"},
        {"transpose --path fp32 --inputs D/m23.npy,D/m32.npy,D/m32.npy --outputs D/m32.npy", "more files than"},
        {"transpose --path fp32 --pass bwd --inputs D/m23.npy --outputs D/m32.npy", "transpose has no bwd pass"},
        {"transpose --path fp32 --math-ulps 1 --inputs D/m23.npy --outputs D/m32.npy", "calls no math function"},
        {"transpose --path fp32 --inputs D/int.npy --outputs D/m32.npy", "dtype i4 is not a floating-point"},
        /* polar_express: G m23 */
        {"polar_express --path fp32 --inputs D/m23.npy --outputs x0=D/m32.npy", "x0's shape differs from G's"},
        {"polar_express --path fp32 --inputs D/v3.npy --outputs x0=D/v3.npy", "G must be a matrix"},
        {"polar_express --path fp32 --inputs D/m23.npy --outputs x0=D/m23.npy,x1=D/m23.npy", "the steps need --coeffs"},
        {"polar_express --path fp32 --inputs D/m23.npy --outputs x2=D/m23.npy", "x2 needs x1"},
        {"polar_express --path fp32 --coeffs 1,2 --inputs D/m23.npy --outputs x0=D/m23.npy", "unknown coeffs '1,2'"},
        {"polar_express --path fp32 --form square --inputs D/m23.npy --outputs x0=D/m23.npy", "unknown form 'square'"},
        {"polar_express --path fp32 --epilogue cublaslt --inputs D/m23.npy --outputs x0=D/m23.npy", "polar_express's epilogue"},
        {"polar_express --path bf16 --accum tf32 --inputs D/m23.npy --outputs x0=D/m23.npy", "needs --path fp32"},
        {"polar_express --path bf16 --accum fp8-fast --inputs D/m23.npy --outputs x0=D/m23.npy", "matrix-unit model of matmul"},
        {"polar_express --path fp8 --inputs D/m23.npy --outputs x0=D/m23.npy", "path fp8 is a matmul path"},
        {"polar_express --path fp32 --inputs D/m23.npy,D/m23.npy --outputs x0=D/m23.npy", "more files than"},
        {"polar_express --path fp32 --inputs D/m23.npy --outputs x6=D/m23.npy", "not one of this pass's outputs"},
        {"polar_express --path fp32 --pass bwd --inputs D/m23.npy --outputs x0=D/m23.npy", "polar_express has no bwd pass"},
        {"rmsnorm --path fp32 --coeffs polar-express --inputs D/m23.npy --outputs D/m23.npy", "coeffs and form are polar_express's"},
        {"polar_express --path fp32 --inputs D/int.npy --outputs x0=D/m23.npy", "dtype i4 is not a floating-point"},
        {"polar_express --path fp32 --upcast gemma --inputs D/m23.npy --outputs x0=D/m23.npy", "polar_express's upcast"},
        {"rope --path fp32 --upcast none --inputs D/r4.npy --outputs D/r4.npy", "upcast is rmsnorm's and polar_express's"},
    };
    test_cli_bad_inputs("verify", dir, cases, sizeof cases / sizeof cases[0]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rope_agrees_with_check_and_twins_fail),
        cmocka_unit_test(grad_norm_agrees_with_check_and_twins_fail),
        cmocka_unit_test(embedding_agrees_with_check_and_twins_fail),
        cmocka_unit_test(transpose_agrees_with_check_and_twins_fail),
        cmocka_unit_test(polar_express_agrees_with_check_and_twins_fail),
        cmocka_unit_test(polar_express_torch_normalisation),
        cmocka_unit_test(polar_express_coefficients),
        cmocka_unit_test(cli_verifies_files),
        cmocka_unit_test(cli_refuses_bad_input),
    };
    return cmocka_run_group_tests(tests, setup_dir, remove_dir);
}
