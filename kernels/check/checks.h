/* kernels/check/checks.h — one check per op of kernels/registry.c, attached
 * by the op's name in kernels/check/checks.c.
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

int kcheck_embedding(kcheck_ctx *ctx, kpath path, int variant);
int kcheck_rmsnorm(kcheck_ctx *ctx, kpath path, int variant);
int kcheck_layernorm(kcheck_ctx *ctx, kpath path, int variant);
int kcheck_softmax(kcheck_ctx *ctx, kpath path, int variant);
int kcheck_logsumexp(kcheck_ctx *ctx, kpath path, int variant);
int kcheck_gelu_tanh(kcheck_ctx *ctx, kpath path, int variant);
int kcheck_gelu_erf(kcheck_ctx *ctx, kpath path, int variant);
int kcheck_relu2(kcheck_ctx *ctx, kpath path, int variant);
int kcheck_leaky_relu2(kcheck_ctx *ctx, kpath path, int variant);
int kcheck_residual(kcheck_ctx *ctx, kpath path, int variant);
int kcheck_transpose(kcheck_ctx *ctx, kpath path, int variant);
int kcheck_grad_norm(kcheck_ctx *ctx, kpath path, int variant);
int kcheck_rope(kcheck_ctx *ctx, kpath path, int variant);
int kcheck_matmul(kcheck_ctx *ctx, kpath path, int variant);
int kcheck_matmul_fast(kcheck_ctx *ctx, kpath path, int variant);
int kcheck_matmul_block_fp8(kcheck_ctx *ctx, kpath path, int variant);
int kcheck_adamw(kcheck_ctx *ctx, kpath path, int variant);
int kcheck_adamw_sr(kcheck_ctx *ctx, kpath path, int variant);
int kcheck_adamw_split(kcheck_ctx *ctx, kpath path, int variant);
int kcheck_cross_entropy(kcheck_ctx *ctx, kpath path, int variant);
int kcheck_linear_cross_entropy(kcheck_ctx *ctx, kpath path, int variant);
int kcheck_polar_express(kcheck_ctx *ctx, kpath path, int variant);
int kcheck_muon_newton_schulz(kcheck_ctx *ctx, kpath path, int variant);
int kcheck_attention(kcheck_ctx *ctx, kpath path, int variant);

#ifdef __cplusplus
}
#endif
#endif
