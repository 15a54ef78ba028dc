/* studies/bisect.c — delta debugging over plan units with compare as the
 * oracle (bisect.h). */
#include "studies/bisect.h"

#include "base/jsonl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    const bisect_config *c;
    bisect_report *rep;
    char *err;
    size_t errlen;
    double t0;
} oracle_ctx;

static int in_groups(int group, const int *groups, int n)
{
    for (int g = 0; g < n; g++)
        if (groups[g] == group) return 1;
    return 0;
}

/* good with the units of the given groups switched to bad */
static int plan_of(const bisect_config *c, const bisect_report *rep, const int *groups, int n, tplan *out, char *err,
                   size_t errlen)
{
    tplan_unit *u = malloc((size_t)(rep->n_units ? rep->n_units : 1) * sizeof *u);
    if (!u) return snprintf(err, errlen, "out of memory"), -1;
    int k = 0;
    for (int i = 0; i < rep->n_units; i++)
        if (in_groups(rep->group_of[i], groups, n)) u[k++] = rep->units[i];
    int rc = tplan_apply_units(&c->good, &c->bad, u, k, out, err, errlen);
    free(u);
    return rc;
}

/* One compare study: the good plan against arms[1..n] at seeds first_seed ..
 * first_seed + samples - 1. */
static int study(const bisect_config *c, bisect_report *rep, cmp_config *cc, cmp_train_ctx *tc, int samples,
                 double margin, cmp_report *out, char *err, size_t errlen)
{
    uint64_t *seeds = malloc((size_t)samples * sizeof *seeds);
    if (!seeds) return snprintf(err, errlen, "out of memory"), 1;
    for (int s = 0; s < samples; s++) seeds[s] = c->first_seed + (uint64_t)s;
    cc->seeds = seeds;
    cc->n_seeds = samples;
    cc->vary = CMP_VARY_BOTH;
    cc->alpha = c->alpha / c->n_schedule;
    cc->power = 0.8;
    cc->margin = margin;
    cc->results_dir = c->results_dir;
    cc->recipe_json = c->recipe_json;
    cc->progress = NULL;
    cmp_runner runner;
    memset(&runner, 0, sizeof runner);
    if (c->runner) c->runner(&runner, tc, c->runner_ctx);
    else cmp_train_runner(&runner, tc);
    int rc = cmp_run_study(cc, &runner, out, err, errlen);
    rep->runs_executed += out->runs_executed;
    rep->runs_cached += out->runs_cached;
    free(seeds);
    return rc;
}

static char *identity(const tplan *p)
{
    return tplan_json_alloc(p);
}

static int judge(void *vctx, const dd_config *configs, int count, int samples, dd_verdict *verdicts)
{
    oracle_ctx *o = vctx;
    const bisect_config *c = o->c;
    bisect_report *rep = o->rep;
    const double alpha_look = c->alpha / c->n_schedule;
    cmp_train_ctx *tc = malloc(sizeof *tc);
    if (!tc) return snprintf(o->err, o->errlen, "out of memory"), -1;
    int i = 0, rc = 0;
    while (i < count && !rc) {
        cmp_config cc;
        memset(&cc, 0, sizeof cc);
        *tc = c->train;
        char *ids[CMP_MAX_ARMS] = {0};
        int idx[CMP_MAX_ARMS];
        snprintf(cc.arms[0].name, CMP_NAME_MAX, "good");
        tc->plans[0] = c->good;
        ids[0] = identity(&c->good);
        cc.arms[0].identity = ids[0];
        cc.n_arms = 1;
        for (; i < count && cc.n_arms < CMP_MAX_ARMS; i++) {
            if (configs[i].n == 0) {
                verdicts[i] = DD_EQUIVALENT; /* the good plan against itself */
                continue;
            }
            int a = cc.n_arms;
            if (plan_of(c, rep, configs[i].units, configs[i].n, &tc->plans[a], o->err, o->errlen)) {
                verdicts[i] = DD_UNDECIDED; /* a mixture the trainer refuses: never judged as clean */
                if (c->progress) fprintf(c->progress, "bisect: configuration refused: %s\n", o->err);
                o->err[0] = '\0';
                continue;
            }
            tc->planted[a] = c->train.planted[0];
            snprintf(cc.arms[a].name, CMP_NAME_MAX, "config%d", i);
            ids[a] = identity(&tc->plans[a]);
            /* two configurations of one batch may be the same plan: judge it once */
            int dup = -1;
            for (int b = 1; b < a && dup < 0; b++)
                if (ids[b] && ids[a] && strcmp(ids[a], ids[b]) == 0) dup = b;
            if (dup >= 0) {
                free(ids[a]);
                ids[a] = NULL;
                idx[a] = -1;
                verdicts[i] = DD_UNDECIDED; /* overwritten below from its twin */
                continue;
            }
            cc.arms[a].identity = ids[a];
            idx[a] = i;
            cc.n_arms++;
        }
        if (cc.n_arms > 1) {
            cmp_report r;
            rc = study(c, rep, &cc, tc, samples, rep->margin, &r, o->err, o->errlen);
            for (int a = 1; a < cc.n_arms && !rc; a++) {
                const cmp_arm_report *ar = &r.arm[a];
                dd_verdict v = DD_UNDECIDED;
                if (c->planted_bug == BISECT_BUG_IGNORE_NOISE_FLOOR) v = ar->paired.estimate != 0 ? DD_SHIFT : DD_EQUIVALENT;
                else if (ar->verdict == CMP_IDENTICAL) v = DD_EQUIVALENT;
                else if (ar->pairs >= 2 && ar->paired.p < alpha_look) v = DD_SHIFT;
                else if (ar->pairs >= 2 && ar->tost.p < alpha_look) v = DD_EQUIVALENT;
                verdicts[idx[a]] = v;
            }
            cmp_report_free(&r);
        }
        for (int a = 0; a < CMP_MAX_ARMS; a++) free(ids[a]);
    }
    /* duplicates within a batch take their first occurrence's verdict */
    for (int k = 0; k < count; k++)
        for (int j = 0; j < k; j++)
            if (configs[j].n == configs[k].n &&
                !memcmp(configs[j].units, configs[k].units, (size_t)configs[k].n * sizeof(int)))
                verdicts[k] = verdicts[j];
    free(tc);
    if (c->progress && !rc)
        fprintf(c->progress, "bisect: judged %d configuration%s at %d seeds; %d runs so far (%d from the cache), %.0f s\n",
                count, count > 1 ? "s" : "", samples, rep->runs_executed + rep->runs_cached, rep->runs_cached,
                now_seconds() - o->t0);
    return rc ? -1 : 0;
}

static const char *const grouping_names[] = {"unit", "layer", "slot", "role"};

const char *bisect_grouping_name(bisect_grouping g)
{
    return g >= BISECT_GROUP_UNIT && g <= BISECT_GROUP_ROLE ? grouping_names[g] : "?";
}

int bisect_grouping_parse(const char *s, bisect_grouping *g)
{
    for (int i = 0; i <= BISECT_GROUP_ROLE; i++)
        if (strcmp(s, grouping_names[i]) == 0) return *g = (bisect_grouping)i, 0;
    return -1;
}

/* The key units share when they are grouped together (bisect_grouping). */
static int grouping_key(bisect_grouping g, tplan_unit u)
{
    const tslot_info *info = tslot_get(u.slot);
    switch (g) {
    case BISECT_GROUP_LAYER: return u.layer;
    case BISECT_GROUP_SLOT: return info->gemm != TGEMM_NONE ? (int)info->forward : (int)u.slot;
    case BISECT_GROUP_ROLE: return info->gemm != TGEMM_NONE ? TSLOT_COUNT + (int)info->gemm : (int)u.slot;
    default: return -1;
    }
}

/* Units i and j into one group. */
static void join_groups(bisect_report *rep, int i, int j)
{
    int gi = rep->group_of[i], gj = rep->group_of[j];
    for (int k = 0; k < rep->n_units; k++)
        if (rep->group_of[k] == gi) rep->group_of[k] = gj;
}

/* Groups: a unit the trainer refuses alone joins the first unit that makes
 * it valid (union-find over such pairs); then, coarser than units, the units
 * that share c->group_by's key. */
static int group_units(const bisect_config *c, bisect_report *rep, char *err, size_t errlen)
{
    int n = rep->n_units;
    for (int i = 0; i < n; i++) rep->group_of[i] = i;
    tplan tmp;
    char why[512];
    for (int i = 0; i < n; i++) {
        if (tplan_apply_units(&c->good, &c->bad, &rep->units[i], 1, &tmp, why, sizeof why) == 0) continue;
        int joined = 0;
        for (int j = 0; j < n && !joined; j++) {
            if (j == i) continue;
            tplan_unit pair[2] = {rep->units[i], rep->units[j]};
            if (tplan_apply_units(&c->good, &c->bad, pair, 2, &tmp, NULL, 0) == 0) {
                join_groups(rep, i, j);
                joined = 1;
            }
        }
        if (!joined) {
            char u[96];
            tplan_unit_string(&rep->units[i], u, sizeof u);
            snprintf(err, errlen, "unit %s cannot switch to the bad plan's setting alone or with one other unit: %s", u,
                     why);
            return -1;
        }
    }
    if (c->group_by != BISECT_GROUP_UNIT)
        for (int i = 0; i < n; i++)
            for (int j = 0; j < i; j++)
                if (grouping_key(c->group_by, rep->units[i]) == grouping_key(c->group_by, rep->units[j])) {
                    join_groups(rep, i, j);
                    break;
                }
    /* renumber groups 0..n_groups-1 in unit order */
    int *map = malloc((size_t)n * sizeof *map);
    if (!map) return snprintf(err, errlen, "out of memory"), -1;
    for (int i = 0; i < n; i++) map[i] = -1;
    rep->n_groups = 0;
    for (int i = 0; i < n; i++) {
        int g = rep->group_of[i];
        if (map[g] < 0) map[g] = rep->n_groups++;
        rep->group_of[i] = map[g];
    }
    free(map);
    return 0;
}

void bisect_group_string(const bisect_report *rep, int g, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < rep->n_units && n < len; i++)
        if (rep->group_of[i] == g) {
            char u[96];
            tplan_unit_string(&rep->units[i], u, sizeof u);
            n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? " + " : "", u);
        }
}

void bisect_report_free(bisect_report *rep)
{
    dd_result_free(&rep->dd);
    cmp_report_free(&rep->confirm);
    for (int a = 0; a < CMP_MAX_ARMS; a++) free(rep->confirm_ids[a]);
    memset(rep->confirm_ids, 0, sizeof rep->confirm_ids);
    for (int k = 0; k < rep->n_windows; k++) {
        bisect_windows *ws = &rep->windows[k];
        cmp_report_free(&ws->rep);
        for (int a = 0; a < CMP_MAX_ARMS; a++) free(ws->ids[a]);
        free(ws->to_bad);
        free(ws->to_good);
    }
    free(rep->windows);
    rep->windows = NULL;
    rep->n_windows = 0;
    for (int k = 0; k < rep->n_refined; k++) {
        if (rep->refined[k].rep) bisect_report_free(rep->refined[k].rep);
        free(rep->refined[k].rep);
        free(rep->refined[k].cfg);
    }
    free(rep->refined);
    rep->refined = NULL;
    rep->n_refined = 0;
}

/* The culprits, the rest and the ddmax set judged at the largest count; when
 * the whole bad plan did not SHIFT (sanity 2), the whole bad plan ("bad"),
 * so the report says by how much it moved the loss and how sure that is. */
static int confirm(const bisect_config *c, bisect_report *rep, char *err, size_t errlen)
{
    cmp_config *cc = &rep->confirm_cfg;
    memset(cc, 0, sizeof *cc);
    cmp_train_ctx *tc = malloc(sizeof *tc);
    if (!tc) return snprintf(err, errlen, "out of memory"), 1;
    *tc = c->train;
    snprintf(cc->arms[0].name, CMP_NAME_MAX, "good");
    tc->plans[0] = c->good;
    rep->confirm_ids[0] = identity(&c->good);
    cc->arms[0].identity = rep->confirm_ids[0];
    cc->n_arms = 1;
    const dd_result *d = &rep->dd;
    struct {
        const int *groups;
        int n;
        char name[CMP_NAME_MAX];
    } sets[CMP_MAX_ARMS];
    int ns = 0;
    int *all = malloc((size_t)rep->n_groups * sizeof *all);
    if (!all) return free(tc), snprintf(err, errlen, "out of memory"), 1;
    for (int g = 0; g < rep->n_groups; g++) all[g] = g;
    if (d->sanity_failed == 2) {
        sets[ns].groups = all;
        sets[ns].n = rep->n_groups;
        snprintf(sets[ns++].name, CMP_NAME_MAX, "bad");
    }
    for (int k = 0; k < d->n_culprits && ns < CMP_MAX_ARMS - 3; k++) {
        sets[ns].groups = d->culprit_units + d->culprit_start[k];
        sets[ns].n = d->culprit_len[k];
        snprintf(sets[ns++].name, CMP_NAME_MAX, "culprit%d", k + 1);
    }
    if (d->n_rest > 0 && d->n_culprits > 0) {
        sets[ns].groups = d->rest;
        sets[ns].n = d->n_rest;
        snprintf(sets[ns++].name, CMP_NAME_MAX, "rest");
    }
    if (c->ddmax && d->n_clean > 0) {
        sets[ns].groups = d->clean;
        sets[ns].n = d->n_clean;
        snprintf(sets[ns++].name, CMP_NAME_MAX, "largest-clean");
    }
    int rc = 0;
    for (int k = 0; k < ns && !rc; k++) {
        int a = cc->n_arms;
        if (plan_of(c, rep, sets[k].groups, sets[k].n, &tc->plans[a], err, errlen)) continue;
        char *id = identity(&tc->plans[a]);
        int dup = 0;
        for (int b = 0; b < a && id; b++) dup |= strcmp(id, cc->arms[b].identity) == 0;
        if (!id || dup) {
            free(id);
            continue;
        }
        tc->planted[a] = c->train.planted[0];
        snprintf(cc->arms[a].name, CMP_NAME_MAX, "%s", sets[k].name);
        rep->confirm_ids[a] = id;
        cc->arms[a].identity = id;
        cc->n_arms++;
    }
    if (cc->n_arms > 1) rc = study(c, rep, cc, tc, c->schedule[c->n_schedule - 1], rep->margin, &rep->confirm, err, errlen);
    free(tc);
    free(all);
    return rc;
}

/* "mlp.up@0=bf16:split_k,optimizer.adamw=fp32:torch": plan p's choices for
 * the units of the given groups, as overrides a switch applies (malloc'd) */
static char *overrides_of(const tplan *p, const bisect_report *rep, const int *groups, int n)
{
    const size_t per_unit = 96 + 16 + 128 + 3; /* unit, path, variant, '=', ':', ',' */
    size_t cap = per_unit * (size_t)rep->n_units + 1, used = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    s[0] = '\0';
    for (int i = 0; i < rep->n_units; i++) {
        if (!in_groups(rep->group_of[i], groups, n)) continue;
        const tplan_unit *u = &rep->units[i];
        const tslot_choice *ch = tplan_choice_at(p, u->slot, u->layer);
        char name[96], variant[128];
        tplan_unit_string(u, name, sizeof name);
        tplan_choice_variant_string(p, u->slot, ch, variant, sizeof variant);
        used += (size_t)snprintf(s + used, cap - used, "%s%s=%s:%s", used ? "," : "", name, kpath_name(ch->path), variant);
    }
    return s;
}

/* Why the trainer would refuse to switch the culprit's units mid-run (""
 * when it switches them): a slot that holds training state keeps its path
 * (and some their variant) for the whole run, as tmodel_rebind rules; and
 * the overrides must turn good into the culprit's plan and back. */
static void switch_check(const bisect_config *c, const bisect_report *rep, const int *groups, int n, const tplan *on,
                         const bisect_windows *ws, tplan *tmp, char *why, size_t len)
{
    why[0] = '\0';
    for (int i = 0; i < rep->n_units; i++) {
        if (!in_groups(rep->group_of[i], groups, n)) continue;
        const tplan_unit *u = &rep->units[i];
        tfixed fixed = tslot_get(u->slot)->fixed;
        const tslot_choice *g = tplan_choice_at(&c->good, u->slot, u->layer), *b = tplan_choice_at(&c->bad, u->slot, u->layer);
        if ((fixed != TFIXED_NO && g->path != b->path) || (fixed == TFIXED_CHOICE && g->variant != b->variant)) {
            char name[96];
            tplan_unit_string(u, name, sizeof name);
            snprintf(why, len, "slot %s holds training state: the trainer fixes it for the whole run", name);
            return;
        }
    }
    char err[300] = "";
    *tmp = c->good;
    if (tplan_set(tmp, ws->to_bad, err, sizeof err) || !tplan_equal(tmp, on)) {
        snprintf(why, len, "switching %.120s on good does not give the culprit's plan%s%.200s", ws->to_bad,
                 err[0] ? ": " : "", err);
        return;
    }
    *tmp = *on;
    if (tplan_set(tmp, ws->to_good, err, sizeof err) || !tplan_equal(tmp, &c->good))
        snprintf(why, len, "switching %.120s back does not give the good plan%s%.200s", ws->to_good, err[0] ? ": " : "",
                 err);
}

/* plan's identity followed by its switches: "{...}|switch@12:mlp.up@0=bf16:fused" (malloc'd) */
static char *window_identity(const tplan *plan, const tswitch *sw, int n)
{
    char *id = identity(plan);
    if (!id) return NULL;
    size_t len = strlen(id) + 1;
    for (int i = 0; i < n; i++) len += strlen(sw[i].overrides) + 32;
    char *s = realloc(id, len);
    if (!s) {
        free(id);
        return NULL;
    }
    size_t used = strlen(s);
    for (int i = 0; i < n; i++) used += (size_t)snprintf(s + used, len - used, "|switch@%ld:%s", sw[i].step, sw[i].overrides);
    return s;
}

/* Culprit k's window arms (bisect.h) against good at the largest count. */
static int run_windows(const bisect_config *c, bisect_report *rep, int k, bisect_windows *ws, char *err, size_t errlen)
{
    const dd_result *d = &rep->dd;
    const int *groups = d->culprit_units + d->culprit_start[k];
    const int n = d->culprit_len[k], W = c->windows;
    const long S = c->train.base.steps;
    ws->culprit = k;
    for (int w = 0; w < W; w++) {
        ws->from[w] = (long)((long long)w * S / W);
        ws->to[w] = w == W - 1 ? S : (long)((long long)(w + 1) * S / W);
    }
    cmp_train_ctx *tc = malloc(sizeof *tc);
    tplan *on = malloc(sizeof *on), *tmp = malloc(sizeof *tmp);
    ws->to_bad = overrides_of(&c->bad, rep, groups, n);
    ws->to_good = overrides_of(&c->good, rep, groups, n);
    int rc = 0;
    if (!tc || !on || !tmp || !ws->to_bad || !ws->to_good) rc = (snprintf(err, errlen, "out of memory"), 1);
    char why[300];
    if (!rc && plan_of(c, rep, groups, n, on, why, sizeof why))
        snprintf(ws->why, sizeof ws->why, "the culprit's plan is refused: %s", why);
    if (!rc && !ws->why[0]) switch_check(c, rep, groups, n, on, ws, tmp, ws->why, sizeof ws->why);
    if (!rc && ws->why[0] && c->progress) fprintf(c->progress, "bisect: culprit %d: no windows: %s\n", k + 1, ws->why);
    if (!rc && !ws->why[0]) {
        cmp_config *cc = &ws->cfg;
        memset(cc, 0, sizeof *cc);
        *tc = c->train;
        snprintf(cc->arms[0].name, CMP_NAME_MAX, "good");
        tc->plans[0] = c->good;
        ws->ids[0] = identity(&c->good);
        cc->arms[0].identity = ws->ids[0];
        for (int w = 0; w < W; w++) {
            int a = w + 1, m = 0;
            tswitch *sw = ws->switches[w];
            /* Window 0 starts as the culprit's plan: the plan a run starts
             * with is how the trainer sets step 0's (a switch at step 0, which
             * the hook also takes, would rebind a model built under good's).
             * Its runs are then the culprit's confirmation runs up to to[0]. */
            if (w == 0) tc->plans[a] = *on;
            else {
                tc->plans[a] = c->good;
                sw[m++] = (tswitch){ws->from[w], ws->to_bad};
            }
            if (w < W - 1) sw[m++] = (tswitch){ws->to[w], ws->to_good};
            ws->n_switches[w] = m;
            ws->ids[a] = window_identity(&tc->plans[a], sw, m);
            if (c->planted_bug == BISECT_BUG_WINDOWS_IGNORE_SWITCHES) {
                tc->plans[a] = *on;
                m = 0;
            }
            memcpy(tc->switches[a], sw, (size_t)m * sizeof *sw);
            tc->n_switches[a] = m;
            tc->planted[a] = c->train.planted[0];
            cc->arms[a].identity = ws->ids[a];
            snprintf(cc->arms[a].name, CMP_NAME_MAX, "w%d [%ld,%ld)", a, ws->from[w], ws->to[w]);
            if (!ws->ids[a]) rc = (snprintf(err, errlen, "out of memory"), 1);
        }
        cc->n_arms = W + 1;
        const int smax = c->schedule[c->n_schedule - 1];
        if (c->progress)
            fprintf(c->progress, "bisect: culprit %d on for one of %d windows of the %ld steps at a time, at %d seeds\n",
                    k + 1, W, S, smax);
        if (!rc && !ws->ids[0]) rc = (snprintf(err, errlen, "out of memory"), 1);
        if (!rc) rc = study(c, rep, cc, tc, smax, rep->margin, &ws->rep, err, errlen);
    }
    free(tc);
    free(on);
    free(tmp);
    return rc;
}

static int search(const bisect_config *c, bisect_report *rep, double t0, char *err, size_t errlen);
static int refine(const bisect_config *c, bisect_report *rep, char *err, size_t errlen);

int bisect_run(const bisect_config *c, bisect_report *rep, char *err, size_t errlen)
{
    double t0 = now_seconds();
    int rc = search(c, rep, t0, err, errlen);
    rep->seconds = now_seconds() - t0;
    return rc;
}

static int search(const bisect_config *c, bisect_report *rep, double t0, char *err, size_t errlen)
{
    memset(rep, 0, sizeof *rep);
    dd_result_init(&rep->dd);
    if (!c->results_dir) return snprintf(err, errlen, "bisect needs a results directory (the run cache)"), 2;
    if (c->windows && (c->windows < 2 || c->windows > BISECT_MAX_WINDOWS || c->windows > c->train.base.steps))
        return snprintf(err, errlen, "%d windows: from 2 to %d and at most the %ld steps", c->windows,
                        BISECT_MAX_WINDOWS, c->train.base.steps),
               2;
    int n = tplan_diff(&c->good, &c->bad, c->train.base.model.n_layer, rep->units, BISECT_MAX_UNITS);
    if (n < 0) return snprintf(err, errlen, "the good and the bad plan are for different model families"), 2;
    if (n == 0) return snprintf(err, errlen, "the good and the bad plan do not differ: nothing to bisect"), 2;
    if (n > BISECT_MAX_UNITS) return snprintf(err, errlen, "%d differing units: at most %d", n, BISECT_MAX_UNITS), 2;
    rep->n_units = n;
    if (group_units(c, rep, err, errlen)) return 2;
    /* the noise floor: the null arm at the largest count */
    const int smax = c->schedule[c->n_schedule - 1];
    if (c->progress)
        fprintf(c->progress, "bisect: %d units differ (%d groups%s%s); the noise floor: the null arm at %d seeds\n", n,
                rep->n_groups, c->group_by != BISECT_GROUP_UNIT ? " by " : "",
                c->group_by != BISECT_GROUP_UNIT ? bisect_grouping_name(c->group_by) : "", smax);
    {
        cmp_config cc;
        memset(&cc, 0, sizeof cc);
        cmp_train_ctx *tc = malloc(sizeof *tc);
        if (!tc) return snprintf(err, errlen, "out of memory"), 1;
        *tc = c->train;
        char *id = identity(&c->good);
        size_t len = id ? strlen(id) + 16 : 0;
        char *nid = id ? malloc(len) : NULL;
        if (!nid) {
            free(id);
            free(tc);
            return snprintf(err, errlen, "out of memory"), 1;
        }
        snprintf(nid, len, "%s|null-flip", id);
        snprintf(cc.arms[0].name, CMP_NAME_MAX, "good");
        snprintf(cc.arms[1].name, CMP_NAME_MAX, "null");
        cc.arms[0].identity = id;
        cc.arms[1].identity = nid;
        cc.arms[1].is_null = 1;
        cc.n_arms = 2;
        tc->plans[0] = tc->plans[1] = c->good;
        tc->planted[1] = tc->planted[0] = c->train.planted[0];
        cmp_report r;
        int rc = study(c, rep, &cc, tc, smax, c->margin, &r, err, errlen);
        rep->chaos_sd = r.chaos_sd;
        rep->margin = c->margin > 0 ? c->margin : r.chaos_sd;
        cmp_report_free(&r);
        free(id);
        free(nid);
        free(tc);
        if (rc) return rc;
        if (!(rep->margin > 0))
            return snprintf(err, errlen, "the null arm ran bit-identical to the good plan (no chaos to measure a margin "
                                         "from): give --margin"),
                   2;
    }
    dd_problem p;
    memset(&p, 0, sizeof p);
    p.n_units = rep->n_groups;
    memcpy(p.schedule, c->schedule, sizeof p.schedule);
    p.n_schedule = c->n_schedule;
    p.max_judgements = c->max_judgements;
    p.oracle = judge;
    p.planted_bug = c->planted_bug == BISECT_BUG_STOP_AT_FIRST ? DD_BUG_STOP_AT_FIRST : DD_BUG_NONE;
    oracle_ctx o = {c, rep, err, errlen, t0};
    p.ctx = &o;
    if (dd_rddmin(&p, &rep->dd)) return err[0] ? 1 : (snprintf(err, errlen, "%s", rep->dd.error), 1);
    if (c->ddmax && !rep->dd.sanity_failed) {
        dd_result mx;
        dd_result_init(&mx);
        if (dd_ddmax(&p, &mx)) {
            dd_result_free(&mx);
            return err[0] ? 1 : (snprintf(err, errlen, "%s", mx.error), 1);
        }
        rep->dd.clean = mx.clean;
        rep->dd.n_clean = mx.n_clean;
        rep->dd.judgements += mx.judgements;
        rep->dd.cache_hits += mx.cache_hits;
        rep->dd.samples += mx.samples;
        mx.clean = NULL;
        dd_result_free(&mx);
    }
    if (rep->dd.sanity_failed == 1) return 0;
    int rc = confirm(c, rep, err, errlen);
    if (!rc && c->windows && rep->dd.n_culprits > 0) {
        rep->windows = calloc((size_t)rep->dd.n_culprits, sizeof *rep->windows);
        if (!rep->windows) return snprintf(err, errlen, "out of memory"), 1;
        rep->n_windows = rep->dd.n_culprits;
        for (int k = 0; k < rep->n_windows && !rc; k++) rc = run_windows(c, rep, k, &rep->windows[k], err, errlen);
    }
    if (!rc && c->refine && c->group_by != BISECT_GROUP_UNIT && rep->dd.n_culprits > 0) rc = refine(c, rep, err, errlen);
    return rc;
}

/* Each culprit set of more than one unit searched unit by unit: good
 * against good with the set switched to bad, at the outer search's margin
 * and through its run cache (the set's own runs are cached already). */
static int refine(const bisect_config *c, bisect_report *rep, char *err, size_t errlen)
{
    const dd_result *d = &rep->dd;
    rep->refined = calloc((size_t)d->n_culprits, sizeof *rep->refined);
    if (!rep->refined) return snprintf(err, errlen, "out of memory"), 1;
    for (int k = 0; k < d->n_culprits; k++) {
        const int *groups = d->culprit_units + d->culprit_start[k];
        const int n = d->culprit_len[k];
        int units = 0;
        for (int i = 0; i < rep->n_units; i++) units += in_groups(rep->group_of[i], groups, n);
        if (units < 2) continue;
        bisect_refinement *r = &rep->refined[rep->n_refined];
        r->culprit = k;
        r->n_units = units;
        r->cfg = malloc(sizeof *r->cfg);
        r->rep = calloc(1, sizeof *r->rep);
        rep->n_refined++;
        if (!r->cfg || !r->rep) return snprintf(err, errlen, "out of memory"), 1;
        *r->cfg = *c;
        if (plan_of(c, rep, groups, n, &r->cfg->bad, err, errlen)) return 1;
        r->cfg->group_by = BISECT_GROUP_UNIT;
        r->cfg->refine = 0;
        r->cfg->windows = 0;
        r->cfg->ddmax = 0;
        r->cfg->margin = rep->margin;
        if (c->progress) fprintf(c->progress, "bisect: culprit %d, its %d units one by one\n", k + 1, units);
        int rc = bisect_run(r->cfg, r->rep, err, errlen);
        rep->runs_executed += r->rep->runs_executed;
        rep->runs_cached += r->rep->runs_cached;
        if (rc) return rc;
    }
    return 0;
}

void bisect_print(FILE *fp, const bisect_config *c, const bisect_report *rep)
{
    const dd_result *d = &rep->dd;
    char buf[2048];
    fprintf(fp, "%d units differ (%d groups%s%s); margin %.5f%s\n", rep->n_units, rep->n_groups,
            c->group_by != BISECT_GROUP_UNIT ? " by " : "", c->group_by != BISECT_GROUP_UNIT ? bisect_grouping_name(c->group_by) : "",
            rep->margin, c->margin > 0 ? "" : " (the null arm's chaos sd)");
    if (d->sanity_failed == 1) fprintf(fp, "sanity: the good plan against itself came out SHIFT: no bisection\n");
    if (d->sanity_failed == 2)
        fprintf(fp, "sanity: the whole bad plan does not SHIFT against the good one (arm bad below): nothing to bisect\n");
    for (int k = 0; k < d->n_culprits; k++) {
        size_t m = 0;
        for (int i = 0; i < d->culprit_len[k]; i++) {
            char g[1024];
            bisect_group_string(rep, d->culprit_units[d->culprit_start[k] + i], g, sizeof g);
            m += (size_t)snprintf(buf + m, sizeof buf - m > m ? sizeof buf - m : 0, "%s%s", i ? " + " : "", g);
            if (m >= sizeof buf) break;
        }
        fprintf(fp, "culprit %d%s: %s\n", k + 1, d->culprit_confirmed[k] ? "" : " (not confirmed at the largest count)",
                buf);
    }
    if (!d->sanity_failed)
        fprintf(fp, "the rest (%d group%s) switched to bad: %s\n", d->n_rest, d->n_rest == 1 ? "" : "s",
                dd_verdict_name(d->rest_verdict));
    if (c->ddmax) {
        size_t m = 0;
        buf[0] = '\0';
        for (int i = 0; i < d->n_clean && m < sizeof buf; i++) {
            char g[1024];
            bisect_group_string(rep, d->clean[i], g, sizeof g);
            m += (size_t)snprintf(buf + m, sizeof buf - m, "%s%s", i ? ", " : "", g);
        }
        fprintf(fp, "largest EQUIVALENT subset (%d of %d groups): %s\n", d->n_clean, rep->n_groups,
                d->n_clean ? buf : "(none)");
    }
    if (rep->confirm.n_arms > 1) {
        fprintf(fp, "\n");
        cmp_print_table(fp, &rep->confirm_cfg, &rep->confirm);
    }
    for (int k = 0; k < rep->n_windows; k++) {
        const bisect_windows *ws = &rep->windows[k];
        if (ws->why[0]) {
            fprintf(fp, "\nculprit %d over the steps: no windows: %s\n", ws->culprit + 1, ws->why);
            continue;
        }
        fprintf(fp, "\nculprit %d over the steps: switched to bad for one window [from, to) of the steps only\n",
                ws->culprit + 1);
        cmp_print_table(fp, &ws->cfg, &ws->rep);
    }
    long judgements = d->judgements, hits = d->cache_hits;
    for (int k = 0; k < rep->n_refined; k++) {
        const bisect_refinement *r = &rep->refined[k];
        fprintf(fp, "\nculprit %d, its %d units one by one (good against good with culprit %d switched to bad):\n",
                r->culprit + 1, r->n_units, r->culprit + 1);
        bisect_print(fp, r->cfg, r->rep);
        judgements += r->rep->dd.judgements, hits += r->rep->dd.cache_hits;
    }
    fprintf(fp, "%sbisect: %ld judgements (%ld from the verdict cache), %d runs executed, %d from the run cache, %.1f s%s\n",
            rep->n_refined ? "\nall of it: " : "", judgements, hits, rep->runs_executed, rep->runs_cached,
            rep->seconds, d->budget_exhausted ? "; stopped at --max-judgements" : "");
}

const cmp_arm_report *bisect_confirmed_arm(const bisect_report *rep, const char *name)
{
    for (int a = 1; a < rep->confirm.n_arms && a < rep->confirm_cfg.n_arms; a++)
        if (strcmp(rep->confirm_cfg.arms[a].name, name) == 0) return &rep->confirm.arm[a];
    return NULL;
}

/* ,"diff":..,"ci_lo":..,"ci_hi":..,"p":..,"verdict":".." of a confirmation or
 * window arm at the largest count (nulls when the arm did not run) */
static void write_effect(FILE *fp, const cmp_arm_report *ar)
{
    if (!ar || ar->pairs < 1) {
        fprintf(fp, ",\"diff\":null,\"ci_lo\":null,\"ci_hi\":null,\"p\":null,\"verdict\":null");
        return;
    }
    fprintf(fp, ",\"diff\":");
    base_json_double(fp, ar->paired.estimate);
    fprintf(fp, ",\"ci_lo\":");
    base_json_double(fp, ar->paired.ci_lo);
    fprintf(fp, ",\"ci_hi\":");
    base_json_double(fp, ar->paired.ci_hi);
    fprintf(fp, ",\"p\":");
    base_json_double(fp, ar->p_adjusted);
    fprintf(fp, ",\"verdict\":");
    base_json_string(fp, cmp_verdict_name(ar->verdict));
}

static void write_groups(FILE *fp, const bisect_report *rep, const int *groups, int n)
{
    char g[1024];
    fputc('[', fp);
    for (int i = 0; i < n; i++) {
        bisect_group_string(rep, groups[i], g, sizeof g);
        if (i) fputc(',', fp);
        base_json_string(fp, g);
    }
    fputc(']', fp);
}

/* tag: "" or ,"refines":K for a refined culprit's search */
static void write_records(FILE *fp, const bisect_config *c, const bisect_report *rep, const char *tag)
{
    const dd_result *d = &rep->dd;
    for (int k = 0; k < d->n_culprits; k++) {
        fprintf(fp, "{\"record\":\"culprit\"%s,\"index\":%d,\"confirmed\":%s,\"groups\":", tag, k + 1,
                d->culprit_confirmed[k] ? "true" : "false");
        write_groups(fp, rep, d->culprit_units + d->culprit_start[k], d->culprit_len[k]);
        char name[CMP_NAME_MAX];
        snprintf(name, sizeof name, "culprit%d", k + 1);
        write_effect(fp, bisect_confirmed_arm(rep, name));
        fprintf(fp, "}\n");
    }
    for (int k = 0; k < rep->n_windows; k++) {
        const bisect_windows *ws = &rep->windows[k];
        for (int w = 0; w < c->windows; w++) {
            fprintf(fp, "{\"record\":\"window\"%s,\"culprit\":%d,\"window\":%d,\"steps\":[%ld,%ld]", tag,
                    ws->culprit + 1, w + 1, ws->from[w], ws->to[w]);
            write_effect(fp, ws->why[0] || w + 1 >= ws->rep.n_arms ? NULL : &ws->rep.arm[w + 1]);
            fprintf(fp, ",\"why\":");
            if (ws->why[0]) base_json_string(fp, ws->why);
            else fprintf(fp, "null");
            fprintf(fp, "}\n");
        }
    }
    fprintf(fp, "{\"record\":\"bisect\"%s,\"units\":%d,\"groups\":%d,\"group_by\":\"%s\",\"margin\":", tag,
            rep->n_units, rep->n_groups, bisect_grouping_name(c->group_by));
    base_json_double(fp, rep->margin);
    fprintf(fp, ",\"margin_derived\":%s,\"chaos_sd\":", c->margin > 0 ? "false" : "true");
    base_json_double(fp, rep->chaos_sd);
    fprintf(fp, ",\"first_seed\":%llu,\"sanity\":%d,\"culprits\":%d,\"rest\":", (unsigned long long)c->first_seed,
            d->sanity_failed, d->n_culprits);
    write_groups(fp, rep, d->rest, d->n_rest);
    fprintf(fp, ",\"rest_verdict\":");
    base_json_string(fp, dd_verdict_name(d->rest_verdict));
    const cmp_arm_report *rest = bisect_confirmed_arm(rep, "rest");
    fprintf(fp, ",\"rest_effect\":{\"pairs\":%d", rest ? rest->pairs : 0);
    write_effect(fp, rest);
    const cmp_arm_report *whole = bisect_confirmed_arm(rep, "bad");
    fprintf(fp, "},\"bad_effect\":{\"pairs\":%d", whole ? whole->pairs : 0);
    write_effect(fp, whole);
    fprintf(fp, "},\"clean\":");
    if (c->ddmax) write_groups(fp, rep, d->clean, d->n_clean);
    else fprintf(fp, "null");
    fprintf(fp, ",\"windows\":%d,\"refined\":%d", c->windows, rep->n_refined);
    fprintf(fp, ",\"judgements\":%ld,\"verdict_cache_hits\":%ld,\"budget_exhausted\":%s,\"runs_executed\":%d,"
                "\"runs_cached\":%d,\"runs_total\":%d,\"seconds\":",
            d->judgements, d->cache_hits, d->budget_exhausted ? "true" : "false", rep->runs_executed, rep->runs_cached,
            rep->runs_executed + rep->runs_cached);
    base_json_double(fp, rep->seconds);
    fprintf(fp, "}\n");
}

void bisect_write_records(FILE *fp, const bisect_config *c, const bisect_report *rep)
{
    /* the refined searches first, then the outer search's records (its "bisect" record has the totals) */
    for (int k = 0; k < rep->n_refined; k++) {
        char tag[32];
        snprintf(tag, sizeof tag, ",\"refines\":%d", rep->refined[k].culprit + 1);
        write_records(fp, rep->refined[k].cfg, rep->refined[k].rep, tag);
    }
    write_records(fp, c, rep, "");
}
