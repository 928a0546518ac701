#!/usr/bin/env python3
"""Evaluates the shipped pair (the 4-bit bundles, dequantized) on held-out code:
  - held-out loss (nats/token and bits/byte) of the 4-bit target, and of the bf16 export when given;
  - greedy sample completions (held-out function headers, chat requests in the chat template frame);
  - DFlash acceptance length at temperature 0 for blocks of 8 and 16: mean tokens per drafting round
    (accepted drafts + the target's correction/bonus token), with dflash_ref.spec_generate, and a
    check that the drafted outputs equal plain greedy decoding (lossless).
Writes --out (eval.json). Runs in float32 (on the GPU when there is one).
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gdn_fast  # noqa: E402
from common import CHAT_PROMPT, import_transformers, jdump, jload, log  # noqa: E402
from dflash_ref import greedy_generate, spec_generate  # noqa: E402
from models_io import load_drafter, load_target  # noqa: E402


@torch.no_grad()
def heldout_loss(model, held, device, seq=512, windows=256, batch=16):
    n = min(windows, (len(held) - 1) // seq)
    tot, cnt = 0.0, 0
    for i in range(0, n, batch):
        x = torch.from_numpy(np.stack([held[j * seq:j * seq + seq + 1] for j in range(i, min(n, i + batch))])
                             .astype(np.int64)).to(device)
        logits = model(input_ids=x[:, :-1], use_cache=False).logits.float()
        tot += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum"))
        cnt += x[:, 1:].numel()
    return tot / max(1, cnt), cnt


def code_prompts(docs, tok, n, max_chars=420):
    """Windows of held-out files: from a line start ~30% into the file, ending at a line end."""
    out = []
    for d in docs:
        if len(d) < 3000:
            continue
        a = d.find("\n", int(len(d) * 0.3)) + 1
        b = d.rfind("\n", a, a + max_chars) + 1
        if a <= 0 or b <= a + 100:
            continue
        out.append(tok.encode(d[a:b]).ids)
        if len(out) == n:
            break
    return out


def header_prompts(chats, n):
    """Function header + docstring of held-out documented functions: the model writes the body."""
    out = []
    for c in chats:
        code = c["answer"]
        for q in ('"""', "'''"):
            i = code.find(q)
            j = code.find(q, i + 3) if i >= 0 else -1
            if i >= 0 and j > 0:
                nl = code.find("\n", j)
                if nl > 0 and code.count("\n", nl) > 2:
                    out.append(code[:nl + 1])
                break
        if len(out) == n:
            break
    return out


@torch.no_grad()
def complete(model, tok, text, max_new, eos, pad, device):
    ids = tok.encode(text).ids
    x = torch.tensor([ids], device=device)
    seq = model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=max_new, do_sample=False,
                         num_beams=1, eos_token_id=eos, pad_token_id=pad)
    gen = seq[0, len(ids):].tolist()
    return {"prompt": text, "completion": tok.decode(gen, skip_special_tokens=False), "tokens": len(gen)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tok", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--target", required=True, help="4-bit target bundle")
    ap.add_argument("--drafter", help="4-bit drafter bundle (without it: no acceptance lengths)")
    ap.add_argument("--bf16", help="the bf16 HF export, for its held-out loss")
    ap.add_argument("--out", required=True)
    ap.add_argument("--n-accept", type=int, default=16)
    ap.add_argument("--max-new", type=int, default=128)
    ap.add_argument("--windows", type=int, default=256)
    ap.add_argument("--budget", type=float, default=1e9, help="seconds; later parts are skipped past it")
    ap.add_argument("--acceptance-only", action="store_true",
                    help="only the drafter's acceptance lengths (no held-out loss, no samples; needs --drafter)")
    args = ap.parse_args()
    t_start = time.time()

    def late(what):
        if time.time() - t_start > args.budget:
            log(f"evaluate: out of time (--budget {args.budget:.0f} s): {what} skipped")
            return True
        return False

    tf = import_transformers()
    from tokenizers import Tokenizer
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = False
    tok = Tokenizer.from_file(os.path.join(args.target, "tokenizer.json"))
    meta = jload(os.path.join(args.tok, "tokens.json"))
    eos = [meta["ids"]["<|im_end|>"], meta["ids"]["<|endoftext|>"]]
    pad = meta["ids"]["<|endoftext|>"]
    res = {"bytes_per_token": meta["heldout_bytes_per_token"]}
    target, tcfg, kind = load_target(tf, args.target, device)
    hf_mod = sys.modules.get("transformers.models.qwen3_5.modeling_qwen3_5")
    if hf_mod is not None:
        gdn_fast.install(target, hf_mod, tcfg["vocab_size"], log, device)
    docs = [json.loads(line) for line in open(os.path.join(args.corpus, "heldout_docs.jsonl"), encoding="utf-8")]
    if args.acceptance_only:
        return acceptance(args, res, target, tok, docs, eos, pad, device, late)
    held = np.fromfile(os.path.join(args.tok, "heldout.bin"), dtype="<u2")
    res["heldout_tokens_file"] = int(len(held))
    t0 = time.time()
    hl, hn = heldout_loss(target, held, device, windows=args.windows)
    res.update(heldout_loss_4bit=hl, heldout_eval_tokens=hn,
               heldout_bits_per_byte_4bit=hl / np.log(2) / meta["heldout_bytes_per_token"])
    log(f"evaluate: 4-bit held-out loss {hl:.4f} nats/token over {hn} tokens ({time.time() - t0:.0f} s)")
    if args.bf16:
        m16, _, _ = load_target(tf, args.bf16, device)
        if hf_mod is not None:
            gdn_fast.install(m16, hf_mod, tcfg["vocab_size"], log, device)
        hb, _ = heldout_loss(m16, held, device, windows=args.windows)
        res.update(heldout_loss_bf16=hb, heldout_bits_per_byte_bf16=hb / np.log(2) / meta["heldout_bytes_per_token"])
        log(f"evaluate: bf16 held-out loss {hb:.4f} nats/token")
        del m16
    chats = [json.loads(line) for line in open(os.path.join(args.corpus, "heldout_chat.jsonl"), encoding="utf-8")]
    samples = []
    reqs = ["Write a Python function `is_prime(n)` that returns True when n is a prime number."] + \
        [c["request"] for c in chats[:2]]
    for text in ["def fibonacci(n):\n"] + [CHAT_PROMPT.format(r) for r in reqs] + header_prompts(chats, 3) + \
            ["class Stack:\n    def __init__(self):\n"]:
        if late("some samples"):
            break
        samples.append(complete(target, tok, text, 160 if text.startswith("<|im_start|>") else 96, eos, pad, device))
    res["samples"] = samples
    log(f"evaluate: {len(samples)} sample completions")

    if not args.drafter:
        jdump(res, args.out, indent=1)
        return
    jdump(res, args.out, indent=1)  # what there is so far, in case the drafting part fails
    acceptance(args, res, target, tok, docs, eos, pad, device, late)


def acceptance(args, res, target, tok, docs, eos, pad, device, late):
    """Mean acceptance length (accepted drafts + the correction token) per drafting round on held-out
    code at temperature 0, blocks of 16 and 8; also checks the outputs equal plain greedy decoding."""
    drafter, dcfg = load_drafter(args.drafter, device)
    prompts = code_prompts(docs, tok, args.n_accept)
    if not prompts:
        sys.exit("evaluate: no held-out file long enough for acceptance prompts")
    t0 = time.time()
    ref = greedy_generate(target, prompts, args.max_new, set(eos), pad, device)
    res["acceptance"] = {"prompts": len(prompts), "prompt_tokens_mean": float(np.mean([len(p) for p in prompts])),
                         "max_new": args.max_new}
    for block in (16, 8):
        if late(f"acceptance for block {block}"):
            break
        out, rounds = spec_generate(target, drafter, prompts, args.max_new, block, set(eos), pad, device)
        flat = [r for rs in rounds for r in rs]
        same = sum(o == r for o, r in zip(out, ref))
        res["acceptance"][f"block{block}"] = {
            "mean_acceptance_length": float(np.mean(flat)) if flat else 0.0, "rounds": len(flat),
            "tokens": int(sum(len(o) for o in out)), "equal_to_greedy": f"{same}/{len(out)}",
            "histogram": np.bincount(flat, minlength=block + 1)[1:].tolist() if flat else []}
        log(f"evaluate: block {block}: mean acceptance length {res['acceptance'][f'block{block}']['mean_acceptance_length']:.3f}"
            f" over {len(flat)} rounds; outputs equal to greedy {same}/{len(out)} ({time.time() - t0:.0f} s)")
    res["drafter_config"] = {k: dcfg[k] for k in ("num_hidden_layers", "dflash_config", "hidden_size")}
    jdump(res, args.out, indent=1)


if __name__ == "__main__":
    main()
