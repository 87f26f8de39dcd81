"""``keep_resource`` is a flag like every other: True or False (a numpy bool as a bool). A string was read by its truth
value, so ``keep_resource="no"`` (or ``"False"``) kept a paid model resource running after the session's close."""

import httpx
import numpy as np
import pytest

import rlnb
from rlnb.remote.backend import RemoteBackend
from rlnb.sweep import sweep
from rlnb.sweep.slot import KeptResource
from tests.support.fake_api import BASE, FAST_POLL, FakeAPI

PARAMS = rlnb.AdamParams(learning_rate=1e-3)


@pytest.mark.parametrize("flag", ["no", "False", 1, None])
def test_keep_resource_that_is_no_bool_is_refused_naming_it_before_anything_is_sent(flag):
    sent: list[httpx.Request] = []
    api = FakeAPI()
    transport = httpx.MockTransport(lambda request: sent.append(request) or api(request))
    with pytest.raises(ValueError, match="^keep_resource must be True or False, got "):
        RemoteBackend.connect(BASE, transport=transport, keep_resource=flag, **FAST_POLL)
    assert sent == []


def test_a_sweep_trial_given_keep_resource_that_is_no_bool_refuses_it_too():
    """The trial's tries connect with ``keep_resource=True`` of their own: the user's "no" reached no check."""
    with pytest.raises(ValueError, match="^keep_resource must be True or False, got 'no'"):
        KeptResource(BASE, {"keep_resource": "no"})
    assert KeptResource(BASE, {"keep_resource": np.False_}).keep is False


def test_a_sweep_given_keep_resource_that_is_no_bool_is_refused_before_its_folder(tmp_path):
    """Each trial's FAILED row said it, after the sweep's folder was made."""
    with pytest.raises(ValueError, match="^keep_resource must be True or False, got 'no'"):
        sweep(PARAMS, steps=1, target=BASE, keep_resource="no", runs_dir=tmp_path / "runs", progress=False)
    assert not (tmp_path / "runs").exists()
