"""A sink library kept in memory, by name (``WRITTEN``): what each sink was given, batch by batch, for the tests of
sink marks (``rlnb.sinks.marks``) and of runs left out of a sink."""

from __future__ import annotations

import time
from typing import Any

from rlnb.sinks.base import Failure, Point, RunInfo, Sink

WRITTEN: dict[str, list[tuple[list[Point], list[Failure]]]] = {}


class Kept(Sink):
    """A library kept in memory (``WRITTEN[name]``) that fails at the batch holding step ``fail_at`` (the sink is
    dropped)."""

    library, extra = "json", "none"

    def __init__(self, name: str, fail_at: int = 0, held: bool = False, **kw: Any):
        self.name, self.fail_at, self.held = name, fail_at, held
        super().__init__(**kw)

    def holds(self, run: RunInfo) -> str | None:
        return "as another run of that name" if self.held else None

    def spec(self) -> tuple[str, str, dict[str, Any]]:
        return __name__, "Kept", {"name": self.name, "interval": self.interval}

    def open(self, run: RunInfo) -> Kept:
        return self

    def write(self, points: list[Point], failures: list[Failure]) -> None:
        if self.fail_at and any(p.step >= self.fail_at for p in points):
            raise OSError("disk gone")
        WRITTEN.setdefault(self.name, []).append((points, failures))

    def close(self) -> None:
        return None


def figures_of(name: str) -> list[tuple[int, str]]:
    """Each figure the sink was given, by step: one given twice is there twice."""
    return sorted((p.step, k) for points, _ in WRITTEN.get(name, []) for p in points for k in p.values)


def written(name: str, step: int, figure: str | None = None) -> None:
    """Wait until the sink wrote ``step`` (a batch of its own: the one holding a step it fails at writes nothing), or
    its ``figure``."""
    deadline = time.monotonic() + 30
    while not any(s == step and figure in (None, k) for s, k in figures_of(name)):
        assert time.monotonic() < deadline, f"{name} never wrote step {step}" + (f"'s {figure}" if figure else "")
        time.sleep(0.005)
