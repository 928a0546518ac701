/* hash.c: FNV-1a 64. */
#include "hash.h"

uint64_t q_fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

uint64_t q_hash_tokens(const int32_t *ids, size_t n) {
    uint64_t h = Q_FNV_OFFSET;
    for (size_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)ids[i];
        unsigned char b[4] = {v & 255, (v >> 8) & 255, (v >> 16) & 255, v >> 24};
        h = q_fnv1a(h, b, 4);
    }
    return h;
}
