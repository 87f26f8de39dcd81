"""What ``Registry``'s mixins (``resources``, ``sessions``, ``ops``) need of the registry, stated once.

``RegistryCore`` is the base class the mixins and ``Registry`` share: the tables each mixin reads, and the methods
that ``Registry`` or another mixin defines. A copy of them in each mixin's ``if TYPE_CHECKING`` block would be checked
against nothing. Here mypy checks every use against this one declaration and every definition against it, and a
method that nobody defines makes ``Registry()`` fail at once (it stays abstract) instead of returning ``None``.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from datetime import datetime
from typing import Any

from rlnb import wire
from rlnb.server.payloads import PayloadStore
from rlnb.server.records import CheckpointRecord, OpRecord, SessionRecord
from rlnb.server.settings import ServerSettings
from rlnb.server.state import Journal


class RegistryCore(ABC):
    """The registry's state and the methods its parts call across the split (all set or defined by ``Registry``)."""

    lock: threading.RLock
    settings: ServerSettings
    resources: dict[str, wire.ModelResources]
    sessions: dict[str, SessionRecord]
    checkpoints: dict[str, CheckpointRecord]
    payloads: PayloadStore
    journal: Journal | None
    _closers: set[threading.Thread]

    # -- defined by Registry (registry.py) ---------------------------------------------------------

    @abstractmethod
    def now(self) -> datetime: ...

    @abstractmethod
    def _save(self, kind: str, data: Any, text: str | None = None) -> None: ...

    @abstractmethod
    def _save_op(self, s: SessionRecord, op: OpRecord, text: str | None = None) -> None: ...

    @abstractmethod
    def _end(
        self,
        s: SessionRecord,
        status: wire.SessionStatus,
        reason: str | None = None,
        code: wire.SessionErrorCode = wire.SessionErrorCode.SESSION_FAILED,
    ) -> None: ...

    @abstractmethod
    def _close(self, sessions: list[SessionRecord]) -> None: ...

    @abstractmethod
    def _close_later(self, sessions: list[SessionRecord]) -> None: ...

    # -- defined by one mixin, called by another ----------------------------------------------------

    @abstractmethod
    def _resource(self, rid: str) -> wire.ModelResources: ...  # resources.py

    @abstractmethod
    def _touch(self, rid: str) -> None: ...  # resources.py

    @abstractmethod
    def session(self, sid: str) -> SessionRecord: ...  # sessions.py

    @abstractmethod
    def _stopped(self, s: SessionRecord) -> wire.SessionStatus: ...  # sessions.py
