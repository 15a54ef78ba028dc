/* trainer/train_run.h — the parts of a training run, for the trainer's own
 * files: train.c drives a run through the step (train_step.c), the records
 * it writes (train_log.c) and its checkpoints (train_ckpt.c).
 *
 * Everything one run owns lives in one trun, and nothing in these files is
 * static and mutable, so that several runs (replicas) can live in one
 * process, each with its own seed, weights, optimizer state and log. */
#ifndef ULPSCOPE_TRAINER_TRAIN_RUN_H
#define ULPSCOPE_TRAINER_TRAIN_RUN_H

#include <stdint.h>
#include <stdio.h>

#include "trainer/data.h"
#include "trainer/train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- one run ---------------------------------------------------------------------- */

/* --profile rows past the slots */
enum { TPROF_UPDATE = TSLOT_COUNT, TPROF_NORM, TPROF_SETUP, TPROF_ROWS };

typedef struct tgroup tgroup;

typedef struct {
    const ttrain_config *cfg; /* = &own: the group's settings with this replica's seeds */
    ttrain_config own;
    ttrain_result *res;
    tgroup *g;
    int replica, replicas;  /* this run's index in its group, and the group's size */
    int dead;               /* stopped on a non-finite value; the group goes on without it */
    const tdata *data;      /* the group's */
    tbackend *be;           /* the group's backend and model (replica `replica` of it) */
    tmodel *m;
    tplan plan;             /* the plan in force (switches change it between steps) */
    tckpt_state st;         /* steps done, loss scale: what a checkpoint restores besides the tensors */
    long ckpt_at;           /* steps_done of the last checkpoint this run wrote (-1: none) */
    long first_step;        /* the step this invocation started at */
    int dynamic;            /* dynamic loss scaling */
    /* the log (rank 0): JSON Lines written in place, flushed after every step;
     * a group's runs share replica 0's (their records carry replica and seed) */
    FILE *log;
    int log_shared;         /* another run's log: not closed by this one */
    int log_failed;         /* writing it failed (no record is attempted after that) */
    /* the step in progress */
    long step;
    int micro;
    int hooks_now;          /* hash/dump hooks fire during this step */
    int audit;              /* non-finite audit: stop at the first NaN/Inf */
    int found;
    char where_slot[48], where_tensor[48];
    int where_layer;
    int failed;             /* an observer hit an I/O error */
    /* timing */
    /* per slot, then the optimizer update, the gradient norm with the
     * all-reduce, and the step's set-up (zeroed gradients, the batches) */
    double prof_ms[TPROF_ROWS];
    double prof_last;
    int prof_on;            /* inside a profiled training step (validation is not profiled) */
    long prof_seen;         /* steps this process began: the first (kernel loading, GEMM algorithm
                               choice) is left out of the profile when more follow */
    long prof_steps;        /* steps profiled */
    double tokens_per_step, flops_per_token, time_sum;
    long timed_steps;
    size_t mem_before;
    unsigned char *buf;     /* host copy of a tensor image */
    size_t buf_len;
} trun;

/* R runs of one model and plan stepping together through one backend with
 * R replicas (backend.h): one batch buffer, one model, one data source. */
struct tgroup {
    const ttrain_config *cfg; /* the settings the runs share */
    int R;
    trun *runs;             /* [R] */
    tdata data;
    int data_open;
    tbackend *be;
    tmodel *m;
    tplan plan;             /* the plan in force, as every run's */
    int32_t *tok, *tgt;     /* host batch [R*B*T], replica r's at r*B*T */
    double *dloss, *loss, *sum, *norm; /* [R] */
    tadamw_args *adamw;     /* [R] */
    tmuon_args *muon;       /* [R] */
    int audit_replica;      /* the non-finite audit's replica */
};

/* res->error with status; returns status. */
int trun_fail(trun *r, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
double trun_now(void);
/* r->buf at least n bytes: 0 or -1 */
int trun_grow_buf(trun *r, size_t n);
/* The signal that asked the run to stop (cfg->stop), or 0. */
int trun_stop_signal(const trun *r);
/* Status TRUN_ABANDONED: a step stopped between micro-batches by a signal,
 * nothing of it applied. */
#define TRUN_ABANDONED (-2)

/* ---- outputs (train_out.c) --------------------------------------------------------------- */

/* The file that writing `path` replaces: a symlink's final target (followed
 * even when it does not exist yet, relative targets against the link's
 * directory), else path itself.  0, or -1 (a loop, or too long). */
int trun_link_target(const char *path, char *out, size_t len);
/* --log, --ckpt and the dump directory can be written where they point:
 * 0, or status 2 with a message naming the path and the reason. */
int trun_check_outputs(trun *r);
/* The run fits in memory: the bytes its model, activations, optimizer state
 * and scratch need on its backend (a dry run of the model's allocations)
 * against what is available.  0, or status 2 with both figures. */
int trun_check_memory(trun *r);

/* ---- the step (train_step.c) ---------------------------------------------------------- */

typedef struct {
    double loss, grad_norm; /* training loss; gradient norm before clipping, unscaled */
    double lr;
    int skipped;            /* dynamic loss scaling: overflow, update skipped */
} tstep_out;

/* The model's observer (ctx: the group): hooks, profiling and the
 * non-finite audit. */
int trun_observe(void *ctx, tslot slot, int layer, const char *tensor, const ktensor *t);
/* Apply the --switch-at changes scheduled before step s.  0 or a status. */
int tgroup_switch_plan(tgroup *g, long s);
/* One optimizer step s of every live run: micro-batches, gradient sync,
 * norms, non-finite detection (a run with a named first NaN/Inf stops with
 * status 3 and dead set; the others go on), loss scaling, the updates.
 * out[r] for run r.  0, TRUN_ABANDONED (a stop signal between micro-batches),
 * or a status with the group's error (runs[0].res->error) set. */
int tgroup_step(tgroup *g, long s, tstep_out *out);
/* Mean validation loss of every run over cfg->val_batches batches, val[r]
 * (NaN when a stop signal cut it short). */
int tgroup_validate(tgroup *g, double *val);
/* FNV-1a of every parameter's and optimizer state's bytes. */
uint64_t trun_state_hash(trun *r);
void tgroup_state_hashes(tgroup *g, uint64_t *out);

/* ---- records (train_log.c) --------------------------------------------------------------- */

/* A small JSON Lines record writer: trec_begin, fields, trec_end.  With a
 * NULL file every call does nothing. */
typedef struct {
    FILE *fp;
} trecord;

void trec_begin(trecord *w, FILE *fp, const char *record); /* {"record":"step" */
void trec_int(trecord *w, const char *key, long long v);
void trec_size(trecord *w, const char *key, size_t v);
void trec_num(trecord *w, const char *key, double v);          /* %.17g; NaN and inf as strings */
void trec_num_or_null(trecord *w, const char *key, double v);  /* NaN: null */
void trec_str(trecord *w, const char *key, const char *s);     /* escaped */
void trec_hex64(trecord *w, const char *key, uint64_t v);      /* "%016llx" */
void trec_bool(trecord *w, const char *key, int v);
void trec_json(trecord *w, const char *key, const char *json); /* a ready JSON value */
void trec_end(trecord *w);                                     /* "}\n" */

/* Open the log (rank 0 with a log path; "-": stdout): 0 or a status. */
int trun_log_open(trun *r);
/* Flush it (after every step): 0, or status 1 naming the log and the reason. */
int trun_log_flush(trun *r);
/* End it: an "error" record with res->error for a failure (status 1 or 2
 * once the log is open), an "interrupted" record for a signal; then close.
 * The log is kept whatever happened.  Returns the status, 1 when writing
 * the log failed. */
int trun_log_close(trun *r, int status);
void trun_log_header(trun *r, long start_step);
void trun_log_switch(trun *r, long s, const char *overrides);
void trun_log_step(trun *r, long s, const tstep_out *o, double val, double ms, double tokens_per_s);
void trun_log_nonfinite(trun *r, const tstep_out *o);
void trun_log_hash(trun *r, tslot slot, int layer, const char *tensor, const ktensor *t, uint64_t hash);
void trun_log_dump(trun *r, tslot slot, int layer, const char *tensor, const ktensor *t, const char *path);
void trun_log_final(trun *r);
/* The readable progress line (stderr) of step s, when it is due. */
void trun_progress(trun *r, long s, long first, long last, const tstep_out *o, double val, double ms,
                   double tokens_per_s);
/* --profile: where the steps' time went. */
void trun_profile_report(trun *r);

/* ---- checkpoints (train_ckpt.c) ------------------------------------------------------------- */

/* --resume: the checkpoint's state, after checking that it was written for
 * this run's model and plan and is not past --steps.  0 or status 2. */
int trun_resume_peek(trun *r);
/* Load the checkpoint's tensors into the model.  0 or status 2. */
int trun_resume_load(trun *r);
/* Write the checkpoint after step s when it is due (every ckpt_every steps,
 * the run's last step, or when the time budget ran out).  0 or status 1. */
int trun_checkpoint(trun *r, long s, long last, int out_of_time);
/* After an interrupt: the checkpoint of the last completed step, when this
 * run completed one and has not written it yet.  0 or status 1. */
int trun_checkpoint_now(trun *r);

/* ---- settings (train_settings.c) ------------------------------------------------------------ */

/* The trajectory settings, data identity, backend and switches as a JSON
 * object (malloc'd; NULL when out of memory). */
char *ttrain_settings_json(const ttrain_config *c, const tdata *d);
/* Parses that JSON (n bytes) into ck->run and ck's data fields: 0 or -1. */
int ttrain_settings_parse(const char *json, size_t n, tckpt_info *ck, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
