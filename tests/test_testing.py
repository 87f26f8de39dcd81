"""rlnb.testing: FakeBackend drives a Session, its history and an RL step without torch; ServerProcess."""

import subprocess
import sys
import textwrap
import time

import pytest

import rlnb
from rlnb import samples, wire
from rlnb.tasks import digits_task, rl_step
from rlnb.testing import FakeBackend, ServerProcess, free_port
from tests.support.processes import gone


def session(**fake) -> rlnb.Session:
    return rlnb.Session(FakeBackend(**fake), record=False)


def test_a_session_on_the_fake_backend_runs_every_kind_in_order():
    s = session(optimizer="muon", delay=0.01)
    ops = [
        s.forward_backward([samples.cross_entropy([1, 2, 3])]),
        s.optim_step(rlnb.MuonParams(learning_rate=0.01)),
        s.weights_sync(),
        s.sample([[1, 2]], num_samples=3, max_tokens=5, seed=7),
        s.save_inference_checkpoint(),
    ]
    assert ops[0].result(5).loss == 1.0 and ops[1].result(5).step == 1
    assert ops[2].result(5).weights_version == 1
    seqs = ops[3].result(5).results[0].sequences
    assert [len(q.tokens) for q in seqs] == [5, 5, 5] and ops[3].result(5).results[0].policy_segments[0].version == 1
    assert ops[4].result(5).checkpoint.step == 1
    df = s.history.df
    assert list(df.kind) == ["forward-backward", "optim-step", "weights-sync", "sample", "inference-checkpoint"]
    assert (df.status == wire.OperationStatus.COMPLETED).all() and (df.run_s >= 0.01).all()
    assert df.learning_rate.iloc[1] == 0.01 and df.grad_norm.iloc[1] == 1.0
    again = session().sample([[1, 2]], num_samples=3, max_tokens=5, seed=7).result(5).results[0].sequences
    assert [q.tokens for q in again] == [q.tokens for q in seqs]  # seeded
    s.close()


def test_failures_are_injected_and_closing_fails_what_is_queued():
    s = session(delay=0.05, fail={"optim-step": "NON_FINITE_LOSS"})
    s.forward_backward([samples.cross_entropy([1, 2, 3])])
    with pytest.raises(rlnb.OperationFailed) as info:
        s.optim_step().result(5)
    assert info.value.code == "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS"
    queued = [s.forward_backward([samples.cross_entropy([1, 2, 3])]) for _ in range(5)]
    s.close()
    codes = [op.error.code for op in queued if op.status == wire.OperationStatus.FAILED]
    assert codes and set(codes) == {"TRAINING_OPERATION_ERROR_CODE_SESSION_NOT_ACTIVE"}
    assert all(op.done() for op in queued)


def test_an_rl_step_runs_on_the_fake_backend():
    s = session(loss=lambda step: 0.5 / (1 + step))
    report = rl_step(s, digits_task(), rlnb.AdamParams(learning_rate=1e-3), group_size=4, seed=1)
    assert report.step == 1 and report.loss == 0.5 and report.status == wire.OperationStatus.COMPLETED
    assert [kind for kind, _ in s.backend.submitted] == ["sample", "forward-backward", "optim-step", "weights-sync"]
    s.close()


@pytest.mark.slow  # a Python process
def test_the_fake_backend_needs_no_torch():
    code = textwrap.dedent(
        """
        import sys
        import rlnb
        from rlnb.tasks import digits_task, rl_step
        from rlnb.testing import FakeBackend
        s = rlnb.Session(FakeBackend(), record=False)
        rl_step(s, digits_task(), rlnb.AdamParams(), group_size=2, seed=0)
        s.close()
        assert "torch" not in sys.modules, "torch was imported"
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


@pytest.mark.slow  # a Python process
def test_server_process_reports_a_server_that_does_not_start():
    port = free_port()
    broken = ServerProcess([sys.executable, "-c", "import sys; sys.exit('no such server')"], f"http://127.0.0.1:{port}")
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="no such server"):
        broken.start()
    assert time.monotonic() - t0 < 30 and broken.proc is None


@pytest.mark.slow  # a Python process
def test_a_server_that_logs_a_lot_is_never_blocked_by_its_stderr():
    """A pipe nobody reads fills at 64 KiB and then blocks the server mid-request; a file never does."""
    port = free_port()
    chatty = (
        "import sys, http.server\n"
        "sys.stderr.write('x' * 2_000_000); sys.stderr.flush()\n"
        f"http.server.HTTPServer(('127.0.0.1', {port}), http.server.SimpleHTTPRequestHandler).serve_forever()\n"
    )
    server = ServerProcess([sys.executable, "-c", chatty], f"http://127.0.0.1:{port}", timeout=20)
    with server:
        assert server.log().count("x") >= 2_000_000
    assert server.proc is None and server.log() == ""


_HTTP = (
    "import http.server, sys; "
    "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), http.server.SimpleHTTPRequestHandler).serve_forever()"
)


@pytest.mark.slow  # a Python process
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_server_never_stopped_ends_with_its_python_process():
    """Notebook 04 starts ``rlnb serve`` in one cell and stops it in the last: a kernel shut down (or a cell that
    raised) before that cell left the server running after the kernel, for ever."""
    script = textwrap.dedent(f"""
        import sys
        from rlnb.testing import ServerProcess, free_port
        port = free_port()
        server = ServerProcess([sys.executable, "-c", {_HTTP!r}, str(port)], f"http://127.0.0.1:{{port}}", timeout=60)
        server.start()
        print(server.proc.pid, flush=True)
    """)  # no server.stop()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert gone(int(done.stdout.split()[0]))


@pytest.mark.slow  # a Python process
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_server_rebound_in_a_rerun_cell_is_stopped_and_one_is_started_once():
    """Re-running notebook 04's first cell rebinds ``server`` to a new one: the old server ran on, unreachable. And
    ``start()`` twice started a second process, losing the first."""
    port = free_port()
    server = ServerProcess([sys.executable, "-c", _HTTP, str(port)], f"http://127.0.0.1:{port}", timeout=60)
    server.start()
    assert server.proc is not None
    pid = server.proc.pid
    with pytest.raises(RuntimeError, match="already started at http://127.0.0.1:.*: stop\\(\\) it first"):
        server.start()
    server = None  # the cell run again: its old object is collected
    assert gone(pid)


def test_one_stop_string_is_one_string_not_its_characters():
    backend = FakeBackend()
    s = rlnb.Session(backend, record=False)
    s.sample("hi", stop="\n\n").result(timeout=10)
    s.sample("hi", stop=["TR", "END"]).result(timeout=10)
    stops = [body.sampling_params.stop for kind, body in backend.submitted if kind == "sample"]
    assert stops == [["\n\n"], ["TR", "END"]]
    s.close()


def test_a_listener_that_raises_does_not_stop_the_fake_backend(caplog):
    """FakeBackend runs on the engine's worker: a listener's failure (say, a full disk) is logged and the
    operations go on, as on a local session."""
    backend = FakeBackend()
    seen: list[str] = []

    def broken(env):
        seen.append(env.status)
        raise OSError("disk full")

    sync = wire.WeightsSyncBody(weight_sync_type="WEIGHT_SYNC_TYPE_SYNCHRONOUS")
    backend.submit(wire.OperationKind.WEIGHTS_SYNC, sync, broken)
    after: list[wire.Operation] = []
    backend.submit(wire.OperationKind.TRAINING_CHECKPOINT, None, after.append)
    assert backend.wait_idle(10)
    assert seen == [wire.OperationStatus.PENDING, wire.OperationStatus.RUNNING, wire.OperationStatus.COMPLETED]
    assert [e.status for e in after][-1] == wire.OperationStatus.COMPLETED
    assert "a listener failed" in caplog.text and "disk full" in caplog.text
    backend.close()


def test_fail_is_checked_when_the_fake_backend_is_made():
    with pytest.raises(ValueError, match="'optim-steps' is not an operation kind; one of forward-backward"):
        FakeBackend(fail={"optim-steps": "NON_FINITE_LOSS"})
    with pytest.raises(ValueError, match=r"fail\['optim-step'\]: unknown operation error code 'NAN'"):
        FakeBackend(fail={"optim-step": "NAN"})


def test_a_close_ends_the_fake_backends_delay_at_once():
    """``FakeBackend(delay=60)`` (a slow service, simulated): ``close()`` mid-operation waited out the 60 s, where the
    in-process engine's ``op_delay`` ends at a stop. The running operation still completes, as the engine's does."""
    s = rlnb.Session(FakeBackend(delay=60), record=False)
    op = s.forward_backward([samples.cross_entropy([1, 2, 3])])
    deadline = time.monotonic() + 10
    while op.status != wire.OperationStatus.RUNNING and time.monotonic() < deadline:
        time.sleep(0.01)
    start = time.monotonic()
    s.close()
    assert time.monotonic() - start < 10  # a deadline with room: it waited the 60 s
    assert op.result(10).loss == 1.0


@pytest.mark.parametrize(
    "delay", [float("nan"), -1, float("inf"), 1e300, pytest.param(10**5000, id="10**5000"), "1", True, None]
)
def test_a_fake_backends_delay_is_checked_when_it_is_made(delay):
    """NaN, -1, inf, 1e300 and "1" were taken, and every operation then failed ``INTERNAL_ERROR`` with the sleep's
    error (``ValueError: Invalid value NaN``, ``OverflowError: timestamp out of range``); ``True`` slept a second.
    10**5000 raised a bare ``OverflowError: int too large to convert to float``, naming no option."""
    with pytest.raises(ValueError, match=r"delay must be a finite number of seconds in \[0, 86400\]"):
        FakeBackend(delay=delay)


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"vocab_size": 300}, r"vocab_size must be an integer in \[1, 256\]"),
        ({"context_length": 0}, r"context_length must be an integer"),
        ({"num_generator_replicas": -1}, r"num_generator_replicas must be an integer"),
        ({"seed": 1.5}, r"seed must be an integer"),
    ],
)
def test_the_fake_backends_model_options_are_checked_when_it_is_made(option, message):
    """A guard: a vocabulary past the byte codec's 256 ids, or a bound that is no count, is refused by name."""
    with pytest.raises(ValueError, match=message):
        FakeBackend(**option)


def test_the_fake_backends_grad_norm_may_follow_the_step():
    """A guard: ``grad_norm(step)`` gives each optim-step its norm (the step counted before it, as ``loss(step)``),
    and a NaN from it fails that step, which drops the gradients and leaves the step count."""
    s = rlnb.Session(FakeBackend(grad_norm=lambda step: float("nan") if step == 1 else 2.0), record=False)
    try:
        batch = [samples.cross_entropy([1, 2, 3])]
        s.forward_backward(batch)
        assert s.optim_step().result(30).metrics["grad_norm"] == 2.0
        s.forward_backward(batch)
        with pytest.raises(rlnb.OperationFailed) as failed:
            s.optim_step().result(30)
        assert failed.value.code == wire.OperationErrorCode.NON_FINITE_LOSS
        after = s.optim_step().result(30)  # the failed step dropped the gradients: none to apply, step 1 again
        assert (after.step, after.metrics["grad_norm"]) == (2, 0.0)
    finally:
        s.close()


@pytest.mark.slow  # rlnb serve in a process (torch's import: seconds)
def test_rlnb_serves_docstring_example_starts_a_server_whose_token_is_not_in_its_command_line():
    """Its example ``("--token", "t")`` was refused (a token has 8 characters or more), and a token in argv is
    shown by ``ps``: the example gives it through ``env``."""
    import httpx

    from rlnb.wire.paths import API_PREFIX, SUPPORTED_MODELS

    server = ServerProcess.rlnb_serve("--op-delay", "0.05", env={"RLNB_SERVE_TOKEN": "local-secret"}, timeout=120)
    assert not any("local-secret" in word for word in server.cmd)
    with server as url:
        models = url + API_PREFIX + SUPPORTED_MODELS
        assert httpx.get(models, timeout=30).status_code == 401
        assert httpx.get(models, headers={"Authorization": "Bearer local-secret"}, timeout=30).status_code == 200
