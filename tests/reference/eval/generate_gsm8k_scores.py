"""GSM8K answers scored with Python's `re`, as lm-evaluation-harness's gsm8k task
(version 3) scores them: its two regex filters (RegexFilter, then take_first)
and Hugging Face evaluate's exact_match with the task's regexes_to_ignore.
Writes gsm8k_scores.json beside this file; test_evaluation checks hone's
PCRE2-based scoring against it. Run: python3 generate_gsm8k_scores.py"""
import json
import os
import re

STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
IGNORE = [",", "\\$", "(?s).*#### ", "\\.$"]


def extract(regex, response, group_select):
    match = regex.findall(response)
    if not match:
        return "[invalid]"
    match = match[group_select]
    if isinstance(match, tuple):
        match = [m for m in match if m]
        match = match[0] if match else "[invalid]"
    return match.strip()


def exact_match(prediction, reference):
    for pattern in IGNORE:
        prediction = re.sub(pattern, "", prediction)
        reference = re.sub(pattern, "", reference)
    return prediction.lower() == reference.lower()


REFERENCE = "She sold 48/2 = <<48/2=24>>24 clips in May.\nShe sold 48+24 = <<48+24=72>>72 clips.\n#### 72"
CASES = [
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

cases = []
for completion, reference in CASES:
    strict, flexible = extract(STRICT, completion, 0), extract(FLEXIBLE, completion, -1)
    cases.append({"completion": completion, "reference": reference,
                  "strict_answer": strict, "flexible_answer": flexible,
                  "strict_match": exact_match(strict, reference), "flexible_match": exact_match(flexible, reference)})
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "gsm8k_scores.json"), "w") as f:
    json.dump(cases, f, indent=1)
    f.write("\n")
