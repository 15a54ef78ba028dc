/* tests/sanitize_twin.c — make sanitize's planted bugs, one per argument:
 * "asan" reads past a heap block, "ubsan" shifts a negative value left,
 * "leak" loses a block.  Built with the sanitizer flags like the tests;
 * tests/run_sanitized.sh runs each with stderr thrown away and requires its
 * report in the log directory: a report that did not land there (GCC's
 * libubsan, for one, ignores UBSAN_OPTIONS=log_path beside ASan) would be
 * lost for every ulpscope process a test starts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 2) return 2;
    volatile int n = argc + 6; /* 8, unknown to the compiler */
    if (strcmp(argv[1], "asan") == 0) {
        char *p = malloc((size_t)n);
        volatile char c = p[n]; /* one past the block */
        free(p);
        return c;
    }
    if (strcmp(argv[1], "ubsan") == 0) {
        volatile int neg = -n;
        return (neg << 3) != 0;
    }
    if (strcmp(argv[1], "leak") == 0) {
        static char *volatile held; /* volatile: the allocation cannot be optimised away */
        held = malloc((size_t)n * 100);
        held = NULL;
        return 0;
    }
    return 2;
}
