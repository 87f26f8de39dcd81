"""``lr_find``'s ``step_fn`` and ``progress`` checked with its other options, before a session is opened or a run folder
made."""

import pytest

import rlnb
from rlnb.sweep import lr_find


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
    with pytest.raises(TypeError, match=r"progress must be a callable progress\(done, total\) or None"):
        lr_find(rlnb.AdamParams(), steps=5, progress=lambda done, total, row: None, runs_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []
