#!/usr/bin/env python3
"""Checks the pure-torch stand-in (../qwen35_torch.py) and common.dequantized_state against the
goldens transformers wrote for quill (tests/fixtures/models: fp32 HF checkpoints and the MLX 4-bit
one): last-position logits within 1e-3 relative. Needs torch and numpy only."""
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import common  # noqa: E402
import gdn_fast  # noqa: E402
import qwen35_torch as q  # noqa: E402

FIX = os.path.join(HERE, "..", "..", "..", "tests", "fixtures", "models")


def main():
    torch.set_grad_enabled(False)
    bad = 0
    for name in ("flat-3gdn1attn", "gqa4-v2k", "tied", "gqa4-v2k-mlx4"):
        d = os.path.join(FIX, name)
        cfg = common.jload(os.path.join(d, "config.json"))
        model = q.CausalLM(q.Config(**cfg.get("text_config", cfg))).eval()
        t = common.read_dir_safetensors(d)
        sd = common.dequantized_state(t, "target") if name.endswith("mlx4") else {k: v for k, (_, v) in t.items()}
        model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()}, strict=False)
        gold = common.jload(os.path.join(d, "goldens.json"))
        worst = 0.0
        for p in gold["prompts"][:3]:
            got = model(torch.tensor([p["ids"]])).logits[0, -1]
            ref = torch.from_numpy(np.fromfile(os.path.join(d, p["logits"]), "<f4"))
            worst = max(worst, float((got - ref).abs().max()) / max(1.0, float(ref.abs().max())))
        print(f"{name:16s} max rel. logit diff vs transformers {worst:.2e}")
        bad += not worst < 1e-3
    # the chunked GDN rule of gdn_fast against the recurrent rule
    g = torch.Generator().manual_seed(1)
    qq, kk = torch.randn(2, 150, 2, 16, generator=g), torch.randn(2, 150, 2, 16, generator=g)
    vv, gg, bb = torch.randn(2, 150, 4, 8, generator=g), -torch.rand(2, 150, 4, generator=g), torch.rand(2, 150, 4, generator=g)
    o, _ = gdn_fast.chunk_gated_delta_rule(qq, kk, vv, gg, bb, use_qk_l2norm_in_kernel=True)
    qn = torch.nn.functional.normalize(qq.repeat_interleave(2, 2), dim=-1) * 16 ** -0.5
    kn = torch.nn.functional.normalize(kk.repeat_interleave(2, 2), dim=-1)
    S, outs = torch.zeros(2, 4, 16, 8), []
    for i in range(150):
        S = S * gg[:, i].exp()[..., None, None]
        d = (vv[:, i] - (S * kn[:, i, :, :, None]).sum(-2)) * bb[:, i, :, None]
        S = S + kn[:, i, :, :, None] * d[:, :, None, :]
        outs.append((S * qn[:, i, :, :, None]).sum(-2))
    err = float((o - torch.stack(outs, 1)).abs().max())
    print(f"gdn_fast chunked vs recurrent rule: max diff {err:.2e}")
    bad += not err < 1e-4
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
