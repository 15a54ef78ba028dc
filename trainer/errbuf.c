/* trainer/errbuf.c — see errbuf.h. */
#include "trainer/errbuf.h"

#include <stdarg.h>
#include <stdio.h>

int tfail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && errlen) vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}
