/* base/tensor_file.c — .npy and safetensors readers, a .npy writer (see tensor_file.h). */
#include "base/tensor_file.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/json_read.h"

/* A file larger than this is refused before it is read (the readers hold it
 * whole, then its values as doubles: up to 5 times its size). */
#define TFILE_MAX_BYTES (1ll << 33)
#define NPY_MAX_HEADER (1 << 20)

static const struct {
    const char *name;   /* as messages and tfile_dtype_name say it */
    const char *st;     /* the safetensors dtype */
    int size;
} dtypes[TFILE_NDTYPES] = {
    [TFILE_F64] = {"f8", "F64", 8}, [TFILE_F32] = {"f4", "F32", 4},  [TFILE_F16] = {"f2", "F16", 2},
    [TFILE_BF16] = {"bf16", "BF16", 2}, [TFILE_U16] = {"u2", "U16", 2}, [TFILE_U8] = {"u1", "U8", 1},
    [TFILE_I32] = {"i4", "I32", 4}, [TFILE_I64] = {"i8", "I64", 8},
};

const char *tfile_dtype_name(tfile_dtype d) { return d >= 0 && d < TFILE_NDTYPES ? dtypes[d].name : "?"; }
int tfile_dtype_is_float(tfile_dtype d) { return d == TFILE_F64 || d == TFILE_F32 || d == TFILE_F16 || d == TFILE_BF16; }

static int fail(char *err, size_t errlen, const char *what, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errlen, const char *what, const char *fmt, ...)
{
    if (err && errlen) {
        int k = snprintf(err, errlen, "%s: ", what);
        if (k < 0 || (size_t)k >= errlen) return -1;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
        va_end(ap);
    }
    return -1;
}

double tfile_half_to_double(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 0x1f, frac = h & 0x3ff;
    double v;
    if (exp == 0x1f) v = frac ? NAN : INFINITY;
    else if (exp == 0) v = ldexp((double)frac, -24);
    else v = ldexp((double)(frac | 0x400), exp - 25);
    return sign ? -v : v;
}

double tfile_bf16_to_double(uint16_t b)
{
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return (double)f;
}

static uint64_t load_le(const unsigned char *p, int size, int big_endian)
{
    uint64_t v = 0;
    for (int k = 0; k < size; k++) v |= (uint64_t)p[big_endian ? size - 1 - k : k] << (8 * k);
    return v;
}

/* Decodes n elements of dtype d at p into out; -1 (with err) for an integer
 * that a double cannot hold exactly. */
static int decode(const unsigned char *p, int64_t n, tfile_dtype d, int big_endian, double *out, const char *what,
                  char *err, size_t errlen)
{
    const int size = dtypes[d].size;
    for (int64_t i = 0; i < n; i++, p += size) {
        uint64_t bits = load_le(p, size, big_endian);
        switch (d) {
        case TFILE_F64: { double v; memcpy(&v, &bits, 8); out[i] = v; break; }
        case TFILE_F32: { uint32_t b32 = (uint32_t)bits; float v; memcpy(&v, &b32, 4); out[i] = v; break; }
        case TFILE_F16: out[i] = tfile_half_to_double((uint16_t)bits); break;
        case TFILE_BF16: out[i] = tfile_bf16_to_double((uint16_t)bits); break;
        case TFILE_U16: case TFILE_U8: out[i] = (double)bits; break;
        case TFILE_I32: out[i] = (double)(int32_t)(uint32_t)bits; break;
        case TFILE_I64: {
            int64_t v = (int64_t)bits;
            if (v > (1ll << 53) || v < -(1ll << 53))
                return fail(err, errlen, what, "element %lld = %lld is too large to be read exactly (|v| > 2^53)",
                            (long long)i, (long long)v);
            out[i] = (double)v;
            break;
        }
        default: return fail(err, errlen, what, "internal: dtype %d", (int)d);
        }
    }
    return 0;
}

/* Fills t's shape and n from dims; -1 when the element count overflows. */
static int set_shape(tfile_tensor *t, int ndim, const int64_t *dims, int64_t max_elements, const char *what,
                     char *err, size_t errlen)
{
    t->ndim = ndim;
    t->n = 1;
    for (int k = 0; k < ndim; k++) {
        t->shape[k] = dims[k];
        if (dims[k] < 0) return fail(err, errlen, what, "negative dimension %lld", (long long)dims[k]);
        if (dims[k] != 0 && t->n > max_elements / dims[k])
            return fail(err, errlen, what, "shape holds more elements than the file can (dimension %d = %lld)", k,
                        (long long)dims[k]);
        t->n *= dims[k];
    }
    return 0;
}

static int read_file(const char *path, unsigned char **buf, size_t *len, char *err, size_t errlen)
{
    *buf = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return fail(err, errlen, path, "%s", strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        int e = errno;
        fclose(f);
        return fail(err, errlen, path, "%s", strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        fclose(f);
        return fail(err, errlen, path, "%s, not a regular file", S_ISDIR(st.st_mode) ? "a directory" : "a device or FIFO");
    }
    if (st.st_size > TFILE_MAX_BYTES) {
        fclose(f);
        return fail(err, errlen, path, "%lld bytes, more than the %lld this reader takes", (long long)st.st_size,
                    (long long)TFILE_MAX_BYTES);
    }
    size_t n = (size_t)st.st_size;
    unsigned char *b = malloc(n ? n : 1);
    if (!b) {
        fclose(f);
        return fail(err, errlen, path, "out of memory reading %zu bytes", n);
    }
    size_t got = n ? fread(b, 1, n, f) : 0;
    int bad = ferror(f);
    fclose(f);
    if (bad || got != n) {
        free(b);
        return fail(err, errlen, path, "read error (%zu of %zu bytes)", got, n);
    }
    *buf = b;
    *len = n;
    return 0;
}

void tfile_free(tfile_tensor *t)
{
    if (!t) return;
    free(t->data);
    memset(t, 0, sizeof *t);
}

void tfile_free_all(tfile_tensor *ts, int n)
{
    for (int i = 0; ts && i < n; i++) free(ts[i].data);
    free(ts);
}

/* ---- .npy ---------------------------------------------------------------------- */

typedef struct {
    const char *s, *end;
} cursor;

static void skip_space(cursor *c)
{
    while (c->s < c->end && (*c->s == ' ' || *c->s == '\t')) c->s++;
}

static int eat(cursor *c, char ch)
{
    skip_space(c);
    if (c->s < c->end && *c->s == ch) {
        c->s++;
        return 1;
    }
    return 0;
}

/* A Python string literal in single or double quotes, no escapes. */
static int quoted(cursor *c, char *out, size_t len)
{
    skip_space(c);
    if (c->s >= c->end || (*c->s != '\'' && *c->s != '"')) return -1;
    char q = *c->s++;
    size_t k = 0;
    while (c->s < c->end && *c->s != q) {
        if (*c->s == '\\' || k + 1 >= len) return -1;
        out[k++] = *c->s++;
    }
    if (c->s >= c->end) return -1;
    c->s++;
    out[k] = '\0';
    return 0;
}

/* The dtype of a NumPy descr ("<f4", "|u1", ">f8", ...). */
static int npy_dtype(const char *descr, tfile_dtype *d, int *big_endian)
{
    static const struct {
        char kind;
        int size;
        tfile_dtype d;
    } known[] = {{'f', 8, TFILE_F64}, {'f', 4, TFILE_F32}, {'f', 2, TFILE_F16}, {'u', 2, TFILE_U16},
                 {'u', 1, TFILE_U8},  {'i', 4, TFILE_I32}, {'i', 8, TFILE_I64}};
    if (strlen(descr) != 3 || (descr[0] != '<' && descr[0] != '>' && descr[0] != '|')) return -1;
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
        if (descr[1] == known[k].kind && descr[2] - '0' == known[k].size) {
            if ((descr[0] == '|') != (known[k].size == 1)) return -1; /* '|' only where order means nothing */
            *d = known[k].d;
            *big_endian = descr[0] == '>';
            return 0;
        }
    return -1;
}

int tfile_read_npy_bytes(const unsigned char *buf, size_t len, const char *what, tfile_tensor *t, char *err,
                         size_t errlen)
{
    memset(t, 0, sizeof *t);
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0) return fail(err, errlen, what, "not a .npy file (no \\x93NUMPY magic)");
    const int major = buf[6];
    if (major < 1 || major > 3) return fail(err, errlen, what, ".npy format version %d.%d is not one of 1.0, 2.0, 3.0", major, buf[7]);
    const size_t pre = major == 1 ? 10 : 12;
    if (len < pre) return fail(err, errlen, what, "truncated in the .npy preamble");
    const size_t hlen = (size_t)load_le(buf + 8, major == 1 ? 2 : 4, 0);
    if (hlen > NPY_MAX_HEADER || hlen > len - pre)
        return fail(err, errlen, what, "the header length %zu runs past the end of the file (%zu bytes)", hlen, len);
    cursor c = {(const char *)buf + pre, (const char *)buf + pre + hlen};
    for (const char *p = c.s; p < c.end; p++)
        if (*p == '\0') return fail(err, errlen, what, "a NUL byte in the .npy header");
    char key[32], descr[32] = "";
    int have_descr = 0, have_order = 0, have_shape = 0, fortran = 0, ndim = 0;
    int64_t dims[TFILE_MAX_DIMS];
    if (!eat(&c, '{')) return fail(err, errlen, what, "the .npy header is not a dict literal");
    while (!eat(&c, '}')) {
        if (quoted(&c, key, sizeof key) != 0 || !eat(&c, ':'))
            return fail(err, errlen, what, "malformed .npy header at byte %ld", (long)(c.s - (const char *)buf));
        if (strcmp(key, "descr") == 0 && !have_descr) {
            if (quoted(&c, descr, sizeof descr) != 0) return fail(err, errlen, what, "malformed 'descr' in the .npy header");
            have_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0 && !have_order) {
            skip_space(&c);
            size_t left = (size_t)(c.end - c.s);
            if (left >= 4 && memcmp(c.s, "True", 4) == 0) fortran = 1, c.s += 4;
            else if (left >= 5 && memcmp(c.s, "False", 5) == 0) c.s += 5;
            else return fail(err, errlen, what, "malformed 'fortran_order' in the .npy header");
            have_order = 1;
        } else if (strcmp(key, "shape") == 0 && !have_shape) {
            if (!eat(&c, '(')) return fail(err, errlen, what, "malformed 'shape' in the .npy header");
            while (!eat(&c, ')')) {
                skip_space(&c);
                int64_t v = 0;
                int digits = 0;
                while (c.s < c.end && *c.s >= '0' && *c.s <= '9') {
                    if (v > (1ll << 40)) return fail(err, errlen, what, "a dimension of the shape is too large");
                    v = v * 10 + (*c.s++ - '0');
                    digits++;
                }
                if (!digits) return fail(err, errlen, what, "malformed 'shape' in the .npy header");
                if (ndim == TFILE_MAX_DIMS) return fail(err, errlen, what, "more than %d dimensions", TFILE_MAX_DIMS);
                dims[ndim++] = v;
                if (!eat(&c, ',')) {
                    if (!eat(&c, ')')) return fail(err, errlen, what, "malformed 'shape' in the .npy header");
                    break;
                }
            }
            have_shape = 1;
        } else {
            return fail(err, errlen, what, "unexpected or repeated key '%s' in the .npy header", key);
        }
        if (!eat(&c, ',')) {
            if (!eat(&c, '}')) return fail(err, errlen, what, "malformed .npy header at byte %ld", (long)(c.s - (const char *)buf));
            break;
        }
    }
    while (c.s < c.end && (*c.s == ' ' || *c.s == '\n')) c.s++;
    if (c.s != c.end) return fail(err, errlen, what, "text after the .npy header's dict");
    if (!have_descr || !have_order || !have_shape)
        return fail(err, errlen, what, "the .npy header lacks '%s'", !have_descr ? "descr" : !have_order ? "fortran_order" : "shape");
    tfile_dtype d;
    int big = 0;
    if (npy_dtype(descr, &d, &big) != 0)
        return fail(err, errlen, what, "dtype '%s' is not one of <f8 <f4 <f2 <u2 |u1 <i4 <i8 (or big-endian >)", descr);
    if (fortran) return fail(err, errlen, what, "Fortran order is not read; save np.ascontiguousarray(a)");
    const size_t data_len = len - pre - hlen;
    const int size = dtypes[d].size;
    if (set_shape(t, ndim, dims, (int64_t)(data_len / (size_t)size) + 1, what, err, errlen) != 0) {
        memset(t, 0, sizeof *t);
        return -1;
    }
    if ((size_t)t->n * (size_t)size != data_len) {
        int64_t n = t->n;
        memset(t, 0, sizeof *t);
        return fail(err, errlen, what, "%zu data bytes where shape and dtype %s say %lld (truncated or padded file)",
                    data_len, descr, (long long)(n * size));
    }
    t->dtype = d;
    if (t->n > 0) {
        t->data = malloc((size_t)t->n * sizeof(double));
        if (!t->data) {
            memset(t, 0, sizeof *t);
            return fail(err, errlen, what, "out of memory for %lld elements", (long long)t->n);
        }
        if (decode(buf + pre + hlen, t->n, d, big, t->data, what, err, errlen) != 0) {
            tfile_free(t);
            return -1;
        }
    }
    return 0;
}

int tfile_read_npy(const char *path, tfile_tensor *t, char *err, size_t errlen)
{
    unsigned char *buf;
    size_t len;
    memset(t, 0, sizeof *t);
    if (read_file(path, &buf, &len, err, errlen) != 0) return -1;
    int rc = tfile_read_npy_bytes(buf, len, path, t, err, errlen);
    free(buf);
    return rc;
}

/* ---- safetensors ----------------------------------------------------------------- */

static int st_dtype(const char *s, tfile_dtype *d)
{
    for (int k = 0; k < TFILE_NDTYPES; k++)
        if (strcmp(s, dtypes[k].st) == 0) {
            *d = (tfile_dtype)k;
            return 0;
        }
    return -1;
}

typedef struct {
    uint64_t begin, end;
    int index;
} byte_range;

static int by_begin(const void *a, const void *b)
{
    const byte_range *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

int tfile_read_safetensors_bytes(const unsigned char *buf, size_t len, const char *what, tfile_tensor **ts, int *n,
                                 char *err, size_t errlen)
{
    *ts = NULL;
    *n = 0;
    if (len < 8) return fail(err, errlen, what, "truncated: no safetensors header length");
    const uint64_t hlen = load_le(buf, 8, 0);
    if (hlen > len - 8 || hlen > (uint64_t)NPY_MAX_HEADER * 100)
        return fail(err, errlen, what, "the header length %llu runs past the end of the file (%zu bytes)",
                    (unsigned long long)hlen, len);
    json_value *root = NULL;
    char jerr[256];
    if (json_parse((const char *)buf + 8, (size_t)hlen, &root, jerr, sizeof jerr) != 0)
        return fail(err, errlen, what, "malformed safetensors header: %s", jerr);
    const unsigned char *data = buf + 8 + hlen;
    const uint64_t data_len = len - 8 - hlen;
    int rc = -1, count = 0;
    tfile_tensor *out = NULL;
    byte_range *ranges = NULL;
    if (root->type != JSON_OBJECT) {
        fail(err, errlen, what, "the safetensors header is not a JSON object");
        goto done;
    }
    if (root->n_items > TFILE_MAX_TENSORS) {
        fail(err, errlen, what, "more than %d tensors", TFILE_MAX_TENSORS);
        goto done;
    }
    out = calloc(root->n_items ? root->n_items : 1, sizeof *out);
    ranges = calloc(root->n_items ? root->n_items : 1, sizeof *ranges);
    if (!out || !ranges) {
        fail(err, errlen, what, "out of memory");
        goto done;
    }
    for (size_t k = 0; k < root->n_items; k++) {
        const char *name = root->keys[k];
        const json_value *v = &root->items[k];
        if (strcmp(name, "__metadata__") == 0) {
            if (v->type != JSON_OBJECT) {
                fail(err, errlen, what, "__metadata__ is not an object");
                goto done;
            }
            continue;
        }
        tfile_tensor *t = &out[count];
        if (strlen(name) >= sizeof t->name || !name[0]) {
            fail(err, errlen, what, "a tensor name is empty or longer than %zu bytes", sizeof t->name - 1);
            goto done;
        }
        const json_value *dt = json_get(v, "dtype"), *sh = json_get(v, "shape"), *off = json_get(v, "data_offsets");
        if (v->type != JSON_OBJECT || !dt || dt->type != JSON_STRING || !sh || sh->type != JSON_ARRAY || !off ||
            off->type != JSON_ARRAY || off->n_items != 2 || v->n_items != 3) {
            fail(err, errlen, what, "tensor '%s': needs exactly dtype, shape and data_offsets [begin, end]", name);
            goto done;
        }
        if (st_dtype(dt->text, &t->dtype) != 0) {
            fail(err, errlen, what, "tensor '%s': dtype '%s' is not one of F64 F32 F16 BF16 U16 U8 I32 I64", name, dt->text);
            goto done;
        }
        if (sh->n_items > TFILE_MAX_DIMS) {
            fail(err, errlen, what, "tensor '%s': more than %d dimensions", name, TFILE_MAX_DIMS);
            goto done;
        }
        int64_t dims[TFILE_MAX_DIMS];
        for (size_t j = 0; j < sh->n_items; j++) {
            long dim;
            if (json_long(&sh->items[j], 0, 1l << 40, &dim) != 0) {
                fail(err, errlen, what, "tensor '%s': shape entry %zu is not an integer in 0..2^40", name, j);
                goto done;
            }
            dims[j] = dim;
        }
        uint64_t b, e;
        if (json_u64(&off->items[0], &b) != 0 || json_u64(&off->items[1], &e) != 0 || b > e || e > data_len) {
            fail(err, errlen, what, "tensor '%s': data_offsets are not [begin, end] inside the %llu data bytes", name,
                 (unsigned long long)data_len);
            goto done;
        }
        const int size = dtypes[t->dtype].size;
        snprintf(t->name, sizeof t->name, "%s", name);
        if (set_shape(t, (int)sh->n_items, dims, (int64_t)(data_len / (uint64_t)size) + 1, what, err, errlen) != 0)
            goto done;
        if ((uint64_t)t->n * (uint64_t)size != e - b) {
            fail(err, errlen, what, "tensor '%s': %llu bytes where shape and dtype %s say %lld", name,
                 (unsigned long long)(e - b), dt->text, (long long)(t->n * size));
            goto done;
        }
        for (int j = 0; j < count; j++)
            if (strcmp(out[j].name, name) == 0) {
                fail(err, errlen, what, "tensor '%s' appears twice", name);
                goto done;
            }
        ranges[count].begin = b;
        ranges[count].end = e;
        ranges[count].index = count;
        count++;
    }
    qsort(ranges, (size_t)count, sizeof *ranges, by_begin);
    for (int j = 1; j < count; j++)
        if (ranges[j].begin < ranges[j - 1].end) {
            fail(err, errlen, what, "tensors '%s' and '%s' overlap in the data section", out[ranges[j - 1].index].name,
                 out[ranges[j].index].name);
            goto done;
        }
    for (int j = 0; j < count; j++) {
        tfile_tensor *t = &out[ranges[j].index];
        if (t->n == 0) continue;
        t->data = malloc((size_t)t->n * sizeof(double));
        if (!t->data) {
            fail(err, errlen, what, "out of memory for tensor '%s'", t->name);
            goto done;
        }
        char where[200];
        snprintf(where, sizeof where, "%s: tensor '%s'", what, t->name);
        if (decode(data + ranges[j].begin, t->n, t->dtype, 0, t->data, where, err, errlen) != 0) goto done;
    }
    rc = 0;
done:
    json_free(root);
    free(ranges);
    if (rc == 0) {
        *ts = out;
        *n = count;
    } else {
        tfile_free_all(out, count); /* the slots past count are zeroed */
    }
    return rc;
}

int tfile_read_safetensors(const char *path, tfile_tensor **ts, int *n, char *err, size_t errlen)
{
    unsigned char *buf;
    size_t len;
    *ts = NULL;
    *n = 0;
    if (read_file(path, &buf, &len, err, errlen) != 0) return -1;
    int rc = tfile_read_safetensors_bytes(buf, len, path, ts, n, err, errlen);
    free(buf);
    return rc;
}

/* ---- .npy writer ------------------------------------------------------------------ */

/* The 16-bit pattern of v in binary16 or bf16; -1 when v is not exact there. */
static int exact_bits16(double v, int bf16, uint16_t *out)
{
    float f = (float)v;
    if ((double)f != v && !(isnan(v))) return -1;
    if (bf16) {
        uint32_t bits;
        memcpy(&bits, &f, 4);
        if (isnan(f)) bits = 0x7fc00000u | (bits & 0x80000000u);
        if (bits & 0xffff) return -1;
        *out = (uint16_t)(bits >> 16);
        return 0;
    }
    /* binary16: sign, then the exponent and fraction of |v| */
    uint16_t sign = signbit(v) ? 0x8000 : 0;
    double a = fabs(v);
    if (isnan(v)) { *out = sign | 0x7e00; return 0; }
    if (isinf(v)) { *out = sign | 0x7c00; return 0; }
    if (a == 0) { *out = sign; return 0; }
    int e;
    frexp(a, &e); /* a = m 2^e, m in [0.5, 1) */
    if (e > 16) return -1;
    if (e < -13) { /* subnormal: a = k 2^-24 */
        double k = ldexp(a, 24);
        if (k != floor(k) || k >= 1024) return -1;
        *out = sign | (uint16_t)k;
        return 0;
    }
    double frac = ldexp(a, 11 - e); /* 11-bit significand 1.f */
    if (frac != floor(frac)) return -1;
    *out = sign | (uint16_t)((e + 14) << 10) | (uint16_t)((uint32_t)frac & 0x3ff);
    return 0;
}

int tfile_write_npy(const char *path, tfile_dtype dtype, int ndim, const int64_t *shape, const double *values,
                    char *err, size_t errlen)
{
    const char *descr = dtype == TFILE_F64 ? "<f8" : dtype == TFILE_F32 ? "<f4" : dtype == TFILE_F16 ? "<f2"
                      : dtype == TFILE_BF16 || dtype == TFILE_U16 ? "<u2" : NULL;
    if (!descr) return fail(err, errlen, path, "the writer takes f8, f4, f2, bf16 and u2, not %s", tfile_dtype_name(dtype));
    if (ndim < 0 || ndim > TFILE_MAX_DIMS) return fail(err, errlen, path, "%d dimensions", ndim);
    char header[256];
    int k = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        k += snprintf(header + k, sizeof header - (size_t)k, "%lld,%s", (long long)shape[d], ndim > 1 && d < ndim - 1 ? " " : "");
        n *= shape[d];
    }
    if (ndim > 1) k--; /* NumPy writes (3, 4), and (3,) for one dimension */
    k += snprintf(header + k, sizeof header - (size_t)k, "), }");
    int total = 10 + k + 1;
    int pad = (64 - total % 64) % 64;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return fail(err, errlen, path, "%s", strerror(errno));
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)((k + pad + 1) & 0xff),
                             (unsigned char)((k + pad + 1) >> 8)};
    int bad = fwrite(pre, 1, 10, f) != 10 || fwrite(header, 1, (size_t)k, f) != (size_t)k;
    for (int p = 0; p < pad && !bad; p++) bad = fputc(' ', f) == EOF;
    if (!bad) bad = fputc('\n', f) == EOF;
    for (int64_t i = 0; i < n && !bad; i++) {
        unsigned char b[8];
        int size;
        double v = values[i];
        if (dtype == TFILE_F64) {
            uint64_t u;
            memcpy(&u, &v, 8);
            for (int j = 0; j < 8; j++) b[j] = (unsigned char)(u >> (8 * j));
            size = 8;
        } else if (dtype == TFILE_F32) {
            float x = (float)v;
            if ((double)x != v && !isnan(v)) {
                fclose(f);
                unlink(tmp);
                return fail(err, errlen, path, "element %lld = %.17g is not an f4 value", (long long)i, v);
            }
            uint32_t u;
            memcpy(&u, &x, 4);
            for (int j = 0; j < 4; j++) b[j] = (unsigned char)(u >> (8 * j));
            size = 4;
        } else {
            uint16_t u;
            if (dtype == TFILE_U16) {
                if (v < 0 || v > 65535 || v != floor(v)) u = 0, bad = 2;
                else u = (uint16_t)v;
            } else if (exact_bits16(v, dtype == TFILE_BF16, &u) != 0) bad = 2;
            if (bad == 2) {
                fclose(f);
                unlink(tmp);
                return fail(err, errlen, path, "element %lld = %.17g is not a %s value", (long long)i, v,
                            tfile_dtype_name(dtype));
            }
            b[0] = (unsigned char)u;
            b[1] = (unsigned char)(u >> 8);
            size = 2;
        }
        bad = fwrite(b, 1, (size_t)size, f) != (size_t)size;
    }
    if (fclose(f) != 0) bad = 1;
    if (bad || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return fail(err, errlen, path, "%s", strerror(e ? e : EIO));
    }
    return 0;
}
