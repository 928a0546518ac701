/* cli.h: the quill subcommands. Each takes argv with argv[0] = the subcommand's name and returns the
 * process exit code (0 ok, 1 runtime error, 2 usage error). */
#ifndef QUILL_CLI_H
#define QUILL_CLI_H

#include "backend/backend.h"

int cmd_run(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_bench(int argc, char **argv);

/* The model directory a command uses: the positional argument, else $QUILL_MODEL, else the model
 * bundled in the repo. */
const char *cli_model_dir(const char *positional);

/* Creates the backend named by `name` ("cpu", "cuda", or NULL for the default). Prints the error and
 * returns NULL on failure. */
qbackend *cli_backend_create(const char *name, int n_threads);

/* Parses a whole decimal integer / float; returns 0 on success. */
int cli_parse_int(const char *s, long long lo, long long hi, long long *out);
int cli_parse_float(const char *s, double *out);
/* --kv-type: "bf16" (the commands' default), "f32" (K/V caches at twice the bytes) or "q8" (8-bit codes and
 * a scale per head: about half the bytes); sets *type (QKV_*), returns 0 on success. */
int cli_parse_kv_type(const char *s, int *type);
/* --gdn-state-type: "f32" (the default, the models' mamba_ssm_dtype) or "bf16" (half the bytes and the state
 * traffic of a decode step, each value rounded as it is stored); sets *type (QSTATE_*), returns 0 on success. */
int cli_parse_gdn_state_type(const char *s, int *type);

#endif
