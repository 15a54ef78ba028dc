/* cli/train_options.h — the options of every command that runs training:
 * model, plan, backend, data, batch, optimizer and schedule, run, checkpoint,
 * hooks and data parallel, as one copt table (cli/options.h).
 *
 * `train` parses with this table alone; a command that runs training arms
 * (compare, noise, bisect, trace) passes it together with its own table:
 *
 *     train_options t;
 *     train_options_defaults(&t);
 *     copt_table tables[] = {train_options_table(&t), {own_opts, n_own, &own}};
 *     if (copt_parse("compare", argc, argv, tables, 2, &t.seen)) return BASE_EXIT_USAGE;
 *     if (train_options_finish(&t, "compare")) return BASE_EXIT_USAGE;
 *     ... t.cfg is the run's ttrain_config ...
 *
 * train_options_finish turns the parsed values into t.cfg (model
 * configuration, plan with its overrides bound to the depth, hooks,
 * switches) and refuses what cannot be right: options the mode ignores,
 * hooks that can never fire (a step past --steps), empty overrides, a layer
 * past the depth.  With --resume, every setting that decides the trajectory
 * and was not given is the checkpoint's; those given stay, and ttrain_run
 * refuses the run, listing each one that differs from the checkpoint's.
 * train_options_free releases what finish kept (the checkpoint's strings). */
#ifndef ULPSCOPE_CLI_TRAIN_OPTIONS_H
#define ULPSCOPE_CLI_TRAIN_OPTIONS_H

#include <stdio.h>

#include "cli/options.h"
#include "trainer/train.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    ttrain_config cfg;   /* the result (after train_options_finish) */
    /* what the table fills, before train_options_finish turns it into cfg */
    const char *model_name, *preset, *gpu_model, *schedule, *hash_list, *dump_list, *at_steps;
    copt_list sets, switches;
    int depth, width, heads, context, vocab, norm_gain;
    double softcap, peak_tflops;
    int quiet, help;
    copt_seen seen;      /* what copt_parse saw (filled by it) */
    tckpt_info *resumed; /* --resume: the checkpoint's header (cfg points into its strings) */
} train_options;

void train_options_defaults(train_options *t);
/* The training options' table with t as its target. */
copt_table train_options_table(train_options *t);
/* Builds t->cfg from the parsed values.  Returns 0, or BASE_EXIT_USAGE after
 * printing one line "ulpscope CMD: error: ..." naming the problem. */
int train_options_finish(train_options *t, const char *cmd);
void train_options_free(train_options *t);
/* SIGINT and SIGTERM stop the run cleanly (t->cfg.stop; see trainer/train.h);
 * a second one ends the process at once. */
void train_options_catch_signals(train_options *t);

#ifdef __cplusplus
}
#endif
#endif
