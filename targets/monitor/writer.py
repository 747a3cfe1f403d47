"""The contract monitor's trace files, written off the engine's step: a thread, a bounded queue, a rename.

The monitor finds a violation inside vLLM's step; the step must never wait on a disk (a
folder on a hung network mount, a full disk, a FIFO where a file was expected). So the
step only builds the trace's text and hands it to `submit`, which never blocks: a
thread of this process writes it. The queue holds `QUEUE` traces; one more is dropped,
and the monitor says so in one line with the count.

Each file is written whole into a temporary file in the target folder and then linked
to its name, which never replaces a file (a full disk leaves no file, not a 0-byte
one). The name is unique across restarts: `monitor-RELEASE-PROPERTY-TIME-PID-RANDOM-N.itf.json`
(a container restarted with the same PID writes a new file beside the last crash's);
N, the monitor's count, is last, so the files of one process sort in the order written.

At exit the interpreter waits up to `EXIT_WAIT_S` for traces still queued (an engine
that dies of the assert the monitor saw coming exits this way), then gives them up with
one line. Paths are logged on one line whatever they hold (`shown`).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import queue
import secrets
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

QUEUE = 8  # traces waiting to be written at most; the monitor writes 4 per process by default
EXIT_WAIT_S = 10.0
TRIES = 5  # names tried when a random one is taken


class TraceDropped(RuntimeError):
    """The writer still holds QUEUE traces (its folder blocks): this one is not written."""


def shown(path: Path | str) -> str:
    """A path as a log line shows it: as it is when printable, else quoted (a newline in a
    folder's name must not split the line)."""
    text = str(path)
    return text if text.isprintable() else repr(text)


def trace_name(release: str, prop: str, number: int) -> str:
    """A file name no other process, and no earlier run of this one, has used."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return f"monitor-{release}-{prop}-{stamp}-{os.getpid()}-{secrets.token_hex(4)}-{number}.itf.json"


def publish(path: Path, text: str) -> Path:
    """Write `text` whole to a temporary file beside `path`, then give it its name, which
    never replaces a file (another random part is tried); returns the name it got. On
    an error nothing is left, neither the file nor its temporary."""
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        target = path
        for _ in range(TRIES):
            try:
                os.link(temporary, target)
                return target
            except FileExistsError:
                target = _another(path)
            except OSError as exc:  # a file system without hard links: a rename, if the name is free
                if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK):
                    raise
                if os.path.lexists(target):
                    raise FileExistsError(errno.EEXIST, "a file has that name", str(target)) from None
                os.rename(temporary, target)
                return target
        raise FileExistsError(errno.EEXIST, f"{TRIES} names taken", str(path))
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)


def _another(path: Path) -> Path:
    """`path` with another random part (the one before the count)."""
    head, number = path.name.removesuffix(".itf.json").rsplit("-", 1)
    return path.with_name(f"{head.rsplit('-', 1)[0]}-{secrets.token_hex(4)}-{number}.itf.json")


class TraceWriter:
    """One thread writing queued traces (`submit`), and a way to wait for them (`flush`)."""

    def __init__(self, capacity: int = QUEUE):
        self.queue: queue.Queue = queue.Queue(capacity)
        self.dropped = 0
        self.current: tuple | None = None  # (path, log) of the trace being written now
        self.pid = os.getpid()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def submit(self, path: Path, text: str, log: Callable[[str], None]) -> None:
        """Queue one trace and return at once; raises TraceDropped when the queue is full."""
        self._start()
        try:
            self.queue.put_nowait((path, text, log))
        except queue.Full:
            self.dropped += 1
            raise TraceDropped(
                f"{self.queue.maxsize} earlier trace(s) still wait to be written (is {shown(path.parent)} blocked?); "
                f"dropped, {self.dropped} so far in this process"
            ) from None

    def flush(self, timeout: float) -> bool:
        """Wait until every queued trace is written or has failed; False when `timeout` ran out."""
        deadline = time.monotonic() + timeout
        with self.queue.all_tasks_done:
            while self.queue.unfinished_tasks:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.queue.all_tasks_done.wait(left)
        return True

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="vllm-contract monitor writer", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            path, text, log = self.queue.get()
            self.current = (path, log)
            try:
                written = publish(path, text)
                if written != path:
                    log(f"vllm-contract monitor: {shown(path)} was taken; the trace is {shown(written)}")
            except Exception as exc:  # the engine goes on: say why there is no file
                log(f"vllm-contract monitor: the trace {shown(path)} could not be written ({exc}); it is lost")
            finally:
                self.current = None
                self.queue.task_done()

    def at_exit(self) -> None:
        """Give the traces still queued EXIT_WAIT_S to be written; say so of those that are not."""
        if self.pid != os.getpid() or self._thread is None or self.flush(EXIT_WAIT_S):
            return
        left = [self.current] if self.current is not None else []
        with contextlib.suppress(queue.Empty):
            while True:
                path, _text, log = self.queue.get_nowait()
                left.append((path, log))
        if left:
            paths, log = [p for p, _ in left], left[0][1]
            log(
                f"vllm-contract monitor: {len(left)} trace(s) not written within {EXIT_WAIT_S:g} s of the engine's "
                f"exit (is {shown(paths[0].parent)} blocked?), lost: {', '.join(shown(p.name) for p in paths)}"
            )


_WRITER: TraceWriter | None = None
_LOCK = threading.Lock()


def writer() -> TraceWriter:
    """This process's writer (a process forked from one with a writer starts its own)."""
    global _WRITER
    with _LOCK:
        if _WRITER is None:
            _WRITER = TraceWriter()
            atexit.register(_WRITER.at_exit)
        return _WRITER


def _forget_in_child() -> None:
    global _WRITER, _LOCK
    _WRITER, _LOCK = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)


def submit(path: Path, text: str, log: Callable[[str], None]) -> None:
    writer().submit(path, text, log)


def flush(timeout: float = EXIT_WAIT_S) -> bool:
    """Wait for this process's queued traces (tests, and anyone reading the folder next)."""
    return writer().flush(timeout)
