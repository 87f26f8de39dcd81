"""Tasks for sweep tests whose trial code misbehaves."""

from __future__ import annotations

from rlnb.tasks import Task


def raising_task(exc: BaseException) -> Task:
    """A task whose reward raises ``exc`` (a ``KeyboardInterrupt``, a ``SystemExit``: not an ``Exception``)."""

    def reward(prompt: str, completion: str) -> float:
        raise exc

    return Task("raises", [[104, 105]], reward)


def raising_once_task(exc: BaseException) -> Task:
    """A task whose reward raises ``exc`` at its first call only: the first trial (or ensemble member) to score
    fails, every other one trains on."""
    calls: list[int] = []

    def reward(prompt: str, completion: str) -> float:
        calls.append(1)
        if len(calls) == 1:
            raise exc
        return 0.0

    return Task("raises once", [[104, 105]], reward, group_size=4)


class UnprintableError(Exception):
    """An exception whose ``str()`` raises: a reason made of it raised again where the trial's row was made."""

    def __str__(self) -> str:
        raise RuntimeError("str of UnprintableError failed")
