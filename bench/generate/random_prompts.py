"""Prompts of random words, a prompt a line, for timing `hone run generate`'s
prefill (docs/benchmarks.md, "Generation: prompts prefilled together"): 64
prompts of 10 to 40 words.
Run: python3 bench/generate/random_prompts.py > /tmp/prompts.txt"""
import random

rng = random.Random(1)
WORDS = "the a cat dog sat ran on under house river tree blue green quickly slowly went came saw found".split()

for _ in range(64):
    print(" ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 40))))
