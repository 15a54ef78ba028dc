/* reference/polar_express.h — MPFR reference for Muon's orthogonalisation
 * (ref.h conventions), the reference of kernels/polar_express.cu.
 *
 *   normalize:  X0 = G / (safety sqrt(sum G^2) + eps)
 *   step:       X' = a X + b X X^T X + c X X^T X X^T X
 * (the wide and tall forms of the kernels compute this same polynomial; the
 * reference forms the smaller Gram matrix, using p(X^T) = p(X)^T).  X, G
 * [rows, cols] row-major; coefficients and constants are the values the
 * kernel used (fp32 numbers, passed as doubles).  Every output correctly
 * rounded to double; the Gram matrix is exact (superaccumulator), the rest
 * ball arithmetic with the Ziv loop over the whole matrix. */
#ifndef ULPSCOPE_REFERENCE_POLAR_EXPRESS_H
#define ULPSCOPE_REFERENCE_POLAR_EXPRESS_H

#include "reference/ref.h"

#ifdef __cplusplus
extern "C" {
#endif

void ref_polar_express_normalize(ref_ctx *ctx, long rows, long cols, const double *G, double safety, double eps,
                                 double *X0);
void ref_polar_express_step(ref_ctx *ctx, long rows, long cols, const double *X, double a, double b, double c,
                            double *Xn);

#ifdef __cplusplus
}
#endif
#endif
