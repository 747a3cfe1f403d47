"""One process imports what every vLLM tree needs once; the vLLM-driving processes are forked from it.

Each process that loads a vLLM tree spends about 3.5 of its 6 CPU seconds of loading in
third-party imports (torch and its compiler, transformers, sympy, ...) that are the same
for every tree. make test starts a dozen such processes (its pytest stages, their xdist
workers, the children of adapter/child.py), so:

    python -m vllm_contract.adapter.forkserver serve -- make test-stages

imports those modules once (PRELOAD; never vLLM itself: each process picks its own tree),
runs the command with VLLM_CONTRACT_FORKSERVER naming the server's socket, and forks
each process that asks while the command runs. A process asks through

    python -m vllm_contract.adapter.forkserver python [-u] [-B] (-m MODULE | -c CODE | SCRIPT) [ARGS...]

which is a Python interpreter to its caller (make, pytest-xdist's `--tx popen//python=`,
adapter/child.py): its stdin, stdout and stderr, working directory, environment,
arguments and process group become the forked process's, its exit status is the forked
process's; SIGTERM, SIGHUP and SIGQUIT sent to it are passed on, and an interrupt reaches
the forked process as a terminal sends it, to their common process group. It forks only
where a fresh interpreter would have done the same imports the same way: with the
server's environment in every variable an import reads (IMPORT_TIME), and no option but
those above; anything else, or no server, and it runs a fresh interpreter in its own
place (exec), with nothing said: only slower.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib
import io
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ENV_SOCKET = "VLLM_CONTRACT_FORKSERVER"
PACKAGE = "vllm_contract.adapter.forkserver"
# the modules a vLLM tree's import spends its time in, none of them vLLM; kernels.runtime
# first: it settles TRITON_INTERPRET before Triton is imported (kernels/runtime.py says why)
PRELOAD = (
    "vllm_contract.kernels.runtime",
    "torch",
    "torch._dynamo",
    "torch._inductor.config",
    "transformers",
    "transformers.configuration_utils",
    "transformers.tokenization_utils_base",
    "sympy",
    "networkx",
    "numpy",
    "pydantic",
    "openai",
    "fastapi",
    "aiohttp",
    "z3",
    "jinja2",
)
# variables an import reads (Python's own, the libraries' in PRELOAD, the C runtimes
# below them): a process whose value differs is not forked, it starts fresh
IMPORT_TIME = (
    "PYTHON",
    "LD_",
    "TORCH",
    "PYTORCH",
    "TRITON",
    "CUDA",
    "NVIDIA",
    "HF_",
    "HUGGINGFACE",
    "TRANSFORMERS",
    "TOKENIZERS",
    "OMP_",
    "MKL_",
    "KMP_",
    "OPENBLAS",
    "NUMPY",
    "HYPOTHESIS",
    "Z3",
)
HEADER_LIMIT = 64 << 20  # the request: arguments and environment, as JSON
# what a request holds, and of which type (anything else is refused)
REQUEST = {"argv": list, "flags": dict, "cwd": str, "env": dict, "pgid": int, "fds": list}
MAX_FDS = 250  # descriptors passed with it (the kernel takes at most 253 in one message)


def client() -> list[str]:
    """The command line of a Python interpreter forked from the server where one runs."""
    return [sys.executable, "-m", PACKAGE, "python"]


def interpreter() -> list[str]:
    """The Python interpreter a vLLM-driving child is started with: forked where this
    process runs beside a server, else this one's."""
    return client() if os.environ.get(ENV_SOCKET) else [sys.executable]


def _import_time(env: dict) -> dict:
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME)}


# ---------------------------------------------------------------------- the client


def parse_python(argv: list[str]) -> tuple[dict, list[str]] | None:
    """A Python command line the server can play: ({unbuffered, no_bytecode}, [what, ...])
    where what is ("-m", MODULE), ("-c", CODE) or (SCRIPT,) and the rest are its
    arguments; None for anything else (it runs fresh)."""
    flags = {"unbuffered": False, "no_bytecode": False}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-u", "-B"):
            flags["unbuffered" if arg == "-u" else "no_bytecode"] = True
        elif arg in ("-m", "-c"):
            if i + 1 >= len(argv):
                return None
            return flags, argv[i:]
        elif arg.startswith("-") or arg == "":
            return None  # -X, -W, -E, -I, -O, combined flags, stdin: a fresh interpreter
        else:
            return flags, argv[i:]
        i += 1
    return None  # an interactive interpreter


def python_main(argv: list[str] | None = None) -> int:
    """The client: a Python interpreter, forked from the server where one runs and the
    request fits; else this process becomes a fresh one."""
    argv = sys.argv[1:] if argv is None else argv
    parsed = parse_python(argv)
    path = os.environ.get(ENV_SOCKET)
    conn = None
    if parsed is not None and path:
        conn = _connect(path)
    fds = _inherited(conn.fileno()) if conn is not None else None
    if conn is None or fds is None:
        _exec_fresh(argv)
    flags, command = parsed
    header = {
        "argv": command,
        "flags": flags,
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "pgid": os.getpgrp(),
        "fds": fds,
    }
    try:
        _send(conn, header, fds)
        reply = _receive(conn)
    except OSError:
        reply = None
    if reply is None or "pid" not in reply:  # refused (its environment differs) or gone
        conn.close()
        _exec_fresh(argv)
    return _wait(conn, reply["pid"], grouped=reply.get("pgid") == os.getpgrp())


def _inherited(ours: int) -> list[int] | None:
    """The descriptors a fresh interpreter started here would inherit (0-2 and every one not
    closed on exec: a jobserver's, a socket a parent passed), which the forked one is given
    at the same numbers; None when there are more than one message can pass (it starts
    fresh)."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd == ours:
            continue
        try:
            if fd <= 2 or os.get_inheritable(fd):
                found.append(fd)
        except OSError:  # the listing's own descriptor, closed by now
            continue
    return sorted(found) if len(found) <= MAX_FDS else None


def _connect(path: str) -> socket.socket | None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        conn.close()
        return None
    return conn


def _exec_fresh(argv: list[str]):
    os.execv(sys.executable, [sys.executable, *argv])


def _wait(conn: socket.socket, pid: int, grouped: bool) -> int:
    """The forked process's exit status, passing on the signals this process is sent (an
    interrupt only where the forked process is not in this process's group: there the
    terminal's reaches it as it reaches this one, and a second would be a second Ctrl-C)."""

    def forward(signum, _frame):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    signal.signal(signal.SIGINT, signal.SIG_IGN if grouped else forward)
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, forward)
    reply = _receive(conn)
    if reply is None:  # the server went away: the forked process with it
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        print("vllm-contract-python: the fork server ended before the process it started", file=sys.stderr)
        return 1
    status = reply["status"]
    if status < 0:  # killed by a signal: end the same way, as a shell reports it
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
        return 128 - status
    return status


def _send(conn: socket.socket, message: dict, fds: list[int] = ()) -> None:
    data = json.dumps(message).encode() + b"\n"
    if fds:
        socket.send_fds(conn, [data[:1]], list(fds))
        data = data[1:]
    conn.sendall(data)


def _receive(conn: socket.socket, fds: int = 0) -> dict | None:
    """One newline-ended JSON message (and up to `fds` file descriptors with its first
    byte); None at end of input."""
    received: list[int] = []
    chunks = []
    if fds:
        data, received, _flags, _addr = socket.recv_fds(conn, 1, fds)
        if not data:
            return None
        chunks.append(data)
    size = len(b"".join(chunks))
    while not chunks or not chunks[-1].endswith(b"\n"):
        byte = conn.recv(1 if not chunks else 65536)
        if not byte:
            for fd in received:
                os.close(fd)
            return None
        chunks.append(byte)
        size += len(byte)
        if size > HEADER_LIMIT:
            raise OSError("request over the header limit")
    message = json.loads(b"".join(chunks))
    if not isinstance(message, dict):
        raise ValueError("a request is a JSON object")
    if fds:
        message["_fds"] = received
    return message


# ---------------------------------------------------------------------- the server


class Server:
    """The preloaded process: forks a child per request while its command runs."""

    def __init__(self, path: Path, preload: tuple[str, ...]):
        self.path = path
        self.preload = preload
        self.before = dict(os.environ)  # what a fresh process would start from
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(64)
        self.children: dict[int, socket.socket] = {}  # forked pid -> its client
        self.set_by_preload: dict[str, str] = {}
        self.failed: list[str] = []

    def load(self) -> None:
        for name in self.preload:
            try:
                importlib.import_module(name)
            except Exception as exc:  # noqa: BLE001 - a child imports it itself, and says why
                self.failed.append(f"{name}: {type(exc).__name__}: {exc}")
        self.set_by_preload = {k: v for k, v in os.environ.items() if self.before.get(k) != v}
        for stream in (sys.stdout, sys.stderr):
            stream.flush()

    def fits(self, env: dict) -> bool:
        """A fresh interpreter in `env` would import PRELOAD as the server did: the
        server's environment in every variable an import reads, or that and what the
        preload itself set (a process that imported those modules passes it on)."""
        mine = _import_time(env)
        return mine in (_import_time(self.before), _import_time({**self.before, **self.set_by_preload}))

    def handle(self, conn: socket.socket) -> None:
        conn.settimeout(10)  # a client that connects and says nothing holds up no other
        try:
            request = _receive(conn, fds=MAX_FDS)
        except (OSError, ValueError):  # the timeout's too
            conn.close()
            return
        conn.settimeout(None)
        if request is None:
            conn.close()
            return
        fds = request.pop("_fds")
        numbers = request.get("fds")
        shaped = all(isinstance(request.get(k), t) for k, t in REQUEST.items())
        if not shaped or len(fds) != len(numbers) or numbers[:3] != [0, 1, 2] or not self.fits(request["env"]):
            for fd in fds:
                os.close(fd)
            with contextlib.suppress(OSError):
                _send(conn, {"refused": "environment"})
            conn.close()
            return
        try:
            pid = os.fork()
        except OSError:  # no process to be had (memory, a limit): the client starts fresh
            pid = -1
        if pid == 0:
            self._become(request, fds, conn)  # never returns
        for fd in fds:
            os.close(fd)
        if pid < 0:
            with contextlib.suppress(OSError):
                _send(conn, {"refused": "fork"})
            conn.close()
            return
        pgid = None
        with contextlib.suppress(OSError):  # both sides set it, so neither races the other
            os.setpgid(pid, request["pgid"])
        with contextlib.suppress(OSError):  # the child may have ended already
            pgid = os.getpgid(pid)
        try:
            _send(conn, {"pid": pid, "pgid": pgid})
        except OSError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        self.children[pid] = conn

    def _become(self, request: dict, fds: list[int], conn: socket.socket) -> None:
        """In the forked child: the client's streams, place, environment and command."""
        code = 1
        try:
            for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD):
                signal.signal(signum, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            with contextlib.suppress(OSError):  # the client's group, as its own child would be
                os.setpgid(0, request["pgid"])
            self.listener.close()
            conn.close()
            for other in self.children.values():
                other.close()
            _install(fds, request["fds"])
            os.chdir(request["cwd"])
            env = dict(request["env"])
            for key, value in self.set_by_preload.items():
                env.setdefault(key, value)  # what the preloaded imports set, as they would have
            os.environ.clear()
            os.environ.update(env)
            flags = request["flags"]
            sys.dont_write_bytecode = flags["no_bytecode"]
            _streams(flags["unbuffered"])
            code = _run(request["argv"])
        except SystemExit as exc:
            code = _exit_code(exc)
        except BaseException:  # noqa: BLE001 - printed as the interpreter would, then the exit
            import traceback

            traceback.print_exc()
            code = 1
        finally:
            code = _shutdown(code)
            os._exit(code)

    def reap(self) -> None:
        for pid in list(self.children):  # only ours: the command is subprocess's to wait for
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if done == 0:
                continue
            conn = self.children.pop(pid)
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            with contextlib.suppress(OSError):
                _send(conn, {"status": code})
            conn.close()

    def stop(self) -> None:
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while self.children and time.monotonic() < deadline:
            self.reap()
            time.sleep(0.05)
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.listener.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def _install(received: list[int], numbers: list[int]) -> None:
    """The client's descriptors at their numbers (each first moved above every number, so
    that none is overwritten before it is placed)."""
    import fcntl

    floor = max([*received, *numbers]) + 1
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor) for fd in received]
    for fd in received:
        os.close(fd)
    for fd, number in zip(moved, numbers):
        os.dup2(fd, number)  # inheritable, as the client's was
        os.close(fd)


def _streams(unbuffered: bool) -> None:
    """stdin, stdout and stderr on descriptors 0-2, buffered as a fresh interpreter's
    (stdout by line on a terminal, stderr by line, both unbuffered with -u)."""
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)))
    for name, fd in (("stdout", 1), ("stderr", 2)):
        raw = io.FileIO(fd, "w", closefd=False)
        stream = io.TextIOWrapper(
            raw if unbuffered else io.BufferedWriter(raw),
            encoding=getattr(sys, name).encoding,
            errors=getattr(sys, name).errors,
            line_buffering=not unbuffered and (name == "stderr" or os.isatty(fd)),
            write_through=unbuffered,
        )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _run(argv: list[str]) -> int:
    import runpy

    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]  # runpy puts the module's path first
        sys.path[0] = os.getcwd()
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    elif argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        sys.path[0] = ""
        main = sys.modules["__main__"] = type(sys)("__main__")
        exec(compile(argv[1], "<string>", "exec"), main.__dict__)  # noqa: S102 - python -c
    else:
        sys.argv = list(argv)
        sys.path[0] = str(Path(argv[0]).resolve().parent)
        runpy.run_path(argv[0], run_name="__main__")
    return 0


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _shutdown(code: int) -> int:
    """What the interpreter does at its end: wait for its threads, run the exit handlers,
    flush its streams."""
    with contextlib.suppress(BaseException):
        threading._shutdown()  # what the interpreter calls at its end (not public)
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    return code & 0xFF


def serve(command: list[str], preload: tuple[str, ...] = PRELOAD) -> int:
    """Run `command` with a fork server beside it; its exit status. The server's socket
    exists while the command runs; what it forked does not outlive it."""
    try:
        folder = Path(tempfile.mkdtemp(prefix="vllm-contract-forkserver-"))
    except OSError as exc:  # a full disk, a TMPDIR that is not there: only slower without one
        print(
            f"fork server: not started ({exc.strerror}: {exc.filename}); each process imports for itself",
            file=sys.stderr,
        )
        try:
            return subprocess.call(command, close_fds=False)
        except OSError as exc:
            print(f"fork server: cannot run {command[0]}: {exc.strerror}", file=sys.stderr)
            return 127
    server = Server(folder / "socket", preload)
    env = {**os.environ, ENV_SOCKET: str(server.path)}
    # the command starts while the preload runs: its first requests wait in the backlog
    ended: list[int] = []
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the select below
    try:
        process = subprocess.Popen(command, env=env, close_fds=False)  # make's jobserver descriptors pass
    except OSError as exc:
        server.stop()
        folder.rmdir()
        print(f"fork server: cannot run {command[0]}: {exc.strerror}", file=sys.stderr)
        return 127

    def stop_command(signum, _frame):
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signum)

    signal.signal(signal.SIGTERM, stop_command)
    signal.signal(signal.SIGHUP, stop_command)
    signal.signal(signal.SIGINT, lambda *_: None)  # the terminal sends it to the command too
    try:
        server.load()
        if server.failed:
            said = "; ".join(server.failed)
            print(f"fork server: not preloaded (each process imports them itself): {said}", file=sys.stderr)
        selector = selectors.DefaultSelector()
        selector.register(server.listener, selectors.EVENT_READ)
        while not ended:
            for _key, _mask in selector.select(timeout=0.2):
                try:
                    conn, _ = server.listener.accept()
                except OSError:  # the client gave up before it was accepted
                    continue
                server.handle(conn)
            server.reap()
            if process.poll() is not None:
                ended.append(process.returncode)
        return ended[0] if ended[0] >= 0 else 128 - ended[0]
    finally:
        with contextlib.suppress(ProcessLookupError):
            if process.poll() is None:
                process.terminate()
        process.wait()
        server.stop()
        with contextlib.suppress(OSError):
            folder.rmdir()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "python":
        return python_main(argv[1:])
    parser = argparse.ArgumentParser(prog=f"python -m {PACKAGE}", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    run = sub.add_parser("serve", help="run COMMAND with a fork server beside it")
    run.add_argument("--preload", help="modules to import, comma-separated (default: PRELOAD)")
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("serve needs a command: serve -- COMMAND [ARGS...]")
    preload = tuple(filter(None, args.preload.split(","))) if args.preload is not None else PRELOAD
    return serve(command, preload)


if __name__ == "__main__":
    sys.exit(main())
