#!/usr/bin/python3
"""Writes the DPO reference files that tests/model/test_pytorch_reference.cpp
compares hone's lora_dpo objective against: torchtune's DPOLoss (the sigmoid
loss with label smoothing) and its per-sequence log-probabilities (the answer
tokens' log-softmax, summed), written here independently of hone, on two pairs
of rows (chosen, rejected, chosen, rejected: hone's batch order). The trained
model is the model of generate.py with LoRA adapters on q, k, v, the attention
output and the MLP; the reference model is the same weights without them.

Run with Debian's python3-torch (1.13):  /usr/bin/python3 tests/reference/generate_dpo.py

dpo_{family}.safetensors holds param.<name> (the base), adapter.<name> (A and B,
hone's names), tokens, targets, loss (the mean over pairs), chosen_rewards and
rejected_rewards (per pair), and grad.<name> of every adapter tensor; metadata:
config, lora (rank, alpha, modules), dpo (beta, label_smoothing).
"""
import json
import pathlib

import torch
import torch.nn.functional as F

import generate as g
import generate_dora as d

RANK, ALPHA = 2, 4.0
BETA, LABEL_SMOOTHING = 0.3, 0.1
ROWS, SEQ = 4, 12


def pairs(c, seed):
    """Tokens and next-token targets of 4 rows; each row's prompt (its first 3 to 6 positions) masked."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, c["vocab_size"], (ROWS, SEQ + 1), generator=gen)
    tokens, targets = ids[:, :-1].clone(), ids[:, 1:].clone()
    for row in range(ROWS):
        targets[row, :3 + row] = -100
    targets[1, SEQ - 1] = -100  # padding after a shorter answer
    return tokens.int(), targets.int()


def sequence_log_probs(logits, targets):
    """torchtune's get_batch_log_probs: Σ over unmasked targets of log p(target), per row."""
    B, T = targets.shape
    mask = targets != -100
    log_p = logits.view(B, T, -1).log_softmax(-1)
    picked = torch.gather(log_p, 2, targets.clamp(min=0).long().unsqueeze(2)).squeeze(2)
    return (picked * mask).sum(-1)


def generate(family, seed):
    c = g.CONFIGS[family]
    base = g.init_parameters(c, seed)
    tokens, targets = pairs(c, seed + 1)
    gen = torch.Generator().manual_seed(seed + 2)
    adapters = {}
    for module, prefix, first, rows, inp in d.targets(c):
        adapters[d.adapter_name(prefix, module, "a")] = torch.randn(RANK, inp, generator=gen) * 0.3
        adapters[d.adapter_name(prefix, module, "b")] = torch.randn(rows, RANK, generator=gen) * 0.3
    params = {name: t.clone().requires_grad_() for name, t in adapters.items()}
    scale = ALPHA / RANK
    by_prefix = {}
    for module, prefix, first, rows, _ in d.targets(c):
        by_prefix.setdefault(prefix, []).append((module, first, rows))

    def project(x, prefix, plain):
        y = plain(x, prefix)
        if prefix not in by_prefix:
            return y
        deltas = []
        for module, first, rows in by_prefix[prefix]:
            A, B = (params[d.adapter_name(prefix, module, part)] for part in ("a", "b"))
            deltas.append(scale * (x @ A.T) @ B.T)
        return y + torch.cat(deltas, dim=-1)

    with torch.no_grad():
        reference = sequence_log_probs(g.forward(c, base, tokens), targets)
    policy = sequence_log_probs(g.forward(c, base, tokens, project), targets)
    # torchtune's DPOLoss.
    chosen, rejected = policy[0::2], policy[1::2]
    ref_chosen, ref_rejected = reference[0::2], reference[1::2]
    logits = (chosen - rejected) - (ref_chosen - ref_rejected)
    losses = (-F.logsigmoid(BETA * logits) * (1 - LABEL_SMOOTHING) - F.logsigmoid(-BETA * logits) * LABEL_SMOOTHING)
    loss = losses.mean()
    loss.backward()
    out = {f"param.{name}": t for name, t in base.items()}
    out.update({f"adapter.{name}": t for name, t in adapters.items()})
    out.update({f"grad.{name}": p.grad for name, p in params.items()})
    out["tokens"], out["targets"] = tokens, targets
    out["loss"] = loss.detach().reshape(1)
    out["chosen_rewards"] = (BETA * (chosen - ref_chosen)).detach()
    out["rejected_rewards"] = (BETA * (rejected - ref_rejected)).detach()
    lora = {"rank": RANK, "alpha": ALPHA, "attn_modules": d.MODULES, "apply_to_mlp": True}
    dpo = {"beta": BETA, "label_smoothing": LABEL_SMOOTHING}
    metadata = {"config": json.dumps(c), "lora": json.dumps(lora), "dpo": json.dumps(dpo),
                "generator": "tests/reference/generate_dpo.py", "torch": torch.__version__}
    path = pathlib.Path(__file__).resolve().parent / f"dpo_{family}.safetensors"
    g.write_safetensors(path, out, metadata)
    print(f"{path.name}: loss {loss.item():.6f}, margins {out['chosen_rewards'] - out['rejected_rewards']}, "
          f"{path.stat().st_size} bytes")


if __name__ == "__main__":
    torch.set_num_threads(1)
    for seed, family in enumerate(["llama", "gpt2"]):
        generate(family, 7000 + 1000 * seed)
