/* studies/compare_train.c — compare's runner on the trainer (compare_train.h). */
#include "studies/compare_train.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/jsonl.h"
#include "kernels/common/ktensor_io.h"
#include "trainer/backend.h"
#include "trainer/data.h"
#include "trainer/model.h"

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Flips the lowest stored bit of element 0 of tensor t (one replica's copy). */
static int flip_lowest_bit(tbackend *be, ktensor *t)
{
    if (!t->data) return 0;
    size_t n = tensor_image_bytes(t);
    unsigned char *img = malloc(n);
    if (!img) return -1;
    int rc = be->read_bytes(be, t, img);
    if (!rc) {
        img[0] ^= 1; /* little-endian storage encoding: byte 0 holds element 0's lowest bits */
        rc = be->write_bytes(be, t, img);
    }
    free(img);
    return rc;
}

/* The null arm's perturbation: one ulp of one weight of the first layer's
 * first matrix (a weight every forward pass uses, unlike an embedding row of
 * a token that may never occur), in every replica: a group runs one arm, and
 * every run of the null arm carries the flip. */
static int flip_one_weight(tmodel *m, void *ctx)
{
    (void)ctx;
    tbackend *be = tmodel_backend(m);
    for (int i = 0; i < tmodel_n_params(m); i++) {
        tparam *p = tmodel_param(m, i);
        if (p->layer != 0 || p->w.ndim != 2) continue;
        for (int r = 0; r < be->replicas; r++) {
            ktensor w = tbackend_slice(be, &p->w, r), master = tbackend_slice(be, &p->master, r);
            if (flip_lowest_bit(be, &w)) return 1;
            if (master.data && flip_lowest_bit(be, &master)) return 1;
        }
        return 0;
    }
    return 1; /* no matrix in layer 0: cannot happen for the model families */
}

int cmp_train_default_replicas(const char *backend)
{
    return strcmp(backend, "cuda") == 0 ? CMP_TRAIN_REPLICAS_CUDA : CMP_TRAIN_REPLICAS_CPU;
}

/* Runs jobs[idx[0..m)] (all of one arm) as the replicas of one process-wide
 * group and fills out[idx[k]].  A group too large for memory (status 2 at
 * R > 1: the trainer's memory check) is split in halves; at R = 1 status 2
 * means bad settings, which every run would hit: -1 with the message in
 * out[idx[0]].error. */
static int run_group(cmp_train_ctx *ctx, const cmp_arm *arms, const cmp_job *jobs, const int *idx, int m, cmp_run *out)
{
    const cmp_job *j0 = &jobs[idx[0]];
    ttrain_config cfg = ctx->base;
    cfg.plan = ctx->plans[j0->arm];
    cfg.seed = j0->init_seed;
    cfg.data_seed = j0->data_seed;
    cfg.log_path = NULL;
    cfg.progress = NULL;
    cfg.ckpt_path = NULL;
    cfg.resume_path = NULL;
    cfg.dump_dir = NULL;
    memset(cfg.hash_slot, 0, sizeof cfg.hash_slot);
    memset(cfg.dump_slot, 0, sizeof cfg.dump_slot);
    cfg.n_at_steps = 0;
    cfg.n_switches = ctx->n_switches[j0->arm];
    memcpy(cfg.switches, ctx->switches[j0->arm], sizeof cfg.switches);
    cfg.after_init = arms[j0->arm].is_null ? flip_one_weight : NULL;
    cfg.after_init_ctx = NULL;
    uint64_t *seeds = malloc((size_t)m * sizeof *seeds), *data_seeds = malloc((size_t)m * sizeof *data_seeds);
    ttrain_result *res = calloc((size_t)m, sizeof *res);
    if (!seeds || !data_seeds || !res) {
        free(seeds), free(data_seeds), free(res);
        snprintf(out[idx[0]].error, sizeof out[idx[0]].error, "out of memory");
        return -1;
    }
    for (int k = 0; k < m; k++) {
        seeds[k] = jobs[idx[k]].init_seed;
        data_seeds[k] = jobs[idx[k]].data_seed;
    }
    if (ctx->progress && m > 1) {
        /* nothing else shows until the whole group ends */
        fprintf(ctx->progress, "  arm %s: %d runs at once (replicas)\n", arms[j0->arm].name, m);
        fflush(ctx->progress);
    }
    double t0 = now_seconds();
    kernels_set_planted_bug(ctx->planted[j0->arm]);
    int rc = ttrain_run_replicas(&cfg, m, seeds, data_seeds, res);
    kernels_set_planted_bug(KBUG_NONE);
    /* each run's share of the group's wall time: what a run costs in this process */
    double seconds = (now_seconds() - t0) / m;
    free(seeds);
    free(data_seeds);
    int group_status = rc;
    for (int k = 0; k < m && group_status; k++)
        if (res[k].status != rc) group_status = 0; /* runs' own statuses, not the group's */
    int status = 0;
    if (group_status == 2 && m > 1) {
        if (ctx->progress)
            fprintf(ctx->progress, "  arm %s: %d runs at once refused (%.200s); trying %d and %d\n", arms[j0->arm].name,
                    m, res[0].error, m / 2, m - m / 2);
        for (int k = 0; k < m; k++) ttrain_result_free(&res[k]);
        free(res);
        if (run_group(ctx, arms, jobs, idx, m / 2, out)) return -1;
        return run_group(ctx, arms, jobs, idx + m / 2, m - m / 2, out);
    }
    if (group_status == 2) {
        /* bad settings stop the comparison: every run would fail the same way */
        snprintf(out[idx[0]].error, sizeof out[idx[0]].error, "arm %s: %.200s", arms[j0->arm].name, res[0].error);
        status = -1;
    }
    for (int k = 0; k < m && !status; k++) {
        const ttrain_result *rk = &res[k];
        cmp_run *o = &out[idx[k]];
        memset(o, 0, sizeof *o);
        o->seconds = seconds;
        o->status = rk->status == 0 ? 0 : rk->status == 3 ? 3 : 1;
        o->final_val_loss = rk->status == 0 ? rk->final_val_loss : NAN;
        o->state_hash = rk->param_hash;
        if (rk->status) snprintf(o->error, sizeof o->error, "%.255s", rk->error);
        for (long s = 0; rk->status == 0 && s < cfg.steps && o->n_curve < CMP_MAX_CURVE; s++)
            if (rk->val_loss && !isnan(rk->val_loss[s])) {
                o->curve_step[o->n_curve] = s + 1;
                o->curve_val[o->n_curve++] = rk->val_loss[s];
            }
        if (ctx->progress)
            fprintf(ctx->progress, "  run %s seed %llu: %s %.5f (%.1f s)\n", arms[j0->arm].name,
                    (unsigned long long)jobs[idx[k]].seed, o->status ? "failed" : "val", o->final_val_loss, o->seconds);
    }
    for (int k = 0; k < m; k++) ttrain_result_free(&res[k]);
    free(res);
    return status;
}

/* The jobs grouped by arm (in the order the arms first appear), each group
 * cut into replica groups of at most `capacity` runs. */
static int run_jobs(cmp_runner *r, const cmp_arm *arms, const cmp_job *jobs, int n, cmp_run *out)
{
    cmp_train_ctx *ctx = r->ctx;
    int *idx = malloc((size_t)n * sizeof *idx);
    unsigned char *taken = calloc((size_t)n, 1);
    int rc = 0;
    if (!idx || !taken) {
        snprintf(out[0].error, sizeof out[0].error, "out of memory");
        rc = -1;
    }
    for (int i = 0; i < n && !rc; i++) {
        if (taken[i]) continue;
        int m = 0;
        for (int k = i; k < n && m < r->capacity; k++)
            if (!taken[k] && jobs[k].arm == jobs[i].arm) {
                idx[m++] = k;
                taken[k] = 1;
            }
        if (run_group(ctx, arms, jobs, idx, m, out)) {
            if (idx[0] != 0) memcpy(out[0].error, out[idx[0]].error, sizeof out[0].error); /* where the caller looks */
            rc = -1;
        }
    }
    free(idx);
    free(taken);
    return rc;
}

void cmp_train_runner(cmp_runner *r, cmp_train_ctx *ctx)
{
    r->run = run_jobs;
    r->capacity = ctx->replicas > 0 ? ctx->replicas : cmp_train_default_replicas(ctx->base.backend);
    r->per_arm = 1;
    r->ctx = ctx;
}

int cmp_train_check_arms(const cmp_train_ctx *ctx, const cmp_arm *arms, int n_arms, char *err, size_t errlen)
{
    char why[512] = "";
    tbackend *be = strcmp(ctx->base.backend, "cuda") == 0 ? tbackend_cuda_create(why, sizeof why) : tbackend_cpu_create();
    if (!be) {
        snprintf(err, errlen, "no %s backend: %s", ctx->base.backend, why);
        return -1;
    }
    int rc = 0;
    for (int a = 0; a < n_arms && !rc; a++)
        if (tbackend_bind_plan(be, &ctx->plans[a], ctx->base.model.n_layer)) {
            snprintf(err, errlen, "arm %s: %.400s", arms[a].name, tbackend_error(be));
            rc = -1;
        }
    be->destroy(be);
    return rc;
}

/* A cheap identity of the tokens: counts and an FNV-1a over at most the
 * first 2^20 tokens of every segment. */
static uint64_t data_fingerprint(const tdata *d)
{
    uint64_t h = TTRAIN_FNV_OFFSET;
    for (int pass = 0; pass < 2; pass++) {
        const tsegment *seg = pass ? d->val : d->train;
        int n = pass ? d->n_val : d->n_train;
        for (int i = 0; i < n; i++) {
            int64_t k = seg[i].n < (1 << 20) ? seg[i].n : (1 << 20);
            h = ttrain_fnv1a(h, &seg[i].n, sizeof seg[i].n);
            h = ttrain_fnv1a(h, seg[i].tok, (size_t)k * sizeof *seg[i].tok);
        }
    }
    return h;
}

int cmp_train_val_batches(const ttrain_config *base, long cap_tokens, int *batches, long *val_tokens, char *err,
                          size_t errlen)
{
    tdata d;
    if (tdata_open(&d, base->data_path, base->val_frac, base->shard_vocab, err, errlen)) return -1;
    long per = (long)base->batch * base->seq;
    long use = d.val_tokens < cap_tokens ? (long)d.val_tokens : cap_tokens;
    *val_tokens = (long)d.val_tokens;
    *batches = per > 0 && use / per > 0 ? (int)(use / per) : 1;
    tdata_close(&d);
    return 0;
}

char *cmp_train_recipe(const ttrain_config *c, cmp_vary vary, uint64_t fixed_seed, char *err, size_t errlen)
{
    tdata d;
    if (tdata_open(&d, c->data_path, c->val_frac, c->shard_vocab, err, errlen)) return NULL;
    char device[300] = "cpu";
    if (strcmp(c->backend, "cuda") == 0) {
        kdevice_props p;
        if (kdevice_describe(&p) == 0) snprintf(device, sizeof device, "%s (cc %d.%d)", p.name, p.cc_major, p.cc_minor);
    }
    for (char *q = device; *q; q++)
        if (*q == '"' || *q == '\\') *q = '_';
    char source[600];
    snprintf(source, sizeof source, "%s", d.source);
    for (char *q = source; *q; q++)
        if (*q == '"' || *q == '\\' || (unsigned char)*q < 0x20) *q = '_';
    const tmodel_config *m = &c->model;
    size_t len = 4096;
    char *json = malloc(len);
    if (!json) {
        tdata_close(&d);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    snprintf(json, len,
             "{\"tool\":\"compare\",\"build\":\"%s\",\"backend\":\"%s\",\"device\":\"%s\",\"model\":\"%s\",\"layers\":%d,\"width\":%d,"
             "\"heads\":%d,\"vocab\":%d,\"context\":%d,\"norm_gain\":%d,\"softcap\":%.17g,\"rope_theta\":%.17g,"
             "\"norm_eps\":%.17g,\"data\":\"%s\",\"train_tokens\":%lld,\"val_tokens\":%lld,\"data_hash\":\"0x%016llx\","
             "\"val_frac\":%.17g,\"batch\":%d,\"seq\":%d,\"accum\":%d,\"steps\":%ld,\"lr\":%.17g,\"min_lr_frac\":%.17g,"
             "\"cooldown_frac\":%.17g,\"warmup\":%ld,\"schedule\":%d,\"weight_decay\":%.17g,\"beta1\":%.17g,"
             "\"beta2\":%.17g,\"adam_eps\":%.17g,\"grad_clip\":%.17g,\"muon_lr\":%.17g,\"muon_momentum\":%.17g,"
             "\"loss_scale_init\":%.17g,\"val_every\":%ld,\"val_batches\":%d,\"vary\":\"%s\",\"fixed_seed\":%llu}",
             base_build_rev(), c->backend, device, tmodel_kind_name(m->kind), m->n_layer, m->n_embd, m->n_head, m->vocab, m->seq_len,
             m->norm_gain, m->softcap, m->rope_theta, m->norm_eps, source, (long long)d.train_tokens,
             (long long)d.val_tokens, (unsigned long long)data_fingerprint(&d), c->val_frac, c->batch, c->seq, c->accum,
             c->steps, c->lr, c->min_lr_frac, c->cooldown_frac, c->warmup, (int)c->schedule, c->weight_decay, c->beta1,
             c->beta2, c->adam_eps, c->grad_clip, c->muon_lr, c->muon_momentum, c->loss_scale_init, c->val_every,
             c->val_batches, cmp_vary_name(vary), (unsigned long long)fixed_seed);
    tdata_close(&d);
    return json;
}
