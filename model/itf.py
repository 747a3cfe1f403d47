"""Traces as ITF JSON (Apalache ADR-015, the format Quint writes and quint-connect reads).

Each state carries the spec's variables (indexed ones as JSON arrays), plus
`mbt::actionTaken` (the event that led to it; "init" for the first) and
`mbt::nondetPicks` (its arguments). `#meta` names the configuration, the goal, and the
violated property. Integers outside JSON's safe range use {"#bigint": "..."}.

`read` accepts any ITF trace that uses the spec's variable and action names, e.g. one
written by Quint or Apalache: picks may be plain values or Quint's {"tag": "Some",
"value": ...} options; only the picks are needed, states are recomputed by replay.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from model.interpreter import flat, nested
from model.trace import Step, Trace
from spec.config import SpecError

SAFE = 2**53 - 1
FORMAT_URL = "https://apalache-mc.org/docs/adr/015adr-trace.html"


def _encode(value):
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if -SAFE <= value <= SAFE else {"#bigint": str(value)}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    return value


def _decode(value):
    if isinstance(value, dict):
        if "#bigint" in value:
            return int(value["#bigint"])
        if "#tup" in value:
            return [_decode(v) for v in value["#tup"]]
        if set(value) == {"tag", "value"}:  # Quint option / variant
            return None if value["tag"] == "None" else _decode(value["value"])
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def to_itf(trace: Trace, config: dict, description: str) -> dict:
    """Serialise a replayed trace (states present)."""
    if not trace.states:
        raise ValueError("replay the trace (model.trace.confirm) before writing it")
    variables = list(nested(trace.states[0]).keys())
    states = []
    for i, state in enumerate(trace.states):
        entry: dict[str, Any] = {"#meta": {"index": i}}
        if i == 0:
            entry["mbt::actionTaken"] = "init"
            entry["mbt::nondetPicks"] = _encode(nested(trace.init))
        else:
            step = trace.steps[i - 1]
            entry["mbt::actionTaken"] = step.event
            entry["mbt::nondetPicks"] = _encode(nested(step.args))
        entry.update(_encode(nested(state)))
        states.append(entry)
    meta = {
        "format": "ITF",
        "format-description": FORMAT_URL,
        "source": "spec/ (vLLM 0.32.0 reservation/discard contract)",
        "description": description,
        "config": config,
        "kind": trace.kind,
        "goal": trace.goal,
        "mechanisms": trace.mechanisms,
    }
    if trace.kind == "violation":
        meta["violated"] = trace.goal
        meta["violated_at_step"] = len(trace.steps)
    return {"#meta": meta, "vars": variables, "states": states}


def write(path: Path, document: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1, sort_keys=False) + "\n")


def read(path: Path | str) -> tuple[dict, Trace]:
    """Parse an ITF trace: returns its #meta and a Trace of init picks and steps."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SpecError(f"{path}: not a readable ITF JSON file ({exc})") from None
    states = doc.get("states")
    if not isinstance(states, list) or not states:
        raise SpecError(f"{path}: an ITF trace needs a non-empty 'states' list")
    meta = doc.get("#meta", {})
    steps, init = [], None
    for i, state in enumerate(states):
        action = state.get("mbt::actionTaken")
        picks = _decode(state.get("mbt::nondetPicks", {}))
        if action is None:
            raise SpecError(
                f"{path}: state {i} has no 'mbt::actionTaken'; record the action taken "
                "(Quint: run with --mbt) so the trace can be replayed"
            )
        picks = {k: v for k, v in (picks or {}).items() if v is not None}
        if i == 0:
            if action not in ("init", "step", ""):
                raise SpecError(f"{path}: the first state's action must be 'init', got {action!r}")
            init = flat(picks) if picks else flat({"prompt_len": _decode(state.get("num_prompt_tokens"))})
        else:
            steps.append(Step(action, flat(picks)))
    config = meta.get("config", {})
    trace = Trace(
        config=config.get("name", "?") if isinstance(config, dict) else str(config),
        init=init,
        steps=steps,
        goal=meta.get("goal", meta.get("violated", "")),
        kind=meta.get("kind", "violation" if meta.get("violated") else "witness"),
        mechanisms=list(meta.get("mechanisms", [])),
    )
    return meta, trace
