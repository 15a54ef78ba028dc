/* cli/cmd_noise.c — `ulpscope noise`: a recipe's noise floor.  Trains the
 * base plan and the null arm (one flipped ulp) at the same seeds and reports,
 * at several step counts, the seed-to-seed and chaos spread of the loss, the
 * correlation pairing buys, and the runs per arm needed to see shifts of
 * 0.0005 to 0.005 nats (studies/noise.h). */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/outfile.h"
#include "cli/commands.h"
#include "cli/experiment.h"
#include "studies/noise.h"

#define F(field) offsetof(experiment_options, field)
static const copt noise_opts[] = {
    {"--seeds", COPT_STRING, F(seeds), 0, 0, "noise", "N|A-B|A,B,..", "(16) seeds", NULL, 0},
    {"--vary", COPT_STRING, F(vary), 0, 0, "noise", "both|init|data", "(both) what the seed varies", NULL, 0},
    {"--alpha", COPT_DOUBLE, F(alpha), 0.0001, 0.5, "noise", "A", "(0.05) for the runs needed", NULL, COPT_MAX_OPEN},
    {"--power", COPT_DOUBLE, F(power), 0.5, 1, "noise", "P", "(0.8) for the runs needed", NULL, COPT_MAX_OPEN},
    {"--replicas", COPT_INT, F(replicas), 1, TTRAIN_REPLICAS_MAX, "noise", "R",
     "(64 on cuda, 8 on cpu) runs per process at once: an arm's runs go through the replica engine R at a time", NULL,
     0},
    JOBS_OPTION_ROWS("noise", jobs, jobs_worker, jobs_bug),
    {"--gpus", COPT_INT, F(gpus), 1, CMP_MAX_SHARDS, "noise", "N",
     "(1) the seeds as N shards run at once, one process per GPU, into --results; then the table", NULL, 0},
    {"--shard", COPT_STRING, F(shard), 0, 0, "noise", "I/N",
     "run only the I-th of N shares of the seeds (every arm) into --results, no verdict; merge: rerun without it", NULL,
     0},
    {"--results", COPT_STRING, F(results_dir), 0, 0, "noise", "DIR", "cache of finished runs (shared with compare)", NULL,
     0},
    {"--json", COPT_STRING, F(json_path), 0, 0, "noise", "FILE", "JSON Lines ('-': stdout)", NULL, 0},
    {"--val-tokens", COPT_LONG, F(val_tokens), 1, 1L << 40, "noise", "N", "(1048576) validation windows up to N tokens",
     NULL, 0},
};
#undef F

typedef struct {
    noise_point *points;
    int n;
    double alpha, power;
} noise_out;

static void write_noise(FILE *fp, void *ctx)
{
    noise_out *o = ctx;
    noise_write_records(fp, o->points, o->n, o->alpha, o->power);
}

int cmd_noise(int argc, char **argv)
{
    typedef struct {
        train_options t;
        experiment_options e;
        cmp_train_ctx ctx;
        cmp_config c;
        cmp_report rep;
        noise_point points[CMP_MAX_CURVE];
    } state;
    state *s = calloc(1, sizeof *s);
    if (!s) return base_error("noise", "out of memory");
    train_options_defaults(&s->t);
    experiment_options_defaults(&s->e);
    s->e.seeds = "16";
    copt_table tables[2] = {train_options_table(&s->t), {noise_opts, (int)(sizeof noise_opts / sizeof noise_opts[0]), &s->e}};
    int status = copt_parse("noise", argc, argv, tables, 2, &s->t.seen);
    if (!status && s->t.help) {
        fprintf(stdout, "usage: ulpscope noise [training options] [--seeds N] [options]\n\n"
                        "Trains the base plan and the null arm (one ulp of one initial weight flipped) at the same seeds;\n"
                        "prints at each validation step the seed-to-seed sd and the chaos sd of the loss, their\n"
                        "correlation, and the runs per arm a paired and an unpaired comparison need to detect shifts\n"
                        "of 0.0005, 0.001, 0.002 and 0.005 nats.\n\n");
        copt_help(stdout, tables, 2);
        free(s);
        return 0;
    }
    if (!status) status = train_options_finish(&s->t, "noise");
    char err[1024], *recipe = NULL, *ids[2] = {NULL, NULL};
    uint64_t *seeds = NULL;
    cmp_vary vary = CMP_VARY_BOTH;
    if (!status && cmp_vary_parse(s->e.vary, &vary))
        status = base_error("noise", "--vary %s: expected both, init or data", s->e.vary);
    if (!status) status = experiment_setup("noise", &s->t, &s->e, vary, &s->ctx, &recipe);
    if (!status && experiment_parse_seeds(s->e.seeds, &seeds, &s->c.n_seeds, err, sizeof err))
        status = base_error("noise", "%s", err);
    if (!status && s->e.jobs_worker) {
        /* a --jobs worker: set up as its parent, it runs what the parent sends */
        status = jobs_serve("noise", s->e.jobs_worker, &s->ctx, recipe);
        free(seeds);
        free(recipe);
        free(s);
        return status;
    }
    cmp_config *c = &s->c;
    jobs_pool *pool = NULL;
    if (!status) {
        char *plan = tplan_json_alloc(&s->t.cfg.plan);
        size_t n = plan ? strlen(plan) + 16 : 0;
        ids[0] = plan;
        ids[1] = plan ? malloc(n) : NULL;
        if (!ids[1]) status = base_error("noise", "out of memory");
        else snprintf(ids[1], n, "%s|null-flip", plan);
    }
    if (!status) {
        snprintf(c->arms[0].name, CMP_NAME_MAX, "base");
        snprintf(c->arms[1].name, CMP_NAME_MAX, "null");
        c->arms[0].identity = ids[0];
        c->arms[1].identity = ids[1];
        c->arms[1].is_null = 1;
        c->n_arms = 2;
        s->ctx.plans[0] = s->ctx.plans[1] = s->t.cfg.plan;
        c->seeds = seeds;
        c->vary = vary;
        c->fixed_seed = vary == CMP_VARY_INIT ? s->t.cfg.data_seed : s->t.cfg.seed;
        c->alpha = s->e.alpha;
        c->power = s->e.power;
        c->results_dir = s->e.results_dir;
        c->recipe_json = recipe;
        c->progress = s->t.quiet ? NULL : stderr;
        status = experiment_shard("noise", &s->e, 0, c);
        if (!status) status = experiment_jobs("noise", &s->e, argc, argv, recipe, &pool);
        if (!status) status = experiment_spread("noise", &s->e, 0, argc, argv);
        if (!status && s->e.json_path && base_outfile_check("noise", s->e.json_path))
            status = BASE_EXIT_USAGE; /* before any run */
    }
    if (!status) {
        cmp_runner runner;
        if (pool) jobs_pool_runner(pool, &s->ctx, &runner);
        else cmp_train_runner(&runner, &s->ctx);
        status = cmp_run_study(c, &runner, &s->rep, err, sizeof err);
        jobs_pool_free(pool); /* the workers end before the table is printed */
        pool = NULL;
        if (status == 2) status = base_error("noise", "%s", err);
        else if (status) fprintf(stderr, "ulpscope noise: error: %s\n", err);
    }
    if (!status && s->rep.sharded) experiment_print_shard(stdout, "noise", c, &s->rep);
    else if (!status) {
        int n = s->rep.seeds_used;
        noise_out out = {s->points, 0, c->alpha, c->power};
        out.n = noise_analyse(s->rep.runs, s->rep.runs + n, n, c->alpha, c->power, s->points, CMP_MAX_CURVE);
        FILE *fp = s->e.json_path && strcmp(s->e.json_path, "-") == 0 ? stderr : stdout;
        noise_print_table(fp, s->points, out.n, c->alpha, c->power);
        if (s->rep.arm[1].verdict == CMP_IDENTICAL)
            fprintf(fp, "the null arm ran bit-identical to the base: this recipe has no chaos to measure\n");
        fprintf(fp, "%d runs (%d executed now, %d from the cache) in %.1f s\n", s->rep.runs_total, s->rep.runs_executed,
                s->rep.runs_cached, s->rep.seconds);
        status = experiment_write_json("noise", s->e.json_path, recipe, c, &s->rep, write_noise, &out);
    }
    jobs_pool_free(pool);
    cmp_report_free(&s->rep);
    free(ids[0]);
    free(ids[1]);
    free(seeds);
    free(recipe);
    free(s);
    return status;
}
