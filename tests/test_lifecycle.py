"""Waits, cancellation and callbacks of a session's operations, as a careless or hostile notebook uses them: every
wait has a deadline or none on purpose, a cancelled wait leaves the operation and its record alone, and a callback
may submit. A watchdog turns a hang into a failure."""

from __future__ import annotations

import asyncio
import logging
import math
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

import rlnb
from rlnb import samples, wire
from rlnb.testing import FakeBackend

BATCH = [samples.cross_entropy([1, 2, 3])]


@contextmanager
def watchdog(seconds: float = 20.0) -> Iterator[None]:
    """A hang becomes a ``KeyboardInterrupt`` in the test (then a failure) instead of a frozen test run."""
    fired = threading.Event()
    main = threading.main_thread().ident
    assert main is not None
    # a real signal: it wakes a lock's wait, which _thread.interrupt_main's flag does not
    timer = threading.Timer(seconds, lambda: (fired.set(), signal.pthread_kill(main, signal.SIGINT)))
    timer.daemon = True
    timer.start()
    try:
        yield
    except KeyboardInterrupt:
        if fired.is_set():
            pytest.fail(f"hung for {seconds} s")
        raise
    finally:
        timer.cancel()


@pytest.mark.parametrize("bad", [-1, -(10**400), math.nan, "1", True, [5]])
def test_a_timeout_that_is_no_number_of_seconds_is_a_value_error_naming_it(bad):
    s = rlnb.Session(FakeBackend(delay=0.05), record=False)
    op = s.optim_step()
    with pytest.raises(ValueError, match="timeout must be None"):
        op.result(timeout=bad)
    with pytest.raises(ValueError, match="timeout must be None"):
        s.wait(timeout=bad)
    s.close()


@pytest.mark.parametrize("endless", [math.inf, 1e300, 10**400])
def test_an_infinite_or_huge_timeout_waits_without_a_limit(endless):
    s = rlnb.Session(FakeBackend(delay=0.05), record=False)
    with watchdog():
        assert s.optim_step().result(timeout=endless).step == 1
        s.optim_step()
        s.wait(timeout=endless)
    assert s.step == 2
    s.close()


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_a_wait_that_runs_out_says_how_many_operations_are_unfinished():
    s = rlnb.Session(FakeBackend(delay=0.5), record=False)
    for _ in range(3):
        s.optim_step()
    with pytest.raises(rlnb.OperationTimeout, match=r"3 of 3 operations still unfinished after 0 s"):
        s.wait(timeout=0)
    s.close()


def test_cancelling_an_await_leaves_the_operation_running_and_recorded(tmp_path):
    s = rlnb.Session(FakeBackend(delay=0.3), runs_dir=tmp_path, run_id="r")

    async def impatient() -> rlnb.Operation:
        op = s.optim_step()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(op, 0.01)  # cancels the awaiting task
        return op

    with watchdog():
        op = asyncio.run(impatient())
        assert op.result(timeout=10).step == 1  # not CancelledError
        s.wait(timeout=10)
    s.close()
    df = rlnb.History.load(tmp_path / "r").df
    assert list(df.status) == ["TRAINING_OPERATION_STATUS_COMPLETED"]


@pytest.mark.parametrize("on", ["PENDING", "RUNNING", "COMPLETED"])
def test_a_callback_may_submit_whatever_report_it_hears(on):
    s = rlnb.Session(FakeBackend(delay=0.01), record=False)
    follow: list[rlnb.Operation] = []

    def then_step(rec):
        if rec.kind == "forward-backward" and rec.status.endswith(on):
            follow.append(s.optim_step())

    s.history.on_record(then_step)
    with watchdog():
        s.forward_backward(BATCH).result(timeout=10)
        while not follow:
            threading.Event().wait(0.01)
        assert follow[0].result(timeout=10).step == 1
    assert [r.kind for r in s.history.records] == ["forward-backward", "optim-step"]
    s.close()


def test_a_listener_that_raises_starves_no_listener_after_it(caplog):
    """An ``on_log`` listener that raises is logged, as an ``on_record`` one is: it raised from ``history.log`` once the
    figure was recorded, so that running the cell again recorded it twice."""
    s = rlnb.Session(FakeBackend(), record=False)
    seen: list[object] = []
    logged: list[object] = []

    def buggy(item):
        raise RuntimeError("a notebook's bug")

    s.history.on_record(buggy)
    s.history.on_record(seen.append)  # registered later, as a live view is
    s.history.on_log(buggy)
    s.history.on_log(logged.append)
    s.optim_step().result(timeout=10)
    s.wait(timeout=10)
    assert [r.status for r in seen][-1] == "TRAINING_OPERATION_STATUS_COMPLETED"
    with caplog.at_level(logging.ERROR, logger="rlnb"):
        s.history.log(1, reward=0.5)
    assert len(logged) == 1 and len(s.history.logged) == 1
    assert "history.on_log listener raised" in caplog.text and "a notebook's bug" in caplog.text
    s.close()


@pytest.mark.parametrize("on", ["PENDING", "COMPLETED"])  # heard on the send thread, on the poll thread
def test_a_remote_session_closed_from_a_callback_closes_and_settles_everything(tmp_path, on):
    import httpx

    from tests.support.fake_api import BASE, FAST_POLL, KEY, FakeAPI, quick

    s = rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(FakeAPI()), ready_timeout=5,
                     runs_dir=tmp_path, run_id="r", **FAST_POLL, **quick({}))  # fmt: skip
    errors: list[BaseException] = []

    def close_on(rec):
        if rec.status.endswith(on) and rec.op_id and not s.closed:
            try:
                s.close()
            except BaseException as exc:
                errors.append(exc)
                raise

    s.history.on_record(close_on)
    with watchdog():
        ops = []
        for _ in range(4):
            try:
                ops.append(s.optim_step())
            except rlnb.SessionClosed:  # the callback closed it meanwhile
                break
        for op in ops:
            try:
                op.result(timeout=10)
            except rlnb.OperationFailed as exc:
                assert exc.code == "TRAINING_OPERATION_ERROR_CODE_SESSION_NOT_ACTIVE"
        while s.backend.state.value != "closed":
            threading.Event().wait(0.01)
    assert errors == []  # was RuntimeError: cannot join current thread (left CLOSING, op-4 RUNNING for ever)
    df = rlnb.History.load(tmp_path / "r").df
    ended = {"TRAINING_OPERATION_STATUS_COMPLETED", "TRAINING_OPERATION_STATUS_FAILED"}
    assert len(df) == len(ops) and set(df.status) <= ended


EXIT_WITH_A_STUCK_CALLBACK = """
import sys, threading
import rlnb, rlnb.engine.worker
from rlnb.testing import FakeBackend
rlnb.engine.worker.EXIT_DEADLINE = 1.0
s = rlnb.Session(FakeBackend(delay=0.01), runs_dir=sys.argv[1], run_id="r")
s.history.on_record(lambda rec: rec.status.endswith("COMPLETED") and threading.Event().wait())  # never returns
for _ in range(3):
    s.optim_step()
s.history.log(0, reward=0.5)
threading.Event().wait(0.3)
"""


@pytest.mark.slow
def test_exit_is_bounded_when_a_callback_on_the_worker_never_returns(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", EXIT_WITH_A_STUCK_CALLBACK, str(tmp_path)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]  # the session's close joined its worker without a limit
    assert "still running 1 s after exit began" in proc.stderr and "Traceback" not in proc.stderr
    history = rlnb.History.load(tmp_path / "r")
    assert list(history.df.status)[0] == "TRAINING_OPERATION_STATUS_COMPLETED" and len(history.df) == 3
    assert list(history.logged.reward) == [0.5]


def test_waiting_without_a_timeout_in_a_callback_is_refused_not_a_hung_session():
    s = rlnb.Session(FakeBackend(delay=0.01), record=False)
    got: list[object] = []

    def step_and_wait(rec):
        if rec.kind == "forward-backward" and rec.status.endswith("COMPLETED"):
            op = s.optim_step()
            for wait in (op.result, s.wait):  # on the worker thread, which must run op: it waited for ever
                try:
                    wait()
                except RuntimeError as exc:
                    got.append(str(exc))

    s.history.on_record(step_and_wait)
    with watchdog():
        s.forward_backward(BATCH).result(timeout=10)
        s.wait(timeout=10)
        assert s.optim_step().result(timeout=10).step == 2  # the session goes on
    assert len(got) == 2 and all("would wait for ever" in g for g in got)
    s.close()


def test_a_session_that_fails_to_start_lets_its_run_folder_go(tmp_path):
    import warnings

    from rlnb.history import RunContinuedWarning

    s = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    s.optim_step()
    s.wait(timeout=10)
    s.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RunContinuedWarning)  # as -W error does
        with pytest.raises(RunContinuedWarning) as failed:
            rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    assert failed.value.__traceback__ is not None  # kept, as a notebook keeps the last error: its frames live on
    with pytest.warns(RunContinuedWarning):
        again = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")  # was RunLocked by this very process
    again.close()


class _AtOnce(FakeBackend):
    """Reports every operation PENDING, RUNNING and COMPLETED before ``submit`` returns (a fast backend)."""

    def submit(self, kind, body, listener):
        from rlnb import wire

        for status in ("PENDING", "RUNNING"):
            listener(wire.Operation(id="op-1", status=f"TRAINING_OPERATION_STATUS_{status}"))
        output = wire.ForwardBackwardResult(loss=1.0, metrics={})
        listener(wire.Operation(id="op-1", status="TRAINING_OPERATION_STATUS_COMPLETED", output=output))


def test_a_ctrl_c_in_a_callback_on_the_submitting_thread_loses_no_report(tmp_path):
    s = rlnb.Session(_AtOnce(), runs_dir=tmp_path, run_id="r")

    def slow_redraw(rec):
        if rec.status.endswith("PENDING"):
            raise KeyboardInterrupt  # as a Ctrl-C landing in a callback on the notebook's thread

    s.history.on_record(slow_redraw)
    with pytest.raises(KeyboardInterrupt):
        s.forward_backward(BATCH)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the submission's Ctrl-C hold undone
    with watchdog():
        s.wait()  # the operation ended: its COMPLETED report was not dropped with the interrupt
    s.close()
    assert list(rlnb.History.load(tmp_path / "r").df.status) == ["TRAINING_OPERATION_STATUS_COMPLETED"]


def test_a_remote_close_interrupted_by_ctrl_c_stops_the_session_and_resource_when_called_again():
    import httpx

    from rlnb.session.open_sessions import OPEN
    from tests.support.fake_api import BASE, FAST_POLL, KEY, FakeAPI, quick

    fake = FakeAPI()
    interrupts = [1]

    def ctrl_c_during_the_stop(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/stop") and "training-sessions" in request.url.path and interrupts:
            interrupts.pop()
            raise KeyboardInterrupt
        return fake(request)

    s = rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(ctrl_c_during_the_stop), ready_timeout=5,
                     record=False, **FAST_POLL, **quick({}))  # fmt: skip
    s.optim_step().result(timeout=10)
    with pytest.raises(KeyboardInterrupt):
        s.close()
    assert s in OPEN  # the interpreter's exit closes it if nobody does
    with watchdog():
        s.close()  # returned at once: the session RUNNING and its resource READY (paid) for good
    assert [v["status"] for v in fake.sessions.values()] == ["TRAINING_SESSION_STATUS_STOPPED"]
    assert [v["status"] for v in fake.resources.values()] == ["MODEL_RESOURCES_STATUS_STOPPED"]
    assert s not in OPEN


def test_a_sample_output_its_check_cannot_read_fails_the_operation_not_hangs_it():
    """A backend of the user's own (the ``Backend`` protocol is public) that completes a sample with an output of
    another type: the session's shape check raised inside the listener, which only logged it, and ``result()``
    waited until its timeout. The operation fails, saying why."""
    from rlnb.testing import FakeBackend

    class Odd(FakeBackend):
        def submit(self, kind, body, listener):
            def odd(env):
                done = env.status == wire.OperationStatus.COMPLETED and kind == wire.OperationKind.SAMPLE
                listener(env.model_copy(update={"output": {"not": "a sample output"}}) if done else env)

            super().submit(kind, body, odd)

    s = rlnb.Session(Odd(), record=False)
    with pytest.raises(rlnb.OperationFailed, match="its output could not be checked: AttributeError"):
        s.sample([[1, 2]], num_samples=1, max_tokens=1).result(timeout=30)
    s.close()


def _remote_session(wrap):
    import httpx

    from tests.support.fake_api import BASE, FAST_POLL, KEY, FakeAPI, quick

    fake = FakeAPI()
    s = rlnb.connect(BASE, api_key=KEY, transport=httpx.MockTransport(wrap(fake)), ready_timeout=5, record=False,
                     operation_timeout=10, **FAST_POLL, **quick({}))  # fmt: skip
    return fake, s


def test_closing_a_session_the_server_has_forgotten_succeeds_with_a_warning(caplog):
    """The server forgot the session (it expired, or restarted without its state): the stop's 404 was raised by
    ``close()``, though a session that is gone is as stopped as it gets; its resource is still stopped."""
    fake, s = _remote_session(lambda fake: fake)
    fake.sessions.clear()
    with watchdog():
        s.close()
    assert "was already gone" in caplog.text and s.closed
    assert [v["status"] for v in fake.resources.values()] == ["MODEL_RESOURCES_STATUS_STOPPED"]


def test_a_close_that_fails_after_the_with_block_raised_leaves_the_blocks_error_raised(caplog):
    """A ``with`` block that raised, then a stop that failed (here a 403): the stop's error replaced the block's, and
    the notebook showed why the close failed, not why the run did."""
    import httpx

    from tests.support.fake_api import error

    def refuse_the_stop(fake):
        def handler(request: httpx.Request) -> httpx.Response:
            if request.url.path.endswith("/stop") and "training-sessions" in request.url.path:
                return error(403, "the key may not stop sessions")
            return fake(request)

        return handler

    fake, s = _remote_session(refuse_the_stop)
    with pytest.raises(ValueError, match="the run's own error") as raised, s:
        raise ValueError("the run's own error")
    assert "closing the session then failed too" in " ".join(raised.value.__notes__)
    assert "may not stop sessions" in caplog.text and s.closed
    _, s = _remote_session(refuse_the_stop)
    with pytest.raises(rlnb.errors.APIStatusError, match="may not stop"), s:
        pass  # without an error of its own, the block's close raises as close() does


def test_every_wait_on_an_operation_gets_its_outcome_whenever_it_began(tmp_path):
    """Waits on several threads begun before the end, ``await`` before and after it, and a failure: each gets what
    ``result()`` gives."""
    s = rlnb.Session(FakeBackend(delay=0.2, fail={"optim-step": "NON_FINITE_LOSS"}), runs_dir=tmp_path)
    with watchdog():
        fb, step = s.forward_backward(BATCH), s.optim_step()
        got: list[object] = []
        waiters = [threading.Thread(target=lambda: got.append(fb.result(10).loss)) for _ in range(4)]
        for w in waiters:
            w.start()

        async def both() -> tuple[float, float]:
            early = await fb  # begun before the end (the worker is still sleeping)
            with pytest.raises(rlnb.OperationFailed, match="NON_FINITE_LOSS"):
                await step
            return early.loss, (await fb).loss  # and after it

        early, late = asyncio.run(both())
        for w in waiters:
            w.join(10)
        assert got == [early] * 4 and late == early == fb.result(0).loss
        with pytest.raises(rlnb.OperationFailed, match="NON_FINITE_LOSS"):
            step.result(0)
        assert fb.done() and step.done()
    s.close()


def test_an_operation_held_keeps_its_session_open_for_the_exit():
    """The exit closes the sessions still open, which ``open_sessions.OPEN`` holds weakly: a script that let go of its
    session but holds one of its operations must still find that session closed, its records with it, at exit. So an
    operation keeps its session (``Operation._owner``), not only the order it was submitted in."""
    import gc
    import weakref

    from rlnb.session.open_sessions import OPEN

    s = rlnb.Session(FakeBackend(), record=False)
    op, ref = s.forward_backward(BATCH), weakref.ref(s)
    del s
    gc.collect()
    session = ref()
    assert session is not None and session in OPEN
    op.result(30)
    session.close()
    assert session not in OPEN
