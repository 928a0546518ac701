/* cuda_backend.cu: the CUDA backend's life cycle and memory (cudaMalloc'd, zeroed; one stream per
 * backend so ops run in issue order), and the ops table. Every call is checked; a failure names the
 * op. Kernels live one family per file: cuda_matmul.cu, cuda_norm.cu, cuda_attention.cu,
 * cuda_gdn.cu, cuda_elementwise.cu. */
#include <stdlib.h>

#include "cuda_backend.h"
#include "cuda_common.cuh"

static void cu_destroy(qbackend *be) {
    if (!be) return;
    cuda_state *s = (cuda_state *)be->impl;
    if (s) {
        cudaStreamSynchronize(s->stream);
        cudaStreamDestroy(s->stream);
        free(s);
    }
    free(be);
}

static qstatus cu_alloc(qbackend *be, size_t bytes, void **out) {
    void *p = NULL;
    if (bytes == 0) bytes = 1;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return q_fail(Q_ENOMEM, "cuda alloc of %zu bytes: %s", bytes, cudaGetErrorString(e));
    }
    e = cudaMemsetAsync(p, 0, bytes, cu_stream(be));
    if (e != cudaSuccess) {
        cudaFree(p);
        return q_fail(Q_ECUDA, "cuda alloc: memset: %s", cudaGetErrorString(e));
    }
    *out = p;
    return Q_OK;
}

static void cu_free(qbackend *be, void *p) {
    if (!p) return;
    cudaStreamSynchronize(cu_stream(be)); /* no pending kernel may still read it */
    cudaFree(p);
}

static qstatus cu_upload(qbackend *be, void *dst, const void *src, size_t bytes) {
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cu_stream(be)), "upload");
    CU_TRY(cudaStreamSynchronize(cu_stream(be)), "upload"); /* src may be reused by the caller */
    return Q_OK;
}

static qstatus cu_download(qbackend *be, void *dst, const void *src, size_t bytes) {
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cu_stream(be)), "download");
    CU_TRY(cudaStreamSynchronize(cu_stream(be)), "download");
    return Q_OK;
}

static qstatus cu_copy(qbackend *be, void *dst, const void *src, size_t bytes) {
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cu_stream(be)), "copy");
    return Q_OK;
}

static qstatus cu_zero(qbackend *be, void *dst, size_t bytes) {
    CU_TRY(cudaMemsetAsync(dst, 0, bytes, cu_stream(be)), "zero");
    return Q_OK;
}

static qstatus cu_sync(qbackend *be) {
    CU_TRY(cudaStreamSynchronize(cu_stream(be)), "sync");
    return Q_OK;
}

static qbackend_ops make_ops(void) {
    qbackend_ops o = {};
    o.name = "cuda";
    o.destroy = cu_destroy;
    o.alloc = cu_alloc;
    o.free = cu_free;
    o.upload = cu_upload;
    o.download = cu_download;
    o.copy = cu_copy;
    o.zero = cu_zero;
    o.sync = cu_sync;
    o.embed = cuda_embed;
    o.rmsnorm = cuda_rmsnorm;
    o.matmul = cuda_matmul;
    o.matmul_prefill = cuda_matmul_prefill;
    o.rope = cuda_rope;
    o.attention = cuda_attention;
    o.mul_sigmoid = cuda_mul_sigmoid;
    o.conv1d_silu = cuda_conv1d_silu;
    o.gdn_gates = cuda_gdn_gates;
    o.gated_delta = cuda_gated_delta;
    o.gated_rmsnorm = cuda_gated_rmsnorm;
    o.swiglu = cuda_swiglu;
    o.add = cuda_add;
    return o;
}

static const qbackend_ops cuda_ops = make_ops();

extern "C" qstatus cuda_backend_create(int device, qbackend **out) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        cudaGetLastError();
        return q_fail(Q_ECUDA, "cuda: no usable GPU (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    }
    if (device < 0 || device >= n) return q_fail(Q_EINVAL, "cuda: device %d of %d", device, n);
    CU_TRY(cudaSetDevice(device), "set device");
    qbackend *be = (qbackend *)calloc(1, sizeof *be);
    cuda_state *s = (cuda_state *)calloc(1, sizeof *s);
    if (!be || !s) {
        free(be);
        free(s);
        return q_fail(Q_ENOMEM, "cuda backend: out of memory");
    }
    s->device = device;
    e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        free(be);
        free(s);
        return q_fail(Q_ECUDA, "cuda stream create: %s", cudaGetErrorString(e));
    }
    be->ops = &cuda_ops;
    be->impl = s;
    *out = be;
    return Q_OK;
}
