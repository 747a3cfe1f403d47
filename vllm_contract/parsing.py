"""The command line's shared pieces: a parser whose errors are one line, argument types, exit statuses in --help."""

from __future__ import annotations

import argparse
import math
import re

from vllm_contract.spec.errors import ExitStatus, UsageError
from vllm_contract.spec.user_input import whole_number


class Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument as one line (UsageError, exit 2), not usage + exit."""

    def error(self, message):
        raise UsageError(f"{message} (see --help)")


def statuses_epilog(statuses: dict[ExitStatus, str]) -> str:
    """The exit statuses a command uses, as --help shows them."""
    lines = ["exit statuses:"]
    for status, what in statuses.items():
        lines.append(f"  {int(status):>3}  {what}")
    return "\n".join(lines)


def whole(low: int = 1, high: int | None = None):
    """argparse type: a whole number in [low, high] (`--cases abc` is one line, not a traceback)."""

    def parse(text: str) -> int:
        value = whole_number(text)
        if value is None:  # int() would take '１６' or '1_000'
            raise argparse.ArgumentTypeError(f"expected a whole number >= {low} in ASCII digits, got {text!r}")
        if value < low:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {low}, got {value}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"expected a whole number <= {high}, got {value}")
        return value

    return parse


DECIMAL = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def seconds(text: str) -> float:
    """argparse type: a number of seconds > 0, in ASCII digits (float() would take '１.５')."""
    value = float(text) if DECIMAL.fullmatch(text) else math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value
