/* cuda_graph.cu: a decode forward as one CUDA graph launch (backend.h graph_begin / graph_end).
 * A 9B decode step is ~600 small kernels; issued one by one, the host's launch cost (a few us each)
 * exceeds the GPU time of most of them. graph_begin starts capturing the backend's stream; graph_end
 * ends the capture, updates the executable graph kept from the previous step in place when the
 * topology is the same (the usual case: only kernel arguments, grid sizes and staged tables differ),
 * else instantiates a new one, and launches it. The staged tables (cu_stage) are copies from pinned
 * host memory that the graph performs when it runs, right after the capture wrote them.
 * A capture can fail (an op that synchronises, such as a scratch buffer growing): graph_end then
 * reports it, nothing ran, and the model issues the same ops again without capture.
 * Off unless QUILL_CUDA_GRAPHS=1 (the ops table then has no graph_begin/graph_end): measured on the H200,
 * recording and updating the graph each step cost more than the launches it saves (9B 4-bit: 112.8
 * tokens/s with, 119.8 without; 242 vs 285 with programmatic launch; docs/performance.md), as long as a
 * step is bound by its kernels. */
#include <stdlib.h>
#include <string.h>

#include "cuda_common.cuh"

int cuda_graphs_enabled(void) {
    const char *v = getenv("QUILL_CUDA_GRAPHS");
    return v && !strcmp(v, "1");
}

qstatus cuda_graph_begin(qbackend *be) {
    CU_TRY(cudaStreamBeginCapture(cu_stream(be), cudaStreamCaptureModeThreadLocal), "graph capture");
    return Q_OK;
}

qstatus cuda_graph_end(qbackend *be, int ok) {
    cuda_state *s = (cuda_state *)be->impl;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(s->stream, &g);
    if (e != cudaSuccess || !ok || !g) {
        if (g) cudaGraphDestroy(g);
        cudaGetLastError(); /* a failed capture leaves a sticky-free error: clear it */
        return q_fail(Q_ECUDA, "cuda graph: capture failed (%s)", cudaGetErrorString(e));
    }
    if (s->graph_exec) {
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate(s->graph_exec, g, &info) != cudaSuccess) {
            cudaGetLastError();
            cudaGraphExecDestroy(s->graph_exec);
            s->graph_exec = NULL;
        }
    }
    if (!s->graph_exec) {
        e = cudaGraphInstantiate(&s->graph_exec, g, 0);
        if (e != cudaSuccess) {
            s->graph_exec = NULL;
            cudaGraphDestroy(g);
            cudaGetLastError();
            return q_fail(Q_ECUDA, "cuda graph: instantiate: %s", cudaGetErrorString(e));
        }
    }
    cudaGraphDestroy(g);
    CU_TRY(cudaGraphLaunch(s->graph_exec, s->stream), "graph launch");
    return Q_OK;
}
