"""A RunPanel on a remote session whose ``rlnb serve`` is killed mid-step: the line says the server is not answering
within a few seconds (how long, when the run fails, that Stop ends the wait), and a Stop then ends the run at once,
the operation in flight failed and kept in the history. It said a healthy run for the whole ``poll_failure_window``
(120 s), and Stop waited for it. A real server process, killed (SIGKILL), and the widgets driven by ``.click()``."""

import contextlib

import pytest

import rlnb
from rlnb import samples, wire
from rlnb.testing import ServerProcess
from tests.support.gated_steps import wait_for
from tests.support.remote_panel import WINDOW, started_panel, text
from tests.support.server import START_DEADLINE

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("undrawn_live_view")]  # a server process


def test_a_server_that_stops_answering_is_said_and_stop_ends_the_run_keeping_the_failure():
    server = ServerProcess.rlnb_serve("--device", "cpu", "--op-delay", "30", timeout=START_DEADLINE)
    with server as url:
        s = rlnb.connect(url, base_model="rlnb/tiny", record=False, poll_failure_window=WINDOW)
        # one forward-backward the server holds 30 s: killed meanwhile
        panel, sent = started_panel(s, [samples.cross_entropy(list(b"abc"))], wait=WINDOW)
        try:
            assert server.proc is not None
            server.proc.kill()
            wait_for(lambda: "server not answering" in text(panel.status))
            said = text(panel.status)
            assert said.startswith("running: 0/1 done … · ⚠ server not answering for "), said
            assert f"(the run fails at {WINDOW:g} s; Stop ends the wait)" in said
            panel.stop_button.click()
            assert panel.join(60)  # far short of the window: the Stop ended the wait
            assert "stopped: TIMEOUT — rlnb stopped waiting at a Stop" in text(panel.status)
            assert sent[0].status == wire.OperationStatus.FAILED
            kept = [r for r in s.history.records if r.status == wire.OperationStatus.FAILED]
            assert kept and all("rlnb stopped waiting at a Stop" in (r.error_message or "") for r in kept), kept
            panel.step_button.click()  # the server still gone: its first GET fails, the line at the step last read
            assert panel.join(60)
            assert text(panel.status).startswith("step 0 · stopped: APIConnectionError — GET "), text(panel.status)
        finally:
            panel.close(timeout=60)
            with contextlib.suppress(rlnb.APIConnectionError):  # its stop cannot reach the server: said, and raised
                s.close()
