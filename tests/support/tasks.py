"""Tasks for sweep tests whose trial code misbehaves."""

from __future__ import annotations

from rlnb.tasks import Task


def raising_task(exc: BaseException) -> Task:
    """A task whose reward raises ``exc`` (a ``KeyboardInterrupt``, a ``SystemExit``: not an ``Exception``)."""

    def reward(prompt: str, completion: str) -> float:
        raise exc

    return Task("raises", [[104, 105]], reward)
