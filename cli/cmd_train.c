/* cli/cmd_train.c — `ulpscope train`: train a GPT whose every kernel slot
 * follows a numerics plan (trainer/train.h does the work; the options are
 * the training options table of cli/train_options.h). */
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/experiment.h"
#include "cli/train_options.h"
#include "trainer/train.h"

/* train's own options: replicas */
typedef struct {
    int replicas;
    const char *seeds;
} replica_options;

#define F(field) offsetof(replica_options, field)
static const copt replica_opts[] = {
    {"--replicas", COPT_INT, F(replicas), 1, TTRAIN_REPLICAS_MAX, "replicas", "R",
     "(1) R runs in one process, seeds --seed .. --seed+R-1 (every op does all replicas at once)", NULL, 0},
    {"--seeds", COPT_STRING, F(seeds), 0, 0, "replicas", "N|A-B|A,B,..",
     "one run per seed (1..N, a range or a list): the replicas' init seeds", NULL, 0},
};
#undef F

static void usage(FILE *fp, train_options *t)
{
    fprintf(fp, "usage: ulpscope train [options]\n\n"
                "Trains a decoder-only transformer; every kernel slot runs the path and variant of the plan\n"
                "(per layer where --set names layers: mlp.up@0=fp32, attn.*@0-2=bf16).\n"
                "Progress lines on stderr, one JSON record per step in --log.\n\n");
    replica_options ro;
    copt_table tables[] = {train_options_table(t), {replica_opts, (int)(sizeof replica_opts / sizeof replica_opts[0]), &ro}};
    copt_help(fp, tables, 2);
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
            "\nReplicas (--replicas R or --seeds LIST): R independent runs of one model and plan, each with its own\n"
            "init seed, data-order seed (= its seed, or --data-seed for all), weights, optimizer state, loss scale\n"
            "and non-finite detection; replica s gives the bits `train --seed s` gives.  One --log holds them all\n"
            "(a header listing the seeds, then records with \"replica\" and \"seed\").  A replica stopped by a\n"
            "NaN is reported by replica and seed and the others go on (exit status 3 at the end).  --ckpt,\n"
            "--resume, --hash, --dump and --world are for single runs.\n"
            "\nExit status: 0 done; 2 bad input (options, data, checkpoint, outputs, a run that cannot fit in\n"
            "memory, --backend cuda without a GPU); 1 a failure while running; 3 a non-finite value stopped\n"
            "training (named in the log); 130 / 143 interrupted by SIGINT / SIGTERM.\n");
}

/* The replicas' seeds: --seeds, or --replicas R from --seed on.  0, or
 * BASE_EXIT_USAGE after the message. */
static int replica_seeds(const train_options *t, const replica_options *ro, uint64_t **seeds, uint64_t **data_seeds,
                         int *n)
{
    char err[256];
    if (ro->seeds) {
        if (copt_given(&t->seen, "--replicas"))
            return base_error("train", "give --replicas R or --seeds LIST, not both");
        if (copt_given(&t->seen, "--seed")) return base_error("train", "give --seed or --seeds, not both");
        if (experiment_parse_seeds(ro->seeds, seeds, n, err, sizeof err)) return base_error("train", "%s", err);
    } else {
        *n = ro->replicas;
        *seeds = malloc((size_t)*n * sizeof **seeds);
        if (!*seeds) return base_error("train", "out of memory");
        for (int i = 0; i < *n; i++) (*seeds)[i] = t->cfg.seed + (uint64_t)i;
    }
    *data_seeds = malloc((size_t)*n * sizeof **data_seeds);
    if (!*data_seeds) return base_error("train", "out of memory");
    /* each replica's batch order is its own seed's, unless --data-seed fixes one for all */
    int fixed = copt_given(&t->seen, "--data-seed");
    for (int i = 0; i < *n; i++) (*data_seeds)[i] = fixed ? t->cfg.data_seed : (*seeds)[i];
    return 0;
}

static void report(const train_options *t, const ttrain_result *res, int R, const uint64_t *seeds)
{
    if (t->quiet) return;
    if (R == 1) {
        if (!res->status)
            fprintf(stderr, "done: %ld steps, final val loss %.4f, %.0f tokens/s, peak %.1f MiB of tensors\n",
                    res->steps_done, res->final_val_loss, res->tokens_per_s, (double)res->peak_bytes / 1048576.0);
        return;
    }
    fprintf(stderr, "done: %d replicas, %.0f tokens/s in all, peak %.1f MiB of tensors (%.1f MiB a replica)\n", R,
            res[0].tokens_per_s, (double)res[0].peak_bytes / 1048576.0, (double)res[0].peak_bytes / 1048576.0 / R);
    fprintf(stderr, "  replica  seed                  steps  final val loss  state hash\n");
    for (int i = 0; i < R; i++) {
        const ttrain_result *x = &res[i];
        fprintf(stderr, "  %7d  %-20llu  %5ld  ", i, (unsigned long long)seeds[i], x->steps_done);
        if (x->status) fprintf(stderr, "stopped: %s\n", x->error);
        else fprintf(stderr, "%14.4f  %016llx\n", x->final_val_loss, (unsigned long long)x->param_hash);
    }
}

int cmd_train(int argc, char **argv)
{
    train_options *t = malloc(sizeof *t);
    if (!t) return base_error("train", "out of memory");
    train_options_defaults(t);
    replica_options ro = {1, NULL};
    copt_table tables[] = {train_options_table(t), {replica_opts, (int)(sizeof replica_opts / sizeof replica_opts[0]), &ro}};
    int status = copt_parse("train", argc, argv, tables, 2, &t->seen);
    if (!status && t->help) {
        usage(stdout, t);
        free(t);
        return 0;
    }
    if (!status) status = train_options_finish(t, "train");
    uint64_t *seeds = NULL, *data_seeds = NULL;
    int R = 1;
    if (!status) status = replica_seeds(t, &ro, &seeds, &data_seeds, &R);
    ttrain_result *res = status ? NULL : calloc((size_t)R, sizeof *res);
    if (!status && !res) status = base_error("train", "out of memory");
    if (status) {
        free(seeds), free(data_seeds);
        train_options_free(t);
        free(t);
        return status;
    }
    train_options_catch_signals(t);
    status = ttrain_run_replicas(&t->cfg, R, seeds, data_seeds, res);
    if (status == 2) {
        base_error("train", "%s", res->error);
        status = BASE_EXIT_USAGE;
    } else if (res->interrupted && status == 128 + res->interrupted) {
        fprintf(stderr, "ulpscope train: interrupted by %s after %ld steps%s%s\n",
                res->interrupted == SIGINT ? "SIGINT" : res->interrupted == SIGTERM ? "SIGTERM" : "a signal",
                res->steps_done, res->ckpt_written ? "; checkpoint " : "", res->ckpt_written ? t->cfg.ckpt_path : "");
    } else if (status && (R == 1 || status != 3)) { /* a single run's failure, or the group's */
        fprintf(stderr, "ulpscope train: error: %s\n", res->error);
    }
    if (status != BASE_EXIT_USAGE && !(res->interrupted && status == 128 + res->interrupted)) report(t, res, R, seeds);
    for (int i = 0; i < R; i++) ttrain_result_free(&res[i]);
    free(res), free(seeds), free(data_seeds);
    train_options_free(t);
    free(t);
    return status;
}
