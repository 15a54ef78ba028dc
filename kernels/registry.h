/* kernels/registry.h — the one table of ops, their paths and variants.
 *
 * The check harness (ulpscope check), the trainer's plan parser and the bisect
 * tool all read this table, so adding an op touches one place: define its kop
 * in kernels/check_<op>.c and add one line to kernels/registry.c. */
#ifndef ULPSCOPE_KERNELS_REGISTRY_H
#define ULPSCOPE_KERNELS_REGISTRY_H

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *name;    /* "two_pass", "warp_tree", "llama", ... */
    const char *summary; /* one line: what is reordered, and how */
} kvariant;

typedef struct kcheck_ctx kcheck_ctx; /* kernels/check.h */

typedef struct {
    const char *name;       /* "rmsnorm", "matmul", ... */
    const char *summary;    /* one line */
    unsigned paths;         /* bit (1u << kpath) for each path the op offers */
    const char *fp8_note;   /* what the fp8 path stores, or why the op has none */
    const kvariant *variants; /* variants[0] is the default */
    int n_variants;
    /* Run the op on the GPU at (path, variant) on fresh random inputs in every
     * check shape, compare every output element with the MPFR reference, and
     * report one row per (shape, output tensor) through kcheck_report(). */
    int (*check)(kcheck_ctx *ctx, kpath path, int variant);
} kop;

const kop *const *kregistry_ops(int *count);
const kop *kregistry_find(const char *name);       /* NULL when unknown */
int kregistry_variant(const kop *op, const char *name); /* index, or -1 */
int kop_has_path(const kop *op, kpath p);
/* "a, b, c": the accepted names, for error messages. */
void kregistry_op_names(char *buf, size_t len);
void kregistry_variant_names(const kop *op, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
