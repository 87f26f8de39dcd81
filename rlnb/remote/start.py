"""Starting a remote session: what a new one is (``SessionOptions``), creating or attaching to it, waiting
until it runs, and stopping what was created when starting fails (``Start``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlnb import wire
from rlnb._input.checks import check_bool, set_int
from rlnb.errors import APIError, RateLimitError, RlnbError
from rlnb.remote import recover
from rlnb.remote.client import APIClient
from rlnb.remote.waiting import M, PollOptions, wait_until
from rlnb.wire import OptimizerKind

log = logging.getLogger("rlnb")

STOP_RECONNECT = 5.0
"""Seconds the stops that clean up (``close()``'s, and those undoing a failed ``connect``) keep trying a server that
takes no connection, a second apart at most, before a warning names what may still run: asked once, a network blip
would leave a paid resource running; retried through the whole backoff, a dead server would hold them 14 s each."""


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
    muon_scaling: wire.MuonScaling | wire.MuonScalingStrategy | None = None
    resume_from_checkpoint_id: str | None = None
    load_optimizer: bool | None = None
    display_name: str | None = None

    def __post_init__(self) -> None:
        for name in ("model_resources_id", "base_model", "resume_from_checkpoint_id", "display_name"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, str) and value):
                raise ValueError(f"{name} must be None or a non-empty str, got {value!r}")
        if (found := wire.lone_surrogate(self.display_name, "display_name")) is not None:  # before the resource
            raise ValueError(found)
        object.__setattr__(self, "load_optimizer", check_bool("load_optimizer", self.load_optimizer, optional=True))
        if self.load_optimizer is not None and self.resume_from_checkpoint_id is None:  # the server refuses it
            raise ValueError(
                "load_optimizer applies only with resume_from_checkpoint_id (a training checkpoint); "
                f"got load_optimizer={self.load_optimizer} and no resume_from_checkpoint_id"
            )
        set_int(self, "num_generator_replicas", 0, wire.INT32_MAX)
        wire.lora_config(self.lora)  # a ValueError naming lora
        wire.optimizer_config(self.optimizer or wire.ADAM, self.muon_scaling)  # optimizer and muon_scaling

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
            optimizer_config=wire.optimizer_config(self.optimizer or wire.ADAM, self.muon_scaling),
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


@dataclass(frozen=True)
class ModelLimits:
    """What supported-models says of a session's model, for checking a request before it is sent; None: not said
    (then not checked here, and the server refuses what does not fit)."""

    context_length: int | None = None
    """Prompt + completion tokens its sampler takes (``generator_config.context_length``)."""
    max_seq_length: int | None = None
    """Tokens of one training sample its trainer takes (``trainer_config``'s, full weights or LoRA as its resource)."""
    max_batch_size: int | None = None
    """Samples one forward-backward takes (the same trainer's): ``rl_step`` splits a larger batch."""
    default_max_tokens: int | None = None
    """The completion length its sampler takes for an unset ``max_tokens`` (``sampling_defaults.max_tokens``)."""


def model_limits(models: wire.SupportedModels, resource: wire.ModelResources) -> ModelLimits:
    """``resource``'s limits as ``models`` lists them: of its base model's compute configs, those on its GPU type
    (all when none is), each limit kept only when they agree on it (a guess could refuse a prompt that fits)."""
    configs = [c for m in models.data if m.base_model == resource.base_model for c in m.compute_configs]
    configs = [c for c in configs if c.gpu_type == resource.compute_config.gpu_type] or configs
    trainers = [getattr(c.trainer_config, "lora" if resource.lora_enabled else "full", None) for c in configs]
    return ModelLimits(
        _agreed([c.generator_config.context_length if c.generator_config else None for c in configs]),
        _agreed([t.max_seq_length if t is not None else None for t in trainers]),
        _agreed([t.max_batch_size if t is not None else None for t in trainers]),
        _agreed([_default_max_tokens(c.generator_config) for c in configs]),
    )


def _default_max_tokens(config: wire.GeneratorConfig | None) -> int | None:
    """Its ``sampling_defaults.max_tokens``; None where it lists none (another server may omit them)."""
    return config.sampling_defaults.max_tokens if config and config.sampling_defaults else None


def _agreed(values: list[int | None]) -> int | None:
    """The one value every entry has, else None."""
    return values[0] if values and values.count(values[0]) == len(values) else None


class Start:
    """Starting a remote session: what was created (to stop again if starting fails) and how to wait."""

    def __init__(self, client: APIClient, poll: PollOptions):
        self.client, self.poll = client, poll
        self.created_resource: str | None = None
        self.created_session: str | None = None
        self._models: wire.SupportedModels | None = None
        """The supported-models listing, once asked for (picking the default base model, or ``limits``)."""

    def limits(self, resource: wire.ModelResources) -> ModelLimits:
        """What supported-models says of ``resource``'s model (asked once, within the call's deadline). A server that
        does not say (no such endpoint, no such model, no ``generator_config``) leaves the check to it, logged at
        debug level only: Together-like servers need not list every limit."""
        try:
            limits = model_limits(self.supported_models(), resource)
        except APIError as exc:
            log.debug("rlnb: no model limits from %s (%s): requests are sent unchecked", self.client.base_url, exc)
            return ModelLimits()
        if limits.context_length is None:
            log.debug("rlnb: %s lists no context length for %s: prompts are sent unchecked", self.client.base_url,
                      resource.base_model)  # fmt: skip
        return limits

    def supported_models(self) -> wire.SupportedModels:
        if self._models is None:
            self._models = self.client.supported_models()
        return self._models

    def attach(self, session_id: str, optimizer: OptimizerKind | None) -> tuple[wire.Session, wire.ModelResources]:
        info = self.client.get_session(session_id)
        resource = _checked(self.client.get_model_resources(info.model_resources_id), optimizer)
        return self.running(info.id), resource

    def new(self, options: SessionOptions) -> tuple[wire.Session, wire.ModelResources]:
        rid = _checked(self.resource(options), options.optimizer, options.lora).id
        resource = self.wait(lambda: self.client.get_model_resources(rid), wire.ModelResourcesStatus.READY,
                             wire.RESOURCE_ENDED)  # fmt: skip
        request = options.session_request(rid)
        create = lambda: self.client.create_session(request)  # noqa: E731
        found = recover.sessions_since(self.client, request)
        info = recover.create_once(create, found, self.client, "a session", "list_sessions", self._adopt)
        self.created_session = info.id
        log.info("started training session %s on %s", info.id, rid)
        running = self.running(info.id)
        if running.model_resources_id != rid:  # its optimizer and LoRA would be another's than those checked
            raise RlnbError(f"session {info.id} was started on model resource {rid}, but the server says it runs on "
                            f"{running.model_resources_id}")  # fmt: skip
        return running, resource

    def resource(self, options: SessionOptions) -> wire.ModelResources:
        """The given model resource, or a new one for ``options.base_model`` (default: the first listed)."""
        if options.model_resources_id is not None:
            return self.client.get_model_resources(options.model_resources_id)
        base_model = options.base_model
        if base_model is None:
            models = self.supported_models().data
            if not models:
                raise RlnbError(f"{self.client.base_url} lists no supported models; pass base_model")
            base_model = models[0].base_model
        request = options.resource_request(base_model)
        create = lambda: self.client.create_model_resources(request)  # noqa: E731
        find = recover.resources_since(self.client, request)
        resource = recover.create_once(create, find, self.client, "a model resource", "list_model_resources",
                                       self._adopt)  # fmt: skip
        self.created_resource = resource.id
        log.info("created model resource %s (%s)", resource.id, resource.base_model)
        return resource

    def _adopt(self, made: wire.Session | wire.ModelResources) -> None:
        """What an interrupted create made (``recover.create_once``), for ``undo`` to stop."""
        if isinstance(made, wire.Session):
            self.created_session = made.id
        else:
            self.created_resource = made.id

    def running(self, session_id: str) -> wire.Session:
        return self.wait(lambda: self.client.get_session(session_id), wire.SessionStatus.RUNNING, wire.SESSION_ENDED)

    def wait(self, fetch: Callable[[], M], ready: str, dead: frozenset[str]) -> M:
        return wait_until(fetch, ready, dead, self.poll)

    def undo(self) -> None:
        """Stop what was created (best effort) and close the client."""
        stop_quietly(self.client, self.created_session, self.created_resource)
        self.client.close()

    def hand_back(self, exc: BaseException) -> bool:
        """Whether ``exc`` is a 429 (a session cap) met before a session was created on the model resource this start
        created: then the resource is kept running, named on the error (``RateLimitError.model_resources_id``), for
        a retry on it (a sweep's trial waiting for a slot created and stopped one per try), and the client closed."""
        rid = self.created_resource
        if not isinstance(exc, RateLimitError) or rid is None or self.created_session is not None:
            return False
        exc.model_resources_id = rid
        exc.add_note(f"model resource {rid} was kept running (keep_resource=True): retry with model_resources_id="
                     f"{rid!r}, and stop it when done")  # fmt: skip
        self.client.close()
        return True


def _checked(
    resource: wire.ModelResources, optimizer: OptimizerKind | None, lora: object = None
) -> wire.ModelResources:
    """``resource``, unless it uses another optimizer than the one asked for, or ``lora`` (when given) asks
    for LoRA on a full-weight resource or full weights on a LoRA one (``ValueError``), or it names an optimizer
    rlnb does not know (``RlnbError``: taken for Adam, a newer revision's would get Adam's body in every optim-step)."""
    config = resource.optimizer_config
    named = ", ".join(sorted(k for k, v in (config.model_extra or {}).items() if v is not None))  # {}: Adam, default
    if config.adam is None and config.muon is None and named:
        raise RlnbError(f"model resource {resource.id} uses an optimizer rlnb does not know ({named}); it runs "
                        f"{', '.join(wire.OPTIMIZERS)} only")  # fmt: skip
    kind = wire.optimizer_of(config)
    if optimizer is not None and optimizer != kind:
        raise ValueError(
            f"model resource {resource.id} uses {kind}, not {optimizer} (the optimizer is fixed when the resource "
            "is created)"
        )
    if lora is not None and (wire.lora_config(lora) is not False) != resource.lora_enabled:
        has, asked = ("LoRA", "full weights") if resource.lora_enabled else ("full weights", "LoRA")
        raise ValueError(
            f"model resource {resource.id} trains {has}, but lora={lora!r} asks for {asked} (LoRA or full weights "
            "is fixed when the resource is created): leave lora out to use the resource as it is"
        )
    return resource


def stop_quietly(client: APIClient, session_id: str | None, model_resources_id: str | None) -> None:
    """Best-effort cleanup after a failed start; the original error is the one worth raising. The stops share one
    ``STOP_RECONNECT`` to connect: on a dead server each one held the error back through every retry (14 s). Ctrl-C
    during them is raised with a note naming what may still run (the ids were lost with the ``connect``)."""
    until = time.monotonic() + STOP_RECONNECT
    stops: list[tuple[Callable[..., Any], str | None, dict[str, bool]]] = [
        (client.stop_session, session_id, {}),
        (client.stop_model_resources, model_resources_id, {"force": True}),  # a session left running cannot hold it
    ]
    for i, (stop, target, how) in enumerate(stops):
        if target is not None:
            try:
                stop(target, reconnect_until=until, **how)
            except KeyboardInterrupt as exc:
                left = " and ".join(f"{s.__name__}({', '.join([repr(t), *(f'{k}={v}' for k, v in h.items())])})"
                                    for s, t, h in stops[i:] if t is not None)  # fmt: skip
                exc.add_note(f"(interrupted while stopping what the failed start created, which may still run: "
                             f"stop it with rlnb.remote.client.APIClient({client.base_url!r}).{left})")  # fmt: skip
                raise
            except APIError as exc:
                log.warning("could not stop %s after a failed start (%s): it may still be running remotely", target,
                            exc)  # fmt: skip
