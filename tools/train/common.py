"""Shared pieces of the tools/train pipeline: the model shapes, logging, a safetensors reader and
writer (numpy/torch only, so the same code runs here and on the GPU machine), MLX affine
dequantization (value = scale * code + bias, as MLX and quill compute it), checkpoint packing for the
trip back from the GPU machine, and the hook that taps decoder-layer outputs for the drafter.

Nothing here imports transformers: scripts that need it call `import_transformers()`, which first
blocks the optional fast-kernel packages (fla, causal_conv1d) so that the pure-torch GDN runs.
"""
import hashlib
import json
import os
import struct
import sys
import time
import zlib

import numpy as np

# ----------------------------------------------------------------------------- names and shapes
TARGET_NAME = "qwen35-pycoder"          # models/<TARGET_NAME>/: the 4-bit target quill serves by default
DRAFTER_NAME = "qwen35-pycoder-dflash"  # models/<DRAFTER_NAME>/: its 4-bit DFlash drafter
# QUILL_TRAIN_SMALL=1: toy sizes for tests/smoke_local.sh (the bundled tiny tokenizer, 1024 ids)
SMALL = os.environ.get("QUILL_TRAIN_SMALL") == "1"
VOCAB = 1024 if SMALL else 16384
N_LAYERS = 12
# Qwen's added tokens in Qwen3.5's order (tokenizer_config.json of Qwen3.5); they take the last
# 33 ids, after the BPE tokens, as in Qwen's own files. `special` as Qwen marks them.
QWEN_ADDED = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
    ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
    ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False), ("<|repo_name|>", False), ("<|file_sep|>", False),
    ("<tool_response>", False), ("</tool_response>", False), ("<think>", False), ("</think>", False),
    ("<|audio_start|>", True), ("<|audio_end|>", True), ("<tts_pad>", True), ("<tts_text_bos>", True),
    ("<tts_text_eod>", True), ("<tts_text_bos_single>", True), ("<|audio_pad|>", True),
]
MASK_TOKEN = "<|audio_start|>"  # the drafter's mask token, as z-lab's Qwen3.5 drafters use id 248070
# The prompt the Qwen3.5 (0.8B) chat template renders for one user message, thinking off (its
# default); chat samples in the corpus use exactly this frame.
CHAT_PROMPT = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


def target_text_config(vocab=VOCAB, eos=None, pad=None, small=SMALL):
    """Qwen3_5TextConfig keyword arguments (the spelling make_model_goldens.py uses with 5.17).

    12 layers (3 GDN : 1 attention), hidden 384, GQA 6:2 heads of 64 with partial RoPE (16 of 64
    dims), GDN 4 key heads / 8 value heads of 64 (value heads = 2 x key heads, like the 9B), tied
    embeddings. small=True: a 4-layer toy of the same layout for local smoke tests."""
    layers, hidden, inter = (4, 128, 256) if small else (N_LAYERS, 384, 960)
    heads, kv, hd = (4, 2, 32) if small else (6, 2, 64)
    lk, lv, ld = (2, 4, 32) if small else (4, 8, 64)
    rot_pairs = int(hd * 0.25) // 2
    section = [rot_pairs - 2 * (rot_pairs // 3), rot_pairs // 3, rot_pairs // 3]
    return dict(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv, head_dim=hd,
        linear_num_key_heads=lk, linear_num_value_heads=lv, linear_key_head_dim=ld,
        linear_value_head_dim=ld, linear_conv_kernel_dim=4, hidden_act="silu", rms_norm_eps=1e-6,
        max_position_embeddings=32768, attention_bias=False, tie_word_embeddings=True,
        full_attention_interval=4,
        layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)],
        rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25,
                             mrope_section=section, mrope_interleaved=True),
        mamba_ssm_dtype="float32", bos_token_id=None, eos_token_id=eos, pad_token_id=pad)


def mask_token_id(ids):
    """The drafter's mask id: MASK_TOKEN, or (toy tokenizers without it) the last added token."""
    return ids[MASK_TOKEN] if MASK_TOKEN in ids else max(ids.values())


def drafter_config(tcfg, mask_id, layers=2, block=16):
    """config.json of the DFlash drafter in z-lab's layout (reference/dflash.md 1.1-1.2)."""
    L = tcfg["num_hidden_layers"]
    # z-lab's build_target_layer_ids for 5 taps (1..L-3; 1,3,5,7,9 for 12 layers); toy models: 2
    taps = [round(1 + i * (L - 4) / 4) for i in range(5)] if L >= 8 else [1, L - 2]
    hd = tcfg["head_dim"]
    return {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3",
        "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
        "hidden_size": tcfg["hidden_size"], "intermediate_size": tcfg["intermediate_size"],
        "num_hidden_layers": layers, "num_attention_heads": tcfg["hidden_size"] // hd,
        "num_key_value_heads": 2, "head_dim": hd, "hidden_act": "silu", "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0, "rope_scaling": None, "max_position_embeddings": 32768,
        "vocab_size": tcfg["vocab_size"], "tie_word_embeddings": False, "attention_bias": False,
        "attention_dropout": 0.0, "layer_types": ["full_attention"] * layers,
        "use_sliding_window": False, "sliding_window": None, "num_target_layers": L,
        "block_size": block, "dtype": "bfloat16",
        "dflash_config": {"target_layer_ids": taps, "mask_token_id": mask_id, "block_size": block},
    }


# ----------------------------------------------------------------------------- logging, files
_T0 = float(os.environ.get("PIPELINE_T0", time.time()))


def log(msg):
    print(f"[{time.time() - _T0:7.1f}s] {msg}", flush=True)


def die(msg):
    log(f"FATAL: {msg}")
    sys.exit(1)


def jload(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def jdump(obj, path, **kw):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(obj, ensure_ascii=False, **kw) + "\n")


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def import_transformers():
    """Blocks fla / causal_conv1d (GPU-only kernels transformers would otherwise pick up), then
    imports transformers. Returns the module."""
    for blocked in ("fla", "causal_conv1d"):
        sys.modules.setdefault(blocked, None)
    import transformers
    return transformers


# ----------------------------------------------------------------------------- safetensors
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from safetensors_np import read_safetensors  # noqa: E402  (tools/safetensors_np.py)


def read_dir_safetensors(d):
    out = {}
    for fn in sorted(os.listdir(d)):
        if fn.endswith(".safetensors"):
            out.update(read_safetensors(os.path.join(d, fn)))
    if not out:
        raise FileNotFoundError(f"{d}: no .safetensors file")
    return out


def to_bf16_bits(a):
    """float32 numpy -> uint16 bfloat16 bits, round to nearest even (as torch and quill do)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = np.isnan(a)
    return np.where(nan, (u >> 16) | 0x40, rounded).astype(np.uint16)


def write_safetensors(path, tensors, metadata=None, dtype="F32"):
    """tensors: name -> numpy array (float arrays are written as `dtype`: F32 or BF16; uint32 as U32).
    Header sorted by name and padded to 8 bytes, like the Python safetensors writer."""
    header, blobs, off = {"__metadata__": metadata or {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        a = np.asarray(tensors[name])
        if a.dtype == np.uint32:
            dt, raw = "U32", a.astype("<u4").tobytes()
        elif dtype == "BF16":
            dt, raw = "BF16", to_bf16_bits(a.astype(np.float32)).astype("<u2").tobytes()
        else:
            dt, raw = "F32", a.astype("<f4").tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb)
        for b in blobs:
            f.write(b)


# ----------------------------------------------------------------------------- MLX affine
def mlx_dequantize(words, scales, biases, bits=4):
    """[out, in*bits/32] uint32 codes (LSB first) + f32 scales/biases [out, in/group] -> f32 [out, in].
    value = scale * code + bias in float32 (scale*code is exact: an 8-bit mantissa times <= 8 bits)."""
    words = np.asarray(words, dtype=np.uint32)
    per = 32 // bits
    shifts = (np.arange(per, dtype=np.uint32) * bits)
    codes = ((words[..., None] >> shifts) & ((1 << bits) - 1)).reshape(words.shape[0], -1)
    group = codes.shape[1] // scales.shape[1]
    s = np.repeat(np.asarray(scales, np.float32), group, axis=1)
    b = np.repeat(np.asarray(biases, np.float32), group, axis=1)
    return (s * codes.astype(np.float32) + b).astype(np.float32)


ZC_NORMS = ("input_layernorm.weight", "post_attention_layernorm.weight", "q_norm.weight", "k_norm.weight")


def dequantized_state(tensors, kind):
    """MLX-layout tensors (read_safetensors output) -> float32 numpy state dict in HF names.
    kind "target": language_model.model.* -> model.*, norms stored as 1+w -> w, conv1d [C,K,1] ->
    [C,1,K]. kind "drafter": names kept, norms raw (plain RMSNorm)."""
    out = {}
    for name, (dt, a) in tensors.items():
        if name.endswith((".scales", ".biases")):
            continue
        base = name[:-len(".weight")] if name.endswith(".weight") else None
        if dt == "U32" and base is not None and base + ".scales" in tensors:
            v = mlx_dequantize(a, tensors[base + ".scales"][1], tensors[base + ".biases"][1])
        else:
            v = a.astype(np.float32)
        if kind == "target":
            if name.startswith("language_model.model."):
                name = "model." + name[len("language_model.model."):]
            elif name.startswith("language_model.lm_head."):
                name = "lm_head." + name[len("language_model.lm_head."):]
            if name.endswith("conv1d.weight") and v.ndim == 3 and v.shape[2] == 1:
                v = np.ascontiguousarray(v.transpose(0, 2, 1))
            if (name.endswith(ZC_NORMS) or name == "model.norm.weight") and "linear_attn.norm" not in name:
                v = v - np.float32(1.0)  # exact: bf16(1+w) - 1 is representable in f32
        out[name] = v
    return out


# ----------------------------------------------------------------------------- transport packing
def pack_bf16_file(src, dst, level=6):
    """A bf16 safetensors file -> a smaller file for the trip back: header kept, then the data
    bytes split into low and high bytes of each 16-bit word (the high bytes, sign and exponent,
    compress well), zlib-compressed. unpack_bf16_file restores the exact bytes."""
    with open(src, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    head, body = data[:8 + n], np.frombuffer(data, np.uint8, offset=8 + n)
    odd = len(body) % 2
    pairs = body[:len(body) - odd].reshape(-1, 2)
    lo = zlib.compress(pairs[:, 0].tobytes(), 1)
    hi = zlib.compress(pairs[:, 1].tobytes() + body[len(body) - odd:].tobytes(), level)
    with open(dst, "wb") as f:
        f.write(b"QPK1" + struct.pack("<QQQQ", len(head), len(lo), len(hi), odd) + head + lo + hi)


def unpack_bf16_file(src, dst):
    with open(src, "rb") as f:
        data = f.read()
    if data[:4] != b"QPK1":
        raise ValueError(f"{src}: not a packed checkpoint")
    nh, nlo, nhi, odd = struct.unpack("<QQQQ", data[4:36])
    p = 36
    head = data[p:p + nh]
    lo = np.frombuffer(zlib.decompress(data[p + nh:p + nh + nlo]), np.uint8)
    hi_all = zlib.decompress(data[p + nh + nlo:p + nh + nlo + nhi])
    hi = np.frombuffer(hi_all[:len(hi_all) - odd], np.uint8)
    body = np.empty((len(lo), 2), np.uint8)
    body[:, 0], body[:, 1] = lo, hi
    with open(dst, "wb") as f:
        f.write(head + body.tobytes() + hi_all[len(hi_all) - odd:])


# ----------------------------------------------------------------------------- taps
class Taps:
    """Forward hooks on decoder layers `ids` (0-based) of a causal LM: after a forward, .get() is
    the concatenation of those layers' outputs (post-MLP residual, before the final norm; what
    z-lab's extract_context_feature takes as hidden_states[id + 1]) along the feature dim."""

    def __init__(self, model, ids):
        self.ids, self.out, self.handles = list(ids), {}, []
        layers = model.model.layers
        for i in self.ids:
            self.handles.append(layers[i].register_forward_hook(self._hook(i)))

    def _hook(self, i):
        def fn(_module, _inp, output):
            self.out[i] = output[0] if isinstance(output, (tuple, list)) else output
        return fn

    def get(self):
        import torch
        missing = [i for i in self.ids if i not in self.out]
        if missing:
            raise RuntimeError(f"taps: layers {missing} produced no output")
        feats = torch.cat([self.out[i] for i in self.ids], dim=-1)
        self.out = {}
        return feats

    def remove(self):
        for h in self.handles:
            h.remove()
