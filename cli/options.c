/* cli/options.c — see options.h. */
#include "cli/options.h"

#include <ctype.h>
#include <math.h>
#include <string.h>

#include "base/error.h"
#include "base/parse.h"

static const copt *find(const copt_table *tables, int n_tables, const char *name, void **target)
{
    for (int t = 0; t < n_tables; t++)
        for (int i = 0; i < tables[t].n; i++)
            if (strcmp(tables[t].opts[i].name, name) == 0) {
                *target = tables[t].target;
                return &tables[t].opts[i];
            }
    return NULL;
}

/* "1..1048576", "0..1 (1 excluded)", ">= 0" */
static void range_text(const copt *o, char *buf, size_t len)
{
    if (isinf(o->max)) snprintf(buf, len, ">= %g", o->min);
    else if (o->flags & COPT_MAX_OPEN) snprintf(buf, len, "in [%g, %g)", o->min, o->max);
    else snprintf(buf, len, "in %.17g..%.17g", o->min, o->max);
}

static int parse_value(const char *cmd, const copt *o, const char *v, void *field)
{
    char range[96];
    range_text(o, range, sizeof range);
    switch (o->kind) {
    case COPT_INT:
    case COPT_LONG: {
        long x;
        if (base_parse_long(v, &x) || (double)x < o->min || (double)x > o->max)
            return base_error(cmd, "%s needs an integer %s, got '%s'", o->name, range, v);
        if (o->kind == COPT_INT) *(int *)field = (int)x;
        else *(long *)field = x;
        return 0;
    }
    case COPT_DOUBLE: {
        double x;
        int bad = base_parse_double(v, &x) || !isfinite(x) || x < o->min || x > o->max ||
                  ((o->flags & COPT_MAX_OPEN) && x >= o->max);
        if (bad) return base_error(cmd, "%s needs a number %s, got '%s'", o->name, range, v);
        *(double *)field = x;
        return 0;
    }
    case COPT_STRING: *(const char **)field = v; return 0;
    case COPT_SEED:
        if (base_parse_seed(v, (uint64_t *)field))
            return base_error(cmd, "%s needs a seed: decimal or 0x hex up to 2^64-1 (no sign, no leading zeros), got "
                             "'%s'", o->name, v);
        return 0;
    case COPT_LIST: {
        copt_list *l = field;
        if (l->n == COPT_LIST_MAX) return base_error(cmd, "%s given more than %d times", o->name, COPT_LIST_MAX);
        l->items[l->n++] = v;
        return 0;
    }
    case COPT_CALL: {
        char err[1024] = "";
        if (o->handler(v, field, err, sizeof err)) return base_error(cmd, "%s: %s", o->name, err);
        return 0;
    }
    case COPT_FLAG: break;
    }
    return base_error(cmd, "%s: option table error", o->name);
}

/* A name defined twice (in one table or in two a command combines) would
 * silently bind every use to the first row: the tables are a defect, refused
 * on every invocation, --help included, so that the CLI tests catch it. */
static int check_unique_names(const char *cmd, const copt_table *tables, int n_tables)
{
    for (int t = 0; t < n_tables; t++)
        for (int i = 0; i < tables[t].n; i++)
            for (int u = t; u < n_tables; u++)
                for (int j = u == t ? i + 1 : 0; j < tables[u].n; j++)
                    if (strcmp(tables[t].opts[i].name, tables[u].opts[j].name) == 0) {
                        if (u == t)
                            base_error(cmd, "internal: option %s is defined twice in option table %d of this command",
                                       tables[t].opts[i].name, t + 1);
                        else
                            base_error(cmd, "internal: option %s is defined in option tables %d and %d of this command",
                                       tables[t].opts[i].name, t + 1, u + 1);
                        return COPT_TABLE_DEFECT;
                    }
    return 0;
}

int copt_parse(const char *cmd, int argc, char **argv, const copt_table *tables, int n_tables, copt_seen *seen)
{
    seen->n_given = 0;
    if (check_unique_names(cmd, tables, n_tables)) return COPT_TABLE_DEFECT;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        void *target = NULL;
        const copt *o = find(tables, n_tables, a, &target);
        if (!o) return base_error(cmd, "unknown option '%s' (ulpscope %s --help lists them)", a, cmd);
        if (copt_given(seen, o->name) && o->kind != COPT_LIST && !(o->flags & COPT_REPEATABLE))
            return base_error(cmd, "%s given twice (each option once; see ulpscope %s --help)", o->name, cmd);
        if (seen->n_given == COPT_MAX_GIVEN) return base_error(cmd, "too many options (at most %d)", COPT_MAX_GIVEN);
        seen->given[seen->n_given++] = o;
        void *field = (char *)target + o->offset;
        if (o->kind == COPT_FLAG) {
            *(int *)field = 1;
            continue;
        }
        if (i + 1 >= argc) return base_error(cmd, "%s needs a value (%s)", o->name, o->arg ? o->arg : "see --help");
        if (parse_value(cmd, o, argv[++i], field)) return BASE_EXIT_USAGE;
    }
    return 0;
}

int copt_given(const copt_seen *seen, const char *name)
{
    int n = 0;
    for (int i = 0; i < seen->n_given; i++) n += strcmp(seen->given[i]->name, name) == 0;
    return n;
}

const char *copt_first_given(const copt_seen *seen, const char *const *names)
{
    for (int i = 0; i < seen->n_given; i++)
        for (const char *const *n = names; *n; n++)
            if (strcmp(seen->given[i]->name, *n) == 0) return *n;
    return NULL;
}

void copt_help(FILE *fp, const copt_table *tables, int n_tables)
{
    enum { WIDTH = 100, INDENT = 9 };
    /* groups in the order they first appear */
    const char *groups[32];
    int n_groups = 0;
    for (int t = 0; t < n_tables; t++)
        for (int i = 0; i < tables[t].n; i++) {
            const char *g = tables[t].opts[i].group;
            int known = 0;
            for (int k = 0; k < n_groups; k++) known |= strcmp(groups[k], g) == 0;
            if (!known && n_groups < 32) groups[n_groups++] = g;
        }
    for (int k = 0; k < n_groups; k++) {
        int col = fprintf(fp, "%s:", groups[k]);
        for (; col < INDENT; col++) fputc(' ', fp);
        int first = 1;
        for (int t = 0; t < n_tables; t++)
            for (int i = 0; i < tables[t].n; i++) {
                const copt *o = &tables[t].opts[i];
                if (strcmp(o->group, groups[k]) != 0 || (o->flags & COPT_HIDDEN)) continue;
                char item[512];
                snprintf(item, sizeof item, "%s%s%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "",
                         o->help && *o->help ? " " : "", o->help ? o->help : "");
                int len = (int)strlen(item);
                if (!first && col + 2 + len > WIDTH) {
                    fprintf(fp, "\n%*s", INDENT, "");
                    col = INDENT;
                } else if (!first) {
                    fputs("  ", fp);
                    col += 2;
                }
                fputs(item, fp);
                col += len;
                first = 0;
            }
        fputc('\n', fp);
    }
}
