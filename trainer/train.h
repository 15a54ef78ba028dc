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
 * first slot, layer and tensor that produced a NaN/Inf; a "final" record.
 *
 * Non-finite detection costs nothing per step: the loss and gradient norm
 * are checked; when either is NaN/Inf (and dynamic loss scaling does not
 * explain it as an overflow) the step is replayed from the same weights and
 * batches with every slot output checked, which names the first one. */
#ifndef ULPSCOPE_TRAINER_TRAIN_H
#define ULPSCOPE_TRAINER_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "trainer/model.h"
#include "trainer/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TTRAIN_MAX_AT_STEPS 64
#define TTRAIN_MAX_SWITCHES 16

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
    double tokens_per_s, mfu;
    size_t peak_bytes;      /* the trainer's own tensors and scratch at their peak */
    size_t device_bytes;    /* device memory the run added, measured at its end (kernels' workspaces included) */
    char error[1024];
} ttrain_result;

/* Run training.  Returns 0; 2 for bad settings (message in res->error);
 * 3 when a non-finite value stopped training (res->nonfinite set); 1 for
 * other failures (backend, I/O). */
int ttrain_run(const ttrain_config *cfg, ttrain_result *res);
void ttrain_result_free(ttrain_result *res);

/* FNV-1a 64 over bytes, continuing from h (start with TTRAIN_FNV_OFFSET). */
#define TTRAIN_FNV_OFFSET 0xcbf29ce484222325ull
uint64_t ttrain_fnv1a(uint64_t h, const void *data, size_t n);

/* Checkpoints (trainer/checkpoint.c): everything a step depends on: model
 * configuration, plan, steps done, loss scale, parameters in every stored
 * form and the optimizer state.  Written to PATH.tmp.PID, fsynced and
 * renamed; read back with a checksum check. */
typedef struct {
    long steps_done;
    double loss_scale;
    long good_steps;
    uint64_t seed;
    uint64_t data_seed;
} tckpt_state;

int tckpt_save(const char *path, tmodel *m, const tmodel_config *cfg, const tplan *plan, const tckpt_state *st,
               char *err, size_t errlen);
/* Reads the configuration and the plan JSON (*plan_json: a malloc'd string
 * the caller frees; NULL on error). */
int tckpt_peek(const char *path, tmodel_config *cfg, char **plan_json, tckpt_state *st, char *err, size_t errlen);
/* Loads tensors into a model built from the peeked configuration and plan. */
int tckpt_load(const char *path, tmodel *m, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
