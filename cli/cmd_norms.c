/* cli/cmd_norms.c — `ulpscope norms`: the LayerNorm / RMSNorm stability study
 * (studies/norms.h) on a grid of cases, as a table on stdout and
 * optionally JSON Lines. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/jsonl.h"
#include "base/outfile.h"
#include "base/parse.h"
#include "base/progress.h"
#include "cli/commands.h"
#include "studies/norms.h"

#define CMD "norms"
#define MAX_LIST 32
#define MAX_WIDTH (1L << 20)
#define MAX_ELEMENTS (1L << 22) /* rows x width of one case */
#define FULL_TABLE_MAX 240 /* more records than this: the table summarises */

static void usage(FILE *fp)
{
    fprintf(fp,
        "usage: ulpscope norms [options]\n"
        "\n"
        "LayerNorm and RMSNorm, forward and backward, emulated on the CPU in each storage\n"
        "format, against the MPFR reference.  Variants: variance by one pass (E[x^2]-E[x]^2),\n"
        "two passes or Welford (LayerNorm; RMSNorm uses the sum of squares); reductions\n"
        "accumulated in the storage format or fp32; upcast none / llama (statistics and\n"
        "normalisation in fp32, cast before the gain) / gemma (all fp32, one cast at the end).\n"
        "Errors are in units of the storage format's unit roundoff u, per element against the\n"
        "output's natural scale (max and RMS over the tensor); non-finite outputs are counted\n"
        "and make the error inf.\n"
        "\n"
        "options (lists are comma-separated):\n"
        "  --norm LIST       layernorm, rmsnorm (default both)\n"
        "  --pass LIST       fwd, bwd (default both)\n"
        "  --format LIST     fp32, bf16, fp16, e4m3, e5m2 (default all)\n"
        "  --variance LIST   onepass, twopass, welford (LayerNorm; default all)\n"
        "  --acc LIST        storage, fp32 (default both)\n"
        "  --upcast LIST     none, llama, gemma (default all)\n"
        "  --width LIST      row widths, 2..%ld\n"
        "  --ratio LIST      mean/std of the rows, >= 0\n"
        "  --data LIST       normal, outliers (every 64th column at +-100 std),\n"
        "                    large (x ~ 512: x^2 overflows fp16)\n"
        "  --rows N          rows per case (default 4; dgamma/dbeta sum over them;\n"
        "                    rows x width at most %ld)\n"
        "  --eps E           epsilon inside the square root (default 1e-5 as an fp32)\n"
        "  --seed S          input seed (default 1; decimal or 0x hex)\n"
        "  --quick           a smaller default grid (for tests and notebooks)\n"
        "  --json FILE       JSON Lines: a header, then one record per result (FILE - is\n"
        "                    stdout, which then holds the JSON alone)\n"
        "  --help            this text\n"
        "\n"
        "Default grid: mean/std 0, 1, 10, 100, 1e3, 1e4 at width 1024; widths 64 .. 16384 at\n"
        "mean/std 1; outliers and large data at width 4096 (--quick: smaller widths).  Any of\n"
        "--width, --ratio, --data replaces it with the product of the lists given (others:\n"
        "width 1024, ratio 0, data normal).\n",
        MAX_WIDTH, MAX_ELEMENTS);
}

/* "a,b,c" -> items (in place); returns the count, or -1 when the list or
 * one of its items is empty ("64,,128" is a typo, not a shorter list) or
 * it has more than MAX_LIST items. */
static int split_list(char *s, char **items)
{
    int n = 0;
    for (char *item = s;; item++) {
        char *comma = strchr(item, ',');
        if (comma) *comma = 0;
        if (!*item || n == MAX_LIST) return -1;
        items[n++] = item;
        if (!comma) return n;
        item = comma;
    }
}

typedef int (*name_parser)(const char *, int *);

/* Parses a list of names into flags[]; on error prints the one-line message. */
static int parse_flags(const char *opt, const char *value, bool *flags, int nflags,
                       int (*parse)(const char *, int *), const char *accepted)
{
    char buf[512], *items[MAX_LIST];
    if (strlen(value) >= sizeof buf) return base_error(CMD, "%s: list too long", opt);
    strcpy(buf, value);
    int n = split_list(buf, items);
    if (n < 0) return base_error(CMD, "%s: empty item or more than %d in '%s'", opt, MAX_LIST, value);
    for (int i = 0; i < nflags; i++) flags[i] = false;
    for (int i = 0; i < n; i++) {
        int k;
        if (parse(items[i], &k)) return base_error(CMD, "unknown %s '%s' (accepted: %s)", opt + 2, items[i], accepted);
        flags[k] = true;
    }
    return 0;
}

static int p_norm(const char *s, int *k) { norms_norm v; int r = norms_norm_parse(s, &v); *k = v; return r; }
static int p_pass(const char *s, int *k) { norms_pass v; int r = norms_pass_parse(s, &v); *k = v; return r; }
static int p_acc(const char *s, int *k) { norms_acc v; int r = norms_acc_parse(s, &v); *k = v; return r; }
static int p_upcast(const char *s, int *k) { norms_upcast v; int r = norms_upcast_parse(s, &v); *k = v; return r; }
static int p_data(const char *s, int *k) { norms_data v; int r = norms_data_parse(s, &v); *k = v; return r; }
static int p_variance(const char *s, int *k)
{
    norms_variance v;
    if (norms_variance_parse(s, &v) || v == NORMS_SUMSQ) return -1;
    *k = v;
    return 0;
}
static int p_format(const char *s, int *k)
{
    prec_format f;
    if (prec_format_parse(s, &f) || !norms_format_supported(f)) return -1;
    *k = f;
    return 0;
}

/* ---- records: kept for the table, streamed to JSON ---------------------------- */

typedef struct {
    norms_record *recs;
    long n, cap;
    FILE *json;
    int oom;
    base_progress progress; /* a line on stderr while a long run works */
} sink;

static void json_record(FILE *fp, const norms_record *r)
{
    const norms_variant *v = &r->variant;
    fputs("{\"record\":\"norms\",\"norm\":", fp);
    base_json_string(fp, norms_norm_name(v->norm));
    fputs(",\"pass\":", fp);
    base_json_string(fp, norms_pass_name(r->pass));
    fputs(",\"output\":", fp);
    base_json_string(fp, r->output);
    fputs(",\"format\":", fp);
    base_json_string(fp, prec_format_name(v->format));
    fputs(",\"acc\":", fp);
    base_json_string(fp, norms_acc_name(v->acc));
    fputs(",\"variance_algo\":", fp);
    base_json_string(fp, norms_variance_name(v->variance));
    fputs(",\"upcast\":", fp);
    base_json_string(fp, norms_upcast_name(v->upcast));
    fprintf(fp, ",\"width\":%ld,\"rows\":%ld,\"mean_over_std\":", r->kase.width, r->kase.rows);
    base_json_double(fp, r->kase.mean_over_std);
    fputs(",\"data\":", fp);
    base_json_string(fp, norms_data_name(r->kase.data));
    fputs(",\"scale\":", fp);
    base_json_double(fp, r->scale);
    fputs(",\"unit_roundoff\":", fp);
    base_json_double(fp, prec_format_get(v->format)->unit_roundoff);
    fprintf(fp, ",\"n\":%ld,\"max_err_u\":", r->err.n);
    base_json_double(fp, r->err.max_err_u);
    fputs(",\"rms_err_u\":", fp);
    base_json_double(fp, r->err.rms_err_u);
    fprintf(fp, ",\"worst_index\":%ld,\"nonfinite\":%ld,\"stats_nonfinite\":%ld,\"ref_unproven\":%ld}\n",
            r->err.worst_index, r->err.nonfinite, r->stats_nonfinite, r->ref_unproven);
}

static void collect(const norms_record *r, void *arg)
{
    base_progress_step(&((sink *)arg)->progress);
    sink *s = arg;
    if (s->json) json_record(s->json, r);
    if (s->n == s->cap) {
        long cap = s->cap ? 2 * s->cap : 256;
        norms_record *grown = realloc(s->recs, (size_t)cap * sizeof *grown);
        if (!grown) {
            s->oom = 1;
            return;
        }
        s->recs = grown;
        s->cap = cap;
    }
    s->recs[s->n++] = *r;
}

static void fmt_err(char *buf, size_t len, double e)
{
    if (isinf(e)) snprintf(buf, len, "inf");
    else if (isnan(e)) snprintf(buf, len, "nan");
    else snprintf(buf, len, "%.3g", e);
}

static void variant_cols(const norms_record *r)
{
    const norms_variant *v = &r->variant;
    printf("%-9s %-3s %-6s %-4s %-7s %-7s %-5s", norms_norm_name(v->norm), norms_pass_name(r->pass),
           r->output, prec_format_name(v->format), norms_acc_name(v->acc),
           norms_variance_name(v->variance), norms_upcast_name(v->upcast));
}

static bool same_variant(const norms_record *a, const norms_record *b)
{
    return a->variant.norm == b->variant.norm && a->variant.format == b->variant.format &&
           a->variant.acc == b->variant.acc && a->variant.variance == b->variant.variance &&
           a->variant.upcast == b->variant.upcast && a->pass == b->pass &&
           strcmp(a->output, b->output) == 0;
}

static void print_table(const sink *s)
{
    char m[32], q[32];
    if (s->n <= FULL_TABLE_MAX) {
        printf("%-9s %-3s %-6s %-4s %-7s %-7s %-5s %6s %8s %-8s %10s %10s %s\n", "norm", "pass", "output",
               "fmt", "acc", "var", "upcast", "width", "mean/std", "data", "max_err_u", "rms_err_u",
               "nonfinite");
        for (long i = 0; i < s->n; i++) {
            const norms_record *r = &s->recs[i];
            fmt_err(m, sizeof m, r->err.max_err_u);
            fmt_err(q, sizeof q, r->err.rms_err_u);
            variant_cols(r);
            printf(" %6ld %8.3g %-8s %10s %10s %ld%s\n", r->kase.width, r->kase.mean_over_std,
                   norms_data_name(r->kase.data), m, q, r->err.nonfinite,
                   r->stats_nonfinite ? " (stats overflow)" : "");
        }
        return;
    }
    /* summary: per variant and output, the worst case over the grid */
    printf("%ld records (use --json FILE for all of them); worst case per variant over the grid:\n", s->n);
    printf("%-9s %-3s %-6s %-4s %-7s %-7s %-5s %10s %-26s %10s %s\n", "norm", "pass", "output", "fmt", "acc",
           "var", "upcast", "max_err_u", "at (width, mean/std, data)", "rms_err_u", "nonfinite");
    bool *done = calloc((size_t)s->n, sizeof *done);
    if (!done) return;
    for (long i = 0; i < s->n; i++) {
        if (done[i]) continue;
        const norms_record *worst = &s->recs[i];
        double worst_rms = 0.0;
        long nonfinite = 0, stats_bad = 0;
        for (long k = i; k < s->n; k++) {
            const norms_record *r = &s->recs[k];
            if (done[k] || !same_variant(r, worst)) continue;
            done[k] = true;
            if (r->err.max_err_u > worst->err.max_err_u) worst = r;
            if (r->err.rms_err_u > worst_rms) worst_rms = r->err.rms_err_u;
            nonfinite += r->err.nonfinite;
            stats_bad += r->stats_nonfinite;
        }
        char at[64];
        snprintf(at, sizeof at, "%ld, %g, %s", worst->kase.width, worst->kase.mean_over_std,
                 norms_data_name(worst->kase.data));
        fmt_err(m, sizeof m, worst->err.max_err_u);
        fmt_err(q, sizeof q, worst_rms);
        variant_cols(worst);
        printf(" %10s %-26s %10s %ld%s\n", m, at, q, nonfinite, stats_bad ? " (stats overflow)" : "");
    }
    free(done);
}

/* ---- main ------------------------------------------------------------------------ */

static void all_true(bool *flags, int n)
{
    for (int i = 0; i < n; i++) flags[i] = true;
}

int cmd_norms(int argc, char **argv)
{
    norms_plan plan;
    memset(&plan, 0, sizeof plan);
    all_true(plan.norms, NORMS_NNORMS);
    all_true(plan.passes, NORMS_NPASSES);
    for (int f = 0; f < PREC_NFORMATS; f++) plan.formats[f] = norms_format_supported((prec_format)f);
    all_true(plan.variances, NORMS_NVARIANCES);
    all_true(plan.accs, NORMS_NACCS);
    all_true(plan.upcasts, NORMS_NUPCASTS);

    long widths[MAX_LIST], nwidths = 0, rows = 4;
    uint64_t seed = 1;
    double ratios[MAX_LIST], eps = (double)1e-5f;
    int nratios = 0;
    bool datas[NORMS_NDATA] = {false}, data_given = false, quick = false;
    const char *json_path = NULL;
    unsigned seen = 0; /* options given so far, by their index in with_value[] */

    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i];
        if (strcmp(opt, "--help") == 0 || strcmp(opt, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(opt, "--quick") == 0) {
            if (quick) return base_error(CMD, "--quick given twice (give each option once)");
            quick = true;
            continue;
        }
        static const char *const with_value[] = {"--norm", "--pass", "--format", "--variance", "--acc",
                                                 "--upcast", "--width", "--ratio", "--data", "--rows",
                                                 "--eps", "--seed", "--json"};
        int option = -1;
        for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++)
            if (strcmp(opt, with_value[k]) == 0) option = (int)k;
        if (option < 0)
            return base_error(CMD, "unknown option '%s' (options: --norm --pass --format --variance --acc "
                                  "--upcast --width --ratio --data --rows --eps --seed --quick --json --help)", opt);
        if (seen & (1u << option)) return base_error(CMD, "%s given twice (give it once, with a comma-separated list)", opt);
        seen |= 1u << option;
        /* a following option is not a value: "--json --quick" forgot the file */
        if (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0)
            return base_error(CMD, "%s needs a value%s%s", opt, i + 1 < argc ? ", got the option " : "",
                             i + 1 < argc ? argv[i + 1] : "");
        const char *val = argv[++i];
        int rc = 0;
        if (strcmp(opt, "--norm") == 0) {
            rc = parse_flags(opt, val, plan.norms, NORMS_NNORMS, p_norm, "layernorm, rmsnorm");
        } else if (strcmp(opt, "--pass") == 0) {
            rc = parse_flags(opt, val, plan.passes, NORMS_NPASSES, p_pass, "fwd, bwd");
        } else if (strcmp(opt, "--format") == 0) {
            rc = parse_flags(opt, val, plan.formats, PREC_NFORMATS, p_format, "fp32, bf16, fp16, e4m3, e5m2");
        } else if (strcmp(opt, "--variance") == 0) {
            rc = parse_flags(opt, val, plan.variances, NORMS_NVARIANCES, p_variance, "onepass, twopass, welford");
        } else if (strcmp(opt, "--acc") == 0) {
            rc = parse_flags(opt, val, plan.accs, NORMS_NACCS, p_acc, "storage, fp32");
        } else if (strcmp(opt, "--upcast") == 0) {
            rc = parse_flags(opt, val, plan.upcasts, NORMS_NUPCASTS, p_upcast, "none, llama, gemma");
        } else if (strcmp(opt, "--data") == 0) {
            rc = parse_flags(opt, val, datas, NORMS_NDATA, p_data, "normal, outliers, large");
            data_given = true;
        } else if (strcmp(opt, "--width") == 0 || strcmp(opt, "--ratio") == 0) {
            char buf[512], *items[MAX_LIST];
            bool is_width = opt[2] == 'w';
            if (strlen(val) >= sizeof buf) return base_error(CMD, "%s: list too long", opt);
            strcpy(buf, val);
            int n = split_list(buf, items);
            if (n < 0) return base_error(CMD, "%s: empty item or more than %d values in '%s'", opt, MAX_LIST, val);
            for (int k = 0; k < n; k++) {
                if (is_width) {
                    long w;
                    if (base_parse_long(items[k], &w) || w < 2 || w > MAX_WIDTH)
                        return base_error(CMD, "bad --width '%s' (an integer from 2 to %ld)", items[k], MAX_WIDTH);
                    widths[k] = w;
                } else {
                    double r;
                    if (base_parse_double(items[k], &r) || !(r >= 0.0) || isinf(r) || r > 1e15)
                        return base_error(CMD, "bad --ratio '%s' (a number from 0 to 1e15)", items[k]);
                    ratios[k] = r;
                }
            }
            if (is_width) nwidths = n;
            else nratios = n;
        } else if (strcmp(opt, "--rows") == 0) {
            if (base_parse_long(val, &rows) || rows < 1 || rows > 4096)
                return base_error(CMD, "bad --rows '%s' (an integer from 1 to 4096)", val);
        } else if (strcmp(opt, "--eps") == 0) {
            if (base_parse_double(val, &eps) || !(eps >= 0.0) || isinf(eps))
                return base_error(CMD, "bad --eps '%s' (a finite number >= 0)", val);
        } else if (strcmp(opt, "--seed") == 0) {
            if (base_parse_seed(val, &seed))
                return base_error(CMD, "bad --seed '%s' (" BASE_SEED_SYNTAX ")", val);
        } else {
            if (!*val) return base_error(CMD, "--json: empty file name (a path, or - for stdout)");
            if (base_outfile_check(CMD, val)) return BASE_EXIT_USAGE; /* before any work */
            json_path = val;
        }
        if (rc) return rc;
    }

    /* the cases */
    norms_case cases[3 * MAX_LIST * MAX_LIST];
    long ncases = 0;
    if (nwidths || nratios || data_given) {
        if (!nwidths) widths[nwidths++] = 1024;
        if (!nratios) ratios[nratios++] = 0.0;
        if (!data_given) datas[NORMS_DATA_NORMAL] = true;
        for (int d = 0; d < NORMS_NDATA; d++)
            for (int r = 0; r < nratios && datas[d]; r++)
                for (long w = 0; w < nwidths; w++)
                    cases[ncases++] = (norms_case){rows, widths[w], ratios[r], (norms_data)d, seed, eps};
    } else {
        static const double sweep_ratios[] = {0, 1, 10, 100, 1e3, 1e4};
        static const long sweep_widths[] = {64, 256, 1024, 4096, 16384};
        long ratio_width = quick ? 256 : 1024, data_width = quick ? 256 : 4096;
        int nw = quick ? 4 : 5;
        for (int r = 0; r < 6; r++)
            cases[ncases++] = (norms_case){rows, ratio_width, sweep_ratios[r], NORMS_DATA_NORMAL, seed, eps};
        for (int w = 0; w < nw; w++)
            if (sweep_widths[w] != ratio_width)
                cases[ncases++] = (norms_case){rows, sweep_widths[w], 1.0, NORMS_DATA_NORMAL, seed, eps};
        cases[ncases++] = (norms_case){rows, data_width, 0.0, NORMS_DATA_OUTLIERS, seed, eps};
        cases[ncases++] = (norms_case){rows, data_width, 0.0, NORMS_DATA_LARGE, seed, eps};
    }
    for (long c = 0; c < ncases; c++)
        if (rows * cases[c].width > MAX_ELEMENTS)
            return base_error(CMD, "--rows %ld at width %ld is %ld elements per case, above the limit %ld "
                                  "(the MPFR reference is computed for every element)",
                             rows, cases[c].width, rows * cases[c].width, MAX_ELEMENTS);
    plan.cases = cases;
    plan.ncases = ncases;

    base_outfile out = {0};
    sink s = {0};
    if (json_path) {
        if (base_outfile_open(&out, CMD, json_path)) return 1;
        char extra[256];
        snprintf(extra, sizeof extra, "\"seed\":%llu,\"rows\":%ld,\"eps\":%.17g,\"quick\":%s,\"cases\":%ld",
                 (unsigned long long)seed, rows, eps, quick ? "true" : "false", ncases);
        base_json_header(out.fp, "norms", extra);
        s.json = out.fp;
    }
    base_progress_start(&s.progress, "norms", "records", 0);
    int status = norms_run(&plan, collect, &s);
    base_progress_end(&s.progress);
    if (status || s.oom) {
        if (json_path) base_outfile_abort(&out);
        free(s.recs);
        fprintf(stderr, "ulpscope norms: error: out of memory\n");
        return 1;
    }
    if (json_path && base_outfile_commit(&out, CMD)) {
        free(s.recs);
        return 1;
    }
    if (!json_path || !base_outfile_is_stdout(json_path)) print_table(&s); /* stdout holds the JSON otherwise */
    free(s.recs);
    return 0;
}
