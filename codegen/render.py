"""Render a case as a pytest module (jinja2), deterministically."""

from __future__ import annotations

from pathlib import Path

import jinja2

from codegen.cases import LEGEND, CaseSource, describe_expect
from spec.properties import PROPERTIES
from targets.harness import Expect

TEMPLATES = Path(__file__).parent / "templates"


def py(value) -> str:
    """A Python literal for a value, with a stable spelling."""
    if isinstance(value, Expect):
        fields = ", ".join(f"{name}={py(getattr(value, name))}" for name in value.__dataclass_fields__)
        return f"Expect({fields})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{py(k)}: {py(v)}" for k, v in value.items()) + "}"
    if isinstance(value, tuple):
        return "(" + ", ".join(py(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, list):
        return "[" + ", ".join(py(v) for v in value) + "]"
    return repr(value)


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["py"] = py
    return env


def render(src: CaseSource, env: jinja2.Environment | None = None) -> str:
    env = env or environment()
    text = env.get_template("case.py.j2").render(
        src=src, case=src.case, cfg=src.cfg, legend=LEGEND, describe=describe_expect,
        prop=PROPERTIES.get(src.case.property) if src.case.property else None,
    )
    # no trailing spaces: the table's empty columns would leave some
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"
