/* kernels/kernels.h — the C API over ulpscope's CUDA kernels.
 *
 * A tensor is a device pointer with its element format, shape and (fp8 only)
 * a scale.  A *path* is the storage format of an op's tensors; accumulation is
 * fp32 unless a variant says otherwise.  Every function returns 0 or -1; on -1
 * kernels_last_error() names the op, the shapes and the failing CUDA/cuBLAS
 * call. */
#ifndef ULPSCOPE_KERNELS_H
#define ULPSCOPE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "precision/format.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { KPATH_FP32 = 0, KPATH_BF16, KPATH_FP16, KPATH_FP8, KPATH_COUNT } kpath;

const char *kpath_name(kpath p);             /* "fp32", "bf16", "fp16", "fp8" */
int kpath_parse(const char *name, kpath *out); /* 0, or -1 for an unknown name */
const char *kpath_names(void);               /* "fp32, bf16, fp16, fp8" */

#define KTENSOR_MAX_DIMS 4

typedef struct {
    void *data;                     /* device memory */
    prec_format format;             /* fp32, bf16, fp16, e4m3 or e5m2 */
    int ndim;
    int64_t shape[KTENSOR_MAX_DIMS]; /* row-major; the last dimension is contiguous */
    float *scale;                   /* fp8 only: device float; real value = stored * *scale */
    /* The trainer's replicas (trainer/backend.h): 0 for a single tensor; else
     * the tensor is one of R replicas' copies, replica r's at data + r *
     * replica_stride elements (shape: one replica's).  Kernels ignore it. */
    int64_t replica_stride;
} ktensor;

int64_t ktensor_numel(const ktensor *t);
size_t kformat_bytes(prec_format f); /* bytes per stored element */

/* 1 when a CUDA device can run kernels; 0 otherwise, with the reason (no
 * device, no driver, driver too old) in why. */
int kernels_gpu_available(char *why, size_t why_len);

/* Planted bugs for the checks' twins: a kernel that honours the current bug
 * must then fail its check.  KBUG_DROP_TERM leaves one term out of each
 * reduction (or one element of an elementwise update); KBUG_TRUNCATE_OUTPUT
 * rounds outputs toward zero instead of to nearest even.  Global, host-side;
 * launchers pass it to their kernels as an argument. */
typedef enum { KBUG_NONE = 0, KBUG_DROP_TERM, KBUG_TRUNCATE_OUTPUT, KBUG_COUNT } kbug;
void kernels_set_planted_bug(kbug bug);
kbug kernels_planted_bug(void);
const char *kbug_name(kbug bug); /* "none", "drop-term", "truncate-output" */

/* The CUDA stream every kernel launch and cuBLAS/cuBLASLt call in kernels/
 * goes to (a cudaStream_t; NULL, the default, is the legacy default stream).
 * One for the whole process: the ops' internal workspaces are process-wide
 * too, so two threads must not launch ops at the same time.  Launchers do
 * not synchronise the device, so a sequence of calls can be captured into a
 * CUDA graph (kernels/common/kgraph.h) once every lazily grown workspace has its
 * size: make the same calls once before capturing (a warm-up); a workspace
 * that would have to grow during a capture is refused with an error. */
void kernels_set_stream(void *cuda_stream);
void *kernels_stream(void);

/* Device frees so far (kdevice_free, a workspace's growth).  A CUDA graph
 * captured when the count was c reads and writes only memory that is still
 * allocated as it was while the count is c: replay it only then. */
unsigned long long kernels_free_count(void);
void kernels_note_free(void);

/* The last error, or "" when none (per thread). */
const char *kernels_last_error(void);
/* Record an error (printf-style); returns -1 so callers can `return kernels_fail(...)`. */
int kernels_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#ifdef __cplusplus
}
#endif
#endif
