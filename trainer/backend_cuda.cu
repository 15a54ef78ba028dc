// trainer/backend_cuda.cu — the CUDA backend: every slot runs the registry
// kernel of its (op, path, variant) through the kernels' C APIs.
//
// Inputs stored in another format than the slot's path are converted into a
// scratch buffer first (tglue_cast, RNE, as the CPU backend rounds them);
// outputs whose tensor is stored differently are written to a scratch in the
// path's format and converted.  A slot whose op has no kernel here is
// refused when the plan is bound (tbackend_bind_plan), naming the slot and
// the op: nothing falls back to another path or to the CPU.
//
// Data parallel: libnccl.so.2 is opened at run time (dlopen), so the binary
// needs NCCL only when --world > 1.  The all-reduce slot's path is the wire
// format (gradients are converted to it and back), its variant NCCL's
// algorithm (NCCL_ALGO, fixed when the communicator is created).
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

#include "kernels/ktensor_io.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/rmsnorm.h"
#include "trainer/backend.h"
#include "trainer/glue.h"

#define N_SCRATCH 8

// The subset of NCCL's C ABI the trainer uses (nccl.h, NCCL 2.x).
typedef struct {
    char internal[128];
} nccl_unique_id;
typedef struct nccl_comm *nccl_comm_t;
enum { NCCL_FLOAT32 = 7, NCCL_BFLOAT16 = 9, NCCL_SUM = 0 };

struct nccl_api {
    void *lib;
    int (*get_unique_id)(nccl_unique_id *);
    int (*comm_init_rank)(nccl_comm_t *, int, nccl_unique_id, int);
    int (*all_reduce)(const void *, void *, size_t, int, int, nccl_comm_t, cudaStream_t);
    const char *(*error_string)(int);
    int (*comm_destroy)(nccl_comm_t);
};

struct cuda_impl {
    void *scratch[N_SCRATCH];
    size_t scratch_bytes[N_SCRATCH];
    nccl_api nccl;
    nccl_comm_t comm;
    int world;
};

static cuda_impl *impl_of(tbackend *be) { return (cuda_impl *)be->impl; }

static int kfail(tbackend *be, tslot slot, const char *what)
{
    return tbackend_fail(be, "slot %s: %s: %s", tslot_get(slot)->name, what, kernels_last_error());
}

static int cuda_check(tbackend *be, cudaError_t err, const char *what)
{
    if (err == cudaSuccess) return 0;
    return tbackend_fail(be, "cuda: %s: %s", what, cudaGetErrorString(err));
}

// ---- scratch and format conversion ----------------------------------------------------

static int scratch(tbackend *be, int idx, size_t bytes, void **out)
{
    cuda_impl *im = impl_of(be);
    if (bytes > im->scratch_bytes[idx]) {
        kdevice_free(im->scratch[idx]);
        im->scratch[idx] = nullptr;
        im->scratch_bytes[idx] = 0;
        if (kdevice_alloc(&im->scratch[idx], bytes, "trainer scratch"))
            return tbackend_fail(be, "%s", kernels_last_error());
        im->scratch_bytes[idx] = bytes;
        be->bytes_in_use += bytes;
        if (be->bytes_in_use > be->peak_bytes) be->peak_bytes = be->bytes_in_use;
    }
    *out = im->scratch[idx];
    return 0;
}

// t as a tensor of format f: itself, or a converted copy in scratch idx.
static int as_format(tbackend *be, int idx, const ktensor *t, prec_format f, ktensor *out)
{
    *out = *t;
    if (t->format == f && !t->scale) return 0;
    void *buf = nullptr;
    if (scratch(be, idx, (size_t)ktensor_numel(t) * kformat_bytes(f), &buf)) return -1;
    if (tglue_cast(buf, f, t->data, t->format, t->scale, ktensor_numel(t))) return tbackend_fail(be, "%s", kernels_last_error());
    out->data = buf;
    out->format = f;
    out->scale = nullptr;
    return 0;
}

// Where an op writes y in format f: y itself, or scratch idx (then out_end converts).
static int out_begin(tbackend *be, int idx, const ktensor *y, prec_format f, ktensor *out)
{
    *out = *y;
    if (y->format == f) return 0;
    void *buf = nullptr;
    if (scratch(be, idx, (size_t)ktensor_numel(y) * kformat_bytes(f), &buf)) return -1;
    out->data = buf;
    out->format = f;
    out->scale = nullptr;
    return 0;
}

static int out_end(tbackend *be, ktensor *y, const ktensor *written)
{
    if (written->data == y->data) return 0;
    if (tglue_cast(y->data, y->format, written->data, written->format, nullptr, ktensor_numel(y)))
        return tbackend_fail(be, "%s", kernels_last_error());
    return 0;
}

static prec_format path_fmt(tbackend *be, tslot s) { return tpath_storage(be->plan->slot[s].path); }
static int variant_of(tbackend *be, tslot s) { return be->plan->slot[s].variant; }

// ---- what this backend runs --------------------------------------------------------------

static kmatmul_accum accum_of(const kop *op)
{
    if (strcmp(op->name, "matmul_fast") == 0) return KMATMUL_ACC_FAST;
    if (strcmp(op->name, "matmul_block_fp8") == 0) return KMATMUL_ACC_BLOCK_SCALED;
    return KMATMUL_ACC_DEFAULT;
}

static int matmul_variant(const kop *op, int v) { return strcmp(op->name, "matmul_block_fp8") == 0 ? KMATMUL_FUSED : v; }

static int cuda_supports(tbackend *be, const tplan *plan, tslot s, char *why, size_t len)
{
    const kop *op = tplan_kop(plan, s);
    kpath path = plan->slot[s].path;
    int v = plan->slot[s].variant;
    if (!op) {
        snprintf(why, len, "op %s is not registered", tslot_op(s, plan->model));
        return -1;
    }
    if (!tslot_is_kernel(s)) {
        if (s == TSLOT_WEIGHTS && v != TWEIGHTS_MASTER) {
            snprintf(why, len, "weights variant %s needs an optimizer kernel that stores it; none is registered yet",
                     op->variants[v].name);
            return -1;
        }
        return 0;
    }
    if (tslot_pending(s, plan->model)) {
        snprintf(why, len, "no GPU kernel is registered for op %s yet (kernels/registry.c)", op->name);
        return -1;
    }
    if (strncmp(op->name, "matmul", 6) == 0)
        return kmatmul_supports(path, accum_of(op), matmul_variant(op, v), why, len) ? 0 : -1;
    if (strcmp(op->name, "layernorm") == 0 || strcmp(op->name, "rmsnorm") == 0) return 0;
    snprintf(why, len, "the CUDA backend does not call op %s yet", op->name);
    return -1;
}

// ---- memory -----------------------------------------------------------------------------------

static size_t cuda_elem_bytes(prec_format f) { return kformat_bytes(f); }

static int cuda_alloc(tbackend *be, ktensor *t, prec_format f, int ndim, const int64_t *shape)
{
    if (ktensor_alloc(t, f, ndim, shape)) return tbackend_fail(be, "%s", kernels_last_error());
    be->bytes_in_use += ktensor_bytes(t);
    if (be->bytes_in_use > be->peak_bytes) be->peak_bytes = be->bytes_in_use;
    return 0;
}

static void cuda_release(tbackend *be, ktensor *t)
{
    be->bytes_in_use -= ktensor_bytes(t);
    ktensor_free(t);
}

static int cuda_alloc_raw(tbackend *be, void **ptr, size_t bytes)
{
    if (kdevice_alloc(ptr, bytes, "trainer buffer")) return tbackend_fail(be, "%s", kernels_last_error());
    be->bytes_in_use += bytes;
    if (be->bytes_in_use > be->peak_bytes) be->peak_bytes = be->bytes_in_use;
    return 0;
}

static void cuda_release_raw(tbackend *be, void *ptr) { kdevice_free(ptr); }

static int cuda_raw_upload(tbackend *be, void *dst, const void *src, size_t bytes)
{
    return kdevice_upload(dst, src, bytes, "trainer upload") ? tbackend_fail(be, "%s", kernels_last_error()) : 0;
}

static int cuda_raw_download(tbackend *be, void *dst, const void *src, size_t bytes)
{
    return kdevice_download(dst, src, bytes, "trainer download") ? tbackend_fail(be, "%s", kernels_last_error()) : 0;
}

static int cuda_upload(tbackend *be, ktensor *t, const double *values)
{
    return ktensor_upload(t, values) ? tbackend_fail(be, "%s", kernels_last_error()) : 0;
}

static int cuda_download(tbackend *be, const ktensor *t, double *values)
{
    return ktensor_download(t, values) ? tbackend_fail(be, "%s", kernels_last_error()) : 0;
}

// The device bytes are the storage encoding itself (little-endian).
static int cuda_read_bytes(tbackend *be, const ktensor *t, void *dst)
{
    size_t n = ktensor_bytes(t);
    if (cuda_raw_download(be, dst, t->data, n)) return -1;
    return t->scale ? cuda_raw_download(be, (char *)dst + n, t->scale, sizeof(float)) : 0;
}

static int cuda_write_bytes(tbackend *be, ktensor *t, const void *src)
{
    size_t n = ktensor_bytes(t);
    if (cuda_raw_upload(be, t->data, src, n)) return -1;
    return t->scale ? cuda_raw_upload(be, t->scale, (const char *)src + n, sizeof(float)) : 0;
}

static int cuda_zero(tbackend *be, ktensor *t)
{
    if (kdevice_fill_bytes(t->data, 0, ktensor_bytes(t), "trainer zero")) return tbackend_fail(be, "%s", kernels_last_error());
    return t->scale ? ktensor_set_scale(t, 1.0f) : 0;
}

static int cuda_count_nonfinite(tbackend *be, const ktensor *t, int64_t *count)
{
    return tglue_count_nonfinite(t->data, t->format, ktensor_numel(t), count) ? tbackend_fail(be, "%s", kernels_last_error())
                                                                              : 0;
}

static int cuda_sync(tbackend *be)
{
    return kernels_sync("trainer step") ? tbackend_fail(be, "%s", kernels_last_error()) : 0;
}

// ---- matmul -----------------------------------------------------------------------------------

static int is_grad_operand(tslot s)
{
    switch (s) {
    case TSLOT_LM_HEAD_DGRAD: case TSLOT_LM_HEAD_WGRAD: case TSLOT_MLP_DOWN_DGRAD: case TSLOT_MLP_DOWN_WGRAD:
    case TSLOT_MLP_UP_DGRAD: case TSLOT_MLP_UP_WGRAD: case TSLOT_ATTN_OUT_DGRAD: case TSLOT_ATTN_OUT_WGRAD:
    case TSLOT_ATTN_QKV_DGRAD: case TSLOT_ATTN_QKV_WGRAD:
        return 1;
    default:
        return 0;
    }
}

static int cuda_matmul(tbackend *be, tslot slot, ktensor *y, const ktensor *a, int a_trans, const ktensor *b,
                       int b_trans, int accumulate)
{
    kpath path = be->plan->slot[slot].path;
    const kop *op = tplan_kop(be->plan, slot);
    kmatmul_accum accum = accum_of(op);
    int variant = matmul_variant(op, variant_of(be, slot));
    int64_t M = a_trans ? a->shape[1] : a->shape[0], K = a_trans ? a->shape[0] : a->shape[1];
    int64_t N = b_trans ? b->shape[0] : b->shape[1];
    int y_fp32 = y->format == PREC_FP32 && (path == KPATH_BF16 || path == KPATH_FP16);
    if ((y->format != tpath_storage(path) && !y_fp32) || y->shape[0] != M || y->shape[1] != N)
        return tbackend_fail(be, "slot %s: output %lldx%lld %s, expected %lldx%lld %s", tslot_get(slot)->name,
                             (long long)y->shape[0], (long long)y->shape[1], prec_format_name(y->format), (long long)M,
                             (long long)N, prec_format_name(tpath_storage(path)));
    kmatmul_args args;
    memset(&args, 0, sizeof args);
    args.M = M, args.N = N, args.K = K;
    args.a_trans = a_trans, args.b_trans = b_trans;
    args.y = y->data;
    args.c = accumulate ? y->data : nullptr;
    args.alpha = 1.0f;
    args.beta = accumulate ? 1.0f : 0.0f;
    args.y_fp32 = y_fp32;
    ktensor A, B;
    if (path != KPATH_FP8) {
        prec_format f = tpath_storage(path);
        if (as_format(be, 0, a, f, &A) || as_format(be, 1, b, f, &B)) return -1;
        args.a = A.data, args.b = B.data;
        if (kmatmul(path, accum, variant, &args)) return kfail(be, slot, "matmul");
        return 0;
    }
    // fp8: both operands handed over in one format (fp32 if both are, else bf16) and quantised inside
    prec_format x = a->format == PREC_FP32 && b->format == PREC_FP32 ? PREC_FP32 : PREC_BF16;
    if (as_format(be, 0, a, x, &A) || as_format(be, 1, b, x, &B)) return -1;
    args.a = A.data, args.b = B.data;
    if (kmatmul_quantized(accum, variant, &args, x, tpath_operand(path, is_grad_operand(slot)), PREC_E4M3))
        return kfail(be, slot, "fp8 matmul");
    return 0;
}

// ---- norms ------------------------------------------------------------------------------------

static int is_layernorm(tbackend *be, tslot s) { return strcmp(tplan_kop(be->plan, s)->name, "layernorm") == 0; }

static int cuda_norm_fwd(tbackend *be, tslot slot, ktensor *y, ktensor *mean, ktensor *rstd, const ktensor *x,
                         const ktensor *gain, const ktensor *bias, double eps)
{
    prec_format f = path_fmt(be, slot);
    ktensor X, G, Bb, Y;
    if (as_format(be, 0, x, f, &X) || (gain && as_format(be, 1, gain, f, &G)) || (bias && as_format(be, 2, bias, f, &Bb)) ||
        out_begin(be, 3, y, f, &Y))
        return -1;
    int rc = is_layernorm(be, slot)
                 ? klayernorm_forward(&Y, (float *)mean->data, (float *)rstd->data, &X, gain ? &G : nullptr,
                                      bias ? &Bb : nullptr, (float)eps, variant_of(be, slot))
                 : krmsnorm_forward(&Y, (float *)rstd->data, &X, gain ? &G : nullptr, (float)eps, variant_of(be, slot));
    if (rc) return kfail(be, slot, "norm forward");
    return out_end(be, y, &Y);
}

static int cuda_norm_bwd(tbackend *be, tslot slot, ktensor *dx, ktensor *dgain, ktensor *dbias, const ktensor *dy,
                         const ktensor *x, const ktensor *gain, const ktensor *mean, const ktensor *rstd)
{
    prec_format f = path_fmt(be, slot);
    ktensor DY, X, G, DX, DG, DB;
    if (as_format(be, 0, dy, f, &DY) || as_format(be, 1, x, f, &X) || (gain && as_format(be, 2, gain, f, &G)) ||
        out_begin(be, 3, dx, f, &DX))
        return -1;
    // the kernels write dgain/dbias in the path's format; the model accumulates them
    void *buf = nullptr;
    if (dgain) {
        if (scratch(be, 4, (size_t)ktensor_numel(dgain) * kformat_bytes(f), &buf)) return -1;
        DG = *dgain, DG.data = buf, DG.format = f;
    }
    if (dbias) {
        if (scratch(be, 5, (size_t)ktensor_numel(dbias) * kformat_bytes(f), &buf)) return -1;
        DB = *dbias, DB.data = buf, DB.format = f;
    }
    int rc = is_layernorm(be, slot)
                 ? klayernorm_backward(&DX, dgain ? &DG : nullptr, dbias ? &DB : nullptr, &DY, &X, gain ? &G : nullptr,
                                       (const float *)mean->data, (const float *)rstd->data, variant_of(be, slot))
                 : krmsnorm_backward(&DX, dgain ? &DG : nullptr, &DY, &X, gain ? &G : nullptr,
                                     (const float *)rstd->data, variant_of(be, slot));
    if (rc) return kfail(be, slot, "norm backward");
    if (out_end(be, dx, &DX)) return -1;
    if (dgain && tglue_add(dgain->data, dgain->format, DG.data, f, ktensor_numel(dgain))) return kfail(be, slot, "dgain");
    if (dbias && tglue_add(dbias->data, dbias->format, DB.data, f, ktensor_numel(dbias))) return kfail(be, slot, "dbias");
    return 0;
}

// ---- gradient accumulation -------------------------------------------------------------------

static int cuda_accumulate(tbackend *be, tslot slot, ktensor *dst, const ktensor *src)
{
    if (tglue_add(dst->data, dst->format, src->data, src->format, ktensor_numel(dst))) return kfail(be, slot, "accumulate");
    return 0;
}

// ---- data parallel (NCCL through dlopen) ----------------------------------------------------------

static int nccl_load(tbackend *be, nccl_api *n)
{
    n->lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!n->lib) return tbackend_fail(be, "data parallel needs NCCL: cannot open libnccl.so.2 (%s)", dlerror());
    *(void **)&n->get_unique_id = dlsym(n->lib, "ncclGetUniqueId");
    *(void **)&n->comm_init_rank = dlsym(n->lib, "ncclCommInitRank");
    *(void **)&n->all_reduce = dlsym(n->lib, "ncclAllReduce");
    *(void **)&n->error_string = dlsym(n->lib, "ncclGetErrorString");
    *(void **)&n->comm_destroy = dlsym(n->lib, "ncclCommDestroy");
    if (!n->get_unique_id || !n->comm_init_rank || !n->all_reduce || !n->error_string || !n->comm_destroy)
        return tbackend_fail(be, "libnccl.so.2 lacks a symbol the trainer needs (ncclGetUniqueId, ncclCommInitRank, "
                                 "ncclAllReduce, ncclGetErrorString, ncclCommDestroy)");
    return 0;
}

static int cuda_dp_init(tbackend *be, int world, int rank, const char *id_file)
{
    cuda_impl *im = impl_of(be);
    int devices = 0;
    if (cuda_check(be, cudaGetDeviceCount(&devices), "cudaGetDeviceCount")) return -1;
    if (cuda_check(be, cudaSetDevice(rank % devices), "cudaSetDevice")) return -1;
    if (nccl_load(be, &im->nccl)) return -1;
    const tplan *plan = be->plan;
    // NCCL reads its algorithm when the communicator is created
    if (plan) setenv("NCCL_ALGO", plan->slot[TSLOT_ALLREDUCE].variant == TALLREDUCE_TREE ? "Tree" : "Ring", 1);
    nccl_unique_id id;
    if (rank == 0) {
        int rc = im->nccl.get_unique_id(&id);
        if (rc) return tbackend_fail(be, "ncclGetUniqueId: %s", im->nccl.error_string(rc));
        char tmp[4160];
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld", id_file, (long)getpid());
        FILE *fp = fopen(tmp, "wb");
        if (!fp || fwrite(&id, sizeof id, 1, fp) != 1 || fclose(fp) || rename(tmp, id_file))
            return tbackend_fail(be, "cannot write the NCCL id file %s: %s", id_file, strerror(errno));
    } else {
        // wait (up to 120 s) for rank 0 to publish the id
        int got = 0;
        for (int tries = 0; tries < 1200 && !got; tries++) {
            FILE *fp = fopen(id_file, "rb");
            if (fp) {
                got = fread(&id, sizeof id, 1, fp) == 1;
                fclose(fp);
            }
            if (!got) usleep(100000);
        }
        if (!got) return tbackend_fail(be, "rank %d: no NCCL id in %s after 120 s (is rank 0 running?)", rank, id_file);
    }
    int rc = im->nccl.comm_init_rank(&im->comm, world, id, rank);
    if (rc) return tbackend_fail(be, "ncclCommInitRank(world %d, rank %d): %s", world, rank, im->nccl.error_string(rc));
    im->world = world;
    return 0;
}

static int cuda_allreduce(tbackend *be, tparam *const *params, int n)
{
    cuda_impl *im = impl_of(be);
    if (im->world <= 1) return 0;
    prec_format wire = tpath_storage(be->plan->slot[TSLOT_ALLREDUCE].path);
    int dtype = wire == PREC_BF16 ? NCCL_BFLOAT16 : NCCL_FLOAT32;
    for (int i = 0; i < n; i++) {
        ktensor *g = &params[i]->grad;
        ktensor W;
        if (as_format(be, 0, g, wire, &W)) return -1;
        int rc = im->nccl.all_reduce(W.data, W.data, (size_t)ktensor_numel(g), dtype, NCCL_SUM, im->comm, 0);
        if (rc) return tbackend_fail(be, "slot allreduce: ncclAllReduce(%s, %lld elements): %s", params[i]->name,
                                     (long long)ktensor_numel(g), im->nccl.error_string(rc));
        if (W.data != g->data && tglue_cast(g->data, g->format, W.data, wire, nullptr, ktensor_numel(g)))
            return kfail(be, TSLOT_ALLREDUCE, "allreduce");
    }
    return 0;
}

static void cuda_destroy(tbackend *be)
{
    cuda_impl *im = impl_of(be);
    for (int i = 0; i < N_SCRATCH; i++) kdevice_free(im->scratch[i]);
    if (im->comm) im->nccl.comm_destroy(im->comm);
    if (im->nccl.lib) dlclose(im->nccl.lib);
    kmatmul_release();
    free(im);
    free(be);
}

extern "C" tbackend *tbackend_cuda_create(char *why, size_t why_len)
{
    if (!kernels_gpu_available(why, why_len)) return nullptr;
    tbackend *be = (tbackend *)calloc(1, sizeof *be);
    cuda_impl *im = (cuda_impl *)calloc(1, sizeof *im);
    if (!be || !im) {
        free(be);
        free(im);
        snprintf(why, why_len, "out of memory");
        return nullptr;
    }
    be->name = "cuda";
    be->impl = im;
    be->supports = cuda_supports;
    be->elem_bytes = cuda_elem_bytes;
    be->alloc = cuda_alloc;
    be->release = cuda_release;
    be->alloc_raw = cuda_alloc_raw;
    be->release_raw = cuda_release_raw;
    be->raw_upload = cuda_raw_upload;
    be->raw_download = cuda_raw_download;
    be->upload = cuda_upload;
    be->download = cuda_download;
    be->read_bytes = cuda_read_bytes;
    be->write_bytes = cuda_write_bytes;
    be->zero = cuda_zero;
    be->count_nonfinite = cuda_count_nonfinite;
    be->sync = cuda_sync;
    be->norm_fwd = cuda_norm_fwd;
    be->norm_bwd = cuda_norm_bwd;
    be->matmul = cuda_matmul;
    be->accumulate = cuda_accumulate;
    be->dp_init = cuda_dp_init;
    be->allreduce = cuda_allreduce;
    be->destroy = cuda_destroy;
    return be;
}
