"""The contract monitor's settings and trace files, without vLLM (targets/monitor/core.py, targets/monitor/writer.py).

A setting out of bounds is the one-line SettingsError; a trace is written off the
engine's step, through a temporary file, under a name no restart reuses, and never over
a file; a folder that blocks or is full costs the step nothing and leaves no 0-byte file.
The monitor on vLLM's scheduler, writing through this: test_monitor.py.
"""

from __future__ import annotations

import errno
import os
import re
import threading
import time
from pathlib import Path

import pytest
from vllm_contract.targets.monitor import writer as monitor_writer
from vllm_contract.targets.monitor.core import ENV_TRACES, ENV_WINDOW, MAX_WINDOW, Settings, SettingsError
from vllm_contract.targets.monitor.writer import TraceDropped, TraceWriter, publish, shown, trace_name


@pytest.mark.parametrize(
    "raw",
    ["1" + "0" * 30, "１" + "0" * 30, "６４", "1" * 5000, str(MAX_WINDOW + 1), "7", "-8", "8.0", " "],
)
def test_a_window_out_of_bounds_or_not_in_digits_is_the_one_line_settings_error(raw):
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({ENV_WINDOW: raw})
    message = str(caught.value)
    assert message.startswith(f"{ENV_WINDOW}=") and "\n" not in message and f"from 8 to {MAX_WINDOW:,}" in message


def test_the_windows_a_user_may_want_are_taken():
    assert [Settings.from_env({ENV_WINDOW: w}).window for w in ("8", " 1024 ", str(MAX_WINDOW))] == [
        8,
        1024,
        MAX_WINDOW,
    ]
    assert Settings.from_env({ENV_TRACES: "0"}).max_traces == 0
    with pytest.raises(SettingsError, match=ENV_TRACES):
        Settings.from_env({ENV_TRACES: "10" * 20})


def test_names_are_unique_across_restarts_and_keep_the_order_written():
    """A restarted container has the same PID: the time and a random part tell its files apart."""
    names = {trace_name("0.32.0", "counter-nonnegative", 1) for _ in range(50)}
    assert len(names) == 50
    pattern = rf"monitor-0\.32\.0-counter-nonnegative-\d{{8}}T\d{{6}}Z-{os.getpid()}-[0-9a-f]{{8}}-1\.itf\.json"
    name = names.pop()
    assert re.fullmatch(pattern, name), name
    assert int(name.rsplit("-", 1)[1].split(".")[0]) == 1  # the count last: one process's files sort as written


def test_a_file_already_there_is_never_replaced(tmp_path):
    earlier = tmp_path / trace_name("0.32.0", "counter-nonnegative", 1)
    earlier.write_text("the last crash's recording")
    written = publish(earlier, "this run's recording")
    assert written != earlier and written.read_text() == "this run's recording"
    assert earlier.read_text() == "the last crash's recording"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([earlier.name, written.name])  # no temporary left


def test_a_fifo_where_the_file_would_go_blocks_nothing(tmp_path):
    """A FIFO at the name stands for a path that blocks when opened: nothing opens it."""
    fifo = tmp_path / trace_name("0.32.0", "counter-nonnegative", 1)
    os.mkfifo(fifo)
    started = time.monotonic()
    written = publish(fifo, "{}")
    assert time.monotonic() - started < 5 and written != fifo and written.read_text() == "{}"


def test_a_full_disk_leaves_no_file_not_even_an_empty_one(tmp_path, monkeypatch):
    real_fdopen = os.fdopen

    class Full:
        def __init__(self, file):
            self.file = file

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

        def write(self, text):
            self.file.write(text[: len(text) // 2])
            self.file.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(monitor_writer.os, "fdopen", lambda fd, *a, **k: Full(real_fdopen(fd, *a, **k)))
    writer, said = TraceWriter(), []
    writer.submit(tmp_path / trace_name("0.32.0", "counter-nonnegative", 1), "x" * 10_000, said.append)
    assert writer.flush(10)
    assert list(tmp_path.iterdir()) == []
    (line,) = said
    assert "could not be written ([Errno 28] No space left on device)" in line and "\n" not in line


def test_a_blocked_folder_never_blocks_the_step_and_a_full_queue_drops_with_a_count(tmp_path, monkeypatch):
    """A hung mount: the first write never returns. Handing over traces still returns at
    once; past the queue's size each is dropped, counted, in one line."""
    release = threading.Event()
    real_publish = monitor_writer.publish

    def hung(path, text):
        release.wait(30)
        return real_publish(path, text)

    monkeypatch.setattr(monitor_writer, "publish", hung)
    writer, said = TraceWriter(capacity=2), []
    folder = tmp_path / "hung\nmount"
    started = time.monotonic()
    writer.submit(folder / trace_name("0.32.0", "counter-nonnegative", 1), "{}", said.append)
    while writer.current is None:  # the writer took it, and hangs in it
        time.sleep(0.01)
    for n in (2, 3):  # queued
        writer.submit(folder / trace_name("0.32.0", "counter-nonnegative", n), "{}", said.append)
    with pytest.raises(TraceDropped) as dropped:
        writer.submit(folder / trace_name("0.32.0", "counter-nonnegative", 4), "{}", said.append)
    with pytest.raises(TraceDropped, match="dropped, 2 so far"):
        writer.submit(folder / trace_name("0.32.0", "counter-nonnegative", 5), "{}", said.append)
    assert time.monotonic() - started < 1  # the step did not wait
    message = str(dropped.value)
    assert "2 earlier trace(s) still wait to be written" in message and "\n" not in message
    assert repr(str(folder)) in message  # the folder's newline shown, not printed
    assert not writer.flush(0.2)
    release.set()
    assert writer.flush(10) and said == []
    assert len(list(folder.glob("*.itf.json"))) == 3


def test_a_path_holding_a_newline_is_shown_on_one_line(tmp_path):
    odd = tmp_path / "a\nb" / "monitor.itf.json"
    assert "\n" not in shown(odd) and shown(odd) == repr(str(odd))
    assert shown(tmp_path / "plain") == str(tmp_path / "plain")


def test_traces_still_queued_at_exit_are_waited_for_then_said_lost(tmp_path, monkeypatch):
    monkeypatch.setattr(monitor_writer, "EXIT_WAIT_S", 0.3)
    release = threading.Event()
    monkeypatch.setattr(monitor_writer, "publish", lambda path, text: release.wait(30))
    writer, said = TraceWriter(), []
    for n in (1, 2):
        writer.submit(tmp_path / trace_name("0.32.0", "counter-nonnegative", n), "{}", said.append)
    time.sleep(0.1)
    writer.at_exit()
    release.set()
    (line,) = said
    assert "2 trace(s) not written within 0.3 s of the engine's exit" in line and "lost:" in line


def test_the_process_writer_is_one_and_flush_waits_for_it(tmp_path):
    path = Path(tmp_path / trace_name("0.32.0", "counter-nonnegative", 1))
    monitor_writer.submit(path, '{"written": true}\n', print)
    assert monitor_writer.writer() is monitor_writer.writer()
    assert monitor_writer.flush(10) and path.read_text() == '{"written": true}\n'
