/* cli/cmd_compare.c — `ulpscope compare`: do these plans give different
 * final losses?  Arms x paired seeds on the trainer, a null arm for the noise
 * floor, a verdict per arm (studies/compare.h). */
#include <ctype.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/outfile.h"
#include "cli/commands.h"
#include "cli/experiment.h"

typedef struct {
    experiment_options e;
    copt_list arms;
    const char *null_arm;   /* yes|no */
    double margin;
    int until_decided, max_runs, seed_batch;
    uint64_t first_seed;
    const char *plant;      /* an arm whose runs truncate their stores (self-test) */
} compare_options;

#define F(field) offsetof(compare_options, field)
static const copt compare_opts[] = {
    {"--arm", COPT_LIST, F(arms), 0, 0, "compare", "NAME=OVERRIDES",
     "an arm: overrides on the base plan (--arm fp8head=lm_head=fp8:fast), or preset:P[,OVERRIDES]", NULL, 0},
    {"--seeds", COPT_STRING, F(e.seeds), 0, 0, "compare", "N|A-B|A,B,..", "(8) seeds every arm runs", NULL, 0},
    {"--vary", COPT_STRING, F(e.vary), 0, 0, "compare", "both|init|data",
     "(both) what the seed varies; the other stays at --seed / --data-seed", NULL, 0},
    {"--null-arm", COPT_STRING, F(null_arm), 0, 0, "compare", "yes|no", "(yes) the base with one flipped ulp", NULL, 0},
    {"--margin", COPT_DOUBLE, F(margin), 0, INFINITY, "compare", "X",
     "(the null arm's chaos sd; with --until-decided, from the first batch, then fixed) equivalence margin", NULL,
     COPT_MAX_OPEN},
    {"--alpha", COPT_DOUBLE, F(e.alpha), 0.0001, 0.5, "compare", "A", "(0.05)", NULL, COPT_MAX_OPEN},
    {"--power", COPT_DOUBLE, F(e.power), 0.5, 1, "compare", "P", "(0.8) for the runs still needed", NULL, COPT_MAX_OPEN},
    {"--until-decided", COPT_FLAG, F(until_decided), 0, 0, "compare", "", "add seeds in batches until every arm is decided",
     NULL, 0},
    {"--max-runs", COPT_INT, F(max_runs), 4, 1000000, "compare", "N", "(200) with --until-decided: all arms together", NULL,
     0},
    {"--seed-batch", COPT_INT, F(seed_batch), 2, 10000, "compare", "K", "(8) with --until-decided: seeds per batch", NULL,
     0},
    {"--first-seed", COPT_SEED, F(first_seed), 0, 0, "compare", "S", "(1) with --until-decided", NULL, 0},
    {"--plant-truncation", COPT_STRING, F(plant), 0, 0, "compare", "ARM",
     "self-test: ARM's stores truncate instead of rounding (a planted bias it must call SHIFT)", NULL, 0},
    {"--replicas", COPT_INT, F(e.replicas), 1, TTRAIN_REPLICAS_MAX, "compare", "R",
     "(64 on cuda, 8 on cpu) runs per process at once: an arm's runs go through the replica engine R at a time", NULL,
     0},
    JOBS_OPTION_ROWS("compare", e.jobs, e.jobs_worker, e.jobs_bug),
    {"--gpus", COPT_INT, F(e.gpus), 1, CMP_MAX_SHARDS, "compare", "N",
     "(1) the seeds as N shards run at once, one process per GPU, into --results; then the verdict", NULL, 0},
    {"--shard", COPT_STRING, F(e.shard), 0, 0, "compare", "I/N",
     "run only the I-th of N shares of the seeds (every arm) into --results, no verdict; merge: rerun without it", NULL,
     0},
    {"--results", COPT_STRING, F(e.results_dir), 0, 0, "compare", "DIR", "cache of finished runs: resume, reuse", NULL, 0},
    {"--json", COPT_STRING, F(e.json_path), 0, 0, "compare", "FILE", "JSON Lines: every run and every arm ('-': stdout)",
     NULL, 0},
    {"--val-tokens", COPT_LONG, F(e.val_tokens), 1, 1L << 40, "compare", "N",
     "(1048576) validation windows cover the split up to N tokens", NULL, 0},
};
#undef F

static void usage(FILE *fp, train_options *t, compare_options *o)
{
    fprintf(fp,
            "usage: ulpscope compare [training options] --arm NAME=OVERRIDES [--arm ...] [options]\n\n"
            "Trains the base plan (--plan, --set) and every arm at the same seeds and judges each arm's final\n"
            "validation loss against the base's, paired by seed: SHIFT (up = worse), EQUIVALENT (within the\n"
            "margin), IDENTICAL (bit for bit) or UNDECIDED (with the runs still needed).  A null arm (the base\n"
            "with one ulp of one initial weight flipped) measures the noise floor; the margin defaults to its\n"
            "chaos sd.  Example:\n"
            "  ulpscope compare --model modern --backend cuda --steps 800 --seeds 16 \\\n"
            "      --arm tall=optimizer.muon=bf16:tall --arm fp8head=lm_head=fp8:fast --results cmp/\n\n");
    copt_table tables[2] = {train_options_table(t), {compare_opts, (int)(sizeof compare_opts / sizeof compare_opts[0]), o}};
    copt_help(fp, tables, 2);
}

static int valid_arm_name(const char *s, size_t n)
{
    if (n == 0 || n >= CMP_NAME_MAX) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-' && s[i] != '.') return 0;
    return 1;
}

/* One --arm: NAME=OVERRIDES or NAME=preset:P[,OVERRIDES], on the base plan. */
static int build_arm(const char *spec, const train_options *t, cmp_arm *arm, tplan *plan)
{
    const char *eq = strchr(spec, '=');
    if (!eq || !valid_arm_name(spec, (size_t)(eq - spec)))
        return base_error("compare", "--arm %s: expected NAME=OVERRIDES, NAME in [A-Za-z0-9_.-] (at most %d characters)",
                         spec, CMP_NAME_MAX - 1);
    memset(arm, 0, sizeof *arm);
    memcpy(arm->name, spec, (size_t)(eq - spec));
    if (strcmp(arm->name, "base") == 0 || strcmp(arm->name, "null") == 0)
        return base_error("compare", "--arm %s: the names 'base' and 'null' are the base plan's and the null arm's",
                         arm->name);
    arm->spec = eq + 1;
    char err[1024];
    const char *overrides = eq + 1;
    *plan = t->cfg.plan;
    if (strncmp(overrides, "preset:", 7) == 0) {
        char preset[32];
        const char *comma = strchr(overrides + 7, ',');
        size_t k = comma ? (size_t)(comma - overrides - 7) : strlen(overrides + 7);
        if (k == 0 || k >= sizeof preset) return base_error("compare", "--arm %s: preset name missing or too long", spec);
        memcpy(preset, overrides + 7, k);
        preset[k] = '\0';
        /* a preset arm runs on the base's GPU model (--gpu-model) */
        if (tplan_init(plan, preset, t->cfg.model.kind, err, sizeof err) ||
            tplan_set_gpu_model(plan, t->cfg.plan.gpu_model, err, sizeof err))
            return base_error("compare", "--arm %s: %s", arm->name, err);
        overrides = comma ? comma + 1 : NULL;
    }
    if (overrides && tplan_set(plan, overrides, err, sizeof err))
        return base_error("compare", "--arm %s: %s", arm->name, err);
    if (tplan_check_layers(plan, t->cfg.model.n_layer, err, sizeof err))
        return base_error("compare", "--arm %s: %s", arm->name, err);
    return 0;
}

static char *identity_of(const tplan *plan, int is_null, kbug planted)
{
    char *json = tplan_json_alloc(plan);
    if (!json) return NULL;
    size_t n = strlen(json) + 64;
    char *id = malloc(n);
    if (id)
        snprintf(id, n, "%s%s%s%s", json, is_null ? "|null-flip" : "", planted ? "|planted:" : "",
                 planted ? kbug_name(planted) : "");
    free(json);
    return id;
}

typedef struct {
    train_options t;
    compare_options o;
    cmp_train_ctx ctx;
    cmp_config c;
    cmp_report rep;
    char *ids[CMP_MAX_ARMS];
    uint64_t *seeds;
    char *recipe;
    jobs_pool *pool;        /* --jobs N > 1 */
} compare_state;

static void state_free(compare_state *s)
{
    for (int a = 0; a < CMP_MAX_ARMS; a++) free(s->ids[a]);
    free(s->seeds);
    free(s->recipe);
    jobs_pool_free(s->pool);
    cmp_report_free(&s->rep);
    free(s);
}

int cmd_compare(int argc, char **argv)
{
    compare_state *s = calloc(1, sizeof *s);
    if (!s) return base_error("compare", "out of memory");
    train_options_defaults(&s->t);
    experiment_options_defaults(&s->o.e);
    s->o.e.seeds = "8";
    s->o.null_arm = "yes";
    s->o.max_runs = 200;
    s->o.seed_batch = 8;
    s->o.first_seed = 1;
    copt_table tables[2] = {train_options_table(&s->t),
                            {compare_opts, (int)(sizeof compare_opts / sizeof compare_opts[0]), &s->o}};
    int status = copt_parse("compare", argc, argv, tables, 2, &s->t.seen);
    if (!status && s->t.help) {
        usage(stdout, &s->t, &s->o);
        state_free(s);
        return 0;
    }
    if (!status) status = train_options_finish(&s->t, "compare");
    char err[1024];
    cmp_vary vary = CMP_VARY_BOTH;
    cmp_config *c = &s->c;
    if (!status && cmp_vary_parse(s->o.e.vary, &vary))
        status = base_error("compare", "--vary %s: expected both, init or data", s->o.e.vary);
    int with_null = 0;
    if (!status) {
        if (strcmp(s->o.null_arm, "yes") == 0) with_null = 1;
        else if (strcmp(s->o.null_arm, "no") != 0) status = base_error("compare", "--null-arm %s: expected yes or no", s->o.null_arm);
    }
    if (!status && s->o.arms.n == 0) status = base_error("compare", "no --arm given: nothing to compare with the base");
    if (!status && s->o.arms.n + 1 + with_null > CMP_MAX_ARMS)
        status = base_error("compare", "%d arms: at most %d besides the base and the null arm", s->o.arms.n,
                           CMP_MAX_ARMS - 2);
    if (!status && !s->o.until_decided &&
        (copt_given(&s->t.seen, "--max-runs") || copt_given(&s->t.seen, "--seed-batch") ||
         copt_given(&s->t.seen, "--first-seed")))
        status = base_error("compare", "--max-runs, --seed-batch and --first-seed go with --until-decided");
    if (!status && s->o.until_decided && copt_given(&s->t.seen, "--seeds"))
        status = base_error("compare", "--until-decided chooses the seeds (--first-seed, --seed-batch); drop --seeds");
    if (!status && !with_null && !(s->o.margin > 0))
        status = base_error("compare", "--null-arm no needs --margin (the default margin is the null arm's chaos sd)");
    if (!status) status = experiment_setup("compare", &s->t, &s->o.e, vary, &s->ctx, &s->recipe);
    /* arms: base, null, then the user's */
    if (!status) {
        snprintf(c->arms[0].name, CMP_NAME_MAX, "base");
        c->arms[0].spec = "";
        s->ctx.plans[0] = s->t.cfg.plan;
        c->n_arms = 1;
        if (with_null) {
            snprintf(c->arms[1].name, CMP_NAME_MAX, "null");
            c->arms[1].spec = "base + one flipped ulp";
            c->arms[1].is_null = 1;
            s->ctx.plans[1] = s->t.cfg.plan;
            c->n_arms = 2;
        }
        for (int i = 0; i < s->o.arms.n && !status; i++) {
            status = build_arm(s->o.arms.items[i], &s->t, &c->arms[c->n_arms], &s->ctx.plans[c->n_arms]);
            if (!status) c->n_arms++;
        }
        if (!status && s->o.plant) {
            int found = 0;
            for (int a = 2 - !with_null; a < c->n_arms; a++)
                if (strcmp(c->arms[a].name, s->o.plant) == 0) {
                    s->ctx.planted[a] = KBUG_TRUNCATE_OUTPUT;
                    found = 1;
                }
            if (!found) status = base_error("compare", "--plant-truncation %s: no such arm (give one of the --arm names)", s->o.plant);
        }
        for (int a = 0; a < c->n_arms && !status; a++) {
            if (!(s->ids[a] = identity_of(&s->ctx.plans[a], c->arms[a].is_null, s->ctx.planted[a])))
                status = base_error("compare", "out of memory");
            c->arms[a].identity = s->ids[a];
        }
    }
    if (!status && s->o.e.jobs_worker) {
        /* a --jobs worker: set up as its parent, it runs what the parent sends */
        status = jobs_serve("compare", s->o.e.jobs_worker, &s->ctx, s->recipe);
        state_free(s);
        return status;
    }
    if (!status && cmp_train_check_arms(&s->ctx, c->arms, c->n_arms, err, sizeof err))
        status = base_error("compare", "%s", err);
    if (!status && !s->o.until_decided &&
        experiment_parse_seeds(s->o.e.seeds, &s->seeds, &c->n_seeds, err, sizeof err))
        status = base_error("compare", "%s", err);
    if (!status) {
        c->seeds = s->seeds;
        c->vary = vary;
        c->fixed_seed = vary == CMP_VARY_INIT ? s->t.cfg.data_seed : s->t.cfg.seed;
        c->alpha = s->o.e.alpha;
        c->power = s->o.e.power;
        c->margin = s->o.margin;
        c->until_decided = s->o.until_decided;
        c->max_runs = s->o.max_runs;
        c->batch = s->o.seed_batch;
        c->first_seed = s->o.first_seed;
        c->results_dir = s->o.e.results_dir;
        c->recipe_json = s->recipe;
        status = experiment_shard("compare", &s->o.e, s->o.until_decided, c);
        if (!status) status = experiment_jobs("compare", &s->o.e, argc, argv, s->recipe, &s->pool);
        if (!status) status = experiment_spread("compare", &s->o.e, s->o.until_decided, argc, argv);
        c->progress = s->t.quiet ? NULL : stderr;
        /* the JSON output is checked before any run */
        if (!status && s->o.e.json_path && base_outfile_check("compare", s->o.e.json_path))
            status = BASE_EXIT_USAGE; /* before any run */
    }
    if (!status) {
        cmp_runner runner;
        if (s->pool) jobs_pool_runner(s->pool, &s->ctx, &runner);
        else cmp_train_runner(&runner, &s->ctx);
        status = cmp_run_study(c, &runner, &s->rep, err, sizeof err);
        jobs_pool_free(s->pool); /* the workers end before the verdict is printed */
        s->pool = NULL;
        if (status == 2) status = base_error("compare", "%s", err);
        else if (status) fprintf(stderr, "ulpscope compare: error: %s\n", err);
    }
    if (!status && s->rep.sharded) experiment_print_shard(stdout, "compare", c, &s->rep);
    else if (!status) {
        int json_to_stdout = s->o.e.json_path && strcmp(s->o.e.json_path, "-") == 0;
        cmp_print_table(json_to_stdout ? stderr : stdout, c, &s->rep);
        status = experiment_write_json("compare", s->o.e.json_path, s->recipe, c, &s->rep, NULL, NULL);
    }
    state_free(s);
    return status;
}
