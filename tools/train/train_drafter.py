#!/usr/bin/env python3
"""Trains the DFlash drafter (dflash_ref.DFlashDrafter) against a frozen target, for a wall-clock
budget. The target is the one that ships: the 4-bit bundle, dequantized (quantization moves the
hidden states the drafter reads, reference/dflash.md pitfall 9), run in bf16.

Each step: S random 512-token windows of train.bin; the target runs them once (no grad) giving
the tapped features (z-lab target_layer_ids) and its logits. K anchors per window at random
positions p in [1, T - B]; block k is [x_p, MASK x (B-1)] at positions p..p+B-1 and attends to the
context rows j < p and to its own block (bidirectional), all blocks of a window in one attention
call with a block-diagonal mask. Block row i >= 1 learns the target's own next-token distribution
at position p+i-1 (soft cross-entropy, i.e. distillation of what greedy verification will check),
weighted by exp(-(i-1)/gamma) as in the DFlash paper's decaying loss. bf16 autocast, AdamW,
warmup + cosine decay over the time budget.

Writes OUT/ (config.json + bf16 model.safetensors, z-lab layout), OUT/state.json, and
OUT/full.pt (fp32 weights + optimizer, for --resume on the same machine).
"""
import argparse
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gdn_fast  # noqa: E402
from common import Taps, drafter_config, import_transformers, jdump, jload, log, mask_token_id  # noqa: E402
from dflash_ref import DFlashDrafter  # noqa: E402
from models_io import load_drafter, load_target, save_drafter  # noqa: E402


def block_layout(S, T, K, B, gen, device):
    """anchors [S, K]; q_pos [S, K*B]; k_pos [S, T + K*B]; mask [S, K*B, T + K*B] (True = visible)."""
    anchors = torch.stack([torch.randperm(T - B, generator=gen)[:K] + 1 for _ in range(S)]).sort(-1).values
    anchors = anchors.to(device)
    i = torch.arange(B, device=device)
    q_pos = (anchors[:, :, None] + i).reshape(S, K * B)
    k_pos = torch.cat([torch.arange(T, device=device)[None].expand(S, T), q_pos], 1)
    ctx = torch.arange(T, device=device)[None, None, :] < anchors[:, :, None]          # [S, K, T]
    ctx = ctx[:, :, None, :].expand(S, K, B, T).reshape(S, K * B, T)
    blk = torch.eye(K, dtype=torch.bool, device=device).repeat_interleave(B, 0).repeat_interleave(B, 1)
    mask = torch.cat([ctx, blk[None].expand(S, K * B, K * B)], 2)
    return anchors, q_pos, k_pos, mask


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tok", required=True)
    ap.add_argument("--target", required=True, help="target checkpoint (the 4-bit bundle)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--resume", help="drafter directory (z-lab layout, or with full.pt)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--block", type=int, default=16)
    ap.add_argument("--seqs", type=int, default=32)
    ap.add_argument("--anchors", type=int, default=32)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--gamma", type=float, default=7.0)
    ap.add_argument("--seed", type=int, default=4321)
    args = ap.parse_args()
    tf = import_transformers()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = True
    meta = jload(os.path.join(args.tok, "tokens.json"))
    data = np.fromfile(os.path.join(args.tok, "train.bin"), dtype="<u2")
    target, tcfg, kind = load_target(tf, args.target, device)
    hf_mod = sys.modules.get("transformers.models.qwen3_5.modeling_qwen3_5")
    if hf_mod is not None:
        gdn_fast.install(target, hf_mod, tcfg["vocab_size"], log, device)
    if device.type == "cuda":
        target = target.to(torch.bfloat16)
    for p in target.parameters():
        p.requires_grad_(False)
    step0, full = 0, None
    if args.resume and os.path.exists(os.path.join(args.resume, "full.pt")):
        full = torch.load(os.path.join(args.resume, "full.pt"), map_location=device, weights_only=False)
        drafter = DFlashDrafter(full["config"]).to(device)
        drafter.load_state_dict(full["model"])
        step0 = full["step"]
    elif args.resume:
        drafter, _ = load_drafter(args.resume, device)
        drafter.train()
    else:
        torch.manual_seed(args.seed)
        drafter = DFlashDrafter(drafter_config(tcfg, mask_token_id(meta["ids"]), args.layers, args.block)).to(device)
    cfg = drafter.config
    B, K, S, T = args.block, args.anchors, args.seqs, args.seq
    opt = torch.optim.AdamW(drafter.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01,
                            **({"fused": True} if device.type == "cuda" else {}))
    if full is not None:
        opt.load_state_dict(full["opt"])
    n_params = sum(p.numel() for p in drafter.parameters())
    log(f"train_drafter: target {args.target} ({kind}); drafter {cfg['num_hidden_layers']} layers, taps "
        f"{drafter.taps}, block {B}, mask id {drafter.mask_id}, {n_params / 1e6:.2f}M parameters")
    taps = Taps(target, drafter.taps)
    w = torch.exp(-torch.arange(B - 1, device=device, dtype=torch.float32) / args.gamma)
    w = w / w.sum()
    gen = torch.Generator().manual_seed(args.seed + step0)
    drafter.train()
    step, hist, t0, last = step0, [], time.time(), time.time()
    warm = 30 if full is None else 5
    while True:
        frac = (time.time() - t0) / args.seconds
        if frac >= 1.0:
            break
        lr = args.lr * min(1.0, (step - step0 + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        rng = np.random.default_rng([args.seed, step])
        offs = rng.integers(0, len(data) - T - 1, size=S)
        x = torch.from_numpy(np.stack([data[o:o + T] for o in offs]).astype(np.int64)).to(device)
        with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            tlogits = target(input_ids=x, use_cache=False).logits
            feats = taps.get()
        anchors, q_pos, k_pos, mask = block_layout(S, T, K, B, gen, device)
        ids = torch.full((S, K, B), drafter.mask_id, dtype=torch.long, device=device)
        ids[:, :, 0] = torch.gather(x, 1, anchors)
        with torch.no_grad():
            emb = target.model.embed_tokens(ids.reshape(S, K * B))
            # soft labels: the target's distribution at p+i-1, i = 1..B-1 (predicting the token at p+i)
            lpos = (anchors[:, :, None] + torch.arange(B - 1, device=device)).reshape(S, -1)
            tl = torch.gather(tlogits, 1, lpos[..., None].expand(-1, -1, tlogits.shape[-1]))
            tprob = torch.softmax(tl.float(), -1).reshape(S, K, B - 1, -1)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            h = drafter(emb.float(), feats, q_pos, k_pos, mask).reshape(S, K, B, -1)[:, :, 1:]
            dlogits = F.linear(h, target.lm_head.weight)
        logp = torch.log_softmax(dlogits.float(), -1)
        ce = -(tprob * logp).sum(-1)                      # [S, K, B-1]
        loss = (ce.mean((0, 1)) * w).sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        if step % 20 == 0 or time.time() - last > 20:
            with torch.no_grad():
                agree = (dlogits.argmax(-1) == tprob.argmax(-1)).float().mean((0, 1))
            hist.append([step, round(time.time() - t0, 1), round(float(loss), 4),
                         round(float(agree[0]), 4), round(float(agree.mean()), 4)])
            if time.time() - last > 15:
                log(f"train_drafter: step {step} loss {float(loss):.3f} top-1 agreement pos1 {float(agree[0]):.3f} "
                    f"all {float(agree.mean()):.3f} lr {lr:.2e}")
                last = time.time()
    taps.remove()
    elapsed = time.time() - t0
    log(f"train_drafter: {step - step0} steps in {elapsed:.0f} s")
    os.makedirs(args.out, exist_ok=True)
    save_drafter(drafter, args.out)
    torch.save({"model": drafter.state_dict(), "opt": opt.state_dict(), "step": step, "config": cfg},
               os.path.join(args.out, "full.pt"))
    jdump({"step": step, "steps_this_run": step - step0, "seconds_this_run": round(elapsed, 1),
           "params": n_params, "seqs": S, "anchors": K, "block": B, "gamma": args.gamma, "lr": args.lr,
           "target": args.target, "target_kind": kind, "history": hist},
          os.path.join(args.out, "state.json"), indent=1)


if __name__ == "__main__":
    main()
