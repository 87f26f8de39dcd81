"""Loss params at the edges of what the wire takes, through the real app (FastAPI TestClient): a clip
threshold past float32's range (1e300 for "no clipping") is a completed forward-backward that clips
nothing, as in process (tests/engine/test_losses.py), not INTERNAL_ERROR."""

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from rlnb import samples, wire
from tests.support.server import app_client, new_session, submit, wait


@pytest.fixture(scope="module")
def c(tmp_path_factory) -> Iterator[TestClient]:
    with app_client(tmp_path_factory.mktemp("ckpt")) as client:
        yield client


SAMPLE = samples.policy(list(b"n="), list(b"42"), [-3.0, -2.5], [1.0, -1.0])


def forward(c: TestClient, sid: str, loss: str, low: float, high: float) -> dict:
    config = wire.loss_config(loss, {"clip_low_threshold": low, "clip_high_threshold": high})
    body = wire.ForwardBackwardBody(samples=[SAMPLE], loss=config, forward_only=True).to_json_dict()
    return wait(c, sid, "forward-backward", submit(c, sid, "forward-backward", body)["id"])


@pytest.mark.parametrize("loss", ["ppo", "grpo", "cispo"])
def test_a_clip_threshold_past_float32_clips_nothing(c, loss):
    _, sid = new_session(c)
    huge = forward(c, sid, loss, -1e300, 1e300)
    assert huge["status"] == wire.OperationStatus.COMPLETED, huge.get("error")
    finite = forward(c, sid, loss, -1e30, 1e30)
    assert huge["output"]["loss"] == finite["output"]["loss"]
    assert huge["output"]["metrics"]["loss/clip/high_fraction"] == 0.0


def test_bad_loss_params_are_a_400_in_the_clients_words_naming_every_field(c):
    """pydantic's words named the first bad field alone ("Input should be less than or equal to 1"); the client
    (``wire.loss_config``) and the engine say each field, its value and its rule."""
    _, sid = new_session(c)
    loss = {"type": "LOSS_TYPE_PPO", "ppo_params": {"clip_low_threshold": 1.5, "clip_high_threshold": -2.0}}
    body = wire.ForwardBackwardBody(samples=[SAMPLE], loss=wire.loss_config("ppo")).to_json_dict() | {"loss": loss}
    r = c.post(f"/training-sessions/{sid}/operations/forward-backward", json=body, headers={"Idempotency-Key": "k"})
    with pytest.raises(ValueError) as client:
        wire.loss_config(loss)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"] == str(client.value) and str(client.value).count(" is invalid: ") == 2
    assert r.json()["error"]["param"] == "loss.ppo_params.clip_low_threshold"
