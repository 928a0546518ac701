#!/usr/bin/env python3
"""Trains the byte-level BPE tokenizer and encodes the corpus into token files.

Tokenizer: the Qwen3.5 layout (../shared/data/qwen35-tokenizer/tokenizer.json): NFC normalizer,
Qwen's split regex (Isolated) + ByteLevel(use_regex false), ByteLevel decoder and post-processor,
BPE without unk or dropout; VOCAB - 33 BPE ids (the 256 byte symbols first), then Qwen3.5's 33
added tokens in Qwen's order and with Qwen's special flags (<think>, <tool_call> ... are added but
not special). tokenizer_config.json carries Qwen3.5's own chat template (the copy in
models/qwen35-tiny/tokenizer_config.json, byte-identical to shared/data/qwen35-tokenizer's).

Encoding: every document, then <|endoftext|>; uint16 little-endian files train.bin and heldout.bin.

  python3 tools/train/tok.py --corpus build-train/corpus --out build-train/tok [--reuse DIR]
--reuse DIR takes tokenizer.json + tokenizer_config.json from DIR (a resumed run must keep its
tokenizer) instead of training one.
"""
import argparse
import glob
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import QWEN_ADDED, VOCAB, jdump, jload, log  # noqa: E402

SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
         r"\s*[\r\n]+|\s+(?!\S)|\s+")
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
PRETOK = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": SPLIT}, "behavior": "Isolated", "invert": False}, dict(BYTE_LEVEL)]}
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))


def chat_template():
    t = jload(os.path.join(REPO, "models", "qwen35-tiny", "tokenizer_config.json"))["chat_template"]
    shared = os.path.join(REPO, "..", "shared", "data", "qwen35-tokenizer", "tokenizer_config.json")
    if os.path.exists(shared) and jload(shared)["chat_template"] != t:
        sys.exit("tok: models/qwen35-tiny's chat template differs from shared/data/qwen35-tokenizer's")
    return t


def train_tokenizer(sample_dir, out):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    n_bpe = VOCAB - len(QWEN_ADDED)
    trainer = trainers.BpeTrainer(vocab_size=n_bpe, min_frequency=2, show_progress=False, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    files = sorted(glob.glob(os.path.join(sample_dir, "*.txt")))
    if not files:
        sys.exit(f"tok: no tokenizer sample under {sample_dir}")
    tok.train(files, trainer)
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    n = len(vocab)
    if sorted(vocab.values()) != list(range(n)) or n > n_bpe:
        sys.exit(f"tok: trained vocabulary has {n} ids, not 0..{n_bpe - 1}")
    data["normalizer"] = {"type": "NFC"}
    data["pre_tokenizer"] = PRETOK
    data["decoder"] = dict(BYTE_LEVEL)
    data["post_processor"] = dict(BYTE_LEVEL)
    data["truncation"] = data["padding"] = None
    for k in ("dropout", "unk_token"):
        data["model"][k] = None
    data["model"]["continuing_subword_prefix"] = data["model"]["end_of_word_suffix"] = ""
    data["model"]["fuse_unk"] = data["model"]["byte_fallback"] = data["model"]["ignore_merges"] = False
    data["added_tokens"] = [{"id": n + i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                             "normalized": False, "special": sp} for i, (c, sp) in enumerate(QWEN_ADDED)]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)
    cfg = {
        "add_bos_token": False, "add_prefix_space": False,
        "added_tokens_decoder": {str(t["id"]): {k: t[k] for k in ("content", "lstrip", "normalized", "rstrip",
                                                                   "single_word", "special")}
                                 for t in data["added_tokens"]},
        "additional_special_tokens": [c for c, sp in QWEN_ADDED[1:14]],
        "bos_token": None, "chat_template": chat_template(), "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>", "errors": "replace", "model_max_length": 262144,
        "pad_token": "<|endoftext|>", "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    jdump(cfg, os.path.join(out, "tokenizer_config.json"), indent=2)
    log(f"tok: {n} BPE ids + {len(QWEN_ADDED)} added = {n + len(QWEN_ADDED)} (embedding rows {VOCAB})")


def load(out):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    added = {t["content"]: t["id"] for t in jload(os.path.join(out, "tokenizer.json"))["added_tokens"]}
    ids = {c: added[c] for c, _ in QWEN_ADDED if c in added}
    need = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
    if any(c not in ids for c in need) or tok.get_vocab_size(with_added_tokens=True) > VOCAB:
        sys.exit(f"tok: tokenizer.json lacks {need} or has more than {VOCAB} ids")
    return tok, ids


def encode_file(tok, eot, src, dst, max_tokens=None):
    enc = getattr(tok, "encode_batch_fast", tok.encode_batch)
    parts, total, docs = [], 0, 0
    with open(src, encoding="utf-8") as f:
        batch = []
        for line in f:
            batch.append(json.loads(line))
            if len(batch) == 512:
                for e in enc(batch):
                    parts.append(np.asarray(e.ids + [eot], dtype=np.uint16))
                    total += len(parts[-1])
                docs += len(batch)
                batch = []
                if max_tokens and total >= max_tokens:
                    break
        if batch and not (max_tokens and total >= max_tokens):
            for e in enc(batch):
                parts.append(np.asarray(e.ids + [eot], dtype=np.uint16))
            docs += len(batch)
    arr = np.concatenate(parts) if parts else np.zeros(0, np.uint16)
    arr.astype("<u2").tofile(dst)
    return int(arr.size), docs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--reuse", help="directory holding tokenizer.json + tokenizer_config.json to keep")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.reuse:
        for fn in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(args.reuse, fn), os.path.join(args.out, fn))
        log(f"tok: reusing the tokenizer of {args.reuse}")
    else:
        train_tokenizer(os.path.join(args.corpus, "tokenizer_sample"), args.out)
    tok, ids = load(args.out)
    eot = ids["<|endoftext|>"]
    n_train, d_train = encode_file(tok, eot, os.path.join(args.corpus, "train_docs.jsonl"),
                                   os.path.join(args.out, "train.bin"))
    n_held, d_held = encode_file(tok, eot, os.path.join(args.corpus, "heldout_docs.jsonl"),
                                 os.path.join(args.out, "heldout.bin"))
    cstats = jload(os.path.join(args.corpus, "corpus.json"))
    meta = {"vocab": VOCAB, "n_bpe": tok.get_vocab_size(with_added_tokens=False), "ids": ids,
            "train_tokens": n_train, "train_docs": d_train, "heldout_tokens": n_held, "heldout_docs": d_held,
            "train_bytes_per_token": (cstats["train_bytes"] + cstats["chat_bytes"]) / max(1, n_train),
            "heldout_bytes_per_token": cstats["heldout_bytes"] / max(1, n_held)}
    jdump(meta, os.path.join(args.out, "tokens.json"), indent=1)
    log(f"tok: train {n_train / 1e6:.1f}M tokens ({d_train} docs), held out {n_held / 1e6:.2f}M "
        f"({meta['heldout_bytes_per_token']:.2f} bytes/token)")


if __name__ == "__main__":
    main()
