/* precision/dot_bound.h — worst-case error of one dot product of K terms
 * under an accumulation model: the factor G with
 *     |computed - exact| <= G sum_k |a_k b_k|
 * before any epilogue.  The matmul checks claim one model per (path,
 * accumulation) of our GEMMs (kmatmul_error_factor, kernels/matmul.h;
 * kernels/check/check_matmul.c gives the sources of every number), and
 * `ulpscope verify matmul` builds one from what the user declares; both
 * take G from here.
 *
 * Models:
 *  - ROUNDED: every accumulation rounded to nearest in format acc; a term
 *    passes through at most `depth` roundings (sequential over K: K, the
 *    first fma into a zero accumulator counted): G = gamma_depth(u_acc).
 *  - TENSOR_CORE: products exact after each input was rounded with relative
 *    error u_in (0; tf32: 2^-10 each, truncating), then block FMAs of >= 4
 *    products aligned to the largest exponent and truncated to fp32's 24
 *    bits (Fasi, Higham, Mikaitis, Pranesh, PeerJ CS 7:e330, 2021), each
 *    block losing < (n_b + 2) 2^-23 of the running magnitude:
 *    G = (1 + u_prod)(1 + gamma_{K + 2 ceil(K/4)}(2^-23)) - 1.
 *  - FP8: about 14 significant bits, truncating (unit 2^-13), promoted into
 *    fp32 every `interval` products (0: never), then three fp32 roundings
 *    (two scales and alpha):
 *    G = (1 + gamma_{1.5 N_c}(2^-13))(1 + gamma_{ceil(K/N_c)}(2^-24))(1 + 2^-24)^3 - 1
 *    with N_c = min(interval, K); without promotion gamma_{1.5 K}(2^-13).
 *  - FP8_GROUPS: groups of `interval` products at 14 bits, one fp32 fma
 *    per group with the product of the two scales:
 *    G = (1 + gamma_{1.5 min(K, N_c)}(2^-13))(1 + gamma_{ceil(K/N_c) + 1}(2^-24)) - 1.
 * The truncating models are biased: they have no probabilistic bound
 * (Higham and Mary's mean-zero assumption fails), which *truncating says. */
#ifndef ULPSCOPE_PRECISION_DOT_BOUND_H
#define ULPSCOPE_PRECISION_DOT_BOUND_H

#include <stdint.h>

#include "precision/format.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    PREC_DOT_ROUNDED = 0,
    PREC_DOT_TENSOR_CORE,
    PREC_DOT_FP8,
    PREC_DOT_FP8_GROUPS
} prec_dot_kind;

typedef struct {
    prec_dot_kind kind;
    prec_format acc;  /* ROUNDED: the accumulator's format */
    int64_t depth;    /* ROUNDED: the longest rounding chain of a term (over the whole K) */
    double u_in;      /* TENSOR_CORE: relative error of each input's rounding before the product */
    int64_t interval; /* FP8: products between promotions (0: never); FP8_GROUPS: the group */
} prec_dot_model;

/* G for K >= 1 terms; +inf when the model gives no finite bound.
 * *truncating: 1 for the biased models (their probabilistic bound is G). */
double prec_dot_factor(const prec_dot_model *m, int64_t K, int *truncating);

/* The unit roundoff of the accumulation (the probabilistic bound of the
 * ROUNDED model is gamma~_depth of it). */
double prec_dot_unit(const prec_dot_model *m);

#ifdef __cplusplus
}
#endif
#endif
