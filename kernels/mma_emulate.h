/* kernels/mma_emulate.h — a matmul computed on CUDA cores exactly as a
 * modelled matrix unit would compute it (precision/mma.h), so that one
 * matmul, or one trainer slot, can run "as an A100 would" on an H100.
 *
 * K order: every output element is the chain of modelled blocks over
 * k = 0, 1, ..., K-1, blocks of L products starting at k = 0 (the last one
 * short when L does not divide K, padded with zeros as the unit pads it), one
 * accumulator per element that starts at C (or +0) and never leaves the
 * chain: the order in which an sm_80 tile with a single K loop (no split-K,
 * no slice-K) visits K, issuing mma.sync in increasing k with the accumulator
 * in registers.  An instruction of K = 16 with L = 8 is two blocks in a row,
 * as the model says the unit runs it.
 *
 * Two kernels, both bit-identical to mma_dot on every input (infinities,
 * NaN, subnormals, signed zeros, overflow):
 *  - fast (every native model with fp32 output: mma_fast_supported): the
 *    operands are decoded once into integer magnitudes, signs and exponents
 *    (precision/mma_fast.h), 64 x 64 output tiles in shared memory, 4 x 4
 *    outputs per thread, 32-bit integer terms; blocks the rearrangement does
 *    not cover (non-finite operands, zero or overflowing sums) run mma_block
 *    on the operands' bits;
 *  - the model's own code, one thread per output (the split fp8
 *    instructions of the H100; fp16 outputs are not emulated).
 * Every function returns 0 or -1 with kernels_last_error() set. */
#ifndef ULPSCOPE_KERNELS_MMA_EMULATE_H
#define ULPSCOPE_KERNELS_MMA_EMULATE_H

#include <stdint.h>

#include "kernels/kernels.h"
#include "precision/mma.h"

#ifdef __cplusplus
extern "C" {
#endif

/* D[M][N] = A[M][K] . B[N][K]^T (+ C[M][N] as the initial accumulator when C
 * is not NULL), device arrays: A and B in p->in storage (mma_store layout;
 * tf32 as fp32 words), C and D fp32 (p->out must be PREC_FP32).  Waits for
 * the device, so a fault is reported here. */
int mma_emulate_gemm(const mma_arith *p, int M, int N, int K, const void *A, const void *B, const float *C,
                     float *D);

/* A trainer's linear layer through the model (shapes as kernels/matmul.h):
 * A [M,K] (a_trans 0) or [K,M] (1), B [K,N] (b_trans 0) or [N,K] (1), both
 * in p->in storage; y [M,N] in y_format (fp32, bf16 or fp16):
 *   y = round_{y_format}(D + y_old)   (accumulate; fp32 add, round to nearest even)
 *   y = round_{y_format}(D)           (otherwise)
 * with D the modelled fp32 result from a zero accumulator: C enters as
 * cuBLAS's beta C does, in the epilogue, not as the unit's initial c.  Runs
 * on the current stream without waiting.  Only models mma_fast_supported()
 * accepts. */
int mma_emulate_linear(const mma_arith *p, int64_t M, int64_t N, int64_t K, const void *A, int a_trans, const void *B,
                       int b_trans, void *y, prec_format y_format, int accumulate);

/* R replicas of one linear layer (the trainer's replica engine): replica r's
 * A, B and y at r times the strides below from the pointers given (elements
 * of each array's own type; 0 shares an operand; stride_y >= M*N keeps the
 * outputs apart).  Each stage (decode, GEMM, epilogue) is one launch for all
 * replicas, the replica as one more grid dimension, as long as their
 * workspace stays within 512 MiB (more replicas: more launches of the same
 * kernels); replica r gets, byte for byte, what mma_emulate_linear gives on
 * its operands alone, which is this call with batch NULL (one replica). */
typedef struct {
    int64_t count; /* R, 1..65535 */
    int64_t stride_a, stride_b, stride_y;
} mma_emulate_batch;
int mma_emulate_linear_batched(const mma_arith *p, int64_t M, int64_t N, int64_t K, const void *A, int a_trans,
                               const void *B, int b_trans, void *y, prec_format y_format, int accumulate,
                               const mma_emulate_batch *batch);

/* Batched calls of more than one replica so far (tests check that the
 * trainer's replicas take this road). */
int64_t mma_emulate_batched_calls(void);

/* The planted bug of the GPU tests' twins (on != 0): the fast kernel leaves
 * the last product of every block out.  Never set outside tests. */
void mma_emulate_plant_drop_last(int on);

/* The planted bug of the batched twin (on != 0): every replica reads replica
 * 0's B (its replica stride forgotten).  Never set outside tests. */
void mma_emulate_plant_replica0_b(int on);

/* Which kernel the last call ran: "fast" or "model" ("" before the first). */
const char *mma_emulate_last_kernel(void);

/* Integer instructions per product in the fast kernel's inner loops, as its
 * sm_90 SASS has them (bench_mma_emulate's integer fraction): 5, pass 1 one
 * VIADDMNMX (add and max), pass 2 IADD3 (the shift), IMAD (magnitude times
 * signed magnitude, plus the mask), SHF (the arithmetic shift), IMAD (times
 * the first operand's sign, added to the sum). */
int mma_emulate_inner_ops_per_product(void);

/* Frees the decoded-operand workspaces. */
void mma_emulate_release(void);

#ifdef __cplusplus
}
#endif
#endif
