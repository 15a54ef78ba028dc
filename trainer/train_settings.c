/* trainer/train_settings.c — the settings that decide a run's trajectory
 * (train.h): their table, their ranges, how a checkpoint stores them (a JSON
 * object) and how a run's settings are compared with a checkpoint's. */
#include "trainer/train_run.h"
#include "trainer/errbuf.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/json_read.h"
#include "base/jsonl.h"

#define F(field) offsetof(ttrain_config, field)
#define SIZE_MAX_D ((double)TTRAIN_SIZE_MAX)
#define STEPS_MAX_D ((double)TTRAIN_STEPS_MAX)

static const tsetting settings[] = {
    {"batch", "--batch", TSETTING_INT, F(batch), 1, SIZE_MAX_D, 0},
    {"seq", "--seq", TSETTING_INT, F(seq), 1, SIZE_MAX_D, 0},
    {"accum", "--accum", TSETTING_INT, F(accum), 1, SIZE_MAX_D, 0},
    {"world", "--world", TSETTING_INT, F(world), 1, TTRAIN_WORLD_MAX, 0},
    {"steps", "--steps", TSETTING_LONG, F(steps), 1, STEPS_MAX_D, 0},
    {"lr", "--lr", TSETTING_DOUBLE, F(lr), 0, INFINITY, 0},
    {"warmup", "--warmup", TSETTING_LONG, F(warmup), 0, STEPS_MAX_D, 0},
    {"schedule", "--schedule", TSETTING_SCHEDULE, F(schedule), 0, 0, 0},
    {"cooldown_frac", "--cooldown", TSETTING_DOUBLE, F(cooldown_frac), 0, 1, 0},
    {"min_lr_frac", "--min-lr-frac", TSETTING_DOUBLE, F(min_lr_frac), 0, 1, 0},
    {"weight_decay", "--wd", TSETTING_DOUBLE, F(weight_decay), 0, INFINITY, 0},
    {"beta1", "--beta1", TSETTING_DOUBLE, F(beta1), 0, 1, 1},
    {"beta2", "--beta2", TSETTING_DOUBLE, F(beta2), 0, 1, 1},
    {"adam_eps", "--eps", TSETTING_DOUBLE, F(adam_eps), 0, INFINITY, 0},
    {"grad_clip", "--grad-clip", TSETTING_DOUBLE, F(grad_clip), 0, INFINITY, 0},
    {"muon_lr", "--muon-lr", TSETTING_DOUBLE, F(muon_lr), 0, INFINITY, 0},
    {"muon_momentum", "--muon-momentum", TSETTING_DOUBLE, F(muon_momentum), 0, 1, 1},
    /* the loss scale multiplies fp16 gradients: a positive, finite float */
    {"loss_scale_init", NULL, TSETTING_DOUBLE, F(loss_scale_init), FLT_MIN, FLT_MAX, 0},
    {"seed", "--seed", TSETTING_SEED, F(seed), 0, 0, 0},
    {"data_seed", "--data-seed", TSETTING_SEED, F(data_seed), 0, 0, 0},
    {"val_every", "--val-every", TSETTING_LONG, F(val_every), 0, STEPS_MAX_D, 0},
    {"val_batches", "--val-batches", TSETTING_INT, F(val_batches), 1, SIZE_MAX_D, 0},
    {"val_frac", "--val-frac", TSETTING_DOUBLE, F(val_frac), 0, 1, 1},
    {"shard_vocab", NULL, TSETTING_INT, F(shard_vocab), 0, TMODEL_VOCAB_MAX, 0},
};
#define N_SETTINGS ((int)(sizeof settings / sizeof settings[0]))

#undef F

const tsetting *ttrain_settings(int *n)
{
    *n = N_SETTINGS;
    return settings;
}

/* ---- values ------------------------------------------------------------------------------ */

static const void *field(const ttrain_config *c, const tsetting *s) { return (const char *)c + s->offset; }
static void *field_mut(ttrain_config *c, const tsetting *s) { return (char *)c + s->offset; }

static double number(const ttrain_config *c, const tsetting *s)
{
    switch (s->kind) {
    case TSETTING_INT: return *(const int *)field(c, s);
    case TSETTING_LONG: return (double)*(const long *)field(c, s);
    case TSETTING_DOUBLE: return *(const double *)field(c, s);
    default: return 0.0;
    }
}

static int same(const ttrain_config *a, const ttrain_config *b, const tsetting *s)
{
    switch (s->kind) {
    case TSETTING_INT: return *(const int *)field(a, s) == *(const int *)field(b, s);
    case TSETTING_LONG: return *(const long *)field(a, s) == *(const long *)field(b, s);
    case TSETTING_DOUBLE: return *(const double *)field(a, s) == *(const double *)field(b, s);
    case TSETTING_SEED: return *(const uint64_t *)field(a, s) == *(const uint64_t *)field(b, s);
    case TSETTING_SCHEDULE: return *(const tschedule *)field(a, s) == *(const tschedule *)field(b, s);
    }
    return 0;
}

void ttrain_setting_copy(ttrain_config *dst, const ttrain_config *src, const tsetting *s)
{
    size_t n = s->kind == TSETTING_INT      ? sizeof(int)
               : s->kind == TSETTING_LONG   ? sizeof(long)
               : s->kind == TSETTING_DOUBLE ? sizeof(double)
               : s->kind == TSETTING_SEED   ? sizeof(uint64_t)
                                            : sizeof(tschedule);
    memcpy(field_mut(dst, s), field(src, s), n);
}

static const char *schedule_name(tschedule s) { return s == TSCHED_LINEAR ? "linear" : "cosine"; }

/* The value as a person reads it (and as the option takes it). */
static void value_text(const ttrain_config *c, const tsetting *s, char *buf, size_t len)
{
    switch (s->kind) {
    case TSETTING_INT: snprintf(buf, len, "%d", *(const int *)field(c, s)); break;
    case TSETTING_LONG: snprintf(buf, len, "%ld", *(const long *)field(c, s)); break;
    case TSETTING_DOUBLE: snprintf(buf, len, "%.17g", *(const double *)field(c, s)); break;
    case TSETTING_SEED: snprintf(buf, len, "%" PRIu64, *(const uint64_t *)field(c, s)); break;
    case TSETTING_SCHEDULE: snprintf(buf, len, "%s", schedule_name(*(const tschedule *)field(c, s))); break;
    }
}

static const char *display_name(const tsetting *s) { return s->option ? s->option : s->key; }

int ttrain_settings_check(const ttrain_config *c, char *err, size_t errlen)
{
    if (tmodel_config_check(&c->model, err, errlen)) return -1;
    for (int i = 0; i < N_SETTINGS; i++) {
        const tsetting *s = &settings[i];
        if (s->kind == TSETTING_SEED) continue;
        if (s->kind == TSETTING_SCHEDULE) {
            tschedule v = *(const tschedule *)field(c, s);
            if (v != TSCHED_COSINE && v != TSCHED_LINEAR) return tfail(err, errlen, "unknown schedule %d", (int)v);
            continue;
        }
        double v = number(c, s);
        if (!isfinite(v) || v < s->min || v > s->max || (s->max_open && v == s->max)) {
            char text[64];
            value_text(c, s, text, sizeof text);
            if (s->kind != TSETTING_DOUBLE)
                return tfail(err, errlen, "%s %s is outside %.0f..%.0f", display_name(s), text, s->min, s->max);
            return tfail(err, errlen, "%s %s is outside [%g, %g%s", display_name(s), text, s->min, s->max,
                         s->max_open ? ")" : "]");
        }
    }
    if (c->seq > c->model.seq_len)
        return tfail(err, errlen, "sequence length %d exceeds the model's context %d", c->seq, c->model.seq_len);
    if (c->rank < 0 || c->rank >= c->world)
        return tfail(err, errlen, "rank %d of world %d: need 0 <= rank < world", c->rank, c->world);
    if (c->n_switches < 0 || c->n_switches > TTRAIN_MAX_SWITCHES)
        return tfail(err, errlen, "%d plan switches (at most %d)", c->n_switches, TTRAIN_MAX_SWITCHES);
    for (int i = 0; i < c->n_switches; i++)
        if (c->switches[i].step < 0 || c->switches[i].step >= c->steps || !c->switches[i].overrides)
            return tfail(err, errlen, "switch %d at step %ld: outside the run's steps 0..%ld", i, c->switches[i].step,
                         c->steps - 1);
    return 0;
}

/* ---- the checkpoint's JSON ----------------------------------------------------------------- */

char *ttrain_settings_json(const ttrain_config *c, const tdata *d)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&buf, &len);
    if (!fp) return NULL;
    fputc('{', fp);
    for (int i = 0; i < N_SETTINGS; i++) {
        const tsetting *s = &settings[i];
        char text[64];
        value_text(c, s, text, sizeof text);
        int quoted = s->kind == TSETTING_SCHEDULE; /* the seed is an integer literal, read back exactly */
        fprintf(fp, "%s\"%s\":%s%s%s", i ? "," : "", s->key, quoted ? "\"" : "", text, quoted ? "\"" : "");
    }
    fputs(",\"backend\":", fp);
    base_json_string(fp, c->backend);
    fputs(",\"data\":{\"path\":", fp);
    if (c->data_path) base_json_string(fp, c->data_path);
    else fputs("null", fp);
    fputs(",\"source\":", fp);
    base_json_string(fp, d->source);
    fprintf(fp, ",\"train_tokens\":%" PRId64 ",\"val_tokens\":%" PRId64 ",\"train_hash\":\"0x%016" PRIx64
                "\",\"val_hash\":\"0x%016" PRIx64 "\"},\"switches\":[",
            d->train_tokens, d->val_tokens, d->train_hash, d->val_hash);
    for (int i = 0; i < c->n_switches; i++) {
        fprintf(fp, "%s{\"step\":%ld,\"set\":", i ? "," : "", c->switches[i].step);
        base_json_string(fp, c->switches[i].overrides);
        fputc('}', fp);
    }
    fputs("]}", fp);
    if (fclose(fp)) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* A copy of s kept in ck->strings (freed with it). */
static const char *keep(tckpt_info *ck, const char *s)
{
    for (size_t i = 0; i < sizeof ck->strings / sizeof ck->strings[0]; i++)
        if (!ck->strings[i]) return ck->strings[i] = strdup(s);
    return NULL;
}

int ttrain_settings_parse(const char *json, size_t n, tckpt_info *ck, char *err, size_t errlen)
{
    json_value *v = NULL;
    char why[256];
    if (json_parse(json, n, &v, why, sizeof why)) return tfail(err, errlen, "settings are not JSON (%s)", why);
    ttrain_config *c = &ck->run;
    int rc = 0;
    for (int i = 0; i < N_SETTINGS && !rc; i++) {
        const tsetting *s = &settings[i];
        const json_value *x = json_get(v, s->key);
        long l = 0;
        double d = 0;
        int bad = !x;
        if (!bad) switch (s->kind) {
        case TSETTING_INT:
            bad = json_long(x, -2147483647L - 1, 2147483647L, &l);
            *(int *)field_mut(c, s) = (int)l;
            break;
        case TSETTING_LONG:
            bad = json_long(x, -TTRAIN_STEPS_MAX - 1, TTRAIN_STEPS_MAX + 1, &l);
            *(long *)field_mut(c, s) = l;
            break;
        case TSETTING_DOUBLE:
            bad = json_double(x, &d);
            *(double *)field_mut(c, s) = d;
            break;
        case TSETTING_SEED: bad = json_u64(x, (uint64_t *)field_mut(c, s)); break;
        case TSETTING_SCHEDULE:
            bad = x->type != JSON_STRING || (strcmp(x->text, "cosine") && strcmp(x->text, "linear"));
            if (!bad) *(tschedule *)field_mut(c, s) = strcmp(x->text, "linear") == 0 ? TSCHED_LINEAR : TSCHED_COSINE;
            break;
        }
        if (bad) rc = tfail(err, errlen, "setting \"%s\" is missing or malformed", s->key);
    }
    const json_value *backend = json_get(v, "backend"), *data = json_get(v, "data"), *sw = json_get(v, "switches");
    const json_value *path = json_get(data, "path"), *source = json_get(data, "source");
    uint64_t train_tokens = 0, val_tokens = 0;
    if (!rc && (!backend || backend->type != JSON_STRING || (strcmp(backend->text, "cpu") && strcmp(backend->text, "cuda"))))
        rc = tfail(err, errlen, "setting \"backend\" is missing or not cpu or cuda");
    if (!rc && (!path || (path->type != JSON_NULL && path->type != JSON_STRING) || !source ||
                source->type != JSON_STRING || json_u64(json_get(data, "train_tokens"), &train_tokens) ||
                json_u64(json_get(data, "val_tokens"), &val_tokens) ||
                json_u64(json_get(data, "train_hash"), &ck->train_hash) ||
                json_u64(json_get(data, "val_hash"), &ck->val_hash) || train_tokens > INT64_MAX || val_tokens > INT64_MAX))
        rc = tfail(err, errlen, "setting \"data\" is missing or malformed");
    if (!rc && (!sw || sw->type != JSON_ARRAY || sw->n_items > TTRAIN_MAX_SWITCHES))
        rc = tfail(err, errlen, "setting \"switches\" is missing, malformed or longer than %d", TTRAIN_MAX_SWITCHES);
    if (!rc) {
        c->backend = keep(ck, backend->text);
        c->data_path = path->type == JSON_STRING ? keep(ck, path->text) : NULL;
        snprintf(ck->data_source, sizeof ck->data_source, "%s", source->text);
        ck->train_tokens = (int64_t)train_tokens;
        ck->val_tokens = (int64_t)val_tokens;
        if (!c->backend || (path->type == JSON_STRING && !c->data_path)) rc = tfail(err, errlen, "out of memory");
    }
    for (size_t i = 0; !rc && i < sw->n_items; i++) {
        const json_value *set = json_get(&sw->items[i], "set");
        long step;
        if (json_long(json_get(&sw->items[i], "step"), 0, TTRAIN_STEPS_MAX, &step) || !set || set->type != JSON_STRING) {
            rc = tfail(err, errlen, "switch %zu is malformed", i);
            break;
        }
        c->switches[i].step = step;
        c->switches[i].overrides = keep(ck, set->text);
        if (!c->switches[i].overrides) rc = tfail(err, errlen, "out of memory");
        c->n_switches = (int)i + 1;
    }
    json_free(v);
    return rc;
}

/* ---- differences --------------------------------------------------------------------------- */

typedef struct {
    char *buf;
    size_t len, used;
} list_writer;

static void add(list_writer *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(list_writer *w, const char *fmt, ...)
{
    if (w->used + 1 >= w->len) return;
    if (w->used) w->used += (size_t)snprintf(w->buf + w->used, w->len - w->used, "; ");
    if (w->used >= w->len) {
        w->used = w->len - 1;
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    w->used += (size_t)vsnprintf(w->buf + w->used, w->len - w->used, fmt, ap);
    va_end(ap);
    if (w->used >= w->len) w->used = w->len - 1;
}

static void model_diff(list_writer *w, const tmodel_config *a, const tmodel_config *b)
{
    if (a->kind != b->kind) add(w, "--model %s (checkpoint: %s)", tmodel_kind_name(a->kind), tmodel_kind_name(b->kind));
    const struct { const char *name; int here, there; } ints[] = {
        {"--depth", a->n_layer, b->n_layer}, {"--width", a->n_embd, b->n_embd}, {"--heads", a->n_head, b->n_head},
        {"--vocab", a->vocab, b->vocab},     {"--context", a->seq_len, b->seq_len},
        {"--norm-gain", a->norm_gain, b->norm_gain},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (ints[i].here != ints[i].there) add(w, "%s %d (checkpoint: %d)", ints[i].name, ints[i].here, ints[i].there);
    const struct { const char *name; double here, there; } reals[] = {
        {"--softcap", a->softcap, b->softcap}, {"rope_theta", a->rope_theta, b->rope_theta},
        {"norm_eps", a->norm_eps, b->norm_eps},
    };
    for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++)
        if (reals[i].here != reals[i].there) add(w, "%s %g (checkpoint: %g)", reals[i].name, reals[i].here, reals[i].there);
}

/* The first (slot, layer) whose choice differs, for the message. */
static void plan_diff(list_writer *w, const tplan *a, const tplan *b, int depth)
{
    if (tplan_equal(a, b)) return;
    if (a->model != b->model) {
        add(w, "--plan/--set: a plan for %s (checkpoint: %s)", tmodel_kind_name(a->model), tmodel_kind_name(b->model));
        return;
    }
    if (a->gpu_model != b->gpu_model) {
        add(w, "--gpu-model %s (checkpoint: %s)", tgpu_model_name(a->gpu_model), tgpu_model_name(b->gpu_model));
        return;
    }
    for (int s = 0; s < TSLOT_COUNT; s++) {
        if (!a->used[s]) continue;
        int layers = tslot_get((tslot)s)->per_layer ? depth : 1;
        for (int l = 0; l < layers; l++) {
            int layer = tslot_get((tslot)s)->per_layer ? l : -1;
            const tslot_choice *x = tplan_choice_at(a, (tslot)s, layer), *y = tplan_choice_at(b, (tslot)s, layer);
            if (x->path == y->path && x->op == y->op && x->variant == y->variant) continue;
            char vx[64], vy[64], at[16] = "";
            tplan_choice_variant_string(a, (tslot)s, x, vx, sizeof vx);
            tplan_choice_variant_string(b, (tslot)s, y, vy, sizeof vy);
            if (layer >= 0) snprintf(at, sizeof at, "@%d", layer);
            add(w, "--plan/--set: slot %s%s %s:%s (checkpoint: %s:%s)", tslot_get((tslot)s)->name, at,
                kpath_name(x->path), vx, kpath_name(y->path), vy);
            return;
        }
    }
    add(w, "--plan/--set: another plan than the checkpoint's");
}

static void switches_text(const ttrain_config *c, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "%s", c->n_switches ? "" : "none");
    for (int i = 0; i < c->n_switches && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%ld:%s", i ? " " : "", c->switches[i].step, c->switches[i].overrides);
}

void ttrain_settings_diff(const ttrain_config *c, const tdata *data, const tckpt_info *ck, char *list, size_t len)
{
    list_writer w = {list, len, 0};
    list[0] = '\0';
    const ttrain_config *k = &ck->run;
    model_diff(&w, &c->model, &k->model);
    plan_diff(&w, &c->plan, &k->plan, k->model.n_layer);
    for (int i = 0; i < N_SETTINGS; i++) {
        const tsetting *s = &settings[i];
        if (same(c, k, s)) continue;
        char here[64], there[64];
        value_text(c, s, here, sizeof here);
        value_text(k, s, there, sizeof there);
        add(&w, "%s %s (checkpoint: %s)", display_name(s), here, there);
    }
    int switches_same = c->n_switches == k->n_switches;
    for (int i = 0; switches_same && i < c->n_switches; i++)
        switches_same = c->switches[i].step == k->switches[i].step &&
                        strcmp(c->switches[i].overrides, k->switches[i].overrides) == 0;
    if (!switches_same) {
        char here[512], there[512];
        switches_text(c, here, sizeof here);
        switches_text(k, there, sizeof there);
        add(&w, "--switch-at %s (checkpoint: %s)", here, there);
    }
    if (data && (data->train_tokens != ck->train_tokens || data->val_tokens != ck->val_tokens ||
                 data->train_hash != ck->train_hash || data->val_hash != ck->val_hash))
        add(&w, "--data %s: other tokens, %" PRId64 " + %" PRId64 " (train + validation, hashes %016" PRIx64 " %016" PRIx64
                ") (checkpoint: %s, %" PRId64 " + %" PRId64 ", hashes %016" PRIx64 " %016" PRIx64 ")",
            data->source, data->train_tokens, data->val_tokens, data->train_hash, data->val_hash, ck->data_source,
            ck->train_tokens, ck->val_tokens, ck->train_hash, ck->val_hash);
}
