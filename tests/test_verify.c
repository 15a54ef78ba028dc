/* tests/test_verify.c — `ulpscope verify` and its library: the tensor file
 * readers (good, truncated and hostile .npy and safetensors files), the
 * agreement of verify with check's description of its own kernels on the
 * same data, the planted-bug twins that must FAIL (a dropped term, a
 * truncated output, a bf16 accumulation declared as fp32), unknown
 * declarations (tightest and loosest rows), and the command line's bad input
 * (one line, exit status 2, nothing left behind). */
#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <sys/stat.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "base/tensor_file.h"
#include "kernels/check/compare_rmsnorm.h"
#include "kernels/rmsnorm.h"
#include "precision/format.h"
#include "precision/rng.h"
#include "tests/test_util.h"
#include "verify/verify.h"

static char dir[256];

static int setup_dir(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/ulpscope-test-verify-%ld", (long)getpid());
    return mkdir(dir, 0700);
}

static int remove_dir(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void write_bytes(const char *name, const void *data, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

/* ---- readers ----------------------------------------------------------------------------- */

static void npy_round_trip(void **state)
{
    (void)state;
    const double v[6] = {1.0, -0.5, 0.09375, 65504.0, -0.0, 5.9604644775390625e-08};
    const int64_t shape[2] = {2, 3};
    const tfile_dtype types[] = {TFILE_F64, TFILE_F32, TFILE_F16};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        char path[512], err[512];
        snprintf(path, sizeof path, "%s/rt%zu.npy", dir, k);
        assert_int_equal(tfile_write_npy(path, types[k], 2, shape, v, err, sizeof err), 0);
        tfile_tensor t;
        assert_int_equal(tfile_read_npy(path, &t, err, sizeof err), 0);
        assert_int_equal(t.ndim, 2);
        assert_int_equal(t.shape[0], 2);
        assert_int_equal(t.shape[1], 3);
        for (int i = 0; i < 6; i++) assert_true(t.data[i] == v[i] && signbit(t.data[i]) == signbit(v[i]));
        tfile_free(&t);
    }
    /* bf16 is written as u2 patterns; a value that is not bf16 is refused */
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/bf.npy", dir);
    const double b[3] = {1.0, -2.5, 3.140625};
    const int64_t n3[1] = {3};
    assert_int_equal(tfile_write_npy(path, TFILE_BF16, 1, n3, b, err, sizeof err), 0);
    tfile_tensor t;
    assert_int_equal(tfile_read_npy(path, &t, err, sizeof err), 0);
    assert_int_equal(t.dtype, TFILE_U16);
    for (int i = 0; i < 3; i++) assert_true(tfile_bf16_to_double((uint16_t)t.data[i]) == b[i]);
    tfile_free(&t);
    const double not_bf16[1] = {1.0 + 0x1p-10};
    assert_int_equal(tfile_write_npy(path, TFILE_BF16, 1, n3, not_bf16, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a bf16 value"));
}

/* A .npy file from a header text and data bytes (version 1.0). */
static size_t make_npy(unsigned char *out, const char *header, const void *data, size_t n)
{
    size_t h = strlen(header);
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    out[8] = (unsigned char)(h & 0xff);
    out[9] = (unsigned char)(h >> 8);
    memcpy(out + 10, header, h);
    memcpy(out + 10 + h, data, n);
    return 10 + h + n;
}

static void npy_refuses_bad_files(void **state)
{
    (void)state;
    static const struct {
        const char *header;
        size_t data_bytes;
        const char *message;
    } cases[] = {
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", 20, "data bytes"},      /* truncated */
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", 28, "data bytes"},      /* padded */
        {"{'descr': '<c8', 'fortran_order': False, 'shape': (3,), }\n", 24, "dtype '<c8'"},
        {"{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }\n", 24, "Fortran order"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999), }\n", 24, "shape"},
        {"{'descr': '<f4', 'shape': (2, 3), }\n", 24, "lacks 'fortran_order'"},
        {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (6,), }\n", 24, "repeated key"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } junk\n", 24, "after the .npy header"},
        {"[1, 2]\n", 24, "not a dict"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }\n", 4, "dimensions"},
    };
    unsigned char buf[512], zeros[64] = {0};
    char err[512];
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        size_t n = make_npy(buf, cases[k].header, zeros, cases[k].data_bytes);
        tfile_tensor t;
        assert_int_equal(tfile_read_npy_bytes(buf, n, "case.npy", &t, err, sizeof err), -1);
        if (!strstr(err, cases[k].message) || strncmp(err, "case.npy: ", 10) != 0)
            fail_msg("case %zu: message '%s' lacks '%s'", k, err, cases[k].message);
        assert_null(t.data);
    }
    /* every prefix of a good file is refused, never read */
    size_t n = make_npy(buf, "{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }\n", zeros, 32);
    for (size_t cut = 0; cut < n; cut++) {
        tfile_tensor t;
        assert_int_equal(tfile_read_npy_bytes(buf, cut, "cut.npy", &t, err, sizeof err), -1);
    }
    tfile_tensor t;
    assert_int_equal(tfile_read_npy_bytes(buf, n, "good.npy", &t, err, sizeof err), 0);
    assert_int_equal(t.n, 4);
    tfile_free(&t);
    /* a header length past the end, a bad version */
    buf[8] = 0xff;
    assert_int_equal(tfile_read_npy_bytes(buf, n, "x.npy", &t, err, sizeof err), -1);
    assert_non_null(strstr(err, "header length"));
    buf[6] = 7;
    assert_int_equal(tfile_read_npy_bytes(buf, n, "x.npy", &t, err, sizeof err), -1);
    assert_non_null(strstr(err, "version"));
    /* a directory is not a file */
    assert_int_equal(tfile_read_npy(dir, &t, err, sizeof err), -1);
    assert_non_null(strstr(err, "directory"));
}

static size_t make_safetensors(unsigned char *out, const char *header, const void *data, size_t n)
{
    uint64_t h = strlen(header);
    for (int k = 0; k < 8; k++) out[k] = (unsigned char)(h >> (8 * k));
    memcpy(out + 8, header, h);
    memcpy(out + 8 + h, data, n);
    return 8 + h + n;
}

static void safetensors_reads_and_refuses(void **state)
{
    (void)state;
    unsigned char buf[1024], data[24];
    float f[2] = {1.5f, -2.0f};
    uint16_t bf[2] = {0x3f80, 0xc040}; /* 1, -3 */
    memcpy(data, f, 8);
    memcpy(data + 8, bf, 4);
    char err[512];
    tfile_tensor *ts;
    int n;
    size_t len = make_safetensors(buf, "{\"__metadata__\":{\"a\":\"b\"},\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                       "\"g\":{\"dtype\":\"BF16\",\"shape\":[1,2],\"data_offsets\":[8,12]}}", data, 12);
    assert_int_equal(tfile_read_safetensors_bytes(buf, len, "t.safetensors", &ts, &n, err, sizeof err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(ts[0].name, "x");
    assert_true(ts[0].data[0] == 1.5 && ts[0].data[1] == -2.0);
    assert_true(ts[1].data[0] == 1.0 && ts[1].data[1] == -3.0 && ts[1].ndim == 2);
    tfile_free_all(ts, n);
    static const struct {
        const char *header;
        const char *message;
    } cases[] = {
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,12]}}", "bytes where shape"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,99]}}", "data_offsets"},
        {"{\"x\":{\"dtype\":\"C64\",\"shape\":[2],\"data_offsets\":[0,8]}}", "dtype 'C64'"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"y\":{\"dtype\":\"F32\",\"shape\":[1],"
         "\"data_offsets\":[4,8]}}", "overlap"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", "shape entry"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[2]}}", "data_offsets"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", "malformed"},
        {"[]", "not a JSON object"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        len = make_safetensors(buf, cases[k].header, data, 12);
        assert_int_equal(tfile_read_safetensors_bytes(buf, len, "t.safetensors", &ts, &n, err, sizeof err), -1);
        if (!strstr(err, cases[k].message)) fail_msg("case %zu: message '%s' lacks '%s'", k, err, cases[k].message);
        assert_null(ts);
    }
    /* a header length past the end of the file */
    len = make_safetensors(buf, "{}", data, 0);
    buf[0] = 0xff;
    assert_int_equal(tfile_read_safetensors_bytes(buf, len, "t.safetensors", &ts, &n, err, sizeof err), -1);
    assert_non_null(strstr(err, "header length"));
}

/* ---- emulated kernels, the agreement with check, the twins ------------------------------------ */

enum { BUG_NONE, BUG_DROP_TERM, BUG_TRUNCATE, BUG_BF16_ACC };

/* RMSNorm as a GPU kernel of storage f computes it, one thread per row, in
 * fp32 (Gemma placement); bugs planted on request. */
static void emulate_rmsnorm(int64_t N, int64_t C, const double *x, const double *g, prec_format f, int bug, double *y,
                            double *rstd)
{
    for (int64_t n = 0; n < N; n++) {
        float ss = 0.0f;
        for (int64_t c = 0; c < C; c++) {
            if (bug == BUG_DROP_TERM && c == C / 2) continue;
            ss = (float)((double)ss + (double)((float)(x[n * C + c] * x[n * C + c])));
            if (bug == BUG_BF16_ACC) ss = (float)prec_rne(ss, PREC_BF16);
        }
        float r = 1.0f / sqrtf(ss / (float)C + 1e-5f);
        rstd[n] = r;
        for (int64_t c = 0; c < C; c++) {
            float v = (float)x[n * C + c] * r * (float)g[c];
            y[n * C + c] = bug == BUG_TRUNCATE ? prec_round(v, f, (prec_rounding){PREC_RZ, PREC_OVF_IEEE, false}, 0) : prec_rne(v, f);
        }
    }
}

typedef struct {
    int64_t N, C;
    double *x, *g, *y, *rstd;
} data;

static data make_data(prec_rng *rng, int64_t N, int64_t C, prec_format f, int bug)
{
    data d = {N, C, malloc(N * C * sizeof(double)), malloc(C * sizeof(double)), malloc(N * C * sizeof(double)),
              malloc(N * sizeof(double))};
    assert_true(d.x && d.g && d.y && d.rstd);
    for (int64_t i = 0; i < N * C; i++) d.x[i] = prec_rne(prec_rng_normal(rng), f);
    for (int64_t c = 0; c < C; c++) d.g[c] = prec_rne(1.0 + 0.25 * prec_rng_normal(rng), f);
    emulate_rmsnorm(N, C, d.x, d.g, f, bug, d.y, d.rstd);
    return d;
}

static void free_data(data *d) { free(d->x); free(d->g); free(d->y); free(d->rstd); }

static int verify_data(const data *d, const char *path, const char *accum, const char *reduce, const char *upcast,
                       ulp_report *rep)
{
    ulp_tensor in[2] = {ULP_TENSOR("x", ULP_F64, d->x, d->N, d->C), ULP_TENSOR("gain", ULP_F64, d->g, d->C)};
    ulp_tensor out[2] = {ULP_TENSOR("y", ULP_F64, d->y, d->N, d->C), ULP_TENSOR("rstd", ULP_F64, d->rstd, d->N)};
    ulp_kernel k = ULP_KERNEL_DEFAULT;
    k.path = path;
    k.accum = accum;
    k.reduce = reduce;
    k.upcast = upcast;
    char err[512];
    int rc = ulp_verify("rmsnorm", &k, in, 2, out, 2, rep, err, sizeof err);
    if (rc == ULP_BAD_INPUT) fail_msg("bad input: %s", err);
    return rc;
}

/* verify, declared as check describes its variant, reports check's rows bit for bit. */
static void verify_agrees_with_check(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("verify_agrees_with_check"));
    static const char *const upcast[KRMSNORM_NVARIANTS] = {"gemma", "gemma", "gemma", "llama", "none"};
    const prec_format formats[] = {PREC_FP32, PREC_BF16, PREC_FP16};
    const char *paths[] = {"fp32", "bf16", "fp16"};
    static ulp_report rep;
    for (int fi = 0; fi < 3; fi++)
        for (int v = 0; v < KRMSNORM_NVARIANTS; v++) {
            data d = make_data(&rng, 9, 1001, formats[fi], BUG_NONE);
            kcmp_rmsnorm_kernel k = kcheck_rmsnorm_kernel(formats[fi], v, d.N, d.C);
            /* the forward's description: fwd_depth (verify declares one depth for the row sums) */
            kcmp_rmsnorm_data cd = {d.N, d.C, d.x, d.g, NULL, d.y, d.rstd, NULL, NULL};
            kcheck_acc rows[KCMP_RMSNORM_MAX_ROWS];
            char shape[96];
            snprintf(shape, sizeof shape, "N=%lld C=%lld", (long long)d.N, (long long)d.C);
            assert_int_equal(kcmp_rmsnorm(&k, &cd, shape, rows), 2);
            char reduce[32];
            snprintf(reduce, sizeof reduce, "depth:%lld", (long long)k.fwd_depth);
            verify_data(&d, paths[fi], "fp32", reduce, upcast[v], &rep);
            assert_int_equal(rep.n_rows, 2);
            for (int r = 0; r < 2; r++) {
                const kcheck_row *c = &rows[r].row;
                const ulp_row *u = &rep.rows[r];
                assert_string_equal(c->output, u->output);
                if (c->max_err_u != u->max_err_u || c->rms_err_u != u->rms_err_u || c->max_bound_u != u->max_bound_u ||
                    c->rms_bound_u != u->rms_bound_u || c->worst_ratio != u->worst_ratio || c->pass != u->pass ||
                    c->worst_index != u->worst_index)
                    fail_msg("%s variant %d output %s: check %.17g/%.17g u (bound %.17g) vs verify %.17g/%.17g u (bound %.17g)",
                             paths[fi], v, c->output, c->max_err_u, c->rms_err_u, c->max_bound_u, u->max_err_u,
                             u->rms_err_u, u->max_bound_u);
                assert_string_equal(c->worst_detail, u->worst_detail);
            }
            free_data(&d);
        }
}

/* The correct emulated kernel passes as declared; each planted bug FAILs. */
static void planted_bugs_fail(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("planted_bugs_fail"));
    static ulp_report rep;
    static const struct {
        int64_t N, C;
    } shapes[] = {{5, 7}, {16, 64}, {16, 1001}};
    for (size_t s = 0; s < 3; s++) {
        data good = make_data(&rng, shapes[s].N, shapes[s].C, PREC_BF16, BUG_NONE);
        if (verify_data(&good, "bf16", "fp32", "sequential", "gemma", &rep) != ULP_PASS) {
            ulp_report_print(stdout, &rep);
            fail_msg("the correct kernel failed");
        }
        free_data(&good);
        for (int bug = BUG_DROP_TERM; bug <= BUG_BF16_ACC; bug++) {
            if (bug == BUG_BF16_ACC && shapes[s].C < 32) continue; /* 7 terms: bf16 sums may be exact */
            data d = make_data(&rng, shapes[s].N, shapes[s].C, PREC_BF16, bug);
            if (verify_data(&d, "bf16", "fp32", "sequential", "gemma", &rep) != ULP_FAIL) {
                ulp_report_print(stdout, &rep);
                fail_msg("planted bug %d passed at N=%lld C=%lld", bug, (long long)shapes[s].N, (long long)shapes[s].C);
            }
            /* Named where a bf16 accumulator has a finite bound (C u < 1/2);
             * beyond, the diagnosis says no finite bound explains it. */
            if (bug == BUG_BF16_ACC && shapes[s].C == 64 && !strstr(rep.diagnosis, "accumulates in bf16"))
                fail_msg("diagnosis: %s", rep.diagnosis);
            free_data(&d);
        }
    }
}

/* Unknown declarations: two rows per output, tightest then loosest. */
static void unknown_reports_both_bounds(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("unknown_reports_both_bounds"));
    static ulp_report rep;
    data d = make_data(&rng, 8, 300, PREC_FP32, BUG_NONE);
    assert_int_equal(verify_data(&d, "fp32", "unknown", "unknown", "unknown", &rep), ULP_PASS);
    assert_int_equal(rep.unknown, 1);
    assert_int_equal(rep.n_rows, 4);
    assert_non_null(strstr(rep.rows[0].assumption, "--accum fp32 --reduce pairwise --upcast gemma"));
    assert_non_null(strstr(rep.rows[2].assumption, "--accum storage --reduce sequential --upcast none"));
    assert_true(rep.rows[2].max_bound_u >= rep.rows[0].max_bound_u);
    assert_non_null(strstr(rep.verdict, "loosest"));
    free_data(&d);
}

/* ---- the command line ------------------------------------------------------------------------ */

static void write_case(const char *name, tfile_dtype t, int ndim, const int64_t *shape, const double *v)
{
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (tfile_write_npy(path, t, ndim, shape, v, err, sizeof err) != 0) fail_msg("%s", err);
}

static void cli_verifies_files(void **state)
{
    (void)state;
    TEST_REQUIRE_BIN();
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("cli_verifies_files"));
    data good = make_data(&rng, 6, 200, PREC_BF16, BUG_NONE), bad = make_data(&rng, 6, 200, PREC_BF16, BUG_BF16_ACC);
    const int64_t nc[2] = {6, 200}, c1[1] = {200}, n1[1] = {6};
    write_case("x.npy", TFILE_F32, 2, nc, good.x);
    write_case("g.npy", TFILE_BF16, 1, c1, good.g);
    write_case("y.npy", TFILE_BF16, 2, nc, good.y);
    write_case("r.npy", TFILE_F32, 1, n1, good.rstd);
    write_case("xb.npy", TFILE_F32, 2, nc, bad.x);
    write_case("gb.npy", TFILE_BF16, 1, c1, bad.g);
    write_case("yb.npy", TFILE_BF16, 2, nc, bad.y);
    char args[2048], out[8192];
    snprintf(args, sizeof args, "rmsnorm --path bf16 --accum fp32 --reduce sequential --upcast gemma --inputs %s/x.npy,%s/g.npy "
             "--outputs y=%s/y.npy,rstd=%s/r.npy", dir, dir, dir, dir);
    int rc = test_run_cli("verify", args, out, sizeof out);
    if (rc != 0) fail_msg("exit %d: %s", rc, out);
    assert_non_null(strstr(out, "verify: PASS"));
    snprintf(args, sizeof args, "rmsnorm --path bf16 --accum fp32 --reduce sequential --upcast gemma --inputs %s/xb.npy,%s/gb.npy "
             "--outputs %s/yb.npy", dir, dir, dir);
    rc = test_run_cli("verify", args, out, sizeof out);
    if (rc != 1 || !strstr(out, "FAIL") || !strstr(out, "worst [")) fail_msg("exit %d: %s", rc, out);
    free_data(&good);
    free_data(&bad);
}

static void cli_refuses_bad_input(void **state)
{
    (void)state;
    TEST_REQUIRE_BIN();
    const int64_t nc[2] = {2, 3}, c1[1] = {3}, c4[1] = {4};
    const double v[6] = {1, 2, 3, -1, 0.5, 0.25}, odd[6] = {1.0009765625, 2, 3, 4, 5, 6};
    write_case("a.npy", TFILE_F32, 2, nc, v);
    write_case("a3.npy", TFILE_F32, 1, c1, v);
    write_case("a4.npy", TFILE_F32, 1, c4, v);
    write_case("odd.npy", TFILE_F32, 2, nc, odd);
    unsigned char buf[256], ints[24] = {0};
    write_bytes("int.npy", buf, make_npy(buf, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }\n", ints, 24));
    write_bytes("short.npy", buf, make_npy(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", ints, 22));
    static const struct {
        const char *args;
        const char *message;
    } cases[] = {
        {"rmsnorm --path bf16 --inputs D/missing.npy --outputs D/a.npy", "missing.npy: No such file"},
        {"rmsnorm --path bf16 --inputs D/int.npy --outputs D/a.npy", "dtype i4 is not a floating-point"},
        {"rmsnorm --path bf16 --inputs D/short.npy --outputs D/a.npy", "truncated or padded"},
        {"rmsnorm --path bf16 --inputs D/a.npy,D/a4.npy --outputs D/a.npy", "gain has 4 elements"},
        {"rmsnorm --path bf16 --inputs D/a.npy --outputs D/a3.npy", "y's shape differs"},
        {"rmsnorm --path bf16 --inputs D/odd.npy --outputs D/a.npy", "is not a bf16 value"},
        {"rmsnorm --path bf16 --inputs D --outputs D/a.npy", "neither a .npy"},
        {"rmsnorm --path bf16 --inputs D/a.npy,D/a3.npy,D/a.npy --outputs D/a.npy", "more files than"},
        {"rmsnorm --path bf16 --inputs w=D/a.npy --outputs D/a.npy", "not one of this pass's inputs"},
        {"rmsnorm --path bf16 --accum fp12 --inputs D/a.npy --outputs D/a.npy", "unknown accumulation 'fp12'"},
        {"rmsnorm --path bf16 --reduce blocks:0 --inputs D/a.npy --outputs D/a.npy", "unknown reduction"},
        {"rmsnorm --path e4m3 --inputs D/a.npy --outputs D/a.npy", "unknown path 'e4m3'"},
        {"rmsnorm --inputs D/a.npy --outputs D/a.npy", "--path is required"},
        {"rmsnorm --path bf16 --inputs D/a.npy", "--outputs is required"},
        {"softmax --path bf16 --inputs D/a.npy --outputs D/a.npy", "unknown op 'softmax'"},
        {"rmsnorm --path bf16 --path bf16 --inputs D/a.npy --outputs D/a.npy", "given twice"},
        {"rmsnorm --path bf16 --pass bwd --inputs D/a.npy --outputs dx=D/a.npy", "missing input tensor 'dy'"},
        {"rmsnorm --path bf16 --pass bwd --inputs D/a.npy,D/a3.npy,D/a.npy --outputs D/a.npy,D/a4.npy", "dgain has 4"},
    };
    DIR *before = opendir(dir);
    int entries_before = 0;
    while (readdir(before)) entries_before++;
    closedir(before);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char args[1024], out[4096];
        const char *s = cases[k].args;
        size_t o = 0;
        for (; *s && o + 300 < sizeof args; s++) {
            if (*s == 'D' && (s[1] == '/' || s[1] == ' ' || s[1] == '\0') && (s == cases[k].args || s[-1] == ' ' || s[-1] == ',' || s[-1] == '='))
                o += (size_t)snprintf(args + o, sizeof args - o, "%s", dir);
            else args[o++] = *s;
        }
        args[o] = '\0';
        int rc = test_run_cli("verify", args, out, sizeof out);
        int lines = 0;
        for (const char *p = out; *p; p++) lines += *p == '\n';
        if (rc != 2 || !strstr(out, cases[k].message) || lines != 1 || !strstr(out, "ulpscope verify: error: "))
            fail_msg("case %zu (%s): exit %d, want 2 and one line with '%s'; got: %s", k, args, rc, cases[k].message, out);
    }
    DIR *after = opendir(dir);
    int entries_after = 0;
    while (readdir(after)) entries_after++;
    closedir(after);
    assert_int_equal(entries_before, entries_after); /* nothing left behind */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(npy_round_trip),
        cmocka_unit_test(npy_refuses_bad_files),
        cmocka_unit_test(safetensors_reads_and_refuses),
        cmocka_unit_test(verify_agrees_with_check),
        cmocka_unit_test(planted_bugs_fail),
        cmocka_unit_test(unknown_reports_both_bounds),
        cmocka_unit_test(cli_verifies_files),
        cmocka_unit_test(cli_refuses_bad_input),
    };
    return cmocka_run_group_tests(tests, setup_dir, remove_dir);
}
