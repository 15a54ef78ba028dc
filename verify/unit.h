/* ulpscope/unit.h — assertions for precision unit tests (installed as
 * <ulpscope/unit.h>), in the style of CMocka's assert_* macros: include
 * <cmocka.h> first and a failed assertion fails the current CMocka test
 * (_fail); without CMocka it prints the report and aborts.
 *
 *   ulp_tensor in[] = {ULP_TENSOR("x", ULP_BF16_BITS, x, N, C), ULP_TENSOR("gain", ULP_BF16_BITS, g, C)};
 *   ulp_tensor out[] = {ULP_TENSOR("y", ULP_BF16_BITS, y, N, C)};
 *   ulp_assert_within_bound("rmsnorm", in, out, "bf16");
 *
 * ulp_assert_within_bound declares fp32 accumulation in an unknown order and
 * unknown upcasting (the verdict takes the loosest of those: a kernel no
 * worse than some fp32-accumulating one passes); ulp_assert_verify takes a
 * full declaration (ulp_kernel, verify.h).  inputs and outputs are arrays
 * (their length is taken with sizeof). */
#ifndef ULPSCOPE_UNIT_H
#define ULPSCOPE_UNIT_H

#include <stdio.h>
#include <stdlib.h>

#include "verify.h"

#ifdef cmocka_unit_test
#define ULP_FAIL_(file, line) _fail((file), (line))
#else
#define ULP_FAIL_(file, line) abort()
#endif

#define ULP_COUNT_(a) ((int)(sizeof(a) / sizeof((a)[0])))

static inline int ulp_assert_report_(const char *what, const char *op, const ulp_kernel *k, const ulp_tensor *in,
                                     int n_in, const ulp_tensor *out, int n_out, const char *file, int line)
{
    static ulp_report rep; /* about 20 KB: kept off the stack */
    char err[1024];
    int rc = ulp_verify(op, k, in, n_in, out, n_out, &rep, err, sizeof err);
    if (rc == ULP_PASS) return 1;
    if (rc == ULP_BAD_INPUT) fprintf(stderr, "%s:%d: %s(%s): bad input: %s\n", file, line, what, op, err);
    else {
        fprintf(stderr, "%s:%d: %s(%s) failed:\n", file, line, what, op);
        ulp_report_print(stderr, &rep);
    }
    return 0;
}

static inline ulp_kernel ulp_kernel_fp32_accum_(const char *path)
{
    ulp_kernel k = ULP_KERNEL_DEFAULT;
    k.path = path;
    k.accum = "fp32";
    return k;
}

#define ulp_assert_within_bound(op, inputs, outputs, path)                                                 \
    do {                                                                                                    \
        ulp_kernel k_ = ulp_kernel_fp32_accum_(path);                                                       \
        if (!ulp_assert_report_("ulp_assert_within_bound", (op), &k_, (inputs), ULP_COUNT_(inputs), (outputs), \
                                ULP_COUNT_(outputs), __FILE__, __LINE__))                                    \
            ULP_FAIL_(__FILE__, __LINE__);                                                                  \
    } while (0)

#define ulp_assert_verify(op, kernel, inputs, outputs)                                                      \
    do {                                                                                                    \
        ulp_kernel k_ = (kernel);                                                                           \
        if (!ulp_assert_report_("ulp_assert_verify", (op), &k_, (inputs), ULP_COUNT_(inputs), (outputs),     \
                                ULP_COUNT_(outputs), __FILE__, __LINE__))                                    \
            ULP_FAIL_(__FILE__, __LINE__);                                                                  \
    } while (0)

#endif
