"""The monitor's window, record by record: each request's admission, each schedule(), each
update_from_output and each front-end call, as the monitor (targets/monitor/core.py) keeps them
and the trace builder (targets/monitor/trace.py) reads them."""

from __future__ import annotations

from typing import Any

from vllm_contract.adapter import objects


class Admitted:
    """A request as add_request saw it (its admission is where a replay starts)."""

    __slots__ = ("rid", "seq", "request", "prompt_len", "resumable", "max_tokens")

    def __init__(self, rid: str, seq: int, request: Any):
        self.rid, self.seq, self.request = rid, seq, request
        self.prompt_len = objects.prompt_length(request)
        self.resumable = objects.is_resumable(request)
        self.max_tokens = objects.max_tokens(request)


class Scheduled:
    """One schedule(): the budget, what each request got, and the reservations it made
    (a prefill chunk reserves nothing; any other request 1 plus its drafts)."""

    __slots__ = (
        "seq",
        "so_id",
        "budget",
        "counts",
        "spec",
        "chunks",
        "admitted",
        "ids",
        "lens",
        "short",
        "failed",
        "step",
    )

    def __init__(self, seq, so_id, budget, counts, spec, chunks, admitted, step=0):
        self.seq, self.so_id, self.budget = seq, so_id, budget
        self.step = step  # the engine step (schedules and deliveries counted) this schedule was
        self.counts: dict[str, int] = counts
        self.spec: dict | None = spec
        self.chunks: set[str] = chunks
        self.admitted: set[str] = admitted
        self.ids: list[str] | None = None  # the runner's rows, once delivered
        self.lens: list[int] | None = None
        # tokens the output handed to update_from_output counts short of what was scheduled
        # (a plugin rewrote num_scheduled_tokens: the under-drain fault, tpu-inference #3492)
        self.short: dict[str, int] | None = None
        self.failed = False  # one of vLLM's asserts ended this schedule(): nothing of it was seen

    def drafts(self, rid: str) -> int:
        return len(self.spec.get(rid, ())) if self.spec else 0

    def reserved(self, rid: str) -> int:
        return 0 if rid in self.chunks else 1 + self.drafts(rid)

    def returned(self, rid: str) -> int | None:
        """Tokens the runner returned for the request (None: not delivered yet)."""
        if self.lens is None:
            return None
        try:
            return self.lens[self.ids.index(rid)]
        except ValueError:
            return 0


class Delivered:
    """One update_from_output: which step it carried, a KV-load failure, who stopped."""

    __slots__ = ("seq", "step", "kv", "ended")

    def __init__(self, seq: int, step: Scheduled):
        self.seq, self.step = seq, step
        self.kv: tuple | None = None  # (loader id, block index) or (None, why)
        # request id -> (num_tokens, num_computed_tokens, num_output_placeholders, Status) after its stop
        self.ended: dict[str, tuple] = {}

    def kv_touches(self, rid: str) -> bool:
        """The delivery reported a KV-load failure: update_from_output may skip rid's output."""
        return self.kv is not None


class FrontEnd:
    """preempt / reset_prefix_cache / abort / stream_update, between engine steps."""

    __slots__ = ("seq", "event", "rid", "value")

    def __init__(self, seq: int, event: str, rid: str | None, value: Any = None):
        self.seq, self.event, self.rid, self.value = seq, event, rid, value


class Pending:
    """What delivering() learned before update_from_output runs, for delivered()."""

    __slots__ = ("record", "suspects", "before", "finished_before", "written")

    def __init__(self, record: Delivered, suspects: set, before: dict, finished_before):
        self.record = record
        self.suspects = suspects
        self.before = before  # request id -> (num_tokens, stale, placeholders, status) before the delivery
        self.finished_before = finished_before
        self.written = False
