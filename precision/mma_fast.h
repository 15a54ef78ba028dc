/* precision/mma_fast.h — the block arithmetic of precision/mma.h rearranged
 * for speed, bit-identical to mma_block where it applies: the pieces the
 * CUDA emulation kernel (kernels/mma_emulate.cu) runs per product, and
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
 *    mma_align_term), signed; shifts of 32 or more give 0;
 *  - signs enter in ones' complement: the second operand carries its sign
 *    (bs = sb |b|, and a mask bm = -1 for a negative b, else 0), so
 *    |a| bs + bm is the product of |a| and |b| in ones' complement when b
 *    is negative; an arithmetic shift keeps it ones' complement of the
 *    truncated magnitude (~x >> d == ~(x >> d)), and multiplying by sa gives
 *    sa sb (|a||b| >> d) - sa [b < 0].  Per block and output the sum of
 *    those -sa [b < 0] is taken back: with bit masks na, nb of the negative
 *    a and b of the block, sum sa [b < 0] = popc(nb) - 2 popc(na & nb).
 *    One multiply per product (not two: magnitudes, then signs), a popcount
 *    per block and output;
 *  - the whole block sum, c included, in 32 bits where it fits ("narrow":
 *    the A100's blocks); else terms in 32-bit chunks of at most 8
 *    (8 * 2^27 < 2^31), the chunks in 64 bits (the block sum is below
 *    33 * 2^27);
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

#define MMA_FAST_ZERO_EXP (-1000)   /* exponent of a zero (or non-finite) operand */
#define MMA_FAST_BIG (1 << 20)      /* floor of a block with a non-finite operand; exp of a non-finite c */
#define MMA_FAST_NO_FLOOR (-4000)   /* floor of a block of finite nonzero operands: below every sum of two exponents */
#define MMA_FAST_CHUNK 8            /* products per 32-bit partial sum of a wide block */

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
    uint32_t fo_mask; /* clears the fraction bits (of 23) below out_frac_bits */
    int narrow;     /* the block sum, c included, fits an int32 and out_frac_bits is 23 */
} mma_fast_params;

/* A decoded operand. */
typedef struct {
    uint32_t mag; /* significand (hidden bit included), shifted left by a_shift for the first operand */
    int32_t sgn;  /* +1 or -1 */
    int32_t exp;  /* value = sgn * mag * 2^(exp - fb - shift); MMA_FAST_ZERO_EXP for zero and non-finite */
    uint32_t flag;/* MMA_FAST_FLAG_* of this one operand */
} mma_fast_operand;

/* The accumulator between blocks: c = sgn * mag * 2^(exp - 23).  mag 0: a
 * zero of sign sgn, exp zero_exp (a zero c is a zero term of the next block,
 * which lifts emax to zero_exp); exp MMA_FAST_BIG: infinite or NaN, mag
 * holds the fp32 bits. */
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
           p->block >= 1 && p->block <= 32 && p->zero_exp > -500 && p->zero_exp < 500;
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
    q.fo_mask = ~((1u << (23 - p->out_frac_bits)) - 1u);
    /* every product's aligned term is below 2^(F+2), c's below 2^(F+1); the
     * ones' complement terms and their correction are off by at most 2L */
    const int64_t sum_bound =
        ((int64_t)p->block << (p->frac_bits + 2)) + ((int64_t)1 << (p->frac_bits + 1)) + 2 * p->block;
    q.narrow = sum_bound <= INT32_MAX && p->out_frac_bits == 23;
    return q;
}

/* x >> d and x << d for any d >= 0 (0 once d >= 32; a negative d, read
 * unsigned, as well): PTX shr and shl clamp the shift amount; the arithmetic
 * x >> d (all sign bits once d >= 31); the leading zeros of x (32 bits: -1
 * for 0; 64 bits: 64 for 0). */
#ifdef __CUDA_ARCH__
MMA_HD static inline uint32_t mma_fast_shr(uint32_t x, int d)
{
    uint32_t r;
    asm("shr.b32 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(d));
    return r;
}
MMA_HD static inline uint32_t mma_fast_shl(uint32_t x, int d)
{
    uint32_t r;
    asm("shl.b32 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(d));
    return r;
}
MMA_HD static inline int32_t mma_fast_sar(int32_t x, int d)
{
    int32_t r;
    asm("shr.s32 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(d));
    return r;
}
/* 31 - the position of the top bit; all ones for x = 0 (bfind.shiftamt: one
 * instruction, where __clz takes two; callers treat 0 apart) */
MMA_HD static inline int mma_fast_clz32(uint32_t x)
{
    int r;
    asm("bfind.shiftamt.u32 %0, %1;" : "=r"(r) : "r"(x));
    return r;
}
MMA_HD static inline int mma_fast_clz64(uint64_t x) { return __clzll((long long)x); }
#else
static inline uint32_t mma_fast_shr(uint32_t x, int d) { return (unsigned)d >= 32 ? 0u : x >> d; }
static inline uint32_t mma_fast_shl(uint32_t x, int d) { return (unsigned)d >= 32 ? 0u : x << d; }
static inline int32_t mma_fast_sar(int32_t x, int d)
{
    if (d > 31) d = 31;
    /* written on magnitudes: C leaves >> of a negative value to the implementation */
    return x < 0 ? (int32_t)~(~(uint32_t)x >> d) : (int32_t)((uint32_t)x >> d);
}
static inline int mma_fast_clz32(uint32_t x) { return x ? __builtin_clz(x) : -1; }
static inline int mma_fast_clz64(uint64_t x) { return x ? __builtin_clzll(x) : 64; }
#endif

MMA_HD static inline uint64_t mma_fast_shr64(uint64_t x, int d) { return d >= 64 ? 0u : x >> d; }

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

/* The lower bound a row's block puts on emax: zero_exp when it holds a zero
 * operand (or padding), MMA_FAST_BIG when it holds an infinity or NaN (so
 * that the block's terms all vanish and the rounding sends it to the
 * model's own code), else MMA_FAST_NO_FLOOR. */
MMA_HD static inline int32_t mma_fast_floor(const mma_fast_params *q, uint32_t flags)
{
    return flags & MMA_FAST_FLAG_SPECIAL ? MMA_FAST_BIG : flags & MMA_FAST_FLAG_ZERO ? q->zero_exp : MMA_FAST_NO_FLOOR;
}

MMA_HD static inline mma_fast_acc mma_fast_acc_of(const mma_fast_params *q, uint32_t bits)
{
    const mma_num n = mma_decode(PREC_FP32, bits, false);
    mma_fast_acc c;
    if (n.special) {
        c.mag = bits;
        c.sgn = 1;
        c.exp = MMA_FAST_BIG;
        return c;
    }
    c.mag = n.mant;
    c.sgn = n.neg ? -1 : 1;
    c.exp = n.mant ? n.exp : q->zero_exp;
    return c;
}

MMA_HD static inline uint32_t mma_fast_acc_bits(mma_fast_acc c)
{
    if (c.exp == MMA_FAST_BIG) return c.mag;
    const uint32_t sign = c.sgn < 0 ? 0x80000000u : 0u;
    if (c.mag >> 23) return sign | ((uint32_t)(c.exp + 127) << 23) | (c.mag & 0x7FFFFFu);
    return sign | c.mag; /* zero or subnormal (exp -126) */
}

/* emax before the products: c's exponent (zero_exp for a zero c) and the
 * floors of the block's two operand rows. */
MMA_HD static inline int mma_fast_emax_start(mma_fast_acc c, int32_t floor_a, int32_t floor_b)
{
    const int f = floor_a > floor_b ? floor_a : floor_b;
    return c.exp > f ? c.exp : f;
}

/* c's aligned term, signed. */
MMA_HD static inline int32_t mma_fast_c_term(const mma_fast_params *q, mma_fast_acc c, int emax)
{
    return (int32_t)mma_fast_shr(c.mag << q->c_shl, emax - c.exp + q->c_shr) * c.sgn;
}

/* One product's signed term, off by -asgn [b < 0] (ones' complement): amag
 * carries the a_shift, bs = sb |b|, bm = -1 for a negative b, else 0. */
MMA_HD static inline int32_t mma_fast_term_oc(uint32_t amag, int32_t asgn, int32_t aexp, int32_t bs, int32_t bm,
                                              int32_t bexp, int emax)
{
    return mma_fast_sar((int32_t)amag * bs + bm, emax - aexp - bexp) * asgn;
}

/* What the ones' complement terms of one block miss: sum sa [b < 0]
 * over its products, from the bit masks of the negative a (na) and b (nb). */
MMA_HD static inline int32_t mma_fast_oc_correction(uint32_t na, uint32_t nb)
{
#ifdef __CUDA_ARCH__
    return __popc(nb) - 2 * __popc(na & nb);
#else
    return __builtin_popcount(nb) - 2 * __builtin_popcount(na & nb);
#endif
}

/* Round the block sum S * 2^(emax - F) toward zero into c, for a sum
 * magnitude U of 32 bits (narrow blocks, out_frac_bits 23): N = U shifted
 * up to bit 31, its top 24 bits the significand, fewer below the normal
 * range (U = 0: nz is -1, N and the significand 0).  Returns 0, or -1 when
 * the block needs the model's own code (a zero sum or result, an overflow,
 * a non-finite operand or c); then c is left as it was. */
MMA_HD static inline int mma_fast_finish32(const mma_fast_params *q, int32_t S, int emax, mma_fast_acc *c)
{
    const uint32_t U = S < 0 ? 0u - (uint32_t)S : (uint32_t)S;
    const int nz = mma_fast_clz32(U);
    const int lead = emax - q->frac_bits + 31 - nz;
    const int exp = lead < -126 ? -126 : lead;
    const uint32_t mag = mma_fast_shr(mma_fast_shl(U, nz), 8 + exp - lead);
    if (mag == 0u || lead > 127) return -1;
    c->mag = mag;
    c->sgn = (S >> 31) | 1; /* -1 or 1 (>> of a negative int: arithmetic on every target here) */
    c->exp = exp;
    return 0;
}

/* The same for a 64-bit sum (wide blocks), rounded to out_frac_bits. */
MMA_HD static inline int mma_fast_finish64(const mma_fast_params *q, int64_t S, int emax, mma_fast_acc *c)
{
    const uint64_t U = S < 0 ? 0u - (uint64_t)S : (uint64_t)S;
    const int nz = mma_fast_clz64(U);
    const int lead = emax - q->frac_bits + 63 - nz;
    const int exp = lead < -126 ? -126 : lead;
    const uint32_t mag = (uint32_t)mma_fast_shr64(nz >= 64 ? 0u : U << nz, 40 + exp - lead) & q->fo_mask;
    if (mag == 0u || lead > 127) return -1;
    c->mag = mag;
    c->sgn = S < 0 ? -1 : 1;
    c->exp = exp;
    return 0;
}

/* CPU reference: the chain of blocks over k products in K order, through the
 * pieces above in the order the CUDA kernel runs them (mma_fast_supported(p)
 * must hold).  drop_last_product plants a bug for the tests' twins: the
 * magnitude of the last product of every full block is taken as zero. */
static inline uint32_t mma_fast_dot(const mma_arith *p, int k, const void *a, const void *b, uint32_t c_bits,
                                    int drop_last_product)
{
    const mma_fast_params q = mma_fast_params_of(p);
    const int sz = mma_elem_bytes(p->in);
    mma_fast_acc c = mma_fast_acc_of(&q, c_bits);
    mma_fast_operand A[32], B[32];
    for (int k0 = 0; k0 < k; k0 += q.block) {
        const int n = k - k0 < q.block ? k - k0 : q.block;
        const uint8_t *ab = (const uint8_t *)a + (long)k0 * sz, *bb = (const uint8_t *)b + (long)k0 * sz;
        uint32_t flags_a = n < q.block ? MMA_FAST_FLAG_ZERO : 0u, flags_b = flags_a, na = 0u, nb = 0u;
        for (int i = 0; i < n; i++) {
            A[i] = mma_fast_decode(p->in, mma_load_bits(p->in, ab, i), q.a_shift);
            B[i] = mma_fast_decode(p->in, mma_load_bits(p->in, bb, i), 0);
            flags_a |= A[i].flag;
            flags_b |= B[i].flag;
            na |= (uint32_t)(A[i].sgn < 0) << i;
            nb |= (uint32_t)(B[i].sgn < 0) << i;
        }
        if (drop_last_product && n == q.block) B[n - 1].mag = 0u;
        int emax = mma_fast_emax_start(c, mma_fast_floor(&q, flags_a), mma_fast_floor(&q, flags_b));
        for (int i = 0; i < n; i++)
            if (A[i].exp + B[i].exp > emax) emax = A[i].exp + B[i].exp;
        /* 32-bit sums wrap as the GPU's adds do: only a block the rounding sends to the
         * model's own code (an infinite or NaN accumulator) can overflow them */
        int32_t chunk = (int32_t)((uint32_t)mma_fast_c_term(&q, c, emax) + (uint32_t)mma_fast_oc_correction(na, nb));
        int64_t S = 0;
        for (int i = 0; i < n; i++) {
            chunk = (int32_t)((uint32_t)chunk + (uint32_t)mma_fast_term_oc(A[i].mag, A[i].sgn, A[i].exp,
                                                                           (int32_t)B[i].mag * B[i].sgn,
                                                                           B[i].sgn < 0 ? -1 : 0, B[i].exp, emax));
            /* a wide block: the partial sum moves to 64 bits every MMA_FAST_CHUNK products */
            if (!q.narrow && (i + 1) % MMA_FAST_CHUNK == 0) S += chunk, chunk = 0;
        }
        S += chunk;
        const int slow = q.narrow ? mma_fast_finish32(&q, (int32_t)S, emax, &c) : mma_fast_finish64(&q, S, emax, &c);
        if (slow) c = mma_fast_acc_of(&q, mma_block(p, n, ab, bb, mma_fast_acc_bits(c)));
    }
    return mma_fast_acc_bits(c);
}

#ifdef __cplusplus
}
#endif
#endif
