/* cuda_backend.cu: the CUDA backend's life cycle and memory (cudaMalloc'd, zeroed; one stream per
 * backend so ops run in issue order), and the ops table. Every call is checked; a failure names the
 * op. Kernels live one family per file: cuda_matmul.cu, cuda_norm.cu, cuda_attention.cu,
 * cuda_gdn.cu (the gated delta rule; its conv and gates: cuda_gdn_conv.cu), cuda_elementwise.cu. */
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "cuda_common.cuh"

#define STAGE_BYTES ((size_t)4 << 20)

static void cu_destroy(qbackend *be) {
    if (!be) return;
    cuda_state *s = (cuda_state *)be->impl;
    if (s) {
        cudaStreamSynchronize(s->stream);
        cudaFreeHost(s->stage_host);
        cudaFree(s->stage_dev);
        cudaFree(s->att_part);
        if (s->graph_exec) cudaGraphExecDestroy(s->graph_exec);
        cu_gemm_free(s);
        cu_gemv_free(s);
        cudaStreamDestroy(s->stream);
        free(s);
    }
    free(be);
}

qstatus cu_stage(qbackend *be, const void *host, size_t bytes, void **dev) {
    cuda_state *s = (cuda_state *)be->impl;
    size_t need = (bytes + 255) & ~(size_t)255;
    if (need > s->stage_cap) return q_fail(Q_EINVAL, "cuda stage: %zu bytes exceed the %zu-byte table", bytes, s->stage_cap);
    if (s->stage_off + need > s->stage_cap) { /* full: wait for the copies in flight, start over */
        CU_NOT_CAPTURING(s->stream, "stage");
        CU_TRY(cudaStreamSynchronize(s->stream), "stage");
        s->stage_off = 0;
    }
    memcpy(s->stage_host + s->stage_off, host, bytes);
    CU_TRY(cudaMemcpyAsync(s->stage_dev + s->stage_off, s->stage_host + s->stage_off, bytes,
                           cudaMemcpyHostToDevice, s->stream), "stage");
    *dev = s->stage_dev + s->stage_off;
    s->stage_off += need;
    return Q_OK;
}

qstatus cu_grow(cuda_state *s, void **buf, size_t *have, size_t need, const char *what) {
    if (need <= *have) return Q_OK;
    CU_NOT_CAPTURING(s->stream, what);
    CU_TRY(cudaStreamSynchronize(s->stream), what);
    cudaFree(*buf);
    *buf = NULL;
    *have = 0;
    const size_t want = need + need / 2;
    cudaError_t e = cudaMalloc(buf, want);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return q_fail(Q_ENOMEM, "cuda %s of %zu bytes: %s", what, want, cudaGetErrorString(e));
    }
    *have = want;
    return Q_OK;
}

qstatus cu_att_scratch(qbackend *be, size_t bytes, float **out) {
    cuda_state *s = (cuda_state *)be->impl;
    Q_TRY(cu_grow(s, (void **)&s->att_part, &s->att_part_bytes, bytes, "attention scratch"));
    *out = s->att_part;
    return Q_OK;
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
    if (bytes <= 65536) { /* small (ids, positions): through the pinned stage, no wait */
        void *staged = NULL;
        Q_TRY(cu_stage(be, src, bytes, &staged));
        CU_TRY(cudaMemcpyAsync(dst, staged, bytes, cudaMemcpyDeviceToDevice, cu_stream(be)), "upload");
        return Q_OK;
    }
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cu_stream(be)), "upload");
    CU_TRY(cudaStreamSynchronize(cu_stream(be)), "upload"); /* src may be reused by the caller */
    return Q_OK;
}

static qstatus cu_download(qbackend *be, void *dst, const void *src, size_t bytes) {
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cu_stream(be)), "download");
    CU_TRY(cudaStreamSynchronize(cu_stream(be)), "download");
    ((cuda_state *)be->impl)->stage_off = 0; /* every staged copy has completed */
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
    ((cuda_state *)be->impl)->stage_off = 0;
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
    o.pack_weight = cuda_pack_weight;
    o.embed = cuda_embed;
    o.rmsnorm = cuda_rmsnorm;
    o.matmul = cuda_matmul;
    o.matmul_multi = cuda_matmul_multi;
    o.group_weights = cuda_group_weights;
    o.matmul_prefill = cuda_matmul_prefill;
    o.matmul_prefill_multi = cuda_matmul_prefill_multi;
    o.swiglu_matmul_prefill = cuda_swiglu_matmul_prefill;
#ifndef QUILL_CUDA_GLU
#define QUILL_CUDA_GLU 1 /* 0: no glu_matmul (the gate as its own launch; an A/B of the fused staging) */
#endif
    o.glu_matmul = QUILL_CUDA_GLU ? cuda_glu_matmul : NULL;
    const char *fuse = getenv("QUILL_CUDA_NORM_FUSE"); /* "0": add_rmsnorm as its own launch (an A/B) */
    if (!fuse || strcmp(fuse, "0")) {
        o.resid_matmul = cuda_resid_matmul;
        o.norm_matmul_multi = cuda_norm_matmul_multi;
        o.norm_fusable = cuda_norm_fusable;
    }
    o.rope = cuda_rope;
    o.qk_norm_rope = cuda_qk_norm_rope;
    o.attention = cuda_attention;
    o.attention_gated = cuda_attention_gated;
    o.mul_sigmoid = cuda_mul_sigmoid;
    o.conv1d_silu = cuda_conv1d_silu;
    o.gdn_gates = cuda_gdn_gates;
    o.conv1d_silu_gates = cuda_conv1d_silu_gates;
    o.gated_delta = cuda_gated_delta;
    o.conv_gated_delta = cuda_conv_gated_delta;
    o.gated_rmsnorm = cuda_gated_rmsnorm;
    o.swiglu = cuda_swiglu;
    o.add = cuda_add;
    if (cuda_graphs_enabled()) { /* off by default: slower today (cuda_graph.cu) */
        o.graph_begin = cuda_graph_begin;
        o.graph_end = cuda_graph_end;
    }
    o.add_rmsnorm = cuda_add_rmsnorm;
    o.argmax = cuda_argmax;
    o.draw = cuda_draw;
    o.head_sketch_make = cuda_head_sketch_make;
    o.head_sketch_free = cuda_head_sketch_free;
    o.head_argmax = cuda_head_argmax;
    o.vm_reserve = cuda_vm_reserve;
    o.vm_map = cuda_vm_map;
    o.vm_unmap = cuda_vm_unmap;
    o.vm_release = cuda_vm_release;
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
    if (e == cudaSuccess) e = cudaMallocHost((void **)&s->stage_host, STAGE_BYTES);
    if (e == cudaSuccess) e = cudaMalloc((void **)&s->stage_dev, STAGE_BYTES);
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (s->stream) cudaStreamDestroy(s->stream);
        cudaFreeHost(s->stage_host);
        free(be);
        free(s);
        return q_fail(Q_ECUDA, "cuda backend create: %s", cudaGetErrorString(e));
    }
    s->stage_cap = STAGE_BYTES;
    be->ops = &cuda_ops;
    be->impl = s;
    *out = be;
    return Q_OK;
}
