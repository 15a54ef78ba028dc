/* kernels/check/compare_adamw.h — one AdamW step's outputs (kernels/adamw.h)
 * against the MPFR reference (reference/adamw.h), with the bound of a
 * described kernel: what `ulpscope check` reports for its own kernels
 * (check_adamw.c) and what `ulpscope verify adamw` reports for a kernel the
 * user describes.
 *
 * The bound replays the update in the described operation order (llm.c's or
 * torch.optim.AdamW's, adamw.h), every operation rounded in the arithmetic's
 * format, sqrt and division correctly rounded, the bias corrections 1 -
 * beta^t computed in double and rounded once to fp32; then the weight's
 * store: round to nearest (u; none where the weights are in the
 * arithmetic's format), or anything below one ulp (2u: stochastic rounding,
 * of the exact difference where the weights are in the arithmetic's format;
 * truncation). */
#ifndef ULPSCOPE_KERNELS_CHECK_COMPARE_ADAMW_H
#define ULPSCOPE_KERNELS_CHECK_COMPARE_ADAMW_H

#include "kernels/adamw.h"
#include "kernels/check/check.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    KCMP_ADAMW_LLMC,  /* m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr (m/bc1 / (sqrt(v/bc2) + eps) + wd p) */
    KCMP_ADAMW_TORCH, /* p *= 1 - lr wd; m += (1-b1)(g - m); v += (1-b2)(g^2 - v); p -= (lr/bc1) m / (sqrt(v)/sqrt(bc2) + eps) */
    KCMP_ADAMW_ANY    /* either: per element, the larger of the two bounds */
} kcmp_adamw_order;

typedef enum {
    KCMP_ADAMW_NEAREST,    /* the new weight rounded to nearest even */
    KCMP_ADAMW_STOCHASTIC, /* stochastic rounding: anything below one ulp */
    KCMP_ADAMW_TRUNCATE    /* toward zero (a split master's high half): below one ulp */
} kcmp_adamw_store;

typedef struct {
    prec_format storage;     /* the weights and the gradient */
    prec_format arith;       /* the update's arithmetic, m, v and the master (ours: fp32) */
    kcmp_adamw_order order;
    kcmp_adamw_store store;
    double lr, beta1, beta2, eps, weight_decay; /* fp32 values */
    int64_t step;            /* t >= 1 */
} kcmp_adamw_kernel;

/* w: the weight the update starts from (the fp32 master where there is
 * one); g, m, v: the step's inputs; p, m_out, v_out: the outputs (m_out,
 * v_out NULL: not compared); master: the fp32 master after the step (NULL:
 * none). */
typedef struct {
    int64_t n;
    const double *w, *g, *m, *v;
    const double *p, *m_out, *v_out, *master;
} kcmp_adamw_data;

#define KCMP_ADAMW_MAX_ROWS 4
/* Fills rows[] (finished) in the order p, m, v, master for those given;
 * returns how many, or -1 when out of memory. */
int kcmp_adamw(const kcmp_adamw_kernel *k, const kcmp_adamw_data *d, const char *shape,
               kcheck_acc rows[KCMP_ADAMW_MAX_ROWS]);

/* How `ulpscope check` describes its own kernel of (path, storage
 * (kadamw_storage), variant) under hyperparameters h (check_adamw.c: links
 * the kernels). */
kcmp_adamw_kernel kcheck_adamw_kernel(kpath path, int storage, int variant, const kadamw_hparams *h);

#ifdef __cplusplus
}
#endif
#endif
