/* base/parse.c — see parse.h. */
#include "base/parse.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Plain decimal only: digits, sign, point, exponent.  strtod alone would
 * also take leading blanks, hex ("0x10"), "inf" and "nan". */
static int plain_decimal(const char *s)
{
    if (!s || !*s) return 0;
    for (const char *c = s; *c; c++)
        if (!strchr("0123456789+-.eE", *c)) return 0;
    return 1;
}

int base_parse_long(const char *s, long *out)
{
    if (!plain_decimal(s)) return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end) {
        /* allow 1e6-style integers, which sweeps use */
        double d;
        if (base_parse_double(s, &d) || d != floor(d) || fabs(d) > 9.0e18) return -1;
        v = (long)d;
    }
    *out = v;
    return 0;
}

int base_parse_long_in(const char *s, long lo, long hi, long *out)
{
    long v;
    if (base_parse_long(s, &v) || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int base_parse_double(const char *s, double *out)
{
    if (!plain_decimal(s)) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno == ERANGE || *end || isnan(v)) return -1;
    *out = v;
    return 0;
}

int base_parse_seed(const char *s, uint64_t *out)
{
    if (!s) return -1;
    uint64_t v = 0;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        size_t n = strlen(s + 2);
        if (n == 0 || n > 16) return -1;
        for (const char *q = s + 2; *q; q++) {
            if (!isxdigit((unsigned char)*q)) return -1;
            v = v << 4 | (uint64_t)(isdigit((unsigned char)*q) ? *q - '0' : tolower((unsigned char)*q) - 'a' + 10);
        }
        *out = v;
        return 0;
    }
    if (!isdigit((unsigned char)s[0]) || (s[0] == '0' && s[1])) return -1; /* a sign, empty, or octal-looking */
    for (const char *q = s; *q; q++) {
        if (!isdigit((unsigned char)*q)) return -1;
        uint64_t d = (uint64_t)(*q - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = 10 * v + d;
    }
    *out = v;
    return 0;
}
