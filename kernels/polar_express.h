/* kernels/polar_express.h — the orthogonalisation Muon applies to a gradient
 * matrix: X0 = G / (1.02 ||G||_F + 1e-6), then five steps of
 *
 *   X <- a X + (b A + c A^2) X,  A = X X^T        (wide form, A [rows,rows])
 *   X <- a X + X (b A' + c A'^2), A' = X^T X      (tall form, A' [cols,cols])
 *
 * (the same polynomial p(X) = a X + b X X^T X + c X X^T X X^T X either way;
 * the form decides which Gram matrix is formed and so the cost and the order
 * of the roundings).  Coefficients:
 *   KPE_POLAR_EXPRESS  the five (a, b, c) triples of Amsel, Persson, Musco and
 *                      Gower, "The Polar Express: Optimal Matrix Sign Methods
 *                      and Their Application to the Muon Algorithm",
 *                      arXiv:2505.16932 (2025), computed for 5 iterations with
 *                      safety factor 2e-2 and cushion 2 (the 1.02 safety
 *                      factor baked into all but the last triple, hence the
 *                      1.02 in the normalisation), as used by modded-nanogpt
 *   KPE_MUON_QUINTIC   Jordan's Muon quintic (3.4445, -4.7750, 2.0315) five
 *                      times (K. Jordan et al., "Muon: An optimizer for hidden
 *                      layers in neural networks", 2024), same normalisation
 *
 * Tensors: G, X [rows, cols] row-major in the path's format (fp32, bf16 as in
 * the published recipe, fp16); every GEMM goes through kmatmul (fp32
 * accumulation, output rounded to the path's format).  Each step is three
 * GEMMs: A = X X^T; B = c A A + b A (alpha = c, beta = b, C = A); then
 *   fused  X' = B X + a X in one GEMM (beta = a, C = X): one rounding
 *   split  T = B X rounded, then X' = a X + T in an elementwise kernel (two)
 * The Frobenius norm is a fixed-shape two-stage fp32 reduction
 * (deterministic).  Planted bugs: drop-term drops a term of each GEMM's
 * reduction (kmatmul) and the last square of the norm; truncate-output
 * truncates the normalised X0, the split kernel's stores and the GEMMs'. */
#ifndef ULPSCOPE_KERNELS_POLAR_EXPRESS_H
#define ULPSCOPE_KERNELS_POLAR_EXPRESS_H

#include <stdint.h>

#include "kernels/kernels.h"
#include "kernels/registry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* small_*: the smaller Gram matrix, wide when rows <= cols and tall
 * otherwise (modded-nanogpt transposes a tall G before the iteration): the
 * bf16 and fp32 presets' choice, 4.4x fewer flops than wide on the modern
 * model's [4C, C] and [3C, C] weights. */
typedef enum {
    KPE_WIDE_FUSED = 0,
    KPE_WIDE_SPLIT,
    KPE_TALL_FUSED,
    KPE_TALL_SPLIT,
    KPE_SMALL_FUSED,
    KPE_SMALL_SPLIT,
    KPE_NVARIANTS
} kpe_variant;
extern const kvariant kpe_variants[KPE_NVARIANTS];

/* The form `variant` takes on a [rows, cols] matrix: 1 tall (A = X^T X), 0 wide. */
static inline int kpe_is_tall(int variant, int64_t rows, int64_t cols)
{
    return variant == KPE_TALL_FUSED || variant == KPE_TALL_SPLIT ||
           ((variant == KPE_SMALL_FUSED || variant == KPE_SMALL_SPLIT) && rows > cols);
}
/* 1: X' = p(X) in one GEMM (beta = a); 0: T = B X rounded, then a X + T. */
static inline int kpe_is_fused(int variant)
{
    return variant == KPE_WIDE_FUSED || variant == KPE_TALL_FUSED || variant == KPE_SMALL_FUSED;
}

typedef enum { KPE_POLAR_EXPRESS = 0, KPE_MUON_QUINTIC, KPE_NCOEFFS } kpe_coeffs;
#define KPE_STEPS 5
/* coeffs[step][0..2] = a, b, c as the kernels use them (fp32). */
void kpe_coefficients(kpe_coeffs which, float coeffs[KPE_STEPS][3]);
#define KPE_NORM_SAFETY 1.02f
#define KPE_NORM_EPS 1e-6f

/* The whole orthogonalisation: X = polar-express(G).  G and X may alias. */
int kpolar_express(kpath path, int variant, kpe_coeffs which, int64_t rows, int64_t cols, const void *G, void *X);
/* count matrices in one go (replicas x a parameter's blocks): G and X hold
 * them `stride` elements apart (>= rows x cols); each is normalised by its
 * own norm, and each result is bit for bit the single call's on that matrix
 * (the GEMMs are kmatmul_batched calls, pinned to the single call's
 * algorithm).  kpolar_express is the case count = 1.  Strides that are
 * multiples of 256 bytes keep each matrix's GEMM plans those of a matrix in
 * a fresh allocation (see kernels/matmul.h). */
int kpolar_express_batched(kpath path, int variant, kpe_coeffs which, int64_t count, int64_t rows, int64_t cols,
                           int64_t stride, const void *G, void *X);
/* Its parts, for the check and for callers that batch their own steps:
 * X0 = G / (1.02 ||G||_F + 1e-6), and one step X' = p(X) with (a, b, c). */
int kpolar_express_normalize(kpath path, int64_t rows, int64_t cols, const void *G, void *X0);
int kpolar_express_step(kpath path, int variant, int64_t rows, int64_t cols, float a, float b, float c,
                        const void *X, void *Xn);

/* Longest chain of fp32 roundings in the norm's sum of n squares. */
int64_t kpe_norm_depth(int64_t n);

void kpolar_express_release(void);

#ifdef __cplusplus
}
#endif
#endif
