/* kernels/check/check_attention.c — attention's check (registry entry in kernels/attention.cu).
 *
 * Inputs per shape: q, k, v, dout ~ N(0,1) in the path's format, scale =
 * fp32(1/sqrt(D)).  The forward runs first (rows o, lse); the backward then
 * runs on the kernel's own o and lse (rows dq, dk, dv), and its references
 * are the exact gradients (reference/attention.h), so the forward's errors
 * enter the backward's bound through o and lse.
 *
 * The rows are compare_attention.h's (shared with `ulpscope trace` and
 * `ulpscope verify`), for the kernel kcheck_attention_kernel describes:
 *  - naive: scores stored in the path's format; max (exact), z - max
 *    (fp32), expf (2 ulps), a warp sum (strided partials + butterfly:
 *    kcheck_tree_depth(n, 32)), division, the P store; o = a sequential fma
 *    chain over P v and its store; the backward recomputes P as the forward,
 *    stores dP, forms the row's sum P dP by a warp sum and dS = P (dP - sum)
 *    in the path's format.
 *  - flash, flash_exp2: the online softmax over tiles of KATT_TILE keys
 *    (exp2: scores times fp32(scale log2 e)); the backward forms delta =
 *    dout . o (warp sum, with o's forward error), p = exp(s - lse) from the
 *    stored lse (its forward error), ds in fp32.
 *  - flash_mma, flash_mma_exp2: every product inside the tensor cores,
 *    bounded through the GPU's matrix-unit model (katt_mma_model,
 *    check_attention_mma.h); they exist on the bf16 and fp16 paths only
 *    (fp32: not offered).
 * dq, dk, dv are sequential fma chains over the keys (queries), times the
 * scale, stored. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/check/check_attention_mma.h"
#include "kernels/check/checks.h"
#include "kernels/check/compare_attention.h"
#include "kernels/common/ktensor_io.h"

static const prec_format F32 = PREC_FP32;

typedef struct {
    int64_t BH, T, D;
} att_shape;

/* {1, 150, 64}: three 64-row blocks and 64-key tiles (flash_mma rescales
 * twice, a ragged last block), five 32-key tiles for flash */
static const att_shape shapes[] = {{2, 17, 32}, {1, 70, 16}, {3, 33, 64}, {2, 5, 128}, {1, 150, 64}};

typedef struct {
    double *q, *k, *v, *g, *o, *lse, *dq, *dk, *dv; /* inputs and kernel outputs */
} att_buffers;

static void free_att(att_buffers *b)
{
    double **p = (double **)b;
    for (size_t i = 0; i < sizeof *b / sizeof(double *); i++) free(p[i]);
}

static int run_gpu(kpath path, int variant, const att_shape *s, float scale, att_buffers *b)
{
    const prec_format f = kcheck_path_format(path);
    int64_t shp[3] = {s->BH, s->T, s->D}, sl[2] = {s->BH, s->T};
    ktensor Q = {0}, K = {0}, V = {0}, G = {0}, O = {0}, L = {0}, DQ = {0}, DK = {0}, DV = {0};
    int rc = -1;
    if (ktensor_alloc(&Q, f, 3, shp) || ktensor_alloc(&K, f, 3, shp) || ktensor_alloc(&V, f, 3, shp) ||
        ktensor_alloc(&G, f, 3, shp) || ktensor_alloc(&O, f, 3, shp) || ktensor_alloc(&L, F32, 2, sl) ||
        ktensor_alloc(&DQ, f, 3, shp) || ktensor_alloc(&DK, f, 3, shp) || ktensor_alloc(&DV, f, 3, shp))
        goto done;
    if (ktensor_upload(&Q, b->q) || ktensor_upload(&K, b->k) || ktensor_upload(&V, b->v) || ktensor_upload(&G, b->g))
        goto done;
    if (kattention_forward(path, variant, s->BH, s->T, s->D, scale, Q.data, K.data, V.data, O.data, L.data) ||
        kattention_backward(path, variant, s->BH, s->T, s->D, scale, Q.data, K.data, V.data, O.data, G.data, L.data,
                            DQ.data, DK.data, DV.data) ||
        kernels_sync("attention"))
        goto done;
    if (ktensor_download(&O, b->o) || ktensor_download(&L, b->lse) || ktensor_download(&DQ, b->dq) ||
        ktensor_download(&DK, b->dk) || ktensor_download(&DV, b->dv))
        goto done;
    rc = 0;
done:
    ktensor_free(&Q); ktensor_free(&K); ktensor_free(&V); ktensor_free(&G); ktensor_free(&O);
    ktensor_free(&L); ktensor_free(&DQ); ktensor_free(&DK); ktensor_free(&DV);
    return rc;
}

static int check_shape(kcheck_ctx *ctx, kpath path, int variant, const att_shape *s, const mma_arith *mma)
{
    const prec_format f = kcheck_path_format(path);
    const int64_t BH = s->BH, T = s->T, D = s->D, n = BH * T * D;
    const float scale = (float)(1.0 / sqrt((double)D));
    att_buffers b;
    double **bp = (double **)&b;
    int ok = 1;
    for (size_t i = 0; i < sizeof b / sizeof(double *); i++) ok = (bp[i] = malloc(n * sizeof(double))) && ok;
    if (!ok) {
        free_att(&b);
        return kernels_fail("attention check: out of host memory");
    }
    prec_rng rng;
    kcheck_rng(ctx, &rng);
    kcheck_fill_normal(&rng, b.q, n, 0.0, 1.0, f);
    kcheck_fill_normal(&rng, b.k, n, 0.0, 1.0, f);
    kcheck_fill_normal(&rng, b.v, n, 0.0, 1.0, f);
    kcheck_fill_normal(&rng, b.g, n, 0.0, 1.0, f);
    if (run_gpu(path, variant, s, scale, &b) != 0) {
        free_att(&b);
        return -1;
    }
    char shape_name[96];
    snprintf(shape_name, sizeof shape_name, "BH=%lld T=%lld D=%lld", (long long)BH, (long long)T, (long long)D);
    const kcmp_attention_kernel k = kcheck_attention_kernel(f, variant, scale, mma);
    /* the backward ran on the kernel's own o and lse: compared with the forward, it takes its replayed bounds */
    const kcmp_attention_data d = {BH, T, D, b.q, b.k, b.v, b.o, b.lse, 1, b.g, b.dq, b.dk, b.dv};
    kcheck_acc rows[KCMP_ATTENTION_MAX_ROWS];
    int n_rows = kcmp_attention(&k, &d, shape_name, rows);
    free_att(&b);
    if (n_rows < 0) return kernels_fail("attention check: out of host memory");
    for (int i = 0; i < n_rows; i++) kcheck_report(ctx, &rows[i].row);
    return 0;
}

int kcheck_attention(kcheck_ctx *ctx, kpath path, int variant)
{
    char why[256];
    if (!kattention_supports(path, variant, 0, why, sizeof why)) return kcheck_not_offered(ctx, why);
    const mma_arith *mma = NULL;
    if (katt_is_mma(variant) && !(mma = katt_mma_model(kcheck_path_format(path), why, sizeof why)))
        return kernels_fail("attention check %s/%s: %s", kpath_name(path), katt_variants[variant].name, why);
    int n = (int)(sizeof shapes / sizeof shapes[0]);
    if (kcheck_quick(ctx)) n = 2;
    for (int i = 0; i < n; i++) {
        if (!kattention_supports(path, variant, shapes[i].D, why, sizeof why))
            return kernels_fail("attention check: shape D=%lld: %s", (long long)shapes[i].D, why);
        if (check_shape(ctx, path, variant, &shapes[i], mma) != 0) return -1;
    }
    return 0;
}
