"""Interpreter exit when the process is told to end: a Jupyter kernel's Shut Down sends SIGTERM 2.5 s after its
request and SIGKILL at 5 s, while rlnb's exit hook may still wait for a step. A SIGTERM then hurries the exit: no more
waiting, what is in flight recorded FAILED, nothing left PENDING."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import rlnb
from rlnb.lifecycle import shutdown

SLOW_PANEL = """
import rlnb
from rlnb import samples
from rlnb.testing import FakeBackend
from rlnb.widgets import RunPanel
s = rlnb.Session(FakeBackend(delay=8.0), runs_dir=RUNS, run_id="k")
def step(session, params):
    session.forward_backward([samples.cross_entropy([1, 2, 3])])
    session.optim_step(params).result(timeout=30)
p = RunPanel(s, step_fn=step)
p.start(100)
"""


@pytest.mark.slow
def test_a_kernel_shut_down_during_a_long_step_leaves_no_operation_pending(tmp_path):
    from tests.support.kernels import kernel

    with kernel(tmp_path) as run:
        run(SLOW_PANEL.replace("RUNS", repr(str(tmp_path / "runs"))))
        time.sleep(1.0)  # the step is running: 8 s, past the shutdown's SIGTERM (2.5 s) and SIGKILL (5 s)
        run.manager.shutdown_kernel(now=False)
    df = rlnb.History.load(tmp_path / "runs" / "k").df
    assert len(df) == 2 and "TRAINING_OPERATION_STATUS_PENDING" not in set(df.status), df[["kind", "status"]]
    # the close ends FakeBackend's delay (its forward-backward COMPLETED); the optim-step waiting behind it never ran
    assert list(df.status)[1] == "TRAINING_OPERATION_STATUS_FAILED", df[["kind", "status"]]


def test_the_exit_handles_sigterm_only_while_it_runs_and_keeps_a_handler_of_the_users(monkeypatch):
    seen = []
    monkeypatch.setattr(shutdown, "_STEPS", {phase: [] for phase in shutdown.PHASES})
    monkeypatch.setattr(shutdown, "_HURRY", type(shutdown._HURRY)())
    shutdown.on_exit("panels", lambda: seen.append(signal.getsignal(signal.SIGTERM)))
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        shutdown._run()
        assert seen[0] is not signal.SIG_DFL and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        mine = lambda *_: None  # noqa: E731
        signal.signal(signal.SIGTERM, mine)
        shutdown._run()
        assert seen[1] is mine and signal.getsignal(signal.SIGTERM) is mine
        assert not shutdown.hurried()
    finally:
        signal.signal(signal.SIGTERM, previous)
        shutdown._EXITING.clear()


SIGNAL_IN_EXIT = """
import os, signal, sys, threading, time
import rlnb
from rlnb import samples
from rlnb.lifecycle import shutdown
from rlnb.sinks.base import Sink
from rlnb.testing import FakeBackend
class Lines(Sink):
    library, extra = "json", "none"
    def open(self, run):
        class Writer:
            def write(self, points, failures):
                with open(sys.argv[2], "a") as f:
                    f.writelines(f"{p.step}\\n" for p in points)
            def close(self):
                with open(sys.argv[2], "a") as f:
                    f.write("CLOSED\\n")
        return Writer()
    def spec(self):
        return ("__main__", "Lines", {})
s = rlnb.Session(FakeBackend(), runs_dir=sys.argv[1], run_id="r", sinks=[Lines(interval=30)])
s.forward_backward([samples.cross_entropy([1, 2, 3])])
s.optim_step().result(30)
run, worker = s.backend._worker._run_op, s.backend._worker
worker._run_op = lambda *job: (time.sleep(30), run(*job))[1]  # a step deaf to the stop (torch mid-kernel)
s.forward_backward([samples.cross_entropy([1, 2, 3])])
s.optim_step()
def send():
    while not shutdown.exiting():
        time.sleep(0.05)
    time.sleep(0.5)
    print(sys.argv[3], flush=True)
    os.kill(os.getpid(), getattr(signal, sys.argv[3]))
threading.Thread(target=send, daemon=True).start()
time.sleep(0.3)
"""


@pytest.mark.slow
@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_a_signal_during_the_exit_hurries_the_rest_of_it_and_records_what_ran(tmp_path, name):
    """A SIGTERM (a kernel's Shut Down) or a Ctrl-C while the exit waits for a step deaf to the stop: the Ctrl-C
    escaped the exit's step (a script that seemed to hang at its end): every later step was skipped, the operations
    left PENDING for good, the sinks never flushed, and often SIGABRT under a torch op. Either now ends the waits, the
    step recorded FAILED, the sinks flushed and closed."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", SIGNAL_IN_EXIT, str(tmp_path), str(tmp_path / "sink.txt"), name],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    took = time.monotonic() - started
    assert proc.returncode == 0 and name in proc.stdout, proc.stderr[-2000:]
    assert took < 20, took  # the 30 s step not waited for (EXIT_DEADLINE would be 60 s)
    said = [re.sub(r"rlnb-fake-[-0-9a-f]+", "rlnb-fake-ID", line) for line in proc.stderr.splitlines()]
    interrupted = ["rlnb: interrupted: exiting without waiting; what still runs is recorded FAILED"]
    assert said == [
        "rlnb: finishing the running forward-backward (rlnb-fake-ID) before exit, up to 60 s; Ctrl-C to abandon it",
        *(interrupted if name == "SIGINT" else []),
    ], proc.stderr[-2000:]
    df = rlnb.History.load(tmp_path / "r").df
    assert list(df.status) == ["TRAINING_OPERATION_STATUS_COMPLETED"] * 2 + ["TRAINING_OPERATION_STATUS_FAILED"] * 2
    assert list(df.error_message)[2:] == [
        "the session was stopped while this operation ran",
        "the session was stopped before this ran",
    ]
    assert (tmp_path / "sink.txt").read_text().split() == ["1", "CLOSED"]


_OPEN = """
import sys, time
import rlnb
from rlnb import samples
from rlnb.testing import FakeBackend
"""
_MID_RUN = """run, worker = s.backend._worker._run_op, s.backend._worker
worker._run_op = lambda *job: (time.sleep(30), run(*job))[1]  # a step deaf to the stop (torch mid-kernel)
s.forward_backward([samples.cross_entropy([1, 2, 3])])
op = s.optim_step()
print("MARK", flush=True)
op.result(60)
"""
TERMINATED_MID_RUN = _OPEN + 's = rlnb.Session(FakeBackend(), runs_dir=sys.argv[1], run_id="r")\n' + _MID_RUN
TERMINATED_IN_WITH = (
    _OPEN
    + 'with rlnb.Session(FakeBackend(), runs_dir=sys.argv[1], run_id="r") as s:\n'
    + textwrap.indent(_MID_RUN, "    ")
)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "script"),
    [("SIGTERM", TERMINATED_MID_RUN), ("SIGHUP", TERMINATED_MID_RUN), ("SIGTERM", TERMINATED_IN_WITH)],
    ids=["SIGTERM", "SIGHUP", "SIGTERM-in-with"],
)
def test_a_sigterm_before_the_exit_ends_the_process_through_it(tmp_path, name, script):
    """Mid-run (the script in ``result()``), SIGTERM or SIGHUP killed the process at once: every operation PENDING for
    good, the running one too, and nothing said it was stopped. Inside ``with session:`` (its close runs before the
    exit's steps) the close waited out the whole running step."""
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "MARK\n"
        time.sleep(0.5)
        started = time.monotonic()
        proc.send_signal(getattr(signal, name))
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + getattr(signal, name), err[-2000:]
    assert time.monotonic() - started < 20  # the 30 s step not waited for
    df = rlnb.History.load(tmp_path / "r").df
    assert list(df.status) == ["TRAINING_OPERATION_STATUS_FAILED"] * 2, err[-2000:]
    assert list(df.error_message) == [
        "the session was stopped while this operation ran",
        "the session was stopped before this ran",
    ]


def test_a_session_keeps_a_sigterm_handler_of_the_users_and_ends_on_the_default_one(tmp_path):
    from rlnb.testing import FakeBackend

    mine = lambda *_: None  # noqa: E731
    previous = {signum: signal.signal(signum, mine) for signum in shutdown._ENDING}
    try:
        rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="a").close()
        assert all(signal.getsignal(signum) is mine for signum in shutdown._ENDING)
        for signum in shutdown._ENDING:
            signal.signal(signum, signal.SIG_DFL)
        rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="b").close()
        assert all(signal.getsignal(signum) is shutdown._terminate for signum in shutdown._ENDING)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


SIGTERM_IN_A_CELL = """
import os, signal, sys, time
import rlnb
from IPython.core.interactiveshell import InteractiveShell
from rlnb.testing import FakeBackend
if sys.argv[2] == "before":  # a session opened, then IPython started (``IPython.embed()``)
    s = rlnb.Session(FakeBackend(), runs_dir=sys.argv[1], run_id="r")
shell = InteractiveShell.instance()  # ipykernel runs cells on this path (run_cell), on the main thread
shell.run_cell("import os, signal, sys, time, rlnb; from rlnb.testing import FakeBackend")
shell.run_cell("s = rlnb.Session(FakeBackend(), runs_dir=sys.argv[1], run_id='k')")
shell.run_cell("os.kill(os.getpid(), signal.SIGTERM); time.sleep(5)")
print("the kernel went on", flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("opened", ["in-a-cell", "before"])
def test_a_sigterm_in_a_cell_still_ends_the_kernel(tmp_path, opened):
    """Under IPython a session's SIGTERM handler raised SystemExit in the cell, which IPython catches: the kernel lived
    on, told to end (a scheduler's, docker's stop), and its later ordinary exit was hurried for good."""
    proc = subprocess.run([sys.executable, "-c", SIGTERM_IN_A_CELL, str(tmp_path), opened], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert proc.returncode == -signal.SIGTERM, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    assert "went on" not in proc.stdout


CTRL_C_UNDER_A_PANEL = """
import os, signal, sys, threading, time
import rlnb
from rlnb import samples
from rlnb.lifecycle import shutdown
from rlnb.testing import FakeBackend
from rlnb.widgets import RunPanel
s = rlnb.Session(FakeBackend(delay=30.0), runs_dir=sys.argv[1], run_id="k")
def step(session, params):
    session.forward_backward([samples.cross_entropy([1, 2, 3])])
    session.optim_step(params).result(timeout=60)
p = RunPanel(s, step_fn=step)
p.start(100)
def ctrl_c():
    while not shutdown.exiting():
        time.sleep(0.05)
    time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGINT)
threading.Thread(target=ctrl_c, daemon=True).start()
time.sleep(0.5)
"""


@pytest.mark.slow
def test_a_ctrl_c_while_the_exit_waits_for_a_panels_step_says_so_and_records_it(tmp_path):
    """The exit waits up to 30 s for a RunPanel's step, in silence; a Ctrl-C there escaped it (a traceback, SIGABRT
    under a torch op) with the step's operations PENDING for good."""
    proc = subprocess.run([sys.executable, "-c", CTRL_C_UNDER_A_PANEL, str(tmp_path)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr.splitlines() == [
        "rlnb: finishing the step in progress of 1 RunPanel(s) or Find LR before exit, up to 30 s; "
        "Ctrl-C to abandon it",
        "rlnb: interrupted: exiting without waiting; what still runs is recorded FAILED",
    ], proc.stderr[-2000:]
    df = rlnb.History.load(tmp_path / "k").df
    assert len(df) == 2 and "TRAINING_OPERATION_STATUS_PENDING" not in set(df.status), df[["kind", "status"]]


SLOW_SINK_AT_EXIT = """
import sys, time
import rlnb
from rlnb import samples
from rlnb.sinks.base import Sink
from rlnb.testing import FakeBackend
class Slow(Sink):
    library, extra = "json", "none"
    def open(self, run):
        class Writer:
            def write(self, points, failures):
                time.sleep(1.5)
            def close(self):
                print("CLOSED", flush=True)
        return Writer()
    def spec(self):
        return ("__main__", "Slow", {})
s = rlnb.Session(FakeBackend(), runs_dir=sys.argv[1], run_id="r", sinks=[Slow(interval=30)])
s.forward_backward([samples.cross_entropy([1, 2, 3])])
s.optim_step().result(30)
"""


@pytest.mark.slow
def test_the_exits_wait_for_a_sinks_flush_is_said(tmp_path):
    """Up to 30 s with nothing printed, read as a hang (and Ctrl-C'd)."""
    proc = subprocess.run([sys.executable, "-c", SLOW_SINK_AT_EXIT, str(tmp_path)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0 and proc.stdout == "CLOSED\n", proc.stderr[-2000:]
    assert proc.stderr.splitlines() == [
        "rlnb: flushing rlnb.sinks Slow of run r before exit, up to 30 s; Ctrl-C to abandon it"
    ], proc.stderr[-2000:]


@pytest.mark.slow  # a Python process
def test_the_exit_has_begun_for_a_librarys_exit_hook_that_runs_before_rlnbs():
    """torch registers its exit hooks after rlnb's (imported later), so they run first: a compile that failed under
    them, on a worker thread, was taken for torch's own failure (``exiting`` was still False). ``ending`` is True from
    the main thread's end on, in such a hook, and False while the script runs."""
    code = textwrap.dedent("""
        import atexit, sys
        from rlnb.lifecycle import shutdown
        print("running", shutdown.ending(), shutdown.exiting())
        atexit.register(lambda: print("hook", shutdown.ending(), shutdown.exiting()))  # after rlnb's: runs first
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.splitlines()) == (0, ["running False False", "hook True False"]), done.stderr
