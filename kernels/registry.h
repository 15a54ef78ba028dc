/* kernels/registry.h — the one table of ops, their paths and variants.
 *
 * The check harness (ulpscope check), the trainer's plan parser and the bisect
 * tool all read this table, so adding an op touches one place: define its kop
 * in kernels/check_<op>.c and add one line to kernels/registry.c.
 *
 * Contract for an op's entry (tests/test_registry.c enforces it):
 *  - name: lower case, unique, [a-z0-9_];
 *  - paths: at least one of fp32/bf16/fp16/fp8; fp8_note always set: what
 *    the fp8 path stores (formats, scales) or why the op offers none;
 *  - variants: at least one, names unique within the op, variants[0] the
 *    default; every variant is a mathematically equivalent reordering or
 *    implementation choice, not a different function;
 *  - check: set. */
#ifndef ULPSCOPE_KERNELS_REGISTRY_H
#define ULPSCOPE_KERNELS_REGISTRY_H

#include <stddef.h>

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *name;    /* "two_pass", "warp_tree", "llama", ... */
    const char *summary; /* one line: what is reordered, and how */
} kvariant;

typedef struct kcheck_ctx kcheck_ctx; /* kernels/check.h */

#define KPATH_BIT(p) (1u << (p))
#define KPATHS_NO_FP8 (KPATH_BIT(KPATH_FP32) | KPATH_BIT(KPATH_BF16) | KPATH_BIT(KPATH_FP16))
#define KPATHS_ALL (KPATHS_NO_FP8 | KPATH_BIT(KPATH_FP8))

typedef struct {
    const char *name;       /* "rmsnorm", "matmul", ... */
    const char *summary;    /* one line: what it computes (forward and backward) */
    unsigned paths;         /* KPATH_BIT(p) for each path the op offers */
    const char *fp8_note;   /* what the fp8 path stores, or why the op has none */
    const kvariant *variants; /* variants[0] is the default */
    int n_variants;
    /* Run the op on the GPU at (path, variant) on fresh random inputs in every
     * check shape (fewer and smaller under kcheck_quick()), compare every
     * output element with the MPFR reference, and report one row per (shape,
     * output tensor) through kcheck_acc_report() / kcheck_report().  The
     * planted bug (kernels_planted_bug()) is already set by the harness.
     * Returns 0, or -1 with kernels_last_error() set when something other than
     * accuracy went wrong (a CUDA error, out of memory): the harness reports
     * that as an error, which fails the run. */
    int (*check)(kcheck_ctx *ctx, kpath path, int variant);
} kop;

const kop *const *kregistry_ops(int *count);
const kop *kregistry_find(const char *name);       /* NULL when unknown */
int kregistry_variant(const kop *op, const char *name); /* index, or -1 */
int kop_has_path(const kop *op, kpath p);
/* "a, b, c": the accepted names, for error messages. */
void kregistry_op_names(char *buf, size_t len);
void kregistry_variant_names(const kop *op, char *buf, size_t len);
void kregistry_path_names(const kop *op, char *buf, size_t len); /* the op's paths */

#ifdef __cplusplus
}
#endif
#endif
