"""Model resources of the registry: create, list, extend, stop, and expiry of idle ones.

A mixin of ``Registry`` (split off to keep one module per concern); what it needs of the registry is
``core.RegistryCore``. It follows the registry's one locking rule and uses its records.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from rlnb import wire
from rlnb.server.core import RegistryCore
from rlnb.server.errors import ServerError, not_found
from rlnb.server.models import DEFAULT_GPU_TYPE
from rlnb.server.records import page, status_filter

PRICE_PER_GPU_HOUR = 0.0
"""``estimate-cost`` answers 0: local compute is free."""


class ResourcesMixin(RegistryCore):
    def resource(self, rid: str) -> wire.ModelResources:
        with self.lock:
            if rid not in self.resources:
                raise not_found("model resource", rid, "model_resources_id")
            return self.resources[rid].model_copy(deep=True)

    def check_resource_request(self, req: wire.CreateModelResourcesRequest) -> wire.OptimizerConfig:
        """400 naming the field of a create body this server refuses, else the resource's optimizer: the one check
        of create and estimate-cost, which R-new gives the same body (a price for a body create refuses misleads)."""
        if req.base_model not in self.settings.models:
            raise ServerError(400, f"base_model must be one of {sorted(self.settings.models)}", param="base_model")
        if req.base_weights_ref is not None:  # it would train the base model's own weights, silently
            raise ServerError(
                400, "rlnb serve has no model registry to take base_weights_ref's weights from: leave it out (serve "
                "those weights as a base model with --model NAME=PATH_OR_ID)", param="base_weights_ref",
            )  # fmt: skip
        opt = req.optimizer_config or wire.optimizer_config(wire.ADAM)
        if (opt.adam is None) == (opt.muon is None):
            raise ServerError(400, "optimizer_config needs exactly one of adam or muon", param="optimizer_config")
        return opt

    def create_resource(self, req: wire.CreateModelResourcesRequest, user: str) -> wire.ModelResources:
        opt = self.check_resource_request(req)
        now, timeout = self.now(), req.inactive_timeout or self.settings.default_inactive_timeout
        cc = req.compute_config or wire.ComputeConfigRequest()
        res = wire.ModelResources(
            id=f"mr-{uuid.uuid4()}",
            base_model=req.base_model,
            compute_config=wire.ComputeConfig(
                num_generator_replicas=1 if cc.num_generator_replicas is None else cc.num_generator_replicas,
                gpu_type=cc.gpu_type or DEFAULT_GPU_TYPE,
            ),
            created_at=now,
            created_by=user,
            inactive_timeout=timeout,
            lora_enabled=bool(req.lora_enabled),
            optimizer_config=opt,
            status=wire.ModelResourcesStatus.READY,
            updated_at=now,
            expires_at=now + timedelta(seconds=timeout),
        )
        with self.lock:
            live = sum(r.status in wire.RESOURCE_ACTIVE for r in self.resources.values())
            if live >= self.settings.max_live_resources:
                raise ServerError(
                    429, f"this server already holds {live} live model resources (max_live_resources): stop one first"
                )
            self.resources[res.id] = res
            self._save("resource", res)
            return res.model_copy(deep=True)

    def list_resources(
        self, after: str | None, limit: int, status: list[str] | None, created_by: str | None, user: str
    ) -> wire.ModelResourcesList:
        who = user if created_by == "me" else created_by
        keep = status_filter(status, wire.ModelResourcesStatus)
        with self.lock:
            items = [r.model_copy(deep=True) for r in self.resources.values()]
        data, meta = page(
            items,
            after,
            limit,
            lambda r: keep(r) and who in (None, r.created_by),
            lambda r: r.id,
            lambda r: r.created_at,
        )
        return wire.ModelResourcesList(data=data, meta=meta)

    def extend_expiry(self, rid: str, seconds: int) -> wire.ModelResources:
        """``expires_at`` becomes at least ``seconds`` from now; it never moves earlier."""
        with self.lock:
            res = self._resource(rid)
            if res.status != wire.ModelResourcesStatus.READY:
                raise ServerError(409, f"model resource {rid} is {res.status}, not ready", param="model_resources_id")
            self._expire_later(res, self.now() + timedelta(seconds=seconds))
            self._save("resource", res)
            return res.model_copy(deep=True)

    def stop_resource(self, rid: str, force: bool) -> wire.ModelResources:
        """Stop a resource (``force``: and its active sessions). It is STOPPING while a session of it still is (an
        operation running, a model being built), then STOPPED (``_stopped_once_idle``). One already STOPPED (or
        ERROR) is a 400, as Together's API answers it (the SDK's ``stop`` catches that 400 and reads the resource);
        a second stop of a STOPPING one changes nothing."""
        with self.lock:
            res = self._resource(rid)
            if res.status in (wire.ModelResourcesStatus.STOPPED, wire.ModelResourcesStatus.ERROR):
                raise ServerError(
                    400, f"model resource {rid} is already {res.status}: it needs no stop", param="model_resources_id"
                )
            active = [s for s in self.sessions.values() if s.resource_id == rid and s.status in wire.SESSION_ACTIVE]
            if active and not force:
                raise ServerError(
                    409, f"{len(active)} session(s) are active; stop them or pass force=true", param="force"
                )
            for s in active:
                self._end(s, self._stopped(s))
            if res.status in wire.RESOURCE_ACTIVE:
                res.status, res.updated_at, res.expires_at = wire.ModelResourcesStatus.STOPPING, self.now(), None
                self._save("resource", res)
                self._stopped_once_idle(rid)
            stopped = res.model_copy(deep=True)
        self._close_later(active)
        return stopped

    def _stopped_once_idle(self, rid: str) -> None:
        """A STOPPING resource becomes STOPPED once none of its sessions is STOPPING (each still finishes its running
        operation or its model's build on the resource's compute); called under the lock as its sessions end."""
        res = self.resources.get(rid)
        if res is None or res.status != wire.ModelResourcesStatus.STOPPING:
            return
        if any(s.resource_id == rid and s.status in wire.SESSION_HOLDS_SLOT for s in self.sessions.values()):
            return
        res.status, res.updated_at = wire.ModelResourcesStatus.STOPPED, self.now()
        self._save("resource", res)

    def _resource(self, rid: str) -> wire.ModelResources:
        if rid not in self.resources:
            raise not_found("model resource", rid, "model_resources_id")
        return self.resources[rid]

    def _touch(self, rid: str) -> None:
        """Activity keeps a resource alive for ``inactive_timeout`` more seconds (never earlier)."""
        res = self.resources[rid]
        if res.status == wire.ModelResourcesStatus.READY:
            self._expire_later(res, self.now() + timedelta(seconds=res.inactive_timeout))

    def _expire_later(self, res: wire.ModelResources, until: datetime) -> None:
        """``expires_at`` moves to ``until`` if that is later (it never moves earlier), and ``updated_at`` to now with
        it: it tells when the object last changed, an extend-expiry included."""
        if res.expires_at is None or until > res.expires_at:
            res.expires_at, res.updated_at = until, self.now()

    def reap(self) -> int:
        """Stop every READY resource idle past its ``expires_at`` with nothing running or being built; its sessions
        become EXPIRED. Drop uploads unused past their expiry. Returns how many resources stopped."""
        self.payloads.sweep()
        now, expired, stopped = self.now(), [], 0
        with self.lock:
            for res in self.resources.values():
                if res.status != wire.ModelResourcesStatus.READY or res.expires_at is None or res.expires_at > now:
                    continue
                mine = [s for s in self.sessions.values() if s.resource_id == res.id]
                if any(s.busy() or s.status == wire.SessionStatus.CREATING for s in mine):
                    continue  # never stops while an operation runs or a model is built; its end counts as activity
                res.status, res.updated_at, res.expires_at = wire.ModelResourcesStatus.STOPPED, now, None
                self._save("resource", res)
                stopped += 1
                for s in mine:
                    if s.status in wire.SESSION_ACTIVE:
                        self._end(s, wire.SessionStatus.EXPIRED)
                        expired.append(s)
        self._close_later(expired)
        return stopped
