#!/usr/bin/env python3
"""nanoGPT's character-level data, as its data/shakespeare_char/prepare.py makes it,
for hone's tests (python3 and numpy only; run from the repository root):

  tests/reference/nanogpt_chars/meta.pkl          pickle.dump({'vocab_size', 'itos', 'stoi'}),
                                                  the default protocol (prepare.py's call)
  tests/reference/nanogpt_chars/meta_protocol2.pkl the same at protocol 2 (older Pythons' opcodes)
  tests/reference/nanogpt_chars/train.bin, val.bin  the text's ids as uint16, split 90/10
  tests/reference/nanogpt_chars/expected.json      a text and the ids prepare.py's encode gives it
"""
import json
import os
import pickle

import numpy as np

OUT = "tests/reference/nanogpt_chars"

# A few lines of Shakespeare (public domain), and a character past ASCII.
data = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
    "All:\nSpeak, speak.\n\nFirst Citizen:\nYou are all resolved rather to die than to famish?\n\n"
    "All:\nResolved. resolved.\n\nFirst Citizen:\nFirst, you know Caius Marcius is chief enemy to the people.\n"
    "Ros\u00e9 and caf\u00e9 \u2014 well met.\n"
)

# prepare.py, as written there.
chars = sorted(list(set(data)))
vocab_size = len(chars)
stoi = {ch: i for i, ch in enumerate(chars)}
itos = {i: ch for i, ch in enumerate(chars)}


def encode(s):
    return [stoi[c] for c in s]


n = len(data)
train_ids = np.array(encode(data[: int(n * 0.9)]), dtype=np.uint16)
val_ids = np.array(encode(data[int(n * 0.9) :]), dtype=np.uint16)

os.makedirs(OUT, exist_ok=True)
train_ids.tofile(os.path.join(OUT, "train.bin"))
val_ids.tofile(os.path.join(OUT, "val.bin"))
meta = {"vocab_size": vocab_size, "itos": itos, "stoi": stoi}
with open(os.path.join(OUT, "meta.pkl"), "wb") as f:
    pickle.dump(meta, f)
with open(os.path.join(OUT, "meta_protocol2.pkl"), "wb") as f:
    pickle.dump(meta, f, protocol=2)
sample = "Speak, caf\u00e9 enemy?\n"
with open(os.path.join(OUT, "expected.json"), "w") as f:
    json.dump({"vocab_size": vocab_size, "text": sample, "ids": encode(sample)}, f, ensure_ascii=False)
    f.write("\n")
