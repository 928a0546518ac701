/* cmd_inspect.c: `quill inspect [MODEL_DIR] [--context C] [--parallel N] [--prompt-cache-gib G]
 * [--memory-reserve-gib R] [--backend cpu|cuda]`: the config, parameter counts and bytes per part,
 * weight formats, and the memory arithmetic, read from the checkpoint's headers without loading any
 * weight. The memory fit table is the one `quill serve` refuses to start with (engine/memfit.h). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "engine/memfit.h"
#include "format/config.h"
#include "format/safetensors.h"
#include "model/qwen35.h"
#ifdef QUILL_HAVE_CUDA
#include "backend/cuda/cuda_device.h"
#endif

enum { PART_EMBED, PART_HEAD, PART_ATTN, PART_GDN, PART_MLP, PART_NORM, PART_SKIPPED, N_PARTS };
static const char *part_names[N_PARTS] = {"embedding", "lm_head", "attention", "gated deltanet",
                                          "mlp", "norms", "skipped (vision, mtp)"};

static int classify(const char *name) {
    if (strstr(name, "visual.") || strstr(name, "vision_tower") || !strncmp(name, "mtp.", 4))
        return PART_SKIPPED;
    if (strstr(name, "embed_tokens")) return PART_EMBED;
    if (strstr(name, "lm_head")) return PART_HEAD;
    if (strstr(name, ".self_attn.") && !strstr(name, "_norm")) return PART_ATTN;
    if (strstr(name, ".linear_attn.") && !strstr(name, ".norm.")) return PART_GDN;
    if (strstr(name, ".mlp.")) return PART_MLP;
    if (strstr(name, "norm")) return PART_NORM;
    return PART_SKIPPED;
}

static double gib(double b) { return b / (1024.0 * 1024.0 * 1024.0); }
static double mib(double b) { return b / (1024.0 * 1024.0); }

int cmd_inspect(int argc, char **argv) {
    const char *model_arg = NULL;
    long long ctx = 0, parallel = 1;
    double pc_gib = 0, reserve_gib = -1;
    const char *backend = NULL;
    int kv_type = QKV_BF16, state_type = QSTATE_F32;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: quill inspect [MODEL_DIR] [--context C] [--parallel N] [--prompt-cache-gib G]\n"
                   "                     [--memory-reserve-gib R] [--backend cpu|cuda] [--kv-type bf16|f32|q8]\n"
                   "                     [--gdn-state-type f32|bf16]\n");
            return 0;
        } else if (!strcmp(argv[i], "--prompt-cache-gib") && i + 1 < argc) {
            if (cli_parse_float(argv[++i], &pc_gib) || pc_gib < 0) { fprintf(stderr, "quill inspect: bad --prompt-cache-gib\n"); return 2; }
        } else if (!strcmp(argv[i], "--memory-reserve-gib") && i + 1 < argc) {
            if (cli_parse_float(argv[++i], &reserve_gib) || reserve_gib < 0) { fprintf(stderr, "quill inspect: bad --memory-reserve-gib\n"); return 2; }
        } else if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
            backend = argv[++i];
            if (strcmp(backend, "cpu") && strcmp(backend, "cuda")) { fprintf(stderr, "quill inspect: bad --backend\n"); return 2; }
        } else if (!strcmp(argv[i], "--kv-type") && i + 1 < argc) {
            if (cli_parse_kv_type(argv[++i], &kv_type)) { fprintf(stderr, "quill inspect: bad --kv-type\n"); return 2; }
        } else if (!strcmp(argv[i], "--gdn-state-type") && i + 1 < argc) {
            if (cli_parse_gdn_state_type(argv[++i], &state_type)) { fprintf(stderr, "quill inspect: bad --gdn-state-type\n"); return 2; }
        } else if (!strcmp(argv[i], "--context") && i + 1 < argc) {
            if (cli_parse_int(argv[++i], 1, 1 << 24, &ctx)) { fprintf(stderr, "quill inspect: bad --context\n"); return 2; }
        } else if (!strcmp(argv[i], "--parallel") && i + 1 < argc) {
            if (cli_parse_int(argv[++i], 1, 4096, &parallel)) { fprintf(stderr, "quill inspect: bad --parallel\n"); return 2; }
        } else if (argv[i][0] != '-' && !model_arg) model_arg = argv[i];
        else { fprintf(stderr, "quill inspect: unexpected argument '%s'\n", argv[i]); return 2; }
    }
    const char *dir = cli_model_dir(model_arg);
    qwen35_config cfg;
    if (qwen35_config_load(dir, &cfg) != Q_OK) { fprintf(stderr, "quill inspect: %s\n", q_lasterr()); return 1; }
    cfg.kv_type = kv_type;
    cfg.gdn_state_type = state_type;
    st_set *set = NULL;
    if (st_open_dir(dir, &set) != Q_OK) {
        fprintf(stderr, "quill inspect: %s\n", q_lasterr());
        qwen35_config_free(&cfg);
        return 1;
    }
    if (ctx == 0) ctx = cfg.max_positions > 0 ? cfg.max_positions : 4096;

    int n_attn = 0;
    for (int l = 0; l < cfg.n_layers; l++) n_attn += cfg.layer_is_attn[l];
    printf("model         %s\n", dir);
    printf("architecture  %s (%s config)\n", cfg.architecture, cfg.nested ? "nested text_config" : "flat");
    printf("layers        %d: %d gated deltanet + %d full attention\n", cfg.n_layers, cfg.n_layers - n_attn, n_attn);
    printf("hidden        %d, intermediate %d, vocab %d, tied embeddings %s\n", cfg.hidden,
           cfg.intermediate, cfg.vocab_size, cfg.tie_embeddings ? "yes" : "no");
    printf("attention     %d query heads, %d kv heads, head dim %d, rope dims %d, theta %g\n",
           cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.rot_dim, (double)cfg.rope_theta);
    printf("deltanet      %d key heads x %d, %d value heads x %d, conv kernel %d\n", cfg.lin_n_k_heads,
           cfg.lin_k_dim, cfg.lin_n_v_heads, cfg.lin_v_dim, cfg.conv_kernel);
    printf("norm eps      %g, max positions %d\n", (double)cfg.rms_eps, cfg.max_positions);
    if (cfg.quant.enabled)
        printf("quantization  MLX affine, %d bits, group %d, %d overrides\n", cfg.quant.bits,
               cfg.quant.group, cfg.quant.n_overrides);

    /* parameters and bytes per part, formats */
    double params[N_PARTS] = {0}, bytes[N_PARTS] = {0};
    int fmt_count[ST_F64 + 2] = {0};
    for (int i = 0; i < st_count(set); i++) {
        const st_tensor *t = st_at(set, i);
        int part = classify(t->name);
        double n = (double)st_numel(t);
        size_t len = strlen(t->name);
        int quantized = t->dtype == ST_U32 && len > 7 && !strcmp(t->name + len - 7, ".weight");
        if (quantized) {
            char path[512];
            int bits = cfg.quant.bits, group = cfg.quant.group;
            snprintf(path, sizeof path, "%.*s", (int)(len - 7), t->name);
            qquant_lookup(&cfg.quant, path, &bits, &group);
            if (bits > 0) n = n * 32 / bits;
            fmt_count[ST_F64 + 1]++;
        } else if (!strstr(t->name, ".scales") && !strstr(t->name, ".biases")) {
            fmt_count[t->dtype]++;
        } else {
            n = 0; /* scales and biases: bytes, not parameters */
        }
        params[part] += n;
        bytes[part] += (double)t->n_bytes;
    }
    printf("\n%-24s %14s %12s\n", "part", "parameters", "bytes");
    double tp = 0, tb = 0;
    for (int p = 0; p < N_PARTS; p++) {
        if (params[p] == 0 && bytes[p] == 0) continue;
        printf("%-24s %14.0f %12.0f\n", part_names[p], params[p], bytes[p]);
        if (p != PART_SKIPPED) { tp += params[p]; tb += bytes[p]; }
    }
    printf("%-24s %14.0f %12.0f  (%.3f GiB)\n", "text model", tp, tb, gib(tb));
    printf("\nformats      ");
    for (int d = 0; d <= ST_F64; d++)
        if (fmt_count[d]) printf(" %s: %d tensors;", st_dtype_name((st_dtype)d), fmt_count[d]);
    if (fmt_count[ST_F64 + 1]) printf(" MLX affine: %d tensors;", fmt_count[ST_F64 + 1]);
    printf("\n");

    /* memory arithmetic (recurrent states in --gdn-state-type, K/V in --kv-type) */
    double kv_tok = (double)qwen35_kv_bytes_per_token(&cfg);
    double gdn = (double)qwen35_gdn_state_bytes(&cfg);
    printf("\nmemory (%s K/V, %s states)\n", qwen35_kv_type_name(&cfg), qwen35_gdn_state_type_name(&cfg));
    printf("  weights                 %10.1f MiB\n", mib(tb));
    printf("  K/V per token           %10.1f KiB  (%d attention layers x 2 x %lld bytes: %d heads x %d values%s)\n",
           kv_tok / 1024, n_attn, (long long)qwen35_kv_row_bytes(&cfg), cfg.n_kv_heads, cfg.head_dim,
           cfg.kv_type == QKV_Q8 ? " + a scale each, to 16 bytes" : "");
    printf("  GDN state per stream    %10.2f MiB  (conv + recurrent, %d layers)\n", mib(gdn), cfg.n_layers - n_attn);
    double kv_all = kv_tok * (double)ctx * (double)parallel;
    printf("  K/V at context %lld x %lld streams %10.1f MiB\n", ctx, parallel, mib(kv_all));
    printf("  total                   %10.1f MiB\n", mib(tb + kv_all + gdn * (double)parallel));

    /* the startup fit, as `quill serve` computes it (weights: the text model's tensors) */
#ifdef QUILL_HAVE_CUDA
    if (!backend) backend = cuda_device_count() > 0 ? "cuda" : "cpu";
#else
    if (!backend) backend = "cpu";
#endif
    qmemfit_params fp = {.n_ctx = (int)ctx, .n_parallel = (int)parallel, .prefill_chunk = 512,
                         .prompt_cache_gib = pc_gib, .reserve_gib = reserve_gib,
                         .no_dequant_copies = !memfit_dequant_copies(&cfg, backend)};
    int64_t free_b = 0, total_b = 0;
    const char *source = NULL;
    if (memfit_device_memory(backend, 0, &free_b, &total_b, &source) != Q_OK) {
        printf("\n(memory fit: %s)\n", q_lasterr());
    } else {
        qmemfit fit;
        int64_t weights = (int64_t)tb; /* with the CUDA backend's head sketch, where it makes one */
        if (memfit_weights_bytes(dir, backend, &weights, NULL) != Q_OK) weights = (int64_t)tb;
        memfit_compute(&cfg, weights, &fp, free_b, total_b, source, &fit);
        char table[2048];
        memfit_table(&fit, &fp, table, sizeof table);
        printf("\n%s backend: %s", backend, table);
    }
#ifdef QUILL_HAVE_CUDA
    int n_dev = cuda_device_count();
    for (int d = 0; d < n_dev; d++) {
        cuda_device_info info;
        char err[256];
        if (cuda_device_query(d, &info, err, sizeof err) == 0)
            printf("  GPU %d: %s, sm_%d%d, %.1f GiB free of %.1f GiB\n", d, info.name, info.sm_major,
                   info.sm_minor, gib((double)info.free_bytes), gib((double)info.total_bytes));
    }
#endif
    st_close(set);
    qwen35_config_free(&cfg);
    return 0;
}
