/* fuzz/fuzz_trace.c — trace files as `ulpscope trace --diff A B` reads them
 * (studies/trace_file.c).
 *
 * Input: bytes 0-1 the offset where the first file ends and the second
 * begins; the rest is the text of both.  Beyond not crashing: a refused file
 * says why, naming the file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/fuzz_util.h"
#include "studies/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static FILE *devnull;
    if (size < 2) return 0;
    if (!devnull && !(devnull = fopen("/dev/null", "w"))) abort();
    const uint8_t *body = data + 2;
    const size_t n = size - 2, cut = (size_t)(data[0] | data[1] << 8) % (n + 1);
    char err[2048], a[512], b[512];
    err[0] = '\0';
    fuzz_write_file(a, sizeof a, NULL, "a.trace", body, cut);
    fuzz_write_file(b, sizeof b, NULL, "b.trace", body + cut, n - cut);
    int parted = -1;
    int rc = trace_diff(devnull, a, b, &parted, err, sizeof err);
    if (rc) FUZZ_REQUIRE(err[0] && (strstr(err, "a.trace") || strstr(err, "b.trace")),
                         "trace refused without naming the file: '%s'", err);
    else FUZZ_REQUIRE(parted == 0 || parted == 1, "trace diff accepted both files but did not say whether they part");
    return 0;
}
