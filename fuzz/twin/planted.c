/* fuzz/twin/planted.c — make fuzz's planted bug: a libFuzzer target built
 * like the others that reads past a heap block for an input beginning with
 * "PLANTED".  fuzz/run_fuzz.sh runs it on fuzz/twin/planted-input the way it
 * runs regression inputs and requires the failure, or a regression that
 * crashed again could pass unseen (a build without ASan, a runner that
 * ignores the status). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 7 || memcmp(data, "PLANTED", 7) != 0) return 0;
    char *copy = malloc(size);
    if (!copy) abort();
    memcpy(copy, data, size);
    volatile char past = copy[size]; /* the planted bug: one byte past the block */
    free(copy);
    return past == 1;
}
