#!/usr/bin/python3
"""Writes the model files that tests/io/test_hf.cpp imports, and checks folders
that `hone convert --to hf` wrote.

Run with Debian's python3-torch (1.13), no transformers:
    /usr/bin/python3 tests/reference/generate_hf.py            # (re)write tests/reference/hf/
    /usr/bin/python3 tests/reference/generate_hf.py --check DIR REFERENCE
                                                    # logits of the HF folder DIR vs a reference file

Each fixture is a tiny model with fixed random weights, stored exactly as its
tool stores it:

  hf/<name>/                  a Hugging Face folder: config.json and model.safetensors
                              (or shards and model.safetensors.index.json), the names
                              and layouts of transformers' LlamaForCausalLM,
                              MistralForCausalLM, GPT2LMHeadModel and MptForCausalLM
  hf/<name>.bin               an llm.c GPT-2 checkpoint or a llama2.c checkpoint
  hf/nanogpt_<name>.pt        a nanoGPT training checkpoint (train.py's ckpt.pt)
  hf/meta_<name>/             a Meta Llama folder: params.json and consolidated.00.pth (torch.save)
  hf/<name>.reference.safetensors
                              tokens (I32 [B, T]) and the logits (F32 [B*T, V]) that an
                              implementation from scratch computes from those files

The forward passes below are written from the conventions of each source --
transformers' modeling code for the HF folders (Conv1D [in, out] weights for
GPT-2, rotate-half RoPE with Llama 3.1 scaling, repeat_kv, MPT's ALiBi),
llama2.c's model.py for its files (interleaved RoPE pairs) and nanoGPT's
model.py for its checkpoints (exact GELU, optional biases) -- independently of
hone. Logits are computed in float32 from the weights as stored (bf16 and f16
weights upcast), which is what hone's fp32 path computes after loading them.

--check builds the model that DIR/config.json describes, loads DIR's safetensors
by their Hugging Face names (an index and shards too) and compares its logits on
the reference tokens with the reference logits: a folder hone exported must
compute what the source computed.
"""
import collections
import json
import math
import os
import pathlib
import struct
import sys

import torch
import torch.nn.functional as F

HERE = pathlib.Path(__file__).resolve().parent
OUT = HERE / "hf"
BATCH, SEQ = 2, 12

# torch dtype -> safetensors name; how to get the little-endian bytes.
DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.int32: "I32"}
TORCH_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "I32": torch.int32}
RAW = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.int32: torch.int32}


# ---------------------------------------------------------------------------
# safetensors, by hand (the format: u64 header length, JSON header, data).

def tensor_bytes(t):
    return t.contiguous().view(RAW[t.dtype]).numpy().astype("<" + {4: "i4", 2: "i2"}[t.element_size()]).tobytes()


def write_safetensors(path, tensors, metadata):
    # The safetensors library sorts tensors by name within a dtype; any order is valid.
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        data = tensor_bytes(t)
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
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


def read_safetensors(path):
    data = pathlib.Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        dtype = TORCH_DTYPES[info["dtype"]]
        raw = torch.frombuffer(bytearray(data[8 + n + begin:8 + n + end]), dtype=RAW[dtype])
        tensors[name] = raw.view(dtype).reshape(info["shape"]).clone()
    return tensors, header.get("__metadata__", {})


def write_pytorch(path, tensors):
    """What save_pretrained(safe_serialization=False) writes: torch.save of the state dict. Tensors that
    are one object (tied weights) share one storage in the archive."""
    torch.save(collections.OrderedDict((name, tensors[name]) for name in sorted(tensors)), path)


def write_hf_folder(folder, config, tensors, dtype, shard_bytes=None, extra_files=None, pickle=False):
    """config.json + model.safetensors, or shards and an index as save_pretrained cuts them; with
    pickle, pytorch_model.bin (or pytorch_model-0000K-of-0000N.bin shards and their index)."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    stored = {name: t.to(dtype) for name, t in tensors.items()}
    write, stem, suffix = (write_pytorch, "pytorch_model", "bin") if pickle else (
        lambda path, part: write_safetensors(path, part, {"format": "pt"}), "model", "safetensors")
    config = dict(config, torch_dtype={torch.float32: "float32", torch.bfloat16: "bfloat16",
                                       torch.float16: "float16"}[dtype], transformers_version="4.44.2")
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for name, text in (extra_files or {}).items():
        (folder / name).write_text(text)
    if shard_bytes is None:
        write(folder / f"{stem}.{suffix}", stored)
        return
    shards, size = [[]], 0
    for name in sorted(stored):
        nbytes = stored[name].numel() * stored[name].element_size()
        if shards[-1] and size + nbytes > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    weight_map, total = {}, 0
    for i, names in enumerate(shards):
        file = f"{stem}-{i + 1:05d}-of-{len(shards):05d}.{suffix}"
        write(folder / file, {n: stored[n] for n in names})
        for n in names:
            weight_map[n] = file
            total += stored[n].numel() * stored[n].element_size()
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (folder / f"{stem}.{suffix}.index.json").write_text(json.dumps(index, indent=2) + "\n")


def load_hf_folder(folder):
    folder = pathlib.Path(folder)
    config = json.loads((folder / "config.json").read_text())
    stem, suffix = ("model", "safetensors") if list(folder.glob("model*.safetensors*")) else ("pytorch_model", "bin")
    index = folder / f"{stem}.{suffix}.index.json"
    files = (sorted(set(json.loads(index.read_text())["weight_map"].values()))
             if not (folder / f"{stem}.{suffix}").exists() else [f"{stem}.{suffix}"])
    tensors = {}
    for file in files:
        if suffix == "bin":
            tensors.update(torch.load(folder / file))
            continue
        part, metadata = read_safetensors(folder / file)
        assert metadata.get("format") == "pt", f"{file}: transformers needs metadata format 'pt', got {metadata}"
        tensors.update(part)
    return config, {name: t.float() for name, t in tensors.items()}


# ---------------------------------------------------------------------------
# transformers' models, from config.json and tensors by their HF names.

def causal_attention(q, k, v, scale, bias=None, window=None):
    """q [B, H, T, hd], k/v [B, KV, T, hd]; key/value head h // (H / KV) serves query head h (repeat_kv)."""
    groups = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(groups, dim=1)
    v = v.repeat_interleave(groups, dim=1)
    scores = q @ k.transpose(-1, -2) * scale
    if bias is not None:
        scores = scores + bias
    T = q.shape[2]
    pos = torch.arange(T)
    masked = pos[None, :] > pos[:, None]
    if window is not None:
        masked = masked | (pos[:, None] - pos[None, :] >= window)
    scores = scores.masked_fill(masked, float("-inf"))
    return scores.softmax(dim=-1) @ v


def heads(x, n, hd):
    B, T, _ = x.shape
    return x.view(B, T, n, hd).transpose(1, 2)


def merge(x):
    B, H, T, hd = x.shape
    return x.transpose(1, 2).reshape(B, T, H * hd)


def llama_inv_freq(c, hd):
    """_compute_default_rope_parameters, then _compute_llama3_parameters (float32, as transformers)."""
    base = c.get("rope_theta", 10000.0)
    inv_freq = 1.0 / (base ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    s = c.get("rope_scaling")
    if not s or s.get("rope_type", s.get("type")) != "llama3":
        return inv_freq
    factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old = s["original_max_position_embeddings"]
    low_freq_wavelen, high_freq_wavelen = old / low, old / high
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
    medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(medium, smoothed, inv_freq_llama)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def llama_forward(c, P, tokens):
    D, H = c["hidden_size"], c["num_attention_heads"]
    KV = c.get("num_key_value_heads", H)
    hd = c.get("head_dim") or D // H
    eps = c.get("rms_norm_eps", 1e-6)
    T = tokens.shape[1]
    freqs = torch.arange(T).float()[:, None] * llama_inv_freq(c, hd)[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos(), emb.sin()
    window = c.get("sliding_window") if c["model_type"] == "mistral" else None
    x = P["model.embed_tokens.weight"][tokens]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, P[p + "input_layernorm.weight"], eps)
        q = heads(h @ P[p + "self_attn.q_proj.weight"].T, H, hd)
        k = heads(h @ P[p + "self_attn.k_proj.weight"].T, KV, hd)
        v = heads(h @ P[p + "self_attn.v_proj.weight"].T, KV, hd)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        x = x + merge(causal_attention(q, k, v, 1 / math.sqrt(hd), window=window)) @ P[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, P[p + "post_attention_layernorm.weight"], eps)
        gate, up = h @ P[p + "mlp.gate_proj.weight"].T, h @ P[p + "mlp.up_proj.weight"].T
        x = x + (F.silu(gate) * up) @ P[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, P["model.norm.weight"], eps)
    head = P["model.embed_tokens.weight"] if c.get("tie_word_embeddings", False) else P["lm_head.weight"]
    return x @ head.T


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def gpt2_forward(c, P, tokens):
    # save_pretrained writes "transformer."; GPT2Model checkpoints (the original gpt2) do not.
    pre = "transformer." if "transformer.wte.weight" in P else ""
    D, H, eps = c["n_embd"], c["n_head"], c.get("layer_norm_epsilon", 1e-5)
    hd = D // H
    act = gelu_new if c.get("activation_function", "gelu_new") == "gelu_new" else F.gelu

    def conv1d(x, name):  # transformers' Conv1D: weight [in, out]
        return x @ P[name + ".weight"] + P[name + ".bias"]

    def ln(x, name):
        return F.layer_norm(x, (D,), P[name + ".weight"], P[name + ".bias"], eps)

    T = tokens.shape[1]
    x = P[pre + "wte.weight"][tokens] + P[pre + "wpe.weight"][:T]
    for i in range(c["n_layer"]):
        p = f"{pre}h.{i}."
        q, k, v = conv1d(ln(x, p + "ln_1"), p + "attn.c_attn").split(D, dim=2)
        a = causal_attention(heads(q, H, hd), heads(k, H, hd), heads(v, H, hd), 1 / math.sqrt(hd))
        x = x + conv1d(merge(a), p + "attn.c_proj")
        x = x + conv1d(act(conv1d(ln(x, p + "ln_2"), p + "mlp.c_fc")), p + "mlp.c_proj")
    x = ln(x, pre + "ln_f")
    head = P[pre + "wte.weight"] if c.get("tie_word_embeddings", True) else P["lm_head.weight"]
    return x @ head.T


def mpt_slopes(n_heads, alibi_bias_max):
    """gen_slopes of transformers' (and LLM Foundry's) MPT."""
    padded = 2 ** math.ceil(math.log2(n_heads))
    m = torch.arange(1, padded + 1, dtype=torch.float32).mul(alibi_bias_max / padded)
    slopes = 1.0 / torch.pow(2, m)
    if padded != n_heads:
        slopes = torch.cat([slopes[1::2], slopes[::2]])[:n_heads]
    return slopes


def mpt_forward(c, P, tokens):
    D, H, eps = c["d_model"], c["n_heads"], c.get("layer_norm_epsilon", 1e-5)
    a = c["attn_config"]
    assert a["alibi"] and c.get("no_bias", True)
    hd = D // H
    T = tokens.shape[1]
    # build_alibi_bias over max_seq_len, its last T key positions: slope * (key - (T - 1)).
    distance = torch.arange(1 - c["max_seq_len"], 1, dtype=torch.int32)[-T:].float()
    bias = (mpt_slopes(H, a.get("alibi_bias_max", 8))[:, None, None] * distance[None, None, :])

    def ln(x, name):  # MPT's LayerNorm without bias
        return F.layer_norm(x, (D,), P[name + ".weight"], None, eps)

    x = P["transformer.wte.weight"][tokens]
    for i in range(c["n_layers"]):
        p = f"transformer.blocks.{i}."
        q, k, v = (ln(x, p + "norm_1") @ P[p + "attn.Wqkv.weight"].T).chunk(3, dim=2)
        att = causal_attention(heads(q, H, hd), heads(k, H, hd), heads(v, H, hd), 1 / math.sqrt(hd), bias=bias)
        x = x + merge(att) @ P[p + "attn.out_proj.weight"].T
        up = ln(x, p + "norm_2") @ P[p + "ffn.up_proj.weight"].T
        x = x + F.gelu(up) @ P[p + "ffn.down_proj.weight"].T
    return ln(x, "transformer.norm_f") @ P["transformer.wte.weight"].T


def hf_logits(config, tensors, tokens):
    forward = {"llama": llama_forward, "mistral": llama_forward, "gpt2": gpt2_forward, "mpt": mpt_forward}
    with torch.no_grad():
        logits = forward[config["model_type"]](config, tensors, tokens.long())
    return logits.reshape(-1, logits.shape[-1]).float()


# ---------------------------------------------------------------------------
# llama2.c's model.py: interleaved RoPE pairs (complex multiplication).

def meta_freqs(hd, theta=10000.0, scale_factor=None):
    """Meta's precompute_freqs_cis frequencies, and its apply_scaling where use_scaled_rope (llama-models'
    reference code: old context 8192, low and high frequency factors 1 and 4), one frequency at a time."""
    freqs = 1.0 / (theta ** (torch.arange(0, hd, 2)[: hd // 2].float() / hd))
    if scale_factor is None:
        return freqs
    old, low, high = 8192, 1, 4
    scaled = []
    for f in freqs.tolist():
        wavelen = 2 * math.pi / f
        if wavelen < old / high:
            scaled.append(f)
        elif wavelen > old / low:
            scaled.append(f / scale_factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            scaled.append((1 - smooth) * f / scale_factor + smooth * f)
    return torch.tensor(scaled, dtype=freqs.dtype)


def llama2c_forward(p, W, tokens, freqs=None, eps=1e-5):
    """Meta's Llama model.py (which llama2.c's copies): interleaved RoPE pairs, repeat_kv, SwiGLU."""
    D, H, KV = p["dim"], p["n_heads"], p["n_kv_heads"]
    hd = D // H
    T = tokens.shape[1]
    if freqs is None:
        freqs = meta_freqs(hd)
    angles = torch.outer(torch.arange(T).float(), freqs)
    cos, sin = angles.cos(), angles.sin()

    def rope(x):  # x [B, T, heads, hd]: pairs (2i, 2i+1) rotate by angle i
        xr, xi = x.reshape(*x.shape[:-1], -1, 2).unbind(-1)
        c, s = cos[None, :, None, :], sin[None, :, None, :]
        return torch.stack([xr * c - xi * s, xr * s + xi * c], dim=-1).flatten(3)

    def norm(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    B = tokens.shape[0]
    x = W["tok_embeddings"][tokens.long()]
    for i in range(p["n_layers"]):
        h = norm(x, W["attention_norm"][i])
        q = rope((h @ W["wq"][i].T).view(B, T, H, hd)).transpose(1, 2)
        k = rope((h @ W["wk"][i].T).view(B, T, KV, hd)).transpose(1, 2)
        v = (h @ W["wv"][i].T).view(B, T, KV, hd).transpose(1, 2)
        x = x + merge(causal_attention(q, k, v, 1 / math.sqrt(hd))) @ W["wo"][i].T
        h = norm(x, W["ffn_norm"][i])
        x = x + (F.silu(h @ W["w1"][i].T) * (h @ W["w3"][i].T)) @ W["w2"][i].T
    x = norm(x, W["norm"])
    return (x @ W["output"].T).reshape(B * T, -1)


# ---------------------------------------------------------------------------
# Fixtures.

def randn(g, *shape, scale=0.2):
    return torch.randn(*shape, generator=g) * scale


def norm_weight(g, *shape):
    return 1.0 + 0.1 * torch.randn(*shape, generator=g)


def llama_weights(g, c):
    D, H, F_ = c["hidden_size"], c["num_attention_heads"], c["intermediate_size"]
    KV, V = c.get("num_key_value_heads", H), c["vocab_size"]
    hd = D // H
    P = {"model.embed_tokens.weight": randn(g, V, D), "model.norm.weight": norm_weight(g, D)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        P[p + "input_layernorm.weight"] = norm_weight(g, D)
        P[p + "post_attention_layernorm.weight"] = norm_weight(g, D)
        P[p + "self_attn.q_proj.weight"] = randn(g, H * hd, D)
        P[p + "self_attn.k_proj.weight"] = randn(g, KV * hd, D)
        P[p + "self_attn.v_proj.weight"] = randn(g, KV * hd, D)
        P[p + "self_attn.o_proj.weight"] = randn(g, D, H * hd)
        P[p + "mlp.gate_proj.weight"] = randn(g, F_, D)
        P[p + "mlp.up_proj.weight"] = randn(g, F_, D)
        P[p + "mlp.down_proj.weight"] = randn(g, D, F_)
    if not c.get("tie_word_embeddings", False):
        P["lm_head.weight"] = randn(g, V, D)
    return P


def gpt2_weights(g, c, prefix):
    D, V, T, F_ = c["n_embd"], c["vocab_size"], c["n_positions"], c.get("n_inner") or 4 * c["n_embd"]
    P = {prefix + "wte.weight": randn(g, V, D), prefix + "wpe.weight": randn(g, T, D, scale=0.1),
         prefix + "ln_f.weight": norm_weight(g, D), prefix + "ln_f.bias": randn(g, D, scale=0.1)}
    for i in range(c["n_layer"]):
        p = f"{prefix}h.{i}."
        for ln in ("ln_1", "ln_2"):
            P[p + ln + ".weight"], P[p + ln + ".bias"] = norm_weight(g, D), randn(g, D, scale=0.1)
        for name, (n_in, n_out) in {"attn.c_attn": (D, 3 * D), "attn.c_proj": (D, D), "mlp.c_fc": (D, F_),
                                    "mlp.c_proj": (F_, D)}.items():
            P[p + name + ".weight"] = randn(g, n_in, n_out)  # Conv1D: [in, out]
            P[p + name + ".bias"] = randn(g, n_out, scale=0.1)
    return P


def mpt_weights(g, c):
    D, V = c["d_model"], c["vocab_size"]
    F_ = int(D * c["expansion_ratio"])
    P = {"transformer.wte.weight": randn(g, V, D), "transformer.norm_f.weight": norm_weight(g, D)}
    for i in range(c["n_layers"]):
        p = f"transformer.blocks.{i}."
        P[p + "norm_1.weight"], P[p + "norm_2.weight"] = norm_weight(g, D), norm_weight(g, D)
        P[p + "attn.Wqkv.weight"] = randn(g, 3 * D, D)
        P[p + "attn.out_proj.weight"] = randn(g, D, D)
        P[p + "ffn.up_proj.weight"] = randn(g, F_, D)
        P[p + "ffn.down_proj.weight"] = randn(g, D, F_)
    return P


def tokens_for(g, vocab):
    return torch.randint(0, vocab, (BATCH, SEQ), generator=g, dtype=torch.int32)


def write_reference(name, tokens, logits, source, kind):
    write_safetensors(OUT / f"{name}.reference.safetensors", {"tokens": tokens, "logits": logits.contiguous()},
                      {"source": source, "format": kind, "generator": "tests/reference/generate_hf.py",
                       "torch": torch.__version__})


def hf_fixture(name, seed, config, make_weights, dtype, **folder_args):
    g = torch.Generator().manual_seed(seed)
    weights = make_weights(g, config)
    folder = OUT / name
    write_hf_folder(folder, config, weights, dtype, **folder_args)
    # The reference reads the folder back, as a user's script would: stored weights, rounded.
    stored_config, stored = load_hf_folder(folder)
    tokens = tokens_for(g, config["vocab_size"])
    write_reference(name, tokens, hf_logits(stored_config, stored, tokens), name, "hf")
    print(f"{name}: {sum(f.stat().st_size for f in folder.iterdir())} bytes")


LLAMA_COMMON = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
                "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False, "pretraining_tp": 1,
                "initializer_range": 0.02, "use_cache": True, "bos_token_id": 1, "eos_token_id": 2}


def fixtures():
    # Llama 3.1: GQA, llama3 rope_scaling (head_dim 8: wavelengths 6.3, 63, 628, 6283 against the bounds
    # 64/4 and 64/1 -- kept, blended, divided, divided), untied, fp32, in three shards with an index.
    wavelen = 2 * math.pi / llama_inv_freq({"rope_theta": 10000.0}, 8)
    assert (wavelen < 16).any() and ((wavelen >= 16) & (wavelen <= 64)).any() and (wavelen > 64).any()
    hf_fixture("llama31_sharded", 11, {
        **LLAMA_COMMON, "vocab_size": 48, "hidden_size": 32, "intermediate_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "tie_word_embeddings": False,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 64}},
        llama_weights, torch.float32, shard_bytes=24000,
        extra_files={"generation_config.json": json.dumps({"bos_token_id": 1, "eos_token_id": [2, 3],
                                                           "do_sample": True, "temperature": 0.6}, indent=2) + "\n",
                     "tokenizer.json": json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {}}}) + "\n",
                     "tokenizer_config.json": json.dumps({"model_max_length": 64}) + "\n"})

    # Llama 3.2: tied embeddings, multi-query attention, rope_theta 500000, bf16; with the rotary
    # inv_freq buffers that older conversions saved.
    def tied_weights(g, c):
        P = llama_weights(g, c)
        for i in range(c["num_hidden_layers"]):
            P[f"model.layers.{i}.self_attn.rotary_emb.inv_freq"] = llama_inv_freq(c, 8)
        return P

    hf_fixture("llama32_tied_bf16", 12, {
        **LLAMA_COMMON, "vocab_size": 40, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 1, "max_position_embeddings": 32, "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0, "tie_word_embeddings": True, "rope_scaling": None},
        tied_weights, torch.bfloat16)

    # Mistral: GQA, fp16, a sliding window wider than the test sequences.
    hf_fixture("mistral_f16", 13, {
        **LLAMA_COMMON, "architectures": ["MistralForCausalLM"], "model_type": "mistral", "vocab_size": 40,
        "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "max_position_embeddings": 32, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "sliding_window": 16, "tie_word_embeddings": False},
        llama_weights, torch.float16)

    # Llama 2 as its HF conversion stores it: multi-head attention, and a config.json that predates
    # num_key_value_heads and rope_theta (transformers' defaults: as many KV heads as heads, 10000); fp16.
    llama2_config = {**LLAMA_COMMON, "vocab_size": 44, "hidden_size": 32, "intermediate_size": 40,
                     "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 32,
                     "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "rope_scaling": None}
    hf_fixture("llama2_mha_f16", 20, llama2_config, llama_weights, torch.float16)

    # GPT-2 as the original checkpoints store it: GPT2Model names (no "transformer."), Conv1D
    # weights [in, out], and the causal-mask buffers.
    gpt2_config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 48, "n_embd": 16,
                   "n_layer": 2, "n_head": 2, "n_inner": 64, "n_positions": 32, "n_ctx": 32,
                   "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "scale_attn_weights": True,
                   "bos_token_id": 47, "eos_token_id": 47}

    def gpt2_with_buffers(g, c):
        P = gpt2_weights(g, c, "")
        for i in range(c["n_layer"]):
            P[f"h.{i}.attn.bias"] = torch.tril(torch.ones(32, 32)).view(1, 1, 32, 32)
        return P

    hf_fixture("gpt2", 14, gpt2_config, gpt2_with_buffers, torch.float32)

    # MPT (transformers' MptForCausalLM): ALiBi with 6 heads (not a power of two: interleaved
    # slopes), no biases, tied, bf16.
    hf_fixture("mpt_bf16", 15, {
        "architectures": ["MptForCausalLM"], "model_type": "mpt", "vocab_size": 40, "d_model": 24, "n_heads": 6,
        "n_layers": 2, "expansion_ratio": 4, "max_seq_len": 32, "no_bias": True, "norm_type": "low_precision_layernorm",
        "layer_norm_epsilon": 1e-5, "learned_pos_emb": True,
        "attn_config": {"alibi": True, "alibi_bias_max": 8, "attn_impl": "torch", "attn_pdrop": 0.0,
                        "clip_qkv": None, "qk_ln": False, "softmax_scale": None, "prefix_lm": False},
        "logit_scale": None, "tie_word_embeddings": True}, mpt_weights, torch.bfloat16)

    # What save_pretrained(safe_serialization=False) writes (pytorch_model.bin, torch.save's zip of a
    # pickle): GPT-2 as GPT2LMHeadModel saves it, lm_head.weight the same tensor as wte (one storage
    # in the archive), the mask buffers of older checkpoints (masked_bias a 0-d tensor); fp32.
    def gpt2_lm_head(g, c):
        P = gpt2_weights(g, c, "transformer.")
        for i in range(c["n_layer"]):
            P[f"transformer.h.{i}.attn.bias"] = torch.tril(torch.ones(32, 32)).view(1, 1, 32, 32)
            P[f"transformer.h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
        P["lm_head.weight"] = P["transformer.wte.weight"]
        return P

    hf_fixture("gpt2_pickle", 21, gpt2_config, gpt2_lm_head, torch.float32, pickle=True)
    # Llama 2 in bf16, in pytorch_model-0000K-of-0000N.bin shards with their index.
    hf_fixture("llama2_pickle_bf16", 22, llama2_config, llama_weights, torch.bfloat16, shard_bytes=8000,
               pickle=True)
    torch_archives()

    llmc_fixture("llmc_gpt2_fp32", 16, 3)
    llmc_fixture("llmc_gpt2_bf16", 17, 5)
    llama2c_fixture("llama2c_legacy", 18, legacy=True, shared=False)
    llama2c_fixture("llama2c_v1", 19, legacy=False, shared=True)
    nanogpt_fixture("nanogpt_bias", 26, bias=True, compiled=False, tied=False, masks=False)
    nanogpt_fixture("nanogpt_compiled", 27, bias=False, compiled=True, tied=True, masks=True)

    # Meta's own folders. Llama 3.2-like: GQA, tied (no output.weight), scaled RoPE (head size 8 at
    # theta 500000: wavelengths 6.3, 167, 4443, 118000 against Meta's bounds 2048 and 8192 -- kept, kept,
    # blended, divided), bf16.
    wavelen = 2 * math.pi / meta_freqs(8, 500000.0)
    assert (wavelen < 2048).any() and ((wavelen >= 2048) & (wavelen <= 8192)).any() and (wavelen > 8192).any()
    meta_fixture("meta_llama32_tied", 24, {
        "dim": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "vocab_size": 48, "ffn_dim_multiplier": 1.3,
        "multiple_of": 16, "norm_eps": 1e-05, "rope_theta": 500000.0, "use_scaled_rope": True},
        torch.bfloat16, tied=True, scale_factor=8)
    # Llama 2-like: multi-head, vocab_size -1 (the tokenizer's), the rope.freqs table, eps 1e-6, fp32.
    meta_fixture("meta_llama2", 25, {"dim": 32, "multiple_of": 16, "n_heads": 4, "n_layers": 2, "norm_eps": 1e-06,
                                     "vocab_size": -1}, torch.float32, tied=False, rope_table=True)


class RunsACommand:
    """An object whose pickle calls os.system: what a malicious checkpoint holds."""

    def __reduce__(self):
        return (os.system, ("echo this ran",))


def torch_archives():
    """torch.save files for TorchFile's own tests (tests/io/test_torch_file.cpp): tensors hone reads
    and ones it cannot (a strided view, a bool tensor), a pickle that would run a command, and the
    format before PyTorch 1.6."""
    g = torch.Generator().manual_seed(23)
    base = torch.randn(3, 4, generator=g)
    torch.save(collections.OrderedDict([
        ("f32", base), ("row", base[1]), ("bf16", base.to(torch.bfloat16)), ("f16", base.to(torch.float16)),
        ("i64", torch.arange(5)), ("scalar", torch.tensor(2.5)), ("empty", torch.zeros(0, 4)),
        ("strided", base.t()), ("flags", base > 0), ("step", 7)]), OUT / "tensors.pt")
    torch.save({"weight": torch.ones(2), "payload": RunsACommand()}, OUT / "runs_a_command.pt")
    # The old format keys storages by memory address: this file differs from run to run.
    torch.save({"weight": torch.ones(2)}, OUT / "legacy.pt", _use_new_zipfile_serialization=False)
    for name in ("tensors.pt", "runs_a_command.pt", "legacy.pt"):
        print(f"{name}: {(OUT / name).stat().st_size} bytes")


def llmc_fixture(name, seed, version):
    """llm.c's train_gpt2.py write_model: header, then the weights in its order (nn.Linear layout),
    the vocabulary padded to a multiple of 8 here (llm.c uses 128) with zero rows."""
    g = torch.Generator().manual_seed(seed)
    maxT, V, L, H, C = 32, 45, 2, 2, 16
    Vp = (V + 7) // 8 * 8
    c = {"model_type": "gpt2", "vocab_size": V, "n_embd": C, "n_layer": L, "n_head": H, "n_positions": maxT}
    hf = gpt2_weights(g, c, "transformer.")
    dtype = torch.float32 if version == 3 else torch.bfloat16
    hf = {k: v.to(dtype).float() for k, v in hf.items()}  # what the file holds
    lin = lambda key, i: hf[f"transformer.h.{i}.{key}"].T  # Conv1D [in, out] -> Linear [out, in]
    layer = lambda key, i: hf[f"transformer.h.{i}.{key}"]
    arrays = [F.pad(hf["transformer.wte.weight"], (0, 0, 0, Vp - V)), hf["transformer.wpe.weight"]]
    for key, get in [("ln_1.weight", layer), ("ln_1.bias", layer), ("attn.c_attn.weight", lin),
                     ("attn.c_attn.bias", layer), ("attn.c_proj.weight", lin), ("attn.c_proj.bias", layer),
                     ("ln_2.weight", layer), ("ln_2.bias", layer), ("mlp.c_fc.weight", lin), ("mlp.c_fc.bias", layer),
                     ("mlp.c_proj.weight", lin), ("mlp.c_proj.bias", layer)]:
        arrays.append(torch.stack([get(key, i) for i in range(L)]))
    arrays += [hf["transformer.ln_f.weight"], hf["transformer.ln_f.bias"]]
    header = torch.zeros(256, dtype=torch.int32)
    header[:8] = torch.tensor([20240326, version, maxT, V, L, H, C, Vp])
    with open(OUT / f"{name}.bin", "wb") as f:
        f.write(tensor_bytes(header))
        for a in arrays:
            f.write(tensor_bytes(a.to(dtype)))
    tokens = tokens_for(g, V)
    # llm.c's own export_hf.py maps its file onto GPT2LMHeadModel this way; logits over the real vocabulary.
    write_reference(name, tokens, hf_logits({**c, "n_inner": None}, hf, tokens), f"{name}.bin", "llmc")
    print(f"{name}.bin: {(OUT / f'{name}.bin').stat().st_size} bytes")


def nanogpt_forward(a, P, tokens):
    """nanoGPT's model.py GPT.forward (no dropout): nn.Linear weights [out, in], exact GELU, LayerNorm
    with eps 1e-5 and no bias where bias=False, lm_head tied to wte."""
    D, H = a["n_embd"], a["n_head"]
    hd = D // H
    linear = lambda x, name: F.linear(x, P[name + ".weight"], P.get(name + ".bias"))
    ln = lambda x, name: F.layer_norm(x, (D,), P[name + ".weight"], P.get(name + ".bias"), 1e-5)
    T = tokens.shape[1]
    x = P["transformer.wte.weight"][tokens.long()] + P["transformer.wpe.weight"][:T]
    for i in range(a["n_layer"]):
        p = f"transformer.h.{i}."
        q, k, v = linear(ln(x, p + "ln_1"), p + "attn.c_attn").split(D, dim=2)
        y = causal_attention(heads(q, H, hd), heads(k, H, hd), heads(v, H, hd), 1 / math.sqrt(hd))
        x = x + linear(merge(y), p + "attn.c_proj")
        x = x + linear(F.gelu(linear(ln(x, p + "ln_2"), p + "mlp.c_fc")), p + "mlp.c_proj")
    return F.linear(ln(x, "transformer.ln_f"), P["lm_head.weight"])


def nanogpt_fixture(name, seed, bias, compiled, tied, masks):
    """train.py's ckpt.pt: the model's state dict (lm_head.weight a tensor of its own sharing wte's storage,
    as state_dict() gives a tied weight, or, untied, with a storage of its own; the causal masks attn.bias
    of a PyTorch without flash attention; "_orig_mod." before every name when compiled), an AdamW state
    dict, model_args, iter_num, best_val_loss (a tensor) and the run's config."""
    g = torch.Generator().manual_seed(seed)
    a = {"n_layer": 2, "n_head": 2, "n_embd": 16, "block_size": 32, "bias": bias, "vocab_size": 40, "dropout": 0.1}
    D, V, T = a["n_embd"], a["vocab_size"], a["block_size"]
    P = collections.OrderedDict()
    P["transformer.wte.weight"] = randn(g, V, D)
    P["transformer.wpe.weight"] = randn(g, T, D, scale=0.1)
    for i in range(a["n_layer"]):
        p = f"transformer.h.{i}."
        for module, (n_out, n_in) in {"ln_1": (D, 0), "attn.c_attn": (3 * D, D), "attn.c_proj": (D, D),
                                      "ln_2": (D, 0), "mlp.c_fc": (4 * D, D), "mlp.c_proj": (D, 4 * D)}.items():
            P[p + module + ".weight"] = norm_weight(g, D) if n_in == 0 else randn(g, n_out, n_in)
            if bias:
                P[p + module + ".bias"] = randn(g, n_out, scale=0.1)
            if module == "attn.c_attn" and masks:
                P[p + "attn.bias"] = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
    P["transformer.ln_f.weight"] = norm_weight(g, D)
    if bias:
        P["transformer.ln_f.bias"] = randn(g, D, scale=0.1)
    P["lm_head.weight"] = P["transformer.wte.weight"].detach() if tied else randn(g, V, D)
    prefix = "_orig_mod." if compiled else ""
    model = collections.OrderedDict((prefix + k, v) for k, v in P.items())
    params = [v for k, v in P.items() if not k.endswith(".attn.bias") and not (tied and k == "lm_head.weight")]
    optimizer = {"state": {i: {"step": torch.tensor(5.0), "exp_avg": torch.zeros_like(v),
                               "exp_avg_sq": torch.zeros_like(v)} for i, v in enumerate(params)},
                 "param_groups": [{"lr": 6e-4, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1,
                                   "amsgrad": False, "foreach": None, "maximize": False, "capturable": False,
                                   "differentiable": False, "fused": True, "params": list(range(len(params)))}]}
    config = {"out_dir": "out", "eval_interval": 250, "dataset": "shakespeare_char", "batch_size": 12,
              "learning_rate": 6e-4, "decay_lr": True, "dtype": "bfloat16", "compile": compiled, **a}
    torch.save({"model": model, "optimizer": optimizer, "model_args": a, "iter_num": 5,
                "best_val_loss": torch.tensor(3.25), "config": config}, OUT / f"{name}.pt")
    tokens = tokens_for(g, V)
    write_reference(name, tokens, nanogpt_forward(a, P, tokens).reshape(-1, V), f"{name}.pt", "nanogpt")
    print(f"{name}.pt: {(OUT / f'{name}.pt').stat().st_size} bytes")
    if not bias:
        # model_args claiming a third layer (an edited checkpoint): refused, naming the missing tensor.
        torch.save({"model": model, "model_args": {**a, "n_layer": 3}}, OUT / "nanogpt_wrong_args.pt")


def meta_weights(g, D, L, H, KV, V, Fd, tied):
    """A Llama's weights by the names of Meta's model.py (which llama2.c's copies), per layer in lists."""
    hd = D // H
    W = {"tok_embeddings": randn(g, V, D), "norm": norm_weight(g, D),
         "attention_norm": [norm_weight(g, D) for _ in range(L)], "ffn_norm": [norm_weight(g, D) for _ in range(L)],
         "wq": [randn(g, H * hd, D) for _ in range(L)], "wk": [randn(g, KV * hd, D) for _ in range(L)],
         "wv": [randn(g, KV * hd, D) for _ in range(L)], "wo": [randn(g, D, H * hd) for _ in range(L)],
         "w1": [randn(g, Fd, D) for _ in range(L)], "w2": [randn(g, D, Fd) for _ in range(L)],
         "w3": [randn(g, Fd, D) for _ in range(L)]}
    W["output"] = W["tok_embeddings"] if tied else randn(g, V, D)
    return W


def llama2c_fixture(name, seed, legacy, shared):
    """llama2.c's export.py: legacy_export (7-int header, negative vocab = unshared classifier, the
    RoPE tables after the final norm) or version1_export ("ak42" header of 256 bytes)."""
    g = torch.Generator().manual_seed(seed)
    p = {"dim": 16, "hidden_dim": 32, "n_layers": 2, "n_heads": 2, "n_kv_heads": 1, "vocab_size": 40, "seq_len": 32}
    D, Fd, L, H, KV, V, T = p.values()
    hd = D // H
    W = meta_weights(g, D, L, H, KV, V, Fd, shared)
    per_layer = lambda key: W[key]
    with open(OUT / f"{name}.bin", "wb") as f:
        if legacy:
            f.write(struct.pack("<7i", D, Fd, L, H, KV, V if shared else -V, T))
            order = [[W["tok_embeddings"]], per_layer("attention_norm"), W["wq"], W["wk"], W["wv"], W["wo"],
                     per_layer("ffn_norm"), W["w1"], W["w2"], W["w3"], [W["norm"]]]
            freqs = torch.outer(torch.arange(T).float(), 1.0 / (10000.0 ** (torch.arange(0, hd, 2).float() / hd)))
            order += [[freqs.cos()], [freqs.sin()]]
        else:
            head = struct.pack("<Ii7iB", 0x616B3432, 1, D, Fd, L, H, KV, V, T, int(shared))
            f.write(head + b"\0" * (256 - len(head)))
            order = [per_layer("attention_norm"), per_layer("ffn_norm"), [W["norm"]], [W["tok_embeddings"]], W["wq"],
                     W["wk"], W["wv"], W["wo"], W["w1"], W["w2"], W["w3"]]
        if not shared:
            order.append([W["output"]])
        for group in order:
            for t in group:
                f.write(tensor_bytes(t.float()))
    tokens = tokens_for(g, V)
    with torch.no_grad():
        logits = llama2c_forward(p, W, tokens)
    write_reference(name, tokens, logits, f"{name}.bin", "llama2c")
    print(f"{name}.bin: {(OUT / f'{name}.bin').stat().st_size} bytes")


def meta_fixture(name, seed, params, dtype, tied, rope_table=False, scale_factor=None):
    """A Meta Llama folder as Meta's download writes it: params.json and consolidated.00.pth (torch.save
    of the state dict by Meta's names; queries and keys in interleaved RoPE order), the MLP width from
    multiple_of and ffn_dim_multiplier as Meta's model code computes it."""
    g = torch.Generator().manual_seed(seed)
    D, L, H = params["dim"], params["n_layers"], params["n_heads"]
    KV, V, hd = params.get("n_kv_heads", H), 48, D // params["n_heads"]
    Fd = int(2 * 4 * D / 3)
    if params.get("ffn_dim_multiplier"):
        Fd = int(params["ffn_dim_multiplier"] * Fd)
    Fd = params["multiple_of"] * ((Fd + params["multiple_of"] - 1) // params["multiple_of"])
    W = meta_weights(g, D, L, H, KV, V, Fd, tied)
    state = collections.OrderedDict([("tok_embeddings.weight", W["tok_embeddings"]), ("norm.weight", W["norm"])])
    if not tied:
        state["output.weight"] = W["output"]
    for i in range(L):
        state[f"layers.{i}.attention.wq.weight"] = W["wq"][i]
        state[f"layers.{i}.attention.wk.weight"] = W["wk"][i]
        state[f"layers.{i}.attention.wv.weight"] = W["wv"][i]
        state[f"layers.{i}.attention.wo.weight"] = W["wo"][i]
        state[f"layers.{i}.feed_forward.w1.weight"] = W["w1"][i]
        state[f"layers.{i}.feed_forward.w2.weight"] = W["w2"][i]
        state[f"layers.{i}.feed_forward.w3.weight"] = W["w3"][i]
        state[f"layers.{i}.attention_norm.weight"] = W["attention_norm"][i]
        state[f"layers.{i}.ffn_norm.weight"] = W["ffn_norm"][i]
    if rope_table:  # Llama 2's checkpoints carry the RoPE frequencies too
        state["rope.freqs"] = meta_freqs(hd, params.get("rope_theta", 10000.0))
    stored = collections.OrderedDict((k, v.to(dtype) if k != "rope.freqs" else v) for k, v in state.items())
    folder = OUT / name
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    (folder / "params.json").write_text(json.dumps(params) + "\n")
    torch.save(stored, folder / "consolidated.00.pth")
    # The reference reads the stored (rounded) weights back, as Meta's loader would.
    loaded = torch.load(folder / "consolidated.00.pth")
    R = {"tok_embeddings": loaded["tok_embeddings.weight"].float(), "norm": loaded["norm.weight"].float(),
         "output": loaded["output.weight" if not tied else "tok_embeddings.weight"].float()}
    names = {"attention_norm": "attention_norm", "ffn_norm": "ffn_norm", "wq": "attention.wq", "wk": "attention.wk",
             "wv": "attention.wv", "wo": "attention.wo", "w1": "feed_forward.w1", "w2": "feed_forward.w2",
             "w3": "feed_forward.w3"}
    for key, meta_name in names.items():
        R[key] = [loaded[f"layers.{i}.{meta_name}.weight"].float() for i in range(L)]
    tokens = tokens_for(g, V)
    p = {"dim": D, "n_heads": H, "n_kv_heads": KV, "n_layers": L}
    with torch.no_grad():
        logits = llama2c_forward(p, R, tokens, meta_freqs(hd, params.get("rope_theta", 10000.0), scale_factor),
                                 params.get("norm_eps", 1e-5))
    write_reference(name, tokens, logits, name, "meta")
    print(f"{name}: {sum(f.stat().st_size for f in folder.iterdir())} bytes")


def check(folder, reference):
    """The HF folder's logits on the reference tokens, against the reference logits."""
    ref, _ = read_safetensors(reference)
    config, tensors = load_hf_folder(folder)
    logits = hf_logits(config, tensors, ref["tokens"])
    expected = ref["logits"].float()
    error = ((logits - expected).abs().max() / expected.abs().max()).item()
    print(f"{folder}: {config['architectures'][0]}, {len(tensors)} tensors, max relative logit error {error:.2e}")
    return error


if __name__ == "__main__":
    torch.set_num_threads(1)  # the same reduction order on every machine
    if len(sys.argv) == 4 and sys.argv[1] == "--check":
        sys.exit(0 if check(sys.argv[2], sys.argv[3]) <= 1e-4 else 1)
    OUT.mkdir(exist_ok=True)
    fixtures()
    print(f"total {sum(f.stat().st_size for f in OUT.rglob('*') if f.is_file())} bytes in {OUT}")
