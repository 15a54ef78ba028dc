/* tests/test_options.c — the table-driven option parser (cli/options.h) and
 * the training options table (cli/train_options.h) as a command that runs
 * training arms would use them: the training table plus its own. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/parse.h"
#include "cli/options.h"
#include "cli/train_options.h"
#include "test_util.h"

static void test_seed_syntax(void **state)
{
    (void)state;
    uint64_t v;
    static const struct {
        const char *s;
        uint64_t v;
    } good[] = {{"0", 0},
                {"1337", 1337},
                {"0x10", 16},
                {"0X1f", 31},
                {"18446744073709551615", UINT64_MAX},
                {"0xffffffffffffffff", UINT64_MAX}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        if (base_parse_seed(good[i].s, &v)) fail_msg("'%s' refused", good[i].s);
        assert_true(v == good[i].v);
    }
    const char *bad[] = {"", "-1", "+1", "010", "00", "0x", "0x1g", "0x10000000000000000", "18446744073709551616",
                         "1e3", " 1", "1 ", "0o7", "1.0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (!base_parse_seed(bad[i], &v)) fail_msg("'%s' accepted", bad[i]);
}

/* A command's own options next to the training ones. */
typedef struct {
    copt_list arms;
    int runs;
    const char *results;
    double margin;
    int parity; /* set by a handler: "even" or "odd" */
} arm_options;

static int parse_parity(const char *value, void *field, char *err, size_t errlen)
{
    if (strcmp(value, "even") && strcmp(value, "odd")) {
        snprintf(err, errlen, "unknown parity '%s' (even, odd)", value);
        return -1;
    }
    *(int *)field = strcmp(value, "odd") == 0;
    return 0;
}

#define F(field) offsetof(arm_options, field)
static const copt arm_opts[] = {
    {"--arm", COPT_LIST, F(arms), 0, 0, "compare", "NAME=OVERRIDES", "", NULL, 0},
    {"--runs", COPT_INT, F(runs), 1, 1000, "compare", "N", "", NULL, 0},
    {"--results", COPT_STRING, F(results), 0, 0, "compare", "DIR", "", NULL, 0},
    {"--margin", COPT_DOUBLE, F(margin), 0, 1, "compare", "X", "", NULL, COPT_MAX_OPEN},
    {"--parity", COPT_CALL, F(parity), 0, 0, "compare", "even|odd", "", parse_parity, 0},
};
#undef F

/* argv from a string of words separated by single spaces */
static int split(char *line, char **argv, int max)
{
    int n = 0;
    argv[n++] = "cmd";
    for (char *tok = strtok(line, " "); tok && n < max; tok = strtok(NULL, " ")) argv[n++] = tok;
    return n;
}

static int parse(const char *line_in, train_options *t, arm_options *a)
{
    static char line[1024];
    char *argv[64];
    snprintf(line, sizeof line, "%s", line_in);
    int argc = split(line, argv, 64);
    train_options_defaults(t);
    memset(a, 0, sizeof *a);
    a->runs = 8;
    copt_table tables[] = {train_options_table(t), {arm_opts, (int)(sizeof arm_opts / sizeof arm_opts[0]), a}};
    int st = copt_parse("compare", argc, argv, tables, 2, &t->seen);
    return st ? st : train_options_finish(t, "compare");
}

static void test_two_tables(void **state)
{
    (void)state;
    train_options *t = malloc(sizeof *t);
    arm_options a;
    assert_non_null(t);
    assert_int_equal(parse("--model modern --depth 3 --set mlp.up@2=fp32 --arm x=lm_head=fp32 --arm y=mlp.up=fp8 "
                           "--runs 16 --seed 0x2a --margin 0.25 --parity odd --steps 40 --batch 8",
                           t, &a),
                     0);
    assert_int_equal(t->cfg.model.kind, TMODEL_MODERN);
    assert_int_equal(t->cfg.model.n_layer, 3);
    assert_int_equal(tplan_choice_at(&t->cfg.plan, TSLOT_MLP_UP, 2)->path, KPATH_FP32);
    assert_int_equal(tplan_choice_at(&t->cfg.plan, TSLOT_MLP_UP, 1)->path, KPATH_BF16);
    assert_true(t->cfg.seed == 42);
    assert_int_equal(t->cfg.steps, 40);
    assert_int_equal(t->cfg.batch, 8);
    assert_int_equal(a.arms.n, 2);
    assert_string_equal(a.arms.items[1], "y=mlp.up=fp8");
    assert_int_equal(a.runs, 16);
    assert_true(a.margin == 0.25);
    assert_int_equal(a.parity, 1);
    assert_int_equal(copt_given(&t->seen, "--arm"), 2);
    assert_int_equal(copt_given(&t->seen, "--lr"), 0);
    /* defaults where nothing was given */
    assert_true(t->cfg.lr == 1e-3);
    assert_int_equal(t->cfg.accum, 1);
    /* errors from either table: status 2 */
    const char *bad[] = {"--runs 0",        "--runs 1001",     "--runs 4294967297", "--margin 1",
                         "--margin nan",    "--parity three",  "--results a --results b",
                         "--batch 2 --batch 2", "--bogus",     "--runs",            "--seed 010"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (parse(bad[i], t, &a) != BASE_EXIT_USAGE) fail_msg("'%s' accepted", bad[i]);
    /* twin: the same options once each, in range, are accepted */
    assert_int_equal(parse("--runs 1000 --margin 0.99 --parity even --results a --batch 2", t, &a), 0);
    free(t);
}

static void test_help(void **state)
{
    (void)state;
    train_options *t = malloc(sizeof *t);
    arm_options a;
    assert_non_null(t);
    train_options_defaults(t);
    copt_table tables[] = {train_options_table(t), {arm_opts, (int)(sizeof arm_opts / sizeof arm_opts[0]), &a}};
    FILE *fp = tmpfile();
    assert_non_null(fp);
    copt_help(fp, tables, 2);
    long n = ftell(fp);
    char *text = calloc((size_t)n + 1, 1);
    rewind(fp);
    assert_int_equal(fread(text, 1, (size_t)n, fp), (size_t)n);
    fclose(fp);
    /* every option of both tables, under its group */
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < tables[k].n; i++)
            if (!strstr(text, tables[k].opts[i].name)) fail_msg("help lacks %s", tables[k].opts[i].name);
    assert_true(strncmp(text, "model:   --model gpt2|modern (gpt2)", 35) == 0); /* the first group first */
    assert_non_null(strstr(text, "\ncompare: --arm NAME=OVERRIDES"));
    free(text);
    free(t);
}

/* Two rows with one name (bisect's own --schedule once shadowed the training
 * --schedule, so `bisect --schedule 4,8` reached the lr-schedule parser) are
 * a defect of the tables: refused on every call, whatever argv holds. */
static void test_duplicate_names(void **state)
{
    (void)state;
    train_options *t = malloc(sizeof *t);
    arm_options a;
    assert_non_null(t);
    train_options_defaults(t);
    memset(&a, 0, sizeof a);
    static const copt clash_with_training[] = {
        {"--runs", COPT_INT, offsetof(arm_options, runs), 1, 1000, "compare", "N", "", NULL, 0},
        {"--schedule", COPT_STRING, offsetof(arm_options, results), 0, 0, "compare", "N1,N2", "", NULL, 0},
    };
    static const copt clash_within[] = {
        {"--runs", COPT_INT, offsetof(arm_options, runs), 1, 1000, "compare", "N", "", NULL, 0},
        {"--margin", COPT_DOUBLE, offsetof(arm_options, margin), 0, 1, "compare", "X", "", NULL, 0},
        {"--runs", COPT_INT, offsetof(arm_options, runs), 1, 10, "compare", "N", "", NULL, 0},
    };
    char *no_args[] = {"cmd"};
    char *help[] = {"cmd", "--help"};
    char *schedule[] = {"cmd", "--schedule", "4,8"};
    copt_table across[] = {train_options_table(t), {clash_with_training, 2, &a}};
    copt_table within[] = {{clash_within, 3, &a}};
    assert_int_equal(copt_parse("cmd", 1, no_args, across, 2, &t->seen), COPT_TABLE_DEFECT);
    assert_int_equal(copt_parse("cmd", 2, help, across, 2, &t->seen), COPT_TABLE_DEFECT);
    assert_int_equal(copt_parse("cmd", 3, schedule, across, 2, &t->seen), COPT_TABLE_DEFECT);
    assert_int_equal(copt_parse("cmd", 1, no_args, within, 1, &t->seen), COPT_TABLE_DEFECT);
    /* twin: the same tables without the second row of the name parse */
    copt_table across_ok[] = {train_options_table(t), {clash_with_training, 1, &a}};
    copt_table within_ok[] = {{clash_within, 2, &a}};
    assert_int_equal(copt_parse("cmd", 3, schedule, across_ok, 2, &t->seen), 0);
    assert_string_equal(t->schedule, "4,8"); /* the training table's row took it */
    assert_int_equal(copt_parse("cmd", 1, no_args, within_ok, 1, &t->seen), 0);
    /* the tables the tests above use */
    copt_table tables[] = {train_options_table(t), {arm_opts, (int)(sizeof arm_opts / sizeof arm_opts[0]), &a}};
    assert_int_equal(copt_parse("cmd", 1, no_args, tables, 2, &t->seen), 0);
    free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seed_syntax),
        cmocka_unit_test(test_two_tables),
        cmocka_unit_test(test_help),
        cmocka_unit_test(test_duplicate_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
