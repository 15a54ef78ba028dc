/* base/outfile.h — result files that never destroy what is not theirs.
 *
 * What PATH is decides how it is written:
 *   "-"                      stdout (so is a path naming the file stdout
 *                            already writes to, such as /dev/stdout);
 *   a regular file, or a     written to TARGET.tmp.PID beside the target,
 *   path that does not exist flushed, fsync'ed and renamed over TARGET on
 *                            commit: the file appears whole or not at all,
 *                            and the old one survives any failure;
 *   a symbolic link          followed to its target (the link itself is
 *                            never replaced; the target is replaced as
 *                            above, in its own directory);
 *   a character device, a    opened and written directly (a terminal,
 *   FIFO, a socket           /dev/null, /dev/full, a pipe's reader);
 *   a directory, a block     refused.
 *   device
 * Every message names PATH as the user gave it and the reason (strerror:
 * a full disk says "No space left on device"), never the temporary name, and
 * no temporary file is left behind on any failure. */
#ifndef ULPSCOPE_BASE_OUTFILE_H
#define ULPSCOPE_BASE_OUTFILE_H

#include <stdbool.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    BASE_OUT_STDOUT = 0, /* "-" or stdout's own file: writes go to stdout */
    BASE_OUT_DIRECT,     /* a device, FIFO or socket, written in place */
    BASE_OUT_REPLACE,    /* a regular (or new) file, replaced on commit */
} base_outfile_kind;

typedef struct {
    FILE *fp;
    base_outfile_kind kind;
    char path[4096];     /* as the user gave it: every message names this */
    char target[4096];   /* BASE_OUT_REPLACE: the file renamed over (links followed) */
    char tmp_path[4160]; /* BASE_OUT_REPLACE: TARGET.tmp.PID */
} base_outfile;

/* The pre-flight check, to run before any work: 0 when PATH can be written
 * as above; otherwise prints "ulpscope CMD: error: cannot write PATH: REASON"
 * (a directory, a missing directory, no permission, a read-only file system)
 * and returns BASE_EXIT_USAGE.  Creates nothing that outlives the call. */
int base_outfile_check(const char *cmd, const char *path);

/* true when PATH is "-" or names the file stdout writes to: a command then
 * keeps stdout pure (its human table goes to stderr or is left out). */
bool base_outfile_is_stdout(const char *path);

/* Opens PATH for writing (a temporary file for BASE_OUT_REPLACE).  Returns
 * 0, or -1 with the message printed (nothing is left behind). */
int base_outfile_open(base_outfile *o, const char *cmd, const char *path);
/* Flushes and closes; BASE_OUT_REPLACE also fsyncs and renames over the
 * target.  Returns 0, or -1 with the message printed (a write error, a full
 * disk), the temporary file removed and the old target untouched. */
int base_outfile_commit(base_outfile *o, const char *cmd);
/* Gives up: closes, removes the temporary file; the target is untouched. */
void base_outfile_abort(base_outfile *o);

#ifdef __cplusplus
}
#endif
#endif
