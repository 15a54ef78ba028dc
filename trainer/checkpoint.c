/* trainer/checkpoint.c — checkpoints (see train.h).
 *
 * Layout (little-endian), version 2: "ULPSCKPT", u32 version, the model
 * configuration (i32 kind, layers, width, heads, vocab, context, norm_gain;
 * f64 softcap, rope_theta, norm_eps), then three strings (u32 length +
 * bytes): the plan in force as JSON, the plan the run started with, and the
 * run's trajectory settings as a JSON object (train_settings.c: sizes,
 * schedule, optimizer, seed, validation, data identity, switches, backend);
 * i64 steps done, f64 loss scale, i64 clean steps since the last rescale,
 * u32 parameter count, then per parameter its name (u32 + bytes) and its
 * stored tensors as (u64 length + bytes): working copy, fp32 master (when
 * kept), mantissa buffer (when kept), optimizer m, optimizer v (AdamW).
 * Last, the FNV-1a 64 of everything before it.
 *
 * Version 1 (no settings, the seed beside the steps) is refused with a
 * message: resuming it would have to guess the settings that decide the
 * trajectory. */
#include "trainer/train_run.h"
#include "trainer/errbuf.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_MAGIC "ULPSCKPT"
#define CKPT_VERSION 2u
#define CKPT_SETTINGS_MAX (16u << 20) /* the settings JSON: switches may be long, not this long */

uint64_t ttrain_fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

typedef struct {
    FILE *fp;
    uint64_t hash;
    int bad;
} writer;

static void put(writer *w, const void *p, size_t n)
{
    if (w->bad) return;
    if (fwrite(p, 1, n, w->fp) != n) w->bad = 1;
    w->hash = ttrain_fnv1a(w->hash, p, n);
}
static void put_u32(writer *w, uint32_t x) { put(w, &x, sizeof x); }
static void put_i32(writer *w, int32_t x) { put(w, &x, sizeof x); }
static void put_i64(writer *w, int64_t x) { put(w, &x, sizeof x); }
static void put_f64(writer *w, double x) { put(w, &x, sizeof x); }
static void put_str(writer *w, const char *s)
{
    put_u32(w, (uint32_t)strlen(s));
    put(w, s, strlen(s));
}

/* A parameter's stored blobs in file order: working copy, master, mantissa
 * buffer, m, v (absent ones skipped).  Returns how many; sizes in bytes. */
typedef struct {
    const ktensor *t; /* NULL: the raw mantissa buffer */
    size_t bytes;
} blob;

static int param_blobs(const tparam *p, blob out[5])
{
    int n = 0;
    out[n++] = (blob){&p->w, tensor_image_bytes(&p->w)};
    if (p->master.data) out[n++] = (blob){&p->master, tensor_image_bytes(&p->master)};
    if (p->lowbits) out[n++] = (blob){NULL, (size_t)ktensor_numel(&p->w) * sizeof(uint16_t)};
    out[n++] = (blob){&p->m, tensor_image_bytes(&p->m)};
    if (p->v.data) out[n++] = (blob){&p->v, tensor_image_bytes(&p->v)};
    return n;
}

static size_t biggest_blob(tmodel *m)
{
    size_t big = 1;
    for (int i = 0; i < tmodel_n_params(m); i++) {
        blob b[5];
        int n = param_blobs(tmodel_param(m, i), b);
        for (int j = 0; j < n; j++)
            if (b[j].bytes > big) big = b[j].bytes;
    }
    return big;
}

/* The file a checkpoint path names: a symlink's target (so the link stays
 * a link), else the path itself.  0, or -1 when it is not (or would not be)
 * a regular file. */
static int checkpoint_target(const char *path, char *target, size_t len, char *err, size_t errlen)
{
    if (trun_link_target(path, target, len))
        return tfail(err, errlen, "cannot write checkpoint %s: a symlink loop or a path too long", path);
    struct stat st;
    if (stat(target, &st) == 0 && !S_ISREG(st.st_mode))
        return tfail(err, errlen, "cannot write checkpoint %s: it exists and is not a regular file", path);
    return 0;
}

int tckpt_save(const char *path, tmodel *m, const ttrain_config *run, const tdata *data, const tplan *plan_now,
               const tckpt_state *st, char *err, size_t errlen)
{
    tbackend *be = tmodel_backend(m);
    char target[4096], tmp[4160];
    if (checkpoint_target(path, target, sizeof target, err, errlen)) return -1;
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", target, (long)getpid());
    char *now = tplan_json_alloc(plan_now), *start = tplan_json_alloc(&run->plan), *settings = ttrain_settings_json(run, data);
    if (!now || !start || !settings) {
        free(now), free(start), free(settings);
        return tfail(err, errlen, "out of memory writing checkpoint %s", path);
    }
    writer w = {fopen(tmp, "wb"), TTRAIN_FNV_OFFSET, 0};
    if (!w.fp) {
        free(now), free(start), free(settings);
        return tfail(err, errlen, "cannot write checkpoint %s: %s", path, strerror(errno));
    }
    const tmodel_config *cfg = &run->model;
    put(&w, CKPT_MAGIC, 8);
    put_u32(&w, CKPT_VERSION);
    put_i32(&w, cfg->kind), put_i32(&w, cfg->n_layer), put_i32(&w, cfg->n_embd), put_i32(&w, cfg->n_head);
    put_i32(&w, cfg->vocab), put_i32(&w, cfg->seq_len), put_i32(&w, cfg->norm_gain);
    put_f64(&w, cfg->softcap), put_f64(&w, cfg->rope_theta), put_f64(&w, cfg->norm_eps);
    put_str(&w, now), put_str(&w, start), put_str(&w, settings);
    free(now), free(start), free(settings);
    put_i64(&w, st->steps_done), put_f64(&w, st->loss_scale), put_i64(&w, st->good_steps);
    int np = tmodel_n_params(m);
    put_u32(&w, (uint32_t)np);
    void *buf = malloc(biggest_blob(m));
    int rc = buf ? 0 : tfail(err, errlen, "out of memory writing checkpoint %s", path);
    for (int i = 0; i < np && !rc; i++) {
        tparam *p = tmodel_param(m, i);
        put_str(&w, p->name);
        blob b[5];
        int nb = param_blobs(p, b);
        for (int j = 0; j < nb && !rc; j++) {
            rc = b[j].t ? be->read_bytes(be, b[j].t, buf) : be->raw_download(be, buf, p->lowbits, b[j].bytes);
            if (rc) tfail(err, errlen, "checkpoint %s: reading %s: %s", path, p->name, tbackend_error(be));
            put_i64(&w, (int64_t)b[j].bytes);
            put(&w, buf, b[j].bytes);
        }
    }
    free(buf);
    uint64_t h = w.hash;
    put(&w, &h, sizeof h);
    if (!rc && (w.bad || fflush(w.fp) || fsync(fileno(w.fp))))
        rc = tfail(err, errlen, "cannot write checkpoint %s: %s", path, strerror(errno));
    if (fclose(w.fp) && !rc) rc = tfail(err, errlen, "cannot write checkpoint %s: %s", path, strerror(errno));
    if (!rc && rename(tmp, target)) rc = tfail(err, errlen, "cannot write checkpoint %s: %s", path, strerror(errno));
    if (rc) unlink(tmp);
    return rc;
}

/* ---- reading ------------------------------------------------------------------------ */

typedef struct {
    FILE *fp;
    const char *path;
    long remaining; /* bytes before the checksum */
    int bad;
} reader;

static void get(reader *r, void *p, size_t n)
{
    if (r->bad || n > (size_t)r->remaining || fread(p, 1, n, r->fp) != n) {
        r->bad = 1;
        memset(p, 0, n);
        return;
    }
    r->remaining -= (long)n;
}
static uint32_t get_u32(reader *r) { uint32_t x; get(r, &x, sizeof x); return x; }
static int32_t get_i32(reader *r) { int32_t x; get(r, &x, sizeof x); return x; }
static int64_t get_i64(reader *r) { int64_t x; get(r, &x, sizeof x); return x; }
static double get_f64(reader *r) { double x; get(r, &x, sizeof x); return x; }
static void get_str(reader *r, char *s, size_t len)
{
    uint32_t n = get_u32(r);
    if (n >= len) {
        r->bad = 1;
        s[0] = '\0';
        return;
    }
    get(r, s, n);
    s[n] = '\0';
}
/* A string of at most max bytes in a fresh buffer (NULL: r->bad set). */
static char *get_str_alloc(reader *r, uint32_t max, uint32_t *len)
{
    uint32_t n = get_u32(r);
    char *s = r->bad || n > max || n > (uint32_t)r->remaining ? NULL : malloc((size_t)n + 1);
    if (!s) {
        r->bad = 1;
        return NULL;
    }
    get(r, s, n);
    s[n] = '\0';
    if (len) *len = n;
    return s;
}

/* Opens, verifies magic, version and checksum; leaves the file after the version. */
static int open_checked(reader *r, const char *path, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    r->path = path;
    r->fp = fopen(path, "rb");
    if (!r->fp) return tfail(err, errlen, "cannot open checkpoint %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(r->fp), &sb) || !S_ISREG(sb.st_mode)) {
        fclose(r->fp);
        return tfail(err, errlen, "checkpoint %s is not a regular file", path);
    }
    fseek(r->fp, 0, SEEK_END);
    long size = ftell(r->fp);
    fseek(r->fp, 0, SEEK_SET);
    char magic[8];
    if (size < 8 + 4 + 8 || fread(magic, 1, 8, r->fp) != 8 || memcmp(magic, CKPT_MAGIC, 8) != 0) {
        fclose(r->fp);
        return tfail(err, errlen, "%s is not a ulpscope checkpoint (bad magic or too short)", path);
    }
    /* checksum over everything before the last 8 bytes */
    fseek(r->fp, 0, SEEK_SET);
    uint64_t h = TTRAIN_FNV_OFFSET, stored = 0;
    unsigned char chunk[65536];
    long left = size - 8;
    while (left > 0) {
        size_t want = left < (long)sizeof chunk ? (size_t)left : sizeof chunk;
        if (fread(chunk, 1, want, r->fp) != want) break;
        h = ttrain_fnv1a(h, chunk, want);
        left -= (long)want;
    }
    if (left || fread(&stored, sizeof stored, 1, r->fp) != 1 || stored != h) {
        fclose(r->fp);
        return tfail(err, errlen, "checkpoint %s is corrupt (checksum mismatch or truncated)", path);
    }
    fseek(r->fp, 8, SEEK_SET);
    r->remaining = size - 8 - 8;
    uint32_t version = get_u32(r);
    if (version == 1) {
        fclose(r->fp);
        return tfail(err, errlen, "checkpoint %s has format version 1, written before checkpoints stored the settings "
                     "that decide a run's trajectory; this build reads version %u and cannot resume it (start a new "
                     "run)", path, CKPT_VERSION);
    }
    if (version != CKPT_VERSION) {
        fclose(r->fp);
        return tfail(err, errlen, "checkpoint %s has version %u, this build reads %u", path, version, CKPT_VERSION);
    }
    return 0;
}

/* Reads the header into ck and checks it as a fresh run's settings are
 * checked: 0, or -1 with a message.  Leaves the reader at the tensors. */
static int read_header(reader *r, tckpt_info *ck, char *err, size_t errlen)
{
    char why[1024];
    ttrain_config_defaults(&ck->run);
    tmodel_config *cfg = &ck->run.model;
    memset(cfg, 0, sizeof *cfg);
    cfg->kind = (tmodel_kind)get_i32(r);
    cfg->n_layer = get_i32(r), cfg->n_embd = get_i32(r), cfg->n_head = get_i32(r);
    cfg->vocab = get_i32(r), cfg->seq_len = get_i32(r), cfg->norm_gain = get_i32(r);
    cfg->softcap = get_f64(r), cfg->rope_theta = get_f64(r), cfg->norm_eps = get_f64(r);
    uint32_t settings_len = 0;
    char *now = get_str_alloc(r, TPLAN_JSON_MAX, NULL), *start = get_str_alloc(r, TPLAN_JSON_MAX, NULL);
    char *settings = get_str_alloc(r, CKPT_SETTINGS_MAX, &settings_len);
    ck->st.steps_done = (long)get_i64(r);
    ck->st.loss_scale = get_f64(r);
    ck->st.good_steps = (long)get_i64(r);
    int rc = 0;
    if (r->bad) rc = tfail(why, sizeof why, "truncated or oversized header");
    else if (tmodel_config_check(cfg, why, sizeof why)) rc = -1;
    else if (tplan_from_json(&ck->plan_now, now, why, sizeof why) || tplan_from_json(&ck->run.plan, start, why, sizeof why))
        rc = -1;
    else if (ck->plan_now.model != cfg->kind || ck->run.plan.model != cfg->kind)
        rc = tfail(why, sizeof why, "its plan is for %s, its model %s", tmodel_kind_name(ck->plan_now.model),
                   tmodel_kind_name(cfg->kind));
    else if (tplan_check_layers(&ck->plan_now, cfg->n_layer, why, sizeof why) ||
             tplan_check_layers(&ck->run.plan, cfg->n_layer, why, sizeof why))
        rc = -1;
    else if (ttrain_settings_parse(settings, settings_len, ck, why, sizeof why) ||
             ttrain_settings_check(&ck->run, why, sizeof why))
        rc = -1;
    else if (ck->st.steps_done < 0 || ck->st.steps_done > ck->run.steps)
        rc = tfail(why, sizeof why, "steps done %ld outside 0..%ld (its --steps)", ck->st.steps_done, ck->run.steps);
    else if (!isfinite(ck->st.loss_scale) || ck->st.loss_scale <= 0)
        rc = tfail(why, sizeof why, "loss scale %g is not finite and positive", ck->st.loss_scale);
    else if (ck->st.good_steps < 0 || ck->st.good_steps > ck->st.steps_done)
        rc = tfail(why, sizeof why, "%ld clean steps since the last loss-scale change, of %ld done", ck->st.good_steps,
                   ck->st.steps_done);
    free(now), free(start), free(settings);
    if (rc) return tfail(err, errlen, "checkpoint %s: impossible header: %s", r->path, why);
    return 0;
}

int tckpt_info_read(const char *path, tckpt_info *ck, char *err, size_t errlen)
{
    memset(ck, 0, sizeof *ck);
    reader r;
    if (open_checked(&r, path, err, errlen)) return -1;
    int rc = read_header(&r, ck, err, errlen);
    fclose(r.fp);
    return rc;
}

void tckpt_info_free(tckpt_info *ck)
{
    for (size_t i = 0; i < sizeof ck->strings / sizeof ck->strings[0]; i++) {
        free(ck->strings[i]);
        ck->strings[i] = NULL;
    }
}

int tckpt_load(const char *path, tmodel *m, char *err, size_t errlen)
{
    reader r;
    if (open_checked(&r, path, err, errlen)) return -1;
    tckpt_info *ck = calloc(1, sizeof *ck);
    if (!ck) {
        fclose(r.fp);
        return tfail(err, errlen, "out of memory reading checkpoint %s", path);
    }
    int rc = read_header(&r, ck, err, errlen);
    tckpt_info_free(ck);
    free(ck);
    if (rc) {
        fclose(r.fp);
        return -1;
    }
    tbackend *be = tmodel_backend(m);
    int np = (int)get_u32(&r);
    if (r.bad || np != tmodel_n_params(m))
        rc = tfail(err, errlen, "checkpoint %s holds %d parameters, the model has %d", path, np, tmodel_n_params(m));
    void *buf = rc ? NULL : malloc(biggest_blob(m));
    if (!rc && !buf) rc = tfail(err, errlen, "out of memory reading checkpoint");
    for (int i = 0; i < np && !rc; i++) {
        tparam *p = tmodel_param(m, i);
        char name[64];
        get_str(&r, name, sizeof name);
        if (r.bad || strcmp(name, p->name) != 0) {
            rc = tfail(err, errlen, "checkpoint %s: parameter %d is '%s', the model expects '%s'", path, i, name, p->name);
            break;
        }
        blob b[5];
        int nb = param_blobs(p, b);
        for (int j = 0; j < nb && !rc; j++) {
            int64_t n = get_i64(&r);
            if (r.bad || n != (int64_t)b[j].bytes) {
                rc = tfail(err, errlen, "checkpoint %s: %s blob %d has %lld bytes, expected %zu (stored with another "
                          "plan?)", path, p->name, j, (long long)n, b[j].bytes);
                break;
            }
            get(&r, buf, b[j].bytes);
            if (r.bad) rc = tfail(err, errlen, "checkpoint %s: truncated in %s", path, p->name);
            else if (b[j].t ? be->write_bytes(be, (ktensor *)b[j].t, buf)
                            : be->raw_upload(be, p->lowbits, buf, b[j].bytes))
                rc = tfail(err, errlen, "checkpoint: writing %s: %s", p->name, tbackend_error(be));
        }
    }
    if (!rc && r.remaining != 0) rc = tfail(err, errlen, "checkpoint %s: %ld unexpected trailing bytes", path, r.remaining);
    free(buf);
    fclose(r.fp);
    if (!rc) rc = tmodel_sync_weights(m) ? tfail(err, errlen, "%s", tbackend_error(be)) : 0;
    return rc;
}
