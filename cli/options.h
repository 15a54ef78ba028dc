/* cli/options.h — command-line options from tables.
 *
 * A command describes its options as rows {name, kind, field offset or
 * handler, range, help group, help} and hands argv and one or more tables
 * (for example the training options of cli/train_options.h plus its own) to
 * copt_parse.  The parser enforces what every command needs:
 *  - numbers parsed whole and range-checked before they reach a narrower
 *    field ("--batch 4294967297" is an error naming --batch and its range,
 *    never a silent 1);
 *  - an option given twice is refused unless its row says COPT_REPEATABLE;
 *  - a name defined twice across the tables (bisect's seed schedule once
 *    shadowed the training --schedule) is refused on every call;
 *  - seeds have one syntax: decimal or 0x hex, no sign, no octal;
 *  - errors are one line "ulpscope CMD: error: ..." and exit status 2.
 * What was given is recorded (copt_given), so that a command can refuse
 * options its mode ignores. */
#ifndef ULPSCOPE_CLI_OPTIONS_H
#define ULPSCOPE_CLI_OPTIONS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    COPT_FLAG,   /* no value: the int field becomes 1 */
    COPT_INT,    /* int field, integer in [min, max] */
    COPT_LONG,   /* long field, integer in [min, max] */
    COPT_DOUBLE, /* double field, finite, in [min, max] (max excluded with COPT_MAX_OPEN) */
    COPT_STRING, /* const char * field (points into argv) */
    COPT_SEED,   /* uint64_t field: decimal or 0x hex */
    COPT_LIST,   /* copt_list field: every occurrence appended (implies repeatable) */
    COPT_CALL    /* handler(value, field, err, errlen) parses the value */
} copt_kind;

#define COPT_REPEATABLE 1u /* may be given more than once (the last wins) */
#define COPT_MAX_OPEN 2u   /* the range excludes max: [min, max) */
#define COPT_HIDDEN 4u     /* not listed by copt_help: internal (a worker process's) or test-only */

#define COPT_LIST_MAX 64
typedef struct {
    const char *items[COPT_LIST_MAX];
    int n;
} copt_list;

typedef struct {
    const char *name;    /* "--batch" */
    copt_kind kind;
    size_t offset;       /* the field's offset in the table's target struct */
    double min, max;     /* numbers: the accepted range */
    const char *group;   /* help group: "model", "plan", ... */
    const char *arg;     /* the value in help: "B", "gpt2|modern" */
    const char *help;    /* short: "(4)", "micro-batch size" */
    int (*handler)(const char *value, void *field, char *err, size_t errlen); /* COPT_CALL */
    unsigned flags;
} copt;

typedef struct {
    const copt *opts;
    int n;
    void *target;        /* the struct the offsets point into */
} copt_table;

#define COPT_MAX_GIVEN 256
typedef struct {
    const copt *given[COPT_MAX_GIVEN]; /* every option given, in order */
    int n_given;
} copt_seen;

/* Parses argv[1..argc-1] against the tables.  Returns 0, or BASE_EXIT_USAGE
 * (2) after printing one line naming the problem (unknown option, missing
 * value, malformed or out-of-range number, repeated option), or
 * COPT_TABLE_DEFECT (1: not the user's input) when two rows of the tables
 * share a name, whatever argv holds. */
#define COPT_TABLE_DEFECT 1
int copt_parse(const char *cmd, int argc, char **argv, const copt_table *tables, int n_tables, copt_seen *seen);
/* How many times option `name` was given. */
int copt_given(const copt_seen *seen, const char *name);
/* The first of names[] (NULL-terminated) that was given, or NULL. */
const char *copt_first_given(const copt_seen *seen, const char *const *names);

/* The options grouped as their tables order the groups:
 * "group:   --name ARG help  --name ARG help ..." wrapped at 100 columns;
 * COPT_HIDDEN rows left out. */
void copt_help(FILE *fp, const copt_table *tables, int n_tables);

#ifdef __cplusplus
}
#endif
#endif
