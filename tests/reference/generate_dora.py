#!/usr/bin/python3
"""Writes the DoRA reference files that tests/model/test_lora.cpp compares hone's
adapters against: for the Llama and GPT-2 models of generate.py, DoRA adapters
(Liu et al. 2024, as torchtune's DoRALinear and PEFT compute them) on q, k, v,
the attention output and the MLP's projections, written here independently of
hone from the paper's formula:

  y_rows = m / ||W_rows + s*B*A||.detach() * (x W_rows^T + s * x A^T B^T) + bias_rows

Run with Debian's python3-torch (1.13):  /usr/bin/python3 tests/reference/generate_dora.py

dora_{family}.safetensors holds param.<name> (the base), adapter.<name> (A, B and
magnitude m, hone's names), tokens, targets, logits, loss, and grad.<name> of
every adapter tensor; metadata: config, lora (rank, alpha, modules).
"""
import json
import pathlib

import torch

import generate as g

RANK, ALPHA = 2, 4.0
MODULES = ["q_proj", "k_proj", "v_proj", "output_proj"]


def targets(c):
    """(module, hone prefix, first row, rows, in) of every adapter, as hone's lora_targets lists them."""
    D, hd = c["dim"], g.head_dim(c)
    q, kv = c["n_heads"] * hd, c["n_kv_heads"] * hd
    out = []
    for i in range(c["n_layers"]):
        p = f"layers.{i}"
        out += [("q_proj", p + ".attn.qkv", 0, q, D), ("k_proj", p + ".attn.qkv", q, kv, D),
                ("v_proj", p + ".attn.qkv", q + kv, kv, D), ("output_proj", p + ".attn.out", 0, D, q)]
        if c["mlp"] == "swiglu":
            out += [("gate_proj", p + ".mlp.up", 0, c["ffn_dim"], D),
                    ("up_proj", p + ".mlp.up", c["ffn_dim"], c["ffn_dim"], D)]
        else:
            out += [("up_proj", p + ".mlp.up", 0, c["ffn_dim"], D)]
        out += [("down_proj", p + ".mlp.down", 0, D, c["ffn_dim"])]
    return out


def adapter_name(prefix, module, part):
    layer = prefix.split(".")[1]
    return f"layers.{layer}.lora.{module}.{part}"


def generate(family, seed):
    c = g.CONFIGS[family]
    base = g.init_parameters(c, seed)
    tokens, targets_ = g.batch(c, seed + 1)
    gen = torch.Generator().manual_seed(seed + 2)
    adapters = {}
    for module, prefix, first, rows, inp in targets(c):
        w = base[prefix + ".weight"][first:first + rows]
        adapters[adapter_name(prefix, module, "a")] = torch.randn(RANK, inp, generator=gen) * 0.3
        adapters[adapter_name(prefix, module, "b")] = torch.randn(rows, RANK, generator=gen) * 0.3
        # The magnitudes start at the rows' norms; moved from there, as training would.
        adapters[adapter_name(prefix, module, "magnitude")] = w.norm(dim=1) * (1 + 0.2 * torch.randn(rows, generator=gen))
    params = {name: t.clone().requires_grad_() for name, t in adapters.items()}
    scale = ALPHA / RANK
    by_prefix = {}
    for module, prefix, first, rows, _ in targets(c):
        by_prefix.setdefault(prefix, []).append((module, first, rows))

    def project(x, prefix, plain):
        if prefix not in by_prefix:
            return plain(x, prefix)
        W, bias = base[prefix + ".weight"], base.get(prefix + ".bias")
        pieces, covered = [], 0
        for module, first, rows in by_prefix[prefix]:
            assert first == covered  # the adapters cover the projection's rows in order
            A, B, m = (params[adapter_name(prefix, module, part)] for part in ("a", "b", "magnitude"))
            w = W[first:first + rows]
            norm = (w + scale * (B @ A)).norm(dim=1).detach()
            y = (m / norm) * (x @ w.T + scale * (x @ A.T) @ B.T)
            if bias is not None:
                y = y + bias[first:first + rows]
            pieces.append(y)
            covered += rows
        assert covered == W.shape[0]
        return torch.cat(pieces, dim=-1)

    logits = g.forward(c, base, tokens, project)
    loss = g.loss_of(logits, targets_)
    loss.backward()
    out = {f"param.{name}": t for name, t in base.items()}
    out.update({f"adapter.{name}": t for name, t in adapters.items()})
    out.update({f"grad.{name}": p.grad for name, p in params.items()})
    out["tokens"], out["targets"] = tokens, targets_
    out["logits"], out["loss"] = logits.detach(), loss.detach().reshape(1)
    lora = {"rank": RANK, "alpha": ALPHA, "attn_modules": MODULES, "apply_to_mlp": True}
    metadata = {"config": json.dumps(c), "lora": json.dumps(lora), "generator": "tests/reference/generate_dora.py",
                "torch": torch.__version__}
    path = pathlib.Path(__file__).resolve().parent / f"dora_{family}.safetensors"
    g.write_safetensors(path, out, metadata)
    print(f"{path.name}: loss {loss.item():.6f}, {path.stat().st_size} bytes")


if __name__ == "__main__":
    torch.set_num_threads(1)
    for seed, family in enumerate(["llama", "gpt2"]):
        generate(family, 5000 + 1000 * seed)
