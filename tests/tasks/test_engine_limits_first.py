"""``rl_step`` and ``lesson`` check the params against the local engine's own limits (``Session.check_params``,
which asks the backend's ``check_step``) before anything is sampled: an eps that is 0 in the weights' float32 was
sampled, trained a forward-backward, and only then refused at the optim-step, its gradients kept for the next one."""

import pytest

import rlnb
from rlnb.tasks import first_letter_task, rl_step
from rlnb.testing import FakeBackend


@pytest.mark.parametrize(
    ("optimizer", "params", "named"),
    [
        ("adam", rlnb.AdamParams(eps=1e-50), "adam_params.eps 1e-50 is 0 in float32"),
        ("muon", rlnb.MuonParams(adam={"learning_rate": 1e308, "weight_decay": 0.0}), "muon_params.adam.learning_rate"),
    ],
)
def test_rl_step_refuses_what_the_engine_would_before_sampling(optimizer, params, named):
    backend = FakeBackend(optimizer)
    with rlnb.Session(backend, record=False) as session:
        with pytest.raises(ValueError, match=named):
            session.check_params(params)
        with pytest.raises(ValueError, match=named):
            rl_step(session, first_letter_task(), params, seed=0)
        assert backend.submitted == [] and session.history.df.empty
