/* precision/rng.h — small, fast, seedable random numbers for test inputs and
 * stochastic rounding.  splitmix64 seeds xoshiro256**; the same seed gives
 * the same stream on every machine, which determinism tests rely on. */
#ifndef ULPSCOPE_PRECISION_RNG_H
#define ULPSCOPE_PRECISION_RNG_H

#include <math.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct { uint64_t s[4]; } prec_rng;

static inline uint64_t prec_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline void prec_rng_seed(prec_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) r->s[i] = prec_splitmix64(&seed);
}

static inline uint64_t prec_rng_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* xoshiro256** (Blackman and Vigna). */
static inline uint64_t prec_rng_next(prec_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = prec_rng_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = prec_rng_rotl(s[3], 45);
    return result;
}

/* Uniform in [0, 1), 53 random bits. */
static inline double prec_rng_uniform(prec_rng *r) { return (double)(prec_rng_next(r) >> 11) * 0x1p-53; }

/* Standard normal by Box-Muller (one value per call; simplicity over speed). */
static inline double prec_rng_normal(prec_rng *r)
{
    double u1 = prec_rng_uniform(r);
    double u2 = prec_rng_uniform(r);
    if (u1 < 0x1p-60) u1 = 0x1p-60;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#ifdef __cplusplus
}
#endif
#endif
