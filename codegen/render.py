"""Render a case as a pytest module (jinja2), deterministically."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jinja2
from vllm_contract.codegen.case import TARGETS, Expect
from vllm_contract.codegen.cases import LEGEND, CaseSource, describe_expect
from vllm_contract.spec.citations import in_words
from vllm_contract.spec.properties import PROPERTIES


def replay_targets(cfg) -> str:
    """The targets a case's Replay line names: every one that plays it without building
    vLLM's model runner, the Triton kernels only for a runner they implement (elsewhere
    the kernel target would skip it, and a copied command should not ask for a skip)."""
    return ",".join(t.name for t in TARGETS if not t.runner and (t.name != "kernel" or cfg.run.kernel))


TEMPLATES = Path(__file__).parent / "templates"


def py(value) -> str:
    """A Python literal for a value, with a stable spelling."""
    if isinstance(value, Expect):
        # a field at its default is left out: a module says what its arm does, no more
        fields = ", ".join(
            f"{name}={py(getattr(value, name))}"
            for name, spec in value.__dataclass_fields__.items()
            if spec.default is dataclasses.MISSING or getattr(value, name) != spec.default
        )
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


def cited(prop_name: str, release: str) -> str:
    """Where vLLM implements a property in a release: each cited file with its lines."""
    from vllm_contract.spec import citations

    known = citations.load()
    refs = []
    for cid in PROPERTIES[prop_name].cite.split():
        if cid in known and release in known[cid].lines:
            refs.append(citations.ref(cid, release)[0])
    return ", ".join(refs) if refs else "no vLLM line"


def render(src: CaseSource, env: jinja2.Environment | None = None) -> str:
    env = env or environment()
    text = env.get_template("case.py.j2").render(
        src=src,
        case=src.case,
        cfg=src.cfg,
        legend=LEGEND,
        describe=lambda exp, label="": describe_expect(exp, src.case.property, label),
        prop=PROPERTIES.get(src.case.property) if src.case.property else None,
        where=cited(src.case.property, src.cfg.prof.release) if src.case.property else "",
        note=in_words(src.cfg.note, src.cfg.prof.release),
        replay_targets=replay_targets(src.cfg),
    )
    # no trailing spaces: the table's empty columns would leave some
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"
