"""``lr_find``'s ``step_fn`` and ``progress`` checked with its other options, before a session is opened or a run folder
made."""

import pytest

import rlnb
from rlnb import samples
from rlnb.sweep import RangeTestOptions, lr_find
from rlnb.tasks import digits_task

TOKENS = list(b"the digits 0123456789 and more text")


def ce_loss(session, params, i):
    """A real training step (cross-entropy on a fixed text): its loss."""
    fb = session.forward_backward([samples.cross_entropy(TOKENS)])
    session.optim_step(params).result()
    return fb.result().loss


@pytest.mark.parametrize("step_fn", [5, "ce", lambda session, params: 0.0, lambda: 0.0])
def test_a_step_fn_that_cannot_be_called_so_is_refused_before_anything_opens(tmp_path, step_fn):
    """``step_fn=5`` (or ``"ce"``, or a function of two arguments) opened a session and made a run folder, then its
    first step raised ``'int' object is not callable`` / ``takes 2 positional arguments``, naming no option."""
    with pytest.raises(TypeError, match=r"step_fn must be None or a function step_fn\(session, params, i\)"):
        lr_find(rlnb.AdamParams(), steps=5, step_fn=step_fn, runs_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_step_fn_of_three_arguments_or_more_with_defaults_runs(tmp_path):
    """Guard: the check refuses no step the test can call (``*args``, a default past the third)."""

    def varargs(*args):
        return float(args[2])

    def defaults(session, params, i, scale=2.0):
        return scale * i

    for step_fn in (varargs, defaults):
        found = lr_find(rlnb.AdamParams(), steps=5, step_fn=step_fn, runs_dir=tmp_path / step_fn.__name__)
        assert len(found.lrs) == 5


def test_a_progress_function_of_other_arguments_is_refused_before_anything_opens(tmp_path):
    """``progress=lambda done, total, row: ...`` (``sweep``'s kind) opened a session and made a run folder, then its
    first call raised ``missing 1 required positional argument: 'row'``, naming no option."""
    with pytest.raises(TypeError, match=r"progress must be a callable progress\(done, total\), False or None"):
        lr_find(rlnb.AdamParams(), steps=5, progress=lambda done, total, row: None, runs_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_progress_false_runs_without_progress_as_sweeps_does(tmp_path):
    """``sweep(progress=False)`` is no bar; ``lr_find(progress=False)`` was a ``TypeError`` naming a callable."""
    step_fn = lambda s, p, i: 1.0 - 0.1 * i  # noqa: E731
    found = lr_find(rlnb.AdamParams(), steps=5, step_fn=step_fn, progress=False, runs_dir=tmp_path)
    assert len(found.lrs) == 5


def test_a_task_beside_a_step_fn_is_refused_naming_both(tmp_path):
    """``task=`` was dropped in silence beside a ``step_fn`` (which reads no task): a range test said to be of
    ``first_letter_task()`` measured the step_fn alone."""
    said = r"task= and step_fn= both say what a step of the range test runs \(a step_fn reads no task\): pass one"
    with pytest.raises(ValueError, match=said):
        lr_find(rlnb.AdamParams(), steps=5, task=digits_task(), step_fn=ce_loss, runs_dir=tmp_path)
    with pytest.raises(ValueError, match=said):
        RangeTestOptions(task=digits_task(), step_fn=ce_loss)
    assert list(tmp_path.iterdir()) == []


def test_a_seed_beside_a_step_fn_where_it_seeds_nothing_is_refused_naming_both(tmp_path):
    """Beside a ``step_fn``, ``seed=`` seeds a new local session only: on a session's copy (which goes on with the
    session's own generators) or a remote service it was dropped in silence. Refused before a checkpoint is saved,
    a session opened or a run folder made."""
    session = rlnb.connect("local", optimizer="adam", device="cpu", record=False)
    with pytest.raises(ValueError, match=r"seed=3 seeds nothing beside a step_fn on a copy of a session"):
        lr_find(rlnb.AdamParams(), session, steps=5, step_fn=ce_loss, seed=3, runs_dir=tmp_path)
    with pytest.raises(ValueError, match=r"seed=0 seeds nothing beside a step_fn on a remote session"):
        lr_find(rlnb.AdamParams(), steps=5, step_fn=ce_loss, seed=0, target="http://127.0.0.1:9", runs_dir=tmp_path)
    assert len(session.history) == 0 and list(tmp_path.iterdir()) == []
    session.close()


@pytest.mark.slow  # three range tests of 5 steps
def test_a_seed_beside_a_step_fn_seeds_the_new_local_session(tmp_path):
    """Guard: on a new local session ``seed=`` is its seed (its initial weights), step_fn or not."""
    runs = [lr_find(rlnb.AdamParams(), steps=5, step_fn=ce_loss, objective="loss", seed=s, record=False)
            for s in (1, 1, 2)]  # fmt: skip
    assert runs[0].values == runs[1].values != runs[2].values


@pytest.mark.slow  # a LoRA session copied, 5 steps
def test_a_lora_session_of_another_seed_than_0_is_copied(tmp_path):
    """The copy of a LoRA session on a built-in model was opened with the range test's seed (0), which builds the
    base weights its adapter adapts: ``CheckpointMismatch: checkpoint's seed is 1, this session's is 0``."""
    session = rlnb.connect("local", optimizer="adam", device="cpu", lora=True, seed=1, record=False)
    found = lr_find(rlnb.AdamParams(), session, steps=5, step_fn=ce_loss, objective="loss", runs_dir=tmp_path)
    assert len(found.values) == 5
    session.close()
