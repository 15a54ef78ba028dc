/* reference/gelu_tanh.c — GELU in its tanh form (Hendrycks and Gimpel,
 * arXiv:1606.08415), with the exact constants 0.044715 and sqrt(2/pi): the
 * kernels' fp32 roundings of them are kernel error.  Each element runs the
 * ref.h precision loop on its own; 1 + tanh(z) cancels for x << 0, which
 * shows in the ball's radius and costs an escalation, never a wrong digit. */
#include "reference/gelu_tanh.h"

#include <math.h>

typedef struct {
    ref_ball k0, k1, x, z, t, a, b;
} work;

static void work_init(work *w, mpfr_prec_t p)
{
    ref_ball *all[] = {&w->k0, &w->k1, &w->x, &w->z, &w->t, &w->a, &w->b};
    for (unsigned i = 0; i < sizeof all / sizeof all[0]; i++) ref_ball_init(all[i], p);
}

static void work_clear(work *w)
{
    ref_ball *all[] = {&w->k0, &w->k1, &w->x, &w->z, &w->t, &w->a, &w->b};
    for (unsigned i = 0; i < sizeof all / sizeof all[0]; i++) ref_ball_clear(all[i]);
}

static void work_prec(work *w, mpfr_prec_t p)
{
    ref_ball *all[] = {&w->k0, &w->k1, &w->x, &w->z, &w->t, &w->a, &w->b};
    for (unsigned i = 0; i < sizeof all / sizeof all[0]; i++) ref_ball_set_prec(all[i], p);
}

/* k0 = sqrt(2/pi) with pi = 4 atan(1); k1 = 44715 / 10^6; then t = tanh(z). */
static void tanh_of_z(work *w, double x)
{
    ref_ball_set_si(&w->a, 1);
    ref_ball_lipschitz(&w->k0, &w->a, mpfr_atan, 1.0);
    ref_ball_mul_d(&w->k0, &w->k0, 4.0);
    ref_ball_set_si(&w->a, 2);
    ref_ball_div(&w->k0, &w->a, &w->k0);
    ref_ball_sqrt(&w->k0, &w->k0);
    ref_ball_set_si(&w->k1, 44715);
    ref_ball_div_si(&w->k1, &w->k1, 1000000);
    ref_ball_set_d(&w->x, x);
    ref_ball_mul(&w->z, &w->x, &w->x);
    ref_ball_mul(&w->z, &w->z, &w->x);
    ref_ball_mul(&w->z, &w->z, &w->k1);
    ref_ball_add(&w->z, &w->z, &w->x);
    ref_ball_mul(&w->z, &w->z, &w->k0);
    ref_ball_lipschitz(&w->t, &w->z, mpfr_tanh, 1.0);
}

static void element(ref_ctx *ctx, double x, double dy, int backward, double *out)
{
    if (!isfinite(x)) {
        *out = NAN;
        return;
    }
    mpfr_prec_t p = ref_first_prec(ctx);
    work w;
    work_init(&w, p);
    for (;;) {
        tanh_of_z(&w, x);
        if (!backward) {
            ref_ball_add_d(&w.a, &w.t, 1.0);
            ref_ball_mul(&w.a, &w.a, &w.x);
            ref_ball_mul_d(&w.a, &w.a, 0.5);
        } else {
            /* a = (1 + t)/2; b = x/2 (1 - t^2) k0 (1 + 3 k1 x^2) */
            ref_ball_add_d(&w.a, &w.t, 1.0);
            ref_ball_mul_d(&w.a, &w.a, 0.5);
            ref_ball_mul(&w.b, &w.t, &w.t);
            ref_ball_neg(&w.b, &w.b);
            ref_ball_add_d(&w.b, &w.b, 1.0);
            ref_ball_mul(&w.b, &w.b, &w.x);
            ref_ball_mul_d(&w.b, &w.b, 0.5);
            ref_ball_mul(&w.b, &w.b, &w.k0);
            ref_ball_mul(&w.z, &w.x, &w.x); /* z is free now */
            ref_ball_mul(&w.z, &w.z, &w.k1);
            ref_ball_mul_d(&w.z, &w.z, 3.0);
            ref_ball_add_d(&w.z, &w.z, 1.0);
            ref_ball_mul(&w.b, &w.b, &w.z);
            ref_ball_add(&w.a, &w.a, &w.b);
            ref_ball_mul_d(&w.a, &w.a, dy);
        }
        if (ref_output(ctx, &w.a, out)) break;
        if (!(p = ref_next_prec(ctx, p))) {
            ctx->unproven++;
            break;
        }
        work_prec(&w, p);
    }
    work_clear(&w);
}

void ref_gelu_tanh_forward(ref_ctx *ctx, long n, const double *x, double *y)
{
    for (long i = 0; i < n; i++) element(ctx, x[i], 0.0, 0, &y[i]);
}

void ref_gelu_tanh_backward(ref_ctx *ctx, long n, const double *x, const double *dy, double *dx)
{
    for (long i = 0; i < n; i++) element(ctx, x[i], dy[i], 1, &dx[i]);
}
