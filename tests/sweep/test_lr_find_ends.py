"""How a range test ends other than at its last step: a Ctrl-C wherever it lands, the user's own error, an operation
that never ends (in the final wait, or the checkpoint of the session copied); what was measured is never lost."""

import pytest

import rlnb
from rlnb import samples
from rlnb.history import History
from rlnb.sweep import lr_find
from rlnb.sweep.lr import find as find_lr_module


def rising(session, params, i):
    return float(i)


def not_interrupted(**kwargs):
    """``lr_find(**kwargs)``; a Ctrl-C escaping it fails the test (it would stop the whole pytest session)."""
    try:
        return lr_find(**kwargs)
    except KeyboardInterrupt:
        pytest.fail("the Ctrl-C propagated out of lr_find: the steps measured were lost")


def test_an_error_of_the_users_step_keeps_the_steps_measured_on_the_exception(tmp_path):
    """A ``step_fn`` raising an error of its own at step 6 of 10: raised as it was, and the 6 steps measured were lost
    with the traceback (they were in the run folder; nothing said so). The error is raised with a note naming the
    run folder, and the result on it."""

    def step(session, params, i):
        if i == 6:
            raise ZeroDivisionError("my bug")
        return float(i)

    with pytest.raises(ZeroDivisionError, match="my bug") as info:
        lr_find(rlnb.AdamParams(), steps=10, step_fn=step, runs_dir=tmp_path)
    found = info.value.lr_find
    assert found.values == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0] and not found.interrupted
    assert found.reason.endswith("; ended early: ZeroDivisionError after 6 steps: my bug")
    assert info.value.__notes__ == [
        f"lr_find: the 6 steps measured before this error are kept in the run folder {found.run_path} and as this "
        "exception's lr_find attribute (an LRFind)"
    ]
    assert list(History.load(found.run_path).logged.lr_find_lr.dropna()) == pytest.approx(found.lrs)


def test_an_error_of_progress_or_a_refused_rate_keeps_the_steps_measured_too(tmp_path):
    def progress(done, total):
        if done == 3:
            raise RuntimeError("my progress bar")

    with pytest.raises(RuntimeError, match="my progress bar") as info:
        lr_find(rlnb.AdamParams(), steps=10, step_fn=rising, progress=progress, record=False)
    assert info.value.lr_find.values == [0.0, 1.0, 2.0]
    assert "are kept (no run folder: record=False) and as this exception's lr_find" in info.value.__notes__[0]

    def refused(session, params, i):  # a rate the params refuse: no failure of the session, raised as before
        return float(i) if i < 2 else rlnb.AdamParams(beta1=2.0)

    with pytest.raises(rlnb.InvalidParams) as info:
        lr_find(rlnb.AdamParams(), steps=5, step_fn=refused, runs_dir=tmp_path)
    assert info.value.lr_find.values == [0.0, 1.0]


@pytest.mark.parametrize("where", ["step", "log", "progress"])
def test_a_ctrl_c_anywhere_in_the_test_keeps_the_result_and_marks_it(tmp_path, where):
    """A Ctrl-C in the step was taken as ``stop``, but one landing in ``history.log`` or in ``progress`` (between two
    steps) propagated and lost every step measured; and a script calling ``lr_find`` in a loop could not tell an
    interrupted test from a finished one. Each ends the test with the result, marked ``interrupted``."""

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    def step(session, params, i):
        if i == 4 and where == "step":
            interrupt()
        if i == 4 and where == "log":
            session.history.log = interrupt  # the next log, after this step's value is measured
        return float(i)

    def progress(done, total):
        if done == 4 and where == "progress":
            interrupt()

    found = not_interrupted(base=rlnb.AdamParams(), steps=10, step_fn=step, progress=progress, runs_dir=tmp_path)
    measured = 5 if where == "log" else 4
    assert found.interrupted and found.values == [float(i) for i in range(measured)]
    assert found.reason.endswith(f"; ended early: interrupted after {measured} steps")
    assert not lr_find(rlnb.AdamParams(), steps=5, step_fn=rising, runs_dir=tmp_path).interrupted


def test_a_ctrl_c_in_the_final_wait_keeps_the_result_and_closes_the_copy(tmp_path):
    """A KeyboardInterrupt (a second Ctrl-C, say) in the wait for the copy's last operations propagated: the steps
    measured were lost (and, before that, the copy stayed open)."""
    copies = []

    def step(session, params, i):
        if not copies:
            copies.append(session)
            session.wait = lambda *a: (_ for _ in ()).throw(KeyboardInterrupt)
        return float(i)

    found = not_interrupted(base=rlnb.AdamParams(), steps=5, step_fn=step, runs_dir=tmp_path)
    assert copies[0].closed and found.interrupted and len(found.values) == 5
    assert found.reason.endswith("; interrupted in the wait for the copy's last operations")


def test_a_ctrl_c_in_the_close_of_the_copy_keeps_the_result_and_says_so(tmp_path):
    """A Ctrl-C landing in the copy's close propagated: the steps measured were lost, the copy no more closed."""
    copies, raised = [], []

    def step(session, params, i):
        if not copies:
            copies.append(session)
            real = session.close

            def close(*args, **kwargs):  # a Ctrl-C in the first close only
                if not raised:
                    raised.append(True)
                    raise KeyboardInterrupt
                return real(*args, **kwargs)

            session.close = close
        return float(i)

    found = not_interrupted(base=rlnb.AdamParams(), steps=5, step_fn=step, runs_dir=tmp_path)
    copies[0].close()  # the test's own cleanup
    assert found.interrupted and len(found.values) == 5
    assert found.reason.endswith("; interrupted while the copy closed: it may still be open")


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_the_final_wait_for_a_hung_operation_has_a_deadline(tmp_path, monkeypatch):
    """The last step left an operation running that never ends (a hung engine or service): the final wait had no
    limit. It waits as long as an operation may take (``OPERATION_TIMEOUT``, here 0.5 s), keeps the steps measured
    and says so; the close stops the operation."""
    monkeypatch.setattr(find_lr_module, "OPERATION_TIMEOUT", 0.5)

    def step(session, params, i):
        if i == 4:
            session.backend.engine.op_delay = 30.0  # from now on each operation takes 30 s
            session.forward_backward([samples.cross_entropy([1, 2, 3])])  # not waited for
        return float(i)

    found = lr_find(rlnb.AdamParams(), steps=5, step_fn=step, runs_dir=tmp_path, model="tiny")
    assert "; not waited for: session " in found.reason
    assert "1 of 1 operations still unfinished after 0.5 s (lr_find waits as long as an" in found.reason
    assert len(found.values) == 5 and not found.interrupted


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_the_checkpoint_of_a_hung_session_has_a_deadline(tmp_path, monkeypatch):
    """The training checkpoint of the session to copy waited with no limit behind its operations (one hung: for
    ever). It waits as long as an operation may take, then an ``OperationTimeout`` says what it waited for."""
    session = rlnb.connect("local", optimizer="adam", device="cpu", runs_dir=tmp_path, run_id="user")
    monkeypatch.setattr(find_lr_module, "OPERATION_TIMEOUT", 0.5)
    session.backend.engine.op_delay = 30.0
    try:
        with pytest.raises(rlnb.OperationTimeout, match=r"lr_find: the session's training checkpoint \(the weights "
                           r"to copy\) was not saved within 0.5 s, the longest an operation may take"):  # fmt: skip
            lr_find(rlnb.AdamParams(), session, steps=5, step_fn=rising, runs_dir=tmp_path / "lr")
        assert not (tmp_path / "lr").exists()
    finally:
        session.close()  # stops the checkpoint's delay


@pytest.mark.parametrize("objective", ["reward", "loss"])
def test_an_objective_not_finite_at_the_first_step_is_not_called_a_rate_that_diverged(tmp_path, objective):
    """A ``step_fn`` whose objective is NaN from the start (a broken model or reward, whatever the rate) was told
    "diverged at lr 1e-05": the first step's value is measured before any rate moved the weights, so no rate did."""
    found = lr_find(rlnb.AdamParams(), steps=10, step_fn=lambda s, p, i: float("nan"), objective=objective,
                    runs_dir=tmp_path)  # fmt: skip
    assert found.suggestion is None and len(found.values) == 1
    assert "diverged" not in found.reason.replace("not diverged by a rate", "")
    assert found.reason.endswith(
        f"ended early: the {objective} was nan at the first step, before any rate had "
        "acted: the model or the objective is broken from the start, not diverged by a rate"
    )
    later = lr_find(rlnb.AdamParams(), steps=10, step_fn=lambda s, p, i: 0.5 if i < 3 else float("inf"),
                    runs_dir=tmp_path)  # fmt: skip
    assert later.reason.endswith(f"ended early: diverged at lr {later.lrs[3]:.3g} (reward inf)")
