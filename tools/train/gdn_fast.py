"""A faster drop-in for transformers' torch_chunk_gated_delta_rule (the chunked Gated DeltaNet rule
used when flash-linear-attention is not installed), written from the math in
reference/qwen35-architecture.md 2.5: per chunk of C tokens, gamma = cumsum(g), D[i,j] =
exp(gamma_i - gamma_j) (j <= i), L = I + strictly_lower((beta*K) K^T * D), U = L^-1 (beta*V),
W = L^-1 (beta*e^gamma*K); then a scan over chunks carrying S.

Older transformers builds the L^-1 solve with a 63-step Python loop of in-place slice updates,
which is slow under autograd; this uses one triangular solve. `install(model, hf_module)` swaps it
in only after checking, on the model itself, that logits agree with transformers' own function
(fp32, no autocast); otherwise it leaves transformers' code in place. Either way training runs the
same math; quill is checked against transformers' function, not this one.
"""
import torch
import torch.nn.functional as F

CALLS = [0]


def _l2norm(x, eps=1e-6):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def chunk_gated_delta_rule(query, key, value, g, beta, chunk_size=64, initial_state=None,
                           output_final_state=False, use_qk_l2norm_in_kernel=False, **_kwargs):
    """Same arguments and results as transformers' torch_chunk_gated_delta_rule:
    q, k [B, T, Hk, dk]; v [B, T, Hv, dv]; g, beta [B, T, Hv] -> (out [B, T, Hv, dv], state or None)."""
    CALLS[0] += 1
    out_dtype = query.dtype
    B, T, hk, dk = key.shape
    hv, dv = value.shape[-2:]
    if hk != hv:  # grouped value heads: K head j serves V heads j*r .. j*r + r - 1
        query = query.repeat_interleave(hv // hk, dim=2)
        key = key.repeat_interleave(hv // hk, dim=2)
    q, k, v, b, gg = (x.transpose(1, 2).float() for x in (query, key, value, beta, g))
    if use_qk_l2norm_in_kernel:
        q, k = _l2norm(q), _l2norm(k)
    q = q * dk ** -0.5
    C = chunk_size
    pad = (C - T % C) % C
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        b, gg = F.pad(b, (0, pad)), F.pad(gg, (0, pad))
    N = (T + pad) // C
    q, k, v = (x.reshape(B, hv, N, C, -1) for x in (q, k, v))
    b, gg = b.reshape(B, hv, N, C), gg.reshape(B, hv, N, C)
    gam = gg.cumsum(-1)
    upper = torch.ones(C, C, dtype=torch.bool, device=q.device).triu(1)
    decay = (gam[..., :, None] - gam[..., None, :]).masked_fill(upper, float("-inf")).exp()
    kb, vb = k * b[..., None], v * b[..., None]
    lower = ((kb @ k.transpose(-1, -2)) * decay).tril(-1)  # strictly lower; the solve takes diag = 1
    u = torch.linalg.solve_triangular(lower, vb, upper=False, unitriangular=True)
    w = torch.linalg.solve_triangular(lower, kb * gam.exp()[..., None], upper=False, unitriangular=True)
    intra = (q @ k.transpose(-1, -2)) * decay
    q_dec = q * gam.exp()[..., None]
    k_dec = k * (gam[..., -1:] - gam).exp()[..., None]
    chunk_dec = gam[..., -1].exp()
    S = torch.zeros(B, hv, dk, dv, device=q.device) if initial_state is None else initial_state.float()
    outs = []
    for n in range(N):
        vn = u[:, :, n] - w[:, :, n] @ S
        outs.append(q_dec[:, :, n] @ S + intra[:, :, n] @ vn)
        S = S * chunk_dec[:, :, n, None, None] + k_dec[:, :, n].transpose(-1, -2) @ vn
    o = torch.stack(outs, 2).reshape(B, hv, N * C, dv)[:, :, :T]
    return o.transpose(1, 2).contiguous().to(out_dtype), (S if output_final_state else None)


def _set(model, hf_module, fn):
    hf_module.torch_chunk_gated_delta_rule = fn
    for m in model.modules():
        if hasattr(m, "chunk_gated_delta_rule"):
            m.chunk_gated_delta_rule = fn


@torch.no_grad()
def install(model, hf_module, vocab, log, device):
    """Checks on `model` (fp32 forward, a random batch) that this rule gives transformers' logits,
    then keeps it installed. Returns True if installed."""
    original = getattr(hf_module, "torch_chunk_gated_delta_rule", None)
    if original is None:
        log("gdn_fast: transformers has no torch_chunk_gated_delta_rule; keeping its code")
        return False
    was_training = model.training
    model.eval()
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False  # compare in true fp32
    ids = torch.randint(0, vocab, (2, 150), generator=torch.Generator().manual_seed(5)).to(device)
    ref = model(input_ids=ids, use_cache=False).logits.float()
    CALLS[0] = 0
    _set(model, hf_module, chunk_gated_delta_rule)
    got = model(input_ids=ids, use_cache=False).logits.float()
    err = float((got - ref).abs().max()) / max(1.0, float(ref.abs().max()))
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
    model.train(was_training)
    if CALLS[0] == 0 or not err < 1e-3:
        _set(model, hf_module, original)
        log(f"gdn_fast: not used (calls {CALLS[0]}, rel. diff {err:.2g}); transformers' rule stays")
        return False
    log(f"gdn_fast: installed (logits agree with transformers' rule to {err:.2g})")
    return True
