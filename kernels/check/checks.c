/* kernels/check/checks.c — the table attaching each op (by its registry
 * name) to its check, generated from KCHECK_OPS (checks.h): adding an op's
 * check is one line there.  tests/test_check_harness.c holds the table and
 * the registry to each other: every op has a check, every check names an op. */
#include "kernels/check/checks.h"

#include <stdio.h>
#include <string.h>

#define KCHECK_ENTRY(name) {#name, kcheck_##name},
static const kcheck_entry table[] = {KCHECK_OPS(KCHECK_ENTRY)};

const kcheck_entry *kcheck_table(int *count)
{
    *count = (int)(sizeof table / sizeof table[0]);
    return table;
}

kcheck_fn kcheck_find_in(const kcheck_entry *t, int n, const char *op)
{
    for (int i = 0; op && i < n; i++)
        if (strcmp(t[i].op, op) == 0) return t[i].check;
    return NULL;
}

kcheck_fn kcheck_find(const char *op)
{
    return kcheck_find_in(table, (int)(sizeof table / sizeof table[0]), op);
}

static void append(char *buf, size_t len, const char *what, const char *name)
{
    size_t used = strlen(buf);
    if (used + 1 < len) snprintf(buf + used, len - used, "%s%s %s", used ? "; " : "", what, name);
}

int kcheck_table_mismatches(const kcheck_entry *t, int n, char *msg, size_t len)
{
    if (len) msg[0] = '\0';
    int bad = 0, n_ops = 0;
    const kop *const *ops = kregistry_ops(&n_ops);
    for (int i = 0; i < n_ops; i++)
        if (!kcheck_find_in(t, n, ops[i]->name)) {
            append(msg, len, "no check for op", ops[i]->name);
            bad++;
        }
    for (int i = 0; i < n; i++) {
        if (!kregistry_find(t[i].op) || strcmp(kregistry_find(t[i].op)->name, t[i].op) != 0) {
            append(msg, len, "check for no op:", t[i].op);
            bad++;
        }
        for (int k = 0; k < i; k++)
            if (strcmp(t[k].op, t[i].op) == 0) {
                append(msg, len, "two checks for", t[i].op);
                bad++;
            }
    }
    return bad;
}
