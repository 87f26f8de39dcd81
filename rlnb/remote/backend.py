"""The remote backend: a training session of Together's RL API (or of ``rlnb serve``) for a ``Session``.

``RemoteBackend.connect`` attaches to a session, or creates one (and its model resource) and waits until
it runs (``start``). ``submit`` encodes an operation and returns at once; one ``Sender`` thread POSTs
operations in submission order (``sender``), and one ``Poller`` thread follows everything in flight,
reporting each status change (``poller``); ``close`` stops them, then settles what was in flight (``closing``).
HTTP and the payload side channel live in ``rlnb.remote.client`` (retries: ``retry``).
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from typing import Any

from pydantic import SecretStr

from rlnb import _one_step, wire
from rlnb._input.checks import check_bool
from rlnb._input.options import kwargs, refuse_unknown, take
from rlnb.errors import APIConnectionError, APIError, APIStatusError
from rlnb.history.runconfig import REMOTE
from rlnb.remote.client import APIClient, ClientOptions
from rlnb.remote.closing import SETTLE_POLLS, gone, settle, warn_running
from rlnb.remote.poller import Poller
from rlnb.remote.sender import Sender, tell
from rlnb.remote.silence import Outage
from rlnb.remote.start import STOP_RECONNECT, ModelLimits, SessionOptions, Start, stop_quietly
from rlnb.remote.waiting import PollOptions
from rlnb.secrets import redaction
from rlnb.wire import Listener, OptimizerKind

log = logging.getLogger("rlnb")

CLOSE_GRACE = 5.0
"""Seconds ``close()`` waits for a POST in flight once the server has answered the stop (it answers it
at once, ending the operation); past it the operation is recorded FAILED."""
__all__ = ["CLOSE_GRACE", "SETTLE_POLLS", "Lifecycle", "RemoteBackend", "stop_model_resources"]


class Lifecycle(enum.Enum):
    """A backend is OPEN until ``close()`` starts (CLOSING), and CLOSED once the session is stopped."""

    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


class RemoteBackend:
    """One training session of the remote API. Build it with ``RemoteBackend.connect`` (or
    ``rlnb.connect(url, ...)``); the constructor takes a running session and its model resource,
    whose ``optimizer_config`` fixes ``optimizer``. ``close()`` stops the session and, when
    ``stop_resource``, the model resource too.
    """

    def __init__(
        self,
        client: APIClient,
        session: wire.Session,
        resource: wire.ModelResources,
        *,
        stop_resource: bool = False,
        poll: PollOptions | None = None,
        limits: ModelLimits | None = None,
    ):
        self.optimizer: OptimizerKind = wire.optimizer_of(resource.optimizer_config)
        limits = limits or ModelLimits()
        self.context_length, self.max_seq_length = limits.context_length, limits.max_seq_length
        """What the server's supported-models says of the model (``start.ModelLimits``): a ``Session`` refuses a
        prompt or sample past them before sending it, as on the in-process engine; None: left to the server."""
        self.default_max_tokens = limits.default_max_tokens
        """What the server samples for an unset ``max_tokens``: the room a ``Session`` checks then (None: unchecked)."""
        self.max_batch_size = limits.max_batch_size
        """Samples one forward-backward takes (None: not said): a ``Session`` refuses more before sending them, and
        ``rl_step`` splits its batch into pieces of at most this many."""
        self.client, self.resource, self.session_id = client, resource, session.id
        self.stop_resource = stop_resource
        self.state = Lifecycle.OPEN
        self._info = session
        self._lock = threading.Lock()
        self._poller = Poller(client, session.id, poll or PollOptions())
        self._sender = Sender(client, session.id, self._poller)

    def __repr__(self) -> str:
        return f"<RemoteBackend {self.client.base_url} session={self.session_id} optimizer={self.optimizer}>"

    @classmethod
    def connect(
        cls,
        base_url: str | None = None,
        api_key: str | SecretStr | None = None,
        *,
        session_id: str | None = None,
        keep_resource: bool = False,
        session: SessionOptions | None = None,
        client: ClientOptions | None = None,
        poll: PollOptions | None = None,
        **options: Any,
    ) -> RemoteBackend:
        """Attach to a session, or start one (and, unless given, its model resource) and wait until it runs.

        * ``session_id``: attach to that session; its optimizer is read from its model resource.
        * otherwise a new session as ``session`` describes (``SessionOptions``): on an existing model
          resource, or on one created for it.

        ``options`` are the groups' fields by name (``base_model=``, ``poll_max=``, ``transport=``, ...),
        over ``session``, ``client`` (``ClientOptions``: timeouts, retries, an injected transport) and
        ``poll`` (``PollOptions``: how it waits).

        ``close()`` stops the session, and the model resource only when this call created it and
        ``keep_resource`` is false: an existing resource is never stopped. If anything fails or is
        interrupted while starting, what was created is stopped again; but with ``keep_resource``, a 429 to the
        session (a session cap) keeps the resource it created running, named on the ``RateLimitError``
        (``model_resources_id``), to retry on. An ``optimizer`` that differs
        from an existing resource's raises ``ValueError``. Waiting polls quickly at first, backing
        off to ``poll_max``, for up to ``ready_timeout`` seconds each for resource and session. Once it runs,
        supported-models is asked (one call) for the model's context and training length (``start.ModelLimits``).
        ``server_extensions=False`` ignores what rlnb serve offers beyond Together's API (long-poll,
        polling only the oldest operation): the client then behaves as against Together.

        Nothing waits for ever: each API call ends within ``deadline`` seconds (retries included), an
        operation fails ``TIMEOUT`` after ``operation_timeout`` seconds, or once the server has answered
        no poll for ``poll_failure_window`` seconds, and at once when the server no longer knows it (404).
        """
        api_key = redaction.hide(api_key)  # first: no traceback's locals show it (``rlnb.secrets.redaction``)
        keep_resource = check_bool("keep_resource", keep_resource)  # "no" is truthy: a paid resource would run on
        new = take(SessionOptions, options, session)
        http = take(ClientOptions, options, client)
        waits = take(PollOptions, options, poll)
        refuse_unknown(options, "RemoteBackend.connect()", backend=True)
        if session_id is not None and new.new_only():
            given = ", ".join(new.new_only())
            raise ValueError(f"{given} describe a new session; they cannot be used with session_id")
        start = Start(APIClient(base_url, api_key, **kwargs(http)), waits)
        try:
            info, resource = start.attach(session_id, new.optimizer) if session_id is not None else start.new(new)
            limits = start.limits(resource)
        except BaseException as exc:  # also KeyboardInterrupt: never leave a paid resource running
            if not (keep_resource and start.hand_back(exc)):  # a session cap's 429: the resource kept, named on it
                start.undo()
            raise
        stop = start.created_resource is not None and not keep_resource
        return cls(start.client, info, resource, stop_resource=stop, poll=waits, limits=limits)

    # -- Backend protocol ------------------------------------------------------------------------

    def submit(self, kind: wire.OperationKind, body: wire._Model | None, listener: Listener) -> None:
        """Encode the operation and queue it for the sender thread; returns at once (no network).

        A body that cannot be encoded is reported FAILED (``INVALID_INPUT``) and raised; a POST that fails
        later fails the operation (see ``rlnb.remote.sender``).
        """
        if self.state is not Lifecycle.OPEN:
            listener(wire.Operation.failed("", wire.OperationErrorCode.SESSION_NOT_ACTIVE, "the session is stopped"))
            return
        try:
            op = self.client.prepare_operation(kind, body)
        except ValueError as exc:
            listener(wire.Operation.failed("", wire.OperationErrorCode.INVALID_INPUT, str(exc)))
            raise
        if not self._sender.put(op, listener, _one_step.STEP.get()):
            why = "the session was closed before this was sent"
            listener(wire.Operation.failed("", wire.OperationErrorCode.SESSION_NOT_ACTIVE, why))

    @property
    def operation_timeout(self) -> float:
        """Seconds after which an operation of this session fails ``TIMEOUT`` (``PollOptions.operation_timeout``)."""
        return self._poller.operation_timeout

    def outage(self) -> Outage | None:
        """The server not answering any attempt (a poll, a POST, a GET), from the first that failed (``Silence``);
        None while it answers."""
        silent = self.client.silence.now()
        if silent is None:
            return None
        window = self._poller.failure_window if self._poller.following else None
        return Outage(silent[0], window, silent[1])

    def give_up_waiting(self, why: str) -> int:
        """A Stop while the server does not answer: the retries' waits end (``Silence.call_off``: a POST or GET fails
        at once), and the operations in flight fail now, saying ``why`` (``Poller.give_up``). How many."""
        self.client.silence.call_off()
        return self._poller.give_up(why)

    def session(self) -> wire.Session:
        """The session as the API's GET returns it now; after ``close()``, as the stop returned it."""
        if self.state is Lifecycle.OPEN:
            self._info = self.client.get_session(self.session_id)
        return self._info

    def config(self) -> dict[str, Any]:
        """The run's description for ``config.json``: where, which session and resource, model, optimizer, LoRA."""
        muon, lora = self.resource.optimizer_config.muon, self._info.lora_config
        return {
            "backend": REMOTE,
            "base_url": self.client.base_url,
            "session_id": self.session_id,
            "model_resources_id": self.resource.id,
            "model": self._info.base_model,
            "optimizer": self.optimizer,
            "muon_scaling": muon.scaling_strategy if muon is not None else None,
            "lora": lora.to_json_dict() if lora is not None else (True if self.resource.lora_enabled else None),
            "num_generator_replicas": self.resource.compute_config.num_generator_replicas,
            "resume_from": self._info.resume_from_checkpoint_id,
        }

    def close(self) -> None:
        """Fail what was never sent, stop the session (the server ends what it runs, so a long-poll in
        flight returns), stop polling, settle what is still in flight, then stop the model resource if
        ``stop_resource``. Every step is tried — unless the server is unreachable (no answer, or a 5xx,
        to the stop), when what is in flight is settled without asking it or waiting for its POST. A stop that
        cannot connect is tried again for ``STOP_RECONNECT`` seconds only. The first API error is raised at the
        end, after a warning naming what may still run remotely when the stop failed. A SIGTERM during the interpreter's
        exit (a kernel's Shut Down: SIGKILL 2.5 s later) ends the waits after the stop (``shutdown.hurried``).

        Called from a listener on this backend's own poll or send thread (a history callback), it closes on a
        thread of its own and returns: inline it would join the thread it runs on (``cannot join current thread``,
        the session left CLOSING and what was in flight never settled)."""
        if self.runs_here():
            threading.Thread(target=self._close_logged, name=f"rlnb-close-{self.session_id}", daemon=True).start()
            return
        with self._lock:
            if self.state is not Lifecycle.OPEN:
                return
            self.state = Lifecycle.CLOSING
        try:
            self._close()
        except BaseException:
            if self.state is not Lifecycle.CLOSED:  # a Ctrl-C mid-way: a later close() (or the exit) goes again
                self.state = Lifecycle.OPEN  # it left the session and its paid resource running, for good
            raise

    def _close(self) -> None:
        unsent = "the session was closed before this was sent"
        for item in self._sender.close():
            tell(item, wire.Operation.failed("", wire.OperationErrorCode.SESSION_NOT_ACTIVE, unsent))
        errors: list[APIError] = []
        reachable = True
        try:  # a server that takes no connection is asked for 5 s: close() waited out every retry's backoff (14 s)
            self._info = self.client.stop_session(self.session_id, reconnect_until=time.monotonic() + STOP_RECONNECT)
        except APIError as exc:
            dead = isinstance(exc, APIConnectionError) or (isinstance(exc, APIStatusError) and exc.status_code >= 500)
            reachable = not dead
            if not gone(exc, f"session {self.session_id}"):
                errors.append(exc)
                resource = self.stop_resource and not reachable  # then it is not asked either
                what = f"session {self.session_id}" + (f" and model resource {self.resource.id}" if resource else "")
                how = f"stop_session({self.session_id!r})"
                if resource:  # a session's stop leaves its resource running (and paid) until its inactive_timeout
                    how += f" and .stop_model_resources({self.resource.id!r}, force=True)"
                warn_running(self.client, exc, what, how)
        sending = self._sender.join(CLOSE_GRACE if reachable else 0.0)
        if sending is not None:
            why = "the session was closed while this operation was being sent; its outcome is unknown"
            tell(sending, wire.Operation.failed("", wire.OperationErrorCode.SESSION_NOT_ACTIVE, why))
        settle(self.client, self.session_id, self._poller.stop(wait=reachable), ask=reachable)
        if self.stop_resource and reachable:
            rid = self.resource.id  # the one connect created: the stop's answer may name another (it stopped that)
            try:
                # forced: a session whose stop failed must not keep the resource it was created for running
                self.client.stop_model_resources(rid, force=True, reconnect_until=time.monotonic() + STOP_RECONNECT)
            except APIError as exc:
                if not gone(exc, f"model resource {rid}"):
                    errors.append(exc)
                    warn_running(
                        self.client, exc, f"model resource {rid}", f"stop_model_resources({rid!r}, force=True)"
                    )
        self.client.close()
        self.state = Lifecycle.CLOSED
        if errors:
            raise errors[0]

    def runs_here(self) -> bool:
        """Whether the caller is this backend's poll or send thread (``Operation.result`` refuses to wait there)."""
        return self._poller.runs_here() or self._sender.runs_here()

    def _close_logged(self) -> None:
        try:
            self.close()
        except APIError as exc:  # nobody to raise it to: the listener that asked has returned
            log.warning("rlnb: closing session %s from a callback: %s", self.session_id, exc)


def stop_model_resources(base_url: str, model_resources_id: str, options: dict[str, Any]) -> None:
    """Stop a model resource a failed ``connect(..., keep_resource=True)`` kept (``RateLimitError.model_resources_id``),
    best effort (a warning names it if the stop fails), through a client made of ``options``, that connect's
    (``api_key``, ``client=`` and its fields; the others are not looked at): a sweep's trial that never opened a
    session on it."""
    options = dict(options)
    http = take(ClientOptions, options, options.get("client"))
    client = APIClient(base_url, redaction.hide(options.get("api_key")), **kwargs(http))
    try:
        stop_quietly(client, None, model_resources_id)
    finally:
        client.close()
