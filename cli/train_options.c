/* cli/train_options.c — see train_options.h. */
#include "cli/train_options.h"

#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "base/parse.h"

#define F(field) offsetof(train_options, field)
#define BIG ((double)TTRAIN_SIZE_MAX)
#define STEPS_MAX ((double)TTRAIN_STEPS_MAX)

static const copt train_opts[] = {
    {"--model", COPT_STRING, F(model_name), 0, 0, "model", "gpt2|modern", "(gpt2)", NULL, 0},
    {"--depth", COPT_INT, F(depth), 1, TPLAN_MAX_LAYERS, "model", "L", "(2)", NULL, 0},
    {"--width", COPT_INT, F(width), 1, TMODEL_WIDTH_MAX, "model", "C", "(64)", NULL, 0},
    {"--heads", COPT_INT, F(heads), 1, TMODEL_HEADS_MAX, "model", "H", "(4)", NULL, 0},
    {"--context", COPT_INT, F(context), 1, TMODEL_CONTEXT_MAX, "model", "N", "(= --seq)", NULL, 0},
    {"--vocab", COPT_INT, F(vocab), 2, TMODEL_VOCAB_MAX, "model", "V", "(256 for text, 50304 for shards)", NULL, 0},
    {"--norm-gain", COPT_INT, F(norm_gain), 0, 1, "model", "0|1", "(modern: 0)", NULL, 0},
    {"--softcap", COPT_DOUBLE, F(softcap), 0, INFINITY, "model", "X", "(modern: 0 = off)", NULL, 0},
    {"--plan", COPT_STRING, F(preset), 0, 0, "plan", "fp32|bf16|fp16|fp8", "(bf16)", NULL, 0},
    {"--set", COPT_LIST, F(sets), 0, 0, "plan", "SLOT[@LAYERS]=PATH[:VARIANT],...",
     "(repeatable; see ulpscope plan --help)", NULL, 0},
    {"--gpu-model", COPT_STRING, F(gpu_model), 0, 0, "plan", "native|v100|a100|h100|b200",
     "(native; applied after every --set: see ulpscope plan --help)", NULL, 0},
    {"--backend", COPT_STRING, F(cfg.backend), 0, 0, "backend", "cpu|cuda", "(cpu)", NULL, 0},
    {"--data", COPT_STRING, F(cfg.data_path), 0, 0, "data", "PATH",
     "(text file: bytes; directory of .bin token shards; one .bin shard; default: the embedded corpus)", NULL, 0},
    {"--val-frac", COPT_DOUBLE, F(cfg.val_frac), 0, 1, "data", "F", "(0.1)", NULL, COPT_MAX_OPEN},
    {"--batch", COPT_INT, F(cfg.batch), 1, BIG, "batch", "B", "(4)", NULL, 0},
    {"--seq", COPT_INT, F(cfg.seq), 1, BIG, "batch", "T", "(64)", NULL, 0},
    {"--accum", COPT_INT, F(cfg.accum), 1, BIG, "batch", "A", "(1)", NULL, 0},
    {"--steps", COPT_LONG, F(cfg.steps), 1, STEPS_MAX, "batch", "N", "(100)", NULL, 0},
    {"--lr", COPT_DOUBLE, F(cfg.lr), 0, INFINITY, "optim", "X", "(1e-3)", NULL, 0},
    {"--warmup", COPT_LONG, F(cfg.warmup), 0, STEPS_MAX, "optim", "N", "(10)", NULL, 0},
    {"--schedule", COPT_STRING, F(schedule), 0, 0, "optim", "cosine|linear", "(cosine)", NULL, 0},
    {"--cooldown", COPT_DOUBLE, F(cfg.cooldown_frac), 0, 1, "optim", "F", "(1: whole run)", NULL, 0},
    {"--min-lr-frac", COPT_DOUBLE, F(cfg.min_lr_frac), 0, 1, "optim", "F", "(0.1)", NULL, 0},
    {"--wd", COPT_DOUBLE, F(cfg.weight_decay), 0, INFINITY, "optim", "X", "(0.1)", NULL, 0},
    {"--beta1", COPT_DOUBLE, F(cfg.beta1), 0, 1, "optim", "X", "(0.9)", NULL, COPT_MAX_OPEN},
    {"--beta2", COPT_DOUBLE, F(cfg.beta2), 0, 1, "optim", "X", "(0.95)", NULL, COPT_MAX_OPEN},
    {"--eps", COPT_DOUBLE, F(cfg.adam_eps), 0, INFINITY, "optim", "X", "(1e-8)", NULL, 0},
    {"--grad-clip", COPT_DOUBLE, F(cfg.grad_clip), 0, INFINITY, "optim", "X", "(1; 0 = off)", NULL, 0},
    {"--muon-lr", COPT_DOUBLE, F(cfg.muon_lr), 0, INFINITY, "optim", "X", "(0.02)", NULL, 0},
    {"--muon-momentum", COPT_DOUBLE, F(cfg.muon_momentum), 0, 1, "optim", "X", "(0.95)", NULL, COPT_MAX_OPEN},
    {"--seed", COPT_SEED, F(cfg.seed), 0, 0, "run", "S", "(1337; decimal or 0x hex)", NULL, 0},
    {"--data-seed", COPT_SEED, F(cfg.data_seed), 0, 0, "run", "S", "(= --seed: the batch order; init uses --seed)", NULL, 0},
    {"--val-every", COPT_LONG, F(cfg.val_every), 0, STEPS_MAX, "run", "N", "(0: end only)", NULL, 0},
    {"--val-batches", COPT_INT, F(cfg.val_batches), 1, BIG, "run", "N", "(4)", NULL, 0},
    {"--log", COPT_STRING, F(cfg.log_path), 0, 0, "run", "FILE.jsonl", "(written as the run goes; - : stdout)", NULL, 0},
    {"--progress-every", COPT_LONG, F(cfg.progress_every), 1, STEPS_MAX, "run", "N", "(10)", NULL, 0},
    {"--quiet", COPT_FLAG, F(quiet), 0, 0, "run", NULL, "", NULL, 0},
    {"--peak-tflops", COPT_DOUBLE, F(peak_tflops), 0, INFINITY, "run", "X",
     "(MFU denominator; cuda on H100/H200: 989.4)", NULL, 0},
    {"--profile", COPT_FLAG, F(cfg.profile), 0, 0, "run", NULL, "(synchronise after every slot; print where the time goes)",
     NULL, 0},
    {"--ckpt", COPT_STRING, F(cfg.ckpt_path), 0, 0, "ckpt", "FILE",
     "(at the end, every --ckpt-every steps, and when interrupted)", NULL, 0},
    {"--ckpt-every", COPT_LONG, F(cfg.ckpt_every), 0, STEPS_MAX, "ckpt", "N", "", NULL, 0},
    {"--resume", COPT_STRING, F(cfg.resume_path), 0, 0, "ckpt", "FILE", "(settings not given come from it; see below)",
     NULL, 0},
    {"--stop-after", COPT_LONG, F(cfg.stop_after), 1, STEPS_MAX, "ckpt", "K", "", NULL, 0},
    {"--max-seconds", COPT_DOUBLE, F(cfg.max_seconds), 0, INFINITY, "ckpt", "S",
     "(stop after S seconds of training; the schedule still assumes --steps)", NULL, 0},
    {"--hash-slots", COPT_STRING, F(hash_list), 0, 0, "hooks", "S1,S2|all", "", NULL, 0},
    {"--dump-slots", COPT_STRING, F(dump_list), 0, 0, "hooks", "S1,S2|all", "", NULL, 0},
    {"--at-steps", COPT_STRING, F(at_steps), 0, 0, "hooks", "0,10,...", "(the steps hash and dump hooks fire at)", NULL, 0},
    {"--dump-dir", COPT_STRING, F(cfg.dump_dir), 0, 0, "hooks", "DIR", "", NULL, 0},
    {"--switch-at", COPT_LIST, F(switches), 0, 0, "hooks", "STEP:SLOT[@LAYERS]=PATH[:VARIANT],...",
     "(repeatable: change slots before that step)", NULL, 0},
    {"--world", COPT_INT, F(cfg.world), 1, TTRAIN_WORLD_MAX, "dp", "N", "(one process per GPU, --backend cuda)", NULL, 0},
    {"--rank", COPT_INT, F(cfg.rank), 0, 1023, "dp", "R", "", NULL, 0},
    {"--nccl-id", COPT_STRING, F(cfg.nccl_id_file), 0, 0, "dp", "FILE", "", NULL, 0},
    {"--help", COPT_FLAG, F(help), 0, 0, "help", NULL, "", NULL, 0},
    {"-h", COPT_FLAG, F(help), 0, 0, "help", NULL, "", NULL, 0},
};

#undef F

void train_options_defaults(train_options *t)
{
    memset(t, 0, sizeof *t);
    ttrain_config_defaults(&t->cfg);
    t->model_name = "gpt2";
    t->preset = "bf16";
    t->gpu_model = "native";
    t->schedule = "cosine";
    t->depth = 2;
    t->width = 64;
    t->heads = 4;
    t->norm_gain = -1;
    t->peak_tflops = -1.0;
}

copt_table train_options_table(train_options *t)
{
    return (copt_table){train_opts, (int)(sizeof train_opts / sizeof train_opts[0]), t};
}

/* "a,b,c" or "all" -> slot mask; empty items are errors */
static int parse_slots(const char *cmd, const char *opt, const char *list, const tplan *plan,
                       unsigned char mask[TSLOT_COUNT])
{
    if (strcmp(list, "all") == 0) {
        for (int s = 0; s < TSLOT_COUNT; s++) mask[s] = plan->used[s];
        return 0;
    }
    const char *item = list;
    for (;;) {
        const char *comma = strchr(item, ',');
        size_t n = comma ? (size_t)(comma - item) : strlen(item);
        int found = 0;
        for (int s = 0; s < TSLOT_COUNT && n; s++)
            if (plan->used[s] && strlen(tslot_get((tslot)s)->name) == n && strncmp(item, tslot_get((tslot)s)->name, n) == 0)
                mask[s] = found = 1;
        if (!found) {
            char names[2048];
            size_t k = 0;
            names[0] = '\0';
            for (int s = 0; s < TSLOT_COUNT; s++)
                if (plan->used[s])
                    k += (size_t)snprintf(names + k, k < sizeof names ? sizeof names - k : 0, "%s%s", k ? " " : "",
                                          tslot_get((tslot)s)->name);
            if (!n) return base_error(cmd, "%s '%s': empty slot name (slots: %s; or all)", opt, list, names);
            return base_error(cmd, "unknown slot '%.*s' for hooks (slots: %s; or all)", (int)n, item, names);
        }
        if (!comma) return 0;
        item = comma + 1;
    }
}

/* "0,10,20": steps at which the hooks fire, each a step the run has */
static int parse_at_steps(const char *cmd, const char *list, ttrain_config *c)
{
    const char *item = list;
    for (;;) {
        const char *comma = strchr(item, ',');
        char num[32];
        size_t n = comma ? (size_t)(comma - item) : strlen(item);
        long v;
        if (n == 0 || n >= sizeof num)
            return base_error(cmd, "--at-steps needs steps like 0,10,20, got '%s'", list);
        memcpy(num, item, n);
        num[n] = '\0';
        if (base_parse_long(num, &v) || v < 0)
            return base_error(cmd, "--at-steps: '%s' is not a step (an integer >= 0)", num);
        if (v >= c->steps)
            return base_error(cmd, "--at-steps %ld can never fire: the run has steps 0..%ld (--steps %ld)", v,
                             c->steps - 1, c->steps);
        if (c->n_at_steps == TTRAIN_MAX_AT_STEPS)
            return base_error(cmd, "--at-steps lists more than %d steps", TTRAIN_MAX_AT_STEPS);
        c->at_steps[c->n_at_steps++] = v;
        if (!comma) return 0;
        item = comma + 1;
    }
}

/* "STEP:OVERRIDES" (any length), checked against the plan and the depth */
static int parse_switch(const char *cmd, const char *v, ttrain_config *c)
{
    const char *colon = strchr(v, ':');
    char num[32];
    long step;
    if (!colon || colon == v || (size_t)(colon - v) >= sizeof num)
        return base_error(cmd, "--switch-at needs STEP:SLOT[@LAYERS]=PATH[:VARIANT],..., got '%s'", v);
    memcpy(num, v, (size_t)(colon - v));
    num[colon - v] = '\0';
    if (base_parse_long(num, &step) || step < 0) return base_error(cmd, "--switch-at: bad step '%s'", num);
    if (step >= c->steps)
        return base_error(cmd, "--switch-at %ld can never fire: the run has steps 0..%ld (--steps %ld)", step,
                         c->steps - 1, c->steps);
    if (c->n_switches == TTRAIN_MAX_SWITCHES) return base_error(cmd, "more than %d --switch-at", TTRAIN_MAX_SWITCHES);
    tplan *probe = malloc(sizeof *probe);
    if (!probe) return base_error(cmd, "out of memory");
    *probe = c->plan;
    char err[2048];
    int bad = tplan_set(probe, colon + 1, err, sizeof err) || tplan_check_layers(probe, c->model.n_layer, err, sizeof err);
    free(probe);
    if (bad) return base_error(cmd, "--switch-at %ld: %s", step, err);
    c->switches[c->n_switches].step = step;
    c->switches[c->n_switches].overrides = colon + 1;
    c->n_switches++;
    return 0;
}

/* The plan from --plan and --set for the model in t->cfg. */
static int build_plan(train_options *t, const char *cmd)
{
    ttrain_config *c = &t->cfg;
    char err[2048];
    tgpu_model gpu;
    if (tgpu_model_parse(t->gpu_model, &gpu))
        return base_error(cmd, "unknown --gpu-model '%s' (models: %s)", t->gpu_model, tgpu_model_names());
    if (tplan_init(&c->plan, t->preset, c->model.kind, err, sizeof err)) return base_error(cmd, "%s", err);
    for (int i = 0; i < t->sets.n; i++)
        if (tplan_set(&c->plan, t->sets.items[i], err, sizeof err)) return base_error(cmd, "%s", err);
    /* the GPU the whole plan runs on: after every --set, as a last --set gpu_model=GEN would be */
    if (tplan_set_gpu_model(&c->plan, gpu, err, sizeof err)) return base_error(cmd, "%s", err);
    if (tplan_check_layers(&c->plan, c->model.n_layer, err, sizeof err)) return base_error(cmd, "%s", err);
    return 0;
}

/* The model and plan of a fresh run. */
static int build_model_and_plan(train_options *t, const char *cmd)
{
    ttrain_config *c = &t->cfg;
    char err[2048];
    tmodel_kind kind;
    if (tmodel_kind_parse(t->model_name, &kind))
        return base_error(cmd, "unknown model '%s' (models: gpt2, modern)", t->model_name);
    int is_shards = 0;
    struct stat st;
    if (c->data_path && stat(c->data_path, &st) == 0) {
        size_t n = strlen(c->data_path);
        is_shards = S_ISDIR(st.st_mode) || (n > 4 && strcmp(c->data_path + n - 4, ".bin") == 0);
    }
    int vocab = t->vocab ? t->vocab : is_shards ? 50304 : 256; /* GPT-2's 50257 padded to a multiple of 128 (llm.c) */
    if (tmodel_config_init(&c->model, kind, t->depth, t->width, t->heads, vocab, t->context ? t->context : c->seq, err,
                           sizeof err))
        return base_error(cmd, "%s", err);
    if (t->norm_gain >= 0) {
        if (kind != TMODEL_MODERN) return base_error(cmd, "--norm-gain applies to --model modern only");
        c->model.norm_gain = t->norm_gain != 0;
    }
    if (copt_given(&t->seen, "--softcap")) {
        if (kind != TMODEL_MODERN) return base_error(cmd, "--softcap applies to --model modern only");
        c->model.softcap = t->softcap;
    }
    if (is_shards) c->shard_vocab = vocab < 50257 ? vocab : 50257;
    return build_plan(t, cmd);
}

/* --resume: the checkpoint's settings for every one not given.  Those
 * given are kept as given; ttrain_run lists each that differs from the
 * checkpoint's and refuses the run (a model option sets its own field, so
 * that the difference is named). */
static int take_from_checkpoint(train_options *t, const char *cmd)
{
    ttrain_config *c = &t->cfg;
    char err[2048];
    tckpt_info *ck = t->resumed = malloc(sizeof *ck);
    if (!ck) return base_error(cmd, "out of memory");
    if (tckpt_info_read(c->resume_path, ck, err, sizeof err)) return base_error(cmd, "%s", err);
    int n;
    const tsetting *set = ttrain_settings(&n);
    for (int i = 0; i < n; i++)
        if (!set[i].option || !copt_given(&t->seen, set[i].option)) ttrain_setting_copy(c, &ck->run, &set[i]);
    c->model = ck->run.model;
    if (copt_given(&t->seen, "--model") && tmodel_kind_parse(t->model_name, &c->model.kind))
        return base_error(cmd, "unknown model '%s' (models: gpt2, modern)", t->model_name);
    const struct { const char *option; int value; int *field; } sizes[] = {
        {"--depth", t->depth, &c->model.n_layer},  {"--width", t->width, &c->model.n_embd},
        {"--heads", t->heads, &c->model.n_head},   {"--context", t->context, &c->model.seq_len},
        {"--vocab", t->vocab, &c->model.vocab},    {"--norm-gain", t->norm_gain, &c->model.norm_gain},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (copt_given(&t->seen, sizes[i].option)) *sizes[i].field = sizes[i].value;
    if (copt_given(&t->seen, "--softcap")) c->model.softcap = t->softcap;
    if (copt_given(&t->seen, "--plan") || copt_given(&t->seen, "--set") || copt_given(&t->seen, "--gpu-model")) {
        if (tmodel_config_check(&c->model, err, sizeof err)) return base_error(cmd, "%s", err);
        if (build_plan(t, cmd)) return BASE_EXIT_USAGE;
    } else {
        c->plan = ck->run.plan;
    }
    if (!copt_given(&t->seen, "--data")) c->data_path = ck->run.data_path;
    if (!copt_given(&t->seen, "--backend")) c->backend = ck->run.backend;
    if (!copt_given(&t->seen, "--switch-at")) {
        c->n_switches = ck->run.n_switches;
        memcpy(c->switches, ck->run.switches, sizeof c->switches);
    }
    return 0;
}

int train_options_finish(train_options *t, const char *cmd)
{
    ttrain_config *c = &t->cfg;
    if (strcmp(t->schedule, "cosine") == 0) c->schedule = TSCHED_COSINE;
    else if (strcmp(t->schedule, "linear") == 0) c->schedule = TSCHED_LINEAR;
    else return base_error(cmd, "unknown schedule '%s' (schedules: cosine, linear)", t->schedule);
    if (strcmp(c->backend, "cpu") != 0 && strcmp(c->backend, "cuda") != 0)
        return base_error(cmd, "unknown backend '%s' (backends: cpu, cuda)", c->backend);
    if (!copt_given(&t->seen, "--data-seed")) c->data_seed = c->seed; /* one seed unless told apart */
    if (c->resume_path ? take_from_checkpoint(t, cmd) : build_model_and_plan(t, cmd)) return BASE_EXIT_USAGE;
    /* data parallel */
    if (c->world > 1 && !c->nccl_id_file) return base_error(cmd, "--world %d needs --nccl-id FILE", c->world);
    if (c->world == 1 && (copt_given(&t->seen, "--rank") || copt_given(&t->seen, "--nccl-id")))
        return base_error(cmd, "%s applies to data parallel runs only (--world N > 1)",
                         copt_given(&t->seen, "--rank") ? "--rank" : "--nccl-id");
    if (c->rank >= c->world) return base_error(cmd, "--rank %d of --world %d: need rank < world", c->rank, c->world);
    /* hooks: each must be able to fire */
    if (t->hash_list && parse_slots(cmd, "--hash-slots", t->hash_list, &c->plan, c->hash_slot)) return BASE_EXIT_USAGE;
    if (t->dump_list && parse_slots(cmd, "--dump-slots", t->dump_list, &c->plan, c->dump_slot)) return BASE_EXIT_USAGE;
    if ((t->hash_list || t->dump_list) && !t->at_steps)
        return base_error(cmd, "--hash-slots/--dump-slots need --at-steps (the steps to fire at)");
    if (t->at_steps && !t->hash_list && !t->dump_list)
        return base_error(cmd, "--at-steps needs --hash-slots or --dump-slots (what to record at those steps)");
    if (t->at_steps && parse_at_steps(cmd, t->at_steps, c)) return BASE_EXIT_USAGE;
    if (c->dump_dir && !t->dump_list) return base_error(cmd, "--dump-dir needs --dump-slots (nothing else is dumped)");
    for (int i = 0; i < t->switches.n; i++)
        if (parse_switch(cmd, t->switches.items[i], c)) return BASE_EXIT_USAGE;
    /* progress output */
    if (t->quiet && (copt_given(&t->seen, "--progress-every") || c->profile))
        return base_error(cmd, "--quiet silences the progress lines %s prints; drop one of them",
                         c->profile ? "--profile" : "--progress-every");
    c->progress = t->quiet ? NULL : stderr;
    if (t->peak_tflops > 0) c->peak_flops = t->peak_tflops * 1e12;
    else if (t->peak_tflops < 0 && strcmp(c->backend, "cuda") == 0) c->peak_flops = 989.4e12; /* H100/H200 SXM dense bf16 */
    return 0;
}

void train_options_free(train_options *t)
{
    if (t->resumed) tckpt_info_free(t->resumed);
    free(t->resumed);
    t->resumed = NULL;
}

/* Set by the handler, read between micro-batches and steps (ttrain_config.stop). */
static volatile sig_atomic_t stop_signal;

static void on_stop(int sig) { stop_signal = sig; }

void train_options_catch_signals(train_options *t)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    /* restarted calls: a signal must not turn a write into an I/O error; the
     * handler is reset by the first signal, so a second one ends the process */
    sa.sa_flags = SA_RESTART | SA_RESETHAND;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    t->cfg.stop = &stop_signal;
}
