"""A loss param out of its bounds that reaches `rlnb serve` (a crafted ``LossConfig`` skips the client's own check) is
refused in the words an in-process session says it in: each bad field, its value and its rule (``wire.one_line``).
Against the real app, in process."""

import pytest

import rlnb
from rlnb import samples, wire
from tests.support.server import app_client

SAMPLE = samples.policy(list(b"n="), list(b"42"), [-3.0, -2.5], [1.0, -1.0])


def refusal(s: rlnb.Session) -> str:
    """Why a forward-backward with PPO clip thresholds both out of bounds failed."""
    params = wire.PpoLossParams.model_construct(clip_low_threshold=1.5, clip_high_threshold=-2.0)
    crafted = wire.LossConfig.model_construct(type="LOSS_TYPE_PPO", ppo_params=params)
    with pytest.raises(rlnb.OperationFailed) as info:
        s.forward_backward([SAMPLE], loss=crafted).result(60)
    return str(info.value)


@pytest.mark.slow  # the app and an in-process session, each on a model (seconds on a loaded machine)
def test_a_crafted_bad_loss_param_is_refused_remotely_in_the_in_process_words(tmp_path):
    """The server's 400 was pydantic's, naming the first field alone ("Input should be less than or equal to 1")."""
    with app_client(tmp_path) as c, rlnb.connect("http://testserver", base_model="rlnb/tiny", http_client=c,
                                                 record=False) as s:  # fmt: skip
        remote = refusal(s)
    with rlnb.connect("local", model="tiny", record=False) as s:
        local = refusal(s)
    said = local.split("INVALID_INPUT: ", 1)[1]
    assert remote.endswith(f"/forward-backward: 400 {said}"), remote
    assert "loss.ppo_params.clip_low_threshold = 1.5 is invalid: " in said
    assert "loss.ppo_params.clip_high_threshold = -2.0 is invalid: " in said
