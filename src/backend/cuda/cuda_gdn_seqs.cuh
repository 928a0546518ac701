/* cuda_gdn_seqs.cuh: the per-seq table the Gated DeltaNet launches carry (cu_tab: one launch covers every stream,
 * grid.z = seq). Included by cuda_gdn.cu (the gated delta rule) and cuda_gdn_conv.cu (the conv and the gates). */
#ifndef QUILL_CUDA_GDN_SEQS_CUH
#define QUILL_CUDA_GDN_SEQS_CUH

#include <stdlib.h>

#include "cuda_common.cuh"

/* One entry per seq, in a table the launch carries (cu_tab) so one launch covers every stream
 * (grid.z = seq). */
typedef struct seq_desc {
    int row0, n_rows;
    float *state; /* conv state or recurrent state S of this seq */
} seq_desc;
typedef struct seq_desc2 { /* conv_gated_delta's: both states */
    int row0, n_rows;
    float *state, *conv;
} seq_desc2;

/* conv: the seqs' conv states for conv_gated_delta's table (seq_desc2), else NULL (seq_desc). */
static inline qstatus seq_table(qbackend *be, const qseq *seqs, int n_seqs, float *const *state, cu_tab *out,
                         float *const *conv = NULL) {
    const size_t size = conv ? sizeof(seq_desc2) : sizeof(seq_desc);
    unsigned char *tab = (unsigned char *)malloc((size_t)n_seqs * size);
    if (!tab) return q_fail(Q_ENOMEM, "cuda gdn: out of memory");
    for (int s = 0; s < n_seqs; s++) {
        const seq_desc2 e = {seqs[s].row0, seqs[s].n_rows, state[s], conv ? conv[s] : NULL};
        memcpy(tab + s * size, &e, size); /* seq_desc is seq_desc2's first members */
    }
    qstatus st = cu_tab_make(be, tab, (size_t)n_seqs * size, out);
    free(tab);
    return st;
}

#endif
