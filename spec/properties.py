"""The properties the contract is checked against.

Transition properties are conditions an event returns in `Effect.checks` (vLLM's own
asserts, and the agreement of the two predicates). State properties are invariants of
every reachable state. A fatal property is an assert that kills EngineCore: once one
fires, the trace ends, so no counterexample may pass through an earlier fatal one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from spec.config import Config
from spec.ops import Ops
from spec.state import View
from spec.vocabulary import Status


@dataclass(frozen=True)
class Property:
    name: str
    kind: str  # "transition" | "state"
    fatal: bool
    doc: str
    source: str
    holds: Callable[[View, Config, Ops], object] | None = None  # state properties only


def placeholder_accounting(s: View, cfg: Config, ops: Ops):
    """P = sum of reservations of in-flight steps of the current epoch, while unfinished."""
    conds = []
    for r in range(cfg.requests):
        owed = ops.sum(
            ops.ite(
                ops.all(i < s.queue_len, s.q_scheduled[i, r] != 0, s.q_epoch[i, r] == s.epoch[r]),
                s.q_reserved[i, r],
                0,
            )
            for i in range(cfg.queue_depth)
        )
        conds.append(ops.implies(s.status[r] != Status.FINISHED, s.num_output_placeholders[r] == owed))
    return ops.all(*conds)


_ALL = (
    Property(
        "counter-nonnegative", "transition", True,
        "vLLM's assert num_output_placeholders >= 0 after a live delivery never fires",
        "async:69-71",
    ),
    Property(
        "predicates-agree", "transition", False,
        "the runner samples a scheduled request iff the scheduler reserved placeholders "
        "for it (runner discard <=> is_prefill_chunk)",
        "sched:1634-1636 + async:34 vs v1r:2058-2060 / v2b:507-533",
    ),
    Property(
        "no-token-while-prefilling", "transition", False,
        "no live delivery appends a token for a step the scheduler classified as a prefill chunk",
        "sched:2497-2499 (the contract's own comment)",
    ),
    Property(
        "placeholder-accounting", "state", False,
        "an unfinished request's placeholders equal the reservations of its in-flight steps "
        "scheduled since its last preemption or resumable stop",
        "async:45-47, async:70, sched:1607, sched:2478",
        placeholder_accounting,
    ),
    Property(
        "stale-count-nonnegative", "transition", True,
        "vLLM's assert num_stale_output_tokens >= 0 never fires",
        "sched:2084-2087",
    ),
    Property(
        "safe-frontier-nonnegative", "transition", True,
        "vLLM's assert safe_frontier >= 0 on a resumable stop never fires",
        "sched:2472-2473",
    ),
    Property(
        "padding-intact", "transition", True,
        "an admission padded to 1 + num_spec_tokens is scheduled whole (the long-prefill "
        "threshold must not cut it)",
        "sched:1134-1156, sched:1371-1372",
    ),
    Property(
        "scheduled-tokens-positive", "transition", True,
        "every scheduled token count is positive (asserted at admission and at delivery)",
        "sched:1170, sched:2078",
    ),
)

PROPERTIES: dict[str, Property] = {p.name: p for p in _ALL}
FATAL = tuple(p.name for p in _ALL if p.fatal)
