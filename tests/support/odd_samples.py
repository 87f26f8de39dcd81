"""A backend that answers samples as a remote sampler may: a completion of no tokens (a stop string matched at once,
left out of the tokens), or sequences without their optional ``logprobs``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlnb import wire


class OddSamples:
    """``inner`` (a real backend), whose sample outputs ``change`` edits before the session hears them."""

    def __init__(self, inner: Any, change: Callable[[wire.SampleOutput], None]):
        self._inner, self._change = inner, change

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def submit(self, kind: wire.OperationKind, body: Any, listener: wire.Listener) -> None:
        if kind != wire.OperationKind.SAMPLE:
            return self._inner.submit(kind, body, listener)

        def edited(env: wire.Operation[Any]) -> None:
            if env.status == wire.OperationStatus.COMPLETED and env.output is not None:
                self._change(env.output)
            listener(env)

        return self._inner.submit(kind, body, edited)


def emptied(*at: tuple[int, int]) -> Callable[[wire.SampleOutput], None]:
    """Empty the sequences at (prompt, sample) ``at``: no tokens, no log-probs."""

    def change(out: wire.SampleOutput) -> None:
        for p, i in at:
            seq = out.results[p].sequences[i]
            seq.tokens, seq.logprobs = [], []

    return change


def without_logprobs(out: wire.SampleOutput) -> None:
    """Drop every sequence's log-probs (optional in the API's ``SampledSequence``)."""
    for result in out.results:
        for seq in result.sequences:
            seq.logprobs = None


class Recording(OddSamples):
    """``OddSamples`` that keeps each forward-backward body it is given (``bodies``)."""

    def __init__(self, inner: Any, change: Callable[[wire.SampleOutput], None]):
        super().__init__(inner, change)
        self.bodies: list[Any] = []

    def submit(self, kind: wire.OperationKind, body: Any, listener: wire.Listener) -> None:
        if kind == wire.OperationKind.FORWARD_BACKWARD:
            self.bodies.append(body)
        return super().submit(kind, body, listener)
