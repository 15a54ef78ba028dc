/* fuzz/fuzz_json.c — the JSON reader (base/json_read.h) that reads back
 * result records: the run cache of `compare --results` (one record per
 * line), recipe files.
 *
 * Input: the JSON text, whole (json_parse takes a length; NUL bytes are
 * part of the input).  Beyond not crashing: the accessors the readers use
 * (json_get, json_double, json_u64, json_long) answer on every node of an
 * accepted document, an object's keys are found where they are (keys are
 * unique), strings hold no NUL (its escape is refused), every value equals
 * itself, and a refused text says why. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json_read.h"
#include "fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void walk(const json_value *v, int depth)
{
    FUZZ_REQUIRE(depth <= JSON_MAX_DEPTH + 1, "nesting %d passed the limit %d", depth, JSON_MAX_DEPTH);
    double x;
    uint64_t u;
    long l;
    (void)json_double(v, &x);
    (void)json_u64(v, &u);
    (void)json_long(v, -1000000, 1000000, &l);
    FUZZ_REQUIRE(json_equal(v, v), "a value of type %d differs from itself", (int)v->type);
    if (v->type == JSON_STRING || v->type == JSON_NUMBER)
        FUZZ_REQUIRE(v->text && strlen(v->text) == v->text_len, "text of type %d: %zu bytes to its NUL, length %zu "
                     "(\\u0000 is refused)", (int)v->type, v->text ? strlen(v->text) : 0, v->text_len);
    if (v->type != JSON_ARRAY && v->type != JSON_OBJECT) return;
    for (size_t i = 0; i < v->n_items; i++) {
        if (v->type == JSON_OBJECT)
            FUZZ_REQUIRE(json_get(v, v->keys[i]) == &v->items[i], "key '%s' not found where it is", v->keys[i]);
        walk(&v->items[i], depth + 1);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_value *v = NULL;
    char err[512];
    err[0] = '\0';
    if (json_parse((const char *)data, size, &v, err, sizeof err) == 0) {
        FUZZ_REQUIRE(v, "parsed without a value");
        walk(v, 1);
        json_free(v);
    } else {
        FUZZ_REQUIRE(err[0], "refused without a message");
    }
    return 0;
}
