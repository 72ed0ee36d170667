#!/usr/bin/env python3
"""Renders every case in cases.json with Python's jinja2, set up the way
Hugging Face transformers' `apply_chat_template` sets it up, and writes the
results to expected/: `<case>.txt` holds the rendered prompt, `<case>.error`
the message of the exception a template raised.

The Rust test (crates/rocmforge-core/tests/chat_templates.rs) renders the
same cases with minijinja and compares byte for byte, so what a model was
trained on (HF's rendering) is the reference.

Usage: pip install jinja2 && python3 testdata/chat-templates/generate.py
"""

import json
import sys
from datetime import datetime
from pathlib import Path

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = Path(__file__).resolve().parent

# strftime_now reads the clock; the cases pin it so outputs do not depend on
# the day they are generated. The Rust test pins the same instant.
FIXED_NOW = datetime(2025, 3, 14, 15, 9, 26)


class RaisedException(Exception):
    pass


def raise_exception(message):
    # transformers raises jinja2.exceptions.TemplateError(message).
    raise RaisedException(message)


def strftime_now(fmt):
    return FIXED_NOW.strftime(fmt)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers' own filter, replacing jinja2's HTML-escaping one.
    return json.dumps(
        x,
        ensure_ascii=ensure_ascii,
        indent=indent,
        separators=separators,
        sort_keys=sort_keys,
    )


def environment():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, case, conversations, spec_tools):
    source = (HERE / case["template"]).read_text(encoding="utf-8")
    variables = {
        "messages": conversations[case["conversation"]],
        # transformers passes these even when the caller has none; a case
        # with "tools": true gets the spec's tools list.
        "tools": spec_tools if case.get("tools") else None,
        "documents": None,
        "add_generation_prompt": case.get("add_generation_prompt", True),
        "bos_token": case["bos"],
        "eos_token": case["eos"],
    }
    if "enable_thinking" in case:
        variables["enable_thinking"] = case["enable_thinking"]
    return env.from_string(source).render(**variables)


def main():
    spec = json.loads((HERE / "cases.json").read_text(encoding="utf-8"))
    out_dir = HERE / "expected"
    out_dir.mkdir(exist_ok=True)
    for old in out_dir.iterdir():
        old.unlink()
    env = environment()
    for case in spec["cases"]:
        try:
            text, ext = render(env, case, spec["conversations"], spec["tools"]), "txt"
        except RaisedException as e:
            text, ext = str(e), "error"
        (out_dir / f"{case['name']}.{ext}").write_bytes(text.encode("utf-8"))
        print(f"{case['name']}.{ext}", file=sys.stderr)


if __name__ == "__main__":
    print(f"jinja2 {jinja2.__version__}", file=sys.stderr)
    main()
