#!/usr/bin/env python3
"""Trains the target: transformers' Qwen3_5ForCausalLM (common.target_text_config) on the token
files of tok.py, for a wall-clock budget, then exports it as a Hugging Face checkpoint.

Loop: random 512-token windows of train.bin (window offsets drawn from a generator seeded with
(seed, step), so the data position is the step number), bf16 autocast, AdamW (betas 0.9/0.95,
weight decay 0.1 on matrices and the embedding), gradient clip 1.0, linear warmup then cosine decay
to 5% driven by the elapsed fraction of --seconds (the schedule fits whatever time it gets).

Writes OUT/hf/ (config.json, bf16 model.safetensors without lm_head since the head is tied,
tokenizer files), OUT/state.json (step, tokens seen, losses, held-out loss) and OUT/full.pt (fp32
weights + AdamW state + step: a full-fidelity resume on the same machine).
--resume DIR continues from DIR/full.pt when present (weights, optimizer, step), else from a
checkpoint directory: an HF one (bf16/f32 weights) or an MLX 4-bit one (the bundled
models/qwen35-pycoder: dequantized, fresh optimizer state, steps and tokens read from its
quill-train.json when present).
"""
import argparse
import math
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gdn_fast  # noqa: E402
from common import (SMALL, dequantized_state, import_transformers, jdump, jload, log,  # noqa: E402
                    read_dir_safetensors, target_text_config, write_safetensors)

SEQ = 512


def batches(data, batch, seq, seed, step):
    rng = np.random.default_rng([seed, step])
    offs = rng.integers(0, len(data) - seq - 1, size=batch)
    x = np.stack([data[o:o + seq + 1] for o in offs]).astype(np.int64)
    return torch.from_numpy(x)


def build(tf, cfg, device):
    model = tf.Qwen3_5ForCausalLM(tf.Qwen3_5TextConfig(**cfg))
    if model.lm_head.weight is not model.get_input_embeddings().weight:
        sys.exit("train_target: tie_word_embeddings did not tie lm_head to embed_tokens")
    return model.to(device)


def load_weights(model, sd, what):
    sd = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in sd.items()}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        sys.exit(f"train_target: {what}: missing {missing[:5]}, unexpected {unexpected[:5]}")


def resume_from(model, opt, path, device):
    """Returns (step, tokens, full) and loads what the checkpoint has."""
    full = os.path.join(path, "full.pt")
    if os.path.exists(full):
        ck = torch.load(full, map_location=device, weights_only=False)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        log(f"train_target: resumed {full}: step {ck['step']}, {ck['tokens'] / 1e6:.1f}M tokens, optimizer state")
        return ck["step"], ck["tokens"], True
    d = os.path.join(path, "hf") if os.path.isdir(os.path.join(path, "hf")) else path
    cfg = jload(os.path.join(d, "config.json"))
    t = read_dir_safetensors(d)
    if "quantization" in cfg:
        sd = dequantized_state(t, "target")
        what = "MLX 4-bit checkpoint (dequantized)"
    else:
        sd = {k: v for k, (_, v) in t.items()}
        what = "HF checkpoint"
    load_weights(model, sd, d)
    st = {}
    for name in ("quill-train.json", "state.json"):
        for base in (path, d):
            if os.path.exists(os.path.join(base, name)):
                st = jload(os.path.join(base, name))
    step, tokens = int(st.get("step", 0)), int(st.get("tokens", 0))
    log(f"train_target: resumed weights of {d} ({what}); step {step}, {tokens / 1e6:.1f}M tokens; fresh optimizer")
    return step, tokens, False


@torch.no_grad()
def heldout_loss(model, held, device, seq=SEQ, windows=64, batch=16):
    """Mean next-token loss (nats) over up to `windows` consecutive seq-token windows of held."""
    SEQ = seq  # noqa: N806
    was = model.training
    model.eval()
    n = min(windows, (len(held) - 1) // SEQ)
    tot, cnt = 0.0, 0
    for i in range(0, n, batch):
        x = torch.from_numpy(np.stack([held[j * SEQ:j * SEQ + SEQ + 1] for j in range(i, min(n, i + batch))])
                             .astype(np.int64)).to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits = model(input_ids=x[:, :-1], use_cache=False).logits
        tot += float(F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                                     reduction="sum"))
        cnt += x[:, 1:].numel()
    model.train(was)
    return tot / max(1, cnt), cnt


def export_hf(model, cfg_json, tok_dir, out):
    """HF checkpoint: config.json as transformers writes it (plus dtype/eos), bf16 weights, the
    tied lm_head omitted (as save_pretrained does), tokenizer files."""
    os.makedirs(out, exist_ok=True)
    sd = {k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    write_safetensors(os.path.join(out, "model.safetensors"), sd, {"format": "pt"}, dtype="BF16")
    cfg_json = dict(cfg_json, dtype="bfloat16")
    jdump(cfg_json, os.path.join(out, "config.json"), indent=2, sort_keys=True)
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok_dir, fn), os.path.join(out, fn))


def hf_config_json(model, ids):
    with tempfile.TemporaryDirectory() as td:
        model.save_pretrained(td)
        cfg = jload(os.path.join(td, "config.json"))
    cfg.update(eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]], pad_token_id=ids["<|endoftext|>"],
               bos_token_id=None, tie_word_embeddings=True)
    cfg.setdefault("architectures", ["Qwen3_5ForCausalLM"])
    return cfg


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tok", required=True, help="tok.py output: train.bin, heldout.bin, tokenizer files")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--resume")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--small", action="store_true", help="toy shape (local smoke test)")
    ap.add_argument("--seq", type=int, default=512)
    args = ap.parse_args()
    SEQ = args.seq  # noqa: N806
    tf = import_transformers()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    meta = jload(os.path.join(args.tok, "tokens.json"))
    ids = meta["ids"]
    cfg = target_text_config(eos=[ids["<|im_end|>"], ids["<|endoftext|>"]], pad=ids["<|endoftext|>"],
                             small=args.small or SMALL)
    data = np.fromfile(os.path.join(args.tok, "train.bin"), dtype="<u2")
    held = np.fromfile(os.path.join(args.tok, "heldout.bin"), dtype="<u2")
    if len(data) < 10 * (SEQ + 1):
        sys.exit(f"train_target: only {len(data)} training tokens")
    torch.manual_seed(args.seed)
    model = build(tf, cfg, device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"train_target: transformers {tf.__version__}, torch {torch.__version__}, {device}; "
        f"{n_params / 1e6:.2f}M parameters; {len(data) / 1e6:.1f}M training tokens")
    hf_mod = sys.modules.get("transformers.models.qwen3_5.modeling_qwen3_5")
    if hf_mod is not None:
        gdn_fast.install(model, hf_mod, cfg["vocab_size"], log, device)
    decay = [p for n, p in model.named_parameters() if p.ndim == 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim != 2]
    fused = device.type == "cuda"
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, **({"fused": True} if fused else {}))
    step0, tokens, warmup, peak = 0, 0, args.warmup, args.lr
    if args.resume:
        step0, tokens, full = resume_from(model, opt, args.resume, device)
        peak, warmup = args.lr * 0.5, (20 if full else 50)
    model.train()
    step, losses, t0 = step0, [], time.time()
    last_log = t0
    while True:
        frac = (time.time() - t0) / args.seconds
        if frac >= 1.0:
            break
        k = step - step0
        lr = peak * min(1.0, (k + 1) / warmup) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))
        for g in opt.param_groups:
            g["lr"] = lr
        xb = batches(data, args.batch, SEQ, args.seed, step).to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits = model(input_ids=xb[:, :-1], use_cache=False).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), xb[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        tokens += args.batch * SEQ
        if step % 25 == 0 or time.time() - last_log > 30:
            lv = float(loss)
            if not math.isfinite(lv):
                sys.exit(f"train_target: loss is {lv} at step {step}")
            losses.append([step, round(time.time() - t0, 1), round(lv, 4), lr])
            if time.time() - last_log > 15:
                log(f"train_target: step {step} loss {lv:.3f} lr {lr:.2e} "
                    f"{(step - step0) * args.batch * SEQ / (time.time() - t0) / 1e3:.0f}k tokens/s")
                last_log = time.time()
    elapsed = time.time() - t0
    hl, hn = heldout_loss(model, held, device, SEQ)
    log(f"train_target: {step - step0} steps in {elapsed:.0f} s ({tokens / 1e6:.1f}M tokens in total); "
        f"held-out loss {hl:.4f} nats/token over {hn} tokens")
    os.makedirs(args.out, exist_ok=True)
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "tokens": tokens},
               os.path.join(args.out, "full.pt"))
    export_hf(model, hf_config_json(model, ids), args.tok, os.path.join(args.out, "hf"))
    state = {"step": step, "steps_this_run": step - step0, "tokens": tokens, "seconds_this_run": round(elapsed, 1),
             "batch": args.batch, "seq": SEQ, "lr": args.lr, "params": n_params, "resumed_from": args.resume,
             "heldout_loss_bf16": hl, "heldout_tokens": hn, "losses": losses,
             "train_tokens_available": int(len(data)), "epochs": tokens / max(1, len(data))}
    jdump(state, os.path.join(args.out, "state.json"), indent=1)
    jdump({k: state[k] for k in ("step", "tokens", "heldout_loss_bf16")},
          os.path.join(args.out, "hf", "quill-train.json"))


if __name__ == "__main__":
    main()
