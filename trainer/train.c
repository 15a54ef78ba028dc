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

/* Checks the settings and the outputs, opens the data and reads a
 * checkpoint's header when resuming.  0 or a status. */
static int setup_run(trun *r)
{
    const ttrain_config *cfg = r->cfg;
    char err[1024];
    if (ttrain_settings_check(cfg, err, sizeof err)) return trun_fail(r, 2, "%s", err);
    if (tplan_check_layers(&cfg->plan, cfg->model.n_layer, err, sizeof err)) return trun_fail(r, 2, "%s", err);
    if (strcmp(cfg->backend, "cpu") != 0 && strcmp(cfg->backend, "cuda") != 0)
        return trun_fail(r, 2, "unknown backend '%s' (backends: cpu, cuda)", cfg->backend);
    if (strcmp(cfg->backend, "cuda") == 0 && !kernels_gpu_available(err, sizeof err))
        return trun_fail(r, 2, "--backend cuda needs a GPU: %s", err);
    int status = trun_check_outputs(r);
    if (status) return status;
    if (tdata_open(&r->data, cfg->data_path, cfg->val_frac, cfg->shard_vocab, err, sizeof err))
        return trun_fail(r, 2, "%s", err);
    r->data_open = 1;
    r->plan = cfg->plan;
    r->dynamic = cfg->plan.slot[TSLOT_LOSS_SCALE].variant == TLOSS_SCALE_DYNAMIC;
    r->st = (tckpt_state){0, r->dynamic ? cfg->loss_scale_init : 1.0, 0};
    r->ckpt_at = -1;
    if (r->data.vocab > cfg->model.vocab)
        return trun_fail(r, 2, "%s has vocabulary %d but the model's is %d", r->data.source, r->data.vocab,
                         cfg->model.vocab);
    if (tdata_check_windows(&r->data, cfg->seq, err, sizeof err)) return trun_fail(r, 2, "%s", err);
    return trun_resume_peek(r);
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

/* The backend, the memory check, the model (loaded when resuming), the log
 * and the batch buffers.  0 or a status. */
static int build_run(trun *r)
{
    const ttrain_config *cfg = r->cfg;
    char err[1024];
    if (strcmp(cfg->backend, "cpu") == 0) r->be = tbackend_cpu_create();
    else {
        r->be = tbackend_cuda_create(err, sizeof err);
        if (!r->be) return trun_fail(r, 1, "cuda backend unavailable: %s", err);
    }
    tbackend *be = r->be;
    if (!be) return trun_fail(r, 1, "out of memory");
    if (be->mem_used(be, &r->mem_before)) return trun_fail(r, 1, "%s", tbackend_error(be));
    if (tbackend_bind_plan(be, &r->plan, cfg->model.n_layer)) return trun_fail(r, 2, "%s", tbackend_error(be));
    int status = trun_check_memory(r);
    if (!status) status = alloc_results(r);
    if (status) return status;
    if (cfg->world > 1 && be->dp_init(be, cfg->world, cfg->rank, cfg->nccl_id_file))
        return trun_fail(r, 1, "%s", tbackend_error(be));
    r->m = tmodel_create(&cfg->model, be, &r->plan, cfg->batch, cfg->seq, cfg->seed, err, sizeof err);
    if (!r->m) return trun_fail(r, 1, "%s", err);
    if ((status = trun_resume_load(r))) return status;
    if (cfg->after_init && cfg->after_init(r->m, cfg->after_init_ctx))
        return trun_fail(r, 1, "after_init hook failed: %s", tbackend_error(be));
    if ((status = trun_log_open(r))) return status;
    r->tok = malloc((size_t)cfg->batch * cfg->seq * sizeof *r->tok);
    r->tgt = malloc((size_t)cfg->batch * cfg->seq * sizeof *r->tgt);
    if (!r->tok || !r->tgt) return trun_fail(r, 1, "out of memory");
    tmodel_set_observer(r->m, trun_observe, r);
    r->tokens_per_step = (double)cfg->batch * cfg->seq * cfg->accum * cfg->world;
    r->flops_per_token = tmodel_flops_per_token(&cfg->model);
    return 0;
}

/* Steps from the checkpoint's (or 0) to --steps, --stop-after, the time
 * budget or a stop signal.  0 or a status (128 + the signal when one
 * stopped the run, after the checkpoint of the last completed step). */
static int train_steps(trun *r)
{
    const ttrain_config *cfg = r->cfg;
    ttrain_result *res = r->res;
    long first = r->first_step = r->st.steps_done;
    long last = cfg->stop_after > 0 && cfg->stop_after < cfg->steps ? cfg->stop_after : cfg->steps;
    for (long s = first; s < last && !trun_stop_signal(r); s++) {
        int status = trun_switch_plan(r, s);
        if (status) return status;
        double t0 = trun_now();
        tstep_out o;
        status = trun_step(r, s, &o);
        if (status == TRUN_ABANDONED) break; /* nothing of step s applied: steps_done stays s */
        if (status) return status;
        double ms = 1e3 * (trun_now() - t0);
        res->step_ms[s] = ms;
        res->train_seconds += ms * 1e-3;
        int out_of_time = cfg->max_seconds > 0 && res->train_seconds >= cfg->max_seconds;
        if (s > first || last - first == 1) { /* the first step warms caches up */
            r->time_sum += ms;
            r->timed_steps++;
        }
        r->st.steps_done = s + 1;
        double val = NAN;
        if ((cfg->val_every > 0 && (s + 1) % cfg->val_every == 0) || s + 1 == cfg->steps || out_of_time) {
            if (trun_validate(r, &val)) return trun_fail(r, 1, "step %ld validation: %s", s, tbackend_error(r->be));
            res->val_loss[s] = val;
            res->final_val_loss = val;
        }
        double tps = r->tokens_per_step / (ms * 1e-3);
        trun_log_step(r, s, &o, val, ms, tps);
        if ((status = trun_log_flush(r))) return status;
        trun_progress(r, s, first, last, &o, val, ms, tps);
        if ((status = trun_checkpoint(r, s, last, out_of_time))) return status;
        if (out_of_time) break;
    }
    int sig = trun_stop_signal(r);
    if (!sig) return 0;
    res->interrupted = sig;
    int status = trun_checkpoint_now(r);
    return status ? status : 128 + sig;
}

/* The result's summary and the final record. */
static void finish_run(trun *r)
{
    const ttrain_config *cfg = r->cfg;
    ttrain_result *res = r->res;
    res->final_loss_scale = r->st.loss_scale;
    if (r->timed_steps) {
        res->tokens_per_s = r->tokens_per_step / (r->time_sum / r->timed_steps * 1e-3);
        res->mfu = cfg->peak_flops > 0 ? r->flops_per_token * res->tokens_per_s / cfg->peak_flops : NAN;
    }
    trun_profile_report(r);
    res->param_hash = trun_state_hash(r);
    res->peak_bytes = r->be->peak_bytes;
    size_t mem_after = 0;
    if (r->be->mem_used(r->be, &mem_after) == 0 && mem_after > r->mem_before) res->device_bytes = mem_after - r->mem_before;
    trun_log_final(r);
}

int ttrain_run(const ttrain_config *cfg, ttrain_result *res)
{
    memset(res, 0, sizeof *res);
    res->final_val_loss = NAN;
    trun *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(res->error, sizeof res->error, "out of memory");
        return 1;
    }
    r->cfg = cfg;
    r->res = res;
    int status = setup_run(r);
    if (!status) status = build_run(r);
    if (!status) {
        trun_log_header(r, r->st.steps_done);
        status = trun_log_flush(r);
    }
    if (!status) status = train_steps(r);
    res->steps_done = r->st.steps_done;
    if (!status) finish_run(r);
    status = trun_log_close(r, status);
    free(r->tok);
    free(r->tgt);
    free(r->buf);
    tmodel_destroy(r->m);
    if (r->be) r->be->destroy(r->be);
    if (r->data_open) tdata_close(&r->data);
    free(r);
    return status;
}
