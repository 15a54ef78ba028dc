/* trainer/glue.h — the few GPU kernels the trainer needs around the
 * registry's ops: format conversion between slots, adding a gradient into
 * its accumulator, and counting non-finite values.  They are not plan
 * slots: a conversion is the RNE rounding the CPU backend applies at the
 * same place, so both backends round at the same points.
 *
 * Pointers are device memory; formats fp32, bf16, fp16 (and fp8 sources
 * with their scale).  Functions return 0 or -1 with kernels_last_error(). */
#ifndef ULPSCOPE_TRAINER_GLUE_H
#define ULPSCOPE_TRAINER_GLUE_H

#include <stdint.h>

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] = RNE(src[i] * src_scale) in dst_format (src_scale: device float for fp8 sources, else NULL). */
int tglue_cast(void *dst, prec_format dst_format, const void *src, prec_format src_format, const float *src_scale,
               int64_t n);
/* dst[i] = RNE(dst[i] + src[i]) in dst's format, the sum formed in fp32. */
int tglue_add(void *dst, prec_format dst_format, const void *src, prec_format src_format, int64_t n);
/* Number of NaN/Inf elements (host result; synchronises). */
int tglue_count_nonfinite(const void *x, prec_format format, int64_t n, int64_t *count);

#ifdef __cplusplus
}
#endif
#endif
