"""A RunPanel on a remote session running one step that sends a forward-backward and waits on it, started and polled
(the outage tests: tests/widgets/test_server_gone.py, test_stop_outage.py), and what its widgets say: a test module
imports no other test module."""

import html
import re
from typing import Any

import rlnb
from rlnb.widgets import RunPanel
from tests.support.gated_steps import wait_for

WINDOW = 600.0
"""The session's ``poll_failure_window``: far past the tests' waits, so only a Stop can end the wait."""


def text(widget) -> str:
    """A widget's HTML value as the words a person reads (entities too: ``…``, ``⚠``, quotes)."""
    return html.unescape(re.sub(r"<[^>]+>", "", widget.value))


def started_panel(session: rlnb.Session, batch: list[Any], wait: float) -> tuple[RunPanel, list[rlnb.Operation]]:
    """A RunPanel on ``session`` running one step, a forward-backward of ``batch`` waited on ``wait`` seconds at most;
    returned once its POST was answered (polled from then on), with the operations sent."""
    sent: list[rlnb.Operation] = []

    def step_fn(s, params):
        sent.append(s.forward_backward(batch))
        sent[-1].result(wait)
        return {}

    panel = RunPanel(session, step_fn=step_fn, every=0.2)
    assert panel.start(1)
    wait_for(lambda: sent and sent[0].id)
    return panel, sent
