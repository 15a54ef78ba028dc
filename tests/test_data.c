/* tests/test_data.c — training data: text bytes, llm.c / modded-nanogpt
 * token shards (and the rejection of corrupt ones, each with a message
 * naming the file and the problem), the train/validation split, and
 * batches that are a pure function of (seed, step, micro-batch, rank). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "precision/rng.h"
#include "test_util.h"
#include "trainer/data.h"

static char dir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/ulpscope_test_data_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd);
}

/* Writes a shard: header (magic, version, count as given), then tokens;
 * extra_bytes appended (or, negative, cut). */
static void write_shard(const char *path, int32_t magic, int32_t version, int32_t count, const uint16_t *tok,
                        int ntok, int extra_bytes)
{
    int32_t header[TSHARD_HEADER_INTS] = {0};
    header[0] = magic, header[1] = version, header[2] = count;
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(header, sizeof header, 1, fp), 1);
    int keep = ntok * 2 + (extra_bytes < 0 ? extra_bytes : 0);
    assert_int_equal(fwrite(tok, 1, (size_t)keep, fp), (size_t)keep);
    for (int i = 0; i < extra_bytes; i++) fputc(0, fp);
    fclose(fp);
}

static uint16_t *random_tokens(prec_rng *rng, int n, int vocab)
{
    uint16_t *t = malloc((size_t)n * sizeof *t);
    for (int i = 0; i < n; i++) t[i] = (uint16_t)(prec_rng_next(rng) % (uint64_t)vocab);
    return t;
}

static void path_in(char *out, size_t len, const char *sub, const char *name)
{
    snprintf(out, len, "%s/%s", dir, sub);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", out);
    assert_int_equal(system(cmd), 0);
    snprintf(out + strlen(out), len - strlen(out), "/%s", name);
}

static void test_text_split(void **state)
{
    (void)state;
    tdata d;
    char err[512];
    const char *text = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ!?";
    assert_int_equal(tdata_open_bytes(&d, "t", (const unsigned char *)text, strlen(text), 0.25, err, sizeof err), 0);
    assert_int_equal(d.vocab, 256);
    assert_int_equal(d.train_tokens + d.val_tokens, (int64_t)strlen(text));
    assert_int_equal(d.val_tokens, 16); /* a quarter, taken from the end */
    assert_int_equal(d.val[0].tok[0], (uint16_t)text[strlen(text) - 16]);
    int32_t tok[2 * 8], tgt[2 * 8];
    tdata_val_batch(&d, 0, 2, 7, tok, tgt);
    for (int i = 0; i < 7; i++) {
        assert_int_equal(tok[i], text[strlen(text) - 16 + i]);
        assert_int_equal(tgt[i], text[strlen(text) - 16 + i + 1]); /* targets: the next token */
    }
    tdata_close(&d);
    /* the embedded corpus */
    assert_int_equal(tdata_open(&d, NULL, 0.1, 0, err, sizeof err), 0);
    assert_true(d.train_tokens > 4000);
    assert_int_equal(tdata_check_windows(&d, 64, err, sizeof err), 0);
    tdata_close(&d);
    /* bad fractions and too-short data */
    assert_int_equal(tdata_open_bytes(&d, "t", (const unsigned char *)text, strlen(text), 1.5, err, sizeof err), -1);
    assert_non_null(strstr(err, "1.5"));
    assert_int_equal(tdata_open_bytes(&d, "t", (const unsigned char *)"ab", 2, 0.1, err, sizeof err), -1);
}

static void test_batches_deterministic(void **state)
{
    (void)state;
    tdata d;
    char err[512];
    assert_int_equal(tdata_open(&d, NULL, 0.1, 0, err, sizeof err), 0);
    enum { B = 3, T = 16 };
    int32_t a[B * T], at[B * T], b[B * T], bt[B * T];
    unsigned long long seed = test_seed("test_batches_deterministic");
    tdata_train_batch(&d, seed, 5, 1, 0, B, T, a, at);
    tdata_train_batch(&d, seed, 5, 1, 0, B, T, b, bt);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_equal(at, bt, sizeof at);
    for (int i = 0; i + 1 < T; i++) assert_int_equal(at[i], a[i + 1]); /* one window, shifted by one */
    /* twin: another step, micro-batch or rank draws other windows */
    tdata_train_batch(&d, seed, 6, 1, 0, B, T, b, bt);
    assert_memory_not_equal(a, b, sizeof a);
    tdata_train_batch(&d, seed, 5, 0, 0, B, T, b, bt);
    assert_memory_not_equal(a, b, sizeof a);
    tdata_train_batch(&d, seed, 5, 1, 1, B, T, b, bt);
    assert_memory_not_equal(a, b, sizeof a);
    tdata_close(&d);
}

static void test_shards(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_shards"));
    char p[512];
    uint16_t *t1 = random_tokens(&rng, 3000, 50257), *t2 = random_tokens(&rng, 2000, 50257),
             *tv = random_tokens(&rng, 500, 50257);
    path_in(p, sizeof p, "good", "fineweb_train_000001.bin");
    write_shard(p, TSHARD_MAGIC, TSHARD_VERSION, 3000, t1, 3000, 0);
    path_in(p, sizeof p, "good", "fineweb_train_000002.bin");
    write_shard(p, TSHARD_MAGIC, TSHARD_VERSION, 2000, t2, 2000, 0);
    path_in(p, sizeof p, "good", "fineweb_val_000000.bin");
    write_shard(p, TSHARD_MAGIC, TSHARD_VERSION, 500, tv, 500, 0);
    tdata d;
    char err[1024];
    snprintf(p, sizeof p, "%s/good", dir);
    assert_int_equal(tdata_open(&d, p, 0.1, 0, err, sizeof err), 0);
    assert_int_equal(d.n_train, 2);
    assert_int_equal(d.n_val, 1);
    assert_int_equal(d.train_tokens, 5000);
    assert_int_equal(d.val_tokens, 500);
    assert_int_equal(d.vocab, TSHARD_GPT2_VOCAB);
    assert_memory_equal(d.train[0].tok, t1, 3000 * 2); /* sorted by name, read whole */
    assert_memory_equal(d.val[0].tok, tv, 500 * 2);
    int32_t tok[64], tgt[64];
    tdata_val_batch(&d, 0, 1, 64, tok, tgt);
    for (int i = 0; i < 64; i++) assert_int_equal(tok[i], tv[i]);
    tdata_close(&d);
    /* a single shard: the validation split is carved from its end */
    snprintf(p, sizeof p, "%s/good/fineweb_train_000001.bin", dir);
    assert_int_equal(tdata_open(&d, p, 0.1, 0, err, sizeof err), 0);
    assert_int_equal(d.val_tokens, 300);
    assert_int_equal(d.train_tokens, 2700);
    tdata_close(&d);
    free(t1), free(t2), free(tv);
}

/* Each corrupt shard is rejected with its file name and the reason. */
static void expect_reject(const char *sub, const char *name, int32_t magic, int32_t version, int32_t count,
                          const uint16_t *tok, int ntok, int extra, int vocab, const char *why)
{
    char p[512], err[1024] = "";
    path_in(p, sizeof p, sub, name);
    write_shard(p, magic, version, count, tok, ntok, extra);
    tdata d;
    snprintf(p, sizeof p, "%s/%s", dir, sub);
    assert_int_equal(tdata_open(&d, p, 0.1, vocab, err, sizeof err), -1);
    if (!strstr(err, name) || !strstr(err, why)) fail_msg("%s: error was: %s", sub, err);
}

static void test_corrupt_shards(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("test_corrupt_shards"));
    uint16_t *t = random_tokens(&rng, 1000, 256);
    expect_reject("magic", "a_train.bin", 20240521, 1, 1000, t, 1000, 0, 256, "magic 20240521");
    expect_reject("version", "a_train.bin", TSHARD_MAGIC, 2, 1000, t, 1000, 0, 256, "version 2");
    expect_reject("short", "a_train.bin", TSHARD_MAGIC, 1, 1000, t, 1000, -2, 256, "1000 tokens");
    expect_reject("long", "a_train.bin", TSHARD_MAGIC, 1, 1000, t, 1000, 7, 256, "1000 tokens");
    expect_reject("count", "a_train.bin", TSHARD_MAGIC, 1, -5, t, 1000, 0, 256, "-5 tokens");
    t[777] = 300; /* outside a vocabulary of 256 */
    expect_reject("vocab", "a_train.bin", TSHARD_MAGIC, 1, 1000, t, 1000, 0, 256, "position 777");
    t[777] = 5;
    /* twin: the same shard, intact, is accepted */
    char p[512], err[1024];
    path_in(p, sizeof p, "intact", "a_train.bin");
    write_shard(p, TSHARD_MAGIC, 1, 1000, t, 1000, 0);
    tdata d;
    snprintf(p, sizeof p, "%s/intact", dir);
    assert_int_equal(tdata_open(&d, p, 0.1, 256, err, sizeof err), 0);
    tdata_close(&d);
    /* a header shorter than 1024 bytes */
    path_in(p, sizeof p, "tiny", "a_train.bin");
    FILE *fp = fopen(p, "wb");
    fwrite("abc", 1, 3, fp);
    fclose(fp);
    snprintf(p, sizeof p, "%s/tiny", dir);
    assert_int_equal(tdata_open(&d, p, 0.1, 256, err, sizeof err), -1);
    assert_non_null(strstr(err, "header"));
    /* no shards at all; validation shards only */
    path_in(p, sizeof p, "empty", "readme.txt");
    fp = fopen(p, "w");
    fclose(fp);
    snprintf(p, sizeof p, "%s/empty", dir);
    assert_int_equal(tdata_open(&d, p, 0.1, 256, err, sizeof err), -1);
    assert_non_null(strstr(err, "no .bin"));
    path_in(p, sizeof p, "valonly", "x_val.bin");
    write_shard(p, TSHARD_MAGIC, 1, 1000, t, 1000, 0);
    snprintf(p, sizeof p, "%s/valonly", dir);
    assert_int_equal(tdata_open(&d, p, 0.1, 256, err, sizeof err), -1);
    assert_non_null(strstr(err, "no training shard"));
    assert_int_equal(tdata_open(&d, "/nonexistent/ulpscope", 0.1, 256, err, sizeof err), -1);
    assert_non_null(strstr(err, "/nonexistent/ulpscope"));
    free(t);
}

/* tinyshakespeare when it is there (../shared/data here, data/ on the GPU
 * machine): every byte a token, the last tenth held out. */
static void test_tinyshakespeare(void **state)
{
    (void)state;
    const char *paths[] = {"../shared/data/tinyshakespeare.txt", "data/tinyshakespeare.txt"};
    const char *path = NULL;
    for (int i = 0; i < 2 && !path; i++)
        if (access(paths[i], R_OK) == 0) path = paths[i];
    if (!path) {
        print_message("skipping: no tinyshakespeare.txt in ../shared/data or data\n");
        skip();
    }
    FILE *fp = fopen(path, "rb");
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    fclose(fp);
    tdata d;
    char err[512];
    assert_int_equal(tdata_open(&d, path, 0.1, 0, err, sizeof err), 0);
    assert_int_equal(d.vocab, 256);
    assert_int_equal(d.train_tokens + d.val_tokens, size);
    assert_int_equal(d.val_tokens, (int64_t)(0.1 * (double)size));
    assert_int_equal(tdata_check_windows(&d, 1024, err, sizeof err), 0);
    tdata_close(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_split),
        cmocka_unit_test(test_batches_deterministic),
        cmocka_unit_test(test_shards),
        cmocka_unit_test(test_corrupt_shards),
        cmocka_unit_test(test_tinyshakespeare),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
