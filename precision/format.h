/* precision/format.h — floating-point formats, encode/decode, and rounding a
 * double into any of them.
 *
 * Every emulated value in ulpscope is carried in a double.  A double holds
 * every value of every format below exactly (fp32 and narrower trivially;
 * fp64 is itself), so "a value in format F" means "a double that
 * prec_round(., F) leaves unchanged".
 *
 * Rounding takes the exact value as an unevaluated pair hi + lo (hi = the
 * double nearest hi + lo, |lo| <= ulp(hi)/2, as TwoSum/TwoProd return), so
 * emulated additions, products and FMAs in formats up to fp32 round exactly
 * once, in every mode, directed modes included.  Pass lo = 0 for a plain
 * double.
 */
#ifndef ULPSCOPE_PRECISION_FORMAT_H
#define ULPSCOPE_PRECISION_FORMAT_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    PREC_FP64 = 0,
    PREC_FP32,
    PREC_TF32,  /* 1+8+10 bits, stored in a 32-bit word (low 13 bits zero) */
    PREC_BF16,
    PREC_FP16,
    PREC_E4M3,  /* OCP fp8 e4m3 "fn": no infinities, NaN = S.1111.111, max 448 */
    PREC_E5M2,  /* OCP fp8 e5m2: IEEE-like, infinities, max 57344 */
    PREC_NFORMATS
} prec_format;

typedef enum {
    PREC_RNE = 0, /* round to nearest, ties to even */
    PREC_RZ,      /* toward zero */
    PREC_RU,      /* toward +infinity */
    PREC_RD,      /* toward -infinity */
    PREC_SR,      /* stochastic: up with probability (x - down)/(up - down) */
    PREC_NROUNDS
} prec_round_mode;

typedef enum {
    PREC_OVF_IEEE = 0, /* overflow to inf (NaN for e4m3, which has no inf) */
    PREC_OVF_SATURATE  /* clamp to +-max finite, as cvt ... .satfinite does */
} prec_overflow;

/* How a result is rounded into its format. */
typedef struct {
    prec_round_mode mode;
    prec_overflow overflow;
    bool flush_subnormals; /* a result that is subnormal after rounding becomes signed zero */
} prec_rounding;

/* Round to nearest even, IEEE overflow, subnormals kept: the default. */
#define PREC_ROUNDING_RNE ((prec_rounding){PREC_RNE, PREC_OVF_IEEE, false})

typedef struct {
    const char *name;        /* "fp32", "bf16", "e4m3", ... */
    int storage_bits;        /* 64, 32, 32 (tf32), 16, 16, 8, 8 */
    int exponent_bits;
    int fraction_bits;       /* stored fraction bits: precision - 1 */
    int precision;           /* p, significand bits including the hidden one */
    int emin;                /* exponent of the smallest normal: 2^emin */
    int emax;                /* exponent of the largest finite value's leading bit */
    bool has_infinity;
    bool has_subnormals;
    double max_finite;
    double min_normal;       /* 2^emin */
    double min_subnormal;    /* 2^(emin - p + 1) */
    double unit_roundoff;    /* u = 2^-p */
} prec_format_info;

const prec_format_info *prec_format_get(prec_format f);
const char *prec_format_name(prec_format f);
/* Accepts the canonical names and common aliases (float32, bfloat16, half,
 * fp8e4m3, e4m3fn, fp8e5m2, ...).  Returns 0, or -1 for an unknown name. */
int prec_format_parse(const char *name, prec_format *out);
/* "fp64, fp32, tf32, bf16, fp16, e4m3, e5m2" for error messages. */
const char *prec_format_names(void);

const char *prec_round_mode_name(prec_round_mode m);     /* "rne", "rz", "ru", "rd", "sr" */
int prec_round_mode_parse(const char *name, prec_round_mode *out);
const char *prec_round_mode_names(void);

/* Round the exact value hi + lo into format f.  See the file comment for the
 * contract on (hi, lo).  random_bits drives PREC_SR (uniform 64 bits; other
 * modes ignore it).  A NaN in hi or lo gives the format's NaN; infinities
 * give inf, or NaN (IEEE) / max finite (saturate) for e4m3. */
double prec_round2(double hi, double lo, prec_format f, prec_rounding r, uint64_t random_bits);

/* Round a double into format f. */
double prec_round(double x, prec_format f, prec_rounding r, uint64_t random_bits);

/* Shorthand: round to nearest even, IEEE overflow, subnormals kept. */
double prec_rne(double x, prec_format f);

/* True when x is a value of format f (NaN and, where the format has them,
 * infinities included). */
bool prec_representable(double x, prec_format f);

/* Bits of a value of format f (x must satisfy prec_representable; otherwise it
 * is rounded RNE first).  The low storage_bits bits of the result are used;
 * tf32 is encoded as the 32-bit word with the low 13 fraction bits zero. */
uint64_t prec_encode(double x, prec_format f);
/* The value of a bit pattern (high bits beyond storage_bits ignored). */
double prec_decode(uint64_t bits, prec_format f);

/* Emulated arithmetic: the exact result, rounded once into f. */
double prec_add(double a, double b, prec_format f, prec_rounding r, uint64_t random_bits);
double prec_mul(double a, double b, prec_format f, prec_rounding r, uint64_t random_bits);
/* a*b + c rounded once (for f = fp64, fma()). */
double prec_fma(double a, double b, double c, prec_format f, prec_rounding r, uint64_t random_bits);

/* ulp of x in format f: the gap between the two values of f that surround |x|
 * (in the subnormal range, min_subnormal). */
double prec_ulp(double x, prec_format f);

#ifdef __cplusplus
}
#endif
#endif
