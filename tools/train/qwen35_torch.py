"""A small pure-torch Qwen3.5 text model (reference/qwen35-architecture.md section 2) with Hugging
Face's parameter names, for testing the tools/train scripts where transformers is not installed.

`fake_transformers()` returns a module object that stands in for `transformers` in those scripts
(Qwen3_5TextConfig, Qwen3_5ForCausalLM with forward / generate / save_pretrained). The GDN runs the
recurrent rule token by token (slow; fine for toy sizes). tests/smoke_local.py checks this model
against the golden logits transformers wrote under tests/fixtures/models, so the stand-in computes
what transformers computes.
"""
import json
import os
import types

import torch
import torch.nn.functional as F
from torch import nn


class Config:
    def __init__(self, **kw):
        kw = dict(kw)
        interval = kw.pop("full_attention_interval", 4)
        self.__dict__.update(kw)
        if getattr(self, "layer_types", None) is None:
            self.layer_types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
                                for i in range(self.num_hidden_layers)]
        self.full_attention_interval = interval
        self.rope_parameters = dict(getattr(self, "rope_parameters", None) or {})
        self.rope_parameters.setdefault("rope_theta", 10000.0)
        self.rope_parameters.setdefault("partial_rotary_factor", 0.25)
        for k, v in (("use_cache", True), ("rms_norm_eps", 1e-6), ("tie_word_embeddings", False)):
            self.__dict__.setdefault(k, v)

    def to_dict(self):
        return dict(self.__dict__)

    def get_text_config(self):
        return self


class ZCNorm(nn.Module):  # Qwen3_5RMSNorm: (1 + w), zeros-initialised
    def __init__(self, n, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.zeros(n)), eps

    def forward(self, x):
        y = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * (1.0 + self.weight.float())).type_as(x)


class GatedNorm(nn.Module):  # Qwen3_5RMSNormGated: plain w, then * silu(gate)
    def __init__(self, n, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(n)), eps

    def forward(self, x, gate):
        dt = x.dtype
        y = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        y = self.weight * y.to(dt)
        return (y * F.silu(gate.float())).to(dt)


class GDN(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.hk, self.hv, self.dk, self.dv = (c.linear_num_key_heads, c.linear_num_value_heads,
                                              c.linear_key_head_dim, c.linear_value_head_dim)
        kd, vd, H = self.hk * self.dk, self.hv * self.dv, c.hidden_size
        self.K = c.linear_conv_kernel_dim
        self.conv1d = nn.Conv1d(2 * kd + vd, 2 * kd + vd, self.K, groups=2 * kd + vd, bias=False,
                                padding=self.K - 1)
        self.dt_bias = nn.Parameter(torch.ones(self.hv))
        self.A_log = nn.Parameter(torch.log(torch.empty(self.hv).uniform_(0.01, 16)))
        self.norm = GatedNorm(self.dv, c.rms_norm_eps)
        self.out_proj = nn.Linear(vd, H, bias=False)
        self.in_proj_qkv = nn.Linear(H, 2 * kd + vd, bias=False)
        self.in_proj_z = nn.Linear(H, vd, bias=False)
        self.in_proj_b = nn.Linear(H, self.hv, bias=False)
        self.in_proj_a = nn.Linear(H, self.hv, bias=False)

    def forward(self, h):
        B, T, _ = h.shape
        kd = self.hk * self.dk
        x = F.silu(self.conv1d(self.in_proj_qkv(h).transpose(1, 2))[..., :T]).transpose(1, 2)
        q, k, v = x[..., :kd], x[..., kd:2 * kd], x[..., 2 * kd:]
        r = self.hv // self.hk
        q = q.reshape(B, T, self.hk, self.dk).repeat_interleave(r, 2).float()
        k = k.reshape(B, T, self.hk, self.dk).repeat_interleave(r, 2).float()
        v = v.reshape(B, T, self.hv, self.dv).float()
        beta = torch.sigmoid(self.in_proj_b(h)).float()
        g = -self.A_log.float().exp() * F.softplus(self.in_proj_a(h).float() + self.dt_bias)
        q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6) * self.dk ** -0.5
        k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
        S = torch.zeros(B, self.hv, self.dk, self.dv, device=h.device)
        outs = []
        for t in range(T):
            S = S * g[:, t].exp()[..., None, None]
            kv = (S * k[:, t, :, :, None]).sum(-2)
            d = (v[:, t] - kv) * beta[:, t, :, None]
            S = S + k[:, t, :, :, None] * d[:, :, None, :]
            outs.append((S * q[:, t, :, :, None]).sum(-2))
        o = torch.stack(outs, 1).to(h.dtype)
        z = self.in_proj_z(h).reshape(B, T, self.hv, self.dv)
        o = self.norm(o.reshape(-1, self.dv), z.reshape(-1, self.dv)).reshape(B, T, -1)
        return self.out_proj(o)


def rope(x, pos, rot, theta):  # NeoX rotate_half on the first `rot` dims; x [B, heads, T, D]
    inv = 1.0 / (theta ** (torch.arange(0, rot, 2, dtype=torch.float32, device=x.device) / rot))
    f = pos.float()[:, None] * inv[None]
    cos, sin = torch.cat([f.cos(), f.cos()], -1).to(x.dtype), torch.cat([f.sin(), f.sin()], -1).to(x.dtype)
    xr, xp = x[..., :rot], x[..., rot:]
    rh = torch.cat([-xr[..., rot // 2:], xr[..., :rot // 2]], -1)
    return torch.cat([xr * cos + rh * sin, xp], -1)


class Attn(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.nq, self.nkv, self.D = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        H = c.hidden_size
        self.rot = int(self.D * c.rope_parameters["partial_rotary_factor"])
        self.theta = c.rope_parameters["rope_theta"]
        self.q_proj = nn.Linear(H, self.nq * self.D * 2, bias=False)
        self.k_proj = nn.Linear(H, self.nkv * self.D, bias=False)
        self.v_proj = nn.Linear(H, self.nkv * self.D, bias=False)
        self.o_proj = nn.Linear(self.nq * self.D, H, bias=False)
        self.q_norm, self.k_norm = ZCNorm(self.D, c.rms_norm_eps), ZCNorm(self.D, c.rms_norm_eps)

    def forward(self, h):
        B, T, _ = h.shape
        qg = self.q_proj(h).view(B, T, self.nq, 2 * self.D)
        q, gate = qg[..., :self.D], qg[..., self.D:].reshape(B, T, -1)
        q = self.q_norm(q).transpose(1, 2)
        k = self.k_norm(self.k_proj(h).view(B, T, self.nkv, self.D)).transpose(1, 2)
        v = self.v_proj(h).view(B, T, self.nkv, self.D).transpose(1, 2)
        pos = torch.arange(T, device=h.device)
        q, k = rope(q, pos, self.rot, self.theta), rope(k, pos, self.rot, self.theta)
        k = k.repeat_interleave(self.nq // self.nkv, 1)
        v = v.repeat_interleave(self.nq // self.nkv, 1)
        s = (q @ k.transpose(-1, -2)) * self.D ** -0.5
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=h.device).triu(1), float("-inf"))
        o = (torch.softmax(s.float(), -1).to(q.dtype) @ v).transpose(1, 2).reshape(B, T, -1)
        return self.o_proj(o * torch.sigmoid(gate))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c, i):
        super().__init__()
        self.kind = c.layer_types[i]
        if self.kind == "linear_attention":
            self.linear_attn = GDN(c)
        else:
            self.self_attn = Attn(c)
        self.mlp = MLP(c)
        self.input_layernorm = ZCNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = ZCNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, x):
        h = self.input_layernorm(x)
        x = x + (self.linear_attn(h) if self.kind == "linear_attention" else self.self_attn(h))
        return x + self.mlp(self.post_attention_layernorm(x))


class TextModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList([Layer(c, i) for i in range(c.num_hidden_layers)])
        self.norm = ZCNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, ids):
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


class CausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.model = TextModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def forward(self, input_ids=None, use_cache=False, **_):
        return types.SimpleNamespace(logits=self.lm_head(self.model(input_ids)))

    @torch.no_grad()
    def generate(self, input_ids, max_new_tokens=16, eos_token_id=None, output_logits=False,
                 return_dict_in_generate=False, **_):
        eos = set([eos_token_id] if isinstance(eos_token_id, int) else (eos_token_id or []))
        seq, steps = input_ids, []
        for _ in range(max_new_tokens):
            last = self.forward(seq).logits[:, -1].float()
            steps.append(last)
            nxt = last.argmax(-1, keepdim=True)
            seq = torch.cat([seq, nxt], 1)
            if int(nxt[0, 0]) in eos:
                break
        if return_dict_in_generate:
            return types.SimpleNamespace(sequences=seq, logits=tuple(steps) if output_logits else None)
        return seq

    def save_pretrained(self, d):
        os.makedirs(d, exist_ok=True)
        cfg = dict(self.config.to_dict(), architectures=["Qwen3_5ForCausalLM"], model_type="qwen3_5_text")
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)


def fake_transformers():
    m = types.ModuleType("transformers")
    m.__version__ = "fake (tools/train/qwen35_torch.py)"
    m.Qwen3_5TextConfig, m.Qwen3_5ForCausalLM = Config, CausalLM
    return m
