"""Multiple-choice items of random words, for timing `hone run eval` (docs/benchmarks.md,
"Evaluation"): each a 60-word context, four 15-word endings and a label.
Run: python3 bench/eval/random_choices.py > /tmp/mc.jsonl"""
import json
import random

rng = random.Random(1)
WORDS = "the a cat dog sat ran on under house river tree blue green quickly slowly went came saw found".split()


def words(n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


for _ in range(100):
    print(json.dumps({"ctx": words(60), "endings": [words(15) for _ in range(4)], "label": rng.randrange(4)}))
