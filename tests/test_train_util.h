/* tests/test_train_util.h — tiny training runs shared by the trainer tests. */
#ifndef ULPSCOPE_TESTS_TEST_TRAIN_UTIL_H
#define ULPSCOPE_TESTS_TEST_TRAIN_UTIL_H

#include <stdio.h>
#include <string.h>

#include "trainer/train.h"

/* A model small enough for CI: 2 layers, width 32, 2 heads, bytes, 32-token
 * windows, micro-batches of 2, on the embedded corpus. */
static inline void tiny_config(ttrain_config *c, tmodel_kind kind, const char *preset, unsigned long long seed)
{
    char err[512];
    ttrain_config_defaults(c);
    if (tmodel_config_init(&c->model, kind, 2, 32, 2, 256, 32, err, sizeof err)) fail_msg("%s", err);
    if (tplan_init(&c->plan, preset, kind, err, sizeof err)) fail_msg("%s", err);
    c->batch = 2;
    c->seq = 32;
    c->steps = 6;
    c->warmup = 2;
    c->val_batches = 1;
    c->seed = seed;
    c->lr = kind == TMODEL_MODERN ? 3e-3 : 1e-3;
}

static inline void tiny_set(ttrain_config *c, const char *overrides)
{
    char err[1024];
    if (tplan_set(&c->plan, overrides, err, sizeof err)) fail_msg("%s", err);
}

/* Runs and expects success. */
static inline void run_ok(const ttrain_config *c, ttrain_result *r)
{
    int st = ttrain_run(c, r);
    if (st) fail_msg("training failed (status %d): %s", st, r->error);
}

static inline int same_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

/* The "state_hash" of a log's final record (16 hex digits; fails without one). */
static inline void final_state_hash(const char *log, char out[32])
{
    FILE *fp = fopen(log, "r");
    if (!fp) fail_msg("no log %s", log);
    char line[16384];
    out[0] = '\0';
    while (fgets(line, sizeof line, fp)) {
        const char *h = strstr(line, "\"state_hash\":\"");
        if (strstr(line, "\"record\":\"final\"") && h) snprintf(out, 32, "%.16s", h + strlen("\"state_hash\":\""));
    }
    fclose(fp);
    if (strlen(out) != 16) fail_msg("no final state hash in %s", log);
}

#endif
