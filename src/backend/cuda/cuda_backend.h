/* cuda_backend.h: the CUDA implementation of backend.h's op interface. */
#ifndef QUILL_CUDA_BACKEND_H
#define QUILL_CUDA_BACKEND_H

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Creates a backend on GPU `device` with its own stream. Owned; free with be->ops->destroy.
 * Fails with Q_ECUDA naming the call when there is no usable GPU. */
qstatus cuda_backend_create(int device, qbackend **out);

#ifdef __cplusplus
}
#endif

#endif
