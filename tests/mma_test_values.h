/* tests/mma_test_values.h — random operand bits for the matrix-unit model
 * tests (the fast rearrangement on the CPU, the CUDA emulation on the GPU):
 * each row of operands has a kind, so a GEMM's rows cross every kind with
 * every other:
 *   0 normal     exponents near the bias, about 1 in 8 a zero of either sign
 *   1 wide       any finite exponent field, subnormals and zeros included
 *   2 subnormal  exponent field 0: subnormals and zeros of both signs
 *   3 huge       the top finite exponents (fp32 overflow where the format reaches it)
 *   4 special    normal, with about 1 in 40 an infinity or NaN
 *   5 zero       +0 and -0 only
 * tf32 values are fp32 words with random low 13 bits (the unit ignores them). */
#ifndef ULPSCOPE_TESTS_MMA_TEST_VALUES_H
#define ULPSCOPE_TESTS_MMA_TEST_VALUES_H

#include <stdint.h>

#include "precision/mma.h"
#include "precision/rng.h"

#define MMA_TEST_KINDS 6

typedef struct {
    int ebits, fb, width;
} mma_test_layout;

static inline mma_test_layout mma_test_layout_of(prec_format f)
{
    switch (f) {
    case PREC_FP32: case PREC_TF32: return (mma_test_layout){8, 23, 32};
    case PREC_BF16: return (mma_test_layout){8, 7, 16};
    case PREC_FP16: return (mma_test_layout){5, 10, 16};
    case PREC_E4M3: return (mma_test_layout){4, 3, 8};
    default: return (mma_test_layout){5, 2, 8}; /* e5m2 */
    }
}

/* The largest exponent field of a finite value (e4m3 uses the all-ones field). */
static inline uint32_t mma_test_top_field(prec_format f)
{
    const mma_test_layout l = mma_test_layout_of(f);
    return f == PREC_E4M3 ? (1u << l.ebits) - 1u : (1u << l.ebits) - 2u;
}

static inline uint32_t mma_test_bits(prec_rng *rng, prec_format f, int kind)
{
    const mma_test_layout l = mma_test_layout_of(f);
    const uint32_t bias = (1u << (l.ebits - 1)) - 1u, top = mma_test_top_field(f);
    const uint64_t r = prec_rng_next(rng);
    const uint32_t sign = (uint32_t)(r & 1u) << (l.width - 1);
    uint32_t frac = (uint32_t)(r >> 8) & ((1u << l.fb) - 1u), field;
    switch (kind) {
    case 0:
        if ((r >> 40) % 8 == 0) return sign;
        field = bias - 4u + (uint32_t)((r >> 44) % 9);
        break;
    case 1: field = (uint32_t)((r >> 40) % (top + 1u)); break;
    case 2: field = 0u; if ((r >> 40) % 4 == 0) frac = 0u; break;
    case 3: field = top - (uint32_t)((r >> 40) % 3); break;
    case 4:
        if ((r >> 40) % 40 == 0) {
            /* an infinity or a NaN (e4m3: its one NaN) */
            if (f == PREC_E4M3) return sign | 0x7Fu;
            field = (1u << l.ebits) - 1u;
            frac = (r >> 50) & 1u ? 0u : frac | 1u;
            break;
        }
        field = bias - 4u + (uint32_t)((r >> 44) % 9);
        break;
    default: return sign;
    }
    if (f == PREC_E4M3 && field == 15u && frac == 7u) frac = 6u; /* finite kinds stay finite */
    return sign | (field << l.fb) | frac;
}

/* Store bits of f at idx of a packed array (mma_load_bits layout). */
static inline void mma_test_store_bits(prec_format f, void *base, long idx, uint32_t bits)
{
    switch (mma_elem_bytes(f)) {
    case 4: ((uint32_t *)base)[idx] = bits; break;
    case 2: ((uint16_t *)base)[idx] = (uint16_t)bits; break;
    default: ((uint8_t *)base)[idx] = (uint8_t)bits; break;
    }
}

/* One operand of format f for row kind `kind` (tf32: low 13 bits random). */
static inline uint32_t mma_test_operand(prec_rng *rng, prec_format f, int kind)
{
    uint32_t bits = mma_test_bits(rng, f == PREC_TF32 ? PREC_FP32 : f, kind);
    if (f == PREC_TF32) bits = (bits & 0xFFFFE000u) | ((uint32_t)prec_rng_next(rng) & 0x1FFFu);
    return bits;
}

#endif
