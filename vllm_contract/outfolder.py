"""Result folders a command replaces whole: a reader sees the old result or the new one, never a mix.

Every command that writes a folder of results (prove, generate, report, review, explain,
fuzz) goes through `OutFolder`:

  * Only a folder of ours is replaced. A marker file lists what we wrote; a folder
    holding anything else, a symbolic link, a file, the current folder or one above it
    is refused before any work starts, and so is a folder that cannot be written (the
    staging folder and its marker are created first, so a read-only disk is one line
    before the work, not a traceback after it).
  * The new result is written into a staging folder beside the target
    (`<name>.<pid>.XXXX`) and swapped in with one atomic exchange (Linux
    renameat2(RENAME_EXCHANGE); elsewhere two renames with SIGINT and SIGTERM held back).
  * A run that fails or is interrupted removes its staging folder on every exit path:
    SIGTERM is turned into an exception (`interrupts`) so the same cleanup runs as for
    Ctrl-C. Staging folders of a run killed outright are removed at the next start, once
    their process is gone.
  * A result that grows as a run works (fuzz's finished shards, kept for --resume) is
    written file by file with `write_atomic`, under a pattern the marker lists
    (`shards/*`); the merged result is still swapped in whole.
  * One run at a time writes a folder that grows as a run works (fuzz's): `exclusive`
    holds a lock file beside it, `.<name>.lock`, with the owner's pid; a second run
    refuses with one line, and a lock its owner left when it died is taken over.
  * `keep_previous` (review, report, explain: results people post or act on): while a
    run works, the previous result is moved aside to `<name>.previous`, so a run that
    fails leaves no result that reads as its own; the previous one stays there, named as
    the previous one, until a run completes.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import re
import shutil
import signal
import tempfile
import threading
from pathlib import Path

from vllm_contract.spec.errors import ContractError, ExitStatus, UsageError

MARKER = ".vllm-contract"
NOTE = "written by {tool}, which replaces this folder only while it holds just the files listed here"
PREVIOUS = ".previous"


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised as an exception so the cleanup written for Ctrl-C runs for it too."""


def stopped(exc: BaseException, left: str) -> int:
    """Say in one line on stderr why a run stopped and what it left (`left`: "the previous
    result is in ...", "nothing written"), and return the exit status for it."""
    import sys

    if isinstance(exc, Terminated):
        line, status = f"terminated (SIGTERM): {left}", ExitStatus.TERMINATED
    elif isinstance(exc, KeyboardInterrupt):
        line, status = f"interrupted: {left}", ExitStatus.INTERRUPTED
    elif isinstance(exc, ContractError):
        line, status = f"error: {exc}; {left}", exc.status
    elif isinstance(exc, OSError):
        line, status = f"error: writing failed ({exc}); {left}", ExitStatus.COULD_NOT_RUN
    else:
        raise exc
    print(line, file=sys.stderr)
    return status


# what stopped() reports; anything else is a bug and propagates
STOPS = (KeyboardInterrupt, ContractError, OSError)


@contextlib.contextmanager
def interrupts():
    """Within the block SIGTERM raises Terminated (a KeyboardInterrupt)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def signals_blocked():
    """SIGINT and SIGTERM wait until the block ends (a swap is never cut in half)."""
    sigs = {signal.SIGINT, signal.SIGTERM}
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _exchange(a: Path, b: Path) -> bool:
    """Linux renameat2(RENAME_EXCHANGE): swap two paths in one step. False where the
    system or the file system does not offer it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(b))


_HELD: dict[Path, int] = {}  # lock files this process holds -> how many times entered


@contextlib.contextmanager
def exclusive(folder: Path, option: str = "--out"):
    """While the block runs, no other run of ours writes `folder`: a lock file beside it
    (`.<name>.lock`) holds the owner's pid under an flock, which the kernel lets go when
    the owner ends, however it ends. A second run raises UsageError (one line, naming the
    owner's pid); a lock file left by a dead owner is locked no more and is taken over.
    Re-entrant within one process."""
    import fcntl

    lock = folder.parent / f".{folder.name}.lock"
    key = lock.absolute()
    if key in _HELD:
        _HELD[key] += 1
        try:
            yield
        finally:
            _HELD[key] -= 1
        return
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{option} {folder}: cannot create {lock.parent} ({exc.strerror}); choose another") from None
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise UsageError(f"{option} {folder}: cannot write {lock} ({exc.strerror}); choose another") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise UsageError(
                f"{option} {folder}: another run (pid {owner}) is writing there now; wait for it to end, "
                f"or name another {option}"
            ) from None
        except OSError:  # a file system without flock: the pid alone says whether the owner lives
            owner = os.pread(fd, 32, 0).decode(errors="replace").strip()
            if owner.isdigit() and int(owner) != os.getpid() and pid_alive(int(owner)):
                os.close(fd)
                raise UsageError(
                    f"{option} {folder}: another run (pid {owner}) is writing there now; wait for it to end, "
                    f"or name another {option}"
                ) from None
        try:  # the file locked must still be the one at that name (an owner that ended removes it)
            same = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _HELD[key] = 1
        yield
    finally:
        _HELD.pop(key, None)
        with contextlib.suppress(OSError):
            os.unlink(lock)  # still locked: a run waiting on this file opens the new one
        os.close(fd)


def write_atomic(path: Path, text: str) -> None:
    """Write one file whole: a reader (or a run resumed after a kill) sees the old file, the
    new one or none, never a part. The temporary file is `.<name>.<pid>.tmp` beside it."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def swap_in(staging: Path, target: Path, old_prefix: str) -> None:
    """Make `staging` the new `target`: readers see the old folder or the new one."""
    with signals_blocked():
        if not target.exists():
            os.rename(staging, target)
            return
        if _exchange(staging, target):
            old = staging  # now holds the previous contents
        else:
            old = Path(tempfile.mkdtemp(prefix=old_prefix, dir=target.parent))
            os.rename(target, old)  # onto an empty folder: replaces it
            os.rename(staging, target)
    shutil.rmtree(old, ignore_errors=True)


class OutFolder:
    """One result folder of one command (see the module docstring).

    marker: the names of marker files that make a folder ours (the first is written;
    the others are what earlier versions wrote). None: the folder is ours whatever it
    holds (generated_tests/cases, which only generation writes).
    bare: files a folder written before markers existed may hold (it is ours only if it
    holds nothing else and has the first of them).
    """

    def __init__(
        self,
        path: Path | str,
        tool: str,
        option: str = "--out",
        legacy_markers: tuple[str, ...] = (),
        bare: tuple[str, ...] = (),
        keep_previous: bool = False,
        owned: bool = False,
        hidden: bool = False,
        legacy_unlisted: tuple[str, ...] = (),
    ):
        self.path = Path(path)
        self.tool = tool
        self.option = option
        self.markers = (MARKER, *legacy_markers)
        self.legacy_unlisted = legacy_unlisted  # folders an older marker did not list (its files are ours)
        self.bare = bare
        self.keep_previous = keep_previous
        self.owned = owned
        # staging folders named .<name>.<pid>.XXXX (hidden: pytest does not collect them)
        self.prefix = ("." if hidden else "") + self.path.name
        self.staging: Path | None = None
        self.files: list[str] = []
        self.previous: Path | None = None

    # ------------------------------------------------------------------ whose folder
    def marked_files(self, folder: Path) -> set[str] | None:
        """The files a marker of ours lists (None: no readable marker)."""
        for name in self.markers:
            try:
                record = json.loads((folder / name).read_text())
            except (OSError, ValueError):
                continue
            files = record.get("files") if isinstance(record, dict) else None
            if isinstance(files, list) and all(isinstance(f, str) for f in files):
                if name != MARKER:
                    files = files + [f"{prefix}*" for prefix in self.legacy_unlisted]
                return set(files) | set(self.markers)
        return None

    def foreign_entry(self, folder: Path) -> str | None:
        """The first entry of `folder` we did not write (None: all ours, or empty)."""
        if self.owned:
            return None
        entries = sorted(folder.rglob("*"))
        if not entries:
            return None
        listed = self.marked_files(folder)
        if listed is None:
            names = {e.name for e in folder.iterdir()}
            if not self.bare or self.bare[0] not in names:
                return str(entries[0].relative_to(folder))
        for entry in entries:
            rel = entry.relative_to(folder).as_posix()
            if entry.is_symlink():
                return rel
            if entry.is_dir():
                continue
            if listed is not None:
                if rel not in listed and not any(p.endswith("*") and rel.startswith(p[:-1]) for p in listed):
                    return rel
            elif not any(rel == b or (b.endswith("/") and rel.startswith(b)) for b in self.bare):
                return rel
        return None

    def check(self) -> None:
        """Refuse a folder this command must not replace (raises UsageError)."""
        out, shown = self.path, str(self.path) or "."
        here = Path.cwd().resolve()
        target = out.resolve()
        if target == here or target in here.parents:
            raise UsageError(
                f"{self.option} {shown}: that is the current folder or holds it; "
                "name a folder of its own for the results"
            )
        if out.is_symlink():
            raise UsageError(f"{self.option} {shown}: is a symbolic link; name a real folder")
        if out.exists():
            if not out.is_dir():
                raise UsageError(f"{self.option} {shown}: is a file, not a folder; name a folder")
            try:
                foreign = self.foreign_entry(out)
            except OSError as exc:
                raise UsageError(f"{self.option} {shown}: cannot be read ({exc.strerror})") from None
            if foreign is not None:
                raise UsageError(
                    f"{self.option} {shown}: holds {foreign}, which {self.tool} did not write; refusing to replace "
                    "the folder (name a new or empty folder, or one a previous run wrote)"
                )
            if not os.access(out, os.W_OK | os.X_OK):
                raise UsageError(f"{self.option} {shown}: not writable, so it could not be replaced; choose another")

    # ------------------------------------------------------------------ debris
    def _pattern(self) -> re.Pattern:
        return re.compile(rf"{re.escape(self.prefix)}\.(?:(\d+)\.(old-)?)?[a-z0-9_]+")

    def clean_stale(self) -> list[Path]:
        """Remove the staging folders a killed run left beside the folder (once its process
        is gone and the folder holds only what we write); if the folder itself is missing
        (killed mid-swap), the old result goes back."""
        out = self.path
        parent, name = out.parent, out.name
        removed = []
        try:
            candidates = sorted(parent.iterdir()) if parent.is_dir() else []
        except OSError:
            return removed
        pattern = self._pattern()
        for entry in candidates:
            if entry.name == name + PREVIOUS:
                if out.exists() and not self.keep_previous:
                    continue
                if out.exists() and self.foreign_entry(entry) is None:
                    shutil.rmtree(entry, ignore_errors=True)  # a completed run did not get to remove it
                    removed.append(entry)
                continue
            match = pattern.fullmatch(entry.name)
            if not match or entry.is_symlink() or not entry.is_dir():
                continue
            pid, old = match.group(1), match.group(2)
            if pid is None and len(entry.name) != len(self.prefix) + 9:  # mkdtemp's 8 characters, before pids
                continue
            if pid is not None and pid_alive(int(pid)):
                continue  # a run in progress
            try:
                if not self.owned and self.foreign_entry(entry) is not None:
                    continue
                if old and not out.exists():
                    os.rename(entry, out)
                else:
                    shutil.rmtree(entry)
                removed.append(entry)
            except OSError:
                continue
        return removed

    # ------------------------------------------------------------------ a run
    def begin(self) -> Path:
        """Check the folder, clear debris, create the staging folder (raises UsageError when
        it cannot be written) and, with keep_previous, set the previous result aside."""
        self.check()
        parent = self.path.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(
                f"{self.option} {self.path}: cannot create {parent} ({exc.strerror}); choose another {self.option}"
            ) from None
        self.clean_stale()
        try:
            staging = Path(tempfile.mkdtemp(prefix=f"{self.prefix}.{os.getpid()}.", dir=parent))
        except OSError as exc:
            raise UsageError(
                f"{self.option} {self.path}: cannot write in {parent} ({exc.strerror}); choose another {self.option}"
            ) from None
        self.staging = staging
        try:
            self._write_marker()  # first: a staging folder with our marker is ours to clean
        except OSError as exc:
            self.abort()
            raise UsageError(
                f"{self.option} {self.path}: cannot write in {parent} ({exc.strerror}); choose another {self.option}"
            ) from None
        if self.keep_previous and self.path.exists():
            previous = self.path.with_name(self.path.name + PREVIOUS)
            with signals_blocked():
                shutil.rmtree(previous, ignore_errors=True)
                os.rename(self.path, previous)
            self.previous = previous
        return staging

    def _write_marker(self) -> None:
        if self.owned:
            return
        record = {"note": NOTE.format(tool=self.tool), "files": sorted(set(self.files))}
        (self.staging / MARKER).write_text(json.dumps(record, indent=1) + "\n")

    def write_text(self, rel: str, text: str) -> Path:
        """Write one file of the result into the staging folder (listed before it is written,
        so a half-written file is still ours to remove)."""
        self.files.append(rel)
        self._write_marker()
        path = self.staging / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    def write_chunks(self, rel: str, chunks) -> Path:
        """`write_text` for a text made piece by piece (never held whole)."""
        self.files.append(rel)
        self._write_marker()
        path = self.staging / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as file:
            for chunk in chunks:
                file.write(chunk)
        return path

    def adopt(self, rel: str) -> None:
        """List a file something else wrote into the staging folder (a renderer's output)."""
        self.files.append(rel)
        self._write_marker()

    def commit(self) -> None:
        """Swap the staging folder in; the previous result, if it was set aside, goes."""
        self._write_marker()
        swap_in(self.staging, self.path, f"{self.prefix}.{os.getpid()}.old-")
        self.staging = None
        if self.keep_previous:  # set aside by this run, or left by one that failed: superseded now
            previous = self.path.with_name(self.path.name + PREVIOUS)
            if previous.is_dir() and self.foreign_entry(previous) is None:
                shutil.rmtree(previous, ignore_errors=True)
            self.previous = None

    def abort(self) -> None:
        """Remove the staging folder (on every failing exit path)."""
        if self.staging is not None and self.staging.exists():
            shutil.rmtree(self.staging, ignore_errors=True)
        self.staging = None

    def failed_note(self) -> str:
        """What a failed run tells about the result folder."""
        if self.previous is not None and self.previous.exists():
            return f"{self.path} not written; the previous result is in {self.previous}"
        return f"{self.path} left as it was"
