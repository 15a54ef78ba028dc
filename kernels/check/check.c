/* kernels/check/check.c — the check harness: reporting rows, seeds and
 * inputs, reduction depths, and the loop over op x path x variant that
 * `ulpscope check` runs (see check.h). */
#include "kernels/check/check.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "base/jsonl.h"

/* ---- rows (building them, and the reduction depths: kernels/check/rows.c) ---------- */

void kcheck_acc_report(kcheck_ctx *ctx, kcheck_acc *acc)
{
    kcheck_acc_finish(acc);
    kcheck_report(ctx, &acc->row);
}

void kcheck_report(kcheck_ctx *ctx, const kcheck_row *row)
{
    if (ctx->sink) ctx->sink(ctx->user, ctx, row);
}

static uint64_t fnv1a(uint64_t h, const char *s)
{
    for (; s && *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

uint64_t kcheck_seed(kcheck_ctx *ctx)
{
    uint64_t h = fnv1a(0xcbf29ce484222325ull, ctx->op ? ctx->op->name : "");
    h = fnv1a(h, kpath_name(ctx->path));
    h = fnv1a(h, ctx->op && ctx->variant >= 0 && ctx->variant < ctx->op->n_variants
                     ? ctx->op->variants[ctx->variant].name : "");
    uint64_t state = ctx->seed ^ h ^ (0x9e3779b97f4a7c15ull * ++ctx->draws);
    return prec_splitmix64(&state);
}

/* ---- inputs ----------------------------------------------------------------- */

prec_format kcheck_path_format(kpath p)
{
    switch (p) {
    case KPATH_FP32: return PREC_FP32;
    case KPATH_BF16: return PREC_BF16;
    case KPATH_FP16: return PREC_FP16;
    case KPATH_FP8: return PREC_E4M3;
    default: return PREC_FP32;
    }
}

void kcheck_fill_normal(prec_rng *rng, double *x, int64_t n, double mean, double sigma, prec_format f)
{
    for (int64_t i = 0; i < n; i++) x[i] = prec_rne(mean + sigma * prec_rng_normal(rng), f);
}

void kcheck_fill_uniform(prec_rng *rng, double *x, int64_t n, double lo, double hi, prec_format f)
{
    for (int64_t i = 0; i < n; i++) x[i] = prec_rne(lo + (hi - lo) * prec_rng_uniform(rng), f);
}

double kcheck_fp8_scale(const double *x, int64_t n, prec_format f)
{
    double amax = 0;
    for (int64_t i = 0; i < n; i++)
        if (fabs(x[i]) > amax) amax = fabs(x[i]);
    if (amax == 0) return 1.0;
    return prec_rne(amax / prec_format_get(f)->max_finite, PREC_FP32);
}

/* ---- the harness ------------------------------------------------------------ */

typedef struct {
    const kcheck_options *o;
    kcheck_summary *s;
    int twin_rows, twin_failed;
} run_state;

static const char *variant_name(const kcheck_ctx *ctx)
{
    return ctx->op && ctx->variant >= 0 && ctx->variant < ctx->op->n_variants ? ctx->op->variants[ctx->variant].name
                                                                                : "?";
}

void kcheck_row_json(FILE *fp, const kcheck_ctx *ctx, const kcheck_row *row)
{
    fputs("{\"record\":\"check\",\"op\":", fp);
    base_json_string(fp, ctx->op ? ctx->op->name : "?");
    fputs(",\"path\":", fp);
    base_json_string(fp, kpath_name(ctx->path));
    fputs(",\"variant\":", fp);
    base_json_string(fp, variant_name(ctx));
    fputs(",\"bug\":", fp);
    base_json_string(fp, kbug_name(ctx->bug));
    fputs(",\"shape\":", fp);
    base_json_string(fp, row->shape);
    fputs(",\"output\":", fp);
    base_json_string(fp, row->output);
    fprintf(fp, ",\"n\":%lld,\"unit_roundoff\":", (long long)row->n);
    base_json_double(fp, row->unit_roundoff);
    fputs(",\"max_err_u\":", fp);
    base_json_double(fp, row->max_err_u);
    fputs(",\"rms_err_u\":", fp);
    base_json_double(fp, row->rms_err_u);
    fputs(",\"max_bound_u\":", fp);
    base_json_double(fp, row->max_bound_u);
    fputs(",\"rms_bound_u\":", fp);
    base_json_double(fp, row->rms_bound_u);
    fputs(",\"worst_ratio\":", fp);
    base_json_double(fp, row->worst_ratio);
    fprintf(fp, ",\"worst_index\":%lld,\"worst_detail\":", (long long)row->worst_index);
    base_json_string(fp, row->worst_detail);
    fprintf(fp, ",\"nonfinite\":%lld,\"pass\":%s}\n", (long long)row->nonfinite, row->pass ? "true" : "false");
}

static void print_row(FILE *fp, const kcheck_ctx *ctx, const kcheck_row *row, int show_detail)
{
    fprintf(fp, "%-12s %-4s %-12s %-22s %-7s %9lld %9.3g %9.3g %9.3g %9.3g %7.3g  %s\n", ctx->op->name,
            kpath_name(ctx->path), variant_name(ctx), row->shape, row->output, (long long)row->n, row->max_err_u,
            row->rms_err_u, row->max_bound_u, row->rms_bound_u, row->worst_ratio, row->pass ? "PASS" : "FAIL");
    if (show_detail && !row->pass) {
        fprintf(fp, "    worst [%lld]: %s", (long long)row->worst_index, row->worst_detail);
        if (row->nonfinite) fprintf(fp, " (%lld non-finite outputs)", (long long)row->nonfinite);
        if (row->rms_err_u > row->rms_bound_u) fprintf(fp, " (RMS over its bound)");
        fputc('\n', fp);
    }
}

static void harness_sink(void *user, const kcheck_ctx *ctx, const kcheck_row *row)
{
    run_state *st = user;
    st->s->rows++;
    st->twin_rows++;
    if (!row->pass) {
        st->s->failed_rows++;
        st->twin_failed++;
    }
    if (st->o->table) print_row(st->o->table, ctx, row, st->o->bug == KBUG_NONE);
    if (st->o->json) kcheck_row_json(st->o->json, ctx, row);
}

static void json_error(FILE *fp, const kcheck_ctx *ctx, const char *message)
{
    fputs("{\"record\":\"error\",\"op\":", fp);
    base_json_string(fp, ctx->op->name);
    fputs(",\"path\":", fp);
    base_json_string(fp, kpath_name(ctx->path));
    fputs(",\"variant\":", fp);
    base_json_string(fp, variant_name(ctx));
    fputs(",\"message\":", fp);
    base_json_string(fp, message);
    fputs("}\n", fp);
}

int kcheck_not_offered(kcheck_ctx *ctx, const char *why)
{
    snprintf(ctx->not_offered, sizeof ctx->not_offered, "%s", why && why[0] ? why : "not offered");
    return 0;
}

static void json_not_offered(FILE *fp, const kcheck_ctx *ctx)
{
    fputs("{\"record\":\"not_offered\",\"op\":", fp);
    base_json_string(fp, ctx->op->name);
    fputs(",\"path\":", fp);
    base_json_string(fp, kpath_name(ctx->path));
    fputs(",\"variant\":", fp);
    base_json_string(fp, variant_name(ctx));
    fputs(",\"why\":", fp);
    base_json_string(fp, ctx->not_offered);
    fputs("}\n", fp);
}

static void run_twin(run_state *st, kcheck_ctx *ctx)
{
    const kcheck_options *o = st->o;
    st->twin_rows = st->twin_failed = 0;
    ctx->draws = 0;
    ctx->not_offered[0] = '\0';
    kernels_fail("%s", ""); /* clear the last error */
    kernels_set_planted_bug(o->bug);
    kcheck_fn check = kcheck_find(ctx->op->name);
    int rc = check ? check(ctx, ctx->path, ctx->variant) : kernels_fail("no check attached to op %s", ctx->op->name);
    kernels_set_planted_bug(KBUG_NONE);
    if (rc == 0 && ctx->not_offered[0] && st->twin_rows == 0) {
        if (o->table)
            fprintf(o->table, "%-12s %-4s %-12s (not offered: %s)\n", ctx->op->name, kpath_name(ctx->path),
                    variant_name(ctx), ctx->not_offered);
        if (o->json) json_not_offered(o->json, ctx);
        return;
    }
    st->s->twins++;
    char message[1100];
    message[0] = '\0';
    if (rc != 0) snprintf(message, sizeof message, "%s", kernels_last_error()[0] ? kernels_last_error() : "check failed");
    else if (ctx->not_offered[0]) snprintf(message, sizeof message, "the check reported rows of a combination it calls not offered");
    else if (st->twin_rows == 0) snprintf(message, sizeof message, "the check reported no rows");
    if (message[0]) {
        st->s->errors++;
        if (o->table)
            fprintf(o->table, "%-12s %-4s %-12s ERROR: %s\n", ctx->op->name, kpath_name(ctx->path), variant_name(ctx),
                    message);
        if (o->json) json_error(o->json, ctx, message);
        return;
    }
    if (o->bug != KBUG_NONE) {
        int caught = st->twin_failed > 0;
        st->s->twins_caught += caught;
        if (o->table)
            fprintf(o->table, "%-12s %-4s %-12s planted bug %s: %s (%d of %d rows FAIL)\n", ctx->op->name,
                    kpath_name(ctx->path), variant_name(ctx), kbug_name(o->bug), caught ? "caught" : "NOT CAUGHT",
                    st->twin_failed, st->twin_rows);
    }
}

int kcheck_run(const kcheck_options *o, kcheck_summary *summary)
{
    memset(summary, 0, sizeof *summary);
    run_state st = {o, summary, 0, 0};
    kcheck_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.seed = o->seed;
    ctx.quick = o->quick;
    ctx.bug = o->bug;
    ctx.sink = harness_sink;
    ctx.user = &st;
    if (o->table)
        fprintf(o->table, "%-12s %-4s %-12s %-22s %-7s %9s %9s %9s %9s %9s %7s  %s\n", "op", "path", "variant", "shape",
                "output", "n", "max_err_u", "rms_err_u", "bound_u", "rms_bnd_u", "ratio", "verdict");
    int n_ops = 0;
    const kop *const *ops = kregistry_ops(&n_ops);
    for (int i = 0; i < n_ops; i++) {
        const kop *op = ops[i];
        if (o->op && strcmp(o->op, op->name) != 0) continue;
        for (int p = 0; p < KPATH_COUNT; p++) {
            if (o->path >= 0 && o->path != p) continue;
            if (!kop_has_path(op, (kpath)p)) {
                if (o->path == p && o->table) fprintf(o->table, "%-12s %-4s (no such path: %s)\n", op->name, kpath_name((kpath)p), op->fp8_note);
                continue;
            }
            for (int v = 0; v < op->n_variants; v++) {
                if (o->variant && strcmp(o->variant, op->variants[v].name) != 0) continue;
                ctx.op = op;
                ctx.path = (kpath)p;
                ctx.variant = v;
                run_twin(&st, &ctx);
            }
        }
    }
    if (o->table) {
        if (o->bug == KBUG_NONE)
            fprintf(o->table, "check: %d rows, %d FAIL, %d errors\n", summary->rows, summary->failed_rows, summary->errors);
        else
            fprintf(o->table, "check --bug %s: %d of %d twins caught (%d of %d rows FAIL), %d errors\n", kbug_name(o->bug),
                    summary->twins_caught, summary->twins, summary->failed_rows, summary->rows, summary->errors);
    }
    if (o->json)
        fprintf(o->json, "{\"record\":\"summary\",\"bug\":\"%s\",\"rows\":%d,\"failed_rows\":%d,\"errors\":%d,"
                         "\"twins\":%d,\"twins_caught\":%d}\n",
                kbug_name(o->bug), summary->rows, summary->failed_rows, summary->errors, summary->twins,
                summary->twins_caught);
    if (summary->errors || summary->twins == 0) return 1;
    if (o->bug == KBUG_NONE) return summary->failed_rows == 0 ? 0 : 1;
    return summary->twins_caught == summary->twins ? 0 : 1;
}
