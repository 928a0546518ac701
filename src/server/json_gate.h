/* json_gate.h: request bodies parsed with a bound on how many large ones are parsed at once. */
#ifndef QUILL_JSON_GATE_H
#define QUILL_JSON_GATE_H

#include <jansson.h>
#include <stddef.h>

#define JSON_GATE_BIG_BYTES (1u << 20) /* bodies over this take a slot */
#define JSON_GATE_SLOTS 4              /* large bodies parsed at once */

/* json_loadb(body, n, flags, e), waiting for a slot first when n > JSON_GATE_BIG_BYTES. */
json_t *json_gate_loadb(const char *body, size_t n, size_t flags, json_error_t *e);

#endif
