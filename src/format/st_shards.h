/* st_shards.h: writing a checkpoint as safetensors shards plus model.safetensors.index.json, the way
 * Hugging Face's save_pretrained lays it out. Tensors are buffered until a shard reaches its byte
 * limit, then written; names are model-0000i-of-0000N.safetensors once N is known (a single shard is
 * written as model.safetensors with no index). Used by `quill synth` and `quill quantize`. */
#ifndef QUILL_ST_SHARDS_H
#define QUILL_ST_SHARDS_H

#include <stdint.h>

#include "safetensors.h"

typedef struct st_shards st_shards;

/* Starts writing into dir (which must exist). shard_bytes: the soft limit per shard. */
qstatus st_shards_create(const char *dir, int64_t shard_bytes, st_shards **out);
/* Adds a tensor; takes ownership of data (malloc'd; freed after its shard is written, or on error). */
qstatus st_shards_add(st_shards *w, const char *name, st_dtype dtype, int n_dims, const int64_t *shape,
                      void *data);
/* Writes the last shard, renames the shards to their final names and writes the index. Frees w. */
qstatus st_shards_finish(st_shards *w);
/* Drops everything not yet written and frees w (after an error). */
void st_shards_abort(st_shards *w);

#endif
