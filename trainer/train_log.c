/* trainer/train_log.c — what a training run writes: JSON Lines records
 * (rank 0's --log; see train.h for the record types) through one small
 * record writer, the progress lines and the --profile report. */
#include "trainer/train_run.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonl.h"

/* ---- the record writer ------------------------------------------------------------------ */

void trec_begin(trecord *w, FILE *fp, const char *record)
{
    w->fp = fp;
    if (fp) fprintf(fp, "{\"record\":\"%s\"", record);
}

static int key(trecord *w, const char *k)
{
    if (!w->fp) return 0;
    fprintf(w->fp, ",\"%s\":", k);
    return 1;
}

void trec_int(trecord *w, const char *k, long long v)
{
    if (key(w, k)) fprintf(w->fp, "%lld", v);
}

void trec_size(trecord *w, const char *k, size_t v)
{
    if (key(w, k)) fprintf(w->fp, "%zu", v);
}

void trec_num(trecord *w, const char *k, double v)
{
    if (key(w, k)) base_json_double(w->fp, v);
}

void trec_num_or_null(trecord *w, const char *k, double v)
{
    if (!key(w, k)) return;
    if (isnan(v)) fputs("null", w->fp);
    else base_json_double(w->fp, v);
}

void trec_str(trecord *w, const char *k, const char *s)
{
    if (key(w, k)) base_json_string(w->fp, s);
}

void trec_hex64(trecord *w, const char *k, uint64_t v)
{
    if (key(w, k)) fprintf(w->fp, "\"%016llx\"", (unsigned long long)v);
}

void trec_bool(trecord *w, const char *k, int v)
{
    if (key(w, k)) fputs(v ? "true" : "false", w->fp);
}

void trec_json(trecord *w, const char *k, const char *json)
{
    if (key(w, k)) fputs(json, w->fp);
}

void trec_end(trecord *w)
{
    if (w->fp) fputs("}\n", w->fp);
}

/* A record of run r: with replicas, tagged with the run's replica and seeds. */
static void rec_begin(trun *r, trecord *w, const char *record)
{
    trec_begin(w, r->log, record);
    if (r->replicas <= 1) return;
    char seed[64];
    trec_int(w, "replica", r->replica);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)r->cfg->seed);
    trec_json(w, "seed", seed);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)r->cfg->data_seed);
    trec_json(w, "data_seed", seed);
}

/* ---- the log file ------------------------------------------------------------------------- */

/* The log is written where it points, as the run goes (a record per step,
 * flushed), so that `tail -f` follows it and a crash keeps the steps done;
 * "-" is stdout.  fopen follows a symlink to its target and writes a FIFO or
 * character device directly: nothing that is not a regular file is replaced. */
int trun_log_open(trun *r)
{
    const ttrain_config *cfg = r->cfg;
    if (!cfg->log_path || cfg->rank != 0) return 0;
    r->log = strcmp(cfg->log_path, "-") == 0 ? stdout : fopen(cfg->log_path, "w");
    if (!r->log) return trun_fail(r, 2, "cannot write --log %s: %s", cfg->log_path, strerror(errno));
    return 0;
}

int trun_log_flush(trun *r)
{
    if (!r->log || r->log_failed) return 0;
    if (fflush(r->log) == 0 && !ferror(r->log)) return 0;
    r->log_failed = 1;
    return trun_fail(r, 1, "cannot write --log %s: %s", r->cfg->log_path, strerror(errno));
}

static const char *signal_name(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "signal";
}

int trun_log_close(trun *r, int status)
{
    if (!r->log) return status;
    if (r->log_shared) { /* another run closes it: only this run's records */
        if (!r->log_failed && (status == 1 || status == 2)) {
            trecord w;
            rec_begin(r, &w, "error");
            trec_int(&w, "status", status);
            trec_int(&w, "steps_done", r->st.steps_done);
            trec_str(&w, "message", r->res->error);
            trec_end(&w);
        }
        status = trun_log_flush(r) ? (status ? status : 1) : status;
        r->log = NULL;
        return status;
    }
    const ttrain_result *res = r->res;
    trecord w;
    if (!r->log_failed && res->interrupted) {
        rec_begin(r, &w, "interrupted");
        trec_str(&w, "signal", signal_name(res->interrupted));
        trec_int(&w, "steps_done", r->st.steps_done);
        if (res->ckpt_written) trec_str(&w, "checkpoint", r->cfg->ckpt_path);
        else trec_json(&w, "checkpoint", "null");
        trec_end(&w);
    }
    if (!r->log_failed && (status == 1 || status == 2)) {
        rec_begin(r, &w, "error");
        trec_int(&w, "status", status);
        trec_int(&w, "steps_done", r->st.steps_done);
        trec_str(&w, "message", res->error);
        trec_end(&w);
    }
    char earlier[sizeof res->error];
    memcpy(earlier, res->error, sizeof earlier);
    int failed = trun_log_flush(r) != 0;
    if (r->log != stdout && fclose(r->log) != 0 && !failed) {
        failed = 1;
        trun_fail(r, 1, "cannot write --log %s: %s", r->cfg->log_path, strerror(errno));
    }
    r->log = NULL;
    if (!failed) return status;
    /* the log's own failure fails a run that was going well; an earlier failure keeps its message */
    if (status == 0) return 1;
    memcpy(r->res->error, earlier, sizeof earlier);
    return status;
}

/* ---- records ---------------------------------------------------------------------------------- */

void trun_log_header(trun *r, long start_step)
{
    if (!r->log) return;
    const ttrain_config *cfg = r->cfg;
    const tmodel_config *mc = &cfg->model;
    char *json = tplan_json_alloc(&r->plan);
    size_t extra_len = (json ? strlen(json) : 0) + 4096 + (size_t)r->replicas * 48;
    char *extra = malloc(extra_len);
    if (json && extra)
        snprintf(extra, extra_len,
                 "\"backend\":\"%s\",\"plan\":%s,\"model\":{\"family\":\"%s\",\"layers\":%d,\"width\":%d,\"heads\":%d,"
                 "\"vocab\":%d,\"context\":%d,\"norm_gain\":%d,\"softcap\":%g,\"params\":%lld},"
                 "\"batch\":%d,\"seq\":%d,\"accum\":%d,\"world\":%d,\"steps\":%ld,\"start_step\":%ld,\"lr\":%g,"
                 "\"warmup\":%ld,\"schedule\":\"%s\",\"cooldown_frac\":%g,\"min_lr_frac\":%g,\"weight_decay\":%g,"
                 "\"grad_clip\":%g,\"muon_lr\":%g,\"seed\":%llu,\"data_seed\":%llu,\"train_tokens\":%lld,\"val_tokens\":%lld",
                 cfg->backend, json, tmodel_kind_name(mc->kind), mc->n_layer, mc->n_embd, mc->n_head, mc->vocab,
                 mc->seq_len, mc->norm_gain, mc->softcap, (long long)tmodel_param_count(mc), cfg->batch, cfg->seq,
                 cfg->accum, cfg->world, cfg->steps, start_step, cfg->lr, cfg->warmup,
                 cfg->schedule == TSCHED_LINEAR ? "linear" : "cosine", cfg->cooldown_frac, cfg->min_lr_frac,
                 cfg->weight_decay, cfg->grad_clip, cfg->muon_lr, (unsigned long long)cfg->seed,
                 (unsigned long long)cfg->data_seed, (long long)r->data->train_tokens, (long long)r->data->val_tokens);
    if (json && extra && r->replicas > 1) { /* the group: every run's seeds, in replica order */
        size_t n = strlen(extra);
        n += (size_t)snprintf(extra + n, extra_len - n, ",\"replicas\":%d", r->replicas);
        for (int k = 0; k < 2; k++) {
            n += (size_t)snprintf(extra + n, extra_len - n, k ? ",\"data_seeds\":[" : ",\"seeds\":[");
            for (int i = 0; i < r->replicas; i++) {
                const ttrain_config *c = r->g->runs[i].cfg;
                n += (size_t)snprintf(extra + n, extra_len - n, "%s%llu", i ? "," : "",
                                      (unsigned long long)(k ? c->data_seed : c->seed));
            }
            n += (size_t)snprintf(extra + n, extra_len - n, "]");
        }
    }
    base_json_header(r->log, "train", json && extra ? extra : "\"error\":\"out of memory\"");
    free(json), free(extra);
    trecord w;
    trec_begin(&w, r->log, "data");
    trec_str(&w, "source", r->data->source);
    trec_int(&w, "vocab", r->data->vocab);
    trec_end(&w);
}

void trun_log_switch(trun *r, long s, const char *overrides)
{
    if (!r->log) return;
    char *json = tplan_json_alloc(&r->plan);
    trecord w;
    rec_begin(r, &w, "switch");
    trec_int(&w, "step", s);
    trec_str(&w, "set", overrides);
    trec_json(&w, "plan", json ? json : "null");
    trec_end(&w);
    free(json);
}

void trun_log_step(trun *r, long s, const tstep_out *o, double val, double ms, double tokens_per_s)
{
    trecord w;
    rec_begin(r, &w, "step");
    trec_int(&w, "step", s);
    trec_num(&w, "loss", o->loss);
    trec_num_or_null(&w, "val_loss", val);
    trec_num(&w, "lr", o->lr);
    trec_num(&w, "grad_norm", o->grad_norm);
    trec_num(&w, "tokens_per_s", tokens_per_s);
    trec_num(&w, "ms", ms);
    trec_num(&w, "loss_scale", r->st.loss_scale);
    trec_bool(&w, "skipped", o->skipped);
    trec_end(&w);
}

void trun_log_nonfinite(trun *r, const tstep_out *o)
{
    trecord w;
    rec_begin(r, &w, "nonfinite");
    trec_int(&w, "step", r->step);
    trec_str(&w, "slot", r->where_slot);
    trec_int(&w, "layer", r->where_layer);
    trec_str(&w, "tensor", r->where_tensor);
    trec_num(&w, "loss", o->loss);
    trec_num(&w, "grad_norm", o->grad_norm);
    trec_end(&w);
}

void trun_log_hash(trun *r, tslot slot, int layer, const char *tensor, const ktensor *t, uint64_t hash)
{
    trecord w;
    rec_begin(r, &w, "hash");
    trec_int(&w, "step", r->step);
    trec_int(&w, "micro", r->micro);
    trec_str(&w, "slot", tslot_get(slot)->name);
    trec_int(&w, "layer", layer);
    trec_str(&w, "tensor", tensor);
    trec_str(&w, "format", prec_format_name(t->format));
    trec_hex64(&w, "hash", hash);
    trec_end(&w);
}

void trun_log_dump(trun *r, tslot slot, int layer, const char *tensor, const ktensor *t, const char *path)
{
    char shape[96];
    size_t n = 0;
    shape[n++] = '[';
    for (int i = 0; i < t->ndim; i++)
        n += (size_t)snprintf(shape + n, n < sizeof shape ? sizeof shape - n : 0, "%s%lld", i ? "," : "",
                              (long long)t->shape[i]);
    if (n + 2 <= sizeof shape) memcpy(shape + n, "]", 2);
    trecord w;
    rec_begin(r, &w, "dump");
    trec_int(&w, "step", r->step);
    trec_int(&w, "micro", r->micro);
    trec_str(&w, "slot", tslot_get(slot)->name);
    trec_int(&w, "layer", layer);
    trec_str(&w, "tensor", tensor);
    trec_str(&w, "format", prec_format_name(t->format));
    trec_json(&w, "shape", shape);
    trec_bool(&w, "fp8_scale_appended", t->scale != NULL);
    trec_str(&w, "file", path);
    trec_end(&w);
}

void trun_log_final(trun *r)
{
    const ttrain_result *res = r->res;
    trecord w;
    rec_begin(r, &w, "final");
    trec_int(&w, "steps_done", res->steps_done);
    trec_num_or_null(&w, "val_loss", res->final_val_loss);
    trec_num(&w, "tokens_per_s", res->tokens_per_s);
    trec_num_or_null(&w, "mfu", res->mfu);
    trec_size(&w, "peak_bytes", res->peak_bytes);
    trec_int(&w, "skipped_steps", res->skipped_steps);
    trec_hex64(&w, "state_hash", res->param_hash);
    trec_end(&w);
}

/* ---- for people ------------------------------------------------------------------------------- */

void trun_progress(trun *r, long s, long first, long last, const tstep_out *o, double val, double ms,
                   double tokens_per_s)
{
    const ttrain_config *cfg = r->cfg;
    FILE *fp = cfg->progress;
    if (!fp || cfg->rank != 0) return;
    int due = s == first || (cfg->progress_every > 0 && (s + 1) % cfg->progress_every == 0) || s + 1 == last ||
              !isnan(val);
    if (!due) return;
    fprintf(fp, "step %5ld/%ld | loss %.4f", s + 1, cfg->steps, o->loss);
    if (!isnan(val)) fprintf(fp, " | val %.4f", val);
    fprintf(fp, " | lr %.2e | gnorm %.3f | %.0f tok/s", o->lr, o->grad_norm, tokens_per_s);
    if (cfg->peak_flops > 0) fprintf(fp, " | MFU %.1f%%", 100.0 * r->flops_per_token * tokens_per_s / cfg->peak_flops);
    fprintf(fp, " | %.1f ms%s\n", ms, o->skipped ? " | overflow: step skipped, loss scale halved" : "");
    fflush(fp);
}

void trun_profile_report(trun *r)
{
    FILE *fp = r->cfg->progress;
    if (!r->cfg->profile || !fp) return;
    double total = 0;
    for (int i = 0; i < TPROF_ROWS; i++) total += r->prof_ms[i];
    fprintf(fp, "where the steps' time went (%ld step%s%s; synchronised after every slot; a slot's time runs from "
                "the previous slot's end; ms per step):\n", r->prof_steps, r->prof_steps == 1 ? "" : "s",
            r->prof_seen > r->prof_steps ? ", the first left out: it loads kernels and picks GEMM algorithms" : "");
    for (int i = 0; i < TPROF_ROWS; i++) {
        if (r->prof_ms[i] <= 0) continue;
        const char *name = i < TSLOT_COUNT     ? tslot_get((tslot)i)->name
                           : i == TPROF_UPDATE ? "optimizer update"
                           : i == TPROF_NORM   ? "grad norm, all-reduce"
                                               : "zero grads, batches";
        fprintf(fp, "  %-24s %10.3f ms  %5.1f%%\n", name, r->prof_ms[i] / (r->prof_steps ? r->prof_steps : 1),
                100 * r->prof_ms[i] / total);
    }
}
