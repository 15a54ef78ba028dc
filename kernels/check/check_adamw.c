/* kernels/check/check_adamw.c — the checks of adamw, adamw_sr and adamw_split
 * (registry entries in kernels/adamw.cu).
 *
 * Inputs per shape: weights (or the fp32 master) ~ N(0,1), g ~ N(0,1) in the
 * path's format, m ~ N(0, 0.1) and v = N(0, 0.3)^2 in fp32; lr = 0.01,
 * beta1 = 0.9, beta2 = 0.95, eps = 1e-8, wd = 0.1 (as fp32), steps 1, 7 and
 * 1000.  Outputs compared with reference/adamw.h: the new weights, m, v, the
 * fp32 master where there is one (split_master: the master rebuilt from the
 * bf16 weights and the low-half buffer).
 *
 * Bounds replay the kernel's operations (adamw.cu spells each one with an
 * explicit-rounding intrinsic) on kval numbers; sqrtf and IEEE division are
 * correctly rounded (0.5 ulp).  The bias corrections are fp32 roundings of
 * 1 - beta^t computed in double.  Weight stores: round to nearest (u);
 * stochastic rounding and the split master's truncation can be anything
 * below one ulp (2u); the fp32 stochastic rounding starts from the exact
 * difference (TwoSum), so only the operands' errors precede it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/adamw.h"
#include "kernels/check/checks.h"
#include "kernels/common/ktensor_io.h"
#include "reference/adamw.h"

typedef struct {
    int64_t n;
    int64_t step;
} aw_shape;

/* n = 1 (a lone element: a skipped one stands out), odd sizes past any block
 * multiple; steps at the start, early and late (bias corrections near 1). */
static const aw_shape shapes[] = {{1, 1}, {1000, 7}, {4099, 1000}, {65537, 3}};

static const prec_format F32 = PREC_FP32;

static double sqrt_d(double x) { return sqrt(x); }

typedef struct {
    double *p_in, *master_in, *g, *m, *v;        /* inputs: p_in the weights, master_in the fp32 master */
    double *p, *master, *mo, *vo;                 /* kernel outputs */
    double *p_ref, *m_ref, *v_ref;
    uint16_t *low;
} aw_buffers;

static void free_aw(aw_buffers *b)
{
    free(b->p_in); free(b->master_in); free(b->g); free(b->m); free(b->v); free(b->p); free(b->master);
    free(b->mo); free(b->vo); free(b->p_ref); free(b->m_ref); free(b->v_ref); free(b->low);
}

/* fp32 bits split into the bf16 high half (as its value) and the low 16 bits. */
static void split_master(double master, double *hi, uint16_t *lo)
{
    float f = (float)master;
    uint32_t bits;
    memcpy(&bits, &f, 4);
    uint32_t hb = bits & 0xFFFF0000u;
    float h;
    memcpy(&h, &hb, 4);
    *hi = h;
    *lo = (uint16_t)(bits & 0xFFFFu);
}

static double join_master(double hi, uint16_t lo)
{
    float h = (float)hi;
    uint32_t bits;
    memcpy(&bits, &h, 4);
    bits = (bits & 0xFFFF0000u) | lo;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static int run_gpu(kpath path, kadamw_storage storage, int variant, const aw_shape *s, const kadamw_hparams *h,
                   aw_buffers *b)
{
    const prec_format f = kcheck_path_format(path);
    const int has_master = storage == KADAMW_MASTER_FP32 && path != KPATH_FP32;
    int64_t shp[1] = {s->n};
    ktensor P = {0}, G = {0}, M = {0}, V = {0}, MS = {0};
    void *low = NULL;
    int rc = -1;
    if (ktensor_alloc(&P, f, 1, shp) || ktensor_alloc(&G, f, 1, shp) || ktensor_alloc(&M, F32, 1, shp) ||
        ktensor_alloc(&V, F32, 1, shp) || (has_master && ktensor_alloc(&MS, F32, 1, shp)))
        goto done;
    if (storage == KADAMW_SPLIT_MASTER &&
        (kdevice_alloc(&low, s->n * sizeof(uint16_t), "adamw check low bits") ||
         kdevice_upload(low, b->low, s->n * sizeof(uint16_t), "adamw check low bits")))
        goto done;
    /* with a master the kernel must not read the weights: they stay poisoned */
    if ((!has_master && ktensor_upload(&P, b->p_in)) || ktensor_upload(&G, b->g) || ktensor_upload(&M, b->m) ||
        ktensor_upload(&V, b->v) || (has_master && ktensor_upload(&MS, b->master_in)))
        goto done;
    if (kadamw_step(path, storage, variant, s->n, P.data, has_master ? MS.data : NULL, low, M.data, V.data, G.data,
                    h) ||
        kernels_sync("adamw"))
        goto done;
    if (ktensor_download(&P, b->p) || ktensor_download(&M, b->mo) || ktensor_download(&V, b->vo) ||
        (has_master && ktensor_download(&MS, b->master)) ||
        (storage == KADAMW_SPLIT_MASTER && kdevice_download(b->low, low, s->n * sizeof(uint16_t), "adamw low bits")))
        goto done;
    rc = 0;
done:
    ktensor_free(&P); ktensor_free(&G); ktensor_free(&M); ktensor_free(&V); ktensor_free(&MS);
    kdevice_free(low);
    return rc;
}

/* The bias correction as the kernel holds it: fp32 rounding of 1 - beta^t
 * computed in double (pow within an ulp or two of double: 4 * 2^-53 absolute
 * covers it and the subtraction). */
static kval bias_correction(double beta, int64_t t)
{
    kval r = {1.0 - pow(beta, (double)t), 4 * 0x1p-53, 4 * 0x1p-53};
    return kval_round(r, F32);
}

static int check_shape(kcheck_ctx *ctx, kpath path, kadamw_storage storage, int variant, const aw_shape *s)
{
    const prec_format f = kcheck_path_format(path);
    const double u = prec_format_get(f)->unit_roundoff, u32 = prec_format_get(F32)->unit_roundoff;
    const int64_t n = s->n;
    const int has_master = storage == KADAMW_MASTER_FP32 && path != KPATH_FP32;
    aw_buffers b;
    memset(&b, 0, sizeof b);
    size_t bytes = n * sizeof(double);
    b.p_in = malloc(bytes); b.master_in = malloc(bytes); b.g = malloc(bytes); b.m = malloc(bytes);
    b.v = malloc(bytes); b.p = malloc(bytes); b.master = malloc(bytes); b.mo = malloc(bytes); b.vo = malloc(bytes);
    b.p_ref = malloc(bytes); b.m_ref = malloc(bytes); b.v_ref = malloc(bytes); b.low = malloc(n * sizeof(uint16_t));
    if (!b.p_in || !b.master_in || !b.g || !b.m || !b.v || !b.p || !b.master || !b.mo || !b.vo || !b.p_ref ||
        !b.m_ref || !b.v_ref || !b.low) {
        free_aw(&b);
        return kernels_fail("adamw check: out of host memory");
    }
    prec_rng rng;
    kcheck_rng(ctx, &rng);
    /* the weight the update starts from, as the kernel reads it */
    double *w = malloc(bytes);
    if (!w) {
        free_aw(&b);
        return kernels_fail("adamw check: out of host memory");
    }
    if (has_master || storage == KADAMW_SPLIT_MASTER) kcheck_fill_normal(&rng, b.master_in, n, 0.0, 1.0, F32);
    else kcheck_fill_normal(&rng, b.p_in, n, 0.0, 1.0, f);
    for (int64_t i = 0; i < n; i++) {
        if (storage == KADAMW_SPLIT_MASTER) {
            split_master(b.master_in[i], &b.p_in[i], &b.low[i]);
            w[i] = b.master_in[i];
        } else if (has_master) {
            w[i] = b.master_in[i];
        } else {
            w[i] = b.p_in[i];
        }
    }
    kcheck_fill_normal(&rng, b.g, n, 0.0, 1.0, f);
    kcheck_fill_normal(&rng, b.m, n, 0.0, 0.1, F32);
    kcheck_fill_normal(&rng, b.v, n, 0.0, 0.3, F32);
    for (int64_t i = 0; i < n; i++) b.v[i] = prec_rne(b.v[i] * b.v[i], F32);
    const kadamw_hparams h = {0.01f, 0.9f, 0.95f, 1e-8f, 0.1f, s->step, kcheck_seed(ctx)};

    if (run_gpu(path, storage, variant, s, &h, &b) != 0) {
        free(w);
        free_aw(&b);
        return -1;
    }
    const ref_adamw_hparams rh = {h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, (long)h.step};
    ref_ctx rc = REF_CTX_DEFAULT;
    ref_adamw(&rc, n, w, b.g, b.m, b.v, &rh, b.p_ref, b.m_ref, b.v_ref);

    char shape_name[96];
    snprintf(shape_name, sizeof shape_name, "n=%lld step=%lld", (long long)n, (long long)s->step);
    kcheck_acc ap, am, av, ams;
    kcheck_acc_init(&ap, "p", shape_name, u);
    kcheck_acc_init(&am, "m", shape_name, u32);
    kcheck_acc_init(&av, "v", shape_name, u32);
    kcheck_acc_init(&ams, "master", shape_name, u32);
    const kval lr = kval_exact(h.lr), b1 = kval_exact(h.beta1), b2 = kval_exact(h.beta2), eps = kval_exact(h.eps),
               wd = kval_exact(h.weight_decay);
    const kval c1 = kval_exact(1.0 - h.beta1), c2 = kval_exact(1.0 - h.beta2); /* exact in fp32 */
    const kval bc1 = bias_correction(h.beta1, h.step), bc2 = bias_correction(h.beta2, h.step);
    for (int64_t i = 0; i < n; i++) {
        const kval p = kval_exact(w[i]), g = kval_exact(b.g[i]), m = kval_exact(b.m[i]), v = kval_exact(b.v[i]);
        kval m1, v1, base, t;
        if (variant == KADAMW_LLMC) {
            m1 = kval_fma(b1, m, kval_mul(c1, g, F32), F32);
            v1 = kval_fma(b2, v, kval_mul(c2, kval_mul(g, g, F32), F32), F32);
            kval mhat = kval_div(m1, bc1, F32), vhat = kval_div(v1, bc2, F32);
            kval den = kval_add(kval_monotone(vhat, sqrt_d, 0.0, INFINITY, 0.5, 0.0, F32), eps, F32);
            t = kval_mul(lr, kval_fma(wd, p, kval_div(mhat, den, F32), F32), F32);
            base = p;
        } else {
            kval decay = kval_sub(kval_exact(1.0), kval_mul(lr, wd, F32), F32);
            base = kval_mul(p, decay, F32);
            m1 = kval_fma(c1, kval_sub(g, m, F32), m, F32);
            v1 = kval_fma(c2, kval_sub(kval_mul(g, g, F32), v, F32), v, F32);
            kval sbc2 = kval_monotone(bc2, sqrt_d, 0.0, INFINITY, 0.5, 0.0, F32);
            kval step_size = kval_div(lr, bc1, F32);
            kval den = kval_add(kval_div(kval_monotone(v1, sqrt_d, 0.0, INFINITY, 0.5, 0.0, F32), sbc2, F32), eps, F32);
            t = kval_mul(step_size, kval_div(m1, den, F32), F32);
        }
        kval hi = kval_sub(base, t, F32); /* the fp32 new weight */
        kval stored;                      /* the weight as stored in the path's format */
        if (storage == KADAMW_STOCHASTIC) {
            /* fp32: SR of the exact difference; narrower: SR of the fp32 hi */
            kval x = path == KPATH_FP32 ? kval_sub(base, t, PREC_FP64) : hi;
            stored = kval_round(kval_round(x, f), f); /* any point below one ulp: 2u */
        } else if (storage == KADAMW_SPLIT_MASTER) {
            stored = kval_round(kval_round(hi, f), f); /* truncation: below one ulp */
        } else {
            stored = path == KPATH_FP32 ? hi : kval_round(hi, f);
        }
        if (kcheck_acc_add(&ap, i, b.p[i], b.p_ref[i], stored.e, stored.p, fabs(b.p_ref[i])))
            kcheck_acc_detail(&ap, "i %lld: got %.9g ref %.17g p %.9g g %.9g m %.9g v %.9g", (long long)i, b.p[i],
                              b.p_ref[i], w[i], b.g[i], b.m[i], b.v[i]);
        if (kcheck_acc_add(&am, i, b.mo[i], b.m_ref[i], m1.e, m1.p, fabs(b.m_ref[i])))
            kcheck_acc_detail(&am, "i %lld: got %.9g ref %.17g m %.9g g %.9g", (long long)i, b.mo[i], b.m_ref[i],
                              b.m[i], b.g[i]);
        if (kcheck_acc_add(&av, i, b.vo[i], b.v_ref[i], v1.e, v1.p, fabs(b.v_ref[i])))
            kcheck_acc_detail(&av, "i %lld: got %.9g ref %.17g v %.9g g %.9g", (long long)i, b.vo[i], b.v_ref[i],
                              b.v[i], b.g[i]);
        if (has_master || storage == KADAMW_SPLIT_MASTER) {
            double got = storage == KADAMW_SPLIT_MASTER ? join_master(b.p[i], b.low[i]) : b.master[i];
            if (kcheck_acc_add(&ams, i, got, b.p_ref[i], hi.e, hi.p, fabs(b.p_ref[i])))
                kcheck_acc_detail(&ams, "i %lld: got %.9g ref %.17g master %.9g", (long long)i, got, b.p_ref[i], w[i]);
        }
    }
    kcheck_acc_report(ctx, &ap);
    kcheck_acc_report(ctx, &am);
    kcheck_acc_report(ctx, &av);
    if (has_master || storage == KADAMW_SPLIT_MASTER) kcheck_acc_report(ctx, &ams);
    free(w);
    free_aw(&b);
    return 0;
}

static int check_storage(kcheck_ctx *ctx, kpath path, kadamw_storage storage, int variant)
{
    char why[160];
    if (!kadamw_supports(path, storage, why, sizeof why))
        return kernels_fail("adamw check %s/%s: %s", kpath_name(path), kadamw_storage_name(storage), why);
    int n = (int)(sizeof shapes / sizeof shapes[0]);
    if (kcheck_quick(ctx)) n = 2;
    for (int i = 0; i < n; i++)
        if (check_shape(ctx, path, storage, variant, &shapes[i]) != 0) return -1;
    return 0;
}

int kcheck_adamw(kcheck_ctx *ctx, kpath path, int variant)
{
    return check_storage(ctx, path, KADAMW_MASTER_FP32, variant);
}

int kcheck_adamw_sr(kcheck_ctx *ctx, kpath path, int variant)
{
    return check_storage(ctx, path, KADAMW_STOCHASTIC, variant);
}

int kcheck_adamw_split(kcheck_ctx *ctx, kpath path, int variant)
{
    return check_storage(ctx, path, KADAMW_SPLIT_MASTER, variant);
}
