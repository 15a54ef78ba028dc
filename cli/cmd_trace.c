/* cli/cmd_trace.c — `ulpscope trace`: where two configurations started from
 * one seed first part, bug or reordering, and the amplification
 * (studies/trace.h); --record writes one configuration's trace file and
 * --diff compares two of them. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/jsonl.h"
#include "base/outfile.h"
#include "cli/commands.h"
#include "cli/experiment.h"
#include "kernels/common/ktensor_io.h"
#include "studies/trace.h"
#include "trainer/backend.h"

typedef struct {
    const char *bad, *bad_plan, *record, *json, *plant;
    long record_steps, amplify_elems;
    int amplify_steps;
} trace_options;

#define F(field) offsetof(trace_options, field)
static const copt trace_opts[] = {
    {"--bad", COPT_STRING, F(bad), 0, 0, "trace", "OVERRIDES", "configuration B: overrides on A (--plan, --set)", NULL, 0},
    {"--bad-plan", COPT_STRING, F(bad_plan), 0, 0, "trace", "PRESET[,OVERRIDES]", "configuration B: a whole preset",
     NULL, 0},
    {"--amplify-steps", COPT_INT, F(amplify_steps), 1, 100000, "trace", "N",
     "(10) steps of the amplification table from the parting step", NULL, 0},
    {"--amplify-elems", COPT_LONG, F(amplify_elems), 1, 1L << 30, "trace", "N",
     "(65536) elements of each layer output compared", NULL, 0},
    {"--json", COPT_STRING, F(json), 0, 0, "trace", "FILE", "JSON Lines ('-': stdout)", NULL, 0},
    {"--record", COPT_STRING, F(record), 0, 0, "trace", "FILE",
     "record A's run as a trace file (for --diff against another machine's)", NULL, 0},
    {"--record-steps", COPT_LONG, F(record_steps), 1, TTRAIN_STEPS_MAX, "trace", "N",
     "(all) op hashes of the first N steps in the record", NULL, 0},
    {"--plant-truncation", COPT_STRING, F(plant), 0, 0, "trace", "SLOT[@LAYER][:VARIANT]",
     "self-test: that site's stores truncate (a precision bug trace must call)", NULL, 0},
};
#undef F

static const char usage_text[] =
    "usage: ulpscope trace [training options: A is --plan/--set] (--bad OVERRIDES | --bad-plan P)\n"
    "       ulpscope trace [training options] --record FILE [--record-steps N]\n"
    "       ulpscope trace --diff A.trace B.trace\n\n"
    "Runs A and B from the same seed with a hash of every op's inputs and outputs and reports the first\n"
    "(step, micro-batch, layer, slot, tensor) whose inputs are bit-identical and whose outputs differ, with\n"
    "the first differing elements.  The op is replayed on its recorded inputs at both sites and judged\n"
    "against the MPFR reference and its error bound (matmul; attention; layernorm, rmsnorm; cross-entropy;\n"
    "rope; Muon on its polar express): both within: a legitimate reordering (chaos); one over: a precision\n"
    "bug in it.  Then how the difference grows over the following steps.\n"
    "--diff exits 0 when the traces agree, 1 when they part, 2 for a file that is not a trace.\n\n";

/* The header fields of a trace file: backend, device, driver, runtime, seed, plan, recipe. */
static char *record_header(const ttrain_config *cfg, char *err, size_t errlen)
{
    char device[300] = "cpu";
    int driver = 0, runtime = 0;
    if (strcmp(cfg->backend, "cuda") == 0) {
        kdevice_props p;
        if (kdevice_describe(&p) == 0) {
            snprintf(device, sizeof device, "%s (cc %d.%d)", p.name, p.cc_major, p.cc_minor);
            driver = p.driver_version;
            runtime = p.runtime_version;
        }
    }
    for (char *q = device; *q; q++)
        if (*q == '"' || *q == '\\' || (unsigned char)*q < 0x20) *q = '?';
    char *plan = tplan_json_alloc(&cfg->plan);
    char *recipe = cmp_train_recipe(cfg, CMP_VARY_BOTH, cfg->seed, err, errlen);
    char *out = NULL;
    if (plan && recipe) {
        size_t n = strlen(plan) + strlen(recipe) + strlen(device) + 256;
        if ((out = malloc(n)))
            snprintf(out, n, "\"backend\":\"%s\",\"device\":\"%s\",\"driver\":%d,\"runtime\":%d,\"seed\":%llu,"
                             "\"plan\":%s,\"recipe\":%s",
                     cfg->backend, device, driver, runtime, (unsigned long long)cfg->seed, plan, recipe);
    }
    if (!out && !err[0]) snprintf(err, errlen, "out of memory");
    free(plan);
    free(recipe);
    return out;
}

static int do_diff(int argc, char **argv)
{
    if (argc != 4) return base_error("trace", "--diff takes exactly two trace files: ulpscope trace --diff A B");
    char err[1024];
    int parted = 0;
    int rc = trace_diff(stdout, argv[2], argv[3], &parted, err, sizeof err);
    if (rc == 2) return base_error("trace", "%s", err);
    if (rc) {
        fprintf(stderr, "ulpscope trace: error: %s\n", err);
        return 1;
    }
    return parted ? 1 : 0;
}

static int do_record(train_options *t, const trace_options *o)
{
    char err[1024] = "";
    if (base_outfile_check("trace", o->record)) return BASE_EXIT_USAGE;
    char *hdr = record_header(&t->cfg, err, sizeof err);
    if (!hdr) return base_error("trace", "%s", err);
    base_outfile out;
    int status = 0;
    if (base_outfile_open(&out, "trace", o->record)) status = 1;
    else {
        int rc = trace_record(&t->cfg, o->record_steps, hdr, out.fp, err, sizeof err);
        if (rc) {
            base_outfile_abort(&out);
            status = rc == 2 ? base_error("trace", "%s", err) : (fprintf(stderr, "ulpscope trace: error: %s\n", err), 1);
        } else status = base_outfile_commit(&out, "trace") ? 1 : 0;
    }
    if (!status && !t->quiet) fprintf(stderr, "ulpscope trace: recorded %s\n", o->record);
    free(hdr);
    return status;
}

int cmd_trace(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--diff") == 0) return do_diff(argc, argv);
    typedef struct {
        train_options t;
        trace_options o;
        trace_config c;
        trace_report rep;
    } state;
    state *s = calloc(1, sizeof *s);
    if (!s) return base_error("trace", "out of memory");
    train_options_defaults(&s->t);
    s->o.amplify_steps = 10;
    s->o.amplify_elems = 65536;
    copt_table tables[2] = {train_options_table(&s->t),
                            {trace_opts, (int)(sizeof trace_opts / sizeof trace_opts[0]), &s->o}};
    int status = copt_parse("trace", argc, argv, tables, 2, &s->t.seen);
    if (!status && s->t.help) {
        fputs(usage_text, stdout);
        copt_help(stdout, tables, 2);
        free(s);
        return 0;
    }
    if (!status) status = train_options_finish(&s->t, "trace");
    if (!status && (s->t.cfg.log_path || s->t.cfg.ckpt_path || s->t.cfg.resume_path || s->t.cfg.dump_dir ||
                    s->t.cfg.n_switches))
        status = base_error("trace", "--log, --ckpt, --resume, --dump and --switch-at do not apply to a trace");
    if (!status && s->o.record) {
        if (s->o.bad || s->o.bad_plan || s->o.plant || s->o.json)
            status = base_error("trace", "--record records one configuration (A): no --bad, --bad-plan, "
                                         "--plant-truncation or --json with it");
        else status = do_record(&s->t, &s->o);
        train_options_free(&s->t);
        free(s);
        return status;
    }
    if (!status && s->o.record_steps)
        status = base_error("trace", "--record-steps applies to --record");
    trace_config *c = &s->c;
    if (!status) {
        c->a = s->t.cfg;
        c->b = s->t.cfg;
        status = experiment_bad_plan("trace", &s->t, s->o.bad, s->o.bad_plan, &c->b.plan);
    }
    if (!status && s->o.plant) {
        status = experiment_plant("trace", s->o.plant, &c->b.plan, s->t.cfg.model.n_layer);
        c->planted = KBUG_TRUNCATE_OUTPUT;
    }
    if (!status && s->o.json && !base_outfile_is_stdout(s->o.json) && base_outfile_check("trace", s->o.json))
        status = BASE_EXIT_USAGE;
    if (!status) {
        c->amplify_steps = s->o.amplify_steps;
        c->amplify_elems = s->o.amplify_elems;
        c->progress = s->t.quiet ? NULL : stderr;
        char err[1024] = "";
        int rc = trace_run(c, &s->rep, err, sizeof err);
        if (rc == 2) status = base_error("trace", "%s", err);
        else if (rc) {
            fprintf(stderr, "ulpscope trace: error: %s\n", err);
            status = 1;
        }
    }
    if (!status) {
        FILE *fp = s->o.json && base_outfile_is_stdout(s->o.json) ? stderr : stdout;
        trace_print(fp, c, &s->rep);
        if (s->o.json) {
            char err[1024] = "";
            char *hdr = record_header(&c->a, err, sizeof err);
            char *plan_b = tplan_json_alloc(&c->b.plan);
            base_outfile o;
            if (!hdr || !plan_b) status = base_error("trace", "%s", err[0] ? err : "out of memory");
            else if (base_outfile_open(&o, "trace", s->o.json)) status = 1;
            else {
                size_t n = strlen(hdr) + strlen(plan_b) + 32;
                char *extra = malloc(n);
                if (extra) snprintf(extra, n, "%s,\"plan_b\":%s", hdr, plan_b);
                base_json_header(o.fp, "trace", extra ? extra : "\"error\":\"out of memory\"");
                free(extra);
                trace_write_records(o.fp, &s->rep);
                status = base_outfile_commit(&o, "trace") ? 1 : 0;
            }
            free(hdr);
            free(plan_b);
        }
    }
    trace_report_free(&s->rep);
    train_options_free(&s->t);
    free(s);
    return status;
}
