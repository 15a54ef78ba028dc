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

int tbackend_bind_plan(tbackend *be, const tplan *plan, int depth)
{
    char err[512];
    if (tplan_validate(plan, err, sizeof err)) return tbackend_fail(be, "%s", err);
    tbinding next;
    if (tplan_bind(&next, plan, depth, err, sizeof err)) return tbackend_fail(be, "%s", err);
    for (int s = 0; s < TSLOT_COUNT; s++) {
        if (!plan->used[s]) continue;
        int layers = tslot_get((tslot)s)->per_layer ? depth : 1;
        for (int l = 0; l < layers; l++) {
            const tsite *at = tbinding_site(&next, (tslot)s, l);
            char why[512] = "", name[64], choice[160], variant[128];
            if (!be->supports(be, &next, at, why, sizeof why)) continue;
            /* a layer's own choice is named with its layer; the slot's choice as the slot */
            const tslot_choice *c = tplan_choice_at(plan, (tslot)s, at->layer);
            if (c == &plan->slot[s]) snprintf(name, sizeof name, "slot %s", tslot_get((tslot)s)->name);
            else tsite_name(at, name, sizeof name);
            tplan_choice_variant_string(plan, (tslot)s, c, variant, sizeof variant);
            snprintf(choice, sizeof choice, "%s:%s", kpath_name(at->path), variant);
            tbinding_free(&next);
            return tbackend_fail(be, "%s backend cannot run %s at %s: %s", be->name, name, choice, why);
        }
    }
    tbinding_free(&be->bound);
    be->bound = next;
    return 0;
}
