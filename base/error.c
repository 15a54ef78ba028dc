/* base/error.c — see error.h. */
#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>

int base_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "ulpscope %s: error: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return BASE_EXIT_USAGE;
}
