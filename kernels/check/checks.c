/* kernels/check/checks.c — the table attaching each op (by its registry
 * name) to its check; adding an op is one line here and one prototype in
 * checks.h.  tests/test_check_harness.c holds the table and the registry to
 * each other: every op has a check, every check names an op. */
#include "kernels/check/checks.h"

#include <stdio.h>
#include <string.h>

static const kcheck_entry table[] = {
    {"embedding", kcheck_embedding},
    {"rmsnorm", kcheck_rmsnorm},
    {"layernorm", kcheck_layernorm},
    {"softmax", kcheck_softmax},
    {"logsumexp", kcheck_logsumexp},
    {"gelu_tanh", kcheck_gelu_tanh},
    {"gelu_erf", kcheck_gelu_erf},
    {"relu2", kcheck_relu2},
    {"leaky_relu2", kcheck_leaky_relu2},
    {"residual", kcheck_residual},
    {"transpose", kcheck_transpose},
    {"grad_norm", kcheck_grad_norm},
    {"rope", kcheck_rope},
    {"matmul", kcheck_matmul},
    {"matmul_fast", kcheck_matmul_fast},
    {"matmul_block_fp8", kcheck_matmul_block_fp8},
    {"adamw", kcheck_adamw},
    {"adamw_sr", kcheck_adamw_sr},
    {"adamw_split", kcheck_adamw_split},
    {"cross_entropy", kcheck_cross_entropy},
    {"linear_cross_entropy", kcheck_linear_cross_entropy},
    {"polar_express", kcheck_polar_express},
    {"muon_newton_schulz", kcheck_muon_newton_schulz},
    {"attention", kcheck_attention},
};

const kcheck_entry *kcheck_table(int *count)
{
    *count = (int)(sizeof table / sizeof table[0]);
    return table;
}

kcheck_fn kcheck_find_in(const kcheck_entry *t, int n, const char *op)
{
    for (int i = 0; op && i < n; i++)
        if (strcmp(t[i].op, op) == 0) return t[i].check;
    return NULL;
}

kcheck_fn kcheck_find(const char *op)
{
    return kcheck_find_in(table, (int)(sizeof table / sizeof table[0]), op);
}

static void append(char *buf, size_t len, const char *what, const char *name)
{
    size_t used = strlen(buf);
    if (used + 1 < len) snprintf(buf + used, len - used, "%s%s %s", used ? "; " : "", what, name);
}

int kcheck_table_mismatches(const kcheck_entry *t, int n, char *msg, size_t len)
{
    if (len) msg[0] = '\0';
    int bad = 0, n_ops = 0;
    const kop *const *ops = kregistry_ops(&n_ops);
    for (int i = 0; i < n_ops; i++)
        if (!kcheck_find_in(t, n, ops[i]->name)) {
            append(msg, len, "no check for op", ops[i]->name);
            bad++;
        }
    for (int i = 0; i < n; i++) {
        if (!kregistry_find(t[i].op) || strcmp(kregistry_find(t[i].op)->name, t[i].op) != 0) {
            append(msg, len, "check for no op:", t[i].op);
            bad++;
        }
        for (int k = 0; k < i; k++)
            if (strcmp(t[k].op, t[i].op) == 0) {
                append(msg, len, "two checks for", t[i].op);
                bad++;
            }
    }
    return bad;
}
