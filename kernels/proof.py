"""Z3 proof that each discard kernel decides like the spec's runner predicate, on int32.

The spec (spec/runners.py, v2_decide) works on unbounded integers: a row is discarded
iff g + n < threshold, with g the slot's num_computed_tokens, n the step's query_len,
and threshold = prefill_len (snapshot) or total_len (live). In vLLM, seq_len = g + n
is computed upstream in int32 ([cite:v2-seq-len]) and can wrap; the kernel then compares.

What is proved, and how it is tied to the kernel code:
  * The decision is `discard.still_prefilling`; its Python body (`.fn`) is applied to
    32-bit Z3 bit-vectors, so Z3 reasons about the code the kernels run. The result
    must be Z3's *signed* less-than (checked, and proved equal to integer order).
  * `kernel_routes_decision` reads each kernel's source (ast) and checks that the
    helper is called on seq_lens[rows] and the threshold gathered through
    idx_mapping from that kernel's own per-slot pointer, and that its result is what
    the kernel hands to the store. What the store does with the decision is covered
    by the differential tests (tests/test_kernels.py), not here.
  * The spec side is encoded exactly, not approximately: the int32 inputs are
    sign-extended to 64 bits, where g + n (at most 33 bits) cannot wrap, so 64-bit
    addition and signed comparison are integer addition and comparison. Z3's own
    Int/BitVec bridge (BV2Int, Int2BV) answers `unknown` after 60 s on these
    queries, so it is not used.

Claims per variant: with g, n >= 0 alone the kernel and the spec differ (the int32
wrap of g + n; the counterexample is replayed on the real kernel); with g, n >= 0 and
g + n <= 2**31 - 1 they agree; and the agreement needs only the no-overflow bound.
`unknown` is reported as such and never counts as proved.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass, field

import z3
from vllm_contract.kernels import discard
from vllm_contract.kernels.reference import wrap_to

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
WIDE = 64  # bits that hold any g + n of int32 operands exactly
TIMEOUT_MS = 60_000

PROVED, REFUTED, UNKNOWN = "proved", "refuted", "unknown"
THRESHOLD_NAME = {"snapshot": "prefill_len", "live": "total_len"}


@dataclass(frozen=True)
class ProofResult:
    claim: str
    status: str  # PROVED | REFUTED | UNKNOWN
    expected: str  # PROVED | REFUTED: what a correct kernel gives; UNKNOWN never matches
    counterexample: dict[str, int | bool] = field(default_factory=dict)
    note: str = ""


# ------------------------------------------------------------------ the two sides


def kernel_decision(seq_len: z3.BitVecRef, threshold: z3.BitVecRef) -> z3.BoolRef:
    """The kernels' decision: the helper's own Python body, run on Z3 bit-vectors."""
    return discard.still_prefilling.fn(seq_len, threshold)


def spec_decision(g: z3.BitVecRef, n: z3.BitVecRef, threshold: z3.BitVecRef) -> z3.BoolRef:
    """spec/runners.py's `seq_len = computed + sh.n; discard = seq_len < threshold` on
    unbounded integers, exact for int32 inputs once widened to 64 bits."""
    return _wide(g) + _wide(n) < _wide(threshold)


def _wide(v: z3.BitVecRef) -> z3.BitVecRef:
    return z3.SignExt(WIDE - 32, v)


def _int32(model: z3.ModelRef, v: z3.BitVecRef) -> int:
    return model.eval(v, model_completion=True).as_signed_long()


# ------------------------------------------------------------------------ claims


def signed_comparison() -> ProofResult:
    """The helper on int32 bit-vectors is signed order: bvslt, equal to integer order."""
    x, y = z3.BitVecs("x y", 32)
    term = kernel_decision(x, y)
    claim = "still_prefilling on int32 is signed less-than"
    if not z3.is_app_of(term, z3.Z3_OP_SLT):
        return ProofResult(claim, REFUTED, PROVED, note=f"the helper builds {term.sexpr()}, not bvslt")
    # equal to integer order of the sign-extended values (exact, as in spec_decision)
    status, model = _find(z3.Not(term == (_wide(x) < _wide(y))))
    if status != PROVED:
        return ProofResult(claim, status, PROVED, _values(model, x=x, y=y))
    # and it is not unsigned order: a witness where the two differ
    _, witness = _find(term != z3.ULT(x, y))
    return ProofResult(
        claim,
        PROVED,
        PROVED,
        note=f"bvslt; differs from unsigned order e.g. at {_values(witness, x=x, y=y)}",
    )


def equals_spec(variant: str, *, nonnegative: bool, no_overflow: bool) -> ProofResult:
    """Kernel decision == spec decision for all int32 g, n, threshold meeting the bounds."""
    g, n = z3.BitVecs("g n", 32)
    threshold = z3.BitVec(THRESHOLD_NAME[variant], 32)
    seq_len = g + n  # vLLM's int32 add upstream of the kernel ([cite:v2-seq-len]): wraps
    assumptions = []
    if nonnegative:
        assumptions += [g >= 0, n >= 0]
    if no_overflow:
        total = _wide(g) + _wide(n)
        assumptions += [total <= INT32_MAX, total >= INT32_MIN]
    bounds = (
        ", ".join(text for text, on in (("g, n >= 0", nonnegative), ("g + n fits int32", no_overflow)) if on)
        or "any int32"
    )
    claim = f"{variant}: kernel == spec for int32 g, n, {threshold} with {bounds}"
    # only the bound on g + n makes them agree: without it the int32 add wraps
    expected = PROVED if no_overflow else REFUTED
    differs = kernel_decision(seq_len, threshold) != spec_decision(g, n, threshold)
    status, model = _find(z3.And(*assumptions, differs), readable=(n, threshold))
    if status != REFUTED:
        return ProofResult(claim, status, expected)
    cex = _values(model, g=g, n=n, **{str(threshold): threshold})
    cex["seq_len_int32"] = _int32(model, seq_len)
    cex["spec_discards"] = cex["g"] + cex["n"] < cex[str(threshold)]
    cex["kernel_discards"] = replay_on_kernel(variant, cex["g"], cex["n"], cex[str(threshold)])
    return ProofResult(claim, REFUTED, expected, cex, note="int32 wrap-around of g + n")


def kernel_routes_decision(variant: str) -> ProofResult:
    """The kernel calls still_prefilling(seq_lens[rows], threshold[idx_mapping[rows]]) and
    stores through that result, and the variant's launcher passes its own per-slot
    threshold (prefill_len or total_len) as that pointer."""
    kernel = discard.discard_kernel
    claim = f"{variant}: {kernel.fn.__name__} decides through still_prefilling"
    problem = _routing_problem(kernel.fn, "threshold_ptr") or _launcher_problem(variant)
    return ProofResult(claim, REFUTED if problem else PROVED, PROVED, note=problem or "")


def _launcher_problem(variant: str) -> str | None:
    """None if the variant's launcher hands its threshold argument to the kernel."""
    launcher = discard.LAUNCHERS[variant]
    wanted = discard.THRESHOLD[variant]
    tree = ast.parse(textwrap.dedent(inspect.getsource(launcher)))
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == "_launch"]
    if len(calls) != 1:
        return f"{launcher.__name__} should call _launch once, calls it {len(calls)} times"
    passed = calls[0].args[4] if len(calls[0].args) > 4 else None
    if not (isinstance(passed, ast.Name) and passed.id == wanted):
        return (
            f"{launcher.__name__} passes {ast.unparse(passed) if passed else 'nothing'} as the threshold, not {wanted}"
        )
    return None


def all_claims() -> list[ProofResult]:
    out = [signed_comparison()]
    for variant in discard.THRESHOLD:
        out += [
            kernel_routes_decision(variant),
            equals_spec(variant, nonnegative=True, no_overflow=False),
            equals_spec(variant, nonnegative=True, no_overflow=True),
            equals_spec(variant, nonnegative=False, no_overflow=True),
        ]
    return out


# ---------------------------------------------------------------------- helpers


def _find(formula, readable=()) -> tuple[str, z3.ModelRef | None]:
    """REFUTED with a model if formula is satisfiable, PROVED if not, else UNKNOWN.

    With `readable` terms, a found model is re-solved minimising their magnitudes, so
    the counterexample reads as the simplest instance rather than Z3's first one.
    """
    solver = z3.Solver()
    solver.set(timeout=TIMEOUT_MS)
    solver.add(formula)
    verdict = solver.check()
    if verdict == z3.unsat:
        return PROVED, None
    if verdict != z3.sat:
        return UNKNOWN, None
    model = solver.model()
    if readable:
        opt = z3.Optimize()
        opt.set(timeout=TIMEOUT_MS)
        opt.add(formula)
        for term in readable:
            opt.minimize(z3.If(term < 0, -_wide(term), _wide(term)))
        if opt.check() == z3.sat:
            model = opt.model()
    return REFUTED, model


def _values(model, **terms) -> dict[str, int]:
    if model is None:
        return {}
    return {name: _int32(model, term) for name, term in terms.items()}


def replay_on_kernel(variant: str, g: int, n: int, threshold: int) -> bool:
    """Run the real kernel on one row: seq_len = int32(g + n), slot 0 holds threshold."""
    import torch
    from vllm_contract.kernels import runtime

    device = runtime.DEVICE
    seq_lens = wrap_to(torch.tensor([g + n], dtype=torch.int64), torch.int32).to(device)
    num_sampled = torch.ones(1, dtype=torch.int32, device=device)
    cu_num_logits = torch.tensor([0, 1], dtype=torch.int32, device=device)
    idx_mapping = torch.zeros(1, dtype=torch.int64, device=device)
    per_slot = torch.tensor([threshold], dtype=torch.int32, device=device)
    sampled, _ = discard.LAUNCHERS[variant](num_sampled, seq_lens, cu_num_logits, idx_mapping, per_slot)
    return bool(sampled[0].item() == 0)


def _routing_problem(fn, threshold_ptr: str) -> str | None:
    """None if the kernel's data flow is as claimed, else what is wrong."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    loaded_from: dict[str, tuple[str, str]] = {}  # name -> (pointer, index name) of its tl.load
    decisions: list[tuple[str, ast.Call]] = []
    helper = discard.still_prefilling.fn.__name__
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        name, value = node.targets[0].id, node.value
        if not isinstance(value, ast.Call):
            continue
        callee = ast.unparse(value.func)
        if callee == "tl.load" and value.args and isinstance(value.args[0], ast.BinOp):
            pointer, index = value.args[0].left, value.args[0].right
            if isinstance(pointer, ast.Name) and isinstance(index, ast.Name):
                loaded_from[name] = (pointer.id, index.id)
        elif callee == helper:
            decisions.append((name, value))
    if len(decisions) != 1:
        return f"expected one call to {helper}, found {len(decisions)}"
    result, call = decisions[0]
    if len(call.args) != 2 or not all(isinstance(a, ast.Name) for a in call.args):
        return f"{helper} must be called on two loaded names, got {ast.unparse(call)}"
    seq_arg, threshold_arg = (a.id for a in call.args)
    if loaded_from.get(seq_arg, (None,))[0] != "seq_lens_ptr":
        return f"first operand {seq_arg} is not loaded from seq_lens_ptr"
    pointer, index = loaded_from.get(threshold_arg, (None, None))
    if pointer != threshold_ptr:
        return f"threshold {threshold_arg} is loaded from {pointer}, not {threshold_ptr}"
    if loaded_from.get(index, (None,))[0] != "idx_mapping_ptr":
        return f"threshold is indexed by {index}, which is not loaded from idx_mapping_ptr"
    if loaded_from.get(seq_arg, (None, None))[1] != loaded_from[index][1]:
        return "seq_lens and idx_mapping are read at different rows"
    stores = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and any(isinstance(a, ast.Name) and a.id == result for a in n.args)
    ]
    if not stores:
        return f"the decision {result} is never passed on"
    return None


def main() -> int:
    """Print every claim; exit status 1 if any is unknown or unexpectedly refuted."""
    from rich.console import Console
    from rich.table import Table

    results = all_claims()
    table = Table(title="kernels/proof.py (z3 " + z3.get_version_string() + ")")
    for column in ("claim", "status", "counterexample / note"):
        table.add_column(column)
    bad = False
    for r in results:
        bad |= r.status != r.expected
        shown = r.status if r.status == r.expected else f"{r.status} (expected {r.expected})"
        table.add_row(r.claim, shown, ", ".join(f"{k}={v}" for k, v in r.counterexample.items()) or r.note)
    Console().print(table)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
