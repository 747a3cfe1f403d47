"""Named access to a state (a flat dict key -> term) for the contract's code.

`view.num_tokens[r]`, `view.q_sampled[i, r]`, `view.queue_len` read a value. A `Next`
is a view that also records writes (`nxt.num_tokens[r] = ...`); reads see earlier
writes, so event code reads like the imperative vLLM code it mirrors. What an event
wrote is its `modifies` set; every other variable keeps its value (the frame).
"""

from __future__ import annotations

import weakref
from typing import Any, Mapping

from vllm_contract.spec.config import Config
from vllm_contract.spec.vocabulary import VarDecl, decls_for

Key = tuple


class _Indexed:
    __slots__ = ("_view", "_name")

    def __init__(self, view: "View", name: str):
        self._view = view
        self._name = name

    def _key(self, idx) -> Key:
        return (self._name, *idx) if isinstance(idx, tuple) else (self._name, idx)

    def __getitem__(self, idx):
        # the key built here rather than through _key: the interpreter reads millions of them
        return self._view._read((self._name, *idx) if isinstance(idx, tuple) else (self._name, idx))

    def __setitem__(self, idx, value):
        self._view._write(self._key(idx), value)


_DECLS_SEEN: dict[int, tuple[weakref.ref, dict[str, VarDecl]]] = {}


def _decls_by_name(cfg: Config) -> dict[str, VarDecl]:
    """A configuration's variables by name, computed once per Config object (every state of
    a run is viewed under one; a Config is frozen, but not hashable: it holds a dict)."""
    seen = _DECLS_SEEN.get(id(cfg))
    if seen is not None and seen[0]() is cfg:
        return seen[1]
    key = id(cfg)
    decls = {d.name: d for d in decls_for(cfg)}
    _DECLS_SEEN[key] = (weakref.ref(cfg, lambda _ref: _DECLS_SEEN.pop(key, None)), decls)
    return decls


class View:
    """Read-only named access to a state.

    `keep_accessors`: an indexed variable's accessor is kept on the view after its first
    read, so later reads skip __getattr__. Only for concrete states (the interpreter): the
    kept accessor is a reference cycle, and on Z3 terms a cycle changes when terms are
    freed, which changes the solver's answers."""

    _keep_accessors = False

    def __init__(self, cfg: Config, values: Mapping[Key, Any], keep_accessors: bool = False):
        object.__setattr__(self, "_cfg", cfg)
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_decls", _decls_by_name(cfg))
        if keep_accessors:
            object.__setattr__(self, "_keep_accessors", True)

    def _decl(self, name: str) -> VarDecl:
        try:
            return self._decls[name]
        except KeyError:
            raise AttributeError(f"state variable {name!r} does not exist under config {self._cfg.name!r}") from None

    def _read(self, key: Key):
        return self._values[key]

    def _write(self, key: Key, value) -> None:
        raise TypeError("this state is read-only; write through a Next")

    def __getattr__(self, name: str):
        decl = self._decl(name)
        if decl.over:
            accessor = _Indexed(self, name)
            if self._keep_accessors:
                object.__setattr__(self, name, accessor)
            return accessor
        return self._read((name,))

    def __setattr__(self, name: str, value) -> None:
        decl = self._decl(name)
        if decl.over:
            raise TypeError(f"{name} is indexed; assign {name}[i] instead")
        self._write((name,), value)


class Next(View):
    """The successor state under construction: the current state plus recorded writes."""

    def __init__(self, cfg: Config, current: Mapping[Key, Any], keep_accessors: bool = False):
        super().__init__(cfg, current, keep_accessors)
        object.__setattr__(self, "writes", {})

    def _read(self, key: Key):
        if key in self.writes:
            return self.writes[key]
        return self._values[key]

    def _write(self, key: Key, value) -> None:
        if key not in self._values:
            raise KeyError(f"no state variable {key} under config {self._cfg.name!r}")
        self.writes[key] = value
