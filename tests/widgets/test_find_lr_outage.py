"""Find LR on a RunPanel's remote session whose ``rlnb serve`` is killed mid-step: Find LR's line says the server is
not answering (how long, when the run fails, that Stop ends the wait) as a RunPanel's run says it, and the panel's
Stop then ends the wait, the step in flight failed and the test ended with what it measured. It said only "running …
0/5 steps" for the whole ``poll_failure_window``, and a Stop waited for it. A real server process, killed (SIGKILL),
and the widgets driven by ``.click()``."""

import contextlib

import pytest

import rlnb
from rlnb import samples, wire
from rlnb.testing import ServerProcess
from rlnb.widgets import RunPanel
from tests.support.gated_steps import wait_for
from tests.support.remote_panel import WINDOW, text
from tests.support.server import START_DEADLINE

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("undrawn_live_view")]  # a server process

BATCH = [samples.cross_entropy(list(b"abc"))]


def test_find_lr_says_a_server_that_stops_answering_and_the_panels_stop_ends_its_wait():
    # each operation held 10 s: the copy's first forward-backward is still running when the server is killed
    server = ServerProcess.rlnb_serve("--device", "cpu", "--op-delay", "10", timeout=START_DEADLINE)
    with server as url:
        s = rlnb.connect(url, base_model="rlnb/tiny", record=False, poll_failure_window=WINDOW)
        panel = RunPanel(s, every=0.2)
        finder, sent = panel.builder.lr_finder, []

        def probe(trial, params, i):
            sent.append(trial.forward_backward(BATCH))
            wait_for(lambda: sent[-1].id)  # its POST answered: polled from now on
            assert server.proc is not None
            server.proc.kill()
            return sent[-1].result(WINDOW).loss

        finder.options = {"steps": 5, "step_fn": probe, "objective": "loss", "poll_failure_window": WINDOW}
        try:
            finder.button.click()
            wait_for(lambda: "server not answering" in text(finder.status))
            said = text(finder.status)
            assert said.startswith("range test of your step_fn running … · ⚠ server not answering for "), said
            assert f"(the run fails at {WINDOW:g} s; Stop ends the wait)" in said
            panel.stop_button.click()
            assert finder.join(60)  # far short of the window: the Stop ended the wait
            assert len(sent) == 1 and sent[0].status == wire.OperationStatus.FAILED
            assert sent[0].error is not None and "rlnb stopped waiting at a Stop" in (sent[0].error.message or "")
            ended = text(finder.status)
            assert "ended early: TIMEOUT at lr" in ended and "server not answering" not in ended, ended
            assert "the copy's close failed" in ended and "may still be running remotely" in ended, ended
            assert finder.result is not None and finder.result.values == []
        finally:
            panel.close(timeout=60)
            with contextlib.suppress(rlnb.APIConnectionError):  # its stop cannot reach the server: said, and raised
                s.close()
