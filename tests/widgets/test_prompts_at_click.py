"""A task's prompt the session cannot read is refused at the click on Step, Run N or Find LR, naming it, before
anything is sent: a run started and failed at its first step, and Find LR copied the session (a checkpoint POSTed
to a remote service, a new session started) before its first step found it. Real widgets, on ``FakeBackend`` and
on a remote session of the in-process fake API (``tests/support/fake_api.py``, no tokenizer given)."""

import html
import re

import httpx
import pytest

import rlnb
import rlnb.sweep
from rlnb.tasks import Task
from rlnb.testing import FakeBackend
from rlnb.widgets import RunPanel
from tests.support.fake_api import BASE, KEY, FakeAPI

pytestmark = pytest.mark.usefixtures("undrawn_live_view")  # reads no picture of the live view

DEADLINE = 60.0
NO_TOKENIZER = r"task 'first_letter': prompts\[0\]: session \S+ has no tokenizer: pass tokenizer="


def text(widget) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", widget.value))


@pytest.fixture
def api():
    return FakeAPI()


@pytest.fixture
def remote(api):
    """A remote session without ``tokenizer=``: it takes token ids, and no text."""
    with rlnb.connect(
        BASE, api_key=KEY, transport=httpx.MockTransport(api), ready_timeout=5, record=False, poll_min=0.002
    ) as s:
        yield s


@pytest.mark.parametrize("button", ["step_button", "run_button"])
def test_a_run_whose_task_the_remote_session_cannot_read_is_refused_at_the_click(api, remote, button):
    panel = RunPanel(remote, every=0.05)  # the first_letter task: text prompts
    sent = len(api.calls())
    getattr(panel, button).click()
    assert panel.join(DEADLINE) and not panel.running
    assert re.search(NO_TOKENIZER, str(panel.error)) and isinstance(panel.error, ValueError)
    assert re.search("^not started: " + NO_TOKENIZER, text(panel.status))
    assert len(api.calls()) == sent  # nothing asked of the service: not even the session's step
    assert not panel.step_button.disabled and not panel.run_button.disabled and panel.stop_button.disabled
    panel.close()


def test_find_lr_whose_task_the_remote_session_cannot_read_is_refused_at_the_click(api, remote, monkeypatch):
    panel = RunPanel(remote, every=0.05)
    lr = panel.builder.lr_finder
    sent = len(api.calls())
    lr.button.click()
    assert not lr.running and lr.join(DEADLINE)
    assert re.search(NO_TOKENIZER, str(lr.error)) and re.search(NO_TOKENIZER, text(lr.status))
    assert len(api.calls()) == sent  # no checkpoint of the session POSTed to copy it
    assert not lr.button.disabled and not panel.step_button.disabled
    with pytest.raises(ValueError, match=NO_TOKENIZER):
        lr.run()  # from a cell: refused as the click is
    assert len(api.calls()) == sent
    panel.close()


def test_a_prompt_the_session_cannot_encode_is_refused_at_the_click_naming_it():
    """A lone surrogate (text from a bad decode) cannot be encoded: the run started, and failed at its first step."""
    task = Task("odd", ["ab", "x\ud800"], lambda prompt, completion: 0.0, max_tokens=4)
    with rlnb.Session(FakeBackend("adam"), record=False) as fake:
        panel = RunPanel(fake, task=task, every=0.05)
        panel.step_button.click()
        assert panel.join(DEADLINE) and not panel.running
        assert re.search(r"^not started: task 'odd': prompts\[1\]", text(panel.status)), text(panel.status)
        assert isinstance(panel.error, ValueError) and not panel.step_button.disabled
        panel.close()


def test_lr_find_given_a_session_without_a_tokenizer_refuses_its_text_prompts_before_copying_it(api, remote):
    """``lr_find(params, session)`` skipped its prompt check for a session without a tokenizer (``codec`` None),
    which the panel's Find LR makes: the session was copied (a checkpoint POSTed, a new session started) before the
    first step found that the copy reads no text."""
    sent = len(api.calls())
    with pytest.raises(ValueError, match="^" + NO_TOKENIZER.replace("first_letter", "digits")):
        rlnb.sweep.lr_find(rlnb.AdamParams(), remote, steps=5, record=False)
    assert len(api.calls()) == sent  # nothing asked of the service
