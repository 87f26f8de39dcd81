"""The remote backend: a training session of Together's RL API (or of ``rlnb serve``) for a ``Session``.

``RemoteBackend.connect`` attaches to a session, or creates one (and its model resource) and waits until
it runs. ``submit`` POSTs each operation before returning, so the server sees operations in submission
order, and one ``Poller`` thread follows everything in flight, reporting each status change. HTTP and the
payload side channel live in ``rlnb.remote.client`` (retries: ``retry``); polling strategies in ``poller``.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from rlnb import wire
from rlnb._options import kwargs, refuse_unknown, take
from rlnb.errors import APIConnectionError, APIError, APIStatusError, OperationTimeout, RlnbError, SessionClosed
from rlnb.remote.client import APIClient, ClientOptions
from rlnb.remote.poller import Poller, PollOptions, poll_interval, report
from rlnb.wire import Listener, OptimizerKind

log = logging.getLogger("rlnb")

M = TypeVar("M", wire.ModelResources, wire.Session)


class Lifecycle(enum.Enum):
    """A backend is OPEN until ``close()`` starts (CLOSING), and CLOSED once the session is stopped."""

    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


def _wait_until(
    fetch: Callable[[], M], ready: str, dead: frozenset[str], timeout: float, poll_min: float, poll_max: float
) -> M:
    """Poll ``fetch()`` until its status is ``ready``, with ``poll_interval`` backoff (not a fixed 10 s).

    Raises ``SessionClosed`` (a session) or ``RlnbError`` (a model resource) on a dead status, and
    ``OperationTimeout`` after ``timeout`` seconds.
    """
    start = time.monotonic()
    while True:
        obj = fetch()
        if obj.status == ready:
            return obj
        if obj.status in dead:
            detail = f": {obj.error.code}: {obj.error.message}" if obj.error is not None else ""
            cls = SessionClosed if isinstance(obj, wire.Session) else RlnbError
            raise cls(f"{type(obj).__name__} {obj.id} is {obj.status}{detail}")
        elapsed = time.monotonic() - start
        if elapsed >= timeout:
            raise OperationTimeout(f"{type(obj).__name__} {obj.id} still {obj.status} after {timeout:.0f} s")
        time.sleep(min(poll_interval(elapsed, poll_min, poll_max), timeout - elapsed))


@dataclass(frozen=True)
class SessionOptions:
    """What a new remote session is (``rlnb.connect(url, base_model=..., lora=...)`` sets these by name).

    ``model_resources_id``: start the session on that existing resource. Otherwise a model resource is
    created for ``base_model`` (default: the first supported model) with ``optimizer`` (default ``"adam"``;
    ``muon_scaling`` ``"original"`` | ``"match_adam"``), ``num_generator_replicas`` and ``lora`` (None /
    False: full weights; True: LoRA with the server's defaults; a dict / ``wire.LoraConfig``: that config).
    ``resume_from_checkpoint_id``, ``load_optimizer`` and ``display_name`` go to the session as given."""

    model_resources_id: str | None = None
    base_model: str | None = None
    optimizer: OptimizerKind | None = None
    lora: bool | dict[str, Any] | wire.LoraConfig | None = None
    num_generator_replicas: int = 1
    muon_scaling: str | None = None
    resume_from_checkpoint_id: str | None = None
    load_optimizer: bool | None = None
    display_name: str | None = None

    def __post_init__(self) -> None:
        wire.lora_config(self.lora)  # a ValueError naming lora
        wire.optimizer_config(self.optimizer or "adam", self.muon_scaling)  # optimizer and muon_scaling

    def new_only(self) -> list[str]:
        """The fields set that only describe a new session (an attached one cannot take them)."""
        names = ("model_resources_id", "base_model", "lora", "muon_scaling", "resume_from_checkpoint_id",
                 "load_optimizer", "display_name")  # fmt: skip
        return [name for name in names if getattr(self, name) is not None]

    def resource_request(self, base_model: str) -> wire.CreateModelResourcesRequest:
        return wire.CreateModelResourcesRequest(
            base_model=base_model,
            lora_enabled=wire.lora_config(self.lora) is not False,
            compute_config=wire.ComputeConfigRequest(num_generator_replicas=self.num_generator_replicas),
            optimizer_config=wire.optimizer_config(self.optimizer or "adam", self.muon_scaling),
        )

    def session_request(self, model_resources_id: str) -> wire.StartTrainingSessionRequest:
        """Only what was given is sent: unset means the server's default (LoRA True: its defaults)."""
        lora = wire.lora_config(self.lora)
        fields = {
            "model_resources_id": model_resources_id, "display_name": self.display_name,
            "lora_config": lora if isinstance(lora, wire.LoraConfig) else None,
            "resume_from_checkpoint_id": self.resume_from_checkpoint_id, "load_optimizer": self.load_optimizer,
        }  # fmt: skip
        return wire.StartTrainingSessionRequest.model_validate({k: v for k, v in fields.items() if v is not None})


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
    ):
        self.optimizer: OptimizerKind = wire.optimizer_of(resource.optimizer_config)
        self.client, self.resource, self.session_id = client, resource, session.id
        self.stop_resource = stop_resource
        self.state = Lifecycle.OPEN
        self._info = session
        self._lock = threading.Lock()
        self._poller = Poller(client, session.id, poll or PollOptions())

    def __repr__(self) -> str:
        return f"<RemoteBackend {self.client.base_url} session={self.session_id} optimizer={self.optimizer}>"

    @classmethod
    def connect(
        cls,
        base_url: str | None = None,
        api_key: str | None = None,
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
        interrupted while starting, what was created is stopped again. An ``optimizer`` that differs
        from an existing resource's raises ``ValueError``. Waiting polls quickly at first, backing
        off to ``poll_max``, for up to ``ready_timeout`` seconds each for resource and session.
        ``server_extensions=False`` ignores what rlnb serve offers beyond Together's API (long-poll,
        polling only the oldest operation): the client then behaves as against Together.

        Nothing waits for ever: each API call ends within ``deadline`` seconds (retries included), an
        operation fails ``TIMEOUT`` after ``operation_timeout`` seconds, or once the server has answered
        no poll for ``poll_failure_window`` seconds, and at once when the server no longer knows it (404).
        """
        new = take(SessionOptions, options, session)
        http = take(ClientOptions, options, client)
        waits = take(PollOptions, options, poll)
        refuse_unknown(options, "RemoteBackend.connect()")
        if session_id is not None and new.new_only():
            given = ", ".join(new.new_only())
            raise ValueError(f"{given} describe a new session; they cannot be used with session_id")
        start = _Start(APIClient(base_url, api_key, **kwargs(http)), waits)
        try:
            info, resource = start.attach(session_id, new.optimizer) if session_id is not None else start.new(new)
        except BaseException:  # also KeyboardInterrupt: never leave a paid resource running
            start.undo()
            raise
        stop = start.created_resource is not None and not keep_resource
        return cls(start.client, info, resource, stop_resource=stop, poll=waits)

    # -- Backend protocol ------------------------------------------------------------------------

    def submit(self, kind: wire.OperationKind, body: wire._Model | None, listener: Listener) -> None:
        """POST the operation now (retrying), report its envelope, and poll it until it ends.

        A POST that finally fails is reported FAILED to ``listener`` (so the history shows it) and
        raised; nothing is queued.
        """
        if self.state is not Lifecycle.OPEN:
            listener(wire.Operation.failed("", wire.OperationErrorCode.SESSION_NOT_ACTIVE, "the session is stopped"))
            return
        try:
            env = self.client.submit_operation(self.session_id, kind, body)
        except APIError as exc:
            listener(wire.Operation.failed("", None, str(exc)))
            raise
        listener(env)
        if env.status not in wire.TERMINAL_STATUSES and not self._poller.add(kind, listener, env):
            # close() ran meanwhile and no longer polls: settle it here
            listener(
                wire.Operation.failed(
                    env.id, wire.OperationErrorCode.SESSION_NOT_ACTIVE, "the session was closed before this finished"
                )
            )

    def session(self) -> wire.Session:
        """The session as the API's GET returns it now; after ``close()``, as the stop returned it."""
        if self.state is Lifecycle.OPEN:
            self._info = self.client.get_session(self.session_id)
        return self._info

    def config(self) -> dict[str, Any]:
        """The run's description for ``config.json``: where, which session and resource, model,
        optimizer, LoRA. No API key."""
        muon = self.resource.optimizer_config.muon
        lora = self._info.lora_config
        return {
            "backend": "remote",
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
        """Stop the session (the server ends what it runs, so a long-poll in flight returns), stop
        polling, settle what is still in flight, then stop the model resource if ``stop_resource``.
        Every step is tried — unless the server is unreachable (no answer, or a 5xx, to the stop), when
        what is in flight is settled without asking it. The first API error is raised at the end."""
        with self._lock:
            if self.state is not Lifecycle.OPEN:
                return
            self.state = Lifecycle.CLOSING
        errors: list[APIError] = []
        reachable = True
        try:
            self._info = self.client.stop_session(self.session_id)
        except APIError as exc:
            errors.append(exc)
            reachable = not isinstance(exc, APIConnectionError) and not (
                isinstance(exc, APIStatusError) and exc.status_code >= 500
            )
        self._settle(self._poller.stop(), ask=reachable)
        if self.stop_resource and reachable:
            try:
                self.client.stop_model_resources(self._info.model_resources_id)
            except APIError as exc:
                errors.append(exc)
        self.client.close()
        self.state = Lifecycle.CLOSED
        if errors:
            raise errors[0]

    def _settle(self, inflight: list[Any], ask: bool) -> None:
        """After the stop: one last poll of each operation still in flight (while the server answers, if
        ``ask``); unfinished ones end FAILED (SESSION_NOT_ACTIVE), as on the local backend."""
        for op in inflight:
            env = op.env
            if ask:
                try:
                    env = self.client.get_operation(self.session_id, op.kind, op.env.id)
                except APIConnectionError:
                    ask = False  # gone: do not spend a deadline on each of the others
                except APIError:
                    pass
            if env.status not in wire.TERMINAL_STATUSES:
                reason = "the session was closed before this finished"
                if not ask:
                    reason += " (the server could not be reached, so its outcome is unknown)"
                env = wire.Operation.failed(op.env.id, wire.OperationErrorCode.SESSION_NOT_ACTIVE, reason)
            report(op, env)


class _Start:
    """Starting a remote session: what was created (to stop again if starting fails) and how to wait."""

    def __init__(self, client: APIClient, poll: PollOptions):
        self.client, self.poll = client, poll
        self.created_resource: str | None = None
        self.created_session: str | None = None

    def attach(self, session_id: str, optimizer: OptimizerKind | None) -> tuple[wire.Session, wire.ModelResources]:
        info = self.client.get_session(session_id)
        resource = _checked(self.client.get_model_resources(info.model_resources_id), optimizer)
        return self.running(info.id), resource

    def new(self, options: SessionOptions) -> tuple[wire.Session, wire.ModelResources]:
        rid = _checked(self.resource(options), options.optimizer).id
        resource = self.wait(lambda: self.client.get_model_resources(rid), wire.ModelResourcesStatus.READY,
                             wire.RESOURCE_ENDED)  # fmt: skip
        info = self.client.create_session(options.session_request(rid))
        self.created_session = info.id
        log.info("started training session %s on %s", info.id, rid)
        return self.running(info.id), resource

    def resource(self, options: SessionOptions) -> wire.ModelResources:
        """The given model resource, or a new one for ``options.base_model`` (default: the first listed)."""
        if options.model_resources_id is not None:
            return self.client.get_model_resources(options.model_resources_id)
        base_model = options.base_model
        if base_model is None:
            models = self.client.supported_models().data
            if not models:
                raise RlnbError(f"{self.client.base_url} lists no supported models; pass base_model")
            base_model = models[0].base_model
        resource = self.client.create_model_resources(options.resource_request(base_model))
        self.created_resource = resource.id
        log.info("created model resource %s (%s)", resource.id, resource.base_model)
        return resource

    def running(self, session_id: str) -> wire.Session:
        return self.wait(lambda: self.client.get_session(session_id), wire.SessionStatus.RUNNING, wire.SESSION_ENDED)

    def wait(self, fetch: Callable[[], M], ready: str, dead: frozenset[str]) -> M:
        return _wait_until(fetch, ready, dead, self.poll.ready_timeout, self.poll.poll_min, self.poll.poll_max)

    def undo(self) -> None:
        """Stop what was created (best effort) and close the client."""
        _stop_quietly(self.client, self.created_session, self.created_resource)
        self.client.close()


def _checked(resource: wire.ModelResources, optimizer: OptimizerKind | None) -> wire.ModelResources:
    """``resource``, unless it uses another optimizer than the one asked for (``ValueError``)."""
    kind = wire.optimizer_of(resource.optimizer_config)
    if optimizer is not None and optimizer != kind:
        raise ValueError(
            f"model resource {resource.id} uses {kind}, not {optimizer} (the optimizer is fixed when the resource "
            "is created)"
        )
    return resource


def _stop_quietly(client: APIClient, session_id: str | None, model_resources_id: str | None) -> None:
    """Best-effort cleanup after a failed start; the original error is the one worth raising."""
    for stop, target in ((client.stop_session, session_id), (client.stop_model_resources, model_resources_id)):
        if target is not None:
            try:
                stop(target)
            except APIError as exc:
                log.warning("could not stop %s after a failed start: %s", target, exc)
