/* base/progress.h — a progress line on stderr for long runs: rows done, time
 * elapsed and left.  Shown when stderr is a terminal (rewritten in place), or
 * once a run has taken 10 s (a line every 10 s, for logs); at most one
 * update a second either way. */
#ifndef ULPSCOPE_BASE_PROGRESS_H
#define ULPSCOPE_BASE_PROGRESS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *cmd;
    const char *unit;   /* "rows", "cases" */
    long total, done;
    double t0, last;
    int tty, shown;
} base_progress;

/* total <= 0: not known in advance (then no time left is shown). */
void base_progress_start(base_progress *p, const char *cmd, const char *unit, long total);
void base_progress_step(base_progress *p);
/* Ends the line (a terminal's in-place line gets its newline). */
void base_progress_end(base_progress *p);

#ifdef __cplusplus
}
#endif
#endif
