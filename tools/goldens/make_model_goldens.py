#!/usr/bin/env python3
"""Make tiny random Qwen3.5 models and fp32 reference outputs for quill's C implementation.

What it writes (each model in OUT/<name>/: config.json, weights, goldens.json, logits_*.f32):
  flat-3gdn1attn      Qwen3_5ForCausalLM, 4 layers (3 GDN + 1 attention), flat `model.layers.*` names.
  nested-vision-mtp   Qwen3_5ForConditionalGeneration (tiny vision tower), `model.language_model.*`
                      names, extra random `mtp.*` tensors, SHARDED into 2 files + index.json.
  gqa4-v2k            9B-like ratios: 8 layers, GQA 4:1, GDN V heads = 2 x K heads.
  tied                like flat-3gdn1attn with tie_word_embeddings (no lm_head.weight in the file).
  gqa4-v2k-mlx4       MLX affine 4-bit (group 64) copy of gqa4-v2k with MLX names and layout;
                      its goldens come from the DEQUANTIZED weights run through transformers.
And BUNDLED/ (default models/qwen35-tiny): gqa4-v2k cast to bfloat16 (config + weights, no goldens).

Why: the C engine needs bit-for-bit-known inputs and trusted outputs for every layout it must
load (flat/nested/sharded/tied/MLX-quantized) and for the hybrid forward (GDN chunked prefill over
several 64-token chunks, recurrent decode, gated partial-RoPE attention, zero-centred norms).
Weights are random but deliberately non-degenerate (norm weights != 0/1, random dt_bias/A_log).

goldens.json: {"model", "vocab_size", "prompts": [{"ids", "logits": "logits_<i>.f32" (last position,
V LE float32), "greedy" (32 ids, generate with cache = the reference), "greedy_nocache" (full
recompute per step), "greedy_agree", "greedy_min_margin" (smallest top1-top2 gap), ...}]}.
flat-3gdn1attn's 150-token prompt also has logits_all_<i>.f32 ([T][V] float32).

All reference math runs on CPU in fp32 with transformers' pure-torch GDN (the `fla` and
`causal_conv1d` packages are blocked before transformers is imported, so the chunked torch rule
runs for prefill and the recurrent torch rule for cached one-token decode).

Run:  python3 tools/goldens/make_model_goldens.py [--out DIR] [--bundled DIR] [--selfcheck | --check-only]
"""
import argparse
import copy
import json
import os
import shutil
import struct
import sys
import tempfile

# Block the optional fast-kernel packages BEFORE transformers is imported: transformers resolves
# `fla` / `causal_conv1d` at import time and would otherwise call their (GPU-only) kernels.
for _blocked in ("fla", "causal_conv1d"):
    sys.modules[_blocked] = None  # `import fla` now raises ImportError -> torch fallback

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from safetensors_np import read_safetensors  # noqa: E402  (tools/safetensors_np.py)
import transformers  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import (Qwen3_5Config, Qwen3_5ForCausalLM,  # noqa: E402
                          Qwen3_5ForConditionalGeneration, Qwen3_5TextConfig)
from transformers.models.qwen3_5 import modeling_qwen3_5 as hf_qwen35  # noqa: E402

VOCAB = 1024
N_GREEDY = 32
PROMPT_LENS = (1, 7, 40, 150)  # 150 > 2 chunks of 64
GROUP, BITS = 64, 4
ZC_NORM_SUFFIXES = ("input_layernorm.weight", "post_attention_layernorm.weight",
                    "q_norm.weight", "k_norm.weight")

# ----------------------------------------------------------------------------- configs
def text_config(layers, heads, kv_heads, lin_k, lin_v, tie=False):
    return dict(
        vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=32,
        linear_num_key_heads=lin_k, linear_num_value_heads=lin_v,
        linear_key_head_dim=32, linear_value_head_dim=32, linear_conv_kernel_dim=4,
        hidden_act="silu", rms_norm_eps=1e-6, max_position_embeddings=4096,
        attention_bias=False, tie_word_embeddings=tie, full_attention_interval=4,
        layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention"
                     for i in range(layers)],
        # rot dim = 32 * 0.25 = 8 -> 4 frequency pairs; mrope_section must sum to 4
        rope_parameters=dict(rope_type="default", rope_theta=10000000.0,
                             partial_rotary_factor=0.25, mrope_section=[2, 1, 1],
                             mrope_interleaved=True),
        mtp_num_hidden_layers=1, mtp_use_dedicated_embeddings=False, mamba_ssm_dtype="float32",
        bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )

VISION = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, in_channels=3,
              patch_size=4, temporal_patch_size=2, spatial_merge_size=2, out_hidden_size=128,
              num_position_embeddings=16, hidden_act="gelu_pytorch_tanh",
              rope_parameters={"rope_type": "axial", "rope_theta": 10000.0})  # 5.17 vision rotary reads it

MODELS = {  # name -> (text config, nested?, seed)
    "flat-3gdn1attn": (text_config(4, 4, 2, 2, 2), False, 11),
    "nested-vision-mtp": (text_config(4, 4, 2, 2, 2), True, 22),
    "gqa4-v2k": (text_config(8, 8, 2, 2, 4), False, 33),
    "tied": (text_config(4, 4, 2, 2, 2, tie=True), False, 44),
}

def prompts():  # fixed seeds: the same prompts for every model
    return [torch.randint(0, VOCAB, (n,), generator=torch.Generator().manual_seed(1000 + 17 * i)).tolist()
            for i, n in enumerate(PROMPT_LENS)]

# ----------------------------------------------------------------------------- model building
def check_torch_gdn():
    """Fail loudly if transformers captured an optimized GDN/conv kernel instead of torch."""
    for fname in ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule",
                  "causal_conv1d_fn", "causal_conv1d_update"):
        f = getattr(hf_qwen35, fname, None)
        if f is None:
            sys.exit(f"transformers.models.qwen3_5 has no {fname}: API changed, check the script")
        code, cells = getattr(f, "__code__", None), getattr(f, "__closure__", None) or ()
        if code is not None:
            env = dict(zip(code.co_freevars, cells))
            if "is_new_implementation" in env and env["is_new_implementation"].cell_contents:
                sys.exit(f"{fname} resolved to an optimized kernel; the torch path is required")

def build_model(text_cfg, nested, seed):
    torch.manual_seed(seed)
    if not nested:
        return randomize(Qwen3_5ForCausalLM(Qwen3_5TextConfig(**text_cfg)), seed)
    cfg = Qwen3_5Config(text_config=dict(text_cfg), vision_config=dict(VISION),
                        tie_word_embeddings=text_cfg["tie_word_embeddings"])
    return randomize(Qwen3_5ForConditionalGeneration(cfg), seed)

@torch.no_grad()
def randomize(model, seed):
    """Overwrite every parameter with deterministic, non-degenerate values."""
    g = torch.Generator().manual_seed(seed)

    def rn(t, std, mean=0.0):
        t.copy_(torch.randn(t.shape, generator=g) * std + mean)

    seen = set()
    for mname, m in model.named_modules():
        cls = type(m).__name__
        for pname, p in m.named_parameters(recurse=False):
            if id(p) in seen:  # tied weights: randomize once
                continue
            seen.add(id(p))
            full = f"{mname}.{pname}" if mname else pname
            if cls == "Qwen3_5RMSNorm":            # zero-centred: y = norm(x) * (1 + w)
                rn(p, 0.1)
            elif cls == "Qwen3_5RMSNormGated":     # plain weight, ones-init
                rn(p, 0.1, 1.0)
            elif cls == "Qwen3_5GatedDeltaNet" and pname == "A_log":
                p.copy_(torch.empty(p.shape).uniform_(-3.0, 1.0, generator=g))  # A in [0.05, 2.7]
            elif cls == "Qwen3_5GatedDeltaNet" and pname == "dt_bias":
                rn(p, 0.5)
            elif isinstance(m, torch.nn.LayerNorm):
                rn(p, 0.1, 1.0 if pname == "weight" else 0.0)
            elif isinstance(m, torch.nn.Embedding):
                rn(p, 1.0)
            elif pname == "bias":
                rn(p, 0.02)
            elif isinstance(m, (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv3d)):
                fan_in = p[0].numel()
                rn(p, (8.0 if full.endswith("lm_head.weight") else 1.0) / fan_in ** 0.5)  # peaky logits
            else:
                raise RuntimeError(f"randomize: unhandled parameter {full} ({cls})")
    return model.eval()

def mtp_tensors(model, seed):
    """Random mtp.* tensors (transformers has no MTP module): fc, 3 norms, one attention block."""
    g, cfg, out = torch.Generator().manual_seed(seed + 7), model.config.get_text_config(), {}
    H, attn_idx = cfg.hidden_size, cfg.layer_types.index("full_attention")
    for k, v in sorted(model.model.language_model.layers[attn_idx].state_dict().items()):
        std = 0.1 if k.endswith("norm.weight") else v.shape[-1] ** -0.5  # zero-centred norms
        out["mtp.layers.0." + k] = torch.randn(v.shape, generator=g) * std
    out["mtp.fc.weight"] = torch.randn(H, 2 * H, generator=g) / (2 * H) ** 0.5
    for k in ("mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight",
              "mtp.norm.weight"):
        out[k] = torch.randn(H, generator=g) * 0.1
    return out

# ----------------------------------------------------------------------------- writing
def jload(path):
    with open(path) as f:
        return json.load(f)

def jdump(obj, path, **kw):
    with open(path, "w") as f:
        f.write(json.dumps(obj, **kw) + "\n")

def hf_state_dict(model, dtype=torch.float32):
    sd = {k: v.detach().to(dtype).contiguous().clone() for k, v in model.state_dict().items()}
    cfg = model.config
    if getattr(cfg, "tie_word_embeddings", False) or cfg.get_text_config().tie_word_embeddings:
        sd.pop("lm_head.weight", None)  # tied: HF checkpoints omit it
    return sd

def write_config(model, outdir, dtype_name, extra_text=None):
    """config.json exactly as save_pretrained writes it (weights from that call are discarded)."""
    with tempfile.TemporaryDirectory() as td:
        model.save_pretrained(td)
        cfg = jload(os.path.join(td, "config.json"))
    cfg["dtype"] = dtype_name  # what save_pretrained records for these weights
    if isinstance(cfg.get("text_config"), dict) and "dtype" in cfg["text_config"]:
        cfg["text_config"]["dtype"] = dtype_name
    text = cfg.get("text_config", cfg)
    for k, v in (extra_text or {}).items():
        text.setdefault(k, v)  # only if transformers dropped an extra key
    jdump(cfg, os.path.join(outdir, "config.json"), indent=2, sort_keys=True)
    return cfg

def write_sharded(sd, outdir, n_shards=2):
    names = sorted(sd)
    total = sum(sd[k].numel() * sd[k].element_size() for k in names)
    shards, cur, acc = [[] for _ in range(n_shards)], 0, 0
    for k in names:  # split by bytes; a layer may straddle the two files (on purpose)
        if acc >= total * (cur + 1) / n_shards and cur < n_shards - 1:
            cur += 1
        shards[cur].append(k)
        acc += sd[k].numel() * sd[k].element_size()
    weight_map = {}
    for i, keys in enumerate(shards):
        fn = f"model-{i + 1:05d}-of-{n_shards:05d}.safetensors"
        save_file({k: sd[k] for k in keys}, os.path.join(outdir, fn), metadata={"format": "pt"})
        weight_map.update({k: fn for k in keys})
    jdump({"metadata": {"total_size": total}, "weight_map": weight_map},
          os.path.join(outdir, "model.safetensors.index.json"), indent=2)

def raw_tensor(t):
    """(safetensors dtype, shape, little-endian bytes) for bf16/f32 torch tensors or u32 numpy."""
    if isinstance(t, np.ndarray):
        assert t.dtype == np.uint32
        return "U32", list(t.shape), t.astype("<u4").tobytes()
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return "BF16", list(t.shape), t.view(torch.int16).numpy().astype("<i2").tobytes()
    assert t.dtype == torch.float32, t.dtype
    return "F32", list(t.shape), t.numpy().astype("<f4").tobytes()

def write_raw_safetensors(path, tensors, metadata):
    """Plain safetensors writer with an UNPADDED header, like MLX's (tensors may be misaligned)."""
    header, blobs, off = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        dt, shape, data = raw_tensor(tensors[name])
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))

def read_raw_safetensors(path):
    """Independent reader (numpy only, tools/safetensors_np.py): name -> (dtype string, float32/uint32
    array); the goldens' files hold BF16, F32 and U32 only."""
    return read_safetensors(path, dtypes=("BF16", "F32", "U32"))

def write_f32(path, t):
    t.detach().to(torch.float32).contiguous().numpy().astype("<f4").tofile(path)

# ----------------------------------------------------------------------------- MLX affine 4-bit
def mlx_affine_quantize(w):
    """MLX affine quantize (mlx/backend/cpu/quantized.cpp `quantize`), fp32 math on bf16 input.

    Per row, per group of 64 along the input dim: the extreme with the larger magnitude ("edge")
    is made exactly representable: scale = +-max((max-min)/15, 1e-7) (negative when edge = max),
    q0 = rint(edge/scale); if q0 != 0: scale = edge/q0, bias = edge; else bias = 0.
    code = clip(rint((w - bias)/scale), 0, 15). Scales/biases are then stored as bfloat16.
    Returns (packed uint32 [out, in/8] LSB-nibble-first, scale bf16, bias bf16).
    """
    w = w.to(torch.bfloat16).to(torch.float32)
    rows, cols = w.shape
    gw = w.reshape(rows, cols // GROUP, GROUP)
    wmax, wmin = gw.amax(-1), gw.amin(-1)
    n_bins = float((1 << BITS) - 1)
    mask = wmin.abs() > wmax.abs()
    scale = torch.clamp((wmax - wmin) / n_bins, min=1e-7)
    scale = torch.where(mask, scale, -scale)
    edge = torch.where(mask, wmin, wmax)
    q0 = torch.round(edge / scale)  # torch.round = round-half-even = std::rint
    nz = q0 != 0
    scale = torch.where(nz, edge / torch.where(nz, q0, torch.ones_like(q0)), scale)
    bias = torch.where(nz, edge, torch.zeros_like(edge))
    q = torch.round((gw - bias[..., None]) / scale[..., None]).clamp(0, n_bins)
    q = q.to(torch.int64).reshape(rows, cols // 8, 8)
    words = (q << (4 * torch.arange(8, dtype=torch.int64))).sum(-1)
    return words.numpy().astype(np.uint32), scale.to(torch.bfloat16), bias.to(torch.bfloat16)

def mlx_dequantize(words, scales, biases):
    """fp32 reference dequant: w = scale * code + bias (numpy in, torch fp32 out)."""
    words = np.asarray(words, dtype=np.uint32)
    codes = (words[..., None] >> (4 * np.arange(8, dtype=np.uint32))) & 0xF
    codes = torch.from_numpy(codes.reshape(words.shape[0], -1).astype(np.float32))
    s = torch.as_tensor(np.asarray(scales, dtype=np.float32)).repeat_interleave(GROUP, dim=1)
    b = torch.as_tensor(np.asarray(biases, dtype=np.float32)).repeat_interleave(GROUP, dim=1)
    return s * codes + b

def mlx_name(hf_name):
    return "language_model." + hf_name  # model.X -> language_model.model.X, lm_head -> language_model.lm_head

def make_mlx(model_c):
    """MLX tensors for model (c) and the fp32 state dict that reproduces them in HF layout."""
    quantized = {f"{n}.weight" for n, m in model_c.named_modules()
                 if isinstance(m, (torch.nn.Linear, torch.nn.Embedding))}
    mlx, ref = {}, {}
    for k, v in model_c.state_dict().items():
        v = v.detach().float()
        if k in quantized:
            words, s, b = mlx_affine_quantize(v)
            base = mlx_name(k)[: -len(".weight")]
            mlx[base + ".weight"], mlx[base + ".scales"], mlx[base + ".biases"] = words, s, b
            ref[k] = mlx_dequantize(words, s.float().numpy(), b.float().numpy())
        elif k.endswith("A_log"):
            mlx[mlx_name(k)], ref[k] = v.clone(), v.clone()  # mlx_lm keeps A_log in fp32
        elif k.endswith("conv1d.weight"):  # HF [C, 1, K] -> MLX [C, K, 1]
            s = v.to(torch.bfloat16)
            mlx[mlx_name(k)], ref[k] = s.permute(0, 2, 1).contiguous(), s.float()
        elif k.endswith(ZC_NORM_SUFFIXES) or k == "model.norm.weight":  # stored as (1 + w)
            s = (v + 1.0).to(torch.bfloat16)
            mlx[mlx_name(k)], ref[k] = s, s.float() - 1.0
        else:  # linear_attn.norm.weight (raw), dt_bias
            s = v.to(torch.bfloat16)
            mlx[mlx_name(k)], ref[k] = s, s.float()
    return mlx, ref

def mlx_config(text_cfg):
    q = {"group_size": GROUP, "bits": BITS, "mode": "affine"}
    text = dict(text_cfg, model_type="qwen3_5_text", dtype="bfloat16")
    return {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
            "text_config": text, "vision_config": dict(VISION, model_type="qwen3_5_vision"),
            "tie_word_embeddings": text_cfg["tie_word_embeddings"], "dtype": "bfloat16",
            "quantization": q, "quantization_config": dict(q)}

# ----------------------------------------------------------------------------- goldens
@torch.no_grad()
def all_logits(model, ids):
    return model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()

@torch.no_grad()
def greedy_cached(model, ids):
    x = torch.tensor([ids])
    out = model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=N_GREEDY,
                         do_sample=False, num_beams=1, use_cache=True,
                         return_dict_in_generate=True, output_logits=True)
    return out.sequences[0, len(ids):].tolist(), [s[0].float() for s in out.logits]

@torch.no_grad()
def greedy_nocache(model, ids):
    seq, toks, margins, steps = list(ids), [], [], []
    for _ in range(N_GREEDY):
        last = all_logits(model, seq)[-1]
        top = torch.topk(last, 2).values
        margins.append(float(top[0] - top[1]))
        steps.append(last)
        toks.append(int(last.argmax()))
        seq.append(toks[-1])
    return toks, margins, steps

def make_goldens(model, name, outdir, all_positions_for=()):
    recs, max_abs = [], 0.0
    for i, ids in enumerate(prompts()):
        logits = all_logits(model, ids)
        last = logits[-1]
        max_abs = max(max_abs, float(last.abs().max()))
        rec = {"ids": ids, "logits": f"logits_{i}.f32", "argmax": int(last.argmax())}
        write_f32(os.path.join(outdir, rec["logits"]), last)
        if len(ids) in all_positions_for:
            rec["logits_all"], rec["logits_all_shape"] = f"logits_all_{i}.f32", list(logits.shape)
            write_f32(os.path.join(outdir, rec["logits_all"]), logits)
        greedy, csteps = greedy_cached(model, ids)
        nocache, margins, nsteps = greedy_nocache(model, ids)
        agree = greedy == nocache
        n_same = next((j for j, (a, b) in enumerate(zip(greedy, nocache)) if a != b), len(greedy))
        rec.update(greedy=greedy, greedy_nocache=nocache, greedy_agree=agree,
                   greedy_reference="cache (generate, use_cache=True)",
                   greedy_min_margin=min(margins[:max(n_same, 1)]))
        if not agree:
            rec["greedy_diverge_at"] = n_same
            print(f"  WARNING {name} prompt {i}: cached/no-cache greedy differ at step {n_same}"
                  f" (min margin {rec['greedy_min_margin']:.3g}); 'greedy' (cached) is the reference")
        upto = min(n_same + 1, len(csteps), len(nsteps))  # common prefix + the first differing step
        rec["cache_vs_nocache_max_abs"] = max(float((a - b).abs().max())
                                              for a, b in zip(csteps[:upto], nsteps[:upto]))
        if len(greedy) != N_GREEDY:
            print(f"  WARNING {name} prompt {i}: generate returned {len(greedy)} tokens")
        recs.append(rec)
    gold = {"model": name, "vocab_size": VOCAB, "dtype": "float32",
            "reference": f"transformers {transformers.__version__}, torch {torch.__version__}, "
                         "CPU fp32, torch GDN (chunked prefill / recurrent decode)",
            "prompts": recs}
    jdump(gold, os.path.join(outdir, "goldens.json"), indent=1)
    return max_abs

def fresh_dir(path):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)

def generate_all(out, bundled):
    check_torch_gdn()
    summary = []

    def record(name, d, nparams, max_abs):
        files = sorted(os.listdir(d))
        size = sum(os.path.getsize(os.path.join(d, f)) for f in files)
        summary.append((name, nparams, len(files), size, max_abs))

    built = {}
    for name, (tcfg, nested, seed) in MODELS.items():
        print(f"[{name}] building")
        d = os.path.join(out, name)
        fresh_dir(d)
        model = build_model(tcfg, nested, seed)
        if tcfg["tie_word_embeddings"]:
            assert model.lm_head.weight is model.get_input_embeddings().weight, "tie not applied"
        write_config(model, d, "float32", {"mtp_num_hidden_layers": 1} if nested else None)
        sd = hf_state_dict(model)
        if nested:
            sd.update(mtp_tensors(model, seed))
            write_sharded(sd, d)
        else:
            save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        print(f"[{name}] goldens")
        max_abs = make_goldens(model, name, d, all_positions_for=(150,) if name == "flat-3gdn1attn" else ())
        record(name, d, sum(t.numel() for t in sd.values()), max_abs)
        built[name] = model

    name, model_c = "gqa4-v2k-mlx4", built["gqa4-v2k"]
    print(f"[{name}] quantizing + goldens from dequantized weights")
    d = os.path.join(out, name)
    fresh_dir(d)
    mlx, ref_sd = make_mlx(model_c)
    write_raw_safetensors(os.path.join(d, "model.safetensors"), mlx, {"format": "mlx"})
    jdump(mlx_config(MODELS["gqa4-v2k"][0]), os.path.join(d, "config.json"), indent=2, sort_keys=True)
    ref_model = copy.deepcopy(model_c)
    ref_model.load_state_dict(ref_sd, strict=True)
    max_abs = make_goldens(ref_model.eval(), name, d)
    record(name, d, sum(int(np.prod(np.shape(t))) for t in mlx.values()), max_abs)

    print(f"[bundled] {bundled}")  # not wiped: make_bundled_tokenizer.py adds files there afterwards
    os.makedirs(bundled, exist_ok=True)
    m16 = copy.deepcopy(model_c).to(torch.bfloat16)
    write_config(m16, bundled, "bfloat16")
    sd16 = hf_state_dict(m16, torch.bfloat16)
    save_file(sd16, os.path.join(bundled, "model.safetensors"), metadata={"format": "pt"})
    record("bundled-qwen35-tiny", bundled, sum(t.numel() for t in sd16.values()), float("nan"))

    print(f"\n{'model':<22}{'params':>10}{'files':>7}{'bytes':>11}{'max|logit|':>12}")
    for n, p, nf, sz, mx in summary:
        print(f"{n:<22}{p:>10}{nf:>7}{sz:>11}{mx:>12.4f}")

# ----------------------------------------------------------------------------- self-check
def load_f32(path, shape=(-1,)):
    return torch.from_numpy(np.fromfile(path, dtype="<f4").astype(np.float32)).reshape(shape)

def compare_goldens(model, d, label, failures, tol=1e-4):
    gold = jload(os.path.join(d, "goldens.json"))
    worst = 0.0
    for i, p in enumerate(gold["prompts"]):
        logits = all_logits(model, p["ids"])
        ref = load_f32(os.path.join(d, p["logits"]), (gold["vocab_size"],))
        diff = float((logits[-1] - ref).abs().max())
        worst = max(worst, diff)
        if diff > tol * max(1.0, float(ref.abs().max())):
            failures.append(f"{label}: prompt {i} logits differ by {diff:.3g}")
        if "logits_all" in p:
            full = load_f32(os.path.join(d, p["logits_all"]), p["logits_all_shape"])
            if not torch.equal(full[-1], ref):
                failures.append(f"{label}: logits_all last row != logits file")
            if float((full - logits).abs().max()) > tol * max(1.0, float(full.abs().max())):
                failures.append(f"{label}: logits_all differ from a fresh forward")
        if len(p["greedy"]) != N_GREEDY or not all(0 <= t < VOCAB for t in p["greedy"]):
            failures.append(f"{label}: prompt {i} greedy malformed")
    print(f"  {label}: reload max |dlogit| = {worst:.3g}")

def from_pretrained(cls, d, dtype, label, failures):
    model, info = cls.from_pretrained(d, dtype=dtype, output_loading_info=True)
    tied = model.config.get_text_config().tie_word_embeddings
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        bad = [x for x in (info.get(k) or []) if not str(x).startswith("mtp.")
               and not (tied and k == "missing_keys" and str(x) == "lm_head.weight")]
        if bad:
            failures.append(f"{label}: {k}: {bad[:5]}")
    return model.eval()

def selfcheck(out, bundled):
    check_torch_gdn()
    failures = []
    classes = {"flat-3gdn1attn": Qwen3_5ForCausalLM, "nested-vision-mtp": Qwen3_5ForConditionalGeneration,
               "gqa4-v2k": Qwen3_5ForCausalLM, "tied": Qwen3_5ForCausalLM}
    for name, cls in classes.items():
        d = os.path.join(out, name)
        compare_goldens(from_pretrained(cls, d, torch.float32, name, failures), d, name, failures)

    # tied: no lm_head in the file; nested: 2 shards + index covering exactly the shard contents
    if "lm_head.weight" in read_raw_safetensors(os.path.join(out, "tied", "model.safetensors")):
        failures.append("tied: lm_head.weight present")  # and the reload above used the embedding
    d = os.path.join(out, "nested-vision-mtp")
    index = jload(os.path.join(d, "model.safetensors.index.json"))
    shard_files = sorted(set(index["weight_map"].values()))
    names, total = {}, 0
    for fn in shard_files:
        for k, (dt, a) in read_raw_safetensors(os.path.join(d, fn)).items():
            names[k] = fn
            total += a.size * (2 if dt == "BF16" else 4)
    if len(shard_files) != 2 or names != index["weight_map"] or total != index["metadata"]["total_size"]:
        failures.append("nested-vision-mtp: index.json does not match the shards")
    for must in ("mtp.fc.weight", "mtp.layers.0.self_attn.q_proj.weight", "model.visual.blocks.0.attn.qkv.weight",
                 "model.language_model.layers.0.linear_attn.in_proj_qkv.weight", "lm_head.weight"):
        if must not in names:
            failures.append(f"nested-vision-mtp: missing {must}")

    # MLX: layout checks, dequantize from the FILE, rebuild fp32 HF model, reproduce goldens
    d = os.path.join(out, "gqa4-v2k-mlx4")
    mlx = read_raw_safetensors(os.path.join(d, "model.safetensors"))
    if jload(os.path.join(d, "config.json")).get("quantization") != {"group_size": GROUP, "bits": BITS, "mode": "affine"}:
        failures.append("mlx4: config quantization block wrong")
    c_model = from_pretrained(Qwen3_5ForCausalLM, os.path.join(out, "gqa4-v2k"), torch.float32, "gqa4-v2k", failures)
    ref_sd, worst_q = {}, 0.0
    for k, v in c_model.state_dict().items():
        mk = mlx_name(k)
        if mk.endswith(".weight") and mk[:-7] + ".scales" in mlx:
            (wd, w), (sdt, s), (bdt, b) = mlx[mk], mlx[mk[:-7] + ".scales"], mlx[mk[:-7] + ".biases"]
            o, i = v.shape
            if (wd, sdt, bdt) != ("U32", "BF16", "BF16") or w.shape != (o, i // 8) \
                    or s.shape != (o, i // GROUP) or b.shape != (o, i // GROUP):
                failures.append(f"mlx4: bad quantized layout for {mk}")
                continue
            ref_sd[k] = mlx_dequantize(w, s, b)
            err = (ref_sd[k] - v.to(torch.bfloat16).float()).abs()
            # MLX's edge-exact scale can clip the far end of a group by up to one step
            bound = torch.from_numpy(1.1 * np.abs(s) + 2.0 ** -8 * np.abs(b) + 1e-6).repeat_interleave(GROUP, 1)
            if bool((err > bound).any()):
                failures.append(f"mlx4: dequant error of {mk} exceeds the group step")
            worst_q = max(worst_q, float(err.max()))
        elif mk in mlx:
            dt, a = mlx[mk]
            t = torch.from_numpy(a.astype(np.float32))
            if k.endswith("A_log"):
                ok = dt == "F32"
            elif k.endswith("conv1d.weight"):
                ok, t = dt == "BF16" and a.shape == (v.shape[0], v.shape[2], 1), t.permute(0, 2, 1)
            elif k.endswith(ZC_NORM_SUFFIXES) or k == "model.norm.weight":
                ok, t = dt == "BF16" and abs(float(t.mean()) - 1.0) < 0.1, t - 1.0
            else:
                ok = dt == "BF16"
            if not ok:
                failures.append(f"mlx4: unexpected dtype/shape/value for {mk}")
            ref_sd[k] = t.reshape(v.shape)
        else:
            failures.append(f"mlx4: missing {mk}")
    known = {mlx_name(k)[:-7] + x for k in c_model.state_dict() for x in (".weight", ".scales", ".biases")}
    if set(mlx) - known - {mlx_name(k) for k in c_model.state_dict()}:
        failures.append("mlx4: unexpected tensors in the file")
    print(f"  mlx4: max |dequant - bf16(w)| = {worst_q:.3g}")
    q_model = copy.deepcopy(c_model)
    q_model.load_state_dict(ref_sd, strict=True)
    compare_goldens(q_model.eval(), d, "gqa4-v2k-mlx4", failures)

    # bundled bf16: loads as bf16, finite, close to the fp32 model
    bcfg = jload(os.path.join(bundled, "config.json"))
    if bcfg.get("dtype") != "bfloat16":
        failures.append(f"bundled: config dtype {bcfg.get('dtype')!r}")
    m16 = from_pretrained(Qwen3_5ForCausalLM, bundled, torch.bfloat16, "bundled", failures)
    if next(m16.parameters()).dtype != torch.bfloat16:
        failures.append("bundled: parameters are not bfloat16")
    gold_c = jload(os.path.join(out, "gqa4-v2k", "goldens.json"))
    for i, p in enumerate(gold_c["prompts"][:3]):
        last = all_logits(m16, p["ids"])[-1]
        ref = load_f32(os.path.join(out, "gqa4-v2k", p["logits"]))
        if not bool(torch.isfinite(last).all()):
            failures.append(f"bundled: non-finite logits on prompt {i}")
        print(f"  bundled bf16 prompt {i}: max |dlogit| vs fp32 = {float((last - ref).abs().max()):.3g}, "
              f"argmax {int(last.argmax())} vs {p['argmax']}")

    print("\nSELFCHECK " + ("PASSED" if not failures else "FAILED:\n  " + "\n  ".join(failures)))
    return not failures

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures/models")
    ap.add_argument("--bundled", default="models/qwen35-tiny")
    ap.add_argument("--selfcheck", action="store_true", help="run python-only checks after generating")
    ap.add_argument("--check-only", action="store_true", help="only check an existing --out/--bundled")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    if not args.check_only:
        generate_all(args.out, args.bundled)
    if args.selfcheck or args.check_only:
        sys.exit(0 if selfcheck(args.out, args.bundled) else 1)

if __name__ == "__main__":
    main()
