/* trainer/data.h — training and validation tokens.
 *
 * Sources:
 *  - a text file: its bytes are the tokens (vocabulary 256);
 *  - a directory of llm.c / modded-nanogpt token shards (*.bin): a header
 *    of 256 little-endian int32 (magic 20240520, version 1, token count),
 *    then that many uint16 tokens; files with "val" in their name are the
 *    validation split, the others training (sorted by name);
 *  - a single .bin shard;
 *  - the embedded default corpus (trainer/corpus.c), when no path is given.
 * Without a validation shard the last val_frac of the training tokens is
 * held out.  Shards are memory-mapped and checked whole: a bad magic,
 * version, size or a token outside the vocabulary is an error naming the
 * file and what is wrong.
 *
 * Batches are a pure function of (seed, step, micro-batch, rank): a run
 * needs no loader state to resume bit-for-bit, and its position in the data
 * is its step.  What the data is, a checkpoint records as the token counts
 * and a hash of each split's tokens (in order, segment boundaries included). */
#ifndef ULPSCOPE_TRAINER_DATA_H
#define ULPSCOPE_TRAINER_DATA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TSHARD_MAGIC 20240520
#define TSHARD_VERSION 1
#define TSHARD_HEADER_INTS 256
#define TSHARD_GPT2_VOCAB 50257

typedef struct {
    const uint16_t *tok;
    int64_t n;
} tsegment;

typedef struct {
    char source[512];     /* what was opened, for the result header */
    int vocab;            /* 256 for bytes; the shards' vocabulary otherwise */
    tsegment *train, *val;
    int n_train, n_val;
    int64_t train_tokens, val_tokens;
    uint64_t train_hash, val_hash; /* the splits' identity */
    /* owned memory */
    uint16_t *text;       /* text sources: the bytes widened */
    void **maps;
    size_t *map_len;
    int n_maps;
} tdata;

extern const char tcorpus_default[];
extern const size_t tcorpus_default_len;

/* Open path (NULL: the embedded corpus).  shard_vocab bounds shard tokens
 * (0: the GPT-2 vocabulary, 50257).  Returns 0, or -1 with err naming the
 * file and the problem. */
int tdata_open(tdata *d, const char *path, double val_frac, int shard_vocab, char *err, size_t errlen);
/* The same from bytes in memory (text). */
int tdata_open_bytes(tdata *d, const char *name, const unsigned char *bytes, size_t n, double val_frac, char *err,
                     size_t errlen);
void tdata_close(tdata *d);

/* A training micro-batch: B windows of T+1 tokens drawn at positions that
 * depend only on (seed, step, micro, rank); tokens and targets [B*T]. */
void tdata_train_batch(const tdata *d, uint64_t seed, long step, int micro, int rank, int B, int T, int32_t *tokens,
                       int32_t *targets);
/* Validation batch `index` (0, 1, ...): consecutive windows from the start
 * of the validation split, wrapping around. */
void tdata_val_batch(const tdata *d, int index, int B, int T, int32_t *tokens, int32_t *targets);
/* 0 when both splits hold at least one window of T+1 tokens; else -1 with a message. */
int tdata_check_windows(const tdata *d, int T, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
