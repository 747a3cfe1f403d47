"""The progress line of a long loop, for every command that has one.

A command that can run for more than a couple of seconds says where it is every 2 s, and
no more often than that: a loop calls its heartbeat on every item, and the heartbeat
decides whether this one is said.
"""

from __future__ import annotations

import sys
import time
from typing import Callable

EVERY_S = 2.0


def to_stderr(line: str) -> None:
    """Progress goes to stderr, so a command's stdout stays its answer."""
    print(line, file=sys.stderr, flush=True)


class Heartbeat:
    """Says a line at most once per `every` seconds, and none before `quiet_for` seconds
    have passed since it was made (a loop that ends at once says nothing). A line may be
    given as a function, so a loop pays for building it only when it is said."""

    def __init__(self, say: Callable[[str], None] = to_stderr, every: float = EVERY_S, quiet_for: float | None = None):
        self.say = say
        self.every = every
        self.started = time.monotonic()
        # by default the first line comes after one interval, as every later one does
        self.last = self.started if quiet_for is None else self.started - every + quiet_for

    def __call__(self, line: str | Callable[[], str]) -> bool:
        """Say the line if its turn has come; whether it was said."""
        now = time.monotonic()
        if now - self.last < self.every:
            return False
        self.last = now
        self.say(line() if callable(line) else line)
        return True
