/* kernels/registry.h — the one table of ops, their paths and variants.
 *
 * `ulpscope check` and the trainer's plan parser read this table.  Each op's
 * entry (a kop: name, summary, paths, fp8 note, variants with summaries) is
 * defined in the op's own .cu file, beside the launchers and the variant
 * enum whose order it names (for example kop_rmsnorm in kernels/rmsnorm.cu),
 * as `extern "C" const kop kop_<name>`: the enum and its names then change in
 * one file, and the table links without the check harness (kernels/check/),
 * MPFR or the references, which is what lets the trainer link without them.
 * A per-op .c file would have split every op in two for no gain: the .cu
 * is already where its variants are implemented.  kernels/registry.c holds
 * the table of pointers; the checks attach to ops by name in
 * kernels/check/checks.c.
 *
 * Contract for an op's entry (tests/test_registry.c enforces it):
 *  - name: lower case, unique, [a-z0-9_];
 *  - paths: at least one of fp32/bf16/fp16/fp8; fp8_note always set: what
 *    the fp8 path stores (formats, scales) or why the op offers none;
 *  - variants: at least one, names unique within the op, variants[0] the
 *    default; every variant is a mathematically equivalent reordering or
 *    implementation choice, not a different function. */
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
