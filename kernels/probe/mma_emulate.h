/* kernels/probe/mma_emulate.h — a matmul computed on CUDA cores exactly as a
 * modelled matrix unit would compute it (precision/mma.h), so that one
 * matmul, or one trainer slot, can run "as an A100 would" on an H100.
 *
 * Every output element is the chain of modelled blocks over K in K order
 * (the block arithmetic in integers, the same inline code the CPU model
 * runs), i.e. what a kernel that accumulates one tile along K in registers
 * gets from that unit.  Returns 0 or -1 with kernels_last_error() set. */
#ifndef ULPSCOPE_KERNELS_PROBE_MMA_EMULATE_H
#define ULPSCOPE_KERNELS_PROBE_MMA_EMULATE_H

#include "kernels/kernels.h"
#include "precision/mma.h"

#ifdef __cplusplus
extern "C" {
#endif

/* D[M][N] = A[M][K] . B[N][K]^T (+ C[M][N] when C is not NULL), device
 * arrays: A and B in p->in storage (mma_store layout; tf32 as fp32 words),
 * C and D fp32 (p->out must be PREC_FP32). */
int mma_emulate_gemm(const mma_arith *p, int M, int N, int K, const void *A, const void *B, const float *C,
                     float *D);

/* The same on ktensors, for a trainer slot: a [M][K] and b [N][K] in one of
 * fp16, bf16, tf32, e4m3, e5m2 (both the same format), d [M][N] fp32.  gen
 * names the generation ("a100", ...): its first route with that input format
 * and fp32 output is used.  fp8 scales (a->scale, b->scale) multiply the
 * fp32 result, as cuBLASLt applies them after accumulation. */
int mma_emulate_matmul(const char *gen, const ktensor *a, const ktensor *b, ktensor *d);

#ifdef __cplusplus
}
#endif
#endif
