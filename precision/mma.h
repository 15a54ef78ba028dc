/* precision/mma.h — bit-accurate model of one matrix-multiply-accumulate
 * (tensor core) block, with parameter sets per GPU generation, route and
 * input format.
 *
 * The model (one "block", d = c + sum_{i<L} a_i b_i):
 *   1. every product a_i b_i is exact (an integer significand product and an
 *      exponent Ea + Eb, subnormal inputs taking the format's emin);
 *   2. the block's largest exponent emax is taken over the products AND the
 *      accumulator c; a zero term counts with exponent zero_exp;
 *   3. every term is aligned to emax keeping F fraction bits (granularity
 *      2^(emax - F)); the bits shifted out are dropped by `align` (truncation
 *      of the magnitude on NVIDIA);
 *   4. the aligned terms are added exactly (enough carry bits: a block never
 *      loses a carry);
 *   5. the sum is normalised and rounded once into the output: fp32 with RZ
 *      (keeping out_frac_bits fraction bits: 23, or 13 for fp8 on Hopper) or
 *      fp16 with RNE; overflow gives infinity.
 * A K-long dot product is a chain of blocks of L products in K order, the
 * rounded output of one block being the c of the next (normalisation
 * between blocks, none inside a block).
 *
 * Sources (the numbers themselves are cited at each entry in mma.c):
 *  - M. Fasi, N. J. Higham, M. Mikaitis, S. Pranesh, "Numerical behavior of
 *    NVIDIA tensor cores", PeerJ Comput. Sci. 7:e330 (2021): exact products,
 *    alignment to the largest magnitude with truncation, RZ normalisation,
 *    subnormals supported, 4-term (V100) / 8-term (A100 fp16, bf16) / 4-term
 *    (A100 tf32) fused blocks, non-monotonic sums.
 *  - P. Xie et al., "MMA-Sim: bit-accurate reference model of tensor cores and
 *    matrix cores", arXiv:2511.10909 (2025), github.com/microsoft/MMA-Sim:
 *    F per architecture (Volta 23, Ampere 24, Hopper/Blackwell 25; fp8 on
 *    Hopper 13 with an e8m13 output), L = 8/16/32/32 bytes of input per block
 *    (Volta/Ampere/Hopper/Blackwell), zero exponent -131/-132/-133.
 *  - F. A. Khattak, M. Mikaitis, "Accurate models of NVIDIA tensor cores",
 *    arXiv:2512.07004 (2025), github.com/north-numerical-computing/
 *    MATLAB-tensor-core: the same features as "fma" (L) and "neab"
 *    (F = 23 + neab: V100 0, A100 1, H100/B200 2, H100 fp8 -10), RZ (fp32
 *    out) / RNE (fp16 out), minimum alignment exponent -133 on H100/B200.
 *  - X. Li et al., "FTTN: feature-targeted testing for numerical properties
 *    of NVIDIA & AMD matrix accelerators", arXiv:2403.00232 (2024): the probe
 *    families (extra bits, rounding, accumulation order, subnormals).
 *
 * The arithmetic is written in integers and marked MMA_HD, so CUDA kernels
 * (kernels/probe/mma_emulate.cu) run exactly the code the CPU model runs. */
#ifndef ULPSCOPE_PRECISION_MMA_H
#define ULPSCOPE_PRECISION_MMA_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "precision/format.h"

#ifdef __CUDACC__
#define MMA_HD __host__ __device__
#else
#define MMA_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* How the bits shifted out during alignment are dropped. */
typedef enum {
    MMA_ALIGN_TRUNCATE = 0, /* toward zero on the magnitude (NVIDIA, all generations) */
    MMA_ALIGN_FLOOR,        /* toward -inf (two's-complement truncation) */
    MMA_ALIGN_NEAREST_EVEN, /* round to nearest, ties to even */
    MMA_ALIGN_COUNT
} mma_align;

/* How an instruction that the unit cannot run natively is put together from
 * two fused blocks.  On Hopper the fp8 mma.sync (an sm_89 instruction) is
 * lowered to two fp16 HMMA.16816 (SASS: F2FP.F16.E4M3.UNPACK_B + HMMA): the
 * 32 products split by k % 4 into S1 = {0,1 mod 4} and S2 = {2,3 mod 4}
 * (how the unpacked registers fall), each sub-block started from zero, and
 * c added with ordinary IEEE adds (FADD / HADD2, round to nearest even).
 * The order of those adds is one of: */
typedef enum {
    MMA_SPLIT_NONE = 0,
    MMA_SPLIT_C_P1_P2,  /* (c + P1) + P2 */
    MMA_SPLIT_C_P1P2,   /* c + (P1 + P2) */
    MMA_SPLIT_C_P2_P1,  /* (c + P2) + P1 */
    MMA_SPLIT_CHAIN12,  /* c + block(S2, starting from P1) */
    MMA_SPLIT_CHAIN21,  /* c + block(S1, starting from P2) */
    MMA_SPLIT_COUNT
} mma_split;

/* The arithmetic of one block. */
typedef struct {
    prec_format in;           /* A and B: fp16, bf16, tf32, e4m3, e5m2 */
    prec_format out;          /* C and D: PREC_FP32 or PREC_FP16 */
    int block;                /* L: products fused per block (1..64) */
    int frac_bits;            /* F: fraction bits kept after alignment to emax;
                                 at most 50, so 65 aligned terms fit the int64 sum */
    mma_align align;          /* how shifted-out bits are dropped */
    prec_round_mode out_mode; /* PREC_RZ or PREC_RNE (others: RU, RD) */
    int out_frac_bits;        /* fraction bits of the result: 23, 13 or 10 */
    int zero_exp;             /* exponent of a zero term when finding emax */
    bool flush_in_subnormals; /* subnormal inputs read as zero */
    bool flush_out_subnormals;/* subnormal results written as zero */
    bool positive_zero;       /* every zero result is +0 (no -0 out of the unit) */
    mma_split split;          /* MMA_SPLIT_NONE for a native instruction */
    int split_k;              /* products per split instruction (32) */
} mma_arith;

/* One parameter set: a generation's route for one (input, output) pair. */
typedef struct {
    const char *gen;    /* "v100", "a100", "h100", "b200" */
    const char *route;  /* "mma.sync", "wgmma", "tcgen05" */
    int instr_k;        /* K of the instruction the route issues */
    mma_arith arith;
    const char *note;   /* NULL, or what is special (fallbacks, hypotheses) */
    const char *source; /* where the numbers come from */
} mma_model;

/* ---- the parameter table (mma.c) -------------------------------------- */
int mma_model_count(void);
const mma_model *mma_model_at(int i);
/* NULL when the generation has no such route or format pair. */
const mma_model *mma_model_find(const char *gen, const char *route, prec_format in, prec_format out);
/* "v100, a100, h100, b200" */
const char *mma_gen_names(void);
bool mma_gen_known(const char *gen);
const char *mma_align_name(mma_align a); /* "truncate", "floor", "nearest-even" */
const char *mma_split_name(mma_split s);  /* "none", "(c+P1)+P2", ... */

/* ---- host conveniences (mma.c) ---------------------------------------- */
/* Pack a value of f (prec_representable; for tf32 any fp32 value, whose low
 * 13 fraction bits the unit ignores) into its storage. */
void mma_store(prec_format f, void *base, long idx, double x);
/* d = c + a.b through the chain of blocks; a, b hold k values of the input
 * format, c a value of the output format; returns the modelled output. */
double mma_dot_values(const mma_arith *p, int k, const double *a, const double *b, double c);

/* ---- error bounds (mma.c) ---------------------------------------------
 * A rigorous bound on what one block of a native model (split NONE) adds to
 * the error of d = c + sum_{i<n} a_i b_i, for a_i, b_i values of p->in and an
 * accumulator c (a value of p->out).  Derivation, step by step in the
 * model's terms:
 *  - every finite x of a format decodes to mant * 2^(exp - fb) with 2^exp <=
 *    max(|x|, 2^emin) (normal: 2^exp <= |x| < 2^(exp+1); subnormal: exp =
 *    emin > log2 |x|), so a product's exponent ex + ey satisfies 2^(ex+ey) <=
 *    E(a_i) E(b_i), E(x) = max(|x|, 2^emin(in)); c's exponent 2^exp(c) <=
 *    max(|c|, 2^emin(out)); a zero term contributes 2^zero_exp.  Hence
 *    2^emax <= M := max(max over nonzero products of E(a_i) E(b_i),
 *    max(|c|, 2^emin(out)) if c != 0, 2^zero_exp);
 *  - each nonzero term is truncated to a multiple of 2^(emax - F): its error
 *    is below 2^(emax - F) <= 2^-F M (zero terms lose nothing), and the
 *    aligned terms add exactly; so the aligned sum S differs from the exact
 *    y = c + sum a_i b_i by at most A = N 2^-F M, N = the number of nonzero
 *    terms (nonzero products, plus one for c != 0);
 *  - S is rounded once into the output keeping fo = out_frac_bits fraction
 *    bits: RZ errs by less than one unit in the last place of |S|, i.e. at
 *    most 2^-fo |S| for a normal result and 2^(emin(out) - fo) below the
 *    normal range; RNE by half of that.  |S| <= |y| + A.
 * Total: |d - y| <= A + 2^-fo (|y| + A) + 2^(emin(out) - fo) (RZ; RNE halves
 * the last two terms).  Valid while nothing overflows and no input is
 * infinite or NaN.  A chain of blocks (mma_dot) adds the bounds, each block
 * taking the previous result as its c: with |c - c_exact| <= e, use |c| <=
 * |c_exact| + e in M and |y| <= |y_exact| + e. */

/* 2^exp as the unit decodes x of format f is at most this: max(|x|, 2^emin(f)). */
double mma_exp_scale(prec_format f, double x);
/* A = N 2^-F M: the alignment part, from N nonzero terms and the bound M on 2^emax. */
double mma_align_bound(const mma_arith *p, int nonzero_terms, double emax_scale);
/* The output rounding of an aligned sum of magnitude at most s_abs. */
double mma_out_bound(const mma_arith *p, double s_abs);
/* The whole block bound for exact inputs a, b (n values of p->in), |c| <= c_abs
 * (c_abs = 0: c is zero) and |c + sum a_i b_i| <= y_abs. */
double mma_block_bound(const mma_arith *p, int n, const double *a, const double *b, double c_abs, double y_abs);

/* ---- the arithmetic, host and device ---------------------------------- */

typedef struct {
    int neg;       /* sign bit */
    int special;   /* 0 finite, 1 infinity, 2 NaN */
    uint32_t mant; /* integer significand, hidden bit included for normals */
    int exp;       /* value = mant * 2^(exp - fb); subnormals carry emin */
    int fb;        /* fraction bits of the format */
} mma_num;

/* Storage bytes of one element of f in the packed arrays the model reads
 * (tf32 is stored as a 4-byte fp32 word). */
MMA_HD static inline int mma_elem_bytes(prec_format f)
{
    switch (f) {
    case PREC_FP32: case PREC_TF32: return 4;
    case PREC_BF16: case PREC_FP16: return 2;
    case PREC_E4M3: case PREC_E5M2: return 1;
    default: return 8;
    }
}

MMA_HD static inline uint32_t mma_load_bits(prec_format f, const void *base, long idx)
{
    switch (f) {
    case PREC_FP32: case PREC_TF32: return ((const uint32_t *)base)[idx];
    case PREC_BF16: case PREC_FP16: return ((const uint16_t *)base)[idx];
    case PREC_E4M3: case PREC_E5M2: return ((const uint8_t *)base)[idx];
    default: return 0;
    }
}

/* Decode the bits of a value of f.  tf32 is read from an fp32 word whose
 * low 13 fraction bits the unit ignores (truncation: MMA-Sim's
 * truncate_fp32_to_tf32; Khattak-Mikaitis round tf32 inputs toward zero). */
MMA_HD static inline mma_num mma_decode(prec_format f, uint32_t bits, bool flush_subnormals)
{
    int ebits, fb, bias, width;
    switch (f) {
    case PREC_FP32: ebits = 8; fb = 23; bias = 127; width = 32; break;
    case PREC_TF32: ebits = 8; fb = 23; bias = 127; width = 32; bits &= 0xFFFFE000u; break;
    case PREC_BF16: ebits = 8; fb = 7; bias = 127; width = 16; break;
    case PREC_FP16: ebits = 5; fb = 10; bias = 15; width = 16; break;
    case PREC_E4M3: ebits = 4; fb = 3; bias = 7; width = 8; break;
    default:        ebits = 5; fb = 2; bias = 15; width = 8; break; /* PREC_E5M2 */
    }
    mma_num r;
    uint32_t frac = bits & ((1u << fb) - 1u);
    uint32_t efield = (bits >> fb) & ((1u << ebits) - 1u);
    r.neg = (int)((bits >> (width - 1)) & 1u);
    r.special = 0;
    r.fb = fb;
    if (f == PREC_E4M3) {
        if (efield == 15u && frac == 7u) r.special = 2; /* the only NaN; no infinity */
    } else if (efield == (1u << ebits) - 1u) {
        r.special = frac ? 2 : 1;
    }
    if (efield == 0u) {
        r.mant = flush_subnormals ? 0u : frac;
        r.exp = 1 - bias;
    } else {
        r.mant = frac | (1u << fb);
        r.exp = (int)efield - bias;
    }
    if (f == PREC_TF32) { /* keep the 10 tf32 fraction bits only */
        r.mant >>= 13;
        r.fb = 10;
    }
    return r;
}

MMA_HD static inline int mma_bitlen64(uint64_t x)
{
    int n = 0;
    while (x) { n++; x >>= 1; }
    return n;
}

/* Round the exact value S * 2^q into the output format of p; neg_zero gives
 * the sign of an exact zero. */
MMA_HD static inline uint32_t mma_encode_result(const mma_arith *p, int64_t S, int q, int neg_zero)
{
    const bool half = p->out == PREC_FP16;
    const int emin = half ? -14 : -126, emax_out = half ? 15 : 127;
    const int field = half ? 10 : 23, bias = half ? 15 : 127;
    const int fo = p->out_frac_bits;
    const uint32_t sign_bit = half ? 0x8000u : 0x80000000u;
    const uint32_t inf_bits = half ? 0x7C00u : 0x7F800000u;
    if (S == 0) return neg_zero && !p->positive_zero ? sign_bit : 0u;
    const int neg = S < 0;
    const uint64_t U = neg ? (uint64_t)(-(S + 1)) + 1u : (uint64_t)S;
    const uint32_t sign = neg && !p->positive_zero ? sign_bit : 0u; /* for zero results */
    const uint32_t nsign = neg ? sign_bit : 0u;                       /* for nonzero results */
    const int lead = q + mma_bitlen64(U) - 1;
    if (lead > emax_out) return nsign | inf_bits;
    int lsb = (lead < emin ? emin : lead) - fo; /* exponent of the last kept bit */
    const int shift = lsb - q;
    uint64_t m;
    if (shift <= 0) {
        m = U << (-shift); /* exact: U has fewer bits than the result keeps */
    } else {
        uint64_t rem, halfway;
        if (shift >= 64) {
            m = 0; rem = U; halfway = shift == 64 ? (1ull << 63) : ~0ull;
        } else {
            m = U >> shift; rem = U & ((1ull << shift) - 1u); halfway = 1ull << (shift - 1);
        }
        bool up = false;
        switch (p->out_mode) {
        case PREC_RNE: up = rem > halfway || (rem == halfway && shift <= 64 && (m & 1u)); break;
        case PREC_RU: up = rem && !neg; break;
        case PREC_RD: up = rem && neg; break;
        default: break; /* RZ */
        }
        if (up) m++;
        if (m >> (fo + 1)) { m >>= 1; lsb++; } /* rounding carried into a new bit */
    }
    if (m >> fo) { /* normal */
        const int e = lsb + fo;
        if (e > emax_out) return nsign | inf_bits;
        return nsign | ((uint32_t)(e + bias) << field) | (uint32_t)((m - (1ull << fo)) << (field - fo));
    }
    if (m == 0 || p->flush_out_subnormals) return sign; /* underflow to zero */
    return nsign | (uint32_t)(m << (field - fo));      /* subnormal: lsb = emin - fo */
}

/* Drop the bits of M * 2^sh below 2^0 as p->align says; neg is the sign. */
MMA_HD static inline uint64_t mma_align_term(const mma_arith *p, uint64_t M, int sh, int neg)
{
    if (sh >= 0) return M << sh;
    const int r = -sh;
    uint64_t q, rem, halfway;
    if (r >= 64) { q = 0; rem = M; halfway = r == 64 ? (1ull << 63) : ~0ull; }
    else { q = M >> r; rem = M & ((1ull << r) - 1u); halfway = 1ull << (r - 1); }
    switch (p->align) {
    case MMA_ALIGN_FLOOR: return q + (neg && rem ? 1u : 0u);
    case MMA_ALIGN_NEAREST_EVEN: return q + ((rem > halfway || (rem == halfway && r <= 64 && (q & 1u))) ? 1u : 0u);
    default: return q;
    }
}

/* Non-finite inputs: the sum of the exact products and c in double, so that
 * NaN, inf - inf and inf * 0 give NaN and a lone infinity keeps its sign.
 * NaN results are the canonical 0x7FFFFFFF (fp16 0x7FFF), as MMA-Sim writes. */
MMA_HD static inline uint32_t mma_block_special(const mma_arith *p, int n, const void *a, const void *b,
                                                mma_num cn)
{
    const bool half = p->out == PREC_FP16;
    int pos_inf = 0, neg_inf = 0, nan = cn.special == 2;
    if (cn.special == 1) { if (cn.neg) neg_inf = 1; else pos_inf = 1; }
    for (int i = 0; i < n; i++) {
        mma_num x = mma_decode(p->in, mma_load_bits(p->in, a, i), p->flush_in_subnormals);
        mma_num y = mma_decode(p->in, mma_load_bits(p->in, b, i), p->flush_in_subnormals);
        if (x.special == 2 || y.special == 2) { nan = 1; continue; }
        if (x.special == 1 || y.special == 1) {
            if ((x.special == 0 && x.mant == 0) || (y.special == 0 && y.mant == 0)) { nan = 1; continue; }
            if (x.neg ^ y.neg) neg_inf = 1; else pos_inf = 1;
        }
    }
    if (nan || (pos_inf && neg_inf)) return half ? 0x7FFFu : 0x7FFFFFFFu;
    if (pos_inf) return half ? 0x7C00u : 0x7F800000u;
    return half ? 0xFC00u : 0xFF800000u;
}

/* One block: d = c + sum_{i<n} a[i] b[i] with n <= p->block (missing
 * products are zeros, as hardware pads a short block).  a and b are packed
 * arrays of p->in; c and the result are bits of p->out. */
MMA_HD static inline uint32_t mma_block(const mma_arith *p, int n, const void *a, const void *b, uint32_t c)
{
    const mma_num cn = mma_decode(p->out, c, false);
    int special = cn.special;
    int emax = -100000;
    bool any_zero = n < p->block || cn.mant == 0;
    if (cn.mant != 0 && cn.special == 0) emax = cn.exp;
    /* pass 1: the block's largest exponent */
    for (int i = 0; i < n; i++) {
        mma_num x = mma_decode(p->in, mma_load_bits(p->in, a, i), p->flush_in_subnormals);
        mma_num y = mma_decode(p->in, mma_load_bits(p->in, b, i), p->flush_in_subnormals);
        if (x.special || y.special) { special = 1; continue; }
        if (x.mant == 0 || y.mant == 0) { any_zero = true; continue; }
        if (x.exp + y.exp > emax) emax = x.exp + y.exp;
    }
    if (special) return mma_block_special(p, n, a, b, cn);
    if (any_zero && p->zero_exp > emax) emax = p->zero_exp;
    /* pass 2: align every term to emax with F fraction bits, add exactly */
    const int F = p->frac_bits;
    int64_t S = 0;
    bool all_negative = cn.neg != 0, all_dropped = true;
    uint64_t t = cn.mant ? mma_align_term(p, cn.mant, cn.exp - emax + F - cn.fb, cn.neg) : 0u;
    S += cn.neg ? -(int64_t)t : (int64_t)t;
    if (t) all_dropped = false;
    for (int i = 0; i < n; i++) {
        mma_num x = mma_decode(p->in, mma_load_bits(p->in, a, i), p->flush_in_subnormals);
        mma_num y = mma_decode(p->in, mma_load_bits(p->in, b, i), p->flush_in_subnormals);
        const int neg = x.neg ^ y.neg;
        const uint64_t M = (uint64_t)x.mant * y.mant;
        if (!neg) all_negative = false;
        if (M == 0) continue;
        t = mma_align_term(p, M, x.exp + y.exp - emax + F - (x.fb + y.fb), neg);
        if (t) all_dropped = false;
        S += neg ? -(int64_t)t : (int64_t)t;
    }
    if (n < p->block) all_negative = false; /* padding products are +0 */
    /* An exact zero is -0 only when every term was negative and dropped to
     * zero, as an IEEE sum of the signed aligned terms gives (MMA-Sim). */
    return mma_encode_result(p, S, emax - F, S == 0 && all_dropped && all_negative);
}

/* x + y in the output format, IEEE round to nearest even (FADD / HADD2). */
MMA_HD static inline uint32_t mma_add_out(const mma_arith *p, uint32_t x, uint32_t y)
{
    if (p->out == PREC_FP32) {
        float fx, fy, r;
        memcpy(&fx, &x, 4);
        memcpy(&fy, &y, 4);
#ifdef __CUDA_ARCH__
        r = __fadd_rn(fx, fy);
#else
        r = fx + fy; /* C evaluates float sums in float, round to nearest even */
#endif
        uint32_t bits;
        memcpy(&bits, &r, 4);
        return bits;
    }
    /* fp16: the sum of two halves is exact in double (exponents 40 apart at
     * most), then one rounding */
    const mma_num a = mma_decode(PREC_FP16, x, false), b = mma_decode(PREC_FP16, y, false);
    if (a.special || b.special) {
        const double va = a.special == 2 ? NAN : a.special ? (a.neg ? -INFINITY : INFINITY) : 0.0;
        const double vb = b.special == 2 ? NAN : b.special ? (b.neg ? -INFINITY : INFINITY) : 0.0;
        const double v = (a.special ? va : 0.0) + (b.special ? vb : 0.0);
        return v != v ? 0x7FFFu : (v < 0 ? 0xFC00u : 0x7C00u);
    }
    const int lo = a.exp < b.exp ? a.exp : b.exp; /* both fb = 10 */
    /* magnitudes aligned first (a left shift of a negative value is undefined), then signed */
    const int64_t ma = (int64_t)((uint64_t)a.mant << (a.exp - lo)), mb = (int64_t)((uint64_t)b.mant << (b.exp - lo));
    const int64_t S = (a.neg ? -ma : ma) + (b.neg ? -mb : mb);
    mma_arith r = *p;
    r.out_mode = PREC_RNE;
    r.out_frac_bits = 10;
    r.positive_zero = false;
    return mma_encode_result(&r, S, lo - 10, a.neg && b.neg && a.mant == 0 && b.mant == 0);
}

/* One split instruction (p->split != NONE) over n <= split_k products. */
MMA_HD static inline uint32_t mma_split_instr(const mma_arith *p, int n, const void *a, const void *b, uint32_t c)
{
    uint8_t a1[128], b1[128], a2[128], b2[128]; /* up to 32 elements of 4 bytes */
    const int sz = mma_elem_bytes(p->in);
    int n1 = 0, n2 = 0;
    for (int i = 0; i < n; i++) {
        uint8_t *da = (i % 4) < 2 ? a1 + n1 * sz : a2 + n2 * sz;
        uint8_t *db = (i % 4) < 2 ? b1 + n1 * sz : b2 + n2 * sz;
        memcpy(da, (const uint8_t *)a + (long)i * sz, sz);
        memcpy(db, (const uint8_t *)b + (long)i * sz, sz);
        if ((i % 4) < 2) n1++;
        else n2++;
    }
    mma_arith sub = *p;
    sub.split = MMA_SPLIT_NONE;
    sub.block = p->split_k / 2;
    switch (p->split) {
    case MMA_SPLIT_CHAIN12: return mma_add_out(p, c, mma_block(&sub, n2, a2, b2, mma_block(&sub, n1, a1, b1, 0u)));
    case MMA_SPLIT_CHAIN21: return mma_add_out(p, c, mma_block(&sub, n1, a1, b1, mma_block(&sub, n2, a2, b2, 0u)));
    default: break;
    }
    const uint32_t P1 = mma_block(&sub, n1, a1, b1, 0u), P2 = mma_block(&sub, n2, a2, b2, 0u);
    switch (p->split) {
    case MMA_SPLIT_C_P1P2: return mma_add_out(p, c, mma_add_out(p, P1, P2));
    case MMA_SPLIT_C_P2_P1: return mma_add_out(p, mma_add_out(p, c, P2), P1);
    default: return mma_add_out(p, mma_add_out(p, c, P1), P2); /* MMA_SPLIT_C_P1_P2 */
    }
}

/* The chain of blocks over k products in K order. */
MMA_HD static inline uint32_t mma_dot(const mma_arith *p, int k, const void *a, const void *b, uint32_t c)
{
    const int sz = mma_elem_bytes(p->in);
    if (p->split != MMA_SPLIT_NONE) {
        for (int i = 0; i < k; i += p->split_k) {
            const int n = k - i < p->split_k ? k - i : p->split_k;
            c = mma_split_instr(p, n, (const uint8_t *)a + (long)i * sz, (const uint8_t *)b + (long)i * sz, c);
        }
        return c;
    }
    for (int i = 0; i < k; i += p->block) {
        const int n = k - i < p->block ? k - i : p->block;
        c = mma_block(p, n, (const uint8_t *)a + (long)i * sz, (const uint8_t *)b + (long)i * sz, c);
    }
    return c;
}

#ifdef __cplusplus
}
#endif
#endif
