/* cli/accum_args.h — the options of `ulpscope accum`: what they select from
 * the accumulation study (studies/accum.h), parsed here, outside the study,
 * so that tests can reach the parser. */
#ifndef ULPSCOPE_CLI_ACCUM_ARGS_H
#define ULPSCOPE_CLI_ACCUM_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "studies/accum.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ACCUM_MAX_LIST 64

typedef struct {
    prec_format acc, addend;
} accum_pair;

typedef struct {
    bool classic;                       /* no sweep option given: the classic table */
    bool help;
    size_t ns[ACCUM_MAX_LIST];
    int n_ns;
    accum_data data[ACCUM_NDATA];
    int n_data;
    double x;                           /* NAN: per data kind (0.01 constant, 1 otherwise) */
    prec_sum_algo algos[PREC_SUM_NALGOS];
    int n_algos;
    prec_round_mode rounds[PREC_NROUNDS];
    int n_rounds;
    accum_pair pairs[ACCUM_MAX_LIST];
    int n_pairs;
    size_t block;
    uint64_t seed;
    double fail_prob;
    const char *json;                   /* NULL, a path, or "-" */
} accum_options;

/* The classic pairs: fp32/fp32 fp16/fp16 bf16/bf16 fp32/fp16 fp32/bf16
 * e4m3/e4m3 e5m2/e5m2 fp32/e4m3 fp32/e5m2 (accumulator/addend). */
int accum_classic_pairs(accum_pair *out);

/* Parses argv[1..argc) (argv[0] is the command name).  Returns 0 and fills o,
 * or -1 with a one-line message in err naming the bad value and the accepted
 * ones.  Largest n accepted: ACCUM_N_LIMIT. */
#define ACCUM_N_LIMIT 100000000
int accum_parse_args(int argc, char **argv, accum_options *o, char *err, size_t err_len);

/* Log-spaced integers from lo to hi (points >= 2), duplicates dropped;
 * returns how many were written (at most cap). */
int accum_log_spaced(size_t lo, size_t hi, int points, size_t *out, int cap);

#ifdef __cplusplus
}
#endif
#endif
