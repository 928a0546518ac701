"""PyTorch reference of a DFlash drafter (z-lab DFlashDraftModel layout, reference/dflash.md 1-2):
the drafter forward pass, block drafting and greedy verification against a Qwen3.5 target.

Drafter (tensor names as z-lab's checkpoints: no `model.` prefix, no embedding, no LM head):
  ctx  = hidden_norm(fc(taps))                  taps = target layer outputs at target_layer_ids,
                                                concatenated (post-MLP residual, pre-final-norm)
  h    = target.embed_tokens([anchor, MASK x (B-1)])
  per layer: x = input_layernorm(h); q = q_norm(q_proj(x)); k = k_norm([k_proj(ctx); k_proj(x)]);
             v = [v_proj(ctx); v_proj(x)]; RoPE (NeoX, whole head_dim, the drafter's rope_theta) at
             absolute positions; attention of the block over (context rows before the anchor +
             the whole block: full-attention layers are bidirectional inside the block);
             h += o_proj(attn); h += mlp(post_attention_layernorm(h))
  out  = norm(h); logits = target.lm_head(out[1:]): block row i >= 1 predicts the token at anchor+i.
All norms are plain Qwen3 RMSNorm (w * x / rms(x)), not Qwen3.5's (1 + w).

Greedy verification (`spec_generate`): the target runs [committed..., anchor, d_1..d_{B-1}]; the
accepted prefix is the longest run with d_i == argmax of the target at the previous position; the
target's token at the first mismatch is the bonus (next anchor). Acceptance length = accepted + 1.
This reference recomputes the target and the drafter's context over the whole sequence each round
(no caches), which is exact and simple: context K/V depend only on (taps, position).
"""
import torch
import torch.nn.functional as F
from torch import nn

from common import Taps


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(n)), eps

    def forward(self, x):
        dt = x.dtype
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(dt)


def rope(x, pos, theta):
    """x [B, heads, L, D], pos [B, L] absolute positions; NeoX rotate_half over all D dims."""
    D = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float32, device=x.device) / D))
    f = pos.float()[..., None] * inv
    emb = torch.cat([f, f], -1)[:, None]
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    rot = torch.cat([-x[..., D // 2:], x[..., :D // 2]], -1)
    return x * cos + rot * sin


class DraftAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, self.nq, self.nkv, self.hd = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        self.theta = float(c.get("rope_theta") or 10000.0)
        self.q_proj = nn.Linear(H, self.nq * self.hd, bias=False)
        self.k_proj = nn.Linear(H, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(H, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nq * self.hd, H, bias=False)
        self.q_norm = RMSNorm(self.hd, c["rms_norm_eps"])
        self.k_norm = RMSNorm(self.hd, c["rms_norm_eps"])

    def forward(self, x, ctx, q_pos, k_pos, mask):
        B, Q, _ = x.shape
        C = ctx.shape[1]
        q = self.q_norm(self.q_proj(x).view(B, Q, self.nq, self.hd)).transpose(1, 2)
        k = torch.cat([self.k_proj(ctx), self.k_proj(x)], 1).view(B, C + Q, self.nkv, self.hd)
        k = self.k_norm(k).transpose(1, 2)
        v = torch.cat([self.v_proj(ctx), self.v_proj(x)], 1).view(B, C + Q, self.nkv, self.hd).transpose(1, 2)
        q, k = rope(q, q_pos, self.theta), rope(k, k_pos, self.theta)
        rep = self.nq // self.nkv
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        s = (q @ k.transpose(-1, -2)) * self.hd ** -0.5
        if mask is not None:
            s = s.masked_fill(~mask[:, None], float("-inf"))
        a = torch.softmax(s.float(), -1).to(v.dtype)
        return self.o_proj((a @ v).transpose(1, 2).reshape(B, Q, -1))


class DraftMLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, I = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(H, I, bias=False)
        self.up_proj = nn.Linear(H, I, bias=False)
        self.down_proj = nn.Linear(I, H, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DraftLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = DraftAttention(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = DraftMLP(c)

    def forward(self, h, ctx, q_pos, k_pos, mask):
        h = h + self.self_attn(self.input_layernorm(h), ctx, q_pos, k_pos, mask)
        return h + self.mlp(self.post_attention_layernorm(h))


class DFlashDrafter(nn.Module):
    """state_dict names: fc.weight, hidden_norm.weight, layers.{i}.*, norm.weight (z-lab's)."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        d = config["dflash_config"]
        self.taps, self.mask_id = list(d["target_layer_ids"]), int(d["mask_token_id"])
        self.block_size = int(d.get("block_size") or config.get("block_size") or 16)
        H = config["hidden_size"]
        self.fc = nn.Linear(len(self.taps) * H, H, bias=False)
        self.hidden_norm = RMSNorm(H, config["rms_norm_eps"])
        self.layers = nn.ModuleList([DraftLayer(config) for _ in range(config["num_hidden_layers"])])
        self.norm = RMSNorm(H, config["rms_norm_eps"])
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)

    def fuse(self, taps):
        """[B, C, n_taps*H] target features -> the context rows every layer projects to K/V."""
        return self.hidden_norm(self.fc(taps))

    def forward(self, noise_emb, taps, q_pos, k_pos, mask):
        """noise_emb [B, Q, H]; taps [B, C, n_taps*H]; q_pos [B, Q]; k_pos [B, C+Q];
        mask [B, Q, C+Q] bool (True = visible) -> normed hidden [B, Q, H]."""
        ctx = self.fuse(taps)
        h = noise_emb
        for layer in self.layers:
            h = layer(h, ctx, q_pos, k_pos, mask)
        return self.norm(h)


def draft_block(drafter, target, feats, n_ctx, anchors, block):
    """One drafting step for a batch. feats [N, C, n_taps*H] (rows >= n_ctx[b] are padding);
    n_ctx [N] committed positions before each anchor; anchors [N] token ids (at position n_ctx).
    Returns (draft ids [N, block-1], logits [N, block-1, V] float32)."""
    N, C, _ = feats.shape
    dev = feats.device
    ids = torch.full((N, block), drafter.mask_id, dtype=torch.long, device=dev)
    ids[:, 0] = anchors
    emb = target.model.embed_tokens(ids).to(feats.dtype)
    n = n_ctx.to(dev)[:, None]
    q_pos = n + torch.arange(block, device=dev)[None]
    k_pos = torch.cat([torch.arange(C, device=dev)[None].expand(N, C), q_pos], 1)
    ctx_ok = torch.arange(C, device=dev)[None] < n
    mask = torch.cat([ctx_ok, torch.ones(N, block, dtype=torch.bool, device=dev)], 1)[:, None].expand(N, block, C + block)
    out = drafter(emb, feats, q_pos, k_pos, mask)
    logits = target.lm_head(out[:, 1:]).float()
    return logits.argmax(-1), logits


@torch.no_grad()
def target_forward(target, taps, seqs, pad_id, dev):
    """Full forward over right-padded sequences (causal, so padding never reaches real rows).
    Returns (logits [N, L, V] float32, features [N, L, n_taps*H])."""
    L = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), L), pad_id, dtype=torch.long, device=dev)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s, device=dev)
    logits = target(input_ids=ids, use_cache=False).logits.float()
    return logits, taps.get()


@torch.no_grad()
def greedy_generate(target, prompts, max_new, eos_ids, pad_id, dev):
    """Plain greedy decoding by full recompute (the lossless reference for spec_generate)."""
    seqs, done = [list(p) for p in prompts], [False] * len(prompts)
    for _ in range(max_new):
        logits = target(input_ids=_pad(seqs, pad_id, dev), use_cache=False).logits
        for b, s in enumerate(seqs):
            if not done[b]:
                t = int(logits[b, len(s) - 1].float().argmax())
                s.append(t)
                done[b] = t in eos_ids
        if all(done):
            break
    return [s[len(p):] for s, p in zip(seqs, prompts)]


def _pad(seqs, pad_id, dev):
    L = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), L), pad_id, dtype=torch.long, device=dev)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s, device=dev)
    return ids


@torch.no_grad()
def spec_generate(target, drafter, prompts, max_new, block, eos_ids, pad_id, dev):
    """Greedy DFlash decoding of a batch of prompts. Returns (outputs, rounds): outputs[b] the
    generated ids (equal to greedy_generate's, the lossless property), rounds[b] the acceptance
    length of each drafting round (accepted drafts + 1)."""
    taps = Taps(target, drafter.taps)
    try:
        seqs = [list(p) for p in prompts]
        logits, feats = target_forward(target, taps, seqs, pad_id, dev)
        gen = [[] for _ in prompts]
        rounds = [[] for _ in prompts]
        done = [False] * len(prompts)
        for b, s in enumerate(seqs):  # first token from the prefill; the anchor of round 1
            t = int(logits[b, len(s) - 1].argmax())
            s.append(t)
            gen[b].append(t)
            done[b] = t in eos_ids or max_new <= 1
        while not all(done):
            act = [b for b in range(len(seqs)) if not done[b]]
            n_ctx = torch.tensor([len(seqs[b]) - 1 for b in act])
            C = int(n_ctx.max())
            f = feats[act, :C]
            drafts, _ = draft_block(drafter, target, f, n_ctx, torch.tensor([seqs[b][-1] for b in act], device=dev), block)
            ver = [seqs[b] + drafts[i].tolist() for i, b in enumerate(act)]
            logits, vfeats = target_forward(target, taps, ver, pad_id, dev)
            # as long as the longest sequence so far: finished sequences may be longer than this round's
            L = max(feats.shape[1], max(len(s) for s in ver))
            new_feats = torch.zeros(feats.shape[0], L, vfeats.shape[-1], dtype=vfeats.dtype, device=dev)
            new_feats[:, :feats.shape[1]] = feats
            for i, b in enumerate(act):
                n = len(seqs[b])
                post = logits[i, n - 1:n - 1 + block].argmax(-1).tolist()  # target tokens at n .. n+block-1
                d = drafts[i].tolist()
                a = 0
                while a < block - 1 and d[a] == post[a]:
                    a += 1
                new = d[:a] + [post[a]]
                rounds[b].append(len(new))
                for t in new:
                    if done[b]:
                        break
                    seqs[b].append(t)
                    gen[b].append(t)
                    done[b] = t in eos_ids or len(gen[b]) >= max_new
                new_feats[b, :n + a] = vfeats[i, :n + a]  # rows of the anchor and accepted drafts
            feats = new_feats
        return gen, rounds
    finally:
        taps.remove()
