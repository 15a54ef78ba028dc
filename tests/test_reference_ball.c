/* tests/test_reference_ball.c — the ball arithmetic every reference rests on:
 * for each operation, the exact result at the extreme points of the input
 * balls (where monotone operations and products take their extremes),
 * computed at 2048 bits, must lie inside the result ball; and
 * ref_ball_get_d must round correctly or decline.  The twin: a Lipschitz
 * propagation with a wrong constant must break containment. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>

#include "precision/rng.h"
#include "reference/ref.h"
#include "tests/test_util.h"

#define P 64
#define HI 2048

typedef enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_SQRT, OP_EXP, OP_LOG, OP_TANH, OP_SUM3, NOPS } op;
static const char *const op_names[NOPS] = {"add", "sub", "mul", "div", "sqrt", "exp", "log", "tanh", "sum3"};

/* A ball of P bits around a random value (positive where the op needs it),
 * with a radius of 2^-10 .. 2^-40 of it. */
static void random_ball(prec_rng *rng, ref_ball *b, bool positive)
{
    const int e = (int)(prec_rng_next(rng) % 12) - 6; /* drawn first: argument order is unspecified */
    double v = ldexp(prec_rng_uniform(rng) + 0.5, e);
    if (!positive && (prec_rng_next(rng) & 1)) v = -v;
    mpfr_set_d(b->mid, v, MPFR_RNDN);
    const int er = -10 - (int)(prec_rng_next(rng) % 30);
    mpfr_set_d(b->rad, fabs(v) * ldexp(prec_rng_uniform(rng) + 0.1, er), MPFR_RNDU);
}

static void endpoint(mpfr_ptr out, const ref_ball *b, int side)
{
    mpfr_set_prec(out, HI);
    if (side) mpfr_add(out, b->mid, b->rad, MPFR_RNDN); /* exact at HI bits */
    else mpfr_sub(out, b->mid, b->rad, MPFR_RNDN);
}

/* Is f(every corner) inside r?  lipschitz: the constant given to tanh;
 * rad_scale multiplies the result's radius (1: as computed; below 1: the
 * planted bug of a propagation that loses part of the input radii). */
static bool contained(op o, ref_ball *a, ref_ball *b, ref_ball *c, double lipschitz, double rad_scale)
{
    ref_ball r;
    ref_ball_init(&r, P);
    ref_ball terms[3];
    switch (o) {
    case OP_ADD: ref_ball_add(&r, a, b); break;
    case OP_SUB: ref_ball_sub(&r, a, b); break;
    case OP_MUL: ref_ball_mul(&r, a, b); break;
    case OP_DIV: ref_ball_div(&r, a, b); break;
    case OP_SQRT: ref_ball_sqrt(&r, a); break;
    case OP_EXP: ref_ball_exp(&r, a); break;
    case OP_LOG: ref_ball_log(&r, a); break;
    case OP_TANH: ref_ball_lipschitz(&r, a, mpfr_tanh, lipschitz); break;
    default:
        terms[0] = *a, terms[1] = *b, terms[2] = *c;
        ref_ball_sum(&r, terms, 3);
        break;
    }
    if (rad_scale != 1.0) mpfr_mul_d(r.rad, r.rad, rad_scale, MPFR_RNDD);
    mpfr_t x, y, z, f, d;
    mpfr_inits2(HI, x, y, z, f, d, (mpfr_ptr)0);
    bool ok = true;
    for (int corner = 0; corner < 8; corner++) {
        endpoint(x, a, corner & 1);
        endpoint(y, b, (corner >> 1) & 1);
        endpoint(z, c, (corner >> 2) & 1);
        switch (o) {
        case OP_ADD: mpfr_add(f, x, y, MPFR_RNDN); break;
        case OP_SUB: mpfr_sub(f, x, y, MPFR_RNDN); break;
        case OP_MUL: mpfr_mul(f, x, y, MPFR_RNDN); break;
        case OP_DIV: mpfr_div(f, x, y, MPFR_RNDN); break;
        case OP_SQRT: mpfr_sqrt(f, x, MPFR_RNDN); break;
        case OP_EXP: mpfr_exp(f, x, MPFR_RNDN); break;
        case OP_LOG: mpfr_log(f, x, MPFR_RNDN); break;
        case OP_TANH: mpfr_tanh(f, x, MPFR_RNDN); break;
        default:
            mpfr_add(f, x, y, MPFR_RNDN);
            mpfr_add(f, f, z, MPFR_RNDN);
            break;
        }
        mpfr_sub(d, f, r.mid, MPFR_RNDN);
        mpfr_abs(d, d, MPFR_RNDN);
        if (mpfr_cmp(d, r.rad) > 0) ok = false;
    }
    mpfr_clears(x, y, z, f, d, (mpfr_ptr)0);
    ref_ball_clear(&r);
    return ok;
}

static void test_containment(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("ball_containment"));
    ref_ball a, b, c;
    ref_ball_init(&a, P);
    ref_ball_init(&b, P);
    ref_ball_init(&c, P);
    for (int o = 0; o < NOPS; o++) {
        long bad = 0;
        for (int trial = 0; trial < 2000; trial++) {
            bool positive = o == OP_SQRT || o == OP_LOG;
            random_ball(&rng, &a, positive);
            random_ball(&rng, &b, o == OP_DIV); /* a divisor ball away from 0 */
            random_ball(&rng, &c, false);
            bad += !contained((op)o, &a, &b, &c, 1.0, 1.0);
        }
        if (bad) print_message("%s: %ld balls do not contain the exact result\n", op_names[o], bad);
        assert_int_equal(bad, 0);
        /* twin: the same balls with half the radius must miss a corner */
        long missed = 0;
        for (int trial = 0; trial < 50; trial++) {
            random_ball(&rng, &a, o == OP_SQRT || o == OP_LOG);
            random_ball(&rng, &b, o == OP_DIV);
            random_ball(&rng, &c, false);
            missed += !contained((op)o, &a, &b, &c, 1.0, 0.5);
        }
        if (!missed) fail_msg("%s: a half-radius ball still passed the containment check", op_names[o]);
    }
    /* twin: tanh propagated with a Lipschitz constant 100x too small */
    long bad = 0;
    for (int trial = 0; trial < 200; trial++) {
        random_ball(&rng, &a, false);
        mpfr_set_d(a.mid, 0.25, MPFR_RNDN); /* tanh' = 0.94 there */
        bad += !contained(OP_TANH, &a, &b, &c, 0.01, 1.0);
    }
    assert_true(bad > 0);
    ref_ball_clear(&a);
    ref_ball_clear(&b);
    ref_ball_clear(&c);
}

/* get_d: a decided rounding is the nearest double of the exact value; a ball
 * straddling a midpoint is declined; exact balls always decide. */
static void test_get_d(void **state)
{
    (void)state;
    ref_ball b;
    ref_ball_init(&b, 128);
    double out;
    /* 1 + 2^-53 is the midpoint between 1 and 1 + 2^-52 */
    mpfr_set_d(b.mid, 1.0, MPFR_RNDN);
    mpfr_add_d(b.mid, b.mid, 0x1p-53, MPFR_RNDN);
    mpfr_set_d(b.rad, 0x1p-80, MPFR_RNDU);
    assert_false(ref_ball_get_d(&b, &out)); /* straddles the midpoint */
    mpfr_add_d(b.mid, b.mid, 0x1p-70, MPFR_RNDN); /* clearly above it */
    assert_true(ref_ball_get_d(&b, &out));
    assert_true(out == 1.0 + 0x1p-52);
    mpfr_sub_d(b.mid, b.mid, 0x1p-69, MPFR_RNDN); /* clearly below it */
    assert_true(ref_ball_get_d(&b, &out));
    assert_true(out == 1.0);
    /* exact midpoint with radius 0: ties to even */
    mpfr_set_d(b.mid, 1.0, MPFR_RNDN);
    mpfr_add_d(b.mid, b.mid, 0x1p-53, MPFR_RNDN);
    mpfr_set_zero(b.rad, 1);
    assert_true(ref_ball_get_d(&b, &out));
    assert_true(out == 1.0);
    /* subnormal: 2^-1060 + 2^-1075 + 2^-1100 rounds up at the 2^-1074 quantum */
    MPFR_DECL_INIT(t, 128); /* 2^-1075 and below are not doubles: build them in MPFR */
    mpfr_set_ui_2exp(b.mid, 1, -1060, MPFR_RNDN);
    mpfr_set_ui_2exp(t, 1, -1075, MPFR_RNDN);
    mpfr_add(b.mid, b.mid, t, MPFR_RNDN);
    mpfr_set_ui_2exp(t, 1, -1100, MPFR_RNDN);
    mpfr_add(b.mid, b.mid, t, MPFR_RNDN);
    mpfr_set_ui_2exp(b.rad, 1, -1180, MPFR_RNDU);
    assert_true(ref_ball_get_d(&b, &out));
    assert_true(out == 0x1p-1060 + 0x1p-1074);
    /* the same ball reaching below the midpoint 2^-1060 + 2^-1075: declined */
    mpfr_set_ui_2exp(b.rad, 1, -1099, MPFR_RNDU);
    assert_false(ref_ball_get_d(&b, &out));
    /* a ball around 0 cannot decide */
    mpfr_set_zero(b.mid, 1);
    mpfr_set_d(b.rad, 0x1p-200, MPFR_RNDU);
    assert_false(ref_ball_get_d(&b, &out));
    ref_ball_clear(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_containment),
        cmocka_unit_test(test_get_d),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
