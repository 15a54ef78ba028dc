/* cli/cmd_train.c — `ulpscope train`: train a GPT whose every kernel slot
 * follows a numerics plan (trainer/train.h does the work; the options are
 * the training options table of cli/train_options.h). */
#include <signal.h>
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
    fprintf(fp,
            "\n--resume FILE continues the run FILE was written by, as it was: the model, the plan it started\n"
            "with, --batch, --seq, --accum, --steps, the schedule and learning rates, --wd, --beta1/2, --eps,\n"
            "--grad-clip, the Muon settings, --seed, the validation settings, --world, --switch-at and the data\n"
            "(its tokens, wherever the file now is) come from the checkpoint.  Such an option given equal to\n"
            "the checkpoint's is accepted; one that differs refuses the run, listing every difference.  The\n"
            "backend is the checkpoint's unless given; --log, --ckpt, --stop-after, --max-seconds, the hash and\n"
            "dump hooks and the progress options apply to this invocation only.\n"
            "\nSIGINT or SIGTERM ends the run cleanly: a step in progress is abandoned between micro-batches\n"
            "(or finishes, once its update ran), the log keeps the steps done and ends with an \"interrupted\"\n"
            "record, and with --ckpt a checkpoint of the last completed step is written.  A second signal ends\n"
            "the process at once.\n"
            "\nExit status: 0 done; 2 bad input (options, data, checkpoint, outputs, a run that cannot fit in\n"
            "memory, --backend cuda without a GPU); 1 a failure while running; 3 a non-finite value stopped\n"
            "training (named in the log); 130 / 143 interrupted by SIGINT / SIGTERM.\n");
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
        train_options_free(t);
        free(t);
        return status;
    }
    train_options_catch_signals(t);
    ttrain_result res;
    status = ttrain_run(&t->cfg, &res);
    if (status == 2) {
        base_error("train", "%s", res.error);
        status = BASE_EXIT_USAGE;
    } else if (res.interrupted && status == 128 + res.interrupted) {
        fprintf(stderr, "ulpscope train: interrupted by %s after %ld steps%s%s\n",
                res.interrupted == SIGINT ? "SIGINT" : res.interrupted == SIGTERM ? "SIGTERM" : "a signal", res.steps_done, res.ckpt_written ? "; checkpoint " : "", res.ckpt_written ? t->cfg.ckpt_path : "");
    } else if (status) {
        fprintf(stderr, "ulpscope train: error: %s\n", res.error);
    } else if (!t->quiet) {
        fprintf(stderr, "done: %ld steps, final val loss %.4f, %.0f tokens/s, peak %.1f MiB of tensors\n",
                res.steps_done, res.final_val_loss, res.tokens_per_s, (double)res.peak_bytes / 1048576.0);
    }
    ttrain_result_free(&res);
    train_options_free(t);
    free(t);
    return status;
}
