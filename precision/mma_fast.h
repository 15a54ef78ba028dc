/* precision/mma_fast.h — the block arithmetic of precision/mma.h rearranged
 * for speed, bit-identical to mma_block where it applies: the pieces the
 * CUDA emulation kernel (kernels/probe/mma_emulate.cu) runs per product, and
 * a CPU reference (mma_fast_dot) that runs the same pieces in the same order,
 * so that CI proves the rearrangement against the model without a GPU
 * (tests/test_mma_fast.c).
 *
 * The rearrangement, for a native model (split NONE) with fp32 output,
 * round toward zero, truncating alignment and no flushing:
 *  - every operand is decoded once into a magnitude, a sign (+-1) and an
 *    exponent (mma_fast_decode); the first operand's magnitude is shifted
 *    left by F - 2 fb (a_shift), so a product of magnitudes is already the
 *    term aligned to its own exponent with F fraction bits: below 2^(F+2)
 *    <= 2^27, an unsigned 32-bit integer;
 *  - a zero operand gets exponent MMA_FAST_ZERO_EXP, so a zero product never
 *    sets emax; that a block holds a zero (which sets emax to at least
 *    zero_exp) is a flag per operand row and block, computed once;
 *  - the term of a product with exponent ea + eb is its aligned magnitude
 *    shifted right by emax - ea - eb (truncation of the magnitude, as
 *    mma_align_term), the sign applied after; shifts of 32 or more give 0;
 *  - terms are added in 32-bit chunks of at most 8 (8 * 2^27 < 2^31), the
 *    chunks in 64 bits (the block sum is below 33 * 2^27);
 *  - the sum is rounded toward zero to out_frac_bits and kept decoded
 *    (magnitude with 23 fraction bits, sign, exponent) as the next block's c.
 * The rare cases take the model itself (mma_block on the operands' bits):
 * a block with an infinite or NaN operand or c, a sum that is exactly zero
 * (the sign of a zero result depends on every term's sign), a result that
 * rounds to zero below the subnormals, or an overflow. */
#ifndef ULPSCOPE_PRECISION_MMA_FAST_H
#define ULPSCOPE_PRECISION_MMA_FAST_H

#include "precision/mma.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MMA_FAST_ZERO_EXP (-1000)       /* exponent of a zero (or non-finite) operand */
#define MMA_FAST_C_SPECIAL (1 << 20)    /* mma_fast_acc.exp of an infinite or NaN c */
#define MMA_FAST_CHUNK 8                /* products per 32-bit partial sum */

/* Operand flags per (row, block): */
#define MMA_FAST_FLAG_ZERO 1u    /* a zero operand (or padding past K) */
#define MMA_FAST_FLAG_SPECIAL 2u /* an infinite or NaN operand */

typedef struct {
    int block;      /* L */
    int frac_bits;  /* F */
    int out_frac_bits;
    int zero_exp;
    int a_shift;    /* F - 2 fb(in), applied to the first operand's magnitudes */
    int c_shl, c_shr; /* c (23 fraction bits) aligned: (mag << c_shl) >> (emax - exp + c_shr) */
} mma_fast_params;

/* A decoded operand. */
typedef struct {
    uint32_t mag; /* significand (hidden bit included), shifted left by a_shift for the first operand */
    int32_t sgn;  /* +1 or -1 */
    int32_t exp;  /* value = sgn * mag * 2^(exp - fb - shift); MMA_FAST_ZERO_EXP for zero and non-finite */
    uint32_t flag;/* MMA_FAST_FLAG_* of this one operand */
} mma_fast_operand;

/* The accumulator between blocks: c = sgn * mag * 2^(exp - 23) (mag 0: a
 * zero of sign sgn); exp == MMA_FAST_C_SPECIAL: infinite or NaN, mag holds
 * the fp32 bits. */
typedef struct {
    uint32_t mag;
    int32_t sgn;
    int32_t exp;
} mma_fast_acc;

static inline int mma_fast_fraction_bits(prec_format f)
{
    switch (f) {
    case PREC_FP16: case PREC_TF32: return 10;
    case PREC_BF16: return 7;
    case PREC_E4M3: return 3;
    case PREC_E5M2: return 2;
    default: return -1;
    }
}

/* Whether the rearrangement applies to p: 1, else 0 (the caller runs the
 * model's own code). */
static inline int mma_fast_supported(const mma_arith *p)
{
    const int fb = mma_fast_fraction_bits(p->in);
    return fb >= 0 && p->out == PREC_FP32 && p->out_mode == PREC_RZ && p->align == MMA_ALIGN_TRUNCATE &&
           p->split == MMA_SPLIT_NONE && !p->flush_in_subnormals && !p->flush_out_subnormals &&
           p->frac_bits >= 2 * fb && p->frac_bits <= 25 && p->out_frac_bits >= 1 && p->out_frac_bits <= 23 &&
           p->block >= 1 && p->block <= 32;
}

static inline mma_fast_params mma_fast_params_of(const mma_arith *p)
{
    mma_fast_params q;
    q.block = p->block;
    q.frac_bits = p->frac_bits;
    q.out_frac_bits = p->out_frac_bits;
    q.zero_exp = p->zero_exp;
    q.a_shift = p->frac_bits - 2 * mma_fast_fraction_bits(p->in);
    q.c_shl = p->frac_bits > 23 ? p->frac_bits - 23 : 0;
    q.c_shr = p->frac_bits < 23 ? 23 - p->frac_bits : 0;
    return q;
}

/* x >> d for any d >= 0 (0 once d >= 32): PTX shr clamps the shift amount. */
MMA_HD static inline uint32_t mma_fast_shr(uint32_t x, int d)
{
#ifdef __CUDA_ARCH__
    uint32_t r;
    asm("shr.b32 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(d));
    return r;
#else
    return d >= 32 ? 0u : x >> d;
#endif
}

MMA_HD static inline int mma_fast_bitlen64(uint64_t x)
{
#ifdef __CUDA_ARCH__
    return 64 - __clzll((long long)x);
#else
    return x ? 64 - __builtin_clzll(x) : 0;
#endif
}

MMA_HD static inline mma_fast_operand mma_fast_decode(prec_format in, uint32_t bits, int shift)
{
    const mma_num n = mma_decode(in, bits, false);
    mma_fast_operand r;
    r.sgn = n.neg ? -1 : 1;
    if (n.special || n.mant == 0) {
        r.mag = 0u;
        r.exp = MMA_FAST_ZERO_EXP;
        r.flag = n.special ? MMA_FAST_FLAG_SPECIAL : MMA_FAST_FLAG_ZERO;
    } else {
        r.mag = n.mant << shift;
        r.exp = n.exp;
        r.flag = 0u;
    }
    return r;
}

MMA_HD static inline mma_fast_acc mma_fast_acc_of(uint32_t bits)
{
    const mma_num n = mma_decode(PREC_FP32, bits, false);
    mma_fast_acc c;
    if (n.special) {
        c.mag = bits;
        c.sgn = 1;
        c.exp = MMA_FAST_C_SPECIAL;
        return c;
    }
    c.mag = n.mant;
    c.sgn = n.neg ? -1 : 1;
    c.exp = n.exp;
    return c;
}

MMA_HD static inline uint32_t mma_fast_acc_bits(mma_fast_acc c)
{
    if (c.exp == MMA_FAST_C_SPECIAL) return c.mag;
    const uint32_t sign = c.sgn < 0 ? 0x80000000u : 0u;
    if (c.mag >> 23) return sign | ((uint32_t)(c.exp + 127) << 23) | (c.mag & 0x7FFFFFu);
    return sign | c.mag; /* zero or subnormal (exp -126) */
}

/* emax before the products: c's exponent, or zero_exp when c is zero; at
 * least zero_exp when the block holds a zero operand or padding. */
MMA_HD static inline int mma_fast_emax_start(const mma_fast_params *q, mma_fast_acc c, uint32_t flags)
{
    int e = c.mag ? c.exp : q->zero_exp;
    if ((flags & MMA_FAST_FLAG_ZERO) && q->zero_exp > e) e = q->zero_exp;
    return e;
}

/* c's aligned term, signed. */
MMA_HD static inline int64_t mma_fast_c_term(const mma_fast_params *q, mma_fast_acc c, int emax)
{
    if (!c.mag) return 0;
    const int64_t t = (int64_t)mma_fast_shr(c.mag << q->c_shl, emax - c.exp + q->c_shr);
    return c.sgn < 0 ? -t : t;
}

/* One product's signed term: a.mag carries the a_shift. */
MMA_HD static inline int32_t mma_fast_term(uint32_t amag, int32_t asgn, int32_t aexp, uint32_t bmag, int32_t bsgn,
                                           int32_t bexp, int emax)
{
    return (int32_t)mma_fast_shr(amag * bmag, emax - aexp - bexp) * (asgn * bsgn);
}

/* Round the block sum S * 2^(emax - F) toward zero into c.  Returns 0, or
 * -1 when the block needs the model's own code (zero result or overflow). */
MMA_HD static inline int mma_fast_finish(const mma_fast_params *q, int64_t S, int emax, mma_fast_acc *c)
{
    if (S == 0) return -1;
    const int neg = S < 0;
    const uint64_t U = neg ? (uint64_t)(-S) : (uint64_t)S;
    const int qexp = emax - q->frac_bits;
    const int lead = qexp + mma_fast_bitlen64(U) - 1;
    if (lead > 127) return -1;
    const int fo = q->out_frac_bits;
    const int lsb = (lead < -126 ? -126 : lead) - fo;
    const int sh = lsb - qexp;
    const uint64_t m = sh <= 0 ? U << -sh : sh >= 64 ? 0u : U >> sh;
    if (m == 0) return -1;
    c->mag = (uint32_t)m << (23 - fo);
    c->sgn = neg ? -1 : 1;
    c->exp = lsb + fo;
    return 0;
}

/* CPU reference: the chain of blocks over k products in K order, through the
 * pieces above in the order the CUDA kernel runs them (mma_fast_supported(p)
 * must hold).  drop_last_product plants a bug for the tests' twins: the last
 * product of every full block is left out of the fast path's sum. */
static inline uint32_t mma_fast_dot(const mma_arith *p, int k, const void *a, const void *b, uint32_t c_bits,
                                    int drop_last_product)
{
    const mma_fast_params q = mma_fast_params_of(p);
    const int sz = mma_elem_bytes(p->in);
    mma_fast_acc c = mma_fast_acc_of(c_bits);
    mma_fast_operand A[64], B[64];
    for (int k0 = 0; k0 < k; k0 += q.block) {
        const int n = k - k0 < q.block ? k - k0 : q.block;
        const uint8_t *ab = (const uint8_t *)a + (long)k0 * sz, *bb = (const uint8_t *)b + (long)k0 * sz;
        uint32_t flags = n < q.block ? MMA_FAST_FLAG_ZERO : 0u;
        for (int i = 0; i < n; i++) {
            A[i] = mma_fast_decode(p->in, mma_load_bits(p->in, ab, i), q.a_shift);
            B[i] = mma_fast_decode(p->in, mma_load_bits(p->in, bb, i), 0);
            flags |= A[i].flag | B[i].flag;
        }
        int slow = (flags & MMA_FAST_FLAG_SPECIAL) || c.exp == MMA_FAST_C_SPECIAL;
        if (!slow) {
            int emax = mma_fast_emax_start(&q, c, flags);
            for (int i = 0; i < n; i++)
                if (A[i].exp + B[i].exp > emax) emax = A[i].exp + B[i].exp;
            int64_t S = mma_fast_c_term(&q, c, emax);
            const int used = drop_last_product && n == q.block ? n - 1 : n;
            for (int i0 = 0; i0 < used; i0 += MMA_FAST_CHUNK) {
                int32_t chunk = 0;
                for (int i = i0; i < i0 + MMA_FAST_CHUNK && i < used; i++)
                    chunk += mma_fast_term(A[i].mag, A[i].sgn, A[i].exp, B[i].mag, B[i].sgn, B[i].exp, emax);
                S += chunk;
            }
            slow = mma_fast_finish(&q, S, emax, &c) != 0;
        }
        if (slow) c = mma_fast_acc_of(mma_block(p, n, ab, bb, mma_fast_acc_bits(c)));
    }
    return mma_fast_acc_bits(c);
}

#ifdef __cplusplus
}
#endif
#endif
