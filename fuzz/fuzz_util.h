/* fuzz/fuzz_util.h — what the libFuzzer targets share.
 *
 * FUZZ_REQUIRE states a property the code under test must keep beyond not
 * crashing (a plan that parses serialises back to itself, a refused input
 * leaves no change behind); a broken one aborts, so libFuzzer keeps the
 * input as a crash.  The parsers that read paths get scratch files in a
 * directory of this process, removed at exit. */
#ifndef ULPSCOPE_FUZZ_UTIL_H
#define ULPSCOPE_FUZZ_UTIL_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FUZZ_REQUIRE(cond, ...)                                                                \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "fuzz: property broken at %s:%d: ", __FILE__, __LINE__);           \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fputc('\n', stderr);                                                               \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

static char fuzz_dir_path[256];

/* Removes the scratch directory and what is in it (one level of
 * subdirectories: the shard target's directory sources). */
static inline void fuzz_remove_tree(const char *dir, int depth)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char path[512];
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            struct stat st;
            if (depth > 0 && lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) fuzz_remove_tree(path, depth - 1);
            else unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
}

static inline void fuzz_cleanup(void) { fuzz_remove_tree(fuzz_dir_path, 1); }

/* This process' scratch directory ($TMPDIR or /tmp), made on first use. */
static inline const char *fuzz_dir(void)
{
    if (!fuzz_dir_path[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "%s/ulpscope-fuzz-%ld", tmp && *tmp ? tmp : "/tmp",
                 (long)getpid());
        if (mkdir(fuzz_dir_path, 0700) != 0) {
            perror(fuzz_dir_path);
            abort();
        }
        atexit(fuzz_cleanup);
    }
    return fuzz_dir_path;
}

/* dir/name (dir NULL: the scratch directory) written with n bytes. */
static inline void fuzz_write_file(char *path, size_t len, const char *dir, const char *name, const void *data,
                                   size_t n)
{
    snprintf(path, len, "%s/%s", dir ? dir : fuzz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

/* A NUL-terminated copy of the input (the parsers that take C strings). */
static inline char *fuzz_string(const unsigned char *data, size_t n)
{
    char *s = malloc(n + 1);
    if (!s) abort();
    memcpy(s, data, n);
    s[n] = '\0';
    return s;
}

#endif
