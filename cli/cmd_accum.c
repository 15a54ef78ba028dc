/* cli/cmd_accum.c — `ulpscope accum`: the accumulation study
 * (studies/accum.h).  No options: the classic table.  Options (parsed by
 * cli/accum_args.c): a sweep over n, data, algorithms, rounding modes and
 * format pairs, as a table on stdout and/or JSON Lines. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/jsonl.h"
#include "base/outfile.h"
#include "cli/accum_args.h"
#include "base/progress.h"
#include "cli/commands.h"

static void print_help(void)
{
    printf("usage: ulpscope accum [options]\n\n"
           "Error of a sum of n addends by accumulator/addend format, algorithm and rounding mode,\n"
           "against the exact sum of the addends as stored, with the worst-case bound and the\n"
           "probabilistic bound (Higham-Mary 2019; proved for stochastic rounding, Connolly-Higham-\n"
           "Mary 2021).  Without options: the classic table (0.01 added 1000 times, 0.001 added\n"
           "10000 times, recursive sum, round to nearest even) for the classic format pairs.\n\n"
           "options (lists are comma-separated):\n"
           "  --n LIST             values of n (each 1 .. %d)\n"
           "  --n-min N --n-max N  log-spaced sweep instead (default 10 .. 100000)\n"
           "  --points K           points of the sweep (default 9)\n"
           "  --data LIST|all      %s (default constant)\n"
           "  --x X                the constant, or the scale of random data (default 0.01 for\n"
           "                       constant data, 1 otherwise)\n"
           "  --algo LIST|all      %s (default recursive)\n"
           "  --round LIST|all     %s (default rne)\n"
           "  --pairs LIST         accumulator/addend pairs, e.g. fp32/bf16,fp16/fp16\n"
           "  --acc LIST           accumulator formats (with --addend: every combination;\n"
           "                       alone: addends in the same format)\n"
           "  --addend LIST        addend formats (alone: accumulated in fp32)\n"
           "                       formats: %s; default: the classic pairs\n"
           "                       fp32/fp32 fp16/fp16 bf16/bf16 fp32/fp16 fp32/bf16 e4m3/e4m3\n"
           "                       e5m2/e5m2 fp32/e4m3 fp32/e5m2\n"
           "  --block B            block size of the blocked algorithm (default 32)\n"
           "  --seed S             seed of the random data and of stochastic rounding (default 1;\n"
           "                       decimal or 0x hex)\n"
           "  --fail-prob P        failure probability of the probabilistic bound (default 1e-6)\n"
           "  --json FILE          JSON Lines: a header record, then one record per row\n"
           "                       (FILE '-' = stdout, which replaces the table)\n"
           "  --help               this text\n",
           ACCUM_N_LIMIT, accum_data_names(), prec_sum_algo_names(), prec_round_mode_names(), prec_format_names());
}

typedef struct {
    FILE *json;  /* JSON Lines, or NULL */
    FILE *table; /* the readable table, or NULL */
} sinks;

static void json_row(FILE *fp, const accum_dataset *d, const accum_result *r, uint64_t seed)
{
    fputs("{\"record\":\"row\",\"acc\":", fp);
    base_json_string(fp, prec_format_name(r->m.acc));
    fputs(",\"addend\":", fp);
    base_json_string(fp, prec_format_name(d->addend));
    fputs(",\"algo\":", fp);
    base_json_string(fp, prec_sum_algo_name(r->m.algo));
    fputs(",\"round\":", fp);
    base_json_string(fp, prec_round_mode_name(r->m.round));
    fputs(",\"data\":", fp);
    base_json_string(fp, accum_data_name(d->kind));
    fprintf(fp, ",\"n\":%zu,\"x\":", d->n);
    base_json_double(fp, d->x);
    if (d->kind == ACCUM_CONSTANT && d->n) {
        fputs(",\"x_stored\":", fp);
        base_json_double(fp, d->v[0]);
    }
    const char *keys[] = {"value", "exact", "exact_unrounded", "sum_abs", "abs_err", "rel_err", "bound", "prob_bound"};
    double vals[] = {r->value, r->exact, d->exact_unrounded, d->sum_abs, r->abs_err, r->rel_err, r->bound, r->prob_bound};
    for (int k = 0; k < 8; k++) {
        fprintf(fp, ",\"%s\":", keys[k]);
        base_json_double(fp, vals[k]);
    }
    fputs(",\"prob_status\":", fp);
    base_json_string(fp, prec_prob_status_name(r->prob_status));
    fputs(",\"fail_prob\":", fp);
    base_json_double(fp, r->m.fail_prob);
    fprintf(fp, ",\"block\":%zu,\"stagnant\":%zu,\"nonfinite\":%s,\"seed\":%llu}\n", r->m.block, r->stagnant,
            r->nonfinite ? "true" : "false", (unsigned long long)seed);
}

/* A bound for the table: "no bound" where the method has none (NaN: Kahan and
 * Neumaier outside round to nearest), else %.3e (inf where (n-1)u >= 1). */
static const char *bound_text(double b, char *buf, size_t len)
{
    if (isnan(b)) return "no bound";
    snprintf(buf, len, "%.3e", b);
    return buf;
}

static void classic_header(FILE *fp)
{
    fprintf(fp, "%-5s %-6s %6s %-6s %-13s %-8s %-16s %-16s %-10s %-10s %-10s %s\n", "acc", "addend", "n", "x",
            "x stored", "n*x", "computed", "exact", "abs err", "rel err", "bound", "stagnant");
}

static void classic_line(FILE *fp, const accum_dataset *d, const accum_result *r)
{
    char b[32];
    fprintf(fp, "%-5s %-6s %6zu %-6g %-13.8g %-8.6g %-16.10g %-16.10g %-10.3e %-10.3e %-10s %zu\n",
            prec_format_name(r->m.acc), prec_format_name(d->addend), d->n, d->x, d->v[0], d->exact_unrounded,
            r->value, r->exact, r->abs_err, r->rel_err, bound_text(r->bound, b, sizeof b), r->stagnant);
}

static void sweep_header(FILE *fp)
{
    fprintf(fp, "%-5s %-6s %-9s %-5s %-8s %9s %-16s %-16s %-10s %-10s %-10s %-10s\n", "acc", "addend", "algo",
            "round", "data", "n", "computed", "exact", "abs err", "rel err", "bound", "prob bound");
}

static void sweep_line(FILE *fp, const accum_dataset *d, const accum_result *r)
{
    char b1[32], b2[32];
    fprintf(fp, "%-5s %-6s %-9s %-5s %-8s %9zu %-16.10g %-16.10g %-10.3e %-10.3e %-10s %-10s\n",
            prec_format_name(r->m.acc), prec_format_name(d->addend), prec_sum_algo_name(r->m.algo),
            prec_round_mode_name(r->m.round), accum_data_name(d->kind), d->n, r->value, r->exact, r->abs_err,
            r->rel_err, bound_text(r->bound, b1, sizeof b1), bound_text(r->prob_bound, b2, sizeof b2));
}

/* Every row of one dataset: the pairs with its addend format, x algos x rounds. */
static base_progress progress; /* the sweep's rows (the classic table is quick) */

static void run_dataset(const accum_options *o, const accum_dataset *d, const sinks *out, bool classic)
{
    for (int p = 0; p < o->n_pairs; p++) {
        if (o->pairs[p].addend != d->addend) continue;
        for (int a = 0; a < o->n_algos; a++) {
            for (int m = 0; m < o->n_rounds; m++) {
                accum_method meth = {o->pairs[p].acc, o->algos[a], o->rounds[m], o->block, o->fail_prob};
                accum_result r;
                accum_run(d, &meth, o->seed, &r);
                if (out->table) (classic ? classic_line : sweep_line)(out->table, d, &r);
                if (out->json) json_row(out->json, d, &r, o->seed);
                if (!classic) base_progress_step(&progress);
            }
        }
    }
}

/* The distinct addend formats of the pairs, in first-seen order. */
static int addend_formats(const accum_options *o, prec_format *out)
{
    int n = 0;
    for (int p = 0; p < o->n_pairs; p++) {
        int seen = 0;
        for (int k = 0; k < n; k++) seen |= out[k] == o->pairs[p].addend;
        if (!seen) out[n++] = o->pairs[p].addend;
    }
    return n;
}

static int run_rows(const accum_options *o, const sinks *out)
{
    prec_format addends[ACCUM_MAX_LIST];
    int n_addends = addend_formats(o, addends);
    if (o->classic) {
        const double xs[2] = {0.01, 0.001};
        const size_t ns[2] = {1000, 10000};
        if (out->table) {
            fprintf(out->table, "x added n times: recursive sum, round to nearest even; exact = sum of the "
                                "addends as stored; bound = gamma_{n-1}(u) sum|x_i| (inf: (n-1)u >= 1)\n");
            classic_header(out->table);
        }
        for (int c = 0; c < 2; c++) {
            for (int p = 0; p < o->n_pairs; p++) {
                accum_dataset d;
                if (accum_dataset_make(&d, ACCUM_CONSTANT, xs[c], o->pairs[p].addend, ns[c], o->seed)) return -1;
                accum_options one = *o;
                one.pairs[0] = o->pairs[p];
                one.n_pairs = 1;
                run_dataset(&one, &d, out, true);
                accum_dataset_free(&d);
            }
        }
        return 0;
    }
    if (out->table) sweep_header(out->table);
    /* each dataset runs the pairs of its addend format: over the formats, every pair once */
    base_progress_start(&progress, "accum", "rows", (long)o->n_data * o->n_ns * o->n_pairs * o->n_algos * o->n_rounds);
    for (int k = 0; k < o->n_data; k++) {
        double x = isnan(o->x) ? (o->data[k] == ACCUM_CONSTANT ? 0.01 : 1.0) : o->x;
        for (int i = 0; i < o->n_ns; i++) {
            for (int f = 0; f < n_addends; f++) {
                accum_dataset d;
                if (accum_dataset_make(&d, o->data[k], x, addends[f], o->ns[i], o->seed)) return -1;
                run_dataset(o, &d, out, false);
                accum_dataset_free(&d);
            }
        }
    }
    base_progress_end(&progress);
    return 0;
}

int cmd_accum(int argc, char **argv)
{
    accum_options o;
    char err[512];
    if (accum_parse_args(argc, argv, &o, err, sizeof err)) return base_error("accum", "%s", err);
    if (o.help) {
        print_help();
        return 0;
    }
    if (o.json && base_outfile_check("accum", o.json)) return BASE_EXIT_USAGE; /* before any work */
    base_outfile json = {0};
    sinks out = {NULL, stdout};
    if (o.json) {
        if (base_outfile_open(&json, "accum", o.json)) return 1;
        out.json = json.fp;
        if (base_outfile_is_stdout(o.json)) out.table = NULL; /* stdout holds the JSON alone */
        char extra[128];
        snprintf(extra, sizeof extra, "\"study\":\"accum\",\"seed\":%llu,\"fail_prob\":%.17g",
                 (unsigned long long)o.seed, o.fail_prob);
        base_json_header(out.json, "ulpscope accum", extra);
    }
    if (run_rows(&o, &out)) {
        if (o.json) base_outfile_abort(&json);
        return base_error("accum", "out of memory");
    }
    if (o.json && base_outfile_commit(&json, "accum")) return 1;
    return 0;
}
