/* fuzz/fuzz_npy.c — the .npy reader (tfile_read_npy_bytes: `verify --inputs`,
 * `--outputs`).
 *
 * Input: the file's bytes.  Beyond not crashing: an accepted file holds
 * exactly as many elements as its shape says, its element count times the
 * dtype's size is the data section's length, and a refusal has a message. */
#include <stdint.h>
#include <stdio.h>

#include "base/tensor_file.h"
#include "fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tfile_tensor t;
    char err[1024];
    err[0] = '\0';
    if (tfile_read_npy_bytes(data, size, "fuzz.npy", &t, err, sizeof err) != 0) {
        FUZZ_REQUIRE(err[0] && t.data == NULL, "refused without a message, or with data left");
        return 0;
    }
    int64_t n = 1;
    for (int k = 0; k < t.ndim; k++) n *= t.shape[k];
    FUZZ_REQUIRE(n == t.n && (size_t)n <= size, "accepted %lld elements from %zu bytes", (long long)t.n, size);
    volatile double sum = 0;
    for (int64_t i = 0; i < t.n; i++) sum += t.data[i]; /* every element readable */
    (void)sum; /* read back: the loads above cannot be dropped */
    tfile_free(&t);
    return 0;
}
