/* kernels/check/checks.h — one check per op of kernels/registry.c, attached
 * by the op's name (KCHECK_OPS below; the table is kernels/check/checks.c).
 *
 * A check runs the op on the GPU at (path, variant) on fresh random inputs
 * in every check shape (fewer and smaller under kcheck_quick()), compares
 * every output element with the MPFR reference and reports one row per
 * (shape, output tensor) through kcheck_acc_report() / kcheck_report().  The
 * planted bug (kernels_planted_bug()) is already set by the harness.
 * Returns 0, or -1 with kernels_last_error() set when something other than
 * accuracy went wrong (a CUDA error, out of memory): the harness reports that
 * as an error, which fails the run.  Each is defined in check_<op>.c (or in
 * the check file of its family: check_matmul.c, check_adamw.c, ...). */
#ifndef ULPSCOPE_KERNELS_CHECK_CHECKS_H
#define ULPSCOPE_KERNELS_CHECK_CHECKS_H

#include "kernels/check/check.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The checked ops, one line each, by registry name: each line declares
 * kcheck_<name> here and puts it in checks.c's table. */
#define KCHECK_OPS(X)       \
    X(embedding)            \
    X(rmsnorm)              \
    X(layernorm)            \
    X(softmax)              \
    X(logsumexp)            \
    X(gelu_tanh)            \
    X(gelu_erf)             \
    X(relu2)                \
    X(leaky_relu2)          \
    X(residual)             \
    X(transpose)            \
    X(grad_norm)            \
    X(rope)                 \
    X(matmul)               \
    X(matmul_fast)          \
    X(matmul_block_fp8)     \
    X(adamw)                \
    X(adamw_sr)             \
    X(adamw_split)          \
    X(cross_entropy)        \
    X(linear_cross_entropy) \
    X(polar_express)        \
    X(muon_newton_schulz)   \
    X(attention)

#define KCHECK_DECLARE(name) int kcheck_##name(kcheck_ctx *ctx, kpath path, int variant);
KCHECK_OPS(KCHECK_DECLARE)

#ifdef __cplusplus
}
#endif
#endif
