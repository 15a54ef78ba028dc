/* cli/jobs.c — worker processes for --jobs N (jobs.h). */
#include "cli/jobs.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/error.h"

#define JOBS_REQUEST_MAGIC 0x756c706au /* "ulpj" */
#define JOBS_ANSWER_MAGIC 0x756c7061u  /* "ulpa" */
#define JOBS_MAX_PER_REQUEST 65536

/* A request: this header, the arm's plan (a tplan), its switches' override
 * strings (switch_len[i] bytes each, no terminator), then n cmp_job. */
#define JOBS_MAX_SWITCH_TEXT 65536
typedef struct {
    uint32_t magic;
    int n;
    uint64_t recipe_hash;  /* the parent's recipe: a worker set up under another refuses */
    int is_null;
    int planted;           /* kbug */
    char arm[CMP_NAME_MAX];
    int n_switches;
    long switch_step[TTRAIN_MAX_SWITCHES];
    int switch_len[TTRAIN_MAX_SWITCHES];
} jobs_request;

/* An answer: this header, then n cmp_run (status -1: the runner could not go
 * on, the reason in the first run's error). */
typedef struct {
    uint32_t magic;
    int status;
    int n;
} jobs_answer;

typedef struct {
    pid_t pid;
    int to_worker, from_worker; /* the parent's pipe ends; -1 once closed */
    int task;                   /* the task it runs; -1: idle */
    int dead;
} worker;

/* One arm's jobs handed to one worker: jobs[idx[0..m)] of the call. */
typedef struct {
    int arm;
    int *idx;
    int m;
} task;

struct jobs_pool {
    const char *cmd;
    int n_workers, started, broken;
    int argc;
    char **argv;
    uint64_t recipe_hash;
    jobs_bug bug;
    cmp_train_ctx *ctx;
    struct sigaction old_sigpipe;
    worker w[JOBS_MAX];
};

static uint64_t recipe_hash(const char *recipe)
{
    return ttrain_fnv1a(TTRAIN_FNV_OFFSET, recipe, strlen(recipe));
}

static int write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* 0; 1 at end of file before the first byte; -1 on an error or a short read. */
static int read_all(int fd, void *buf, size_t n)
{
    char *p = buf;
    size_t got = 0;
    while (got < n) {
        ssize_t k = read(fd, p + got, n - got);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        if (k == 0) return got == 0 ? 1 : -1;
        got += (size_t)k;
    }
    return 0;
}

int jobs_parse_bug(const char *cmd, const char *name, jobs_bug *bug)
{
    *bug = JOBS_BUG_NONE;
    if (!name) return 0;
    if (strcmp(name, "base-plan") == 0) *bug = JOBS_BUG_BASE_PLAN;
    else if (strcmp(name, "wrong-arm") == 0) *bug = JOBS_BUG_WRONG_ARM;
    else return base_error(cmd, "--plant-jobs-bug %s: expected base-plan or wrong-arm", name);
    return 0;
}

jobs_pool *jobs_pool_create(const char *cmd, int n_workers, int argc, char **argv, const char *recipe, jobs_bug bug)
{
    jobs_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->cmd = cmd;
    p->n_workers = n_workers < 1 ? 1 : n_workers > JOBS_MAX ? JOBS_MAX : n_workers;
    p->argc = argc;
    p->argv = argv;
    p->recipe_hash = recipe_hash(recipe);
    p->bug = bug;
    for (int i = 0; i < JOBS_MAX; i++) {
        p->w[i].to_worker = p->w[i].from_worker = -1;
        p->w[i].task = -1;
    }
    return p;
}

/* "killed by signal 9", "exited with status 3" */
static void describe_end(int st, char *buf, size_t len)
{
    if (WIFSIGNALED(st)) snprintf(buf, len, "was killed by signal %d", WTERMSIG(st));
    else if (WIFEXITED(st)) snprintf(buf, len, "exited with status %d", WEXITSTATUS(st));
    else snprintf(buf, len, "ended");
}

static void close_fd(int *fd)
{
    if (*fd >= 0) close(*fd);
    *fd = -1;
}

/* Closes worker i's pipes and reaps it; how it ended into why. */
static void reap(worker *w, char *why, size_t len)
{
    close_fd(&w->to_worker);
    close_fd(&w->from_worker);
    int st = 0;
    pid_t r;
    while ((r = waitpid(w->pid, &st, 0)) < 0 && errno == EINTR) {}
    if (why) {
        if (r == w->pid) describe_end(st, why, len);
        else snprintf(why, len, "ended (%s)", strerror(errno));
    }
    w->dead = 1;
    w->task = -1;
}

/* Starts the workers: this program again with the command line less --jobs,
 * --json and --plant-jobs-bug, plus --jobs-worker R,W.  The parent's ends of
 * the pipes are close-on-exec, so no worker holds another's; each worker's
 * own ends are made inheritable just for its fork and closed here after it. */
static int start_workers(jobs_pool *p, char *err, size_t errlen)
{
    char **child = calloc((size_t)p->argc + 4, sizeof *child);
    if (!child) return snprintf(err, errlen, "out of memory"), -1;
    int n = 0;
    child[n++] = "ulpscope";
    child[n++] = (char *)p->cmd;
    for (int i = 1; i < p->argc; i++) {
        const char *a = p->argv[i];
        if ((strcmp(a, "--jobs") == 0 || strcmp(a, "--json") == 0 || strcmp(a, "--plant-jobs-bug") == 0) &&
            i + 1 < p->argc) {
            i++;
            continue;
        }
        child[n++] = p->argv[i];
    }
    char spec[64];
    child[n++] = "--jobs-worker";
    child[n++] = spec;
    child[n] = NULL;
    struct sigaction ignore;
    memset(&ignore, 0, sizeof ignore);
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    /* a dead worker's pipe: EPIPE from write, not the end of the parent */
    sigaction(SIGPIPE, &ignore, &p->old_sigpipe);
    p->started = 1;
    int rc = 0;
    for (int i = 0; i < p->n_workers && !rc; i++) {
        int req[2], ans[2];
        if (pipe2(req, O_CLOEXEC)) {
            rc = (snprintf(err, errlen, "--jobs: cannot create a pipe: %s", strerror(errno)), -1);
            break;
        }
        if (pipe2(ans, O_CLOEXEC)) {
            rc = (snprintf(err, errlen, "--jobs: cannot create a pipe: %s", strerror(errno)), -1);
            close(req[0]), close(req[1]);
            break;
        }
        fcntl(req[0], F_SETFD, 0);
        fcntl(ans[1], F_SETFD, 0);
        snprintf(spec, sizeof spec, "%d,%d", req[0], ans[1]);
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid == 0) {
            /* only async-signal-safe calls until exec: CUDA's threads may hold locks */
            signal(SIGPIPE, SIG_DFL);
            dup2(STDERR_FILENO, STDOUT_FILENO); /* stdout stays the parent's (--json -) */
            execv("/proc/self/exe", child);
            static const char msg[] = "ulpscope: error: --jobs: cannot start a worker (execv /proc/self/exe)\n";
            if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) {}
            _exit(127);
        }
        close(req[0]);
        close(ans[1]);
        if (pid < 0) {
            rc = (snprintf(err, errlen, "--jobs: cannot start worker %d: %s", i + 1, strerror(errno)), -1);
            close(req[1]), close(ans[0]);
            break;
        }
        p->w[i] = (worker){pid, req[1], ans[0], -1, 0};
    }
    free(child);
    if (rc) p->broken = 1;
    return rc;
}

void jobs_pool_free(jobs_pool *p)
{
    if (!p) return;
    /* closing the request pipes ends each worker's loop */
    for (int i = 0; i < p->n_workers; i++) close_fd(&p->w[i].to_worker);
    for (int i = 0; i < p->n_workers; i++)
        if (p->started && p->w[i].pid > 0 && !p->w[i].dead) reap(&p->w[i], NULL, 0);
    if (p->started) sigaction(SIGPIPE, &p->old_sigpipe, NULL);
    free(p);
}

/* The call's jobs as tasks: per arm (in the order the arms first appear) its
 * jobs cut into ceil(k / capacity) groups; then, while there are fewer tasks
 * than workers, the arm with the largest groups is cut once more.  Group
 * sizes within an arm differ by at most one.  Returns the task count or -1. */
static int make_tasks(const cmp_job *jobs, int n, int capacity, int n_workers, task **out_tasks, int **out_idx)
{
    int arms[CMP_MAX_ARMS], count[CMP_MAX_ARMS], groups[CMP_MAX_ARMS], n_arms = 0;
    for (int i = 0; i < n; i++) {
        int a = 0;
        while (a < n_arms && arms[a] != jobs[i].arm) a++;
        if (a == n_arms) {
            if (n_arms == CMP_MAX_ARMS) return -1;
            arms[n_arms] = jobs[i].arm;
            count[n_arms++] = 0;
        }
        count[a]++;
    }
    int n_tasks = 0;
    for (int a = 0; a < n_arms; a++) {
        groups[a] = (count[a] + capacity - 1) / capacity;
        n_tasks += groups[a];
    }
    while (n_tasks < n_workers) {
        int best = -1, best_size = 1;
        for (int a = 0; a < n_arms; a++) {
            int size = (count[a] + groups[a] - 1) / groups[a];
            if (size > best_size) best = a, best_size = size;
        }
        if (best < 0) break; /* every group is one run */
        groups[best]++;
        n_tasks++;
    }
    task *tasks = calloc((size_t)n_tasks, sizeof *tasks);
    int *idx = malloc((size_t)n * sizeof *idx);
    if (!tasks || !idx) {
        free(tasks), free(idx);
        return -1;
    }
    int t = 0, used = 0;
    for (int a = 0; a < n_arms; a++) {
        int *mine = idx + used, k = 0;
        for (int i = 0; i < n; i++)
            if (jobs[i].arm == arms[a]) mine[k++] = i;
        used += k;
        for (int g = 0, from = 0; g < groups[a]; g++) {
            int m = k / groups[a] + (g < k % groups[a]);
            tasks[t++] = (task){arms[a], mine + from, m};
            from += m;
        }
    }
    *out_tasks = tasks;
    *out_idx = idx;
    return n_tasks;
}

/* The arm the request for task t names: its own, or (planted) another. */
static int request_arm(const jobs_pool *p, const task *tasks, int n_tasks, int t)
{
    if (p->bug != JOBS_BUG_WRONG_ARM) return tasks[t].arm;
    for (int u = 1; u < n_tasks; u++) /* the next task of another arm, cyclically */
        if (tasks[(t + u) % n_tasks].arm != tasks[t].arm) return tasks[(t + u) % n_tasks].arm;
    return tasks[t].arm;
}

static int send_task(jobs_pool *p, worker *w, const cmp_arm *arms, const cmp_job *jobs, const task *tasks, int n_tasks,
                     int t)
{
    int a = request_arm(p, tasks, n_tasks, t);
    jobs_request h;
    memset(&h, 0, sizeof h);
    h.magic = JOBS_REQUEST_MAGIC;
    h.n = tasks[t].m;
    h.recipe_hash = p->recipe_hash;
    h.is_null = arms[a].is_null;
    h.planted = (int)p->ctx->planted[a];
    snprintf(h.arm, sizeof h.arm, "%s", arms[a].name);
    const tplan *plan = p->bug == JOBS_BUG_BASE_PLAN ? &p->ctx->base.plan : &p->ctx->plans[a];
    const tswitch *sw = p->ctx->switches[a];
    h.n_switches = p->ctx->n_switches[a];
    for (int i = 0; i < h.n_switches; i++) {
        size_t len = strlen(sw[i].overrides);
        if (len > JOBS_MAX_SWITCH_TEXT) return -1;
        h.switch_step[i] = sw[i].step;
        h.switch_len[i] = (int)len;
    }
    cmp_job *js = malloc((size_t)tasks[t].m * sizeof *js);
    if (!js) return -1;
    for (int k = 0; k < tasks[t].m; k++) js[k] = jobs[tasks[t].idx[k]];
    int rc = write_all(w->to_worker, &h, sizeof h) || write_all(w->to_worker, plan, sizeof *plan);
    for (int i = 0; i < h.n_switches && !rc; i++) rc = write_all(w->to_worker, sw[i].overrides, (size_t)h.switch_len[i]);
    rc = rc || write_all(w->to_worker, js, (size_t)tasks[t].m * sizeof *js);
    free(js);
    w->task = rc ? -1 : t;
    return rc ? -1 : 0;
}

/* "worker 2 of 3 (pid 123) was killed by signal 9 running arm x, seeds 4,5,6" (or "before running": it
 * died idle, found when handed the task) */
static void describe_death(const jobs_pool *p, int i, const char *how, const char *when, const cmp_arm *arms,
                           const cmp_job *jobs, const task *t, char *buf, size_t len)
{
    char seeds[160] = "";
    size_t used = 0;
    for (int k = 0; k < t->m; k++) {
        char one[24];
        snprintf(one, sizeof one, "%s%llu", k ? "," : "", (unsigned long long)jobs[t->idx[k]].seed);
        if (used + strlen(one) + 4 >= sizeof seeds) {
            snprintf(seeds + used, sizeof seeds - used, ",...");
            break;
        }
        used += (size_t)snprintf(seeds + used, sizeof seeds - used, "%s", one);
    }
    snprintf(buf, len, "--jobs: worker %d of %d (pid %d) %s %s arm %s, seeds %s", i + 1, p->n_workers,
             (int)p->w[i].pid, how, when, arms[t->arm].name, seeds);
}

static int pool_run(cmp_runner *r, const cmp_arm *arms, const cmp_job *jobs, int n, cmp_run *out)
{
    jobs_pool *p = r->ctx;
    char failure[sizeof out[0].error] = "";
    if (p->broken) {
        snprintf(out[0].error, sizeof out[0].error, "--jobs: a worker ended before; the pool runs nothing more");
        return -1;
    }
    if (!p->started && start_workers(p, out[0].error, sizeof out[0].error)) return -1;
    /* a worker that died idle (since the last call) fails this one: the pool is short of it */
    for (int i = 0; i < p->n_workers; i++) {
        struct pollfd f = {p->w[i].from_worker, POLLIN, 0};
        if (p->w[i].dead || poll(&f, 1, 0) <= 0) continue;
        char how[96];
        reap(&p->w[i], how, sizeof how);
        p->broken = 1;
        snprintf(out[0].error, sizeof out[0].error, "--jobs: worker %d of %d (pid %d) %s while idle (no run lost)", i + 1,
                 p->n_workers, (int)p->w[i].pid, how);
        return -1;
    }
    cmp_train_ctx *ctx = p->ctx;
    int capacity = ctx->replicas > 0 ? ctx->replicas : cmp_train_default_replicas(ctx->base.backend);
    task *tasks = NULL;
    int *idx = NULL;
    int n_tasks = make_tasks(jobs, n, capacity, p->n_workers, &tasks, &idx);
    cmp_run *answer = malloc((size_t)(capacity > n ? capacity : n) * sizeof *answer);
    if (n_tasks < 0 || !answer) {
        free(tasks), free(idx), free(answer);
        snprintf(out[0].error, sizeof out[0].error, "out of memory");
        return -1;
    }
    int next = 0;
    for (;;) {
        /* idle workers take the next tasks, until something failed */
        for (int i = 0; i < p->n_workers && next < n_tasks && !failure[0]; i++) {
            worker *w = &p->w[i];
            if (w->dead || w->task >= 0) continue;
            if (send_task(p, w, arms, jobs, tasks, n_tasks, next)) {
                char how[96];
                reap(w, how, sizeof how);
                p->broken = 1;
                describe_death(p, i, how, "before running", arms, jobs, &tasks[next], failure, sizeof failure);
                break;
            }
            next++;
        }
        struct pollfd fds[JOBS_MAX];
        int who[JOBS_MAX], n_busy = 0;
        for (int i = 0; i < p->n_workers; i++)
            if (!p->w[i].dead && p->w[i].task >= 0) {
                fds[n_busy] = (struct pollfd){p->w[i].from_worker, POLLIN, 0};
                who[n_busy++] = i;
            }
        if (!n_busy) break;
        if (poll(fds, (nfds_t)n_busy, -1) < 0) {
            if (errno == EINTR) continue;
            p->broken = 1; /* answers left unread: the workers' state is unknown */
            snprintf(failure, sizeof failure, "--jobs: poll: %s", strerror(errno));
            break;
        }
        for (int b = 0; b < n_busy; b++) {
            if (!fds[b].revents) continue;
            int i = who[b];
            worker *w = &p->w[i];
            const task *t = &tasks[w->task];
            jobs_answer h;
            int ok = read_all(w->from_worker, &h, sizeof h) == 0 && h.magic == JOBS_ANSWER_MAGIC && h.n == t->m &&
                     read_all(w->from_worker, answer, (size_t)t->m * sizeof *answer) == 0;
            if (!ok) {
                char how[96], msg[sizeof failure];
                reap(w, how, sizeof how);
                p->broken = 1;
                describe_death(p, i, how, "running", arms, jobs, t, msg, sizeof msg);
                if (!failure[0]) memcpy(failure, msg, sizeof failure);
                continue;
            }
            w->task = -1;
            if (h.status) {
                if (!failure[0]) snprintf(failure, sizeof failure, "%s", answer[0].error);
                continue;
            }
            for (int k = 0; k < t->m; k++) out[t->idx[k]] = answer[k];
            if (r->finished) r->finished(r, t->idx, t->m);
        }
    }
    free(tasks);
    free(idx);
    free(answer);
    if (!failure[0] && next < n_tasks) snprintf(failure, sizeof failure, "--jobs: no worker left");
    if (failure[0]) {
        memcpy(out[0].error, failure, sizeof out[0].error);
        return -1;
    }
    return 0;
}

void jobs_pool_runner(jobs_pool *p, cmp_train_ctx *ctx, cmp_runner *r)
{
    memset(r, 0, sizeof *r);
    p->ctx = ctx;
    int replicas = ctx->replicas > 0 ? ctx->replicas : cmp_train_default_replicas(ctx->base.backend);
    r->run = pool_run;
    /* every arm's runs in one call, each arm's at least one replica group */
    r->capacity = replicas * CMP_MAX_ARMS;
    r->per_arm = 0;
    r->ctx = p;
}

void jobs_pool_bisect_runner(cmp_runner *r, cmp_train_ctx *ctx, void *pool)
{
    jobs_pool_runner(pool, ctx, r);
}

/* "R,W": two descriptors of this process that are pipes. */
static int parse_spec(const char *spec, int *in, int *out)
{
    char *end;
    long a = strtol(spec, &end, 10);
    if (end == spec || *end != ',' || a < 0 || a > 1 << 20) return -1;
    const char *q = end + 1;
    long b = strtol(q, &end, 10);
    if (end == q || *end || b < 0 || b > 1 << 20) return -1;
    struct stat sa, sb;
    if (fstat((int)a, &sa) || fstat((int)b, &sb) || !S_ISFIFO(sa.st_mode) || !S_ISFIFO(sb.st_mode)) return -1;
    *in = (int)a;
    *out = (int)b;
    return 0;
}

int jobs_serve(const char *cmd, const char *spec, cmp_train_ctx *ctx, const char *recipe)
{
    int in, out;
    if (parse_spec(spec, &in, &out))
        return base_error(cmd, "--jobs-worker %s: internal to --jobs (a worker's two pipes); give --jobs N", spec);
    const uint64_t mine = recipe_hash(recipe);
    tplan *plan = malloc(sizeof *plan);
    char *switch_text[TTRAIN_MAX_SWITCHES] = {0}; /* the request's switches, alive while its runs run */
    if (!plan) return base_error(cmd, "out of memory");
    int status = 0;
    for (;;) {
        jobs_request h;
        int got = read_all(in, &h, sizeof h);
        if (got == 1) break; /* the parent closed the pipe: done */
        if (got || h.magic != JOBS_REQUEST_MAGIC || h.n < 1 || h.n > JOBS_MAX_PER_REQUEST || h.n_switches < 0 ||
            h.n_switches > TTRAIN_MAX_SWITCHES || read_all(in, plan, sizeof *plan)) {
            status = 1;
            break;
        }
        for (int i = 0; i < h.n_switches && !status; i++) {
            free(switch_text[i]);
            switch_text[i] = h.switch_len[i] >= 0 && h.switch_len[i] <= JOBS_MAX_SWITCH_TEXT
                                 ? malloc((size_t)h.switch_len[i] + 1)
                                 : NULL;
            if (!switch_text[i] || read_all(in, switch_text[i], (size_t)h.switch_len[i])) status = 1;
            else switch_text[i][h.switch_len[i]] = '\0';
        }
        if (status) break;
        cmp_job *jobs = malloc((size_t)h.n * sizeof *jobs);
        cmp_run *runs = calloc((size_t)h.n, sizeof *runs);
        if (!jobs || !runs || read_all(in, jobs, (size_t)h.n * sizeof *jobs)) {
            free(jobs), free(runs);
            status = 1;
            break;
        }
        jobs_answer a = {JOBS_ANSWER_MAGIC, 0, h.n};
        if (h.recipe_hash != mine) {
            a.status = -1;
            snprintf(runs[0].error, sizeof runs[0].error, "--jobs: a worker set up another recipe than its parent");
        } else {
            /* the request's arm as arm 0 of this process's context */
            cmp_arm arm;
            memset(&arm, 0, sizeof arm);
            memcpy(arm.name, h.arm, sizeof arm.name);
            arm.name[sizeof arm.name - 1] = '\0';
            arm.is_null = h.is_null;
            arm.identity = arm.name;
            ctx->plans[0] = *plan;
            ctx->planted[0] = (kbug)h.planted;
            ctx->n_switches[0] = h.n_switches;
            for (int i = 0; i < h.n_switches; i++)
                ctx->switches[0][i] = (tswitch){h.switch_step[i], switch_text[i]};
            for (int k = 0; k < h.n; k++) jobs[k].arm = 0;
            cmp_runner runner;
            cmp_train_runner(&runner, ctx);
            a.status = runner.run(&runner, &arm, jobs, h.n, runs) ? -1 : 0;
        }
        int wrote = write_all(out, &a, sizeof a) || write_all(out, runs, (size_t)h.n * sizeof *runs);
        free(jobs);
        free(runs);
        if (wrote) {
            status = 1;
            break;
        }
    }
    free(plan);
    for (int i = 0; i < TTRAIN_MAX_SWITCHES; i++) free(switch_text[i]);
    close(in);
    close(out);
    return status;
}
