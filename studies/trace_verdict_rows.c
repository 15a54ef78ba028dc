/* studies/trace_verdict_rows.c — the verdicts on the row-wise ops of a
 * replay: layernorm and rmsnorm (forward and backward), cross-entropy and
 * rope, judged with the comparisons `ulpscope check` and `ulpscope verify`
 * share (kernels/check/compare_{layernorm,rmsnorm,cross_entropy,rope}.h).
 *
 * Each side's kernel is described as the backend in use runs it:
 *   CUDA: the kernel of the site's variant, as check describes it
 *     (kcheck_*_kernel), with the model's eps;
 *   CPU (trainer/backend_cpu.c): fp32 row sums in one sequential chain of C
 *     (warp_tree: its kernel's lanes and butterfly, krmsnorm_row_depth),
 *     1/sqrtf for the reciprocal square root (two correctly rounded
 *     operations: within 2 ulps, the bound check gives rsqrtf), the variant's
 *     roundings into the storage format (llama, none); the backward in the
 *     xhat order, dx = (g - mean(g) - xhat mean(g xhat)) rstd, with the
 *     products g xhat and dy xhat rounded before their sums (layernorm: one
 *     more rounding per term than the fma its description assumes, so the
 *     chains are taken one longer, which covers it; rmsnorm: compare_rmsnorm's
 *     bwd_xhat), except warp_tree, whose backward follows its kernel;
 *     cross-entropy in two passes, expf and logf of glibc (within the 2 and 1
 *     ulps check allows CUDA), the sum over V in one chain;
 *   rope (both backends): krope_tables_host's fp32 table, or cosf and sinf
 *     of the fp32 angle within 2 ulps (CUDA's sincosf; glibc's are closer).
 * Inputs are the recorded ones rounded into each side's format (as both
 * backends read them); outputs must be values of the path's format, which
 * the comparisons describe.  A backward's mean and rstd are the forward's
 * stored values with their actual errors; they are not judged again there.
 * dgain and dbias are judged where the op wrote them into zeroed gradients
 * (the first micro-batch): later ones add into earlier gradients.
 *
 * Large ops are judged on at most TRACE_JUDGE_ROWS rows (TRACE_JUDGE_ELEMS
 * elements): those where the two replays differ first; dgain and dbias then
 * are not (their sums run over every row); rope on whole sequences (their
 * positions stay). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/check/compare_cross_entropy.h"
#include "kernels/check/compare_layernorm.h"
#include "kernels/check/compare_rmsnorm.h"
#include "kernels/check/compare_rope.h"
#include "kernels/cross_entropy.h"
#include "kernels/layernorm.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "precision/format.h"
#include "studies/trace_tap.h"

#define TRACE_JUDGE_ELEMS (1L << 21) /* and on at most this many elements */

/* ---- rows to judge ---- */

typedef struct {
    int64_t n;       /* rows judged */
    int64_t *index;  /* their indices in the op's rows, ascending */
    int all;         /* every row (index[i] == i) */
} row_pick;

/* At most TRACE_JUDGE_ROWS rows of `width` elements (and TRACE_JUDGE_ELEMS
 * elements) of n_rows, those with differs[row] first.  -1 out of memory. */
static int pick_rows(const unsigned char *differs, int64_t n_rows, int64_t width, row_pick *p)
{
    int64_t cap = TRACE_JUDGE_ELEMS / (width > 0 ? width : 1);
    if (cap > TRACE_JUDGE_ROWS) cap = TRACE_JUDGE_ROWS;
    if (cap < 1) cap = 1;
    p->all = n_rows <= cap;
    p->n = p->all ? n_rows : cap;
    p->index = malloc((size_t)(p->n > 0 ? p->n : 1) * sizeof *p->index);
    unsigned char *taken = calloc((size_t)(n_rows > 0 ? n_rows : 1), 1);
    if (!p->index || !taken) {
        free(taken);
        return -1;
    }
    int64_t k = 0;
    for (int pass = 0; pass < 2 && k < p->n; pass++)
        for (int64_t i = 0; i < n_rows && k < p->n; i++)
            if (!taken[i] && (pass == 1 || (differs && differs[i]))) taken[i] = 1, k++;
    k = 0;
    for (int64_t i = 0; i < n_rows; i++)
        if (taken[i]) p->index[k++] = i;
    free(taken);
    return 0;
}

/* "64 rows", or "256 of 4096 rows (those differing first)" (what: "rows"). */
static void rows_judged(const row_pick *p, int64_t n_rows, const char *what, char *buf, size_t len)
{
    if (p->all) snprintf(buf, len, "%lld %s", (long long)p->n, what);
    else snprintf(buf, len, "%lld of %lld %s (those differing first)", (long long)p->n, (long long)n_rows, what);
}

/* The picked rows of x [n_rows, width] (NULL stays NULL), each element
 * rounded into f (PREC_FP64: as it is), negated when `negate` (the twin's
 * wrong reference); malloc'd, *fail set when out of memory. */
static double *gather(const double *x, const row_pick *p, int64_t width, prec_format f, int negate, int *fail)
{
    if (!x) return NULL;
    double *y = malloc((size_t)(p->n * width > 0 ? p->n * width : 1) * sizeof *y);
    if (!y) {
        *fail = 1;
        return NULL;
    }
    for (int64_t i = 0; i < p->n; i++)
        for (int64_t j = 0; j < width; j++) {
            double v = x[p->index[i] * width + j];
            if (f != PREC_FP64) v = prec_rne(v, f);
            y[i * width + j] = negate ? -v : v;
        }
    return y;
}

/* 1 when every finite value of x [n] is a value of f. */
static int values_of_format(const double *x, int64_t n, prec_format f)
{
    for (int64_t i = 0; x && i < n; i++)
        if (isfinite(x[i]) && prec_rne(x[i], f) != x[i]) return 0;
    return 1;
}

/* Folds a row into the judgement with its worst element's index mapped
 * back from the picked rows to the op's (width: the output's row width). */
static void judge_row(trace_report *r, int side, const kcheck_row *row, const row_pick *p, int64_t width)
{
    kcheck_row mapped = *row;
    if (!p->all && row->worst_index >= 0)
        mapped.worst_index = p->index[row->worst_index / width] * width + row->worst_index % width;
    trace_judge_row(r, side, &mapped, "");
}

static void note_append(trace_report *r, const char *text)
{
    size_t n = strlen(r->verdict_note);
    snprintf(r->verdict_note + n, sizeof r->verdict_note - n, "%s", text);
}

/* ---- norms ---- */

/* Side `at`'s kernel as the backend runs it (the header's descriptions). */
/* The verdict from both sides' rows, or none when an allocation failed
 * (fail) on the way: then no partial judgement stands. */
static void end_judgement(trace_report *r, int fail, trace_bug bug)
{
    if (!fail) {
        trace_judge_finish(r, bug);
        return;
    }
    memset(r->judge, 0, sizeof r->judge);
    snprintf(r->verdict_note, sizeof r->verdict_note, "no verdict: out of memory");
}

static void norm_kernels(const char *backend, const tsite *at, int64_t N, int64_t C, double eps,
                         kcmp_rmsnorm_kernel *rk, kcmp_layernorm_kernel *lk)
{
    const prec_format f = tpath_storage(at->path);
    const float eps32 = (float)eps; /* both backends pass eps to the kernels as an fp32 value */
    if (strcmp(backend, "cpu") != 0 && at->op == TOP_LAYERNORM) {
        *lk = kcheck_layernorm_kernel(f, at->variant, N, C);
        lk->eps = eps32;
        return;
    }
    if (strcmp(backend, "cpu") != 0) {
        *rk = kcheck_rmsnorm_kernel(f, at->variant, N, C);
        rk->eps = eps32;
        return;
    }
    if (at->op == TOP_LAYERNORM) {
        memset(lk, 0, sizeof *lk);
        lk->storage = f;
        lk->acc = PREC_FP32;
        lk->variance = at->variant == KLAYERNORM_ONE_PASS ? KCMP_LN_ONE_PASS : KCMP_LN_TWO_PASS;
        lk->fwd_depth = C;
        lk->bwd_depth = C + 1; /* + the rounding of each product g xhat (no fma) */
        lk->col_depth = N + 1; /* + the rounding of each product dy xhat */
        lk->rsqrt_ulps = 2.0;
        lk->eps = eps32;
        return;
    }
    memset(rk, 0, sizeof *rk);
    const int warp = at->variant == KRMSNORM_WARP_TREE;
    rk->storage = f;
    rk->acc = PREC_FP32;
    rk->stats_in_storage = at->variant == KRMSNORM_NONE;
    rk->round_normalized = at->variant == KRMSNORM_LLAMA || at->variant == KRMSNORM_NONE;
    rk->fwd_depth = rk->bwd_depth = warp ? krmsnorm_row_depth(C, f, KRMSNORM_WARP_TREE) : C;
    rk->col_depth = N;
    rk->rsqrt_ulps = 2.0;
    rk->eps = eps32;
    rk->bwd_xhat = !warp;
}

void trace_judge_norm(trace_report *r, const char *backend, const tsite *site_a, const tsite *site_b,
                      const trace_norm_data *d, trace_bug bug)
{
    const int backward = d->dy != NULL, layer = site_a->op == TOP_LAYERNORM;
    const char *op = layer ? "layernorm" : "rmsnorm", *pass = backward ? "backward" : "forward";
    const int64_t N = d->N, C = d->C;
    if (site_a->op != site_b->op) {
        snprintf(r->verdict_note, sizeof r->verdict_note, "no verdict for the norm: A and B run different ops");
        return;
    }
    const tsite *sites[2] = {site_a, site_b};
    /* outputs: [0] y or dx [N, C]; [1] mean or dgain; [2] rstd or dbias */
    const int64_t out_len[3] = {N * C, backward ? C : N, backward ? C : N};
    for (int side = 0; side < 2; side++) {
        const prec_format f = tpath_storage(sites[side]->path);
        for (int o = 0; o < 3; o++)
            if (!values_of_format(d->out[side][o], out_len[o], o == 0 || backward ? f : PREC_FP32)) {
                snprintf(r->verdict_note, sizeof r->verdict_note,
                         "no verdict for %s: %s's %s is stored in a narrower format than the path's %s", op,
                         side ? "B" : "A", o == 0 ? (backward ? "dx" : "y") : backward ? "gradient" : "statistic",
                         prec_format_get(f)->name);
                return;
            }
    }
    unsigned char *differs = calloc((size_t)(N > 0 ? N : 1), 1);
    if (!differs) {
        snprintf(r->verdict_note, sizeof r->verdict_note, "no verdict: out of memory");
        return;
    }
    for (int64_t n = 0; n < N; n++) {
        for (int64_t c = 0; c < C && !differs[n]; c++)
            differs[n] = memcmp(&d->out[0][0][n * C + c], &d->out[1][0][n * C + c], sizeof(double)) != 0;
        for (int o = 1; o < 3 && !backward; o++) /* the forward's statistics */
            differs[n] |= d->out[0][o] && memcmp(&d->out[0][o][n], &d->out[1][o][n], sizeof(double)) != 0;
    }
    row_pick p;
    int fail = pick_rows(differs, N, C, &p);
    free(differs);
    if (fail) {
        free(p.index);
        snprintf(r->verdict_note, sizeof r->verdict_note, "no verdict: out of memory");
        return;
    }
    char rows_text[64];
    rows_judged(&p, N, "rows", rows_text, sizeof rows_text);
    snprintf(r->verdict_note, sizeof r->verdict_note, "%s %s judged with check's comparison (compare_%s.h): %s of C = %lld; %s",
             op, pass, op, rows_text, (long long)C,
             strcmp(backend, "cpu") == 0 ? "the CPU backend's arithmetic" : "the CUDA kernels' arithmetic");
    if (backward && (d->out[0][1] || d->out[0][2]) && !p.all)
        note_append(r, "; dgain, dbias not judged (their sums run over every row)");
    else if (backward && d->accumulated_grads)
        note_append(r, "; dgain, dbias not judged (added into earlier micro-batches' gradients)");
    trace_judge_start(r);
    char shape[96];
    snprintf(shape, sizeof shape, "N=%lld C=%lld", (long long)p.n, (long long)C);
    for (int side = 0; side < 2 && !fail; side++) {
        const prec_format f = tpath_storage(sites[side]->path);
        /* twin: the reference (and bound) from the first input negated (x forward, dy backward) */
        const int wrong = bug == TRACE_BUG_WRONG_REFERENCE;
        double *x = gather(d->x, &p, C, f, wrong && !backward, &fail);
        double *dy = gather(d->dy, &p, C, f, wrong, &fail);
        double *mean = gather(d->mean, &p, 1, PREC_FP64, 0, &fail), *rstd = gather(d->rstd, &p, 1, PREC_FP64, 0, &fail);
        double *o0 = gather(d->out[side][0], &p, C, PREC_FP64, 0, &fail);
        double *o1 = backward ? NULL : gather(d->out[side][1], &p, 1, PREC_FP64, 0, &fail);
        double *o2 = backward ? NULL : gather(d->out[side][2], &p, 1, PREC_FP64, 0, &fail);
        double *gain = NULL, *bias = NULL;
        if (d->gain && !(gain = malloc((size_t)C * sizeof *gain))) fail = 1;
        if (d->bias && !(bias = malloc((size_t)C * sizeof *bias))) fail = 1;
        for (int64_t c = 0; !fail && c < C; c++) {
            if (gain) gain[c] = prec_rne(d->gain[c], f);
            if (bias) bias[c] = prec_rne(d->bias[c], f);
        }
        /* dgain and dbias over every row only */
        const double *dgain = backward && p.all ? d->out[side][1] : NULL, *dbias = backward && p.all ? d->out[side][2] : NULL;
        kcmp_rmsnorm_kernel rk;
        kcmp_layernorm_kernel lk;
        norm_kernels(backend, sites[side], p.n, C, d->eps, &rk, &lk);
        kcheck_acc rows[KCMP_LAYERNORM_MAX_ROWS > KCMP_RMSNORM_MAX_ROWS ? KCMP_LAYERNORM_MAX_ROWS : KCMP_RMSNORM_MAX_ROWS];
        int n_rows = -1;
        if (!fail && layer) {
            kcmp_layernorm_data ld = {p.n, C, x, gain, bias, dy, NULL, NULL, NULL, NULL, NULL, NULL};
            if (backward) ld.mean = mean, ld.rstd = rstd, ld.dx = o0, ld.dgain = dgain, ld.dbias = dbias;
            else ld.y = o0, ld.mean = o1, ld.rstd = o2;
            n_rows = kcmp_layernorm(&lk, &ld, shape, rows);
        } else if (!fail) {
            kcmp_rmsnorm_data rd = {p.n, C, x, gain, dy, NULL, NULL, NULL, NULL};
            if (backward) rd.rstd = rstd, rd.dx = o0, rd.dgain = dgain;
            else rd.y = o0, rd.rstd = o2;
            n_rows = kcmp_rmsnorm(&rk, &rd, shape, rows);
        }
        fail = fail || n_rows < 0;
        for (int i = 0; i < n_rows; i++) {
            const char *name = rows[i].row.output;
            const int stat = strcmp(name, "mean") == 0 || strcmp(name, "rstd") == 0;
            if (backward && stat) continue; /* the forward's statistics, read by both sides */
            judge_row(r, side, &rows[i].row, &p, stat ? 1 : C); /* dgain, dbias: every row, nothing to map */
        }
        free(x), free(dy), free(mean), free(rstd), free(o0), free(o1), free(o2), free(gain), free(bias);
    }
    free(p.index);
    end_judgement(r, fail, bug);
}

/* ---- cross-entropy ---- */

/* The logits' (and dlogits') format at `at`: kernels/cross_entropy.h's rule
 * on CUDA; the CPU backend reads them in the path's storage format, fp32 for
 * fp32_logits.  PREC_FP64 where the comparison describes no such kernel. */
static prec_format ce_logits_format(const char *backend, const tsite *at)
{
    if (strcmp(backend, "cpu") != 0) return kce_logits_format(at->path, at->variant);
    if (at->variant == KCE_FP32_LOGITS) return PREC_FP32;
    prec_format f = tpath_storage(at->path);
    return f == PREC_FP32 || f == PREC_BF16 || f == PREC_FP16 ? f : PREC_FP64;
}

void trace_judge_cross_entropy(trace_report *r, const char *backend, const tsite *site_a, const tsite *site_b,
                               int64_t N, int64_t V, const double *logits, const int32_t *targets, double softcap,
                               const double *dloss, const double *const out_a[2], const double *const out_b[2],
                               trace_bug bug)
{
    const tsite *sites[2] = {site_a, site_b};
    const double *const *outs[2] = {out_a, out_b};
    prec_format lf[2];
    for (int side = 0; side < 2; side++) {
        lf[side] = ce_logits_format(backend, sites[side]);
        if (lf[side] == PREC_FP64) {
            snprintf(r->verdict_note, sizeof r->verdict_note,
                     "no verdict for cross_entropy: %s's %s path has no cross-entropy comparison", side ? "B" : "A",
                     kpath_name(sites[side]->path));
            return;
        }
        if (!values_of_format(outs[side][0], N, PREC_FP32) ||
            (dloss && !values_of_format(outs[side][1], N * V, lf[side]))) {
            snprintf(r->verdict_note, sizeof r->verdict_note,
                     "no verdict for cross_entropy: %s's outputs are stored in a narrower format than its %s",
                     side ? "B" : "A", prec_format_get(lf[side])->name);
            return;
        }
    }
    for (int64_t i = 0; i < N; i++)
        if (targets[i] < 0 || targets[i] >= V) {
            snprintf(r->verdict_note, sizeof r->verdict_note,
                     "no verdict for cross_entropy: target %d of row %lld is outside the vocabulary", targets[i],
                     (long long)i);
            return;
        }
    unsigned char *differs = calloc((size_t)(N > 0 ? N : 1), 1);
    row_pick p = {0};
    int fail = !differs;
    for (int64_t i = 0; !fail && i < N; i++) {
        differs[i] = memcmp(&out_a[0][i], &out_b[0][i], sizeof(double)) != 0;
        for (int64_t j = 0; dloss && j < V && !differs[i]; j++)
            differs[i] = memcmp(&out_a[1][i * V + j], &out_b[1][i * V + j], sizeof(double)) != 0;
    }
    fail = fail || pick_rows(differs, N, V, &p);
    free(differs);
    int32_t *t = fail ? NULL : malloc((size_t)(p.n > 0 ? p.n : 1) * sizeof *t);
    fail = fail || !t;
    for (int64_t i = 0; !fail && i < p.n; i++) t[i] = targets[p.index[i]];
    char rows_text[64] = "";
    if (!fail) rows_judged(&p, N, "rows", rows_text, sizeof rows_text);
    snprintf(r->verdict_note, sizeof r->verdict_note,
             "cross_entropy judged with check's comparison (compare_cross_entropy.h): %s of V = %lld, logits A %s, "
             "B %s; %s",
             rows_text, (long long)V, prec_format_get(lf[0])->name, prec_format_get(lf[1])->name,
             strcmp(backend, "cpu") == 0 ? "the CPU backend's arithmetic" : "the CUDA kernels' arithmetic");
    trace_judge_start(r);
    char shape[96];
    snprintf(shape, sizeof shape, "N=%lld V=%lld", (long long)p.n, (long long)V);
    for (int side = 0; side < 2 && !fail; side++) {
        /* twin: the reference (and bound) from the logits negated */
        double *z = gather(logits, &p, V, lf[side], bug == TRACE_BUG_WRONG_REFERENCE, &fail);
        double *loss = gather(outs[side][0], &p, 1, PREC_FP64, 0, &fail);
        double *dz = dloss ? gather(outs[side][1], &p, V, PREC_FP64, 0, &fail) : NULL;
        kcmp_ce_kernel k;
        if (strcmp(backend, "cpu") == 0) k = (kcmp_ce_kernel){lf[side], PREC_FP32, V, 0, 0.0, 0.0};
        else k = kcheck_cross_entropy_kernel(sites[side]->path, sites[side]->variant, p.n, V);
        k.dloss = dloss ? (double)(float)*dloss : 0.0; /* both backends scale by it as an fp32 value */
        k.softcap = (double)(float)softcap;             /* and cap with it as one */
        kcheck_acc rows[KCMP_CE_MAX_ROWS];
        int n_rows = fail ? -1 : kcmp_cross_entropy(&k, &(kcmp_ce_data){p.n, V, z, t, loss, dz}, shape, rows);
        fail = fail || n_rows < 0;
        for (int i = 0; i < n_rows; i++) judge_row(r, side, &rows[i].row, &p, strcmp(rows[i].row.output, "loss") ? V : 1);
        free(z), free(loss), free(dz);
    }
    free(t);
    free(p.index);
    end_judgement(r, fail, bug);
}

/* ---- rope ---- */

void trace_judge_rope(trace_report *r, const char *backend, const tsite *site_a, const tsite *site_b, int B, int T,
                      int H, int64_t C, double theta, int backward, const double *x, const double *out_a,
                      const double *out_b, trace_bug bug)
{
    const tsite *sites[2] = {site_a, site_b};
    const double *outs[2] = {out_a, out_b};
    const int64_t D = C / H, half = D / 2, seq = (int64_t)T * C;
    for (int side = 0; side < 2; side++)
        if (!values_of_format(outs[side], (int64_t)B * seq, tpath_storage(sites[side]->path))) {
            snprintf(r->verdict_note, sizeof r->verdict_note,
                     "no verdict for rope: %s's output is stored in a narrower format than its path's %s",
                     side ? "B" : "A", prec_format_get(tpath_storage(sites[side]->path))->name);
            return;
        }
    /* whole sequences, those where the replays differ first */
    unsigned char *differs = calloc((size_t)(B > 0 ? B : 1), 1);
    float *cos_t = malloc((size_t)(T * half > 0 ? T * half : 1) * sizeof *cos_t);
    float *sin_t = malloc((size_t)(T * half > 0 ? T * half : 1) * sizeof *sin_t);
    float *inv = malloc((size_t)(half > 0 ? half : 1) * sizeof *inv);
    double *cos_d = malloc((size_t)(T * half > 0 ? T * half : 1) * sizeof *cos_d);
    double *sin_d = malloc((size_t)(T * half > 0 ? T * half : 1) * sizeof *sin_d);
    double *inv_d = malloc((size_t)(half > 0 ? half : 1) * sizeof *inv_d);
    row_pick p = {0};
    int fail = !differs || !cos_t || !sin_t || !inv || !cos_d || !sin_d || !inv_d;
    for (int64_t b = 0; !fail && b < B; b++)
        differs[b] = memcmp(out_a + b * seq, out_b + b * seq, (size_t)seq * sizeof(double)) != 0;
    fail = fail || pick_rows(differs, B, seq, &p);
    free(differs);
    if (!fail) {
        krope_tables_host(cos_t, sin_t, inv, T, D, theta); /* both backends' tables */
        for (int64_t i = 0; i < (int64_t)T * half; i++) cos_d[i] = cos_t[i], sin_d[i] = sin_t[i];
        for (int64_t i = 0; i < half; i++) inv_d[i] = inv[i];
    }
    char rows_text[64] = "";
    if (!fail) rows_judged(&p, B, "sequences", rows_text, sizeof rows_text);
    snprintf(r->verdict_note, sizeof r->verdict_note,
             "rope %s judged with compare_rope.h (check_rope.c's bound): %s of T = %d tokens, H = %d heads of D = %lld; "
             "%s",
             backward ? "backward" : "forward", rows_text, T, H, (long long)D,
             strcmp(backend, "cpu") == 0 ? "the CPU backend's arithmetic" : "the CUDA kernels' arithmetic");
    trace_judge_start(r);
    char shape[96];
    snprintf(shape, sizeof shape, "B=%lld T=%d H=%d D=%lld", (long long)p.n, T, H, (long long)D);
    for (int side = 0; side < 2 && !fail; side++) {
        const prec_format f = tpath_storage(sites[side]->path);
        /* twin: the reference (and bound) from the input negated */
        double *xs = gather(x, &p, seq, f, bug == TRACE_BUG_WRONG_REFERENCE, &fail);
        double *y = gather(outs[side], &p, seq, PREC_FP64, 0, &fail);
        const int table = sites[side]->variant == KROPE_TABLE;
        const kcmp_rope_kernel k = kcheck_rope_kernel(f, sites[side]->variant, theta);
        const kcmp_rope_data d = {p.n * T, H, D, T, xs, table ? cos_d : NULL, table ? sin_d : NULL,
                                  table ? NULL : inv_d, y, backward};
        kcheck_acc row;
        int n_rows = fail ? -1 : kcmp_rope(&k, &d, shape, &row);
        fail = fail || n_rows < 0;
        if (n_rows > 0) judge_row(r, side, &row.row, &p, seq);
        free(xs), free(y);
    }
    free(cos_t), free(sin_t), free(inv), free(cos_d), free(sin_d), free(inv_d), free(p.index);
    end_judgement(r, fail, bug);
}
