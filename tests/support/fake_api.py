"""A tiny in-memory fake of Together's RL API for client tests: served through ``httpx.MockTransport`` or,
with ``tests.support.hostile.bridge``, over a real socket."""

import itertools
import json
import re
import threading
import time

import httpx

from rlnb.remote.client import RetryPolicy

KEY = "sk-rlnb-TEST-7f3a9c0d"
BASE = "https://rl.test"  # https: a key sent to another host over http:// warns (CleartextKeyWarning)
NOW = "2025-01-01T00:00:00Z"
FAST_POLL = {"poll_min": 0.002, "poll_max": 0.02}
OPS = "TRAINING_OPERATION_STATUS_"


def quick(kw: dict) -> dict:
    """Retry backoff in milliseconds, so retry tests take no time (Retry-After is still obeyed)."""
    retries = kw.pop("max_retries", 5)
    return {"retry": RetryPolicy(max_retries=retries, initial_delay=0.001, max_delay=0.002), **kw}


def error(status: int, message: str, param: str | None = None, **headers: str) -> httpx.Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": None}}
    return httpx.Response(status, json=body, headers=headers)


class FakeAPI:
    """Just enough of the API: resources get READY and sessions RUNNING after ``ready_after`` GETs;
    an operation answers its POST with ``op_states[0]`` and its k-th GET with ``op_states[k]``, then
    COMPLETED (unless ``hold``: it stays at the last state). Idempotency keys are honoured."""

    def __init__(self, *, ready_after: int = 2, op_states=("PENDING", "RUNNING"), optim_metrics: bool = False):
        self.advertise = False
        """Answer with rlnb serve's headers (long-poll, in-order execution)."""
        self.payloads: dict[str, bytes] = {}
        self.offload = False
        self.storage = "https://storage.test"
        """Where the presigned payload URLs point."""
        """Completed forward-backward outputs keep only ``loss`` inline, the rest behind a payload_id."""
        self.ready_after = ready_after
        self.op_states = list(op_states)
        self.optim_metrics = optim_metrics
        self.hold = False
        self.resource_fails = False
        self.lock = threading.Lock()
        self.log: list[tuple[float, httpx.Request]] = []
        self.resources: dict[str, dict] = {}
        self.sessions: dict[str, dict] = {}
        self.ops: dict[str, dict] = {}
        self.keys: dict[str, str] = {}
        self.ids = itertools.count(1)

    # -- helpers for tests

    def add_resource(self, optimizer: dict, status: str = "MODEL_RESOURCES_STATUS_READY") -> str:
        rid = f"mr-{next(self.ids)}"
        self.resources[rid] = {
            "id": rid,
            "base_model": "org/model-a",
            "compute_config": {"num_generator_replicas": 1},
            "created_at": NOW,
            "created_by": "user",
            "inactive_timeout": 3600,
            "lora_enabled": False,
            "optimizer_config": optimizer,
            "status": status,
            "updated_at": NOW,
            "_polls": 0,
        }
        return rid

    def add_session(self, rid: str, status: str = "TRAINING_SESSION_STATUS_RUNNING") -> str:
        sid = f"sess-{next(self.ids)}"
        self.sessions[sid] = {
            "id": sid,
            "status": status,
            "base_model": self.resources[rid]["base_model"],
            "model_resources_id": rid,
            "created_by": "user",
            "created_at": NOW,
            "updated_at": NOW,
            "step": "0",
            "_polls": 0,
        }
        return sid

    def calls(self, method: str | None = None, pattern: str = "") -> list[httpx.Request]:
        with self.lock:
            return [r for _, r in self.log if (method is None or r.method == method) and re.search(pattern, r.url.path)]

    def times(self, pattern: str) -> list[float]:
        with self.lock:
            return [t for t, r in self.log if r.method == "GET" and re.search(pattern, r.url.path)]

    # -- the server

    def __call__(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            self.log.append((time.monotonic(), request))
            response = self.route(request)
        if self.advertise:
            response.headers.update({"rlnb-long-poll-max-wait": "30.0", "rlnb-in-order": "session"})
        return response

    def route(self, request: httpx.Request) -> httpx.Response:
        path, method = request.url.path.removeprefix("/v1/rl"), request.method
        if request.url.host == "storage.test":  # the presigned side of the payload side channel
            pid = path.rsplit("/", 1)[-1]
            if method == "PUT":
                self.payloads[pid] = request.content
                return httpx.Response(200)
            return httpx.Response(200, content=self.payloads[pid])
        if m := re.fullmatch(r"/training-sessions/([^/]+)/payloads/(upload-url|([^/]+)/download-url)", path):
            if m[2] == "upload-url":
                pid = f"pl-{next(self.ids)}"
                return httpx.Response(200, json={"payload_id": pid, "upload_url": f"{self.storage}/{pid}?sig=s"})
            return httpx.Response(200, json={"download_url": f"{self.storage}/{m[3]}?sig=s"})
        body = json.loads(request.content) if request.content else None
        if body and body.get("payload_id"):
            body = {**body, **json.loads(self.payloads[body["payload_id"]])}
        if path == "/supported-models":
            models = [{"base_model": m, "default_gpu_type": "B200-SXM"} for m in ("org/model-a", "org/model-b")]
            return httpx.Response(200, json={"data": models})
        if path == "/model-resources" and method == "POST":
            rid = self.add_resource(body["optimizer_config"], "MODEL_RESOURCES_STATUS_PENDING")
            self.resources[rid].update(base_model=body["base_model"], lora_enabled=body.get("lora_enabled", False))
            return httpx.Response(200, json=self.public(self.resources[rid]))
        if m := re.fullmatch(r"/model-resources/([^/]+)(/stop)?", path):
            res = self.resources.get(m[1])
            if res is None:
                return error(404, f"model resource {m[1]} not found")
            if m[2] and res["status"] in ("MODEL_RESOURCES_STATUS_STOPPED", "MODEL_RESOURCES_STATUS_ERROR"):
                # SDK 3.1.1 says the API refuses to stop a resource that has ended
                return error(400, f"model resource {m[1]} is already {res['status']}", "model_resources_id")
            if m[2]:
                res["status"] = "MODEL_RESOURCES_STATUS_STOPPED"
            elif res["status"] != "MODEL_RESOURCES_STATUS_STOPPED":
                res["_polls"] += 1
                if res["_polls"] >= self.ready_after:
                    res["status"] = (
                        "MODEL_RESOURCES_STATUS_ERROR" if self.resource_fails else "MODEL_RESOURCES_STATUS_READY"
                    )
                    if self.resource_fails:
                        res["error"] = {
                            "code": "MODEL_RESOURCES_ERROR_CODE_PROVISIONING_FAILED",
                            "message": "no GPUs",
                            "occurred_at": NOW,
                        }
            return httpx.Response(200, json=self.public(res))
        if path == "/training-sessions" and method == "POST":
            sid = self.add_session(body["model_resources_id"], "TRAINING_SESSION_STATUS_CREATING")
            self.sessions[sid]["lora_config"] = body.get("lora_config")
            return httpx.Response(200, json=self.public(self.sessions[sid]))
        if m := re.fullmatch(r"/training-sessions/([^/]+)(/stop)?", path):
            sess = self.sessions.get(m[1])
            if sess is None:
                return error(404, f"session {m[1]} not found")
            if m[2]:
                sess["status"] = "TRAINING_SESSION_STATUS_STOPPED"
                for op in self.ops.values():
                    if op["session"] == m[1] and op["status"] not in ("COMPLETED", "FAILED"):
                        op["status"] = "FAILED"
                        op["error"] = {"code": "TRAINING_OPERATION_ERROR_CODE_SESSION_NOT_ACTIVE", "message": "stopped"}
            elif sess["status"] == "TRAINING_SESSION_STATUS_CREATING":
                sess["_polls"] += 1
                if sess["_polls"] >= self.ready_after:
                    sess["status"] = "TRAINING_SESSION_STATUS_RUNNING"
            return httpx.Response(200, json=self.public(sess))
        if m := re.fullmatch(r"/training-sessions/([^/]+)/operations/([a-z-]+)(?:/([^/]+))?", path):
            sid, kind, op_id = m[1], m[2], m[3]
            if method == "POST":
                return self.submit(request, sid, kind, body)
            op = self.ops.get(op_id)
            if op is None:
                return error(404, f"operation {op_id} not found")
            if op["status"] not in ("COMPLETED", "FAILED"):
                op["polls"] += 1
                if op["polls"] < len(self.op_states):
                    op["status"] = self.op_states[op["polls"]]
                elif not self.hold:
                    op["status"] = "COMPLETED"
            return httpx.Response(200, json=self.envelope(op))
        return error(404, f"no route {method} {path}")

    def submit(self, request: httpx.Request, sid: str, kind: str, body: dict) -> httpx.Response:
        key = request.headers.get("Idempotency-Key")
        if not key:
            return error(400, "Idempotency-Key header is required", "Idempotency-Key")
        if key in self.keys:
            return httpx.Response(200, json=self.envelope(self.ops[self.keys[key]]))
        sess = self.sessions[sid]
        outputs = {
            "forward-backward": {"loss": 2.5, "metrics": {"loss/tokens": 3.0}},
            "weights-sync": {"weights_version": sess["step"]},
        }
        if kind == "optim-step":
            sess["step"] = str(int(sess["step"]) + 1)
            outputs[kind] = {"step": sess["step"]}
            if self.optim_metrics:
                outputs[kind]["metrics"] = {"grad_norm": 1.25, "grad_clip_norm": 1.0, "learning_rate": 1e-4}
        op_id = f"op-{next(self.ids)}"
        self.ops[op_id] = {
            "id": op_id,
            "session": sid,
            "kind": kind,
            "status": self.op_states[0],
            "polls": 0,
            "output": outputs.get(kind, {}),
        }
        self.keys[key] = op_id
        self.ops[op_id]["body"] = body
        if self.offload and kind == "forward-backward":
            pid = f"pl-{next(self.ids)}"
            outputs = [{"tensors": {"logprobs": {"data": [-1.0] * 3, "dtype": "float32"}}}]
            self.payloads[pid] = json.dumps({"loss": 99.0, "loss_fn_outputs": outputs}).encode()
            self.ops[op_id]["offload"] = pid
        return httpx.Response(200, json=self.envelope(self.ops[op_id]))

    @staticmethod
    def public(obj: dict) -> dict:
        return {k: v for k, v in obj.items() if not k.startswith("_")}

    @staticmethod
    def envelope(op: dict) -> dict:
        env = {"id": op["id"], "status": OPS + op["status"]}
        if op["status"] == "COMPLETED":
            env["output"] = op["output"]
        if op.get("error"):
            env["error"] = op["error"]
        if op["status"] == "COMPLETED" and op.get("offload"):
            env["output"] = {"loss": op["output"]["loss"], "payload_id": op["offload"]}
        return env
