"""The Ray actor that carries a sweep's voice to its running tasks: who started, Stop, and per-step
reports waiting for the pruner's verdict. One actor serves every sweep of this driver (keyed by the
sweep's folder), so a sweep does not wait for a new actor process to start.

This module imports nothing from rlnb and is pickled by value, so the actor's process starts without
loading torch or rlnb."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field


@dataclass
class _Sweep:
    stop: bool = False
    started: set[int] = field(default_factory=set)
    reports: list[tuple[int, int, float]] = field(default_factory=list)
    waiting: dict[tuple[int, int], asyncio.Future[str | bytes | None]] = field(default_factory=dict)

    def wake(self) -> None:
        for future in self.waiting.values():
            if not future.done():
                future.set_result(None)
        self.waiting.clear()


class PostOffice:
    """Async actor: ``report`` waits (without blocking the actor) until the driver answers: a reason to prune, None, or
    the pickled error the search raised."""

    def __init__(self) -> None:
        self._sweeps: dict[str, _Sweep] = {}

    def ping(self) -> bool:
        return True

    def open(self, sweep: str) -> None:
        self._sweeps[sweep] = _Sweep()

    def close(self, sweep: str) -> None:
        box = self._sweeps.pop(sweep, None)
        if box is not None:
            box.wake()

    def begin(self, sweep: str, trial: int) -> bool:
        """A task starts its trial, unless the sweep is stopping (or gone)."""
        box = self._sweeps.get(sweep)
        if box is None or box.stop:
            return False
        box.started.add(trial)
        return True

    def stopping(self, sweep: str) -> bool:
        box = self._sweeps.get(sweep)
        return box is None or box.stop

    async def report(self, sweep: str, trial: int, step: int, value: float) -> str | bytes | None:
        box = self._sweeps.get(sweep)
        if box is None or box.stop:
            return None
        future: asyncio.Future[str | bytes | None] = asyncio.get_running_loop().create_future()
        box.waiting[(trial, step)] = future
        box.reports.append((trial, step, value))
        return await future

    def take(self, sweep: str) -> list[tuple[int, int, float]]:
        box = self._sweeps[sweep]
        reports, box.reports = box.reports, []
        return reports

    def answer(self, sweep: str, verdicts: list[tuple[int, int, str | bytes | None]]) -> None:
        box = self._sweeps.get(sweep)
        for trial, step, verdict in verdicts if box is not None else []:
            future = box.waiting.pop((trial, step), None)  # type: ignore[union-attr]
            if future is not None and not future.done():
                future.set_result(verdict)

    def stop(self, sweep: str) -> list[int]:
        """Stop the sweep; returns the trials that had started."""
        box = self._sweeps[sweep]
        box.stop = True
        box.wake()
        return sorted(box.started)
