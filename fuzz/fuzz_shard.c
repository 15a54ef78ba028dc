/* fuzz/fuzz_shard.c — training data sources (tdata_open: `train --data`):
 * llm.c / modded-nanogpt token shards, alone or in a directory with a
 * validation shard, and text files.
 *
 * Input: byte 0 picks the source (bits 0-2: 0 one shard file, 1 a directory
 * of a training and a validation shard split at the offset in bytes 2-3,
 * 2 a directory of one shard, 3 a text file, 4 text in memory), the shard
 * vocabulary (bits 3-4) and the held-out fraction (bits 5-6); byte 1 the
 * sequence length of the batches drawn; the rest is the file content.
 * Beyond not crashing: every token of every batch drawn from an accepted
 * source lies inside the source's vocabulary. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz/fuzz_util.h"
#include "trainer/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_tokens(const tdata *d, const int32_t *t, int n, const char *what)
{
    for (int i = 0; i < n; i++)
        FUZZ_REQUIRE(t[i] >= 0 && t[i] < d->vocab, "%s token %d = %d outside the vocabulary of %d", what, i, t[i],
                     d->vocab);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const int vocabs[] = {0, 256, 1000, 65535};
    static const double fracs[] = {0.1, 0.5, 0.0, 0.999};
    if (size < 4) return 0;
    const int mode = data[0] & 7, shard_vocab = vocabs[(data[0] >> 3) & 3], T = 1 + data[1] % 64;
    const double val_frac = fracs[(data[0] >> 5) & 3];
    const size_t split = (size_t)(data[2] | data[3] << 8);
    const uint8_t *body = data + 4;
    const size_t n = size - 4;
    char path[512], sub[512], err[2048];
    snprintf(sub, sizeof sub, "%s/shards", fuzz_dir());
    tdata d;
    int rc;
    err[0] = '\0';
    switch (mode) {
    case 0:
        fuzz_write_file(path, sizeof path, NULL, "tokens.bin", body, n);
        rc = tdata_open(&d, path, val_frac, shard_vocab, err, sizeof err);
        break;
    case 1:
    case 2: {
        fuzz_remove_tree(sub, 0);
        if (mkdir(sub, 0700) != 0) abort();
        const size_t cut = mode == 2 ? n : split % (n + 1);
        fuzz_write_file(path, sizeof path, sub, "fineweb_train_000001.bin", body, cut);
        if (mode == 1) fuzz_write_file(path, sizeof path, sub, "fineweb_val_000000.bin", body + cut, n - cut);
        rc = tdata_open(&d, sub, val_frac, shard_vocab, err, sizeof err);
        break;
    }
    case 3:
        fuzz_write_file(path, sizeof path, NULL, "corpus.txt", body, n);
        rc = tdata_open(&d, path, val_frac, shard_vocab, err, sizeof err);
        break;
    default:
        rc = tdata_open_bytes(&d, "fuzz input", body, n, val_frac, err, sizeof err);
        break;
    }
    if (rc) {
        FUZZ_REQUIRE(err[0], "data source refused without a message");
        return 0;
    }
    FUZZ_REQUIRE(d.vocab > 0 && d.n_train > 0 && d.n_val > 0, "accepted a source with vocab %d, %d training and %d "
                 "validation segments", d.vocab, d.n_train, d.n_val);
    if (tdata_check_windows(&d, T, err, sizeof err) == 0) {
        enum { B = 3 };
        int32_t tokens[B * 64], targets[B * 64];
        for (long step = 0; step < 4; step++) {
            tdata_train_batch(&d, 0x5eed, step, 0, 0, B, T, tokens, targets);
            check_tokens(&d, tokens, B * T, "training");
            check_tokens(&d, targets, B * T, "training target");
            tdata_val_batch(&d, (int)step, B, T, tokens, targets);
            check_tokens(&d, tokens, B * T, "validation");
            check_tokens(&d, targets, B * T, "validation target");
        }
    }
    tdata_close(&d);
    return 0;
}
