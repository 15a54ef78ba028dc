/* kernels/check/check_adamw.c — the checks of adamw, adamw_sr and adamw_split
 * (registry entries in kernels/adamw.cu).
 *
 * Inputs per shape: weights (or the fp32 master) ~ N(0,1), g ~ N(0,1) in the
 * path's format, m ~ N(0, 0.1) and v = N(0, 0.3)^2 in fp32; lr = 0.01,
 * beta1 = 0.9, beta2 = 0.95, eps = 1e-8, wd = 0.1 (as fp32), steps 1, 7 and
 * 1000.  Outputs compared with reference/adamw.h: the new weights, m, v, the
 * fp32 master where there is one (split_master: the master rebuilt from the
 * bf16 weights and the low-half buffer).  The fp32 path's master storage
 * also writes a working copy (bf16 on even shapes, fp16 on odd ones, as
 * the trainer's bf16/fp16 weights with an fp32 master): it must be the
 * kernel's own new fp32 weights rounded to nearest even, bit for bit.
 *
 * The comparison is kcmp_adamw (compare_adamw.h, shared with `ulpscope
 * verify`): bounds replay the kernel's operations (adamw.cu spells each one
 * with an explicit-rounding intrinsic) on kval numbers; sqrtf and IEEE
 * division are correctly rounded (0.5 ulp).  The bias corrections are fp32 roundings of
 * 1 - beta^t computed in double.  Weight stores: round to nearest (u);
 * stochastic rounding and the split master's truncation can be anything
 * below one ulp (2u); the fp32 stochastic rounding starts from the exact
 * difference (TwoSum), so only the operands' errors precede it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/adamw.h"
#include "kernels/check/checks.h"
#include "kernels/check/compare_adamw.h"
#include "kernels/common/ktensor_io.h"

typedef struct {
    int64_t n;
    int64_t step;
} aw_shape;

/* n = 1 (a lone element: a skipped one stands out), odd sizes past any block
 * multiple; steps at the start, early and late (bias corrections near 1). */
static const aw_shape shapes[] = {{1, 1}, {1000, 7}, {4099, 1000}, {65537, 3}};

static const prec_format F32 = PREC_FP32;

typedef struct {
    double *p_in, *master_in, *g, *m, *v;        /* inputs: p_in the weights, master_in the fp32 master */
    double *p, *master, *mo, *vo;                 /* kernel outputs */
    double *working;                              /* the working copy (fp32 path, master storage) */
    uint16_t *low;
} aw_buffers;

static void free_aw(aw_buffers *b)
{
    free(b->p_in); free(b->master_in); free(b->g); free(b->m); free(b->v); free(b->p); free(b->master);
    free(b->mo); free(b->vo); free(b->working); free(b->low);
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
                   prec_format working_format, aw_buffers *b)
{
    const prec_format f = kcheck_path_format(path);
    const int has_master = storage == KADAMW_MASTER_FP32 && path != KPATH_FP32;
    const int has_working = b->working != NULL;
    int64_t shp[1] = {s->n};
    ktensor P = {0}, G = {0}, M = {0}, V = {0}, MS = {0}, W = {0};
    void *low = NULL;
    int rc = -1;
    if (ktensor_alloc(&P, f, 1, shp) || ktensor_alloc(&G, f, 1, shp) || ktensor_alloc(&M, F32, 1, shp) ||
        ktensor_alloc(&V, F32, 1, shp) || (has_master && ktensor_alloc(&MS, F32, 1, shp)) ||
        (has_working && ktensor_alloc(&W, working_format, 1, shp)))
        goto done;
    if (storage == KADAMW_SPLIT_MASTER &&
        (kdevice_alloc(&low, s->n * sizeof(uint16_t), "adamw check low bits") ||
         kdevice_upload(low, b->low, s->n * sizeof(uint16_t), "adamw check low bits")))
        goto done;
    /* with a master the kernel must not read the weights: they stay poisoned */
    if ((!has_master && ktensor_upload(&P, b->p_in)) || ktensor_upload(&G, b->g) || ktensor_upload(&M, b->m) ||
        ktensor_upload(&V, b->v) || (has_master && ktensor_upload(&MS, b->master_in)))
        goto done;
    kadamw_replicas rep = {0};
    rep.working = W.data; /* poisoned: what the kernel does not write stands out */
    rep.working_format = working_format;
    if (kadamw_step_replicas(path, storage, variant, 1, s->n, P.data, has_master ? MS.data : NULL, low, M.data,
                             V.data, G.data, h, has_working ? &rep : NULL) ||
        kernels_sync("adamw"))
        goto done;
    if (ktensor_download(&P, b->p) || ktensor_download(&M, b->mo) || ktensor_download(&V, b->vo) ||
        (has_master && ktensor_download(&MS, b->master)) || (has_working && ktensor_download(&W, b->working)) ||
        (storage == KADAMW_SPLIT_MASTER && kdevice_download(b->low, low, s->n * sizeof(uint16_t), "adamw low bits")))
        goto done;
    rc = 0;
done:
    ktensor_free(&P); ktensor_free(&G); ktensor_free(&M); ktensor_free(&V); ktensor_free(&MS); ktensor_free(&W);
    kdevice_free(low);
    return rc;
}

kcmp_adamw_kernel kcheck_adamw_kernel(kpath path, int storage, int variant, const kadamw_hparams *h)
{
    kcmp_adamw_kernel k = {kcheck_path_format(path), F32, variant == KADAMW_LLMC ? KCMP_ADAMW_LLMC : KCMP_ADAMW_TORCH,
                           storage == KADAMW_STOCHASTIC ? KCMP_ADAMW_STOCHASTIC
                           : storage == KADAMW_SPLIT_MASTER ? KCMP_ADAMW_TRUNCATE
                                                            : KCMP_ADAMW_NEAREST,
                           h->lr, h->beta1, h->beta2, h->eps, h->weight_decay, h->step};
    return k;
}

/* The working copy against the kernel's own fp32 weights rounded to nearest
 * even on the host: exact (bound 0). */
static void report_working(kcheck_ctx *ctx, const aw_buffers *b, int64_t n, prec_format wf, const char *shape)
{
    kcheck_acc acc;
    kcheck_acc_init(&acc, wf == PREC_BF16 ? "working copy (bf16)" : "working copy (fp16)", shape,
                    prec_format_get(wf)->unit_roundoff);
    for (int64_t i = 0; i < n; i++) {
        double ref = prec_rne(b->p[i], wf);
        if (kcheck_acc_add(&acc, i, b->working[i], ref, 0.0, 0.0, fabs(ref)))
            kcheck_acc_detail(&acc, "fp32 weight %.9g: working copy %.9g, its RNE image %.9g", b->p[i], b->working[i],
                              ref);
    }
    kcheck_acc_report(ctx, &acc);
}

static int check_shape(kcheck_ctx *ctx, kpath path, kadamw_storage storage, int variant, const aw_shape *s,
                       prec_format working_format)
{
    const prec_format f = kcheck_path_format(path);
    const int64_t n = s->n;
    const int has_master = storage == KADAMW_MASTER_FP32 && path != KPATH_FP32;
    aw_buffers b;
    memset(&b, 0, sizeof b);
    size_t bytes = n * sizeof(double);
    b.p_in = malloc(bytes); b.master_in = malloc(bytes); b.g = malloc(bytes); b.m = malloc(bytes);
    b.v = malloc(bytes); b.p = malloc(bytes); b.master = malloc(bytes); b.mo = malloc(bytes); b.vo = malloc(bytes);
    b.low = malloc(n * sizeof(uint16_t));
    const int has_working = path == KPATH_FP32 && storage == KADAMW_MASTER_FP32;
    if (has_working && !(b.working = malloc(bytes))) {
        free_aw(&b);
        return kernels_fail("adamw check: out of host memory");
    }
    if (!b.p_in || !b.master_in || !b.g || !b.m || !b.v || !b.p || !b.master || !b.mo || !b.vo || !b.low) {
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

    if (run_gpu(path, storage, variant, s, &h, working_format, &b) != 0) {
        free(w);
        free_aw(&b);
        return -1;
    }
    const kcmp_adamw_kernel k = kcheck_adamw_kernel(path, storage, variant, &h);
    /* the split master: rebuilt from the bf16 weights and the low halves */
    if (storage == KADAMW_SPLIT_MASTER)
        for (int64_t i = 0; i < n; i++) b.master[i] = join_master(b.p[i], b.low[i]);
    char shape_name[96];
    snprintf(shape_name, sizeof shape_name, "n=%lld step=%lld", (long long)n, (long long)s->step);
    const kcmp_adamw_data d = {n, w, b.g, b.m, b.v, b.p, b.mo, b.vo,
                               has_master || storage == KADAMW_SPLIT_MASTER ? b.master : NULL};
    kcheck_acc rows[KCMP_ADAMW_MAX_ROWS];
    int n_rows = kcmp_adamw(&k, &d, shape_name, rows);
    if (n_rows < 0) {
        free(w);
        free_aw(&b);
        return kernels_fail("adamw check: out of host memory");
    }
    for (int i = 0; i < n_rows; i++) kcheck_report(ctx, &rows[i].row);
    if (has_working) report_working(ctx, &b, n, working_format, shape_name);
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
        if (check_shape(ctx, path, storage, variant, &shapes[i], i % 2 ? PREC_FP16 : PREC_BF16) != 0) return -1;
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
