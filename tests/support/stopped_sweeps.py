"""A sweep stopped while its one trial waits for its remote session: the slot, readiness and retry waits' tests."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pandas as pd

from rlnb.sweep import sweep

ROOM = 30.0
"""Seconds a test waits for what should take well under one (the machine is loaded)."""


def stopped_sweep(
    params: Any, provider: httpx.MockTransport, began: threading.Event, target: str, **options: Any
) -> pd.DataFrame:
    """A one-step sweep of ``params`` against ``target`` through ``provider`` on a thread, its stop set once ``began``
    is: its trials, once the sweep has ended (asserted within ``ROOM``: the stop must end the wait)."""
    stop, result = threading.Event(), {}
    run = threading.Thread(
        target=lambda: result.update(
            trials=sweep(params, steps=1, target=target, transport=provider, stop=stop, progress=False, **options)
        ),
        daemon=True,
    )
    run.start()
    assert began.wait(ROOM), "the trial never reached the provider"
    stop.set()
    run.join(ROOM)
    assert not run.is_alive(), "the stop did not end the trial's wait"
    return result["trials"]
