"""Gives the bundled tiny model (models/qwen35-tiny) a tokenizer and chat template of its own.

The bundled model has random weights and a 1024-row embedding, so it cannot use Qwen3.5's 248k-token
tokenizer. This trains a byte-level BPE tokenizer of 1024 ids in the Qwen layout (NFC normalizer, Qwen2
split regex isolated + ByteLevel, ByteLevel decoder, the Qwen special tokens) on Python sources found on
the machine, writes tokenizer.json and a tokenizer_config.json carrying Qwen3.5's own chat template, and
sets the model's eos_token_id to <|im_end|> and <|endoftext|>. It makes the server usable end to end
(chat templates, streaming, stop strings); the replies are noise until a trained model replaces it.

Run where the `tokenizers` library is installed (no network needed):
    python3 tools/goldens/make_bundled_tokenizer.py --shared ../shared --model models/qwen35-tiny
"""
import argparse
import glob
import json
import os
import sys

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>",
            "</tool_call>", "<tool_response>", "</tool_response>"]
NON_SPECIAL = {"<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"}
QWEN2_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
               r"""\s*[\r\n]+|\s+(?!\S)|\s+""")


def corpus_files(limit_bytes=40 << 20):
    roots = [p for p in sys.path if os.path.isdir(p)]
    total, files = 0, []
    for root in roots:
        for path in sorted(glob.glob(os.path.join(root, "**", "*.py"), recursive=True)):
            try:
                size = os.path.getsize(path)
            except OSError:
                continue
            files.append(path)
            total += size
            if total > limit_bytes:
                return files
    return files


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default="../shared")
    ap.add_argument("--model", default="models/qwen35-tiny")
    ap.add_argument("--vocab", type=int, default=1024)
    args = ap.parse_args()

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=args.vocab, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    files = corpus_files()
    tok.train(files, trainer)
    # non-special added tokens, as in Qwen's files (<think> etc. are added but not special)
    data = json.loads(tok.to_str())
    for t in data["added_tokens"]:
        t["special"] = t["content"] not in NON_SPECIAL
    with open(os.path.join(args.model, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)
    vocab_n = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json")).get_vocab_size()
    assert vocab_n <= args.vocab, vocab_n

    src_cfg = json.load(open(os.path.join(args.shared, "data/qwen35-tokenizer/tokenizer_config.json")))
    ids = {t["content"]: t["id"] for t in data["added_tokens"]}
    cfg = {
        "add_prefix_space": False,
        "added_tokens_decoder": {str(t["id"]): {"content": t["content"], "lstrip": False, "normalized": False,
                                                "rstrip": False, "single_word": False, "special": t["special"]}
                                 for t in data["added_tokens"]},
        "bos_token": None,
        "chat_template": src_cfg["chat_template"],
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 262144,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    with open(os.path.join(args.model, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=2)

    mcfg_path = os.path.join(args.model, "config.json")
    mcfg = json.load(open(mcfg_path))
    eos = [ids["<|im_end|>"], ids["<|endoftext|>"]]
    mcfg["eos_token_id"] = eos
    if "text_config" in mcfg:
        mcfg["text_config"]["eos_token_id"] = eos
    with open(mcfg_path, "w") as f:
        json.dump(mcfg, f, indent=2)
    print(f"tokenizer: {vocab_n} ids from {len(files)} files; eos {eos}; written to {args.model}")


if __name__ == "__main__":
    main()
