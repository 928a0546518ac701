/* cuda_elementwise.cu: x += y, y = silu(gate) * up, out *= sigmoid(gate): one thread per element. */
#include "cuda_common.cuh"

#define EW_THREADS 256

__global__ void add_kernel(float *x, const float *__restrict__ y, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x;
    if (i < n) x[i] += y[i];
}

qstatus cuda_add(qbackend *be, float *x, const float *y, int64_t n) {
    if (n <= 0) return Q_OK;
    add_kernel<<<cu_blocks(n, EW_THREADS), EW_THREADS, 0, cu_stream(be)>>>(x, y, n);
    CU_LAUNCHED("add");
    return Q_OK;
}

__global__ void swiglu_kernel(const float *gate, const float *up, int64_t n, float *y) {
    const int64_t i = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x;
    if (i < n) y[i] = silu_f(gate[i]) * up[i];
}

qstatus cuda_swiglu(qbackend *be, const float *gate, const float *up, int64_t n, float *y) {
    if (n <= 0) return Q_OK;
    swiglu_kernel<<<cu_blocks(n, EW_THREADS), EW_THREADS, 0, cu_stream(be)>>>(gate, up, n, y);
    CU_LAUNCHED("swiglu");
    return Q_OK;
}

__global__ void mul_sigmoid_kernel(float *out, const float *__restrict__ gate, int64_t gs, int64_t n_vec,
                                   int dim) {
    const int64_t i = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x;
    if (i >= n_vec * dim) return;
    const int64_t v = i / dim, d = i % dim;
    out[i] *= sigmoid_f(gate[v * gs + d]);
}

qstatus cuda_mul_sigmoid(qbackend *be, float *out, const float *gate, int64_t gate_stride, int64_t n_vec,
                         int dim) {
    if (n_vec <= 0) return Q_OK;
    mul_sigmoid_kernel<<<cu_blocks(n_vec * dim, EW_THREADS), EW_THREADS, 0, cu_stream(be)>>>(
        out, gate, gate_stride, n_vec, dim);
    CU_LAUNCHED("mul_sigmoid");
    return Q_OK;
}
