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
#include "kernels/attention.h"
#include "kernels/check/compare_activation.h"
#include "kernels/check/compare_adamw.h"
#include "kernels/check/compare_attention.h"
#include "kernels/check/compare_cross_entropy.h"
#include "kernels/check/compare_layernorm.h"
#include "kernels/check/compare_logsumexp.h"
#include "kernels/check/compare_matmul.h"
#include "kernels/check/compare_residual.h"
#include "kernels/check/compare_rmsnorm.h"
#include "kernels/check/compare_softmax.h"
#include "kernels/activations.h"
#include "kernels/cross_entropy.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/rmsnorm.h"
#include "kernels/softmax.h"
#include "precision/format.h"
#include "precision/mma.h"
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

/* ---- matmul ----------------------------------------------------------------------------- */

/* A GEMM operand set: a (M, K) and b (K, N) row-major in the AB layout;
 * c (M, N), bias (N); y as a kernel wrote it. */
typedef struct {
    int64_t M, N, K;
    double *a, *b, *c, *bias, *y;
} mm_data;

static mm_data mm_alloc(int64_t M, int64_t N, int64_t K)
{
    mm_data d = {M, N, K, malloc(M * K * sizeof(double)), malloc(K * N * sizeof(double)), malloc(M * N * sizeof(double)),
                 malloc(N * sizeof(double)), malloc(M * N * sizeof(double))};
    assert_true(d.a && d.b && d.c && d.bias && d.y);
    return d;
}

static void mm_free(mm_data *d) { free(d->a); free(d->b); free(d->c); free(d->bias); free(d->y); }

static ulp_report mm_rep;

/* ulp_verify of d as a matmul in layout AB; rc as ulp_verify returns it (bad input fails the test). */
static int mm_verify(const mm_data *d, const ulp_kernel *k, int with_c, int with_bias)
{
    ulp_tensor in[4] = {ULP_TENSOR("a", ULP_F64, d->a, d->M, d->K), ULP_TENSOR("b", ULP_F64, d->b, d->K, d->N)};
    int n_in = 2;
    if (with_c) in[n_in++] = ULP_TENSOR("c", ULP_F64, d->c, d->M, d->N);
    if (with_bias) in[n_in++] = ULP_TENSOR("bias", ULP_F64, d->bias, d->N);
    ulp_tensor out[1] = {ULP_TENSOR("y", ULP_F64, d->y, d->M, d->N)};
    char err[512];
    int rc = ulp_verify("matmul", k, in, n_in, out, 1, &mm_rep, err, sizeof err);
    if (rc == ULP_BAD_INPUT) fail_msg("bad input: %s", err);
    return rc;
}

static double gelu_tanh(double z) { return 0.5 * z * (1.0 + tanh(0.7978845608028654 * (z + 0.044715 * z * z * z))); }

/* verify, declared as check describes each (path, accumulation, variant) of
 * our GEMMs, reports check's row bit for bit: the same reference, the same
 * accumulation model, the same epilogue replay. */
static void matmul_agrees_with_check(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("matmul_agrees_with_check"));
    static const struct {
        int64_t M, N, K;
        int bias, gelu;
        double alpha, beta;
    } shapes[] = {{9, 11, 70, 1, 0, 1.0, 0.0}, {7, 5, 257, 1, 1, 0.5, 0.0}, {6, 8, 256, 0, 1, 1.0, 0.5}, {5, 4, 1000, 0, 0, 1.0, 0.0}};
    static const kpath paths[] = {KPATH_FP32, KPATH_BF16, KPATH_FP16, KPATH_FP8};
    static const char *const path_names[] = {"fp32", "bf16", "fp16", "fp8"};
    int compared = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int pi = 0; pi < 4; pi++)
            for (int acc = 0; acc < KMATMUL_NACCUMS; acc++)
                for (int variant = 0; variant < KMATMUL_NVARIANTS; variant++) {
                    const kpath path = paths[pi];
                    const int fp8 = path == KPATH_FP8, block = acc == KMATMUL_ACC_BLOCK_SCALED;
                    if (block && (!fp8 || variant != KMATMUL_FUSED)) continue; /* one variant, fp8 only */
                    const int64_t M = shapes[si].M, N = shapes[si].N, K = shapes[si].K;
                    kcmp_matmul_kernel ck = kcheck_matmul_kernel(path, acc, variant, K, shapes[si].alpha, shapes[si].beta,
                                                                 shapes[si].gelu);
                    /* verify's --split-k S cuts ceil(K/S) terms; our fp8 split_k rounds the slice
                     * up to 16 terms, which a slice count cannot say: those shapes are left out */
                    if (variant == KMATMUL_SPLIT_K && ck.slice != (K + KMATMUL_SPLIT_K_SLICES - 1) / KMATMUL_SPLIT_K_SLICES)
                        continue;
                    const prec_format f = ck.out;
                    mm_data d = mm_alloc(M, N, K);
                    /* fp8: the dequantised operands, e4m3 codes times an fp32 scale */
                    const double scale = fp8 ? prec_rne(1.37e-2, PREC_FP32) : 1.0;
                    for (int64_t i = 0; i < M * K; i++)
                        d.a[i] = fp8 ? prec_rne(prec_rng_normal(&rng) * 8, PREC_E4M3) * scale : prec_rne(prec_rng_normal(&rng), f);
                    for (int64_t i = 0; i < K * N; i++) d.b[i] = prec_rne(prec_rng_normal(&rng), fp8 ? PREC_E4M3 : f);
                    for (int64_t i = 0; i < M * N; i++) d.c[i] = prec_rne(prec_rng_normal(&rng), f);
                    for (int64_t i = 0; i < N; i++) d.bias[i] = prec_rne(prec_rng_normal(&rng), f);
                    /* a y a few units off the exact epilogue */
                    for (int64_t m = 0; m < M; m++)
                        for (int64_t n = 0; n < N; n++) {
                            double z = 0;
                            for (int64_t k = 0; k < K; k++) z += d.a[m * K + k] * d.b[k * N + n];
                            z = shapes[si].alpha * z + shapes[si].beta * d.c[m * N + n] + (shapes[si].bias ? d.bias[n] : 0);
                            if (shapes[si].gelu) z = gelu_tanh(z);
                            d.y[m * N + n] = prec_rne(z * (1 + 3 * prec_rng_normal(&rng) * prec_format_get(f)->unit_roundoff), f);
                        }
                    char shape[96];
                    snprintf(shape, sizeof shape, "M=%lld N=%lld K=%lld AB%s%s%s", (long long)M, (long long)N, (long long)K,
                             shapes[si].bias ? " bias" : "", shapes[si].gelu ? " gelu" : "", shapes[si].beta != 0 ? " +C" : "");
                    kcmp_matmul_data cd = {M, N, K, d.a, (long)K, 1, d.b, (long)N, 1, shapes[si].beta != 0 ? d.c : NULL,
                                           shapes[si].bias ? d.bias : NULL, d.y, NULL};
                    kcheck_acc row;
                    assert_int_equal(kcmp_matmul(&ck, &cd, shape, &row), 1);

                    ulp_kernel k = ULP_KERNEL_DEFAULT;
                    k.path = path_names[pi];
                    k.accum = block ? "fp8-groups:128"
                              : fp8 ? (acc == KMATMUL_ACC_FAST ? "fp8-fast" : "fp8-promote:128")
                              : path == KPATH_FP32 ? (acc == KMATMUL_ACC_FAST ? "tf32" : "fp32")
                                                   : "tensor-core";
                    k.reduce = "sequential";
                    k.epilogue = block || variant == KMATMUL_SPLIT_K ? "single"
                                 : variant == KMATMUL_FUSED          ? "cublaslt"
                                                                     : "rounded";
                    k.split_k = variant == KMATMUL_SPLIT_K ? KMATMUL_SPLIT_K_SLICES : 1;
                    k.alpha = shapes[si].alpha;
                    k.beta = shapes[si].beta;
                    k.gelu = shapes[si].gelu;
                    mm_verify(&d, &k, shapes[si].beta != 0, shapes[si].bias);
                    assert_int_equal(mm_rep.n_rows, 1);
                    assert_int_equal(mm_rep.unknown, 0);
                    const kcheck_row *c = &row.row;
                    const ulp_row *u = &mm_rep.rows[0];
                    if (c->max_err_u != u->max_err_u || c->rms_err_u != u->rms_err_u || c->max_bound_u != u->max_bound_u ||
                        c->rms_bound_u != u->rms_bound_u || c->worst_ratio != u->worst_ratio || c->pass != u->pass ||
                        c->worst_index != u->worst_index || c->n != u->n)
                        fail_msg("%s accum %d variant %d shape %zu: check %.17g u (bound %.17g, rms %.17g) vs verify %.17g u "
                                 "(bound %.17g, rms %.17g)", path_names[pi], acc, variant, si, c->max_err_u, c->max_bound_u,
                                 c->rms_bound_u, u->max_err_u, u->max_bound_u, u->rms_bound_u);
                    assert_string_equal(c->worst_detail, u->worst_detail);
                    assert_string_equal(c->shape, u->shape);
                    compared++;
                    mm_free(&d);
                }
    assert_true(compared >= 60);
}

/* correct kernels (one accumulator; four split-K slices; blocks of 32), then the planted bugs */
enum { MM_OK, MM_SPLIT4, MM_BLOCKED32, MM_DROP_TERM, MM_TRUNCATE, MM_BF16_ACC, MM_TF32, MM_FP8_FAST, MM_FP8_PROMOTED };

static double truncate_bits(double x, int bits)
{
    if (x == 0) return 0;
    int e = ilogb(x);
    return ldexp(trunc(ldexp(x, bits - 1 - e)), e - (bits - 1));
}

/* A GEMM + bias as a kernel of output format f computes it: one fp32
 * accumulator per element, sequential over K (fmaf), the bias added in fp32,
 * one rounding into f; bugs on request.  MM_SPLIT4 and MM_BLOCKED32 restart
 * the accumulator every K/4 or 32 products and add the partial sums in
 * order in fp32.  MM_FP8_PROMOTED is the correct fp8 kernel (14-bit
 * truncating partial sums promoted into fp32 every 128 products),
 * MM_FP8_FAST the one that never promotes. */
static void emulate_matmul(mm_data *d, prec_format f, int bug)
{
    for (int64_t m = 0; m < d->M; m++)
        for (int64_t n = 0; n < d->N; n++) {
            float acc = 0.0f, total = 0.0f; /* total: the partial sums of split-K and blocks */
            double partial = 0; /* fp8: the matrix unit's 14-bit partial sum */
            const int64_t restart = bug == MM_SPLIT4 ? (d->K + 3) / 4 : bug == MM_BLOCKED32 ? 32 : d->K;
            for (int64_t k = 0; k < d->K; k++) {
                if (k > 0 && k % restart == 0) {
                    total += acc;
                    acc = 0.0f;
                }
                double a = d->a[m * d->K + k], b = d->b[k * d->N + n];
                if (bug == MM_DROP_TERM && k == d->K / 2) continue;
                if (bug == MM_TF32) {
                    a = truncate_bits(a, 11);
                    b = truncate_bits(b, 11);
                }
                if (bug == MM_FP8_FAST || bug == MM_FP8_PROMOTED) {
                    partial = truncate_bits(partial + a * b, 14);
                    if (bug == MM_FP8_PROMOTED && (k % 128 == 127 || k == d->K - 1)) {
                        acc += (float)partial;
                        partial = 0;
                    }
                    continue;
                }
                acc = fmaf((float)a, (float)b, acc);
                if (bug == MM_BF16_ACC) acc = (float)prec_rne(acc, PREC_BF16);
            }
            if (bug == MM_FP8_FAST) acc = (float)partial;
            if (restart < d->K) acc += total;
            float z = acc + (float)d->bias[n];
            /* truncation: an fp32 output truncated to bf16 precision (a narrow store), as check plants it */
            d->y[m * d->N + n] = bug == MM_TRUNCATE ? prec_round(z, f == PREC_FP32 ? PREC_BF16 : f,
                                                                 (prec_rounding){PREC_RZ, PREC_OVF_IEEE, false}, 0)
                                                    : prec_rne(z, f);
        }
}

static mm_data mm_make(prec_rng *rng, int64_t M, int64_t N, int64_t K, prec_format in, prec_format out, int positive,
                       int bug)
{
    mm_data d = mm_alloc(M, N, K);
    for (int64_t i = 0; i < M * K; i++) d.a[i] = prec_rne(positive ? 1 + 0.25 * prec_rng_normal(rng) : prec_rng_normal(rng), in);
    for (int64_t i = 0; i < K * N; i++) d.b[i] = prec_rne(positive ? 1 + 0.25 * prec_rng_normal(rng) : prec_rng_normal(rng), in);
    for (int64_t i = 0; i < N; i++) d.bias[i] = prec_rne(prec_rng_normal(rng), out);
    emulate_matmul(&d, out, bug);
    return d;
}

/* The correct emulated GEMMs pass as declared; each planted bug FAILs, and
 * an accumulation narrower than declared is named. */
static void matmul_planted_bugs_fail(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("matmul_planted_bugs_fail"));
    static const int64_t Ks[] = {7, 64, 300};
    ulp_kernel k = ULP_KERNEL_DEFAULT;
    k.accum = "fp32";
    k.reduce = "sequential";
    k.epilogue = "single";
    for (int pi = 0; pi < 2; pi++) {
        const prec_format f = pi ? PREC_BF16 : PREC_FP32;
        k.path = pi ? "bf16" : "fp32";
        for (size_t s = 0; s < sizeof Ks / sizeof Ks[0]; s++) {
            mm_data good = mm_make(&rng, 12, 10, Ks[s], f, f, 0, MM_OK);
            if (mm_verify(&good, &k, 0, 1) != ULP_PASS) {
                ulp_report_print(stdout, &mm_rep);
                fail_msg("the correct %s GEMM failed at K=%lld", k.path, (long long)Ks[s]);
            }
            mm_free(&good);
            for (int bug = MM_DROP_TERM; bug <= MM_TF32; bug++) {
                if (bug == MM_TF32 && f != PREC_FP32) continue;
                if (bug == MM_BF16_ACC && Ks[s] < 32) continue; /* 7 bf16 products: their fp32 sums may be exact in bf16 */
                /* a sum of positive terms: a narrow accumulator drifts, a truncation shows on every element */
                mm_data d = mm_make(&rng, 12, 10, Ks[s], f, f, bug == MM_BF16_ACC || bug == MM_TF32, bug);
                if (mm_verify(&d, &k, 0, 1) != ULP_FAIL) {
                    ulp_report_print(stdout, &mm_rep);
                    fail_msg("planted bug %d passed on %s at K=%lld", bug, k.path, (long long)Ks[s]);
                }
                if (bug == MM_BF16_ACC && f == PREC_BF16 && Ks[s] == 64 && !strstr(mm_rep.diagnosis, "accumulates in bf16"))
                    fail_msg("diagnosis: %s", mm_rep.diagnosis);
                if (bug == MM_TF32 && !strstr(mm_rep.diagnosis, "tf32")) fail_msg("diagnosis: %s", mm_rep.diagnosis);
                mm_free(&d);
            }
        }
    }
    /* fp8: promotion every 128 products declared; a kernel that never promotes FAILs it */
    ulp_kernel k8 = ULP_KERNEL_DEFAULT;
    k8.path = "fp8";
    k8.accum = "fp8-promote:128";
    k8.epilogue = "single";
    mm_data good = mm_make(&rng, 6, 5, 4096, PREC_E4M3, PREC_BF16, 1, MM_FP8_PROMOTED);
    if (mm_verify(&good, &k8, 0, 1) != ULP_PASS) {
        ulp_report_print(stdout, &mm_rep);
        fail_msg("the promoting fp8 GEMM failed");
    }
    mm_data fast = mm_make(&rng, 6, 5, 4096, PREC_E4M3, PREC_BF16, 1, MM_FP8_FAST);
    if (mm_verify(&fast, &k8, 0, 1) != ULP_FAIL || !strstr(mm_rep.diagnosis, "--accum fp8-fast")) {
        ulp_report_print(stdout, &mm_rep);
        fail_msg("fp8 fast accumulation declared as promoted was not caught and named");
    }
    ulp_kernel kf = k8;
    kf.accum = "fp8-fast";
    assert_int_equal(mm_verify(&fast, &kf, 0, 1), ULP_PASS);
    mm_free(&good);
    mm_free(&fast);
}

/* Split-K: the slices as declared; unknown parts: tightest and loosest rows. */
static void matmul_split_k_and_unknown(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("matmul_split_k_and_unknown"));
    mm_data d = mm_make(&rng, 8, 9, 1000, PREC_BF16, PREC_BF16, 0, MM_OK);
    ulp_kernel k = ULP_KERNEL_DEFAULT;
    k.path = "bf16";
    assert_int_equal(mm_verify(&d, &k, 0, 1), ULP_PASS);
    assert_int_equal(mm_rep.unknown, 1);
    assert_int_equal(mm_rep.n_rows, 2);
    assert_non_null(strstr(mm_rep.rows[0].assumption, "--accum fp32 --reduce pairwise --epilogue single"));
    assert_non_null(strstr(mm_rep.rows[1].assumption, "--accum storage --reduce sequential --epilogue cublaslt"));
    assert_true(mm_rep.rows[1].max_bound_u > mm_rep.rows[0].max_bound_u);
    /* four sequential slices of 250: a shorter chain than 1000, so a tighter bound */
    k.accum = "fp32";
    k.reduce = "sequential";
    k.epilogue = "single";
    assert_int_equal(mm_verify(&d, &k, 0, 1), ULP_PASS);
    mm_data split = mm_make(&rng, 8, 9, 1000, PREC_FP32, PREC_FP32, 1, MM_SPLIT4);
    k.path = "fp32";
    k.split_k = 4;
    assert_int_equal(mm_verify(&split, &k, 0, 1), ULP_PASS);
    assert_non_null(strstr(mm_rep.rows[0].assumption, "--split-k 4"));
    double four_slices = mm_rep.rows[0].max_bound_u;
    k.split_k = 1;
    assert_int_equal(mm_verify(&split, &k, 0, 1), ULP_PASS);
    assert_true(four_slices < mm_rep.rows[0].max_bound_u);
    /* blocks of 32 restarted: blocked:32, a chain of 32 + 31 */
    mm_data blocked = mm_make(&rng, 8, 9, 1000, PREC_FP32, PREC_FP32, 1, MM_BLOCKED32);
    k.reduce = "blocked:32";
    assert_int_equal(mm_verify(&blocked, &k, 0, 1), ULP_PASS);
    double blocks = mm_rep.rows[0].max_bound_u;
    k.reduce = "sequential";
    assert_int_equal(mm_verify(&blocked, &k, 0, 1), ULP_PASS);
    assert_true(blocks < mm_rep.rows[0].max_bound_u);
    mm_free(&d);
    mm_free(&split);
    mm_free(&blocked);
}

/* ---- layernorm -------------------------------------------------------------------------- */

enum { LN_OK, LN_DROP_TERM, LN_TRUNCATE, LN_BF16_ACC, LN_ONE_PASS };

typedef struct {
    int64_t N, C;
    double *x, *g, *b, *dy;            /* inputs */
    double *y, *mean, *rstd, *dx, *dg, *db; /* outputs */
} ln_data;

static float ln_sum_add(float s, float t, int bug)
{
    s += t;
    return bug == LN_BF16_ACC ? (float)prec_rne(s, PREC_BF16) : s;
}

/* LayerNorm as a one-thread-per-row kernel of storage f computes it, every
 * step in fp32, sums sequential; two-pass variance unless LN_ONE_PASS; the
 * backward reads the stored mean and rstd.  Bugs planted on request (a
 * dropped term leaves one x out of the mean's sum and one g out of the
 * backward's). */
static void emulate_layernorm(ln_data *d, prec_format f, int bug)
{
    const int64_t N = d->N, C = d->C;
    const prec_rounding rz = {PREC_RZ, PREC_OVF_IEEE, false};
    for (int64_t c = 0; c < C; c++) d->dg[c] = d->db[c] = 0;
    float *dgs = calloc((size_t)C, sizeof(float)), *dbs = calloc((size_t)C, sizeof(float));
    assert_true(dgs && dbs);
    for (int64_t n = 0; n < N; n++) {
        const double *x = d->x + n * C, *dy = d->dy + n * C;
        float sx = 0, sq = 0;
        for (int64_t c = 0; c < C; c++) {
            if (bug == LN_DROP_TERM && c == C / 2) continue;
            sx = ln_sum_add(sx, (float)x[c], bug);
            sq = ln_sum_add(sq, (float)x[c] * (float)x[c], bug);
        }
        float mean = sx / (float)C, var;
        if (bug == LN_ONE_PASS) {
            var = sq / (float)C - mean * mean;
        } else {
            float sd = 0;
            for (int64_t c = 0; c < C; c++) sd = ln_sum_add(sd, ((float)x[c] - mean) * ((float)x[c] - mean), bug);
            var = sd / (float)C;
        }
        float rstd = 1.0f / sqrtf(var + 1e-5f);
        d->mean[n] = mean;
        d->rstd[n] = rstd;
        float sg = 0, sgx = 0;
        for (int64_t c = 0; c < C; c++) {
            float xhat = ((float)x[c] - mean) * rstd, v = xhat * (float)d->g[c] + (float)d->b[c];
            d->y[n * C + c] = bug == LN_TRUNCATE ? prec_round(v, f, rz, 0) : prec_rne(v, f);
            float gd = (float)d->g[c] * (float)dy[c];
            if (!(bug == LN_DROP_TERM && c == C / 2)) sg = ln_sum_add(sg, gd, bug);
            sgx = ln_sum_add(sgx, gd * xhat, bug);
            dgs[c] = ln_sum_add(dgs[c], (float)dy[c] * xhat, bug);
            dbs[c] = ln_sum_add(dbs[c], (float)dy[c], bug);
        }
        float a = sg / (float)C, b = sgx / (float)C;
        for (int64_t c = 0; c < C; c++) {
            float xhat = ((float)x[c] - mean) * rstd, gd = (float)d->g[c] * (float)dy[c];
            float v = rstd * ((gd - a) - xhat * b);
            d->dx[n * C + c] = bug == LN_TRUNCATE ? prec_round(v, f, rz, 0) : prec_rne(v, f);
        }
    }
    for (int64_t c = 0; c < C; c++) {
        d->dg[c] = bug == LN_TRUNCATE ? prec_round(dgs[c], f, rz, 0) : prec_rne(dgs[c], f);
        d->db[c] = bug == LN_TRUNCATE ? prec_round(dbs[c], f, rz, 0) : prec_rne(dbs[c], f);
    }
    free(dgs);
    free(dbs);
}

static ln_data ln_make(prec_rng *rng, int64_t N, int64_t C, double offset, prec_format f, int bug)
{
    ln_data d = {N, C, malloc(N * C * sizeof(double)), malloc(C * sizeof(double)), malloc(C * sizeof(double)),
                 malloc(N * C * sizeof(double)), malloc(N * C * sizeof(double)), malloc(N * sizeof(double)),
                 malloc(N * sizeof(double)), malloc(N * C * sizeof(double)), malloc(C * sizeof(double)),
                 malloc(C * sizeof(double))};
    assert_true(d.x && d.g && d.b && d.dy && d.y && d.mean && d.rstd && d.dx && d.dg && d.db);
    for (int64_t i = 0; i < N * C; i++) d.x[i] = prec_rne(offset + prec_rng_normal(rng), f);
    for (int64_t i = 0; i < N * C; i++) d.dy[i] = prec_rne(prec_rng_normal(rng), f);
    for (int64_t c = 0; c < C; c++) d.g[c] = prec_rne(1 + 0.25 * prec_rng_normal(rng), f);
    for (int64_t c = 0; c < C; c++) d.b[c] = prec_rne(0.5 * prec_rng_normal(rng), f);
    emulate_layernorm(&d, f, bug);
    return d;
}

static void ln_free(ln_data *d)
{
    free(d->x); free(d->g); free(d->b); free(d->dy); free(d->y); free(d->mean); free(d->rstd);
    free(d->dx); free(d->dg); free(d->db);
}

static ulp_report ln_rep;

static int ln_verify(const ln_data *d, const ulp_kernel *k)
{
    int bwd = strcmp(k->pass, "bwd") == 0;
    ulp_tensor in[5], out[3];
    int n_in = 0, n_out = 0;
    in[n_in++] = ULP_TENSOR("x", ULP_F64, d->x, d->N, d->C);
    in[n_in++] = ULP_TENSOR("gain", ULP_F64, d->g, d->C);
    if (bwd) {
        in[n_in++] = ULP_TENSOR("dy", ULP_F64, d->dy, d->N, d->C);
        in[n_in++] = ULP_TENSOR("mean", ULP_F64, d->mean, d->N);
        in[n_in++] = ULP_TENSOR("rstd", ULP_F64, d->rstd, d->N);
        out[n_out++] = ULP_TENSOR("dx", ULP_F64, d->dx, d->N, d->C);
        out[n_out++] = ULP_TENSOR("dgain", ULP_F64, d->dg, d->C);
        out[n_out++] = ULP_TENSOR("dbias", ULP_F64, d->db, d->C);
    } else {
        in[n_in++] = ULP_TENSOR("bias", ULP_F64, d->b, d->C);
        out[n_out++] = ULP_TENSOR("y", ULP_F64, d->y, d->N, d->C);
        out[n_out++] = ULP_TENSOR("mean", ULP_F64, d->mean, d->N);
        out[n_out++] = ULP_TENSOR("rstd", ULP_F64, d->rstd, d->N);
    }
    char err[512];
    int rc = ulp_verify("layernorm", k, in, n_in, out, n_out, &ln_rep, err, sizeof err);
    if (rc == ULP_BAD_INPUT) fail_msg("bad input: %s", err);
    return rc;
}

/* verify, declared as check describes each variant, reports check's rows
 * bit for bit, forward (y, mean, rstd) and backward (dx, dgain, dbias). */
static void layernorm_agrees_with_check(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("layernorm_agrees_with_check"));
    const prec_format formats[] = {PREC_FP32, PREC_BF16, PREC_FP16};
    const char *paths[] = {"fp32", "bf16", "fp16"};
    for (int fi = 0; fi < 3; fi++)
        for (int v = 0; v < KLAYERNORM_NVARIANTS; v++) {
            ln_data d = ln_make(&rng, 6, 1001, fi == 2 ? 4.0 : 8.0, formats[fi], LN_OK);
            kcmp_layernorm_kernel k = kcheck_layernorm_kernel(formats[fi], v, d.N, d.C);
            kcmp_layernorm_data cd = {d.N, d.C, d.x, d.g, d.b, d.dy, d.y, d.mean, d.rstd, d.dx, d.dg, d.db};
            kcheck_acc rows[KCMP_LAYERNORM_MAX_ROWS];
            char shape[96];
            snprintf(shape, sizeof shape, "N=%lld C=%lld", (long long)d.N, (long long)d.C);
            assert_int_equal(kcmp_layernorm(&k, &cd, shape, rows), 6);
            char reduce[32], variance[32], col[32];
            snprintf(variance, sizeof variance, "%s", k.variance == KCMP_LN_ONE_PASS ? "one-pass" : "two-pass");
            if (k.variance == KCMP_LN_WELFORD)
                snprintf(variance, sizeof variance, "welford:%dx%d", k.welford_threads, k.welford_vec);
            ulp_kernel uk = ULP_KERNEL_DEFAULT;
            uk.path = paths[fi];
            uk.accum = "fp32";
            uk.variance = variance;
            for (int pass = 0; pass < 2; pass++) {
                snprintf(reduce, sizeof reduce, "depth:%lld", (long long)(pass ? k.bwd_depth : k.fwd_depth));
                snprintf(col, sizeof col, "depth:%lld", (long long)k.col_depth);
                uk.pass = pass ? "bwd" : "fwd";
                uk.reduce = reduce;
                uk.col_reduce = col;
                ln_verify(&d, &uk);
                assert_int_equal(ln_rep.n_rows, 3);
                assert_int_equal(ln_rep.unknown, 0);
                for (int r = 0; r < 3; r++) {
                    const kcheck_row *c = &rows[3 * pass + r].row;
                    const ulp_row *u = &ln_rep.rows[r];
                    assert_string_equal(c->output, u->output);
                    if (c->max_err_u != u->max_err_u || c->rms_err_u != u->rms_err_u || c->max_bound_u != u->max_bound_u ||
                        c->rms_bound_u != u->rms_bound_u || c->worst_ratio != u->worst_ratio || c->pass != u->pass ||
                        c->worst_index != u->worst_index)
                        fail_msg("%s variant %d output %s: check %.17g u (bound %.17g) vs verify %.17g u (bound %.17g)",
                                 paths[fi], v, c->output, c->max_err_u, c->max_bound_u, u->max_err_u, u->max_bound_u);
                    assert_string_equal(c->worst_detail, u->worst_detail);
                }
            }
            ln_free(&d);
        }
}

/* The correct emulated kernel passes as declared, forward and backward;
 * each planted bug FAILs; a one-pass variance declared two-pass is named. */
static void layernorm_planted_bugs_fail(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("layernorm_planted_bugs_fail"));
    static const int64_t Cs[] = {7, 64, 1001};
    ulp_kernel k = ULP_KERNEL_DEFAULT;
    k.path = "bf16";
    k.accum = "fp32";
    k.reduce = k.col_reduce = "sequential";
    k.variance = "two-pass";
    for (size_t s = 0; s < 3; s++)
        for (int bug = LN_OK; bug <= LN_ONE_PASS; bug++) {
            if (bug == LN_BF16_ACC && Cs[s] < 32) continue; /* a few bf16 terms: their fp32 sums may be exact */
            if (bug == LN_ONE_PASS && Cs[s] < 64) continue;
            ln_data d = ln_make(&rng, 16, Cs[s], bug == LN_ONE_PASS ? 64.0 : 0.0, PREC_BF16, bug);
            int fails = 0;
            for (int pass = 0; pass < 2; pass++) {
                k.pass = pass ? "bwd" : "fwd";
                int rc = ln_verify(&d, &k);
                if (bug == LN_OK && rc != ULP_PASS) {
                    ulp_report_print(stdout, &ln_rep);
                    fail_msg("the correct kernel failed (%s, C=%lld)", k.pass, (long long)Cs[s]);
                }
                fails += rc == ULP_FAIL;
                if (bug == LN_ONE_PASS && pass == 0 && !strstr(ln_rep.diagnosis, "one pass"))
                    fail_msg("diagnosis: %s", ln_rep.diagnosis);
                /* the backward's own twins: its sums and its output roundings */
                if (pass == 1 && bug != LN_OK && bug != LN_ONE_PASS && rc != ULP_FAIL) {
                    ulp_report_print(stdout, &ln_rep);
                    fail_msg("planted bug %d passed the backward at C=%lld", bug, (long long)Cs[s]);
                }
            }
            if (bug != LN_OK && !fails) fail_msg("planted bug %d passed at C=%lld", bug, (long long)Cs[s]);
            ln_free(&d);
        }
}

/* ---- softmax ---------------------------------------------------------------------------- */

enum { SM_OK, SM_DROP_TERM, SM_TRUNCATE, SM_BF16_ACC };

/* Softmax as a one-thread-per-row kernel of storage f computes it: expf of
 * x - max in fp32 (glibc's expf: within 1 ulp, inside the declared 2),
 * sequential fp32 sums, y = e * (1/s); backward on its own y: dot =
 * sum y dy (fmaf), dx = y (dy - dot).  Bugs on request. */
static void emulate_softmax(int64_t N, int64_t C, const double *x, const double *dy, prec_format f, int bug, double *y,
                            double *dx)
{
    const prec_rounding rz = {PREC_RZ, PREC_OVF_IEEE, false};
    const prec_format ft = f == PREC_FP32 ? PREC_BF16 : f; /* truncation: fp32 values to bf16 precision */
    float *e = malloc((size_t)C * sizeof(float));
    assert_non_null(e);
    for (int64_t n = 0; n < N; n++) {
        const double *xr = x + n * C;
        float m = (float)xr[0], s = 0, dot = 0;
        int64_t argmax = 0; /* the dropped term: the largest (a small one can vanish under the bound) */
        for (int64_t c = 1; c < C; c++)
            if ((float)xr[c] > m) {
                m = (float)xr[c];
                argmax = c;
            }
        for (int64_t c = 0; c < C; c++) {
            e[c] = expf((float)xr[c] - m);
            if (bug == SM_DROP_TERM && c == argmax) continue;
            s += e[c];
            if (bug == SM_BF16_ACC) s = (float)prec_rne(s, PREC_BF16);
        }
        float inv = 1.0f / s;
        for (int64_t c = 0; c < C; c++) {
            float v = e[c] * inv;
            y[n * C + c] = bug == SM_TRUNCATE ? prec_round(v, ft, rz, 0) : prec_rne(v, f);
        }
        for (int64_t c = 0; c < C; c++) {
            if (bug == SM_DROP_TERM && c == argmax) continue;
            dot = fmaf((float)y[n * C + c], (float)dy[n * C + c], dot);
            if (bug == SM_BF16_ACC) dot = (float)prec_rne(dot, PREC_BF16);
        }
        for (int64_t c = 0; c < C; c++) {
            float v = (float)y[n * C + c] * ((float)dy[n * C + c] - dot);
            dx[n * C + c] = bug == SM_TRUNCATE ? prec_round(v, ft, rz, 0) : prec_rne(v, f);
        }
    }
    free(e);
}

static ulp_report sm_rep;

static int sm_verify(int64_t N, int64_t C, const double *x, const double *y, const double *dy, const double *dx,
                     const ulp_kernel *k)
{
    int bwd = strcmp(k->pass, "bwd") == 0;
    ulp_tensor in[2] = {ULP_TENSOR(bwd ? "y" : "x", ULP_F64, bwd ? y : x, N, C), ULP_TENSOR("dy", ULP_F64, dy, N, C)};
    ulp_tensor out[1] = {ULP_TENSOR(bwd ? "dx" : "y", ULP_F64, bwd ? dx : y, N, C)};
    char err[512];
    int rc = ulp_verify("softmax", k, in, bwd ? 2 : 1, out, 1, &sm_rep, err, sizeof err);
    if (rc == ULP_BAD_INPUT) fail_msg("bad input: %s", err);
    return rc;
}

/* verify, declared as check describes each variant, reports check's rows
 * bit for bit; the correct kernel passes, each planted bug FAILs. */
static void softmax_agrees_with_check_and_twins_fail(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("softmax_agrees_with_check_and_twins_fail"));
    const prec_format formats[] = {PREC_FP32, PREC_BF16, PREC_FP16};
    const char *paths[] = {"fp32", "bf16", "fp16"}, *forms[] = {"exp", "exp2", "fast"};
    static const int64_t Cs[] = {7, 64, 1001};
    for (int fi = 0; fi < 3; fi++)
        for (size_t ci = 0; ci < 3; ci++)
            for (int bug = SM_OK; bug <= SM_BF16_ACC; bug++) {
                if (bug == SM_BF16_ACC && Cs[ci] < 32) continue; /* a few terms: bf16 sums may be exact */
                const int64_t N = 6, C = Cs[ci], NC = N * C;
                double *x = malloc(NC * sizeof(double)), *dy = malloc(NC * sizeof(double));
                double *y = malloc(NC * sizeof(double)), *dx = malloc(NC * sizeof(double));
                assert_true(x && dy && y && dx);
                for (int64_t i = 0; i < NC; i++) x[i] = prec_rne(3 * prec_rng_normal(&rng), formats[fi]);
                for (int64_t i = 0; i < NC; i++) dy[i] = prec_rne(prec_rng_normal(&rng), formats[fi]);
                emulate_softmax(N, C, x, dy, formats[fi], bug, y, dx);
                ulp_kernel k = ULP_KERNEL_DEFAULT;
                k.path = paths[fi];
                k.accum = "fp32";
                if (bug == SM_OK) {
                    for (int v = 0; v < KSOFTMAX_NVARIANTS; v++) {
                        kcmp_softmax_kernel ck = kcheck_softmax_kernel(formats[fi], v, C);
                        kcmp_softmax_data cd = {N, C, x, y, dy, dx};
                        kcheck_acc rows[KCMP_SOFTMAX_MAX_ROWS];
                        char shape[96], reduce[32];
                        snprintf(shape, sizeof shape, "N=%lld C=%lld", (long long)N, (long long)C);
                        assert_int_equal(kcmp_softmax(&ck, &cd, shape, rows), 2);
                        snprintf(reduce, sizeof reduce, "depth:%lld", (long long)ck.fwd_depth);
                        k.reduce = reduce;
                        k.exp_form = forms[v];
                        for (int pass = 0; pass < 2; pass++) {
                            k.pass = pass ? "bwd" : "fwd";
                            sm_verify(N, C, x, y, dy, dx, &k);
                            assert_int_equal(sm_rep.n_rows, 1);
                            const kcheck_row *c = &rows[pass].row;
                            const ulp_row *u = &sm_rep.rows[0];
                            assert_string_equal(c->output, u->output);
                            if (c->max_err_u != u->max_err_u || c->rms_err_u != u->rms_err_u ||
                                c->max_bound_u != u->max_bound_u || c->rms_bound_u != u->rms_bound_u ||
                                c->worst_ratio != u->worst_ratio || c->pass != u->pass || c->worst_index != u->worst_index)
                                fail_msg("%s variant %d %s: check %.17g u (bound %.17g) vs verify %.17g u (bound %.17g)",
                                         paths[fi], v, c->output, c->max_err_u, c->max_bound_u, u->max_err_u, u->max_bound_u);
                            assert_string_equal(c->worst_detail, u->worst_detail);
                        }
                    }
                }
                k.reduce = "sequential";
                k.exp_form = "exp";
                for (int pass = 0; pass < 2; pass++) {
                    k.pass = pass ? "bwd" : "fwd";
                    int rc = sm_verify(N, C, x, y, dy, dx, &k);
                    if ((bug == SM_OK) != (rc == ULP_PASS)) {
                        ulp_report_print(stdout, &sm_rep);
                        fail_msg("%s C=%lld bug %d %s: %s", paths[fi], (long long)C, bug, k.pass,
                                 rc == ULP_PASS ? "passed" : "failed");
                    }
                }
                free(x); free(dy); free(y); free(dx);
            }
}

/* ---- cross_entropy ---------------------------------------------------------------------- */

enum { CE_OK, CE_DROP_TERM, CE_TRUNCATE, CE_BF16_ACC, CE_NO_CAP_DERIVATIVE };

/* Cross-entropy as a one-thread-per-row kernel computes it in fp32: the row
 * maximum, s = sum expf(z - max) sequentially, lse = max + logf(s), loss =
 * lse - z_t, dz = (expf(z - lse) - [j = t]) dloss stored in format f; an
 * ignored row (t = -1) writes zeros.  Bugs on request (the dropped term is
 * the largest: a small one can vanish under the bound).  cap > 0: each logit
 * l is first cap tanhf(l / cap), and the gradient is multiplied by
 * 1 - th th, th = tanhf(l / cap) (CE_NO_CAP_DERIVATIVE leaves that out). */
static float capped(double l, float cap) { return cap > 0 ? cap * tanhf((float)l / cap) : (float)l; }

static void emulate_cross_entropy(int64_t N, int64_t V, const double *z, const int32_t *t, float dloss, prec_format f,
                                  int bug, float cap, double *loss, double *dz)
{
    const prec_rounding rz = {PREC_RZ, PREC_OVF_IEEE, false};
    const prec_format ft = f == PREC_FP32 ? PREC_BF16 : f; /* truncation: fp32 values to bf16 precision */
    for (int64_t i = 0; i < N; i++) {
        const double *zr = z + i * V;
        if (t[i] < 0) {
            loss[i] = 0;
            for (int64_t j = 0; j < V; j++) dz[i * V + j] = 0;
            continue;
        }
        float m = capped(zr[0], cap), s = 0;
        int64_t argmax = 0;
        for (int64_t j = 1; j < V; j++)
            if (capped(zr[j], cap) > m) {
                m = capped(zr[j], cap);
                argmax = j;
            }
        for (int64_t j = 0; j < V; j++) {
            if (bug == CE_DROP_TERM && j == argmax) continue;
            s += expf(capped(zr[j], cap) - m);
            if (bug == CE_BF16_ACC) s = (float)prec_rne(s, PREC_BF16);
        }
        float lse = m + logf(s);
        loss[i] = lse - capped(zr[t[i]], cap);
        for (int64_t j = 0; j < V; j++) {
            float p = expf(capped(zr[j], cap) - lse) - (j == t[i] ? 1.0f : 0.0f);
            if (cap > 0 && bug != CE_NO_CAP_DERIVATIVE) {
                const float th = tanhf((float)zr[j] / cap);
                p *= 1.0f - th * th;
            }
            const float v = p * dloss;
            dz[i * V + j] = bug == CE_TRUNCATE ? prec_round(v, ft, rz, 0) : prec_rne(v, f);
        }
    }
}

static ulp_report ce_rep;

static int ce_verify(int64_t N, int64_t V, const double *z, const double *targets, const double *loss, const double *dz,
                     const ulp_kernel *k)
{
    ulp_tensor in[2] = {ULP_TENSOR("logits", ULP_F64, z, N, V), ULP_TENSOR("targets", ULP_F64, targets, N)};
    ulp_tensor out[2] = {ULP_TENSOR("loss", ULP_F64, loss, N), ULP_TENSOR("dlogits", ULP_F64, dz, N, V)};
    char err[512];
    int rc = ulp_verify("cross_entropy", k, in, 2, out, 2, &ce_rep, err, sizeof err);
    if (rc == ULP_BAD_INPUT) fail_msg("bad input: %s", err);
    return rc;
}

/* verify, declared as check describes each (path, variant), reports check's
 * rows bit for bit; the correct kernel passes, each planted bug FAILs. */
static void cross_entropy_agrees_with_check_and_twins_fail(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("cross_entropy_agrees_with_check_and_twins_fail"));
    static const kpath paths[] = {KPATH_FP32, KPATH_BF16, KPATH_FP16};
    static const int64_t Vs[] = {7, 1000};
    for (int pi = 0; pi < 3; pi++)
        for (int variant = 0; variant < KCE_NVARIANTS; variant++)
            for (size_t vi = 0; vi < 2; vi++)
                for (int bug = CE_OK; bug <= CE_BF16_ACC; bug++) {
                    if (bug == CE_BF16_ACC && Vs[vi] < 32) continue; /* a few terms: bf16 sums may be exact */
                    /* at V = 7 five rows hold too few outputs for truncation (< 1 ulp
                     * each) to exceed the 1-ulp dlogits bound reliably: more rows */
                    const int64_t V = Vs[vi], N = V < 32 ? 64 : 5;
                    const prec_format lf = kce_logits_format(paths[pi], variant);
                    double *z = malloc(N * V * sizeof(double)), *dz = malloc(N * V * sizeof(double));
                    double *loss = malloc(N * sizeof(double)), *tv = malloc(N * sizeof(double));
                    int32_t *t = malloc(N * sizeof(int32_t));
                    assert_true(z && dz && loss && tv && t);
                    for (int64_t i = 0; i < N * V; i++) z[i] = prec_rne(2 * prec_rng_normal(&rng), lf);
                    for (int64_t i = 0; i < N; i++) t[i] = (int32_t)(prec_rng_next(&rng) % (uint64_t)V);
                    t[N - 1] = -1;
                    for (int64_t i = 0; i < N; i++) tv[i] = t[i];
                    const float dloss = 1.0f / (float)N;
                    emulate_cross_entropy(N, V, z, t, dloss, lf, bug, 0.0f, loss, dz);
                    kcmp_ce_kernel ck = kcheck_cross_entropy_kernel(paths[pi], variant, N, V);
                    ulp_kernel k = ULP_KERNEL_DEFAULT;
                    k.path = prec_format_get(lf)->name;
                    k.accum = "fp32";
                    k.dloss = dloss;
                    char reduce[32];
                    if (bug == CE_OK) {
                        kcmp_ce_data cd = {N, V, z, t, loss, dz};
                        kcheck_acc rows[KCMP_CE_MAX_ROWS];
                        char shape[96];
                        snprintf(shape, sizeof shape, "N=%lld V=%lld", (long long)N, (long long)V);
                        assert_int_equal(kcmp_cross_entropy(&ck, &cd, shape, rows), 2);
                        snprintf(reduce, sizeof reduce, "depth:%lld", (long long)ck.depth);
                        k.reduce = reduce;
                        k.online = ck.online;
                        ce_verify(N, V, z, tv, loss, dz, &k);
                        assert_int_equal(ce_rep.n_rows, 2);
                        for (int r = 0; r < 2; r++) {
                            const kcheck_row *c = &rows[r].row;
                            const ulp_row *u = &ce_rep.rows[r];
                            assert_string_equal(c->output, u->output);
                            if (c->max_err_u != u->max_err_u || c->rms_err_u != u->rms_err_u ||
                                c->max_bound_u != u->max_bound_u || c->rms_bound_u != u->rms_bound_u ||
                                c->worst_ratio != u->worst_ratio || c->pass != u->pass || c->worst_index != u->worst_index)
                                fail_msg("path %d variant %d %s: check %.17g u (bound %.17g) vs verify %.17g u (bound %.17g)",
                                         pi, variant, c->output, c->max_err_u, c->max_bound_u, u->max_err_u, u->max_bound_u);
                            assert_string_equal(c->worst_detail, u->worst_detail);
                        }
                    }
                    k.reduce = "sequential";
                    k.online = 0;
                    int rc = ce_verify(N, V, z, tv, loss, dz, &k);
                    if ((bug == CE_OK) != (rc == ULP_PASS)) {
                        ulp_report_print(stdout, &ce_rep);
                        fail_msg("%s V=%lld bug %d: %s", k.path, (long long)V, bug, rc == ULP_PASS ? "passed" : "failed");
                    }
                    free(z); free(dz); free(loss); free(tv); free(t);
                }
}

/* A soft-capped kernel (cap 4 on logits of sd 6: most where tanh bends or
 * flat) passes when declared with its --softcap, and each planted bug fails
 * under the same declaration: the dropped term, truncated stores, a bf16
 * sum, the gradient without the cap's derivative 1 - th^2; the capped
 * outputs declared without a cap fail too. */
static void cross_entropy_softcap_and_twins(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("cross_entropy_softcap_and_twins"));
    enum { N = 16, V = 300 };
    const float cap = 4.0f, dloss = 1.0f / N;
    static const prec_format fmts[] = {PREC_FP32, PREC_BF16};
    double *z = malloc(N * V * sizeof(double)), *dz = malloc(N * V * sizeof(double));
    double loss[N], tv[N];
    int32_t t[N];
    assert_true(z && dz);
    for (int fi = 0; fi < 2; fi++)
        for (int bug = CE_OK; bug <= CE_NO_CAP_DERIVATIVE + 1; bug++) {
            const int undeclared = bug == CE_NO_CAP_DERIVATIVE + 1; /* correct kernel, cap not declared */
            for (int64_t i = 0; i < N * V; i++) z[i] = prec_rne(6 * prec_rng_normal(&rng), fmts[fi]);
            for (int64_t i = 0; i < N; i++) t[i] = (int32_t)(prec_rng_next(&rng) % V);
            t[N - 1] = -1;
            for (int64_t i = 0; i < N; i++) tv[i] = t[i];
            emulate_cross_entropy(N, V, z, t, dloss, fmts[fi], undeclared ? CE_OK : bug, cap, loss, dz);
            ulp_kernel k = ULP_KERNEL_DEFAULT;
            k.path = prec_format_get(fmts[fi])->name;
            k.accum = "fp32";
            k.reduce = "sequential";
            k.dloss = dloss;
            k.softcap = undeclared ? 0.0 : cap;
            int rc = ce_verify(N, V, z, tv, loss, dz, &k);
            if ((bug == CE_OK) != (rc == ULP_PASS)) {
                ulp_report_print(stdout, &ce_rep);
                fail_msg("%s softcap bug %d%s: %s", k.path, bug, undeclared ? " (undeclared)" : "",
                         rc == ULP_PASS ? "passed" : "failed");
            }
            if (bug == CE_OK) assert_non_null(strstr(ce_rep.rows[0].assumption, "--softcap 4"));
        }
    free(z), free(dz);
}

/* ---- activations ------------------------------------------------------------------------ */

enum { ACT_OK, ACT_DROP, ACT_TRUNCATE, ACT_BF16_MATH, ACT_FAST_FN };

#define GK0 0.79788456080286535587989 /* sqrt(2/pi) */
#define GK1 0.044715

static double act_store(double v, prec_format f, int bug)
{
    const prec_rounding rz = {PREC_RZ, PREC_OVF_IEEE, false};
    if (bug == ACT_TRUNCATE) return prec_round(v, f == PREC_FP32 ? PREC_BF16 : f, rz, 0); /* fp32: truncated to bf16 precision */
    return prec_rne(v, f);
}

/* A math function as a kernel computes it: correctly rounded into a (within
 * the declared 2 ulps), or truncated to 12 bits under ACT_FAST_FN (a fast
 * approximation: relative error below 2^-11, under 2^13 fp32 ulps and under
 * tanh.approx.f32's 2^-10.987 absolute for a tanh). */
static double act_fn(double v, prec_format a, int bug) { return bug == ACT_FAST_FN ? truncate_bits(v, 12) : prec_rne(v, a); }

/* The activations as elementwise GPU kernels compute them, each operation
 * rounded into the arithmetic's format (fp32; bf16 under ACT_BF16_MATH), in
 * the order of the kernels (kernels/gelu_tanh.cu, gelu_erf.cu, relu2.cu,
 * leaky_relu2.cu); f' for the backward and the stored gradient branch. */
static void act_f_df(kcmp_act_op op, int form, double x, int bug, double *f, double *df)
{
    const prec_format a = bug == ACT_BF16_MATH ? PREC_BF16 : PREC_FP32;
#define R(v) prec_rne((v), a)
    if (op == KCMP_GELU_TANH) {
        double x2 = R(x * x), z = R(R(GK0) * R(R(GK1) * R(x2 * x) + x)), dz = R(R(GK0) * R(R(3 * R(GK1)) * x2 + 1));
        if (form == KGELU_TANH_SIGMOID) {
            double e = act_fn(exp(R(-2 * z)), a, bug), s = R(1 / R(1 + e));
            *f = R(x / R(1 + e));
            double t = R(R(R(2 * x) * dz) * s);
            *df = R(s + R(t * R(1 - s)));
            return;
        }
        /* tanh.approx.f32: within 2^-10.987 absolute; 12 bits are */
        double t = form == KGELU_TANH_APPROX ? truncate_bits(tanh(z), 12) : act_fn(tanh(z), a, bug);
        *f = R(R(0.5 * x) * R(1 + t));
        *df = R(R(0.5 * R(1 + t)) + R(R(R(0.5 * x) * R(1 - R(t * t))) * dz));
    } else if (op == KCMP_GELU_ERF && form == KGELU_ERF_NORMCDF) {
        double cdf = act_fn(0.5 * erfc(-x * 0.70710678118654752440), a, bug);
        *f = R(x * cdf);
        double pdf = R(act_fn(exp(R(R(-0.5 * x) * x)), a, bug) * R(0.39894228040143267794));
        *df = R(cdf + R(x * pdf));
    } else if (op == KCMP_GELU_ERF) {
        double e = act_fn(erf(R(x * R(0.70710678118654752440))), a, bug), cdf = R(0.5 * R(1 + e));
        *f = R(R(0.5 * x) * R(1 + e));
        double pdf = R(act_fn(exp(R(R(-0.5 * x) * x)), a, bug) * R(0.39894228040143267794));
        *df = R(cdf + R(x * pdf));
    } else if (op == KCMP_RELU2) {
        double r = x > 0 ? x : 0;
        *f = R(r * r);
        *df = R(2 * r);
    } else {
        double r = x > 0 ? x : R(0.5 * x);
        *f = R(r * r);
        *df = R((x > 0 ? 2.0 : 0.5) * x);
    }
#undef R
}

typedef struct {
    int64_t n;
    double *x, *dy, *y, *g, *dx; /* g: the stored gradient branch (store_grad) */
} act_data;

/* x ~ N(0, 2), dy ~ N(0, 1) in storage f; the outputs as the emulated kernel
 * writes them; store_grad: the backward reads the stored g.  ACT_DROP leaves
 * the largest y and dx unwritten (0: a fresh buffer). */
static act_data act_make(prec_rng *rng, kcmp_act_op op, int form, int64_t n, prec_format f, int store_grad, int bug)
{
    act_data d = {n, malloc(n * sizeof(double)), malloc(n * sizeof(double)), malloc(n * sizeof(double)),
                  malloc(n * sizeof(double)), malloc(n * sizeof(double))};
    assert_true(d.x && d.dy && d.y && d.g && d.dx);
    int64_t ymax = 0, dxmax = 0;
    for (int64_t i = 0; i < n; i++) {
        d.x[i] = prec_rne(2 * prec_rng_normal(rng), f);
        d.dy[i] = prec_rne(prec_rng_normal(rng), f);
        double y, df;
        act_f_df(op, form, d.x[i], bug, &y, &df);
        d.y[i] = act_store(y, f, bug);
        d.g[i] = act_store(df, f, bug);
        double deriv = store_grad ? d.g[i] : df;
        d.dx[i] = act_store(prec_rne(d.dy[i] * deriv, bug == ACT_BF16_MATH ? PREC_BF16 : PREC_FP32), f, bug);
        if (fabs(d.y[i]) > fabs(d.y[ymax])) ymax = i;
        if (fabs(d.dx[i]) > fabs(d.dx[dxmax])) dxmax = i;
    }
    if (bug == ACT_DROP) d.y[ymax] = d.dx[dxmax] = 0;
    return d;
}

static void act_free(act_data *d) { free(d->x); free(d->dy); free(d->y); free(d->g); free(d->dx); }

static ulp_report act_rep;

/* ulp_verify of one pass; grad: give the stored gradient branch (an output
 * of the forward, an input of the backward). */
static int act_verify(kcmp_act_op op, const act_data *d, const ulp_kernel *k, int grad)
{
    const int bwd = strcmp(k->pass, "bwd") == 0;
    ulp_tensor in[3] = {ULP_TENSOR("x", ULP_F64, d->x, d->n)}, out[2];
    int n_in = 1, n_out = 0;
    if (bwd) {
        in[n_in++] = ULP_TENSOR("dy", ULP_F64, d->dy, d->n);
        if (grad) in[n_in++] = ULP_TENSOR("grad", ULP_F64, d->g, d->n);
        out[n_out++] = ULP_TENSOR("dx", ULP_F64, d->dx, d->n);
    } else {
        out[n_out++] = ULP_TENSOR("y", ULP_F64, d->y, d->n);
        if (grad) out[n_out++] = ULP_TENSOR("grad", ULP_F64, d->g, d->n);
    }
    char err[512];
    int rc = ulp_verify(kcmp_act_name(op), k, in, n_in, out, n_out, &act_rep, err, sizeof err);
    if (rc == ULP_BAD_INPUT) fail_msg("bad input: %s", err);
    return rc;
}

static void assert_rows_equal(const kcheck_row *c, const ulp_row *u, const char *what)
{
    if (strcmp(c->output, u->output) != 0 || c->max_err_u != u->max_err_u || c->rms_err_u != u->rms_err_u ||
        c->max_bound_u != u->max_bound_u || c->rms_bound_u != u->rms_bound_u || c->worst_ratio != u->worst_ratio ||
        c->pass != u->pass || c->worst_index != u->worst_index || c->n != u->n || strcmp(c->shape, u->shape) != 0 ||
        strcmp(c->worst_detail, u->worst_detail) != 0)
        fail_msg("%s: check %s %.17g u (bound %.17g, rms %.17g) [%s] vs verify %s %.17g u (bound %.17g, rms %.17g) [%s]",
                 what, c->output, c->max_err_u, c->max_bound_u, c->rms_bound_u, c->worst_detail, u->output, u->max_err_u,
                 u->max_bound_u, u->rms_bound_u, u->worst_detail);
}

static const char *const act_forms[2][3] = {{"tanh", "tanh-approx", "sigmoid"}, {"erf", "normcdf", NULL}};

/* verify, declared as check describes each (op, path, variant), reports
 * check's rows bit for bit: y and the stored gradient branch forward, dx
 * backward (from the stored branch under store_grad). */
static void activations_agree_with_check(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("activations_agree_with_check"));
    static const kpath paths[] = {KPATH_FP32, KPATH_BF16, KPATH_FP16};
    static const char *const path_names[] = {"fp32", "bf16", "fp16"};
    const int n_variants[4] = {KGELU_TANH_NVARIANTS, KGELU_ERF_NVARIANTS, KRELU2_NVARIANTS, KRELU2_NVARIANTS};
    int compared = 0;
    for (int op = KCMP_GELU_TANH; op <= KCMP_LEAKY_RELU2; op++)
        for (int pi = 0; pi < 3; pi++)
            for (int v = 0; v < n_variants[op]; v++) {
                const int store_grad = op >= KCMP_RELU2 && v == KRELU2_STORE_GRAD;
                kcmp_act_kernel ck = kcheck_activation_kernel((kcmp_act_op)op, paths[pi], v);
                act_data d = act_make(&rng, (kcmp_act_op)op, v, 1001, ck.act, store_grad, ACT_OK);
                kcmp_act_data cd = {d.n, d.x, d.y, store_grad ? d.g : NULL, d.dy, d.dx};
                kcheck_acc rows[KCMP_ACT_MAX_ROWS];
                assert_int_equal(kcmp_activation(&ck, &cd, "n=1001", rows), 2 + store_grad);
                ulp_kernel k = ULP_KERNEL_DEFAULT;
                k.path = path_names[pi];
                k.accum = "fp32";
                if (op <= KCMP_GELU_ERF) k.function = act_forms[op][v];
                char what[96];
                for (int pass = 0; pass < 2; pass++) {
                    k.pass = pass ? "bwd" : "fwd";
                    if (act_verify((kcmp_act_op)op, &d, &k, store_grad) != ULP_PASS) {
                        ulp_report_print(stdout, &act_rep);
                        fail_msg("the correct %s failed (%s, variant %d, %s)", kcmp_act_name((kcmp_act_op)op), k.path, v, k.pass);
                    }
                    assert_int_equal(act_rep.unknown, 0);
                    assert_int_equal(act_rep.n_rows, pass ? 1 : 1 + store_grad);
                    for (int r = 0; r < act_rep.n_rows; r++) {
                        snprintf(what, sizeof what, "%s %s variant %d %s", kcmp_act_name((kcmp_act_op)op), k.path, v, k.pass);
                        assert_rows_equal(&rows[pass ? 1 + store_grad : r].row, &act_rep.rows[r], what);
                        compared++;
                    }
                }
                act_free(&d);
            }
    assert_int_equal(compared, 3 * (2 * 3 + 2 * 2 + 2 * (2 + 3)));
}

/* The correct emulated kernels pass as declared; each planted bug FAILs:
 * an unwritten element, a truncating store, bf16 arithmetic declared fp32,
 * a 12-bit tanh or erf declared as the 2-ulp library's (named where a looser
 * declaration explains it, and passing once its error is declared). */
static void activations_planted_bugs_fail(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("activations_planted_bugs_fail"));
    static const char *const path_names[] = {"fp32", "bf16"};
    const prec_format formats[] = {PREC_FP32, PREC_BF16};
    for (int op = KCMP_GELU_TANH; op <= KCMP_LEAKY_RELU2; op++)
        for (int pi = 0; pi < 2; pi++)
            for (int store_grad = 0; store_grad < 1 + (op >= KCMP_RELU2); store_grad++)
                for (int bug = ACT_OK; bug <= ACT_FAST_FN; bug++) {
                    const int gelu = op <= KCMP_GELU_ERF;
                    /* relu2's arithmetic is exact but for the one rounding bf16 arithmetic would do too */
                    if (!gelu && (bug == ACT_BF16_MATH || bug == ACT_FAST_FN)) continue;
                    if (bug == ACT_FAST_FN && pi != 0) continue; /* 12 bits: below a bf16 output's rounding */
                    act_data d = act_make(&rng, (kcmp_act_op)op, 0, 1001, formats[pi], store_grad, bug);
                    ulp_kernel k = ULP_KERNEL_DEFAULT;
                    k.path = path_names[pi];
                    k.accum = "fp32";
                    if (gelu) k.function = act_forms[op][0];
                    int fails = 0;
                    for (int pass = 0; pass < 2; pass++) {
                        k.pass = pass ? "bwd" : "fwd";
                        int rc = act_verify((kcmp_act_op)op, &d, &k, store_grad);
                        if (bug == ACT_OK && rc != ULP_PASS) {
                            ulp_report_print(stdout, &act_rep);
                            fail_msg("the correct %s failed (%s, %s)", kcmp_act_name((kcmp_act_op)op), k.path, k.pass);
                        }
                        if ((bug == ACT_DROP || bug == ACT_TRUNCATE) && rc != ULP_FAIL) {
                            ulp_report_print(stdout, &act_rep);
                            fail_msg("planted bug %d passed %s %s %s", bug, kcmp_act_name((kcmp_act_op)op), k.path, k.pass);
                        }
                        fails += rc == ULP_FAIL;
                        /* named where the storage format is bf16 (an fp32 path's storage arithmetic is fp32's) */
                        if (bug == ACT_BF16_MATH && pi == 1 && rc == ULP_FAIL && !strstr(act_rep.diagnosis, "computes in bf16"))
                            fail_msg("diagnosis: %s", act_rep.diagnosis);
                        if (bug == ACT_FAST_FN && op == KCMP_GELU_TANH && pass == 0 &&
                            !strstr(act_rep.diagnosis, "tanh.approx"))
                            fail_msg("diagnosis: %s", act_rep.diagnosis);
                    }
                    if (bug != ACT_OK && !fails)
                        fail_msg("planted bug %d passed %s on %s", bug, kcmp_act_name((kcmp_act_op)op), k.path);
                    if (bug == ACT_FAST_FN) {
                        /* declared as what it is: 2^13 ulps */
                        k.math_ulps = 8192;
                        for (int pass = 0; pass < 2; pass++) {
                            k.pass = pass ? "bwd" : "fwd";
                            if (act_verify((kcmp_act_op)op, &d, &k, store_grad) != ULP_PASS) {
                                ulp_report_print(stdout, &act_rep);
                                fail_msg("the 12-bit %s declared --math-ulps 8192 failed", kcmp_act_name((kcmp_act_op)op));
                            }
                        }
                    }
                    act_free(&d);
                }
}

/* relu2's store_grad: the backward reads the stored gradient branch (given
 * as an input, its actual error starts dx's bound); a branch that is not
 * f'(x) (one element off) FAILs the forward's grad row and, read by the
 * backward, dx's.  Unknown declarations of a GELU: tightest and loosest
 * rows. */
static void activations_store_grad_and_unknown(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("activations_store_grad_and_unknown"));
    act_data d = act_make(&rng, KCMP_RELU2, 0, 4099, PREC_BF16, 1, ACT_OK);
    ulp_kernel k = ULP_KERNEL_DEFAULT;
    k.path = "bf16";
    k.accum = "fp32";
    k.pass = "bwd";
    assert_int_equal(act_verify(KCMP_RELU2, &d, &k, 1), ULP_PASS);
    int64_t i = 0;
    while (d.x[i] <= 0) i++;
    d.g[i] = prec_rne(d.g[i] * 1.25, PREC_BF16);
    d.dx[i] = prec_rne(d.dy[i] * d.g[i], PREC_BF16);
    k.pass = "fwd";
    assert_int_equal(act_verify(KCMP_RELU2, &d, &k, 1), ULP_FAIL);
    assert_string_equal(act_rep.rows[1].output, "grad");
    assert_int_equal(act_rep.rows[1].pass, 0);
    k.pass = "bwd";
    assert_int_equal(act_verify(KCMP_RELU2, &d, &k, 0), ULP_FAIL);
    act_free(&d);
    act_data g = act_make(&rng, KCMP_GELU_TANH, 0, 1001, PREC_BF16, 0, ACT_OK);
    ulp_kernel u = ULP_KERNEL_DEFAULT;
    u.path = "bf16";
    assert_int_equal(act_verify(KCMP_GELU_TANH, &g, &u, 0), ULP_PASS);
    assert_int_equal(act_rep.unknown, 1);
    assert_int_equal(act_rep.n_rows, 2);
    assert_non_null(strstr(act_rep.rows[0].assumption, "--accum fp32 --function tanh"));
    assert_non_null(strstr(act_rep.rows[1].assumption, "--accum storage --function any"));
    assert_true(act_rep.rows[1].max_bound_u > act_rep.rows[0].max_bound_u);
    /* any: at least each form's bound, element by element, so at least the largest of their maxima */
    double largest = 0;
    u.accum = "storage";
    for (int f = 0; f < 3; f++) {
        u.function = act_forms[0][f];
        act_verify(KCMP_GELU_TANH, &g, &u, 0);
        largest = fmax(largest, act_rep.rows[0].max_bound_u);
    }
    u.function = "any";
    act_verify(KCMP_GELU_TANH, &g, &u, 0);
    assert_true(act_rep.rows[0].max_bound_u >= largest);
    act_free(&g);
}

/* ---- residual ---------------------------------------------------------------------------- */

enum { RES_OK, RES_DROP_TERM, RES_TRUNCATE, RES_BF16_ADD };

static ulp_report res_rep;

static int res_verify(int64_t n, const double *a, const double *b, const double *y, const ulp_kernel *k)
{
    ulp_tensor in[2] = {ULP_TENSOR("a", ULP_F64, a, n), ULP_TENSOR("b", ULP_F64, b, n)};
    ulp_tensor out[1] = {ULP_TENSOR("y", ULP_F64, y, n)};
    char err[512];
    int rc = ulp_verify("residual", k, in, 2, out, 1, &res_rep, err, sizeof err);
    if (rc == ULP_BAD_INPUT) fail_msg("bad input: %s", err);
    return rc;
}

/* verify, declared as check describes its kernel, reports check's row bit
 * for bit; the correct add passes; a dropped term (b left out of the
 * largest sum), a truncating store and a bf16 addition declared fp32 FAIL. */
static void residual_agrees_with_check_and_twins_fail(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("residual_agrees_with_check_and_twins_fail"));
    const prec_format formats[] = {PREC_FP32, PREC_BF16, PREC_FP16};
    const char *paths[] = {"fp32", "bf16", "fp16"};
    const prec_rounding rz = {PREC_RZ, PREC_OVF_IEEE, false};
    const int64_t n = 1001;
    double *a = malloc(n * sizeof(double)), *b = malloc(n * sizeof(double)), *y = malloc(n * sizeof(double));
    assert_true(a && b && y);
    for (int fi = 0; fi < 3; fi++)
        for (int bug = RES_OK; bug <= RES_BF16_ADD; bug++) {
            const prec_format f = formats[fi];
            if (bug == RES_BF16_ADD && f != PREC_FP32) continue; /* a narrower output rounds the same as the bf16 sum */
            int64_t biggest = 0;
            for (int64_t i = 0; i < n; i++) {
                a[i] = prec_rne(prec_rng_normal(&rng), f);
                b[i] = prec_rne(0.1 * prec_rng_normal(&rng), f);
                double s = prec_rne(a[i] + b[i], bug == RES_BF16_ADD ? PREC_BF16 : PREC_FP32);
                y[i] = bug == RES_TRUNCATE ? prec_round(s, f == PREC_FP32 ? PREC_BF16 : f, rz, 0) : prec_rne(s, f);
                if (fabs(b[i]) > fabs(b[biggest])) biggest = i;
            }
            if (bug == RES_DROP_TERM) y[biggest] = a[biggest];
            ulp_kernel k = ULP_KERNEL_DEFAULT;
            k.path = paths[fi];
            k.accum = "fp32";
            int rc = res_verify(n, a, b, y, &k);
            if ((bug == RES_OK) != (rc == ULP_PASS)) {
                ulp_report_print(stdout, &res_rep);
                fail_msg("%s bug %d: %s", k.path, bug, rc == ULP_PASS ? "passed" : "failed");
            }
            if (bug == RES_OK) {
                const kcmp_residual_kernel ck = kcheck_residual_kernel(f, 0);
                const kcmp_residual_data cd = {n, a, b, y};
                kcheck_acc row;
                assert_int_equal(kcmp_residual(&ck, &cd, "n=1001", &row), 1);
                assert_int_equal(res_rep.n_rows, 1);
                assert_rows_equal(&row.row, &res_rep.rows[0], paths[fi]);
                /* unknown: fp32 and the storage format */
                k.accum = "unknown";
                assert_int_equal(res_verify(n, a, b, y, &k), ULP_PASS);
                assert_int_equal(res_rep.n_rows, 2);
                assert_non_null(strstr(res_rep.rows[1].assumption, "--accum storage"));
            }
        }
    free(a); free(b); free(y);
}

/* ---- adamw ------------------------------------------------------------------------------- */

enum { ADW_OK, ADW_DROP_TERM, ADW_TRUNCATE, ADW_BF16_STATE, ADW_STOCHASTIC };

typedef struct {
    int64_t n;
    double *w, *g, *m, *v;        /* inputs: w the weights (fp32 master on a 16-bit path) */
    double *p, *mo, *vo, *master; /* outputs */
} adw_data;

static const kadamw_hparams adw_h = {0.01f, 0.9f, 0.95f, 1e-8f, 0.1f, 7, 0};

/* One step as a kernel of weight format f computes it in llm.c's order,
 * in fp32 (m, v and, with_master, the master in fp32; the weights the new
 * value rounded to nearest).  Bugs: the last element left untouched; stores truncated (m, v
 * at bf16 precision); m and v computed and kept in bf16; the weights
 * rounded stochastically (an ulp up or down at random). */
static adw_data adw_make(prec_rng *rng, int64_t n, prec_format f, int with_master, int bug)
{
    adw_data d = {n, malloc(n * sizeof(double)), malloc(n * sizeof(double)), malloc(n * sizeof(double)),
                  malloc(n * sizeof(double)), malloc(n * sizeof(double)), malloc(n * sizeof(double)),
                  malloc(n * sizeof(double)), malloc(n * sizeof(double))};
    assert_true(d.w && d.g && d.m && d.v && d.p && d.mo && d.vo && d.master);
    const prec_rounding rz = {PREC_RZ, PREC_OVF_IEEE, false};
    const prec_format st = bug == ADW_BF16_STATE ? PREC_BF16 : PREC_FP32;
    const float bc1 = kadamw_bias_correction(adw_h.beta1, adw_h.step), bc2 = kadamw_bias_correction(adw_h.beta2, adw_h.step);
    for (int64_t i = 0; i < n; i++) {
        d.w[i] = prec_rne(prec_rng_normal(rng), PREC_FP32);
        d.g[i] = prec_rne(prec_rng_normal(rng), f);
        d.m[i] = prec_rne(0.1 * prec_rng_normal(rng), PREC_FP32);
        double s = prec_rne(0.3 * prec_rng_normal(rng), PREC_FP32);
        d.v[i] = prec_rne(s * s, PREC_FP32);
        if (!with_master) d.w[i] = prec_rne(d.w[i], f); /* the step reads the weights themselves */
        float g = (float)d.g[i];
        double m1 = prec_rne(fmaf(adw_h.beta1, (float)d.m[i], (1.0f - adw_h.beta1) * g), st);
        double v1 = prec_rne(fmaf(adw_h.beta2, (float)d.v[i], (1.0f - adw_h.beta2) * (g * g)), st);
        float mhat = (float)m1 / bc1, vhat = (float)v1 / bc2, den = sqrtf(vhat) + adw_h.eps;
        float t = adw_h.lr * fmaf(adw_h.weight_decay, (float)d.w[i], mhat / den), hi = (float)d.w[i] - t;
        d.master[i] = hi;
        d.mo[i] = bug == ADW_TRUNCATE ? prec_round(m1, PREC_BF16, rz, 0) : m1;
        d.vo[i] = bug == ADW_TRUNCATE ? prec_round(v1, PREC_BF16, rz, 0) : v1;
        const prec_format pf = bug == ADW_TRUNCATE && f == PREC_FP32 ? PREC_BF16 : f; /* fp32: truncated to bf16 precision */
        if (bug == ADW_TRUNCATE) d.p[i] = prec_round(hi, pf, rz, 0);
        else if (bug == ADW_STOCHASTIC) {
            double down = prec_round(hi, f, (prec_rounding){PREC_RD, PREC_OVF_IEEE, false}, 0);
            double up = prec_round(hi, f, (prec_rounding){PREC_RU, PREC_OVF_IEEE, false}, 0);
            d.p[i] = prec_rng_next(rng) & 1 ? up : down;
        } else d.p[i] = prec_rne(hi, f);
    }
    if (bug == ADW_DROP_TERM) {
        d.p[n - 1] = prec_rne(d.w[n - 1], f);
        d.master[n - 1] = d.w[n - 1];
        d.mo[n - 1] = d.m[n - 1];
        d.vo[n - 1] = d.v[n - 1];
    }
    return d;
}

static void adw_free(adw_data *d)
{
    free(d->w); free(d->g); free(d->m); free(d->v); free(d->p); free(d->mo); free(d->vo); free(d->master);
}

static ulp_report adw_rep;

static ulp_kernel adw_kernel(const char *path)
{
    ulp_kernel k = ULP_KERNEL_DEFAULT;
    k.path = path;
    k.accum = "fp32";
    k.order = "llmc";
    k.store = "nearest";
    k.lr = adw_h.lr;
    k.beta1 = adw_h.beta1;
    k.beta2 = adw_h.beta2;
    k.eps = adw_h.eps;
    k.weight_decay = adw_h.weight_decay;
    k.step = adw_h.step;
    return k;
}

/* master: the kernel keeps an fp32 master (given as input and output, the weights only as output) */
static int adw_verify(const adw_data *d, const ulp_kernel *k, int master)
{
    ulp_tensor in[4] = {ULP_TENSOR(master ? "master" : "p", ULP_F64, d->w, d->n), ULP_TENSOR("g", ULP_F64, d->g, d->n),
                        ULP_TENSOR("m", ULP_F64, d->m, d->n), ULP_TENSOR("v", ULP_F64, d->v, d->n)};
    ulp_tensor out[4] = {ULP_TENSOR("p", ULP_F64, d->p, d->n), ULP_TENSOR("m", ULP_F64, d->mo, d->n),
                         ULP_TENSOR("v", ULP_F64, d->vo, d->n), ULP_TENSOR("master", ULP_F64, d->master, d->n)};
    char err[512];
    int rc = ulp_verify("adamw", k, in, 4, out, master ? 4 : 3, &adw_rep, err, sizeof err);
    if (rc == ULP_BAD_INPUT) fail_msg("bad input: %s", err);
    return rc;
}

/* verify, declared as check describes each (path, storage, order), reports
 * check's rows bit for bit; the correct step passes; each planted bug FAILs;
 * stochastic rounding declared as nearest is named. */
static void adamw_agrees_with_check_and_twins_fail(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("adamw_agrees_with_check_and_twins_fail"));
    static const kpath paths[] = {KPATH_FP32, KPATH_BF16};
    static const char *const path_names[] = {"fp32", "bf16"}, *const orders[] = {"llmc", "torch"};
    static const char *const stores[] = {"nearest", "stochastic", "truncate"};
    int compared = 0;
    for (int pi = 0; pi < 2; pi++) {
        const prec_format f = pi ? PREC_BF16 : PREC_FP32;
        const int master = pi == 1;
        adw_data d = adw_make(&rng, 1001, f, master, ADW_OK), plain = adw_make(&rng, 1001, f, 0, ADW_OK);
        for (int storage = 0; storage < KADAMW_NSTORAGE; storage++)
            for (int variant = 0; variant < KADAMW_NVARIANTS; variant++) {
                if (storage == KADAMW_SPLIT_MASTER && !master) continue;
                const adw_data *dd = storage == KADAMW_STOCHASTIC ? &plain : &d; /* no master: the weights are read */
                kcmp_adamw_kernel ck = kcheck_adamw_kernel(paths[pi], storage, variant, &adw_h);
                /* the master row where the check has one: a master kernel off the fp32 path, the split master */
                const int master_row = master && storage != KADAMW_STOCHASTIC;
                kcmp_adamw_data cd = {dd->n, dd->w, dd->g, dd->m, dd->v, dd->p, dd->mo, dd->vo, master_row ? dd->master : NULL};
                kcheck_acc rows[KCMP_ADAMW_MAX_ROWS];
                assert_int_equal(kcmp_adamw(&ck, &cd, "n=1001 step=7", rows), 3 + master_row);
                ulp_kernel k = adw_kernel(path_names[pi]);
                k.order = orders[variant];
                k.store = stores[storage];
                adw_verify(dd, &k, master_row);
                assert_int_equal(adw_rep.n_rows, 3 + master_row);
                for (int r = 0; r < 3 + master_row; r++) {
                    char what[64];
                    snprintf(what, sizeof what, "%s storage %d variant %d", path_names[pi], storage, variant);
                    assert_rows_equal(&rows[r].row, &adw_rep.rows[r], what);
                    compared++;
                }
            }
        ulp_kernel k = adw_kernel(path_names[pi]);
        if (adw_verify(&d, &k, master) != ULP_PASS) {
            ulp_report_print(stdout, &adw_rep);
            fail_msg("the correct step failed on %s", path_names[pi]);
        }
        adw_free(&d);
        adw_free(&plain);
        for (int bug = ADW_DROP_TERM; bug <= ADW_STOCHASTIC; bug++) {
            if (bug == ADW_STOCHASTIC && f == PREC_FP32) continue; /* the fp32 new weight has no bits to round away */
            const int with_master = master && bug != ADW_STOCHASTIC; /* stochastic rounding: no master */
            adw_data b = adw_make(&rng, 1001, f, with_master, bug);
            if (adw_verify(&b, &k, with_master) != ULP_FAIL) {
                ulp_report_print(stdout, &adw_rep);
                fail_msg("planted bug %d passed on %s", bug, path_names[pi]);
            }
            if (bug == ADW_STOCHASTIC && !strstr(adw_rep.diagnosis, "stochastically")) fail_msg("diagnosis: %s", adw_rep.diagnosis);
            if (bug == ADW_STOCHASTIC) {
                ulp_kernel sr = k;
                sr.store = "stochastic";
                assert_int_equal(adw_verify(&b, &sr, with_master), ULP_PASS);
            }
            adw_free(&b);
        }
        /* unknown order and store: tightest, then the loosest */
        adw_data u = adw_make(&rng, 300, f, master, ADW_OK);
        k.order = k.store = "unknown";
        assert_int_equal(adw_verify(&u, &k, master), ULP_PASS);
        assert_int_equal(adw_rep.unknown, 1);
        assert_non_null(strstr(adw_rep.rows[0].assumption, "--order llmc --store nearest"));
        assert_non_null(strstr(adw_rep.rows[adw_rep.n_rows / 2].assumption, "--order any --store stochastic"));
        adw_free(&u);
    }
    assert_int_equal(compared, 2 * (3 + 3) + 2 * (4 + 3 + 4)); /* fp32: nearest, stochastic; bf16: master, sr, split */
}

/* ---- logsumexp --------------------------------------------------------------------------- */

enum { LSE_OK, LSE_DROP_TERM, LSE_TRUNCATE, LSE_BF16_ACC };

/* log-sum-exp as a one-thread-per-row kernel computes it in fp32: the row
 * maximum, s = sum expf(x - max) sequentially, lse = max + logf(s); dx =
 * dlse expf(x - lse) from its own lse, stored in f.  Bugs: the largest term
 * dropped (lse and, through it, dx), dx truncated, s accumulated in bf16. */
static void emulate_logsumexp(int64_t N, int64_t C, const double *x, const double *dlse, prec_format f, int bug,
                              double *lse, double *dx)
{
    const prec_rounding rz = {PREC_RZ, PREC_OVF_IEEE, false};
    for (int64_t n = 0; n < N; n++) {
        const double *xr = x + n * C;
        float m = (float)xr[0], s = 0;
        int64_t argmax = 0;
        for (int64_t c = 1; c < C; c++)
            if ((float)xr[c] > m) {
                m = (float)xr[c];
                argmax = c;
            }
        for (int64_t c = 0; c < C; c++) {
            if (bug == LSE_DROP_TERM && c == argmax) continue;
            s += expf((float)xr[c] - m);
            if (bug == LSE_BF16_ACC) s = (float)prec_rne(s, PREC_BF16);
        }
        float l = m + logf(s);
        lse[n] = l;
        for (int64_t c = 0; c < C; c++) {
            float v = (float)dlse[n] * expf((float)xr[c] - l);
            dx[n * C + c] = bug == LSE_TRUNCATE ? prec_round(v, f == PREC_FP32 ? PREC_BF16 : f, rz, 0) : prec_rne(v, f);
        }
    }
}

static ulp_report lse_rep;

static int lse_verify(int64_t N, int64_t C, const double *x, const double *lse, const double *dlse, const double *dx,
                      const ulp_kernel *k)
{
    const int bwd = strcmp(k->pass, "bwd") == 0;
    ulp_tensor in[3] = {ULP_TENSOR("x", ULP_F64, x, N, C), ULP_TENSOR("lse", ULP_F64, lse, N),
                        ULP_TENSOR("dlse", ULP_F64, dlse, N)};
    ulp_tensor out[1] = {bwd ? ULP_TENSOR("dx", ULP_F64, dx, N, C) : ULP_TENSOR("lse", ULP_F64, lse, N)};
    char err[512];
    int rc = ulp_verify("logsumexp", k, in, bwd ? 3 : 1, out, 1, &lse_rep, err, sizeof err);
    if (rc == ULP_BAD_INPUT) fail_msg("bad input: %s", err);
    return rc;
}

/* verify, declared as check describes each variant, reports check's rows
 * bit for bit; the correct kernel passes, each planted bug FAILs. */
static void logsumexp_agrees_with_check_and_twins_fail(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("logsumexp_agrees_with_check_and_twins_fail"));
    const prec_format formats[] = {PREC_FP32, PREC_BF16, PREC_FP16};
    const char *paths[] = {"fp32", "bf16", "fp16"}, *forms[] = {"exp", "exp2", "fast"};
    static const int64_t Cs[] = {7, 64, 1001};
    for (int fi = 0; fi < 3; fi++)
        for (size_t ci = 0; ci < 3; ci++)
            for (int bug = LSE_OK; bug <= LSE_BF16_ACC; bug++) {
                if (bug == LSE_BF16_ACC && Cs[ci] < 32) continue; /* a few terms: bf16 sums may be exact */
                const int64_t N = 6, C = Cs[ci];
                double *x = malloc(N * C * sizeof(double)), *dx = malloc(N * C * sizeof(double));
                double *lse = malloc(N * sizeof(double)), *dlse = malloc(N * sizeof(double));
                assert_true(x && dx && lse && dlse);
                for (int64_t i = 0; i < N * C; i++) x[i] = prec_rne(3 * prec_rng_normal(&rng), formats[fi]);
                for (int64_t i = 0; i < N; i++) dlse[i] = prec_rne(prec_rng_normal(&rng), PREC_FP32);
                emulate_logsumexp(N, C, x, dlse, formats[fi], bug, lse, dx);
                ulp_kernel k = ULP_KERNEL_DEFAULT;
                k.path = paths[fi];
                k.accum = "fp32";
                char shape[96];
                snprintf(shape, sizeof shape, "N=%lld C=%lld", (long long)N, (long long)C);
                if (bug == LSE_OK)
                    for (int v = 0; v < 3; v++) {
                        kcmp_lse_kernel ck = kcheck_logsumexp_kernel(formats[fi], v, C);
                        kcmp_lse_data cd = {N, C, x, lse, dlse, dx, 1};
                        kcheck_acc rows[KCMP_LSE_MAX_ROWS];
                        assert_int_equal(kcmp_logsumexp(&ck, &cd, shape, rows), 2);
                        char reduce[32];
                        snprintf(reduce, sizeof reduce, "depth:%lld", (long long)ck.depth);
                        k.reduce = reduce;
                        k.exp_form = forms[v];
                        for (int pass = 0; pass < 2; pass++) {
                            k.pass = pass ? "bwd" : "fwd";
                            lse_verify(N, C, x, lse, dlse, dx, &k);
                            assert_int_equal(lse_rep.n_rows, 1);
                            assert_int_equal(lse_rep.unknown, 0);
                            assert_rows_equal(&rows[pass].row, &lse_rep.rows[0], paths[fi]);
                        }
                    }
                k.reduce = "sequential";
                k.exp_form = "exp";
                int fails = 0;
                for (int pass = 0; pass < 2; pass++) {
                    k.pass = pass ? "bwd" : "fwd";
                    int rc = lse_verify(N, C, x, lse, dlse, dx, &k);
                    if ((bug == LSE_OK && rc != ULP_PASS) || (bug == LSE_TRUNCATE && pass == 1 && rc != ULP_FAIL) ||
                        (bug != LSE_OK && bug != LSE_TRUNCATE && pass == 0 && rc != ULP_FAIL)) {
                        ulp_report_print(stdout, &lse_rep);
                        fail_msg("%s C=%lld bug %d %s: %s", k.path, (long long)C, bug, k.pass, rc == ULP_PASS ? "passed" : "failed");
                    }
                    fails += rc == ULP_FAIL;
                }
                if (bug != LSE_OK && !fails) fail_msg("planted bug %d passed", bug);
                free(x); free(dx); free(lse); free(dlse);
            }
}

/* ---- attention -------------------------------------------------------------------------------- */

enum { AT_OK, AT_DROP_TERM, AT_TRUNCATE, AT_BF16_ACC };

/* Attention as a two-pass fp32 kernel computes it (the CPU backend's
 * flash), heads [BH, T, D]: scores by fmaf chains times the fp32 scale, e =
 * expf(s - max), sum += e, lse = max + logf(sum), P = e / sum, o = an fmaf
 * chain over P v stored in f; backward P = expf(s - lse), dP by fmaf
 * chains, delta = an fmaf chain over dout . o, dS = P (dP - delta), dq, dk,
 * dv fmaf chains, times the scale (dq, dk), stored in f.  The forward when
 * o is given, the backward (from o_in, lse_in) when g is.  Bugs on request:
 * every score loses its last term; the outputs truncated (fp32: to bf16
 * precision); the o, dq, dk, dv chains accumulated in bf16. */
static void emulate_attention(int64_t BH, int64_t T, int64_t D, const double *q, const double *k, const double *v,
                              const double *g, const double *o_in, const double *lse_in, prec_format f, int bug,
                              double *o, double *lse, double *dq, double *dk, double *dv)
{
    const prec_rounding rz = {PREC_RZ, PREC_OVF_IEEE, false};
    const prec_format ft = f == PREC_FP32 ? PREC_BF16 : f;
    const float scale = (float)(1.0 / sqrt((double)D));
#define STORE(x) (bug == AT_TRUNCATE ? prec_round((x), ft, rz, 0) : prec_rne((x), f))
#define ACC(x) (bug == AT_BF16_ACC ? (float)prec_rne((x), PREC_BF16) : (x))
    float *p = malloc(T * sizeof(float)), *gq = malloc(3 * T * D * sizeof(float));
    assert_true(p && gq);
    float *gk = gq + T * D, *gv = gk + T * D;
    for (int64_t h = 0; h < BH; h++) {
        const int64_t off = h * T * D;
        const double *Q = q + off, *K = k + off, *V = v + off, *G = g ? g + off : NULL;
        for (int64_t i = 0; o && i < T; i++) {
            float mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j <= i; j++) {
                float s = 0;
                for (int64_t d = 0; d < D - (bug == AT_DROP_TERM); d++) s = fmaf((float)Q[i * D + d], (float)K[j * D + d], s);
                p[j] = scale * s;
                mx = fmaxf(mx, p[j]);
            }
            for (int64_t j = 0; j <= i; j++) sum += p[j] = expf(p[j] - mx);
            lse[h * T + i] = mx + logf(sum);
            for (int64_t j = 0; j <= i; j++) p[j] /= sum;
            for (int64_t d = 0; d < D; d++) {
                float acc = 0;
                for (int64_t j = 0; j <= i; j++) acc = ACC(fmaf(p[j], (float)V[j * D + d], acc));
                o[off + i * D + d] = STORE(acc);
            }
        }
        if (!g) continue;
        for (int64_t i = 0; i < 3 * T * D; i++) gq[i] = 0;
        for (int64_t i = 0; i < T; i++) {
            float delta = 0;
            for (int64_t d = 0; d < D; d++) delta = fmaf((float)G[i * D + d], (float)o_in[off + i * D + d], delta);
            for (int64_t j = 0; j <= i; j++) {
                float s = 0, dp = 0;
                for (int64_t d = 0; d < D - (bug == AT_DROP_TERM); d++) s = fmaf((float)Q[i * D + d], (float)K[j * D + d], s);
                for (int64_t d = 0; d < D; d++) dp = fmaf((float)G[i * D + d], (float)V[j * D + d], dp);
                float P = expf(scale * s - (float)lse_in[h * T + i]), ds = P * (dp - delta);
                for (int64_t d = 0; d < D; d++) {
                    gq[i * D + d] = ACC(fmaf(ds, (float)K[j * D + d], gq[i * D + d]));
                    gk[j * D + d] = ACC(fmaf(ds, (float)Q[i * D + d], gk[j * D + d]));
                    gv[j * D + d] = ACC(fmaf(P, (float)G[i * D + d], gv[j * D + d]));
                }
            }
        }
        for (int64_t i = 0; i < T * D; i++) {
            dq[off + i] = STORE(scale * gq[i]);
            dk[off + i] = STORE(scale * gk[i]);
            dv[off + i] = STORE(gv[i]);
        }
    }
#undef STORE
#undef ACC
    free(p);
    free(gq);
}

static ulp_report at_rep;

/* verify attention on heads (2, T, D): the forward (o, lse) or the backward (dq, dk, dv from o, lse, do). */
static int at_verify(int64_t T, int64_t D, const double *const x[10], const ulp_kernel *k)
{
    const int bwd = strcmp(k->pass, "bwd") == 0;
    ulp_tensor in[6] = {ULP_TENSOR("q", ULP_F64, x[0], 2, T, D), ULP_TENSOR("k", ULP_F64, x[1], 2, T, D),
                        ULP_TENSOR("v", ULP_F64, x[2], 2, T, D), ULP_TENSOR("o", ULP_F64, x[4], 2, T, D),
                        ULP_TENSOR("lse", ULP_F64, x[5], 2, T), ULP_TENSOR("do", ULP_F64, x[3], 2, T, D)};
    ulp_tensor out[3] = {ULP_TENSOR("dq", ULP_F64, x[6], 2, T, D), ULP_TENSOR("dk", ULP_F64, x[7], 2, T, D),
                         ULP_TENSOR("dv", ULP_F64, x[8], 2, T, D)};
    ulp_tensor fwd_out[2] = {ULP_TENSOR("o", ULP_F64, x[4], 2, T, D), ULP_TENSOR("lse", ULP_F64, x[5], 2, T)};
    char err[512];
    int rc = bwd ? ulp_verify("attention", k, in, 6, out, 3, &at_rep, err, sizeof err)
                 : ulp_verify("attention", k, in, 3, fwd_out, 2, &at_rep, err, sizeof err);
    if (rc == ULP_BAD_INPUT) fail_msg("bad input: %s", err);
    return rc;
}

/* How often the all-unknown declaration passed on the tightest bound alone
 * (a correct kernel outside the loosest description's bound at an element). */
static int at_tightest_only_passes;

/* verify, declared as check describes flash, flash_exp2 and flash_mma
 * (H100 model), reports check's comparison's rows bit for bit (the forward
 * as check rows it; the backward from the given o and lse, as trace does);
 * a correct two-pass kernel passes its declaration and the all-unknown
 * one; each planted bug FAILs its declaration. */
static void attention_agrees_with_check_and_twins_fail(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("attention_agrees_with_check_and_twins_fail"));
    const prec_format formats[] = {PREC_FP32, PREC_BF16};
    const char *paths[] = {"fp32", "bf16"};
    const int64_t T = 23, D = 16, n = 2 * T * D;
    for (int fi = 0; fi < 2; fi++) {
        const prec_format f = formats[fi];
        double *x = malloc(10 * n * sizeof(double));
        assert_non_null(x);
        double *q = x, *kk = q + n, *v = kk + n, *g = v + n, *o = g + n, *lse = o + n, *dq = lse + n, *dk = dq + n, *dv = dk + n;
        const double *const all[10] = {q, kk, v, g, o, lse, dq, dk, dv, NULL};
        for (int64_t i = 0; i < 4 * n; i++) x[i] = prec_rne(prec_rng_normal(&rng), f);
        emulate_attention(2, T, D, q, kk, v, NULL, NULL, NULL, f, AT_OK, o, lse, NULL, NULL, NULL);
        emulate_attention(2, T, D, q, kk, v, g, o, lse, f, AT_OK, NULL, NULL, dq, dk, dv);
        const double scale = (float)(1.0 / sqrt((double)D));
        char shape[96], reduce[32];
        snprintf(shape, sizeof shape, "BH=2 T=%lld D=%lld", (long long)T, (long long)D);
        snprintf(reduce, sizeof reduce, "depth:%lld", (long long)kcheck_tree_depth(D, 32));
        const mma_model *h100 = mma_model_find("h100", "mma.sync", PREC_BF16, PREC_FP32);
        assert_non_null(h100);
        const int variants[] = {KATT_FLASH, KATT_FLASH_EXP2, KATT_FLASH_MMA};
        for (int vi = 0; vi < 3; vi++) {
            const int variant = variants[vi];
            if (katt_is_mma(variant) && f != PREC_BF16) continue;
            const kcmp_attention_kernel ck = kcheck_attention_kernel(f, variant, scale, &h100->arith);
            ulp_kernel k = ULP_KERNEL_DEFAULT;
            k.path = paths[fi];
            k.accum = katt_is_mma(variant) ? "tensor-core" : "fp32";
            k.softmax = "online";
            k.reduce = reduce;
            k.exp_form = katt_is_exp2(variant) ? "exp2" : "exp";
            for (int pass = 0; pass < 2; pass++) {
                kcmp_attention_data cd = {2, T, D, q, kk, v, o, lse, !pass, pass ? g : NULL, pass ? dq : NULL,
                                          pass ? dk : NULL, pass ? dv : NULL};
                kcheck_acc rows[KCMP_ATTENTION_MAX_ROWS];
                const int n_rows = kcmp_attention(&ck, &cd, shape, rows);
                assert_int_equal(n_rows, pass ? 3 : 2);
                k.pass = pass ? "bwd" : "fwd";
                at_verify(T, D, all, &k);
                assert_int_equal(at_rep.n_rows, n_rows);
                for (int r = 0; r < n_rows; r++) assert_rows_equal(&rows[r].row, &at_rep.rows[r], katt_variants[variant].name);
            }
        }
        /* the emulated kernel: PASS as declared and all unknown; each bug FAILs */
        for (int bug = AT_OK; bug <= AT_BF16_ACC; bug++) {
            if (bug == AT_BF16_ACC && f != PREC_FP32) continue; /* under bf16 outputs the bf16 chains can hide */
            double *y = malloc(5 * n * sizeof(double));
            assert_non_null(y);
            /* y: the bugged kernel's forward o, lse, and its backward from the correct o, lse */
            emulate_attention(2, T, D, q, kk, v, NULL, NULL, NULL, f, bug, y, y + n, NULL, NULL, NULL);
            emulate_attention(2, T, D, q, kk, v, g, o, lse, f, bug, NULL, NULL, y + 2 * n, y + 3 * n, y + 4 * n);
            const double *const fwd[10] = {q, kk, v, g, y, y + n, NULL, NULL, NULL, NULL};
            const double *const bwd[10] = {q, kk, v, g, o, lse, y + 2 * n, y + 3 * n, y + 4 * n, NULL};
            for (int declared = 0; declared < 2; declared++) {
                ulp_kernel k = ULP_KERNEL_DEFAULT;
                k.path = paths[fi];
                if (declared) {
                    k.accum = "fp32";
                    k.softmax = "two-pass";
                    k.reduce = "sequential";
                    k.exp_form = "exp";
                }
                for (int pass = 0; pass < 2; pass++) {
                    k.pass = pass ? "bwd" : "fwd";
                    int rc = at_verify(T, D, pass ? bwd : fwd, &k);
                    assert_int_equal(at_rep.unknown, !declared);
                    if (bug != AT_OK && !declared) continue; /* the loosest bound can be wide enough for a bug */
                    if ((bug == AT_OK) != (rc == ULP_PASS)) {
                        ulp_report_print(stdout, &at_rep);
                        fail_msg("%s bug %d %s (%s): %s", paths[fi], bug, k.pass, declared ? "declared" : "unknown",
                                 rc == ULP_PASS ? "passed" : "failed");
                    }
                    if (rc == ULP_PASS && !strncmp(at_rep.verdict, "PASS against the tightest", 25)) {
                        /* passed on the tightest bound alone: its twin, the element the loosest
                         * bound missed moved far off, must fail both */
                        at_tightest_only_passes++;
                        ulp_report_print(stdout, &at_rep);
                        int worst = -1;
                        for (int r = at_rep.n_rows / 2; r < at_rep.n_rows && worst < 0; r++)
                            if (!at_rep.rows[r].pass) worst = r - at_rep.n_rows / 2;
                        assert_true(worst >= 0);
                        double *moved = pass ? y + (2 + worst) * n : y + worst * n;
                        const int64_t at = at_rep.rows[at_rep.n_rows / 2 + worst].worst_index;
                        const double kept = moved[at];
                        moved[at] = prec_rne(kept + 10 * (fabs(kept) + 1), f);
                        assert_int_not_equal(at_verify(T, D, pass ? bwd : fwd, &k), ULP_PASS);
                        moved[at] = kept;
                    }
                }
            }
            free(y);
        }
        free(x);
    }
}

/* The seed CI found (a correct bf16 two-pass backward whose dq sat at 1.12
 * of the loosest description's bound at one element, 0.72 of the tightest):
 * the all-unknown declaration passes on the tightest bound, and its twin
 * (that element moved far off) fails. */
static void unknown_passes_within_the_tightest_bound(void **state)
{
    const char *was = getenv("ULPSCOPE_SEED");
    char *saved = was ? strdup(was) : NULL;
    setenv("ULPSCOPE_SEED", "0x53a776628ecc73c", 1);
    at_tightest_only_passes = 0;
    attention_agrees_with_check_and_twins_fail(state);
    if (saved) setenv("ULPSCOPE_SEED", saved, 1);
    else unsetenv("ULPSCOPE_SEED");
    free(saved);
    assert_true(at_tightest_only_passes > 0);
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

/* matmul from .npy files: bf16 bit patterns (u2) in, a JSON Lines file out. */
static void cli_verifies_matmul_files(void **state)
{
    (void)state;
    TEST_REQUIRE_BIN();
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("cli_verifies_matmul_files"));
    mm_data good = mm_make(&rng, 5, 6, 64, PREC_BF16, PREC_BF16, 0, MM_OK);
    mm_data bad = mm_make(&rng, 5, 6, 64, PREC_BF16, PREC_BF16, 1, MM_BF16_ACC);
    /* the GEMM in layout ABt: b stored (N, K) */
    double *bt = malloc(64 * 6 * sizeof(double));
    assert_non_null(bt);
    for (int64_t k = 0; k < 64; k++)
        for (int64_t n = 0; n < 6; n++) bt[n * 64 + k] = good.b[k * 6 + n];
    const int64_t sa[2] = {5, 64}, sb[2] = {6, 64}, sbb[2] = {64, 6}, sy[2] = {5, 6}, sn[1] = {6};
    write_case("mA.npy", TFILE_BF16, 2, sa, good.a);
    write_case("mBt.npy", TFILE_BF16, 2, sb, bt);
    write_case("mbias.npy", TFILE_BF16, 1, sn, good.bias);
    write_case("mY.npy", TFILE_BF16, 2, sy, good.y);
    write_case("xA.npy", TFILE_BF16, 2, sa, bad.a);
    write_case("xB.npy", TFILE_BF16, 2, sbb, bad.b);
    write_case("xbias.npy", TFILE_BF16, 1, sn, bad.bias);
    write_case("xY.npy", TFILE_BF16, 2, sy, bad.y);
    char args[2048], out[8192], json[512];
    snprintf(json, sizeof json, "%s/m.jsonl", dir);
    snprintf(args, sizeof args, "matmul --path bf16 --accum fp32 --reduce sequential --epilogue single --layout ABt "
             "--inputs %s/mA.npy,%s/mBt.npy,bias=%s/mbias.npy --outputs %s/mY.npy --json %s", dir, dir, dir, dir, json);
    int rc = test_run_cli("verify", args, out, sizeof out);
    if (rc != 0 || !strstr(out, "verify: PASS")) fail_msg("exit %d: %s", rc, out);
    FILE *f = fopen(json, "r");
    assert_non_null(f);
    char line[4096];
    int lines = 0, header = 0, rows = 0, verdict = 0;
    while (fgets(line, sizeof line, f)) {
        lines++;
        header += strstr(line, "\"record\":\"header\"") && strstr(line, "\"tool\":\"verify\"") && strstr(line, "\"op\":\"matmul\"");
        rows += strstr(line, "\"record\":\"verify\"") && strstr(line, "\"output\":\"y\"") && strstr(line, "\"verdict\":\"PASS\"");
        verdict += strstr(line, "\"record\":\"verdict\"") && strstr(line, "\"verdict\":\"PASS\"");
    }
    fclose(f);
    if (lines != 3 || header != 1 || rows != 1 || verdict != 1) fail_msg("JSON Lines: %d lines, %d/%d/%d", lines, header, rows, verdict);
    remove(json);
    /* the bf16 accumulator, declared fp32: FAIL, named */
    snprintf(args, sizeof args, "matmul --path bf16 --accum fp32 --reduce sequential --epilogue single "
             "--inputs %s/xA.npy,%s/xB.npy,bias=%s/xbias.npy --outputs %s/xY.npy", dir, dir, dir, dir);
    rc = test_run_cli("verify", args, out, sizeof out);
    if (rc != 1 || !strstr(out, "FAIL") || !strstr(out, "accumulates in bf16")) fail_msg("exit %d: %s", rc, out);
    free(bt);
    mm_free(&good);
    mm_free(&bad);
}

/* gelu_erf from .npy files, forward and backward: the correct kernel PASSes,
 * a truncating one FAILs (exit 1). */
static void cli_verifies_activation_files(void **state)
{
    (void)state;
    TEST_REQUIRE_BIN();
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("cli_verifies_activation_files"));
    act_data good = act_make(&rng, KCMP_GELU_ERF, KGELU_ERF_NORMCDF, 300, PREC_BF16, 0, ACT_OK);
    act_data bad = act_make(&rng, KCMP_GELU_ERF, KGELU_ERF_NORMCDF, 300, PREC_BF16, 0, ACT_TRUNCATE);
    const int64_t shape[2] = {3, 100};
    write_case("ax.npy", TFILE_BF16, 2, shape, good.x);
    write_case("ady.npy", TFILE_BF16, 2, shape, good.dy);
    write_case("ay.npy", TFILE_BF16, 2, shape, good.y);
    write_case("adx.npy", TFILE_BF16, 2, shape, good.dx);
    write_case("bx.npy", TFILE_F32, 2, shape, bad.x);
    write_case("by.npy", TFILE_F32, 2, shape, bad.y);
    char args[2048], out[8192];
    snprintf(args, sizeof args, "gelu_erf --path bf16 --accum fp32 --function normcdf --inputs %s/ax.npy --outputs %s/ay.npy",
             dir, dir);
    int rc = test_run_cli("verify", args, out, sizeof out);
    if (rc != 0 || !strstr(out, "verify: PASS")) fail_msg("exit %d: %s", rc, out);
    snprintf(args, sizeof args, "gelu_erf --path bf16 --pass bwd --accum fp32 --function normcdf --inputs %s/ax.npy,%s/ady.npy "
             "--outputs %s/adx.npy", dir, dir, dir);
    rc = test_run_cli("verify", args, out, sizeof out);
    if (rc != 0 || !strstr(out, "verify: PASS")) fail_msg("exit %d: %s", rc, out);
    snprintf(args, sizeof args, "gelu_erf --path bf16 --accum fp32 --function normcdf --inputs %s/bx.npy --outputs %s/by.npy",
             dir, dir);
    rc = test_run_cli("verify", args, out, sizeof out);
    if (rc != 1 || !strstr(out, "FAIL against the bound of the declared kernel") || !strstr(out, "worst ["))
        fail_msg("exit %d: %s", rc, out);
    /* undeclared: the loosest (bf16 arithmetic, any formula) is far wider than one truncation; the tightest rows say it */
    snprintf(args, sizeof args, "gelu_erf --path bf16 --inputs %s/bx.npy --outputs %s/by.npy", dir, dir);
    rc = test_run_cli("verify", args, out, sizeof out);
    if (rc != 0 || !strstr(out, "(loosest)") || !strstr(out, "the tightest (--accum fp32 --function erf) does not hold"))
        fail_msg("exit %d: %s", rc, out);
    act_free(&good);
    act_free(&bad);
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
    const int64_t s32[2] = {3, 2}, s22[2] = {2, 2};
    write_case("m32.npy", TFILE_F32, 2, s32, v);
    write_case("m22.npy", TFILE_F32, 2, s22, v);
    const int64_t n2[1] = {2};
    const double t_good[2] = {1, -1}, t_far[2] = {0, 3}, t_half[2] = {0.5, 1};
    write_case("t1.npy", TFILE_F32, 1, n2, t_good);
    write_case("t2.npy", TFILE_F32, 1, n2, t_far);
    write_case("th.npy", TFILE_F32, 1, n2, t_half);
    const double t_six[6] = {0, 1, 2, 0, 1, 2};
    write_case("t6.npy", TFILE_F64, 2, nc, t_six);
    unsigned char buf[256], ints[24] = {0};
    write_bytes("int.npy", buf, make_npy(buf, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }\n", ints, 24));
    write_bytes("short.npy", buf, make_npy(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", ints, 22));
    static const test_cli_case cases[] = {
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
        {"conv2d --path bf16 --inputs D/a.npy --outputs D/a.npy", "unknown op 'conv2d' (ops: adamw, attention, cross_entropy, embedding, gelu_erf, gelu_tanh, grad_norm, layernorm, leaky_relu2, logsumexp, matmul, polar_express, relu2, residual, rmsnorm, rope, softmax, transpose)"},
        {"rmsnorm --path bf16 --path bf16 --inputs D/a.npy --outputs D/a.npy", "given twice"},
        {"rmsnorm --path bf16 --inputs D/a.npy --outputs D/a.npy --list --list", "--list given twice"}, /* bit 32 */
        {"rmsnorm --path bf16 --pass bwd --inputs D/a.npy --outputs dx=D/a.npy", "missing input tensor 'dy'"},
        {"rmsnorm --path bf16 --pass bwd --inputs D/a.npy,D/a3.npy,D/a.npy --outputs D/a.npy,D/a4.npy", "dgain has 4"},
        /* matmul: a is (2, 3), m32 (3, 2), m22 (2, 2) */
        {"matmul --path fp32 --inputs D/a.npy,D/a.npy --outputs D/m22.npy", "a gives K = 3, b gives K = 2"},
        {"matmul --path fp32 --layout AtB --inputs D/a.npy,D/m32.npy --outputs D/m22.npy", "a gives K = 2, b gives K = 3"},
        {"matmul --path fp32 --inputs D/a.npy,D/m32.npy --outputs D/a.npy", "y's shape differs from (M, N) = (2, 2)"},
        {"matmul --path fp32 --inputs D/a.npy,D/m32.npy,bias=D/a3.npy --outputs D/m22.npy", "bias has 3 elements"},
        {"matmul --path fp32 --beta 0.5 --inputs D/a.npy,D/m32.npy --outputs D/m22.npy", "needs the tensor c"},
        {"matmul --path fp32 --inputs D/a.npy,D/m32.npy,D/a.npy --outputs D/m22.npy", "c's shape differs"},
        {"matmul --path fp32 --inputs D/a.npy,D/m32.npy,D/m22.npy --outputs D/m22.npy", "c given but beta is 0"},
        {"matmul --path fp32 --inputs D/a3.npy,D/m32.npy --outputs D/m22.npy", "a must be a matrix"},
        {"matmul --path fp32 --inputs D/a.npy --outputs D/m22.npy", "missing input tensor 'b'"},
        {"matmul --path fp32 --inputs D/a.npy,D/m32.npy,D/m22.npy,D/a3.npy,D/a.npy --outputs D/m22.npy", "more files than"},
        {"matmul --path fp32 --inputs D/a.npy,D/m32.npy --outputs D/m22.npy,D/m22.npy", "more files than"},
        {"matmul --path fp32 --inputs D/a.npy,D/m32.npy --outputs rstd=D/m22.npy", "not one of this pass's outputs"},
        {"matmul --path bf16 --accum tf32 --inputs D/a.npy,D/m32.npy --outputs D/m22.npy", "needs --path fp32"},
        {"matmul --path fp32 --accum fp8-fast --inputs D/a.npy,D/m32.npy --outputs D/m22.npy", "needs --path fp8"},
        {"matmul --path fp32 --accum fp8-promote:x --inputs D/a.npy,D/m32.npy --outputs D/m22.npy", "unknown accumulation"},
        {"matmul --path fp32 --alpha 0.1 --inputs D/a.npy,D/m32.npy --outputs D/m22.npy", "is not an fp32 value"},
        {"matmul --path fp32 --split-k 0 --inputs D/a.npy,D/m32.npy --outputs D/m22.npy", "--split-k: '0'"},
        {"matmul --path fp32 --layout BA --inputs D/a.npy,D/m32.npy --outputs D/m22.npy", "unknown layout 'BA'"},
        {"matmul --path fp32 --epilogue fused --inputs D/a.npy,D/m32.npy --outputs D/m22.npy", "unknown epilogue"},
        {"matmul --path fp32 --upcast gemma --inputs D/a.npy,D/m32.npy --outputs D/m22.npy", "upcast is rmsnorm's and polar_express's; matmul has none"},
        {"matmul --path fp32 --pass bwd --inputs D/a.npy,D/m32.npy --outputs D/m22.npy", "matmul has no bwd pass"},
        {"matmul --path fp32 --json D/none/x.jsonl --inputs D/a.npy,D/m32.npy --outputs D/m22.npy", "cannot write"},
        {"rmsnorm --path bf16 --gelu --inputs D/a.npy --outputs D/a.npy", "rmsnorm has none of them"},
        {"rmsnorm --path fp8 --inputs D/a.npy --outputs D/a.npy", "path fp8 is a matmul path"},
        {"rmsnorm --path bf16 --accum tensor-core --inputs D/a.npy --outputs D/a.npy", "matrix-unit model of matmul"},
        {"layernorm --path bf16 --variance welford:48 --inputs D/a.npy --outputs D/a.npy", "unknown variance 'welford:48'"},
        {"layernorm --path bf16 --inputs D/a.npy,D/a4.npy --outputs D/a.npy", "gain has 4 elements"},
        {"layernorm --path bf16 --inputs D/a.npy,D/a3.npy,bias=D/a4.npy --outputs D/a.npy", "bias has 4 elements"},
        {"layernorm --path bf16 --inputs D/a.npy --outputs D/a.npy,D/a.npy", "mean has 6 elements"},
        {"layernorm --path bf16 --inputs D/a.npy --outputs D/a3.npy", "y's shape differs"},
        {"layernorm --path bf16 --pass bwd --inputs D/a.npy,D/a3.npy,D/a.npy,D/a4.npy --outputs D/a.npy", "mean has 4"},
        {"layernorm --path bf16 --pass bwd --inputs x=D/a.npy,dy=D/a.npy --outputs D/a.npy,D/a3.npy", "dgain needs gain"},
        {"layernorm --path bf16 --upcast gemma --inputs D/a.npy --outputs D/a.npy", "upcast is rmsnorm's"},
        {"rmsnorm --path bf16 --variance one-pass --inputs D/a.npy --outputs D/a.npy", "variance is layernorm's"},
        /* cross_entropy: logits a (2, 3), targets a3 = {1, 2, 3}: 3 is out of range */
        {"cross_entropy --path fp32 --inputs D/a.npy,D/a3.npy --outputs D/a3.npy", "targets has 3 elements"},
        {"cross_entropy --path fp32 --inputs D/a.npy,D/t6.npy --outputs D/a3.npy", "targets has 6 elements"},
        {"cross_entropy --path fp32 --inputs D/a.npy,D/t2.npy --outputs D/t2.npy", "target 1 is 3"},
        {"cross_entropy --path fp32 --inputs D/a.npy,D/th.npy --outputs D/th.npy", "is not an index"},
        {"cross_entropy --path fp32 --inputs D/a.npy,D/t1.npy --outputs dlogits=D/a.npy", "dlogits need --dloss"},
        {"cross_entropy --path fp32 --dloss 0.5 --inputs D/a.npy,D/t1.npy --outputs dlogits=D/a3.npy", "dlogits's shape"},
        {"cross_entropy --path fp32 --inputs D/a.npy,D/t1.npy --outputs D/a3.npy", "loss has 3 elements"},
        {"cross_entropy --path fp32 --pass bwd --inputs D/a.npy,D/t1.npy --outputs D/t1.npy", "cross_entropy has no bwd pass"},
        {"rmsnorm --path bf16 --dloss 0.5 --inputs D/a.npy --outputs D/a.npy", "dloss, online and softcap are cross_entropy's"},
        {"softmax --path fp32 --softcap 30 --inputs D/a.npy --outputs D/a.npy", "dloss, online and softcap are cross_entropy's"},
        {"cross_entropy --path fp32 --softcap 0.1 --inputs D/a.npy,D/t1.npy --outputs D/a3.npy", "softcap 0.10000000000000001 is not a finite fp32 value"},
        {"cross_entropy --path fp32 --softcap -2 --inputs D/a.npy,D/t1.npy --outputs D/a3.npy", "softcap -2 is not a finite fp32 value"},
        /* the activations */
        {"gelu_tanh --path fp32 --inputs D/a.npy --outputs D/a3.npy", "y's shape differs from x's"},
        {"gelu_tanh --path fp32 --pass bwd --inputs D/a.npy --outputs D/a.npy", "missing input tensor 'dy'"},
        {"gelu_tanh --path fp32 --inputs D/a.npy,D/a.npy --outputs D/a.npy", "more files than"},
        {"gelu_erf --path fp32 --pass bwd --inputs D/a.npy,D/a.npy,D/a.npy --outputs D/a.npy", "more files than"},
        {"relu2 --path fp32 --inputs D/int.npy --outputs D/a.npy", "dtype i4 is not a floating-point"},
        {"relu2 --path fp32 --pass bwd --inputs D/a.npy,D/a.npy,D/a3.npy --outputs D/a.npy", "grad's shape differs from x's"},
        {"leaky_relu2 --path fp32 --inputs D/a.npy --outputs D/a.npy,D/a.npy,D/a.npy", "more files than"},
        {"relu2 --path bf16 --inputs D/odd.npy --outputs D/a.npy", "is not a bf16 value"},
        {"gelu_tanh --path fp32 --function erf --inputs D/a.npy --outputs D/a.npy", "unknown function 'erf' for gelu_tanh"},
        {"gelu_erf --path fp32 --function tanh --inputs D/a.npy --outputs D/a.npy", "unknown function 'tanh' for gelu_erf"},
        {"relu2 --path fp32 --function tanh --inputs D/a.npy --outputs D/a.npy", "function is the GELUs'"},
        {"softmax --path fp32 --function erf --inputs D/a.npy --outputs D/a.npy", "softmax has none"},
        {"relu2 --path fp32 --reduce sequential --inputs D/a.npy --outputs D/a.npy", "relu2 is elementwise"},
        {"leaky_relu2 --path fp32 --math-ulps 4 --inputs D/a.npy --outputs D/a.npy", "calls no math function"},
        {"gelu_erf --path fp8 --inputs D/a.npy --outputs D/a.npy", "path fp8 is a matmul path"},
        {"gelu_erf --path fp32 --gelu --inputs D/a.npy --outputs D/a.npy", "gelu_erf has none of them"},
        {"residual --path fp32 --inputs D/a.npy,D/a3.npy --outputs D/a.npy", "b's shape differs from a's"},
        {"residual --path fp32 --inputs D/a.npy --outputs D/a.npy", "missing input tensor 'b'"},
        {"residual --path fp32 --pass bwd --inputs D/a.npy,D/a.npy --outputs D/a.npy", "residual has no bwd pass"},
        {"residual --path fp32 --math-ulps 3 --inputs D/a.npy,D/a.npy --outputs D/a.npy", "calls no math function"},
        {"residual --path fp32 --inputs D/a.npy,D/a.npy --outputs D/a.npy,D/a.npy", "more files than"},
        /* adamw: p, g, m, v, master */
        {"adamw --path fp32 --lr 0.5 --step 1 --inputs D/a.npy,D/a.npy,D/a.npy --outputs D/a.npy", "missing input tensor 'v'"},
        {"adamw --path fp32 --lr 0.5 --step 1 --inputs D/a.npy,D/a3.npy,D/a.npy,D/a.npy --outputs D/a.npy", "p's shape differs from g's"},
        {"adamw --path fp32 --lr 0.5 --step 1 --inputs D/a.npy,D/a.npy,D/a.npy,D/a.npy --outputs D/a.npy,D/a4.npy", "m's shape differs from g's"},
        {"adamw --path fp32 --lr 0.5 --inputs D/a.npy,D/a.npy,D/a.npy,D/a.npy --outputs D/a.npy", "needs --step"},
        {"adamw --path fp32 --step 3 --inputs D/a.npy,D/a.npy,D/a.npy,D/a.npy --outputs D/a.npy", "needs --lr"},
        {"adamw --path fp32 --lr 0.1 --step 3 --inputs D/a.npy,D/a.npy,D/a.npy,D/a.npy --outputs D/a.npy", "lr 0.1"},
        {"adamw --path fp32 --lr 0.5 --step 3 --beta1 1 --inputs D/a.npy,D/a.npy,D/a.npy,D/a.npy --outputs D/a.npy", "below 1"},
        {"adamw --path fp32 --lr 0.5 --step 0 --inputs D/a.npy,D/a.npy,D/a.npy,D/a.npy --outputs D/a.npy", "--step: '0'"},
        {"adamw --path fp32 --lr 0.5 --step 3 --order adam --inputs D/a.npy,D/a.npy,D/a.npy,D/a.npy --outputs D/a.npy", "unknown order"},
        {"adamw --path fp32 --lr 0.5 --step 3 --store round --inputs D/a.npy,D/a.npy,D/a.npy,D/a.npy --outputs D/a.npy", "unknown store"},
        {"adamw --path fp32 --lr 0.5 --step 3 --inputs g=D/a.npy,m=D/a.npy,v=D/a.npy --outputs D/a.npy", "the weights the step read"},
        {"adamw --path fp32 --lr 0.5 --step 3 --pass bwd --inputs D/a.npy --outputs D/a.npy", "adamw has no bwd pass"},
        {"rmsnorm --path bf16 --lr 0.5 --inputs D/a.npy --outputs D/a.npy", "adamw's; rmsnorm has none"},
        /* logsumexp: x a (2, 3); lse, dlse one per row */
        {"logsumexp --path fp32 --inputs D/a.npy --outputs D/a3.npy", "lse has 3 elements, x has N = 2 rows"},
        {"logsumexp --path fp32 --pass bwd --inputs D/a.npy,D/t1.npy --outputs D/a.npy", "missing input tensor 'dlse'"},
        {"logsumexp --path fp32 --pass bwd --inputs D/a.npy,D/t1.npy,D/a3.npy --outputs D/a.npy", "dlse has 3 elements"},
        {"logsumexp --path fp32 --pass bwd --inputs D/a.npy,D/t1.npy,D/t1.npy --outputs D/a3.npy", "dx's shape differs from x's"},
        {"logsumexp --path fp32 --math-ulps 3 --inputs D/a.npy --outputs D/t1.npy", "--math-ulps does not apply"},
        {"logsumexp --path fp32 --exp exp10 --inputs D/a.npy --outputs D/t1.npy", "unknown exp"},
        {"layernorm --path fp32 --exp fast --inputs D/a.npy --outputs D/a.npy", "exp is softmax's, logsumexp's and attention's"},
        /* attention: q = a (T = 2, D = 3), m32 (3, 2), a3 (3) */
        {"attention --path fp32 --inputs D/a.npy,D/m32.npy,D/a.npy --outputs D/a.npy", "k's shape differs"},
        {"attention --path fp32 --inputs D/a.npy,D/a.npy,D/a.npy --outputs D/a.npy,D/a3.npy", "lse's shape differs"},
        {"attention --path fp32 --inputs D/a3.npy,D/a3.npy,D/a3.npy --outputs D/a3.npy", "q must have at least two"},
        {"attention --path fp32 --inputs D/a.npy,D/a.npy --outputs D/a.npy", "missing input tensor 'v'"},
        {"attention --path fp32 --inputs D/a.npy,D/a.npy,D/a.npy,D/a.npy --outputs D/a.npy", "more files than"},
        {"attention --path fp32 --pass bwd --inputs D/a.npy,D/a.npy,D/a.npy,D/a.npy,D/t1.npy --outputs D/a.npy",
         "missing input tensor 'do'"},
        {"attention --path fp32 --causal no --inputs D/a.npy,D/a.npy,D/a.npy --outputs D/a.npy", "non-causal attention"},
        {"attention --path fp32 --accum storage --inputs D/a.npy,D/a.npy,D/a.npy --outputs D/a.npy", "'storage' is not offered"},
        {"attention --path fp32 --accum tensor-core --inputs D/a.npy,D/a.npy,D/a.npy --outputs D/a.npy", "needs --path bf16"},
        {"attention --path fp32 --scale 0.1 --inputs D/a.npy,D/a.npy,D/a.npy --outputs D/a.npy", "is not an fp32 value"},
        {"attention --path fp32 --softmax fused --inputs D/a.npy,D/a.npy,D/a.npy --outputs D/a.npy", "unknown softmax form"},
        {"attention --path fp32 --upcast gemma --inputs D/a.npy,D/a.npy,D/a.npy --outputs D/a.npy", "attention has none"},
        {"rmsnorm --path bf16 --softmax online --inputs D/a.npy --outputs D/a.npy", "softmax, scale and causal are attention's"},
        {"attention --path fp32 --lr 0.5 --inputs D/a.npy,D/a.npy,D/a.npy --outputs D/a.npy", "attention has none of them"},
        {"attention --path fp32 --function tanh --inputs D/a.npy,D/a.npy,D/a.npy --outputs D/a.npy", "attention has none of them"},
        {"adamw --path fp32 --lr 0.5 --step 3 --scale 0.5 --inputs D/a.npy,D/a.npy,D/a.npy,D/a.npy --outputs D/a.npy",
         "softmax, scale and causal are attention's"},
    };
    test_cli_bad_inputs("verify", dir, cases, sizeof cases / sizeof cases[0]);
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
        cmocka_unit_test(matmul_agrees_with_check),
        cmocka_unit_test(matmul_planted_bugs_fail),
        cmocka_unit_test(matmul_split_k_and_unknown),
        cmocka_unit_test(layernorm_agrees_with_check),
        cmocka_unit_test(layernorm_planted_bugs_fail),
        cmocka_unit_test(softmax_agrees_with_check_and_twins_fail),
        cmocka_unit_test(cross_entropy_agrees_with_check_and_twins_fail),
        cmocka_unit_test(cross_entropy_softcap_and_twins),
        cmocka_unit_test(unknown_passes_within_the_tightest_bound),
        cmocka_unit_test(activations_agree_with_check),
        cmocka_unit_test(activations_planted_bugs_fail),
        cmocka_unit_test(activations_store_grad_and_unknown),
        cmocka_unit_test(residual_agrees_with_check_and_twins_fail),
        cmocka_unit_test(adamw_agrees_with_check_and_twins_fail),
        cmocka_unit_test(logsumexp_agrees_with_check_and_twins_fail),
        cmocka_unit_test(attention_agrees_with_check_and_twins_fail),
        cmocka_unit_test(cli_verifies_files),
        cmocka_unit_test(cli_verifies_matmul_files),
        cmocka_unit_test(cli_verifies_activation_files),
        cmocka_unit_test(cli_refuses_bad_input),
    };
    return cmocka_run_group_tests(tests, setup_dir, remove_dir);
}
