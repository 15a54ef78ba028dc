/* kernels/check/check_kexp.h — kval replays of kernels/common/kexp.cuh's exponential
 * variants and the matching logarithms, shared by the softmax, log-sum-exp
 * and cross-entropy checks.  Error figures: CUDA C++ Programming Guide,
 * "Mathematical Functions" (expf, exp2f 2 ulps; logf, log2f 1 ulp) and
 * "Intrinsic Functions" (__expf 2 + floor(|1.173 x|) ulps; __logf 2^-21.41
 * absolute on [0.5, 2], 3 ulps elsewhere). */
#ifndef ULPSCOPE_KERNELS_CHECK_CHECK_KEXP_H
#define ULPSCOPE_KERNELS_CHECK_CHECK_KEXP_H

#include "kernels/check/check.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { KCHECK_EXP = 0, KCHECK_EXP2 = 1, KCHECK_FAST_EXP = 2 }; /* = KEXP_* of kexp.cuh */

/* exp(x - m) as the kernel computes it, m the row's shift (the exact maximum,
 * or a stored log-sum-exp with its own error). */
kval kcheck_exp_shifted(double x, kval m, int variant);
/* m + log(s) as the log-sum-exp kernel computes it for that variant. */
kval kcheck_log_shifted(kval s, kval m, int variant);

#ifdef __cplusplus
}
#endif
#endif
