/* kernels/registry.c — the one table of ops (see registry.h).  Each op's kop
 * lives in its own .cu beside its launchers; adding an op is one line in
 * KREGISTRY_OPS below. */
#include "kernels/registry.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* The ops, one line each, in the order `ulpscope check` runs and lists
 * them; kop_<name> is defined in the op's .cu. */
#define KREGISTRY_OPS(X)    \
    X(embedding)            \
    X(rmsnorm)              \
    X(layernorm)            \
    X(softmax)              \
    X(logsumexp)            \
    X(gelu_tanh)            \
    X(gelu_erf)             \
    X(relu2)                \
    X(leaky_relu2)          \
    X(residual)             \
    X(transpose)            \
    X(grad_norm)            \
    X(rope)                 \
    X(matmul)               \
    X(matmul_fast)          \
    X(matmul_block_fp8)     \
    X(adamw)                \
    X(adamw_sr)             \
    X(adamw_split)          \
    X(cross_entropy)        \
    X(linear_cross_entropy) \
    X(polar_express)        \
    X(muon_newton_schulz)   \
    X(attention)

#define KREGISTRY_DECLARE(name) extern const kop kop_##name;
KREGISTRY_OPS(KREGISTRY_DECLARE)

#define KREGISTRY_POINTER(name) &kop_##name,
static const kop *const ops[] = {KREGISTRY_OPS(KREGISTRY_POINTER) NULL /* end */};

const kop *const *kregistry_ops(int *count)
{
    if (count) {
        int n = 0;
        while (ops[n]) n++;
        *count = n;
    }
    return ops;
}

const kop *kregistry_find(const char *name)
{
    for (int i = 0; name && ops[i]; i++)
        if (strcasecmp(ops[i]->name, name) == 0) return ops[i];
    return NULL;
}

int kregistry_variant(const kop *op, const char *name)
{
    for (int v = 0; name && v < op->n_variants; v++)
        if (strcasecmp(op->variants[v].name, name) == 0) return v;
    return -1;
}

int kop_has_path(const kop *op, kpath p)
{
    return (unsigned)p < KPATH_COUNT && (op->paths & KPATH_BIT(p)) != 0;
}

/* Appends ", name" (or "name" first) to buf, truncating safely. */
static void append_name(char *buf, size_t len, const char *name)
{
    size_t used = strlen(buf);
    if (used + 1 >= len) return;
    snprintf(buf + used, len - used, "%s%s", used ? ", " : "", name);
}

void kregistry_op_names(char *buf, size_t len)
{
    if (!len) return;
    buf[0] = '\0';
    for (int i = 0; ops[i]; i++) append_name(buf, len, ops[i]->name);
}

void kregistry_variant_names(const kop *op, char *buf, size_t len)
{
    if (!len) return;
    buf[0] = '\0';
    for (int v = 0; v < op->n_variants; v++) append_name(buf, len, op->variants[v].name);
}

void kregistry_path_names(const kop *op, char *buf, size_t len)
{
    if (!len) return;
    buf[0] = '\0';
    for (int p = 0; p < KPATH_COUNT; p++)
        if (kop_has_path(op, (kpath)p)) append_name(buf, len, kpath_name((kpath)p));
}
