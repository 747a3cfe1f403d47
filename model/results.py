"""The prover's results as records: one verdict row per configuration and property, and summary.json.

`prove` writes them, and report, generate, diff-versions, explain and the benchmarks read
them back through `load_summary`, which refuses (one line: run the prover again) a
summary that cannot stand for the current code: missing, unreadable, of the wrong shape,
listing no results, or computed from other sources than the ones here now (its `key`).
"""

from __future__ import annotations

import builtins
import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from vllm_contract.spec.errors import BadInput
from vllm_contract.spec.verdicts import Fired, Kind, Verdict

ROOT = Path(__file__).resolve().parent.parent
# what a verdict is computed from: the contract, the matrix and the prover
KEYED = ("spec", "model")


# the JSON types of a result's fields (the verdict and the reaction are parsed apart)
FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "config": (str,),
    "runner": (str,),
    "clamp": (bool,),
    "events": (list,),
    "faults": (list,),
    "profile": (str,),
    "property": (str,),
    "expected": (str,),
    "depth": (int, type(None)),
    "seconds": (int, float),
    "trace": (str, type(None)),
    "first_seconds": (int, float, type(None)),
    "found_seconds": (int, float, type(None)),
    "found_by": (str,),
    "classes": (list,),
    "mechanisms": (list,),
    "scope": (dict,),
    "note": (str,),
}


# what differs between two runs of the same code: how long things took, and whether the
# random walks or the BMC came first (the walks have a time budget)
TIMINGS = ("seconds", "first_seconds", "found_seconds", "found_by")


def without_timings(value):
    """A summary (or a part of one) with TIMINGS left out, for comparing two runs."""
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if k not in TIMINGS}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


class StaleSummary(BadInput):
    """summary.json is missing, malformed, empty or from other sources; the message says to run the prover."""


@dataclass(frozen=True)
class VerdictRow:
    """One verdict: a property under a configuration (summary.json's `results` entries)."""

    config: str
    runner: str
    clamp: bool
    events: list
    faults: list
    profile: str
    property: str
    verdict: Verdict
    expected: str  # the matrix's expectation, as spelled there ("reached" for a witness)
    depth: int | None
    seconds: float
    trace: str | None = None
    first_seconds: float | None = None  # the shortest counterexample alone, before classes
    # the first counterexample of any kind: by the random walks before the BMC ("walk") or the BMC's
    found_seconds: float | None = None
    found_by: str = ""
    classes: list = field(default_factory=list)
    mechanisms: list = field(default_factory=list)
    fired: Fired | None = None  # a violation: what vLLM does at the violating step
    scope: dict = field(default_factory=dict)  # the parameter space the verdict covers
    note: str = ""

    # the field `property` above shadows the builtin in this class's body (for mypy)
    @builtins.property
    def ok(self) -> bool:
        return str(self.verdict) == self.expected

    @builtins.property
    def scenario(self) -> str:
        return self.config.split("@", 1)[0]

    @builtins.property
    def release(self) -> str | None:
        return self.config.split("@", 1)[1] if "@" in self.config else None

    @builtins.property
    def violated(self) -> bool:
        """A counterexample was found (a violation, or a frontier's)."""
        return self.verdict.kind in (Kind.VIOLATED, Kind.FRONTIER) and self.trace is not None

    def to_json(self) -> dict:
        out = asdict(self)
        out["verdict"] = str(self.verdict)
        out.pop("fired")
        out["reaction"] = str(self.fired) if self.fired is not None else ""
        out["seconds"] = round(self.seconds, 4)
        if self.first_seconds is not None:
            out["first_seconds"] = round(self.first_seconds, 4)
        if self.found_seconds is not None:
            out["found_seconds"] = round(self.found_seconds, 4)
        # keep summary.json's key order: reaction where it always was
        ordered = {}
        for f in fields(self):
            name = "reaction" if f.name == "fired" else f.name
            ordered[name] = out[name]
        ordered["match"] = self.ok
        return ordered

    @staticmethod
    def from_json(data: Any, where: str = "summary.json") -> VerdictRow:
        if not isinstance(data, dict):
            raise StaleSummary(f"{where}: a result is not an object ({data!r:.60}); run the prover again")
        names = {f.name for f in fields(VerdictRow)} - {"fired"}
        missing = sorted(n for n in ("config", "property", "verdict", "expected") if n not in data)
        if missing:
            raise StaleSummary(f"{where}: a result lacks {', '.join(missing)}; run the prover again")
        values = {k: v for k, v in data.items() if k in names}
        for name, value in values.items():
            allowed = FIELD_TYPES.get(name, (object,))
            if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
                shown = " or ".join("null" if t is type(None) else t.__name__ for t in allowed)
                raise StaleSummary(
                    f"{where}: {data.get('config')} / {data.get('property')}: {name} is {value!r:.40}, "
                    f"not {shown}; run the prover again"
                )
        try:
            values["verdict"] = Verdict.parse(data["verdict"])
        except BadInput as exc:
            raise StaleSummary(f"{where}: {data.get('config')} / {data.get('property')}: {exc}") from None
        reaction = data.get("reaction") or ""
        values["fired"] = Fired.parse(reaction) if reaction else None
        defaults = {
            "runner": "",
            "clamp": False,
            "events": [],
            "faults": [],
            "profile": "",
            "depth": None,
            "seconds": 0.0,
        }
        for key, value in defaults.items():
            values.setdefault(key, value)
        return VerdictRow(**values)


def sources_key(root: Path = ROOT, leave_out: tuple[str, ...] = ()) -> str:
    """A digest of the sources verdicts are computed from (spec/ and model/ Python files,
    the matrix among them): two summaries with the same key came from the same code.
    `leave_out`: relative paths not digested (the prover's cache keys each matrix entry
    on its own instead of the whole matrix file)."""
    digest = hashlib.sha256()
    for folder in KEYED:
        for path in sorted((root / folder).rglob("*.py")):
            if "__pycache__" in path.parts or path.relative_to(root).as_posix() in leave_out:
                continue
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def load_summary(prove_dir: Path, *, need_results: bool = True, check_key: bool = True) -> dict:
    """summary.json of a prover run, checked (raises StaleSummary with what to run):
    present, readable, listing its configurations; with need_results, at least one
    result; with check_key, computed from the sources here now."""
    path = Path(prove_dir) / "summary.json"
    again = "run `make prove` (vllm-contract prove) again"
    if not path.is_file():
        raise StaleSummary(f"{path} is missing: run `make prove` first (vllm-contract prove)")
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise StaleSummary(f"{path}: not readable JSON ({str(exc)[:80]}); {again}") from None
    if not isinstance(summary, dict):
        raise StaleSummary(f"{path}: not a prover summary (a {type(summary).__name__}); {again}")
    configs, complete = summary.get("configs"), summary.get("complete")
    if not isinstance(configs, list) or not isinstance(complete, bool):
        raise StaleSummary(f"{path} does not list the configurations it ran (written by an older prover): {again}")
    results = summary.get("results")
    if not isinstance(results, list):
        raise StaleSummary(f"{path} has no list of results: {again}")
    if need_results and not results:
        raise StaleSummary(f"{path} lists no results (nothing was checked): {again}")
    if check_key:
        key = summary.get("key")
        if not isinstance(key, dict) or key.get("sources") != sources_key():
            what = "an older prover" if not isinstance(key, dict) else "other spec or model sources"
            raise StaleSummary(f"{path} was computed from {what} than the ones here now: {again}")
    witnesses = summary.get("witnesses", {})
    if not isinstance(witnesses, dict) or not all(
        isinstance(w, dict) and isinstance(w.get("trace"), (str, type(None))) for w in witnesses.values()
    ):
        raise StaleSummary(f"{path}: 'witnesses' is not an object of configuration -> {{trace, ...}}: {again}")
    summary["rows"] = [VerdictRow.from_json(r, str(path)) for r in results]
    return summary
