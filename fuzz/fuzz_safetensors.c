/* fuzz/fuzz_safetensors.c — the safetensors reader
 * (tfile_read_safetensors_bytes: `verify --inputs`, `--outputs`).
 *
 * Input: the file's bytes.  Beyond not crashing: every accepted tensor has a
 * name, as many elements as its shape says and no more than the file's
 * bytes could hold, and a refusal has a message and returns nothing. */
#include <stdint.h>
#include <stdio.h>

#include "base/tensor_file.h"
#include "fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tfile_tensor *ts;
    int n;
    char err[1024];
    err[0] = '\0';
    if (tfile_read_safetensors_bytes(data, size, "fuzz.safetensors", &ts, &n, err, sizeof err) != 0) {
        FUZZ_REQUIRE(err[0] && ts == NULL && n == 0, "refused without a message, or with tensors left");
        return 0;
    }
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        int64_t e = 1;
        for (int k = 0; k < ts[i].ndim; k++) e *= ts[i].shape[k];
        FUZZ_REQUIRE(ts[i].name[0] && e == ts[i].n, "tensor %d: name '%s', %lld elements for its shape", i, ts[i].name,
                     (long long)ts[i].n);
        total += ts[i].n;
        volatile double sum = 0;
        for (int64_t j = 0; j < ts[i].n; j++) sum += ts[i].data[j];
        (void)sum; /* read back: the loads above cannot be dropped */
    }
    FUZZ_REQUIRE((size_t)total <= size, "%lld elements from %zu bytes", (long long)total, size);
    tfile_free_all(ts, n);
    return 0;
}
