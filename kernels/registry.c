/* kernels/registry.c — the one table of ops (see registry.h).  Each op's kop
 * lives in its own .cu beside its launchers; adding an op is one extern and
 * one line in the table below. */
#include "kernels/registry.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

extern const kop kop_embedding;
extern const kop kop_rmsnorm;
extern const kop kop_layernorm;
extern const kop kop_softmax;
extern const kop kop_logsumexp;
extern const kop kop_gelu_tanh, kop_gelu_erf, kop_relu2, kop_leaky_relu2;
extern const kop kop_residual, kop_transpose, kop_grad_norm, kop_rope;
extern const kop kop_matmul, kop_matmul_fast, kop_matmul_block_fp8;
extern const kop kop_adamw, kop_adamw_sr, kop_adamw_split;
extern const kop kop_cross_entropy, kop_linear_cross_entropy;
extern const kop kop_polar_express, kop_muon_newton_schulz;
extern const kop kop_attention;

static const kop *const ops[] = {
    &kop_embedding,
    &kop_rmsnorm,
    &kop_layernorm,
    &kop_softmax,
    &kop_logsumexp,
    &kop_gelu_tanh, &kop_gelu_erf, &kop_relu2, &kop_leaky_relu2,
    &kop_residual, &kop_transpose, &kop_grad_norm, &kop_rope,
    &kop_matmul, &kop_matmul_fast, &kop_matmul_block_fp8,
    &kop_adamw, &kop_adamw_sr, &kop_adamw_split,
    &kop_cross_entropy, &kop_linear_cross_entropy,
    &kop_polar_express, &kop_muon_newton_schulz,
    &kop_attention,
    NULL, /* end */
};

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
