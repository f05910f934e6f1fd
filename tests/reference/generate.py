#!/usr/bin/python3
"""Writes the PyTorch reference files that tests/model/test_pytorch_reference.cpp
compares hone's Transformer against.

Run with Debian's python3-torch (1.13):  /usr/bin/python3 tests/reference/generate.py

For each family (a Llama-3-style model with GQA and Llama 3.1 RoPE scaling, GPT-2,
MPT) it builds a tiny model from scratch in plain torch -- the published
architectures, written independently of hone but with hone's parameter names and
layouts -- fills it with fixed random weights, and writes {family}.safetensors:

  param.<name>   every parameter (F32), in hone's layout
  tokens         I32 [B, T] input ids
  targets        I32 [B, T] next-token ids, -100 where masked
  logits         F32 [B*T, V]
  loss           F32 [1]      mean cross-entropy over the unmasked targets
  grad.<name>    F32          d loss / d parameter
  adamw_losses   F32 [steps]  loss before each of `steps` AdamW steps on the batch
  __metadata__   "config": the ModelConfig fields as JSON, "adamw": the optimizer

Everything is computed in float32, the dtype of hone's fp32 path.
"""
import json
import math
import pathlib
import struct

import torch
import torch.nn.functional as F

BATCH, SEQ = 2, 16
STEPS = 5
ADAMW = {"lr": 1e-2, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1, "max_grad_norm": 1.0,
         "steps": STEPS}

COMMON = {"vocab_size": 64, "dim": 32, "n_layers": 2, "n_heads": 4, "norm_eps": 1e-5, "rope_theta": 10000.0,
          "rope_scaling": {"factor": 1.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position": 8192},
          "alibi_bias_max": 8.0}

CONFIGS = {
    # head_dim 8: wavelengths 2*pi*10000^(i/4) = 6.3, 63, 628, 6283 against the
    # bounds 64/4 = 16 and 64/1 = 64 -- one frequency kept, one blended, two divided.
    "llama": {**COMMON, "name": "llama3_reference", "family": "llama", "n_kv_heads": 2, "ffn_dim": 64,
              "max_seq_len": 64, "norm": "rmsnorm", "norm_bias": False, "position": "rope",
              "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position": 64},
              "mlp": "swiglu", "linear_bias": False, "tie_embeddings": False},
    "gpt2": {**COMMON, "name": "gpt2_reference", "family": "gpt2", "n_kv_heads": 4, "ffn_dim": 128,
             "max_seq_len": 32, "norm": "layernorm", "norm_bias": True, "position": "learned",
             "mlp": "gelu_tanh", "linear_bias": True, "tie_embeddings": True},
    "mpt": {**COMMON, "name": "mpt_reference", "family": "mpt", "n_kv_heads": 4, "ffn_dim": 128,
            "max_seq_len": 64, "norm": "layernorm", "norm_bias": False, "position": "alibi",
            "mlp": "gelu", "linear_bias": False, "tie_embeddings": True},
}


def head_dim(c):
    return c["dim"] // c["n_heads"]


# ---------------------------------------------------------------------------
# Parameters: hone's names, shapes, and AdamW decay flags, in declaration order.

def parameter_shapes(c):
    """[(name, shape, decay)] as hone's Transformer::declare_parameters lays them out."""
    D, F_, hd = c["dim"], c["ffn_dim"], head_dim(c)
    H, KV = c["n_heads"], c["n_kv_heads"]
    up = 2 * F_ if c["mlp"] == "swiglu" else F_
    shapes = [("tok_embeddings.weight", [c["vocab_size"], D], True)]
    if c["position"] == "learned":
        shapes.append(("pos_embeddings.weight", [c["max_seq_len"], D], True))

    def norm(prefix):
        shapes.append((prefix + ".weight", [D], False))
        if c["norm_bias"]:
            shapes.append((prefix + ".bias", [D], False))

    def linear(prefix, out, inp):
        shapes.append((prefix + ".weight", [out, inp], True))
        if c["linear_bias"]:
            shapes.append((prefix + ".bias", [out], False))

    for i in range(c["n_layers"]):
        p = f"layers.{i}"
        norm(p + ".attn_norm")
        linear(p + ".attn.qkv", (H + 2 * KV) * hd, D)
        linear(p + ".attn.out", D, H * hd)
        norm(p + ".mlp_norm")
        linear(p + ".mlp.up", up, D)
        linear(p + ".mlp.down", D, F_)
    norm("norm")
    if not c["tie_embeddings"]:
        shapes.append(("lm_head.weight", [c["vocab_size"], D], True))
    return shapes


def init_parameters(c, seed):
    """Weights large enough that every nonlinearity works outside its linear range:
    with dim 32, std 0.2 matrices give O(1) activations and attention scores."""
    torch.manual_seed(seed)
    params = {}
    for name, shape, _ in parameter_shapes(c):
        if name.endswith(".bias"):
            value = 0.1 * torch.randn(shape)
        elif "norm" in name:
            value = 1.0 + 0.1 * torch.randn(shape)
        else:
            value = 0.2 * torch.randn(shape)
        params[name] = value
    return params


# ---------------------------------------------------------------------------
# Positions.

def rope_inverse_frequencies(c):
    """theta^(-2i/hd) with Llama 3.1's scaling (Meta's apply_scaling / HF's
    _compute_llama3_parameters), in float64."""
    hd = head_dim(c)
    inv_freq = [c["rope_theta"] ** (-2.0 * i / hd) for i in range(hd // 2)]
    s = c["rope_scaling"]
    if s["factor"] == 1.0:
        return inv_freq
    old_context = float(s["original_max_position"])
    low_freq_wavelen = old_context / s["low_freq_factor"]
    high_freq_wavelen = old_context / s["high_freq_factor"]
    scaled, regimes = [], set()
    for f in inv_freq:
        wavelen = 2 * math.pi / f
        if wavelen < high_freq_wavelen:
            scaled.append(f)
            regimes.add("kept")
        elif wavelen > low_freq_wavelen:
            scaled.append(f / s["factor"])
            regimes.add("divided")
        else:
            smooth = (old_context / wavelen - s["low_freq_factor"]) / (s["high_freq_factor"] - s["low_freq_factor"])
            scaled.append((1 - smooth) * f / s["factor"] + smooth * f)
            regimes.add("blended")
    assert regimes == {"kept", "divided", "blended"}, f"the reference should exercise every regime, got {regimes}"
    return scaled


def rope_tables(c, seq):
    """cos, sin [seq, hd/2]: angles and their cos/sin in float64, then rounded to float32."""
    inv_freq = torch.tensor(rope_inverse_frequencies(c), dtype=torch.float64)
    angles = torch.arange(seq, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return angles.cos().float(), angles.sin().float()


def apply_rope(x, cos, sin):
    """Hugging Face's rotate-half RoPE on x [B, heads, T, hd]: dimension i pairs with i + hd/2."""
    cos = torch.cat([cos, cos], dim=-1)  # [T, hd]
    sin = torch.cat([sin, sin], dim=-1)
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def alibi_slopes(n_heads, alibi_bias_max):
    """LLM Foundry's gen_slopes: 1 / 2^(k·max/n) for the next power of two n, then
    interleaved when the head count is not a power of two."""
    padded = 2 ** math.ceil(math.log2(n_heads))
    m = torch.arange(1, padded + 1, dtype=torch.float32) * (alibi_bias_max / padded)
    slopes = 1.0 / torch.pow(2, m)
    if padded != n_heads:
        slopes = torch.cat([slopes[1::2], slopes[::2]])[:n_heads]
    return slopes


# ---------------------------------------------------------------------------
# The model.

def forward(c, P, tokens, project=None):
    """Logits [B*T, V] for tokens [B, T]; project(x, prefix, base) may replace the
    layers' linear projections (base: the plain one), as adapters do."""
    B, T = tokens.shape
    D, H, KV, hd = c["dim"], c["n_heads"], c["n_kv_heads"], head_dim(c)

    def norm(x, prefix):
        w = P[prefix + ".weight"]
        if c["norm"] == "rmsnorm":
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + c["norm_eps"]) * w
        return F.layer_norm(x, (D,), w, P.get(prefix + ".bias"), c["norm_eps"])

    def plain(x, prefix):
        return F.linear(x, P[prefix + ".weight"], P.get(prefix + ".bias"))

    def linear(x, prefix):
        return project(x, prefix, plain) if project else plain(x, prefix)

    x = F.embedding(tokens, P["tok_embeddings.weight"])
    if c["position"] == "learned":
        x = x + P["pos_embeddings.weight"][:T]
    if c["position"] == "rope":
        cos, sin = rope_tables(c, T)
    positions = torch.arange(T)
    causal = positions[None, :] > positions[:, None]  # [query, key]: key after query
    if c["position"] == "alibi":
        distance = (positions[None, :] - positions[:, None]).float()  # key - query
        alibi = alibi_slopes(H, c["alibi_bias_max"])[:, None, None] * distance  # [H, T, T]

    for i in range(c["n_layers"]):
        p = f"layers.{i}"
        qkv = linear(norm(x, p + ".attn_norm"), p + ".attn.qkv")
        q, k, v = qkv.split([H * hd, KV * hd, KV * hd], dim=-1)
        q = q.view(B, T, H, hd).transpose(1, 2)
        k = k.view(B, T, KV, hd).transpose(1, 2)
        v = v.view(B, T, KV, hd).transpose(1, 2)
        if c["position"] == "rope":
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        # Query head h reads key/value head h // (H / KV) (HF's repeat_kv).
        k = k.repeat_interleave(H // KV, dim=1)
        v = v.repeat_interleave(H // KV, dim=1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(hd)
        if c["position"] == "alibi":
            scores = scores + alibi
        scores = scores.masked_fill(causal, float("-inf"))
        attn = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, T, H * hd)
        x = x + linear(attn, p + ".attn.out")

        up = linear(norm(x, p + ".mlp_norm"), p + ".mlp.up")
        if c["mlp"] == "swiglu":
            gate, up = up.chunk(2, dim=-1)
            act = F.silu(gate) * up
        else:
            act = F.gelu(up, approximate="tanh" if c["mlp"] == "gelu_tanh" else "none")
        x = x + linear(act, p + ".mlp.down")

    x = norm(x, "norm")
    head = P["tok_embeddings.weight"] if c["tie_embeddings"] else P["lm_head.weight"]
    return F.linear(x, head).view(B * T, -1)


def loss_of(logits, targets):
    return F.cross_entropy(logits, targets.reshape(-1).long(), ignore_index=-100)


def batch(c, seed):
    """Next-token targets of a random sequence, with a few positions masked."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, c["vocab_size"], (BATCH, SEQ + 1), generator=g)
    tokens, targets = ids[:, :-1].clone(), ids[:, 1:].clone()
    targets[0, 3] = targets[0, 9] = targets[1, 0] = targets[1, SEQ - 1] = -100
    return tokens.int(), targets.int()


def adamw_losses(c, initial, tokens, targets):
    """torch.optim.AdamW with hone's grouping: decay on matrices and embeddings only."""
    params = {name: value.clone().requires_grad_() for name, value in initial.items()}
    decayed = {name for name, _, decay in parameter_shapes(c) if decay}
    decay = [p for name, p in params.items() if name in decayed]
    no_decay = [p for name, p in params.items() if name not in decayed]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": ADAMW["weight_decay"]},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=ADAMW["lr"], betas=(ADAMW["beta1"], ADAMW["beta2"]), eps=ADAMW["eps"])
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = loss_of(forward(c, params, tokens), targets)
        losses.append(loss.item())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), ADAMW["max_grad_norm"])
        optimizer.step()
    return torch.tensor(losses, dtype=torch.float32)


# ---------------------------------------------------------------------------
# safetensors, by hand.

# torch dtype -> (safetensors name, little-endian numpy dtype)
DTYPES = {torch.float32: ("F32", "<f4"), torch.int32: ("I32", "<i4")}


def write_safetensors(path, tensors, metadata):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        dtype, layout = DTYPES[t.dtype]
        data = t.detach().contiguous().numpy().astype(layout).tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = metadata
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for blob in blobs:
            f.write(blob)


def generate(family, seed):
    c = CONFIGS[family]
    initial = init_parameters(c, seed)
    tokens, targets = batch(c, seed + 1)

    params = {name: value.clone().requires_grad_() for name, value in initial.items()}
    logits = forward(c, params, tokens)
    loss = loss_of(logits, targets)
    loss.backward()

    out = {f"param.{name}": value for name, value in initial.items()}
    out["tokens"] = tokens
    out["targets"] = targets
    out["logits"] = logits.detach()
    out["loss"] = loss.detach().reshape(1)
    out.update({f"grad.{name}": p.grad for name, p in params.items()})
    out["adamw_losses"] = adamw_losses(c, initial, tokens, targets)
    metadata = {"config": json.dumps(c), "adamw": json.dumps(ADAMW), "generator": "tests/reference/generate.py",
                "torch": torch.__version__}
    path = pathlib.Path(__file__).resolve().parent / f"{family}.safetensors"
    write_safetensors(path, out, metadata)
    print(f"{path.name}: loss {loss.item():.6f}, adamw losses {[round(x, 6) for x in out['adamw_losses'].tolist()]}, "
          f"{path.stat().st_size} bytes")


if __name__ == "__main__":
    torch.set_num_threads(1)  # the same reduction order on every machine
    for seed, family in enumerate(CONFIGS):
        generate(family, 1000 * (seed + 1))
