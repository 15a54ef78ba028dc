/* base/tensor_file.h — tensors from NumPy .npy files and safetensors files,
 * the files `ulpscope verify` reads (what a kernel outside ulpscope saw and
 * produced).
 *
 * Outside input: a malformed, truncated or hostile file is refused with one
 * line naming the file and the problem, never a crash, a hang or an
 * allocation larger than the file.  Accepted:
 *   .npy (format 1.0, 2.0, 3.0): C order, dtypes f8 f4 f2 (either byte
 *     order), u2 (16-bit patterns, e.g. bf16 bits saved through a uint16
 *     view), u1, i4, i8; a header that is exactly NumPy's dict literal
 *     {'descr': ..., 'fortran_order': ..., 'shape': (...)} and a data
 *     section of exactly the size the shape says;
 *   .safetensors: a little-endian u64 header length, a JSON header
 *     {NAME: {"dtype", "shape", "data_offsets"}, "__metadata__": {...}} and
 *     the data; dtypes F64 F32 F16 BF16 U16 U8 I32 I64; every tensor's bytes
 *     inside the data section, of the size its shape says, not overlapping.
 * Values are decoded to double (f2, bf16 exactly; integers exactly up to
 * 2^53, larger ones refused).  Fortran order is refused (save a C-ordered
 * copy).  Libc only. */
#ifndef ULPSCOPE_BASE_TENSOR_FILE_H
#define ULPSCOPE_BASE_TENSOR_FILE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TFILE_MAX_DIMS 8
#define TFILE_MAX_TENSORS 4096 /* in one safetensors file */

/* The element types as the files store them. */
typedef enum {
    TFILE_F64 = 0,
    TFILE_F32,
    TFILE_F16,  /* IEEE binary16 */
    TFILE_BF16, /* safetensors BF16 */
    TFILE_U16,  /* 16-bit patterns or integers (a reader decides which) */
    TFILE_U8,
    TFILE_I32,
    TFILE_I64,
    TFILE_NDTYPES
} tfile_dtype;

const char *tfile_dtype_name(tfile_dtype d); /* "f4", "bf16", ... */
int tfile_dtype_is_float(tfile_dtype d);     /* F64, F32, F16, BF16 */

typedef struct {
    char name[128];     /* safetensors: the tensor's name; .npy: "" */
    tfile_dtype dtype;
    int ndim;           /* 0 for a scalar */
    int64_t shape[TFILE_MAX_DIMS];
    int64_t n;          /* elements: the product of shape */
    double *data;       /* n values, C order (malloc'ed; NULL when n = 0) */
} tfile_tensor;

/* From a file / from bytes in memory (`what` names them in messages).  On
 * failure: -1, *t zeroed, err = "WHAT: the problem". */
int tfile_read_npy(const char *path, tfile_tensor *t, char *err, size_t errlen);
int tfile_read_npy_bytes(const unsigned char *buf, size_t len, const char *what, tfile_tensor *t, char *err,
                         size_t errlen);
/* All tensors of a safetensors file: *ts (n of them, in the header's order;
 * free with tfile_free_all). */
int tfile_read_safetensors(const char *path, tfile_tensor **ts, int *n, char *err, size_t errlen);
int tfile_read_safetensors_bytes(const unsigned char *buf, size_t len, const char *what, tfile_tensor **ts, int *n,
                                 char *err, size_t errlen);
void tfile_free(tfile_tensor *t);
void tfile_free_all(tfile_tensor *ts, int n);

/* Writes values as a .npy file of dtype F64, F32, F16 or BF16 (written as
 * '<u2' bit patterns, NumPy having no bf16); every value must be exact in
 * the dtype (else -1, naming the first that is not).  For tests and
 * examples; the file is written to PATH.tmp.PID and renamed over PATH when
 * complete.  Returns 0 or -1 with err set. */
int tfile_write_npy(const char *path, tfile_dtype dtype, int ndim, const int64_t *shape, const double *values,
                    char *err, size_t errlen);

/* Bit conversions the readers use (exact). */
double tfile_half_to_double(uint16_t h);
double tfile_bf16_to_double(uint16_t b);

#ifdef __cplusplus
}
#endif
#endif
