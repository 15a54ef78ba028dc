/* tests/test_train_glue.c — the trainer's head permute (tglue_permute_heads,
 * trainer/glue.cu) against a host permute, bit for bit, on the GPU.
 *
 * Cases cover both of its paths in both directions: 16-byte vectors (equal
 * formats, D x element size a multiple of 16, aligned pointers: bf16 D 64,
 * fp32 D 4, fp16 D 8) and one element a thread (rows of 12 bytes, a
 * pointer 2 bytes off alignment, and format conversions bf16 -> fp32,
 * fp32 -> bf16 and fp32 -> fp16, rounded to nearest even).  Equal formats
 * get random bit patterns, NaN payloads included (copied as bits); a
 * conversion gets random finite values, its reference prec_rne.  The output
 * is poisoned first and a guard past its end must stay poisoned.
 *
 * Twin: the same GPU output compared with the inverse permutation (the
 * reference for the other direction) must disagree.
 *
 * The test skips visibly without a GPU (ULPSCOPE_REQUIRE_GPU=1: fails). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common/ktensor_io.h"
#include "precision/format.h"
#include "precision/rng.h"
#include "test_util.h"
#include "trainer/glue.h"

enum { GUARD = 64, POISON = 0xA5 };

typedef struct {
    int B, T, H, D;
    prec_format src, dst;
    int misalign; /* elements the source starts past an aligned address */
} permute_case;

static uint64_t load_bits(const unsigned char *p, size_t bytes)
{
    uint64_t v = 0;
    memcpy(&v, p, bytes); /* little-endian host */
    return v;
}

/* Source elements: random bits for a bit copy, random finite values otherwise. */
static void fill_source(unsigned char *src, int64_t n, const permute_case *c, prec_rng *rng)
{
    const size_t sb = kformat_bytes(c->src);
    for (int64_t i = 0; i < n; i++) {
        uint64_t bits;
        if (c->src == c->dst) bits = prec_rng_next(rng);
        else {
            const int e = (int)(prec_rng_next(rng) % 24) - 12; /* before the mantissa, explicitly */
            bits = prec_encode(prec_rne(ldexp(prec_rng_normal(rng), e), c->src), c->src);
        }
        memcpy(src + i * sb, &bits, sb);
    }
}

/* Element (b, t, h, d) of [B,T,H,D] <-> (b, h, t, d) of [B,H,T,D]: the
 * destination index of source element i for the direction to_bhtd. */
static int64_t dest_index(const permute_case *c, int64_t i, int to_bhtd)
{
    const int64_t d = i % c->D, r = i / c->D;
    if (to_bhtd) { /* source [B,T,H] rows */
        const int64_t h = r % c->H, t = r / c->H % c->T, b = r / c->H / c->T;
        return ((b * c->H + h) * c->T + t) * c->D + d;
    }
    const int64_t t = r % c->T, h = r / c->T % c->H, b = r / c->T / c->H;
    return ((b * c->T + t) * c->H + h) * c->D + d;
}

/* Elements of got that differ from the host permute of src (direction to_bhtd). */
static int64_t mismatches(const permute_case *c, const unsigned char *src, const unsigned char *got, int to_bhtd)
{
    const size_t sb = kformat_bytes(c->src), db = kformat_bytes(c->dst);
    const int64_t n = (int64_t)c->B * c->T * c->H * c->D;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t s = load_bits(src + i * sb, sb), want = s;
        if (c->src != c->dst) want = prec_encode(prec_rne(prec_decode(s, c->src), c->dst), c->dst);
        bad += load_bits(got + dest_index(c, i, to_bhtd) * db, db) != want;
    }
    return bad;
}

/* Runs the case in one direction; returns the GPU output (n elements then the guard). */
static unsigned char *run_case(const permute_case *c, const unsigned char *src, int to_bhtd)
{
    const int64_t n = (int64_t)c->B * c->T * c->H * c->D;
    const size_t sb = kformat_bytes(c->src), db = kformat_bytes(c->dst);
    const size_t src_bytes = (size_t)n * sb + (size_t)c->misalign * sb, dst_bytes = (size_t)n * db + GUARD;
    void *d_src = NULL, *d_dst = NULL;
    assert_int_equal(kdevice_alloc(&d_src, src_bytes, "permute source"), 0);
    assert_int_equal(kdevice_alloc(&d_dst, dst_bytes, "permute destination"), 0);
    unsigned char *src_at = (unsigned char *)d_src + (size_t)c->misalign * sb;
    assert_int_equal(kdevice_upload(src_at, src, (size_t)n * sb, "permute source"), 0);
    assert_int_equal(kdevice_fill_bytes(d_dst, POISON, dst_bytes, "permute destination"), 0);
    int rc = tglue_permute_heads(d_dst, c->dst, src_at, c->src, c->B, c->T, c->H, c->D, to_bhtd);
    if (rc) fail_msg("tglue_permute_heads: %s", kernels_last_error());
    unsigned char *got = malloc(dst_bytes);
    assert_non_null(got);
    assert_int_equal(kdevice_download(got, d_dst, dst_bytes, "permute destination"), 0);
    kdevice_free(d_src);
    kdevice_free(d_dst);
    for (size_t i = (size_t)n * db; i < dst_bytes; i++)
        if (got[i] != POISON) fail_msg("tglue_permute_heads wrote past its output (byte %zu)", i);
    return got;
}

static void test_permute_matches_host(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    const permute_case cases[] = {
        {2, 37, 3, 64, PREC_BF16, PREC_BF16, 0}, /* vectors: 8 a row */
        {3, 19, 5, 4, PREC_FP32, PREC_FP32, 0},  /* vectors: 1 a row */
        {1, 65, 2, 8, PREC_FP16, PREC_FP16, 0},
        {2, 9, 3, 6, PREC_BF16, PREC_BF16, 0},   /* 12-byte rows: elements */
        {2, 17, 3, 64, PREC_BF16, PREC_BF16, 1}, /* misaligned source: elements */
        {2, 7, 3, 8, PREC_BF16, PREC_FP32, 0},   /* conversions */
        {1, 11, 2, 16, PREC_FP32, PREC_BF16, 0},
        {2, 13, 4, 32, PREC_FP32, PREC_FP16, 0},
    };
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_permute_matches_host"));
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const permute_case *c = &cases[k];
        const int64_t n = (int64_t)c->B * c->T * c->H * c->D;
        unsigned char *src = malloc((size_t)n * kformat_bytes(c->src));
        assert_non_null(src);
        fill_source(src, n, c, &rng);
        for (int to_bhtd = 0; to_bhtd <= 1; to_bhtd++) {
            unsigned char *got = run_case(c, src, to_bhtd);
            const int64_t bad = mismatches(c, src, got, to_bhtd), twin = mismatches(c, src, got, !to_bhtd);
            printf("[ PERMUTE  ] B=%d T=%d H=%d D=%d %s->%s misalign=%d %s: %lld of %lld differ (twin, the inverse "
                   "permutation: %lld differ)\n",
                   c->B, c->T, c->H, c->D, prec_format_name(c->src), prec_format_name(c->dst), c->misalign,
                   to_bhtd ? "to [B,H,T,D]" : "to [B,T,H,D]", (long long)bad, (long long)n, (long long)twin);
            assert_int_equal(bad, 0);
            assert_true(twin > 0);
            free(got);
        }
        free(src);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_permute_matches_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
