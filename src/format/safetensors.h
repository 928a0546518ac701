/* safetensors.h: read (through mmap) and write the safetensors container.
 * Layout: u64 LE header size N, N bytes of JSON {name: {dtype, shape, data_offsets:[b,e]}, ...,
 * "__metadata__": {str: str}}, then the byte buffer (offsets relative to its start).
 * A checkpoint is one file (model.safetensors), several listed by model.safetensors.index.json
 * ({"weight_map": {name: file}}), or, without an index, every *.safetensors in the directory.
 * Every header is checked on open: JSON shape, known dtype, shape product * element size ==
 * end - begin, offsets inside the file, no overlap past the end; an error names file and tensor.
 * Tensors may be misaligned (MLX writes no padding): copy bytes out, never cast the pointer. */
#ifndef QUILL_SAFETENSORS_H
#define QUILL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "../util/status.h"

typedef enum st_dtype {
    ST_BOOL, ST_U8, ST_I8, ST_I16, ST_U16, ST_F16, ST_BF16, ST_I32, ST_U32, ST_F32, ST_I64, ST_U64, ST_F64
} st_dtype;

#define ST_MAX_DIMS 8

typedef struct st_tensor {
    const char *name;       /* owned by the st_set */
    const char *file;       /* path of the file holding it, owned by the st_set */
    st_dtype dtype;
    int n_dims;
    int64_t shape[ST_MAX_DIMS];
    uint64_t n_bytes;
    const unsigned char *data; /* into the mmap; possibly misaligned */
} st_tensor;

typedef struct st_set st_set;

/* Opens the checkpoint in `dir` (see above). Owned; close with st_close. */
qstatus st_open_dir(const char *dir, st_set **out);
/* Opens one .safetensors file. */
qstatus st_open_file(const char *path, st_set **out);
void st_close(st_set *set);

/* NULL if absent. */
const st_tensor *st_find(const st_set *set, const char *name);
/* Whether a tensor name ends with suffix (a name's tail names the tensor whatever its prefix convention). */
int st_name_ends(const char *name, const char *suffix);
int st_count(const st_set *set);
const st_tensor *st_at(const st_set *set, int i);

size_t st_dtype_size(st_dtype dt);
const char *st_dtype_name(st_dtype dt);
int64_t st_numel(const st_tensor *t);

/* Converts an F32/F16/BF16 tensor of exactly n elements to host f32 (copied out byte-wise, so a
 * misaligned tensor is fine). Fails with Q_EFORMAT naming file and tensor for another dtype or count. */
qstatus st_read_f32(const st_tensor *t, float *out, int64_t n);
/* Scalar conversions (IEEE binary16 with subnormals; bfloat16 with round-to-nearest-even). */
float st_f16_to_f32(uint16_t h);
float st_bf16_to_f32(uint16_t b);
uint16_t st_f32_to_bf16(float f);

/* Writing: a whole file at once. Header keys sorted by name, offsets packed in that order with no
 * padding between tensors; the JSON header is padded with spaces to a multiple of 8 bytes, like the
 * Python writer, so the byte buffer starts 8-aligned. */
typedef struct st_write_entry {
    const char *name;
    st_dtype dtype;
    int n_dims;
    int64_t shape[ST_MAX_DIMS];
    const void *data; /* numel * dtype size bytes */
} st_write_entry;

/* metadata: NULL or n_meta pairs of (key, value) strings. */
qstatus st_write_file(const char *path, const st_write_entry *entries, int n,
                      const char *const *meta_kv, int n_meta);

#endif
