"""A hostile user's values and folders: losses past the largest float, steps and completions handed in as numpy or
torch scalars, a run folder whose files are links, annotations JSON has no type for. Each must keep what was
recorded, or refuse it naming the field before anything is kept."""

import math

import pytest

import rlnb
from rlnb import samples
from rlnb.history import History
from rlnb.testing import FakeBackend

BATCH = [samples.cross_entropy(list(b"values"))]


@pytest.mark.parametrize(
    ("losses", "total"),
    [((1e308, 1e308), math.inf), ((math.inf, -math.inf), math.nan), ((1e308, 1e308, -1e308), 1e308)],
)
def test_losses_whose_sum_passes_the_largest_float_are_recorded_and_summed(tmp_path, losses, total):
    """Two forward-backwards of loss 1e308 in one step (a hostile server's answer, a custom loss): ``math.fsum``
    raised ``OverflowError`` while the second was recorded (on the backend's thread: "recording forward-backward ...
    failed"), so its line never reached the run folder (PENDING for ever there) and the step's loss read 1e308."""
    given = iter(losses)
    session = rlnb.Session(FakeBackend(loss=lambda step: next(given)), runs_dir=tmp_path, run_id="big")
    for _ in losses:
        session.forward_backward(BATCH)
    session.optim_step()
    session.wait()
    session.close()
    loaded = History.load(tmp_path / "big")
    for history in (session.history, loaded):
        assert list(history.df.status.map(str)) == ["TRAINING_OPERATION_STATUS_COMPLETED"] * (len(losses) + 1)
        assert list(history.df.loss[: len(losses)]) == list(losses)
        step_loss = history.steps.loss.iloc[0]
        assert step_loss == total or math.isnan(total) and math.isnan(step_loss)
