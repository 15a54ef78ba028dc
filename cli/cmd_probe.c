/* cli/cmd_probe.c — `ulpscope probe`: fingerprint a GPU's matrix units, print
 * the fingerprint a model predicts, compare two fingerprints, validate the
 * H100 model against the hardware, and the fp8 accumulation and A100-path
 * studies.
 *
 *   ulpscope probe [--json FILE]                      probes on this GPU
 *   ulpscope probe --model GEN [--json FILE]          GEN's predicted fingerprint (CPU)
 *   ulpscope probe --model GEN --accum-sweep [--dots N] [--interval I] [--json FILE]
 *   ulpscope probe --diff A.jsonl B.jsonl             property by property
 *   ulpscope probe --validate N [--json FILE]         GPU vs H100 model, N dots per target
 *   ulpscope probe --accum [--json FILE]              fp8 error vs K through cuBLASLt (GPU)
 *   ulpscope probe --emulate-gemm [--size M,N,K] [--json FILE]   the A100 path on an H100 (GPU)
 * Common: --seed S.  --json - writes the JSON to stdout and the tables to stderr.
 * Bad input: one line on stderr, exit 2, no file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/jsonl.h"
#include "base/outfile.h"
#include "base/parse.h"
#include "cli/commands.h"
#include "kernels/kernels.h"
#include "kernels/probe/probe_fingerprint.h"
#include "kernels/probe/probe_report.h"

static const char *const CMD = "probe";

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: ulpscope probe [--json FILE]                     fingerprint this GPU's matrix units\n"
            "       ulpscope probe --model GEN [--json FILE]         fingerprint a model predicts (CPU)\n"
            "       ulpscope probe --model GEN --accum-sweep [--dots N] [--interval I] [--json FILE]\n"
            "       ulpscope probe --diff A.jsonl B.jsonl            compare two fingerprints\n"
            "       ulpscope probe --validate N [--json FILE]        GPU vs the H100 model, N random dots per target\n"
            "       ulpscope probe --accum [--json FILE]             fp8 error vs K, cuBLASLt fast accumulation on/off\n"
            "       ulpscope probe --emulate-gemm [--size M,N,K] [--json FILE]  A100 model vs H100 vs fp64\n"
            "options: --seed S (default 0x5eed; decimal or 0x hex)\n"
            "         --json FILE: JSON Lines; FILE - is stdout, and the tables then go to stderr\n"
            "GEN: %s\n",
            mma_gen_names());
}

typedef enum { MODE_GPU, MODE_MODEL, MODE_SWEEP, MODE_DIFF, MODE_VALIDATE, MODE_ACCUM, MODE_GEMM } probe_mode;

/* Run fn into memory, then print/write: nothing reaches FILE unless all of
 * it was produced. */
typedef int (*producer)(FILE *mem, void *arg, char *err, size_t err_len);
/* Prints the produced records for humans; 0 or -1 (err). */
typedef int (*printer)(const char *buf, size_t len, void *arg, char *err, size_t err_len);

static int emit_output(producer fn, void *arg, const char *json, printer print)
{
    char *buf = NULL;
    size_t len = 0;
    char err[512] = "";
    FILE *mem = open_memstream(&buf, &len);
    if (!mem) return base_error(CMD, "cannot allocate the result buffer");
    const int rc = fn(mem, arg, err, sizeof err);
    fclose(mem);
    if (rc) {
        free(buf);
        fprintf(stderr, "ulpscope probe: error: %s\n", err);
        return 1;
    }
    if (print && print(buf, len, arg, err, sizeof err)) {
        free(buf);
        return base_error(CMD, "%s", err);
    }
    int status = 0;
    if (json) {
        base_outfile o;
        if (base_outfile_open(&o, CMD, json)) status = 1;
        else if (fwrite(buf, 1, len, o.fp) != len) {
            const int e = errno;
            base_outfile_abort(&o);
            status = 1;
            fprintf(stderr, "ulpscope probe: error: cannot write %s: %s\n", json, strerror(e));
        } else if (base_outfile_commit(&o, CMD)) {
            status = 1;
        }
    }
    free(buf);
    return status;
}

typedef struct {
    const char *gen;
    int dots, interval;
    long n;
    unsigned long long seed;
    int M, N, K;
    long mismatches;
    FILE *human; /* tables for people: stdout, or stderr when the JSON goes to stdout */
} probe_args;

static int run_model(FILE *mem, void *arg, char *err, size_t len)
{
    return probe_fingerprint_model(mem, ((probe_args *)arg)->gen, err, len);
}

static int run_sweep(FILE *mem, void *arg, char *err, size_t len)
{
    const probe_args *a = arg;
    char extra[160];
    snprintf(extra, sizeof extra, "\"study\":\"accum-sweep\",\"source\":\"model\",\"model\":\"%s\",\"seed\":%llu",
             a->gen, a->seed);
    base_json_header(mem, CMD, extra);
    return probe_accum_sweep_model(mem, a->gen, a->interval, a->dots, a->seed, err, len);
}

static int run_gpu(FILE *mem, void *arg, char *err, size_t len)
{
    (void)arg;
    return probe_report_fingerprint(mem, stderr, err, len);
}

static int run_validate(FILE *mem, void *arg, char *err, size_t len)
{
    probe_args *a = arg;
    return probe_report_validate(mem, a->human, a->n, a->seed, &a->mismatches, err, len);
}

static int run_accum(FILE *mem, void *arg, char *err, size_t len)
{
    const probe_args *a = arg;
    char extra[128];
    snprintf(extra, sizeof extra, "\"study\":\"accum\",\"source\":\"gpu\",\"seed\":%llu", a->seed);
    base_json_header(mem, CMD, extra);
    return probe_report_accum(mem, a->human, a->seed, err, len);
}

static int run_gemm(FILE *mem, void *arg, char *err, size_t len)
{
    const probe_args *a = arg;
    char extra[128];
    snprintf(extra, sizeof extra, "\"study\":\"emulate-gemm\",\"source\":\"gpu\",\"seed\":%llu", a->seed);
    base_json_header(mem, CMD, extra);
    return probe_report_gemm(mem, a->human, a->M, a->N, a->K, a->seed, err, len);
}

static int print_table(const char *buf, size_t len, void *arg, char *err, size_t err_len)
{
    const probe_args *a = arg;
    FILE *in = fmemopen((void *)buf, len, "r");
    if (!in) {
        snprintf(err, err_len, "cannot read back the fingerprint");
        return -1;
    }
    return probe_fingerprint_table(a->human, in, err, err_len);
}

/* The sweep's records as a small table. */
static int print_sweep(const char *buf, size_t len, void *arg, char *err, size_t err_len)
{
    (void)len;
    (void)err;
    (void)err_len;
    const probe_args *a = arg;
    fprintf(a->human, "fp8 accumulation error |d - exact| / sum|a_k b_k|, model %s, %d dots per K (median / max)\n",
            a->gen, a->dots);
    for (const char *line = buf; line && *line;) {
        const char *next = strchr(line, '\n');
        char in[16], prom[48], dist[16];
        int K;
        double med, mx;
        const char *p = strstr(line, "\"in\":\"");
        const char *q = strstr(line, "\"promotion\":\"");
        const char *di = strstr(line, "\"inputs\":\"");
        const char *k = strstr(line, "\"K\":");
        const char *m1 = strstr(line, "\"err_median\":");
        const char *m2 = strstr(line, "\"err_max\":");
        if (p && q && k && m1 && m2 && di && (!next || m2 < next) && sscanf(p + 6, "%15[^\"]", in) == 1 &&
            sscanf(di + 10, "%15[^\"]", dist) == 1 &&
            sscanf(q + 13, "%47[^\"]", prom) == 1 && sscanf(k + 4, "%d", &K) == 1 &&
            sscanf(m1 + 13, "%lf", &med) == 1 && sscanf(m2 + 10, "%lf", &mx) == 1)
            fprintf(a->human, "  %-5s %-8s K=%-6d %-16s %.3e / %.3e\n", in, dist, K, prom, med, mx);
        line = next ? next + 1 : NULL;
    }
    return 0;
}

static int need_gpu(void)
{
    char why[256];
    if (kernels_gpu_available(why, sizeof why)) return 0;
    return base_error(CMD, "this mode needs a GPU: %s (CPU modes: --model %s, --diff)", why, mma_gen_names());
}

/* "M,N,K": M and N multiples of 16 up to 16384, K a multiple of 32 up to
 * 65536.  Returns 0, or -1 for anything else (a missing or extra part, junk,
 * a value out of range: never wrapped). */
static int parse_size(const char *s, probe_args *a)
{
    static const long max[3] = {16384, 16384, 65536}, multiple[3] = {16, 16, 32};
    char buf[96];
    if (strlen(s) >= sizeof buf) return -1;
    strcpy(buf, s);
    long v[3];
    char *part = buf;
    for (int k = 0; k < 3; k++) {
        char *comma = strchr(part, ',');
        if ((k < 2) != (comma != NULL)) return -1;
        if (comma) *comma = '\0';
        if (base_parse_long_in(part, multiple[k], max[k], &v[k]) || v[k] % multiple[k]) return -1;
        if (comma) part = comma + 1;
    }
    a->M = (int)v[0];
    a->N = (int)v[1];
    a->K = (int)v[2];
    return 0;
}

int cmd_probe(int argc, char **argv)
{
    probe_mode mode = MODE_GPU;
    int mode_set = 0, sweep = 0;
    probe_args a = {.gen = NULL, .dots = 64, .interval = 128, .n = 0, .seed = 0x5eed, .M = 1024, .N = 1024, .K = 4096};
    const char *json = NULL, *diff_a = NULL, *diff_b = NULL;
    int dots_set = 0, interval_set = 0, size_set = 0;
    static const char *const options[] = {"--json", "--model", "--accum-sweep", "--diff", "--validate", "--accum",
                                          "--emulate-gemm", "--size", "--dots", "--interval", "--seed"};
    unsigned seen = 0; /* options given so far, by their index in options[] */
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        const int has = i + 1 < argc;
        for (unsigned k = 0; k < sizeof options / sizeof options[0]; k++)
            if (strcmp(o, options[k]) == 0) {
                if (seen & (1u << k)) return base_error(CMD, "%s given twice (give each option once)", o);
                seen |= 1u << k;
            }
        if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(o, "--json") == 0) {
            if (!has) return base_error(CMD, "--json needs a file name (or - for stdout)");
            json = argv[++i];
        } else if (strcmp(o, "--model") == 0) {
            if (!has) return base_error(CMD, "--model needs a generation (%s)", mma_gen_names());
            a.gen = argv[++i];
            if (!mma_gen_known(a.gen))
                return base_error(CMD, "unknown model '%s' (models: %s)", a.gen, mma_gen_names());
        } else if (strcmp(o, "--accum-sweep") == 0) {
            sweep = 1;
        } else if (strcmp(o, "--diff") == 0) {
            if (i + 2 >= argc) return base_error(CMD, "--diff needs two fingerprint files");
            diff_a = argv[++i];
            diff_b = argv[++i];
            mode = MODE_DIFF;
            mode_set++;
        } else if (strcmp(o, "--validate") == 0) {
            if (!has || base_parse_long_in(argv[i + 1], 1, 10000000, &a.n))
                return base_error(CMD, "--validate needs a count of dot products in 1..10000000, got '%s'",
                                  has ? argv[i + 1] : "");
            i++;
            mode = MODE_VALIDATE;
            mode_set++;
        } else if (strcmp(o, "--accum") == 0) {
            mode = MODE_ACCUM;
            mode_set++;
        } else if (strcmp(o, "--emulate-gemm") == 0) {
            mode = MODE_GEMM;
            mode_set++;
        } else if (strcmp(o, "--size") == 0) {
            if (!has || parse_size(argv[i + 1], &a))
                return base_error(CMD, "--size needs M,N,K with M, N multiples of 16 (<= 16384) and K a multiple "
                                       "of 32 (<= 65536), got '%s'",
                                  has ? argv[i + 1] : "");
            i++;
            size_set = 1;
        } else if (strcmp(o, "--dots") == 0) {
            long v;
            if (!has || base_parse_long_in(argv[i + 1], 2, 100000, &v))
                return base_error(CMD, "--dots needs a count in 2..100000, got '%s'", has ? argv[i + 1] : "");
            a.dots = (int)v;
            i++;
            dots_set = 1;
        } else if (strcmp(o, "--interval") == 0) {
            long v;
            if (!has || base_parse_long_in(argv[i + 1], 32, 16384, &v) || v % 32)
                return base_error(CMD, "--interval needs a multiple of 32 in 32..16384, got '%s'",
                                  has ? argv[i + 1] : "");
            a.interval = (int)v;
            i++;
            interval_set = 1;
        } else if (strcmp(o, "--seed") == 0) {
            uint64_t v;
            if (!has || base_parse_seed(argv[i + 1], &v))
                return base_error(CMD, "--seed needs a seed (" BASE_SEED_SYNTAX "), got '%s'", has ? argv[i + 1] : "");
            a.seed = v;
            i++;
        } else {
            return base_error(CMD, "unknown option '%s' (options: --json --model --accum-sweep --diff --validate "
                                   "--accum --emulate-gemm --size --dots --interval --seed --help)",
                              o);
        }
    }
    if (a.gen) {
        if (mode_set) return base_error(CMD, "--model runs on the CPU; it does not combine with GPU modes or --diff");
        mode = sweep ? MODE_SWEEP : MODE_MODEL;
    } else if (sweep) {
        return base_error(CMD, "--accum-sweep needs --model GEN (models: %s)", mma_gen_names());
    }
    if (mode_set > 1) return base_error(CMD, "choose one of --diff, --validate, --accum, --emulate-gemm");
    if ((dots_set || interval_set) && mode != MODE_SWEEP)
        return base_error(CMD, "--dots and --interval belong to --model GEN --accum-sweep");
    if (size_set && mode != MODE_GEMM) return base_error(CMD, "--size belongs to --emulate-gemm");
    if (mode == MODE_DIFF && json) return base_error(CMD, "--diff prints a table; it writes no --json file");
    if (json && base_outfile_check(CMD, json)) return BASE_EXIT_USAGE; /* before any work */
    a.human = json && base_outfile_is_stdout(json) ? stderr : stdout;

    switch (mode) {
    case MODE_DIFF: {
        char err[512];
        if (probe_fingerprint_diff(stdout, diff_a, diff_b, err, sizeof err)) return base_error(CMD, "%s", err);
        return 0;
    }
    case MODE_MODEL: return emit_output(run_model, &a, json, print_table);
    case MODE_SWEEP: return emit_output(run_sweep, &a, json, print_sweep);
    case MODE_GPU:
        if (need_gpu()) return BASE_EXIT_USAGE;
        return emit_output(run_gpu, &a, json, print_table);
    case MODE_VALIDATE: {
        if (need_gpu()) return BASE_EXIT_USAGE;
        const int rc = emit_output(run_validate, &a, json, NULL);
        if (rc) return rc;
        fprintf(a.human, "validate: %ld mismatches between the GPU and the H100 model\n", a.mismatches);
        return a.mismatches ? 1 : 0;
    }
    case MODE_ACCUM:
        if (need_gpu()) return BASE_EXIT_USAGE;
        return emit_output(run_accum, &a, json, NULL);
    case MODE_GEMM:
        if (need_gpu()) return BASE_EXIT_USAGE;
        return emit_output(run_gemm, &a, json, NULL);
    }
    return 0;
}
