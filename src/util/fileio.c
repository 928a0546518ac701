/* fileio.c: whole-file reads and path joins. */
#include "fileio.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

qstatus q_read_file(const char *path, char **out, size_t *n_out) {
    FILE *f = fopen(path, "rb");
    if (!f) return q_fail(Q_EIO, "%s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) { fclose(f); return q_fail(Q_ENOMEM, "%s: out of memory", path); }
    for (;;) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        char *nb = realloc(buf, cap * 2 + 1);
        if (!nb) { free(buf); fclose(f); return q_fail(Q_ENOMEM, "%s: out of memory", path); }
        buf = nb;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (err) { free(buf); return q_fail(Q_EIO, "%s: read error", path); }
    buf[n] = 0;
    *out = buf;
    if (n_out) *n_out = n;
    return Q_OK;
}

qstatus q_path_join(char *buf, size_t cap, const char *dir, const char *name) {
    int n = snprintf(buf, cap, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= cap) return q_fail(Q_EINVAL, "path too long: %s/%s", dir, name);
    return Q_OK;
}

int q_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}
