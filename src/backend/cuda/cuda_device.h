/* cuda_device.h: what GPUs this process sees (name, memory), for inspect, the memory fit and the
 * --backend default. Compiled only when nvcc is found; callers test QUILL_HAVE_CUDA. */
#ifndef QUILL_CUDA_DEVICE_H
#define QUILL_CUDA_DEVICE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cuda_device_info {
    char name[256];
    size_t free_bytes, total_bytes;
    int sm_major, sm_minor, n_sms;
} cuda_device_info;

/* Number of usable CUDA devices; 0 when there is no driver or no GPU (never an error). */
int cuda_device_count(void);
/* Fills *info for device `index`. Returns 0 on success, -1 with a message in err (size cap). */
int cuda_device_query(int index, cuda_device_info *info, char *err, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
