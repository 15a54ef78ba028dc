/* kernels/adamw.h — one AdamW step over a parameter tensor, three ways of
 * storing the weights.
 *
 * Shapes: every tensor is a flat array of n elements (a parameter tensor of
 * any shape, contiguous).  params and grad are in the path's format (fp32,
 * bf16, fp16); m, v (first and second moments) and an fp32 master copy are
 * fp32.  Step t (1-based) drives the bias corrections bc1 = 1 - beta1^t,
 * bc2 = 1 - beta2^t, which the launcher computes in double and rounds to
 * fp32 once.
 *
 * Weight storage (kadamw_storage; the registry lists each as an op because
 * each applies to some paths only):
 *   KADAMW_MASTER_FP32  fp32 master weights updated in fp32; params are the
 *                       master rounded to nearest even into the path's format
 *                       (fp32 path: params are the master; pass master NULL)
 *                                                              (op adamw)
 *   KADAMW_STOCHASTIC   no master: the new value, exact as the unevaluated
 *                       sum p - step (TwoSum), is rounded stochastically into
 *                       the path's format, up with probability equal to the
 *                       fraction of an ulp (24-bit resolution).  The random
 *                       bits are a counter-based hash of (seed, step, index),
 *                       so a step is deterministic and independent of the
 *                       launch shape                         (op adamw_sr)
 *   KADAMW_SPLIT_MASTER bf16 only: the fp32 master is the bf16 params (its
 *                       high 16 bits) joined with a 16-bit buffer holding its
 *                       low 16 bits; after the update in fp32 the two halves
 *                       are stored back, so the bf16 weights are the master
 *                       rounded toward zero             (op adamw_split)
 *
 * Variants (the same update in two operation orders practitioners use):
 *   llmc   m = beta1 m + (1-beta1) g;  v = beta2 v + (1-beta2) g^2;
 *          p -= lr (m/bc1 / (sqrt(v/bc2) + eps) + wd p)      (llm.c's order)
 *   torch  p *= 1 - lr wd;  m += (1-beta1)(g - m);  v += (1-beta2)(g^2 - v);
 *          p -= (lr/bc1) m / (sqrt(v)/sqrt(bc2) + eps)      (torch.optim.AdamW)
 * Each kernel spells its operations with explicit-rounding intrinsics so the
 * check's bound replays exactly what runs.
 *
 * Planted bugs: drop-term leaves the last element untouched (params, master,
 * m, v); truncate-output stores m and v (and RNE-stored params) truncated
 * (fp32 stores at bf16 precision, see kernels/common/kelem.cuh). */
#ifndef ULPSCOPE_KERNELS_ADAMW_H
#define ULPSCOPE_KERNELS_ADAMW_H

#include <stdint.h>

#include "kernels/kernels.h"
#include "kernels/registry.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { KADAMW_LLMC = 0, KADAMW_TORCH, KADAMW_NVARIANTS } kadamw_variant;
extern const kvariant kadamw_variants[KADAMW_NVARIANTS];

typedef enum { KADAMW_MASTER_FP32 = 0, KADAMW_STOCHASTIC, KADAMW_SPLIT_MASTER, KADAMW_NSTORAGE } kadamw_storage;
const char *kadamw_storage_name(kadamw_storage s); /* "master_fp32", "stochastic", "split_master" */

typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    int64_t step;  /* t >= 1 */
    uint64_t seed; /* stochastic rounding only */
} kadamw_hparams;

/* The fp32 values of the bias corrections the kernels use: 1 - beta^t
 * computed in double, rounded once to fp32. */
float kadamw_bias_correction(float beta, int64_t step);

/* One step on n elements, in place.  params, grad: device, path format;
 * m, v: device fp32; master: fp32 device array for KADAMW_MASTER_FP32 on
 * bf16/fp16 (NULL on fp32), NULL otherwise; low_bits: device uint16 array
 * for KADAMW_SPLIT_MASTER, NULL otherwise.  Returns 0 or -1 (kernels_last_error). */
int kadamw_step(kpath path, kadamw_storage storage, int variant, int64_t n, void *params, float *master,
                uint16_t *low_bits, float *m, float *v, const void *grad, const kadamw_hparams *h);

/* R replicas in one launch: params, master, low_bits, m, v and grad hold R
 * x n elements (replica r's at r n).  The per-replica arrays (device
 * memory, R entries each, any of them NULL):
 *   grad_scale  the gradient is used as RNE(g * grad_scale[r]) in its own
 *               format (the clip factor over the loss scale: what an
 *               in-place scaling pass over the gradient in the path's format
 *               gives, without writing it back); NULL or 1: as it is
 *   seed        the stochastic-rounding seed of replica r (NULL: h->seed)
 *   skip        nonzero: replica r's step is skipped (loss-scale overflow,
 *               non-finite gradient): its params, master, low bits, m and v
 *               stay untouched
 *   hparams     a device copy of the step's constants from
 *               kadamw_hparams_upload (h is then not read and may be NULL):
 *               a captured CUDA graph replays the same launch every step,
 *               so lr and step must come from device memory there
 *   working     fp32 path with master_fp32 storage only (the fp32 weights
 *               are the master): a device array of R x n elements in
 *               working_format (bf16 or fp16) that also receives each new
 *               weight rounded to nearest even (truncated under the planted
 *               truncate-output), the image a separate conversion pass
 *               would write, in the same pass; NULL: none
 * Element i of replica r gets the bits a single call on replica r's arrays
 * gives with that scale and seed (SR bits from (seed[r], step, i)).
 * kadamw_step is the case R = 1 with none of them. */
typedef struct {
    const float *grad_scale;
    const uint64_t *seed;
    const int32_t *skip;
    const void *hparams;
    void *working;
    prec_format working_format;
} kadamw_replicas;

int kadamw_step_replicas(kpath path, kadamw_storage storage, int variant, int64_t replicas, int64_t n, void *params,
                         float *master, uint16_t *low_bits, float *m, float *v, const void *grad,
                         const kadamw_hparams *h, const kadamw_replicas *rep);

/* Device bytes of a step's constants, and their upload on the current
 * stream (h validated and turned into constants on the host, as
 * kadamw_step does); for a captured graph, upload before each replay. */
size_t kadamw_hparams_bytes(void);
int kadamw_hparams_upload(void *device_hparams, const kadamw_hparams *h);

/* The random bits the stochastic rounding of element `index` at `step` uses:
 * the top 24 of the 64-bit hash (exposed for the check and the tests). */
uint32_t kadamw_sr_bits(uint64_t seed, int64_t step, int64_t index);

int kadamw_supports(kpath path, kadamw_storage storage, char *why, size_t why_len);

#ifdef __cplusplus
}
#endif
#endif
