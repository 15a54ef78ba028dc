/* kernels/probe/probe_report.h — the GPU studies of `ulpscope probe`, each writing
 * JSON Lines records to fp and a short table to human:
 *   fingerprint: a layout self-check of every instruction, then every probe
 *     family on every GPU target, then the cuBLASLt fp8 promotion probe;
 *   validate: random dot products per target, hardware against the H100
 *     model bit for bit, mismatches counted with examples;
 *   accum: fp8 error against K through cuBLASLt, fast accumulation on/off;
 *   gemm: the A100 path on an H100 (probe_gemm_study) per format.
 * Each returns 0, or -1 with err set (a CUDA/cuBLAS failure or a broken
 * instruction layout: not a numerical finding). */
#ifndef ULPSCOPE_KERNELS_PROBE_PROBE_REPORT_H
#define ULPSCOPE_KERNELS_PROBE_PROBE_REPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "kernels/probe/probe_fingerprint.h"
#include "precision/rng.h"

/* One random dot product for target t (k values in a and b, c of the output
 * format), drawn from a mix that exercises the model: normal values, values
 * over the whole exponent range with subnormals and zeros, cancelling pairs,
 * and (bf16, tf32) products near the fp32 underflow; tf32 slots get random
 * low fp32 bits that the unit must ignore.  No NaN or infinity. */
void probe_random_dot(prec_rng *rng, const probe_target *t, long index, double *a, double *b, double *c);

int probe_report_fingerprint(FILE *fp, FILE *human, char *err, size_t err_len);
/* *mismatches gets the total over all targets. */
int probe_report_validate(FILE *fp, FILE *human, long n, uint64_t seed, long *mismatches, char *err, size_t err_len);
int probe_report_accum(FILE *fp, FILE *human, uint64_t seed, char *err, size_t err_len);
int probe_report_gemm(FILE *fp, FILE *human, int M, int N, int K, uint64_t seed, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
