/* cli/experiment.c — shared by compare, noise, bisect and trace (experiment.h). */
#include "cli/experiment.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/error.h"
#include "base/jsonl.h"
#include "base/outfile.h"
#include "base/parse.h"
#include "trainer/backend.h"

void experiment_options_defaults(experiment_options *e)
{
    memset(e, 0, sizeof *e);
    e->vary = "both";
    e->val_tokens = 1L << 20;
    e->alpha = 0.05;
    e->power = 0.8;
}

#define MAX_SEEDS 100000

int experiment_parse_seeds(const char *spec, uint64_t **seeds, int *n, char *err, size_t errlen)
{
    *seeds = NULL;
    *n = 0;
    if (!spec || !*spec) {
        snprintf(err, errlen, "--seeds is empty");
        return -1;
    }
    uint64_t a, b;
    const char *dash = strchr(spec, '-');
    if (!strchr(spec, ',') && !dash) {
        /* N: seeds 1..N */
        if (base_parse_seed(spec, &b) || b < 2 || b > MAX_SEEDS) {
            snprintf(err, errlen, "--seeds %s: give a count 2..%d, a range A-B or a list A,B,...", spec, MAX_SEEDS);
            return -1;
        }
        a = 1;
    } else if (dash && !strchr(spec, ',')) {
        char lo[32];
        size_t k = (size_t)(dash - spec);
        if (k == 0 || k >= sizeof lo) {
            snprintf(err, errlen, "--seeds %s: malformed range (A-B)", spec);
            return -1;
        }
        memcpy(lo, spec, k);
        lo[k] = '\0';
        if (base_parse_seed(lo, &a) || base_parse_seed(dash + 1, &b) || b < a || b - a + 1 < 2 || b - a >= MAX_SEEDS) {
            snprintf(err, errlen, "--seeds %s: a range A-B with A < B and at most %d seeds", spec, MAX_SEEDS);
            return -1;
        }
    } else {
        int count = 1;
        for (const char *p = spec; *p; p++) count += *p == ',';
        if (count > MAX_SEEDS) {
            snprintf(err, errlen, "--seeds: more than %d seeds", MAX_SEEDS);
            return -1;
        }
        *seeds = malloc((size_t)count * sizeof **seeds);
        char *copy = strdup(spec);
        if (!*seeds || !copy) {
            free(*seeds);
            free(copy);
            *seeds = NULL;
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        char *tok = copy;
        int m = 0, bad = 0;
        /* strtok would skip empty items: walk the commas by hand */
        for (char *p = copy;; p++) {
            if (*p == ',' || *p == '\0') {
                int end = *p == '\0';
                *p = '\0';
                if (!*tok || base_parse_seed(tok, &(*seeds)[m])) {
                    snprintf(err, errlen, "--seeds %s: '%s' is not a seed (decimal or 0x hex)", spec, tok);
                    bad = 1;
                    break;
                }
                m++;
                if (end) break;
                tok = p + 1;
            }
        }
        free(copy);
        if (bad) {
            free(*seeds);
            *seeds = NULL;
            return -1;
        }
        *n = m;
        return 0;
    }
    *n = (int)(b - a + 1);
    *seeds = malloc((size_t)*n * sizeof **seeds);
    if (!*seeds) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int i = 0; i < *n; i++) (*seeds)[i] = a + (uint64_t)i;
    return 0;
}

int experiment_setup(const char *cmd, train_options *t, const experiment_options *e, cmp_vary vary,
                     cmp_train_ctx *ctx, char **recipe)
{
    char err[1024];
    memset(ctx, 0, sizeof *ctx);
    ctx->base = t->cfg;
    ttrain_config *c = &ctx->base;
    if (c->resume_path || c->ckpt_path || c->log_path || c->dump_dir || c->n_at_steps || c->n_switches || c->world > 1)
        return base_error(cmd, "%s runs many trainings: --resume, --ckpt, --log, hooks, --switch-at and --world "
                              "do not apply", cmd);
    if (copt_given(&t->seen, "--seed") || copt_given(&t->seen, "--data-seed"))
        if (vary == CMP_VARY_BOTH)
            return base_error(cmd, "--seed/--data-seed fix what does not vary: use them with --vary init or data");
    if (copt_given(&t->seen, "--val-batches"))
        return base_error(cmd, "%s scores every run on the validation split up to --val-tokens; drop --val-batches", cmd);
    long val_tokens;
    if (cmp_train_val_batches(c, e->val_tokens, &c->val_batches, &val_tokens, err, sizeof err))
        return base_error(cmd, "%s", err);
    if (!copt_given(&t->seen, "--val-every")) c->val_every = c->steps >= 8 ? c->steps / 8 : 1;
    *recipe = cmp_train_recipe(c, vary, vary == CMP_VARY_INIT ? c->data_seed : c->seed, err, sizeof err);
    if (!*recipe) return base_error(cmd, "%s", err);
    ctx->progress = t->quiet ? NULL : stderr;
    ctx->replicas = e->replicas;
    return 0;
}

int experiment_shard(const char *cmd, const experiment_options *e, int until_decided, cmp_config *c)
{
    if (!e->shard) return 0;
    if (cmp_shard_parse(e->shard, &c->shard, &c->n_shards))
        return base_error(cmd, "--shard %s: expected I/N, shard I of N (0 <= I < N <= %d)", e->shard, CMP_MAX_SHARDS);
    if (!e->results_dir) return base_error(cmd, "--shard needs --results DIR: the shards' runs meet there");
    if (until_decided) return base_error(cmd, "--shard needs a fixed --seeds list (--until-decided cannot be sharded)");
    if (e->json_path)
        return base_error(cmd, "--shard writes runs into --results only; the call without --shard judges and writes --json");
    return 0;
}

/* Device `index` of the devices this process may use: the index itself, or
 * the index-th entry of CUDA_VISIBLE_DEVICES.  0, or -1 when it has fewer. */
static int visible_device(int index, char *out, size_t len)
{
    const char *list = getenv("CUDA_VISIBLE_DEVICES");
    if (!list) {
        snprintf(out, len, "%d", index);
        return 0;
    }
    for (int i = 0; *list; i++) {
        size_t n = strcspn(list, ",");
        if (i == index) {
            if (n == 0 || n >= len) return -1;
            memcpy(out, list, n);
            out[n] = '\0';
            return 0;
        }
        list += n + (list[n] == ',');
    }
    return -1;
}

int experiment_spread(const char *cmd, const experiment_options *e, int until_decided, int argc, char **argv)
{
    if (e->gpus <= 1) return 0;
    if (e->shard) return base_error(cmd, "--gpus runs the shards itself: give --gpus or --shard, not both");
    if (!e->results_dir) return base_error(cmd, "--gpus needs --results DIR: the processes' runs meet there");
    if (until_decided) return base_error(cmd, "--gpus needs a fixed --seeds list (--until-decided cannot be spread)");
    char dev[64];
    for (int i = 0; i < e->gpus; i++)
        if (visible_device(i, dev, sizeof dev))
            return base_error(cmd, "--gpus %d: CUDA_VISIBLE_DEVICES=%s names fewer devices", e->gpus,
                              getenv("CUDA_VISIBLE_DEVICES"));
    /* the children's argv: ulpscope CMD, our options but --gpus and --json, --shard I/N */
    char **child = calloc((size_t)argc + 6, sizeof *child);
    pid_t *pids = calloc((size_t)e->gpus, sizeof *pids);
    if (!child || !pids) {
        free(child), free(pids);
        return base_error(cmd, "out of memory");
    }
    int n = 0;
    child[n++] = "ulpscope";
    child[n++] = (char *)cmd;
    for (int i = 1; i < argc; i++) {
        if ((strcmp(argv[i], "--gpus") == 0 || strcmp(argv[i], "--json") == 0) && i + 1 < argc) {
            i++;
            continue;
        }
        child[n++] = argv[i];
    }
    char shard[32];
    child[n++] = "--shard";
    child[n++] = shard;
    child[n] = NULL;
    int started = 0, failed = -1, failed_status = 0;
    for (int i = 0; i < e->gpus; i++) {
        snprintf(shard, sizeof shard, "%d/%d", i, e->gpus);
        visible_device(i, dev, sizeof dev);
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid == 0) {
            setenv("CUDA_VISIBLE_DEVICES", dev, 1);
            dup2(STDERR_FILENO, STDOUT_FILENO); /* a shard's summary is progress: stdout stays this call's */
            execv("/proc/self/exe", child);
            fprintf(stderr, "ulpscope %s: error: cannot start shard %s: %s\n", cmd, shard, strerror(errno));
            _exit(127);
        }
        if (pid < 0) {
            failed = i;
            failed_status = -1;
            break;
        }
        pids[started++] = pid;
    }
    for (int i = 0; i < started; i++) {
        int st = 0;
        while (waitpid(pids[i], &st, 0) < 0 && errno == EINTR) {}
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        if (code && failed < 0) {
            failed = i;
            failed_status = code;
        }
    }
    free(child);
    free(pids);
    if (failed < 0) return 0;
    if (failed_status < 0) {
        fprintf(stderr, "ulpscope %s: error: --gpus: cannot start shard %d/%d: %s\n", cmd, failed, e->gpus,
                strerror(errno));
        return 1;
    }
    fprintf(stderr, "ulpscope %s: error: shard %d/%d (GPU %d) failed with status %d; its finished runs are in %s\n", cmd,
            failed, e->gpus, failed, failed_status, e->results_dir);
    return 1;
}

int experiment_jobs(const char *cmd, const experiment_options *e, int argc, char **argv, const char *recipe,
                    jobs_pool **pool)
{
    *pool = NULL;
    jobs_bug bug;
    if (jobs_parse_bug(cmd, e->jobs_bug, &bug)) return BASE_EXIT_USAGE;
    if (bug && e->jobs <= 1) return base_error(cmd, "--plant-jobs-bug plants a mistake in the --jobs pool: give --jobs N > 1");
    if (e->jobs <= 1) return 0;
    if (!(*pool = jobs_pool_create(cmd, e->jobs, argc, argv, recipe, bug))) return base_error(cmd, "out of memory");
    return 0;
}

void experiment_print_shard(FILE *fp, const char *cmd, const cmp_config *c, const cmp_report *rep)
{
    int from, to;
    cmp_shard_range(c->n_seeds, c->shard, c->n_shards, &from, &to);
    fprintf(fp,
            "shard %d/%d: seeds %d..%d of %d (%llu..%llu), %d arms: %d runs in %s (%d executed now, %d from the cache) "
            "in %.1f s\n",
            c->shard, c->n_shards, from + 1, to, c->n_seeds, (unsigned long long)c->seeds[from],
            (unsigned long long)c->seeds[to - 1], c->n_arms, rep->runs_total, c->results_dir, rep->runs_executed,
            rep->runs_cached, rep->seconds);
    fprintf(fp, "no verdict from a shard: once every shard has run, the same %s without --shard judges them all\n", cmd);
}

int experiment_write_json(const char *cmd, const char *json_path, const char *recipe, const cmp_config *c,
                          const cmp_report *rep, void (*extra)(FILE *fp, void *ctx), void *extra_ctx)
{
    if (!json_path) return 0;
    base_outfile o;
    if (base_outfile_open(&o, cmd, json_path)) return 1;
    size_t n = strlen(recipe) + 32;
    char *hdr = malloc(n);
    if (!hdr) {
        base_outfile_abort(&o);
        return 1;
    }
    snprintf(hdr, n, "\"recipe\":%s", recipe);
    base_json_header(o.fp, cmd, hdr);
    free(hdr);
    cmp_write_run_records(o.fp, c, rep);
    cmp_write_arm_records(o.fp, c, rep);
    if (extra) extra(o.fp, extra_ctx);
    return base_outfile_commit(&o, cmd) ? 1 : 0;
}

int experiment_bad_plan(const char *cmd, const train_options *t, const char *bad, const char *bad_plan, tplan *out)
{
    char err[1024];
    if (!!bad == !!bad_plan)
        return base_error(cmd, "give the bad plan with exactly one of --bad OVERRIDES or --bad-plan PRESET");
    *out = t->cfg.plan;
    const char *over = bad;
    if (bad_plan) {
        char preset[32];
        const char *comma = strchr(bad_plan, ',');
        size_t k = comma ? (size_t)(comma - bad_plan) : strlen(bad_plan);
        if (k == 0 || k >= sizeof preset) return base_error(cmd, "--bad-plan %s: no preset name", bad_plan);
        memcpy(preset, bad_plan, k);
        preset[k] = '\0';
        /* on the good plan's GPU model (--gpu-model), as the rest of the run */
        if (tplan_init(out, preset, t->cfg.model.kind, err, sizeof err) ||
            tplan_set_gpu_model(out, t->cfg.plan.gpu_model, err, sizeof err))
            return base_error(cmd, "--bad-plan: %s", err);
        over = comma ? comma + 1 : NULL;
    }
    if (over && tplan_set(out, over, err, sizeof err)) return base_error(cmd, "bad plan: %s", err);
    if (tplan_check_layers(out, t->cfg.model.n_layer, err, sizeof err)) return base_error(cmd, "bad plan: %s", err);
    return 0;
}

/* SLOT[@LAYER][:VARIANT] against the bad plan (the variant the bad plan runs
 * there by default). */
static int parse_plant(const char *s, const tplan *bad, int depth, int *slot, int *layer, int *variant)
{
    char name[64];
    size_t n = strcspn(s, "@:");
    if (n == 0 || n >= sizeof name) return -1;
    memcpy(name, s, n);
    name[n] = '\0';
    *slot = -1;
    for (int k = 0; k < TSLOT_COUNT; k++)
        if (strcmp(tslot_get((tslot)k)->name, name) == 0) *slot = k;
    if (*slot < 0) return -1;
    *layer = -1;
    *variant = -1;
    const char *p = s + n;
    if (*p == '@') {
        char *end;
        long l = strtol(p + 1, &end, 10);
        if (end == p + 1 || l < 0 || l >= depth) return -1;
        *layer = (int)l;
        p = end;
    }
    if (*p == ':') {
        const kop *op = tplan_kop(bad, (tslot)*slot);
        *variant = op ? kregistry_variant(op, p + 1) : -1;
        if (*variant < 0) return -1;
    } else if (*p) return -1;
    return 0;
}

int experiment_plant(const char *cmd, const char *spec, const tplan *bad, int depth)
{
    int slot, layer, variant;
    if (parse_plant(spec, bad, depth, &slot, &layer, &variant))
        return base_error(cmd, "--plant-truncation %s: expected SLOT[@LAYER][:VARIANT] of the bad plan", spec);
    tbackend_cpu_plant_site(slot, layer, variant);
    return 0;
}
