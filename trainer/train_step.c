/* trainer/train_step.c — one training step of a run: micro-batches
 * (forward + backward, gradients accumulating), the lm_head/embedding
 * gradient fold, the all-reduce, the gradient norm, non-finite detection,
 * loss scaling, clipping and the optimizer update; plus validation, plan
 * switches, the learning-rate schedule and the model's observer (hash and
 * dump hooks, --profile timing, the non-finite audit). */
#include "trainer/train_run.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LOSS_SCALE_GROWTH_INTERVAL 2000

double trun_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int trun_grow_buf(trun *r, size_t n)
{
    if (n <= r->buf_len) return 0;
    unsigned char *b = realloc(r->buf, n);
    if (!b) return -1;
    r->buf = b;
    r->buf_len = n;
    return 0;
}

/* ---- hooks --------------------------------------------------------------------------------- */

static int at_hook_step(const ttrain_config *cfg, long step)
{
    if (cfg->n_at_steps == 0) return 1;
    for (int i = 0; i < cfg->n_at_steps; i++)
        if (cfg->at_steps[i] == step) return 1;
    return 0;
}

static int hash_tensor(trun *r, tslot slot, int layer, const char *tensor, const ktensor *t)
{
    size_t n = tensor_image_bytes(t);
    if (trun_grow_buf(r, n) || r->be->read_bytes(r->be, t, r->buf)) return -1;
    uint64_t h = ttrain_fnv1a(TTRAIN_FNV_OFFSET, r->buf, n);
    ttrain_result *res = r->res;
    thash_record *next = realloc(res->hashes, (size_t)(res->n_hashes + 1) * sizeof *next);
    if (!next) return -1;
    res->hashes = next;
    thash_record *rec = &res->hashes[res->n_hashes++];
    rec->step = r->step;
    rec->micro = r->micro;
    rec->slot = slot;
    rec->layer = layer;
    snprintf(rec->tensor, sizeof rec->tensor, "%s", tensor);
    rec->hash = h;
    trun_log_hash(r, slot, layer, tensor, t, h);
    return 0;
}

static int dump_tensor(trun *r, tslot slot, int layer, const char *tensor, const ktensor *t)
{
    const char *dir = r->cfg->dump_dir ? r->cfg->dump_dir : ".";
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/step%ld.micro%d.%s.L%d.%s.bin", dir, r->step, r->micro, tslot_get(slot)->name,
             layer, tensor);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    size_t n = tensor_image_bytes(t);
    if (trun_grow_buf(r, n) || r->be->read_bytes(r->be, t, r->buf)) return -1;
    FILE *fp = fopen(tmp, "wb");
    if (!fp) return -1;
    int ok = fwrite(r->buf, 1, n, fp) == n;
    ok &= fclose(fp) == 0;
    if (!ok || rename(tmp, path)) {
        unlink(tmp);
        return -1;
    }
    trun_log_dump(r, slot, layer, tensor, t, path);
    return 0;
}

int trun_observe(void *ctx, tslot slot, int layer, const char *tensor, const ktensor *t)
{
    tgroup *g = ctx;
    trun *r = &g->runs[0]; /* profiles and hooks: replica 0 (hooks are for single runs) */
    if (g->runs[g->audit_replica].audit) {
        /* the audited replica's copy only: the others may hold their own NaNs */
        trun *a = &g->runs[g->audit_replica];
        ktensor mine = tbackend_slice(g->be, t, g->audit_replica);
        int64_t bad = 0;
        if (g->be->count_nonfinite(g->be, &mine, &bad)) return -1;
        if (bad) {
            a->found = 1;
            snprintf(a->where_slot, sizeof a->where_slot, "%s", tslot_get(slot)->name);
            snprintf(a->where_tensor, sizeof a->where_tensor, "%s", tensor);
            a->where_layer = layer;
            return 1;
        }
        return 0;
    }
    if (r->prof_on) {
        /* the time since the previous slot finished is this slot's */
        if (r->be->sync(r->be)) return -1;
        double now = trun_now();
        r->prof_ms[slot] += 1e3 * (now - r->prof_last);
        r->prof_last = now;
    }
    if (!r->hooks_now) return 0;
    if (r->cfg->hash_slot[slot] && hash_tensor(r, slot, layer, tensor, t)) {
        r->failed = 1;
        return -1;
    }
    if (r->cfg->dump_slot[slot] && dump_tensor(r, slot, layer, tensor, t)) {
        r->failed = 1;
        snprintf(r->be->error, sizeof r->be->error, "cannot write a dump of slot %s into %s", tslot_get(slot)->name,
                 r->cfg->dump_dir ? r->cfg->dump_dir : ".");
        return -1;
    }
    return 0;
}

/* ---- schedule and plan switches ---------------------------------------------------------------- */

/* Linear warmup, constant until the cool-down, then cosine or linear decay
 * to min_lr_frac at the last step. */
static double lr_factor(const ttrain_config *c, long s)
{
    if (c->warmup > 0 && s < c->warmup) return (double)(s + 1) / (double)c->warmup;
    long cool_start = c->steps - (long)(c->cooldown_frac * (double)c->steps);
    if (cool_start < c->warmup) cool_start = c->warmup;
    if (s < cool_start) return 1.0;
    long span = c->steps - 1 - cool_start;
    double prog = span > 0 ? (double)(s - cool_start) / (double)span : 1.0;
    double lo = c->min_lr_frac;
    if (c->schedule == TSCHED_LINEAR) return 1.0 + (lo - 1.0) * prog;
    return lo + (1.0 - lo) * 0.5 * (1.0 + cos(M_PI * prog));
}

int tgroup_switch_plan(tgroup *g, long s)
{
    const ttrain_config *cfg = g->cfg;
    trun *r0 = &g->runs[0];
    for (int i = 0; i < cfg->n_switches; i++) {
        if (cfg->switches[i].step != s) continue;
        tplan *next = malloc(sizeof *next);
        if (!next) return trun_fail(r0, 1, "out of memory");
        *next = g->plan;
        char err[2048];
        int bad = tplan_set(next, cfg->switches[i].overrides, err, sizeof err) ||
                  tplan_check_layers(next, cfg->model.n_layer, err, sizeof err) ||
                  tplan_check_head_dim(next, cfg->model.n_embd / cfg->model.n_head, err, sizeof err) ||
                  tmodel_rebind(g->m, next, err, sizeof err);
        if (!bad) {
            g->plan = *next;
            for (int k = 0; k < g->R; k++) g->runs[k].plan = *next;
        }
        free(next);
        if (bad) return trun_fail(r0, 2, "switch at step %ld: %s", s, err);
        for (int k = 0; k < g->R; k++)
            if (!g->runs[k].dead) trun_log_switch(&g->runs[k], s, cfg->switches[i].overrides);
    }
    return 0;
}

/* ---- the step ------------------------------------------------------------------------------------ */

/* CUDA graphs of the micro-batch (tmodel_set_graph) where the plan allows:
 * not with fp8 GEMMs under delayed scaling (the amax histories' call counts
 * are host-side state a replay would not advance) nor under another GPU's
 * matrix-unit model; ULPSCOPE_CUDA_GRAPH=0 turns them off (the same bits).
 * fp8 under current scaling runs in graphs: the CUDA backend refreshes its
 * weight images before each replay and rewinds the quantisers' amax words
 * around each capture. */
static int graph_plan(const tplan *p)
{
    const char *env = getenv("ULPSCOPE_CUDA_GRAPH");
    if (env && strcmp(env, "0") == 0) return 0;
    if (p->gpu_model != TGPU_NATIVE) return 0;
    if (p->slot[TSLOT_FP8_SCALING].variant == TFP8_SCALING_CURRENT) return 1;
    for (int s = 0; s < TSLOT_COUNT; s++)
        if (p->used[s] && p->slot[s].path == KPATH_FP8) return 0;
    for (int i = 0; i < p->n_layer_choices; i++)
        if (p->layer_choice[i].choice.path == KPATH_FP8) return 0;
    return 1;
}

/* Hash or dump hooks read slot outputs at this step. */
static int hooked(const trun *r0)
{
    if (!r0->hooks_now) return 0;
    for (int s = 0; s < TSLOT_COUNT; s++)
        if (r0->cfg->hash_slot[s] || r0->cfg->dump_slot[s]) return 1;
    return 0;
}

/* Every replica's micro-batches: replica r's batch from its data-order seed;
 * g->loss[r] = its mean training loss.  dloss NULL: forward only. */
static int run_micro_batches(tgroup *g, long step, const double *dloss)
{
    const ttrain_config *cfg = g->cfg;
    const size_t BT = (size_t)cfg->batch * cfg->seq;
    for (int r = 0; r < g->R; r++) g->sum[r] = 0.0;
    for (int mb = 0; mb < cfg->accum; mb++) {
        if (!g->runs[g->audit_replica].audit && trun_stop_signal(&g->runs[0]))
            return TRUN_ABANDONED; /* before anything of the step is applied */
        for (int r = 0; r < g->R; r++) {
            g->runs[r].micro = mb;
            tdata_train_batch(&g->data, g->runs[r].cfg->data_seed, step, mb, cfg->rank, cfg->batch, cfg->seq,
                              g->tok + r * BT, g->tgt + r * BT);
        }
        trun *r0 = &g->runs[0];
        if (r0->prof_on) { /* the zeroed gradients and the batches: their own row, not the embedding's */
            if (g->be->sync(g->be)) return -1;
            double now = trun_now();
            r0->prof_ms[TPROF_SETUP] += 1e3 * (now - r0->prof_last);
            r0->prof_last = now;
        }
        /* a replay calls no observer: not where one looks */
        tmodel_set_graph(g->m, graph_plan(&g->plan) && !r0->prof_on && !hooked(r0) &&
                                   !g->runs[g->audit_replica].audit);
        int rc = tmodel_step_micro(g->m, g->tok, g->tgt, dloss, g->loss);
        if (rc) return rc;
        for (int r = 0; r < g->R; r++) g->sum[r] += g->loss[r];
    }
    for (int r = 0; r < g->R; r++) g->loss[r] = g->sum[r] / cfg->accum;
    return 0;
}

/* Replay step `step` with every slot output of replica `rep` checked; names
 * the first non-finite value in that run's where_*.  The replay recomputes
 * every replica's gradients from the same weights and batches: the same bits. */
/* fp8_scaling=delayed: the amax histories as the step found them (saved by
 * tgroup_step), so that a replay records the step once, as the first run did. */
static int restore_fp8_histories(tbackend *be)
{
    if (ttrain_planted_bug() == TTRAIN_BUG_REPLAY_RECORDS_FP8) return 0;
    return be->fp8_histories_restore ? be->fp8_histories_restore(be) : 0;
}

static int audit_step(tgroup *g, int rep, long step, const double *dloss)
{
    trun *r = &g->runs[rep];
    tmodel *m = g->m;
    tbackend *be = g->be;
    int np = tmodel_n_params(m);
    for (int i = 0; i < np; i++) {
        tparam *p = tmodel_param(m, i);
        ktensor w = tbackend_slice(be, &p->w, rep);
        int64_t bad = 0;
        if (be->count_nonfinite(be, &w, &bad)) return -1;
        if (bad) {
            tslot s = step == 0 ? TSLOT_WEIGHTS : p->muon ? TSLOT_MUON : TSLOT_ADAMW;
            snprintf(r->where_slot, sizeof r->where_slot, "%s", tslot_get(s)->name);
            snprintf(r->where_tensor, sizeof r->where_tensor, "%s", p->name);
            r->where_layer = p->layer;
            r->found = 1;
            if (r->step > 0) r->step--; /* the update of the previous step wrote it */
            return 0;
        }
    }
    if (tmodel_zero_grads(m) || restore_fp8_histories(be)) return -1;
    g->audit_replica = rep;
    r->audit = 1;
    int rc = run_micro_batches(g, step, dloss);
    if (rc == 0) rc = tmodel_finish_grads(m);
    r->audit = 0;
    g->audit_replica = 0;
    if (rc < 0) return -1;
    if (r->found) return 0;
    for (int i = 0; i < np; i++) {
        tparam *p = tmodel_param(m, i);
        ktensor grad = tbackend_slice(be, &p->grad, rep);
        int64_t bad = 0;
        if (be->count_nonfinite(be, &grad, &bad)) return -1;
        if (bad) {
            snprintf(r->where_slot, sizeof r->where_slot, "%s", tslot_get(p->grad_slot)->name);
            snprintf(r->where_tensor, sizeof r->where_tensor, "grad %s", p->name);
            r->where_layer = p->layer;
            r->found = 1;
            return 0;
        }
    }
    /* finite everywhere: the norm's own sum overflowed */
    snprintf(r->where_slot, sizeof r->where_slot, "grad_norm");
    snprintf(r->where_tensor, sizeof r->where_tensor, "sum of squares");
    r->where_layer = -1;
    r->found = 1;
    return 0;
}

/* A NaN/Inf in replica rep's loss or gradient norm that loss scaling does
 * not explain: the audit names the first slot that produced one; the run
 * stops with status 3 (dead), the group goes on.  0, or -1 when the audit
 * itself failed (the group's error). */
static int stop_on_nonfinite(tgroup *g, int rep, long step, const double *dloss, const tstep_out *o)
{
    trun *r = &g->runs[rep];
    r->step = step;
    if (audit_step(g, rep, step, dloss) < 0)
        return trun_fail(&g->runs[0], 1, "step %ld: audit failed: %s", step, tbackend_error(g->be));
    ttrain_result *res = r->res;
    res->nonfinite = 1;
    res->nonfinite_step = r->step;
    snprintf(res->nonfinite_slot, sizeof res->nonfinite_slot, "%s", r->where_slot);
    snprintf(res->nonfinite_tensor, sizeof res->nonfinite_tensor, "%s", r->where_tensor);
    res->nonfinite_layer = r->where_layer;
    trun_log_nonfinite(r, o);
    char layer[32] = "", who[96] = "";
    if (r->where_layer >= 0) snprintf(layer, sizeof layer, " layer %d", r->where_layer);
    if (r->replicas > 1)
        snprintf(who, sizeof who, "replica %d (seed %llu): ", r->replica, (unsigned long long)r->cfg->seed);
    res->status = trun_fail(r, 3, "%snon-finite value at step %ld: first in slot %s%s, tensor %s (loss %g, grad norm %g)",
                            who, r->step, r->where_slot, layer, r->where_tensor, o->loss, o->grad_norm);
    r->dead = 1;
    return 0;
}

/* The optimizer update of every live replica that did not overflow. */
static int update(tgroup *g, long s, double lr_scale, const tstep_out *out)
{
    const ttrain_config *cfg = g->cfg;
    tbackend *be = g->be;
    tmodel *m = g->m;
    int any = 0;
    for (int k = 0; k < g->R; k++) {
        trun *r = &g->runs[k];
        double norm = out[k].grad_norm;
        double clip = cfg->grad_clip > 0 && norm > cfg->grad_clip ? cfg->grad_clip / norm : 1.0;
        double grad_scale = clip / r->st.loss_scale;
        int skip = r->dead || out[k].skipped;
        any |= !skip;
        g->adamw[k] = (tadamw_args){cfg->lr * lr_scale, cfg->beta1, cfg->beta2, cfg->adam_eps, cfg->weight_decay,
                                    s + 1, grad_scale,
                                    r->cfg->seed ^ (0xada3ull << 40) ^ (uint64_t)s * 0x9e3779b97f4a7c15ull, skip};
        g->muon[k] = (tmuon_args){cfg->muon_lr * lr_scale, cfg->muon_momentum, cfg->weight_decay, grad_scale,
                                  r->cfg->seed ^ (0x3a0ull << 40) ^ (uint64_t)s * 0x9e3779b97f4a7c15ull, skip};
    }
    if (!any) return 0;
    int rc = 0;
    for (int i = 0; i < tmodel_n_params(m) && !rc; i++) {
        tparam *p = tmodel_param(m, i);
        for (int k = 0; k < g->R; k++) {
            g->adamw[k].seed ^= (uint64_t)i << 20;
            g->muon[k].seed ^= (uint64_t)i << 20;
        }
        rc = p->muon ? be->muon(be, p, g->muon) : be->adamw(be, p, g->adamw);
    }
    if (!rc) rc = tmodel_sync_weights(m);
    if (rc) return trun_fail(&g->runs[0], 1, "step %ld update: %s", s, tbackend_error(be));
    for (int k = 0; k < g->R; k++) {
        trun *r = &g->runs[k];
        if (r->dead || out[k].skipped) continue;
        if (r->dynamic && ++r->st.good_steps >= LOSS_SCALE_GROWTH_INTERVAL) {
            r->st.loss_scale *= 2.0;
            r->st.good_steps = 0;
        }
    }
    return 0;
}

int tgroup_step(tgroup *g, long s, tstep_out *out)
{
    const ttrain_config *cfg = g->cfg;
    tbackend *be = g->be;
    tmodel *m = g->m;
    trun *r0 = &g->runs[0];
    memset(out, 0, (size_t)g->R * sizeof *out);
    /* --profile: not this process's first step (it loads kernels and picks
     * GEMM algorithms) unless it is the only one */
    int profiled = cfg->profile && (r0->prof_seen++ > 0 || s + 1 >= cfg->steps);
    r0->prof_last = trun_now();
    r0->prof_on = profiled;
    r0->prof_steps += profiled;
    for (int k = 0; k < g->R; k++) {
        g->runs[k].step = s;
        g->dloss[k] = g->runs[k].st.loss_scale / g->runs[k].tokens_per_step;
    }
    r0->hooks_now = at_hook_step(cfg, s);
    int rc = be->fp8_histories_save ? be->fp8_histories_save(be) : 0;
    if (!rc) rc = tmodel_zero_grads(m);
    if (!rc) rc = run_micro_batches(g, s, g->dloss);
    r0->hooks_now = 0;
    if (rc == TRUN_ABANDONED) {
        r0->prof_on = 0;
        return rc;
    }
    if (!rc) rc = tmodel_finish_grads(m);
    if (!rc) rc = be->allreduce(be, tmodel_params(m), tmodel_n_params(m));
    if (!rc) rc = be->grad_norm(be, tbackend_site(be, TSLOT_GRAD_NORM, -1), tmodel_params(m), tmodel_n_params(m), g->norm);
    if (rc) return trun_fail(r0, r0->failed ? 2 : 1, "step %ld: %s", s, tbackend_error(be));
    /* copies: a replay by the audit overwrites the group's buffers */
    for (int k = 0; k < g->R; k++) {
        out[k].loss = g->loss[k];
        out[k].grad_norm = g->norm[k] / g->runs[k].st.loss_scale;
    }
    double lr_scale = lr_factor(cfg, s);
    int audited = 0, live = 0;
    for (int k = 0; k < g->R; k++) {
        trun *r = &g->runs[k];
        out[k].lr = cfg->lr * lr_scale;
        if (r->dead) continue;
        r->res->loss[s] = out[k].loss;
        r->res->grad_norm[s] = out[k].grad_norm;
        if (isfinite(out[k].loss) && isfinite(out[k].grad_norm)) {
            live = 1;
            continue;
        }
        if (!r->dynamic || !isfinite(out[k].loss)) {
            if (stop_on_nonfinite(g, k, s, g->dloss, &out[k])) return 1;
            audited = 1;
            continue;
        }
        live = 1;
        /* gradient overflow under loss scaling: halve and skip */
        r->st.loss_scale /= 2.0;
        r->st.good_steps = 0;
        r->res->skipped_steps++;
        out[k].skipped = 1;
    }
    if (audited && live) {
        /* the audit stopped its replay at the first NaN: the other replicas'
         * gradients again, in full (the same bits as before the replay) */
        rc = tmodel_zero_grads(m);
        if (!rc) rc = restore_fp8_histories(be);
        if (!rc) rc = run_micro_batches(g, s, g->dloss);
        if (rc == TRUN_ABANDONED) return rc;
        if (!rc) rc = tmodel_finish_grads(m);
        if (rc) return trun_fail(r0, 1, "step %ld: %s", s, tbackend_error(be));
    }
    if (profiled && be->sync(be) == 0) {
        double now = trun_now();
        r0->prof_ms[TPROF_NORM] += 1e3 * (now - r0->prof_last); /* grad sync, all-reduce, norm */
        r0->prof_last = now;
    }
    if ((rc = update(g, s, lr_scale, out))) return rc;
    if (be->sync(be)) return trun_fail(r0, 1, "step %ld: %s", s, tbackend_error(be));
    if (profiled) r0->prof_ms[TPROF_UPDATE] += 1e3 * (trun_now() - r0->prof_last);
    r0->prof_on = 0;
    return 0;
}

/* ---- validation and the state hash ------------------------------------------------------------- */

/* Validation is forward-only: delayed fp8 scaling reads its amax histories
 * there and records nothing (be->fp8_frozen), so that how often a run
 * validates never changes what it trains. */
static int validate_passes(tgroup *g, double *val);

int tgroup_validate(tgroup *g, double *val)
{
    g->be->fp8_frozen = ttrain_planted_bug() != TTRAIN_BUG_VALIDATION_RECORDS_FP8;
    int rc = validate_passes(g, val);
    g->be->fp8_frozen = 0;
    return rc;
}

static int validate_passes(tgroup *g, double *val)
{
    const ttrain_config *cfg = g->cfg;
    const size_t BT = (size_t)cfg->batch * cfg->seq;
    for (int r = 0; r < g->R; r++) g->sum[r] = 0.0;
    for (int i = 0; i < cfg->val_batches; i++) {
        if (trun_stop_signal(&g->runs[0])) {
            for (int r = 0; r < g->R; r++) val[r] = NAN; /* cut short: no figure rather than a partial mean */
            return 0;
        }
        /* every replica on the same validation windows */
        tdata_val_batch(&g->data, i, cfg->batch, cfg->seq, g->tok, g->tgt);
        for (int r = 1; r < g->R; r++) {
            memcpy(g->tok + r * BT, g->tok, BT * sizeof *g->tok);
            memcpy(g->tgt + r * BT, g->tgt, BT * sizeof *g->tgt);
        }
        int rc = tmodel_step_micro(g->m, g->tok, g->tgt, NULL, g->loss);
        if (rc) return rc;
        for (int r = 0; r < g->R; r++) g->sum[r] += g->loss[r];
    }
    for (int r = 0; r < g->R; r++) val[r] = g->sum[r] / cfg->val_batches;
    return 0;
}

/* Replica r's state image: every parameter's w, master, m, v and low bits,
 * in that order, as the hash reads them.  size only (img NULL) or written. */
static int state_image(trun *r, unsigned char *img, size_t *size)
{
    size_t at = 0;
    for (int i = 0; i < tmodel_n_params(r->m); i++) {
        tparam mine = tbackend_param_slice(r->be, tmodel_param(r->m, i), r->replica);
        const tparam *p = &mine;
        const ktensor *ts[] = {&p->w, &p->master, &p->m, &p->v};
        for (size_t j = 0; j < sizeof ts / sizeof ts[0]; j++) {
            if (!ts[j]->data) continue;
            size_t n = tensor_image_bytes(ts[j]);
            if (img && r->be->read_bytes(r->be, ts[j], img + at)) return -1;
            at += n;
        }
        if (p->lowbits) {
            size_t n = (size_t)ktensor_numel(&p->w) * sizeof(uint16_t);
            if (img && r->be->raw_download(r->be, img + at, p->lowbits, n)) return -1;
            at += n;
        }
    }
    *size = at;
    return 0;
}

typedef struct {
    const unsigned char *img;
    size_t n;
    uint64_t hash;
} hash_job;

static void *hash_image(void *arg)
{
    hash_job *j = arg;
    j->hash = ttrain_fnv1a(TTRAIN_FNV_OFFSET, j->img, j->n);
    return NULL;
}

/* Every replica's state hash (0 where its state could not be read): the
 * images are read here one replica after another and hashed on up to 16 host
 * threads within about 1 GiB of buffers.  FNV-1a goes a byte at a time
 * (about 1 GB/s), and 64 replicas of the 1-minute recipe hold 3.7 GB of
 * state: 4 s of a 1000-step run's wall time on one thread. */
void tgroup_state_hashes(tgroup *g, uint64_t *out)
{
    size_t n = 0;
    for (int k = 0; k < g->R; k++) out[k] = 0;
    if (state_image(&g->runs[0], NULL, &n)) return;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int T = (int)(cpus < 1 ? 1 : cpus > 16 ? 16 : cpus);
    if (T > g->R) T = g->R;
    while (T > 1 && (size_t)T * n > ((size_t)1 << 30)) T--;
    unsigned char **img = calloc((size_t)T, sizeof *img);
    hash_job *job = calloc((size_t)T, sizeof *job);
    pthread_t *th = calloc((size_t)T, sizeof *th);
    int *threaded = calloc((size_t)T, sizeof *threaded);
    int ok = img && job && th && threaded;
    for (int t = 0; ok && t < T; t++) ok = (img[t] = malloc(n + 1)) != NULL;
    for (int k0 = 0; ok && k0 < g->R; k0 += T) {
        int k = g->R - k0 < T ? g->R - k0 : T;
        for (int t = 0; t < k; t++) {
            size_t got = 0;
            job[t] = (hash_job){img[t], n, 0};
            if (state_image(&g->runs[k0 + t], img[t], &got) || got != n) {
                job[t].img = NULL;
                continue;
            }
            threaded[t] = k > 1 && pthread_create(&th[t], NULL, hash_image, &job[t]) == 0;
            if (!threaded[t]) hash_image(&job[t]);
        }
        for (int t = 0; t < k; t++) {
            if (threaded[t]) pthread_join(th[t], NULL);
            threaded[t] = 0;
            if (job[t].img) out[k0 + t] = job[t].hash;
        }
    }
    for (int t = 0; img && t < T; t++) free(img[t]);
    free(img), free(job), free(th), free(threaded);
    if (!ok) /* no memory for the images: one replica at a time, hashed as read */
        for (int k = 0; k < g->R; k++) out[k] = trun_state_hash(&g->runs[k]);
}

uint64_t trun_state_hash(trun *r)
{
    uint64_t h = TTRAIN_FNV_OFFSET;
    for (int i = 0; i < tmodel_n_params(r->m); i++) {
        tparam mine = tbackend_param_slice(r->be, tmodel_param(r->m, i), r->replica);
        const tparam *p = &mine;
        const ktensor *ts[] = {&p->w, &p->master, &p->m, &p->v};
        for (size_t j = 0; j < sizeof ts / sizeof ts[0]; j++) {
            if (!ts[j]->data) continue;
            size_t n = tensor_image_bytes(ts[j]);
            if (trun_grow_buf(r, n) || r->be->read_bytes(r->be, ts[j], r->buf)) return 0;
            h = ttrain_fnv1a(h, r->buf, n);
        }
        if (p->lowbits) {
            size_t n = (size_t)ktensor_numel(&p->w) * sizeof(uint16_t);
            if (trun_grow_buf(r, n) || r->be->raw_download(r->be, r->buf, p->lowbits, n)) return 0;
            h = ttrain_fnv1a(h, r->buf, n);
        }
    }
    return h;
}
