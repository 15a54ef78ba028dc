/* tests/test_checkpoint.c — checkpoints: train N steps = train k, save,
 * load, train N-k, bit for bit (losses, gradient norms, every stored byte of
 * parameters and optimizer state), for each weight storage, both model
 * families and dynamic loss scaling; atomic writes; corrupt, mismatched or
 * impossible checkpoints rejected; the run's settings stored and enforced
 * on resume through the command line. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"
#include "test_train_util.h"

static char dir[64];
static char ckpt[128];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/ulpscope_test_ckpt_XXXXXX");
    if (!mkdtemp(dir)) return -1;
    snprintf(ckpt, sizeof ckpt, "%s/run.ckpt", dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd);
}

/* Runs N steps straight, then k steps + checkpoint, then a resume to N;
 * returns the straight and resumed results. */
static void straight_and_resumed(ttrain_config *c, long N, long k, ttrain_result *full, ttrain_result *resumed)
{
    c->steps = N;
    run_ok(c, full);
    ttrain_config first = *c;
    first.stop_after = k;
    first.ckpt_path = ckpt;
    ttrain_result part;
    run_ok(&first, &part);
    assert_int_equal(part.steps_done, k);
    ttrain_result_free(&part);
    ttrain_config second = *c;
    second.resume_path = ckpt;
    run_ok(&second, resumed);
    assert_int_equal(resumed->steps_done, N);
}

static void expect_identical(const ttrain_result *a, const ttrain_result *b, long from, long to)
{
    for (long s = from; s < to; s++) {
        if (!same_bits(a->loss[s], b->loss[s])) fail_msg("step %ld: loss %.17g vs %.17g", s, a->loss[s], b->loss[s]);
        assert_true(same_bits(a->grad_norm[s], b->grad_norm[s]));
    }
    assert_true(same_bits(a->final_val_loss, b->final_val_loss));
    assert_true(a->param_hash == b->param_hash);
}

static void check_resume(tmodel_kind kind, const char *preset, const char *set)
{
    ttrain_config c;
    tiny_config(&c, kind, preset, test_seed("test_resume_bit_identical"));
    if (set) tiny_set(&c, set);
    ttrain_result full, resumed;
    straight_and_resumed(&c, 6, 3, &full, &resumed);
    expect_identical(&full, &resumed, 3, 6);
    ttrain_result_free(&full), ttrain_result_free(&resumed);
}

static void test_resume_bit_identical(void **state)
{
    (void)state;
    check_resume(TMODEL_GPT2, "bf16", NULL);
    check_resume(TMODEL_GPT2, "fp32", NULL);
    check_resume(TMODEL_GPT2, "fp16", NULL); /* loss scale and its clean-step count restored */
    check_resume(TMODEL_GPT2, "bf16", "weights=bf16:sr,optimizer.adamw=bf16");
    check_resume(TMODEL_GPT2, "bf16", "weights=bf16:mantissa_buffer,optimizer.adamw=bf16");
    check_resume(TMODEL_MODERN, "bf16", NULL); /* Muon momentum, transposed lm_head re-synced */
    /* per-layer choices travel in the checkpoint's plan */
    check_resume(TMODEL_GPT2, "bf16", "mlp.up@1=fp8,attn.*@0=fp32,residual@1=fp32");
    check_resume(TMODEL_MODERN, "bf16", "*@0=fp32,mlp.down.wgrad@1=fp16");
}

/* Rewrites the checksum after editing: the FNV-1a of everything before the
 * last 8 bytes. */
static void edit_checkpoint(const char *path, long offset_from_end, int fix_checksum)
{
    FILE *fp = fopen(path, "r+b");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    unsigned char *buf = malloc((size_t)size);
    rewind(fp);
    assert_int_equal(fread(buf, 1, (size_t)size, fp), (size_t)size);
    buf[size - 8 - offset_from_end] ^= 0x01;
    if (fix_checksum) {
        uint64_t h = ttrain_fnv1a(TTRAIN_FNV_OFFSET, buf, (size_t)size - 8);
        memcpy(buf + size - 8, &h, 8);
    }
    rewind(fp);
    assert_int_equal(fwrite(buf, 1, (size_t)size, fp), (size_t)size);
    fclose(fp);
    free(buf);
}

static void test_resume_twin_and_corruption(void **state)
{
    (void)state;
    ttrain_config c;
    tiny_config(&c, TMODEL_GPT2, "bf16", test_seed("test_resume_twin"));
    ttrain_result full, resumed, bad;
    straight_and_resumed(&c, 5, 2, &full, &resumed);
    expect_identical(&full, &resumed, 2, 5);
    ttrain_result_free(&resumed);
    /* twin: one bit of the last optimizer state changed (checksum fixed up)
     * must break the identity the test checks */
    ttrain_config first = c;
    first.stop_after = 2;
    first.ckpt_path = ckpt;
    run_ok(&first, &bad);
    ttrain_result_free(&bad);
    edit_checkpoint(ckpt, 5, 1);
    ttrain_config second = c;
    second.resume_path = ckpt;
    run_ok(&second, &resumed);
    assert_true(resumed.param_hash != full.param_hash);
    ttrain_result_free(&resumed);
    /* corruption without a matching checksum is refused, naming the file */
    edit_checkpoint(ckpt, 5, 0);
    assert_int_equal(ttrain_run(&second, &bad), 2);
    assert_non_null(strstr(bad.error, ckpt));
    assert_non_null(strstr(bad.error, "corrupt"));
    ttrain_result_free(&bad);
    /* a checkpoint of another model or plan is refused */
    run_ok(&first, &bad);
    ttrain_result_free(&bad);
    ttrain_config other = c;
    other.resume_path = ckpt;
    tiny_set(&other, "mlp.up=fp32");
    assert_int_equal(ttrain_run(&other, &bad), 2);
    if (!strstr(bad.error, "slot mlp.up@0 fp32:fused (checkpoint: bf16:fused)")) fail_msg("%s", bad.error);
    ttrain_result_free(&bad);
    /* so is one whose plan differs in one layer only */
    other = c;
    other.resume_path = ckpt;
    tiny_set(&other, "mlp.up@1=fp8");
    assert_int_equal(ttrain_run(&other, &bad), 2);
    if (!strstr(bad.error, "slot mlp.up@1 fp8:")) fail_msg("%s", bad.error);
    ttrain_result_free(&bad);
    ttrain_result_free(&full);
}

/* Written through a temporary name and renamed: nothing else is left in the
 * directory, and a second save replaces the first whole. */
static void test_atomic_write(void **state)
{
    (void)state;
    ttrain_config c;
    tiny_config(&c, TMODEL_GPT2, "bf16", test_seed("test_atomic_write"));
    c.steps = 3;
    c.ckpt_every = 1;
    c.ckpt_path = ckpt;
    ttrain_result r;
    run_ok(&c, &r);
    ttrain_result_free(&r);
    DIR *dp = opendir(dir);
    struct dirent *e;
    int files = 0;
    while ((e = readdir(dp)) != NULL) {
        if (e->d_name[0] == '.') continue;
        files++;
        assert_null(strstr(e->d_name, ".tmp."));
    }
    closedir(dp);
    assert_int_equal(files, 1);
    tckpt_info *info = malloc(sizeof *info);
    char err[512];
    assert_int_equal(tckpt_info_read(ckpt, info, err, sizeof err), 0);
    assert_int_equal(info->st.steps_done, 3);
    assert_int_equal(info->run.model.n_embd, 32);
    assert_int_equal(info->run.steps, 3);
    assert_true(info->run.seed == c.seed);
    tckpt_info_free(info);
    assert_int_equal(tckpt_info_read("/nonexistent/x.ckpt", info, err, sizeof err), -1);
    tckpt_info_free(info);
    free(info);
    assert_non_null(strstr(err, "/nonexistent/x.ckpt"));
}

/* ---- resuming through the command line ------------------------------------------------------ */

/* A text file of n pseudo-random letters from seed (its own data set). */
static void write_text(const char *path, size_t n, unsigned seed)
{
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        fputc("etaoin shrdlu\n"[(seed >> 16) % 14], fp);
    }
    fclose(fp);
}

/* Runs `ulpscope train ARGS`, expecting status want; the output in out. */
static void train_expect(const char *args, int want, char *out, size_t len)
{
    int st = test_run_cli("train", args, out, len);
    if (st != want) fail_msg("train %s: status %d (expected %d): %s", args, st, want, out);
}

/* The run's settings travel in the checkpoint: a resume with no options
 * continues the run exactly (absent options come from it), options equal to
 * the checkpoint's are accepted, and every one that differs is listed and
 * refused, the data's tokens included. */
static void test_resume_cli(void **state)
{
    (void)state;
    TEST_REQUIRE_BIN();
    static char out[65536];
    char text[160], other[160], copy[160], args[2048], log[160], cmd[512];
    char straight[32], resumed[32], explicit_hash[32], twin[32];
    snprintf(text, sizeof text, "%s/text.txt", dir);
    snprintf(other, sizeof other, "%s/other.txt", dir);
    snprintf(copy, sizeof copy, "%s/copy.txt", dir);
    snprintf(log, sizeof log, "%s/run.jsonl", dir);
    unsigned seed = (unsigned)test_seed("test_resume_cli");
    write_text(text, 20000, seed);
    write_text(other, 20000, seed + 1);
    snprintf(cmd, sizeof cmd, "cp %s %s", text, copy);
    assert_int_equal(system(cmd), 0);
    const char *run_fmt = "--width 32 --heads 2 --seq 16 --batch 2 --accum %d --steps 6 --seed %s --lr 0.002 --warmup 1 "
                          "--set mlp.up@1=fp32 --switch-at 4:attn.out=fp32 --val-every 3 --quiet";
    char run[512], run_twin[512], run_hex[512];
    snprintf(run, sizeof run, run_fmt, 2, "5");
    snprintf(run_twin, sizeof run_twin, run_fmt, 1, "5");
    snprintf(run_hex, sizeof run_hex, run_fmt, 2, "0x5");
    snprintf(args, sizeof args, "%s --data %s --log %s", run, text, log);
    train_expect(args, 0, out, sizeof out);
    final_state_hash(log, straight);
    snprintf(args, sizeof args, "%s --data %s --stop-after 2 --ckpt %s", run, text, ckpt);
    train_expect(args, 0, out, sizeof out);
    /* no options: the checkpoint's, and the same trajectory as the straight run */
    snprintf(args, sizeof args, "--resume %s --log %s --quiet", ckpt, log);
    train_expect(args, 0, out, sizeof out);
    final_state_hash(log, resumed);
    assert_string_equal(straight, resumed);
    /* twin: one setting changed (what resuming without the stored settings did) changes the final state */
    snprintf(args, sizeof args, "%s --data %s --log %s", run_twin, text, log);
    train_expect(args, 0, out, sizeof out);
    final_state_hash(log, twin);
    assert_string_not_equal(straight, twin);
    /* every setting given equal to the checkpoint's (the seed in hex, the data at another path): accepted */
    snprintf(args, sizeof args, "--resume %s %s --data %s --log %s", ckpt, run_hex, copy, log);
    train_expect(args, 0, out, sizeof out);
    final_state_hash(log, explicit_hash);
    assert_string_equal(straight, explicit_hash);
    /* different ones: refused, every one listed, on one line */
    snprintf(args, sizeof args, "--resume %s --accum 1 --batch 4 --seed 6 --steps 7 --lr 0.001 --depth 3 "
             "--set mlp.up=fp8 --switch-at 5:attn.out=fp32 --val-every 0 --model modern --quiet", ckpt);
    train_expect(args, 2, out, sizeof out);
    const char *listed[] = {"--accum 1 (checkpoint: 2)", "--batch 4 (checkpoint: 2)", "--seed 6 (checkpoint: 5)",
                            "--steps 7 (checkpoint: 6)", "--lr 0.001 (checkpoint: 0.002)",
                            "--depth 3 (checkpoint: 2)", "--model modern (checkpoint: gpt2)",
                            "--switch-at 5:attn.out=fp32 (checkpoint: 4:attn.out=fp32)",
                            "--val-every 0 (checkpoint: 3)"};
    for (size_t i = 0; i < sizeof listed / sizeof listed[0]; i++)
        if (!strstr(out, listed[i])) fail_msg("'%s' not listed: %s", listed[i], out);
    assert_null(strchr(strchr(out, '\n') + 1, '\n'));
    snprintf(args, sizeof args, "--resume %s --set mlp.up@1=bf16 --quiet", ckpt);
    train_expect(args, 2, out, sizeof out);
    assert_non_null(strstr(out, "--plan/--set: slot mlp.up@1 bf16:fused (checkpoint: fp32:fused)"));
    /* other data: refused, naming --data; so is the original file once its bytes changed */
    snprintf(args, sizeof args, "--resume %s --data %s --quiet", ckpt, other);
    train_expect(args, 2, out, sizeof out);
    assert_non_null(strstr(out, "--data"));
    write_text(text, 20000, seed + 2);
    snprintf(args, sizeof args, "--resume %s --quiet", ckpt);
    train_expect(args, 2, out, sizeof out);
    if (!strstr(out, "--data") || !strstr(out, "other tokens")) fail_msg("%s", out);
}

/* ---- impossible headers ----------------------------------------------------------------------- */

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    *n = (size_t)ftell(fp);
    rewind(fp);
    unsigned char *buf = malloc(*n);
    assert_int_equal(fread(buf, 1, *n, fp), *n);
    fclose(fp);
    return buf;
}

/* Writes buf with its checksum recomputed: a file only its header's sense can reject. */
static void write_with_checksum(const char *path, unsigned char *buf, size_t n)
{
    uint64_t h = ttrain_fnv1a(TTRAIN_FNV_OFFSET, buf, n - 8);
    memcpy(buf + n - 8, &h, 8);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(buf, 1, n, fp), n);
    fclose(fp);
}

/* Offset of the i64 steps done: after the fixed model fields (64 bytes) and three strings. */
static size_t steps_done_offset(const unsigned char *buf)
{
    size_t off = 64;
    for (int i = 0; i < 3; i++) {
        uint32_t len;
        memcpy(&len, buf + off, 4);
        off += 4 + len;
    }
    return off;
}

/* Replaces the first `from` in the settings JSON by `to` (same length). */
static void patch_settings(unsigned char *buf, size_t n, const char *from, const char *to)
{
    assert_int_equal(strlen(from), strlen(to));
    unsigned char *p = memmem(buf, n, from, strlen(from));
    if (!p) fail_msg("no '%s' in the checkpoint", from);
    memcpy(p, to, strlen(to));
}

/* A checkpoint with a valid checksum but an impossible header is refused
 * like a corrupt one: status 2 and one line naming the field, never a crash
 * (heads 0 was a SIGFPE, steps done -5 an out-of-bounds write, -1e9 a
 * SIGSEGV, a million layers or a negative width an allocation attempt). */
static void test_impossible_headers(void **state)
{
    (void)state;
    TEST_REQUIRE_BIN();
    static char out[65536];
    char args[512], bad[160];
    snprintf(bad, sizeof bad, "%s/bad.ckpt", dir);
    snprintf(args, sizeof args, "--width 32 --heads 2 --seq 16 --batch 2 --steps 4 --stop-after 2 --ckpt %s --quiet", ckpt);
    train_expect(args, 0, out, sizeof out);
    size_t n;
    unsigned char *orig = slurp(ckpt, &n), *buf = malloc(n);
    size_t steps_at = steps_done_offset(orig);
    struct {
        size_t offset;      /* 0: patch the settings text instead */
        int64_t value;
        int bytes;          /* 4 or 8 */
        double real;        /* bytes 8 with value 0: a double */
        const char *from, *to;
        const char *says;
    } cases[] = {
        {24, 0, 4, 0, NULL, NULL, "model sizes must be positive"},                 /* heads 0 */
        {16, 1000000, 4, 0, NULL, NULL, "past their maximum"},                       /* layers */
        {20, -64, 4, 0, NULL, NULL, "model sizes must be positive"},                 /* width */
        {24, 3, 4, 0, NULL, NULL, "width 32 is not divisible by heads 3"},
        {12, 7, 4, 0, NULL, NULL, "unknown model family 7"},
        {36, 5, 4, 0, NULL, NULL, "norm_gain 5"},
        {40, 0, 8, NAN, NULL, NULL, "softcap"},
        {56, 0, 8, -1.0, NULL, NULL, "norm eps"},
        {8, 1, 4, 0, NULL, NULL, "format version 1"},
        {8, 3, 4, 0, NULL, NULL, "has version 3"},
        {steps_at, -5, 8, 0, NULL, NULL, "steps done -5 outside 0..4"},
        {steps_at, -1000000000, 8, 0, NULL, NULL, "steps done -1000000000"},
        {steps_at, 5, 8, 0, NULL, NULL, "steps done 5 outside 0..4"},
        {steps_at + 8, 0, 8, -1.0, NULL, NULL, "loss scale -1"},
        {steps_at + 16, 9, 8, 0, NULL, NULL, "9 clean steps"},
        {0, 0, 0, 0, "\"batch\":2,", "\"batch\":0,", "--batch 0 is outside 1..1048576"},
        {0, 0, 0, 0, "\"seq\":16,", "\"seq\":99,", "sequence length 99 exceeds the model's context 16"},
        {0, 0, 0, 0, "\"beta1\":0.9", "\"beta1\":1.0", "--beta1 1 is outside [0, 1)"},
        {0, 0, 0, 0, "\"steps\":4,", "\"steps\":0,", "--steps 0 is outside"},
        {0, 0, 0, 0, "\"schedule\":\"cosine\"", "\"schedule\":\"cosinx\"", "\"schedule\" is missing or malformed"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memcpy(buf, orig, n);
        if (cases[i].from) patch_settings(buf, n, cases[i].from, cases[i].to);
        else if (cases[i].bytes == 4) {
            int32_t v = (int32_t)cases[i].value;
            memcpy(buf + cases[i].offset, &v, 4);
        } else if (cases[i].value == 0) memcpy(buf + cases[i].offset, &cases[i].real, 8);
        else memcpy(buf + cases[i].offset, &cases[i].value, 8);
        write_with_checksum(bad, buf, n);
        snprintf(args, sizeof args, "--resume %s --quiet", bad);
        int st = test_run_cli("train", args, out, sizeof out);
        if (st != 2 || !strstr(out, cases[i].says) || !strstr(out, bad) || strchr(out, '\n') != strrchr(out, '\n'))
            fail_msg("case %zu (%s): status %d, output: %s", i, cases[i].says, st, out);
    }
    /* twin: the same file rewritten with its checksum but nothing patched resumes */
    memcpy(buf, orig, n);
    write_with_checksum(bad, buf, n);
    snprintf(args, sizeof args, "--resume %s --quiet", bad);
    train_expect(args, 0, out, sizeof out);
    free(orig);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resume_bit_identical),
        cmocka_unit_test(test_resume_twin_and_corruption),
        cmocka_unit_test(test_atomic_write),
        cmocka_unit_test(test_resume_cli),
        cmocka_unit_test(test_impossible_headers),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
