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

import functools
import json
from pathlib import Path
from typing import Any

from vllm_contract.model.interpreter import flat, nested
from vllm_contract.model.trace import Step, Trace
from vllm_contract.spec.errors import SpecError
from vllm_contract.spec.user_input import MIB, loads, read_text, whole_number

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


def _decode(value, where: str = "a value"):
    """A value as the spec reads it: {"#bigint": "DIGITS"} an int (ASCII digits only),
    {"#tup": [...]} a list, a Quint option its value (None for None)."""
    if isinstance(value, dict):
        if "#bigint" in value:
            number = whole_number(value["#bigint"])
            if number is None:
                raise SpecError(
                    f"{where}: #bigint {value['#bigint']!r} is not a whole number in ASCII digits "
                    '(e.g. {"#bigint": "-12345678901234567890"})'
                )
            return number
        if "#tup" in value:
            return [_decode(v, where) for v in value["#tup"]]
        if set(value) == {"tag", "value"}:  # Quint option / variant
            return None if value["tag"] == "None" else _decode(value["value"], where)
        return {k: _decode(v, where) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v, where) for v in value]
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
    meta: dict[str, Any] = {
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
# the fuzzer writes is a few dozen steps; the monitor's window is at most a few thousand
MAX_STATES = 10_000
# the largest file read (a few KB per state at most): bounds the memory a file can take
MAX_BYTES = 32 * MIB


@functools.cache
def value_sorts() -> dict[str, type]:
    """The sort (int or bool) of every event argument and state variable by name, from
    their declarations: each name has one sort in every configuration."""
    from vllm_contract.spec.catalog import INIT, events_for
    from vllm_contract.spec.matrix import MATRIX
    from vllm_contract.spec.vocabulary import DECLS

    sorts: dict[str, set] = {d.name: {d.sort} for d in DECLS}
    for cfg in MATRIX:
        for event in (INIT, *events_for(cfg)):
            for arg in event.args(cfg):
                sorts.setdefault(arg.name, set()).add(arg.sort)
    return {name: next(iter(s)) for name, s in sorts.items() if len(s) == 1}


def _typed(where: str, values: dict) -> None:
    """Each value of a name the spec declares has the name's sort: a whole number (not
    true/false, not a string, not a float) or True/False; lists of them, nested."""
    sorts = value_sorts()
    for name, value in values.items():
        sort = sorts.get(name)
        if sort is None:
            continue  # not the spec's: the replay names it (an unknown argument), or it is not compared
        stack = [(name, value)]
        while stack:
            label, v = stack.pop()
            if isinstance(v, list):
                stack.extend((f"{label}[{i}]", item) for i, item in reversed(list(enumerate(v))))
                continue
            ok = isinstance(v, bool) if sort is bool else isinstance(v, int) and not isinstance(v, bool)
            if not ok:
                want = "true or false" if sort is bool else 'a whole number (a JSON integer or {"#bigint": "DIGITS"})'
                raise SpecError(f"{where} {label} is {json.dumps(v, ensure_ascii=False)}; the spec's {name} is {want}")


def _of(meta: dict, key: str, types: tuple, what: str, path: Path | str, prefix: str = "#meta") -> Any:
    value = meta.get(key)
    if value is not None and (not isinstance(value, types) or (bool not in types and isinstance(value, bool))):
        raise SpecError(f"{path}: {prefix}.{key} must be {what}, got {json.dumps(value)}")
    return value


# a monitor's record (targets/monitor/trace.py): field -> (JSON types, words)
MONITOR_FIELDS = {
    "release": ((str,), "a release such as 0.32.0"),
    "engine_event": ((int,), "a whole number"),
    "request": ((str,), "a request id"),
    "requests": ((list,), "a list of request ids"),
    "when": ((str,), "a string"),
    "fires": ((str,), "an assert's name or empty"),
    "drop": ((bool,), "true or false"),
    "window": ((int,), "a whole number"),
    "outside": ((dict,), "an object of step number -> request count"),
    "notes": ((list,), "a list of strings"),
    "model": ((str,), "a string"),
}


def _check_meta(path: Path, meta: dict, steps: int) -> None:
    """#meta's fields have their types and do not contradict one another or the trace."""
    for key in ("kind", "violated", "goal", "description", "source"):
        _of(meta, key, (str,), "a string", path)
    config = _of(meta, "config", (dict,), "an object (the configuration's record, with a name)", path)
    if config is not None and not isinstance(config.get("name"), str):
        name = json.dumps(config.get("name"))
        raise SpecError(f"{path}: #meta.config.name must be the configuration's name, got {name}")
    if meta.get("violated") and meta.get("goal") and meta["violated"] != meta["goal"]:
        raise SpecError(
            f"{path}: #meta.violated is {meta['violated']!r} but #meta.goal is {meta['goal']!r}: "
            "the file contradicts itself; fix the one that is wrong"
        )
    at = _of(meta, "violated_at_step", (int,), "a whole number (the step the property breaks)", path)
    if at is not None and at != steps:
        raise SpecError(
            f"{path}: #meta.violated_at_step is {at} but the trace has {steps} step(s): a violation is at its "
            "last step; fix one of them"
        )
    monitor = _of(meta, "monitor", (dict,), "an object (the monitor's record)", path)
    if monitor is None:
        return
    for key, (types, what) in MONITOR_FIELDS.items():
        _of(monitor, key, types, what, path, "#meta.monitor")
    if not all(isinstance(r, str) for r in monitor.get("requests") or []):
        got = json.dumps(monitor["requests"])[:80]
        raise SpecError(f"{path}: #meta.monitor.requests must be a list of request ids, got {got}")
    if not all(isinstance(n, str) for n in monitor.get("notes") or []):
        raise SpecError(f"{path}: #meta.monitor.notes must be a list of strings")
    for step, count in (monitor.get("outside") or {}).items():
        if whole_number(step) is None or isinstance(count, bool) or not isinstance(count, int):
            raise SpecError(
                f"{path}: #meta.monitor.outside must map step numbers to request counts, got {step!r}: {count!r}"
            )
    release = monitor.get("release")
    profile = config.get("profile") if config is not None else None
    named = isinstance(profile, str) and profile.startswith("vllm-")
    if release is not None and named and profile != f"vllm-{release}":
        raise SpecError(
            f"{path}: #meta.monitor.release is {release} but #meta.config.profile is {profile}: the file "
            "contradicts itself about the release that ran; fix the one that is wrong"
        )
    requests = monitor.get("requests")
    if requests is not None and config is not None and isinstance(config.get("requests"), int):
        if len(requests) != config["requests"]:
            raise SpecError(
                f"{path}: #meta.monitor.requests names {len(requests)} request(s) but #meta.config.requests is "
                f"{config['requests']}: the file contradicts itself; fix the one that is wrong"
            )


def read(path: Path | str) -> tuple[dict, Trace]:
    """Parse an ITF trace: returns its #meta and a Trace of init picks and steps, with
    the states it records (`Trace.recorded`) so a replay can be compared with them.
    Anything malformed is a SpecError naming the file, the field and what to fix: the
    file is read only when it is a regular file of at most MAX_BYTES, its JSON must
    name each key once and hold no NaN or Infinity (spec/user_input.py), and every value
    of a name the spec declares has its sort (a whole number, or true/false)."""
    path = Path(path)
    doc = loads(read_text(path, MAX_BYTES, "an ITF trace"), str(path))
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
    _check_meta(path, meta, len(states) - 1)
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
        picks = _decode(state.get("mbt::nondetPicks", {}), f"{_where(path, i)}, mbt::nondetPicks")
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
        _typed(f"{_where(path, i)}, mbt::nondetPicks", picks)
        values = {
            k: _decode(v, f"{_where(path, i)}, {k}")
            for k, v in state.items()
            if k != "#meta" and not k.startswith("mbt::")
        }
        _typed(f"{_where(path, i)},", values)
        recorded.append(values)
        if i == 0:
            if action not in ("init", "step", ""):
                raise SpecError(f"{path}: the first state's action must be 'init', got {action!r}")
            init = flat(picks) if picks else flat({"prompt_len": values.get("num_prompt_tokens")})
        else:
            steps.append(Step(action, flat(picks)))
    assert init is not None  # states is not empty: its first state set init
    config = meta.get("config") or {}
    goal = meta.get("goal", meta.get("violated", ""))
    trace = Trace(
        config=config.get("name", "?"),
        init=init,
        steps=steps,
        goal=goal or "",
        kind=kind,
        mechanisms=list(mechanisms),
        recorded=recorded,
    )
    return meta, trace
