#!/usr/bin/python3
"""PyTorch's side of the CPU training-speed comparison (docs/benchmarks.md).

Builds the same models as hone's presets (llama_125M: RMSNorm, RoPE, GQA, SwiGLU;
gpt2_124M: LayerNorm, learned positions, GELU, tied embeddings) in plain PyTorch,
trains them on random tokens with AdamW and gradient clipping exactly as
`hone bench` does, and prints one JSON line with the median step time and
tokens/s. Use Debian's PyTorch: /usr/bin/python3 (the pyenv python3 has no torch).

  /usr/bin/python3 bench/pytorch/train_step.py --model llama_125M --batch-size 4 \
      --seq-len 256 --dtype fp32 --steps 10 --threads 2
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {
    "llama_125M": dict(family="llama", vocab=32000, dim=768, layers=12, heads=12, kv_heads=4, ffn=2048, tied=False),
    "gpt2_124M": dict(family="gpt2", vocab=50257, dim=768, layers=12, heads=12, kv_heads=12, ffn=3072, tied=True,
                      max_seq=1024),
    "llama_tiny": dict(family="llama", vocab=256, dim=64, layers=2, heads=4, kv_heads=2, ffn=192, tied=False),
}


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps).to(x.dtype) * self.weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        llama = c["family"] == "llama"
        hd = c["dim"] // c["heads"]
        self.hd = hd
        norm = (lambda: RMSNorm(c["dim"])) if llama else (lambda: nn.LayerNorm(c["dim"]))
        self.attn_norm, self.mlp_norm = norm(), norm()
        self.qkv = nn.Linear(c["dim"], (c["heads"] + 2 * c["kv_heads"]) * hd, bias=not llama)
        self.out = nn.Linear(c["heads"] * hd, c["dim"], bias=not llama)
        self.up = nn.Linear(c["dim"], (2 if llama else 1) * c["ffn"], bias=not llama)
        self.down = nn.Linear(c["ffn"], c["dim"], bias=not llama)

    def forward(self, x, cos, sin, mask):
        c, hd = self.c, self.hd
        B, T, _ = x.shape
        qkv = self.qkv(self.attn_norm(x))
        q, k, v = qkv.split([c["heads"] * hd, c["kv_heads"] * hd, c["kv_heads"] * hd], dim=-1)
        q = q.view(B, T, c["heads"], hd).transpose(1, 2)
        k = k.view(B, T, c["kv_heads"], hd).transpose(1, 2)
        v = v.view(B, T, c["kv_heads"], hd).transpose(1, 2)
        if c["family"] == "llama":
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        group = c["heads"] // c["kv_heads"]
        if group > 1:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd) + mask
        attn = (scores.float().softmax(-1).to(q.dtype) @ v).transpose(1, 2).reshape(B, T, c["heads"] * hd)
        x = x + self.out(attn)
        h = self.up(self.mlp_norm(x))
        if c["family"] == "llama":
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        else:
            h = F.gelu(h, approximate="tanh")
        return x + self.down(h)


class Model(nn.Module):
    def __init__(self, c, seq):
        super().__init__()
        self.c = c
        self.tok = nn.Embedding(c["vocab"], c["dim"])
        self.pos = nn.Embedding(c["max_seq"], c["dim"]) if c["family"] == "gpt2" else None
        self.blocks = nn.ModuleList(Block(c) for _ in range(c["layers"]))
        self.norm = RMSNorm(c["dim"]) if c["family"] == "llama" else nn.LayerNorm(c["dim"])
        self.head = None if c["tied"] else nn.Linear(c["dim"], c["vocab"], bias=False)
        hd = c["dim"] // c["heads"]
        inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2).float() / hd))
        freqs = torch.outer(torch.arange(seq).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos()[None, None], persistent=False)
        self.register_buffer("sin", emb.sin()[None, None], persistent=False)
        self.register_buffer("mask", torch.full((seq, seq), float("-inf")).triu(1), persistent=False)

    def forward(self, tokens):
        x = self.tok(tokens)
        if self.pos is not None:
            x = x + self.pos(torch.arange(tokens.shape[1]))
        for b in self.blocks:
            x = b(x, self.cos, self.sin, self.mask)
        x = self.norm(x)
        return x @ self.tok.weight.t() if self.head is None else self.head(x)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="llama_125M", choices=sorted(PRESETS))
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    c = dict(PRESETS[a.model])
    model = Model(c, a.seq_len)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95))
    tokens = torch.randint(0, c["vocab"], (a.batch_size, a.seq_len + 1))
    x, y = tokens[:, :-1], tokens[:, 1:]

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            logits = model(x)
        loss = F.cross_entropy(logits.float().view(-1, c["vocab"]), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    step()  # warm-up, untimed, as in hone bench
    times = []
    for _ in range(a.steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    median = statistics.median(times)
    print(json.dumps({"impl": f"pytorch-{torch.__version__}", "model": a.model, "dtype": a.dtype,
                      "batch_size": a.batch_size, "seq_len": a.seq_len, "steps": a.steps, "threads": a.threads,
                      "step_time_s": median, "tokens_per_sec": a.batch_size * a.seq_len / median}))


if __name__ == "__main__":
    main()
