/* trainer/train.h — the training loop behind `ulpscope train`.
 *
 * One step: for each micro-batch forward + backward (gradients accumulate),
 * the lm_head/embedding gradient sync, the all-reduce, the gradient norm,
 * then (dynamic loss scaling permitting) clipping and the optimizer update.
 * Learning rate: linear warmup, then constant until the cool-down starts,
 * then a cosine or linear decay to min_lr_frac * lr at the last step.
 *
 * Records (JSON Lines, rank 0): a header with the model, the plan and the
 * run's settings; one "step" record per step (step, loss, val_loss, lr,
 * grad_norm, tokens_per_s, ms, loss_scale); "hash" / "dump" records from
 * the hooks; "switch" when the plan changes mid-run; "nonfinite" naming the
 * first slot, layer and tensor that produced a NaN/Inf; last, a "final"
 * record, or "interrupted" (a signal stopped the run) or "error" (a failure
 * while running, with its message).  The log is written in place and flushed
 * after every step: `tail -f` follows it and finished steps survive a crash.
 *
 * Outputs are checked before anything runs: --log, --ckpt and the dump
 * directory must be writable where they point (a missing directory, a
 * directory where a file goes, an unwritable path: status 2 naming the path
 * and the reason).  "-" as the log is stdout; a FIFO or character device is
 * written directly; a checkpoint is always a regular file (written to
 * PATH.tmp.PID and renamed; a symlink's target is replaced, not the link).
 *
 * Interrupts: with cfg->stop set, a nonzero value there (the signal number,
 * set by a handler) stops the run cleanly: a step in progress is abandoned
 * between micro-batches (nothing of it applied) or, once its update ran,
 * finishes; the log ends with an "interrupted" record; a checkpoint (when
 * cfg->ckpt_path is set) holds the last completed step; no temporary file is
 * left; ttrain_run returns 128 + the signal number.
 *
 * Non-finite detection costs nothing per step: the loss and gradient norm
 * are checked; when either is NaN/Inf (and dynamic loss scaling does not
 * explain it as an overflow) the step is replayed from the same weights and
 * batches with every slot output checked, which names the first one. */
#ifndef ULPSCOPE_TRAINER_TRAIN_H
#define ULPSCOPE_TRAINER_TRAIN_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "trainer/data.h"
#include "trainer/model.h"
#include "trainer/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TTRAIN_MAX_AT_STEPS 64
#define TTRAIN_MAX_SWITCHES 16
/* Limits of a run's sizes (the options' ranges and what a checkpoint may say):
 * past them they are typos or corrupt headers, not runs this trainer makes. */
#define TTRAIN_SIZE_MAX 1048576 /* batch, sequence, accumulation, validation batches */
#define TTRAIN_STEPS_MAX 1000000000L
#define TTRAIN_WORLD_MAX 1024

typedef enum { TSCHED_COSINE = 0, TSCHED_LINEAR } tschedule;

typedef struct {
    long step;              /* the plan changes before this step runs */
    const char *overrides;  /* "SLOT[@LAYERS]=PATH[:VARIANT],..." (the caller keeps it alive) */
} tswitch;

typedef struct {
    tmodel_config model;
    tplan plan;
    const char *backend;    /* "cpu" or "cuda" */
    const char *data_path;  /* NULL: the embedded corpus */
    double val_frac;
    int shard_vocab;
    int batch, seq, accum;  /* micro-batch B x T, accumulation steps */
    long steps;
    double lr, min_lr_frac, cooldown_frac;
    long warmup;
    tschedule schedule;
    double weight_decay, beta1, beta2, adam_eps, grad_clip;
    double muon_lr, muon_momentum;
    double loss_scale_init; /* dynamic loss scaling starts here (65536) */
    uint64_t seed;          /* initialisation and stochastic-rounding streams */
    uint64_t data_seed;     /* the order of the training batches (train: = seed unless --data-seed) */
    long val_every;         /* 0: only at the end */
    int val_batches;
    const char *log_path;   /* JSON Lines; NULL: none */
    FILE *progress;         /* readable progress lines; NULL: none */
    int profile;            /* synchronise after every slot and print where a step's time goes */
    long progress_every;
    double peak_flops;      /* for MFU; 0: not reported */
    const char *ckpt_path;  /* written atomically every ckpt_every steps and at the end */
    long ckpt_every;
    const char *resume_path;
    long stop_after;        /* stop (checkpointing) once this many steps are done; 0: run to `steps` */
    double max_seconds;     /* stop after the step that passes this much training time (0: no limit);
                               the schedule still assumes `steps`; the last step run is validated */
    /* hooks */
    unsigned char hash_slot[TSLOT_COUNT];
    unsigned char dump_slot[TSLOT_COUNT];
    long at_steps[TTRAIN_MAX_AT_STEPS];
    int n_at_steps;         /* 0 with hooks set: every step */
    const char *dump_dir;
    tswitch switches[TTRAIN_MAX_SWITCHES];
    int n_switches;
    /* data parallel */
    int world, rank;
    const char *nccl_id_file;
    /* called once the model is built (and loaded, when resuming): tests and
     * experiments plant values through it.  Nonzero stops the run (status 1). */
    int (*after_init)(tmodel *m, void *ctx);
    void *after_init_ctx;
    /* interrupts: a signal handler stores the signal number here (NULL: none) */
    const volatile sig_atomic_t *stop;
} ttrain_config;

/* Settings a fresh config starts from (gpt2 family, bf16, embedded corpus). */
void ttrain_config_defaults(ttrain_config *c);

typedef struct {
    long step;
    int micro;
    tslot slot;
    int layer;
    char tensor[16];
    uint64_t hash;
} thash_record;

typedef struct {
    long steps_done;
    double *loss;           /* [steps]: training loss of each step run (NaN for steps not run) */
    double *grad_norm;
    double *val_loss;       /* [steps]: NaN where no validation ran */
    double *step_ms;        /* [steps]: wall time of each step run (update included, validation not) */
    double train_seconds;   /* sum of step_ms, in seconds */
    double final_val_loss;
    long skipped_steps;     /* dynamic loss scaling overflows */
    double final_loss_scale;
    int nonfinite;          /* 1 when training stopped on a NaN/Inf */
    long nonfinite_step;
    char nonfinite_slot[48], nonfinite_tensor[48];
    int nonfinite_layer;
    thash_record *hashes;
    int n_hashes;
    uint64_t param_hash;    /* FNV-1a of every parameter's and optimizer state's bytes at the end */
    long graph_captures, graph_replays, graph_failures; /* the micro-batch's CUDA graph (tmodel_set_graph) */
    long fp8_memo_hits;     /* GEMMs whose first fp8 operand came from the CUDA backend's memo (tbackend) */
    long fp8_memo_b_hits;   /* GEMMs whose second did (a weight gradient's activation, kept from its forward) */
    double tokens_per_s, mfu;
    size_t peak_bytes;      /* the trainer's own tensors and scratch at their peak */
    size_t device_bytes;    /* device memory the run added, measured at its end (kernels' workspaces included) */
    int interrupted;        /* the signal that stopped the run (0: none) */
    int ckpt_written;       /* a checkpoint holds the state after steps_done */
    int status;             /* this run's: as ttrain_run returns */
    char error[1024];
} ttrain_result;

/* Run training.  Returns 0; 2 for bad settings or inputs (message in
 * res->error; a run that cannot fit in memory is one); 3 when a non-finite
 * value stopped training (res->nonfinite set); 128 + the signal number when
 * interrupted (res->interrupted); 1 for other failures (backend, I/O). */
int ttrain_run(const ttrain_config *cfg, ttrain_result *res);
void ttrain_result_free(ttrain_result *res);

/* Replicas: R runs of cfg's model and plan in one process, run r with init
 * seed seeds[r] and data-order seed data_seeds[r] (cfg->seed and
 * cfg->data_seed are ignored), on one backend whose ops do all replicas at
 * once (backend.h).  Run r gives the bits a ttrain_run with those seeds
 * gives.  res[r] is run r's result, res[r].status its status; a run stopped
 * by a non-finite value (status 3) does not stop the others.  One --log
 * holds every run's records (a header naming the replicas, then records
 * with "replica" and "seed" fields).  Checkpoints, hash and dump hooks and
 * data parallelism are for single runs (status 2).  Returns the first
 * nonzero of: the group's status (bad settings, a failure of the backend
 * or of I/O, a signal), then the runs' statuses in order; else 0. */
#define TTRAIN_REPLICAS_MAX 4096
/* Planted mistakes for the tests' twins (never set outside tests): every
 * replica takes replica 0's data order, or replica 0's init seed; validation
 * records its amaxes into the delayed fp8 histories as training does; a NaN
 * audit's replays record into them again (no restore). */
typedef enum {
    TTRAIN_BUG_NONE = 0,
    TTRAIN_BUG_SHARED_DATA_ORDER,
    TTRAIN_BUG_SHARED_INIT_SEED,
    TTRAIN_BUG_VALIDATION_RECORDS_FP8,
    TTRAIN_BUG_REPLAY_RECORDS_FP8
} ttrain_bug;
void ttrain_plant_bug(ttrain_bug bug);
ttrain_bug ttrain_planted_bug(void);
int ttrain_run_replicas(const ttrain_config *cfg, int R, const uint64_t *seeds, const uint64_t *data_seeds,
                        ttrain_result *res);

/* FNV-1a 64 over bytes, continuing from h (start with TTRAIN_FNV_OFFSET). */
#define TTRAIN_FNV_OFFSET 0xcbf29ce484222325ull
uint64_t ttrain_fnv1a(uint64_t h, const void *data, size_t n);

/* ---- the settings that decide a run's trajectory ------------------------------------------
 *
 * Besides the model and the plan, these fields of ttrain_config decide what a
 * run computes; a checkpoint stores them (with the data's identity and the
 * --switch-at list) and a resumed run must have the same.  Each has the train
 * option that sets it (NULL: none) and its range, which every run is checked
 * against. */
typedef enum { TSETTING_INT, TSETTING_LONG, TSETTING_DOUBLE, TSETTING_SEED, TSETTING_SCHEDULE } tsetting_kind;

typedef struct {
    const char *key;        /* in the checkpoint: "batch" */
    const char *option;     /* "--batch" */
    tsetting_kind kind;
    size_t offset;          /* in ttrain_config */
    double min, max;        /* numbers: the accepted range */
    int max_open;           /* the range excludes max */
} tsetting;

const tsetting *ttrain_settings(int *n);
/* dst's field of setting s = src's. */
void ttrain_setting_copy(ttrain_config *dst, const ttrain_config *src, const tsetting *s);
/* Every setting in its range and the model configuration valid: 0, or -1
 * with a message naming the first that is not. */
int ttrain_settings_check(const ttrain_config *c, char *err, size_t errlen);

/* ---- checkpoints (trainer/checkpoint.c) ----------------------------------------------------
 *
 * Everything a step depends on: the model configuration, the plan in force,
 * the plan the run started with, the trajectory settings above with the data
 * source's identity (path, token counts and a hash of the training and
 * validation tokens) and the --switch-at list, the steps done, the loss scale,
 * parameters in every stored form and the optimizer state.  Written to
 * PATH.tmp.PID, fsynced and renamed; read back with a checksum check, and
 * every header field checked as a fresh start's settings are. */
typedef struct {
    long steps_done;
    double loss_scale;
    long good_steps;        /* clean steps since the loss scale last changed */
} tckpt_state;

/* What a checkpoint's header says (tckpt_info_read). */
typedef struct {
    tckpt_state st;
    tplan plan_now;         /* the plan in force at steps_done (switches applied) */
    ttrain_config run;      /* the run's settings: model, starting plan, trajectory settings, seed,
                               data_path, backend, switches (their strings owned below) */
    char data_source[512];
    int64_t train_tokens, val_tokens;
    uint64_t train_hash, val_hash;
    char *strings[TTRAIN_MAX_SWITCHES + 2]; /* owned: data path, backend, switch overrides */
} tckpt_info;

int tckpt_save(const char *path, tmodel *m, const ttrain_config *run, const tdata *data, const tplan *plan_now,
               const tckpt_state *st, char *err, size_t errlen);
/* Reads and checks the header (everything but the tensors).  0, or -1 with
 * a message naming the file and the problem; tckpt_info_free either way. */
int tckpt_info_read(const char *path, tckpt_info *info, char *err, size_t errlen);
void tckpt_info_free(tckpt_info *info);
/* Loads tensors into a model built from the header's configuration and plan_now. */
int tckpt_load(const char *path, tmodel *m, char *err, size_t errlen);

/* Where a run's settings differ from a checkpoint's, as "--batch 4
 * (checkpoint: 2); --seed 5 (checkpoint: 1337)" in list (empty when they
 * agree).  data may be NULL: the data's identity is then not compared. */
void ttrain_settings_diff(const ttrain_config *c, const tdata *data, const tckpt_info *ck, char *list,
                          size_t len);

#ifdef __cplusplus
}
#endif
#endif
