"""Loading and saving the target and the drafter in the layouts quill reads.

Target: an HF checkpoint (bf16/f32, flat `model.*` names, tied head omitted) or quill's MLX 4-bit
bundle (`quill quantize` output), rebuilt as transformers' Qwen3_5ForCausalLM with float32
weights: the MLX one dequantized exactly as MLX and quill do (value = scale * code + bias in f32,
norms stored as 1+w read back as w).
Drafter: z-lab's DFlashDraftModel layout (config.json with dflash_config; model.safetensors with
fc / hidden_norm / layers.* / norm), bf16, or its 4-bit copy from `quill quantize`.
"""
import os
import sys

import torch

from common import (dequantized_state, jdump, jload, read_dir_safetensors, target_text_config,
                    write_safetensors)
from dflash_ref import DFlashDrafter

CONFIG_KEYS = tuple(target_text_config().keys())


def text_config_from(cfg):
    cfg = cfg.get("text_config", cfg)
    out = {k: cfg[k] for k in CONFIG_KEYS if k in cfg}
    rp = out.get("rope_parameters")
    if isinstance(rp, dict):  # only what Qwen3_5TextConfig reads; keep partial_rotary_factor inside
        out["rope_parameters"] = {k: v for k, v in rp.items()
                                  if k in ("rope_type", "rope_theta", "partial_rotary_factor", "mrope_section",
                                           "mrope_interleaved")}
    return out


def load_target(tf, d, device, dtype=torch.float32):
    """-> (model in eval mode, config dict, 'mlx4' | 'hf')."""
    cfg = jload(os.path.join(d, "config.json"))
    tcfg = text_config_from(cfg)
    model = tf.Qwen3_5ForCausalLM(tf.Qwen3_5TextConfig(**tcfg))
    tensors = read_dir_safetensors(d)
    kind = "mlx4" if ("quantization" in cfg or any(k.endswith(".scales") for k in tensors)) else "hf"
    sd = dequantized_state(tensors, "target") if kind == "mlx4" else {k: v for k, (_, v) in tensors.items()}
    sd = {k: torch.from_numpy(v.copy()) for k, v in sd.items()}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    tied = tcfg.get("tie_word_embeddings", False)
    missing = [k for k in missing if not (tied and k == "lm_head.weight")]
    if missing or unexpected:
        sys.exit(f"load_target {d}: missing {missing[:5]} unexpected {unexpected[:5]}")
    if tied and model.lm_head.weight.data_ptr() != model.get_input_embeddings().weight.data_ptr():
        sys.exit(f"load_target {d}: lm_head is not tied to embed_tokens")
    return model.to(device=device, dtype=dtype).eval(), tcfg, kind


def load_drafter(d, device, dtype=torch.float32):
    cfg = jload(os.path.join(d, "config.json"))
    drafter = DFlashDrafter(cfg)
    tensors = read_dir_safetensors(d)
    sd = dequantized_state(tensors, "drafter")
    sd = {k: torch.from_numpy(v.copy()) for k, v in sd.items()}
    missing, unexpected = drafter.load_state_dict(sd, strict=False)
    if missing or unexpected:
        sys.exit(f"load_drafter {d}: missing {missing[:5]} unexpected {unexpected[:5]}")
    return drafter.to(device=device, dtype=dtype).eval(), cfg


def save_drafter(drafter, out, extra=None):
    os.makedirs(out, exist_ok=True)
    sd = {k: v.detach().float().cpu().numpy() for k, v in drafter.state_dict().items()}
    write_safetensors(os.path.join(out, "model.safetensors"), sd, {"format": "pt"}, dtype="BF16")
    jdump(dict(drafter.config, **(extra or {})), os.path.join(out, "config.json"), indent=2, sort_keys=True)
