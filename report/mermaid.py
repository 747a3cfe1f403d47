"""A counterexample as a Mermaid sequenceDiagram: engine, scheduler, runner and the queue
of steps in flight, step by step.

Each schedule step shows what the scheduler scheduled and reserved and what the runner
decided (samples or discards, with its rule evaluated); each delivery shows which
step's output it carries and what changed; the step where a property breaks is shaded,
and a firing assert ends the diagram. Text is escaped for Mermaid (`;` ends a statement,
`#` starts an entity, `<` `>` are HTML), then line breaks are added as `<br/>`.
"""

from __future__ import annotations

import re

from vllm_contract.model.interpreter import nested
from vllm_contract.report.story import changes, delivered_step, picks, scheduled
from vllm_contract.spec.config import Config
from vllm_contract.spec.properties import ASSERTS

BAD = "rect rgba(220, 50, 50, 0.12)"
FAULT = "rect rgba(240, 170, 40, 0.15)"


def esc(text: str) -> str:
    """Mermaid-safe text for a message or a note."""
    return re.sub(r"[#;<>]", lambda m: _ENTITY[m.group(0)], text).replace("%%", "% %")


_ENTITY = {"#": "#35;", ";": "#59;", "<": "#lt;", ">": "#gt;"}


def lines(*parts: str) -> str:
    return "<br/>".join(esc(p) for p in parts if p)


def diagram(cfg: Config, trace, prop: str, violated_at: dict[int, list[str]]) -> str:
    """The sequenceDiagram of a replayed trace."""
    out = [
        "sequenceDiagram",
        "    participant E as EngineCore",
        "    participant S as Scheduler",
        f"    participant R as {esc(cfg.run.title)}",
        "    participant Q as in-flight queue",
    ]
    init = nested(trace.init)
    prompts = ", ".join(f"r{r}: {n} prompt tokens" for r, n in enumerate(init.get("prompt_len", [])))
    out.append("    Note over E,Q: " + lines("add_request: " + prompts))
    for t, step in enumerate(trace.steps):
        n = t + 1
        before, after = trace.states[t], trace.states[t + 1]
        args = nested(step.args)
        broken = violated_at.get(n, [])
        fault = step.event == "schedule" and (any(args.get("stale_read", [])) or any(args.get("extra", [])))
        fault = fault or (step.event == "deliver" and args.get("kv_fail_req", -1) not in (-1, None))
        shade = BAD if broken else FAULT if fault else None
        if shade:
            out.append(f"    {shade}")
        body = _step(cfg, trace, t, step.event, args, before, after)
        out += ["    " + line for line in body]
        props = [b for b in broken if not b.startswith("assert fires")]
        if props:
            # a property a line: Mermaid sizes a note spanning two participants by their
            # distance, not by its text (report/check.mjs fails a note that runs past its box)
            out.append("    Note over S,R: " + lines(f"step {n} violates", *props))
        fired = trace.fired[t] if trace.fired else []
        if fired:
            statement = ASSERTS[fired[0]].statement or fired[0]
            out.append(f"    Note over S: {lines('assert fires:', statement)}")
            out.append(f"    S--xE: {esc('AssertionError: the engine dies')}")
        if shade:
            out.append("    end")
    return "\n".join(out) + "\n"


def _step(cfg: Config, trace, t: int, event: str, args: dict, before: dict, after: dict) -> list[str]:
    n = t + 1
    out = []
    if event == "schedule":
        shown = picks(cfg, event, trace.steps[t].args) or "budget=1"
        out.append("E->>S: " + esc(f"{n}. schedule({shown})"))
        rows = scheduled(cfg, trace, t)
        if not rows:
            out.append("Note over S: nothing scheduled")
        for s in rows:
            note = [f"r{s.r}: {s.n} token(s), reserves {s.reserved}"]
            delta = changes(cfg, before, after, s.r)
            if delta:
                note.append(", ".join(delta[:4]))
                if len(delta) > 4:
                    note.append(", ".join(delta[4:]))
            out.append(f"Note over S: {lines(*note)}")
            out.append("S->>R: " + esc(f"step {n}: r{s.r} n={s.n}"))
            stale = args.get("stale_read", [False] * cfg.requests)
            extra = args.get("extra", [0] * cfg.requests)
            if stale and stale[s.r]:
                out.append("Note over R: " + lines("fault: stale slot read", "the slot keeps its previous occupant"))
            verdict = f"discards r{s.r}" if s.discards else f"samples r{s.r}: {s.sampled} token(s)"
            if extra and extra[s.r]:
                verdict += f" ({extra[s.r]} over-delivered)"
            out.append("Note over R: " + lines(s.rule))
            out.append("R->>Q: " + esc(f"step {n}: {verdict}"))
    elif event == "deliver":
        k = delivered_step(trace, t)
        returned = ", ".join(
            f"r{r}: {before[('q_sampled', 0, r)]}" for r in range(cfg.requests) if before[("q_scheduled", 0, r)]
        )
        failed = args.get("kv_fail_req", -1)
        what = f"{n}. output of step {k}" + (f" ({returned} token(s))" if returned else "")
        if failed is not None and failed >= 0:
            what += f" + KV-load failure (r{failed}, block {args.get('kv_fail_block', 0)})"
        stops = [f"r{r} stops at token {s}" for r, s in enumerate(args.get("stop", [])) if s]
        out.append(f"Q->>S: {esc(what)}")
        for r in range(cfg.requests):
            delta = changes(cfg, before, after, r)
            if delta:
                out.append("Note over S: " + lines(f"r{r}: " + ", ".join(delta[:4]), ", ".join(delta[4:])))
        if stops:
            out.append(f"Note over S: {lines(*stops)}")
    else:
        call = {
            "preempt": f"preempt(r{args.get('req')})",
            "reset_prefix_cache": "reset_prefix_cache()",
            "stream_update": f"stream_update(r{args.get('req')}, +{args.get('new_tokens')} tokens)",
            "abort": f"abort(r{args.get('req')})",
        }.get(event, event)
        out.append("E->>S: " + esc(f"{n}. {call}"))
        for r in range(cfg.requests):
            delta = changes(cfg, before, after, r)
            if delta:
                out.append("Note over S: " + lines(f"r{r}: " + ", ".join(delta[:4]), ", ".join(delta[4:])))
    return out
