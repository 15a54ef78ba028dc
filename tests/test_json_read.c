/* tests/test_json_read.c — the JSON reader: what it accepts, what it refuses
 * (each refusal with a message naming the byte), exact 64-bit integers, the
 * non-finite strings ulpscope writes, and random and mutated input that must
 * never crash (run under `make sanitize` too). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/json_read.h"
#include "precision/rng.h"
#include "tests/test_util.h"

static json_value *parse_ok(const char *text)
{
    json_value *v = NULL;
    char err[256];
    int rc = json_parse(text, strlen(text), &v, err, sizeof err);
    if (rc) fail_msg("refused %s: %s", text, err);
    return v;
}

static void test_accepts(void **state)
{
    (void)state;
    json_value *v = parse_ok(" {\"a\": [1, -2.5e3, true, false, null, \"x\\n\\u00e9\\ud83d\\ude00\"], \"b\": {}} ");
    assert_int_equal(v->type, JSON_OBJECT);
    const json_value *a = json_get(v, "a");
    assert_non_null(a);
    assert_int_equal(a->n_items, 6);
    double d;
    assert_int_equal(json_double(&a->items[1], &d), 0);
    assert_true(d == -2500.0);
    assert_int_equal(a->items[2].type, JSON_TRUE);
    assert_int_equal(a->items[4].type, JSON_NULL);
    assert_string_equal(a->items[5].text, "x\n\xc3\xa9\xf0\x9f\x98\x80");
    assert_null(json_get(v, "c"));
    assert_int_equal(json_get(v, "b")->n_items, 0);
    json_free(v);

    /* 64-bit integers read back exactly, decimal or as "0x..." strings */
    v = parse_ok("[18446744073709551615, \"0xcbf29ce484222325\", -1, 1.5, \"nan\", \"-inf\"]");
    uint64_t u;
    assert_int_equal(json_u64(&v->items[0], &u), 0);
    assert_true(u == UINT64_MAX);
    assert_int_equal(json_u64(&v->items[1], &u), 0);
    assert_true(u == 0xcbf29ce484222325ull);
    assert_int_equal(json_u64(&v->items[2], &u), -1);
    assert_int_equal(json_u64(&v->items[3], &u), -1);
    long l;
    assert_int_equal(json_long(&v->items[2], -5, 5, &l), 0);
    assert_int_equal(l, -1);
    assert_int_equal(json_long(&v->items[2], 0, 5, &l), -1);
    assert_int_equal(json_double(&v->items[4], &d), 0);
    assert_true(isnan(d));
    assert_int_equal(json_double(&v->items[5], &d), 0);
    assert_true(isinf(d) && d < 0);
    json_free(v);
}

static void test_refuses(void **state)
{
    (void)state;
    static const char *bad[] = {
        "", " ", "{", "[1,]", "[1 2]", "{\"a\" 1}", "{\"a\":1,}", "{a:1}", "01", "1.", "1e", "-", "+1",
        "\"abc", "\"a\\x\"", "\"\\u12\"", "\"\\ud800\"", "\"\\udc00\"", "\"\\u0000\"", "\"a\tb\"", "tru",
        "nul", "[1] 2", "{\"a\":1,\"a\":2}", "NaN", "Infinity", "'a'",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_value *v = (json_value *)0x1;
        char err[256] = "";
        assert_int_equal(json_parse(bad[i], strlen(bad[i]), &v, err, sizeof err), -1);
        assert_null(v);
        if (!strstr(err, "at byte ")) fail_msg("no position in the message for %s: %s", bad[i], err);
    }
    /* a NUL byte inside is refused (binary input), with its offset */
    char nul[] = "[1,\0 2]";
    json_value *v;
    char err[256];
    assert_int_equal(json_parse(nul, sizeof nul - 1, &v, err, sizeof err), -1);
    assert_non_null(strstr(err, "at byte 3"));
    /* nesting is bounded: JSON_MAX_DEPTH passes, one more does not */
    char deep[2 * (JSON_MAX_DEPTH + 2) + 1];
    for (int depth = JSON_MAX_DEPTH; depth <= JSON_MAX_DEPTH + 1; depth++) {
        int n = 0;
        for (int i = 0; i <= depth; i++) deep[n++] = '[';
        for (int i = 0; i <= depth; i++) deep[n++] = ']';
        int rc = json_parse(deep, (size_t)n, &v, err, sizeof err);
        assert_int_equal(rc, depth == JSON_MAX_DEPTH ? 0 : -1);
        if (!rc) json_free(v);
    }
}

/* Random bytes from a JSON-ish alphabet, and valid texts with one byte
 * changed, cut or duplicated: the reader returns 0 or -1, never crashes. */
static void test_random_input(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_random_input"));
    static const char alphabet[] = "{}[]\",:-+.0123456789eEtruefalsnl \\u\n";
    static const char *valid = "{\"run\":{\"arm\":\"base\",\"seed\":12,\"curve\":[1.5,1.25e-3,\"nan\"],\"ok\":true}}";
    char buf[128];
    int accepted = 0;
    for (int trial = 0; trial < 20000; trial++) {
        size_t n;
        if (trial % 2) {
            n = prec_rng_next(&rng) % sizeof buf;
            for (size_t i = 0; i < n; i++) buf[i] = alphabet[prec_rng_next(&rng) % (sizeof alphabet - 1)];
        } else {
            n = strlen(valid);
            memcpy(buf, valid, n);
            size_t at = prec_rng_next(&rng) % n;
            switch (prec_rng_next(&rng) % 3) {
            case 0: buf[at] = (char)(prec_rng_next(&rng) & 0xff); break;
            case 1: n = at; break;
            default:
                if (n < sizeof buf - 1) {
                    memmove(buf + at + 1, buf + at, n - at);
                    n++;
                }
            }
        }
        json_value *v;
        char err[256];
        if (json_parse(buf, n, &v, err, sizeof err) == 0) {
            accepted++;
            json_free(v);
        } else assert_true(err[0] != '\0');
    }
    print_message("random and mutated texts: %d of 20000 parsed, the rest refused with a message\n", accepted);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accepts),
        cmocka_unit_test(test_refuses),
        cmocka_unit_test(test_random_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
