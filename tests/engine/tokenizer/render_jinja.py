#!/usr/bin/env python3
"""Renders chat templates with Python jinja2 exactly as transformers' apply_chat_template does.

chat_template_test.cc compares Saturn's renderer (engine/tokenizer/chat_template.h) with this.
Usage: render_jinja.py CASES.json RESULTS.json
  CASES.json:   [{"template", "messages", "add_generation_prompt", "bos_token", "eos_token",
                  "extra": {name: string}}, ...]
  RESULTS.json: [{"ok": true, "output": ...} | {"ok": false, "raised": bool, "error": ...}, ...]
  "raised" is true when the template's own raise_exception() raised.
Exits 3 when jinja2 is not importable, so that the test can skip.
"""
import json
import sys
from datetime import datetime

try:
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    sys.exit(3)


class RaisedByTemplate(jinja2.exceptions.TemplateError):
    pass


# transformers' _compile_jinja_template: the same environment, filters and globals.
def raise_exception(message):
    raise RaisedByTemplate(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    results = []
    for case in cases:
        try:
            out = env.from_string(case["template"]).render(
                messages=case["messages"], tools=None, documents=None,
                add_generation_prompt=case["add_generation_prompt"],
                bos_token=case["bos_token"], eos_token=case["eos_token"], **case.get("extra", {}))
            results.append({"ok": True, "output": out})
        except Exception as e:  # every failure is a result to compare, not a crash
            results.append({"ok": False, "raised": isinstance(e, RaisedByTemplate),
                            "error": f"{type(e).__name__}: {e}"})
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
