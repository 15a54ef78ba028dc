/* trainer/data.c — see data.h. */
#include "trainer/data.h"
#include "trainer/errbuf.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void tdata_close(tdata *d)
{
    for (int i = 0; i < d->n_maps; i++) munmap(d->maps[i], d->map_len[i]);
    free(d->maps);
    free(d->map_len);
    free(d->train);
    free(d->val);
    free(d->text);
    memset(d, 0, sizeof *d);
}

static int push_segment(tsegment **list, int *n, const uint16_t *tok, int64_t count)
{
    tsegment *next = realloc(*list, (size_t)(*n + 1) * sizeof *next);
    if (!next) return -1;
    next[*n].tok = tok;
    next[*n].n = count;
    *list = next;
    (*n)++;
    return 0;
}

/* Hold out the last val_frac of the training tokens (from the last segment). */
static int carve_val(tdata *d, double val_frac, char *err, size_t errlen)
{
    if (val_frac <= 0.0 || val_frac >= 1.0)
        return tfail(err, errlen, "validation fraction %g must lie in (0, 1) when there is no validation split", val_frac);
    tsegment *last = &d->train[d->n_train - 1];
    int64_t nval = (int64_t)(val_frac * (double)d->train_tokens);
    if (nval > last->n / 2) nval = last->n / 2;
    if (nval < 2) return tfail(err, errlen, "%s: too few tokens (%lld) to hold out a validation split", d->source,
                              (long long)d->train_tokens);
    last->n -= nval;
    d->train_tokens -= nval;
    if (push_segment(&d->val, &d->n_val, last->tok + last->n, nval)) return tfail(err, errlen, "out of memory");
    d->val_tokens = nval;
    return 0;
}

/* A 64-bit hash of a split's tokens, fast enough for gigabytes of shards
 * (4 tokens per multiply); not cryptographic: it tells one data set from
 * another, not from an adversary. */
static uint64_t hash_split(const tsegment *segs, int n)
{
    uint64_t h = 0x6a09e667f3bcc909ull;
    for (int s = 0; s < n; s++) {
        const uint16_t *t = segs[s].tok;
        int64_t i = 0, len = segs[s].n;
        for (; i + 4 <= len; i += 4) {
            uint64_t w;
            memcpy(&w, t + i, sizeof w);
            h = (h ^ w) * 0x100000001b3ull;
            h ^= h >> 29;
        }
        for (; i < len; i++) h = ((h ^ t[i]) * 0x100000001b3ull) ^ (h >> 31);
        h = (h ^ (uint64_t)len) * 0x9e3779b97f4a7c15ull; /* the boundary */
        h ^= h >> 32;
    }
    return h;
}

static void hash_splits(tdata *d)
{
    d->train_hash = hash_split(d->train, d->n_train);
    d->val_hash = hash_split(d->val, d->n_val);
}

int tdata_open_bytes(tdata *d, const char *name, const unsigned char *bytes, size_t n, double val_frac, char *err,
                     size_t errlen)
{
    memset(d, 0, sizeof *d);
    snprintf(d->source, sizeof d->source, "%s", name);
    d->vocab = 256;
    if (n < 4) return tfail(err, errlen, "%s: %zu bytes is too little text to train on", name, n);
    d->text = malloc(n * sizeof *d->text);
    if (!d->text) return tfail(err, errlen, "out of memory reading %s", name);
    for (size_t i = 0; i < n; i++) d->text[i] = bytes[i];
    if (push_segment(&d->train, &d->n_train, d->text, (int64_t)n)) return tfail(err, errlen, "out of memory");
    d->train_tokens = (int64_t)n;
    if (carve_val(d, val_frac, err, errlen)) {
        tdata_close(d);
        return -1;
    }
    hash_splits(d);
    return 0;
}

static int open_text(tdata *d, const char *path, double val_frac, char *err, size_t errlen)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return tfail(err, errlen, "cannot open %s: %s", path, strerror(errno));
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *buf = size > 0 ? malloc((size_t)size) : NULL;
    if (size <= 0 || !buf || fread(buf, 1, (size_t)size, fp) != (size_t)size) {
        fclose(fp);
        free(buf);
        return tfail(err, errlen, "cannot read %s (%ld bytes)", path, size);
    }
    fclose(fp);
    int rc = tdata_open_bytes(d, path, buf, (size_t)size, val_frac, err, errlen);
    free(buf);
    return rc;
}

/* Map and check one shard; appends its tokens to the train or val list. */
static int open_shard(tdata *d, const char *path, int is_val, int vocab, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) return tfail(err, errlen, "cannot open shard %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st)) {
        close(fd);
        return tfail(err, errlen, "cannot stat shard %s: %s", path, strerror(errno));
    }
    size_t header = TSHARD_HEADER_INTS * sizeof(int32_t);
    if ((size_t)st.st_size < header) {
        close(fd);
        return tfail(err, errlen, "corrupt shard %s: %lld bytes, shorter than the %zu-byte header", path,
                    (long long)st.st_size, header);
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return tfail(err, errlen, "cannot map shard %s: %s", path, strerror(errno));
    void **maps = realloc(d->maps, (size_t)(d->n_maps + 1) * sizeof *maps);
    size_t *lens = realloc(d->map_len, (size_t)(d->n_maps + 1) * sizeof *lens);
    if (maps) d->maps = maps;
    if (lens) d->map_len = lens;
    if (!maps || !lens) {
        munmap(map, (size_t)st.st_size);
        return tfail(err, errlen, "out of memory");
    }
    d->maps[d->n_maps] = map;
    d->map_len[d->n_maps++] = (size_t)st.st_size;
    const int32_t *h = map;
    if (h[0] != TSHARD_MAGIC)
        return tfail(err, errlen, "corrupt shard %s: magic %d, expected %d (llm.c / modded-nanogpt token shard)", path,
                    h[0], TSHARD_MAGIC);
    if (h[1] != TSHARD_VERSION)
        return tfail(err, errlen, "unsupported shard %s: version %d, expected %d (uint16 tokens)", path, h[1],
                    TSHARD_VERSION);
    int64_t ntok = h[2];
    if (ntok <= 0 || (int64_t)header + 2 * ntok != (int64_t)st.st_size)
        return tfail(err, errlen, "corrupt shard %s: header says %lld tokens (%lld bytes with the header), file has %lld "
                    "bytes", path, (long long)ntok, (long long)(header + 2 * ntok), (long long)st.st_size);
    const uint16_t *tok = (const uint16_t *)((const char *)map + header);
    for (int64_t i = 0; i < ntok; i++)
        if (tok[i] >= vocab)
            return tfail(err, errlen, "corrupt shard %s: token %u at position %lld is outside the vocabulary of %d", path,
                        tok[i], (long long)i, vocab);
    if (push_segment(is_val ? &d->val : &d->train, is_val ? &d->n_val : &d->n_train, tok, ntok))
        return tfail(err, errlen, "out of memory");
    if (is_val) d->val_tokens += ntok;
    else d->train_tokens += ntok;
    return 0;
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int open_dir(tdata *d, const char *dir, double val_frac, int vocab, char *err, size_t errlen)
{
    DIR *dp = opendir(dir);
    if (!dp) return tfail(err, errlen, "cannot open directory %s: %s", dir, strerror(errno));
    char **names = NULL;
    int n = 0, rc = 0;
    struct dirent *e;
    while ((e = readdir(dp)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".bin") != 0) continue;
        char **next = realloc(names, (size_t)(n + 1) * sizeof *next);
        if (!next || !(next[n] = strdup(e->d_name))) {
            rc = tfail(err, errlen, "out of memory");
            if (next) names = next;
            break;
        }
        names = next;
        n++;
    }
    closedir(dp);
    if (!rc && n == 0) rc = tfail(err, errlen, "no .bin token shards in %s", dir);
    if (!rc) qsort(names, (size_t)n, sizeof *names, name_cmp);
    for (int i = 0; i < n && !rc; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        rc = open_shard(d, path, strstr(names[i], "val") != NULL, vocab, err, errlen);
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    if (!rc && d->n_train == 0) rc = tfail(err, errlen, "%s has validation shards only; no training shard", dir);
    if (!rc && d->n_val == 0) rc = carve_val(d, val_frac, err, errlen);
    return rc;
}

int tdata_open(tdata *d, const char *path, double val_frac, int shard_vocab, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    if (!path)
        return tdata_open_bytes(d, "embedded default corpus", (const unsigned char *)tcorpus_default,
                                tcorpus_default_len, val_frac, err, errlen);
    struct stat st;
    if (stat(path, &st)) return tfail(err, errlen, "cannot open %s: %s", path, strerror(errno));
    int vocab = shard_vocab > 0 ? shard_vocab : TSHARD_GPT2_VOCAB;
    int rc;
    snprintf(d->source, sizeof d->source, "%s", path);
    if (S_ISDIR(st.st_mode)) {
        d->vocab = vocab;
        rc = open_dir(d, path, val_frac, vocab, err, errlen);
    } else {
        size_t len = strlen(path);
        if (len > 4 && strcmp(path + len - 4, ".bin") == 0) {
            d->vocab = vocab;
            rc = open_shard(d, path, 0, vocab, err, errlen);
            if (!rc) rc = carve_val(d, val_frac, err, errlen);
        } else {
            return open_text(d, path, val_frac, err, errlen);
        }
    }
    if (rc) tdata_close(d);
    else hash_splits(d);
    return rc;
}

int tdata_check_windows(const tdata *d, int T, char *err, size_t errlen)
{
    int ok_train = 0, ok_val = 0;
    for (int i = 0; i < d->n_train; i++) ok_train |= d->train[i].n > T;
    for (int i = 0; i < d->n_val; i++) ok_val |= d->val[i].n > T;
    if (!ok_train || !ok_val)
        return tfail(err, errlen, "%s: the %s split has no segment of %d tokens (sequence length + 1); use a shorter "
                    "--seq or more data", d->source, ok_train ? "validation" : "training", T + 1);
    return 0;
}

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void copy_window(const tsegment *s, int64_t off, int T, int32_t *tokens, int32_t *targets)
{
    for (int t = 0; t < T; t++) {
        tokens[t] = s->tok[off + t];
        targets[t] = s->tok[off + t + 1];
    }
}

void tdata_train_batch(const tdata *d, uint64_t seed, long step, int micro, int rank, int B, int T, int32_t *tokens,
                       int32_t *targets)
{
    /* windows: segment i offers n_i - T start positions */
    int64_t total = 0;
    for (int i = 0; i < d->n_train; i++)
        if (d->train[i].n > T) total += d->train[i].n - T;
    for (int b = 0; b < B; b++) {
        uint64_t h = mix(seed ^ mix((uint64_t)step * 0x9e3779b97f4a7c15ull ^ mix(((uint64_t)micro << 32) ^
                                                                               ((uint64_t)rank << 48) ^ (uint64_t)b)));
        int64_t pos = (int64_t)(h % (uint64_t)total);
        for (int i = 0; i < d->n_train; i++) {
            if (d->train[i].n <= T) continue;
            int64_t w = d->train[i].n - T;
            if (pos < w) {
                copy_window(&d->train[i], pos, T, tokens + (int64_t)b * T, targets + (int64_t)b * T);
                break;
            }
            pos -= w;
        }
    }
}

void tdata_val_batch(const tdata *d, int index, int B, int T, int32_t *tokens, int32_t *targets)
{
    int64_t total = 0; /* non-overlapping windows of T+1 */
    for (int i = 0; i < d->n_val; i++) total += d->val[i].n > T ? (d->val[i].n - 1) / T : 0;
    for (int b = 0; b < B; b++) {
        int64_t w = ((int64_t)index * B + b) % total;
        for (int i = 0; i < d->n_val; i++) {
            int64_t nw = d->val[i].n > T ? (d->val[i].n - 1) / T : 0;
            if (w < nw) {
                copy_window(&d->val[i], w * T, T, tokens + (int64_t)b * T, targets + (int64_t)b * T);
                break;
            }
            w -= nw;
        }
    }
}
