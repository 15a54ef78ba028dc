/* studies/trace_tap.h — the op tap behind `ulpscope trace` (studies/trace.h),
 * shared by trace.c (runs, locating, replay) and trace_verdict.c (the MPFR
 * verdict on a replayed op).  Not a public interface. */
#ifndef ULPSCOPE_STUDIES_TRACE_TAP_H
#define ULPSCOPE_STUDIES_TRACE_TAP_H

#include "kernels/check/check.h"
#include "studies/trace.h"
#include "trainer/backend.h"
#include "trainer/model.h"

/* A large op is judged on at most this many rows (matmul: of its output;
 * norms and cross-entropy: of their inputs), those holding differences first. */
#define TRACE_JUDGE_ROWS 256

/* The backend entry points the tap wraps. */
typedef enum {
    TAP_EMBEDDING_FWD = 0,
    TAP_EMBEDDING_BWD,
    TAP_NORM_FWD,
    TAP_NORM_BWD,
    TAP_MATMUL,
    TAP_ATTENTION_FWD,
    TAP_ATTENTION_BWD,
    TAP_ROPE_FWD,
    TAP_ROPE_BWD,
    TAP_ACTIVATION_FWD,
    TAP_ACTIVATION_BWD,
    TAP_RESIDUAL,
    TAP_CROSS_ENTROPY,
    TAP_LINEAR_CROSS_ENTROPY,
    TAP_TRANSPOSE,
    TAP_ACCUMULATE,
    TAP_GRAD_NORM,
    TAP_ADAMW,
    TAP_MUON,
    TAP_COUNT
} tap_kind;

/* One op call as the wrapper saw it: its arguments, sorted into inputs
 * (read) and outputs (written; an accumulated output is an input too). */
typedef struct {
    tap_kind kind;
    const tsite *at;               /* NULL for ops without a site argument */
    tslot slot;
    int layer;
    /* inputs: a tensor, or raw host bytes (ids already downloaded, scalar
     * arguments) */
    int n_in;
    const char *in_name[TRACE_MAX_IN];
    ktensor *in[TRACE_MAX_IN];
    const void *in_raw[TRACE_MAX_IN];
    size_t in_raw_len[TRACE_MAX_IN];
    int n_out;
    const char *out_name[TRACE_MAX_OUT];
    ktensor *out[TRACE_MAX_OUT];
    double *out_scalar;            /* grad_norm's result */
    /* the other arguments, as the entry point takes them */
    ktensor *t[10];                /* positional tensors (see tap_invoke) */
    const int32_t *ids;            /* device/host ids (tokens, targets) */
    int a_trans, b_trans, accumulate, B, T, H;
    double eps, theta, softcap, dloss;
    int has_dloss;          /* cross-entropy: a loss gradient was asked for (dloss given) */
    tparam *param;
    tparam *const *params;
    int n_params;
    const tadamw_args *adamw;
    const tmuon_args *muon;
} tap_call;

/* Runs call c on the original entry points of `orig` at site `at` (ignored
 * by ops that read their site from be->bound). */
int tap_invoke(tbackend *be, const tbackend *orig, const tap_call *c, const tsite *at);

/* The MPFR verdict on a replayed matmul: inputs (as doubles in stored units)
 * and each replay's output (y_format: A's and B's output formats); fills
 * r->judge[] and r->verdict, or leaves the verdict NONE with r->verdict_note
 * saying why.  backend: "cpu" or "cuda" (the accumulation model of the bound). */
void trace_judge_matmul(trace_report *r, const char *backend, const tsite *site_a, const tsite *site_b,
                        const tap_call *c, const prec_format y_format[2], const double *a, const double *b,
                        const double *y_in, const double *ya, const double *yb, trace_bug bug);

/* The other ops' verdicts fold rows of the comparisons `ulpscope check`
 * uses (kernels/check/compare_*.h) into r->judge[side]: start, one row per
 * output (where: "" or what part of the op it is), finish sets r->verdict. */
void trace_judge_start(trace_report *r);
void trace_judge_row(trace_report *r, int side, const kcheck_row *row, const char *where);
void trace_judge_finish(trace_report *r, trace_bug bug);

/* optimizer.muon of parameter p: polar express's input rebuilt from the
 * recorded gradient and momentum (m_after: the replay's momentum, which the
 * rebuilt one must equal), then each site's polar express replayed stage by
 * stage on the backend and each stage judged (compare_polar_express.h). */
void trace_judge_muon(trace_report *r, const char *backend, const tsite *site_a, const tsite *site_b, const tparam *p,
                      const double *grad, const double *m_before, const double *m_after, const tmuon_args *args,
                      trace_bug bug);

/* Attention at the two sites, forward (dy NULL) or backward, on B batches
 * of T tokens and H heads of D: q, k, v, dy and the backward's o (y_in) in
 * the trainer's layout [B*T, H*D], lse_in [B*H*T] (the backward's);
 * out_a, out_b: each replay's outputs (forward y [B*T, H*D] and lse
 * [B*H*T]; backward dq, dk, dv).  Each judged against the MPFR reference
 * with compare_attention.h's bound for the kernel its backend runs there. */
void trace_judge_attention(trace_report *r, const char *backend, const tsite *site_a, const tsite *site_b, int B,
                           int T, int H, int64_t D, const double *q, const double *k, const double *v,
                           const double *dy, const double *y_in, const double *lse_in, const double *const out_a[3],
                           const double *const out_b[3], trace_bug bug);

/* A norm call (layernorm or rmsnorm: site_a->op) on N rows of C, values
 * as recorded (stored units): forward (dy NULL) of x with gain and bias
 * (NULL when absent); backward of dy, x, gain with the forward's stored mean
 * (layernorm) and rstd.  out[side]: forward y [N, C], mean [N] (NULL for
 * rmsnorm), rstd [N]; backward dx [N, C], dgain, dbias [C] (NULL when
 * absent or not judged: accumulated_grads says they were written into
 * earlier gradients). */
typedef struct {
    int64_t N, C;
    double eps;                      /* the model's, as passed to the forward */
    const double *x, *gain, *bias, *dy, *mean, *rstd;
    const double *out[2][3];
    int accumulated_grads;
} trace_norm_data;

/* The norms', cross-entropy's and rope's verdicts (trace_verdict_rows.c),
 * with the comparisons of kernels/check/compare_{layernorm,rmsnorm,
 * cross_entropy,rope}.h and each side's kernel described for the backend
 * in use. */
void trace_judge_norm(trace_report *r, const char *backend, const tsite *site_a, const tsite *site_b,
                      const trace_norm_data *d, trace_bug bug);
/* Cross-entropy on logits [N, V] (as recorded) with targets [N] and the
 * call's soft-cap and dloss (NULL: no backward); out_a, out_b: each replay's
 * losses [N] and dlogits [N, V] (unused without dloss). */
void trace_judge_cross_entropy(trace_report *r, const char *backend, const tsite *site_a, const tsite *site_b,
                               int64_t N, int64_t V, const double *logits, const int32_t *targets, double softcap,
                               const double *dloss, const double *const out_a[2], const double *const out_b[2],
                               trace_bug bug);

/* rope forward (or backward) of x [B T, C] (dy), H heads of C / H, at
 * positions t = token % T with base theta; out_a, out_b: each replay's y
 * [B T, C] (dx). */
void trace_judge_rope(trace_report *r, const char *backend, const tsite *site_a, const tsite *site_b, int B, int T,
                      int H, int64_t C, double theta, int backward, const double *x, const double *out_a,
                      const double *out_b, trace_bug bug);

/* One op record as a JSON Lines record (trace_file.c). */
void trace_write_op_record(FILE *fp, const trace_op *o);
/* Runs cfg with op hashes of steps < op_steps (all when <= 0) written to fp
 * as they happen; *state_hash [steps + 1] and *loss [steps] malloc'd. */
int trace_record_run(const ttrain_config *cfg, long op_steps, FILE *fp, uint64_t **state_hash, double **loss,
                     char *err, size_t errlen);

#endif
