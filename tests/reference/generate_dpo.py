#!/usr/bin/python3
"""Writes the DPO reference files that tests/model/test_pytorch_reference.cpp
compares hone's lora_dpo objective against: torchtune's preference losses
(DPOLoss: the sigmoid loss with label smoothing; IPOLoss; RSOLoss: the hinge
loss; SimPOLoss: per-token means, no reference model) and its per-sequence
log-probabilities (the answer tokens' log-softmax, summed, or for SimPO
averaged), written here independently of hone, on two pairs of rows (chosen,
rejected, chosen, rejected: hone's batch order). The trained model is the model
of generate.py with LoRA adapters on q, k, v, the attention output and the MLP;
the reference model is the same weights without them.

Run with Debian's python3-torch (1.13):  /usr/bin/python3 tests/reference/generate_dpo.py

dpo_{family}.safetensors holds param.<name> (the base), adapter.<name> (A and B,
hone's names), tokens, targets, and for each loss type T (dpo, ipo, rso, simpo:
loss.type's names) T.loss (the mean over pairs), T.chosen_rewards and
T.rejected_rewards (per pair), and T.grad.<name> of every adapter tensor;
metadata: config, lora (rank, alpha, modules), losses ({T: {beta,
label_smoothing, gamma}}).
"""
import json
import pathlib

import torch
import torch.nn.functional as F

import generate as g
import generate_dora as d

RANK, ALPHA = 2, 4.0
# Each loss's settings (torchtune's names: IPOLoss's tau and RSOLoss's gamma are beta here).
LOSSES = {
    "dpo": {"beta": 0.3, "label_smoothing": 0.1, "gamma": 0.0},
    "ipo": {"beta": 0.3, "label_smoothing": 0.0, "gamma": 0.0},
    "rso": {"beta": 0.3, "label_smoothing": 0.0, "gamma": 0.0},
    "simpo": {"beta": 2.0, "label_smoothing": 0.1, "gamma": 0.5},
}
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


def sequence_log_probs(logits, targets, average=False):
    """torchtune's get_batch_log_probs: Σ over unmasked targets of log p(target), per row (or their mean)."""
    B, T = targets.shape
    mask = targets != -100
    log_p = logits.view(B, T, -1).log_softmax(-1)
    picked = torch.gather(log_p, 2, targets.clamp(min=0).long().unsqueeze(2)).squeeze(2)
    total = (picked * mask).sum(-1)
    return total / mask.sum(-1) if average else total


def preference_loss(kind, s, policy, reference):
    """torchtune's loss classes: the per-pair losses and the chosen and rejected rewards."""
    chosen, rejected = policy[0::2], policy[1::2]
    beta, smoothing = s["beta"], s["label_smoothing"]
    if kind == "simpo":  # SimPOLoss: no reference
        logits = (chosen - rejected) - s["gamma"] / beta
        losses = -F.logsigmoid(beta * logits) * (1 - smoothing) - F.logsigmoid(-beta * logits) * smoothing
        return losses, beta * chosen, beta * rejected
    ref_chosen, ref_rejected = reference[0::2], reference[1::2]
    logits = (chosen - rejected) - (ref_chosen - ref_rejected)
    if kind == "dpo":  # DPOLoss
        losses = -F.logsigmoid(beta * logits) * (1 - smoothing) - F.logsigmoid(-beta * logits) * smoothing
    elif kind == "ipo":  # IPOLoss (tau)
        losses = (logits - 1 / (2 * beta)) ** 2
    else:  # RSOLoss (gamma)
        losses = torch.relu(1 - beta * logits)
    return losses, beta * (chosen - ref_chosen), beta * (rejected - ref_rejected)


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
    out = {f"param.{name}": t for name, t in base.items()}
    out.update({f"adapter.{name}": t for name, t in adapters.items()})
    out["tokens"], out["targets"] = tokens, targets
    report = []
    for kind, settings in LOSSES.items():
        for p in params.values():
            p.grad = None
        policy = sequence_log_probs(g.forward(c, base, tokens, project), targets, average=kind == "simpo")
        losses, chosen_rewards, rejected_rewards = preference_loss(kind, settings, policy, reference)
        loss = losses.mean()
        loss.backward()
        out.update({f"{kind}.grad.{name}": p.grad.clone() for name, p in params.items()})
        out[f"{kind}.loss"] = loss.detach().reshape(1)
        out[f"{kind}.chosen_rewards"] = chosen_rewards.detach()
        out[f"{kind}.rejected_rewards"] = rejected_rewards.detach()
        report.append(f"{kind} {loss.item():.6f} (margins {(chosen_rewards - rejected_rewards).tolist()})")
    lora = {"rank": RANK, "alpha": ALPHA, "attn_modules": d.MODULES, "apply_to_mlp": True}
    metadata = {"config": json.dumps(c), "lora": json.dumps(lora), "losses": json.dumps(LOSSES),
                "generator": "tests/reference/generate_dpo.py", "torch": torch.__version__}
    path = pathlib.Path(__file__).resolve().parent / f"dpo_{family}.safetensors"
    g.write_safetensors(path, out, metadata)
    print(f"{path.name}: losses {'; '.join(report)}, {path.stat().st_size} bytes")


if __name__ == "__main__":
    torch.set_num_threads(1)
    for seed, family in enumerate(["llama", "gpt2"]):
        generate(family, 7000 + 1000 * seed)
