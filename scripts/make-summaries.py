#!/usr/bin/python3
"""Builds the summarization demo's dataset from Debian's own package descriptions:
each package's long description paired with its one-line summary (XSum-style).

Reads apt's English translation lists (Translation-en), fetching them first with
`apt-get -o Acquire::Languages=en update` when they are missing (as root, or with
sudo). Writes, deterministically:
  OUT/train.jsonl      {"description": ..., "summary": ...} per line
  OUT/heldout.jsonl    the last 200 pairs, never trained on
  OUT/heldout.txt      their descriptions, one per line (prompts for generation)

  scripts/make-summaries.py .assets/summaries
"""
import glob
import hashlib
import json
import os
import subprocess
import sys

LISTS = "/var/lib/apt/lists"
HELD_OUT = 200


def translation_files():
    return sorted(glob.glob(os.path.join(LISTS, "*_i18n_Translation-en*")))


def fetch_translations():
    command = ["apt-get", "-o", "Acquire::Languages=en", "update"]
    if os.geteuid() != 0:
        command = ["sudo"] + command
    print("make-summaries: fetching apt's English descriptions: " + " ".join(command), file=sys.stderr)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def records(path):
    # apt-helper decompresses whatever apt stored (lz4, xz, gz or plain).
    text = subprocess.run(["/usr/lib/apt/apt-helper", "cat-file", path], check=True, capture_output=True).stdout
    for block in text.decode("utf-8", "replace").split("\n\n"):
        summary, body, in_description = None, [], False
        for line in block.split("\n"):
            if line.startswith("Description-en: "):
                summary, in_description = line[len("Description-en: "):].strip(), True
            elif in_description and line.startswith(" "):
                body.append("" if line.strip() == "." else line.strip())
            else:
                in_description = False
        if summary and body:
            # One line per description: paragraphs become sentences of one text.
            yield " ".join(part for part in body if part), summary


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    if not translation_files():
        fetch_translations()
    if not translation_files():
        sys.exit("make-summaries: no Translation-en lists in " + LISTS)
    pairs = {}
    for path in translation_files():
        for description, summary in records(path):
            # Short enough that the summary survives a 256-token sample, long enough to summarize.
            if 100 <= len(description) <= 600 and 10 <= len(summary) <= 80:
                pairs.setdefault(description, summary)
    # A fixed order independent of the lists' order: by hash of the description.
    items = sorted(pairs.items(), key=lambda p: hashlib.sha256(p[0].encode()).hexdigest())
    os.makedirs(out, exist_ok=True)
    train, heldout = items[:-HELD_OUT], items[-HELD_OUT:]
    with open(os.path.join(out, "train.jsonl"), "w") as f:
        for d, s in train:
            f.write(json.dumps({"description": d, "summary": s}) + "\n")
    with open(os.path.join(out, "heldout.jsonl"), "w") as f:
        for d, s in heldout:
            f.write(json.dumps({"description": d, "summary": s}) + "\n")
    with open(os.path.join(out, "heldout.txt"), "w") as f:
        for d, _ in heldout:
            f.write(d + "\n")
    print(f"make-summaries: {len(train)} training pairs, {len(heldout)} held out -> {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
