/* tests/link_trainer.c — a tiny program on the trainer's floor alone
 * (`make link-check` links it against base, precision, kernels and trainer,
 * whole, without the check harness, the references or MPFR; see
 * tests/link_check.sh).  It resolves a plan through the op registry, which
 * must work without the harness, and prints it. */
#include <stdio.h>

#include "kernels/registry.h"
#include "trainer/plan.h"
#include "trainer/train.h"

int main(void)
{
    ttrain_config c;
    ttrain_config_defaults(&c);
    tplan p;
    char err[1024];
    if (tplan_init(&p, "bf16", c.model.kind, err, sizeof err) || tplan_set(&p, "*=fp32", err, sizeof err)) {
        fprintf(stderr, "link_trainer: %s\n", err);
        return 1;
    }
    const kop *matmul = kregistry_find("matmul");
    if (!matmul) {
        fprintf(stderr, "link_trainer: the registry has no matmul\n");
        return 1;
    }
    tplan_explain(&p, stdout);
    printf("link_trainer: %s has %d variants; plan resolved without the check harness\n", matmul->name,
           matmul->n_variants);
    return 0;
}
