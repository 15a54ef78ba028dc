/* fuzz/fuzz_fingerprint.c — matrix-unit fingerprints (JSON Lines) as
 * `probe --diff A B` reads them from files, and as `probe` prints one back
 * as a table.
 *
 * Input: byte 0 picks the reader (bit 0: 0 the table from memory, 1 the
 * diff of two files); bytes 1-2 the offset where the first file ends and
 * the second begins; the rest is the text of both. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/fuzz_util.h"
#include "kernels/probe/probe_fingerprint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static FILE *devnull;
    if (size < 3) return 0;
    if (!devnull && !(devnull = fopen("/dev/null", "w"))) abort();
    const uint8_t *body = data + 3;
    const size_t n = size - 3, cut = (size_t)(data[1] | data[2] << 8) % (n + 1);
    char err[2048], a[512], b[512];
    err[0] = '\0';
    int rc;
    if (data[0] & 1) {
        fuzz_write_file(a, sizeof a, NULL, "a.jsonl", body, cut);
        fuzz_write_file(b, sizeof b, NULL, "b.jsonl", body + cut, n - cut);
        rc = probe_fingerprint_diff(devnull, a, b, err, sizeof err);
    } else {
        /* fmemopen of 0 bytes fails: an empty text is given one newline */
        FILE *in = n ? fmemopen((void *)body, n, "r") : fmemopen((void *)"\n", 1, "r");
        if (!in) abort();
        rc = probe_fingerprint_table(devnull, in, err, sizeof err);
    }
    if (rc) FUZZ_REQUIRE(err[0], "fingerprint refused without a message");
    return 0;
}
