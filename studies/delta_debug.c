/* studies/delta_debug.c — ddmin, rddmin (with the srddmin sample schedule)
 * and ddmax over a noisy oracle; see delta_debug.h. */
#include "studies/delta_debug.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *dd_verdict_name(dd_verdict v)
{
    switch (v) {
    case DD_EQUIVALENT: return "EQUIVALENT";
    case DD_SHIFT: return "SHIFT";
    default: return "UNDECIDED";
    }
}

void dd_result_init(dd_result *r) { memset(r, 0, sizeof *r); }

void dd_result_free(dd_result *r)
{
    free(r->culprit_units);
    free(r->rest);
    free(r->clean);
    dd_result_init(r);
}

/* ---- the verdict cache: (configuration as a bitset, samples) -> verdict ---- */

typedef struct {
    uint64_t *bits;  /* [words] */
    int samples;     /* 0: empty slot */
    dd_verdict verdict;
} cache_entry;

typedef struct {
    const dd_problem *p;
    dd_result *r;
    int words;
    cache_entry *table;
    size_t cap, used;
    int failed;      /* the oracle failed, or the budget ran out: stop searching */
} search;

static uint64_t bits_hash(const uint64_t *b, int words, int samples)
{
    uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)samples;
    for (int i = 0; i < words; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
        h ^= h >> 29;
    }
    return h;
}

static void to_bits(const search *s, const int *units, int n, uint64_t *b)
{
    memset(b, 0, (size_t)s->words * sizeof *b);
    for (int i = 0; i < n; i++) b[units[i] / 64] |= 1ull << (units[i] % 64);
}

static cache_entry *cache_slot(search *s, const uint64_t *b, int samples)
{
    size_t i = bits_hash(b, s->words, samples) & (s->cap - 1);
    for (;; i = (i + 1) & (s->cap - 1)) {
        cache_entry *e = &s->table[i];
        if (!e->samples) return e;
        if (e->samples == samples && !memcmp(e->bits, b, (size_t)s->words * sizeof *b)) return e;
    }
}

static int cache_grow(search *s)
{
    size_t cap = s->cap ? s->cap * 2 : 256;
    cache_entry *old = s->table;
    size_t old_cap = s->cap;
    s->table = calloc(cap, sizeof *s->table);
    if (!s->table) {
        s->table = old;
        return -1;
    }
    s->cap = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].samples) *cache_slot(s, old[i].bits, old[i].samples) = old[i];
    free(old);
    return 0;
}

static void cache_free(search *s)
{
    for (size_t i = 0; i < s->cap; i++) free(s->table[i].bits);
    free(s->table);
}

/* ---- judging configurations along the schedule ---------------------------------- */

typedef enum { WANT_SHIFT, WANT_EQUIVALENT } want;

/* For each config: walk the schedule until it resolves.  WANT_SHIFT: true at
 * the first count that says SHIFT; false at a count that says EQUIVALENT or
 * after the largest count.  WANT_EQUIVALENT: true at the first EQUIVALENT,
 * false at the first SHIFT or after the largest count.  final[i] is the last
 * verdict seen.  Configurations still open at a count go to the oracle
 * together (cache misses only).  Returns 0, or -1 when the search must stop. */
static int judge(search *s, const dd_config *cfg, int count, want w, int *yes, dd_verdict *final)
{
    const dd_problem *p = s->p;
    int *open = malloc((size_t)count * sizeof *open);
    dd_config *ask = malloc((size_t)count * sizeof *ask);
    int *ask_idx = malloc((size_t)count * sizeof *ask_idx);
    dd_verdict *got = malloc((size_t)count * sizeof *got);
    uint64_t *b = malloc((size_t)s->words * sizeof *b);
    int rc = 0;
    if (!open || !ask || !ask_idx || !got || !b) {
        snprintf(s->r->error, sizeof s->r->error, "out of memory");
        rc = -1;
        goto done;
    }
    for (int i = 0; i < count; i++) {
        open[i] = 1;
        yes[i] = 0;
        final[i] = DD_UNDECIDED;
    }
    for (int k = 0; k < p->n_schedule && !rc; k++) {
        int samples = p->schedule[k], n_ask = 0;
        for (int i = 0; i < count; i++) {
            if (!open[i]) continue;
            to_bits(s, cfg[i].units, cfg[i].n, b);
            cache_entry *e = cache_slot(s, b, samples);
            if (e->samples) {
                s->r->cache_hits++;
                final[i] = e->verdict;
                continue;
            }
            /* the same configuration twice in one batch is asked once */
            int dup = 0;
            for (int j = 0; j < n_ask && !dup; j++)
                dup = cfg[ask_idx[j]].n == cfg[i].n &&
                      !memcmp(cfg[ask_idx[j]].units, cfg[i].units, (size_t)cfg[i].n * sizeof(int));
            if (!dup) {
                ask_idx[n_ask] = i;
                ask[n_ask++] = cfg[i];
            }
        }
        if (n_ask) {
            if (p->max_judgements > 0 && s->r->judgements + n_ask > p->max_judgements) {
                s->r->budget_exhausted = 1;
                rc = -1;
                break;
            }
            if (p->oracle(p->ctx, ask, n_ask, samples, got)) {
                if (!s->r->error[0]) snprintf(s->r->error, sizeof s->r->error, "the oracle failed");
                rc = -1;
                break;
            }
            s->r->judgements += n_ask;
            s->r->samples += (long)n_ask * samples;
            for (int j = 0; j < n_ask; j++) {
                if (2 * (s->used + 1) > s->cap && cache_grow(s)) {
                    snprintf(s->r->error, sizeof s->r->error, "out of memory");
                    rc = -1;
                    break;
                }
                to_bits(s, ask[j].units, ask[j].n, b);
                cache_entry *e = cache_slot(s, b, samples);
                e->bits = malloc((size_t)s->words * sizeof *b);
                if (!e->bits) {
                    snprintf(s->r->error, sizeof s->r->error, "out of memory");
                    rc = -1;
                    break;
                }
                memcpy(e->bits, b, (size_t)s->words * sizeof *b);
                e->samples = samples;
                e->verdict = got[j];
                s->used++;
            }
            if (rc) break;
            /* every open config now has a cached verdict at this count */
            for (int i = 0; i < count; i++) {
                if (!open[i]) continue;
                to_bits(s, cfg[i].units, cfg[i].n, b);
                final[i] = cache_slot(s, b, samples)->verdict;
            }
        }
        for (int i = 0; i < count; i++) {
            if (!open[i]) continue;
            if (final[i] == DD_SHIFT) {
                yes[i] = w == WANT_SHIFT;
                open[i] = 0;
            } else if (final[i] == DD_EQUIVALENT) {
                yes[i] = w == WANT_EQUIVALENT;
                open[i] = 0;
            }
        }
    }
done:
    if (rc) s->failed = 1;
    free(open);
    free(ask);
    free(ask_idx);
    free(got);
    free(b);
    return rc;
}

static int judge_one(search *s, const int *units, int n, want w, int *yes, dd_verdict *final)
{
    dd_config c = {units, n};
    return judge(s, &c, 1, w, yes, final);
}

/* ---- set helpers (sorted int arrays) --------------------------------------------- */

/* out = a \ b (both sorted); returns |out| */
static int set_minus(const int *a, int na, const int *b, int nb, int *out)
{
    int i = 0, j = 0, n = 0;
    while (i < na) {
        while (j < nb && b[j] < a[i]) j++;
        if (j < nb && b[j] == a[i]) i++;
        else out[n++] = a[i++];
    }
    return n;
}

/* out = a u b (both sorted, disjoint or not); returns |out| */
static int set_union(const int *a, int na, const int *b, int nb, int *out)
{
    int i = 0, j = 0, n = 0;
    while (i < na || j < nb) {
        if (j >= nb || (i < na && a[i] < b[j])) out[n++] = a[i++];
        else if (i >= na || b[j] < a[i]) out[n++] = b[j++];
        else {
            out[n++] = a[i++];
            j++;
        }
    }
    return n;
}

/* Chunk k of n of a set of size len: [start, start + size). */
static void chunk_of(int len, int n, int k, int *start, int *size)
{
    *start = (int)((long)len * k / n);
    *size = (int)((long)len * (k + 1) / n) - *start;
}

/* ---- ddmin ----------------------------------------------------------------------------- */

/* Reduces c[0..*nc) (a set that SHIFTs) to a 1-minimal subset that SHIFTs. */
static int ddmin(search *s, int *c, int *nc)
{
    int n = 2, rc = 0, n0 = *nc;
    dd_config *cfg = malloc((size_t)(*nc + 1) * sizeof *cfg);
    int *yes = malloc((size_t)(*nc + 1) * sizeof *yes);
    dd_verdict *fin = malloc((size_t)(*nc + 1) * sizeof *fin);
    int **comp = calloc((size_t)(*nc + 1), sizeof *comp);
    if (!cfg || !yes || !fin || !comp) {
        snprintf(s->r->error, sizeof s->r->error, "out of memory");
        rc = -1;
        goto done;
    }
    while (*nc >= 2 && !rc) {
        if (n > *nc) n = *nc;
        /* round 1: the chunks */
        for (int k = 0; k < n; k++) {
            int st, sz;
            chunk_of(*nc, n, k, &st, &sz);
            cfg[k].units = c + st;
            cfg[k].n = sz;
        }
        if ((rc = judge(s, cfg, n, WANT_SHIFT, yes, fin))) break;
        int hit = -1;
        for (int k = 0; k < n && hit < 0; k++)
            if (yes[k]) hit = k;
        if (hit >= 0) {
            int st, sz;
            chunk_of(*nc, n, hit, &st, &sz);
            memmove(c, c + st, (size_t)sz * sizeof *c);
            *nc = sz;
            n = 2;
            continue;
        }
        /* round 2: the complements (for n = 2 they are the chunks again) */
        if (n > 2) {
            for (int k = 0; k < n; k++) {
                int st, sz;
                chunk_of(*nc, n, k, &st, &sz);
                free(comp[k]);
                comp[k] = malloc((size_t)(*nc) * sizeof **comp);
                if (!comp[k]) {
                    snprintf(s->r->error, sizeof s->r->error, "out of memory");
                    rc = -1;
                    break;
                }
                cfg[k].units = comp[k];
                cfg[k].n = set_minus(c, *nc, c + st, sz, comp[k]);
            }
            if (rc || (rc = judge(s, cfg, n, WANT_SHIFT, yes, fin))) break;
            for (int k = 0; k < n && hit < 0; k++)
                if (yes[k]) hit = k;
            if (hit >= 0) {
                memcpy(c, comp[hit], (size_t)cfg[hit].n * sizeof *c);
                *nc = cfg[hit].n;
                n = n - 1 > 2 ? n - 1 : 2;
                continue;
            }
        }
        if (n < *nc) {
            n = 2 * n < *nc ? 2 * n : *nc;
            continue;
        }
        break;
    }
done:
    if (comp)
        for (int k = 0; k <= n0; k++) free(comp[k]);
    free(comp);
    free(cfg);
    free(yes);
    free(fin);
    return rc;
}

/* ---- sanity, rddmin, ddmax ------------------------------------------------------------------- */

static int search_begin(search *s, const dd_problem *p, dd_result *r)
{
    memset(s, 0, sizeof *s);
    s->p = p;
    s->r = r;
    s->words = (p->n_units + 63) / 64;
    if (s->words < 1) s->words = 1;
    if (p->n_units < 1 || p->n_schedule < 1 || p->n_schedule > DD_MAX_SCHEDULE || !p->oracle) {
        snprintf(r->error, sizeof r->error, "delta debugging needs at least one unit, a sample schedule and an oracle");
        return -1;
    }
    for (int k = 0; k < p->n_schedule; k++)
        if (p->schedule[k] < 1 || (k && p->schedule[k] <= p->schedule[k - 1])) {
            snprintf(r->error, sizeof r->error, "the sample schedule must be positive and increasing");
            return -1;
        }
    return cache_grow(s);
}

/* Empty set must not SHIFT, full set must.  Returns 0 (r->sanity_failed set
 * when one fails) or -1. */
static int sanity(search *s, const int *all, int n)
{
    int yes;
    dd_verdict fin;
    if (judge_one(s, all, 0, WANT_SHIFT, &yes, &fin)) return -1;
    if (yes) {
        s->r->sanity_failed = 1;
        return 0;
    }
    if (judge_one(s, all, n, WANT_SHIFT, &yes, &fin)) return -1;
    if (!yes) s->r->sanity_failed = 2;
    return 0;
}

static int *all_units(int n)
{
    int *a = malloc((size_t)n * sizeof *a);
    for (int i = 0; a && i < n; i++) a[i] = i;
    return a;
}

int dd_rddmin(const dd_problem *p, dd_result *r)
{
    search s;
    if (search_begin(&s, p, r)) return -1;
    int n = p->n_units, rc = 0;
    int *all = all_units(n), *c = malloc((size_t)n * sizeof *c), *tmp = malloc((size_t)n * sizeof *tmp);
    free(r->culprit_units);
    free(r->rest);
    r->culprit_units = malloc((size_t)n * sizeof *r->culprit_units);
    r->rest = malloc((size_t)n * sizeof *r->rest);
    if (!all || !c || !tmp || !r->culprit_units || !r->rest) {
        snprintf(r->error, sizeof r->error, "out of memory");
        rc = -1;
        goto done;
    }
    r->n_culprits = 0;
    memcpy(r->rest, all, (size_t)n * sizeof *all);
    r->n_rest = n;
    r->rest_verdict = DD_UNDECIDED;
    if ((rc = sanity(&s, all, n)) || r->sanity_failed) goto done;
    int used = 0;
    for (;;) {
        int yes;
        dd_verdict fin;
        if ((rc = judge_one(&s, r->rest, r->n_rest, WANT_SHIFT, &yes, &fin))) break;
        r->rest_verdict = fin;
        if (!yes) break;                       /* the complement is clean */
        int nc = r->n_rest;
        memcpy(c, r->rest, (size_t)nc * sizeof *c);
        if ((rc = ddmin(&s, c, &nc))) break;
        if (r->n_culprits == (int)(sizeof r->culprit_len / sizeof r->culprit_len[0])) {
            snprintf(r->error, sizeof r->error, "more than %d culprit sets", r->n_culprits);
            rc = -1;
            break;
        }
        /* confirmation at the largest count (a cached verdict when ddmin got there) */
        {
            dd_problem last = *p;
            last.schedule[0] = p->schedule[p->n_schedule - 1];
            last.n_schedule = 1;
            s.p = &last;
            int shift;
            dd_verdict f;
            rc = judge_one(&s, c, nc, WANT_SHIFT, &shift, &f);
            s.p = p;
            if (rc) break;
            r->culprit_confirmed[r->n_culprits] = shift;
        }
        r->culprit_start[r->n_culprits] = used;
        r->culprit_len[r->n_culprits] = nc;
        memcpy(r->culprit_units + used, c, (size_t)nc * sizeof *c);
        used += nc;
        r->n_culprits++;
        r->n_rest = set_minus(r->rest, r->n_rest, c, nc, tmp);
        memcpy(r->rest, tmp, (size_t)r->n_rest * sizeof *tmp);
        if (p->planted_bug == DD_BUG_STOP_AT_FIRST) {
            r->rest_verdict = DD_EQUIVALENT;   /* claimed, never judged */
            break;
        }
        if (r->n_rest == 0) {
            r->rest_verdict = DD_EQUIVALENT;   /* nothing switched: the good configuration itself */
            break;
        }
    }
done:
    if (rc && r->budget_exhausted) rc = 0;   /* partial result, said in budget_exhausted */
    cache_free(&s);
    free(all);
    free(c);
    free(tmp);
    return rc;
}

int dd_ddmax(const dd_problem *p, dd_result *r)
{
    search s;
    if (search_begin(&s, p, r)) return -1;
    int n = p->n_units, rc = 0;
    int *all = all_units(n), *delta = malloc((size_t)n * sizeof *delta);
    dd_config *cfg = malloc((size_t)(n + 1) * sizeof *cfg);
    int *yes = malloc((size_t)(n + 1) * sizeof *yes);
    dd_verdict *fin = malloc((size_t)(n + 1) * sizeof *fin);
    int **cand = calloc((size_t)(n + 1), sizeof *cand);
    free(r->clean);
    r->clean = malloc((size_t)n * sizeof *r->clean);
    r->n_clean = 0;
    if (!all || !delta || !cfg || !yes || !fin || !cand || !r->clean) {
        snprintf(r->error, sizeof r->error, "out of memory");
        rc = -1;
        goto done;
    }
    for (int k = 0; k <= n; k++)
        if (!(cand[k] = malloc((size_t)n * sizeof **cand))) {
            snprintf(r->error, sizeof r->error, "out of memory");
            rc = -1;
            goto done;
        }
    if ((rc = sanity(&s, all, n))) goto done;
    if (r->sanity_failed == 2) {               /* the whole bad set does not SHIFT */
        int y;
        dd_verdict f;
        if ((rc = judge_one(&s, all, n, WANT_EQUIVALENT, &y, &f))) goto done;
        if (y) {
            memcpy(r->clean, all, (size_t)n * sizeof *all);
            r->n_clean = n;
        }
        goto done;
    }
    if (r->sanity_failed) goto done;
    /* the empty set passes only if it is EQUIVALENT (the oracle decides) */
    {
        int y;
        dd_verdict f;
        if ((rc = judge_one(&s, all, 0, WANT_EQUIVALENT, &y, &f))) goto done;
        if (!y) goto done;                     /* not even the good configuration is equivalent to itself */
    }
    int gran = 2;
    for (;;) {
        int nd = set_minus(all, n, r->clean, r->n_clean, delta);
        if (nd == 0) break;
        if (gran > nd) gran = nd;
        /* round 1: clean + (delta minus one chunk): the large steps */
        int hit = -1;
        if (gran >= 2) {
            for (int k = 0; k < gran; k++) {
                int st, sz;
                chunk_of(nd, gran, k, &st, &sz);
                int *tmp = cand[n];
                int nr = set_minus(delta, nd, delta + st, sz, tmp);
                cfg[k].units = cand[k];
                cfg[k].n = set_union(r->clean, r->n_clean, tmp, nr, cand[k]);
            }
            if ((rc = judge(&s, cfg, gran, WANT_EQUIVALENT, yes, fin))) break;
            for (int k = 0; k < gran && hit < 0; k++)
                if (yes[k]) hit = k;
            if (hit >= 0) {
                memcpy(r->clean, cfg[hit].units, (size_t)cfg[hit].n * sizeof *r->clean);
                r->n_clean = cfg[hit].n;
                gran = 2;
                continue;
            }
        }
        /* round 2: clean + one chunk */
        for (int k = 0; k < gran; k++) {
            int st, sz;
            chunk_of(nd, gran, k, &st, &sz);
            cfg[k].units = cand[k];
            cfg[k].n = set_union(r->clean, r->n_clean, delta + st, sz, cand[k]);
        }
        if ((rc = judge(&s, cfg, gran, WANT_EQUIVALENT, yes, fin))) break;
        for (int k = 0; k < gran && hit < 0; k++)
            if (yes[k]) hit = k;
        if (hit >= 0) {
            memcpy(r->clean, cfg[hit].units, (size_t)cfg[hit].n * sizeof *r->clean);
            r->n_clean = cfg[hit].n;
            gran = gran - 1 > 2 ? gran - 1 : 2;
            continue;
        }
        if (gran < nd) {
            gran = 2 * gran < nd ? 2 * gran : nd;
            continue;
        }
        break;
    }
done:
    if (rc && r->budget_exhausted) rc = 0;
    if (cand)
        for (int k = 0; k <= n; k++) free(cand[k]);
    free(cand);
    cache_free(&s);
    free(all);
    free(delta);
    free(cfg);
    free(yes);
    free(fin);
    return rc;
}
