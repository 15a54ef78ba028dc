/* kernels/probe/probe_report.c — the GPU studies of `ulpscope probe` (see
 * probe_report.h): orchestration on the host, instructions in probe_sm80.cu,
 * probe_sm90a.cu and probe_gpu.cu. */
#include "kernels/probe/probe_report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonl.h"
#include "kernels/probe/probe_gpu.h"

/* ---- random dot products ------------------------------------------------------ */

static const prec_rounding SAT = {PREC_RNE, PREC_OVF_SATURATE, false};

static double rnd_in(prec_format f, double x) { return prec_round(x, f == PREC_TF32 ? PREC_TF32 : f, SAT, 0); }

/* A value of f over its whole exponent range up to 2^cap, subnormals included. */
static double wide_value(prec_rng *rng, prec_format f, int cap)
{
    const prec_format_info *fi = prec_format_get(f);
    const int lo = fi->emin - fi->fraction_bits, hi = cap < fi->emax ? cap : fi->emax;
    const int e = lo + (int)(prec_rng_next(rng) % (uint64_t)(hi - lo + 1));
    const double v = ldexp(1.0 + prec_rng_uniform(rng), e);
    const double s = (prec_rng_next(rng) & 1) ? -1.0 : 1.0;
    return s * rnd_in(f, v);
}

/* An fp32 value with random low bits, for tf32 slots. */
static double tf32_noise(prec_rng *rng, double x)
{
    if (x == 0.0 || !isfinite(x)) return x;
    const double ulp32 = prec_ulp(x, PREC_FP32);
    const double extra = (double)(prec_rng_next(rng) & 0x1FFF) * ulp32;
    const double y = x + (x > 0 ? extra : -extra);
    return prec_representable(y, PREC_FP32) && fabs(y) < prec_ulp(x, PREC_TF32) + fabs(x) ? y : x;
}

void probe_random_dot(prec_rng *rng, const probe_target *t, long index, double *a, double *b, double *c)
{
    const int k = t->k, kind = (int)(index % 10);
    const bool small_out = t->out == PREC_FP16;
    /* exponent caps keep every sum finite in the output format */
    const int cap = small_out ? 5 : (t->in == PREC_BF16 || t->in == PREC_TF32 ? 60 : 30);
    const bool tinyable = (t->in == PREC_BF16 || t->in == PREC_TF32) && !small_out;
    if (kind < 4) { /* normal */
        const double s = ldexp(1.0, (int)(prec_rng_next(rng) % 7) - 3);
        for (int i = 0; i < k; i++) {
            a[i] = (prec_rng_next(rng) % 10 == 0) ? 0.0 : rnd_in(t->in, prec_rng_normal(rng) * s);
            b[i] = rnd_in(t->in, prec_rng_normal(rng));
        }
        *c = (prec_rng_next(rng) % 4 == 0) ? 0.0 : prec_round(prec_rng_normal(rng) * s * sqrt(k), t->out, SAT, 0);
    } else if (kind < 7 || (kind == 9 && !tinyable)) { /* wide */
        for (int i = 0; i < k; i++) {
            a[i] = (prec_rng_next(rng) % 10 == 0) ? 0.0 : wide_value(rng, t->in, cap / 2);
            b[i] = wide_value(rng, t->in, cap / 2);
        }
        *c = (prec_rng_next(rng) % 4 == 0) ? 0.0 : wide_value(rng, t->out, cap);
    } else if (kind < 9) { /* cancelling pairs, one of them nudged */
        const int h = k / 2;
        for (int i = 0; i < h; i++) {
            a[i] = rnd_in(t->in, prec_rng_normal(rng));
            b[i] = rnd_in(t->in, prec_rng_normal(rng));
            a[h + i] = -a[i];
            b[h + i] = b[i];
        }
        if (k % 2) a[k - 1] = b[k - 1] = 0.0;
        const int j = h + (int)(prec_rng_next(rng) % (uint64_t)(h ? h : 1));
        if (a[j] != 0.0) a[j] = rnd_in(t->in, a[j] + prec_ulp(a[j], t->in));
        *c = (prec_rng_next(rng) & 1) ? 0.0 : prec_round(ldexp(prec_rng_normal(rng), -20), t->out, SAT, 0);
    } else { /* tiny: products near the fp32 underflow (bf16, tf32) */
        for (int i = 0; i < k; i++) {
            /* Draws in separate statements: the order of a call's argument
             * evaluations is unspecified, and a seed must give the same
             * operands with every compiler. */
            const int ea = -60 - (int)(prec_rng_next(rng) % 16);
            const double ma = 1.0 + prec_rng_uniform(rng);
            const double sa = (prec_rng_next(rng) & 1) ? -1.0 : 1.0;
            a[i] = rnd_in(t->in, ldexp(ma, ea) * sa);
            const int eb = -60 - (int)(prec_rng_next(rng) % 16);
            b[i] = rnd_in(t->in, ldexp(1.0 + prec_rng_uniform(rng), eb));
        }
        *c = (prec_rng_next(rng) & 1) ? 0.0 : ldexp((double)(prec_rng_next(rng) % 1024), -149);
    }
    if (t->in == PREC_TF32)
        for (int i = 0; i < k; i++) {
            if (prec_rng_next(rng) & 1) a[i] = tf32_noise(rng, a[i]);
            if (prec_rng_next(rng) & 1) b[i] = tf32_noise(rng, b[i]);
        }
}

/* ---- layout self-check -------------------------------------------------------- */

/* Full tiles of small random integers: every D is exact in any output, so a
 * wrong fragment or shared-memory layout shows as a wrong sum. */
static int selfcheck(const probe_target *t, char *err, size_t err_len)
{
    int m = 0;
    const int K = probe_gpu_shape(t->route, t->in, t->out, &m), tiles = 4;
    const int esz = mma_elem_bytes(t->in), osz = t->out == PREC_FP16 ? 2 : 4;
    uint8_t *a = malloc((size_t)tiles * m * K * esz), *b = malloc((size_t)tiles * 8 * K * esz);
    uint8_t *c = malloc((size_t)tiles * m * 8 * osz), *d = malloc((size_t)tiles * m * 8 * osz);
    double *av = malloc(sizeof(double) * tiles * m * K), *bv = malloc(sizeof(double) * tiles * 8 * K);
    int rc = -1;
    if (!a || !b || !c || !d || !av || !bv) {
        snprintf(err, err_len, "out of memory");
        goto done;
    }
    prec_rng rng;
    prec_rng_seed(&rng, 0x1a70u);
    for (long i = 0; i < (long)tiles * m * K; i++) {
        av[i] = (double)((int)(prec_rng_next(&rng) % 9) - 4);
        mma_store(t->in, a, i, av[i]);
    }
    for (long i = 0; i < (long)tiles * 8 * K; i++) {
        bv[i] = (double)((int)(prec_rng_next(&rng) % 9) - 4);
        mma_store(t->in, b, i, bv[i]);
    }
    for (long i = 0; i < (long)tiles * m * 8; i++) {
        const uint64_t bits = prec_encode((double)((int)(prec_rng_next(&rng) % 9) - 4), t->out);
        memcpy(c + i * osz, &bits, osz);
    }
    if (probe_gpu_tiles(t->route, t->in, t->out, tiles, a, b, c, d)) {
        snprintf(err, err_len, "%s", kernels_last_error());
        goto done;
    }
    for (int tile = 0; tile < tiles; tile++)
        for (int r = 0; r < m; r++)
            for (int n = 0; n < 8; n++) {
                uint64_t cb = 0, db = 0;
                const long o = ((long)tile * m + r) * 8 + n;
                memcpy(&cb, c + o * osz, osz);
                memcpy(&db, d + o * osz, osz);
                double want = prec_decode(cb, t->out);
                for (int k = 0; k < K; k++) want += av[((long)tile * m + r) * K + k] * bv[((long)tile * 8 + n) * K + k];
                const double got = prec_decode(db, t->out);
                if (got != want) {
                    snprintf(err, err_len,
                             "%s %s -> %s layout check: tile %d D[%d][%d] = %.17g, exact %.17g (fragment or "
                             "shared-memory layout wrong)",
                             t->route, prec_format_name(t->in), prec_format_name(t->out), tile, r, n, got, want);
                    goto done;
                }
            }
    rc = 0;
done:
    free(a);
    free(b);
    free(c);
    free(d);
    free(av);
    free(bv);
    return rc;
}

/* ---- fingerprint ---------------------------------------------------------------- */

/* cuBLASLt promotion: K = 1024, a = (1, s, s, ..., s), b = ones with s =
 * 2^-16, which one fp8 accumulator chain (13 fraction bits) drops beside 1.
 * A kernel that adds each interval's partial sum (started from zero) into
 * fp32 keeps every s outside the first interval: d = 1 + s (K - I). */
static int cublaslt_promotion(FILE *fp, FILE *human, int fast, char *err, size_t err_len)
{
    const int M = 16, N = 16, K = 1024;
    const double s = ldexp(1.0, -16);
    uint8_t *a = calloc((size_t)M * K, 1), *b = calloc((size_t)N * K, 1);
    float *d = malloc(sizeof(float) * M * N);
    int rc = -1;
    if (!a || !b || !d) {
        snprintf(err, err_len, "out of memory");
        goto done;
    }
    double sa, sb;
    if (probe_split_product(PREC_E4M3, s, &sa, &sb)) {
        snprintf(err, err_len, "2^-16 is not an e4m3 product");
        goto done;
    }
    for (int k = 0; k < K; k++) {
        mma_store(PREC_E4M3, a, k, k == 0 ? 1.0 : sa);
        mma_store(PREC_E4M3, b, k, k == 0 ? 1.0 : sb);
    }
    if (probe_cublaslt_fp8(fast, M, N, K, a, b, d)) {
        snprintf(err, err_len, "%s", kernels_last_error());
        goto done;
    }
    const double kept = ((double)d[0] - 1.0) / s;
    const probe_target t = {fast ? "cublaslt-fastaccum" : "cublaslt", PREC_E4M3, PREC_FP32, K};
    char val[48], detail[160];
    if (kept == 0.0) snprintf(val, sizeof val, "\"none\"");
    else if (kept == floor(kept) && kept > 0 && kept < K) snprintf(val, sizeof val, "%d", K - (int)kept);
    else snprintf(val, sizeof val, "\"other\"");
    snprintf(detail, sizeof detail, "1 + 1023 * 2^-16 in one dot of K=1024 gave 1 + %.17g * 2^-16", kept);
    probe_json_target(fp, "property", &t);
    fprintf(fp, ",\"property\":\"promotion_interval\",\"value\":%s,\"detail\":", val);
    base_json_string(fp, detail);
    fputs("}\n", fp);
    fprintf(human, "  %-22s e4m3 -> fp32  promotion_interval = %s (%s)\n", t.route, val, detail);
    rc = 0;
done:
    free(a);
    free(b);
    free(d);
    return rc;
}

int probe_report_fingerprint(FILE *fp, FILE *human, char *err, size_t err_len)
{
    char hdr[1024];
    if (probe_gpu_header(hdr, sizeof hdr)) {
        snprintf(err, err_len, "%s", kernels_last_error());
        return -1;
    }
    base_json_header(fp, "probe", hdr);
    probe_target targets[32];
    const int n = probe_gpu_targets(targets, 32);
    if (n == 0) {
        snprintf(err, err_len, "no matrix-unit instruction of this build runs on this GPU (needs sm_80 or newer)");
        return -1;
    }
    probe_exec ex = {"gpu", probe_gpu_run, NULL};
    for (int i = 0; i < n; i++) {
        if (selfcheck(&targets[i], err, err_len)) return -1;
        if (probe_fingerprint_target(fp, &ex, &targets[i], err, err_len)) return -1;
        fprintf(human, "  probed %-9s %s -> %s (K=%d)\n", targets[i].route, prec_format_name(targets[i].in),
                prec_format_name(targets[i].out), targets[i].k);
    }
    for (int fast = 0; fast < 2; fast++)
        if (cublaslt_promotion(fp, human, fast, err, err_len)) return -1;
    return 0;
}

/* ---- validation --------------------------------------------------------------------- */

static void hex_list(FILE *fp, prec_format f, const void *base, int k)
{
    fputc('[', fp);
    for (int i = 0; i < k; i++)
        fprintf(fp, "%s\"0x%x\"", i ? "," : "", (unsigned)mma_load_bits(f, base, i));
    fputc(']', fp);
}

int probe_report_validate(FILE *fp, FILE *human, long n, uint64_t seed, long *mismatches, char *err, size_t err_len)
{
    char hdr[1024];
    if (probe_gpu_header(hdr, sizeof hdr)) {
        snprintf(err, err_len, "%s", kernels_last_error());
        return -1;
    }
    char extra[1200];
    snprintf(extra, sizeof extra, "%s,\"study\":\"validate\",\"model\":\"h100\",\"seed\":%llu", hdr,
             (unsigned long long)seed);
    base_json_header(fp, "probe", extra);
    probe_target targets[32];
    const int nt = probe_gpu_targets(targets, 32);
    *mismatches = 0;
    fprintf(human, "%-9s %-5s %-5s %9s %10s\n", "route", "in", "out", "dots", "mismatches");
    for (int ti = 0; ti < nt; ti++) {
        const probe_target *t = &targets[ti];
        const int k = t->k, esz = mma_elem_bytes(t->in);
        if (selfcheck(t, err, err_len)) return -1;
        uint8_t *a = malloc((size_t)n * k * esz), *b = malloc((size_t)n * k * esz);
        uint32_t *c = malloc(sizeof(uint32_t) * n), *dg = malloc(sizeof(uint32_t) * n), *dm = malloc(sizeof(uint32_t) * n);
        double av[PROBE_MAX_K], bv[PROBE_MAX_K], cv;
        if (!a || !b || !c || !dg || !dm) {
            free(a); free(b); free(c); free(dg); free(dm);
            snprintf(err, err_len, "out of memory for %ld dot products", n);
            return -1;
        }
        prec_rng rng;
        prec_rng_seed(&rng, seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(ti + 1)));
        for (long i = 0; i < n; i++) {
            probe_random_dot(&rng, t, i, av, bv, &cv);
            for (int j = 0; j < k; j++) {
                mma_store(t->in, a, i * k + j, av[j]);
                mma_store(t->in, b, i * k + j, bv[j]);
            }
            c[i] = (uint32_t)prec_encode(cv, t->out);
        }
        int rc = probe_gpu_run(NULL, t, (int)n, a, b, c, dg, err, err_len);
        if (rc == 0) rc = probe_model_run((void *)"h100", t, (int)n, a, b, c, dm, err, err_len);
        if (rc) {
            free(a); free(b); free(c); free(dg); free(dm);
            return -1;
        }
        long bad = 0;
        for (long i = 0; i < n; i++) bad += dg[i] != dm[i];
        *mismatches += bad;
        probe_json_target(fp, "validate", t);
        fprintf(fp, ",\"k\":%d,\"dots\":%ld,\"mismatches\":%ld,\"examples\":[", k, n, bad);
        int shown = 0;
        for (long i = 0; i < n && shown < 5; i++) {
            if (dg[i] == dm[i]) continue;
            fprintf(fp, "%s{\"index\":%ld,\"a\":", shown ? "," : "", i);
            hex_list(fp, t->in, a + i * k * esz, k);
            fputs(",\"b\":", fp);
            hex_list(fp, t->in, b + i * k * esz, k);
            fprintf(fp, ",\"c\":\"0x%x\",\"gpu\":\"0x%x\",\"model\":\"0x%x\",\"gpu_value\":", c[i], dg[i], dm[i]);
            base_json_double(fp, prec_decode(dg[i], t->out));
            fputs(",\"model_value\":", fp);
            base_json_double(fp, prec_decode(dm[i], t->out));
            fputc('}', fp);
            if (shown < 2)
                fprintf(human, "    mismatch #%ld: c=0x%x gpu=0x%x (%.9g) model=0x%x (%.9g)\n", i, c[i], dg[i],
                        prec_decode(dg[i], t->out), dm[i], prec_decode(dm[i], t->out));
            shown++;
        }
        fputc(']', fp);
        /* an emulated instruction: how each candidate order of its adds fares */
        const mma_model *hm = mma_model_find("h100", t->route, t->in, t->out);
        if (hm && hm->arith.split != MMA_SPLIT_NONE) {
            fputs(",\"split_alternatives\":{", fp);
            for (int sp = 1; sp < MMA_SPLIT_COUNT; sp++) {
                mma_arith alt = hm->arith;
                alt.split = (mma_split)sp;
                long alt_bad = 0;
                for (long i = 0; i < n; i++)
                    alt_bad += dg[i] != mma_dot(&alt, k, a + i * k * esz, b + i * k * esz, c[i]);
                fprintf(fp, "%s\"%s\":%ld", sp > 1 ? "," : "", mma_split_name((mma_split)sp), alt_bad);
                fprintf(human, "    split %-22s %ld mismatches\n", mma_split_name((mma_split)sp), alt_bad);
            }
            fputc('}', fp);
        }
        fputs("}\n", fp);
        fprintf(human, "%-9s %-5s %-5s %9ld %10ld\n", t->route, prec_format_name(t->in), prec_format_name(t->out), n,
                bad);
        free(a); free(b); free(c); free(dg); free(dm);
    }
    return 0;
}

/* ---- fp8 accumulation against K through cuBLASLt ------------------------------------------ */

static int cmp_double(const void *x, const void *y)
{
    const double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

int probe_report_accum(FILE *fp, FILE *human, uint64_t seed, char *err, size_t err_len)
{
    const int M = 64, N = 64, kmax = 16384, model_dots = 64;
    const mma_model *wg = mma_model_find("h100", "wgmma", PREC_E4M3, PREC_FP32);
    uint8_t *a = malloc((size_t)M * kmax), *b = malloc((size_t)N * kmax);
    double *av = malloc(sizeof(double) * M * kmax), *bv = malloc(sizeof(double) * N * kmax);
    float *d = malloc(sizeof(float) * M * N);
    double *e = malloc(sizeof(double) * M * N);
    int rc = -1;
    if (!a || !b || !av || !bv || !d || !e || !wg) {
        snprintf(err, err_len, "out of memory");
        goto done;
    }
    prec_rng rng;
    prec_rng_seed(&rng, seed);
    fprintf(human, "%-22s %-8s %6s %12s %12s %s\n", "cuBLASLt e4m3", "inputs", "K", "err median", "err max",
            "model=gpu: chain, promoted/128");
    for (int positive = 0; positive < 2; positive++)
    for (int K = 128; K <= kmax; K *= 2) {
        for (long i = 0; i < (long)M * K; i++) {
            const double x = prec_rng_normal(&rng);
            av[i] = rnd_in(PREC_E4M3, positive ? fabs(x) : x);
            mma_store(PREC_E4M3, a, i, av[i]);
        }
        for (long i = 0; i < (long)N * K; i++) {
            const double x = prec_rng_normal(&rng);
            bv[i] = rnd_in(PREC_E4M3, positive ? fabs(x) : x);
            mma_store(PREC_E4M3, b, i, bv[i]);
        }
        for (int fast = 0; fast < 2; fast++) {
            for (int i = 0; i < M * N; i++) d[i] = NAN;
            if (probe_cublaslt_fp8(fast, M, N, K, a, b, d)) {
                snprintf(err, err_len, "%s", kernels_last_error());
                goto done;
            }
            for (int m = 0; m < M; m++)
                for (int n = 0; n < N; n++)
                    e[m * N + n] = probe_dot_error(K, av + (long)m * K, bv + (long)n * K, d[m * N + n]);
            /* does one wgmma accumulator chain in K order (the model) give
             * cuBLASLt's bits?  Checked on the first dots. */
            int match = 0, match_promoted = 0;
            for (int i = 0; i < model_dots; i++) {
                const int m = i / N, n = i % N;
                const uint32_t bits = mma_dot(&wg->arith, K, a + (long)m * K, b + (long)n * K, 0u);
                float f, acc = 0.0f;
                memcpy(&f, &bits, 4);
                match += memcmp(&f, &d[m * N + n], 4) == 0;
                /* promotion every 128: each interval's chain from zero added
                 * into an fp32 accumulator (FADD, round to nearest even) */
                for (int k0 = 0; k0 < K; k0 += 128) {
                    const uint32_t pb = mma_dot(&wg->arith, K - k0 < 128 ? K - k0 : 128, a + (long)m * K + k0,
                                                b + (long)n * K + k0, 0u);
                    float part;
                    memcpy(&part, &pb, 4);
                    acc = acc + part;
                }
                match_promoted += memcmp(&acc, &d[m * N + n], 4) == 0;
            }
            qsort(e, (size_t)M * N, sizeof *e, cmp_double);
            const double hi = e[M * N / 2];
            fprintf(fp, "{\"record\":\"accum\",\"source\":\"gpu\",\"route\":\"%s\",\"in\":\"e4m3\",\"inputs\":\"%s\","
                        "\"promotion\":\"%s\",\"K\":%d,\"dots\":%d,\"err_median\":",
                    fast ? "cublaslt-fastaccum" : "cublaslt", positive ? "positive" : "normal",
                    fast ? "none (fast accumulation)" : "cuBLASLt default", K, M * N);
            base_json_double(fp, hi);
            fputs(",\"err_max\":", fp);
            base_json_double(fp, e[M * N - 1]);
            fprintf(fp, ",\"model_chain_match\":%d,\"model_promoted128_match\":%d,\"model_checked\":%d}\n", match,
                    match_promoted, model_dots);
            fprintf(human, "%-22s %-8s %6d %12.3e %12.3e %d/%d %d/%d\n", fast ? "fast accumulation" : "default (promotion)",
                    positive ? "positive" : "normal", K, hi, e[M * N - 1], match, model_dots, match_promoted, model_dots);
        }
    }
    rc = 0;
done:
    free(a);
    free(b);
    free(av);
    free(bv);
    free(d);
    free(e);
    return rc;
}

/* ---- the A100 path on an H100 ------------------------------------------------------------- */

int probe_report_gemm(FILE *fp, FILE *human, int M, int N, int K, uint64_t seed, char *err, size_t err_len)
{
    static const prec_format fmts[] = {PREC_FP16, PREC_BF16, PREC_TF32, PREC_E4M3, PREC_E5M2};
    fprintf(human, "GEMM %dx%dx%d, random normal inputs; ||X - Y||_F / ||fp64||_F\n", M, N, K);
    fprintf(human, "%-5s %11s %11s %11s %11s %9s %8s %9s %9s  %s\n", "in", "A100m-fp64", "H100-fp64", "H100m-fp64",
            "A100m-H100", "bits!=", "mma.sync", "emu ms", "H100 ms", "H100 =");
    for (int f = 0; f < 5; f++) {
        probe_gemm_result r;
        if (probe_gemm_study(fmts[f], M, N, K, seed + (uint64_t)f, &r)) {
            snprintf(err, err_len, "%s", kernels_last_error());
            return -1;
        }
        fprintf(fp, "{\"record\":\"gemm\",\"in\":\"%s\",\"M\":%d,\"N\":%d,\"K\":%d,\"h100\":", prec_format_name(r.in),
                r.M, r.N, r.K);
        base_json_string(fp, r.h100_route);
        fputs(",\"a100_model_vs_fp64\":", fp);
        base_json_double(fp, r.a100_vs_fp64);
        fputs(",\"h100_vs_fp64\":", fp);
        base_json_double(fp, r.h100_vs_fp64);
        fputs(",\"h100_model_vs_fp64\":", fp);
        base_json_double(fp, r.h100_model_vs_fp64);
        fputs(",\"a100_model_vs_h100\":", fp);
        base_json_double(fp, r.a100_vs_h100);
        fputs(",\"a100_model_vs_h100_model\":", fp);
        base_json_double(fp, r.a100_vs_h100_model);
        fputs(",\"frac_bits_differ_a100_model_h100\":", fp);
        base_json_double(fp, r.frac_differ_a100_h100);
        fprintf(fp, ",\"mma_sync_vs_h100_model_mismatches\":%ld,\"ms_emulate_a100\":", r.mma_sync_mismatch);
        base_json_double(fp, r.ms_emulate_a100);
        fputs(",\"ms_h100\":", fp);
        base_json_double(fp, r.ms_h100);
        fputs("}\n", fp);
        fprintf(human, "%-5s %11.3e %11.3e %11.3e %11.3e %9.4f %8ld %9.2f %9.3f  %s\n", prec_format_name(r.in),
                r.a100_vs_fp64, r.h100_vs_fp64, r.h100_model_vs_fp64, r.a100_vs_h100, r.frac_differ_a100_h100,
                r.mma_sync_mismatch, r.ms_emulate_a100, r.ms_h100, r.h100_route);
    }
    return 0;
}
