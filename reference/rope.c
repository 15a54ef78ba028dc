/* reference/rope.c — RoPE with the exact angle theta = pos * base^(-2i/D) =
 * pos * exp(-(2i/D) log(base)): the kernels' fp32 tables or fp32 angles are
 * kernel error.  cos and sin are 1-Lipschitz (ref_ball_lipschitz).  Each
 * rotated pair runs the ref.h precision loop. */
#include "reference/rope.h"

#include <math.h>

enum { B_T, B_C, B_S, B_X1, B_X2, B_Y1, B_Y2, B_TMP, NB };

static void pair(ref_ctx *ctx, long pos, long i, long D, double base, double sign, double x1, double x2, double *y1,
                 double *y2)
{
    mpfr_prec_t p = ref_first_prec(ctx);
    ref_ball b[NB];
    for (int k = 0; k < NB; k++) ref_ball_init(&b[k], p);
    for (;;) {
        ref_ball_set_d(&b[B_T], base);
        ref_ball_log(&b[B_T], &b[B_T]);
        ref_ball_mul_d(&b[B_T], &b[B_T], -2.0 * (double)i);
        ref_ball_div_si(&b[B_T], &b[B_T], D);
        ref_ball_exp(&b[B_T], &b[B_T]);
        ref_ball_mul_d(&b[B_T], &b[B_T], (double)pos);
        ref_ball_lipschitz(&b[B_C], &b[B_T], mpfr_cos, 1.0);
        ref_ball_lipschitz(&b[B_S], &b[B_T], mpfr_sin, 1.0);
        ref_ball_mul_d(&b[B_S], &b[B_S], sign);
        ref_ball_set_d(&b[B_X1], x1);
        ref_ball_set_d(&b[B_X2], x2);
        ref_ball_mul(&b[B_Y1], &b[B_X1], &b[B_C]);
        ref_ball_mul(&b[B_TMP], &b[B_X2], &b[B_S]);
        ref_ball_sub(&b[B_Y1], &b[B_Y1], &b[B_TMP]);
        ref_ball_mul(&b[B_Y2], &b[B_X1], &b[B_S]);
        ref_ball_mul(&b[B_TMP], &b[B_X2], &b[B_C]);
        ref_ball_add(&b[B_Y2], &b[B_Y2], &b[B_TMP]);
        int ok = ref_output(ctx, &b[B_Y1], y1);
        ok &= ref_output(ctx, &b[B_Y2], y2);
        if (ok) break;
        if (!(p = ref_next_prec(ctx, p))) {
            ctx->unproven++;
            break;
        }
        for (int k = 0; k < NB; k++) ref_ball_set_prec(&b[k], p);
    }
    for (int k = 0; k < NB; k++) ref_ball_clear(&b[k]);
}

static void rope(ref_ctx *ctx, long N, long H, long D, long T, double base, double sign, const double *x, double *y)
{
    long half = D / 2;
    for (long n = 0; n < N; n++)
        for (long h = 0; h < H; h++)
            for (long i = 0; i < half; i++) {
                long a = (n * H + h) * D + i;
                pair(ctx, n % T, i, D, base, sign, x[a], x[a + half], &y[a], &y[a + half]);
            }
}

void ref_rope_forward(ref_ctx *ctx, long N, long H, long D, long T, double base, const double *x, double *y)
{
    rope(ctx, N, H, D, T, base, 1.0, x, y);
}

void ref_rope_backward(ref_ctx *ctx, long N, long H, long D, long T, double base, const double *dy, double *dx)
{
    rope(ctx, N, H, D, T, base, -1.0, dy, dx);
}
