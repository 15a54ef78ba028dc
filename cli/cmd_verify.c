/* cli/cmd_verify.c — `ulpscope verify`: a kernel that is not ulpscope's,
 * judged from the tensors it saw and produced (.npy or safetensors files)
 * against the MPFR reference and the bound of the kernel as declared
 * (verify/verify.h does the work; this file reads the files and options). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/jsonl.h"
#include "base/outfile.h"
#include "base/parse.h"
#include "base/tensor_file.h"
#include "cli/commands.h"
#include "verify/verify.h"

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: ulpscope verify OP --inputs FILES --outputs FILES --path P [--pass fwd|bwd]\n"
            "                       [--accum A] [--reduce R] [--col-reduce R] [--upcast U]\n"
            "                       [--variance V] [--exp F] [--function F] [--math-ulps N] [--eps E]\n"
            "                       [--layout L] [--alpha X] [--beta X]\n"
            "                       [--gelu] [--epilogue E] [--split-k S] [--dloss X] [--online] [--softcap C]\n"
            "                       [--lr X] [--beta1 X] [--beta2 X] [--weight-decay X] [--step T]\n"
            "                       [--order O] [--store S] [--softmax F] [--scale X] [--causal yes|no]\n"
            "                       [--coeffs C] [--form F] [--angle A] [--base X]\n"
            "                       [--json FILE] [--list]\n\n"
            "Reads the tensors a kernel saw (--inputs) and produced (--outputs), computes the\n"
            "MPFR reference of every output element and a bound on its error for the kernel\n"
            "as you declare it, and prints per output: max and RMS error in units of the\n"
            "storage format's u, the bound, the worst element with its inputs, PASS or FAIL\n"
            "(as `ulpscope check` judges its own kernels).\n\n"
            "  OP               the op: adamw, attention, cross_entropy, embedding, gelu_erf,\n"
            "                   gelu_tanh, grad_norm, layernorm, leaky_relu2, logsumexp, matmul,\n"
            "                   polar_express, relu2, residual, rmsnorm, rope, softmax, transpose\n"
            "                   (--list: their tensors)\n"
            "  --inputs FILES   comma-separated: FILE.npy (bound to the pass's tensors in order),\n"
            "                   NAME=FILE.npy, or FILE.safetensors (its tensors by name)\n"
            "  --outputs FILES  the same for the outputs\n"
            "  --path P         storage format of the op's tensors: fp32, bf16, fp16 (f4, f2 and\n"
            "                   f8 files must hold values of that format; u2 files hold bf16 or\n"
            "                   fp16 bit patterns); matmul also fp8 (a, b: the dequantised\n"
            "                   operands the GEMM saw; c, bias, y: bf16)\n"
            "  --pass           fwd (default) or bwd\n"
            "  --accum A        format the kernel accumulates its sums in: fp64, fp32, bf16,\n"
            "                   fp16, storage (the path's) or unknown (default); the elementwise\n"
            "                   ops (activations, residual, rope, transpose's add): the format of\n"
            "                   their arithmetic; polar_express: its GEMMs' (also tensor-core, tf32); matmul\n"
            "                   also tensor-core (bf16/fp16), tf32 (fp32 inputs), fp8-promote:N (fp8,\n"
            "                   promoted to fp32 every N products; cuBLASLt's default: 128 assumed),\n"
            "                   fp8-fast (never promoted), fp8-groups:N (per-group scaling);\n"
            "                   attention: fp32, tensor-core (bf16/fp16: flash_mma's arithmetic on\n"
            "                   the H100's matrix units) or unknown (fp32 at both ends)\n"
            "  --reduce R       order of the row sums (matmul: over K; grad_norm, polar_express: the\n"
            "                   sum of squares; embedding bwd: each table row's sum): sequential, pairwise,\n"
            "                   blocked:B (consecutive blocks of B, then the block sums in order),\n"
            "                   blocks:T (T threads each summing a strided share, then a tree),\n"
            "                   depth:D (the longest chain of roundings) or unknown (default)\n"
            "  --col-reduce R   the same for sums over rows (dgain, dbias)\n"
            "  --upcast U       rmsnorm: gemma (every step in fp32, y rounded once), llama (x rstd\n"
            "                   rounded to storage before the gain), none (statistics in storage\n"
            "                   too) or unknown (default); polar_express: fp32 (the normalisation\n"
            "                   after its fp32 sum of squares in fp32), none (in the storage format)\n"
            "                   or unknown\n"
            "  --variance V     layernorm: two-pass, one-pass (E[x^2] - mean^2), welford (one\n"
            "                   thread), welford:T or welford:TxV (T threads, V elements a step,\n"
            "                   then butterflies per warp and over the warps) or unknown (default)\n"
            "  --exp F          softmax, logsumexp: exp (expf, 2 ulps), exp2 (exp2f of the folded\n"
            "                   argument), fast (__expf) or unknown (default); attention: exp or exp2\n"
            "                   (log2 e folded into the scale) or unknown\n"
            "  --function F     gelu_tanh: tanh (tanhf), tanh-approx (tanh.approx.f32, 2^-10.987\n"
            "                   absolute), sigmoid (x / (1 + expf(-2z))); gelu_erf: erf (erff),\n"
            "                   normcdf (normcdff, CUDA's 5 ulps); any (whichever form: the largest\n"
            "                   of their bounds) or unknown (default)\n"
            "  --math-ulps N    error of rsqrt, tanhf, erff, expf and the like in fp32 ulps (default\n"
            "                   2, CUDA's figures; fast-math functions: theirs; attention: its\n"
            "                   exponential's, the logarithm's is 1)\n"
            "  --eps E          the op's epsilon (default 1e-5 as an fp32 value; adamw: adam's eps,\n"
            "                   give it)\n"
            "  --layout L       matmul: AB (a is (M, K), b (K, N); default), AtB, ABt, AtBt\n"
            "  --alpha X, --beta X  matmul: y = epi(alpha A B + beta C) (default 1, 0; fp32\n"
            "                   values; --beta other than 0 needs the input c)\n"
            "  --gelu           matmul: GELU (tanh form) after the bias\n"
            "  --epilogue E     matmul with a bias or GELU: single (one rounding of y), rounded\n"
            "                   (alpha A B + beta C rounded to y's format first), cublaslt (rounded,\n"
            "                   tanh.approx GELU) or unknown (default); polar_express: single (x' =\n"
            "                   B x + a x in one GEMM), rounded (B x rounded, then + a x) or unknown\n"
            "  --split-k S      matmul: K cut into S slices, each accumulated as declared, then added\n"
            "  --dloss X        cross_entropy: the loss gradient the dlogits are scaled by (1/N\n"
            "                   for a mean over N rows; an fp32 value)\n"
            "  --online         cross_entropy: one pass over the row, rescaling at each new maximum\n"
            "  --softcap C      cross_entropy: logits capped first, C tanhf(logit / C) (an fp32 value;\n"
            "                   the gradient times 1 - tanhf^2, each step rounded in fp32)\n"
            "  --lr, --beta1, --beta2, --weight-decay X, --step T  adamw: the step's hyperparameters\n"
            "                   (fp32 values; t >= 1 drives the bias corrections); --accum: the\n"
            "                   update's arithmetic and m, v\n"
            "  --order O        adamw: llmc (llm.c's), torch (torch.optim.AdamW's), any or unknown\n"
            "  --store S        adamw: the new weights' rounding: nearest, stochastic, truncate\n"
            "                   (a split master's high half) or unknown\n"
            "  --softmax F      attention: materialised (S, P, and in the backward dP, dS, rounded\n"
            "                   to the storage format), online (FlashAttention: tiles of 32 keys,\n"
            "                   running max, fp32), two-pass (fp32, P normalised before P v) or\n"
            "                   unknown (default); --reduce: its row sums and the backward's delta\n"
            "  --scale X        attention: the fp32 value scores are multiplied by (default\n"
            "                   fp32(1/sqrt(D)))\n"
            "  --causal yes|no  attention: keys j <= i only (default yes; no is refused: the\n"
            "                   reference is causal)\n"
            "  --coeffs C       polar_express: polar-express (Amsel et al.'s five (a, b, c), as\n"
            "                   modded-nanogpt), muon-quintic (3.4445,-4.7750,2.0315 each step) or\n"
            "                   a,b,c (one triple for every step); rounded to fp32\n"
            "  --form F         polar_express: wide (A = x x^T), tall (A = x^T x), any or unknown\n"
            "  --angle A        rope: table (fp32 cos, sin: the inputs cos, sin, or correctly\n"
            "                   rounded), fp32 (fl(pos inv_freq) in fp32, then sincosf: --math-ulps;\n"
            "                   inv_freq the input, or within --math-ulps) or unknown (default)\n"
            "  --base X         rope: theta = pos base^(-2i/D) (default 10000)\n"
            "  --json FILE      also write JSON Lines (- for stdout; the table then goes to stderr):\n"
            "                   a header, one record per output row, a verdict record\n"
            "  --list           the ops and their tensors, then exit\n\n"
            "Unknown parts of the declaration: two rows per output, the tightest bound (fp32,\n"
            "pairwise, gemma, two-pass, exp, single, tanh or erf, llmc, nearest, table; attention's\n"
            "softmax two-pass; polar_express's form the smaller Gram matrix) and the loosest (storage\n"
            "format, sequential, none, one-pass, fast, cublaslt, any, stochastic, fp32 angle;\n"
            "attention's softmax materialised, exp2; polar_express rounded, either form); the\n"
            "verdict is taken against\n"
            "the loosest.  A declared kernel that\n"
            "FAILs is tried against looser declarations, and the first one the outputs fit\n"
            "is named.\n\n"
            "Exit status: 0 PASS, 1 FAIL, 2 bad input (options, files, dtypes, shapes).\n");
}

#define MAX_FILE_TENSORS 16

typedef struct {
    tfile_tensor file[MAX_FILE_TENSORS]; /* .npy tensors (owned) */
    int n_file;
    tfile_tensor *st[MAX_FILE_TENSORS];  /* safetensors files (owned) */
    int st_n[MAX_FILE_TENSORS], n_st;
    ulp_tensor bound[MAX_FILE_TENSORS];
    char names[MAX_FILE_TENSORS][128];
    int n_bound;
} tensor_set;

static void free_set(tensor_set *s)
{
    for (int i = 0; i < s->n_file; i++) tfile_free(&s->file[i]);
    for (int i = 0; i < s->n_st; i++) tfile_free_all(s->st[i], s->st_n[i]);
}

static int ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

/* Makes t usable as a ulp_tensor of the declared path: u2 patterns become
 * the path's 16-bit values; integer dtypes are refused except for index
 * tensors (cross_entropy's targets), which keep their integers. */
static int to_values(tfile_tensor *t, const char *what, const char *name, const char *path)
{
    if (strcmp(name, "targets") == 0 || strcmp(name, "tokens") == 0)
        return 0; /* any dtype: ulp_verify checks that each value is an index */
    if (t->dtype == TFILE_U16) {
        int bf16 = strcmp(path, "bf16") == 0 || strcmp(path, "fp8") == 0; /* fp8 GEMMs write bf16 */
        if (!bf16 && strcmp(path, "fp16") != 0)
            return base_error("verify", "%s: dtype u2 holds 16-bit patterns; they need --path bf16, fp16 or fp8, not %s", what, path);
        for (int64_t i = 0; i < t->n; i++)
            t->data[i] = bf16 ? tfile_bf16_to_double((uint16_t)t->data[i]) : tfile_half_to_double((uint16_t)t->data[i]);
    } else if (!tfile_dtype_is_float(t->dtype)) {
        return base_error("verify", "%s: dtype %s is not a floating-point tensor (f8, f4, f2, bf16, or u2 bit patterns)",
                          what, tfile_dtype_name(t->dtype));
    }
    return 0;
}

static int bind_tensor(tensor_set *s, tfile_tensor *t, const char *name)
{
    if (s->n_bound == MAX_FILE_TENSORS) return base_error("verify", "more than %d tensors", MAX_FILE_TENSORS);
    ulp_tensor *u = &s->bound[s->n_bound];
    snprintf(s->names[s->n_bound], sizeof s->names[0], "%s", name);
    u->name = s->names[s->n_bound];
    u->dtype = ULP_F64;
    u->data = t->data;
    u->ndim = t->ndim;
    for (int k = 0; k < t->ndim; k++) u->shape[k] = t->shape[k];
    s->n_bound++;
    return 0;
}

/* Reads FILES for one role.  own: the pass's tensor names for this role
 * (positional .npy files take them in order); other: the other role's names
 * (a safetensors file holding both is fine). */
static int read_files(const char *list, const char *role, const char *const *own, const char *const *other,
                      const char *path, tensor_set *s)
{
    char *copy = strdup(list), *save = NULL;
    if (!copy) return base_error("verify", "out of memory");
    int position = 0, rc = 0;
    for (char *item = strtok_r(copy, ",", &save); item && !rc; item = strtok_r(NULL, ",", &save), position++) {
        char err[1200];
        char *eq = strchr(item, '=');
        const char *file = eq ? eq + 1 : item;
        if (!*file) {
            rc = base_error("verify", "--%s: an empty file name in '%s'", role, list);
            break;
        }
        if (ends_with(file, ".safetensors")) {
            if (eq) {
                rc = base_error("verify", "--%s: %s: a safetensors file binds its tensors by their own names (no NAME=)", role, item);
                break;
            }
            if (s->n_st == MAX_FILE_TENSORS) {
                rc = base_error("verify", "too many files");
                break;
            }
            tfile_tensor *ts;
            int n;
            if (tfile_read_safetensors(file, &ts, &n, err, sizeof err) != 0) {
                rc = base_error("verify", "%s", err);
                break;
            }
            s->st[s->n_st] = ts;
            s->st_n[s->n_st++] = n;
            int used = 0;
            for (int i = 0; i < n && !rc; i++) {
                int mine = 0, theirs = 0;
                for (int k = 0; own[k]; k++) mine |= strcmp(ts[i].name, own[k]) == 0;
                for (int k = 0; other[k]; k++) theirs |= strcmp(ts[i].name, other[k]) == 0;
                char what[1200];
                snprintf(what, sizeof what, "%s: tensor '%s'", file, ts[i].name);
                if (mine) {
                    rc = to_values(&ts[i], what, ts[i].name, path);
                    if (!rc) rc = bind_tensor(s, &ts[i], ts[i].name);
                    used++;
                } else if (!theirs) {
                    rc = base_error("verify", "%s is none of the op's tensors", what);
                }
            }
            if (!rc && !used) rc = base_error("verify", "--%s: %s holds none of the pass's %s tensors", role, file, role);
            continue;
        }
        if (!ends_with(file, ".npy")) {
            rc = base_error("verify", "--%s: '%s' is neither a .npy nor a .safetensors file", role, file);
            break;
        }
        const char *name = NULL;
        if (eq) {
            *eq = '\0';
            name = item;
        } else {
            int count = 0;
            while (own[count]) count++;
            if (position >= count) {
                rc = base_error("verify", "--%s: more files than the pass has %s tensors; name them (NAME=FILE)", role, role);
                break;
            }
            name = own[position];
        }
        if (s->n_file == MAX_FILE_TENSORS) {
            rc = base_error("verify", "too many files");
            break;
        }
        tfile_tensor *t = &s->file[s->n_file];
        if (tfile_read_npy(file, t, err, sizeof err) != 0) {
            rc = base_error("verify", "%s", err);
            break;
        }
        s->n_file++;
        rc = to_values(t, file, name, path);
        if (!rc) rc = bind_tensor(s, t, name);
    }
    free(copy);
    return rc;
}

/* JSON Lines: one record per row, then the verdict. */
static void write_json(FILE *fp, const ulp_report *rep)
{
    for (int i = 0; i < rep->n_rows; i++) {
        const ulp_row *r = &rep->rows[i];
        fprintf(fp, "{\"record\":\"verify\",\"op\":");
        base_json_string(fp, rep->op);
        fprintf(fp, ",\"pass\":");
        base_json_string(fp, rep->pass);
        fprintf(fp, ",\"output\":");
        base_json_string(fp, r->output);
        fprintf(fp, ",\"bound_of\":");
        base_json_string(fp, rep->unknown ? (i < rep->n_rows / 2 ? "tightest" : "loosest") : "declared");
        fprintf(fp, ",\"assumption\":");
        base_json_string(fp, r->assumption);
        fprintf(fp, ",\"shape\":");
        base_json_string(fp, r->shape);
        fprintf(fp, ",\"n\":%lld,\"unit_roundoff\":", (long long)r->n);
        base_json_double(fp, r->unit_roundoff);
        const struct {
            const char *key;
            double v;
        } nums[] = {{"max_err_u", r->max_err_u},     {"rms_err_u", r->rms_err_u},   {"max_bound_u", r->max_bound_u},
                    {"rms_bound_u", r->rms_bound_u}, {"worst_ratio", r->worst_ratio}};
        for (size_t k = 0; k < sizeof nums / sizeof nums[0]; k++) {
            fprintf(fp, ",\"%s\":", nums[k].key);
            base_json_double(fp, nums[k].v);
        }
        fprintf(fp, ",\"worst_index\":%lld,\"worst_detail\":", (long long)r->worst_index);
        base_json_string(fp, r->worst_detail);
        fprintf(fp, ",\"nonfinite\":%lld,\"vacuous\":%s,\"verdict\":\"%s\"}\n", (long long)r->nonfinite,
                r->vacuous ? "true" : "false", r->pass ? "PASS" : "FAIL");
    }
    fprintf(fp, "{\"record\":\"verdict\",\"op\":");
    base_json_string(fp, rep->op);
    fprintf(fp, ",\"pass\":");
    base_json_string(fp, rep->pass);
    fprintf(fp, ",\"verdict\":\"%s\",\"unknown\":%s,\"text\":", rep->pass_verdict ? "PASS" : "FAIL",
            rep->unknown ? "true" : "false");
    base_json_string(fp, rep->verdict);
    fprintf(fp, ",\"diagnosis\":");
    base_json_string(fp, rep->diagnosis);
    fprintf(fp, "}\n");
}

int cmd_verify(int argc, char **argv)
{
    ulp_kernel k = ULP_KERNEL_DEFAULT;
    k.path = NULL;
    const char *op = NULL, *inputs = NULL, *outputs = NULL, *json_path = NULL;
    /* string options first (fields[]), then numbers, then flags */
    static const char *const options[] = {"--inputs", "--outputs", "--path",      "--pass",  "--accum",
                                          "--reduce", "--col-reduce", "--upcast", "--epilogue", "--layout",
                                          "--variance", "--exp", "--function", "--order", "--store", "--softmax",
                                          "--coeffs", "--form", "--angle", "--json", "--base",
                                          "--math-ulps", "--eps", "--alpha", "--beta", "--dloss", "--softcap", "--lr", "--beta1", "--beta2",
                                          "--weight-decay", "--scale", "--split-k", "--step", "--causal", "--gelu", "--online",
                                          "--list"};
    const char **fields[] = {&inputs,   &outputs,      &k.path,     &k.pass,       &k.accum, &k.reduce,
                             &k.col_reduce, &k.upcast, &k.epilogue, &k.layout, &k.variance, &k.exp_form, &k.function,
                             &k.order, &k.store, &k.softmax, &k.coeffs, &k.form, &k.angle, &json_path};
    const int n_options = (int)(sizeof options / sizeof options[0]);
    const int n_fields = (int)(sizeof fields / sizeof fields[0]);
    uint64_t seen = 0; /* one bit per option: more than 32 of them */
    int list = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        int opt = -1;
        for (int o = 0; o < n_options; o++)
            if (strcmp(a, options[o]) == 0) opt = o;
        if (opt < 0) {
            if (a[0] == '-' && a[1])
                return base_error("verify", "unknown option '%s' (options: --inputs --outputs --path --pass --accum --reduce "
                                            "--col-reduce --upcast --variance --exp --function --math-ulps --eps --layout --alpha --beta "
                                            "--gelu --epilogue --split-k --dloss --softcap --online --lr --beta1 --beta2 --weight-decay --step "
                                            "--order --store --softmax --scale --causal --coeffs --form --angle --base --json --list --help)", a);
            if (op) return base_error("verify", "more than one op ('%s' and '%s')", op, a);
            op = a;
            continue;
        }
        if (seen & ((uint64_t)1 << opt)) return base_error("verify", "%s given twice", a);
        seen |= (uint64_t)1 << opt;
        if (strcmp(a, "--list") == 0) {
            list = 1;
            continue;
        }
        if (strcmp(a, "--gelu") == 0 || strcmp(a, "--online") == 0) {
            *(a[2] == 'g' ? &k.gelu : &k.online) = 1;
            continue;
        }
        /* "-" is a value (--json - writes to stdout); "--x" is the next option */
        if (i + 1 >= argc || !argv[i + 1][0] || strncmp(argv[i + 1], "--", 2) == 0)
            return base_error("verify", "%s needs a value", a);
        const char *v = argv[++i];
        if (opt < n_fields) {
            *fields[opt] = v;
        } else if (strcmp(a, "--split-k") == 0) {
            long slices;
            if (base_parse_long_in(v, 1, 1 << 20, &slices) != 0)
                return base_error("verify", "--split-k: '%s' is not a slice count in 1..1048576", v);
            k.split_k = (int)slices;
        } else if (strcmp(a, "--step") == 0) {
            long step;
            if (base_parse_long_in(v, 1, 1l << 40, &step) != 0)
                return base_error("verify", "--step: '%s' is not a step t in 1..2^40", v);
            k.step = step;
        } else if (strcmp(a, "--causal") == 0) {
            if (strcmp(v, "yes") != 0 && strcmp(v, "no") != 0) return base_error("verify", "--causal: '%s' is not yes or no", v);
            k.causal = v[0] == 'y';
        } else {
            double x;
            if (base_parse_double(v, &x) != 0) return base_error("verify", "%s: '%s' is not a number", a, v);
            if (strcmp(a, "--math-ulps") == 0) k.math_ulps = x;
            else if (strcmp(a, "--eps") == 0) k.eps = x;
            else if (strcmp(a, "--alpha") == 0) k.alpha = x;
            else if (strcmp(a, "--dloss") == 0) k.dloss = x;
            else if (strcmp(a, "--softcap") == 0) k.softcap = x;
            else if (strcmp(a, "--lr") == 0) k.lr = x;
            else if (strcmp(a, "--beta1") == 0) k.beta1 = x;
            else if (strcmp(a, "--beta2") == 0) k.beta2 = x;
            else if (strcmp(a, "--weight-decay") == 0) k.weight_decay = x;
            else if (strcmp(a, "--scale") == 0) k.scale = x;
            else if (strcmp(a, "--base") == 0) k.base = x;
            else k.beta = x;
        }
    }
    if (list) {
        ulp_op_help(stdout);
        return 0;
    }
    if (!op) return base_error("verify", "no op given (ops: %s; ulpscope verify --list)", ulp_op_names());
    if (!inputs || !outputs) return base_error("verify", "%s is required", !inputs ? "--inputs" : "--outputs");
    if (!k.path) return base_error("verify", "--path is required (fp32, bf16, fp16; matmul also fp8): the storage format the kernel used");

    /* The names the files bind to: the pass's tensors.  An op or pass that
     * has none: ulp_verify says why, before any file is read. */
    const char *names_in[8], *names_out[8];
    static ulp_report rep;
    char err[1200];
    if (ulp_op_tensors(op, k.pass, 0, names_in, 8) < 0) {
        ulp_verify(op, &k, NULL, 0, NULL, 0, &rep, err, sizeof err);
        return base_error("verify", "%s", err);
    }
    ulp_op_tensors(op, k.pass, 1, names_out, 8);
    if (json_path && base_outfile_check("verify", json_path)) return BASE_EXIT_USAGE; /* before any work */

    tensor_set in = {0}, out = {0};
    int rc = read_files(inputs, "inputs", names_in, names_out, k.path, &in);
    if (!rc) rc = read_files(outputs, "outputs", names_out, names_in, k.path, &out);
    if (!rc) {
        rc = ulp_verify(op, &k, in.bound, in.n_bound, out.bound, out.n_bound, &rep, err, sizeof err);
        if (rc == ULP_BAD_INPUT) {
            rc = base_error("verify", "%s", err);
        } else {
            base_outfile json = {0};
            ulp_report_print(json_path && base_outfile_is_stdout(json_path) ? stderr : stdout, &rep);
            if (json_path) {
                char extra[600];
                /* names ulp_verify accepted: no quotes or escapes in them */
                snprintf(extra, sizeof extra, "\"op\":\"%s\",\"pass\":\"%s\",\"path\":\"%s\"", rep.op, rep.pass, k.path);
                if (base_outfile_open(&json, "verify", json_path) != 0) {
                    rc = 1;
                } else {
                    base_json_header(json.fp, "verify", extra);
                    write_json(json.fp, &rep);
                    if (base_outfile_commit(&json, "verify") != 0) rc = 1;
                }
            }
        }
    }
    free_set(&in);
    free_set(&out);
    return rc;
}
