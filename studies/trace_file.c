/* studies/trace_file.c — trace files (studies/trace.h): writing one
 * configuration's run, reading two back and diffing them, and the report's
 * JSON Lines records.
 *
 * A trace file is JSON Lines:
 *   {"record":"header","tool":"trace",...,"device":...,"plan":{...},"seed":N,...}
 *   {"record":"op","step":S,"micro":M,"slot":"mlp.up","layer":L,"call":C,"op":"matmul",
 *    "in":["<16 hex>",...],"out":["<16 hex>",...],"out_names":["y",...]}     (execution order)
 *   {"record":"state","step":S,"hash":"<16 hex>","loss":X}   (hash: the state at the start of step S;
 *                                                              step = steps: after the last one)
 *   {"record":"end","steps":N,"ops":K}
 * A reader refuses anything else with the file, the line and the problem. */
#include <errno.h>
#include <stdio.h>
#include <sys/types.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/json_read.h"
#include "base/jsonl.h"
#include "studies/trace_tap.h"

#define TRACE_LINE_MAX (1 << 20)
#define TRACE_OPS_MAX 4000000L

static void hex_list(FILE *fp, const char *key, const uint64_t *h, int n)
{
    fprintf(fp, ",\"%s\":[", key);
    for (int i = 0; i < n; i++) fprintf(fp, "%s\"%016" PRIx64 "\"", i ? "," : "", h[i]);
    fputc(']', fp);
}

void trace_write_op_record(FILE *fp, const trace_op *o)
{
    fprintf(fp, "{\"record\":\"op\",\"step\":%ld,\"micro\":%d,\"slot\":", o->step, o->micro);
    base_json_string(fp, tslot_get((tslot)o->slot)->name);
    fprintf(fp, ",\"layer\":%d,\"call\":%d,\"op\":", o->layer, o->call);
    base_json_string(fp, o->op);
    hex_list(fp, "in", o->in_hash, o->n_in);
    hex_list(fp, "out", o->out_hash, o->n_out);
    fputs(",\"out_names\":[", fp);
    for (int i = 0; i < o->n_out; i++) {
        if (i) fputc(',', fp);
        base_json_string(fp, o->out_name[i]);
    }
    fputs("]}\n", fp);
}

int trace_record(const ttrain_config *cfg, long op_steps, const char *header_json, FILE *fp, char *err,
                 size_t errlen)
{
    uint64_t *states = NULL;
    double *loss = NULL;
    size_t hn = strlen(header_json) + 64;
    char *hdr = malloc(hn);
    if (!hdr) {
        snprintf(err, errlen, "out of memory");
        return 1;
    }
    snprintf(hdr, hn, "\"steps\":%ld,%s", cfg->steps, header_json);
    base_json_header(fp, "trace", hdr);
    free(hdr);
    int rc = trace_record_run(cfg, op_steps, fp, &states, &loss, err, errlen);
    if (!rc) {
        for (long s = 0; s <= cfg->steps; s++) {
            fprintf(fp, "{\"record\":\"state\",\"step\":%ld,\"hash\":\"%016" PRIx64 "\",\"loss\":", s, states[s]);
            base_json_double(fp, s < cfg->steps ? loss[s] : NAN);
            fputs("}\n", fp);
        }
        fprintf(fp, "{\"record\":\"end\",\"steps\":%ld}\n", cfg->steps);
    }
    free(states);
    free(loss);
    return rc;
}

/* ---- reading ------------------------------------------------------------------------------ */

typedef struct {
    char device[256], plan[1024], backend[32];
    uint64_t seed;
    long steps;
    trace_op *ops;
    long n_ops, cap_ops;
    uint64_t *state;       /* [steps + 1] */
    double *loss;          /* [steps] */
    unsigned char *have;   /* [steps + 1]: a state record was read */
} trace_file;

static void trace_file_free(trace_file *f)
{
    free(f->ops);
    free(f->state);
    free(f->loss);
    free(f->have);
    memset(f, 0, sizeof *f);
}

static int parse_hex(const json_value *v, uint64_t *out)
{
    if (!v || v->type != JSON_STRING || v->text_len != 16) return -1;
    uint64_t x = 0;
    for (int i = 0; i < 16; i++) {
        char ch = v->text[i];
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
        if (d < 0) return -1;
        x = x << 4 | (uint64_t)d;
    }
    *out = x;
    return 0;
}

static int hash_list(const json_value *v, uint64_t *out, int max, int *n)
{
    if (!v || v->type != JSON_ARRAY || v->n_items > (size_t)max) return -1;
    for (size_t i = 0; i < v->n_items; i++)
        if (parse_hex(&v->items[i], &out[i])) return -1;
    *n = (int)v->n_items;
    return 0;
}

static int parse_op(const json_value *v, trace_op *o, const char **what)
{
    long step, micro, layer, call;
    memset(o, 0, sizeof *o);
    const json_value *slot = json_get(v, "slot"), *op = json_get(v, "op"), *names = json_get(v, "out_names");
    if (json_long(json_get(v, "step"), 0, TTRAIN_STEPS_MAX, &step)) return *what = "step", -1;
    if (json_long(json_get(v, "micro"), -1, TTRAIN_SIZE_MAX, &micro)) return *what = "micro", -1;
    if (json_long(json_get(v, "layer"), -1, TPLAN_MAX_LAYERS - 1, &layer)) return *what = "layer", -1;
    if (json_long(json_get(v, "call"), 0, 1000000, &call)) return *what = "call", -1;
    if (!slot || slot->type != JSON_STRING) return *what = "slot", -1;
    o->slot = -1;
    for (int s = 0; s < TSLOT_COUNT; s++)
        if (strcmp(tslot_get((tslot)s)->name, slot->text) == 0) o->slot = (short)s;
    if (o->slot < 0) return *what = "slot (no such slot)", -1;
    if (!op || op->type != JSON_STRING || op->text_len == 0 || op->text_len >= sizeof o->op || memchr(op->text, 0, op->text_len))
        return *what = "op", -1;
    if (hash_list(json_get(v, "in"), o->in_hash, TRACE_MAX_IN, &o->n_in)) return *what = "in (16-hex-digit hashes)", -1;
    if (hash_list(json_get(v, "out"), o->out_hash, TRACE_MAX_OUT, &o->n_out) || o->n_out < 1)
        return *what = "out (16-hex-digit hashes)", -1;
    if (!names || names->type != JSON_ARRAY || names->n_items != (size_t)o->n_out) return *what = "out_names", -1;
    for (int i = 0; i < o->n_out; i++) {
        const json_value *n = &names->items[i];
        if (n->type != JSON_STRING || n->text_len >= sizeof o->out_name[i] || memchr(n->text, 0, n->text_len))
            return *what = "out_names", -1;
        memcpy(o->out_name[i], n->text, n->text_len + 1);
    }
    o->step = step;
    o->micro = (int)micro;
    o->layer = (short)layer;
    o->call = (int)call;
    memcpy(o->op, op->text, op->text_len + 1);
    return 0;
}

static int header_string(const json_value *v, const char *key, char *buf, size_t len)
{
    const json_value *s = json_get(v, key);
    buf[0] = '\0';
    if (!s) return 0;
    if (s->type != JSON_STRING || memchr(s->text, 0, s->text_len)) return -1;
    snprintf(buf, len, "%s", s->text);
    return 0;
}

static int fail_at(char *err, size_t errlen, const char *path, long line, const char *what)
{
    snprintf(err, errlen, "%s line %ld: %s", path, line, what);
    return 2;
}

static int read_trace(const char *path, trace_file *f, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    f->steps = -1;
    FILE *fp = fopen(path, "r");
    if (!fp) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return 2;
    }
    char *line = NULL;
    size_t line_cap = 0;
    long no = 0;
    int rc = 0, ended = 0;
    char msg[512];
    ssize_t got;
    while (!rc && (got = getline(&line, &line_cap, fp)) >= 0) {
        no++;
        size_t n = (size_t)got;
        if (n > TRACE_LINE_MAX) {
            rc = fail_at(err, errlen, path, no, "line longer than 1 MiB");
            break;
        }
        if (n && line[n - 1] == '\n') line[--n] = '\0';
        if (ended) {
            rc = fail_at(err, errlen, path, no, "records after the end record");
            break;
        }
        json_value *v = NULL;
        char jerr[256];
        if (json_parse(line, n, &v, jerr, sizeof jerr)) {
            snprintf(msg, sizeof msg, "not JSON (%s)", jerr);
            rc = fail_at(err, errlen, path, no, msg);
            break;
        }
        const json_value *rec = json_get(v, "record");
        const char *what = NULL;
        if (!rec || rec->type != JSON_STRING) what = "no \"record\" string";
        else if (no == 1) {
            const json_value *tool = json_get(v, "tool"), *steps = json_get(v, "steps");
            long st;
            if (strcmp(rec->text, "header") != 0 || !tool || tool->type != JSON_STRING || strcmp(tool->text, "trace") != 0)
                what = "not a trace file (the first record must be a trace header)";
            else if (json_long(steps, 1, TTRAIN_STEPS_MAX, &st)) what = "header: \"steps\" missing or out of range";
            else if (header_string(v, "device", f->device, sizeof f->device) ||
                     header_string(v, "backend", f->backend, sizeof f->backend))
                what = "header: device and backend must be strings";
            else if (json_get(v, "seed") && json_u64(json_get(v, "seed"), &f->seed)) what = "header: bad seed";
            else {
                f->steps = st;
                f->state = calloc((size_t)st + 1, sizeof *f->state);
                f->loss = calloc((size_t)st + 1, sizeof *f->loss);
                f->have = calloc((size_t)st + 1, 1);
                if (!f->state || !f->loss || !f->have) what = "out of memory for the steps";
            }
        } else if (strcmp(rec->text, "op") == 0) {
            trace_op o;
            if (parse_op(v, &o, &what) == 0) {
                if (o.step >= f->steps) what = "op record past the header's steps";
                else if (f->n_ops >= TRACE_OPS_MAX) what = "more op records than a trace may hold (4000000)";
                else {
                    if (f->n_ops == f->cap_ops) {
                        long cap = f->cap_ops ? 2 * f->cap_ops : 1024;
                        trace_op *p = realloc(f->ops, (size_t)cap * sizeof *p);
                        if (!p) what = "out of memory for the op records";
                        else {
                            f->ops = p;
                            f->cap_ops = cap;
                        }
                    }
                    if (!what) f->ops[f->n_ops++] = o;
                }
            } else {
                snprintf(msg, sizeof msg, "op record: bad or missing \"%s\"", what);
                what = msg;
            }
        } else if (strcmp(rec->text, "state") == 0) {
            long s;
            uint64_t h;
            double loss;
            const json_value *lv = json_get(v, "loss");
            if (json_long(json_get(v, "step"), 0, f->steps, &s)) what = "state record: bad or missing \"step\"";
            else if (parse_hex(json_get(v, "hash"), &h)) what = "state record: bad or missing \"hash\"";
            else if (!lv || json_double(lv, &loss)) what = "state record: bad or missing \"loss\"";
            else if (f->have[s]) what = "state record: a step given twice";
            else {
                f->state[s] = h;
                f->loss[s] = loss;
                f->have[s] = 1;
            }
        } else if (strcmp(rec->text, "end") == 0) {
            long st;
            if (json_long(json_get(v, "steps"), 0, TTRAIN_STEPS_MAX, &st) || st != f->steps)
                what = "end record: \"steps\" differs from the header's";
            ended = 1;
        } else what = "unknown record type";
        json_free(v);
        if (what) rc = fail_at(err, errlen, path, no, what);
    }
    if (!rc && ferror(fp)) {
        snprintf(err, errlen, "%s: read error", path);
        rc = 2;
    }
    if (!rc && no == 0) {
        snprintf(err, errlen, "%s: empty file (not a trace)", path);
        rc = 2;
    }
    if (!rc && !ended) {
        snprintf(err, errlen, "%s: no end record (a truncated trace)", path);
        rc = 2;
    }
    for (long s = 0; !rc && s <= f->steps; s++)
        if (!f->have[s]) {
            snprintf(err, errlen, "%s: no state record for step %ld", path, s);
            rc = 2;
        }
    free(line);
    fclose(fp);
    if (rc) trace_file_free(f);
    return rc;
}

static int same_key(const trace_op *a, const trace_op *b)
{
    return a->step == b->step && a->micro == b->micro && a->slot == b->slot && a->layer == b->layer &&
           a->call == b->call && strcmp(a->op, b->op) == 0;
}

static void print_key(FILE *fp, const trace_op *o)
{
    fprintf(fp, "step %ld, micro-batch ", o->step);
    if (o->micro < 0) fprintf(fp, "after");
    else fprintf(fp, "%d", o->micro);
    if (o->layer >= 0) fprintf(fp, ", layer %d", o->layer);
    fprintf(fp, ", slot %s (%s call %d)", tslot_get((tslot)o->slot)->name, o->op, o->call);
}

int trace_diff(FILE *fp, const char *path_a, const char *path_b, int *parted, char *err, size_t errlen)
{
    trace_file A, B;
    *parted = 0;
    int rc = read_trace(path_a, &A, err, errlen);
    if (rc) return rc;
    if ((rc = read_trace(path_b, &B, err, errlen))) {
        trace_file_free(&A);
        return rc;
    }
    fprintf(fp, "A: %s (%s backend, device %s, seed %" PRIu64 ", %ld steps, %ld op records)\n", path_a,
            A.backend[0] ? A.backend : "?", A.device[0] ? A.device : "?", A.seed, A.steps, A.n_ops);
    fprintf(fp, "B: %s (%s backend, device %s, seed %" PRIu64 ", %ld steps, %ld op records)\n", path_b,
            B.backend[0] ? B.backend : "?", B.device[0] ? B.device : "?", B.seed, B.steps, B.n_ops);
    if (A.seed != B.seed) fprintf(fp, "warning: the traces start from different seeds\n");
    long steps = A.steps < B.steps ? A.steps : B.steps, part = -1;
    for (long s = 0; s < steps && part < 0; s++) {
        if (A.state[s] != B.state[s]) part = s > 0 ? s - 1 : 0;
        else if (memcmp(&A.loss[s], &B.loss[s], sizeof(double)) != 0 || A.state[s + 1] != B.state[s + 1]) part = s;
    }
    if (part < 0) {
        fprintf(fp, "the traces agree bit for bit over %ld steps (every step's state and loss)\n", steps);
    } else {
        *parted = 1;
        fprintf(fp, "the runs part in step %ld (loss A %.9g, B %.9g)\n", part, A.loss[part], B.loss[part]);
        long cursor = 0, found = -1, first = -1, first_ai = -1, found_ai = -1;
        int any_a = 0, any_b = 0;
        for (long i = 0; i < A.n_ops; i++) any_a |= A.ops[i].step == part;
        for (long j = 0; j < B.n_ops && found < 0; j++) {
            const trace_op *b = &B.ops[j];
            if (b->step != part) continue;
            any_b = 1;
            long ai = -1;
            for (long i = cursor; i < A.n_ops; i++)
                if (same_key(&A.ops[i], b)) {
                    ai = i;
                    break;
                }
            if (ai < 0) continue;
            cursor = ai + 1;
            const trace_op *a = &A.ops[ai];
            if (a->n_in != b->n_in || a->n_out != b->n_out) continue;
            int in_eq = 1, out_eq = 1;
            for (int k = 0; k < a->n_in; k++) in_eq &= a->in_hash[k] == b->in_hash[k];
            for (int k = 0; k < a->n_out; k++) out_eq &= a->out_hash[k] == b->out_hash[k];
            if (out_eq) continue;
            if (first < 0) first = j, first_ai = ai;
            if (in_eq) found = j, found_ai = ai;
        }
        if (!any_a || !any_b) {
            fprintf(fp, "the traces hold no op records for step %ld (record with --record-steps %ld or more)\n", part,
                    part + 1);
        } else if (found >= 0) {
            const trace_op *a = &A.ops[found_ai], *b = &B.ops[found];
            fprintf(fp, "first op with bit-identical inputs and different outputs:\n  ");
            print_key(fp, b);
            fprintf(fp, "\n  outputs:");
            for (int k = 0; k < b->n_out; k++)
                fprintf(fp, " %s %s", b->out_name[k], a->out_hash[k] == b->out_hash[k] ? "equal" : "DIFFER");
            fprintf(fp, "\n(replay and the MPFR verdict need the inputs: run `ulpscope trace` with both "
                        "configurations on one machine)\n");
        } else if (first >= 0) {
            fprintf(fp, "no op has bit-identical inputs and different outputs; the first differing one, ");
            print_key(fp, &B.ops[first]);
            fprintf(fp, ", already read different inputs\n");
            (void)first_ai;
        } else fprintf(fp, "no op record of step %ld differs\n", part);
    }
    trace_file_free(&A);
    trace_file_free(&B);
    return 0;
}

/* ---- the report as records ---------------------------------------------------------------------- */

void trace_write_records(FILE *fp, const trace_report *r)
{
    char line[512];
    fprintf(fp, "{\"record\":\"trace\",\"steps\":%ld,\"identical\":%s", r->steps, r->identical ? "true" : "false");
    if (!r->identical) {
        fprintf(fp, ",\"part_step\":%ld,\"located\":%s,\"inputs_differ\":%s", r->part_step,
                r->located ? "true" : "false", r->inputs_differ ? "true" : "false");
        if (r->op_b.op[0]) {
            const trace_op *o = &r->op_b;
            fprintf(fp, ",\"step\":%ld,\"micro\":%d,\"slot\":", o->step, o->micro);
            base_json_string(fp, tslot_get((tslot)o->slot)->name);
            fprintf(fp, ",\"layer\":%d,\"call\":%d,\"op\":", o->layer, o->call);
            base_json_string(fp, o->op);
            fputs(",\"tensor\":", fp);
            base_json_string(fp, o->out_name[r->out_index]);
        }
        fputs(",\"site_a\":", fp);
        base_json_string(fp, r->site_a);
        fputs(",\"site_b\":", fp);
        base_json_string(fp, r->site_b);
        fprintf(fp, ",\"replayed\":%s,\"replay_a_exact\":%s,\"replay_b_exact\":%s,\"elements\":%ld,\"differing\":%ld,"
                    "\"max_ulps\":",
                r->replayed ? "true" : "false", r->replay_a_exact ? "true" : "false", r->replay_b_exact ? "true" : "false",
                r->n_elems, r->n_differing);
        base_json_double(fp, r->max_ulps);
        fputs(",\"first_diffs\":[", fp);
        for (int i = 0; i < r->n_diffs; i++) {
            fprintf(fp, "%s{\"index\":%ld,\"a\":", i ? "," : "", r->diff_index[i]);
            base_json_double(fp, r->diff_a[i]);
            fputs(",\"b\":", fp);
            base_json_double(fp, r->diff_b[i]);
            fputs(",\"ulps\":", fp);
            base_json_double(fp, r->diff_ulps[i]);
            fputc('}', fp);
        }
        static const char *const names[] = {"none", "chaos", "bug_a", "bug_b", "bug_both"};
        fprintf(fp, "],\"verdict\":\"%s\",\"verdict_line\":", names[r->verdict]);
        base_json_string(fp, trace_verdict_line(r, line, sizeof line));
        for (int k = 0; k < 2 && r->verdict != TRACE_VERDICT_NONE; k++) {
            fprintf(fp, ",\"%s\":{\"err_u\":", k ? "b" : "a");
            base_json_double(fp, r->judge[k].err_u);
            fputs(",\"bound_u\":", fp);
            base_json_double(fp, r->judge[k].bound_u);
            fputs(",\"ratio\":", fp);
            base_json_double(fp, r->judge[k].ratio);
            fprintf(fp, ",\"over\":%ld,\"worst_output\":", r->judge[k].over);
            base_json_string(fp, r->judge[k].worst_output);
            fputc('}', fp);
        }
    }
    fprintf(fp, ",\"runs\":%d,\"seconds\":", r->runs);
    base_json_double(fp, r->seconds);
    fputs("}\n", fp);
    for (int k = 0; k < r->amp_steps; k++) {
        long s = r->part_step + k;
        fprintf(fp, "{\"record\":\"amplify\",\"step\":%ld,\"loss_a\":", s);
        base_json_double(fp, r->loss_a[s]);
        fputs(",\"loss_b\":", fp);
        base_json_double(fp, r->loss_b[s]);
        fputs(",\"max_rel\":[", fp);
        for (int l = 0; l < r->amp_layers; l++) {
            if (l) fputc(',', fp);
            base_json_double(fp, r->amp_max_rel[(size_t)k * r->amp_layers + l]);
        }
        fputs("],\"rms_rel\":[", fp);
        for (int l = 0; l < r->amp_layers; l++) {
            if (l) fputc(',', fp);
            base_json_double(fp, r->amp_rms_rel[(size_t)k * r->amp_layers + l]);
        }
        fputs("]}\n", fp);
    }
}
