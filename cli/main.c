/* cli/main.c — `ulpscope <command> [options]`: dispatch to the command. */
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "base/jsonl.h"
#include "base/version.h"
#include "cli/commands.h"

static const cli_command commands[] = {
    {"accum", "accumulation study: error of sums by format, algorithm, rounding and n", cmd_accum},
    {"norms", "LayerNorm/RMSNorm stability study: variance algorithm, upcast placement, width", cmd_norms},
    {"check", "check GPU kernels (op x path x variant) against the MPFR reference", cmd_check},
    {"verify", "verify a kernel that is not ulpscope's from the tensors it saw and produced (.npy, safetensors)", cmd_verify},
    {"probe", "probe, model and compare matrix-unit (tensor core) arithmetic", cmd_probe},
    {"plan", "print or explain a numerics plan for the trainer", cmd_plan},
    {"train", "train a GPT whose every kernel slot follows a numerics plan", cmd_train},
    {"compare", "do these plans give different final losses? paired seeds, a null arm, a verdict per arm", cmd_compare},
    {"noise", "a recipe's noise floor: seed and chaos spread, runs needed per shift", cmd_noise},
    {"bisect", "which slots (per layer and GEMM role) of a bad plan move the loss: delta debugging", cmd_bisect},
    {"trace", "where do two configurations from one seed first part: bug or reordering, and amplification", cmd_trace},
};
static const int n_commands = (int)(sizeof commands / sizeof commands[0]);

static void usage(FILE *fp)
{
    fprintf(fp, "usage: ulpscope <command> [options]    (ulpscope <command> --help for each)\n\n"
                "ulpscope %s: numerical-precision investigation for GPU training of language models.\n\n"
                "commands:\n", ULPSCOPE_VERSION);
    for (int i = 0; i < n_commands; i++) fprintf(fp, "  %-7s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "ulpscope: error: no command given; usage: ulpscope <command> [options] "
                        "(ulpscope --help lists the commands)\n");
        return BASE_EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("ulpscope %s\n", base_build_rev()); /* version and git describe */
        return 0;
    }
    for (int i = 0; i < n_commands; i++)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "ulpscope: error: unknown command '%s' (commands:", argv[1]);
    for (int i = 0; i < n_commands; i++) fprintf(stderr, " %s", commands[i].name);
    fprintf(stderr, ")\n");
    return BASE_EXIT_USAGE;
}
