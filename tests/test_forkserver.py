"""make test's fork server (adapter/forkserver.py): a forked process is the fresh interpreter
its caller asked for (streams, place, environment, arguments, exit status, signals), or a
fresh interpreter where it could not be one. A light preload (json, decimal) stands for
torch and the rest: whether a module is already imported tells a forked process from a
fresh one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from vllm_contract.adapter import forkserver

SERVE = [sys.executable, "-m", "vllm_contract.adapter.forkserver", "serve", "--preload", "json,decimal", "--"]
CLIENT = forkserver.client()
# a fresh interpreter has not imported decimal; a forked one has
FORKED = "import sys; print('forked' if 'decimal' in sys.modules else 'fresh')"


def serve(script: str, tmp_path: Path, **kwargs) -> subprocess.CompletedProcess:
    """Run a shell script beside a fork server; $CLIENT is the forked Python."""
    body = f"CLIENT='{' '.join(CLIENT)}'\n" + textwrap.dedent(script)
    (tmp_path / "run.sh").write_text(body)
    command = [*SERVE, "bash", str(tmp_path / "run.sh")]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, **kwargs)


def test_a_forked_process_is_the_interpreter_its_caller_asked_for(tmp_path):
    (tmp_path / "work").mkdir()
    done = serve(
        f"""
        cd {tmp_path}/work
        echo from-stdin | MINE=1 $CLIENT -c "{FORKED}
import os; print(sys.argv, os.getcwd(), os.environ['MINE'], input())
print('to stderr', file=sys.stderr)
sys.exit(3)" one two
        echo "exit $?"
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "forked"
    assert lines[1] == f"['-c', 'one', 'two'] {tmp_path}/work 1 from-stdin"
    assert lines[2] == "exit 3"
    assert "to stderr" in done.stderr


def test_a_descriptor_its_caller_passed_is_there_at_its_number(tmp_path):
    """A fresh interpreter inherits every descriptor not closed on exec (a jobserver's, a
    socket its parent passed it): the forked one gets each at the same number."""
    done = serve(
        f"""
        $CLIENT -c "{FORKED}; import os; os.write(7, b'through 7'); os.write(4, b'through 4')" \\
            7>{tmp_path}/seven 4>{tmp_path}/four
        """,
        tmp_path,
    )
    assert done.stdout.strip() == "forked", done.stderr
    assert (tmp_path / "seven").read_text() == "through 7"
    assert (tmp_path / "four").read_text() == "through 4"


def test_more_descriptors_than_one_message_passes_run_fresh(tmp_path):
    done = serve(
        f"""
        for fd in $(seq 10 270); do eval "exec $fd>/dev/null"; done
        $CLIENT -c "{FORKED}"
        """,
        tmp_path,
    )
    assert done.stdout.strip() == "fresh", done.stderr


def test_a_module_and_a_script_run_as_python_runs_them(tmp_path):
    (tmp_path / "script.py").write_text("import sys\nprint(__name__, sys.argv)\n")
    done = serve(
        f"""
        $CLIENT -m json.tool --help > /dev/null && echo module-ok
        $CLIENT {tmp_path}/script.py a
        $CLIENT -c "raise ValueError('boom')"; echo "exit $?"
        """,
        tmp_path,
    )
    assert done.stdout.splitlines() == ["module-ok", f"__main__ ['{tmp_path}/script.py', 'a']", "exit 1"], done.stderr
    assert "ValueError: boom" in done.stderr


def test_an_environment_an_import_reads_differently_runs_fresh(tmp_path):
    """The preloaded modules were imported in the server's environment: a process whose
    environment differs in a variable an import reads is not forked from it."""
    done = serve(
        f"""
        $CLIENT -c "{FORKED}"
        PYTHONHASHSEED=7 $CLIENT -c "{FORKED}"
        HF_HUB_OFFLINE=0 $CLIENT -c "{FORKED}"
        UNRELATED_VARIABLE=1 $CLIENT -c "{FORKED}"
        $CLIENT -X dev -c "{FORKED}"
        """,
        tmp_path,
    )
    assert done.stdout.split() == ["forked", "fresh", "fresh", "forked", "fresh"], done.stderr


def test_without_a_server_the_client_is_plain_python(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != forkserver.ENV_SOCKET}
    done = subprocess.run([*CLIENT, "-c", FORKED + "; sys.exit(5)"], env=env, capture_output=True, text=True)
    assert (done.returncode, done.stdout.strip()) == (5, "fresh")
    env[forkserver.ENV_SOCKET] = str(tmp_path / "nobody-listens")
    done = subprocess.run([*CLIENT, "-c", FORKED], env=env, capture_output=True, text=True)
    assert (done.returncode, done.stdout.strip()) == (0, "fresh")


def test_a_signal_to_the_client_reaches_the_forked_process(tmp_path):
    """SIGTERM sent to the client alone ends the forked process, and the client ends as
    a killed interpreter would (the shell reads 143)."""
    done = serve(
        f"""
        $CLIENT -c "import time; open('{tmp_path}/started', 'w').close(); time.sleep(60)" &
        client=$!
        while [ ! -e {tmp_path}/started ]; do sleep 0.05; done
        kill -TERM $client
        wait $client; echo "exit $?"
        """,
        tmp_path,
    )
    assert done.stdout.split() == ["exit", "143"], done.stderr


def test_an_interrupt_to_the_process_group_arrives_once(tmp_path):
    """Ctrl-C reaches a terminal's whole foreground group: the forked process is in its
    client's group and gets it there; the client passes on no interrupt (one sent to it
    alone is not passed on: it would be a second Ctrl-C)."""
    code = f"""
import signal, time
seen = []
signal.signal(signal.SIGINT, lambda *a: seen.append(1))
open('{tmp_path}/started', 'w').close()
deadline = time.time() + 3
while time.time() < deadline and not seen:
    time.sleep(0.05)
time.sleep(1.5)  # a second interrupt, if any, comes within it
print('interrupts', len(seen))
"""
    (tmp_path / "child.py").write_text(code)
    done = serve(
        f"""
        set -m  # the client in a process group of its own, as a terminal's job is
        $CLIENT {tmp_path}/child.py &
        client=$!
        while [ ! -e {tmp_path}/started ]; do sleep 0.05; done
        kill -INT $client
        sleep 0.5
        kill -INT -- -$client
        wait $client
        """,
        tmp_path,
    )
    assert done.stdout.strip() == "interrupts 1", done.stderr


def test_the_server_ends_with_its_command_and_leaves_nothing(tmp_path):
    """serve's status is the command's; what it forked does not outlive the command, and
    its socket's folder is gone."""
    done = serve(
        f"""
        echo $VLLM_CONTRACT_FORKSERVER > {tmp_path}/socket-path
        $CLIENT -c "import os, time; print(os.getpid(), flush=True); time.sleep(120)" > {tmp_path}/pid &
        while [ ! -s {tmp_path}/pid ]; do sleep 0.05; done
        exit 7
        """,
        tmp_path,
    )
    assert done.returncode == 7, done.stderr
    socket_path = Path((tmp_path / "socket-path").read_text().strip())
    assert not socket_path.parent.exists()
    pid = int((tmp_path / "pid").read_text())
    time.sleep(0.2)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_sigterm_to_the_server_ends_its_command(tmp_path):
    (tmp_path / "run.sh").write_text(f"touch {tmp_path}/started; sleep 60\n")
    server = subprocess.Popen([*SERVE, "bash", str(tmp_path / "run.sh")])
    deadline = time.monotonic() + 30
    while not (tmp_path / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=30) == 128 + signal.SIGTERM


@pytest.mark.parametrize(
    ("argv", "plays"),
    [
        (["-m", "pytest", "-q"], True),
        (["-u", "-B", "-c", "pass"], True),
        (["script.py", "-x"], True),
        (["-X", "dev", "-c", "pass"], False),
        (["-uc", "pass"], False),
        (["-"], False),
        ([], False),
        (["-m"], False),
    ],
)
def test_only_the_command_lines_it_can_play_are_forked(argv, plays):
    assert (forkserver.parse_python(argv) is not None) is plays


def test_a_command_that_cannot_run_is_one_line_and_leaves_nothing(tmp_path):
    before = set(Path(tempfile.gettempdir()).glob("vllm-contract-forkserver-*"))
    done = subprocess.run([*SERVE, str(tmp_path / "no-such-command")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 127
    assert done.stderr.strip().splitlines() == [
        f"fork server: cannot run {tmp_path}/no-such-command: No such file or directory"
    ]
    assert set(Path(tempfile.gettempdir()).glob("vllm-contract-forkserver-*")) == before


def test_a_client_that_says_nonsense_or_nothing_holds_up_no_other(tmp_path):
    """A request the server cannot read is dropped; the next one is served."""
    code = f"""
import os, socket, subprocess, sys
for payload in (b"not json\\n", b"\\xff" * 10 + b"\\n", b"[1, 2]\\n", b'{{"argv": 3}}\\n', b""):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(os.environ["{forkserver.ENV_SOCKET}"])
    if payload:  # its first byte carries the descriptors, as the client sends them
        socket.send_fds(s, [payload[:1]], [0, 1, 2])
        s.sendall(payload[1:])
    s.close()
print(subprocess.run({CLIENT!r} + ["-c", "{FORKED}"], capture_output=True, text=True).stdout.strip())
"""
    (tmp_path / "nonsense.py").write_text(code)
    done = serve(f"{sys.executable} {tmp_path}/nonsense.py", tmp_path)
    assert done.stdout.strip() == "forked", done.stderr


def test_a_server_that_cannot_start_says_so_and_runs_the_command(monkeypatch, capsys):
    """A full disk (no folder for the socket) costs speed, never the run."""
    import errno

    def full(**_):
        raise OSError(errno.ENOSPC, "No space left on device", "/tmp")

    monkeypatch.setattr(tempfile, "mkdtemp", full)
    assert forkserver.serve(["sh", "-c", "exit 3"], preload=()) == 3
    said = capsys.readouterr().err.strip().splitlines()
    assert said == ["fork server: not started (No space left on device: /tmp); each process imports for itself"]
