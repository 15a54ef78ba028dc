/* cli/output.h — what every command shares: strict argument parsing, one-line
 * errors with exit status 2, result files that appear whole or not at all,
 * and the JSON Lines header record. */
#ifndef ULPSCOPE_CLI_OUTPUT_H
#define ULPSCOPE_CLI_OUTPUT_H

#include <stdbool.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ULPSCOPE_VERSION "0.1.0"
#define CLI_EXIT_USAGE 2 /* bad input: unknown name, malformed number, wrong shape */

/* Print "ulpscope CMD: error: ..." on stderr; returns CLI_EXIT_USAGE. */
int cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Whole-string numeric parsing: trailing junk, empty strings, overflow and NaN
 * are rejected (returns -1). */
int cli_parse_long(const char *s, long *out);
int cli_parse_double(const char *s, double *out);

/* A result file written to PATH.tmp.PID and renamed over PATH on commit, so a
 * failed or interrupted run leaves nothing half-written. */
typedef struct {
    FILE *fp;
    char path[4096];
    char tmp_path[4160];
} cli_outfile;

/* Opens the temporary file; "-" means stdout (commit and abort then do
 * nothing).  Returns 0, or -1 with a message on stderr. */
int cli_outfile_open(cli_outfile *o, const char *cmd, const char *path);
/* Flushes, closes and renames; returns 0 or -1 (and removes the temp file). */
int cli_outfile_commit(cli_outfile *o, const char *cmd);
void cli_outfile_abort(cli_outfile *o);

/* The header record every JSON Lines result file starts with:
 * {"record":"header","tool":TOOL,"version":...,"git":...,"host":...,
 *  "time":...,EXTRA}  where EXTRA is a ready JSON fragment (keys and values,
 * no braces) or NULL. */
void cli_json_header(FILE *fp, const char *tool, const char *extra_json);
/* Writes a JSON string literal with escapes. */
void cli_json_string(FILE *fp, const char *s);
/* Writes a double as JSON: %.17g, with NaN/inf as the strings "nan", "inf",
 * "-inf" (JSON has no literals for them; readers map them back). */
void cli_json_double(FILE *fp, double x);

#ifdef __cplusplus
}
#endif
#endif
