/* kernels/residual.h — residual add, y = a + b (one fp32 addition, one
 * rounding into the path's format).  Shapes: any, flat n; y may alias a
 * (in-place update of the residual stream).  Elementwise: R runs' tensors
 * back to back (n = R x n_run) get a single call's bits.  The backward of an add is the
 * identity on both inputs and needs no kernel. */
#ifndef ULPSCOPE_KERNELS_RESIDUAL_H
#define ULPSCOPE_KERNELS_RESIDUAL_H

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Variants give bitwise-identical results; they differ in memory access
 * (what the bandwidth benchmark compares). */
typedef enum { KRESIDUAL_VECTOR = 0, KRESIDUAL_SCALAR, KRESIDUAL_NVARIANTS } kresidual_variant;

int kresidual_forward(ktensor *y, const ktensor *a, const ktensor *b, int variant);

#ifdef __cplusplus
}
#endif
#endif
