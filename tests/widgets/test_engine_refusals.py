"""What the engine would refuse of a step (an AdamW eps that is 0 in the weights' float32, a rate whose step passes
float32's range) the form refuses first, naming the field: the form said "✓ valid", a click sampled and ran a
forward-backward, only the optim-step was refused, and its gradients, kept, went into the next Step with its own.
Where the server alone can refuse (a remote session: no engine here), the panel's line says what its next Step does
with the kept gradients. Real widgets driven by ``.value`` and ``.click()``."""

import html
import re
from pathlib import Path

import httpx
import pytest

import rlnb
from rlnb import params
from rlnb.testing import FakeBackend
from rlnb.widgets import RunPanel
from rlnb.widgets.controls import INVALID
from tests.support.fake_api import FAST_POLL
from tests.support.server import app_client

pytestmark = pytest.mark.usefixtures("undrawn_live_view", "unplotted_schedule")

DEADLINE = 120.0


def text(widget) -> str:
    return html.unescape(re.sub("<[^>]+>", "", widget.value))


def optim_bodies(backend: FakeBackend) -> list:
    return [body for kind, body in backend.submitted if kind == "optim-step"]


@pytest.mark.parametrize(
    ("optimizer", "group", "field", "value", "named"),
    [
        ("adam", "adam", "eps", 1e-50, "AdamParams.eps 1e-50 is 0 in float32"),
        ("muon", "muon_adam", "eps", 1e-50, "MuonParams.adam.eps 1e-50 is 0 in float32"),
        ("muon", "muon_adam", "learning_rate", 1e308, "MuonParams.adam.learning_rate is too large"),
        ("muon", "muon", "learning_rate", 1e300, "MuonParams.learning_rate is too large"),  # review42c L6
    ],
)
def test_the_form_refuses_what_the_engine_would_and_nothing_is_sent(optimizer, group, field, value, named):
    backend = FakeBackend(optimizer)
    session = rlnb.Session(backend, record=False)
    panel = RunPanel(session, n_steps=1, every=0.05)
    b = panel.builder
    if field == "learning_rate":
        b.muon_adam["weight_decay"].value = 0.0  # else lr * wd >= 1, the params' own refusal
    getattr(b, group)[field].value = value
    assert not b.valid and named in text(b.message), text(b.message)
    assert "_params." not in text(b.message)  # the form's naming, as every other of its messages (not the wire's)
    if field == "learning_rate":  # the largest rate allowed, in the form's naming (review42c L6: no bound was said)
        assert re.search(r"give one <= \d", text(b.message)), text(b.message)
    assert "✓ valid" not in text(b.message)
    assert panel.step_button.disabled and panel.run_button.disabled
    control = getattr(b, group)[field]
    assert INVALID in getattr(control, "text", control)._dom_classes  # the field is marked red (a rate: its box)
    assert panel.start(1) is False
    assert named in text(panel.status) and named in str(panel.error)
    assert backend.submitted == []  # no sample, no forward-backward: no gradients left for the next step
    getattr(b, group)[field].value = 1e-8 if field == "eps" else 1e-3
    assert b.valid and not panel.step_button.disabled
    panel.step_button.click()
    assert panel.join(DEADLINE) and panel.error is None, text(panel.status)
    assert len(optim_bodies(backend)) == 1 and session.step == 1
    panel.close()
    session.close()


def test_an_edit_the_engine_would_refuse_mid_run_is_held_and_the_run_goes_on():
    session = rlnb.Session(FakeBackend("adam"), record=False)
    sent: list = []
    held: list[str] = []
    form: dict = {}

    def step_fn(s, p):
        sent.append(p)
        if len(sent) == 1:  # the person edits the form while the run goes
            form["builder"].adam["eps"].value = 1e-50
        held.append(text(form["panel"].status))

    panel = form["panel"] = RunPanel(session, step_fn=step_fn, n_steps=3, every=0.05)
    form["builder"] = panel.builder
    panel.run_button.click()
    assert panel.join(DEADLINE) and len(sent) == 3
    assert [p.eps for p in sent] == [1e-8, 1e-8, 1e-8], sent  # the last valid config, every step
    assert panel.error is None and "3 done" in text(panel.status), text(panel.status)
    assert "your edit is not used" in held[1] and "AdamParams.eps 1e-50 is 0 in float32" in held[1], held
    panel.close()
    session.close()


def test_a_local_engine_session_refuses_before_sampling():
    """The in-process engine's own limits (``TrainerOptimizer.check``), asked before anything is sent."""
    session = rlnb.connect("local", optimizer="adam", device="cpu", record=False, seed=0)
    try:
        panel = RunPanel(session, n_steps=1, every=0.05)
        panel.builder.adam["eps"].value = 1e-50
        assert not panel.builder.valid and panel.step_button.disabled
        assert "AdamParams.eps 1e-50 is 0 in float32" in text(panel.builder.message)
        assert panel.start(1) is False
        assert session.history.df.empty  # nothing sampled, nothing accumulated
        panel.close()
    finally:
        session.close()


def test_a_refusal_by_the_server_says_the_next_step_applies_the_kept_gradients(tmp_path: Path):
    """A remote session has no engine here: the server refuses the optim-step, keeping the batch's gradients. The
    panel cannot "submit an optim-step again" (its Step is a whole RL step): its line says what that Step does."""
    with app_client(tmp_path) as client:

        def handler(request: httpx.Request) -> httpx.Response:
            path = request.url.path.removeprefix("/v1/rl")
            a = client.request(request.method, path, content=request.read(), headers=request.headers)
            return httpx.Response(a.status_code, headers=a.headers.multi_items(), content=a.content)

        session = rlnb.connect("https://rl.local", base_model="rlnb/tiny", optimizer="adam", record=False,
                               transport=httpx.MockTransport(handler), ready_timeout=DEADLINE, **FAST_POLL)  # fmt: skip
        try:
            panel = RunPanel(session, n_steps=1, every=0.05)
            panel.builder.adam["eps"].value = 1e-50
            assert panel.builder.valid  # nothing here knows the server's weights
            panel.step_button.click()
            assert panel.join(DEADLINE)
            said = text(panel.status)
            assert "INVALID_INPUT" in said and params.GRADIENTS_KEPT.strip("; ") in said, said
            assert "submit an optim-step again" not in said, said
            assert "your next Step applies them together with its own" in said, said
            panel.close()
        finally:
            session.close()
