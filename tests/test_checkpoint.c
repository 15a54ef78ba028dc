/* tests/test_checkpoint.c — checkpoints: train N steps = train k, save,
 * load, train N-k, bit for bit (losses, gradient norms, every stored byte of
 * parameters and optimizer state), for each weight storage, both model
 * families and dynamic loss scaling; atomic writes; corrupt or mismatched
 * checkpoints rejected. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <dirent.h>
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
    assert_non_null(strstr(bad.error, "another model or plan"));
    ttrain_result_free(&bad);
    /* so is one whose plan differs in one layer only */
    other = c;
    other.resume_path = ckpt;
    tiny_set(&other, "mlp.up@1=fp8");
    assert_int_equal(ttrain_run(&other, &bad), 2);
    assert_non_null(strstr(bad.error, "another model or plan"));
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
    tmodel_config mc;
    char *json = NULL;
    tckpt_state st;
    char err[512];
    assert_int_equal(tckpt_peek(ckpt, &mc, &json, &st, err, sizeof err), 0);
    assert_non_null(json);
    free(json);
    assert_int_equal(st.steps_done, 3);
    assert_int_equal(mc.n_embd, 32);
    assert_int_equal(tckpt_peek("/nonexistent/x.ckpt", &mc, &json, &st, err, sizeof err), -1);
    assert_null(json);
    assert_non_null(strstr(err, "/nonexistent/x.ckpt"));
}

/* `train --resume` takes the model, plan and seed from the checkpoint: the
 * options that would set them are refused, not ignored. */
static void test_resume_cli(void **state)
{
    (void)state;
    TEST_REQUIRE_BIN();
    static char out[65536];
    char args[512];
    snprintf(args, sizeof args, "--steps 2 --width 32 --heads 2 --seq 16 --batch 2 --set mlp.up@1=fp32 --ckpt %s --quiet",
             ckpt);
    assert_int_equal(test_run_cli("train", args, out, sizeof out), 0);
    const char *bad[][2] = {{"--seed 5", "drop --seed"}, {"--depth 3", "drop --depth"}, {"--set mlp.up=fp8", "drop --set"},
                            {"--model modern", "drop --model"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "--steps 3 --seq 16 --batch 2 --resume %s %s --quiet", ckpt, bad[i][0]);
        int st = test_run_cli("train", args, out, sizeof out);
        if (st != 2 || !strstr(out, bad[i][1])) fail_msg("'%s': status %d, output: %s", bad[i][0], st, out);
        assert_null(strchr(strchr(out, '\n') + 1, '\n'));
    }
    /* twin: the same resume without them runs (its plan's per-layer choice read back) */
    snprintf(args, sizeof args, "--steps 3 --seq 16 --batch 2 --resume %s --quiet", ckpt);
    assert_int_equal(test_run_cli("train", args, out, sizeof out), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resume_bit_identical),
        cmocka_unit_test(test_resume_twin_and_corruption),
        cmocka_unit_test(test_atomic_write),
        cmocka_unit_test(test_resume_cli),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
