/* trainer/checkpoint.c — checkpoints (see train.h).
 *
 * Layout (little-endian): "ULPSCKPT", u32 version, the model configuration
 * (i32 kind, layers, width, heads, vocab, context, norm_gain; f64 softcap,
 * rope_theta, norm_eps), the plan as JSON (u32 length + bytes), i64 steps
 * done, f64 loss scale, i64 clean steps since the last rescale, u64 seed, u64 data seed,
 * u32 parameter count, then per parameter its name (u32 + bytes) and its
 * stored tensors as (u64 length + bytes): working copy, fp32 master (when
 * kept), mantissa buffer (when kept), optimizer m, optimizer v (AdamW).
 * Last, the FNV-1a 64 of everything before it. */
#include "trainer/train.h"
#include "trainer/errbuf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CKPT_MAGIC "ULPSCKPT"
#define CKPT_VERSION 2u /* 2: the data seed after the seed */

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

int tckpt_save(const char *path, tmodel *m, const tmodel_config *cfg, const tplan *plan, const tckpt_state *st,
               char *err, size_t errlen)
{
    tbackend *be = tmodel_backend(m);
    char tmp[4160];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    writer w = {fopen(tmp, "wb"), TTRAIN_FNV_OFFSET, 0};
    if (!w.fp) return tfail(err, errlen, "cannot write checkpoint %s: %s", tmp, strerror(errno));
    put(&w, CKPT_MAGIC, 8);
    put_u32(&w, CKPT_VERSION);
    put_i32(&w, cfg->kind), put_i32(&w, cfg->n_layer), put_i32(&w, cfg->n_embd), put_i32(&w, cfg->n_head);
    put_i32(&w, cfg->vocab), put_i32(&w, cfg->seq_len), put_i32(&w, cfg->norm_gain);
    put_f64(&w, cfg->softcap), put_f64(&w, cfg->rope_theta), put_f64(&w, cfg->norm_eps);
    char *json = tplan_json_alloc(plan);
    if (!json) {
        fclose(w.fp);
        unlink(tmp);
        return tfail(err, errlen, "out of memory writing checkpoint");
    }
    put_str(&w, json);
    free(json);
    put_i64(&w, st->steps_done), put_f64(&w, st->loss_scale), put_i64(&w, st->good_steps);
    put(&w, &st->seed, sizeof st->seed);
    put(&w, &st->data_seed, sizeof st->data_seed);
    int np = tmodel_n_params(m);
    put_u32(&w, (uint32_t)np);
    void *buf = malloc(biggest_blob(m));
    int rc = buf ? 0 : tfail(err, errlen, "out of memory writing checkpoint");
    for (int i = 0; i < np && !rc; i++) {
        tparam *p = tmodel_param(m, i);
        put_str(&w, p->name);
        blob b[5];
        int nb = param_blobs(p, b);
        for (int j = 0; j < nb && !rc; j++) {
            rc = b[j].t ? be->read_bytes(be, b[j].t, buf) : be->raw_download(be, buf, p->lowbits, b[j].bytes);
            if (rc) tfail(err, errlen, "checkpoint: reading %s: %s", p->name, tbackend_error(be));
            put_i64(&w, (int64_t)b[j].bytes);
            put(&w, buf, b[j].bytes);
        }
    }
    free(buf);
    uint64_t h = w.hash;
    put(&w, &h, sizeof h);
    if (!rc && (w.bad || fflush(w.fp) || fsync(fileno(w.fp))))
        rc = tfail(err, errlen, "cannot write checkpoint %s: %s", tmp, strerror(errno));
    if (fclose(w.fp) && !rc) rc = tfail(err, errlen, "cannot close checkpoint %s: %s", tmp, strerror(errno));
    if (!rc && rename(tmp, path)) rc = tfail(err, errlen, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
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
    if (r->bad || (long)n > r->remaining || fread(p, 1, n, r->fp) != n) {
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

/* Opens, verifies magic, version and checksum; leaves the file after the version. */
static int open_checked(reader *r, const char *path, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    r->path = path;
    r->fp = fopen(path, "rb");
    if (!r->fp) return tfail(err, errlen, "cannot open checkpoint %s: %s", path, strerror(errno));
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
    if (version != CKPT_VERSION) {
        fclose(r->fp);
        return tfail(err, errlen, "checkpoint %s has version %u, this build reads %u", path, version, CKPT_VERSION);
    }
    return 0;
}

/* Reads the header; the plan JSON into a fresh malloc'd string (NULL when
 * malformed or out of memory: r->bad set). */
static void read_header(reader *r, tmodel_config *cfg, char **plan_json, tckpt_state *st)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->kind = (tmodel_kind)get_i32(r);
    cfg->n_layer = get_i32(r), cfg->n_embd = get_i32(r), cfg->n_head = get_i32(r);
    cfg->vocab = get_i32(r), cfg->seq_len = get_i32(r), cfg->norm_gain = get_i32(r);
    cfg->softcap = get_f64(r), cfg->rope_theta = get_f64(r), cfg->norm_eps = get_f64(r);
    *plan_json = malloc(TPLAN_JSON_MAX);
    if (!*plan_json) r->bad = 1;
    else get_str(r, *plan_json, TPLAN_JSON_MAX);
    st->steps_done = (long)get_i64(r);
    st->loss_scale = get_f64(r);
    st->good_steps = (long)get_i64(r);
    get(r, &st->seed, sizeof st->seed);
    get(r, &st->data_seed, sizeof st->data_seed);
}

int tckpt_peek(const char *path, tmodel_config *cfg, char **plan_json, tckpt_state *st, char *err, size_t errlen)
{
    reader r;
    *plan_json = NULL;
    if (open_checked(&r, path, err, errlen)) return -1;
    read_header(&r, cfg, plan_json, st);
    fclose(r.fp);
    if (r.bad) {
        free(*plan_json);
        *plan_json = NULL;
        return tfail(err, errlen, "checkpoint %s: malformed header", path);
    }
    return 0;
}

int tckpt_load(const char *path, tmodel *m, char *err, size_t errlen)
{
    reader r;
    if (open_checked(&r, path, err, errlen)) return -1;
    tmodel_config cfg;
    tckpt_state st;
    char *json = NULL;
    read_header(&r, &cfg, &json, &st);
    free(json);
    tbackend *be = tmodel_backend(m);
    int np = (int)get_u32(&r), rc = 0;
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
