/* cuda_gemv_clusters.cuh: which decode matmul launches sum their K slices inside thread block clusters instead of
 * through partials in global memory and a ticket: dequant mode's many-row kernel (gemv_dq_kernel, gdq_cluster) and the
 * one-tile 4-bit staging kernels (gt_cluster), each where the GPU places the launch's clusters well. Included by
 * cuda_gemv_plan.cuh. */
#ifndef QUILL_CUDA_GEMV_CLUSTERS_CUH
#define QUILL_CUDA_GEMV_CLUSTERS_CUH

#include <mutex>

/* How many blocks of kernel k with smem bytes of dynamic shared memory fit the device at once in clusters of c; 0 on an
 * error (which is cleared, so that no later launch check reports it). */
template <typename F> static inline int64_t gemv_cluster_blocks(F *k, int c, size_t smem) {
    cudaLaunchAttribute at[2];
    const cudaLaunchConfig_t cfg = cu_launch_config(at, false, c, dim3(64 * c), dim3(GT_THREADS), smem, 0);
    int fit = 0;
    if (cudaOccupancyMaxActiveClusters(&fit, k, &cfg) != cudaSuccess) fit = 0, (void)cudaGetLastError();
    return (int64_t)fit * c;
}

/* Blocks that fit at once in clusters of GDQ_MAX_CLUSTER of gemv_dq_kernel (its instance with the most shared
 * memory; 0: the device cannot place one), asked once. */
static inline int gdq_fit_blocks(void) {
    static int blocks = -1; /* racing first callers compute the same value */
    if (blocks < 0)
        blocks = (int)gemv_cluster_blocks(gemv_dq_kernel<64, 8, true, GDQ_PLAIN>, GDQ_MAX_CLUSTER, gdq_cfg<8>::SMEM);
    return blocks;
}
/* The cluster finish unless QUILL_CUDA_GDQ_CLUSTER=0 or the device cannot place a cluster of GDQ_MAX_CLUSTER. */
static inline int gdq_cluster_on(void) {
    static int env = -1;
    return cu_env_on("QUILL_CUDA_GDQ_CLUSTER", &env) && gdq_fit_blocks() > 0;
}
/* The cluster size of a job's gemv_dq_kernel launch of nt tiles (its finish in the cluster, gdq_finish_cluster): the
 * largest S, when every weight's blocks come in whole clusters, it is portable, and each block of a cluster sums
 * 8 rows or more (c <= nt) or the cluster is small enough that the device places about as many blocks in such
 * clusters as alone (c <= GDQ_WAVE_CLUSTER); else 0 (gt_finish's tickets). bench_gemv, pipelined us, tickets /
 * cluster: 64 rows 4096x4096 28.4 / 19.7-21.6, 12288x4096 42.3 / 32.5, the head 536 / 360; 16 rows 4096x4096
 * (c = 8) 13.2 / 17.0, 4096x12288 (c = 8) 22.9 / 26.6, the head (c = 2) 296 / 260; 16 rows, dequant mode's
 * slices of 16 units: 4096x4096 (c = 4) 13.4 / 12.8, 12288x4096 (c = 4) 24.2 / 23.6. A cluster of 8 blocks is
 * placed as a whole (30 fit, 240 blocks, where 264 fit alone; 62 of 4: 248), and at 16 rows the last block's sum
 * of the partials is short. Clusters of 6 (gemv_tc_split's 6 slices: the 9B's down projection, 32 clusters) beat
 * the tickets at 16 and 32 rows too (64 rows: 4096x12288 30.9 us against 35.8 with 8 slices; 16 / 32 / 64 streams
 * +0.3 / +3 / +4 % against 8 slices, where the tickets with 6 lost 3.5 % at 16 and 32 streams; session 34). */
#define GDQ_WAVE_CLUSTER 4
/* The rule above for clusters of c blocks on nt tiles (gdq_cluster; gemv_tc_glu_rows_ok). */
static inline bool gdq_cluster_fits(int c, int nt) {
    return c >= 2 && c <= GDQ_MAX_CLUSTER && (c <= nt || c <= GDQ_WAVE_CLUSTER || c == 6) && gdq_cluster_on();
}
static inline int gdq_cluster(const gt_job &job, int nt) {
    int c = 1;
    for (int i = 0; i < job.count; i++) c = std::max(c, job.S[i]);
    for (int i = 0; i < job.count; i++) /* a one-slice weight's sums go straight to y in gt_finish (no partials) */
        if (job.S[i] < 2 || c % job.S[i] != 0 || (job.start[i + 1] - job.start[i]) % c != 0) return 0;
    return gdq_cluster_fits(c, nt) ? c : 0;
}

/* The one-tile 4-bit launches' cluster finish (gt_finish's cl). QUILL_CUDA_GT_CLUSTER: 0 off (the ticket finish
 * everywhere: an A/B in one build, the same bits), 1 (the default) where the launch's variant places its clusters in
 * one wave, 2 also where only the lean variant does (on the 9B, out_proj, o_proj and down in clusters of 8 on the lean
 * variant: each launch slower, the loop by ~1 us and the finish, which waits for the slowest of 8, by ~1 us;
 * docs/performance.md, fifty-eighth pass). Read once. */
static inline int gt_cluster_level(void) {
    static int level = -1;
    return cu_env_int("QUILL_CUDA_GT_CLUSTER", &level, 1, 0, 2);
}
/* gemv_cluster_blocks for a one-tile staging kernel, asked once for each (kernel, c, smem) and kept. */
static inline int64_t gt_cluster_blocks(kernel_fn k, int c, size_t smem) {
    struct entry {
        kernel_fn k;
        int c;
        size_t smem;
        int64_t blocks;
    };
    static entry seen[64];
    static int n_seen = 0;
    static std::mutex mu;
    std::lock_guard<std::mutex> lock(mu);
    for (int i = 0; i < n_seen; i++)
        if (seen[i].k == k && seen[i].c == c && seen[i].smem == smem) return seen[i].blocks;
    const int64_t blocks = gemv_cluster_blocks(k, c, smem);
    if (n_seen < 64) seen[n_seen++] = entry{k, c, smem, blocks};
    return blocks;
}
/* A one-tile job's cluster size: its smallest S, where every S is a multiple of it (so each weight's blocks come in
 * whole clusters) and it is a portable size of at least 2; else 0. The weights of S = cl finish in their clusters,
 * the others by tickets. */
static inline int gt_cluster(const gt_job &job, int n) {
    if (n > 4 || job.loop || job.xs || gt_cluster_level() == 0) return 0;
    int c = GT_MAX_SPLIT;
    for (int i = 0; i < job.count; i++) c = std::min(c, job.S[i]);
    if (c < 2 || c > GDQ_MAX_CLUSTER || (c & (c - 1)) != 0) return 0;
    for (int i = 0; i < job.count; i++)
        if (job.S[i] % c != 0) return 0;
    return c;
}

#endif
