/* cli/cmd_check.c — `ulpscope check`: every GPU kernel (op x path x variant)
 * against the MPFR reference, with bounds computed from the inputs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/jsonl.h"
#include "base/outfile.h"
#include "base/parse.h"
#include "cli/commands.h"
#include "kernels/check/check.h"
#include "kernels/common/ktensor_io.h"

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: ulpscope check [OP] [--path P] [--variant V] [--bug B] [--seed S] [--quick]\n"
            "                      [--json FILE] [--list]\n\n"
            "Runs each selected op on the GPU at every path (storage format) and variant (an\n"
            "equivalent reordering) on fresh random inputs in several shapes, compares every\n"
            "output element with the MPFR reference and prints one row per shape and output:\n"
            "max and RMS error in units of the path's unit roundoff u (each element's error\n"
            "over u times its own scale), the worst-case bound computed from the inputs\n"
            "(fp32 accumulation and output rounding included), the probabilistic RMS bound,\n"
            "the worst error/bound ratio and PASS/FAIL.  A FAIL row shows its worst element.\n\n"
            "  OP             one op (default: all; --list shows them)\n"
            "  --path P       fp32, bf16, fp16 or fp8 (default: every path the op offers)\n"
            "  --variant V    one of OP's variants (needs OP)\n"
            "  --bug B        plant a bug in the kernels: drop-term (one term of each\n"
            "                 reduction left out, or one element left unwritten) or\n"
            "                 truncate-output (outputs rounded toward zero; fp32 outputs\n"
            "                 truncated to bf16 precision).  Each (op, path, variant) twin\n"
            "                 must then FAIL at least one row\n"
            "  --seed S       base seed of the random inputs, decimal or 0x hex (default:\n"
            "                 fresh, printed)\n"
            "  --quick        fewer, smaller shapes (for sanitizer runs)\n"
            "  --json FILE    also write JSON Lines: a header, one record per row, a summary\n"
            "                 (FILE - is stdout; the table then goes to stderr)\n"
            "  --list         list ops, paths and variants (needs no GPU) and exit\n\n"
            "Exit status: 0 when every row passes; with --bug, 0 only when EVERY twin was\n"
            "caught (had a FAIL row); 1 otherwise, or when a check errors; 2 for bad\n"
            "arguments or when no GPU is usable.\n");
}

static void list_ops(FILE *fp)
{
    int n = 0;
    const kop *const *ops = kregistry_ops(&n);
    for (int i = 0; i < n; i++) {
        char paths[64];
        kregistry_path_names(ops[i], paths, sizeof paths);
        fprintf(fp, "%s: %s\n  paths: %s\n  fp8: %s\n  variants:\n", ops[i]->name, ops[i]->summary, paths,
                ops[i]->fp8_note);
        for (int v = 0; v < ops[i]->n_variants; v++)
            fprintf(fp, "    %-12s%s %s\n", ops[i]->variants[v].name, v == 0 ? "*" : " ", ops[i]->variants[v].summary);
    }
    fprintf(fp, "(* default variant)\n");
}

static uint64_t fresh_seed(void)
{
    uint64_t seed = 0x5eed;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
        if (fread(&seed, sizeof seed, 1, f) != 1) seed = 0x5eed;
        fclose(f);
    }
    return seed;
}

int cmd_check(int argc, char **argv)
{
    kcheck_options o = {0};
    o.path = -1;
    const char *json_path = NULL;
    int list = 0, have_seed = 0;
    static const char *const options[] = {"--path", "--variant", "--bug", "--seed", "--json", "--quick", "--list"};
    unsigned seen = 0; /* options given so far, by their index in options[] */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        /* a following option is not a value: "--json --quick" forgot the file */
        int has_value = i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0;
        for (unsigned k = 0; k < sizeof options / sizeof options[0]; k++)
            if (strcmp(a, options[k]) == 0) {
                if (seen & (1u << k)) return base_error("check", "%s given twice", a);
                seen |= 1u << k;
            }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--list") == 0) {
            list = 1;
        } else if (strcmp(a, "--quick") == 0) {
            o.quick = 1;
        } else if (strcmp(a, "--path") == 0) {
            kpath p;
            if (!has_value) return base_error("check", "--path needs a value (%s)", kpath_names());
            if (kpath_parse(argv[++i], &p) != 0)
                return base_error("check", "unknown path '%s' (paths: %s)", argv[i], kpath_names());
            o.path = p;
        } else if (strcmp(a, "--variant") == 0) {
            if (!has_value) return base_error("check", "--variant needs a value");
            o.variant = argv[++i];
        } else if (strcmp(a, "--bug") == 0) {
            if (!has_value) return base_error("check", "--bug needs a value (drop-term, truncate-output)");
            const char *b = argv[++i];
            int found = 0;
            for (int k = 1; k < KBUG_COUNT; k++)
                if (strcmp(b, kbug_name((kbug)k)) == 0) {
                    o.bug = (kbug)k;
                    found = 1;
                }
            if (!found) return base_error("check", "unknown bug '%s' (bugs: drop-term, truncate-output)", b);
        } else if (strcmp(a, "--seed") == 0) {
            if (!has_value) return base_error("check", "--seed needs a value");
            if (base_parse_seed(argv[++i], &o.seed) != 0)
                return base_error("check", "bad seed '%s' (" BASE_SEED_SYNTAX ")", argv[i]);
            have_seed = 1;
        } else if (strcmp(a, "--json") == 0) {
            if (!has_value || !*argv[i + 1]) return base_error("check", "--json needs a file name (or - for stdout)");
            json_path = argv[++i];
        } else if (a[0] == '-' && a[1]) {
            return base_error("check", "unknown option '%s' (options: --path --variant --bug --seed --quick --json --list --help)", a);
        } else if (!o.op) {
            o.op = a;
        } else {
            return base_error("check", "more than one op ('%s' and '%s'); give one or none", o.op, a);
        }
    }
    char names[1024];
    const kop *op = NULL;
    if (o.op) {
        op = kregistry_find(o.op);
        if (!op) {
            kregistry_op_names(names, sizeof names);
            return base_error("check", "unknown op '%s' (ops: %s)", o.op, names);
        }
        o.op = op->name;
        if (o.path >= 0 && !kop_has_path(op, (kpath)o.path)) {
            kregistry_path_names(op, names, sizeof names);
            return base_error("check", "op %s has no %s path (paths: %s); %s", op->name, kpath_name((kpath)o.path),
                             names, op->fp8_note);
        }
    }
    if (o.variant) {
        if (!op) return base_error("check", "--variant needs an OP (variant names belong to an op)");
        int v = kregistry_variant(op, o.variant);
        if (v < 0) {
            kregistry_variant_names(op, names, sizeof names);
            return base_error("check", "unknown variant '%s' of %s (variants: %s)", o.variant, op->name, names);
        }
        o.variant = op->variants[v].name;
    }
    if (list) {
        list_ops(stdout);
        return 0;
    }
    if (json_path && base_outfile_check("check", json_path)) return BASE_EXIT_USAGE; /* before any work */
    char why[256];
    if (!kernels_gpu_available(why, sizeof why)) {
        return base_error("check", "no GPU to run the kernels on: %s", why);
    }
    if (!have_seed) o.seed = fresh_seed();

    kdevice_props dev;
    if (kdevice_describe(&dev) != 0) {
        fprintf(stderr, "ulpscope check: error: %s\n", kernels_last_error());
        return 1;
    }
    base_outfile out = {0};
    if (json_path && base_outfile_open(&out, "check", json_path) != 0) return 1;
    FILE *table = json_path && base_outfile_is_stdout(json_path) ? stderr : stdout;
    fprintf(table, "ulpscope check: %s (cc %d.%d, %d SMs), driver %d, runtime %d; seed 0x%llx%s%s%s\n", dev.name,
            dev.cc_major, dev.cc_minor, dev.multiprocessors, dev.driver_version, dev.runtime_version,
            (unsigned long long)o.seed, o.bug ? "; planted bug " : "", o.bug ? kbug_name(o.bug) : "",
            o.quick ? "; quick" : "");
    o.table = table;
    if (json_path) {
        char extra[1024], dev_json[300];
        /* the device name is plain ASCII from the driver; quotes cannot occur */
        snprintf(dev_json, sizeof dev_json, "%s", dev.name);
        for (char *c = dev_json; *c; c++)
            if (*c == '"' || *c == '\\') *c = ' ';
        snprintf(extra, sizeof extra,
                 "\"device\":\"%s\",\"compute_capability\":\"%d.%d\",\"driver\":%d,\"runtime\":%d,\"seed\":\"0x%llx\","
                 "\"bug\":\"%s\",\"quick\":%s,\"op\":\"%s\",\"path\":\"%s\",\"variant\":\"%s\"",
                 dev_json, dev.cc_major, dev.cc_minor, dev.driver_version, dev.runtime_version,
                 (unsigned long long)o.seed, kbug_name(o.bug), o.quick ? "true" : "false", o.op ? o.op : "all",
                 o.path >= 0 ? kpath_name((kpath)o.path) : "all", o.variant ? o.variant : "all");
        base_json_header(out.fp, "check", extra);
        o.json = out.fp;
    }
    kcheck_summary summary;
    int status = kcheck_run(&o, &summary);
    if (json_path && base_outfile_commit(&out, "check") != 0) return 1;
    return status;
}
