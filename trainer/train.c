/* trainer/train.c — see train.h. */
#include "trainer/train.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/jsonl.h"
#include "trainer/data.h"

#define LOSS_SCALE_GROWTH_INTERVAL 2000

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

/* ---- run state ---------------------------------------------------------------------- */

typedef struct {
    const ttrain_config *cfg;
    ttrain_result *res;
    tmodel *m;
    tbackend *be;
    FILE *log;              /* JSON Lines, rank 0 */
    long step;
    int micro;
    int hooks_now;          /* hash/dump hooks fire during this step */
    int audit;              /* non-finite audit: stop at the first NaN/Inf */
    int found;
    char where_slot[48], where_tensor[48];
    int where_layer;
    double prof_ms[TSLOT_COUNT + 2]; /* per slot, then the optimizer and the rest of the step */
    double prof_last;
    int prof_on;            /* inside a training step (validation is not profiled) */
    unsigned char *buf;     /* host copy of a tensor image */
    size_t buf_len;
    int failed;             /* an observer hit an I/O error */
} run_ctx;

static int run_fail(ttrain_result *res, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int run_fail(ttrain_result *res, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->error, sizeof res->error, fmt, ap);
    va_end(ap);
    return status;
}

static int grow_buf(run_ctx *c, size_t n)
{
    if (n <= c->buf_len) return 0;
    unsigned char *b = realloc(c->buf, n);
    if (!b) return -1;
    c->buf = b;
    c->buf_len = n;
    return 0;
}

static int at_hook_step(const ttrain_config *cfg, long step)
{
    if (cfg->n_at_steps == 0) return 1;
    for (int i = 0; i < cfg->n_at_steps; i++)
        if (cfg->at_steps[i] == step) return 1;
    return 0;
}

static void shape_string(const ktensor *t, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < t->ndim; i++)
        n += (size_t)snprintf(buf + n, n < len ? len - n : 0, "%s%lld", i ? "," : "", (long long)t->shape[i]);
}

static int hash_tensor(run_ctx *c, tslot slot, int layer, const char *tensor, const ktensor *t)
{
    size_t n = tensor_image_bytes(t);
    if (grow_buf(c, n) || c->be->read_bytes(c->be, t, c->buf)) return -1;
    uint64_t h = ttrain_fnv1a(TTRAIN_FNV_OFFSET, c->buf, n);
    ttrain_result *res = c->res;
    thash_record *next = realloc(res->hashes, (size_t)(res->n_hashes + 1) * sizeof *next);
    if (!next) return -1;
    res->hashes = next;
    thash_record *r = &res->hashes[res->n_hashes++];
    r->step = c->step;
    r->micro = c->micro;
    r->slot = slot;
    r->layer = layer;
    snprintf(r->tensor, sizeof r->tensor, "%s", tensor);
    r->hash = h;
    if (c->log)
        fprintf(c->log, "{\"record\":\"hash\",\"step\":%ld,\"micro\":%d,\"slot\":\"%s\",\"layer\":%d,\"tensor\":\"%s\","
                        "\"format\":\"%s\",\"hash\":\"%016llx\"}\n",
                c->step, c->micro, tslot_get(slot)->name, layer, tensor, prec_format_name(t->format),
                (unsigned long long)h);
    return 0;
}

static int dump_tensor(run_ctx *c, tslot slot, int layer, const char *tensor, const ktensor *t)
{
    const char *dir = c->cfg->dump_dir ? c->cfg->dump_dir : ".";
    char path[4096], tmp[4200], shape[96];
    snprintf(path, sizeof path, "%s/step%ld.micro%d.%s.L%d.%s.bin", dir, c->step, c->micro, tslot_get(slot)->name, layer,
             tensor);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    size_t n = tensor_image_bytes(t);
    if (grow_buf(c, n) || c->be->read_bytes(c->be, t, c->buf)) return -1;
    FILE *fp = fopen(tmp, "wb");
    if (!fp) return -1;
    int ok = fwrite(c->buf, 1, n, fp) == n;
    ok &= fclose(fp) == 0;
    if (!ok || rename(tmp, path)) {
        unlink(tmp);
        return -1;
    }
    shape_string(t, shape, sizeof shape);
    if (c->log) {
        fprintf(c->log, "{\"record\":\"dump\",\"step\":%ld,\"micro\":%d,\"slot\":\"%s\",\"layer\":%d,\"tensor\":\"%s\","
                        "\"format\":\"%s\",\"shape\":[%s],\"fp8_scale_appended\":%s,\"file\":",
                c->step, c->micro, tslot_get(slot)->name, layer, tensor, prec_format_name(t->format), shape,
                t->scale ? "true" : "false");
        base_json_string(c->log, path);
        fprintf(c->log, "}\n");
    }
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The model's observer: hooks, profiling and the non-finite audit. */
static int observe(void *ctx, tslot slot, int layer, const char *tensor, const ktensor *t)
{
    run_ctx *c = ctx;
    if (c->prof_on) {
        /* the time since the previous slot finished is this slot's */
        if (c->be->sync(c->be)) return -1;
        double t = now_s();
        c->prof_ms[slot] += 1e3 * (t - c->prof_last);
        c->prof_last = t;
    }
    if (c->audit) {
        int64_t bad = 0;
        if (c->be->count_nonfinite(c->be, t, &bad)) return -1;
        if (bad) {
            c->found = 1;
            snprintf(c->where_slot, sizeof c->where_slot, "%s", tslot_get(slot)->name);
            snprintf(c->where_tensor, sizeof c->where_tensor, "%s", tensor);
            c->where_layer = layer;
            return 1;
        }
        return 0;
    }
    if (!c->hooks_now) return 0;
    if (c->cfg->hash_slot[slot] && hash_tensor(c, slot, layer, tensor, t)) {
        c->failed = 1;
        return -1;
    }
    if (c->cfg->dump_slot[slot] && dump_tensor(c, slot, layer, tensor, t)) {
        c->failed = 1;
        snprintf(c->be->error, sizeof c->be->error, "cannot write a dump of slot %s into %s", tslot_get(slot)->name,
                 c->cfg->dump_dir ? c->cfg->dump_dir : ".");
        return -1;
    }
    return 0;
}

/* ---- schedule ------------------------------------------------------------------------- */

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

/* ---- pieces of a step ------------------------------------------------------------------- */


static int run_micro_batches(run_ctx *c, const tdata *d, int32_t *tok, int32_t *tgt, double dloss, double *loss)
{
    const ttrain_config *cfg = c->cfg;
    double sum = 0.0;
    for (int mb = 0; mb < cfg->accum; mb++) {
        c->micro = mb;
        tdata_train_batch(d, cfg->seed, c->step, mb, cfg->rank, cfg->batch, cfg->seq, tok, tgt);
        double l;
        int rc = tmodel_step_micro(c->m, tok, tgt, dloss, &l);
        if (rc) return rc;
        sum += l;
    }
    *loss = sum / cfg->accum;
    return 0;
}

static tslot grad_writer(const tparam *p, tmodel_kind kind)
{
    const char *n = p->layer >= 0 && strchr(p->name, '.') ? strchr(p->name, '.') + 1 : p->name;
    if (strcmp(n, "attn.qkv.w") == 0) return TSLOT_ATTN_QKV_WGRAD;
    if (strcmp(n, "attn.out.w") == 0) return TSLOT_ATTN_OUT_WGRAD;
    if (strcmp(n, "mlp.up.w") == 0) return TSLOT_MLP_UP_WGRAD;
    if (strcmp(n, "mlp.down.w") == 0) return TSLOT_MLP_DOWN_WGRAD;
    if (strncmp(n, "norm.attn", 9) == 0) return TSLOT_NORM_ATTN;
    if (strncmp(n, "norm.mlp", 8) == 0) return TSLOT_NORM_MLP;
    if (strncmp(n, "norm.final", 10) == 0) return TSLOT_NORM_FINAL;
    if (strcmp(n, "wpe") == 0) return TSLOT_EMBEDDING;
    return kind == TMODEL_MODERN ? TSLOT_TRANSPOSE : TSLOT_EMBEDDING; /* wte: last written by these */
}

/* Replay step c->step with every slot output checked; names the first
 * non-finite value in c->where_*. */
static int audit_step(run_ctx *c, const tdata *d, int32_t *tok, int32_t *tgt, double dloss)
{
    tmodel *m = c->m;
    tbackend *be = c->be;
    int np = tmodel_n_params(m);
    for (int i = 0; i < np; i++) {
        tparam *p = tmodel_param(m, i);
        int64_t bad = 0;
        if (be->count_nonfinite(be, &p->w, &bad)) return -1;
        if (bad) {
            tslot s = c->step == 0 ? TSLOT_WEIGHTS : p->muon ? TSLOT_MUON : TSLOT_ADAMW;
            snprintf(c->where_slot, sizeof c->where_slot, "%s", tslot_get(s)->name);
            snprintf(c->where_tensor, sizeof c->where_tensor, "%s", p->name);
            c->where_layer = p->layer;
            c->found = 1;
            if (c->step > 0) c->step--; /* the update of the previous step wrote it */
            return 0;
        }
    }
    if (tmodel_zero_grads(m)) return -1;
    c->audit = 1;
    double loss;
    int rc = run_micro_batches(c, d, tok, tgt, dloss, &loss);
    if (rc == 0) rc = tmodel_finish_grads(m);
    c->audit = 0;
    if (rc < 0) return -1;
    if (c->found) return 0;
    for (int i = 0; i < np; i++) {
        tparam *p = tmodel_param(m, i);
        int64_t bad = 0;
        if (be->count_nonfinite(be, &p->grad, &bad)) return -1;
        if (bad) {
            snprintf(c->where_slot, sizeof c->where_slot, "%s", tslot_get(grad_writer(p, c->cfg->model.kind))->name);
            snprintf(c->where_tensor, sizeof c->where_tensor, "grad %s", p->name);
            c->where_layer = p->layer;
            c->found = 1;
            return 0;
        }
    }
    /* finite everywhere: the norm's own sum overflowed */
    snprintf(c->where_slot, sizeof c->where_slot, "grad_norm");
    snprintf(c->where_tensor, sizeof c->where_tensor, "sum of squares");
    c->where_layer = -1;
    c->found = 1;
    return 0;
}

static int validate(run_ctx *c, const tdata *d, int32_t *tok, int32_t *tgt, double *out)
{
    const ttrain_config *cfg = c->cfg;
    double sum = 0.0;
    for (int i = 0; i < cfg->val_batches; i++) {
        tdata_val_batch(d, i, cfg->batch, cfg->seq, tok, tgt);
        double l;
        int rc = tmodel_step_micro(c->m, tok, tgt, 0.0, &l);
        if (rc) return rc;
        sum += l;
    }
    *out = sum / cfg->val_batches;
    return 0;
}

static uint64_t state_hash(run_ctx *c)
{
    uint64_t h = TTRAIN_FNV_OFFSET;
    for (int i = 0; i < tmodel_n_params(c->m); i++) {
        tparam *p = tmodel_param(c->m, i);
        const ktensor *ts[] = {&p->w, &p->master, &p->m, &p->v};
        for (size_t j = 0; j < sizeof ts / sizeof ts[0]; j++) {
            if (!ts[j]->data) continue;
            size_t n = tensor_image_bytes(ts[j]);
            if (grow_buf(c, n) || c->be->read_bytes(c->be, ts[j], c->buf)) return 0;
            h = ttrain_fnv1a(h, c->buf, n);
        }
        if (p->lowbits) {
            size_t n = (size_t)ktensor_numel(&p->w) * sizeof(uint16_t);
            if (grow_buf(c, n) || c->be->raw_download(c->be, c->buf, p->lowbits, n)) return 0;
            h = ttrain_fnv1a(h, c->buf, n);
        }
    }
    return h;
}

static void write_header(run_ctx *c, const tdata *d, const tplan *plan, long start)
{
    const ttrain_config *cfg = c->cfg;
    const tmodel_config *mc = &cfg->model;
    char json[8192], extra[12288];
    tplan_to_json(plan, json, sizeof json);
    snprintf(extra, sizeof extra,
             "\"backend\":\"%s\",\"plan\":%s,\"model\":{\"family\":\"%s\",\"layers\":%d,\"width\":%d,\"heads\":%d,"
             "\"vocab\":%d,\"context\":%d,\"norm_gain\":%d,\"softcap\":%g,\"params\":%lld},"
             "\"batch\":%d,\"seq\":%d,\"accum\":%d,\"world\":%d,\"steps\":%ld,\"start_step\":%ld,\"lr\":%g,"
             "\"warmup\":%ld,\"schedule\":\"%s\",\"cooldown_frac\":%g,\"min_lr_frac\":%g,\"weight_decay\":%g,"
             "\"grad_clip\":%g,\"muon_lr\":%g,\"seed\":%llu,\"train_tokens\":%lld,\"val_tokens\":%lld",
             cfg->backend, json, tmodel_kind_name(mc->kind), mc->n_layer, mc->n_embd, mc->n_head, mc->vocab,
             mc->seq_len, mc->norm_gain, mc->softcap, (long long)tmodel_param_count(mc), cfg->batch, cfg->seq,
             cfg->accum, cfg->world, cfg->steps, start, cfg->lr, cfg->warmup,
             cfg->schedule == TSCHED_LINEAR ? "linear" : "cosine", cfg->cooldown_frac, cfg->min_lr_frac,
             cfg->weight_decay, cfg->grad_clip, cfg->muon_lr, (unsigned long long)cfg->seed,
             (long long)d->train_tokens, (long long)d->val_tokens);
    base_json_header(c->log, "train", extra);
    fprintf(c->log, "{\"record\":\"data\",\"source\":");
    base_json_string(c->log, d->source);
    fprintf(c->log, ",\"vocab\":%d}\n", d->vocab);
}

static void json_num_or_null(FILE *fp, double x)
{
    if (isnan(x)) fputs("null", fp);
    else base_json_double(fp, x);
}

/* ---- the run -------------------------------------------------------------------------------- */

int ttrain_run(const ttrain_config *cfg, ttrain_result *res)
{
    memset(res, 0, sizeof *res);
    char err[1024];
    if (cfg->batch <= 0 || cfg->seq <= 0 || cfg->accum <= 0 || cfg->steps <= 0 || cfg->val_batches <= 0)
        return run_fail(res, 2, "batch %d, seq %d, accum %d, steps %ld and val batches %d must all be positive",
                        cfg->batch, cfg->seq, cfg->accum, cfg->steps, cfg->val_batches);
    if (cfg->seq > cfg->model.seq_len)
        return run_fail(res, 2, "sequence length %d exceeds the model's context %d", cfg->seq, cfg->model.seq_len);
    if (cfg->world < 1 || cfg->rank < 0 || cfg->rank >= cfg->world)
        return run_fail(res, 2, "rank %d of world %d: need 0 <= rank < world", cfg->rank, cfg->world);
    res->loss = malloc((size_t)cfg->steps * sizeof *res->loss);
    res->grad_norm = malloc((size_t)cfg->steps * sizeof *res->grad_norm);
    res->val_loss = malloc((size_t)cfg->steps * sizeof *res->val_loss);
    res->step_ms = malloc((size_t)cfg->steps * sizeof *res->step_ms);
    if (!res->loss || !res->grad_norm || !res->val_loss || !res->step_ms) return run_fail(res, 1, "out of memory");
    for (long s = 0; s < cfg->steps; s++) res->loss[s] = res->grad_norm[s] = res->val_loss[s] = res->step_ms[s] = NAN;
    res->final_val_loss = NAN;

    tdata data;
    if (tdata_open(&data, cfg->data_path, cfg->val_frac, cfg->shard_vocab, err, sizeof err))
        return run_fail(res, 2, "%s", err);
    int status = 0;
    tbackend *be = NULL;
    tmodel *m = NULL;
    FILE *log = NULL;
    char log_tmp[4160] = "";
    int32_t *tok = NULL, *tgt = NULL;
    run_ctx c = {0};
    tplan plan = cfg->plan, next_plan;
    tckpt_state st = {0, cfg->plan.slot[TSLOT_LOSS_SCALE].variant == TLOSS_SCALE_DYNAMIC ? cfg->loss_scale_init : 1.0, 0,
                      cfg->seed};
    int dynamic = plan.slot[TSLOT_LOSS_SCALE].variant == TLOSS_SCALE_DYNAMIC;

    if (data.vocab > cfg->model.vocab) {
        status = run_fail(res, 2, "%s has vocabulary %d but the model's is %d", data.source, data.vocab, cfg->model.vocab);
        goto done;
    }
    if (tdata_check_windows(&data, cfg->seq, err, sizeof err)) {
        status = run_fail(res, 2, "%s", err);
        goto done;
    }
    if (cfg->resume_path) {
        tmodel_config mc;
        char json[8192];
        tplan saved;
        if (tckpt_peek(cfg->resume_path, &mc, json, sizeof json, &st, err, sizeof err) ||
            tplan_from_json(&saved, json, err, sizeof err)) {
            status = run_fail(res, 2, "%s", err);
            goto done;
        }
        if (memcmp(&mc, &cfg->model, sizeof mc) != 0 || !tplan_equal(&saved, &cfg->plan)) {
            status = run_fail(res, 2, "checkpoint %s was written for another model or plan than this run's",
                              cfg->resume_path);
            goto done;
        }
        if (st.steps_done > cfg->steps) {
            status = run_fail(res, 2, "checkpoint %s is at step %ld, past --steps %ld", cfg->resume_path,
                              st.steps_done, cfg->steps);
            goto done;
        }
    }
    if (strcmp(cfg->backend, "cpu") == 0) be = tbackend_cpu_create();
    else if (strcmp(cfg->backend, "cuda") == 0) {
        be = tbackend_cuda_create(err, sizeof err);
        if (!be) {
            status = run_fail(res, 1, "cuda backend unavailable: %s", err);
            goto done;
        }
    } else {
        status = run_fail(res, 2, "unknown backend '%s' (backends: cpu, cuda)", cfg->backend);
        goto done;
    }
    if (!be) {
        status = run_fail(res, 1, "out of memory");
        goto done;
    }
    size_t mem_before = 0, mem_after = 0;
    if (be->mem_used(be, &mem_before)) {
        status = run_fail(res, 1, "%s", tbackend_error(be));
        goto done;
    }
    if (tbackend_bind_plan(be, &plan)) {
        status = run_fail(res, 2, "%s", tbackend_error(be));
        goto done;
    }
    if (cfg->world > 1 && be->dp_init(be, cfg->world, cfg->rank, cfg->nccl_id_file)) {
        status = run_fail(res, 1, "%s", tbackend_error(be));
        goto done;
    }
    m = tmodel_create(&cfg->model, be, &plan, cfg->batch, cfg->seq, cfg->seed, err, sizeof err);
    if (!m) {
        status = run_fail(res, 1, "%s", err);
        goto done;
    }
    if (cfg->resume_path && tckpt_load(cfg->resume_path, m, err, sizeof err)) {
        status = run_fail(res, 2, "%s", err);
        goto done;
    }
    if (cfg->after_init && cfg->after_init(m, cfg->after_init_ctx)) {
        status = run_fail(res, 1, "after_init hook failed: %s", tbackend_error(be));
        goto done;
    }
    if (cfg->log_path && cfg->rank == 0) {
        snprintf(log_tmp, sizeof log_tmp, "%s.tmp.%ld", cfg->log_path, (long)getpid());
        log = fopen(log_tmp, "w");
        if (!log) {
            status = run_fail(res, 2, "cannot write %s: %s", log_tmp, strerror(errno));
            goto done;
        }
    }
    tok = malloc((size_t)cfg->batch * cfg->seq * sizeof *tok);
    tgt = malloc((size_t)cfg->batch * cfg->seq * sizeof *tgt);
    if (!tok || !tgt) {
        status = run_fail(res, 1, "out of memory");
        goto done;
    }
    c.cfg = cfg;
    c.res = res;
    c.m = m;
    c.be = be;
    c.log = log;
    tmodel_set_observer(m, observe, &c);
    if (log) write_header(&c, &data, &plan, st.steps_done);

    double tokens_per_step = (double)cfg->batch * cfg->seq * cfg->accum * cfg->world;
    double flops_per_token = tmodel_flops_per_token(&cfg->model);
    double time_sum = 0.0;
    long timed_steps = 0;
    long last = cfg->stop_after > 0 && cfg->stop_after < cfg->steps ? cfg->stop_after : cfg->steps;
    long first_step = st.steps_done;
    for (long s = st.steps_done; s < last; s++) {
        /* plan switches scheduled for this step */
        for (int i = 0; i < cfg->n_switches; i++) {
            if (cfg->switches[i].step != s) continue;
            next_plan = plan;
            if (tplan_set(&next_plan, cfg->switches[i].overrides, err, sizeof err) ||
                tmodel_rebind(m, &next_plan, err, sizeof err)) {
                status = run_fail(res, 2, "switch at step %ld: %s", s, err);
                goto done;
            }
            plan = next_plan;
            if (log) {
                char json[8192];
                tplan_to_json(&plan, json, sizeof json);
                fprintf(log, "{\"record\":\"switch\",\"step\":%ld,\"set\":", s);
                base_json_string(log, cfg->switches[i].overrides);
                fprintf(log, ",\"plan\":%s}\n", json);
            }
        }
        double t0 = now_s();
        c.prof_last = t0;
        c.prof_on = cfg->profile;
        c.step = s;
        c.hooks_now = at_hook_step(cfg, s);
        double dloss = st.loss_scale / tokens_per_step;
        double loss, norm = 0.0;
        int rc = tmodel_zero_grads(m);
        if (!rc) rc = run_micro_batches(&c, &data, tok, tgt, dloss, &loss);
        c.hooks_now = 0;
        if (!rc) rc = tmodel_finish_grads(m);
        if (!rc) rc = be->allreduce(be, tmodel_params(m), tmodel_n_params(m));
        if (!rc) rc = be->grad_norm(be, TSLOT_GRAD_NORM, tmodel_params(m), tmodel_n_params(m), &norm);
        if (rc) {
            status = run_fail(res, c.failed ? 2 : 1, "step %ld: %s", s, tbackend_error(be));
            goto done;
        }
        double gnorm = norm / st.loss_scale;
        res->loss[s] = loss;
        res->grad_norm[s] = gnorm;
        int skip = 0;
        if (!isfinite(loss) || !isfinite(gnorm)) {
            if (dynamic && isfinite(loss)) {
                /* gradient overflow under loss scaling: halve and skip */
                st.loss_scale /= 2.0;
                st.good_steps = 0;
                res->skipped_steps++;
                skip = 1;
            } else {
                if (audit_step(&c, &data, tok, tgt, dloss) < 0) {
                    status = run_fail(res, 1, "step %ld: audit failed: %s", s, tbackend_error(be));
                    goto done;
                }
                res->nonfinite = 1;
                res->nonfinite_step = c.step;
                snprintf(res->nonfinite_slot, sizeof res->nonfinite_slot, "%s", c.where_slot);
                snprintf(res->nonfinite_tensor, sizeof res->nonfinite_tensor, "%s", c.where_tensor);
                res->nonfinite_layer = c.where_layer;
                if (log) {
                    fprintf(log, "{\"record\":\"nonfinite\",\"step\":%ld,\"slot\":\"%s\",\"layer\":%d,\"tensor\":",
                            c.step, c.where_slot, c.where_layer);
                    base_json_string(log, c.where_tensor);
                    fprintf(log, ",\"loss\":");
                    base_json_double(log, loss);
                    fprintf(log, ",\"grad_norm\":");
                    base_json_double(log, gnorm);
                    fprintf(log, "}\n");
                }
                char layer[32] = "";
                if (c.where_layer >= 0) snprintf(layer, sizeof layer, " layer %d", c.where_layer);
                status = run_fail(res, 3, "non-finite value at step %ld: first in slot %s%s, tensor %s (loss %g, grad "
                                  "norm %g)", c.step, c.where_slot, layer, c.where_tensor, loss, gnorm);
                goto done;
            }
        }
        double lrf = lr_factor(cfg, s), lr = cfg->lr * lrf;
        if (cfg->profile && be->sync(be) == 0) {
            double t = now_s();
            c.prof_ms[TSLOT_COUNT + 1] += 1e3 * (t - c.prof_last); /* grad sync, all-reduce, norm */
            c.prof_last = t;
        }
        if (!skip) {
            double clip = cfg->grad_clip > 0 && gnorm > cfg->grad_clip ? cfg->grad_clip / gnorm : 1.0;
            double grad_scale = clip / st.loss_scale;
            tadamw_args aa = {lr, cfg->beta1, cfg->beta2, cfg->adam_eps, cfg->weight_decay, s + 1, grad_scale,
                              cfg->seed ^ (0xada3ull << 40) ^ (uint64_t)s * 0x9e3779b97f4a7c15ull};
            tmuon_args ma = {cfg->muon_lr * lrf, cfg->muon_momentum, cfg->weight_decay, grad_scale,
                             cfg->seed ^ (0x3a0ull << 40) ^ (uint64_t)s * 0x9e3779b97f4a7c15ull};
            for (int i = 0; i < tmodel_n_params(m) && !rc; i++) {
                tparam *p = tmodel_param(m, i);
                aa.seed ^= (uint64_t)i << 20;
                ma.seed ^= (uint64_t)i << 20;
                rc = p->muon ? be->muon(be, p, &ma) : be->adamw(be, p, &aa);
            }
            if (!rc) rc = tmodel_sync_weights(m);
            if (rc) {
                status = run_fail(res, 1, "step %ld update: %s", s, tbackend_error(be));
                goto done;
            }
            if (dynamic && ++st.good_steps >= LOSS_SCALE_GROWTH_INTERVAL) {
                st.loss_scale *= 2.0;
                st.good_steps = 0;
            }
        }
        if (be->sync(be)) {
            status = run_fail(res, 1, "step %ld: %s", s, tbackend_error(be));
            goto done;
        }
        double ms = 1e3 * (now_s() - t0);
        if (cfg->profile) c.prof_ms[TSLOT_COUNT] += 1e3 * (now_s() - c.prof_last);
        c.prof_on = 0;
        res->step_ms[s] = ms;
        res->train_seconds += ms * 1e-3;
        int out_of_time = cfg->max_seconds > 0 && res->train_seconds >= cfg->max_seconds;
        if (s > st.steps_done || last - st.steps_done == 1) { /* the first step warms caches up */
            time_sum += ms;
            timed_steps++;
        }
        st.steps_done = s + 1;
        double val = NAN;
        if ((cfg->val_every > 0 && (s + 1) % cfg->val_every == 0) || s + 1 == cfg->steps || out_of_time) {
            rc = validate(&c, &data, tok, tgt, &val);
            if (rc) {
                status = run_fail(res, 1, "step %ld validation: %s", s, tbackend_error(be));
                goto done;
            }
            res->val_loss[s] = val;
            res->final_val_loss = val;
        }
        double tps = tokens_per_step / (ms * 1e-3);
        if (log) {
            fprintf(log, "{\"record\":\"step\",\"step\":%ld,\"loss\":", s);
            base_json_double(log, loss);
            fprintf(log, ",\"val_loss\":");
            json_num_or_null(log, val);
            fprintf(log, ",\"lr\":");
            base_json_double(log, lr);
            fprintf(log, ",\"grad_norm\":");
            base_json_double(log, gnorm);
            fprintf(log, ",\"tokens_per_s\":");
            base_json_double(log, tps);
            fprintf(log, ",\"ms\":");
            base_json_double(log, ms);
            fprintf(log, ",\"loss_scale\":");
            base_json_double(log, st.loss_scale);
            fprintf(log, ",\"skipped\":%s}\n", skip ? "true" : "false");
        }
        if (cfg->progress && cfg->rank == 0 &&
            (s == first_step || (cfg->progress_every > 0 && (s + 1) % cfg->progress_every == 0) ||
             s + 1 == last || !isnan(val))) {
            fprintf(cfg->progress, "step %5ld/%ld | loss %.4f", s + 1, cfg->steps, loss);
            if (!isnan(val)) fprintf(cfg->progress, " | val %.4f", val);
            fprintf(cfg->progress, " | lr %.2e | gnorm %.3f | %.0f tok/s", lr, gnorm, tps);
            if (cfg->peak_flops > 0)
                fprintf(cfg->progress, " | MFU %.1f%%", 100.0 * flops_per_token * tps / cfg->peak_flops);
            fprintf(cfg->progress, " | %.1f ms%s\n", ms, skip ? " | overflow: step skipped, loss scale halved" : "");
            fflush(cfg->progress);
        }
        if (cfg->ckpt_path && cfg->rank == 0 &&
            ((cfg->ckpt_every > 0 && (s + 1) % cfg->ckpt_every == 0) || s + 1 == last || out_of_time)) {
            if (tckpt_save(cfg->ckpt_path, m, &cfg->model, &plan, &st, err, sizeof err)) {
                status = run_fail(res, 1, "%s", err);
                goto done;
            }
        }
        if (out_of_time) break;
    }
    res->steps_done = st.steps_done;
    res->final_loss_scale = st.loss_scale;
    if (timed_steps) {
        res->tokens_per_s = tokens_per_step / (time_sum / timed_steps * 1e-3);
        res->mfu = cfg->peak_flops > 0 ? flops_per_token * res->tokens_per_s / cfg->peak_flops : NAN;
    }
    if (cfg->profile && cfg->progress) {
        double total = 0;
        for (int i = 0; i < TSLOT_COUNT + 2; i++) total += c.prof_ms[i];
        fprintf(cfg->progress, "where the steps' time went (synchronised after every slot; a slot's time runs from "
                               "the previous slot's end):\n");
        for (int i = 0; i < TSLOT_COUNT + 2; i++) {
            if (c.prof_ms[i] <= 0) continue;
            const char *name = i < TSLOT_COUNT ? tslot_get((tslot)i)->name
                               : i == TSLOT_COUNT ? "optimizer update" : "grad norm, all-reduce";
            fprintf(cfg->progress, "  %-24s %10.2f ms  %5.1f%%\n", name, c.prof_ms[i], 100 * c.prof_ms[i] / total);
        }
    }
    res->param_hash = state_hash(&c);
    res->peak_bytes = be->peak_bytes;
    if (be->mem_used(be, &mem_after) == 0 && mem_after > mem_before) res->device_bytes = mem_after - mem_before;
    if (log) {
        fprintf(log, "{\"record\":\"final\",\"steps_done\":%ld,\"val_loss\":", res->steps_done);
        json_num_or_null(log, res->final_val_loss);
        fprintf(log, ",\"tokens_per_s\":");
        base_json_double(log, res->tokens_per_s);
        fprintf(log, ",\"mfu\":");
        json_num_or_null(log, res->mfu);
        fprintf(log, ",\"peak_bytes\":%zu,\"skipped_steps\":%ld,\"state_hash\":\"%016llx\"}\n", res->peak_bytes,
                res->skipped_steps, (unsigned long long)res->param_hash);
    }
done:
    /* the log appears whole: after a finished run, or one stopped by a
     * non-finite value (its last record says where); never half-written */
    if (log) {
        int bad = fclose(log) != 0;
        if (bad && (status == 0 || status == 3)) status = run_fail(res, 1, "cannot write %s", log_tmp);
        if ((status == 0 || status == 3) && rename(log_tmp, cfg->log_path))
            status = run_fail(res, 1, "cannot rename %s to %s: %s", log_tmp, cfg->log_path, strerror(errno));
        if (status != 0 && status != 3) unlink(log_tmp);
    }
    free(tok);
    free(tgt);
    free(c.buf);
    tmodel_destroy(m);
    if (be) be->destroy(be);
    tdata_close(&data);
    return status;
}
