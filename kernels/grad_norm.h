/* kernels/grad_norm.h — the global gradient norm sqrt(sum over tensors of
 * sum g^2) that gradient clipping needs, into one fp32 on the device.
 * Gradients are in the path's format; squares are accumulated in fp32 with
 * a fixed reduction order (no atomics: bitwise repeatable). */
#ifndef ULPSCOPE_KERNELS_GRAD_NORM_H
#define ULPSCOPE_KERNELS_GRAD_NORM_H

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Variants (reduction order):
 *   block_tree  chunks of 4096 elements per block of 256 threads (strided
 *               partial sums, block butterfly) into per-chunk partials, then
 *               one block reduces the partials the same way;
 *   warp_tree   chunks of 1024 per warp (strided partials, warp butterfly),
 *               then the same final block;
 *   sequential  one thread sums each tensor left to right, one thread sums
 *               the per-tensor sums in order (the textbook order). */
typedef enum { KGRADNORM_BLOCK_TREE = 0, KGRADNORM_WARP_TREE, KGRADNORM_SEQUENTIAL, KGRADNORM_NVARIANTS } kgrad_norm_variant;

/* Bytes of device workspace kgrad_norm needs for these tensors. */
size_t kgrad_norm_workspace(const ktensor *grads, int count, int variant);
/* norm: device float; grads[count] all in one format. */
int kgrad_norm(float *norm, const ktensor *grads, int count, void *workspace, size_t workspace_bytes, int variant);
/* R replicas in one launch: grads[t] holds R x n_t elements, replica r's
 * part of tensor t at r n_t; norms: device float[R], norms[r] the norm of
 * replica r's parts, bit for bit the single call's on them (same partials,
 * same order).  The single calls above are the case R = 1. */
size_t kgrad_norm_workspace_replicas(int64_t replicas, const ktensor *grads, int count, int variant);
int kgrad_norm_replicas(int64_t replicas, float *norms, const ktensor *grads, int count, void *workspace,
                        size_t workspace_bytes, int variant);
/* Longest chain of fp32 roundings in the sum of squares (each fma counted). */
int64_t kgrad_norm_depth(const int64_t *sizes, int count, int variant);

#ifdef __cplusplus
}
#endif
#endif
