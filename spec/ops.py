"""The arithmetic interface every guard and update in spec/ is written against.

The contract is written once, as ordinary Python over this interface. Arithmetic and
comparisons use Python's operators (they work on ints and on Z3 terms alike); what
Python cannot overload -- `and`, `or`, `not`, `if` on a value -- goes through an
`Ops` object. `IntOps` runs the contract on plain ints and bools (the reference
interpreter); `vllm_contract.model.z3ops.Z3Ops` builds Z3 terms from the same code.

Rule for spec authors: Python `if` may only test the configuration (static), never a
state value. State-dependent choices use `ops.ite`.
"""

from __future__ import annotations

from typing import Any, Iterable, Protocol

Term = Any  # an int/bool, or a Z3 term


class Ops(Protocol):
    """What the contract needs beyond Python's operators."""

    def ite(self, cond: Term, then: Term, other: Term) -> Term: ...

    def all(self, *terms: Term) -> Term: ...

    def any(self, *terms: Term) -> Term: ...

    def not_(self, term: Term) -> Term: ...

    def implies(self, premise: Term, conclusion: Term) -> Term: ...

    def min(self, a: Term, b: Term) -> Term: ...

    def max(self, a: Term, b: Term) -> Term: ...

    def sum(self, terms: Iterable[Term]) -> Term: ...

    def count(self, conds: Iterable[Term]) -> Term: ...

    def floor_div(self, a: Term, unit: int) -> Term: ...


class IntOps:
    """Concrete semantics: Python ints (unbounded, like Z3's Int) and bools."""

    symbolic = False

    def ite(self, cond, then, other):
        return then if cond else other

    def all(self, *terms):
        return all(bool(t) for t in terms)

    def any(self, *terms):
        return any(bool(t) for t in terms)

    def not_(self, term):
        return not term

    def implies(self, premise, conclusion):
        return (not premise) or bool(conclusion)

    def min(self, a, b):
        return a if a <= b else b

    def max(self, a, b):
        return a if a >= b else b

    def sum(self, terms):
        total = 0
        for t in terms:
            total = total + t
        return total

    def count(self, conds):
        return sum(1 for c in conds if c)

    def floor_div(self, a, unit):
        return a // unit


INT_OPS = IntOps()


def whole_blocks(ops: Ops, tokens: Term, block_size: int) -> Term:
    """The tokens of the whole blocks among `tokens` (a prefix-cache hit and the blocks
    cache_blocks hashes are whole blocks): tokens rounded down to a block boundary."""
    return ops.floor_div(tokens, block_size) * block_size


def select(ops: Ops, items: list, index: Term, default: Term = 0) -> Term:
    """items[index] for a symbolic index (default when out of range)."""
    out = default
    for i in reversed(range(len(items))):
        out = ops.ite(index == i, items[i], out)
    return out
