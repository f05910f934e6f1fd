"""Generated answers scored with Python's `re` and `string`, as
lm-evaluation-harness scores its gsm8k task (version 3: two regex filters,
RegexFilter then take_first) and its triviaqa task (version 2: remove_whitespace,
ignore_case, ignore_punctuation, any alias), with Hugging Face evaluate's
exact_match (regexes_to_ignore, then case, then punctuation). Writes
answer_scores.json beside this file; test_evaluation checks hone's scoring
against it. Run: python3 generate_answer_scores.py"""
import json
import os
import re
import string


def extract(pattern, response, group_select):
    match = re.compile(pattern).findall(response)
    if not match:
        return "[invalid]"
    match = match[group_select]
    if isinstance(match, tuple):
        match = [m for m in match if m]
        match = match[0] if match else "[invalid]"
    return match.strip()


def exact_match(prediction, reference, ignore=(), ignore_case=False, ignore_punctuation=False):
    for pattern in ignore:
        prediction = re.sub(pattern, "", prediction)
        reference = re.sub(pattern, "", reference)
    if ignore_case:
        prediction, reference = prediction.lower(), reference.lower()
    if ignore_punctuation:
        table = str.maketrans("", "", string.punctuation)
        prediction, reference = prediction.translate(table), reference.translate(table)
    return prediction == reference


GSM8K_IGNORE = [",", "\\$", "(?s).*#### ", "\\.$"]
REFERENCE = "She sold 48/2 = <<48/2=24>>24 clips in May.\nShe sold 48+24 = <<48+24=72>>72 clips.\n#### 72"
GSM8K = [
    (" She sold 24 clips in May, so 48+24 = 72.\n#### 72", REFERENCE),
    (" The answer is $72.", REFERENCE),
    (" 12 apples and 5 pears, so 72", REFERENCE),
    (" so 72.\n", REFERENCE),
    (" no numbers here", REFERENCE),
    (" #### 72\n#### 73", REFERENCE),
    (" It costs $1,234.50 in all.\n#### $1,234.50", "A is 1,000 and B 234.50.\n#### 1,234.50"),
    (" -3 degrees... #### -3", "It fell to -3.\n#### -3"),
    (" 7", "#### 7"),
    (" #### 8.", "#### 8"),
    (" ####72", REFERENCE),
]
# The completions as generation leaves them: cut before "\n", "." and ",".
TRIVIAQA = [
    (" The Beatles", ["The Beatles", "Beatles"]),
    ("  beatles", ["The Beatles", "Beatles"]),
    (" Paul McCartney", ["John Lennon", "Lennon"]),
    (" U", ["U.S.", "USA"]),
    (" St Louis", ["St. Louis", "Saint Louis"]),
    ("", ["Paris"]),
]

gsm8k = []
for completion, reference in GSM8K:
    answers = [extract(r"#### (\-?[0-9\.\,]+)", completion, 0), extract(r"(-?[$0-9.,]{2,})|(-?[0-9]+)", completion, -1)]
    gsm8k.append({"completion": completion, "references": [reference], "answers": answers,
                  "matches": [exact_match(a, reference, GSM8K_IGNORE, ignore_case=True) for a in answers]})
triviaqa = []
for completion, aliases in TRIVIAQA:
    answer = completion.lstrip()
    triviaqa.append({"completion": completion, "references": aliases, "answers": [answer],
                     "matches": [any(exact_match(answer, a, ignore_case=True, ignore_punctuation=True) for a in aliases)]})
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "answer_scores.json"), "w") as f:
    json.dump({"gsm8k": gsm8k, "triviaqa": triviaqa}, f, indent=1)
    f.write("\n")
