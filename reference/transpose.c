/* reference/transpose.c — a copy is exact; the add is one IEEE double
 * addition, i.e. the exact sum correctly rounded to double (see residual.c). */
#include "reference/transpose.h"

void ref_transpose_copy(ref_ctx *ctx, long M, long N, const double *x, double *y)
{
    (void)ctx;
    for (long r = 0; r < M; r++)
        for (long c = 0; c < N; c++) y[c * M + r] = x[r * N + c];
}

void ref_transpose_add(ref_ctx *ctx, long M, long N, const double *x, const double *y0, double *y)
{
    (void)ctx;
    for (long r = 0; r < M; r++)
        for (long c = 0; c < N; c++) y[c * M + r] = y0[c * M + r] + x[r * N + c];
}
