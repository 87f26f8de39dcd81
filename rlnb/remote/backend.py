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
from typing import Any, TypeVar

import httpx

from rlnb import wire
from rlnb.errors import APIConnectionError, APIError, APIStatusError, OperationTimeout, RlnbError, SessionClosed
from rlnb.remote.client import DEFAULT_DEADLINE, DEFAULT_TIMEOUT, APIClient, RetryPolicy
from rlnb.remote.poller import POLL_FAILURE_WINDOW, POLL_MAX, POLL_MIN, Poller, poll_interval, report
from rlnb.wire import Listener, OptimizerKind

log = logging.getLogger("rlnb")

OPERATION_TIMEOUT = 3600.0
"""Seconds after submission at which the poller gives an operation up (reported FAILED, TIMEOUT)."""
READY_TIMEOUT = 1800.0
"""Seconds ``RemoteBackend.connect`` waits for the model resource, then the session, to be up."""

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
        poll_min: float = POLL_MIN,
        poll_max: float = POLL_MAX,
        operation_timeout: float = OPERATION_TIMEOUT,
        poll_failure_window: float = POLL_FAILURE_WINDOW,
    ):
        if not 0 < poll_min <= poll_max:
            raise ValueError(f"need 0 < poll_min <= poll_max, got {poll_min}, {poll_max}")
        if operation_timeout <= 0:
            raise ValueError(f"operation_timeout must be > 0, got {operation_timeout}")
        self.optimizer: OptimizerKind = wire.optimizer_of(resource.optimizer_config)
        self.client, self.resource, self.session_id = client, resource, session.id
        self.stop_resource = stop_resource
        self.state = Lifecycle.OPEN
        self._info = session
        self._lock = threading.Lock()
        if poll_failure_window <= 0:
            raise ValueError(f"poll_failure_window must be > 0, got {poll_failure_window}")
        self._poller = Poller(
            client, session.id, poll_min=poll_min, poll_max=poll_max, operation_timeout=operation_timeout,
            failure_window=poll_failure_window,
        )  # fmt: skip

    def __repr__(self) -> str:
        return f"<RemoteBackend {self.client.base_url} session={self.session_id} optimizer={self.optimizer}>"

    @classmethod
    def connect(
        cls,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        session_id: str | None = None,
        model_resources_id: str | None = None,
        base_model: str | None = None,
        optimizer: OptimizerKind | None = None,
        lora: bool | dict[str, Any] | wire.LoraConfig | None = None,
        num_generator_replicas: int = 1,
        muon_scaling: str | None = None,
        resume_from_checkpoint_id: str | None = None,
        load_optimizer: bool | None = None,
        display_name: str | None = None,
        keep_resource: bool = False,
        ready_timeout: float = READY_TIMEOUT,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        deadline: float = DEFAULT_DEADLINE,
        max_retries: int | None = None,
        retry: RetryPolicy | None = None,
        http_client: httpx.Client | None = None,
        transport: httpx.BaseTransport | None = None,
        server_extensions: bool = True,
        poll_min: float = POLL_MIN,
        poll_max: float = POLL_MAX,
        operation_timeout: float = OPERATION_TIMEOUT,
        poll_failure_window: float = POLL_FAILURE_WINDOW,
    ) -> RemoteBackend:
        """Attach to a session, or start one (and, unless given, its model resource) and wait until it runs.

        * ``session_id``: attach to that session; its optimizer is read from its model resource.
        * ``model_resources_id``: start a session on that existing resource.
        * neither: create a model resource for ``base_model`` (default: the first supported model)
          with ``optimizer`` (default ``"adam"``; ``muon_scaling`` ``"original"`` | ``"match_adam"``),
          ``num_generator_replicas`` and ``lora`` (None/False: full weights; True: LoRA with server
          defaults; a dict / ``wire.LoraConfig``: LoRA with that config), then a session on it.

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
        if optimizer is not None and optimizer not in wire.OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {', '.join(wire.OPTIMIZERS)}, got {optimizer!r}")
        if session_id is not None:
            extra = {
                "model_resources_id": model_resources_id, "base_model": base_model, "lora": lora,
                "muon_scaling": muon_scaling, "resume_from_checkpoint_id": resume_from_checkpoint_id,
                "load_optimizer": load_optimizer, "display_name": display_name,
            }  # fmt: skip
            given = [name for name, value in extra.items() if value is not None]
            if given:
                raise ValueError(f"{', '.join(given)} describe a new session; they cannot be used with session_id")
        config = wire.optimizer_config(optimizer or "adam", muon_scaling) if session_id is None else None
        checked = wire.lora_config(lora)
        lora_config = checked if isinstance(checked, wire.LoraConfig) else None  # True: the server's defaults
        client = APIClient(
            base_url, api_key, timeout=timeout, deadline=deadline, max_retries=max_retries, retry=retry,
            http_client=http_client, transport=transport, server_extensions=server_extensions,
        )  # fmt: skip

        def wait(fetch: Callable[[], M], ready: str, dead: frozenset[str]) -> M:
            return _wait_until(fetch, ready, dead, ready_timeout, poll_min, poll_max)

        created_resource: str | None = None
        created_session: str | None = None
        try:
            if session_id is not None:
                info = client.get_session(session_id)
                resource = client.get_model_resources(info.model_resources_id)
            elif model_resources_id is not None:
                resource = client.get_model_resources(model_resources_id)
            else:
                if base_model is None:
                    models = client.supported_models().data
                    if not models:
                        raise RlnbError(f"{client.base_url} lists no supported models; pass base_model")
                    base_model = models[0].base_model
                resource = client.create_model_resources(
                    wire.CreateModelResourcesRequest(
                        base_model=base_model,
                        lora_enabled=checked is not False,
                        compute_config=wire.ComputeConfigRequest(num_generator_replicas=num_generator_replicas),
                        optimizer_config=config,
                    )
                )
                created_resource = resource.id
                log.info("created model resource %s (%s)", resource.id, resource.base_model)
            kind = wire.optimizer_of(resource.optimizer_config)
            if optimizer is not None and optimizer != kind:
                raise ValueError(
                    f"model resource {resource.id} uses {kind}, not {optimizer} "
                    "(the optimizer is fixed when the resource is created)"
                )
            if session_id is None:
                rid = resource.id
                resource = wait(
                    lambda: client.get_model_resources(rid), wire.ModelResourcesStatus.READY, wire.RESOURCE_ENDED
                )
                fields = {
                    "model_resources_id": rid, "display_name": display_name, "lora_config": lora_config,
                    "resume_from_checkpoint_id": resume_from_checkpoint_id, "load_optimizer": load_optimizer,
                }  # fmt: skip  # only what was given is sent: unset means the server's default
                info = client.create_session(
                    wire.StartTrainingSessionRequest.model_validate({k: v for k, v in fields.items() if v is not None})
                )
                created_session = info.id
                log.info("started training session %s on %s", info.id, rid)
            sid = info.id
            info = wait(lambda: client.get_session(sid), wire.SessionStatus.RUNNING, wire.SESSION_ENDED)
        except BaseException:  # also KeyboardInterrupt: never leave a paid resource running
            _stop_quietly(client, created_session, created_resource)
            client.close()
            raise
        stop = created_resource is not None and not keep_resource
        return cls(client, info, resource, stop_resource=stop, poll_min=poll_min, poll_max=poll_max,
                   operation_timeout=operation_timeout, poll_failure_window=poll_failure_window)  # fmt: skip

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


def _stop_quietly(client: APIClient, session_id: str | None, model_resources_id: str | None) -> None:
    """Best-effort cleanup after a failed start; the original error is the one worth raising."""
    for stop, target in ((client.stop_session, session_id), (client.stop_model_resources, model_resources_id)):
        if target is not None:
            try:
                stop(target)
            except APIError as exc:
                log.warning("could not stop %s after a failed start: %s", target, exc)
