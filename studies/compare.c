/* studies/compare.c — arms x paired seeds, the results-directory cache, and
 * the verdicts (compare.h). */
#include "studies/compare.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/json_read.h"

const char *cmp_vary_name(cmp_vary v) { return v == CMP_VARY_INIT ? "init" : v == CMP_VARY_DATA ? "data" : "both"; }

int cmp_vary_parse(const char *s, cmp_vary *out)
{
    if (strcmp(s, "both") == 0) *out = CMP_VARY_BOTH;
    else if (strcmp(s, "init") == 0) *out = CMP_VARY_INIT;
    else if (strcmp(s, "data") == 0) *out = CMP_VARY_DATA;
    else return -1;
    return 0;
}

const char *cmp_verdict_name(cmp_verdict v)
{
    static const char *names[] = {"IDENTICAL", "SHIFT up", "SHIFT down", "EQUIVALENT", "UNDECIDED", "NO DATA"};
    return (unsigned)v < sizeof names / sizeof names[0] ? names[v] : "?";
}

static int set_err(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int set_err(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return -1;
}

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cmp_shard_parse(const char *s, int *shard, int *n_shards)
{
    char *end;
    errno = 0;
    long i = strtol(s, &end, 10);
    if (end == s || *end != '/' || errno) return -1;
    const char *q = end + 1;
    long n = strtol(q, &end, 10);
    if (end == q || *end || errno || n < 1 || n > CMP_MAX_SHARDS || i < 0 || i >= n) return -1;
    *shard = (int)i;
    *n_shards = (int)n;
    return 0;
}

void cmp_shard_range(int n_seeds, int shard, int n_shards, int *from, int *to)
{
    *from = (int)((long long)n_seeds * shard / n_shards);
    *to = (int)((long long)n_seeds * (shard + 1) / n_shards);
}

/* ---- the run table: arm x seed ------------------------------------------------- */

typedef struct {
    int n_arms, n_seeds, cap_seeds;
    uint64_t *seeds;
    cmp_run *runs;      /* [n_arms][cap_seeds] */
    unsigned char *have; /* same shape: 1 when runs[] holds a finished or failed run */
} run_table;

static int table_reserve(run_table *t, int seeds)
{
    if (seeds <= t->cap_seeds) return 0;
    int cap = t->cap_seeds ? t->cap_seeds : 16;
    while (cap < seeds) cap *= 2;
    cmp_run *runs = calloc((size_t)t->n_arms * cap, sizeof *runs);
    unsigned char *have = calloc((size_t)t->n_arms * cap, 1);
    uint64_t *sd = realloc(t->seeds, (size_t)cap * sizeof *sd);
    if (!runs || !have || !sd) {
        free(runs);
        free(have);
        if (sd) t->seeds = sd;
        return -1;
    }
    for (int a = 0; a < t->n_arms; a++)
        for (int s = 0; s < t->n_seeds; s++) {
            runs[(size_t)a * cap + s] = t->runs[(size_t)a * t->cap_seeds + s];
            have[(size_t)a * cap + s] = t->have[(size_t)a * t->cap_seeds + s];
        }
    free(t->runs);
    free(t->have);
    t->runs = runs;
    t->have = have;
    t->seeds = sd;
    t->cap_seeds = cap;
    return 0;
}

static cmp_run *table_run(run_table *t, int arm, int s) { return &t->runs[(size_t)arm * t->cap_seeds + s]; }
static unsigned char *table_have(run_table *t, int arm, int s) { return &t->have[(size_t)arm * t->cap_seeds + s]; }

static void table_free(run_table *t)
{
    free(t->runs);
    free(t->have);
    free(t->seeds);
}

static void job_seeds(const cmp_config *c, uint64_t seed, cmp_job *j)
{
    j->seed = seed;
    j->init_seed = c->vary == CMP_VARY_DATA ? c->fixed_seed : seed;
    j->data_seed = c->vary == CMP_VARY_INIT ? c->fixed_seed : seed;
}

/* ---- the results directory ---------------------------------------------------------- */

typedef struct {
    char path[4096];
    int on;             /* a results directory is in use */
    int fd;             /* the runs file this process appends to (O_APPEND): runs.jsonl, or a shard's own */
    char file[4200];
    json_value **loaded;
    int n_loaded;
} cache;

static int write_whole(const char *path, const char *text, char *err, size_t errlen)
{
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return set_err(err, errlen, "cannot write %s: %s", path, strerror(errno));
    int bad = fputs(text, f) < 0 || fputc('\n', f) < 0 || fflush(f) || fsync(fileno(f));
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path)) {
        int e = errno;
        unlink(tmp);
        return set_err(err, errlen, "cannot write %s: %s", path, strerror(e));
    }
    return 0;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        char *nb = realloc(buf, cap *= 2);
        if (!nb) {
            free(buf);
            buf = NULL;
        } else buf = nb;
    }
    fclose(f);
    if (buf) *len = n;
    return buf;
}

/* The recipe file must equal this call's recipe, key by key. */
static int check_recipe(const char *file, const char *recipe, char *err, size_t errlen)
{
    size_t len;
    char *text = read_file(file, &len);
    if (!text) return set_err(err, errlen, "cannot read %s: %s", file, strerror(errno));
    json_value *a = NULL, *b = NULL;
    char jerr[256];
    int rc = 0;
    while (len && (text[len - 1] == '\n' || text[len - 1] == ' ')) len--;
    if (json_parse(text, len, &a, jerr, sizeof jerr) || a->type != JSON_OBJECT) {
        rc = set_err(err, errlen, "%s is not a recipe file (%s)", file, a ? "not a JSON object" : jerr);
        goto done;
    }
    if (json_parse(recipe, strlen(recipe), &b, jerr, sizeof jerr) || b->type != JSON_OBJECT) {
        rc = set_err(err, errlen, "internal: the recipe is not a JSON object (%s)", jerr);
        goto done;
    }
    char diff[1024] = "";
    size_t dn = 0;
    int ndiff = 0;
    for (int pass = 0; pass < 2; pass++) {
        const json_value *x = pass ? b : a, *y = pass ? a : b;
        for (size_t i = 0; i < x->n_items; i++) {
            const json_value *other = json_get(y, x->keys[i]);
            /* pass 0: keys of the file (missing or different now); pass 1: keys only this call has */
            int differs = pass == 0 ? !json_equal(&x->items[i], other) : other == NULL;
            if (differs) {
                ndiff++;
                if (dn < sizeof diff)
                    dn += (size_t)snprintf(diff + dn, sizeof diff - dn, "%s%s", ndiff > 1 ? ", " : "", x->keys[i]);
            }
        }
    }
    /* kernels change between builds: a cached run is that build's result */
    const json_value *was = json_get(a, "build"), *now = json_get(b, "build");
    if (ndiff && was && now && !json_equal(was, now) && was->type == JSON_STRING && now->type == JSON_STRING)
        rc = set_err(err, errlen,
                     "results directory holds runs made by another build of ulpscope (%s; this is %s); use another "
                     "--results directory",
                     was->text, now->text);
    else if (ndiff)
        rc = set_err(err, errlen,
                     "results directory holds runs of another recipe (differs in: %s); use another --results directory",
                     diff);
done:
    json_free(a);
    json_free(b);
    free(text);
    return rc;
}

/* Appends every complete line of a runs file to k->loaded.  A last line
 * without its newline is a run being written (another shard's) or cut by a
 * kill: it is skipped, and when the file is the one this process appends to,
 * cut off so that appends start on a line of their own. */
static int cache_load(cache *k, const char *file, int own, char *err, size_t errlen)
{
    size_t len = 0;
    char *text = read_file(file, &len);
    if (!text) {
        if (errno == ENOENT) return 0; /* the file of a shard that has not written yet */
        return set_err(err, errlen, "cannot read %s: %s", file, strerror(errno)), 1;
    }
    size_t pos = 0;
    int line = 0;
    while (pos < len) {
        char *nl = memchr(text + pos, '\n', len - pos);
        if (!nl) break;
        size_t n = (size_t)(nl - (text + pos));
        line++;
        json_value *v;
        char jerr[256];
        if (n && json_parse(text + pos, n, &v, jerr, sizeof jerr) == 0) {
            json_value **grown = realloc(k->loaded, (size_t)(k->n_loaded + 1) * sizeof *grown);
            if (!grown) {
                json_free(v);
                free(text);
                return set_err(err, errlen, "out of memory"), 1;
            }
            k->loaded = grown;
            k->loaded[k->n_loaded++] = v;
        } else if (n) {
            free(text);
            return set_err(err, errlen, "%s line %d is corrupt (%s)", file, line, jerr), 2;
        }
        pos += n + 1;
    }
    if (own && len && text[len - 1] != '\n') {
        size_t keep = len;
        while (keep && text[keep - 1] != '\n') keep--;
        if (truncate(file, (off_t)keep)) {
            free(text);
            return set_err(err, errlen, "cannot repair %s: %s", file, strerror(errno)), 1;
        }
    }
    free(text);
    return 0;
}

/* runs.jsonl and the shards' runs.shard-I-of-N.jsonl */
static int is_runs_file(const struct dirent *e)
{
    const char *n = e->d_name;
    size_t len = strlen(n);
    return strcmp(n, "runs.jsonl") == 0 ||
           (strncmp(n, "runs.shard-", 11) == 0 && len > 17 && strcmp(n + len - 6, ".jsonl") == 0);
}

static int cache_open(cache *k, const char *dir, const char *recipe, int shard, int n_shards, char *err, size_t errlen)
{
    memset(k, 0, sizeof *k);
    k->fd = -1;
    if (strlen(dir) > 4000) return set_err(err, errlen, "results directory path too long"), 2;
    struct stat st;
    char file[4200];
    /* shards may start together: the directory someone else just made is as good */
    if (stat(dir, &st) != 0 && (errno != ENOENT || (mkdir(dir, 0777) != 0 && errno != EEXIST)))
        return set_err(err, errlen, "cannot create results directory %s: %s", dir, strerror(errno)), 2;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return set_err(err, errlen, "results directory %s exists and is not a directory", dir), 2;
    snprintf(k->path, sizeof k->path, "%s", dir);
    k->on = 1;
    struct dirent **names = NULL;
    int n_names = scandir(dir, &names, is_runs_file, alphasort);
    if (n_names < 0) return set_err(err, errlen, "cannot read results directory %s: %s", dir, strerror(errno)), 1;
    int rc = 0;
    snprintf(file, sizeof file, "%s/recipe.json", dir);
    if (stat(file, &st) == 0) {
        if (check_recipe(file, recipe, err, errlen)) rc = 2;
    } else if (n_names > 0) {
        /* a directory with other things in it is not ours to fill */
        rc = (set_err(err, errlen, "results directory %s has %s but no recipe.json: not a compare cache", dir,
                      names[0]->d_name), 2);
    } else if (write_whole(file, recipe, err, errlen)) /* shards racing here write the same text */
        rc = 1;
    if (n_shards > 1) snprintf(k->file, sizeof k->file, "%s/runs.shard-%d-of-%d.jsonl", dir, shard, n_shards);
    else snprintf(k->file, sizeof k->file, "%s/runs.jsonl", dir);
    /* finished runs: every runs file, in name order */
    for (int i = 0; i < n_names && !rc; i++) {
        snprintf(file, sizeof file, "%s/%s", dir, names[i]->d_name);
        rc = cache_load(k, file, strcmp(file, k->file) == 0, err, errlen);
    }
    for (int i = 0; i < n_names; i++) free(names[i]);
    free(names);
    if (rc) return rc;
    k->fd = open(k->file, O_WRONLY | O_APPEND | O_CREAT, 0666);
    if (k->fd < 0) return set_err(err, errlen, "cannot append to %s: %s", k->file, strerror(errno)), 1;
    return 0;
}

static void cache_close(cache *k)
{
    if (k->fd >= 0) close(k->fd);
    for (int i = 0; i < k->n_loaded; i++) json_free(k->loaded[i]);
    free(k->loaded);
    memset(k, 0, sizeof *k);
    k->fd = -1;
}

static int cache_find(const cache *k, uint64_t identity, const cmp_job *j, cmp_run *out)
{
    for (int i = k->n_loaded - 1; i >= 0; i--) {
        const json_value *v = k->loaded[i];
        uint64_t id, is, ds, h;
        long status;
        if (json_u64(json_get(v, "identity"), &id) || id != identity) continue;
        if (json_u64(json_get(v, "init_seed"), &is) || is != j->init_seed) continue;
        if (json_u64(json_get(v, "data_seed"), &ds) || ds != j->data_seed) continue;
        memset(out, 0, sizeof *out);
        if (json_long(json_get(v, "status"), 0, 3, &status) || json_double(json_get(v, "final_val_loss"), &out->final_val_loss) ||
            json_u64(json_get(v, "state_hash"), &h) || json_double(json_get(v, "seconds"), &out->seconds))
            continue;
        out->status = (int)status;
        out->state_hash = h;
        const json_value *curve = json_get(v, "curve");
        if (curve && curve->type == JSON_ARRAY)
            for (size_t p = 0; p < curve->n_items && out->n_curve < CMP_MAX_CURVE; p++) {
                const json_value *pt = &curve->items[p];
                long step;
                double val;
                if (pt->type != JSON_ARRAY || pt->n_items != 2 || json_long(&pt->items[0], 0, 1L << 40, &step) ||
                    json_double(&pt->items[1], &val))
                    continue;
                out->curve_step[out->n_curve] = step;
                out->curve_val[out->n_curve++] = val;
            }
        const json_value *e = json_get(v, "error");
        if (e && e->type == JSON_STRING) snprintf(out->error, sizeof out->error, "%s", e->text);
        return 1;
    }
    return 0;
}

static void json_str(FILE *fp, const char *s)
{
    fputc('"', fp);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(fp, "\\%c", c);
        else if (c < 0x20) fprintf(fp, "\\u%04x", c);
        else fputc(c, fp);
    }
    fputc('"', fp);
}

static void json_num(FILE *fp, double x)
{
    if (isnan(x)) fputs("\"nan\"", fp);
    else if (isinf(x)) fputs(x > 0 ? "\"inf\"" : "\"-inf\"", fp);
    else fprintf(fp, "%.17g", x);
}

static void write_run_record(FILE *fp, const cmp_arm *arm, uint64_t identity, const cmp_job *j, const cmp_run *r)
{
    fprintf(fp, "{\"record\":\"run\",\"arm\":");
    json_str(fp, arm->name);
    fprintf(fp, ",\"identity\":\"0x%016llx\",\"seed\":%llu,\"init_seed\":%llu,\"data_seed\":%llu,\"status\":%d,\"final_val_loss\":",
            (unsigned long long)identity, (unsigned long long)j->seed, (unsigned long long)j->init_seed,
            (unsigned long long)j->data_seed, r->status);
    json_num(fp, r->final_val_loss);
    fprintf(fp, ",\"state_hash\":\"0x%016llx\",\"seconds\":", (unsigned long long)r->state_hash);
    json_num(fp, r->seconds);
    fprintf(fp, ",\"curve\":[");
    for (int p = 0; p < r->n_curve; p++) {
        fprintf(fp, "%s[%ld,", p ? "," : "", r->curve_step[p]);
        json_num(fp, r->curve_val[p]);
        fputc(']', fp);
    }
    fprintf(fp, "],\"error\":");
    json_str(fp, r->error);
    fprintf(fp, "}\n");
}

/* One run, one write(2) of its whole line to an O_APPEND descriptor: two
 * processes appending to one file (local file systems) never interleave
 * within a line; shards on a network file system write files of their own. */
static int cache_append(cache *k, const cmp_arm *arm, uint64_t identity, const cmp_job *j, const cmp_run *r, char *err,
                        size_t errlen)
{
    char *line = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&line, &len);
    if (!mem) return set_err(err, errlen, "out of memory");
    write_run_record(mem, arm, identity, j, r);
    if (fclose(mem)) {
        free(line);
        return set_err(err, errlen, "out of memory");
    }
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(k->fd, line + done, len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        done += (size_t)w;
    }
    free(line);
    if (done < len || fsync(k->fd)) return set_err(err, errlen, "cannot write %s: %s", k->file, strerror(errno));
    return 0;
}

/* ---- judging ----------------------------------------------------------------------------- */

static void arm_stats(const run_table *t, int a, cmp_arm_report *ar)
{
    double *loss = malloc((size_t)t->n_seeds * sizeof *loss), *sec = malloc((size_t)t->n_seeds * sizeof *sec);
    int n = 0;
    for (int s = 0; s < t->n_seeds; s++) {
        if (!t->have[(size_t)a * t->cap_seeds + s]) continue;
        const cmp_run *r = &t->runs[(size_t)a * t->cap_seeds + s];
        if (r->status != 0 || !isfinite(r->final_val_loss)) {
            ar->failed++;
            continue;
        }
        loss[n] = r->final_val_loss;
        sec[n++] = r->seconds;
    }
    ar->runs = n;
    ar->loss_mean = n ? stats_mean(loss, (size_t)n) : NAN;
    ar->loss_sd = n > 1 ? stats_sd(loss, (size_t)n) : NAN;
    ar->time_mean = n ? stats_mean(sec, (size_t)n) : NAN;
    ar->time_sd = n > 1 ? stats_sd(sec, (size_t)n) : NAN;
    free(loss);
    free(sec);
}

/* Paired finals of arm a and the base: x = base, y = arm. */
static int pairs_of(const run_table *t, int a, double *x, double *y, int *identical)
{
    int n = 0;
    *identical = 1;
    for (int s = 0; s < t->n_seeds; s++) {
        size_t ib = (size_t)s, ia = (size_t)a * t->cap_seeds + s;
        if (!t->have[ib] || !t->have[ia]) continue;
        const cmp_run *rb = &t->runs[ib], *ra = &t->runs[ia];
        if (rb->status || ra->status || !isfinite(rb->final_val_loss) || !isfinite(ra->final_val_loss)) continue;
        x[n] = rb->final_val_loss;
        y[n] = ra->final_val_loss;
        if (rb->state_hash != ra->state_hash || x[n] != y[n]) *identical = 0;
        n++;
    }
    if (!n) *identical = 0;
    return n;
}

static int null_arm_of(const cmp_config *c)
{
    for (int a = 1; a < c->n_arms; a++)
        if (c->arms[a].is_null) return a;
    return -1;
}

/* The noise floor: seed sd of the base, chaos sd from the null arm. */
static void noise_floor(const cmp_config *c, const run_table *t, cmp_report *rep)
{
    rep->seed_sd = rep->arm[0].loss_sd;
    rep->chaos_sd = NAN;
    int na = null_arm_of(c);
    if (na < 0) return;
    double *x = malloc((size_t)t->n_seeds * sizeof *x), *y = malloc((size_t)t->n_seeds * sizeof *y);
    int identical;
    int n = pairs_of(t, na, x, y, &identical);
    if (n >= 2) {
        for (int i = 0; i < n; i++) y[i] -= x[i];
        rep->chaos_sd = stats_sd(y, (size_t)n) / sqrt(2.0);
    }
    free(x);
    free(y);
}

static int judge_table(const cmp_config *c, const run_table *t, cmp_report *rep, int sequential, char *err, size_t errlen)
{
    int keep_exec = rep->runs_executed, keep_cached = rep->runs_cached;
    double keep_sec = rep->seconds;
    cmp_run *keep_runs_ptr = rep->runs;
    uint64_t *keep_seeds = rep->seeds;
    memset(rep, 0, sizeof *rep);
    rep->runs_executed = keep_exec;
    rep->runs_cached = keep_cached;
    rep->seconds = keep_sec;
    rep->runs = keep_runs_ptr;
    rep->seeds = keep_seeds;
    rep->n_arms = c->n_arms;
    rep->seeds_used = t->n_seeds;
    for (int a = 0; a < c->n_arms; a++) {
        arm_stats(t, a, &rep->arm[a]);
        rep->runs_total += rep->arm[a].runs + rep->arm[a].failed;
    }
    noise_floor(c, t, rep);
    rep->margin = c->margin;
    if (!(rep->margin > 0)) {
        if (!isfinite(rep->chaos_sd) || !(rep->chaos_sd > 0)) {
            /* bit-identical null runs (a fully deterministic, chaos-free recipe) or too few */
            if (null_arm_of(c) < 0) return set_err(err, errlen, "no margin: give --margin or keep the null arm");
            rep->margin = NAN;
        } else rep->margin = rep->chaos_sd;
        rep->margin_derived = 1;
    }
    double *x = malloc((size_t)t->n_seeds * sizeof *x), *y = malloc((size_t)t->n_seeds * sizeof *y),
           *d = malloc((size_t)t->n_seeds * sizeof *d);
    double praw[CMP_MAX_ARMS], ptost[CMP_MAX_ARMS];
    int fam[CMP_MAX_ARMS], nfam = 0;
    if (!x || !y || !d) {
        free(x);
        free(y);
        free(d);
        return set_err(err, errlen, "out of memory");
    }
    int na = null_arm_of(c);
    int k_arms = c->n_arms - 1 - (na >= 0); /* the user's arms: the Bonferroni divisor in sequential mode */
    if (k_arms < 1) k_arms = 1;
    for (int a = 1; a < c->n_arms; a++) {
        cmp_arm_report *ar = &rep->arm[a];
        int n = pairs_of(t, a, x, y, &ar->identical);
        ar->pairs = n;
        ar->verdict = CMP_NO_DATA;
        ar->wilcoxon_p = NAN;
        ar->correlation = NAN;
        ar->p_adjusted = ar->tost_p_adjusted = NAN;
        if (ar->identical) {
            ar->verdict = CMP_IDENTICAL;
            ar->paired.estimate = 0;
            continue;
        }
        if (n < 2) {
            snprintf(ar->why, sizeof ar->why, "%d paired runs finished (at least 2 needed)", n);
            continue;
        }
        for (int i = 0; i < n; i++) d[i] = y[i] - x[i];
        stats_paired_t(d, (size_t)n, c->alpha, &ar->paired);
        stats_welch_t(x, (size_t)n, y, (size_t)n, c->alpha, &ar->welch);
        stats_wilcoxon w;
        if (stats_wilcoxon_signed_rank(d, (size_t)n, &w) == STATS_OK) ar->wilcoxon_p = w.p;
        if (n >= 3) stats_pitman_morgan(x, y, (size_t)n, c->alpha, &ar->spread);
        else ar->spread.p = ar->spread.ratio = NAN;
        ar->correlation = stats_correlation(x, y, (size_t)n);
        if (isfinite(rep->margin) && c->alpha < 0.5) stats_tost_paired(d, (size_t)n, rep->margin, c->alpha, &ar->tost);
        else ar->tost.p = 1.0;
        if (sequential) {
            stats_cs_state cs;
            stats_cs_start(&cs);
            for (int i = 0; i < n; i++) stats_cs_add(&cs, d[i]);
            double level = c->alpha / k_arms;
            double rho = stats_cs_mixture_for((size_t)(c->batch > 0 ? 4 * c->batch : 32), level);
            if (stats_cs_interval(&cs, level, rho, &ar->cs) != STATS_OK) ar->cs.lo = -INFINITY, ar->cs.hi = INFINITY;
            stats_decision dec = stats_cs_decide(&ar->cs, isfinite(rep->margin) ? rep->margin : 0.0);
            if (!isfinite(rep->margin) && dec == STATS_EQUIVALENT) dec = STATS_UNDECIDED;
            ar->verdict = dec == STATS_SHIFT_UP     ? CMP_SHIFT_UP
                          : dec == STATS_SHIFT_DOWN ? CMP_SHIFT_DOWN
                          : dec == STATS_EQUIVALENT ? CMP_EQUIVALENT
                                                    : CMP_UNDECIDED;
        }
        if (a == na) {
            ar->p_adjusted = ar->paired.p;
            ar->tost_p_adjusted = ar->tost.p;
        } else {
            fam[nfam] = a;
            praw[nfam] = ar->paired.p;
            ptost[nfam++] = ar->tost.p;
        }
    }
    if (nfam) {
        double adj[CMP_MAX_ARMS], adjt[CMP_MAX_ARMS];
        stats_holm(praw, (size_t)nfam, adj);
        stats_holm(ptost, (size_t)nfam, adjt);
        for (int i = 0; i < nfam; i++) {
            rep->arm[fam[i]].p_adjusted = adj[i];
            rep->arm[fam[i]].tost_p_adjusted = adjt[i];
        }
    }
    for (int a = 1; a < c->n_arms; a++) {
        cmp_arm_report *ar = &rep->arm[a];
        if (ar->verdict == CMP_IDENTICAL || ar->pairs < 2) continue;
        if (!sequential) {
            if (ar->p_adjusted < c->alpha) ar->verdict = ar->paired.estimate > 0 ? CMP_SHIFT_UP : CMP_SHIFT_DOWN;
            else if (ar->tost_p_adjusted < c->alpha) ar->verdict = CMP_EQUIVALENT;
            else ar->verdict = CMP_UNDECIDED;
        }
        if ((ar->verdict == CMP_SHIFT_UP || ar->verdict == CMP_SHIFT_DOWN) && isfinite(rep->margin))
            ar->within_margin = ar->tost.equivalent;
        if (ar->verdict == CMP_UNDECIDED && isfinite(rep->margin)) {
            double sdd = ar->paired.se * sqrt((double)ar->pairs);
            double est = fabs(ar->paired.estimate);
            size_t need = est < rep->margin ? stats_runs_for_equivalence(est, rep->margin, sdd, c->alpha, c->power)
                                            : stats_runs_for_shift(est, sdd, c->alpha, c->power);
            ar->runs_needed = (int)(need > (size_t)1 << 30 ? 0 : need);
        }
        if (a == na && (ar->verdict == CMP_SHIFT_UP || ar->verdict == CMP_SHIFT_DOWN)) rep->null_warning = 1;
    }
    free(x);
    free(y);
    free(d);
    return 0;
}

/* Copies the table into rep->runs / rep->seeds. */
static int keep_runs(const run_table *t, cmp_report *rep)
{
    free(rep->runs);
    free(rep->seeds);
    rep->runs = calloc((size_t)t->n_arms * (t->n_seeds ? t->n_seeds : 1), sizeof *rep->runs);
    rep->seeds = calloc((size_t)(t->n_seeds ? t->n_seeds : 1), sizeof *rep->seeds);
    if (!rep->runs || !rep->seeds) return -1;
    for (int s = 0; s < t->n_seeds; s++) {
        rep->seeds[s] = t->seeds[s];
        for (int a = 0; a < t->n_arms; a++) {
            cmp_run *r = &rep->runs[(size_t)a * t->n_seeds + s];
            if (t->have[(size_t)a * t->cap_seeds + s]) *r = t->runs[(size_t)a * t->cap_seeds + s];
            else {
                r->status = 1;
                r->final_val_loss = NAN;
                snprintf(r->error, sizeof r->error, "not run");
            }
        }
    }
    return 0;
}

void cmp_report_free(cmp_report *rep)
{
    free(rep->runs);
    free(rep->seeds);
    rep->runs = NULL;
    rep->seeds = NULL;
}

static int validate(const cmp_config *c, int n_seeds, char *err, size_t errlen)
{
    if (c->n_arms < 2) return set_err(err, errlen, "compare needs the base and at least one arm");
    if (c->n_arms > CMP_MAX_ARMS) return set_err(err, errlen, "at most %d arms (the null arm included)", CMP_MAX_ARMS);
    for (int a = 0; a < c->n_arms; a++) {
        if (!c->arms[a].name[0]) return set_err(err, errlen, "arm %d has no name", a);
        if (!c->arms[a].identity) return set_err(err, errlen, "arm %s has no identity", c->arms[a].name);
        for (int b = 0; b < a; b++) {
            if (strcmp(c->arms[a].name, c->arms[b].name) == 0)
                return set_err(err, errlen, "duplicate arm name '%s'", c->arms[a].name);
            if (strcmp(c->arms[a].identity, c->arms[b].identity) == 0)
                return set_err(err, errlen, "arms '%s' and '%s' run the same plan", c->arms[b].name, c->arms[a].name);
        }
    }
    if (!(c->alpha > 0 && c->alpha < 0.5)) return set_err(err, errlen, "alpha must lie in (0, 0.5), got %g", c->alpha);
    if (!(c->power > 0 && c->power < 1)) return set_err(err, errlen, "power must lie in (0, 1), got %g", c->power);
    if (c->margin < 0 || !isfinite(c->margin)) return set_err(err, errlen, "margin must be positive, got %g", c->margin);
    if (!(c->margin > 0) && null_arm_of(c) < 0) return set_err(err, errlen, "no margin: give --margin or keep the null arm");
    if (c->n_shards > 1) {
        if (c->shard < 0 || c->shard >= c->n_shards)
            return set_err(err, errlen, "shard %d/%d: the shard index runs from 0 to %d", c->shard, c->n_shards,
                           c->n_shards - 1);
        if (!c->results_dir) return set_err(err, errlen, "a shard writes its runs into a results directory: give one");
        if (c->until_decided) return set_err(err, errlen, "the sequential mode cannot be sharded (each batch depends on the last)");
        if (c->n_shards > n_seeds)
            return set_err(err, errlen, "%d shards of %d seeds: at most one shard per seed", c->n_shards, n_seeds);
    }
    if (c->until_decided) {
        if (c->batch < 2) return set_err(err, errlen, "batch must be at least 2 seeds, got %d", c->batch);
        if (c->max_runs < c->batch * c->n_arms)
            return set_err(err, errlen, "max runs %d is less than one batch (%d seeds x %d arms)", c->max_runs, c->batch,
                           c->n_arms);
    } else {
        if (n_seeds < 2) return set_err(err, errlen, "compare needs at least 2 seeds, got %d", n_seeds);
        for (int i = 0; c->seeds && i < n_seeds; i++)
            for (int j = 0; j < i; j++)
                if (c->seeds[i] == c->seeds[j])
                    return set_err(err, errlen, "seed %llu is listed twice", (unsigned long long)c->seeds[i]);
    }
    return 0;
}

int cmp_judge(const cmp_config *c, const cmp_run *runs, int n_seeds, cmp_report *rep, char *err, size_t errlen)
{
    memset(rep, 0, sizeof *rep);
    if (validate(c, n_seeds, err, errlen)) return 2;
    run_table t = {.n_arms = c->n_arms};
    if (table_reserve(&t, n_seeds)) return set_err(err, errlen, "out of memory"), 1;
    t.n_seeds = n_seeds;
    for (int a = 0; a < c->n_arms; a++)
        for (int s = 0; s < n_seeds; s++) {
            *table_run(&t, a, s) = runs[(size_t)a * n_seeds + s];
            *table_have(&t, a, s) = 1;
        }
    int rc = judge_table(c, &t, rep, 0, err, errlen) ? 2 : 0;
    if (!rc && keep_runs(&t, rep)) rc = (set_err(err, errlen, "out of memory"), 1);
    table_free(&t);
    return rc;
}

static void progress(const cmp_config *c, int done, int total, int cached, double t0)
{
    if (!c->progress) return;
    double el = now_seconds() - t0;
    int executed = done - cached;
    fprintf(c->progress, "compare: %d/%d runs (%d cached), %.0f s elapsed", done, total, cached, el);
    if (executed > 0 && done < total) fprintf(c->progress, ", about %.0f s left", el / executed * (total - done));
    fputc('\n', c->progress);
    fflush(c->progress);
}

/* One run() call of run_batch: where its finished runs go. */
typedef struct {
    const cmp_config *c;
    cache *k;
    const uint64_t *ids;
    run_table *t;
    const cmp_job *jobs;
    const cmp_run *out;
    const int *cell_arm, *cell_seed;
    unsigned char *kept;   /* kept[i]: run i is in the table (and the cache) */
    cmp_report *rep;
    int total_hint;
    double t0;
    int cache_failed;
    char *err;
    size_t errlen;
} batch;

/* Puts run i into the table and the cache (once). */
static void keep_run(batch *b, int i)
{
    if (b->kept[i]) return;
    b->kept[i] = 1;
    *table_run(b->t, b->cell_arm[i], b->cell_seed[i]) = b->out[i];
    *table_have(b->t, b->cell_arm[i], b->cell_seed[i]) = 1;
    b->rep->runs_executed++;
    if (b->k->on && !b->cache_failed &&
        cache_append(b->k, &b->c->arms[b->cell_arm[i]], b->ids[b->cell_arm[i]], &b->jobs[i], &b->out[i], b->err,
                     b->errlen))
        b->cache_failed = 1;
}

static void batch_finished(cmp_runner *r, const int *which, int m)
{
    batch *b = r->finished_ctx;
    for (int i = 0; i < m; i++) keep_run(b, which[i]);
    progress(b->c, b->rep->runs_executed + b->rep->runs_cached, b->total_hint, b->rep->runs_cached, b->t0);
}

/* Runs jobs[0..n) (cells cell_arm/cell_seed of the table) and caches each
 * run as soon as the runner reports it finished, or else as soon as the
 * call that made it returns. */
static int run_batch(const cmp_config *c, cmp_runner *runner, cache *k, const uint64_t *ids, run_table *t,
                     cmp_job *jobs, cmp_run *out, const int *cell_arm, const int *cell_seed, int n, cmp_report *rep,
                     int total_hint, double t0, char *err, size_t errlen)
{
    if (!n) return 0;
    memset(out, 0, (size_t)n * sizeof *out);
    batch b = {c, k, ids, t, jobs, out, cell_arm, cell_seed, calloc((size_t)n, 1), rep, total_hint, t0, 0, err, errlen};
    if (!b.kept) return set_err(err, errlen, "out of memory"), 1;
    runner->finished = batch_finished;
    runner->finished_ctx = &b;
    int failed = runner->run(runner, c->arms, jobs, n, out);
    runner->finished = NULL;
    runner->finished_ctx = NULL;
    int rc = 0;
    if (failed)
        rc = (set_err(err, errlen, "the runner failed: %s", out[0].error[0] ? out[0].error : "no reason given"), 1);
    else {
        int unreported = 0;
        for (int i = 0; i < n; i++) unreported += !b.kept[i];
        for (int i = 0; i < n; i++) keep_run(&b, i);
        if (unreported) progress(c, rep->runs_executed + rep->runs_cached, total_hint, rep->runs_cached, t0);
    }
    if (b.cache_failed) rc = 1; /* the cache's message replaces the runner's: the runs could not be kept */
    free(b.kept);
    return rc;
}

/* Runs the missing (arm, seed) cells of seeds [from, to) of the table, in
 * chunks of the runner's capacity of seeds.  A per-arm runner (the replica
 * engine: one plan at a time) gets one arm's cells of a chunk per call, so
 * that every arm's runs are cached as soon as that arm is done: a compare
 * killed in its fifth arm keeps the first four (one call for all arms kept
 * nothing until the last had finished). */
static int fill(const cmp_config *c, cmp_runner *runner, cache *k, const uint64_t *ids, run_table *t, int from, int to,
                cmp_report *rep, int total_hint, double t0, char *err, size_t errlen)
{
    int capacity = runner->capacity > 0 ? runner->capacity : 1;
    cmp_job *jobs = malloc((size_t)capacity * sizeof *jobs);
    cmp_run *out = malloc((size_t)capacity * sizeof *out);
    int *cell_arm = malloc((size_t)capacity * sizeof *cell_arm), *cell_seed = malloc((size_t)capacity * sizeof *cell_seed);
    int rc = 0, n = 0;
    if (!jobs || !out || !cell_arm || !cell_seed) {
        rc = (set_err(err, errlen, "out of memory"), 1);
        goto done;
    }
    /* per-arm runners: a chunk of `capacity` seeds, arm by arm; others: cells
     * in (seed, arm) order, `capacity` at a time */
    int chunk = runner->per_arm ? capacity : to - from;
    for (int s0 = from; s0 < to && !rc; s0 += chunk) {
        int s1 = s0 + chunk < to ? s0 + chunk : to;
        int passes = runner->per_arm ? c->n_arms : 1;
        for (int pass = 0; pass < passes && !rc; pass++) {
            for (int s = s0; s < s1 && !rc; s++)
                for (int a = runner->per_arm ? pass : 0; a < (runner->per_arm ? pass + 1 : c->n_arms) && !rc; a++) {
                    if (*table_have(t, a, s)) continue;
                    cmp_job j;
                    job_seeds(c, t->seeds[s], &j);
                    j.arm = a;
                    if (k->on && cache_find(k, ids[a], &j, table_run(t, a, s))) {
                        *table_have(t, a, s) = 1;
                        rep->runs_cached++;
                        continue;
                    }
                    jobs[n] = j;
                    cell_arm[n] = a;
                    cell_seed[n++] = s;
                    if (n == capacity) {
                        rc = run_batch(c, runner, k, ids, t, jobs, out, cell_arm, cell_seed, n, rep, total_hint, t0,
                                       err, errlen);
                        n = 0;
                    }
                }
            /* a per-arm runner's batch ends with its arm */
            if (!rc && runner->per_arm && n) {
                rc = run_batch(c, runner, k, ids, t, jobs, out, cell_arm, cell_seed, n, rep, total_hint, t0, err,
                               errlen);
                n = 0;
            }
        }
    }
    if (!rc && n) rc = run_batch(c, runner, k, ids, t, jobs, out, cell_arm, cell_seed, n, rep, total_hint, t0, err, errlen);
done:
    free(jobs);
    free(out);
    free(cell_arm);
    free(cell_seed);
    return rc;
}

int cmp_run_study(const cmp_config *c, cmp_runner *runner, cmp_report *rep, char *err, size_t errlen)
{
    memset(rep, 0, sizeof *rep);
    if (validate(c, c->n_seeds, err, errlen)) return 2;
    double t0 = now_seconds();
    uint64_t ids[CMP_MAX_ARMS];
    for (int a = 0; a < c->n_arms; a++) ids[a] = fnv1a(c->arms[a].identity);
    cache k;
    memset(&k, 0, sizeof k);
    k.fd = -1;
    if (c->results_dir) {
        if (!c->recipe_json) return set_err(err, errlen, "internal: a results directory needs the recipe"), 2;
        int rc = cache_open(&k, c->results_dir, c->recipe_json, c->shard, c->n_shards, err, errlen);
        if (rc) {
            cache_close(&k);
            return rc == 2 ? 2 : 1;
        }
    }
    run_table t = {.n_arms = c->n_arms};
    int rc = 0;
    if (!c->until_decided) {
        /* a shard's table holds its share of the seeds only */
        int from = 0, to = c->n_seeds;
        if (c->n_shards > 1) cmp_shard_range(c->n_seeds, c->shard, c->n_shards, &from, &to);
        if (table_reserve(&t, to - from)) rc = (set_err(err, errlen, "out of memory"), 1);
        else {
            t.n_seeds = to - from;
            memcpy(t.seeds, c->seeds + from, (size_t)t.n_seeds * sizeof *t.seeds);
            rc = fill(c, runner, &k, ids, &t, 0, t.n_seeds, rep, t.n_seeds * c->n_arms, t0, err, errlen);
            if (!rc && c->n_shards > 1) {
                rep->n_arms = c->n_arms;
                rep->seeds_used = t.n_seeds;
                rep->runs_total = rep->runs_executed + rep->runs_cached;
                rep->sharded = 1;
                for (int a = 0; a < c->n_arms; a++) {
                    rep->arm[a].verdict = CMP_NO_DATA;
                    snprintf(rep->arm[a].why, sizeof rep->arm[a].why, "a shard judges nothing: merge the shards");
                }
                rep->seconds = now_seconds() - t0;
            } else if (!rc) {
                rep->seconds = now_seconds() - t0;
                rc = judge_table(c, &t, rep, 0, err, errlen) ? 2 : 0;
            }
        }
    } else {
        cmp_config frozen = *c;   /* the margin, once estimated, stays */
        for (;;) {
            int from = t.n_seeds, to = from + c->batch;
            if (to * c->n_arms > c->max_runs) to = c->max_runs / c->n_arms;
            if (to <= from) {
                rep->budget_exhausted = 1;
                break;
            }
            if (table_reserve(&t, to)) {
                rc = (set_err(err, errlen, "out of memory"), 1);
                break;
            }
            for (int s = from; s < to; s++) t.seeds[s] = c->first_seed + (uint64_t)s;
            t.n_seeds = to;
            if ((rc = fill(c, runner, &k, ids, &t, from, to, rep, c->max_runs, t0, err, errlen))) break;
            rep->seconds = now_seconds() - t0;
            if (judge_table(&frozen, &t, rep, 1, err, errlen)) {
                rc = 2;
                break;
            }
            if (rep->margin_derived && !(frozen.margin > 0) && isfinite(rep->margin)) frozen.margin = rep->margin;
            int open = 0;
            for (int a = 1; a < c->n_arms; a++)
                if (!c->arms[a].is_null && (rep->arm[a].verdict == CMP_UNDECIDED || rep->arm[a].verdict == CMP_NO_DATA))
                    open++;
            if (!open) break;
        }
        if (!rc && rep->budget_exhausted) {
            int open = 0;
            for (int a = 1; a < c->n_arms; a++)
                if (!c->arms[a].is_null && rep->arm[a].verdict == CMP_UNDECIDED) open++;
            rep->budget_exhausted = open > 0;
        }
    }
    if (!rc && keep_runs(&t, rep)) rc = (set_err(err, errlen, "out of memory"), 1);
    table_free(&t);
    cache_close(&k);
    return rc;
}

/* ---- output ---------------------------------------------------------------------------------- */

static void fmt_pm(char *buf, size_t len, double mean, double sd, int digits)
{
    if (!isfinite(mean)) snprintf(buf, len, "-");
    else if (!isfinite(sd)) snprintf(buf, len, "%.*f", digits, mean);
    else snprintf(buf, len, "%.*f +- %.*f", digits, mean, digits, sd);
}

void cmp_print_table(FILE *fp, const cmp_config *c, const cmp_report *rep)
{
    fprintf(fp, "%-14s %5s %17s %21s %10s %23s %8s  %s\n", "arm", "runs", "time (s)", "val loss", "diff", "interval",
            "p", "verdict");
    for (int a = 0; a < rep->n_arms; a++) {
        const cmp_arm_report *ar = &rep->arm[a];
        char tm[40], ls[48], diff[24] = "", ci[48] = "", p[16] = "", verdict[160] = "";
        fmt_pm(tm, sizeof tm, ar->time_mean, ar->time_sd, 2);
        fmt_pm(ls, sizeof ls, ar->loss_mean, ar->loss_sd, 5);
        if (a > 0) {
            if (ar->verdict == CMP_IDENTICAL) {
                snprintf(diff, sizeof diff, "0");
                snprintf(verdict, sizeof verdict, "IDENTICAL (bit for bit in all %d pairs)", ar->pairs);
            } else if (ar->verdict == CMP_NO_DATA) {
                snprintf(verdict, sizeof verdict, "NO DATA: %s", ar->why);
            } else {
                snprintf(diff, sizeof diff, "%+.5f", ar->paired.estimate);
                double lo = c->until_decided ? ar->cs.lo : ar->paired.ci_lo;
                double hi = c->until_decided ? ar->cs.hi : ar->paired.ci_hi;
                if (isfinite(lo) && isfinite(hi)) snprintf(ci, sizeof ci, "[%+.5f, %+.5f]", lo, hi);
                else snprintf(ci, sizeof ci, "(unbounded yet)");
                snprintf(p, sizeof p, "%.2g", ar->p_adjusted);
                switch (ar->verdict) {
                case CMP_SHIFT_UP:
                case CMP_SHIFT_DOWN:
                    snprintf(verdict, sizeof verdict, "%s by %.5f%s", cmp_verdict_name(ar->verdict), fabs(ar->paired.estimate),
                             ar->within_margin ? " (inside the margin)" : "");
                    break;
                case CMP_EQUIVALENT: snprintf(verdict, sizeof verdict, "EQUIVALENT (within +-%.5f)", rep->margin); break;
                default:
                    if (ar->runs_needed > 0)
                        snprintf(verdict, sizeof verdict, "UNDECIDED: about %d paired runs per arm needed", ar->runs_needed);
                    else snprintf(verdict, sizeof verdict, "UNDECIDED");
                }
            }
            if (c->arms[a].is_null) {
                size_t n = strlen(verdict);
                snprintf(verdict + n, sizeof verdict - n, "  [null arm]");
            }
        }
        if (ar->failed) {
            size_t n = strlen(verdict);
            snprintf(verdict + n, sizeof verdict - n, "  (%d run%s failed)", ar->failed, ar->failed > 1 ? "s" : "");
        }
        fprintf(fp, "%-14s %5d %17s %21s %10s %23s %8s  %s\n", c->arms[a].name, ar->runs, tm, ls, diff, ci, p, verdict);
    }
    char level[32];
    snprintf(level, sizeof level, "paired %g%%", 100 * (1 - c->alpha));
    fprintf(fp, "\n%s interval%s; p: paired t, Holm-adjusted over %d arm%s.\n",
            c->until_decided ? "anytime-valid" : level, c->until_decided ? "s (Lai t-mixture, Bonferroni over arms)" : "s",
            rep->n_arms - 1 - (null_arm_of(c) >= 0), rep->n_arms - 1 - (null_arm_of(c) >= 0) == 1 ? "" : "s");
    fprintf(fp, "noise floor: seed-to-seed sd %.5f", rep->seed_sd);
    if (isfinite(rep->chaos_sd)) fprintf(fp, ", chaos sd (null arm) %.5f", rep->chaos_sd);
    fprintf(fp, "; margin %.5f%s\n", rep->margin, rep->margin_derived ? " (the chaos sd)" : "");
    for (int a = 1; a < rep->n_arms; a++) {
        const cmp_arm_report *ar = &rep->arm[a];
        if (ar->verdict == CMP_IDENTICAL || ar->pairs < 3) continue;
        fprintf(fp, "%-14s spread ratio %.3g (Pitman-Morgan p %.2g), Wilcoxon p %.2g, unpaired Welch p %.2g, corr with base %.2f\n",
                c->arms[a].name, ar->spread.ratio, ar->spread.p, ar->wilcoxon_p, ar->welch.p, ar->correlation);
    }
    if (rep->null_warning)
        fprintf(fp, "WARNING: the null arm (one flipped ulp) came out SHIFT: the runs are too few or something else differs "
                    "between runs of one plan; do not trust the verdicts above.\n");
    if (rep->budget_exhausted) fprintf(fp, "stopped at --max-runs with arms still undecided.\n");
    fprintf(fp, "%d runs (%d executed now, %d from the cache) over %d seeds in %.1f s\n", rep->runs_total, rep->runs_executed,
            rep->runs_cached, rep->seeds_used, rep->seconds);
}

void cmp_write_run_records(FILE *fp, const cmp_config *c, const cmp_report *rep)
{
    if (!rep->runs) return;
    for (int a = 0; a < rep->n_arms; a++)
        for (int s = 0; s < rep->seeds_used; s++) {
            cmp_job j;
            job_seeds(c, rep->seeds[s], &j);
            j.arm = a;
            write_run_record(fp, &c->arms[a], fnv1a(c->arms[a].identity), &j, &rep->runs[(size_t)a * rep->seeds_used + s]);
        }
}

void cmp_write_arm_records(FILE *fp, const cmp_config *c, const cmp_report *rep)
{
    for (int a = 0; a < rep->n_arms; a++) {
        const cmp_arm_report *ar = &rep->arm[a];
        fprintf(fp, "{\"record\":\"arm\",\"arm\":");
        json_str(fp, c->arms[a].name);
        fprintf(fp, ",\"spec\":");
        json_str(fp, c->arms[a].spec ? c->arms[a].spec : "");
        fprintf(fp, ",\"null\":%s,\"base\":%s,\"runs\":%d,\"failed\":%d,\"loss_mean\":", c->arms[a].is_null ? "true" : "false",
                a == 0 ? "true" : "false", ar->runs, ar->failed);
        json_num(fp, ar->loss_mean);
        fprintf(fp, ",\"loss_sd\":");
        json_num(fp, ar->loss_sd);
        fprintf(fp, ",\"time_mean\":");
        json_num(fp, ar->time_mean);
        fprintf(fp, ",\"time_sd\":");
        json_num(fp, ar->time_sd);
        if (a > 0) {
            fprintf(fp, ",\"pairs\":%d,\"verdict\":", ar->pairs);
            json_str(fp, cmp_verdict_name(ar->verdict));
            fprintf(fp, ",\"diff\":");
            json_num(fp, ar->paired.estimate);
            fprintf(fp, ",\"ci_lo\":");
            json_num(fp, c->until_decided ? ar->cs.lo : ar->paired.ci_lo);
            fprintf(fp, ",\"ci_hi\":");
            json_num(fp, c->until_decided ? ar->cs.hi : ar->paired.ci_hi);
            fprintf(fp, ",\"p\":");
            json_num(fp, ar->paired.p);
            fprintf(fp, ",\"p_holm\":");
            json_num(fp, ar->p_adjusted);
            fprintf(fp, ",\"tost_p\":");
            json_num(fp, ar->tost.p);
            fprintf(fp, ",\"tost_p_holm\":");
            json_num(fp, ar->tost_p_adjusted);
            fprintf(fp, ",\"welch_p\":");
            json_num(fp, ar->welch.p);
            fprintf(fp, ",\"wilcoxon_p\":");
            json_num(fp, ar->wilcoxon_p);
            fprintf(fp, ",\"spread_ratio\":");
            json_num(fp, ar->spread.ratio);
            fprintf(fp, ",\"spread_p\":");
            json_num(fp, ar->spread.p);
            fprintf(fp, ",\"correlation\":");
            json_num(fp, ar->correlation);
            fprintf(fp, ",\"within_margin\":%s,\"runs_needed\":%d", ar->within_margin ? "true" : "false", ar->runs_needed);
        }
        fprintf(fp, "}\n");
    }
    fprintf(fp, "{\"record\":\"noise\",\"seed_sd\":");
    json_num(fp, rep->seed_sd);
    fprintf(fp, ",\"chaos_sd\":");
    json_num(fp, rep->chaos_sd);
    fprintf(fp, ",\"margin\":");
    json_num(fp, rep->margin);
    fprintf(fp, ",\"margin_derived\":%s,\"alpha\":", rep->margin_derived ? "true" : "false");
    json_num(fp, c->alpha);
    fprintf(fp, ",\"sequential\":%s,\"runs\":%d,\"seeds\":%d,\"null_warning\":%s}\n", c->until_decided ? "true" : "false",
            rep->runs_total, rep->seeds_used, rep->null_warning ? "true" : "false");
}
