"""A sink whose set-up never returns (a tracking server that accepts and never answers), light enough for a sink's
child process to import (``process=True``)."""

from __future__ import annotations

import threading
from typing import Any

from rlnb.sinks.base import RunInfo, Sink, Writer


class Hanging(Sink):
    library, extra = "json", "none"

    def spec(self) -> tuple[str, str, dict[str, Any]]:
        return __name__, "Hanging", {"interval": self.interval}

    def prepare(self) -> None:
        threading.Event().wait()

    def open(self, run: RunInfo) -> Writer:
        raise AssertionError("never reached")
