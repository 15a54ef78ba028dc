/* kernels/probe/probe_fingerprint.c — probe families for matrix units, run through
 * a GPU or model executor, interpreted into a fingerprint (JSON Lines), and
 * the property-by-property diff of two fingerprints.
 *
 * Every probe is a few dot products d = c + sum_k a_k b_k of the
 * instruction's K, built from powers of two so that each outcome names one
 * feature.  The families follow Fasi, Higham, Mikaitis and Pranesh (PeerJ CS
 * 2021, "Numerical behavior of NVIDIA tensor cores": exact products, extra
 * alignment bits, rounding/truncation, block size, normalisation,
 * monotonicity, subnormals), Li et al. (FTTN, arXiv:2403.00232: extra bits,
 * rounding of the sum, subnormal handling) and Khattak and Mikaitis
 * (arXiv:2510.15884 and 2512.07004: extra alignment bits, carry bits,
 * normalisation points).  The vectors are ulpscope's own; the comment above
 * each family gives them and the outcome each hypothesis predicts. */
#include "kernels/probe/probe_fingerprint.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonl.h"
#include "precision/rng.h"

/* ---- dot-product batches ------------------------------------------------ */

typedef struct {
    int n, k;
    double *a, *b, *c, *d;
} dots;

static int dots_new(dots *v, int n, int k)
{
    v->n = n;
    v->k = k;
    v->a = calloc((size_t)n * k, sizeof *v->a);
    v->b = calloc((size_t)n * k, sizeof *v->b);
    v->c = calloc((size_t)n, sizeof *v->c);
    v->d = calloc((size_t)n, sizeof *v->d);
    return v->a && v->b && v->c && v->d ? 0 : -1;
}

static void dots_free(dots *v)
{
    free(v->a);
    free(v->b);
    free(v->c);
    free(v->d);
}

static int dots_run(const probe_exec *ex, const probe_target *t, dots *v, char *err, size_t err_len)
{
    const int sz = mma_elem_bytes(t->in);
    void *a = malloc((size_t)v->n * v->k * sz), *b = malloc((size_t)v->n * v->k * sz);
    uint32_t *c = malloc((size_t)v->n * sizeof *c), *d = malloc((size_t)v->n * sizeof *d);
    int rc = -1;
    if (!a || !b || !c || !d) {
        snprintf(err, err_len, "out of memory for %d probe dot products", v->n);
        goto done;
    }
    for (long i = 0; i < (long)v->n * v->k; i++) {
        mma_store(t->in, a, i, v->a[i]);
        mma_store(t->in, b, i, v->b[i]);
    }
    for (int i = 0; i < v->n; i++) c[i] = (uint32_t)prec_encode(v->c[i], t->out);
    rc = ex->run(ex->ctx, t, v->n, a, b, c, d, err, err_len);
    if (rc == 0)
        for (int i = 0; i < v->n; i++) v->d[i] = prec_decode(d[i], t->out);
done:
    free(a);
    free(b);
    free(c);
    free(d);
    return rc;
}

int probe_split_product(prec_format f, double p, double *a, double *b)
{
    if (p == 0.0) {
        *a = 0.0;
        *b = 1.0;
        return 0;
    }
    const prec_format_info *fi = prec_format_get(f);
    int e;
    double m = frexp(fabs(p), &e); /* |p| = M * 2^E with M an odd integer */
    double M = ldexp(m, 53);
    int E = e - 53;
    while (fmod(M, 2.0) == 0.0) {
        M /= 2.0;
        E++;
    }
    int best_score = 1 << 30;
    for (int x = -320; x <= 320; x++) {
        double ta = ldexp(M, x), tb = ldexp(1.0, E - x);
        if (ta == 0.0 || tb == 0.0 || isinf(ta) || isinf(tb)) continue;
        if (!prec_representable(ta, f) || !prec_representable(tb, f)) continue;
        if (ta > fi->max_finite || tb > fi->max_finite) continue;
        int sub = (ta < fi->min_normal) + (tb < fi->min_normal);
        int score = sub * 10000 + abs(ilogb(ta) - ilogb(tb));
        if (score < best_score) {
            best_score = score;
            *a = p < 0 ? -ta : ta;
            *b = tb;
        }
    }
    return best_score == 1 << 30 ? -1 : 0;
}

/* Place product p at position pos of dot i; -1 when f cannot make it. */
static int put(dots *v, const probe_target *t, int i, int pos, double p)
{
    return probe_split_product(t->in, p, &v->a[(long)i * v->k + pos], &v->b[(long)i * v->k + pos]);
}

/* ---- records --------------------------------------------------------------- */

void probe_json_target(FILE *fp, const char *record, const probe_target *t)
{
    fprintf(fp, "{\"record\":\"%s\",\"route\":", record);
    base_json_string(fp, t->route);
    fprintf(fp, ",\"in\":\"%s\",\"out\":\"%s\"", prec_format_name(t->in), prec_format_name(t->out));
}

static void emit(FILE *fp, const probe_target *t, const char *property, const char *value_json,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void emit(FILE *fp, const probe_target *t, const char *property, const char *value_json,
                 const char *fmt, ...)
{
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    probe_json_target(fp, "property", t);
    fprintf(fp, ",\"property\":\"%s\",\"value\":%s,\"detail\":", property, value_json);
    base_json_string(fp, detail);
    fputs("}\n", fp);
}

static void emit_int(FILE *fp, const probe_target *t, const char *property, int value, const char *detail)
{
    char v[32];
    snprintf(v, sizeof v, "%d", value);
    emit(fp, t, property, v, "%s", detail);
}

static void emit_str(FILE *fp, const probe_target *t, const char *property, const char *value, const char *detail)
{
    char v[128];
    snprintf(v, sizeof v, "\"%s\"", value);
    emit(fp, t, property, v, "%s", detail);
}

/* ---- probe geometry --------------------------------------------------------- */

static int out_emax(prec_format out) { return out == PREC_FP16 ? 15 : 127; }
static int out_min_exp(prec_format out) { return out == PREC_FP16 ? -24 : -149; }

/* Smallest exponent of a nonzero product of two values of f. */
static int min_product_exp(prec_format f) { return 2 * ilogb(prec_format_get(f)->min_subnormal); }

/* The exponent E of the big terms +-2^E: a product of two normals of the
 * input format, a value of the output format, and high enough that 2^(E-j)
 * is still a product for j up to 40. */
static int top_exp(const probe_target *t)
{
    const prec_format_info *fi = prec_format_get(t->in);
    int E = 8;
    if (min_product_exp(t->in) > E - 40) E = min_product_exp(t->in) + 40;
    if (E > 2 * fi->emax) E = 2 * fi->emax;
    if (E > out_emax(t->out) - 1) E = out_emax(t->out) - 1;
    return E;
}

static int ladder_top(const probe_target *t, int E)
{
    int j = 60;
    if (E - min_product_exp(t->in) < j) j = E - min_product_exp(t->in);
    if (E - out_min_exp(t->out) < j) j = E - out_min_exp(t->out);
    return j;
}

/* Results of the probes later probes depend on. */
typedef struct {
    int E;          /* top exponent */
    int F;          /* alignment fraction bits, or -1 when not pinned down */
    int q;          /* output fraction bits, or -1 */
    int L;          /* block size, or -1 when >= k */
    int out_rz;     /* 1 when the output rounding is RZ */
} probe_state;

/* ---- the families ----------------------------------------------------------- */

/* products_exact: c = -(1 + 2u), a0 = b0 = 1 + u (u = 2^-fb of the input):
 * the exact d is u^2; a rounded product gives 0 or another value. */
static int fam_products_exact(FILE *fp, const probe_exec *ex, const probe_target *t, char *err, size_t el)
{
    const double u = ldexp(1.0, -prec_format_get(t->in)->fraction_bits);
    dots v;
    if (dots_new(&v, 1, t->k)) return -1;
    v.a[0] = v.b[0] = 1.0 + u;
    v.c[0] = -(1.0 + 2.0 * u);
    int rc = prec_representable(v.c[0], t->out) ? dots_run(ex, t, &v, err, el) : 1;
    if (rc == 0) {
        char detail[160];
        snprintf(detail, sizeof detail, "(1+u)^2 - (1+2u) with u=2^%d gave %.17g (exact u^2=%.17g)",
                 -prec_format_get(t->in)->fraction_bits, v.d[0], u * u);
        emit_str(fp, t, "products_exact", v.d[0] == u * u ? "exact" : "rounded", detail);
    }
    dots_free(&v);
    return rc < 0 ? -1 : 0;
}

/* alignment_frac_bits: c = 2^E, p0 = -2^E, p1 = 2^(E-j) for j = 1..: d is
 * 2^(E-j) while the term survives alignment to emax = E, 0 once it falls
 * below 2^(E-F).  F = the last j kept. */
static int fam_alignment_bits(FILE *fp, const probe_exec *ex, const probe_target *t, probe_state *st,
                              char *err, size_t el)
{
    const int E = st->E, J = ladder_top(t, E);
    dots v;
    if (dots_new(&v, J, t->k)) return -1;
    for (int j = 1; j <= J; j++) {
        v.c[j - 1] = ldexp(1.0, E);
        if (put(&v, t, j - 1, 0, -ldexp(1.0, E)) || put(&v, t, j - 1, 1, ldexp(1.0, E - j))) {
            dots_free(&v);
            snprintf(err, el, "alignment probe: 2^%d is not a product of two %s values", E - j,
                     prec_format_name(t->in));
            return -1;
        }
    }
    int rc = dots_run(ex, t, &v, err, el);
    if (rc == 0) {
        int F = 0;
        while (F < J && v.d[F] == ldexp(1.0, E - F - 1)) F++;
        char detail[200];
        if (F == J) {
            st->F = -1;
            snprintf(detail, sizeof detail, "2^(E-j) kept beside 2^E - 2^E for every j <= %d (E=%d)", J, E);
            char val[32];
            snprintf(val, sizeof val, "\">=%d\"", J);
            emit(fp, t, "alignment_frac_bits", val, "%s", detail);
        } else {
            st->F = F;
            snprintf(detail, sizeof detail, "2^(E-j) kept beside 2^E - 2^E for j <= %d, d=%.9g at j=%d (E=%d)",
                     F, v.d[F], F + 1, E);
            emit_int(fp, t, "alignment_frac_bits", F, detail);
        }
    }
    dots_free(&v);
    return rc;
}

/* alignment_rounding: with g = 2^(E-F), c = 2^E, p0 = -2^E and
 *   pos: p1 = +1.5 g, neg: mirrored (c = -2^E, p0 = +2^E, p1 = -1.5 g),
 *   half: p1 = +0.5 g.
 * Outcomes in g: truncate (1, -1, 0), floor (1, -2, 0), nearest-even
 * (2, -2, 0), nearest-away (2, -2, 1), ceil (2, -1, 1). */
static int fam_alignment_rounding(FILE *fp, const probe_exec *ex, const probe_target *t, const probe_state *st,
                                  char *err, size_t el)
{
    if (st->F < 0) return 0;
    const int E = st->E;
    const double g = ldexp(1.0, E - st->F);
    dots v;
    if (dots_new(&v, 3, t->k)) return -1;
    const double p1[3] = {1.5 * g, -1.5 * g, 0.5 * g};
    for (int i = 0; i < 3; i++) {
        const double s = i == 1 ? -1.0 : 1.0;
        v.c[i] = s * ldexp(1.0, E);
        if (put(&v, t, i, 0, -s * ldexp(1.0, E)) || put(&v, t, i, 1, p1[i])) {
            dots_free(&v);
            return 0; /* 1.5 g below the format's products: not observable */
        }
    }
    int rc = dots_run(ex, t, &v, err, el);
    if (rc == 0) {
        const double o0 = v.d[0] / g, o1 = v.d[1] / g, o2 = v.d[2] / g;
        const char *name = "other";
        if (o0 == 1 && o1 == -1 && o2 == 0) name = "truncate";
        else if (o0 == 1 && o1 == -2 && o2 == 0) name = "floor";
        else if (o0 == 2 && o1 == -2 && o2 == 0) name = "nearest-even";
        else if (o0 == 2 && o1 == -2 && o2 == 1) name = "nearest-away";
        else if (o0 == 2 && o1 == -1 && o2 == 1) name = "ceil";
        char detail[160];
        snprintf(detail, sizeof detail, "+1.5g -> %g g, -1.5g -> %g g, +0.5g -> %g g (g = 2^%d)", o0, o1, o2,
                 E - st->F);
        emit_str(fp, t, "alignment_rounding", name, detail);
    }
    dots_free(&v);
    return rc;
}

/* output_frac_bits: c = 0, p0 = 2^E, p1 = 2^(E-j): d = 2^E + 2^(E-j) while
 * the output keeps j fraction bits (and alignment keeps them: F >= q on
 * every known unit). */
static int fam_output_bits(FILE *fp, const probe_exec *ex, const probe_target *t, probe_state *st, char *err,
                           size_t el)
{
    const int E = st->E;
    int J = ladder_top(t, E);
    if (J > 30) J = 30;
    dots v;
    if (dots_new(&v, J, t->k)) return -1;
    for (int j = 1; j <= J; j++)
        if (put(&v, t, j - 1, 0, ldexp(1.0, E)) || put(&v, t, j - 1, 1, ldexp(1.0, E - j))) {
            dots_free(&v);
            snprintf(err, el, "output-bits probe: 2^%d is not a %s product", E - j, prec_format_name(t->in));
            return -1;
        }
    int rc = dots_run(ex, t, &v, err, el);
    if (rc == 0) {
        int q = 0;
        while (q < J && v.d[q] == ldexp(1.0, E) + ldexp(1.0, E - q - 1)) q++;
        char detail[160];
        snprintf(detail, sizeof detail, "2^E + 2^(E-j) exact for j <= %d (E=%d)", q, E);
        st->q = q < J ? q : -1;
        if (q < J) emit_int(fp, t, "output_frac_bits", q, detail);
        else {
            char val[32];
            snprintf(val, sizeof val, "\">=%d\"", J);
            emit(fp, t, "output_frac_bits", val, "%s", detail);
        }
    }
    dots_free(&v);
    return rc;
}

/* output_rounding: with ulp = 2^(3-q) at 8, c = 3 + 3 ulp/4 (or + ulp/4),
 * p0 = p1 = 2.5: the exact sum is 8 + 0.75 ulp (8 + 0.25 ulp), and the
 * negated dots.  Outcomes (in ulp, for +0.75, +0.25, -0.75, -0.25):
 * rz (0,0,0,0), rne (1,0,-1,0), ru (1,1,0,0), rd (0,0,-1,-1). */
static int fam_output_rounding(FILE *fp, const probe_exec *ex, const probe_target *t, probe_state *st,
                               char *err, size_t el)
{
    if (st->q < 0 || (st->F >= 0 && st->F < st->q)) return 0;
    const double ulp = ldexp(1.0, 3 - st->q);
    const double frac[4] = {0.75, 0.25, 0.75, 0.25};
    dots v;
    if (dots_new(&v, 4, t->k)) return -1;
    for (int i = 0; i < 4; i++) {
        const double s = i < 2 ? 1.0 : -1.0;
        v.c[i] = s * (3.0 + frac[i] * ulp);
        if (!prec_representable(v.c[i], t->out) || put(&v, t, i, 0, s * 2.5) || put(&v, t, i, 1, s * 2.5)) {
            dots_free(&v);
            return 0;
        }
    }
    int rc = dots_run(ex, t, &v, err, el);
    if (rc == 0) {
        double o[4];
        for (int i = 0; i < 4; i++) o[i] = (v.d[i] - (i < 2 ? 8.0 : -8.0)) / ulp;
        const char *name = "other";
        if (o[0] == 0 && o[1] == 0 && o[2] == 0 && o[3] == 0) name = "rz";
        else if (o[0] == 1 && o[1] == 0 && o[2] == -1 && o[3] == 0) name = "rne";
        else if (o[0] == 1 && o[1] == 1 && o[2] == 0 && o[3] == 0) name = "ru";
        else if (o[0] == 0 && o[1] == 0 && o[2] == -1 && o[3] == -1) name = "rd";
        st->out_rz = strcmp(name, "rz") == 0;
        char detail[160];
        snprintf(detail, sizeof detail, "8+0.75ulp -> +%g, 8+0.25ulp -> +%g, -8-0.75ulp -> %g, -8-0.25ulp -> %g ulp",
                 o[0], o[1], o[2], o[3]);
        emit_str(fp, t, "output_rounding", name, detail);
    }
    dots_free(&v);
    return rc;
}

/* block_size: c = +0, p0 = 2^E, p1 = -2^E, s = 2^(E-F-1) at position j:
 * inside the first block s is dropped (d = 0); in a later block it stands
 * alone and d = s.  L = the first j that gives s. */
static int fam_block_size(FILE *fp, const probe_exec *ex, const probe_target *t, probe_state *st, char *err,
                          size_t el)
{
    if (st->F < 0 || t->k < 3) return 0;
    const int E = st->E;
    const double s = ldexp(1.0, E - st->F - 1);
    dots v;
    if (dots_new(&v, t->k - 2, t->k)) return -1;
    for (int j = 2; j < t->k; j++)
        if (put(&v, t, j - 2, 0, ldexp(1.0, E)) || put(&v, t, j - 2, 1, -ldexp(1.0, E)) ||
            put(&v, t, j - 2, j, s)) {
            dots_free(&v);
            return 0;
        }
    int rc = dots_run(ex, t, &v, err, el);
    if (rc == 0) {
        int j = 2;
        while (j < t->k && v.d[j - 2] == 0.0) j++;
        char detail[160];
        if (j < t->k) {
            st->L = j;
            snprintf(detail, sizeof detail, "2^(E-F-1) at position j survives 2^E - 2^E at positions 0,1 from j=%d", j);
            emit_int(fp, t, "block_size", j, detail);
        } else {
            st->L = -1;
            snprintf(detail, sizeof detail, "dropped at every position < K=%d: one block per instruction", t->k);
            char val[32];
            snprintf(val, sizeof val, "\">=%d\"", t->k);
            emit(fp, t, "block_size", val, "%s", detail);
        }
    }
    dots_free(&v);
    return rc;
}

/* carry_bits: c = 0 and every product of the first block the largest
 * significand squared ((2-u)^2, just under 4): the exact sum needs
 * floor(log2(sum)) - 1 bits above a product's leading bit.  Kept when d is
 * within one output ulp plus the alignment loss of the exact sum. */
static int fam_carry(FILE *fp, const probe_exec *ex, const probe_target *t, const probe_state *st, char *err,
                     size_t el)
{
    const int n = st->L > 0 ? st->L : t->k;
    const double u = ldexp(1.0, -prec_format_get(t->in)->fraction_bits);
    const double m = 2.0 - 2.0 * u; /* largest significand of the input */
    dots v;
    if (dots_new(&v, 1, t->k)) return -1;
    for (int i = 0; i < n; i++) v.a[i] = v.b[i] = m;
    int rc = dots_run(ex, t, &v, err, el);
    if (rc == 0) {
        const double exact = n * m * m;
        const int lead = ilogb(exact);
        const double tol = ldexp(1.0, lead - (st->q > 0 ? st->q : prec_format_get(t->out)->fraction_bits)) +
                           (st->F >= 0 ? n * ldexp(1.0, 1 - st->F) : 0.0);
        char detail[200];
        snprintf(detail, sizeof detail, "%d products (2-2u)^2: d=%.17g, exact %.17g", n, v.d[0], exact);
        if (fabs(v.d[0] - exact) <= tol) emit_int(fp, t, "carry_bits", lead - 1, detail);
        else emit_str(fp, t, "carry_bits", "lost", detail);
    }
    dots_free(&v);
    return rc;
}

/* inner_normalisation: c = 0, p0 = 2^E, p1 = -2^E, p2 = 2^(E-F-1) in one
 * block.  Summed left to right with a normalisation after each addition,
 * 2^E - 2^E = 0 and then + p2 gives p2; fused alignment to emax drops p2
 * and gives 0. */
static int fam_inner_normalisation(FILE *fp, const probe_exec *ex, const probe_target *t, const probe_state *st,
                                   char *err, size_t el)
{
    if (st->F < 0 || t->k < 3 || (st->L > 0 && st->L < 3)) return 0;
    dots v;
    if (dots_new(&v, 1, t->k)) return -1;
    if (put(&v, t, 0, 0, ldexp(1.0, st->E)) || put(&v, t, 0, 1, -ldexp(1.0, st->E)) ||
        put(&v, t, 0, 2, ldexp(1.0, st->E - st->F - 1))) {
        dots_free(&v);
        return 0;
    }
    int rc = dots_run(ex, t, &v, err, el);
    if (rc == 0) {
        char detail[120];
        snprintf(detail, sizeof detail, "2^E - 2^E + 2^(E-F-1) in one block gave %.9g", v.d[0]);
        emit_str(fp, t, "inner_normalisation", v.d[0] == 0.0 ? "none (fused)" : "sequential", detail);
    }
    dots_free(&v);
    return rc;
}

/* monotonicity: c1 = the output value just below 2^E, c2 = 2^E, with the
 * same n products s = 2^(E-F-1) in the first block.  s survives beside c1
 * (emax = E-1) and is dropped beside c2 (emax = E), so d(c1) > d(c2) can
 * happen: a larger input, a smaller result (Fasi et al. 2021, sec. 6). */
static int fam_monotonicity(FILE *fp, const probe_exec *ex, const probe_target *t, const probe_state *st,
                            char *err, size_t el)
{
    if (st->F < 0) return 0;
    const int n = (st->L > 0 ? st->L : t->k);
    const double top = ldexp(1.0, st->E);
    const double below = top - prec_ulp(top * 0.75, t->out);
    dots v;
    if (dots_new(&v, 2, t->k)) return -1;
    v.c[0] = below;
    v.c[1] = top;
    for (int i = 0; i < 2; i++)
        for (int p = 0; p < n; p++)
            if (put(&v, t, i, p, ldexp(1.0, st->E - st->F - 1))) {
                dots_free(&v);
                return 0;
            }
    int rc = dots_run(ex, t, &v, err, el);
    if (rc == 0) {
        char detail[200];
        snprintf(detail, sizeof detail, "c=%.17g -> %.17g, c=%.17g -> %.17g (%d terms 2^(E-F-1))", below, v.d[0],
                 top, v.d[1], n);
        emit_str(fp, t, "monotonicity", v.d[0] > v.d[1] ? "violated" : "not violated by probe", detail);
    }
    dots_free(&v);
    return rc;
}

/* subnormal_inputs: a0 = the smallest subnormal of the input, b0 a power of
 * two bringing the product near 1, c = 0: kept or flushed. */
static int fam_subnormal_inputs(FILE *fp, const probe_exec *ex, const probe_target *t, char *err, size_t el)
{
    const prec_format_info *fi = prec_format_get(t->in);
    const int es = ilogb(fi->min_subnormal);
    int x = -es;
    while (x > 0 && !prec_representable(ldexp(1.0, x), t->in)) x--;
    dots v;
    if (dots_new(&v, 1, t->k)) return -1;
    v.a[0] = fi->min_subnormal;
    v.b[0] = ldexp(1.0, x);
    int rc = dots_run(ex, t, &v, err, el);
    if (rc == 0) {
        const double p = ldexp(1.0, es + x);
        char detail[120];
        snprintf(detail, sizeof detail, "2^%d * 2^%d gave %.9g", es, x, v.d[0]);
        emit_str(fp, t, "subnormal_inputs", v.d[0] == p ? "kept" : v.d[0] == 0.0 ? "flushed" : "other", detail);
    }
    dots_free(&v);
    return rc;
}

/* subnormal_outputs: one product 2^(emin_out - 3), c = 0: the result is a
 * subnormal of the output (only where the input format reaches it);
 * subnormal_accumulator: c = 3 * 2^(emin_out - 2), no products: does a
 * subnormal c pass through? */
static int fam_subnormal_outputs(FILE *fp, const probe_exec *ex, const probe_target *t, char *err, size_t el)
{
    const int emin_out = prec_format_get(t->out)->emin;
    const double p = ldexp(1.0, emin_out - 3), cs = 3.0 * ldexp(1.0, emin_out - 2);
    dots v;
    if (dots_new(&v, 2, t->k)) return -1;
    const int reachable = put(&v, t, 0, 0, p) == 0;
    v.c[1] = cs;
    int rc = dots_run(ex, t, &v, err, el);
    if (rc == 0) {
        char detail[120];
        if (reachable) {
            snprintf(detail, sizeof detail, "product 2^%d gave %.9g", emin_out - 3, v.d[0]);
            emit_str(fp, t, "subnormal_outputs", v.d[0] == p ? "kept" : v.d[0] == 0.0 ? "flushed" : "other", detail);
        }
        snprintf(detail, sizeof detail, "c = 3*2^%d with zero products gave %.9g", emin_out - 2, v.d[1]);
        emit_str(fp, t, "subnormal_accumulator", v.d[1] == cs ? "kept" : v.d[1] == 0.0 ? "flushed" : "other", detail);
    }
    dots_free(&v);
    return rc;
}

/* tf32_conversion: a0 = 1 + 3*2^-12 (an fp32 value that tf32 cannot hold),
 * b0 = 1, c = -1: truncating the operand gives 0, rounding it to nearest
 * gives 2^-10. */
static int fam_tf32_conversion(FILE *fp, const probe_exec *ex, const probe_target *t, char *err, size_t el)
{
    if (t->in != PREC_TF32) return 0;
    dots v;
    if (dots_new(&v, 1, t->k)) return -1;
    v.a[0] = 1.0 + 3.0 * ldexp(1.0, -12);
    v.b[0] = 1.0;
    v.c[0] = -1.0;
    int rc = dots_run(ex, t, &v, err, el);
    if (rc == 0) {
        char detail[120];
        snprintf(detail, sizeof detail, "(1 + 3*2^-12) * 1 - 1 gave %.9g", v.d[0]);
        emit_str(fp, t, "tf32_conversion",
                 v.d[0] == 0.0 ? "truncate" : v.d[0] == ldexp(1.0, -10) ? "nearest" : "other", detail);
    }
    dots_free(&v);
    return rc;
}

/* zero_exponent: c = +0 (a zero term), p0 = 2^-145, p1 = -2^-j.  With RZ
 * into fp32 the result is 2^-145 - 2^-149 while p1 survives alignment and
 * 2^-145 once it falls below 2^(emax-F); the first dropped j gives emax =
 * F - j + 1, which is the zero exponent when it lies above -145.  Only
 * formats with products that small (bf16, tf32) can show it. */
static int fam_zero_exponent(FILE *fp, const probe_exec *ex, const probe_target *t, const probe_state *st,
                             char *err, size_t el)
{
    if (st->F < 0 || !st->out_rz || t->out != PREC_FP32) return 0;
    double a, b;
    if (probe_split_product(t->in, -ldexp(1.0, -200), &a, &b)) return 0;
    const int j0 = 150, J = 60;
    dots v;
    if (dots_new(&v, J, t->k)) return -1;
    for (int i = 0; i < J; i++)
        if (put(&v, t, i, 0, ldexp(1.0, -145)) || put(&v, t, i, 1, -ldexp(1.0, -(j0 + i)))) {
            dots_free(&v);
            return 0;
        }
    int rc = dots_run(ex, t, &v, err, el);
    if (rc == 0) {
        int i = 0;
        while (i < J && v.d[i] != ldexp(1.0, -145)) i++;
        char detail[160];
        if (i == J || i == 0) {
            snprintf(detail, sizeof detail, "2^-145 - 2^-j: no drop seen for j in [%d, %d]", j0, j0 + J - 1);
            emit_str(fp, t, "zero_exponent", "not observed", detail);
        } else {
            const int emax = st->F - (j0 + i) + 1;
            snprintf(detail, sizeof detail, "2^-145 - 2^-j dropped from j=%d: alignment granularity 2^%d, emax %d",
                     j0 + i, emax - st->F, emax);
            if (emax > -145) emit_int(fp, t, "zero_exponent", emax, detail);
            else emit_str(fp, t, "zero_exponent", "<=-145", detail);
        }
    }
    dots_free(&v);
    return rc;
}

/* zero_sign: the sign of zero results.  all-negative: c = -0 and every
 * product -0 * 1 (IEEE: -0); underflow: c = +0 and one product below half
 * the output's smallest subnormal, negative (IEEE RNE/RZ: -0; only where
 * the input format reaches it); cancel: c = 1, product -1 (IEEE: +0). */
static int fam_zero_sign(FILE *fp, const probe_exec *ex, const probe_target *t, char *err, size_t el)
{
    dots v;
    if (dots_new(&v, 3, t->k)) return -1;
    for (int i = 0; i < t->k; i++) {
        v.a[i] = -0.0;
        v.b[i] = 1.0;
    }
    v.c[0] = -0.0;
    const double tiny = -ldexp(1.0, out_min_exp(t->out) - 2);
    const int underflow = put(&v, t, 1, 0, tiny) == 0;
    v.c[2] = 1.0;
    v.a[2 * t->k] = -1.0;
    v.b[2 * t->k] = 1.0;
    int rc = dots_run(ex, t, &v, err, el);
    if (rc == 0) {
        char val[96], detail[160];
        const char *s0 = signbit(v.d[0]) ? "-0" : "+0", *s2 = signbit(v.d[2]) ? "-0" : "+0";
        if (v.d[0] != 0.0 || v.d[2] != 0.0 || (underflow && v.d[1] != 0.0)) {
            snprintf(detail, sizeof detail, "zero dots gave %g, %g, %g", v.d[0], v.d[1], v.d[2]);
            emit_str(fp, t, "zero_sign", "nonzero", detail);
        } else {
            if (underflow)
                snprintf(val, sizeof val, "all-negative %s, underflow %s, cancel %s", s0, signbit(v.d[1]) ? "-0" : "+0", s2);
            else snprintf(val, sizeof val, "all-negative %s, cancel %s", s0, s2);
            snprintf(detail, sizeof detail, "c=-0 with -0 products; c=+0 with product %g; c=1 with product -1", tiny);
            emit_str(fp, t, "zero_sign", val, detail);
        }
    }
    dots_free(&v);
    return rc;
}

int probe_fingerprint_target(FILE *fp, const probe_exec *ex, const probe_target *t, char *err, size_t err_len)
{
    probe_state st = {top_exp(t), -1, -1, -1, 0};
    probe_json_target(fp, "route", t);
    fprintf(fp, ",\"k\":%d,\"source\":", t->k);
    base_json_string(fp, ex->source);
    fputs("}\n", fp);
    if (fam_products_exact(fp, ex, t, err, err_len)) return -1;
    if (fam_alignment_bits(fp, ex, t, &st, err, err_len)) return -1;
    if (fam_alignment_rounding(fp, ex, t, &st, err, err_len)) return -1;
    if (fam_output_bits(fp, ex, t, &st, err, err_len)) return -1;
    if (fam_output_rounding(fp, ex, t, &st, err, err_len)) return -1;
    if (fam_block_size(fp, ex, t, &st, err, err_len)) return -1;
    if (fam_carry(fp, ex, t, &st, err, err_len)) return -1;
    if (fam_inner_normalisation(fp, ex, t, &st, err, err_len)) return -1;
    if (fam_monotonicity(fp, ex, t, &st, err, err_len)) return -1;
    if (fam_subnormal_inputs(fp, ex, t, err, err_len)) return -1;
    if (fam_subnormal_outputs(fp, ex, t, err, err_len)) return -1;
    if (fam_tf32_conversion(fp, ex, t, err, err_len)) return -1;
    if (fam_zero_exponent(fp, ex, t, &st, err, err_len)) return -1;
    if (fam_zero_sign(fp, ex, t, err, err_len)) return -1;
    return 0;
}

/* ---- the model as an executor ------------------------------------------------ */

int probe_model_run(void *ctx, const probe_target *t, int n, const void *a, const void *b, const uint32_t *c,
                    uint32_t *d, char *err, size_t err_len)
{
    const char *gen = ctx;
    const mma_model *m = mma_model_find(gen, t->route, t->in, t->out);
    if (!m) {
        snprintf(err, err_len, "model %s has no %s route for %s -> %s", gen, t->route, prec_format_name(t->in),
                 prec_format_name(t->out));
        return -1;
    }
    const int sz = mma_elem_bytes(t->in);
    for (int i = 0; i < n; i++)
        d[i] = mma_dot(&m->arith, t->k, (const uint8_t *)a + (size_t)i * t->k * sz,
                       (const uint8_t *)b + (size_t)i * t->k * sz, c[i]);
    return 0;
}

int probe_model_targets(const char *gen, probe_target *out, int max)
{
    int n = 0;
    for (int i = 0; i < mma_model_count() && n < max; i++) {
        const mma_model *m = mma_model_at(i);
        if (strcmp(m->gen, gen) != 0) continue;
        out[n].route = m->route;
        out[n].in = m->arith.in;
        out[n].out = m->arith.out;
        out[n].k = m->instr_k;
        n++;
    }
    return n;
}

int probe_fingerprint_model(FILE *fp, const char *gen, char *err, size_t err_len)
{
    char extra[256];
    snprintf(extra, sizeof extra, "\"source\":\"model\",\"model\":\"%s\",\"device\":\"model of %s\"", gen, gen);
    base_json_header(fp, "probe", extra);
    probe_target targets[64];
    const int n = probe_model_targets(gen, targets, 64);
    char source[64];
    snprintf(source, sizeof source, "model:%s", gen);
    probe_exec ex = {source, probe_model_run, (void *)gen};
    for (int i = 0; i < n; i++) {
        const mma_model *m = mma_model_find(gen, targets[i].route, targets[i].in, targets[i].out);
        probe_json_target(fp, "params", &targets[i]);
        fprintf(fp, ",\"block\":%d,\"frac_bits\":%d,\"align\":\"%s\",\"out_rounding\":\"%s\","
                    "\"out_frac_bits\":%d,\"zero_exp\":%d,\"note\":",
                m->arith.block, m->arith.frac_bits, mma_align_name(m->arith.align),
                prec_round_mode_name(m->arith.out_mode), m->arith.out_frac_bits, m->arith.zero_exp);
        base_json_string(fp, m->note ? m->note : "");
        fputs(",\"source\":", fp);
        base_json_string(fp, m->source);
        fputs("}\n", fp);
        if (probe_fingerprint_target(fp, &ex, &targets[i], err, err_len)) return -1;
    }
    return 0;
}

/* ---- accumulation against K ------------------------------------------------- */

double probe_dot_error(int k, const double *a, const double *b, double d)
{
    /* exact sum of exact products: TwoProd/TwoSum into a Neumaier sum (the
     * products of fp8 values are exact doubles, the sum error is ~k*2^-106) */
    double s = 0.0, comp = 0.0, mag = 0.0;
    for (int i = 0; i < k; i++) {
        const double p = a[i] * b[i];
        const double t = s + p;
        comp += fabs(s) >= fabs(p) ? (s - t) + p : (p - t) + s;
        s = t;
        mag += fabs(p);
    }
    const double exact = s + comp;
    return mag > 0.0 ? fabs(d - exact) / mag : fabs(d - exact);
}

static int cmp_double(const void *x, const void *y)
{
    const double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

int probe_accum_sweep_model(FILE *fp, const char *gen, int interval, int ndots, uint64_t seed, char *err,
                            size_t err_len)
{
    static const prec_format fmts[2] = {PREC_E4M3, PREC_E5M2};
    static const char *const routes[] = {"wgmma", "tcgen05", "mma.sync"};
    const int kmax = 16384;
    double *a = malloc(sizeof *a * kmax), *b = malloc(sizeof *b * kmax);
    double *e_none = malloc(sizeof(double) * ndots), *e_prom = malloc(sizeof(double) * ndots);
    uint8_t *pa = malloc(kmax), *pb = malloc(kmax);
    int rc = -1, wrote = 0;
    if (!a || !b || !e_none || !e_prom || !pa || !pb) {
        snprintf(err, err_len, "out of memory");
        goto done;
    }
    for (int f = 0; f < 4; f++) {
        /* f / 2: the format; f % 2: normal inputs (sums random-walk) or
         * |normal| inputs (sums grow with K, truncation errors add up) */
        const prec_format fmt = fmts[f / 2];
        const int positive = f % 2;
        const mma_model *m = NULL;
        for (int r = 0; r < 3 && !m; r++) m = mma_model_find(gen, routes[r], fmt, PREC_FP32);
        if (!m) continue;
        prec_rng rng;
        prec_rng_seed(&rng, seed + (uint64_t)f);
        for (int K = 128; K <= kmax; K *= 2) {
            for (int i = 0; i < ndots; i++) {
                for (int k = 0; k < K; k++) {
                    const double x = prec_rng_normal(&rng), y = prec_rng_normal(&rng);
                    a[k] = prec_rne(positive ? fabs(x) : x, fmt);
                    b[k] = prec_rne(positive ? fabs(y) : y, fmt);
                    mma_store(fmt, pa, k, a[k]);
                    mma_store(fmt, pb, k, b[k]);
                }
                /* no promotion: one chain of blocks through the whole K */
                const uint32_t d_none = mma_dot(&m->arith, K, pa, pb, 0u);
                /* promotion: each interval's partial sum, started from zero in
                 * the unit, is added to an fp32 accumulator (RNE, CUDA cores) */
                double acc = 0.0;
                for (int k0 = 0; k0 < K; k0 += interval) {
                    const int n = K - k0 < interval ? K - k0 : interval;
                    const double part = prec_decode(mma_dot(&m->arith, n, pa + k0, pb + k0, 0u), PREC_FP32);
                    acc = prec_add(acc, part, PREC_FP32, PREC_ROUNDING_RNE, 0);
                }
                e_none[i] = probe_dot_error(K, a, b, prec_decode(d_none, PREC_FP32));
                e_prom[i] = probe_dot_error(K, a, b, acc);
            }
            qsort(e_none, ndots, sizeof *e_none, cmp_double);
            qsort(e_prom, ndots, sizeof *e_prom, cmp_double);
            for (int w = 0; w < 2; w++) {
                const double *e = w ? e_prom : e_none;
                fprintf(fp, "{\"record\":\"accum\",\"source\":\"model:%s\",\"route\":\"%s\",\"in\":\"%s\","
                            "\"inputs\":\"%s\",\"promotion\":",
                        gen, m->route, prec_format_name(fmt), positive ? "positive" : "normal");
                if (w) fprintf(fp, "\"fp32 every %d\"", interval);
                else fputs("\"none\"", fp);
                fprintf(fp, ",\"K\":%d,\"dots\":%d,\"err_median\":", K, ndots);
                base_json_double(fp, e[ndots / 2]);
                fputs(",\"err_max\":", fp);
                base_json_double(fp, e[ndots - 1]);
                fputs("}\n", fp);
            }
            wrote++;
        }
    }
    if (!wrote) {
        snprintf(err, err_len, "model %s has no fp8 route (fp8 models: a100 (fallback), h100, b200)", gen);
        goto done;
    }
    rc = 0;
done:
    free(a);
    free(b);
    free(e_none);
    free(e_prom);
    free(pa);
    free(pb);
    return rc;
}

/* ---- diff -------------------------------------------------------------------- */

/* A property record reduced to its key and value text. */
typedef struct {
    char key[160];  /* "route in->out property" */
    char value[96]; /* the value's JSON text */
} prop_row;

typedef struct {
    prop_row *rows;
    int n, cap;
    char device[160];
} prop_file;

/* Read the JSON value starting at *s (string, number, literal, array or
 * object) into out (its text, strings unquoted); advances *s.  -1 when
 * malformed. */
static int json_value(const char **s, char *out, size_t len)
{
    const char *p = *s;
    size_t n = 0;
    if (*p == '"') {
        p++;
        while (*p && *p != '"') {
            char ch = *p++;
            if (ch == '\\') {
                if (!*p) return -1;
                ch = *p++;
                if (ch == 'u') { /* keep \uXXXX escapes as text */
                    if (n + 1 < len) out[n++] = '?';
                    for (int i = 0; i < 4; i++)
                        if (!isxdigit((unsigned char)*p++)) return -1;
                    continue;
                }
                if (ch == 'n') ch = '\n';
                else if (ch == 't') ch = '\t';
            }
            if (n + 1 < len) out[n++] = ch;
        }
        if (*p != '"') return -1;
        p++;
    } else if (*p == '[' || *p == '{') {
        int depth = 0, in_str = 0;
        do {
            char ch = *p;
            if (!ch) return -1;
            if (in_str) {
                if (ch == '\\' && p[1]) { p++; }
                else if (ch == '"') in_str = 0;
            } else if (ch == '"') in_str = 1;
            else if (ch == '[' || ch == '{') depth++;
            else if (ch == ']' || ch == '}') depth--;
            if (n + 1 < len) out[n++] = ch;
            p++;
        } while (depth > 0);
    } else {
        while (*p && *p != ',' && *p != '}' && !isspace((unsigned char)*p)) {
            if (n + 1 < len) out[n++] = *p;
            p++;
        }
        if (n == 0) return -1;
    }
    out[n] = '\0';
    *s = p;
    return 0;
}

/* Parse one flat JSON object line: calls back for each key and value text. */
static int json_object(const char *line, int (*cb)(void *, const char *, const char *), void *ctx)
{
    const char *p = line;
    while (isspace((unsigned char)*p)) p++;
    if (*p++ != '{') return -1;
    for (;;) {
        while (isspace((unsigned char)*p)) p++;
        if (*p == '}') return 0;
        char key[64], val[512];
        if (*p != '"' || json_value(&p, key, sizeof key)) return -1;
        while (isspace((unsigned char)*p)) p++;
        if (*p++ != ':') return -1;
        while (isspace((unsigned char)*p)) p++;
        if (json_value(&p, val, sizeof val)) return -1;
        if (cb(ctx, key, val)) return -1;
        while (isspace((unsigned char)*p)) p++;
        if (*p == ',') p++;
        else if (*p != '}') return -1;
    }
}

typedef struct {
    char record[32], route[32], in[16], out[16], property[48], value[96], device[160];
} line_fields;

static int collect(void *ctx, const char *key, const char *val)
{
    line_fields *f = ctx;
#define TAKE(name) if (strcmp(key, #name) == 0) { snprintf(f->name, sizeof f->name, "%s", val); return 0; }
    TAKE(record) TAKE(route) TAKE(in) TAKE(out) TAKE(property) TAKE(value) TAKE(device)
#undef TAKE
    return 0;
}

#define FINGERPRINT_MAX_BYTES (64L << 20) /* a real fingerprint is a few tens of KiB */

/* One line of f into line (at most cap - 1 bytes, the newline dropped).
 * Returns 1 for a line, 0 at the end of the file, -1 for a line longer than
 * cap - 1 bytes, -2 for a NUL byte (binary data: /dev/zero would otherwise
 * be read forever as empty lines), -3 past FINGERPRINT_MAX_BYTES in all. */
static int read_line(FILE *f, char *line, size_t cap, long *total)
{
    size_t n = 0;
    int c;
    while ((c = getc(f)) != EOF) {
        if (++*total > FINGERPRINT_MAX_BYTES) return -3;
        if (c == '\0') return -2;
        if (c == '\n') break;
        if (n + 1 == cap) return -1;
        line[n++] = (char)c;
    }
    line[n] = '\0';
    return c == EOF && n == 0 ? 0 : 1;
}

/* Read the property records of a fingerprint from f (named path in errors);
 * closes f. */
static int read_fingerprint(FILE *f, const char *path, prop_file *pf, char *err, size_t err_len)
{
    memset(pf, 0, sizeof *pf);
    char line[8192];
    int lineno = 0, header = 0, got;
    long total = 0;
    while ((got = read_line(f, line, sizeof line, &total)) != 0) {
        lineno++;
        if (got == -1) {
            snprintf(err, err_len, "'%s' line %d: longer than %zu bytes", path, lineno, sizeof line - 1);
            goto fail;
        }
        if (got == -2) {
            snprintf(err, err_len, "'%s' line %d: binary data (a NUL byte): not a fingerprint", path, lineno);
            goto fail;
        }
        if (got == -3) {
            snprintf(err, err_len, "'%s' is larger than %ld MiB: not a fingerprint", path, FINGERPRINT_MAX_BYTES >> 20);
            goto fail;
        }
        if (line[0] == '\0') continue;
        line_fields lf;
        memset(&lf, 0, sizeof lf);
        if (json_object(line, collect, &lf)) {
            snprintf(err, err_len, "'%s' line %d: not a JSON object", path, lineno);
            goto fail;
        }
        if (strcmp(lf.record, "header") == 0) {
            header = 1;
            snprintf(pf->device, sizeof pf->device, "%s", lf.device[0] ? lf.device : "?");
            continue;
        }
        if (strcmp(lf.record, "property") != 0) continue;
        if (!lf.route[0] || !lf.in[0] || !lf.out[0] || !lf.property[0] || !lf.value[0]) {
            snprintf(err, err_len, "'%s' line %d: property record without route/in/out/property/value", path,
                     lineno);
            goto fail;
        }
        if (pf->n == pf->cap) {
            int cap = pf->cap ? 2 * pf->cap : 64;
            prop_row *r = realloc(pf->rows, sizeof *r * cap);
            if (!r) {
                snprintf(err, err_len, "out of memory reading '%s'", path);
                goto fail;
            }
            pf->rows = r;
            pf->cap = cap;
        }
        snprintf(pf->rows[pf->n].key, sizeof pf->rows[pf->n].key, "%s %s->%s %s", lf.route, lf.in, lf.out,
                 lf.property);
        snprintf(pf->rows[pf->n].value, sizeof pf->rows[pf->n].value, "%s", lf.value);
        pf->n++;
    }
    if (ferror(f)) {
        snprintf(err, err_len, "cannot read '%s': %s", path, strerror(errno));
        goto fail;
    }
    fclose(f);
    if (!header) {
        snprintf(err, err_len, "'%s' has no header record: not a fingerprint", path);
        free(pf->rows);
        return -1;
    }
    if (pf->n == 0) {
        snprintf(err, err_len, "'%s' has no property records: not a fingerprint", path);
        free(pf->rows);
        return -1;
    }
    return 0;
fail:
    fclose(f);
    free(pf->rows);
    return -1;
}

static const prop_row *find_row(const prop_file *pf, const char *key)
{
    for (int i = 0; i < pf->n; i++)
        if (strcmp(pf->rows[i].key, key) == 0) return &pf->rows[i];
    return NULL;
}

static FILE *open_fingerprint(const char *path, char *err, size_t err_len)
{
    FILE *f = fopen(path, "r");
    if (!f) snprintf(err, err_len, "cannot open '%s': %s", path, strerror(errno));
    return f;
}

int probe_fingerprint_table(FILE *out, FILE *in, char *err, size_t err_len)
{
    prop_file P;
    if (read_fingerprint(in, "fingerprint", &P, err, err_len)) return -1;
    fprintf(out, "%s\n%-52s %s\n", P.device, "route in->out property", "value");
    for (int i = 0; i < P.n; i++) fprintf(out, "%-52s %s\n", P.rows[i].key, P.rows[i].value);
    free(P.rows);
    return 0;
}

int probe_fingerprint_diff(FILE *out, const char *path_a, const char *path_b, char *err, size_t err_len)
{
    prop_file A, B;
    FILE *fa = open_fingerprint(path_a, err, err_len);
    if (!fa || read_fingerprint(fa, path_a, &A, err, err_len)) return -1;
    FILE *fb = open_fingerprint(path_b, err, err_len);
    if (!fb || read_fingerprint(fb, path_b, &B, err, err_len)) {
        free(A.rows);
        return -1;
    }
    int same = 0, differ = 0, only_a = 0, only_b = 0;
    fprintf(out, "A: %s (%s)\nB: %s (%s)\n", path_a, A.device, path_b, B.device);
    fprintf(out, "%-52s %-16s %-16s\n", "route in->out property", "A", "B");
    for (int i = 0; i < A.n; i++) {
        const prop_row *rb = find_row(&B, A.rows[i].key);
        if (!rb) {
            only_a++;
            continue;
        }
        const int eq = strcmp(A.rows[i].value, rb->value) == 0;
        if (eq) same++;
        else differ++;
        fprintf(out, "%-52s %-16s %-16s%s\n", A.rows[i].key, A.rows[i].value, rb->value, eq ? "" : "  *differs");
    }
    for (int i = 0; i < B.n; i++)
        if (!find_row(&A, B.rows[i].key)) only_b++;
    fprintf(out, "%d properties compared: %d same, %d differ; %d only in A, %d only in B\n", same + differ, same,
            differ, only_a, only_b);
    free(A.rows);
    free(B.rows);
    return 0;
}
