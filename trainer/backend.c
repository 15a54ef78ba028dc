/* trainer/backend.c — what every backend shares: errors and plan binding. */
#include "trainer/backend.h"

#include <stdarg.h>
#include <stdio.h>

const char *tbackend_error(const tbackend *be) { return be->error; }

int tbackend_fail(tbackend *be, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(be->error, sizeof be->error, fmt, ap);
    va_end(ap);
    return -1;
}

int tbackend_bind_plan(tbackend *be, const tplan *plan)
{
    char err[512];
    if (tplan_validate(plan, err, sizeof err)) return tbackend_fail(be, "%s", err);
    for (int s = 0; s < TSLOT_COUNT; s++) {
        if (!plan->used[s]) continue;
        char why[512] = "";
        if (be->supports(be, plan, (tslot)s, why, sizeof why)) {
            char choice[96];
            tplan_choice_string(plan, (tslot)s, choice, sizeof choice);
            return tbackend_fail(be, "%s backend cannot run slot %s at %s: %s", be->name, tslot_get((tslot)s)->name,
                                 choice, why);
        }
    }
    be->plan = plan;
    return 0;
}
