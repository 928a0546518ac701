/* fileio.h: read a whole file; join paths. */
#ifndef QUILL_FILEIO_H
#define QUILL_FILEIO_H

#include <stddef.h>

#include "status.h"

/* Reads all of `path` into an owned, NUL-terminated buffer (*out, free with free()); *n_out gets the
 * byte count without the NUL. Fails with Q_EIO naming the path. */
qstatus q_read_file(const char *path, char **out, size_t *n_out);

/* Writes dir + "/" + name into buf (size cap). Fails with Q_EINVAL if it does not fit. */
qstatus q_path_join(char *buf, size_t cap, const char *dir, const char *name);

int q_file_exists(const char *path);

#endif
