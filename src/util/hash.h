/* hash.h: FNV-1a 64-bit, for token-id hashes (the exactness contract compares them) and hash tables. */
#ifndef QUILL_HASH_H
#define QUILL_HASH_H

#include <stddef.h>
#include <stdint.h>

#define Q_FNV_OFFSET 0xcbf29ce484222325ull

uint64_t q_fnv1a(uint64_t h, const void *data, size_t n);
/* Hash of a token-id sequence (each id as 4 little-endian bytes). */
uint64_t q_hash_tokens(const int32_t *ids, size_t n);

#endif
