/* trainer/train.c — see train.h.  ttrain_run sets a run up, loops over
 * the steps (trainer/train_step.c) with their records and progress lines
 * (train_log.c) and checkpoints (train_ckpt.c), and tears it down. */
#include "trainer/train_run.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

void ttrain_config_defaults(ttrain_config *c)
{
    memset(c, 0, sizeof *c);
    tmodel_config_init(&c->model, TMODEL_GPT2, 2, 64, 4, 256, 64, NULL, 0);
    c->backend = "cpu";
    c->val_frac = 0.1;
    c->batch = 4;
    c->seq = 64;
    c->accum = 1;
    c->steps = 100;
    c->lr = 1e-3;
    c->min_lr_frac = 0.1;
    c->cooldown_frac = 1.0;
    c->warmup = 10;
    c->schedule = TSCHED_COSINE;
    c->weight_decay = 0.1;
    c->beta1 = 0.9;
    c->beta2 = 0.95;
    c->adam_eps = 1e-8;
    c->grad_clip = 1.0;
    c->muon_lr = 0.02;
    c->muon_momentum = 0.95;
    c->loss_scale_init = 65536.0;
    c->seed = 1337;
    c->data_seed = 1337;
    c->val_batches = 4;
    c->progress_every = 10;
    c->world = 1;
}

void ttrain_result_free(ttrain_result *res)
{
    free(res->loss);
    free(res->grad_norm);
    free(res->val_loss);
    free(res->step_ms);
    free(res->hashes);
    memset(res, 0, sizeof *res);
}

int trun_fail(trun *r, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->res->error, sizeof r->res->error, fmt, ap);
    va_end(ap);
    return status;
}

int trun_stop_signal(const trun *r) { return r->cfg->stop ? (int)*r->cfg->stop : 0; }

/* The group's error: runs[0]'s (every run gets it when the group fails). */
#define group_fail(g, ...) trun_fail(&(g)->runs[0], __VA_ARGS__)

/* fp8_scaling=delayed keeps amax histories in the backend, which a
 * checkpoint does not hold: a resumed run would restart them and go
 * another way, so neither end is offered. */
static int check_fp8_settings(tgroup *g)
{
    const ttrain_config *cfg = g->cfg;
    const char *what = cfg->ckpt_path ? "--ckpt" : cfg->resume_path ? "--resume" : NULL;
    if (what && cfg->plan.slot[TSLOT_FP8_SCALING].variant == TFP8_SCALING_DELAYED)
        return group_fail(g, 2, "%s: fp8_scaling=fp32:delayed keeps amax histories that checkpoints do not store; "
                                "checkpoint runs with fp8_scaling=fp32:current", what);
    return 0;
}

/* What replicas cannot do (single runs only). */
static int check_replica_settings(tgroup *g)
{
    const ttrain_config *cfg = g->cfg;
    if (g->R == 1) return 0;
    const char *what = cfg->ckpt_path ? "--ckpt" : cfg->resume_path ? "--resume" : cfg->world > 1 ? "--world" : NULL;
    for (int s = 0; s < TSLOT_COUNT && !what; s++)
        if (cfg->hash_slot[s] || cfg->dump_slot[s]) what = cfg->hash_slot[s] ? "--hash" : "--dump";
    if (what)
        return group_fail(g, 2, "%s is for single runs; it cannot be combined with --replicas %d (run the seed "
                                "alone for it)", what, g->R);
    return 0;
}

/* Checks the settings and the outputs, opens the data and reads a
 * checkpoint's header when resuming.  0 or a status. */
static int setup_group(tgroup *g)
{
    const ttrain_config *cfg = g->cfg;
    trun *r0 = &g->runs[0];
    char err[1024];
    for (int i = 0; i < g->R; i++)
        if (ttrain_settings_check(g->runs[i].cfg, err, sizeof err)) return group_fail(g, 2, "%s", err);
    if (tplan_check_layers(&cfg->plan, cfg->model.n_layer, err, sizeof err) ||
        tplan_check_head_dim(&cfg->plan, cfg->model.n_embd / cfg->model.n_head, err, sizeof err) ||
        tmodel_check_plan(&cfg->model, &cfg->plan, err, sizeof err))
        return group_fail(g, 2, "%s", err);
    if (strcmp(cfg->backend, "cpu") != 0 && strcmp(cfg->backend, "cuda") != 0)
        return group_fail(g, 2, "unknown backend '%s' (backends: cpu, cuda)", cfg->backend);
    if (strcmp(cfg->backend, "cuda") == 0 && !kernels_gpu_available(err, sizeof err))
        return group_fail(g, 2, "--backend cuda needs a GPU: %s", err);
    int status = check_replica_settings(g);
    if (!status) status = check_fp8_settings(g);
    if (!status) status = trun_check_outputs(r0);
    if (status) return status;
    if (tdata_open(&g->data, cfg->data_path, cfg->val_frac, cfg->shard_vocab, err, sizeof err))
        return group_fail(g, 2, "%s", err);
    g->data_open = 1;
    g->plan = cfg->plan;
    if (g->data.vocab > cfg->model.vocab)
        return group_fail(g, 2, "%s has vocabulary %d but the model's is %d", g->data.source, g->data.vocab,
                          cfg->model.vocab);
    if (tdata_check_windows(&g->data, cfg->seq, err, sizeof err)) return group_fail(g, 2, "%s", err);
    for (int i = 0; i < g->R; i++) {
        trun *r = &g->runs[i];
        r->data = &g->data;
        r->plan = cfg->plan;
        r->dynamic = cfg->plan.slot[TSLOT_LOSS_SCALE].variant == TLOSS_SCALE_DYNAMIC;
        r->st = (tckpt_state){0, r->dynamic ? cfg->loss_scale_init : 1.0, 0};
        r->ckpt_at = -1;
    }
    status = trun_resume_peek(r0);
    g->plan = r0->plan;
    return status;
}

/* The per-step results: NaN until a step fills them. */
static int alloc_results(trun *r)
{
    const ttrain_config *cfg = r->cfg;
    ttrain_result *res = r->res;
    res->loss = malloc((size_t)cfg->steps * sizeof *res->loss);
    res->grad_norm = malloc((size_t)cfg->steps * sizeof *res->grad_norm);
    res->val_loss = malloc((size_t)cfg->steps * sizeof *res->val_loss);
    res->step_ms = malloc((size_t)cfg->steps * sizeof *res->step_ms);
    if (!res->loss || !res->grad_norm || !res->val_loss || !res->step_ms) return trun_fail(r, 1, "out of memory");
    for (long s = 0; s < cfg->steps; s++) res->loss[s] = res->grad_norm[s] = res->val_loss[s] = res->step_ms[s] = NAN;
    return 0;
}

/* The group's buffers: the batch and the per-replica scalars. */
static int alloc_group_buffers(tgroup *g)
{
    size_t tokens = (size_t)g->R * g->cfg->batch * g->cfg->seq;
    g->tok = malloc(tokens * sizeof *g->tok);
    g->tgt = malloc(tokens * sizeof *g->tgt);
    g->dloss = malloc((size_t)g->R * sizeof *g->dloss);
    g->loss = malloc((size_t)g->R * sizeof *g->loss);
    g->sum = malloc((size_t)g->R * sizeof *g->sum);
    g->norm = malloc((size_t)g->R * sizeof *g->norm);
    g->adamw = calloc((size_t)g->R, sizeof *g->adamw);
    g->muon = calloc((size_t)g->R, sizeof *g->muon);
    if (!g->tok || !g->tgt || !g->dloss || !g->loss || !g->sum || !g->norm || !g->adamw || !g->muon)
        return group_fail(g, 1, "out of memory");
    return 0;
}

/* The backend (with the group's replicas), the memory check, the model
 * (loaded when resuming), the logs and the buffers.  0 or a status. */
static int build_group(tgroup *g)
{
    const ttrain_config *cfg = g->cfg;
    trun *r0 = &g->runs[0];
    char err[1024];
    if (strcmp(cfg->backend, "cpu") == 0) g->be = tbackend_cpu_create();
    else {
        g->be = tbackend_cuda_create(err, sizeof err);
        if (!g->be) return group_fail(g, 1, "cuda backend unavailable: %s", err);
    }
    tbackend *be = g->be;
    if (!be) return group_fail(g, 1, "out of memory");
    if (tbackend_set_replicas(be, g->R)) return group_fail(g, 2, "%s", tbackend_error(be));
    for (int i = 0; i < g->R; i++) g->runs[i].be = be;
    if (be->mem_used(be, &r0->mem_before)) return group_fail(g, 1, "%s", tbackend_error(be));
    if (tbackend_bind_plan(be, &g->plan, cfg->model.n_layer)) return group_fail(g, 2, "%s", tbackend_error(be));
    int status = trun_check_memory(r0);
    for (int i = 0; i < g->R && !status; i++) status = alloc_results(&g->runs[i]);
    if (!status) status = alloc_group_buffers(g);
    if (status) return status;
    if (cfg->world > 1 && be->dp_init(be, cfg->world, cfg->rank, cfg->nccl_id_file))
        return group_fail(g, 1, "%s", tbackend_error(be));
    uint64_t *seeds = malloc((size_t)g->R * sizeof *seeds);
    if (!seeds) return group_fail(g, 1, "out of memory");
    for (int i = 0; i < g->R; i++) seeds[i] = g->runs[i].cfg->seed;
    g->m = tmodel_create(&cfg->model, be, &g->plan, cfg->batch, cfg->seq, seeds, err, sizeof err);
    free(seeds);
    if (!g->m) return group_fail(g, 1, "%s", err);
    for (int i = 0; i < g->R; i++) g->runs[i].m = g->m;
    if ((status = trun_resume_load(r0))) return status;
    if (cfg->after_init && cfg->after_init(g->m, cfg->after_init_ctx))
        return group_fail(g, 1, "after_init hook failed: %s", tbackend_error(be));
    if ((status = trun_log_open(r0))) return status;
    for (int i = 1; i < g->R; i++) {
        g->runs[i].log = r0->log;
        g->runs[i].log_shared = 1;
    }
    tmodel_set_observer(g->m, trun_observe, g);
    for (int i = 0; i < g->R; i++) {
        trun *r = &g->runs[i];
        r->tokens_per_step = (double)cfg->batch * cfg->seq * cfg->accum * cfg->world;
        r->flops_per_token = tmodel_flops_per_token(&cfg->model);
    }
    return 0;
}

/* The first run still going (progress lines follow it), or NULL. */
static trun *first_live(tgroup *g)
{
    for (int i = 0; i < g->R; i++)
        if (!g->runs[i].dead) return &g->runs[i];
    return NULL;
}

/* Steps from the checkpoint's (or 0) to --steps, --stop-after, the time
 * budget or a stop signal.  0 or a status (128 + the signal when one
 * stopped the run, after the checkpoint of the last completed step). */
static int train_steps(tgroup *g)
{
    const ttrain_config *cfg = g->cfg;
    trun *r0 = &g->runs[0];
    long first = r0->st.steps_done;
    long last = cfg->stop_after > 0 && cfg->stop_after < cfg->steps ? cfg->stop_after : cfg->steps;
    tstep_out *out = calloc((size_t)g->R, sizeof *out);
    double *val = malloc((size_t)g->R * sizeof *val);
    int status = !out || !val ? group_fail(g, 1, "out of memory") : 0;
    for (int i = 0; i < g->R; i++) g->runs[i].first_step = first;
    double train_seconds = 0.0;
    for (long s = first; !status && s < last && first_live(g) && !trun_stop_signal(r0); s++) {
        if ((status = tgroup_switch_plan(g, s))) break;
        double t0 = trun_now();
        status = tgroup_step(g, s, out);
        if (status == TRUN_ABANDONED) { /* nothing of step s applied: steps_done stays s */
            status = 0;
            break;
        }
        if (status) break;
        double ms = 1e3 * (trun_now() - t0);
        train_seconds += ms * 1e-3;
        int out_of_time = cfg->max_seconds > 0 && train_seconds >= cfg->max_seconds;
        int validate = (cfg->val_every > 0 && (s + 1) % cfg->val_every == 0) || s + 1 == cfg->steps || out_of_time;
        for (int i = 0; i < g->R; i++) val[i] = NAN;
        if (validate && tgroup_validate(g, val)) {
            status = group_fail(g, 1, "step %ld validation: %s", s, tbackend_error(g->be));
            break;
        }
        double tps = r0->tokens_per_step * g->R / (ms * 1e-3);
        trun *shown = first_live(g);
        for (int i = 0; i < g->R; i++) {
            trun *r = &g->runs[i];
            if (r->dead) continue;
            ttrain_result *res = r->res;
            res->step_ms[s] = ms;
            res->train_seconds = train_seconds;
            if (s > first || last - first == 1) { /* the first step warms caches up */
                r->time_sum += ms;
                r->timed_steps++;
            }
            r->st.steps_done = s + 1;
            if (validate) {
                res->val_loss[s] = val[i];
                res->final_val_loss = val[i];
            }
            trun_log_step(r, s, &out[i], val[i], ms, tps);
            if (r == shown) trun_progress(r, s, first, last, &out[i], val[i], ms, tps);
            if ((status = trun_checkpoint(r, s, last, out_of_time))) break;
        }
        if (!status) status = trun_log_flush(r0);
        if (out_of_time) break;
    }
    free(out);
    free(val);
    if (status) return status;
    int sig = trun_stop_signal(r0);
    if (!sig) return 0;
    for (int i = 0; i < g->R; i++) g->runs[i].res->interrupted = sig;
    status = trun_checkpoint_now(r0);
    return status ? status : 128 + sig;
}

/* The result's summary and the final record. */
static void finish_run(trun *r)
{
    const ttrain_config *cfg = r->cfg;
    ttrain_result *res = r->res;
    res->final_loss_scale = r->st.loss_scale;
    if (r->timed_steps) {
        /* the group's tokens per second: every replica's tokens in a step's time */
        res->tokens_per_s = r->tokens_per_step * r->replicas / (r->time_sum / r->timed_steps * 1e-3);
        res->mfu = cfg->peak_flops > 0 ? r->flops_per_token * res->tokens_per_s / cfg->peak_flops : NAN;
    }
    if (r->replica == 0) trun_profile_report(r);
    res->peak_bytes = r->be->peak_bytes;
    size_t mem_after = 0;
    const size_t before = r->g->runs[0].mem_before;
    if (r->be->mem_used(r->be, &mem_after) == 0 && mem_after > before) res->device_bytes = mem_after - before;
    trun_log_final(r);
}

static void free_group(tgroup *g)
{
    free(g->tok), free(g->tgt), free(g->dloss), free(g->loss), free(g->sum), free(g->norm);
    free(g->adamw), free(g->muon);
    for (int i = 0; i < g->R; i++) free(g->runs[i].buf);
    tmodel_destroy(g->m);
    if (g->be) g->be->destroy(g->be);
    if (g->data_open) tdata_close(&g->data);
    free(g->runs);
    free(g);
}

static ttrain_bug planted_bug; /* tests' twins only */
void ttrain_plant_bug(ttrain_bug bug) { planted_bug = bug; }
ttrain_bug ttrain_planted_bug(void) { return planted_bug; }

int ttrain_run_replicas(const ttrain_config *cfg, int R, const uint64_t *seeds, const uint64_t *data_seeds,
                        ttrain_result *res)
{
    if (R < 1 || R > TTRAIN_REPLICAS_MAX) {
        memset(res, 0, sizeof *res);
        snprintf(res->error, sizeof res->error, "--replicas %d: from 1 to %d", R, TTRAIN_REPLICAS_MAX);
        return res->status = 2;
    }
    for (int i = 0; i < R; i++) {
        memset(&res[i], 0, sizeof res[i]);
        res[i].final_val_loss = NAN;
    }
    tgroup *g = calloc(1, sizeof *g);
    trun *runs = calloc((size_t)R, sizeof *runs);
    if (!g || !runs) {
        free(g), free(runs);
        snprintf(res->error, sizeof res->error, "out of memory");
        return res->status = 1;
    }
    g->cfg = cfg;
    g->R = R;
    g->runs = runs;
    for (int i = 0; i < R; i++) {
        trun *r = &runs[i];
        r->own = *cfg;
        r->own.seed = seeds[planted_bug == TTRAIN_BUG_SHARED_INIT_SEED ? 0 : i];
        r->own.data_seed = data_seeds[planted_bug == TTRAIN_BUG_SHARED_DATA_ORDER ? 0 : i];
        r->cfg = &r->own;
        r->res = &res[i];
        r->g = g;
        r->replica = i;
        r->replicas = R;
    }
    int status = setup_group(g);
    if (!status) status = build_group(g);
    if (!status) {
        trun_log_header(&runs[0], runs[0].st.steps_done);
        status = trun_log_flush(&runs[0]);
    }
    if (!status) status = train_steps(g);
    uint64_t *hashes = status ? NULL : calloc((size_t)R, sizeof *hashes);
    if (hashes) tgroup_state_hashes(g, hashes);
    long captures = 0, replays = 0, failures = 0;
    if (g->m) tmodel_graph_stats(g->m, &captures, &replays, &failures);
    for (int i = 0; i < R; i++) {
        trun *r = &runs[i];
        int own = status ? status : r->res->status;
        r->res->steps_done = r->st.steps_done;
        r->res->graph_captures = captures, r->res->graph_replays = replays, r->res->graph_failures = failures;
        r->res->fp8_memo_hits = g->be ? (long)g->be->fp8_memo_hits : 0;
        r->res->fp8_memo_b_hits = g->be ? (long)g->be->fp8_memo_b_hits : 0;
        if (!own) {
            r->res->param_hash = hashes ? hashes[i] : trun_state_hash(r);
            finish_run(r);
        }
        if (i == 0) r->res->status = own;
        else if (status) { /* the group's failure, recorded once (replica 0) */
            memcpy(r->res->error, res[0].error, sizeof r->res->error);
            r->res->interrupted = res[0].interrupted;
            r->res->status = status;
        } else r->res->status = trun_log_close(r, own);
    }
    free(hashes);
    /* replica 0 owns the shared log: it closes it last */
    res[0].status = trun_log_close(&runs[0], res[0].status);
    free_group(g);
    if (status) return status;
    for (int i = 0; i < R; i++)
        if (res[i].status) return res[i].status;
    return 0;
}

int ttrain_run(const ttrain_config *cfg, ttrain_result *res)
{
    return ttrain_run_replicas(cfg, 1, &cfg->seed, &cfg->data_seed, res);
}
