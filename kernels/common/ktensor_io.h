/* kernels/common/ktensor_io.h — device memory for host C code (checks, benchmarks,
 * the trainer): allocate tensors, move values between doubles on the host
 * and any storage format on the device, poison outputs, synchronise.
 *
 * Values cross as doubles in the *stored* units of the format: for fp8
 * tensors the real value is stored * scale, and callers multiply by the scale
 * themselves (ktensor_set_scale / ktensor_get_scale).  Every function returns
 * 0, or -1 with kernels_last_error() naming the call and the CUDA error. */
#ifndef ULPSCOPE_KERNELS_COMMON_KTENSOR_IO_H
#define ULPSCOPE_KERNELS_COMMON_KTENSOR_IO_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Allocates t->data for shape[0..ndim-1] in format f (and t->scale, set to 1,
 * for e4m3/e5m2), filled with the poison pattern.  On failure t is zeroed. */
int ktensor_alloc(ktensor *t, prec_format f, int ndim, const int64_t *shape);
void ktensor_free(ktensor *t); /* safe on a zeroed tensor */
size_t ktensor_bytes(const ktensor *t);

/* Host doubles -> device.  Each value is rounded RNE into the format first
 * (callers that want the kernel to see exactly their values pass values of
 * the format; kcheck_fill_* draws such values). */
int ktensor_upload(ktensor *t, const double *values);
/* Device -> host doubles (stored units). */
int ktensor_download(const ktensor *t, double *values);
/* Fills t on the device with values uniform in [lo, hi) (stored units),
 * rounded to nearest into the format: a hash of (seed, index), so large
 * benchmark inputs need no host round trip.  Not for checks (their inputs
 * come from the host so the reference sees them). */
int ktensor_fill_uniform(ktensor *t, uint64_t seed, float lo, float hi);
/* Every byte 0xFF: NaN in fp32, bf16, fp16, e4m3 and e5m2. */
int ktensor_poison(ktensor *t);
int ktensor_set_scale(ktensor *t, float scale);
int ktensor_get_scale(const ktensor *t, float *scale);

/* Raw device buffers (indices, workspaces).  Uploads, fills and copies are
 * ordered on the current stream (kernels_stream()) without waiting for the
 * device; a download waits for that stream. */
int kdevice_alloc(void **ptr, size_t bytes, const char *what);
void kdevice_free(void *ptr);
int kdevice_upload(void *dst, const void *src, size_t bytes, const char *what);
int kdevice_download(void *dst, const void *src, size_t bytes, const char *what);
int kdevice_fill_bytes(void *dst, int byte, size_t bytes, const char *what);
/* The current device, for result headers: "NVIDIA H100 80GB HBM3", compute
 * capability, driver and runtime versions (e.g. 12040 for 12.4). */
typedef struct {
    char name[256];
    int cc_major, cc_minor;
    int driver_version, runtime_version;
    int multiprocessors;
    size_t memory_bytes;
    int max_clock_khz; /* the SM clock's peak (cudaDevAttrClockRate), for issue-rate fractions */
} kdevice_props;
int kdevice_describe(kdevice_props *props);

/* Device-to-device copy on the current stream, for copy-bandwidth baselines. */
int kdevice_copy(void *dst, const void *src, size_t bytes, const char *what);

/* CUDA-event timing for benchmarks: start records an event on the current
 * stream, stop records another, waits for it and returns the milliseconds
 * between them. */
typedef struct ktimer ktimer;
int ktimer_create(ktimer **t);
void ktimer_destroy(ktimer *t);
int ktimer_start(ktimer *t);
int ktimer_stop(ktimer *t, float *ms);

/* cudaDeviceSynchronize, then the last launch error, attributed to `what`. */
int kernels_sync(const char *what);

#ifdef __cplusplus
}
#endif
#endif
