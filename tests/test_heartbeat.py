"""The one progress line: said within its interval, never more often, and not for a loop that ends at once."""

from __future__ import annotations

from vllm_contract.spec import heartbeat as hb


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_line_is_said_once_per_interval_and_built_only_when_said(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(hb.time, "monotonic", clock)
    said, built = [], []
    beat = hb.Heartbeat(said.append, every=2.0)

    def line(n):
        def make():
            built.append(n)
            return f"line {n}"

        return make

    for n in range(10):  # a loop that ends within its first interval says nothing
        assert not beat(line(n))
    clock.now += 2.0
    assert beat(line(10))
    clock.now += 1.9
    assert not beat(line(11))
    clock.now += 0.1
    assert beat("line 12")
    assert said == ["line 10", "line 12"]
    assert built == [10]  # the lines not said were never built


def test_quiet_for_says_the_first_line_sooner_and_every_zero_says_each(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(hb.time, "monotonic", clock)
    said: list[str] = []
    beat = hb.Heartbeat(said.append, every=2.0, quiet_for=1.0)
    assert not beat("early")
    clock.now += 1.0
    assert beat("after a second")
    every = hb.Heartbeat(said.append, every=0.0)
    assert every("a") and every("b")
    assert said == ["after a second", "a", "b"]
