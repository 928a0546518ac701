#!/usr/bin/env python3
"""Golden outputs of the bundled 4-bit pair for quill's tests, computed on the CPU in float32 from
the DEQUANTIZED bundle files (value = scale * code + bias, as MLX and quill dequantize).

OUT/goldens.json (target): per prompt its text, HF token ids, the greedy continuation of
transformers' generate (do_sample False, cache on: chunked GDN prefill then recurrent decode), the
smallest top-1/top-2 logit gap on that path, and the decoded completion. Candidates whose greedy
path comes within MIN_MARGIN of a tie are cut before that step (or skipped), so float32 rounding
differences cannot flip a token. tests/golden/test_pycoder_goldens.c replays them through `quill
run`.

OUT/drafter_goldens.json (+ .f32 files, little-endian float32, row-major): for fixed contexts, the
target's tapped features (first context only), the fused context rows hidden_norm(fc(taps)), the
block-16 logits of rows 1..15 and the draft tokens for blocks 16 and 8, the target's greedy tokens
from the same point and the accepted lengths: the reference for a C drafter.

--quill BIN additionally runs the binary on the goldens (tokenize + greedy ids) and reports.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import CHAT_PROMPT, Taps, import_transformers, jdump, jload, log, sha256_file  # noqa: E402
from dflash_ref import draft_block  # noqa: E402
from models_io import load_drafter, load_target  # noqa: E402

N_PREDICT = 40
MIN_MARGIN = 0.02
MIN_CHECK = 12
CANDIDATES = [
    "def fibonacci(n):\n",
    CHAT_PROMPT.format("Write a Python function `is_prime(n)` that returns True when n is a prime number."),
    "import os\nimport sys\n\n\ndef main():\n",
    "class Stack:\n    def __init__(self):\n",
    "def read_json(path):\n    \"\"\"Read a JSON file and return its content.\"\"\"\n",
    CHAT_PROMPT.format("Write a function that reverses a string."),
]


def write_f32(path, t):
    t.detach().to(torch.float32).contiguous().cpu().numpy().astype("<f4").tofile(path)


@torch.no_grad()
def greedy(model, ids, eos, pad):
    x = torch.tensor([ids])
    out = model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=N_PREDICT, do_sample=False,
                         num_beams=1, use_cache=True, eos_token_id=eos, pad_token_id=pad,
                         return_dict_in_generate=True, output_logits=True)
    toks = out.sequences[0, len(ids):].tolist()
    margins = [float(v[0] - v[1]) for v in (torch.topk(s[0].float(), 2).values for s in out.logits)]
    return toks, margins


def target_goldens(model, tok, eos, pad, extra, out):
    recs = []
    for text in CANDIDATES + extra:
        ids = tok.encode(text).ids
        toks, margins = greedy(model, ids, eos, pad)
        low = next((i for i, m in enumerate(margins) if m < MIN_MARGIN), len(toks))
        n = low if low < len(toks) else len(toks)
        if n < MIN_CHECK and not (n == len(toks) and toks and toks[-1] in eos):
            log(f"goldens: skip candidate (tie within {MIN_MARGIN} at step {low}): {text[:40]!r}")
            continue
        toks = toks[:n]
        recs.append({"text": text, "ids": ids, "greedy": toks, "n_predict": n,
                     "min_margin": min(margins[:n]) if n else None, "stopped_eos": bool(toks and toks[-1] in eos),
                     "completion": tok.decode(toks, skip_special_tokens=False),
                     "completion_text": tok.decode(toks, skip_special_tokens=True)})
        if len(recs) == 3:
            break
    if len(recs) < 3:
        sys.exit(f"make_goldens: only {len(recs)} prompts with a clear greedy path")
    jdump({"reference": "transformers greedy generate (use_cache) on CPU float32, weights dequantized from the "
                        "4-bit bundle", "prompts": recs}, os.path.join(out, "goldens.json"), indent=1)
    return recs


@torch.no_grad()
def drafter_goldens(target, drafter, contexts, eos, out):
    taps = Taps(target, drafter.taps)
    recs = []
    try:
        for i, ids in enumerate(contexts):
            logits = target(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()
            feats = taps.get()
            anchor = int(logits[-1].argmax())
            C = len(ids)
            rows = drafter.fuse(feats)[0]
            d16, l16 = draft_block(drafter, target, feats, torch.tensor([C]), torch.tensor([anchor]), 16)
            d8, _ = draft_block(drafter, target, feats, torch.tensor([C]), torch.tensor([anchor]), 8)
            seq, nxt = list(ids) + [anchor], []
            for _ in range(15):  # the target's greedy tokens after the anchor (full recompute)
                t = int(target(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1].argmax())
                nxt.append(t)
                seq.append(t)
            acc = {}
            for name, d in (("16", d16[0].tolist()), ("8", d8[0].tolist())):
                a = 0
                while a < len(d) and d[a] == nxt[a]:
                    a += 1
                acc[name] = a + 1
            rec = {"ids": ids, "anchor": anchor, "anchor_position": C, "draft16": d16[0].tolist(),
                   "draft8": d8[0].tolist(), "target_greedy_after_anchor": nxt, "acceptance_length": acc,
                   "ctx_rows": f"ctx_rows_{i}.f32", "ctx_rows_shape": list(rows.shape),
                   "block16_logits": f"block16_logits_{i}.f32", "block16_logits_shape": list(l16[0].shape),
                   "block16_logits_max_abs": float(l16.abs().max())}
            write_f32(os.path.join(out, rec["ctx_rows"]), rows)
            write_f32(os.path.join(out, rec["block16_logits"]), l16[0])
            if i == 0:
                rec["taps"], rec["taps_shape"] = "taps_0.f32", list(feats[0].shape)
                write_f32(os.path.join(out, rec["taps"]), feats[0])
            recs.append(rec)
    finally:
        taps.remove()
    return recs


def check_quill(quill, bundle, recs):
    """Runs the binary: quill tokenize ids and quill run greedy ids against the goldens."""
    report = []
    for r in recs:
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
            f.write(r["text"])
        got_ids = subprocess.run([quill, "tokenize", bundle, "--file", f.name], capture_output=True, text=True).stdout.split()
        os.unlink(f.name)
        run = subprocess.run([quill, "run", bundle, "--backend", "cpu", "--prompt-ids", ",".join(map(str, r["ids"])),
                              "-n", str(r["n_predict"])], capture_output=True, text=True)
        got = run.stdout.split()
        report.append({"tokenize_equal": [int(x) for x in got_ids] == r["ids"],
                       "greedy_equal": [int(x) for x in got if x.lstrip("-").isdigit()] == r["greedy"],
                       "quill_stderr_tail": run.stderr[-300:]})
    return report


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--drafter", help="4-bit drafter bundle (without it: target goldens only)")
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--quill")
    args = ap.parse_args()
    tf = import_transformers()
    from tokenizers import Tokenizer
    torch.set_grad_enabled(False)
    torch.set_num_threads(min(16, os.cpu_count() or 1))
    dev = torch.device("cpu")
    os.makedirs(args.out, exist_ok=True)
    tok = Tokenizer.from_file(os.path.join(args.target, "tokenizer.json"))
    cfg = jload(os.path.join(args.target, "config.json"))
    eos, pad = cfg["eos_token_id"], cfg.get("pad_token_id")
    target, tcfg, kind = load_target(tf, args.target, dev)
    if kind != "mlx4":
        sys.exit(f"make_goldens: {args.target} is not a quantized bundle")
    chats = [json.loads(line) for line in open(os.path.join(args.corpus, "heldout_chat.jsonl"), encoding="utf-8")]
    extra = [c["answer"][:c["answer"].find("\n") + 1] for c in chats[:6] if "\n" in c["answer"]]
    recs = target_goldens(target, tok, eos, pad, extra, args.out)
    log(f"goldens: target: {[(r['n_predict'], round(r['min_margin'] or 0, 3)) for r in recs]}")
    hashes = {"target_model_sha256": sha256_file(os.path.join(args.target, "model.safetensors"))}
    if args.drafter:
        drafter, _ = load_drafter(args.drafter, dev)
        docs = [json.loads(line) for line in open(os.path.join(args.corpus, "heldout_docs.jsonl"), encoding="utf-8")]
        long_doc = next((d for d in docs if len(d) > 2000), docs[0])
        contexts = [recs[0]["ids"], recs[1]["ids"], tok.encode(long_doc[:1500]).ids[:100]]
        drecs = drafter_goldens(target, drafter, contexts, eos, args.out)
        log(f"goldens: drafter acceptance lengths {[r['acceptance_length'] for r in drecs]}")
        jdump({"reference": "dflash_ref.py on CPU float32, target and drafter dequantized from the 4-bit bundles",
               "block_size": 16, "mask_token_id": drafter.mask_id, "target_layer_ids": drafter.taps,
               "contexts": drecs}, os.path.join(args.out, "drafter_goldens.json"), indent=1)
        hashes["drafter_model_sha256"] = sha256_file(os.path.join(args.drafter, "model.safetensors"))
    jdump(hashes, os.path.join(args.out, "bundle_sha256.json"), indent=1)
    if args.quill:
        rep = check_quill(args.quill, args.target, recs)
        jdump(rep, os.path.join(args.out, "..", "quill_check.json"), indent=1)
        log(f"goldens: quill check: tokenize {[r['tokenize_equal'] for r in rep]}, "
            f"greedy {[r['greedy_equal'] for r in rep]}")


if __name__ == "__main__":
    main()
