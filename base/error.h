/* base/error.h — one-line errors for bad input.  Every command reports bad
 * input (an unknown name, a malformed number, an unusable output path) as one
 * line on stderr and exits with BASE_EXIT_USAGE; a failure while running
 * exits with 1. */
#ifndef ULPSCOPE_BASE_ERROR_H
#define ULPSCOPE_BASE_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

#define BASE_EXIT_USAGE 2 /* bad input: unknown name, malformed number, wrong shape, bad output path */

/* Prints "ulpscope CMD: error: ..." and a newline on stderr; returns
 * BASE_EXIT_USAGE so that a command can `return base_error(...)`. */
int base_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif
#endif
