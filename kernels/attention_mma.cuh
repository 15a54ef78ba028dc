// kernels/attention_mma.cuh — the tensor-core flash attention (variants
// flash_mma, flash_mma_exp2) as kernels/attention.cu dispatches to it; see
// kernels/attention_mma.cu for the kernels and their arithmetic.  Internal
// (C++): callers go through kattention_forward / kattention_backward.
#ifndef ULPSCOPE_KERNELS_ATTENTION_MMA_CUH
#define ULPSCOPE_KERNELS_ATTENTION_MMA_CUH

#include <cstdint>

#include "kernels/attention.h"
#include "kernels/kernels.h"

// Why (path, D) cannot run on the tensor-core kernels, or nullptr when it
// can (D <= 0: any D).  The device is not consulted (see katt_mma_device).
const char *katt_mma_refusal(kpath path, int64_t D);

// 0 when the current device runs mma.sync m16n8k16 bf16/fp16 (sm_80 or
// newer), else -1 with the reason recorded (kernels_fail, ctx first).
int katt_mma_device(const char *ctx);

// o and lse [BH,T] (natural log) from q, k, v in the path's format (bf16 or
// fp16), their heads' rows where rows says (kernels/attention.h); exp2
// selects flash_mma_exp2.
int katt_mma_forward(const char *ctx, kpath path, int exp2, int64_t BH, int T, int D, const katt_rows *rows,
                     float scale, const void *q, const void *k, const void *v, void *o, float *lse, int bug);

// dq, dk, dv from the forward's lse and delta [BH,T] = rowsum(dout o) (fp32,
// computed by the caller).
int katt_mma_backward(const char *ctx, kpath path, int exp2, int64_t BH, int T, int D, const katt_rows *rows,
                      float scale, const void *q, const void *k, const void *v, const void *dout, const float *lse,
                      const float *delta, void *dq, void *dk, void *dv, int bug);

#endif
