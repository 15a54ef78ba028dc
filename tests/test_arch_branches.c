/* tests/test_arch_branches.c — the claim behind --gpu-model's "other kernels":
 * an sm_80 cubin cannot run on an sm_90 GPU, so a plan run "as an A100" runs
 * the sm_90 build of every kernel but its GEMMs; that is the A100's
 * arithmetic only if no kernel's arithmetic depends on the architecture it
 * was compiled for.  This test scans the sources the kernels and the trainer
 * are built from (kernels/, trainer/, and precision/, whose headers device
 * code includes) for architecture tests (__CUDA_ARCH__ and its relatives,
 * the NV_IF_TARGET family) outside comments and strings, and fails on any
 * line not in the allowlist below, where each entry says in one line why its
 * branch does not change arithmetic.  An entry that no longer matches fails
 * too (the list stays exact).
 * Twins: planted files with an unlisted branch (an fma only on sm_90; an
 * NV_IF_TARGET; one more copy of a listed line) must fail the scanner; a
 * mention in a comment must not.
 * Run from the source root (make test does); ULPSCOPE_SRC names it otherwise. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    const char *path;  /* relative to the source root */
    const char *line;  /* the line, leading and trailing blanks dropped */
    int count;         /* how many such lines the file has */
    const char *why;   /* why the branch leaves the arithmetic alone */
} arch_allowed;

static const arch_allowed allowlist[] = {
    {"kernels/attention_mma.cu", "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900", 1,
     "register budget of the backward kernels (__launch_bounds__ minimum blocks): the same instructions, fewer spills"},
    {"kernels/matmul.cu", "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890", 2,
     "fp8 mma.sync exists from sm_89: below, matmul_block_fp8 is not compiled and is refused at run time, never "
     "run as other arithmetic"},
    {"precision/mma.h", "#ifdef __CUDA_ARCH__", 1,
     "device or host, not which GPU: __fadd_rn on any GPU, C float addition on the host (both fp32 RNE)"},
    {"precision/mma_fast.h", "#ifdef __CUDA_ARCH__", 2,
     "device or host, not which GPU: PTX shr, shl, bfind and __popc on any GPU, their C equivalents on the host"},
};
#define N_ALLOWED (sizeof allowlist / sizeof allowlist[0])

/* What the scan saw: files, and the architecture-test lines per allowlist entry. */
typedef struct {
    int files;
    int found[N_ALLOWED];
    int unlisted;          /* lines outside the allowlist (or beyond an entry's count) */
    char first[512];       /* the first such, "path:line: text" */
} scan_result;

/* Blank out comments and string/character literals, keeping newlines (line
 * numbers stay). */
static void strip_comments_and_strings(char *s)
{
    enum { CODE, LINE_COMMENT, BLOCK_COMMENT, STRING, CHAR } st = CODE;
    for (char *p = s; *p; p++) {
        switch (st) {
        case CODE:
            if (p[0] == '/' && p[1] == '/') st = LINE_COMMENT, *p = ' ';
            else if (p[0] == '/' && p[1] == '*') st = BLOCK_COMMENT, *p = ' ', *++p = ' ';
            else if (*p == '"') st = STRING;
            else if (*p == '\'') st = CHAR;
            break;
        case LINE_COMMENT:
            if (*p == '\n') st = CODE;
            else *p = ' ';
            break;
        case BLOCK_COMMENT:
            if (p[0] == '*' && p[1] == '/') st = CODE, *p = ' ', *++p = ' ';
            else if (*p != '\n') *p = ' ';
            break;
        case STRING:
        case CHAR:
            if (*p == '\\' && p[1]) *p = ' ', *++p = ' ';
            else if (*p == (st == STRING ? '"' : '\'')) st = CODE;
            else if (*p != '\n') *p = ' ';
            break;
        }
    }
}

static int is_arch_test(const char *line)
{
    static const char *const tokens[] = {"__CUDA_ARCH", "NV_IF_TARGET", "NV_IF_ELSE_TARGET", "NV_DISPATCH_TARGET",
                                         "NV_PROVIDES_SM", "NV_IS_EXACTLY_SM", "__nv_target"};
    for (size_t i = 0; i < sizeof tokens / sizeof tokens[0]; i++)
        if (strstr(line, tokens[i])) return 1;
    return 0;
}

static int has_suffix(const char *name, const char *suffix)
{
    size_t n = strlen(name), k = strlen(suffix);
    return n >= k && strcmp(name + n - k, suffix) == 0;
}

static void scan_file(const char *root, const char *rel, scan_result *r)
{
    char path[2048];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", root, rel) >= sizeof path) fail_msg("path too long: %s", rel);
    FILE *fp = fopen(path, "rb");
    if (!fp) fail_msg("cannot read %s", path);
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    assert_non_null(text);
    if (fread(text, 1, (size_t)n, fp) != (size_t)n) fail_msg("short read of %s", path);
    text[n] = '\0';
    fclose(fp);
    strip_comments_and_strings(text);
    r->files++;
    int line_no = 0;
    for (char *line = text; line; ) {
        char *next = strchr(line, '\n');
        if (next) *next++ = '\0';
        line_no++;
        if (is_arch_test(line)) {
            /* trim for the allowlist's comparison */
            while (*line == ' ' || *line == '\t') line++;
            size_t k = strlen(line);
            while (k && (line[k - 1] == ' ' || line[k - 1] == '\t' || line[k - 1] == '\r')) line[--k] = '\0';
            int listed = 0;
            for (size_t a = 0; a < N_ALLOWED && !listed; a++)
                if (strcmp(allowlist[a].path, rel) == 0 && strcmp(allowlist[a].line, line) == 0 &&
                    r->found[a] < allowlist[a].count) {
                    r->found[a]++;
                    listed = 1;
                }
            if (!listed && !r->unlisted++)
                snprintf(r->first, sizeof r->first, "%s:%d: %.400s", rel, line_no, line);
        }
        line = next;
    }
    free(text);
}

/* Every source file (.c .h .cu .cuh) under root/dir, recursively. */
static void scan_dir(const char *root, const char *dir, scan_result *r)
{
    char path[2048];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", root, dir) >= sizeof path) fail_msg("path too long: %s", dir);
    DIR *d = opendir(path);
    if (!d) return; /* a folder the tree lacks (planted trees have few) */
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char rel[1024];
        if ((size_t)snprintf(rel, sizeof rel, "%s/%s", dir, e->d_name) >= sizeof rel ||
            (size_t)snprintf(path, sizeof path, "%s/%s", root, rel) >= sizeof path)
            fail_msg("path too long under %s", dir);
        struct stat st;
        if (stat(path, &st)) continue;
        if (S_ISDIR(st.st_mode)) scan_dir(root, rel, r);
        else if (has_suffix(rel, ".c") || has_suffix(rel, ".h") || has_suffix(rel, ".cu") || has_suffix(rel, ".cuh"))
            scan_file(root, rel, r);
    }
    closedir(d);
}

static scan_result scan(const char *root)
{
    scan_result r;
    memset(&r, 0, sizeof r);
    static const char *const dirs[] = {"kernels", "trainer", "precision"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) scan_dir(root, dirs[i], &r);
    return r;
}

/* The entries whose lines were not all found: how many, and the first in buf. */
static int stale_entries(const scan_result *r, char *buf, size_t len)
{
    int n = 0;
    for (size_t a = 0; a < N_ALLOWED; a++)
        if (r->found[a] != allowlist[a].count && !n++)
            snprintf(buf, len, "%s: '%s' listed %d times, found %d", allowlist[a].path, allowlist[a].line,
                     allowlist[a].count, r->found[a]);
    return n;
}

static const char *source_root(void)
{
    const char *env = getenv("ULPSCOPE_SRC");
    const char *root = env && *env ? env : ".";
    char probe[1024];
    snprintf(probe, sizeof probe, "%s/kernels/registry.h", root);
    if (access(probe, R_OK) != 0)
        fail_msg("no source tree at '%s' (run from the source root, as make test does, or set ULPSCOPE_SRC)", root);
    return root;
}

static void test_no_unlisted_arch_branches(void **state)
{
    (void)state;
    const char *root = source_root();
    scan_result r = scan(root);
    char stale[512] = "";
    int n_stale = stale_entries(&r, stale, sizeof stale);
    print_message("scanned %d files under kernels/, trainer/, precision/: %d unlisted architecture tests, %d stale "
                  "allowlist entries\n", r.files, r.unlisted, n_stale);
    for (size_t a = 0; a < N_ALLOWED; a++)
        print_message("  allowed %s x%d: %s\n", allowlist[a].path, allowlist[a].count, allowlist[a].why);
    /* a scan that found the tree but few files would pass vacuously */
    if (r.files < 40) fail_msg("only %d source files under %s: not the project's tree", r.files, root);
    if (r.unlisted)
        fail_msg("%d architecture test(s) outside the allowlist of tests/test_arch_branches.c, first %s: a kernel whose "
                 "arithmetic depends on __CUDA_ARCH__ breaks --gpu-model's claim; list it with its reason or remove it",
                 r.unlisted, r.first);
    if (n_stale) fail_msg("allowlist entry no longer matches the sources: %s", stale);
}

/* A tree of planted files: root/kernels/NAME holding text. */
static void plant(const char *root, const char *name, const char *text)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/kernels", root);
    mkdir(path, 0700);
    snprintf(path, sizeof path, "%s/kernels/%s", root, name);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

static void test_twins_planted_branches_fail(void **state)
{
    (void)state;
    static const struct {
        const char *name, *text;
        int unlisted; /* what the scan must report */
    } cases[] = {
        {"fma.cu", "__device__ float f(float a, float b, float c)\n{\n#if __CUDA_ARCH__ >= 900\n    return fmaf(a, b, c);\n"
                   "#else\n    return a * b + c;\n#endif\n}\n", 1},
        {"target.cu", "__device__ float g(float x)\n{\n    NV_IF_TARGET(NV_PROVIDES_SM_90, (return x * 2;), (return x;))\n}\n", 1},
        /* one more copy of a listed line than the allowlist allows */
        {"matmul.cu", "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890\n#endif\n"
                      "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890\n#endif\n"
                      "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890\n#endif\n", 1},
        /* mentions in comments and strings are not branches */
        {"quiet.cu", "// __CUDA_ARCH__ in a comment\n/* and\n   __CUDA_ARCH__ >= 900 here */\n"
                     "static const char *s = \"__CUDA_ARCH__\";\n", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char root[] = "/tmp/ulpscope_arch_XXXXXX";
        if (!mkdtemp(root)) fail_msg("mkdtemp failed");
        plant(root, cases[i].name, cases[i].text);
        scan_result r = scan(root);
        print_message("planted kernels/%s: %d unlisted%s%s\n", cases[i].name, r.unlisted, r.unlisted ? ", first " : "",
                      r.first);
        char path[1024];
        snprintf(path, sizeof path, "%s/kernels/%s", root, cases[i].name);
        unlink(path);
        snprintf(path, sizeof path, "%s/kernels", root);
        rmdir(path);
        rmdir(root);
        assert_int_equal(r.files, 1);
        if (r.unlisted != cases[i].unlisted)
            fail_msg("planted kernels/%s: the scanner reported %d unlisted branches, expected %d", cases[i].name,
                     r.unlisted, cases[i].unlisted);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_unlisted_arch_branches),
        cmocka_unit_test(test_twins_planted_branches_fail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
