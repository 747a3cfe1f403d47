"""A configuration's expectations (the verdict each property should get) checked against the
properties, and a configuration read back from its record with them: what a matrix entry, a
trace's #meta or a case carries is refused in one line when it names a property that does
not exist or does not apply."""

from __future__ import annotations

from typing import Mapping

from vllm_contract.spec.config import EXPECTATIONS, Config
from vllm_contract.spec.errors import MalformedConfig, SpecError
from vllm_contract.spec.properties import PROPERTIES


def check(cfg: Config) -> Config:
    """The configuration, if each of its expectations names a property that applies to it
    and a verdict it can get; else SpecError."""
    where = f"config {cfg.name!r}"
    for prop, verdict in cfg.expect.items():
        if prop not in PROPERTIES:
            raise SpecError(f"{where}: expectation for unknown property {prop!r}; use one of {', '.join(PROPERTIES)}")
        if not PROPERTIES[prop].applies(cfg):
            raise SpecError(
                f"{where}: property {prop} does not apply to this configuration "
                f"({PROPERTIES[prop].doc}); drop the expectation"
            )
        if isinstance(verdict, str) and verdict.startswith("frontier:"):
            bound = verdict.removeprefix("frontier:K=")
            if not (bound.isdigit() and int(bound) >= 1 and cfg.k_symbolic):
                raise SpecError(
                    f"{where}: a frontier expectation reads 'frontier:K=N' (proved for K < N, violated "
                    f"at K = N, N >= 1) and needs spec_tokens=None; got {verdict!r} for {prop}"
                )
            continue
        if verdict not in EXPECTATIONS:
            raise SpecError(
                f"{where}: expected verdict for {prop} must be 'proved', 'violated', 'bounded' or "
                f"'frontier:K=N', got {verdict!r}"
            )
    return cfg


def from_record(record: Mapping) -> Config:
    """The configuration a record (`record()`, a trace's #meta, a case) describes,
    validated; lists where sets and tuples are meant are taken as those."""
    if not isinstance(record, Mapping):
        raise MalformedConfig(f"a configuration record must be an object of fields, got {record!r:.60}")
    fields = dict(record)
    known = set(Config.__dataclass_fields__)
    unknown = sorted(set(fields) - known)
    if unknown:
        raise MalformedConfig(
            f"configuration record has unknown field(s) {', '.join(unknown)}; the fields are: "
            f"{', '.join(sorted(known - {'expect'}))}"
        )
    for key in ("events", "faults", "via"):
        value = fields.get(key)
        fields[key] = frozenset() if value is None else value
    if isinstance(fields.get("prompt_lens"), list):
        fields["prompt_lens"] = tuple(fields["prompt_lens"])
    try:
        return check(Config(**fields).validate())
    except TypeError as exc:  # a missing name
        raise MalformedConfig(f"configuration record is incomplete ({exc})") from None
