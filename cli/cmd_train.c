/* cli/cmd_train.c — `ulpscope train`: train a GPT whose every kernel slot
 * follows a numerics plan (trainer/train.h does the work). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "base/parse.h"
#include "cli/commands.h"
#include "kernels/kernels.h"
#include "trainer/train.h"

static void usage(FILE *fp)
{
    fprintf(fp,
        "usage: ulpscope train [options]\n\n"
        "Trains a decoder-only transformer; every kernel slot runs the path and variant of the plan.\n"
        "Progress lines on stderr, one JSON record per step in --log.\n\n"
        "model:   --model gpt2|modern (gpt2)  --depth L (2)  --width C (64)  --heads H (4)\n"
        "         --context N (= --seq)  --vocab V (256 for text, 50304 for shards)  --norm-gain 0|1 (modern: 0)\n"
        "         --softcap X (modern: 0 = off)\n"
        "plan:    --plan fp32|bf16|fp16|fp8 (bf16)  --set SLOT=PATH[:VARIANT],...  (see ulpscope plan --explain)\n"
        "backend: --backend cpu|cuda (cpu)\n"
        "data:    --data PATH (text file: bytes; directory of .bin token shards; one .bin shard;\n"
        "         default: the embedded corpus)  --val-frac F (0.1)\n"
        "batch:   --batch B (4)  --seq T (64)  --accum A (1)  --steps N (100)\n"
        "optim:   --lr X (1e-3)  --warmup N (10)  --schedule cosine|linear  --cooldown F (1: whole run)\n"
        "         --min-lr-frac F (0.1)  --wd X (0.1)  --beta1 --beta2 --eps  --grad-clip X (1; 0 = off)\n"
        "         --muon-lr X (0.02)  --muon-momentum X (0.95)\n"
        "run:     --seed S (1337)  --val-every N (0: end only)  --val-batches N (4)  --log FILE.jsonl\n"
        "         --progress-every N (10)  --quiet  --peak-tflops X (MFU denominator; cuda on H100/H200: 989.4)\n"
        "         --profile (synchronise after every slot; print where the time goes)\n"
        "ckpt:    --ckpt FILE  --ckpt-every N  --resume FILE (model and plan come from it)  --stop-after K\n"
        "         --max-seconds S (stop after S seconds of training; the schedule still assumes --steps)\n"
        "hooks:   --hash-slots S1,S2|all  --dump-slots S1,S2|all  --at-steps 0,10,...  --dump-dir DIR\n"
        "         --switch-at STEP:SLOT=PATH[:VARIANT],...  (repeatable: change slots before that step)\n"
        "dp:      --world N --rank R --nccl-id FILE  (one process per GPU, --backend cuda)\n");
}

/* "a,b,c" or "all" -> slot mask */
static int parse_slots(const char *list, const tplan *plan, unsigned char mask[TSLOT_COUNT], char *err, size_t len)
{
    if (strcmp(list, "all") == 0) {
        for (int s = 0; s < TSLOT_COUNT; s++) mask[s] = plan->used[s];
        return 0;
    }
    char *copy = strdup(list), *save = NULL;
    int rc = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok && !rc; tok = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (int s = 0; s < TSLOT_COUNT; s++)
            if (plan->used[s] && strcmp(tok, tslot_get((tslot)s)->name) == 0) mask[s] = found = 1;
        if (!found) {
            size_t n = (size_t)snprintf(err, len, "unknown slot '%s' for hooks (slots:", tok);
            for (int s = 0; s < TSLOT_COUNT; s++)
                if (plan->used[s] && n < len) n += (size_t)snprintf(err + n, len - n, " %s", tslot_get((tslot)s)->name);
            if (n < len) snprintf(err + n, len - n, "; or all)");
            rc = -1;
        }
    }
    free(copy);
    return rc;
}

static int parse_steps(const char *list, ttrain_config *c)
{
    char *copy = strdup(list), *save = NULL;
    int rc = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok && !rc; tok = strtok_r(NULL, ",", &save)) {
        long v;
        if (c->n_at_steps == TTRAIN_MAX_AT_STEPS || base_parse_long(tok, &v) || v < 0) rc = -1;
        else c->at_steps[c->n_at_steps++] = v;
    }
    free(copy);
    return rc;
}

int cmd_train(int argc, char **argv)
{
    ttrain_config c;
    ttrain_config_defaults(&c);
    const char *model_name = "gpt2", *preset = "bf16", *hash_list = NULL, *dump_list = NULL, *schedule = "cosine";
    const char *sets[32];
    int n_sets = 0, quiet = 0, norm_gain = -1;
    long depth = 2, width = 64, heads = 4, context = 0, vocab = 0;
    double softcap = 0.0, peak_tflops = -1.0;
    int model_flags = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long lv = 0;
        double dv = 0;
#define LONG_OPT(name, dst, min)                                                                            \
    if (strcmp(a, name) == 0) {                                                                             \
        if (!v || base_parse_long(v, &lv) || lv < (min))                                                     \
            return base_error("train", "%s needs an integer >= %ld, got '%s'", name, (long)(min), v ? v : ""); \
        dst = lv;                                                                                           \
        i++;                                                                                                \
        continue;                                                                                           \
    }
#define DOUBLE_OPT(name, dst, min)                                                                    \
    if (strcmp(a, name) == 0) {                                                                       \
        if (!v || base_parse_double(v, &dv) || dv < (min) || !isfinite(dv))                            \
            return base_error("train", "%s needs a number >= %g, got '%s'", name, (double)(min), v ? v : ""); \
        dst = dv;                                                                                     \
        i++;                                                                                          \
        continue;                                                                                     \
    }
#define STR_OPT(name, dst)                                                               \
    if (strcmp(a, name) == 0) {                                                          \
        if (!v) return base_error("train", "%s needs a value", name);                     \
        dst = v;                                                                         \
        i++;                                                                             \
        continue;                                                                        \
    }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(a, "--quiet") == 0) {
            quiet = 1;
            continue;
        }
        if (strcmp(a, "--profile") == 0) {
            c.profile = 1;
            continue;
        }
        if (strcmp(a, "--set") == 0) {
            if (!v) return base_error("train", "--set needs SLOT=PATH[:VARIANT]");
            if (n_sets == 32) return base_error("train", "too many --set options");
            sets[n_sets++] = v;
            i++;
            model_flags = 1;
            continue;
        }
        if (strcmp(a, "--switch-at") == 0) {
            const char *colon = v ? strchr(v, ':') : NULL;
            char num[32];
            if (!colon || colon == v || (size_t)(colon - v) >= sizeof num || c.n_switches == TTRAIN_MAX_SWITCHES)
                return base_error("train", "--switch-at needs STEP:SLOT=PATH[:VARIANT],..., got '%s'", v ? v : "");
            memcpy(num, v, (size_t)(colon - v));
            num[colon - v] = '\0';
            if (base_parse_long(num, &lv) || lv < 0) return base_error("train", "--switch-at: bad step '%s'", num);
            c.switches[c.n_switches].step = lv;
            snprintf(c.switches[c.n_switches].overrides, sizeof c.switches[0].overrides, "%s", colon + 1);
            c.n_switches++;
            i++;
            continue;
        }
        if (strcmp(a, "--at-steps") == 0) {
            if (!v || parse_steps(v, &c)) return base_error("train", "--at-steps needs steps >= 0 like 0,10,20 (at most %d), got '%s'", TTRAIN_MAX_AT_STEPS, v ? v : "");
            i++;
            continue;
        }
        if (strcmp(a, "--model") == 0 || strcmp(a, "--plan") == 0 || strcmp(a, "--depth") == 0 ||
            strcmp(a, "--width") == 0 || strcmp(a, "--heads") == 0 || strcmp(a, "--context") == 0 ||
            strcmp(a, "--vocab") == 0 || strcmp(a, "--norm-gain") == 0 || strcmp(a, "--softcap") == 0)
            model_flags = 1;
        STR_OPT("--model", model_name)
        STR_OPT("--plan", preset)
        STR_OPT("--backend", c.backend)
        STR_OPT("--data", c.data_path)
        STR_OPT("--log", c.log_path)
        STR_OPT("--ckpt", c.ckpt_path)
        STR_OPT("--resume", c.resume_path)
        STR_OPT("--hash-slots", hash_list)
        STR_OPT("--dump-slots", dump_list)
        STR_OPT("--dump-dir", c.dump_dir)
        STR_OPT("--schedule", schedule)
        STR_OPT("--nccl-id", c.nccl_id_file)
        LONG_OPT("--depth", depth, 1)
        LONG_OPT("--width", width, 1)
        LONG_OPT("--heads", heads, 1)
        LONG_OPT("--context", context, 1)
        LONG_OPT("--vocab", vocab, 2)
        LONG_OPT("--norm-gain", norm_gain, 0)
        LONG_OPT("--batch", c.batch, 1)
        LONG_OPT("--seq", c.seq, 1)
        LONG_OPT("--accum", c.accum, 1)
        LONG_OPT("--steps", c.steps, 1)
        LONG_OPT("--warmup", c.warmup, 0)
        LONG_OPT("--val-every", c.val_every, 0)
        LONG_OPT("--val-batches", c.val_batches, 1)
        LONG_OPT("--progress-every", c.progress_every, 1)
        LONG_OPT("--ckpt-every", c.ckpt_every, 0)
        LONG_OPT("--stop-after", c.stop_after, 1)
        LONG_OPT("--world", c.world, 1)
        LONG_OPT("--rank", c.rank, 0)
        DOUBLE_OPT("--softcap", softcap, 0)
        DOUBLE_OPT("--val-frac", c.val_frac, 0)
        DOUBLE_OPT("--lr", c.lr, 0)
        DOUBLE_OPT("--cooldown", c.cooldown_frac, 0)
        DOUBLE_OPT("--min-lr-frac", c.min_lr_frac, 0)
        DOUBLE_OPT("--wd", c.weight_decay, 0)
        DOUBLE_OPT("--beta1", c.beta1, 0)
        DOUBLE_OPT("--beta2", c.beta2, 0)
        DOUBLE_OPT("--eps", c.adam_eps, 0)
        DOUBLE_OPT("--grad-clip", c.grad_clip, 0)
        DOUBLE_OPT("--muon-lr", c.muon_lr, 0)
        DOUBLE_OPT("--muon-momentum", c.muon_momentum, 0)
        DOUBLE_OPT("--peak-tflops", peak_tflops, 0)
        DOUBLE_OPT("--max-seconds", c.max_seconds, 0)
        if (strcmp(a, "--seed") == 0) {
            if (!v || base_parse_long(v, &lv)) return base_error("train", "--seed needs an integer, got '%s'", v ? v : "");
            c.seed = (uint64_t)lv;
            i++;
            continue;
        }
        return base_error("train", "unknown or incomplete option '%s' (ulpscope train --help lists them)", a);
#undef LONG_OPT
#undef DOUBLE_OPT
#undef STR_OPT
    }
    if (c.cooldown_frac > 1.0 || c.min_lr_frac > 1.0 || c.beta1 >= 1.0 || c.beta2 >= 1.0 || c.muon_momentum >= 1.0)
        return base_error("train", "--cooldown and --min-lr-frac must be <= 1, betas and momentum < 1");
    if (strcmp(schedule, "cosine") == 0) c.schedule = TSCHED_COSINE;
    else if (strcmp(schedule, "linear") == 0) c.schedule = TSCHED_LINEAR;
    else return base_error("train", "unknown schedule '%s' (schedules: cosine, linear)", schedule);
    if (strcmp(c.backend, "cpu") != 0 && strcmp(c.backend, "cuda") != 0)
        return base_error("train", "unknown backend '%s' (backends: cpu, cuda)", c.backend);

    char err[2048];
    if (c.resume_path) {
        /* the checkpoint fixes the model and the plan */
        if (model_flags)
            return base_error("train", "--resume takes the model and plan from the checkpoint; drop --model/--plan/"
                                      "--set/sizes (use --switch-at to change slots)");
        char json[8192];
        tckpt_state st;
        if (tckpt_peek(c.resume_path, &c.model, json, sizeof json, &st, err, sizeof err) ||
            tplan_from_json(&c.plan, json, err, sizeof err))
            return base_error("train", "%s", err);
        c.seed = st.seed;
    } else {
        tmodel_kind kind;
        if (tmodel_kind_parse(model_name, &kind))
            return base_error("train", "unknown model '%s' (models: gpt2, modern)", model_name);
        int is_shards = 0;
        struct stat st;
        if (c.data_path && stat(c.data_path, &st) == 0) {
            size_t n = strlen(c.data_path);
            is_shards = S_ISDIR(st.st_mode) || (n > 4 && strcmp(c.data_path + n - 4, ".bin") == 0);
        }
        if (vocab == 0) vocab = is_shards ? 50304 : 256; /* GPT-2's 50257 padded to a multiple of 128 (llm.c) */
        if (tmodel_config_init(&c.model, kind, (int)depth, (int)width, (int)heads, (int)vocab,
                               (int)(context ? context : c.seq), err, sizeof err))
            return base_error("train", "%s", err);
        if (norm_gain >= 0) {
            if (kind != TMODEL_MODERN) return base_error("train", "--norm-gain applies to --model modern only");
            c.model.norm_gain = norm_gain != 0;
        }
        if (softcap > 0) {
            if (kind != TMODEL_MODERN) return base_error("train", "--softcap applies to --model modern only");
            c.model.softcap = softcap;
        }
        if (is_shards) c.shard_vocab = vocab < 50257 ? (int)vocab : 50257;
        if (tplan_init(&c.plan, preset, kind, err, sizeof err)) return base_error("train", "%s", err);
        for (int i = 0; i < n_sets; i++)
            if (tplan_set(&c.plan, sets[i], err, sizeof err)) return base_error("train", "%s", err);
    }
    if (hash_list && parse_slots(hash_list, &c.plan, c.hash_slot, err, sizeof err)) return base_error("train", "%s", err);
    if (dump_list && parse_slots(dump_list, &c.plan, c.dump_slot, err, sizeof err)) return base_error("train", "%s", err);
    if ((hash_list || dump_list) && c.n_at_steps == 0)
        return base_error("train", "--hash-slots/--dump-slots need --at-steps (the steps to fire at)");
    for (int i = 0; i < c.n_switches; i++) {
        tplan probe = c.plan;
        if (tplan_set(&probe, c.switches[i].overrides, err, sizeof err))
            return base_error("train", "--switch-at %ld: %s", c.switches[i].step, err);
    }
    if (c.world > 1 && !c.nccl_id_file) return base_error("train", "--world %d needs --nccl-id FILE", c.world);
    if (peak_tflops > 0) c.peak_flops = peak_tflops * 1e12;
    else if (peak_tflops < 0 && strcmp(c.backend, "cuda") == 0) c.peak_flops = 989.4e12; /* H100/H200 SXM dense bf16 */
    c.progress = quiet ? NULL : stderr;

    ttrain_result res;
    int status = ttrain_run(&c, &res);
    if (status == 2) {
        base_error("train", "%s", res.error);
        ttrain_result_free(&res);
        return BASE_EXIT_USAGE;
    }
    if (status) {
        fprintf(stderr, "ulpscope train: error: %s\n", res.error);
        ttrain_result_free(&res);
        return status;
    }
    if (!quiet)
        fprintf(stderr, "done: %ld steps, final val loss %.4f, %.0f tokens/s, peak %.1f MiB of tensors\n",
                res.steps_done, res.final_val_loss, res.tokens_per_s, (double)res.peak_bytes / 1048576.0);
    ttrain_result_free(&res);
    return 0;
}
