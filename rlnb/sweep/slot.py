"""How a remote trial waits while it opens its session: for a session slot (a 429) up to its ``slot_timeout``, woken
by its sweep's stop (``SlotWait``, the client's ``RetryPolicy.pause`` and ``PollOptions.pause``), on the one model
resource its tries share (``KeptResource``)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from rlnb._input.checks import check_bool
from rlnb.errors import ConflictError, NotFoundError, RateLimitError, ResourceEnded

if TYPE_CHECKING:
    from rlnb.session import Session

TOO_MANY = 429
"""The status of a session cap (a slot to wait for): the one the slot deadline governs."""


class Control(Protocol):
    """How a running trial hears from its sweep."""

    def stopping(self) -> bool:
        """Whether the sweep is stopping (checked before every step)."""

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True if the sweep started stopping meanwhile."""

    def report(self, step: int, value: float) -> str | None:
        """Report the objective after ``step`` steps; the answer is a reason to prune, or None."""


class Stopped(Exception):
    """The sweep stopped while this trial waited for a session slot (or its stop called a wait of its start off)."""


class SlotWait:
    """How the client waits before a retry while a trial opens its session (``RetryPolicy.pause``): a 429's wait (a
    session cap) not past the trial's slot deadline, every wait woken by its sweep's stop (then the retry is called
    off, and ``stopped`` says so); another status's retries keep the policy's own rules. A pause of the user's own
    (``user``) still waits, and may call a retry off, in the session's life and while it opens (a 429's not past the
    deadline), for the session's every call."""

    def __init__(self, control: Control, end: float, user: Callable[[float], Any] | None = None):
        self.control, self.end, self.retries, self.opened, self.user = control, end, 0, False, user
        self.stopped = False
        """Whether the sweep's stop called a wait off: the error the start then raised is the stop's, not a failure."""

    def __call__(self, seconds: float) -> bool:
        from rlnb.remote.retry import RETRYING

        if self.opened:
            return self._wait(seconds)
        if RETRYING.get() != TOO_MANY:
            return self._stopped(seconds)
        left = self.end - time.monotonic()
        if left <= 0:
            return True
        if seconds >= left:  # the wait ends at the deadline, and no retry is sent past it
            self._stopped(left)
            return True
        if self._stopped(seconds):
            return True
        self.retries += 1
        return False

    def ready(self, seconds: float) -> bool:
        """The wait between the polls of a start (``PollOptions.pause``): woken by the sweep's stop only (the start
        is bounded by ``ready_timeout``, not by the slot deadline)."""
        self.stopped = self.stopped or self.control.wait(seconds)
        return self.stopped

    def _stopped(self, seconds: float) -> bool:
        """Waited ``seconds`` (the user's pause, then the sweep's stop looked at; else woken by it): whether to call
        the retry off."""
        if self.user is not None and self._wait(seconds):
            return True  # the user's own call: not the stop's
        stop = self.control.wait(seconds) if self.user is None else self.control.stopping()
        self.stopped = self.stopped or stop
        return stop

    def _wait(self, seconds: float) -> bool:
        from rlnb.remote.waiting import called_off

        if self.user is None:
            time.sleep(seconds)
            return False
        return called_off(self.user, seconds)

    def take_retries(self) -> int:
        """The 429 retries sent since last asked."""
        taken, self.retries = self.retries, 0
        return taken


class KeptResource:
    """The model resource a remote trial's tries share: a try refused a session (429) hands back the resource it
    created (``RateLimitError.model_resources_id``), and the next try starts its session there; the session's close
    stops it, or ``stop`` when no session opened. Each try created one and stopped it (4 in 1.5 s of slot wait). One
    that ended meanwhile (an idle resource expires after its ``inactive_timeout``) gives way to a new one, also one
    that ended after the try saw it READY (the session refused 409: then it is stopped, in case it had not ended).
    Not for a ``model_resources_id`` of the user's (never stopped), and left running under ``keep_resource=True``."""

    def __init__(self, target: str, options: dict[str, Any]):
        given = options.get("model_resources_id") or getattr(options.get("session"), "model_resources_id", None)
        keep = check_bool("keep_resource", options.get("keep_resource", False))  # as connect checks it: "no" kept it
        self.target, self.own, self.keep = target, given is None, keep
        self.id: str | None = None

    def connect(self, options: dict[str, Any]) -> Session:
        from rlnb.remote.backend import RemoteBackend
        from rlnb.session import connect

        if not self.own:
            return connect(self.target, **options)
        reuse = {"model_resources_id": self.id} if self.id is not None else {}
        try:
            session = connect(self.target, **{**options, "keep_resource": True, **reuse})
        except RateLimitError as exc:
            self.id = exc.model_resources_id or self.id
            raise
        except (ResourceEnded, NotFoundError, ConflictError) as exc:
            if not reuse:
                raise
            if isinstance(exc, ConflictError):  # refused the session: it ended after the try saw it READY, or not
                self.stop(options, exc)  # (then it is not left running)
            self.id = None  # it ended (its inactive_timeout) or went while the trial waited: a new one, at once
            return self.connect(options)
        assert isinstance(session.backend, RemoteBackend)
        session.backend.stop_resource, self.id = not self.keep, None  # the session's now: its close stops it
        return session

    def stop(self, options: dict[str, Any], exc: BaseException) -> None:
        """Stop the kept resource (best effort; no session opened on it), unless ``keep_resource``: then it is named
        on ``exc``, the trial's end (its row's reason), for it runs on. Only the first try's 429 named it: a trial
        that failed or stopped after the next left a paid resource running that no row, log or error named."""
        from rlnb.remote.backend import stop_model_resources

        if self.id is not None and not self.keep:
            stop_model_resources(self.target, self.id, options)
        elif self.id is not None:
            exc.add_note(f"model resource {self.id} was kept running (keep_resource=True): stop it when done")
        self.id = None


def paused(options: dict[str, Any], pause: SlotWait) -> dict[str, Any]:
    """``options`` with their polls while starting waiting through ``pause.ready`` (unless they give a
    ``PollOptions.pause``), and the retry policy they give (``retry``, ``max_retries``, ``client=``'s) waiting through
    ``pause`` (the policy's own pause kept in it, ``SlotWait.user``); given both ``retry`` and ``max_retries``, or a
    ``retry`` that is no ``RetryPolicy``, as they are (the client's own error then)."""
    from rlnb.remote.client import ClientOptions  # as connect: a local sweep loads no HTTP client
    from rlnb.remote.retry import RetryPolicy
    from rlnb.remote.waiting import PollOptions

    options = dict(options)
    poll = options.get("poll")
    if "pause" not in options and not (isinstance(poll, PollOptions) and poll.pause is not None):
        options["pause"] = pause.ready
    client = options.get("client")
    given = client if isinstance(client, ClientOptions) else ClientOptions()
    retry = options.get("retry", given.retry)
    most = ClientOptions(max_retries=options.get("max_retries", given.max_retries)).max_retries  # checked, named
    if (retry is not None and most is not None) or not isinstance(retry, RetryPolicy | None):
        return options
    options.pop("retry", None)
    options.pop("max_retries", None)
    policy = retry if retry is not None else RetryPolicy() if most is None else RetryPolicy(max_retries=most)
    if isinstance(client, ClientOptions):
        options["client"] = dataclasses.replace(client, retry=None, max_retries=None)
    pause.user = policy.pause
    return {**options, "retry": dataclasses.replace(policy, pause=pause)}
