/* cli/accum_args.c — see accum_args.h. */
#include "cli/accum_args.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/parse.h"

int accum_classic_pairs(accum_pair *out)
{
    static const accum_pair classic[] = {
        {PREC_FP32, PREC_FP32}, {PREC_FP16, PREC_FP16}, {PREC_BF16, PREC_BF16},
        {PREC_FP32, PREC_FP16}, {PREC_FP32, PREC_BF16}, {PREC_E4M3, PREC_E4M3},
        {PREC_E5M2, PREC_E5M2}, {PREC_FP32, PREC_E4M3}, {PREC_FP32, PREC_E5M2},
    };
    int n = (int)(sizeof classic / sizeof classic[0]);
    memcpy(out, classic, sizeof classic);
    return n;
}

int accum_log_spaced(size_t lo, size_t hi, int points, size_t *out, int cap)
{
    int count = 0;
    for (int i = 0; i < points && count < cap; i++) {
        double t = points == 1 ? 0.0 : (double)i / (points - 1);
        size_t v = (size_t)llround(exp(log((double)lo) + t * (log((double)hi) - log((double)lo))));
        if (v < lo) v = lo;
        if (v > hi) v = hi;
        if (count == 0 || out[count - 1] != v) out[count++] = v;
    }
    return count;
}

#define FAIL(...)                                   \
    do {                                            \
        snprintf(err, err_len, __VA_ARGS__);        \
        return -1;                                  \
    } while (0)

/* Splits a comma list in place; returns the count, -1 when over cap, -2
 * when an item is empty ("10,,20", "fp32,"): a typo, not a shorter list. */
static int split_list(char *s, char **items, int cap)
{
    int n = 0;
    for (char *item = s;; item++) {
        char *comma = strchr(item, ',');
        if (comma) *comma = 0;
        if (!*item) return -2;
        if (n == cap) return -1;
        items[n++] = item;
        if (!comma) return n;
        item = comma;
    }
}

static int parse_n(const char *s, size_t *out, char *err, size_t err_len, const char *opt)
{
    long v;
    if (base_parse_long(s, &v)) FAIL("%s: malformed number '%s' (expected a positive integer)", opt, s);
    if (v <= 0) FAIL("%s: must be a positive integer, got '%s'", opt, s);
    if (v > ACCUM_N_LIMIT) FAIL("%s: %s is above the limit %d", opt, s, ACCUM_N_LIMIT);
    *out = (size_t)v;
    return 0;
}

static int parse_format(const char *s, prec_format *out, char *err, size_t err_len, const char *opt)
{
    if (prec_format_parse(s, out)) FAIL("%s: unknown format '%s' (accepted: %s)", opt, s, prec_format_names());
    return 0;
}

int accum_parse_args(int argc, char **argv, accum_options *o, char *err, size_t err_len)
{
    memset(o, 0, sizeof *o);
    o->classic = true;
    o->x = NAN;
    o->block = 32;
    o->seed = 1;
    o->fail_prob = 1e-6;
    size_t n_min = 0, n_max = 0;
    long points = 0;
    prec_format accs[ACCUM_MAX_LIST], adds[ACCUM_MAX_LIST];
    int n_acc = 0, n_add = 0;
    unsigned seen = 0; /* options given so far, by their index in known[] */
    char buf[4096];

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            o->help = true;
            return 0;
        }
        if (strncmp(arg, "--", 2) != 0) FAIL("unexpected argument '%s' (see ulpscope accum --help)", arg);
        /* --opt VALUE or --opt=VALUE */
        const char *eq = strchr(arg, '=');
        char name[64];
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        if (name_len >= sizeof name) FAIL("unknown option '%s' (see ulpscope accum --help)", arg);
        memcpy(name, arg, name_len);
        name[name_len] = 0;
        static const char *const known[] = {"--n", "--n-min", "--n-max", "--points", "--data", "--x",
                                            "--algo", "--round", "--acc", "--addend", "--pairs",
                                            "--block", "--seed", "--fail-prob", "--json"};
        int option = -1;
        for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
            if (strcmp(name, known[k]) == 0) option = (int)k;
        if (option < 0)
            FAIL("unknown option '%s' (options: --n --n-min --n-max --points --data --x --algo --round --acc "
                 "--addend --pairs --block --seed --fail-prob --json --help)", name);
        if (seen & (1u << option)) FAIL("%s given twice (give it once, with a comma-separated list)", name);
        seen |= 1u << option;
        /* a following option is not a value: "--n --json f" forgot the n */
        const char *val = eq ? eq + 1 : (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0 ? argv[++i] : NULL);
        if (!val) FAIL("%s needs a value", name);
        if (strlen(val) >= sizeof buf) FAIL("%s: value too long", name);
        strcpy(buf, val);
        char *items[ACCUM_MAX_LIST];
        int count = 0;
        if (strcmp(name, "--json") != 0 && strcmp(name, "--x") != 0) {
            count = split_list(buf, items, ACCUM_MAX_LIST);
            if (count == -1) FAIL("%s: more than %d values", name, ACCUM_MAX_LIST);
            if (count < 0) FAIL(*val ? "%s: empty item in '%s'" : "%s: empty value%s", name, val);
        }
        if (strcmp(name, "--json") == 0) {
            if (!*val) FAIL("--json: empty file name");
            o->json = val;
            continue;
        }
        if (strcmp(name, "--seed") == 0) {
            if (count != 1 || base_parse_seed(items[0], &o->seed))
                FAIL("--seed: malformed seed '%s' (expected " BASE_SEED_SYNTAX ")", val);
            continue;
        }
        o->classic = false;
        if (strcmp(name, "--n") == 0) {
            for (int k = 0; k < count; k++)
                if (parse_n(items[k], &o->ns[k], err, err_len, name)) return -1;
            o->n_ns = count;
        } else if (strcmp(name, "--n-min") == 0 || strcmp(name, "--n-max") == 0) {
            if (count != 1) FAIL("%s takes one number, got '%s'", name, val);
            if (parse_n(items[0], strcmp(name, "--n-min") == 0 ? &n_min : &n_max, err, err_len, name)) return -1;
        } else if (strcmp(name, "--points") == 0) {
            if (count != 1 || base_parse_long(items[0], &points))
                FAIL("--points: malformed number '%s' (expected an integer from 1 to %d)", val, ACCUM_MAX_LIST);
            if (points < 1 || points > ACCUM_MAX_LIST)
                FAIL("--points: %s is out of range (accepted: 1 to %d)", val, ACCUM_MAX_LIST);
        } else if (strcmp(name, "--data") == 0) {
            if (count == 1 && strcasecmp(items[0], "all") == 0) {
                for (int k = 0; k < ACCUM_NDATA; k++) o->data[k] = (accum_data)k;
                o->n_data = ACCUM_NDATA;
                continue;
            }
            if (count > ACCUM_NDATA) FAIL("--data: too many values");
            for (int k = 0; k < count; k++)
                if (accum_data_parse(items[k], &o->data[k]))
                    FAIL("--data: unknown data '%s' (accepted: all, %s)", items[k], accum_data_names());
            o->n_data = count;
        } else if (strcmp(name, "--x") == 0) {
            if (base_parse_double(val, &o->x) || !isfinite(o->x))
                FAIL("--x: malformed number '%s' (expected a finite number)", val);
        } else if (strcmp(name, "--algo") == 0) {
            if (count == 1 && strcasecmp(items[0], "all") == 0) {
                for (int a = 0; a < PREC_SUM_NALGOS; a++) o->algos[a] = (prec_sum_algo)a;
                o->n_algos = PREC_SUM_NALGOS;
            } else {
                if (count > PREC_SUM_NALGOS) FAIL("--algo: too many values");
                for (int k = 0; k < count; k++)
                    if (prec_sum_algo_parse(items[k], &o->algos[k]))
                        FAIL("--algo: unknown algorithm '%s' (accepted: all, %s)", items[k], prec_sum_algo_names());
                o->n_algos = count;
            }
        } else if (strcmp(name, "--round") == 0) {
            if (count == 1 && strcasecmp(items[0], "all") == 0) {
                for (int m = 0; m < PREC_NROUNDS; m++) o->rounds[m] = (prec_round_mode)m;
                o->n_rounds = PREC_NROUNDS;
            } else {
                if (count > PREC_NROUNDS) FAIL("--round: too many values");
                for (int k = 0; k < count; k++)
                    if (prec_round_mode_parse(items[k], &o->rounds[k]))
                        FAIL("--round: unknown rounding mode '%s' (accepted: all, %s)", items[k],
                             prec_round_mode_names());
                o->n_rounds = count;
            }
        } else if (strcmp(name, "--acc") == 0 || strcmp(name, "--addend") == 0) {
            bool is_acc = strcmp(name, "--acc") == 0;
            for (int k = 0; k < count; k++)
                if (parse_format(items[k], is_acc ? &accs[k] : &adds[k], err, err_len, name)) return -1;
            *(is_acc ? &n_acc : &n_add) = count;
        } else if (strcmp(name, "--pairs") == 0) {
            for (int k = 0; k < count; k++) {
                char *slash = strchr(items[k], '/');
                if (!slash) FAIL("--pairs: '%s' is not ACC/ADDEND (e.g. fp32/bf16)", items[k]);
                *slash = 0;
                if (parse_format(items[k], &o->pairs[k].acc, err, err_len, name)) return -1;
                if (parse_format(slash + 1, &o->pairs[k].addend, err, err_len, name)) return -1;
            }
            o->n_pairs = count;
        } else if (strcmp(name, "--block") == 0) {
            if (count != 1) FAIL("--block takes one number, got '%s'", val);
            if (parse_n(items[0], &o->block, err, err_len, name)) return -1;
        } else if (strcmp(name, "--fail-prob") == 0) {
            if (count != 1 || base_parse_double(items[0], &o->fail_prob))
                FAIL("--fail-prob: malformed number '%s' (expected a probability in (0, 1))", val);
            if (!(o->fail_prob > 0 && o->fail_prob < 1))
                FAIL("--fail-prob: %s is not in (0, 1)", val);
        }
    }

    /* formats: --pairs, or --acc x --addend (one list alone pairs with itself,
     * an addend list alone accumulates in fp32), or the classic pairs */
    if (n_acc || n_add) {
        if (o->n_pairs) FAIL("--pairs cannot be combined with --acc/--addend");
        int total = 0;
        if (n_acc && n_add) {
            for (int a = 0; a < n_acc; a++)
                for (int b = 0; b < n_add; b++) {
                    if (total == ACCUM_MAX_LIST) FAIL("--acc x --addend: more than %d pairs", ACCUM_MAX_LIST);
                    o->pairs[total++] = (accum_pair){accs[a], adds[b]};
                }
        } else if (n_acc) {
            for (int a = 0; a < n_acc; a++) o->pairs[total++] = (accum_pair){accs[a], accs[a]};
        } else {
            for (int b = 0; b < n_add; b++) o->pairs[total++] = (accum_pair){PREC_FP32, adds[b]};
        }
        o->n_pairs = total;
    }
    if (o->n_pairs == 0) o->n_pairs = accum_classic_pairs(o->pairs);

    /* n: a list, or a log-spaced sweep (defaults 10 .. 10^5, 9 points) */
    if (o->n_ns && (n_min || n_max || points)) FAIL("--n cannot be combined with --n-min/--n-max/--points");
    if (!o->n_ns) {
        if (!n_min) n_min = 10;
        if (!n_max) n_max = 100000;
        if (!points) points = 9;
        if (n_min > n_max) FAIL("--n-min %zu is above --n-max %zu", n_min, n_max);
        o->n_ns = accum_log_spaced(n_min, n_max, (int)points, o->ns, ACCUM_MAX_LIST);
    }
    if (!o->n_data) {
        o->data[0] = ACCUM_CONSTANT;
        o->n_data = 1;
    }
    if (!o->n_algos) {
        o->algos[0] = PREC_SUM_RECURSIVE;
        o->n_algos = 1;
    }
    if (!o->n_rounds) {
        o->rounds[0] = PREC_RNE;
        o->n_rounds = 1;
    }
    return 0;
}
