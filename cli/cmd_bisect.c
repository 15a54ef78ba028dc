/* cli/cmd_bisect.c — `ulpscope bisect`: which slots (per layer and GEMM
 * role) of a bad plan move the loss away from a good plan's (studies/bisect.h). */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/jsonl.h"
#include "base/outfile.h"
#include "cli/commands.h"
#include "cli/experiment.h"
#include "studies/bisect.h"
#include "trainer/backend.h"

typedef struct {
    experiment_options e;
    const char *bad, *bad_plan, *seed_schedule, *plant, *group_by;
    double margin;
    uint64_t first_seed;
    int ddmax, windows, refine;
    long max_judgements;
} bisect_options;

#define F(field) offsetof(bisect_options, field)
static const copt bisect_opts[] = {
    {"--bad", COPT_STRING, F(bad), 0, 0, "bisect", "OVERRIDES", "the bad plan: overrides on the good one (--plan, --set)",
     NULL, 0},
    {"--bad-plan", COPT_STRING, F(bad_plan), 0, 0, "bisect", "PRESET[,OVERRIDES]", "the bad plan: a whole preset", NULL,
     0},
    {"--seed-schedule", COPT_STRING, F(seed_schedule), 0, 0, "bisect", "N1,N2,..",
     "(4,8,16) paired seeds per judgement, grown while a configuration looks clean", NULL, 0},
    {"--first-seed", COPT_SEED, F(first_seed), 0, 0, "bisect", "S", "(1) judgements at n seeds use S .. S+n-1", NULL, 0},
    {"--alpha", COPT_DOUBLE, F(e.alpha), 0.0001, 0.5, "bisect", "A", "(0.01) per judgement, split over the schedule",
     NULL, COPT_MAX_OPEN},
    {"--margin", COPT_DOUBLE, F(margin), 0, INFINITY, "bisect", "X", "(the null arm's chaos sd) equivalence margin", NULL,
     COPT_MAX_OPEN},
    {"--ddmax", COPT_FLAG, F(ddmax), 0, 0, "bisect", "", "also find the largest subset of the bad plan that is EQUIVALENT",
     NULL, 0},
    {"--group-by", COPT_STRING, F(group_by), 0, 0, "bisect", "unit|layer|slot|role",
     "(unit) search over coarser groups: each layer's units, each GEMM's roles in every layer, or the forward, dgrad "
     "and wgrad GEMMs each together; then bisect inside a culprit with --refine (or --bad)",
     NULL, 0},
    {"--refine", COPT_FLAG, F(refine), 0, 0, "bisect", "",
     "with --group-by layer|slot|role: then search each culprit group unit by unit (its own runs only)", NULL, 0},
    {"--windows", COPT_INT, F(windows), 2, BISECT_MAX_WINDOWS, "bisect", "W",
     "(off) then each culprit on for one of W equal windows of the steps only: which part of training it matters "
     "in (culprits x W x the largest seed count more runs)",
     NULL, 0},
    {"--max-judgements", COPT_LONG, F(max_judgements), 1, 1000000, "bisect", "N", "(1000) configuration x count budget",
     NULL, 0},
    {"--replicas", COPT_INT, F(e.replicas), 1, TTRAIN_REPLICAS_MAX, "bisect", "R",
     "(64 on cuda, 8 on cpu) runs per process at once: an arm's runs go through the replica engine R at a time", NULL,
     0},
    JOBS_OPTION_ROWS("bisect", e.jobs, e.jobs_worker, e.jobs_bug),
    {"--results", COPT_STRING, F(e.results_dir), 0, 0, "bisect", "DIR", "run cache (default: a temporary one)", NULL, 0},
    {"--json", COPT_STRING, F(e.json_path), 0, 0, "bisect", "FILE", "JSON Lines ('-': stdout)", NULL, 0},
    {"--val-tokens", COPT_LONG, F(e.val_tokens), 1, 1L << 40, "bisect", "N", "(1048576) validation windows", NULL, 0},
    {"--plant-truncation", COPT_STRING, F(plant), 0, 0, "bisect", "SLOT[@LAYER][:VARIANT]",
     "self-test: that site's stores truncate (a planted culprit bisect must find)", NULL, 0},
};
#undef F

static int parse_seed_schedule(const char *s, bisect_config *c)
{
    c->n_schedule = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 2 || v > 100000 || (*end && *end != ',') || c->n_schedule == DD_MAX_SCHEDULE ||
            (c->n_schedule && v <= c->schedule[c->n_schedule - 1]))
            return -1;
        c->schedule[c->n_schedule++] = (int)v;
        p = *end ? end + 1 : end;
        if (*end && !*p) return -1;
    }
    return c->n_schedule ? 0 : -1;
}

int cmd_bisect(int argc, char **argv)
{
    typedef struct {
        train_options t;
        bisect_options o;
        bisect_config c;
        bisect_report rep;
    } state;
    state *s = calloc(1, sizeof *s);
    if (!s) return base_error("bisect", "out of memory");
    train_options_defaults(&s->t);
    experiment_options_defaults(&s->o.e);
    s->o.e.alpha = 0.01;
    s->o.seed_schedule = "4,8,16";
    s->o.first_seed = 1;
    s->o.max_judgements = 1000;
    copt_table tables[2] = {train_options_table(&s->t), {bisect_opts, (int)(sizeof bisect_opts / sizeof bisect_opts[0]), &s->o}};
    int status = copt_parse("bisect", argc, argv, tables, 2, &s->t.seen);
    if (!status && s->t.help) {
        fprintf(stdout,
                "usage: ulpscope bisect [training options: the good plan is --plan/--set] (--bad OVERRIDES | --bad-plan P)\n\n"
                "Finds which of the units where the plans differ (slot x layer x GEMM role) move the final validation\n"
                "loss: stochastic delta debugging (rddmin with a growing sample schedule, as Verrou's verrou_dd) with a\n"
                "paired comparison against the good plan as the oracle, at the noise floor a null arm measures.\n"
                "--ddmax also finds the largest part of the bad plan that stays EQUIVALENT.\n"
                "--windows W then runs each culprit switched to bad for one of W equal windows of the steps only\n"
                "(the trainer's plan switches), W arms against good at the largest seed count.\n\n");
        copt_help(stdout, tables, 2);
        free(s);
        return 0;
    }
    if (!status) status = train_options_finish(&s->t, "bisect");
    bisect_config *c = &s->c;
    char err[1024], *recipe = NULL, tmpdir[64] = "";
    if (!status && parse_seed_schedule(s->o.seed_schedule, c))
        status = base_error("bisect", "--seed-schedule %s: increasing seed counts >= 2, comma separated (e.g. 4,8,16)",
                           s->o.seed_schedule);
    if (!status && s->o.group_by && bisect_grouping_parse(s->o.group_by, &c->group_by))
        status = base_error("bisect", "--group-by %s: unit, layer, slot or role", s->o.group_by);
    if (!status && s->o.refine && c->group_by == BISECT_GROUP_UNIT)
        status = base_error("bisect", "--refine searches inside the culprit groups of --group-by layer, slot or role: "
                                      "give one of those");
    if (!status && s->o.windows > s->t.cfg.steps)
        status = base_error("bisect", "--windows %d: more windows than the run's %ld steps", s->o.windows, s->t.cfg.steps);
    if (!status) status = experiment_setup("bisect", &s->t, &s->o.e, CMP_VARY_BOTH, &c->train, &recipe);
    if (!status) {
        c->good = s->t.cfg.plan;
        status = experiment_bad_plan("bisect", &s->t, s->o.bad, s->o.bad_plan, &c->bad);
    }
    if (!status && s->o.plant) {
        status = experiment_plant("bisect", s->o.plant, &c->bad, s->t.cfg.model.n_layer);
        if (!status)
            for (int a = 0; a < CMP_MAX_ARMS; a++) c->train.planted[a] = KBUG_TRUNCATE_OUTPUT;
    }
    if (!status && s->o.e.jobs_worker) {
        /* a --jobs worker: set up as its parent (the planted site included), it runs what the parent sends */
        status = jobs_serve("bisect", s->o.e.jobs_worker, &c->train, recipe);
        free(recipe);
        free(s);
        return status;
    }
    if (!status) {
        /* both plans must be runnable on the backend */
        cmp_arm arms[2];
        memset(arms, 0, sizeof arms);
        snprintf(arms[0].name, CMP_NAME_MAX, "good");
        snprintf(arms[1].name, CMP_NAME_MAX, "bad");
        cmp_train_ctx *tc = malloc(sizeof *tc);
        if (!tc) status = base_error("bisect", "out of memory");
        else {
            *tc = c->train;
            tc->plans[0] = c->good;
            tc->plans[1] = c->bad;
            if (cmp_train_check_arms(tc, arms, 2, err, sizeof err)) status = base_error("bisect", "%s", err);
            free(tc);
        }
    }
    jobs_pool *pool = NULL;
    if (!status) status = experiment_jobs("bisect", &s->o.e, argc, argv, recipe, &pool);
    if (!status && !s->o.e.results_dir) {
        snprintf(tmpdir, sizeof tmpdir, "/tmp/ulpscope_bisect_XXXXXX");
        if (!mkdtemp(tmpdir)) {
            tmpdir[0] = '\0';
            status = base_error("bisect", "cannot create a temporary results directory");
        }
    }
    if (!status) {
        c->alpha = s->o.e.alpha;
        c->margin = s->o.margin;
        c->first_seed = s->o.first_seed;
        c->ddmax = s->o.ddmax;
        c->windows = s->o.windows;
        c->refine = s->o.refine;
        c->max_judgements = s->o.max_judgements;
        c->results_dir = s->o.e.results_dir ? s->o.e.results_dir : tmpdir;
        c->recipe_json = recipe;
        c->progress = s->t.quiet ? NULL : stderr;
        if (s->o.e.json_path && strcmp(s->o.e.json_path, "-") != 0) {
            if (base_outfile_check("bisect", s->o.e.json_path)) status = BASE_EXIT_USAGE; /* before any run */
        }
    }
    if (!status) {
        if (pool) {
            c->runner = jobs_pool_bisect_runner;
            c->runner_ctx = pool;
        }
        status = bisect_run(c, &s->rep, err, sizeof err);
        jobs_pool_free(pool); /* the workers end before the report */
        pool = NULL;
        if (status == 2) status = base_error("bisect", "%s", err);
        else if (status) fprintf(stderr, "ulpscope bisect: error: %s\n", err);
    }
    if (!status) {
        FILE *fp = s->o.e.json_path && strcmp(s->o.e.json_path, "-") == 0 ? stderr : stdout;
        bisect_print(fp, c, &s->rep);
        if (s->o.e.json_path) {
            base_outfile o;
            if (base_outfile_open(&o, "bisect", s->o.e.json_path)) status = 1;
            else {
                size_t n = strlen(recipe) + 32;
                char *hdr = malloc(n);
                if (hdr) snprintf(hdr, n, "\"recipe\":%s", recipe);
                base_json_header(o.fp, "bisect", hdr ? hdr : "\"error\":\"out of memory\"");
                free(hdr);
                bisect_write_records(o.fp, c, &s->rep);
                if (s->rep.confirm.n_arms > 1) cmp_write_arm_records(o.fp, &s->rep.confirm_cfg, &s->rep.confirm);
                status = base_outfile_commit(&o, "bisect") ? 1 : 0;
            }
        }
    }
    if (tmpdir[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0) fprintf(stderr, "ulpscope bisect: warning: could not remove %s\n", tmpdir);
    }
    jobs_pool_free(pool);
    bisect_report_free(&s->rep);
    free(recipe);
    free(s);
    return status;
}
