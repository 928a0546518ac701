/* cuda_device.cu: device enumeration and memory query through the CUDA runtime. */
#include "cuda_device.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

extern "C" int cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no device" error */
        return 0;
    }
    return n;
}

extern "C" int cuda_device_query(int index, cuda_device_info *info, char *err, size_t cap) {
    cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, index);
    if (e != cudaSuccess) {
        snprintf(err, cap, "cudaGetDeviceProperties(%d): %s", index, cudaGetErrorString(e));
        return -1;
    }
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "%s", prop.name);
    info->sm_major = prop.major;
    info->sm_minor = prop.minor;
    info->n_sms = prop.multiProcessorCount;
    if ((e = cudaSetDevice(index)) != cudaSuccess ||
        (e = cudaMemGetInfo(&info->free_bytes, &info->total_bytes)) != cudaSuccess) {
        snprintf(err, cap, "cudaMemGetInfo(%d): %s", index, cudaGetErrorString(e));
        return -1;
    }
    return 0;
}
