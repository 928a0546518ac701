/* chat.h: OpenAI chat requests -> the checkpoint's own chat template -> prompt text and ids, as
 * transformers' apply_chat_template(messages, tools=..., add_generation_prompt=..., **kwargs)
 * renders it (see jinja.h for the interpreter).
 * Request fields read (a jansson object, e.g. the whole /v1/chat/completions body):
 *   messages               required; non-empty array of objects with role system|developer|user|
 *                          assistant|tool; content a string, null/absent, or a list of
 *                          {"type":"text","text":...} parts; other fields (reasoning_content,
 *                          tool_calls, name, tool_call_id) passed through.
 *   tools                  optional array, passed as is (absent -> the template sees None).
 *   add_generation_prompt  optional bool, DEFAULT TRUE (a chat request asks for the assistant's
 *                          turn, as OpenAI-compatible servers do; transformers' default is false).
 *   chat_template_kwargs   optional object; each member becomes a top-level template variable
 *                          (e.g. enable_thinking); it cannot override messages/tools/
 *                          add_generation_prompt.
 * Normalisation before rendering (as vLLM does, so OpenAI clients work):
 *   - tool_calls[].function.arguments given as a JSON string is parsed into its value (templates
 *     iterate `arguments|items`); invalid JSON -> Q_EINVAL naming the field;
 *   - templates that do not loop over message content ("string" content format, e.g. Qwen3's)
 *     get a list of text parts joined with "\n", and null/absent content as ""; templates that
 *     do (Qwen3.5's) get the list as is, and null/absent content as [].
 * Template variables also include bos_token/eos_token/pad_token/unk_token when tokenizer_config.json
 * gives them as strings (or {"content": ...}). */
#ifndef QUILL_CHAT_H
#define QUILL_CHAT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/status.h"
#include "tokenizer.h"

typedef struct chat_template chat_template;

/* Loads the chat template of a checkpoint directory: dir/chat_template.jinja when present (it takes
 * precedence, as in transformers), else `chat_template` of dir/tokenizer_config.json (a string, or a
 * list of {name, template} from which "default" is taken). Also reads the special token strings.
 * Owned; free with chat_template_free. No template: Q_EFORMAT naming the directory. */
qstatus chat_template_load_dir(const char *dir, chat_template **out);
/* For the messages of local tools: st (a failure of chat_render or chat_prompt_ids) with the file the template came
 * from (dir/chat_template.jinja or dir/tokenizer_config.json; "chat template" when it was given as source) before its
 * message; Q_OK and Q_ENOMEM as they are. The server does not show the file to clients. */
qstatus chat_template_blame(const chat_template *t, qstatus st);

/* Compiles template source (NUL-terminated) with no special tokens. Owned. */
qstatus chat_template_from_source(const char *source, chat_template **out);
void chat_template_free(chat_template *t);

/* Renders request (borrowed). *out is owned (free()), NUL-terminated. Bad request fields: Q_EINVAL
 * naming the field ("messages[2].role"); the template's raise_exception: Q_EINVAL with its message;
 * template features we lack: Q_EUNSUPPORTED naming the template line. */
qstatus chat_render(const chat_template *t, const json_t *request, char **out);

/* chat_render, then tok_encode(..., parse_special=1). *ids is owned (free()). */
qstatus chat_prompt_ids(const qtokenizer *tok, const chat_template *t, const json_t *request,
                        int32_t **ids, size_t *n);

#endif
