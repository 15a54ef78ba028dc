/* base/parse.h — whole-string number parsing for options and input files.
 * Every parser rejects (returns -1) empty strings, leading blanks, trailing
 * junk, overflow and NaN; none writes *out on failure. */
#ifndef ULPSCOPE_BASE_PARSE_H
#define ULPSCOPE_BASE_PARSE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A decimal integer; 1e6-style integers are accepted too (sweeps use them). */
int base_parse_long(const char *s, long *out);
/* base_parse_long restricted to lo..hi (a value outside is -1, never wrapped). */
int base_parse_long_in(const char *s, long lo, long hi, long *out);
/* A plain decimal number (no hex, inf or nan). */
int base_parse_double(const char *s, double *out);
/* The one seed syntax of every command: decimal digits without leading
 * zeros, or 0x/0X and 1 to 16 hex digits; 0 .. 2^64-1.  No sign (a negative
 * seed is refused, not wrapped), nothing octal-looking ("010" is refused,
 * neither eight nor ten), no exponent. */
int base_parse_seed(const char *s, uint64_t *out);
#define BASE_SEED_SYNTAX "decimal without leading zeros or 0x hex, 0 to 2^64-1"

#ifdef __cplusplus
}
#endif
#endif
