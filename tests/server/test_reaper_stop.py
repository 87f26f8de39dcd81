"""A stopping server waits for the reaper's turn in progress a bounded time (``stopping.STOP_DEADLINE``), as it waits
for its sessions' operations: a turn stuck (a journal write on a hung disk, say) held the stop for ever."""

import logging
import threading

from rlnb.server import stopping
from tests.support.server import DEADLINE, app_client


def test_a_stop_waits_for_a_stuck_reaper_turn_no_longer_than_the_stop_deadline(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(stopping, "STOP_DEADLINE", 0.2)
    release, turning = threading.Event(), threading.Event()
    stopped = threading.Event()

    def serve_then_stop() -> None:
        with app_client(tmp_path, reap_interval=0.01) as c:
            registry = c.app.state.registry

            def stuck() -> int:
                turning.set()
                release.wait(DEADLINE)
                return 0

            registry.reap = stuck
            assert turning.wait(DEADLINE), "the reaper never took its turn"
        stopped.set()

    runner = threading.Thread(target=serve_then_stop, daemon=True)
    with caplog.at_level(logging.WARNING, logger="rlnb"):
        runner.start()
        try:
            assert stopped.wait(30), "the stop waited on the stuck reaper's turn"
        finally:
            release.set()
            runner.join(DEADLINE)
    assert "the reaper's turn still runs" in caplog.text, caplog.text
