/* base/json_read.h — a small, strict JSON reader for the files ulpscope
 * reads back: result records (compare's run cache, trace files), plans and
 * fingerprints.  Outside input: every malformed text is refused with one line
 * that says what and where (byte offset), never a crash, a hang or an
 * unbounded allocation.
 *
 * RFC 8259 JSON, with two deliberate limits: nesting at most JSON_MAX_DEPTH
 * deep, and a NUL byte anywhere is an error (binary input is refused, not
 * half-read).  Strings are decoded (escapes, \uXXXX with surrogate pairs, to
 * UTF-8); a lone surrogate is an error.  Numbers keep their source text, so
 * 64-bit integers (seeds, hashes) read back exactly through json_u64.
 * Duplicate object keys are an error (a reader could otherwise take either).
 * The non-finite doubles ulpscope writes as the strings "nan", "inf" and
 * "-inf" read back through json_double. */
#ifndef ULPSCOPE_BASE_JSON_READ_H
#define ULPSCOPE_BASE_JSON_READ_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define JSON_MAX_DEPTH 64

typedef enum { JSON_NULL = 0, JSON_FALSE, JSON_TRUE, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } json_type;

typedef struct json_value json_value;
struct json_value {
    json_type type;
    double number;        /* JSON_NUMBER: strtod of the text */
    char *text;           /* JSON_NUMBER: the literal as written; JSON_STRING: the decoded bytes (NUL-ended) */
    size_t text_len;
    json_value *items;    /* JSON_ARRAY: elements; JSON_OBJECT: values */
    char **keys;          /* JSON_OBJECT: keys, decoded */
    size_t n_items;
};

/* Parses exactly one JSON value (surrounding white space allowed) from
 * text[0..len).  Returns 0 and *out (free with json_free), or -1 with a
 * message "at byte N: what" in err. */
int json_parse(const char *text, size_t len, json_value **out, char *err, size_t errlen);
void json_free(json_value *v);

/* The member `key` of an object, or NULL (also when v is not an object). */
const json_value *json_get(const json_value *v, const char *key);
/* A number (or "nan" / "inf" / "-inf") as a double; -1 when v is neither. */
int json_double(const json_value *v, double *out);
/* A non-negative integer literal (decimal) or a string "0x..." (hex) as a
 * uint64, exactly; -1 for anything else or out of range. */
int json_u64(const json_value *v, uint64_t *out);
/* Deep equality: numbers by value (or, when their doubles are not finite,
 * by text), strings by bytes, arrays in order, objects as key sets. */
int json_equal(const json_value *a, const json_value *b);
/* An integer literal within [lo, hi]; -1 otherwise. */
int json_long(const json_value *v, long lo, long hi, long *out);

#ifdef __cplusplus
}
#endif
#endif
