#!/usr/bin/env python3
"""Renders a chat template as transformers' apply_chat_template does (its Jinja
environment: sandboxed, trim_blocks, lstrip_blocks, loop controls,
raise_exception), for test_instruct to compare with the text hone trains on.

usage: render_chat_template.py TEMPLATE MESSAGES_JSON ADD_GENERATION_PROMPT(0|1) OUT
Exits 77 (skipped) where jinja2 is missing.
"""
import json
import sys

try:
    from jinja2.exceptions import TemplateError
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("SKIPPED: python3 has no jinja2 (Debian: python3-jinja2)")
    sys.exit(77)


def raise_exception(message):
    raise TemplateError(message)


def main():
    template_path, messages_path, generation_prompt, out_path = sys.argv[1:5]
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.globals["raise_exception"] = raise_exception
    with open(template_path, encoding="utf-8") as f:
        template = env.from_string(f.read())
    with open(messages_path, encoding="utf-8") as f:
        messages = json.load(f)
    text = template.render(messages=messages, add_generation_prompt=generation_prompt == "1")
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    main()
