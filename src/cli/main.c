/* main.c: `quill COMMAND ...` dispatch and the helpers the subcommands share. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "format/config.h"
#include "util/status.h"
#ifdef QUILL_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_device.h"
#endif

static void usage(FILE *f) {
    fprintf(f,
            "usage: quill COMMAND [ARGS]\n"
            "  serve [MODEL_DIR] --port 8080 --parallel N  OpenAI-compatible HTTP server\n"
            "  run [MODEL_DIR] --prompt-ids 1,2,3 -n 32   generate token ids (greedy by default)\n"
            "  inspect [MODEL_DIR]                        config, parameters, formats, memory arithmetic\n"
            "  tokenize [MODEL_DIR] TEXT                  token ids of a text (or --file, --chat)\n"
            "  bench [MODEL_DIR]                          prefill and decode tokens/s against the bandwidth floor\n"
            "  synth --preset 9b|27b|4b|0.8b OUT_DIR      a random-weight checkpoint with real shapes\n"
            "  quantize IN_DIR OUT_DIR --bits 4           MLX affine quantization\n"
            "MODEL_DIR defaults to $QUILL_MODEL, else the model bundled in the repo.\n"
            "Run `quill COMMAND --help` for a command's options.\n");
}

const char *cli_model_dir(const char *positional) {
    if (positional) return positional;
    const char *env = getenv("QUILL_MODEL");
    return env && *env ? env : QUILL_DEFAULT_MODEL;
}

qbackend *cli_backend_create(const char *name, int n_threads) {
    qbackend *be = NULL;
    if (name && strcmp(name, "cpu") && strcmp(name, "cuda")) {
        fprintf(stderr, "quill: --backend: unknown backend '%s' (cpu, cuda)\n", name);
        return NULL;
    }
#ifdef QUILL_HAVE_CUDA
    int want_cuda = name ? !strcmp(name, "cuda") : cuda_device_count() > 0; /* default: a GPU if any */
    if (want_cuda) {
        if (cuda_backend_create(0, &be) != Q_OK) {
            fprintf(stderr, "quill: cuda backend: %s\n", q_lasterr());
            return NULL;
        }
        return be;
    }
#else
    if (name && !strcmp(name, "cuda")) {
        fprintf(stderr, "quill: --backend cuda: this build has no CUDA (nvcc was not found)\n");
        return NULL;
    }
#endif
    if (cpu_backend_create(n_threads, &be) != Q_OK) {
        fprintf(stderr, "quill: cpu backend: %s\n", q_lasterr());
        return NULL;
    }
    return be;
}

int cli_parse_int(const char *s, long long lo, long long hi, long long *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int cli_parse_kv_type(const char *s, int *type) {
    if (!s) return -1;
    if (!strcmp(s, "f32")) *type = QKV_F32;
    else if (!strcmp(s, "bf16")) *type = QKV_BF16;
    else if (!strcmp(s, "q8")) *type = QKV_Q8;
    else return -1;
    return 0;
}

int cli_parse_gdn_state_type(const char *s, int *type) {
    if (!s) return -1;
    if (!strcmp(s, "f32")) *type = QSTATE_F32;
    else if (!strcmp(s, "bf16")) *type = QSTATE_BF16;
    else return -1;
    return 0;
}

int cli_parse_float(const char *s, double *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return 2; }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "serve")) return cmd_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "inspect")) return cmd_inspect(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "synth")) return cmd_synth(argc - 1, argv + 1);
    if (!strcmp(cmd, "quantize")) return cmd_quantize(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) { usage(stdout); return 0; }
    fprintf(stderr, "quill: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
