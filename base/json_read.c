/* base/json_read.c — strict recursive-descent JSON reader (json_read.h). */
#include "base/json_read.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *s;
    size_t len, pos;
    char *err;
    size_t errlen;
    int failed;
} reader;

static int fail(reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(reader *r, const char *fmt, ...)
{
    if (r->failed) return -1;
    r->failed = 1;
    int n = snprintf(r->err, r->errlen, "at byte %zu: ", r->pos);
    if (n < 0 || (size_t)n >= r->errlen) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err + n, r->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

static void skip_ws(reader *r)
{
    while (r->pos < r->len) {
        char c = r->s[r->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        r->pos++;
    }
}

static int peek(reader *r) { return r->pos < r->len ? (unsigned char)r->s[r->pos] : -1; }

static int literal(reader *r, const char *word, json_value *v, json_type t)
{
    size_t n = strlen(word);
    if (r->len - r->pos < n || memcmp(r->s + r->pos, word, n) != 0) return fail(r, "unexpected character");
    r->pos += n;
    v->type = t;
    return 0;
}

static int is_digit(int c) { return c >= '0' && c <= '9'; }

static int number(reader *r, json_value *v)
{
    size_t start = r->pos;
    if (peek(r) == '-') r->pos++;
    if (peek(r) == '0') r->pos++;
    else if (is_digit(peek(r)))
        while (is_digit(peek(r))) r->pos++;
    else return fail(r, "malformed number");
    if (peek(r) == '.') {
        r->pos++;
        if (!is_digit(peek(r))) return fail(r, "malformed number: no digit after '.'");
        while (is_digit(peek(r))) r->pos++;
    }
    if (peek(r) == 'e' || peek(r) == 'E') {
        r->pos++;
        if (peek(r) == '+' || peek(r) == '-') r->pos++;
        if (!is_digit(peek(r))) return fail(r, "malformed number: no digit in the exponent");
        while (is_digit(peek(r))) r->pos++;
    }
    size_t n = r->pos - start;
    v->type = JSON_NUMBER;
    v->text = malloc(n + 1);
    if (!v->text) return fail(r, "out of memory");
    memcpy(v->text, r->s + start, n);
    v->text[n] = '\0';
    v->text_len = n;
    v->number = strtod(v->text, NULL); /* +-HUGE_VAL on overflow: the literal is kept */
    return 0;
}

static int hex4(reader *r, unsigned *out)
{
    if (r->len - r->pos < 4) return fail(r, "truncated \\u escape");
    unsigned x = 0;
    for (int i = 0; i < 4; i++) {
        char c = r->s[r->pos++];
        x <<= 4;
        if (c >= '0' && c <= '9') x |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') x |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') x |= (unsigned)(c - 'A' + 10);
        else return fail(r, "bad hex digit in \\u escape");
    }
    *out = x;
    return 0;
}

/* Decodes a string starting at the opening quote into a malloc'ed buffer. */
static int string(reader *r, char **out, size_t *out_len)
{
    r->pos++; /* the quote */
    /* the decoded text is never longer than the source text */
    size_t end = r->pos, cap;
    while (end < r->len && r->s[end] != '"') end += r->s[end] == '\\' ? 2 : 1;
    if (end >= r->len) return fail(r, "unterminated string");
    cap = end - r->pos + 1;
    char *buf = malloc(cap), *w = buf;
    if (!buf) return fail(r, "out of memory");
    while (r->pos < r->len) {
        unsigned char c = (unsigned char)r->s[r->pos];
        if (c == '"') {
            r->pos++;
            *w = '\0';
            *out = buf;
            *out_len = (size_t)(w - buf);
            return 0;
        }
        if (c < 0x20) {
            free(buf);
            return fail(r, "control character in a string");
        }
        if (c != '\\') {
            *w++ = (char)c;
            r->pos++;
            continue;
        }
        r->pos++;
        if (r->pos >= r->len) break;
        char e = r->s[r->pos++];
        switch (e) {
        case '"': *w++ = '"'; break;
        case '\\': *w++ = '\\'; break;
        case '/': *w++ = '/'; break;
        case 'b': *w++ = '\b'; break;
        case 'f': *w++ = '\f'; break;
        case 'n': *w++ = '\n'; break;
        case 'r': *w++ = '\r'; break;
        case 't': *w++ = '\t'; break;
        case 'u': {
            unsigned cp;
            if (hex4(r, &cp)) {
                free(buf);
                return -1;
            }
            if (cp >= 0xdc00 && cp <= 0xdfff) {
                free(buf);
                return fail(r, "lone low surrogate");
            }
            if (cp >= 0xd800 && cp <= 0xdbff) {
                unsigned lo;
                if (r->len - r->pos < 2 || r->s[r->pos] != '\\' || r->s[r->pos + 1] != 'u') {
                    free(buf);
                    return fail(r, "high surrogate without its low half");
                }
                r->pos += 2;
                if (hex4(r, &lo)) {
                    free(buf);
                    return -1;
                }
                if (lo < 0xdc00 || lo > 0xdfff) {
                    free(buf);
                    return fail(r, "high surrogate without its low half");
                }
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            if (cp == 0) {
                free(buf);
                return fail(r, "\\u0000 in a string");
            }
            /* UTF-8: at most 4 bytes for at most 6 (or 12) source bytes */
            if (cp < 0x80) *w++ = (char)cp;
            else if (cp < 0x800) {
                *w++ = (char)(0xc0 | (cp >> 6));
                *w++ = (char)(0x80 | (cp & 0x3f));
            } else if (cp < 0x10000) {
                *w++ = (char)(0xe0 | (cp >> 12));
                *w++ = (char)(0x80 | ((cp >> 6) & 0x3f));
                *w++ = (char)(0x80 | (cp & 0x3f));
            } else {
                *w++ = (char)(0xf0 | (cp >> 18));
                *w++ = (char)(0x80 | ((cp >> 12) & 0x3f));
                *w++ = (char)(0x80 | ((cp >> 6) & 0x3f));
                *w++ = (char)(0x80 | (cp & 0x3f));
            }
            break;
        }
        default: free(buf); return fail(r, "bad escape '\\%c'", e);
        }
    }
    free(buf);
    return fail(r, "unterminated string");
}

static void value_free(json_value *v);

static int value(reader *r, json_value *v, int depth);

static int grow(reader *r, json_value *v, size_t *cap, int with_keys)
{
    if (v->n_items < *cap) return 0;
    size_t nc = *cap ? *cap * 2 : 4;
    json_value *items = realloc(v->items, nc * sizeof *items);
    if (!items) return fail(r, "out of memory");
    v->items = items;
    if (with_keys) {
        char **keys = realloc(v->keys, nc * sizeof *keys);
        if (!keys) return fail(r, "out of memory");
        v->keys = keys;
    }
    *cap = nc;
    return 0;
}

static int array(reader *r, json_value *v, int depth)
{
    size_t cap = 0;
    v->type = JSON_ARRAY;
    r->pos++;
    skip_ws(r);
    if (peek(r) == ']') {
        r->pos++;
        return 0;
    }
    for (;;) {
        if (grow(r, v, &cap, 0)) return -1;
        memset(&v->items[v->n_items], 0, sizeof v->items[0]);
        v->n_items++;
        if (value(r, &v->items[v->n_items - 1], depth + 1)) return -1;
        skip_ws(r);
        int c = peek(r);
        r->pos++;
        if (c == ']') return 0;
        if (c != ',') {
            r->pos--;
            return fail(r, "expected ',' or ']' in an array");
        }
    }
}

static int object(reader *r, json_value *v, int depth)
{
    size_t cap = 0;
    v->type = JSON_OBJECT;
    r->pos++;
    skip_ws(r);
    if (peek(r) == '}') {
        r->pos++;
        return 0;
    }
    for (;;) {
        skip_ws(r);
        if (peek(r) != '"') return fail(r, "expected a string key in an object");
        if (grow(r, v, &cap, 1)) return -1;
        char *key;
        size_t key_len;
        size_t key_pos = r->pos;
        if (string(r, &key, &key_len)) return -1;
        for (size_t i = 0; i < v->n_items; i++)
            if (strcmp(v->keys[i], key) == 0) {
                free(key);
                r->pos = key_pos;
                return fail(r, "duplicate key \"%.64s\"", v->keys[i]);
            }
        v->keys[v->n_items] = key;
        memset(&v->items[v->n_items], 0, sizeof v->items[0]);
        v->n_items++;
        skip_ws(r);
        if (peek(r) != ':') return fail(r, "expected ':' after an object key");
        r->pos++;
        if (value(r, &v->items[v->n_items - 1], depth + 1)) return -1;
        skip_ws(r);
        int c = peek(r);
        r->pos++;
        if (c == '}') return 0;
        if (c != ',') {
            r->pos--;
            return fail(r, "expected ',' or '}' in an object");
        }
    }
}

static int value(reader *r, json_value *v, int depth)
{
    if (depth > JSON_MAX_DEPTH) return fail(r, "nested deeper than %d", JSON_MAX_DEPTH);
    skip_ws(r);
    switch (peek(r)) {
    case -1: return fail(r, "unexpected end of input");
    case '{': return object(r, v, depth);
    case '[': return array(r, v, depth);
    case '"':
        v->type = JSON_STRING;
        return string(r, &v->text, &v->text_len);
    case 't': return literal(r, "true", v, JSON_TRUE);
    case 'f': return literal(r, "false", v, JSON_FALSE);
    case 'n': return literal(r, "null", v, JSON_NULL);
    default:
        if (peek(r) == '-' || is_digit(peek(r))) return number(r, v);
        return fail(r, "unexpected character");
    }
}

static void value_free(json_value *v)
{
    for (size_t i = 0; i < v->n_items; i++) {
        value_free(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->text);
}

int json_parse(const char *text, size_t len, json_value **out, char *err, size_t errlen)
{
    reader r = {text, len, 0, err, errlen, 0};
    *out = NULL;
    if (errlen) err[0] = '\0';
    if (memchr(text, '\0', len)) {
        r.pos = (size_t)((const char *)memchr(text, '\0', len) - text);
        return fail(&r, "NUL byte: not a JSON text");
    }
    json_value *v = calloc(1, sizeof *v);
    if (!v) return fail(&r, "out of memory");
    if (value(&r, v, 0) == 0) {
        skip_ws(&r);
        if (r.pos == len) {
            *out = v;
            return 0;
        }
        fail(&r, "trailing characters after the JSON value");
    }
    value_free(v);
    free(v);
    return -1;
}

void json_free(json_value *v)
{
    if (!v) return;
    value_free(v);
    free(v);
}

const json_value *json_get(const json_value *v, const char *key)
{
    if (!v || v->type != JSON_OBJECT) return NULL;
    for (size_t i = 0; i < v->n_items; i++)
        if (strcmp(v->keys[i], key) == 0) return &v->items[i];
    return NULL;
}

int json_double(const json_value *v, double *out)
{
    if (!v) return -1;
    if (v->type == JSON_NUMBER) {
        *out = v->number;
        return 0;
    }
    if (v->type == JSON_STRING) {
        if (strcmp(v->text, "nan") == 0) *out = NAN;
        else if (strcmp(v->text, "inf") == 0) *out = INFINITY;
        else if (strcmp(v->text, "-inf") == 0) *out = -INFINITY;
        else return -1;
        return 0;
    }
    return -1;
}

int json_u64(const json_value *v, uint64_t *out)
{
    if (!v) return -1;
    const char *s;
    int base;
    if (v->type == JSON_NUMBER) {
        s = v->text;
        base = 10;
        for (const char *p = s; *p; p++)
            if (!is_digit((unsigned char)*p)) return -1;
    } else if (v->type == JSON_STRING && (strncmp(v->text, "0x", 2) == 0 || strncmp(v->text, "0X", 2) == 0) &&
               v->text[2]) {
        s = v->text + 2;
        base = 16;
        for (const char *p = s; *p; p++)
            if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') || (*p >= 'A' && *p <= 'F'))) return -1;
    } else return -1;
    errno = 0;
    char *end;
    unsigned long long x = strtoull(s, &end, base);
    if (errno || *end) return -1;
    *out = (uint64_t)x;
    return 0;
}

int json_long(const json_value *v, long lo, long hi, long *out)
{
    if (!v || v->type != JSON_NUMBER) return -1;
    const char *p = v->text[0] == '-' ? v->text + 1 : v->text;
    if (!*p) return -1;
    for (; *p; p++)
        if (!is_digit((unsigned char)*p)) return -1;
    errno = 0;
    char *end;
    long x = strtol(v->text, &end, 10);
    if (errno || *end || x < lo || x > hi) return -1;
    *out = x;
    return 0;
}

int json_equal(const json_value *a, const json_value *b)
{
    if (!a || !b || a->type != b->type) return 0;
    switch (a->type) {
    case JSON_NUMBER:
        return isfinite(a->number) && isfinite(b->number) ? a->number == b->number : strcmp(a->text, b->text) == 0;
    case JSON_STRING: return a->text_len == b->text_len && memcmp(a->text, b->text, a->text_len) == 0;
    case JSON_ARRAY:
        if (a->n_items != b->n_items) return 0;
        for (size_t i = 0; i < a->n_items; i++)
            if (!json_equal(&a->items[i], &b->items[i])) return 0;
        return 1;
    case JSON_OBJECT:
        if (a->n_items != b->n_items) return 0;
        for (size_t i = 0; i < a->n_items; i++)
            if (!json_equal(&a->items[i], json_get(b, a->keys[i]))) return 0;
        return 1;
    default: return 1;
    }
}
