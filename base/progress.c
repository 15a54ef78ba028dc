/* base/progress.c — see progress.h. */
#include "base/progress.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void base_progress_start(base_progress *p, const char *cmd, const char *unit, long total)
{
    p->cmd = cmd;
    p->unit = unit;
    p->total = total;
    p->done = 0;
    p->t0 = p->last = now();
    p->tty = isatty(STDERR_FILENO);
    p->shown = 0;
}

void base_progress_step(base_progress *p)
{
    p->done++;
    double t = now(), el = t - p->t0;
    if (p->tty ? t - p->last < 1.0 : (el < 10.0 || t - p->last < 10.0)) return;
    if (p->total > 0 && p->done >= p->total) return; /* the run is about to print its end */
    p->last = t;
    p->shown = 1;
    if (p->total > 0) {
        double left = el / (double)p->done * (double)(p->total - p->done);
        fprintf(stderr, "%s%s: %ld/%ld %s, %.0f s elapsed, about %.0f s left%s", p->tty ? "\r" : "", p->cmd, p->done,
                p->total, p->unit, el, left, p->tty ? "   " : "\n");
    } else {
        fprintf(stderr, "%s%s: %ld %s, %.0f s elapsed%s", p->tty ? "\r" : "", p->cmd, p->done, p->unit, el,
                p->tty ? "   " : "\n");
    }
    fflush(stderr);
}

void base_progress_end(base_progress *p)
{
    if (p->shown && p->tty) fputc('\n', stderr);
}
