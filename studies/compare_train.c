/* studies/compare_train.c — compare's runner on the trainer (compare_train.h). */
#include "studies/compare_train.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* Flips the lowest stored bit of element 0 of tensor t. */
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
 * a token that may never occur). */
static int flip_one_weight(tmodel *m, void *ctx)
{
    (void)ctx;
    tbackend *be = tmodel_backend(m);
    for (int i = 0; i < tmodel_n_params(m); i++) {
        tparam *p = tmodel_param(m, i);
        if (p->layer != 0 || p->w.ndim != 2) continue;
        if (flip_lowest_bit(be, &p->w)) return 1;
        if (p->master.data && flip_lowest_bit(be, &p->master)) return 1;
        return 0;
    }
    return 1; /* no matrix in layer 0: cannot happen for the model families */
}

static int run_jobs(cmp_runner *r, const cmp_arm *arms, const cmp_job *jobs, int n, cmp_run *out)
{
    cmp_train_ctx *ctx = r->ctx;
    for (int i = 0; i < n; i++) {
        const cmp_job *j = &jobs[i];
        ttrain_config cfg = ctx->base;
        cfg.plan = ctx->plans[j->arm];
        cfg.seed = j->init_seed;
        cfg.data_seed = j->data_seed;
        cfg.log_path = NULL;
        cfg.progress = NULL;
        cfg.ckpt_path = NULL;
        cfg.resume_path = NULL;
        cfg.dump_dir = NULL;
        memset(cfg.hash_slot, 0, sizeof cfg.hash_slot);
        memset(cfg.dump_slot, 0, sizeof cfg.dump_slot);
        cfg.n_at_steps = 0;
        cfg.after_init = arms[j->arm].is_null ? flip_one_weight : NULL;
        cfg.after_init_ctx = NULL;
        ttrain_result res;
        double t0 = now_seconds();
        kernels_set_planted_bug(ctx->planted[j->arm]);
        int rc = ttrain_run(&cfg, &res);
        kernels_set_planted_bug(KBUG_NONE);
        cmp_run *o = &out[i];
        memset(o, 0, sizeof *o);
        o->seconds = now_seconds() - t0;
        o->status = rc == 0 ? 0 : rc == 3 ? 3 : 1;
        o->final_val_loss = rc == 0 ? res.final_val_loss : NAN;
        o->state_hash = res.param_hash;
        if (rc) snprintf(o->error, sizeof o->error, "%.255s", res.error);
        for (long s = 0; rc == 0 && s < cfg.steps && o->n_curve < CMP_MAX_CURVE; s++)
            if (res.val_loss && !isnan(res.val_loss[s])) {
                o->curve_step[o->n_curve] = s + 1;
                o->curve_val[o->n_curve++] = res.val_loss[s];
            }
        if (rc == 2) {
            /* bad settings stop the comparison: every run would fail the same way */
            snprintf(o->error, sizeof o->error, "arm %s: %.200s", arms[j->arm].name, res.error);
            ttrain_result_free(&res);
            return -1;
        }
        ttrain_result_free(&res);
        if (ctx->progress)
            fprintf(ctx->progress, "  run %s seed %llu: %s %.5f (%.1f s)\n", arms[j->arm].name,
                    (unsigned long long)j->seed, o->status ? "failed" : "val", o->final_val_loss, o->seconds);
    }
    return 0;
}

void cmp_train_runner(cmp_runner *r, cmp_train_ctx *ctx)
{
    r->run = run_jobs;
    r->capacity = 1;
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
             "{\"tool\":\"compare\",\"backend\":\"%s\",\"device\":\"%s\",\"model\":\"%s\",\"layers\":%d,\"width\":%d,"
             "\"heads\":%d,\"vocab\":%d,\"context\":%d,\"norm_gain\":%d,\"softcap\":%.17g,\"rope_theta\":%.17g,"
             "\"norm_eps\":%.17g,\"data\":\"%s\",\"train_tokens\":%lld,\"val_tokens\":%lld,\"data_hash\":\"0x%016llx\","
             "\"val_frac\":%.17g,\"batch\":%d,\"seq\":%d,\"accum\":%d,\"steps\":%ld,\"lr\":%.17g,\"min_lr_frac\":%.17g,"
             "\"cooldown_frac\":%.17g,\"warmup\":%ld,\"schedule\":%d,\"weight_decay\":%.17g,\"beta1\":%.17g,"
             "\"beta2\":%.17g,\"adam_eps\":%.17g,\"grad_clip\":%.17g,\"muon_lr\":%.17g,\"muon_momentum\":%.17g,"
             "\"loss_scale_init\":%.17g,\"val_every\":%ld,\"val_batches\":%d,\"vary\":\"%s\",\"fixed_seed\":%llu}",
             c->backend, device, tmodel_kind_name(m->kind), m->n_layer, m->n_embd, m->n_head, m->vocab, m->seq_len,
             m->norm_gain, m->softcap, m->rope_theta, m->norm_eps, source, (long long)d.train_tokens,
             (long long)d.val_tokens, (unsigned long long)data_fingerprint(&d), c->val_frac, c->batch, c->seq, c->accum,
             c->steps, c->lr, c->min_lr_frac, c->cooldown_frac, c->warmup, (int)c->schedule, c->weight_decay, c->beta1,
             c->beta2, c->adam_eps, c->grad_clip, c->muon_lr, c->muon_momentum, c->loss_scale_init, c->val_every,
             c->val_batches, cmp_vary_name(vary), (unsigned long long)fixed_seed);
    tdata_close(&d);
    return json;
}
