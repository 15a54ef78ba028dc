/* kernels/check/check_attention_mma.c — the matrix-unit model the tensor-core
 * attention variants' bound takes on the GPU the check runs on
 * (check_attention_mma.h); the bound itself is compare_attention_mma.c. */
#include "kernels/check/check_attention_mma.h"

#include <stdio.h>

#include "kernels/common/ktensor_io.h"

const mma_arith *katt_mma_model(prec_format in, char *why, size_t why_len)
{
    kdevice_props props;
    if (kdevice_describe(&props)) {
        snprintf(why, why_len, "%s", kernels_last_error());
        return NULL;
    }
    const char *gen = props.cc_major == 8 && props.cc_minor == 0 ? "a100"
                      : props.cc_major == 9 && props.cc_minor == 0 ? "h100"
                      : props.cc_major == 10 && props.cc_minor == 0 ? "b200"
                                                                     : NULL;
    const mma_model *m = gen ? mma_model_find(gen, "mma.sync", in, PREC_FP32) : NULL;
    if (!m) {
        snprintf(why, why_len,
                 "no matrix-unit model for %s (compute capability %d.%d): precision/mma.h has a100 (8.0), h100 "
                 "(9.0), b200 (10.0); the tensor-core bound cannot be derived",
                 props.name, props.cc_major, props.cc_minor);
        return NULL;
    }
    return &m->arith;
}
