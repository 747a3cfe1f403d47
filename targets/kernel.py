"""The kernel target: the V2 runner's discard decision, run as the Triton kernels of kernels/.

This target observes decisions, not scheduler state. It replays each trace on the
reference interpreter (model/interpreter.py) to learn, at every `schedule` step, which
requests the runner executes, in which state slots and with which lengths
(`observed["v2_rows"]`). It then runs the kernels on one row per scheduled request,
with the real slot mapping and per-slot prefill_len / total_len tensors of size
cfg.slots, and:

  * checks the configured runner's kernel (v2 -> snapshot, v2-live -> live) against
    the model: its decision and the num_sampled / num_rejected it writes. Any
    difference is listed in `Outcome.observed["mismatches"]` and `Outcome.detail`;
  * runs both variants on the same rows and reports where each disagrees with the
    scheduler's reservation (reserved == 0 means the scheduler treated the step as a
    prefill chunk, i.e. expects a discard): `snapshot_disagrees`, `live_disagrees`.

Slots no scheduled row holds are filled with INT32_MIN in one launch and INT32_MAX in
another; a row whose decision changes between the two read a slot it does not own.

`project()` is empty: the harness's state comparison has nothing to compare here, the
target checks its own decisions and reports them through `Outcome`. `fired` stays
None: vLLM's asserts live in the scheduler, which this target does not run.
"""

from __future__ import annotations

from typing import Any, Mapping

from vllm_contract.model.run import Played
from vllm_contract.spec.config import Config
from vllm_contract.spec.errors import TargetUnavailable
from vllm_contract.spec.runner_variants import RUNNERS
from vllm_contract.targets.protocol import Outcome, Target

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
POISONS = (INT32_MIN, INT32_MAX)  # fills for slots no scheduled row holds


class KernelTarget(Target):
    name = "kernel"
    observes_asserts = False
    observes_runner_asserts = False

    def accepts(self, cfg: Config) -> str | None:
        """Runner decisions do not depend on the clamp: check them once, clamp off."""
        if cfg.run.kernel is None:
            kernels = [r.name for r in RUNNERS.values() if r.kernel]
            return (
                f"the kernel target runs the V2 discard kernels ({', '.join(kernels)}); "
                f"this case uses runner {cfg.runner}"
            )
        if cfg.clamp or cfg.guard != "none":
            return "runner decisions do not depend on the scheduler's guards: checked on the plain arm"
        return None

    def __init__(self) -> None:
        from vllm_contract.kernels import runtime

        # the flag that chose Triton's interpreter or the compiled kernels, when the user set it
        self.replay_env = runtime.chosen_by_user()
        self.cfg: Config | None = None
        self.mismatches: list[str] = []  # every mismatch so far, "step k: ..."
        self._steps = 0

    # -- protocol ----------------------------------------------------------------
    def reset(self, cfg: Config, init: Mapping[tuple, Any]) -> None:
        if not cfg.is_v2:
            raise TargetUnavailable(
                f"the kernel target runs the V2 runner's discard kernel; config {cfg.name!r} uses "
                f"runner {cfg.runner!r}. Use runner 'v2' or 'v2-live'."
            )
        try:
            import vllm_contract.kernels  # noqa: F401 - picks native Triton or the interpreter
            from vllm_contract.kernels import runtime

            runtime.check_runnable()
        except Exception as exc:  # ImportError, KernelsUnavailable
            raise TargetUnavailable(f"the Triton kernels cannot run here: {exc}") from exc
        self.cfg = cfg
        self.mismatches = []
        self._steps = 0

    def step(self, event: str, args: Mapping[tuple, Any], model: Played) -> Outcome:
        """The kernels on the rows the model's schedule step hands the runner (its slots,
        counts and lengths), against the decision the model took for them."""
        if self.cfg is None:
            raise RuntimeError("KernelTarget.step before reset: call reset(cfg, init) first")
        self._steps += 1
        if event != "schedule":
            return Outcome()
        rows = scheduled_rows(model.result.observed, args, self.cfg)
        observed = evaluate(rows, self.cfg)
        found = [f"step {self._steps}: {m}" for m in observed["mismatches"]]
        self.mismatches += found
        facts = {k: v for k, v in observed.items() if k != "mismatches"}
        return Outcome(detail="; ".join(found) or _summary(observed), mismatches=observed["mismatches"], facts=facts)

    def project(self) -> dict[tuple, Any]:
        return {}


# ------------------------------------------------------------------------ rows


def scheduled_rows(observed: Mapping[str, Any], args: Mapping[tuple, Any], cfg: Config) -> list[dict]:
    """One dict per scheduled request, in request order: the model's row plus what the
    kernel needs (req, accepted drafts) and the scheduler's reservation."""
    out = []
    for req, (row, reserved) in enumerate(zip(observed["v2_rows"], observed["reserved"])):
        if not row["scheduled"]:
            continue
        accepted = args.get(("accepted", req), 0) if cfg.drafts else 0
        out.append(dict(row, req=req, reserved=reserved, accepted=accepted))
    return out


def evaluate(rows: list[dict], cfg: Config) -> dict[str, Any]:
    """Run both kernels on the rows; compare with the model and the reservations."""
    observed: dict[str, Any] = {
        "kernel_rows": [],
        "snapshot_disagrees": [],
        "live_disagrees": [],
        "mismatches": [],
    }
    if not rows:
        return observed
    problems = _unrepresentable(rows) + _slot_conflicts(rows)
    if problems:
        observed["mismatches"] = problems
        return observed

    runs = {variant: _run_variant(variant, rows, cfg) for variant in ("snapshot", "live")}
    mine = cfg.run.kernel
    for b, row in enumerate(rows):
        req = row["req"]
        scheduler_discards = row["reserved"] == 0
        decided = {variant: runs[variant]["discard"][b] for variant in runs}
        observed["kernel_rows"].append(
            {
                "req": req,
                "slot": row["slot"],
                "seq_len": _wrap32(row["num_computed"] + row["query_len"]),
                "prefill_len": row["prefill_len"],
                "total_len": row["total_len"],
                "reserved": row["reserved"],
                "scheduler_discard": scheduler_discards,
                "model_discard": bool(row["discard"]),
                "snapshot_discard": decided["snapshot"],
                "live_discard": decided["live"],
            }
        )
        for variant, discards in decided.items():
            if discards != scheduler_discards:
                observed[f"{variant}_disagrees"].append(req)
        observed["mismatches"] += _check_against_model(row, b, runs[mine], mine)
    for variant, run in runs.items():
        observed["mismatches"] += [f"{variant}: {p}" for p in run["problems"]]
    return observed


def _run_variant(variant: str, rows: list[dict], cfg: Config) -> dict[str, Any]:
    """Launch the variant's kernel once per poison fill; the decisions must not depend on it."""
    import torch
    from vllm_contract.kernels import runtime
    from vllm_contract.kernels.discard import LAUNCHERS

    device = runtime.DEVICE
    per_slot_key = "prefill_len" if variant == "snapshot" else "total_len"
    num_logits = [1 + row["num_draft"] for row in rows]
    cu_num_logits = [0]
    for count in num_logits:
        cu_num_logits.append(cu_num_logits[-1] + count)

    def tensor(values, dtype=torch.int32):
        return torch.tensor(values, dtype=dtype, device=device)

    results = []
    for poison in POISONS:
        per_slot = [poison] * cfg.slots
        for row in rows:
            per_slot[row["slot"]] = row[per_slot_key]
        sampled, rejected = LAUNCHERS[variant](
            tensor([1 + row["accepted"] for row in rows]),  # the sampler's count: 1 + accepted drafts
            tensor([_wrap32(row["num_computed"] + row["query_len"]) for row in rows]),  # int32 add, [cite:v2-seq-len]
            tensor(cu_num_logits),
            tensor([row["slot"] for row in rows], torch.int64),
            tensor(per_slot),
        )
        results.append((sampled.tolist(), rejected[: len(rows)].tolist()))

    (sampled, rejected), (sampled_again, rejected_again) = results
    problems = [
        f"req {row['req']} (slot {row['slot']}) reads a slot no scheduled request holds: "
        f"its counts change with the fill of unused slots"
        for b, row in enumerate(rows)
        if (sampled[b], rejected[b]) != (sampled_again[b], rejected_again[b])
    ]
    return {
        "discard": [s == 0 for s in sampled],
        "sampled": sampled,
        "rejected": rejected,
        "num_logits": num_logits,
        "problems": problems,
    }


def _check_against_model(row: dict, b: int, run: dict, variant: str) -> list[str]:
    """The configured variant's outputs for row b versus spec/runners.py's v2_decide."""
    req, model_discards = row["req"], bool(row["discard"])
    if run["discard"][b] != model_discards:
        return [
            f"req {req}: {variant} kernel {'discards' if run['discard'][b] else 'samples'} but the "
            f"model {'discards' if model_discards else 'samples'} (seq_len "
            f"{row['num_computed']}+{row['query_len']}, prefill_len {row['prefill_len']}, "
            f"total_len {row['total_len']}, slot {row['slot']})"
        ]
    want_sampled = 0 if model_discards else 1 + row["accepted"]
    want_rejected = 0 if model_discards else row["num_draft"] - row["accepted"]
    got = (run["sampled"][b], run["rejected"][b])
    if got != (want_sampled, want_rejected):
        return [
            f"req {req}: {variant} kernel writes (num_sampled, num_rejected) = {got}, "
            f"the model commits {(want_sampled, want_rejected)}"
        ]
    return []


def _unrepresentable(rows: list[dict]) -> list[str]:
    """vLLM keeps these lengths in int32 tensors; a trace beyond that cannot be replayed."""
    out = []
    for row in rows:
        for key in ("num_computed", "query_len", "prefill_len", "total_len"):
            if not INT32_MIN <= row[key] <= INT32_MAX:
                out.append(f"req {row['req']}: {key} = {row[key]} does not fit vLLM's int32 tensors")
    return out


def _slot_conflicts(rows: list[dict]) -> list[str]:
    """Two scheduled rows in one slot must see the same slot state."""
    seen: dict[int, dict] = {}
    out = []
    for row in rows:
        other = seen.setdefault(row["slot"], row)
        if other is not row and (other["prefill_len"], other["total_len"]) != (row["prefill_len"], row["total_len"]):
            out.append(f"reqs {other['req']} and {row['req']} share slot {row['slot']} with different lengths")
    return out


def _wrap32(value: int) -> int:
    return (value - INT32_MIN) % 2**32 + INT32_MIN


def _summary(observed: dict[str, Any]) -> str:
    parts = []
    for variant in ("snapshot", "live"):
        if observed[f"{variant}_disagrees"]:
            parts.append(f"{variant} disagrees with the reservation for req(s) {observed[f'{variant}_disagrees']}")
    return "; ".join(parts)
