/* trainer/model.h — a decoder-only pre-norm transformer written against
 * trainer/backend.h, so that the same code runs on the CPU and on the GPU.
 *
 *   gpt2:   token + learned position embeddings; per layer LayerNorm ->
 *           attention (q, k, v, output projections) -> residual, LayerNorm ->
 *           MLP (C -> 4C, tanh-GELU, 4C -> C) -> residual; final LayerNorm;
 *           lm_head tied to the token embedding; AdamW on everything (weight
 *           decay on the matrices).  The linear layers have no biases (as
 *           nanoGPT with bias=False); LayerNorms have gain and bias.
 *   modern: token embedding only; RMSNorm (weightless, or with a gain),
 *           per-head RMSNorm of q and k (QK-norm), rotary positions, relu^2
 *           MLP, optional logit soft-cap cap*tanh(z/cap); the lm_head is a
 *           transposed copy of the embedding [C, V] kept in sync by
 *           transpose-copy after each update and transpose-add of its
 *           gradient (with the fused head, linear_cross_entropy, the
 *           embedding [V, C] itself and no copy); Muon (polar express) on the block matrices, AdamW on
 *           the embedding and gains.
 *
 * Every op runs at the site (slot and layer) the plan binds it to; every
 * tensor is stored in the format of the slot that writes it, in that layer
 * (tplan_explain prints the table). */
#ifndef ULPSCOPE_TRAINER_MODEL_H
#define ULPSCOPE_TRAINER_MODEL_H

#include <stdint.h>

#include "trainer/backend.h"
#include "trainer/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    tmodel_kind kind;
    int n_layer, n_embd, n_head, vocab, seq_len;
    int norm_gain;       /* modern: RMSNorms carry a gain (gpt2: always gain and bias) */
    double softcap;      /* modern: logit soft-cap, 0 = off */
    double rope_theta;   /* modern */
    double norm_eps;
} tmodel_config;

/* Model sizes past these are typos or corrupt checkpoints (depth: TPLAN_MAX_LAYERS). */
#define TMODEL_WIDTH_MAX 65536
#define TMODEL_HEADS_MAX 4096
#define TMODEL_VOCAB_MAX 1048576
#define TMODEL_CONTEXT_MAX 1048576

/* Defaults for a family at the given depth, width, heads, vocabulary and
 * context; returns 0 or -1 with a message (width not divisible by heads,
 * odd head dimension for rope, sizes outside 1..their maximum). */
int tmodel_config_init(tmodel_config *c, tmodel_kind kind, int n_layer, int n_embd, int n_head, int vocab,
                       int seq_len, char *err, size_t errlen);
/* A whole configuration (a checkpoint's) checked as tmodel_config_init checks
 * a fresh one's sizes, and its other fields (norm_gain 0 or 1, and 1 for
 * gpt2; softcap finite and >= 0; rope_theta and norm_eps finite and > 0). */
int tmodel_config_check(const tmodel_config *c, char *err, size_t errlen);
int64_t tmodel_param_count(const tmodel_config *c);
/* Model FLOPs per token for forward + backward: 6 N (matmul parameters,
 * lm_head included) + 12 L T C (attention scores and values), as in PaLM's
 * MFU accounting (Chowdhery et al. 2022, appendix B). */
double tmodel_flops_per_token(const tmodel_config *c);

/* Called after every slot writes a tensor (forward and backward): hashes,
 * dumps, non-finite audits.  layer is -1 outside the layers (weight
 * gradients "dW" carry their layer too).  Return nonzero to stop the pass
 * (it then fails with that status). */
typedef int (*tobserve_fn)(void *ctx, tslot slot, int layer, const char *tensor, const ktensor *t);

typedef struct tmodel tmodel;

/* Allocates parameters (working copy, master, gradients, optimizer state)
 * and the activations for micro-batches of B sequences of T tokens, in the
 * formats the plan gives (per layer where it has per-layer choices), and
 * initialises the parameters: replica r from seeds[r] (one seed per replica
 * of the backend, tbackend_set_replicas; replica r then starts bit for bit
 * where a single model from seeds[r] starts).  The model keeps a copy of the
 * plan and binds the backend to it. */
tmodel *tmodel_create(const tmodel_config *cfg, tbackend *be, const tplan *plan, int B, int T, const uint64_t *seeds,
                      char *err, size_t errlen);
/* The same model with values a benchmark can time: filled by the backend
 * (uniform with each parameter's initial spread, ones, zeros), not drawn on
 * the host from a seed, which takes minutes for a 1.5B-parameter model on
 * one thread.  Not a run's start: nothing else should use it. */
tmodel *tmodel_create_for_timing(const tmodel_config *cfg, tbackend *be, const tplan *plan, int B, int T, char *err,
                                 size_t errlen);
void tmodel_destroy(tmodel *m);

/* What tmodel_create would allocate on backend be (its element sizes and
 * replicas), counted without allocating or initialising anything. */
typedef struct {
    size_t param_bytes;     /* parameters, their gradients and optimizer state */
    size_t total_bytes;     /* everything: parameters and activations at their peak, the fp8 weight cache */
    size_t largest_elems;   /* elements of the largest tensor (sizes the ops' scratch) */
} tmodel_memory;
int tmodel_measure(const tmodel_config *cfg, const tbackend *be, const tplan *plan, int B, int T, tmodel_memory *out,
                   char *err, size_t errlen);

/* The rules between a plan and a model configuration: the fused head
 * (linear_cross_entropy) has no logit soft-cap.  0, or -1 with a message;
 * tmodel_create and tmodel_rebind check it. */
int tmodel_check_plan(const tmodel_config *cfg, const tplan *plan, char *err, size_t errlen);

/* Switch to another plan mid-run (copied): activations are reallocated in
 * the new formats.  Slots that own state (tslot_info.fixed: weights,
 * grad_accum, optimizer.adamw, optimizer.muon, allreduce) cannot change
 * mid-run: -1 with a message. */
int tmodel_rebind(tmodel *m, const tplan *plan, char *err, size_t errlen);

void tmodel_set_observer(tmodel *m, tobserve_fn fn, void *ctx);

/* Forward pass on tokens/targets [R*B*T] (host arrays, replica r's at
 * r*B*T); loss[r] = replica r's mean loss.  With dloss (R entries) the
 * backward follows and parameter gradients are accumulated (+=), replica r's
 * loss gradient being dloss[r] per token (the caller folds in
 * 1/(B*T*accumulation) and the loss scale); NULL: forward only. */
int tmodel_step_micro(tmodel *m, const int32_t *tokens, const int32_t *targets, const double *dloss, double *loss);
/* CUDA graphs of the training micro-batch (the backend's graph_* hooks):
 * with on = 1, tmodel_step_micro records its forward and backward as a graph
 * on the third training micro-batch it runs (the first two grow every
 * workspace, make every GEMM plan and size the fp8 memo's images) and
 * replays it on the ones after,
 * while dloss is the recorded one and no memory the graph uses was freed;
 * else it captures again.  The caller turns it off where something observes
 * the slots (profile, hooks, the NaN audit): a replay runs none of the
 * observer calls.  The same bits either way. */
void tmodel_set_graph(tmodel *m, int on);
/* Graphs captured and micro-batches replayed so far; failed captures (the
 * model then runs without a graph). */
void tmodel_graph_stats(const tmodel *m, long *captures, long *replays, long *failures);
/* The graph test's twin (never set outside tests): replays run without the
 * batch's upload, on the previous micro-batch's tokens. */
void tmodel_plant_graph_stale_batch(int on);
/* The memory count's twin (on != 0): the fp8 memo's kept forward inputs are
 * left out of tmodel_measure.  Never set outside tests. */
void tmodel_plant_memo_inputs_uncounted(int on);
/* Zero parameter gradients (start of a step). */
int tmodel_zero_grads(tmodel *m);
/* Gradient work after the last micro-batch (modern: transpose-add of the
 * lm_head gradient into the embedding's). */
int tmodel_finish_grads(tmodel *m);
/* After an optimizer update (modern: lm_head = embedding^T). */
int tmodel_sync_weights(tmodel *m);

/* attn.qkv.dgrad, the input gradient of the q, k, v projections, as the
 * trainer runs it: dx [BT,C] = dq Wq + dk Wk + dv Wv is one dot product of
 * length 3C, so it runs as one GEMM at site `at`, [dq | dk | dv] [BT,3C]
 * times w_qkv [3C,C] (Wq, Wk, Wv stacked as the parameter stores them),
 * and dx is rounded into its format once.  (Three GEMMs accumulating into
 * dx would round it after each; cuBLASLt's 16-bit output with beta = 1
 * also rounds the product before the add.)  joined: [BT,3C] scratch whose
 * format holds dq, dk and dv exactly (concat_columns); it still holds
 * them afterwards, for the weight gradient.  Public for its test. */
int tmodel_qkv_dgrad(tbackend *be, const tsite *at, ktensor *dx, ktensor *joined, const ktensor *dq,
                     const ktensor *dk, const ktensor *dv, const ktensor *w_qkv);

int tmodel_n_params(const tmodel *m);
tbackend *tmodel_backend(tmodel *m);
tparam *tmodel_param(tmodel *m, int i);
tparam *const *tmodel_params(tmodel *m);

#ifdef __cplusplus
}
#endif
#endif
