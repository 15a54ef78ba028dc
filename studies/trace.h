/* studies/trace.h — where do two configurations that start from the same
 * seed first part, is that a precision bug or a legitimate reordering, and
 * how fast does the difference grow?
 *
 * Hashes.  A tap wraps the backend's op entry points (after the model is
 * built, through ttrain_config.after_init; the trainer is not changed): every
 * op call gets a key (step, micro-batch, slot, layer, call: the n-th call of
 * that site in that micro-batch) and FNV-1a hashes of the storage images of
 * its inputs (tensors, token ids, optimizer arguments) and of its outputs.
 * Micro-batch -1 is the work after the last micro-batch (gradient norm,
 * optimizer, weight sync).  Steps are the trainer's, 0-based.
 *
 * Locating.  Pass 1 runs both configurations to the end with one hash per
 * step of the whole training state (parameters, masters, optimizer moments)
 * at the start of every step, and each step's loss: the step where they part
 * is the first whose loss or following state differs, so a late divergence
 * costs no per-op hashing before it.  Pass 2 reruns both to that step plus
 * the amplification window: A's op hashes of the parting step are kept, B's
 * are matched against them by key in execution order, and the first call
 * whose inputs are bit-identical and whose outputs are not is the culprit.
 * Runs whose very first differing op already has different inputs (the
 * states differ before any op parts: a changed initialisation or storage)
 * locate no culprit and say so.
 *
 * Replay.  At the culprit, while B runs, its recorded inputs are copied into
 * fresh tensors on the same backend and the op is run again at A's site and
 * at B's (backend in use: CPU in CI, CUDA on a GPU), each writing outputs
 * of its own run's formats (a slot's path decides its outputs' storage); each
 * replay must give its run's output bit for bit (reported).  For matmul the replayed outputs
 * are compared with the MPFR reference (reference/matmul.h, exact) against a
 * bound computed from the inputs (see trace_verdict.c): both within their
 * bounds is a legitimate reordering (chaos); one over is a precision bug in
 * it.  optimizer.muon is judged on its polar express: the input rebuilt
 * from the recorded gradient and momentum, then each site's polar express
 * replayed stage by stage on the backend and each stage judged with the
 * bound `ulpscope check` uses (kernels/check/compare_polar_express.h) for the
 * kernel the backend runs.  Attention (forward: o and lse; backward: dq,
 * dk, dv) is judged on every output of both replays with the comparison
 * `ulpscope check attention` uses (kernels/check/compare_attention.h), the
 * layouts converted from the trainer's [B, T, H D] to the kernels' [B H, T,
 * D], the bound described for the arithmetic of the backend in use (the CPU
 * backend's two-pass fp32 softmax for naive and flash, its model of
 * flash_mma on the H100's matrix units for the tensor-core variants, or the
 * CUDA kernel of the site's variant); a backward reads the recorded o and
 * lse with their actual errors.  layernorm and rmsnorm (forward: y, mean,
 * rstd; backward: dx, and dgain, dbias where written into zeroed gradients)
 * cross-entropy (loss, dlogits) and rope are judged with check's
 * comparisons (kernels/check/compare_{layernorm,rmsnorm,cross_entropy,
 * rope}.h), each side's kernel described for the backend in use
 * (trace_verdict_rows.c).  Other
 * ops are located and replayed, with their first differing elements, and
 * the report says "no verdict for OP: why".
 *
 * Amplification.  For the parting step and the following amplify_steps - 1
 * steps: per layer, the max and RMS relative difference between the two runs'
 * layer outputs (the residual stream after the layer, first micro-batch, the
 * first amplify_elems elements), and the loss difference per step.
 *
 * Trace files.  trace_record writes one configuration's run as JSON Lines:
 * a header (tool, version, device, driver and runtime, backend, plan, seed,
 * recipe), one "state" record per step (state hash, loss) and one "op"
 * record per op call of the recorded steps (key, op, input and output
 * hashes).  trace_diff reads two such files (another machine's, say), refuses
 * malformed or hostile ones with a one-line message, and prints the first
 * differing step and the first op with equal inputs and unequal outputs. */
#ifndef ULPSCOPE_STUDIES_TRACE_H
#define ULPSCOPE_STUDIES_TRACE_H

#include <stdint.h>
#include <stdio.h>

#include "kernels/kernels.h"
#include "trainer/train.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TRACE_MAX_IN 8
#define TRACE_MAX_OUT 4
#define TRACE_MAX_DIFFS 8

/* Planted bugs for the tests' twins. */
typedef enum {
    TRACE_BUG_NONE = 0,
    TRACE_BUG_NO_INPUT_CHECK, /* the locator blames the first differing output whatever its inputs */
    TRACE_BUG_IGNORE_BOUND,   /* the verdict blames the replay with the larger total error, bounds ignored */
    TRACE_BUG_WRONG_REFERENCE, /* the non-matmul judges compute the reference from the first input negated
                                  (attention: q; norms: x, backward dy; cross-entropy: the logits) */
} trace_bug;

typedef enum {
    TRACE_VERDICT_NONE = 0,   /* nothing to judge, or no verdict for this op */
    TRACE_VERDICT_CHAOS,      /* both within their bounds: a legitimate reordering */
    TRACE_VERDICT_BUG_A,      /* A over its bound */
    TRACE_VERDICT_BUG_B,
    TRACE_VERDICT_BUG_BOTH,
} trace_verdict;

/* One op call: its key and hashes. */
typedef struct {
    long step;
    int micro;                /* -1: after the micro-batches (norm, optimizer) */
    short slot;               /* tslot */
    short layer;              /* -1 outside the layers */
    int call;                 /* n-th call of (slot, layer) in (step, micro) */
    char op[24];              /* "matmul", "norm_fwd", ... */
    int n_in, n_out;
    uint64_t in_hash[TRACE_MAX_IN], out_hash[TRACE_MAX_OUT];
    char out_name[TRACE_MAX_OUT][12];
    signed char out_format[TRACE_MAX_OUT]; /* each output tensor's prec_format (-1: a scalar); not in trace files */
} trace_op;

typedef struct {
    ttrain_config a, b;       /* same seed; logs, checkpoints and hooks are cleared; after_init kept */
    kbug planted;             /* self-test: KBUG_TRUNCATE_OUTPUT during the runs (tbackend_cpu_plant_site picks the site) */
    int amplify_steps;        /* steps of the amplification table, from the parting step (>= 1) */
    long amplify_elems;       /* elements per layer output compared (>= 1) */
    trace_bug bug;            /* TRACE_BUG_NONE outside the tests */
    FILE *progress;           /* one line per run; NULL: quiet */
} trace_config;

typedef struct {
    double err_u, bound_u;    /* matmul: at the worst element, |got - ref| and the bound in units of u |ref|;
                                 other ops: the worst output's largest error and bound in units of u times
                                 each element's scale (kcheck_row's max_err_u, max_bound_u) */
    double ratio;             /* matmul: max over elements of |got - ref| / bound; other ops: max over their
                                 outputs of the worst element's ratio and of RMS error / RMS bound */
    long over;                /* matmul: elements over their bound; other ops: outputs over */
    long worst;               /* the worst element's index (in worst_output) */
    char worst_output[40];    /* other ops: the output holding it ("dq", "x3 block 1"); "" for matmul */
} trace_judgement;

typedef struct {
    long steps;               /* steps both runs made */
    int identical;            /* bit-identical states and losses throughout */
    long part_step;           /* the first step whose loss or following state differs */
    int located;              /* a call with equal inputs and unequal outputs was found */
    int inputs_differ;        /* none: the first differing call's inputs already differed */
    trace_op op_a, op_b;      /* the culprit's records (located), or the first differing call */
    int out_index;            /* the differing output of the culprit */
    char site_a[96], site_b[96]; /* "mlp.up@1 bf16:default" */
    /* first differing elements (from the replays) */
    long n_elems, n_differing;
    int n_diffs;
    long diff_index[TRACE_MAX_DIFFS];
    double diff_a[TRACE_MAX_DIFFS], diff_b[TRACE_MAX_DIFFS], diff_ulps[TRACE_MAX_DIFFS];
    double max_ulps;
    /* replay */
    int replayed;
    int replay_a_exact, replay_b_exact; /* each replay reproduced its run's output bit for bit */
    trace_verdict verdict;
    char verdict_note[256];   /* why there is no verdict, or the bound model used */
    trace_judgement judge[2]; /* A, B */
    double judge_err_sum[2];  /* the verdict's twin (TRACE_BUG_IGNORE_BOUND): each side's total error */
    /* amplification: [amp_steps][amp_layers] */
    int amp_steps, amp_layers;
    double *amp_max_rel, *amp_rms_rel;
    double *loss_a, *loss_b;  /* [steps] */
    int runs;
    double seconds;
} trace_report;

/* Returns 0; 2 for bad settings (seeds differ, a plan the backend cannot
 * run); 1 when a run failed.  err names the problem. */
int trace_run(const trace_config *c, trace_report *r, char *err, size_t errlen);
void trace_report_free(trace_report *r);
const char *trace_verdict_line(const trace_report *r, char *buf, size_t len);
void trace_print(FILE *fp, const trace_config *c, const trace_report *r);
void trace_write_records(FILE *fp, const trace_report *r);

/* Records cfg's run (every step's state; op hashes of steps < op_steps, all
 * when op_steps <= 0) to fp after a header with header_json (a ready JSON
 * object: device, plan, seed, recipe).  0, 2 (bad settings) or 1. */
int trace_record(const ttrain_config *cfg, long op_steps, const char *header_json, FILE *fp, char *err,
                 size_t errlen);
/* Compares two trace files and prints where they part to fp.  0 (printed;
 * *parted says whether they differ), 2 for a file that cannot be read or is
 * not a trace (err: the file, the line and the problem). */
int trace_diff(FILE *fp, const char *path_a, const char *path_b, int *parted, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
