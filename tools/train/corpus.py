#!/usr/bin/env python3
"""Collects the training corpus: the Python sources of the packages installed on this machine.

Files: every *.py under the directories of sys.path and /usr/lib/python3*, /usr/local/lib/python3*
(not under the repository), 200 B .. 400 KB, valid UTF-8, without Qwen control-token strings,
deduplicated by content. A file is held out for evaluation when the sha1 of its path relative to
its root (e.g. "json/decoder.py") falls in the first HELDOUT_PER_MILLE of the hash space, so every
copy of a module (two Python versions' stdlib) lands on the same side. Training files are taken in
content-sha1 order (a fixed pseudo-random order) up to --max-mb.

Chat samples: from top-level functions with a docstring (3..60 lines) in part of the training
files, "write a function" requests framed exactly as the Qwen3.5 chat template renders a user turn
(common.CHAT_PROMPT), the answer a fenced code block and <|im_end|>. They teach the model the chat
frame that `quill serve` sends. Held-out files give held-out chat samples for evaluation.

Writes OUT/train_docs.jsonl, OUT/heldout_docs.jsonl (one JSON string per line: the document text),
OUT/heldout_chat.jsonl ({"request", "answer"}), OUT/tokenizer_sample/*.txt and OUT/corpus.json.
Run: python3 tools/train/corpus.py --out build-train/corpus [--max-mb 240]
"""
import argparse
import ast
import glob
import hashlib
import json
import os
import re
import sys
from multiprocessing import Pool

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import CHAT_PROMPT, jdump, log  # noqa: E402

HELDOUT_PER_MILLE = 8
BAD = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|audio_start|>", "<|fim_")
TEMPLATES = (
    "Write a Python function `{sig}`: {doc}",
    "Implement `{name}` in Python. {doc}",
    "{doc}\nWrite this as a Python function named `{name}`.",
    "Write Python code for `{sig}`. It should do the following: {doc}",
)


def roots(repo):
    cand = [p for p in sys.path if p and os.path.isdir(p)]
    for pat in ("/usr/lib/python3*", "/usr/local/lib/python3*", "/usr/lib/python3/dist-packages"):
        cand += sorted(glob.glob(pat))
    out = []
    for p in cand:
        p = os.path.realpath(p)
        if p.startswith(repo + os.sep) or p == repo or p in out:
            continue
        out.append(p)
    # drop roots nested in another root (walked already)
    return [p for p in out if not any(p != q and p.startswith(q + os.sep) for q in out)]


def list_files(repo):
    files = []
    for root in roots(repo):
        for d, dirs, names in os.walk(root):
            dirs.sort()
            for n in sorted(names):
                if n.endswith(".py"):
                    files.append((root, os.path.join(d, n)))
    return files


def read_one(item):
    root, path = item
    rel = os.path.relpath(path, root)
    for marker in ("site-packages/", "dist-packages/"):  # a venv's copy of a package = the system's
        if marker in rel:
            rel = rel.split(marker, 1)[1]
    held = int(hashlib.sha1(rel.encode()).hexdigest()[:8], 16) % 1000 < HELDOUT_PER_MILLE
    try:
        size = os.path.getsize(path)
        if size < 200 or size > 400_000:
            return None
        with open(path, "rb") as f:
            raw = f.read()
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if any(b in text for b in BAD) or "\x00" in text:
        return None
    text = text.replace("\r\n", "\n")
    return hashlib.sha1(text.encode()).hexdigest(), held, text


TOP_DOC = re.compile(r'^def [A-Za-z]\w*\([^)]*\)[^:\n]*:[ \t]*\n[ \t]+[rRuU]?(?:"""|\'\'\')', re.M)


def chat_samples(text):
    """(request, answer) pairs from the top-level documented functions of one file."""
    if len(text) > 150_000 or not TOP_DOC.search(text):
        return []
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    lines, out = text.split("\n"), []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
            continue
        doc = ast.get_docstring(node)
        if not doc or node.end_lineno is None:
            continue
        start = min([d.lineno for d in node.decorator_list] + [node.lineno]) - 1
        n = node.end_lineno - start
        if n < 3 or n > 60:
            continue
        first = re.sub(r"\s+", " ", doc.strip().split("\n\n")[0]).strip()
        if len(first) < 20 or len(first) > 300:
            continue
        try:
            sig = f"{node.name}({ast.unparse(node.args)})"
        except Exception:  # noqa: BLE001 - unparse of odd syntax
            sig = node.name + "(...)"
        h = int(hashlib.sha1(node.name.encode()).hexdigest()[:4], 16)
        req = TEMPLATES[h % len(TEMPLATES)].format(sig=sig, name=node.name, doc=first)
        code = "\n".join(lines[start:node.end_lineno])
        out.append((req, code))
    return out


def chat_doc(req, code):
    return CHAT_PROMPT.format(req) + "```python\n" + code + "\n```<|im_end|>"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-mb", type=float, default=240.0, help="training text cap (MB)")
    ap.add_argument("--heldout-mb", type=float, default=4.0)
    ap.add_argument("--chat-frac", type=float, default=0.06, help="share of training bytes in chat samples")
    ap.add_argument("--tok-sample-mb", type=float, default=24.0)
    ap.add_argument("--repo", default=os.getcwd())
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    repo = os.path.realpath(args.repo)
    paths = list_files(repo)
    log(f"corpus: {len(paths)} .py files under {len(roots(repo))} roots")
    if not paths:
        sys.exit("corpus: no Python files found")
    with Pool(min(16, os.cpu_count() or 1)) as pool:
        docs = pool.map(read_one, paths, chunksize=256)
    by_hash, held_set = {}, set()
    for d in docs:
        if d and d[0] not in by_hash:
            by_hash[d[0]] = d[2]
        if d and d[1]:
            held_set.add(d[0])  # any copy held out -> held out
    keys = sorted(by_hash)
    held = [k for k in keys if k in held_set]
    train_keys, total = [], 0
    cap = args.max_mb * 1e6 * (1 - args.chat_frac)
    for k in keys:
        if k in held_set:
            continue
        if total >= cap:
            break
        train_keys.append(k)
        total += len(by_hash[k])
    held_keys, htotal = [], 0
    for k in held:
        if htotal >= args.heldout_mb * 1e6:
            break
        held_keys.append(k)
        htotal += len(by_hash[k])
    log(f"corpus: {len(by_hash)} unique files; train {len(train_keys)} ({total / 1e6:.1f} MB), "
        f"held out {len(held_keys)} ({htotal / 1e6:.1f} MB)")

    # chat samples from training files until chat_frac of the training bytes
    want = args.max_mb * 1e6 * args.chat_frac
    with Pool(min(16, os.cpu_count() or 1)) as pool:
        chats, ctotal = [], 0
        step = 4000
        for i in range(0, len(train_keys), step):
            for pairs in pool.map(chat_samples, [by_hash[k] for k in train_keys[i:i + step]], chunksize=32):
                for req, code in pairs:
                    chats.append(chat_doc(req, code))
                    ctotal += len(chats[-1])
            if ctotal >= want:
                break
        held_chat = [p for k in held_keys for p in chat_samples(by_hash[k])]
    log(f"corpus: {len(chats)} chat samples ({ctotal / 1e6:.1f} MB); {len(held_chat)} held out")

    with open(os.path.join(args.out, "train_docs.jsonl"), "w", encoding="utf-8") as f:
        for k in train_keys:
            f.write(json.dumps(by_hash[k]) + "\n")
        for c in chats:
            f.write(json.dumps(c) + "\n")
    with open(os.path.join(args.out, "heldout_docs.jsonl"), "w", encoding="utf-8") as f:
        for k in held_keys:
            f.write(json.dumps(by_hash[k]) + "\n")
    with open(os.path.join(args.out, "heldout_chat.jsonl"), "w", encoding="utf-8") as f:
        for req, code in held_chat:
            f.write(json.dumps({"request": req, "answer": code}) + "\n")
    # tokenizer sample: an even spread over the training files (and some chat), in 16 shards
    sd = os.path.join(args.out, "tokenizer_sample")
    os.makedirs(sd, exist_ok=True)
    budget, stride = args.tok_sample_mb * 1e6, max(1, int(total / (args.tok_sample_mb * 1e6)))
    picked = [by_hash[k] for k in train_keys[::stride]] + chats[::max(1, stride)]
    shards, acc = [[] for _ in range(16)], 0
    for i, t in enumerate(picked):
        if acc > budget:
            break
        shards[i % 16].append(t)
        acc += len(t)
    for i, s in enumerate(shards):
        with open(os.path.join(sd, f"{i:02d}.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(s))
    jdump({"files_found": len(paths), "unique": len(by_hash), "train_files": len(train_keys),
           "train_bytes": total, "chat_samples": len(chats), "chat_bytes": ctotal,
           "heldout_files": len(held_keys), "heldout_bytes": htotal, "heldout_chat": len(held_chat),
           "tokenizer_sample_bytes": acc, "roots": roots(repo)},
          os.path.join(args.out, "corpus.json"), indent=1)


if __name__ == "__main__":
    main()
