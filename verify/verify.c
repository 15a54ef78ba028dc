/* verify/verify.c — ulp_verify: a user's kernel outputs against the MPFR
 * reference, with the bound of the kernel the user declares (verify.h).
 *
 * The comparison and the bound are the ones `ulpscope check` uses for its
 * own kernels (kernels/check/compare_<op>.c); what differs is where the
 * description comes from: check derives it from the variant it launched,
 * verify from the declaration.  An "unknown" part of the declaration gives
 * two descriptions, the tightest and the loosest. */
#include "verify/verify.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/check/compare_rmsnorm.h"
#include "precision/format.h"

static int bad(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && errlen) vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return ULP_BAD_INPUT;
}

/* ---- the op table ------------------------------------------------------------------- */

/* A tensor of an op's pass: its name, whether it may be left out, and the
 * format it is held in (storage: the path's; else fp32). */
typedef struct {
    const char *name;
    int optional;
    int fp32;
} vtensor;

#define VMAX_TENSORS 6
typedef struct {
    const char *inputs_help, *outputs_help;
    vtensor inputs[VMAX_TENSORS], outputs[VMAX_TENSORS];
} vpass;

typedef struct {
    const char *name;
    const char *summary;
    vpass pass[2]; /* fwd, bwd */
} vop;

static const vop ops[] = {
    {"rmsnorm", "RMSNorm y = gain x / sqrt(mean(x^2) + eps) per row of C (any leading shape); backward dx, dgain",
     {{"x (N.., C), gain (C, optional)", "y (as x), rstd (N.., fp32, optional)",
       {{"x", 0, 0}, {"gain", 1, 0}}, {{"y", 0, 0}, {"rstd", 1, 1}}},
      {"x, gain (optional), dy (as x), rstd (the stored fp32 rstd the backward read, optional)",
       "dx (as x), dgain (C, needs gain, optional)",
       {{"x", 0, 0}, {"gain", 1, 0}, {"dy", 0, 0}, {"rstd", 1, 1}}, {{"dx", 0, 0}, {"dgain", 1, 0}}}}},
};
static const int n_ops = (int)(sizeof ops / sizeof ops[0]);

const char *ulp_op_names(void) { return "rmsnorm"; }

void ulp_op_help(FILE *fp)
{
    for (int i = 0; i < n_ops; i++) {
        fprintf(fp, "%s: %s\n", ops[i].name, ops[i].summary);
        for (int p = 0; p < 2; p++)
            fprintf(fp, "  --pass %s: inputs %s; outputs %s\n", p ? "bwd" : "fwd", ops[i].pass[p].inputs_help,
                    ops[i].pass[p].outputs_help);
    }
}

int ulp_op_tensors(const char *op, const char *pass, int role, const char **names, int max)
{
    int p = pass && strcmp(pass, "bwd") == 0 ? 1 : pass && strcmp(pass, "fwd") == 0 ? 0 : -1;
    for (int i = 0; i < n_ops && p >= 0; i++) {
        if (!op || strcmp(op, ops[i].name) != 0) continue;
        const vtensor *t = role ? ops[i].pass[p].outputs : ops[i].pass[p].inputs;
        int n = 0;
        for (; n < VMAX_TENSORS && t[n].name && n + 1 < max; n++) names[n] = t[n].name;
        if (max > 0) names[n] = NULL;
        return n;
    }
    return -1;
}

/* ---- declarations ------------------------------------------------------------------- */

static int parse_format(const char *s, prec_format *f)
{
    static const struct {
        const char *name;
        prec_format f;
    } names[] = {{"fp64", PREC_FP64}, {"fp32", PREC_FP32}, {"bf16", PREC_BF16}, {"fp16", PREC_FP16}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i].name) == 0) {
            *f = names[i].f;
            return 0;
        }
    return -1;
}

/* A reduction shape as a rounding depth over n terms; -1: malformed.
 * *unknown set for "unknown" (the depth is then the loosest, sequential). */
static int64_t parse_reduce(const char *s, int64_t n, int tightest)
{
    if (n < 1) n = 1;
    int64_t log2n = 0;
    while ((1ll << log2n) < n) log2n++;
    if (strcmp(s, "sequential") == 0) return n; /* the first term's rounding (an fma into 0) counts */
    if (strcmp(s, "pairwise") == 0) return log2n + 1;
    if (strcmp(s, "unknown") == 0) return tightest ? log2n + 1 : n;
    char *end;
    if (strncmp(s, "blocks:", 7) == 0) {
        long t = strtol(s + 7, &end, 10);
        if (end == s + 7 || *end || t < 1 || t > (1 << 20) || s[7] == '+' || s[7] == '-') return -1;
        return kcheck_row_depth(n, (int)t, 1);
    }
    if (strncmp(s, "depth:", 6) == 0) {
        long long d = strtoll(s + 6, &end, 10);
        if (end == s + 6 || *end || d < 0 || d > (1ll << 40) || s[6] == '+' || s[6] == '-') return -1;
        return d;
    }
    return -1;
}

#define REDUCE_SYNTAX "sequential, pairwise, blocks:T, depth:D or unknown"

typedef struct {
    prec_format storage;
    const char *path, *accum, *reduce, *col_reduce, *upcast;
    double math_ulps, eps;
} decl;

static int check_decl(const ulp_kernel *k, decl *d, char *err, size_t errlen)
{
    d->path = k->path ? k->path : "";
    if (parse_format(d->path, &d->storage) != 0 || d->storage == PREC_FP64)
        return bad(err, errlen, "unknown path '%s' (paths: fp32, bf16, fp16)", d->path);
    d->accum = k->accum ? k->accum : "unknown";
    prec_format f;
    if (strcmp(d->accum, "unknown") != 0 && strcmp(d->accum, "storage") != 0 && parse_format(d->accum, &f) != 0)
        return bad(err, errlen, "unknown accumulation '%s' (fp64, fp32, bf16, fp16, storage, unknown)", d->accum);
    d->reduce = k->reduce ? k->reduce : "unknown";
    d->col_reduce = k->col_reduce ? k->col_reduce : "unknown";
    if (parse_reduce(d->reduce, 8, 0) < 0)
        return bad(err, errlen, "unknown reduction '%s' (" REDUCE_SYNTAX ")", d->reduce);
    if (parse_reduce(d->col_reduce, 8, 0) < 0)
        return bad(err, errlen, "unknown column reduction '%s' (" REDUCE_SYNTAX ")", d->col_reduce);
    d->upcast = k->upcast ? k->upcast : "unknown";
    if (strcmp(d->upcast, "gemma") != 0 && strcmp(d->upcast, "llama") != 0 && strcmp(d->upcast, "none") != 0 &&
        strcmp(d->upcast, "unknown") != 0)
        return bad(err, errlen, "unknown upcast '%s' (gemma, llama, none, unknown)", d->upcast);
    if (!(k->math_ulps >= 0 && k->math_ulps <= 1e6))
        return bad(err, errlen, "math function error %g ulps is outside 0..1e6", k->math_ulps);
    if (!(k->eps >= 0 && k->eps < 1e6)) return bad(err, errlen, "eps %g is outside [0, 1e6)", k->eps);
    d->math_ulps = k->math_ulps;
    d->eps = k->eps;
    return 0;
}

/* col_reduce matters to the backward only (dgain). */
static int is_unknown(const decl *d, int bwd)
{
    return strcmp(d->accum, "unknown") == 0 || strcmp(d->reduce, "unknown") == 0 ||
           (bwd && strcmp(d->col_reduce, "unknown") == 0) || strcmp(d->upcast, "unknown") == 0;
}

/* The declaration with its unknown parts resolved to the tightest or the loosest. */
static decl resolve(const decl *d, int tightest)
{
    decl r = *d;
    if (strcmp(r.accum, "unknown") == 0) r.accum = tightest ? "fp32" : "storage";
    if (strcmp(r.reduce, "unknown") == 0) r.reduce = tightest ? "pairwise" : "sequential";
    if (strcmp(r.col_reduce, "unknown") == 0) r.col_reduce = tightest ? "pairwise" : "sequential";
    if (strcmp(r.upcast, "unknown") == 0) r.upcast = tightest ? "gemma" : "none";
    return r;
}

static void describe(const decl *d, int bwd, char *out, size_t len)
{
    int k = snprintf(out, len, "--accum %s --reduce %s", d->accum, d->reduce);
    if (bwd && k >= 0 && (size_t)k < len) k += snprintf(out + k, len - (size_t)k, " --col-reduce %s", d->col_reduce);
    if (k >= 0 && (size_t)k < len) snprintf(out + k, len - (size_t)k, " --upcast %s", d->upcast);
}

static kcmp_rmsnorm_kernel rmsnorm_kernel(const decl *d, int64_t N, int64_t C)
{
    kcmp_rmsnorm_kernel k = {0};
    k.storage = d->storage;
    if (strcmp(d->accum, "storage") == 0) k.acc = d->storage;
    else parse_format(d->accum, &k.acc);
    k.stats_in_storage = strcmp(d->upcast, "none") == 0;
    k.round_normalized = strcmp(d->upcast, "gemma") != 0;
    k.fwd_depth = k.bwd_depth = parse_reduce(d->reduce, C, 0);
    k.col_depth = parse_reduce(d->col_reduce, N, 0);
    k.rsqrt_ulps = d->math_ulps;
    k.eps = d->eps;
    return k;
}

/* ---- tensors ----------------------------------------------------------------------- */

typedef struct {
    const ulp_tensor *t; /* NULL: not given */
    double *v;           /* its values as doubles */
    int64_t n;
} bound_tensor;

static double element(const ulp_tensor *t, int64_t i)
{
    switch (t->dtype) {
    case ULP_F64: return ((const double *)t->data)[i];
    case ULP_F32: return ((const float *)t->data)[i];
    case ULP_BF16_BITS: {
        uint32_t bits = (uint32_t)((const uint16_t *)t->data)[i] << 16;
        float f;
        memcpy(&f, &bits, sizeof f);
        return f;
    }
    case ULP_F16_BITS: {
        uint16_t h = ((const uint16_t *)t->data)[i];
        int e = (h >> 10) & 0x1f, m = h & 0x3ff;
        double v = e == 0x1f ? (m ? NAN : INFINITY) : e == 0 ? ldexp(m, -24) : ldexp(m | 0x400, e - 25);
        return h & 0x8000 ? -v : v;
    }
    }
    return NAN;
}

/* Binds the given tensors to the pass's names, converts them and checks
 * that every value is one the declared format holds. */
static int bind(const vtensor *want, const ulp_tensor *given, int n_given, const char *role, const decl *d,
                int is_output, bound_tensor *out, char *err, size_t errlen)
{
    for (int g = 0; g < n_given; g++) {
        int found = -1;
        for (int w = 0; w < VMAX_TENSORS && want[w].name; w++)
            if (given[g].name && strcmp(given[g].name, want[w].name) == 0) found = w;
        if (found < 0) {
            char names[128] = "";
            for (int w = 0; w < VMAX_TENSORS && want[w].name; w++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", w ? ", " : "", want[w].name);
            return bad(err, errlen, "%s tensor '%s' is not one of this pass's %ss (%s)", role,
                       given[g].name ? given[g].name : "(no name)", role, names);
        }
        if (out[found].t) return bad(err, errlen, "%s tensor '%s' given twice", role, given[g].name);
        const ulp_tensor *t = &given[g];
        if (t->ndim < 0 || t->ndim > ULP_MAX_DIMS) return bad(err, errlen, "tensor '%s': %d dimensions", t->name, t->ndim);
        if ((unsigned)t->dtype > ULP_F16_BITS) return bad(err, errlen, "tensor '%s': unknown dtype %d", t->name, (int)t->dtype);
        int64_t n = 1;
        for (int k = 0; k < t->ndim; k++) {
            if (t->shape[k] < 0 || (t->shape[k] && n > (1ll << 40) / t->shape[k]))
                return bad(err, errlen, "tensor '%s': bad shape (dimension %d = %lld)", t->name, k, (long long)t->shape[k]);
            n *= t->shape[k];
        }
        if (n > 0 && !t->data) return bad(err, errlen, "tensor '%s': no data", t->name);
        out[found].t = t;
        out[found].n = n;
    }
    for (int w = 0; w < VMAX_TENSORS && want[w].name; w++) {
        if (!out[w].t) {
            if (!want[w].optional) return bad(err, errlen, "missing %s tensor '%s'", role, want[w].name);
            continue;
        }
        const ulp_tensor *t = out[w].t;
        const prec_format f = want[w].fp32 ? PREC_FP32 : d->storage;
        out[w].v = malloc((out[w].n ? out[w].n : 1) * sizeof(double));
        if (!out[w].v) return bad(err, errlen, "out of memory for tensor '%s'", t->name);
        for (int64_t i = 0; i < out[w].n; i++) {
            double v = element(t, i);
            out[w].v[i] = v;
            if (!isfinite(v)) {
                if (is_output) continue; /* a non-finite output is a finding, not bad input */
                return bad(err, errlen, "input '%s' element %lld is %g: the reference needs finite inputs", t->name,
                           (long long)i, v);
            }
            if (prec_rne(v, f) != v)
                return bad(err, errlen, "%s '%s' element %lld = %.17g is not a %s value: the declared %s cannot have %s it",
                           role, t->name, (long long)i, v, prec_format_get(f)->name,
                           want[w].fp32 ? "fp32 tensor" : "path", is_output ? "written" : "seen");
        }
    }
    return 0;
}

static void free_bound(bound_tensor *b)
{
    for (int i = 0; i < VMAX_TENSORS; i++) free(b[i].v);
}

/* Shape rules of rmsnorm: x (..., C); gain (C); dy, y, dx as x; rstd the
 * number of rows; dgain (C). */
static int rmsnorm_shapes(const bound_tensor *in, const bound_tensor *out, int bwd, int64_t *N, int64_t *C,
                          char *err, size_t errlen)
{
    const ulp_tensor *x = in[0].t;
    if (x->ndim < 1) return bad(err, errlen, "x must have at least one dimension (..., C)");
    *C = x->shape[x->ndim - 1];
    *N = *C ? in[0].n / *C : 0;
    if (*N < 1 || *C < 1) return bad(err, errlen, "x has no elements (shape needs N, C >= 1)");
    if (in[1].t && (in[1].n != *C))
        return bad(err, errlen, "gain has %lld elements, x's rows have C = %lld", (long long)in[1].n, (long long)*C);
    const bound_tensor *rstd = bwd ? &in[3] : &out[1];
    if (rstd->t && rstd->n != *N)
        return bad(err, errlen, "rstd has %lld elements, x has N = %lld rows", (long long)rstd->n, (long long)*N);
    const bound_tensor *same[3] = {bwd ? &in[2] : &out[0], bwd ? &out[0] : NULL, NULL};
    for (int s = 0; s < 3 && same[s]; s++) {
        const ulp_tensor *t = same[s]->t;
        if (!t) continue;
        int ok = t->ndim == x->ndim;
        for (int k = 0; ok && k < x->ndim; k++) ok = t->shape[k] == x->shape[k];
        if (!ok) return bad(err, errlen, "%s's shape differs from x's", t->name);
    }
    if (bwd && out[1].t) {
        if (!in[1].t) return bad(err, errlen, "dgain needs gain (a kernel without a gain has no dgain)");
        if (out[1].n != *C)
            return bad(err, errlen, "dgain has %lld elements, x's rows have C = %lld", (long long)out[1].n, (long long)*C);
    }
    return 0;
}

static void copy_row(ulp_row *r, const kcheck_row *k, const char *assumption)
{
    memset(r, 0, sizeof *r);
    snprintf(r->output, sizeof r->output, "%s", k->output);
    snprintf(r->assumption, sizeof r->assumption, "%s", assumption);
    snprintf(r->shape, sizeof r->shape, "%s", k->shape);
    r->n = k->n;
    r->unit_roundoff = k->unit_roundoff;
    r->max_err_u = k->max_err_u;
    r->rms_err_u = k->rms_err_u;
    r->max_bound_u = k->max_bound_u;
    r->rms_bound_u = k->rms_bound_u;
    r->worst_ratio = k->worst_ratio;
    r->worst_index = k->worst_index;
    snprintf(r->worst_detail, sizeof r->worst_detail, "%s", k->worst_detail);
    r->nonfinite = k->nonfinite;
    r->pass = k->pass;
    /* A declaration can have no finite bound (a bf16 accumulator over more
     * than 1/u terms): the replay then carries inf or NaN.  Every finite
     * output is within an infinite bound; the row says so (vacuous). */
    if (!isfinite(k->max_bound_u) || !isfinite(k->rms_bound_u)) {
        r->max_bound_u = r->rms_bound_u = INFINITY;
        r->worst_ratio = r->nonfinite ? INFINITY : 0.0;
        r->pass = r->nonfinite == 0;
        r->vacuous = 1;
    }
}

/* Runs rmsnorm's comparison under declaration d; appends its rows (only the
 * pass's outputs) to rep; returns 1 when all of them pass, 0 when one
 * fails, -1 when out of memory. */
static int rmsnorm_rows(const decl *d, const bound_tensor *in, const bound_tensor *out, int bwd, int64_t N, int64_t C,
                        ulp_report *rep, const char *shape, int *vacuous)
{
    kcmp_rmsnorm_kernel k = rmsnorm_kernel(d, N, C);
    kcmp_rmsnorm_data data = {N, C, in[0].v, in[1].v, bwd ? in[2].v : NULL,
                              bwd ? NULL : out[0].v, bwd ? in[3].v : out[1].v, bwd ? out[0].v : NULL,
                              bwd ? out[1].v : NULL};
    kcheck_acc rows[KCMP_RMSNORM_MAX_ROWS];
    int n = kcmp_rmsnorm(&k, &data, shape, rows);
    if (n < 0) return -1;
    char assumption[200];
    describe(d, bwd, assumption, sizeof assumption);
    int all = 1;
    for (int i = 0; i < n; i++) {
        const char *o = rows[i].row.output;
        int wanted = bwd ? (strcmp(o, "dx") == 0 || strcmp(o, "dgain") == 0) : (strcmp(o, "y") == 0 || strcmp(o, "rstd") == 0);
        if (!wanted || rep->n_rows >= ULP_MAX_ROWS) continue;
        ulp_row *r = &rep->rows[rep->n_rows++];
        copy_row(r, &rows[i].row, assumption);
        all &= r->pass;
        *vacuous |= r->vacuous;
    }
    return all;
}

int ulp_verify(const char *op_name, const ulp_kernel *k, const ulp_tensor *inputs, int n_inputs,
               const ulp_tensor *outputs, int n_outputs, ulp_report *rep, char *err, size_t errlen)
{
    memset(rep, 0, sizeof *rep);
    if (err && errlen) err[0] = '\0';
    const vop *op = NULL;
    for (int i = 0; i < n_ops; i++)
        if (op_name && strcmp(op_name, ops[i].name) == 0) op = &ops[i];
    if (!op) return bad(err, errlen, "unknown op '%s' (ops: %s)", op_name ? op_name : "(none)", ulp_op_names());
    if (!k) return bad(err, errlen, "no kernel declaration");
    decl d;
    int rc = check_decl(k, &d, err, errlen);
    if (rc) return rc;
    const char *pass = k->pass ? k->pass : "fwd";
    int bwd;
    if (strcmp(pass, "fwd") == 0) bwd = 0;
    else if (strcmp(pass, "bwd") == 0) bwd = 1;
    else return bad(err, errlen, "unknown pass '%s' (fwd, bwd)", pass);
    if (n_inputs < 0 || n_outputs < 0 || (n_inputs && !inputs) || (n_outputs && !outputs))
        return bad(err, errlen, "bad tensor list");
    if (n_outputs == 0) return bad(err, errlen, "no output tensors to verify");
    snprintf(rep->op, sizeof rep->op, "%s", op->name);
    snprintf(rep->pass, sizeof rep->pass, "%s", pass);

    bound_tensor in[VMAX_TENSORS] = {{0}}, out[VMAX_TENSORS] = {{0}};
    rc = bind(op->pass[bwd].inputs, inputs, n_inputs, "input", &d, 0, in, err, errlen);
    if (!rc) rc = bind(op->pass[bwd].outputs, outputs, n_outputs, "output", &d, 1, out, err, errlen);
    int64_t N = 0, C = 0;
    if (!rc) rc = rmsnorm_shapes(in, out, bwd, &N, &C, err, errlen);
    if (rc) {
        free_bound(in);
        free_bound(out);
        memset(rep, 0, sizeof *rep);
        return rc;
    }
    char shape[96];
    snprintf(shape, sizeof shape, "N=%lld C=%lld%s", (long long)N, (long long)C, in[1].t ? "" : " nogain");
    rep->unknown = is_unknown(&d, bwd);
    int verdict;
    if (rep->unknown) {
        decl tight = resolve(&d, 1), loose = resolve(&d, 0);
        int vt = 0, vl = 0;
        int t = rmsnorm_rows(&tight, in, out, bwd, N, C, rep, shape, &vt);
        int l = t < 0 ? -1 : rmsnorm_rows(&loose, in, out, bwd, N, C, rep, shape, &vl);
        if (t < 0 || l < 0) goto oom;
        verdict = l;
        char dt[200], dl[200];
        describe(&tight, bwd, dt, sizeof dt);
        describe(&loose, bwd, dl, sizeof dl);
        snprintf(rep->verdict, sizeof rep->verdict, "%s against the loosest bound (%s)%s; the tightest (%s) %s",
                 l ? "PASS" : "FAIL", dl, vl ? ", which is infinite for some outputs (no claim there)" : "", dt,
                 t ? "holds too" : "does not hold");
    } else {
        int vd = 0;
        int r = rmsnorm_rows(&d, in, out, bwd, N, C, rep, shape, &vd);
        if (r < 0) goto oom;
        verdict = r;
        char dd[200];
        describe(&d, bwd, dd, sizeof dd);
        snprintf(rep->verdict, sizeof rep->verdict, "%s against the bound of the declared kernel (%s)%s",
                 r ? "PASS" : "FAIL", dd, vd ? ", which is infinite for some outputs (no claim there)" : "");
        if (!r) {
            /* Which looser declaration do the outputs fit?  Tried in order:
             * accumulation in the storage format, a sequential reduction,
             * no upcast, all three. */
            decl tries[4] = {d, d, d, d};
            tries[0].accum = "storage";
            tries[1].reduce = tries[1].col_reduce = "sequential";
            tries[2].upcast = "none";
            tries[3].accum = "storage";
            tries[3].reduce = tries[3].col_reduce = "sequential";
            tries[3].upcast = "none";
            snprintf(rep->diagnosis, sizeof rep->diagnosis,
                     "no looser declaration with a finite bound (storage accumulation, sequential reduction, no "
                     "upcast) explains the errors: a bug beyond accumulation (a dropped term, a truncated output, a "
                     "wrong formula), or an accumulation too long for its format to bound");
            for (int i = 0; i < 4; i++) {
                ulp_report scratch;
                memset(&scratch, 0, sizeof scratch);
                char dt[200];
                describe(&tries[i], bwd, dt, sizeof dt);
                if (strcmp(tries[i].accum, d.accum) == 0 && strcmp(tries[i].reduce, d.reduce) == 0 &&
                    strcmp(tries[i].col_reduce, d.col_reduce) == 0 && strcmp(tries[i].upcast, d.upcast) == 0)
                    continue; /* the declaration itself */
                int vacuous = 0;
                int r2 = rmsnorm_rows(&tries[i], in, out, bwd, N, C, &scratch, shape, &vacuous);
                if (r2 < 0) goto oom;
                if (r2 && !vacuous) { /* an infinite bound fits anything: no evidence */
                    const char *acc_name = strcmp(tries[i].accum, "storage") == 0 ? prec_format_get(d.storage)->name : tries[i].accum;
                    snprintf(rep->diagnosis, sizeof rep->diagnosis,
                             "the outputs fit %s: the kernel likely accumulates in %s%s%s", dt, acc_name,
                             strcmp(tries[i].reduce, d.reduce) ? ", sequentially" : "",
                             strcmp(tries[i].upcast, d.upcast) ? ", without upcast" : "");
                    break;
                }
            }
        }
    }
    rep->pass_verdict = verdict;
    free_bound(in);
    free_bound(out);
    return verdict ? ULP_PASS : ULP_FAIL;
oom:
    free_bound(in);
    free_bound(out);
    memset(rep, 0, sizeof *rep);
    return bad(err, errlen, "out of memory");
}

void ulp_report_print(FILE *fp, const ulp_report *rep)
{
    fprintf(fp, "%-8s %-4s %-7s %-22s %9s %9s %9s %9s %9s %7s  %s\n", "op", "pass", "output", "shape", "n",
            "max_err_u", "rms_err_u", "bound_u", "rms_bnd_u", "ratio", "verdict");
    const char *last = "";
    for (int i = 0; i < rep->n_rows; i++) {
        const ulp_row *r = &rep->rows[i];
        if (strcmp(r->assumption, last) != 0) {
            fprintf(fp, "bound: %s%s\n", r->assumption,
                    rep->unknown ? (i == 0 ? "  (tightest)" : "  (loosest)") : "");
            last = r->assumption;
        }
        fprintf(fp, "%-8s %-4s %-7s %-22s %9lld %9.3g %9.3g %9.3g %9.3g %7.3g  %s%s\n", rep->op, rep->pass, r->output,
                r->shape, (long long)r->n, r->max_err_u, r->rms_err_u, r->max_bound_u, r->rms_bound_u, r->worst_ratio,
                r->pass ? "PASS" : "FAIL", r->vacuous ? " (no finite bound)" : "");
        if (!r->pass) {
            fprintf(fp, "    worst [%lld]: %s", (long long)r->worst_index, r->worst_detail);
            if (r->nonfinite) fprintf(fp, " (%lld non-finite outputs)", (long long)r->nonfinite);
            if (r->rms_err_u > r->rms_bound_u) fprintf(fp, " (RMS over its bound)");
            fputc('\n', fp);
        }
    }
    fprintf(fp, "verify: %s\n", rep->verdict);
    if (rep->diagnosis[0]) fprintf(fp, "verify: %s\n", rep->diagnosis);
}
