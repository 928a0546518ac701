/* json_gate.c: jansson holds ~18 times the size of a body of token ids while it parses it (8 MB of
 * "1," becomes ~150 MB of json_t), and every connection has its own thread, so many large bodies at
 * once could take the machine's memory. Bodies over JSON_GATE_BIG_BYTES are parsed JSON_GATE_SLOTS at
 * a time; the others wait for a slot (their connection thread blocks); small bodies never wait. */
#include "json_gate.h"

#include <pthread.h>

static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int gate_busy;

json_t *json_gate_loadb(const char *body, size_t n, size_t flags, json_error_t *e) {
    const int big = n > JSON_GATE_BIG_BYTES;
    if (big) {
        pthread_mutex_lock(&gate_mu);
        while (gate_busy >= JSON_GATE_SLOTS) pthread_cond_wait(&gate_cv, &gate_mu);
        gate_busy++;
        pthread_mutex_unlock(&gate_mu);
    }
    json_t *root = json_loadb(body, n, flags, e);
    if (big) {
        pthread_mutex_lock(&gate_mu);
        gate_busy--;
        pthread_cond_signal(&gate_cv);
        pthread_mutex_unlock(&gate_mu);
    }
    return root;
}
