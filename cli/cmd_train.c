/* cli/cmd_train.c — `ulpscope train`: train a GPT whose every kernel slot
 * follows a numerics plan (trainer/train.h does the work; the options are
 * the training options table of cli/train_options.h). */
#include <stdio.h>
#include <stdlib.h>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/train_options.h"
#include "trainer/train.h"

static void usage(FILE *fp, train_options *t)
{
    fprintf(fp, "usage: ulpscope train [options]\n\n"
                "Trains a decoder-only transformer; every kernel slot runs the path and variant of the plan\n"
                "(per layer where --set names layers: mlp.up@0=fp32, attn.*@0-2=bf16).\n"
                "Progress lines on stderr, one JSON record per step in --log.\n\n");
    copt_table table = train_options_table(t);
    copt_help(fp, &table, 1);
}

int cmd_train(int argc, char **argv)
{
    train_options *t = malloc(sizeof *t);
    if (!t) return base_error("train", "out of memory");
    train_options_defaults(t);
    copt_table table = train_options_table(t);
    int status = copt_parse("train", argc, argv, &table, 1, &t->seen);
    if (!status && t->help) {
        usage(stdout, t);
        free(t);
        return 0;
    }
    if (!status) status = train_options_finish(t, "train");
    if (status) {
        free(t);
        return status;
    }
    ttrain_result res;
    status = ttrain_run(&t->cfg, &res);
    if (status == 2) {
        base_error("train", "%s", res.error);
        status = BASE_EXIT_USAGE;
    } else if (status) {
        fprintf(stderr, "ulpscope train: error: %s\n", res.error);
    } else if (!t->quiet) {
        fprintf(stderr, "done: %ld steps, final val loss %.4f, %.0f tokens/s, peak %.1f MiB of tensors\n",
                res.steps_done, res.final_val_loss, res.tokens_per_s, (double)res.peak_bytes / 1048576.0);
    }
    ttrain_result_free(&res);
    free(t);
    return status;
}
