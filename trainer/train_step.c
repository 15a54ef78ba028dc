/* trainer/train_step.c — one training step of a run: micro-batches
 * (forward + backward, gradients accumulating), the lm_head/embedding
 * gradient fold, the all-reduce, the gradient norm, non-finite detection,
 * loss scaling, clipping and the optimizer update; plus validation, plan
 * switches, the learning-rate schedule and the model's observer (hash and
 * dump hooks, --profile timing, the non-finite audit). */
#include "trainer/train_run.h"

#include <math.h>
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
    trun *r = ctx;
    if (r->prof_on) {
        /* the time since the previous slot finished is this slot's */
        if (r->be->sync(r->be)) return -1;
        double now = trun_now();
        r->prof_ms[slot] += 1e3 * (now - r->prof_last);
        r->prof_last = now;
    }
    if (r->audit) {
        int64_t bad = 0;
        if (r->be->count_nonfinite(r->be, t, &bad)) return -1;
        if (bad) {
            r->found = 1;
            snprintf(r->where_slot, sizeof r->where_slot, "%s", tslot_get(slot)->name);
            snprintf(r->where_tensor, sizeof r->where_tensor, "%s", tensor);
            r->where_layer = layer;
            return 1;
        }
        return 0;
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

int trun_switch_plan(trun *r, long s)
{
    const ttrain_config *cfg = r->cfg;
    for (int i = 0; i < cfg->n_switches; i++) {
        if (cfg->switches[i].step != s) continue;
        tplan *next = malloc(sizeof *next);
        if (!next) return trun_fail(r, 1, "out of memory");
        *next = r->plan;
        char err[2048];
        int bad = tplan_set(next, cfg->switches[i].overrides, err, sizeof err) ||
                  tplan_check_layers(next, cfg->model.n_layer, err, sizeof err) ||
                  tmodel_rebind(r->m, next, err, sizeof err);
        if (!bad) r->plan = *next;
        free(next);
        if (bad) return trun_fail(r, 2, "switch at step %ld: %s", s, err);
        trun_log_switch(r, s, cfg->switches[i].overrides);
    }
    return 0;
}

/* ---- the step ------------------------------------------------------------------------------------ */

static int run_micro_batches(trun *r, double dloss, double *loss)
{
    const ttrain_config *cfg = r->cfg;
    double sum = 0.0;
    for (int mb = 0; mb < cfg->accum; mb++) {
        if (!r->audit && trun_stop_signal(r)) return TRUN_ABANDONED; /* before anything of the step is applied */
        r->micro = mb;
        tdata_train_batch(&r->data, cfg->data_seed, r->step, mb, cfg->rank, cfg->batch, cfg->seq, r->tok, r->tgt);
        double l;
        int rc = tmodel_step_micro(r->m, r->tok, r->tgt, dloss, &l);
        if (rc) return rc;
        sum += l;
    }
    *loss = sum / cfg->accum;
    return 0;
}

/* Replay step r->step with every slot output checked; names the first
 * non-finite value in r->where_*. */
static int audit_step(trun *r, double dloss)
{
    tmodel *m = r->m;
    tbackend *be = r->be;
    int np = tmodel_n_params(m);
    for (int i = 0; i < np; i++) {
        tparam *p = tmodel_param(m, i);
        int64_t bad = 0;
        if (be->count_nonfinite(be, &p->w, &bad)) return -1;
        if (bad) {
            tslot s = r->step == 0 ? TSLOT_WEIGHTS : p->muon ? TSLOT_MUON : TSLOT_ADAMW;
            snprintf(r->where_slot, sizeof r->where_slot, "%s", tslot_get(s)->name);
            snprintf(r->where_tensor, sizeof r->where_tensor, "%s", p->name);
            r->where_layer = p->layer;
            r->found = 1;
            if (r->step > 0) r->step--; /* the update of the previous step wrote it */
            return 0;
        }
    }
    if (tmodel_zero_grads(m)) return -1;
    r->audit = 1;
    double loss;
    int rc = run_micro_batches(r, dloss, &loss);
    if (rc == 0) rc = tmodel_finish_grads(m);
    r->audit = 0;
    if (rc < 0) return -1;
    if (r->found) return 0;
    for (int i = 0; i < np; i++) {
        tparam *p = tmodel_param(m, i);
        int64_t bad = 0;
        if (be->count_nonfinite(be, &p->grad, &bad)) return -1;
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

/* A NaN/Inf in the loss or the gradient norm that loss scaling does not
 * explain: the audit names the first slot that produced one (status 3). */
static int stop_on_nonfinite(trun *r, double dloss, const tstep_out *o)
{
    long s = r->step;
    if (audit_step(r, dloss) < 0) return trun_fail(r, 1, "step %ld: audit failed: %s", s, tbackend_error(r->be));
    ttrain_result *res = r->res;
    res->nonfinite = 1;
    res->nonfinite_step = r->step;
    snprintf(res->nonfinite_slot, sizeof res->nonfinite_slot, "%s", r->where_slot);
    snprintf(res->nonfinite_tensor, sizeof res->nonfinite_tensor, "%s", r->where_tensor);
    res->nonfinite_layer = r->where_layer;
    trun_log_nonfinite(r, o);
    char layer[32] = "";
    if (r->where_layer >= 0) snprintf(layer, sizeof layer, " layer %d", r->where_layer);
    return trun_fail(r, 3, "non-finite value at step %ld: first in slot %s%s, tensor %s (loss %g, grad norm %g)",
                     r->step, r->where_slot, layer, r->where_tensor, o->loss, o->grad_norm);
}

static int update(trun *r, long s, double lr_scale, double grad_norm)
{
    const ttrain_config *cfg = r->cfg;
    tbackend *be = r->be;
    tmodel *m = r->m;
    double clip = cfg->grad_clip > 0 && grad_norm > cfg->grad_clip ? cfg->grad_clip / grad_norm : 1.0;
    double grad_scale = clip / r->st.loss_scale;
    tadamw_args aa = {cfg->lr * lr_scale, cfg->beta1, cfg->beta2, cfg->adam_eps, cfg->weight_decay, s + 1, grad_scale,
                      cfg->seed ^ (0xada3ull << 40) ^ (uint64_t)s * 0x9e3779b97f4a7c15ull};
    tmuon_args ma = {cfg->muon_lr * lr_scale, cfg->muon_momentum, cfg->weight_decay, grad_scale,
                     cfg->seed ^ (0x3a0ull << 40) ^ (uint64_t)s * 0x9e3779b97f4a7c15ull};
    int rc = 0;
    for (int i = 0; i < tmodel_n_params(m) && !rc; i++) {
        tparam *p = tmodel_param(m, i);
        aa.seed ^= (uint64_t)i << 20;
        ma.seed ^= (uint64_t)i << 20;
        rc = p->muon ? be->muon(be, p, &ma) : be->adamw(be, p, &aa);
    }
    if (!rc) rc = tmodel_sync_weights(m);
    if (rc) return trun_fail(r, 1, "step %ld update: %s", s, tbackend_error(be));
    if (r->dynamic && ++r->st.good_steps >= LOSS_SCALE_GROWTH_INTERVAL) {
        r->st.loss_scale *= 2.0;
        r->st.good_steps = 0;
    }
    return 0;
}

int trun_step(trun *r, long s, tstep_out *out)
{
    const ttrain_config *cfg = r->cfg;
    tbackend *be = r->be;
    tmodel *m = r->m;
    memset(out, 0, sizeof *out);
    r->prof_last = trun_now();
    r->prof_on = cfg->profile;
    r->step = s;
    r->hooks_now = at_hook_step(cfg, s);
    double dloss = r->st.loss_scale / r->tokens_per_step;
    double loss = NAN, norm = 0.0;
    int rc = tmodel_zero_grads(m);
    if (!rc) rc = run_micro_batches(r, dloss, &loss);
    r->hooks_now = 0;
    if (rc == TRUN_ABANDONED) {
        r->prof_on = 0;
        return rc;
    }
    if (!rc) rc = tmodel_finish_grads(m);
    if (!rc) rc = be->allreduce(be, tmodel_params(m), tmodel_n_params(m));
    if (!rc) rc = be->grad_norm(be, tbackend_site(be, TSLOT_GRAD_NORM, -1), tmodel_params(m), tmodel_n_params(m), &norm);
    if (rc) return trun_fail(r, r->failed ? 2 : 1, "step %ld: %s", s, tbackend_error(be));
    out->loss = loss;
    out->grad_norm = norm / r->st.loss_scale;
    r->res->loss[s] = out->loss;
    r->res->grad_norm[s] = out->grad_norm;
    if (!isfinite(out->loss) || !isfinite(out->grad_norm)) {
        if (!r->dynamic || !isfinite(out->loss)) return stop_on_nonfinite(r, dloss, out);
        /* gradient overflow under loss scaling: halve and skip */
        r->st.loss_scale /= 2.0;
        r->st.good_steps = 0;
        r->res->skipped_steps++;
        out->skipped = 1;
    }
    double lr_scale = lr_factor(cfg, s);
    out->lr = cfg->lr * lr_scale;
    if (cfg->profile && be->sync(be) == 0) {
        double now = trun_now();
        r->prof_ms[TSLOT_COUNT + 1] += 1e3 * (now - r->prof_last); /* grad sync, all-reduce, norm */
        r->prof_last = now;
    }
    if (!out->skipped && (rc = update(r, s, lr_scale, out->grad_norm))) return rc;
    if (be->sync(be)) return trun_fail(r, 1, "step %ld: %s", s, tbackend_error(be));
    if (cfg->profile) r->prof_ms[TSLOT_COUNT] += 1e3 * (trun_now() - r->prof_last);
    r->prof_on = 0;
    return 0;
}

/* ---- validation and the state hash ------------------------------------------------------------- */

int trun_validate(trun *r, double *out)
{
    const ttrain_config *cfg = r->cfg;
    double sum = 0.0;
    for (int i = 0; i < cfg->val_batches; i++) {
        if (trun_stop_signal(r)) {
            *out = NAN; /* cut short: no figure rather than a partial mean */
            return 0;
        }
        tdata_val_batch(&r->data, i, cfg->batch, cfg->seq, r->tok, r->tgt);
        double l;
        int rc = tmodel_step_micro(r->m, r->tok, r->tgt, 0.0, &l);
        if (rc) return rc;
        sum += l;
    }
    *out = sum / cfg->val_batches;
    return 0;
}

uint64_t trun_state_hash(trun *r)
{
    uint64_t h = TTRAIN_FNV_OFFSET;
    for (int i = 0; i < tmodel_n_params(r->m); i++) {
        tparam *p = tmodel_param(r->m, i);
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
