"""Traces as ITF JSON (Apalache ADR-015, the format Quint writes and quint-connect reads).

Each state carries the spec's variables (indexed ones as JSON arrays), plus
`mbt::actionTaken` (the event that led to it; "init" for the first) and
`mbt::nondetPicks` (its arguments). `#meta` names the configuration, the goal, and the
violated property. Integers outside JSON's safe range use {"#bigint": "..."}.

`read` accepts any ITF trace that uses the spec's variable and action names, e.g. one
written by Quint or Apalache: picks may be plain values or Quint's {"tag": "Some",
"value": ...} options. The picks drive the replay; the states it records under the spec's
variable names are then compared with the replayed ones (codegen refuses a trace whose
states contradict the spec). `#meta` must say what the trace shows: `"kind"` ("witness",
"violation", or "divergence": a trace a vLLM target differed from the model on, written
by `vllm-contract fuzz`) or `"violated": PROPERTY`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from model.interpreter import flat, nested
from model.trace import Step, Trace
from spec.errors import SpecError

SAFE = 2**53 - 1
KINDS = ("violation", "witness", "divergence")  # what a trace shows (#meta kind)
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


def recorded(config: dict, init: dict, steps: list, states: list[dict], meta: dict) -> dict:
    """An ITF document of picks and of states someone saw rather than replayed (a vLLM
    engine's own values, as the monitor records them): a state may name fewer variables
    than the spec has, or none; `read` and the replay compare those it names. `init` and
    each step's picks are named ({"prompt_len": [16]}); `steps` is [(event, picks)]."""
    if len(states) != len(steps) + 1:
        raise ValueError(f"{len(steps)} step(s) need {len(steps) + 1} states, got {len(states)}")
    variables: list[str] = []
    out = []
    for i, state in enumerate(states):
        event, picks = ("init", init) if i == 0 else steps[i - 1]
        entry: dict[str, Any] = {"#meta": {"index": i}, "mbt::actionTaken": event, "mbt::nondetPicks": _encode(picks)}
        entry.update(_encode(dict(state)))
        variables += [name for name in state if name not in variables]
        out.append(entry)
    head = {"format": "ITF", "format-description": FORMAT_URL, "config": config, "mechanisms": [], **meta}
    return {"#meta": head, "vars": variables, "states": out}


def text(document: dict) -> str:
    """An ITF document as written: the same document, the same bytes."""
    return json.dumps(document, indent=1, sort_keys=False) + "\n"


def write(path: Path, document: dict | str) -> None:
    """Write a document, or its text (what the prover's workers and cache hand over:
    serialising a trace costs more than reading it back)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(document if isinstance(document, str) else text(document))


def _where(path: Path, i: int) -> str:
    return f"{path}: state {i}"


# the longest trace read: generated tests replay every step, and the longest the prover or
# the fuzzer writes is a few dozen steps
MAX_STATES = 10_000


def read(path: Path | str) -> tuple[dict, Trace]:
    """Parse an ITF trace: returns its #meta and a Trace of init picks and steps, with
    the states it records (`Trace.recorded`) so a replay can be compared with them.
    Anything malformed is a SpecError naming the file and what to fix."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SpecError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(
            f"{path}: not UTF-8 text (byte {raw[exc.start]:#04x} at offset {exc.start}); an ITF trace is JSON in UTF-8"
        ) from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"{path}: not valid JSON ({exc})") from None
    except RecursionError:
        raise SpecError(
            f"{path}: nested too deeply to be an ITF trace (its values are at most a few levels deep)"
        ) from None
    if not isinstance(doc, dict):
        raise SpecError(
            f"{path}: the top level of an ITF trace must be an object with a 'states' list, "
            f"not a {type(doc).__name__} (see {FORMAT_URL})"
        )
    states = doc.get("states")
    if not isinstance(states, list) or not states:
        raise SpecError(f"{path}: an ITF trace needs a non-empty 'states' list")
    if len(states) > MAX_STATES:
        raise SpecError(
            f"{path}: {len(states):,} states; a trace replayed as a test has at most {MAX_STATES:,} "
            "(shrink it, e.g. with `vllm-contract fuzz`'s shrinker, or cut it at the step that matters)"
        )
    meta = doc.get("#meta", {})
    if not isinstance(meta, dict):
        raise SpecError(f"{path}: '#meta' must be an object, not a {type(meta).__name__}")
    kind = meta.get("kind")
    if kind is None and meta.get("violated"):
        kind = "violation"
    if kind not in KINDS:
        # a trace that says nothing is not silently a witness (it would "pass" anything)
        raise SpecError(
            f'{path}: #meta must say what the trace shows: add "kind": "witness" (a healthy path), '
            f'"violated": "PROPERTY" (a counterexample) or "kind": "divergence" (a trace vLLM differed '
            f"from the model on) to its '#meta'" + (f"; got kind {kind!r}" if kind is not None else "")
        )
    mechanisms = meta.get("mechanisms", [])
    if not isinstance(mechanisms, list) or not all(isinstance(m, str) for m in mechanisms):
        raise SpecError(f"{path}: #meta 'mechanisms' must be a list of names, got {mechanisms!r}")
    steps, init, recorded = [], None, []
    for i, state in enumerate(states):
        if not isinstance(state, dict):
            raise SpecError(f"{_where(path, i)} is a {type(state).__name__}, not an object of variables")
        action = state.get("mbt::actionTaken")
        picks = _decode(state.get("mbt::nondetPicks", {}))
        if action is None:
            raise SpecError(
                f"{_where(path, i)} has no 'mbt::actionTaken'; record the action taken "
                "(Quint: run with --mbt) so the trace can be replayed"
            )
        if not isinstance(action, str):
            raise SpecError(f"{_where(path, i)}: 'mbt::actionTaken' must be an action name, got {action!r}")
        if picks is not None and not isinstance(picks, dict):
            raise SpecError(f"{_where(path, i)}: 'mbt::nondetPicks' must be an object, got {picks!r:.60}")
        picks = {k: v for k, v in (picks or {}).items() if v is not None}
        recorded.append({k: _decode(v) for k, v in state.items() if k != "#meta" and not k.startswith("mbt::")})
        if i == 0:
            if action not in ("init", "step", ""):
                raise SpecError(f"{path}: the first state's action must be 'init', got {action!r}")
            init = flat(picks) if picks else flat({"prompt_len": _decode(state.get("num_prompt_tokens"))})
        else:
            steps.append(Step(action, flat(picks)))
    config = meta.get("config", {})
    goal = meta.get("goal", meta.get("violated", ""))
    trace = Trace(
        config=config.get("name", "?") if isinstance(config, dict) else str(config),
        init=init,
        steps=steps,
        goal=goal if isinstance(goal, str) else str(goal),
        kind=kind,
        mechanisms=list(mechanisms),
        recorded=recorded,
    )
    return meta, trace
