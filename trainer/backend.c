/* trainer/backend.c — what every backend shares: errors and plan binding. */
#include "trainer/backend.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

const char *tbackend_error(const tbackend *be) { return be->error; }

int tbackend_fail(tbackend *be, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(be->error, sizeof be->error, fmt, ap);
    va_end(ap);
    return -1;
}

/* A value of format `part` is one of format `whole` too. */
static int holds_exactly(prec_format whole, prec_format part)
{
    return whole == part || (whole == PREC_FP32 && (part == PREC_BF16 || part == PREC_FP16));
}

int tbackend_check_concat(tbackend *be, const ktensor *y, const ktensor *const *x, int n)
{
    if (n < 1 || n > 4) return tbackend_fail(be, "concat_columns: %d parts (1 to 4)", n);
    if (y->ndim != 2 || y->scale) return tbackend_fail(be, "concat_columns: the output must be 2-D and unscaled");
    int64_t width = 0;
    for (int i = 0; i < n; i++) {
        const ktensor *p = x[i];
        if (p->ndim != 2 || p->scale || p->shape[0] != y->shape[0])
            return tbackend_fail(be, "concat_columns: part %d is not an unscaled 2-D tensor of %lld rows", i,
                                 (long long)y->shape[0]);
        if (!holds_exactly(y->format, p->format))
            return tbackend_fail(be, "concat_columns: part %d is %s, which a %s output cannot hold exactly", i,
                                 prec_format_name(p->format), prec_format_name(y->format));
        width += p->shape[1];
    }
    if (width != y->shape[1])
        return tbackend_fail(be, "concat_columns: the parts are %lld columns wide together, the output %lld",
                             (long long)width, (long long)y->shape[1]);
    return 0;
}

int tbackend_bind_plan(tbackend *be, const tplan *plan, int depth)
{
    char err[512];
    if (tplan_validate(plan, err, sizeof err)) return tbackend_fail(be, "%s", err);
    tbinding next;
    if (tplan_bind(&next, plan, depth, err, sizeof err)) return tbackend_fail(be, "%s", err);
    for (int s = 0; s < TSLOT_COUNT; s++) {
        if (!plan->used[s]) continue;
        int layers = tslot_get((tslot)s)->per_layer ? depth : 1;
        for (int l = 0; l < layers; l++) {
            const tsite *at = tbinding_site(&next, (tslot)s, l);
            char why[512] = "", name[64], choice[160], variant[128];
            if (!be->supports(be, &next, at, why, sizeof why)) continue;
            /* a layer's own choice is named with its layer; the slot's choice as the slot */
            const tslot_choice *c = tplan_choice_at(plan, (tslot)s, at->layer);
            if (c == &plan->slot[s]) snprintf(name, sizeof name, "slot %s", tslot_get((tslot)s)->name);
            else tsite_name(at, name, sizeof name);
            tplan_choice_variant_string(plan, (tslot)s, c, variant, sizeof variant);
            snprintf(choice, sizeof choice, "%s:%s", kpath_name(at->path), variant);
            tbinding_free(&next);
            return tbackend_fail(be, "%s backend cannot run %s at %s: %s", be->name, name, choice, why);
        }
    }
    tbinding_free(&be->bound);
    be->bound = next;
    be->weights_version++; /* paths and scalings may differ: no cached image carries over */
    return 0;
}

/* ---- weights and the writes that change them ------------------------------------------------- */

static int stale_planted;

void tbackend_plant_stale_weights(int on) { stale_planted = on; }

/* Every replica's copy of t. */
static size_t all_bytes(const tbackend *be, const ktensor *t)
{
    int64_t n = t->replica_stride ? t->replica_stride * be->replicas : ktensor_numel(t);
    return (size_t)n * be->elem_bytes(t->format);
}

int tbackend_mark_weights(tbackend *be, const ktensor *t)
{
    if (!t->data) return 0;
    if (be->n_weight_ranges == be->cap_weight_ranges) {
        int cap = be->cap_weight_ranges ? 2 * be->cap_weight_ranges : 64;
        struct tweight_range *r = realloc(be->weight_ranges, (size_t)cap * sizeof *r);
        if (!r) return tbackend_fail(be, "out of memory");
        be->weight_ranges = r;
        be->cap_weight_ranges = cap;
    }
    const char *lo = t->data;
    be->weight_ranges[be->n_weight_ranges++] = (struct tweight_range){lo, lo + all_bytes(be, t)};
    be->weights_version++;
    return 0;
}

int tbackend_is_weight(const tbackend *be, const void *p, size_t bytes)
{
    const char *lo = p, *hi = lo + bytes;
    for (int i = 0; i < be->n_weight_ranges; i++)
        if (lo >= be->weight_ranges[i].lo && hi <= be->weight_ranges[i].hi) return 1;
    return 0;
}

/* A write of [p, p + bytes) changes the weights when it overlaps one. */
static void wrote(tbackend *be, const void *p, size_t bytes)
{
    const char *lo = p, *hi = lo + bytes;
    if (stale_planted || !p) return;
    for (int i = 0; i < be->n_weight_ranges; i++)
        if (lo < be->weight_ranges[i].hi && hi > be->weight_ranges[i].lo) {
            be->weights_version++;
            return;
        }
}

static void wrote_tensor(tbackend *be, const ktensor *t)
{
    if (t && t->data) wrote(be, t->data, all_bytes(be, t));
}

static void g_release(tbackend *be, ktensor *t)
{
    const char *lo = t->data;
    for (int i = 0; lo && i < be->n_weight_ranges; i++)
        if (be->weight_ranges[i].lo == lo) {
            be->weight_ranges[i] = be->weight_ranges[--be->n_weight_ranges];
            be->weights_version++; /* the address may come back holding something else */
            break;
        }
    be->guarded.release(be, t);
}

static int g_raw_upload(tbackend *be, void *dst, const void *src, size_t bytes)
{
    wrote(be, dst, bytes);
    return be->guarded.raw_upload(be, dst, src, bytes);
}

static int g_upload(tbackend *be, ktensor *t, const double *values)
{
    wrote_tensor(be, t);
    return be->guarded.upload(be, t, values);
}

static int g_write_bytes(tbackend *be, ktensor *t, const void *src)
{
    wrote_tensor(be, t);
    return be->guarded.write_bytes(be, t, src);
}

static int g_zero(tbackend *be, ktensor *t)
{
    wrote_tensor(be, t);
    return be->guarded.zero(be, t);
}

static int g_transpose(tbackend *be, const tsite *at, ktensor *out, const ktensor *in, int accumulate)
{
    wrote_tensor(be, out);
    return be->guarded.transpose(be, at, out, in, accumulate);
}

static int g_accumulate(tbackend *be, const tsite *at, ktensor *dst, const ktensor *src)
{
    wrote_tensor(be, dst);
    return be->guarded.accumulate(be, at, dst, src);
}

static int g_adamw(tbackend *be, tparam *p, const tadamw_args *a)
{
    wrote_tensor(be, &p->w);
    return be->guarded.adamw(be, p, a);
}

static int g_muon(tbackend *be, tparam *p, const tmuon_args *a)
{
    wrote_tensor(be, &p->w);
    return be->guarded.muon(be, p, a);
}

void tbackend_guard_weights(tbackend *be)
{
    if (be->guarded.on) return;
    struct tbackend_guarded *g = &be->guarded;
    g->on = 1;
    g->release = be->release, be->release = g_release;
    g->raw_upload = be->raw_upload, be->raw_upload = g_raw_upload;
    g->upload = be->upload, be->upload = g_upload;
    g->write_bytes = be->write_bytes, be->write_bytes = g_write_bytes;
    g->zero = be->zero, be->zero = g_zero;
    g->transpose = be->transpose, be->transpose = g_transpose;
    g->accumulate = be->accumulate, be->accumulate = g_accumulate;
    g->adamw = be->adamw, be->adamw = g_adamw;
    g->muon = be->muon, be->muon = g_muon;
}

void tbackend_unguard_weights(tbackend *be)
{
    struct tbackend_guarded *g = &be->guarded;
    if (!g->on) return;
    be->release = g->release, be->raw_upload = g->raw_upload, be->upload = g->upload;
    be->write_bytes = g->write_bytes, be->zero = g->zero, be->transpose = g->transpose;
    be->accumulate = g->accumulate, be->adamw = g->adamw, be->muon = g->muon;
    memset(g, 0, sizeof *g);
}

/* ---- fp8 delayed scaling ---------------------------------------------------------------------- */

int64_t tbackend_fp8_history_count(const tbackend *be)
{
    return (int64_t)TSLOT_COUNT * (be->bound.depth + 1) * 2 * be->replicas;
}

int64_t tbackend_fp8_history_index(const tbackend *be, const tsite *at, int operand)
{
    int64_t site = (int64_t)at->slot * (be->bound.depth + 1) + (at->layer + 1);
    return (site * 2 + operand) * be->replicas + be->replica_now;
}

int tbackend_fp8_delayed(const tbackend *be, const tsite *at)
{
    /* per-tensor scales only: block-scaled GEMMs keep their tiles' own amax */
    return at->path == KPATH_FP8 && (at->op == TOP_MATMUL || at->op == TOP_MATMUL_FAST) &&
           tbackend_site(be, TSLOT_FP8_SCALING, -1)->variant == TFP8_SCALING_DELAYED;
}

/* ---- host memory ----------------------------------------------------------------------------- */

/* A number from the first line of a file ("max" or a missing file: -1). */
static long long read_number(const char *path)
{
    FILE *fp = fopen(path, "r");
    if (!fp) return -1;
    char line[64];
    long long v = -1;
    if (fgets(line, sizeof line, fp) && strncmp(line, "max", 3) != 0) v = strtoll(line, NULL, 10);
    fclose(fp);
    return v;
}

/* Keeps the smaller of (*best, what) and (bytes, name). */
static void consider(size_t *best, char *what, size_t what_len, unsigned long long bytes, const char *name)
{
    if (bytes < *best) {
        *best = (size_t)bytes;
        snprintf(what, what_len, "%s", name);
    }
}

/* The memory cgroup (v2 "0::PATH", or v1 "N:memory:PATH") and its ancestors:
 * the least of limit - usage. */
static void cgroup_limits(size_t *best, char *what, size_t what_len)
{
    FILE *fp = fopen("/proc/self/cgroup", "r");
    if (!fp) return;
    char line[1024];
    while (fgets(line, sizeof line, fp)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        int v2 = strncmp(line, "0::", 3) == 0;
        int v1 = !v2 && (size_t)(c2 - c1 - 1) >= 6 && strstr(c1 + 1, "memory") && strstr(c1 + 1, "memory") < c2;
        if (!v1 && !v2) continue;
        char dir[1100];
        snprintf(dir, sizeof dir, "%s%s", v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory", c2 + 1);
        for (;;) {
            char lim[1200], use[1200];
            snprintf(lim, sizeof lim, "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
            snprintf(use, sizeof use, "%s/%s", dir, v2 ? "memory.current" : "memory.usage_in_bytes");
            long long limit = read_number(lim), usage = read_number(use);
            if (limit > 0 && usage >= 0 && limit < (1LL << 62))
                consider(best, what, what_len, limit > usage ? (unsigned long long)(limit - usage) : 0,
                         v2 ? "the cgroup's memory.max" : "the cgroup's memory.limit_in_bytes");
            char *slash = strrchr(dir, '/');
            if (!slash || slash == dir || strcmp(dir, v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory") == 0) break;
            *slash = '\0';
        }
    }
    fclose(fp);
}

int tbackend_host_available(size_t *bytes, char *what, size_t what_len)
{
    size_t best = SIZE_MAX;
    long page = sysconf(_SC_PAGESIZE);
    FILE *fp = fopen("/proc/meminfo", "r");
    char line[256];
    int found = 0;
    while (fp && fgets(line, sizeof line, fp)) {
        unsigned long long kb;
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            consider(&best, what, what_len, kb * 1024ull, "MemAvailable");
            found = 1;
        }
    }
    if (fp) fclose(fp);
    long avphys = sysconf(_SC_AVPHYS_PAGES);
    if (!found && avphys > 0 && page > 0)
        consider(&best, what, what_len, (unsigned long long)avphys * (unsigned long long)page, "free physical memory");
    cgroup_limits(&best, what, what_len);
    /* address-space limits count what is mapped already (statm: size, then data + stack as its 6th field) */
    unsigned long long size_pages = 0, data_pages = 0, skip;
    fp = fopen("/proc/self/statm", "r");
    int have_statm = fp && fscanf(fp, "%llu %llu %llu %llu %llu %llu", &size_pages, &skip, &skip, &skip, &skip,
                                   &data_pages) == 6;
    if (fp) fclose(fp);
    struct rlimit rl;
    if (have_statm && page > 0 && getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        unsigned long long used = size_pages * (unsigned long long)page;
        consider(&best, what, what_len, rl.rlim_cur > used ? rl.rlim_cur - used : 0, "RLIMIT_AS (ulimit -v)");
    }
    if (have_statm && page > 0 && getrlimit(RLIMIT_DATA, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        unsigned long long used = data_pages * (unsigned long long)page;
        consider(&best, what, what_len, rl.rlim_cur > used ? rl.rlim_cur - used : 0, "RLIMIT_DATA (ulimit -d)");
    }
    if (best == SIZE_MAX) return -1;
    *bytes = best;
    return 0;
}
