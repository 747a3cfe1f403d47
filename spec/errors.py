"""Every error the project reports to a person, each with the exit status it ends a command with.

A command prints such an error as one line, `error: <what went wrong>; <what to do>`, and
exits with `error.status`. The statuses mean the same thing in every command (the table
in docs/errors.md is built from `ExitStatus`); a command's --help lists the ones it uses.
"""

from __future__ import annotations

from enum import IntEnum


class ExitStatus(IntEnum):
    """What a command's exit status says, whichever command it is."""

    OK = 0  # done, and nothing to report: every verdict as expected, nothing newly broken
    FINDING = 1  # done, and something to report: a deviation, a regression, stale suites
    BAD_INPUT = 2  # refused before any work: a malformed argument, file or configuration
    COULD_NOT_RUN = 3  # part of the work could not run (an error, a timeout, a crashed child)
    TREE = 4  # a vLLM tree does not load, cohere or cannot be driven (pytest's usage error too)
    INTERRUPTED = 130  # Ctrl-C: stopped, nothing half-written
    TERMINATED = 143  # SIGTERM: stopped, nothing half-written

    @property
    def meaning(self) -> str:
        return _MEANINGS[self]


_MEANINGS = {
    ExitStatus.OK: "done; nothing to report",
    ExitStatus.FINDING: "done; something to report (a deviation, a regression, stale files)",
    ExitStatus.BAD_INPUT: "bad input, refused before any work (one line says what and how to fix it)",
    ExitStatus.COULD_NOT_RUN: "some of the work could not run (its rows say why); the result is incomplete",
    ExitStatus.TREE: "a vLLM tree does not load, cohere or cannot be driven (one line per cause)",
    ExitStatus.INTERRUPTED: "interrupted (Ctrl-C); nothing half-written is left",
    ExitStatus.TERMINATED: "terminated (SIGTERM); nothing half-written is left",
}


class ContractError(Exception):
    """Base of the errors a command reports as one line; `status` is its exit status."""

    status = ExitStatus.COULD_NOT_RUN


class BadInput(ContractError):
    """An argument, a file or a configuration is malformed; nothing was done."""

    status = ExitStatus.BAD_INPUT


class SpecError(BadInput, ValueError):
    """A configuration or matrix entry is malformed. The message says what and how to fix it."""


class MalformedConfig(SpecError):
    """A configuration record is not one: not an object, an unknown or missing field, a
    field of the wrong type. Bad input wherever it comes from, unlike a well-formed
    record the model does not cover (a SpecError: outside the model)."""


class UsageError(BadInput):
    """A command-line argument is malformed."""


class CouldNotRun(ContractError):
    """Work that was asked for could not run: a child process crashed, a write failed."""

    status = ExitStatus.COULD_NOT_RUN


class TargetUnavailable(ContractError):
    """A target cannot run here (not installed, no device); the message says how to fix it."""

    status = ExitStatus.TREE


class TreeError(TargetUnavailable):
    """A vLLM tree cannot be used; the message is one line: the cause and the fix."""


class MonitorUnsupported(TreeError):
    """The contract monitor cannot monitor the vLLM it was loaded into; raised when vLLM builds
    the scheduler, so the engine refuses to start with the reason."""
