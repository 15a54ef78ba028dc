/* trainer/train_out.c — what a run checks before it starts: that its
 * outputs (--log, --ckpt, the dump directory) can be written where they
 * point, and that it fits in memory.  Both are bad input (status 2): found
 * before any work, with the path and the reason, or the bytes needed and
 * available. */
#include "trainer/train_run.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- outputs ------------------------------------------------------------------------------- */

typedef enum {
    WRITE_IN_PLACE,  /* the log: opened and appended to as the run goes */
    WRITE_BY_RENAME  /* the checkpoint: PATH.tmp.PID renamed over PATH */
} write_kind;

/* The directory part of path ("." when it has none). */
static void dir_of(const char *path, char *dir, size_t len)
{
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, len, ".");
    else if (slash == path) snprintf(dir, len, "/");
    else snprintf(dir, len, "%.*s", (int)(slash - path), path);
}

/* Creates `probe` (which must not exist) and removes it again: the only
 * sure test that a new file can appear there.  0 or status 2. */
static int try_create(trun *r, const char *option, const char *path, const char *probe)
{
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_NOCTTY, 0666);
    if (fd >= 0) {
        close(fd);
        unlink(probe);
        return 0;
    }
    if (errno == EEXIST) return 0; /* something is there already (a dangling link, a racing file): writable dir */
    int e = errno;
    char dir[4096];
    dir_of(path, dir, sizeof dir);
    struct stat st;
    if (e == ENOENT && stat(dir, &st) != 0) return trun_fail(r, 2, "%s %s: directory %s does not exist", option, path, dir);
    if (e == ENOTDIR || (e == ENOENT && !S_ISDIR(st.st_mode)))
        return trun_fail(r, 2, "%s %s: %s is not a directory", option, path, dir);
    return trun_fail(r, 2, "%s %s: cannot create a file there: %s", option, path, strerror(e));
}

int trun_link_target(const char *path, char *out, size_t len)
{
    char cur[PATH_MAX], link[PATH_MAX], dir[PATH_MAX];
    if (strlen(path) >= sizeof cur) return -1;
    memcpy(cur, path, strlen(path) + 1);
    for (int hops = 0; hops < 40; hops++) {
        struct stat st;
        if (lstat(cur, &st) != 0 || !S_ISLNK(st.st_mode)) {
            if (strlen(cur) >= len) return -1;
            memcpy(out, cur, strlen(cur) + 1);
            return 0;
        }
        ssize_t n = readlink(cur, link, sizeof link - 1);
        if (n < 0) return -1;
        link[n] = '\0';
        if (link[0] == '/') {
            memcpy(cur, link, (size_t)n + 1);
        } else {
            dir_of(cur, dir, sizeof dir);
            size_t d = strlen(dir);
            if (d + 1 + (size_t)n >= sizeof cur) return -1;
            memcpy(cur, dir, d);
            cur[d] = '/';
            memcpy(cur + d + 1, link, (size_t)n + 1);
        }
    }
    return -1; /* a loop */
}

static int check_file(trun *r, const char *option, const char *path, write_kind how)
{
    if (how == WRITE_IN_PLACE && strcmp(path, "-") == 0) return 0; /* stdout */
    if (!*path) return trun_fail(r, 2, "%s: empty path", option);
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return trun_fail(r, 2, "%s %s: is a directory", option, path);
        if (how == WRITE_IN_PLACE) {
            if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode) && !S_ISCHR(st.st_mode))
                return trun_fail(r, 2, "%s %s: not a regular file, FIFO or character device", option, path);
            /* opening a FIFO would wait for its reader: its permission is what can be checked now */
            if (!S_ISREG(st.st_mode)) {
                if (access(path, W_OK)) return trun_fail(r, 2, "%s %s: %s", option, path, strerror(errno));
                return 0;
            }
            int fd = open(path, O_WRONLY | O_APPEND | O_NOCTTY); /* no truncation: nothing changes yet */
            if (fd < 0) return trun_fail(r, 2, "%s %s: %s", option, path, strerror(errno));
            close(fd);
            return 0;
        }
        if (!S_ISREG(st.st_mode))
            return trun_fail(r, 2, "%s %s: exists and is not a regular file (a checkpoint replaces a regular file only)",
                             option, path);
    } else if (errno != ENOENT) {
        return trun_fail(r, 2, "%s %s: %s", option, path, strerror(errno));
    }
    if (how == WRITE_IN_PLACE) return try_create(r, option, path, path);
    /* by rename: a temporary file beside the target (a symlink's target) */
    char target[PATH_MAX], probe[PATH_MAX + 32];
    if (trun_link_target(path, target, sizeof target))
        return trun_fail(r, 2, "%s %s: a symlink loop or a path too long", option, path);
    snprintf(probe, sizeof probe, "%s.tmp.%ld", target, (long)getpid());
    return try_create(r, option, path, probe);
}

static int check_dir(trun *r, const char *option, const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0) return trun_fail(r, 2, "%s %s: %s", option, dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return trun_fail(r, 2, "%s %s: not a directory", option, dir);
    char probe[PATH_MAX + 64];
    snprintf(probe, sizeof probe, "%s/.ulpscope-probe.%ld", dir, (long)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_NOCTTY, 0666);
    if (fd < 0 && errno != EEXIST) return trun_fail(r, 2, "%s %s: cannot create files there: %s", option, dir, strerror(errno));
    if (fd >= 0) {
        close(fd);
        unlink(probe);
    }
    return 0;
}

/* 1 when a and b name one existing file, or are the same path */
static int same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    return strcmp(a, b) == 0;
}

int trun_check_outputs(trun *r)
{
    const ttrain_config *cfg = r->cfg;
    int status;
    if (cfg->rank == 0 && cfg->log_path) {
        if ((status = check_file(r, "--log", cfg->log_path, WRITE_IN_PLACE))) return status;
        if (strcmp(cfg->log_path, "-") != 0) {
            const char *other = cfg->ckpt_path && same_file(cfg->log_path, cfg->ckpt_path) ? cfg->ckpt_path
                                : cfg->resume_path && same_file(cfg->log_path, cfg->resume_path) ? cfg->resume_path
                                : NULL;
            if (other)
                return trun_fail(r, 2, "--log %s is the checkpoint %s: the log would overwrite it", cfg->log_path, other);
        }
    }
    if (cfg->rank == 0 && cfg->ckpt_path && (status = check_file(r, "--ckpt", cfg->ckpt_path, WRITE_BY_RENAME)))
        return status;
    int dumps = 0;
    for (int s = 0; s < TSLOT_COUNT; s++) dumps |= cfg->dump_slot[s];
    if (dumps && (status = check_dir(r, "--dump-dir", cfg->dump_dir ? cfg->dump_dir : "."))) return status;
    return 0;
}

/* ---- memory ---------------------------------------------------------------------------------- */

#define LIBRARY_WORKSPACE (64u << 20) /* CUDA: cuBLASLt's 32 MiB workspace and the kernels' own, with room */

static double gib(size_t bytes) { return (double)bytes / (1024.0 * 1024.0 * 1024.0); }

int trun_check_memory(trun *r)
{
    const ttrain_config *cfg = r->cfg;
    tbackend *be = r->be;
    char err[1024], what[128] = "", host_what[128] = "";
    tmodel_memory mem;
    if (tmodel_measure(&cfg->model, be, &r->plan, cfg->batch, cfg->seq, &mem, err, sizeof err))
        return trun_fail(r, 2, "%s", err);
    /* the ops' scratch: up to two float copies of the largest tensor (the CPU
     * backend rounds a GEMM's operands into fresh arrays; the GPU backend keeps
     * scratch of the same order) and, on the GPU, the libraries' workspaces */
    int cpu = strcmp(be->name, "cpu") == 0;
    size_t scratch = 2 * mem.largest_elems * sizeof(float) + (cpu ? 0 : LIBRARY_WORKSPACE);
    size_t results = 4 * (size_t)cfg->steps * sizeof(double); /* ttrain_result's per-step arrays (host) */
    size_t device_need = mem.total_bytes + scratch + (cpu ? results : 0);
    size_t avail = 0, host_avail = 0;
    if (be->mem_available(be, &avail, what, sizeof what)) return trun_fail(r, 1, "%s", tbackend_error(be));
    if (device_need > avail)
        return trun_fail(r, 2, "the run needs about %.2f GiB on the %s backend (parameters, gradients and optimizer state "
                         "%.2f GiB, activations %.2f GiB, scratch %.2f GiB%s) but %.2f GiB are available (%s); use a "
                         "smaller --batch, --seq or model", gib(device_need), be->name, gib(mem.param_bytes),
                         gib(mem.total_bytes - mem.param_bytes), gib(scratch), cpu ? ", per-step results" : "",
                         gib(avail), what);
    if (!cpu && tbackend_host_available(&host_avail, host_what, sizeof host_what) == 0 && results > host_avail)
        return trun_fail(r, 2, "the run's per-step results need %.2f GiB of host memory (--steps %ld) but %.2f GiB are "
                         "available (%s)", gib(results), cfg->steps, gib(host_avail), host_what);
    return 0;
}
