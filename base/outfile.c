/* base/outfile.c — see outfile.h. */
#include "base/outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"

#define MAX_LINK_HOPS 40 /* the kernel's own limit (ELOOP) */

/* Where PATH leads: the last component's symbolic links followed, hop by
 * hop, so that a dangling link still names the file it would create. */
typedef struct {
    int exists;          /* the target exists (st is valid) */
    struct stat st;
    char target[4096];
} resolved;

/* Returns 0, or an errno value. */
static int resolve(const char *path, resolved *r)
{
    memset(r, 0, sizeof *r);
    char *cur = r->target;
    if (strlen(path) >= sizeof r->target) return ENAMETOOLONG;
    strcpy(cur, path);
    for (int hops = 0;; hops++) {
        if (lstat(cur, &r->st) != 0) {
            if (errno == ENOENT) return 0; /* a new file (or a missing directory: open says which) */
            return errno;
        }
        if (!S_ISLNK(r->st.st_mode)) {
            r->exists = 1;
            return 0;
        }
        if (hops == MAX_LINK_HOPS) return ELOOP;
        char link[4096];
        ssize_t n = readlink(cur, link, sizeof link - 1);
        if (n < 0) return errno;
        link[n] = '\0';
        char *slash = strrchr(cur, '/');
        size_t keep = link[0] == '/' || !slash ? 0 : (size_t)(slash - cur) + 1; /* a relative link is relative to its directory */
        if (keep + (size_t)n >= sizeof r->target) return ENAMETOOLONG;
        memcpy(cur + keep, link, (size_t)n + 1);
    }
}

static int same_file_as_stdout(const char *path)
{
    struct stat a, b;
    return stat(path, &a) == 0 && fstat(STDOUT_FILENO, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

bool base_outfile_is_stdout(const char *path)
{
    return path && (strcmp(path, "-") == 0 || same_file_as_stdout(path));
}

/* "DIR" of "DIR/NAME" ("." without a slash), for messages. */
static void dir_of(const char *path, char *out, size_t len)
{
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(out, len, ".");
    else if (slash == path) snprintf(out, len, "/");
    else snprintf(out, len, "%.*s", (int)(slash - path), path);
}

static int tmp_name(const char *target, char *out, size_t len)
{
    return snprintf(out, len, "%s.tmp.%ld", target, (long)getpid()) < (int)len ? 0 : -1;
}

/* Opens TARGET.tmp.PID for writing; returns the descriptor, or -1 with
 * errno set. */
static int create_tmp(const char *tmp)
{
    return open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666);
}

static int cannot(const char *cmd, const char *path, int err)
{
    base_error(cmd, "cannot write %s: %s", path, strerror(err));
    return -1;
}

/* How PATH must be written, or -1 with the message printed. */
static int classify(const char *cmd, const char *path, resolved *r, base_outfile_kind *kind)
{
    if (!path || !*path) {
        base_error(cmd, "empty output file name (give a path, or - for stdout)");
        return -1;
    }
    if (base_outfile_is_stdout(path)) {
        *kind = BASE_OUT_STDOUT;
        return 0;
    }
    int e = resolve(path, r);
    if (e) return cannot(cmd, path, e);
    if (r->exists) {
        if (S_ISDIR(r->st.st_mode)) {
            base_error(cmd, "cannot write %s: it is a directory", path);
            return -1;
        }
        if (S_ISBLK(r->st.st_mode)) {
            base_error(cmd, "cannot write %s: it is a block device (a disk is never an output file)", path);
            return -1;
        }
        /* the file's own permission is respected even though a rename
         * would not need it: a read-only result is not silently replaced */
        if (access(r->target, W_OK) != 0) return cannot(cmd, path, errno);
        if (!S_ISREG(r->st.st_mode)) {
            *kind = BASE_OUT_DIRECT;
            return 0;
        }
    }
    *kind = BASE_OUT_REPLACE;
    return 0;
}

/* The message for a temporary file that could not be created. */
static int cannot_create(const char *cmd, const char *path, const char *target, int err)
{
    if (err == ENOENT) {
        char dir[4096];
        struct stat st;
        dir_of(target, dir, sizeof dir);
        if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
            base_error(cmd, "cannot write %s: no such directory %s", path, dir);
        else /* a directory that takes no new files, such as /proc */
            base_error(cmd, "cannot write %s: cannot create a file in %s: %s", path, dir, strerror(err));
        return -1;
    }
    return cannot(cmd, path, err);
}

int base_outfile_check(const char *cmd, const char *path)
{
    resolved r;
    base_outfile_kind kind;
    if (classify(cmd, path, &r, &kind)) return BASE_EXIT_USAGE;
    if (kind != BASE_OUT_REPLACE) return 0;
    /* the one honest test of a directory: create the temporary file */
    char tmp[4160];
    if (tmp_name(r.target, tmp, sizeof tmp)) {
        cannot(cmd, path, ENAMETOOLONG);
        return BASE_EXIT_USAGE;
    }
    int fd = create_tmp(tmp);
    if (fd < 0) {
        cannot_create(cmd, path, r.target, errno);
        return BASE_EXIT_USAGE;
    }
    close(fd);
    unlink(tmp);
    return 0;
}

int base_outfile_open(base_outfile *o, const char *cmd, const char *path)
{
    memset(o, 0, sizeof *o);
    resolved r;
    if (classify(cmd, path, &r, &o->kind)) return -1;
    snprintf(o->path, sizeof o->path, "%s", path); /* classify refused longer paths */
    if (o->kind == BASE_OUT_STDOUT) {
        o->fp = stdout;
        return 0;
    }
    if (o->kind == BASE_OUT_DIRECT) {
        o->fp = fopen(path, "w");
        return o->fp ? 0 : cannot(cmd, path, errno);
    }
    snprintf(o->target, sizeof o->target, "%s", r.target);
    if (tmp_name(o->target, o->tmp_path, sizeof o->tmp_path)) return cannot(cmd, path, ENAMETOOLONG);
    int fd = create_tmp(o->tmp_path);
    if (fd < 0) return cannot_create(cmd, path, o->target, errno);
    /* the replacement keeps the permissions of the file it replaces */
    if (r.exists) (void)fchmod(fd, r.st.st_mode & 07777);
    o->fp = fdopen(fd, "w");
    if (!o->fp) {
        int e = errno;
        close(fd);
        unlink(o->tmp_path);
        return cannot(cmd, path, e);
    }
    return 0;
}

/* fflush and the stream's error flag; returns 0 or an errno value (EIO
 * when the stream failed earlier without one). */
static int flush_error(FILE *fp)
{
    errno = 0;
    int bad = fflush(fp) != 0;
    int e = errno;
    if (bad || ferror(fp)) return e ? e : EIO;
    return 0;
}

static void sync_dir_of(const char *target)
{
    char dir[4096];
    dir_of(target, dir, sizeof dir);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd); /* the rename itself durable; a failure here loses nothing written */
        close(fd);
    }
}

int base_outfile_commit(base_outfile *o, const char *cmd)
{
    if (!o->fp) return 0;
    FILE *fp = o->fp;
    o->fp = NULL;
    if (o->kind == BASE_OUT_STDOUT) {
        int e = flush_error(fp);
        if (e) {
            base_error(cmd, "cannot write %s (stdout): %s", o->path, strerror(e));
            return -1;
        }
        return 0;
    }
    int e = flush_error(fp);
    if (!e && o->kind == BASE_OUT_REPLACE && fsync(fileno(fp)) != 0) e = errno;
    if (fclose(fp) != 0 && !e) e = errno;
    if (!e && o->kind == BASE_OUT_REPLACE && rename(o->tmp_path, o->target) != 0) e = errno;
    if (e) {
        if (o->kind == BASE_OUT_REPLACE) unlink(o->tmp_path);
        return cannot(cmd, o->path, e);
    }
    if (o->kind == BASE_OUT_REPLACE) sync_dir_of(o->target);
    return 0;
}

void base_outfile_abort(base_outfile *o)
{
    if (!o->fp) return;
    if (o->kind == BASE_OUT_STDOUT) {
        fflush(o->fp);
    } else {
        fclose(o->fp);
        if (o->kind == BASE_OUT_REPLACE) unlink(o->tmp_path);
    }
    o->fp = NULL;
}
