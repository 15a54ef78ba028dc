/* trainer/errbuf.h — the trainer's error convention: a function that can
 * fail takes (char *err, size_t errlen), writes one line there and returns -1. */
#ifndef ULPSCOPE_TRAINER_ERRBUF_H
#define ULPSCOPE_TRAINER_ERRBUF_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Formats the message into err (when err is non-null and errlen > 0); returns -1
 * so callers can `return tfail(err, errlen, ...)`. */
int tfail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif

#endif
