"""What a person hands a command, read with limits: the one place files, JSON and numbers from users are parsed.

- A file is read only when it is a regular file, and only up to a size limit: a FIFO with
  no writer would block the command silently, and /dev/zero would fill the memory.
- JSON must name each key of an object once (Python's json keeps the last silently, so a
  trace whose `#meta.violated` is given twice would be read as the second), and its
  numbers must be numbers (json takes NaN, Infinity, and 1e400 as infinity).
- A whole number is ASCII digits with an optional sign (int() also takes '１６', '1_000'
  and surrounding whitespace).

Each refusal is a SpecError (bad input, exit 2) that names the file or the field.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

from vllm_contract.spec.errors import SpecError

MIB = 1 << 20
WHOLE = re.compile(r"[+-]?[0-9]+")
MAX_DIGITS = 4300  # Python's own limit for int(str)


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO (a named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def read_bytes(path: Path | str, limit: int, what: str) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; anything else is one line.
    Opened without blocking, so a FIFO nobody writes to is refused at once."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise SpecError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise SpecError(f"{path}: is a folder; give the file of {what} itself")
        if not stat.S_ISREG(info.st_mode):  # a FIFO nobody writes to blocks, /dev/zero never ends
            raise SpecError(
                f"{path}: is {_kind(info.st_mode)}, not a regular file; {what} is read only from a regular file "
                "(a pipe or a device can block or never end): save what it holds into a file and give that"
            )
        too_big = SpecError(
            f"{path}: larger than the {limit / MIB:g} MiB {what} is read up to: check that this is the file "
            "meant, or cut it down"
        )
        if info.st_size > limit:
            raise too_big
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(limit + 1 - size, MIB))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:  # it grew while being read
            raise too_big
        return b"".join(chunks)
    except OSError as exc:
        raise SpecError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def read_text(path: Path | str, limit: int, what: str) -> str:
    """read_bytes as UTF-8 text; other bytes are one line naming the offset."""
    raw = read_bytes(path, limit, what)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(
            f"{path}: not UTF-8 text (byte {raw[exc.start]:#04x} at offset {exc.start}); {what} is UTF-8 text"
        ) from None


def whole_number(text: str) -> int | None:
    """The whole number `text` spells in ASCII digits (an optional sign, no spaces,
    underscores or other scripts' digits); None when it spells none."""
    if not isinstance(text, str) or not WHOLE.fullmatch(text) or len(text) > MAX_DIGITS:
        return None
    return int(text)


class _NotANumber:
    """What json read for NaN, Infinity or a float beyond a double: refused with its path."""

    def __init__(self, text: str):
        self.text = text


class _Twice(dict):
    """An object that named `key` twice: refused with its path."""

    key: str = ""


def loads(text: str, where: str) -> Any:
    """JSON, strictly: each key once per object, every number finite. A violation is one
    line: `where`, the path of the field (e.g. #meta.violated, states[3].prompt_len[0])
    and what to do."""
    flagged = []

    def pairs(items: list) -> dict:
        out: dict = {}
        for key, value in items:
            if key in out:
                twice = _Twice(out)
                twice.key = key
                flagged.append(True)
                return twice
            out[key] = value
        return out

    def constant(name: str):
        flagged.append(True)
        return _NotANumber(name)

    def number(literal: str):
        value = float(literal)
        if math.isfinite(value):
            return value
        flagged.append(True)
        return _NotANumber(literal)

    try:
        doc = json.loads(text, object_pairs_hook=pairs, parse_constant=constant, parse_float=number)
    except RecursionError:
        raise SpecError(f"{where}: nested too deeply to be read") from None
    except ValueError as exc:  # JSONDecodeError, or an integer of more digits than Python reads
        raise SpecError(f"{where}: not valid JSON ({exc})") from None
    if flagged:
        _refuse_first(doc, where)
    return doc


def _refuse_first(doc: Any, where: str) -> None:
    """The first duplicate key or non-number in document order, as a SpecError."""
    stack: list[tuple[str, Any]] = [("", doc)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, _Twice):
            field = f"{path}.{value.key}" if path else value.key
            raise SpecError(
                f"{where}: {field!r} is given twice (JSON would keep the last one silently, so which one is "
                "meant cannot be told): keep one"
            )
        if isinstance(value, _NotANumber):
            raise SpecError(
                f"{where}: {path or 'the document'} is {value.text}, not a number this reads (no NaN, Infinity "
                "or number beyond a double): give a whole number"
            )
        if isinstance(value, dict):
            items = [(f"{path}.{k}" if path else str(k), v) for k, v in value.items()]
        elif isinstance(value, list):
            items = [(f"{path}[{i}]", v) for i, v in enumerate(value)]
        else:
            continue
        stack.extend(reversed(items))


__all__ = ["MIB", "loads", "read_bytes", "read_text", "whole_number"]
