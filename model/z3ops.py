"""The spec's arithmetic interface on Z3 terms (Int and Bool; see z3-encoding-notes).

Static values (Python ints and bools that the configuration fixes) are folded here,
so a disabled fault or event family adds nothing to the formula.
"""

from __future__ import annotations

import z3


def _is_static(x) -> bool:
    return isinstance(x, (bool, int))


def _lift(x):
    if isinstance(x, bool):
        return z3.BoolVal(x)
    if isinstance(x, int):
        return z3.IntVal(x)
    return x


class Z3Ops:
    symbolic = True

    def ite(self, cond, then, other):
        if isinstance(cond, bool):
            return then if cond else other
        if _is_static(then) and _is_static(other) and type(then) is type(other) and then == other:
            return then
        return z3.If(cond, _lift(then), _lift(other))

    def all(self, *terms):
        rest = []
        for t in terms:
            if isinstance(t, bool):
                if not t:
                    return False
                continue
            rest.append(t)
        if not rest:
            return True
        return rest[0] if len(rest) == 1 else z3.And(*rest)

    def any(self, *terms):
        rest = []
        for t in terms:
            if isinstance(t, bool):
                if t:
                    return True
                continue
            rest.append(t)
        if not rest:
            return False
        return rest[0] if len(rest) == 1 else z3.Or(*rest)

    def not_(self, term):
        if isinstance(term, bool):
            return not term
        return z3.Not(term)

    def implies(self, premise, conclusion):
        if isinstance(premise, bool):
            return conclusion if premise else True
        if isinstance(conclusion, bool):
            return True if conclusion else z3.Not(premise)
        return z3.Implies(premise, conclusion)

    def min(self, a, b):
        if _is_static(a) and _is_static(b):
            return min(a, b)
        return self.ite(a <= b, a, b)

    def max(self, a, b):
        if _is_static(a) and _is_static(b):
            return max(a, b)
        return self.ite(a >= b, a, b)

    def sum(self, terms):
        total = 0
        for t in terms:
            if isinstance(t, int) and t == 0:
                continue
            total = total + t
        return total

    def count(self, conds):
        return self.sum(self.ite(c, 1, 0) for c in conds)

    def floor_div(self, a, unit):
        # Z3's integer division rounds down for a positive divisor, as Python's // does
        if _is_static(a):
            return a // unit
        return a / unit


Z3_OPS = Z3Ops()
