/* kernels/probe/probe_gpu.h — the GPU half of `ulpscope probe`: matrix-unit
 * instructions run on probe tiles, device facts for the fingerprint header,
 * cuBLASLt fp8 GEMMs (with and without fast accumulation) and the GEMM study
 * of the A100 path on an H100.
 *
 * Tiles: one instruction each, D = A B + C with A [M][K] row-major, B stored
 * as [8][K] (column n of B contiguous along K), C and D [M][8] row-major; A
 * and B in the input format's storage (mma_store), C and D in the output's
 * (fp32 words or fp16 halves).  M = 16 for mma.sync, 64 for wgmma.  Every
 * function returns 0 or -1 with kernels_last_error() set. */
#ifndef ULPSCOPE_KERNELS_PROBE_PROBE_GPU_H
#define ULPSCOPE_KERNELS_PROBE_PROBE_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "kernels/probe/probe_fingerprint.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Instruction shape of a route for an (in, out) pair in this build, or 0
 * when the route has no such instruction: *m = 16 (mma.sync) or 64 (wgmma),
 * returns K. */
int probe_gpu_shape(const char *route, prec_format in, prec_format out, int *m);

/* The GPU targets this build probes, mma.sync first. */
int probe_gpu_targets(probe_target *out, int max);

/* Full tiles on the GPU (host arrays, layouts above). */
int probe_gpu_tiles(const char *route, prec_format in, prec_format out, int tiles, const void *a, const void *b,
                    const void *c, void *d);

/* A probe executor (probe_run_fn): dot i goes on the diagonal of tile i/8. */
int probe_gpu_run(void *ctx, const probe_target *t, int n, const void *a, const void *b, const uint32_t *c,
                  uint32_t *d, char *err, size_t err_len);

/* Header fields: "device":...,"cc":...,"driver":...,"runtime":...,"cublaslt":... */
int probe_gpu_header(char *buf, size_t len);

/* D[m][n] = sum_k A[m][k] B[n][k] through cuBLASLt with e4m3 A and B (host
 * arrays of e4m3 bytes), fp32 D (row-major, host), CUBLASLT_MATMUL_DESC_FAST_ACCUM
 * = fast_accum.  M, N, K multiples of 16. */
int probe_cublaslt_fp8(int fast_accum, int M, int N, int K, const uint8_t *a, const uint8_t *b, float *d);

/* The A100 path on an H100, one GEMM per format: D = A B^T with A [M][K],
 * B [N][K] random normal rounded to `in`, C = 0.  Distances are normwise,
 * ||X - Y||_F / ||fp64||_F. */
typedef struct {
    prec_format in;
    int M, N, K;
    char h100_route[48];       /* what "H100" ran: cuBLAS, cuBLASLt, ... */
    double a100_vs_fp64;       /* A100 model (emulated on CUDA cores) */
    double h100_vs_fp64;       /* the H100's own result */
    double h100_model_vs_fp64; /* H100 model, emulated */
    double a100_vs_h100;
    double a100_vs_h100_model;
    double frac_differ_a100_h100; /* fraction of elements whose bits differ */
    long mma_sync_mismatch;    /* H100-model emulation vs a mma.sync GEMM run on
                                  the H100, element count; -1 when not run */
    double ms_emulate_a100;    /* time of the emulated GEMM */
    double ms_h100;            /* time of the H100 GEMM */
} probe_gemm_result;

int probe_gemm_study(prec_format in, int M, int N, int K, uint64_t seed, probe_gemm_result *r);

/* ---- launchers of the instruction files (device pointers) ---- */
int probe_sm80_tiles(prec_format in, prec_format out, int tiles, const void *dA, const void *dB, const void *dC,
                     void *dD);
/* D[M][N] fp32 = A[M][K] B[N][K]^T as chained mma.sync m16n8k16 (m16n8k8 for
 * tf32) in K order, one warp per 16x8 tile; M % 16 == 0, N % 8 == 0,
 * K % 16 == 0. */
int probe_sm80_gemm(prec_format in, int M, int N, int K, const void *dA, const void *dB, float *dD);
int probe_sm90a_tiles(const char *route, prec_format in, prec_format out, int tiles, const void *dA,
                      const void *dB, const void *dC, void *dD);

#ifdef __cplusplus
}
#endif
#endif
