/* kernels/check/check_attention_mma.h — the bounds of the tensor-core attention
 * variants (flash_mma, flash_mma_exp2), replayed on kval numbers for
 * kernels/check/compare_attention.c; the arithmetic they replay is described
 * in kernels/attention_mma.cu, the derivation in compare_attention_mma.c (no
 * GPU needed: the model is given), the model of the GPU the check runs on in
 * check_attention_mma.c. */
#ifndef ULPSCOPE_KERNELS_CHECK_CHECK_ATTENTION_MMA_H
#define ULPSCOPE_KERNELS_CHECK_CHECK_ATTENTION_MMA_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/check/check.h"
#include "precision/mma.h"

typedef struct {
    const double *q, *k, *v, *g; /* one head [T, D]: the values the kernel saw */
    int64_t T, D;
    double scale;
    int exp2;              /* flash_mma_exp2 */
    prec_format f;         /* the path's format (bf16, fp16) */
    const mma_arith *mma;  /* the tensor cores' block arithmetic, fp32 out */
} katt_mma_head;

/* The model of the GPU the check runs on (mma.sync, inputs `in`, fp32 out):
 * A100 for compute capability 8.0, H100 for 9.0, B200 for 10.0; NULL with
 * the reason for any other (no published model to derive a bound from). */
const mma_arith *katt_mma_model(prec_format in, char *why, size_t why_len);

/* o [T*D] and lse [T]: v the exact values, e and p the bounds.  sck: the
 * score scale as the kernel holds it (scale, or fp32(scale log2 e) with its
 * error); ln2: fp32(ln 2) with its error. */
void katt_mma_forward_bounds(const katt_mma_head *h, kval sck, kval ln2, kval *o, kval *lse);

/* dq, dk, dv [T*D] with their error scales (sum of |terms|, for the report)
 * from the forward's o and lse (their .v the exact values, .e and .p the
 * forward's bounds).  log2e: fp32(log2 e) with its error. */
void katt_mma_backward_bounds(const katt_mma_head *h, kval sck, kval log2e, const kval *o, const kval *lse, kval *dq,
                              double *dq_scale, kval *dk, double *dk_scale, kval *dv, double *dv_scale);

#endif
