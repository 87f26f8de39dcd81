"""Every tunable of ``rlnb serve`` in one frozen object: what is served, on what, and every limit.

Limits live here and nowhere else, so hardening the server means changing this file's defaults. Each
default is far above what a notebook on the built-in models asks for, and below what lets one request
take the server's memory or a core for minutes; ``rlnb serve --limit NAME=VALUE`` changes any of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rlnb import wire
from rlnb._input.checks import check_seconds, refuse_dangling_link, set_int
from rlnb._input.shown import shown
from rlnb.engine.dtypes import check_weight_dtype
from rlnb.secrets import redaction
from rlnb.server.models import check_served

MAX_LIST_LIMIT = wire.LIST_LIMIT_MAX
"""Largest ``limit`` of a list request (the API's bound, as the client checks it)."""
DEFAULT_LIST_LIMIT = 20
STATUS_QUERY = "{} values, comma-joined (as the SDK sends a list) or repeated (`?status=A&status=B`)"
"""What a list's ``status`` filter takes (``records.status_filter``)."""
MAX_WAIT = 30.0
"""Longest long-poll (``GET .../operations/{kind}/{id}?wait=S``) a client may ask for; advertised in the
``rlnb-long-poll-max-wait`` header of every answer."""

DEFAULT_MODELS: dict[str, Any] = {"rlnb/tiny": "tiny", "rlnb/small": "small"}
"""Served base models: API name → model spec, passed unchanged to ``LocalBackend(model=spec)``."""


@dataclass(frozen=True)
class ServerSettings:
    """What ``create_app`` serves and the limits it enforces."""

    token: str | None = field(default=None, repr=False)
    """Bearer token every ``/v1`` route requires; None turns auth off (never in the settings' repr)."""
    device: str = "auto"
    op_delay: float = 0.0
    """Extra seconds each operation takes (simulated remote compute)."""
    checkpoint_dir: Path | None = None
    models: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_MODELS))
    dtype: str = "auto"
    """Weights' dtype of the served models, one of ``WEIGHT_DTYPES`` ("auto": the checkpoint's own)."""
    trust_remote_code: bool = False
    """Run the Python code a served model folder ships (``auto_map`` in its config: a custom architecture), as
    ``rlnb.connect(..., trust_remote_code=True)`` does (``rlnb serve --trust-remote-code``); off: such a folder is
    refused at the start, since its code would run with the server's rights."""
    threads: int | None = None
    """torch's intra-op threads of each session's operations on the CPU, as ``rlnb.connect(..., threads=N)``
    (``rlnb serve --threads N``): a seeded remote run repeats bit for bit at a fixed count only (the sums of a
    forward and a backward split with the threads). None: the engine's thread policy, which follows the load."""
    fail_rate: float = 0.0
    """Fraction of ``/v1`` answers replaced by a 503 *after* the server acted (fault injection)."""
    fail_seed: int = 0
    state_dir: Path | None = None
    """Keep the registry (resources, sessions, operations, checkpoints) here, so that a restarted server
    knows them; checkpoints then default to ``<state_dir>/checkpoints``. None: in memory only."""
    public_url: str = "http://127.0.0.1:8000"
    """Where clients reach this server: presigned URLs are built on it, never on a request's Host header
    (``serve`` sets it from its host and port)."""
    host_names: frozenset[str] | None = None
    """The ``Host`` names requests may give besides loopback ones (``hosts.OwnNames``); None: any. ``rlnb serve`` sets
    it on a loopback address without a token (its default), against DNS rebinding: its ``--public-url``'s name."""
    download_ttl: int = 3600
    """Seconds a presigned checkpoint download URL stays valid."""
    payload_ttl: int = 3600
    """Seconds a payload URL (upload or download) stays valid; an upload that no operation has used this
    long after it arrived is dropped."""

    # -- resources and sessions
    base_seed: int = 0
    """Seeds every base model's initial weights: sessions of one base model start from the same weights,
    whatever their LoRA ``seed`` (which seeds only the adapters)."""
    full_session_cap: int = 1
    """Concurrent sessions on a full-weight resource (as on the service)."""
    lora_session_cap: int = 5
    """Concurrent sessions on a LoRA resource (the service's default)."""
    default_inactive_timeout: int = 3600
    max_lora_rank: int = 64
    """Largest LoRA rank a session may ask for (supported-models' ``max_rank``)."""
    max_batch_size: int = 256
    """Samples per forward-backward or custom-forward-backward (supported-models' ``max_batch_size``)."""
    max_live_resources: int = 128
    """Model resources that may be READY at once (429 past it)."""
    max_live_sessions: int = 64
    """Sessions that may be active at once, over all resources (429 past it): each holds a model."""
    reap_interval: float = 5.0
    """Seconds between two checks for resources idle past their ``expires_at``."""

    # -- requests
    max_body_bytes: int = 32 << 20
    """Largest request body (413 past it). Clients send bodies over 0.5 MiB through the payload side
    channel, whose uploads have their own limit."""
    max_payload_bytes: int = 256 << 20
    """Largest body uploaded through the payload side channel (the service allows ~5 GiB)."""
    max_session_payload_bytes: int = 1 << 30
    """Uploaded bytes one session may hold at once (429 past it). An upload is held from its first byte
    until the operation that names it is submitted, it expires (``payload_ttl``) or its session stops."""
    max_total_payload_bytes: int = 4 << 30
    """Uploaded bytes all sessions together may hold at once (429 past it)."""
    max_session_uploads: int = 1024
    """Upload URLs one session may hold unused at once (429 past it): each is kept until it is used, it expires
    or its session stops, and a loop of ``upload-url`` calls added records without end."""
    body_timeout: int = 300
    """Seconds a request body may take to arrive in full (408 past it, and the connection is closed)."""
    body_idle_timeout: int = 30
    """Seconds a request body may go without a byte arriving (408)."""
    header_timeout: int = 30
    """Seconds a connection may take to send a request's headers in full, from its opening or its last answer's end
    (closed past it): one that never finished them was held for ever, and enough of them took every descriptor."""
    max_connections: int = 1024
    """Requests in flight at once (a request past it: 503 with ``Retry-After``, the connection closed). Connections
    that have sent nothing are not counted (a 503 cannot free their descriptors): ``header_timeout`` closes them."""
    max_sample_tokens: int = 65536
    """Budget of one sample request: prompts x num_samples x max_tokens (400 past it)."""
    max_sample_prompt_tokens: int = 131072
    """The prompt tokens one sample request's KV cache holds: prompts x num_samples x its longest prompt's tokens
    (each sample's row keeps its prompt's keys and values, padded to the longest, though each prompt is prefilled
    once; 400 past it). 2,000 prompts of 250 tokens took the server from 0.4 to 2.4 GB."""
    max_prompt_logprobs: int = 1 << 20
    """Prompt log-probs one sample request returns: its prompts' tokens x (1 with ``prompt_logprobs`` +
    ``topk_prompt_logprobs``), 400 past it. 512 prompts of 255 tokens with 20 top log-probs (a 0.6 MB body) answered
    65 MB of JSON and kept ~300 MB of memory with the operation."""
    max_stop_strings: int = wire.MAX_STOP_STRINGS
    """Stop strings of one sample request (400 past it)."""
    max_stop_chars: int = wire.MAX_STOP_CHARS
    """Characters of one stop string."""
    max_label_bytes: int = 65536
    """Bytes of a session's ``display_name``, and of its ``metadata`` as JSON (400 past it): a session keeps them for
    good, in memory and in ``--state-dir``'s journal, and would take a 30 MB name."""
    max_pending_operations: int = 1024
    """Operations one session may have queued or running at once (429 with ``Retry-After`` past it): each keeps its
    parsed body in memory until it ran (60 queued forward-backwards of 0.93 MB held 400 MB). rlnb's ``rl_step`` (and
    the sweeps and lessons made of it) keeps three in flight; its client retries the 429, so a loop that submits faster
    than the session runs waits instead."""
    max_pending_bytes: int | None = None
    """Bytes of the request bodies (an upload's too) one session's queued or running operations came from (429 with
    ``Retry-After`` past it; a body larger than it alone is a 400): ``max_pending_operations`` counts them, and each
    body is held parsed, ~10x its JSON, until it ran (four queued 30 MB forward-backwards took the server from 0.4 to
    1.4 GB). None: the largest upload and inline body together, whatever those limits are (``pending_bytes``)."""
    max_kept_operations: int = 10_000
    """Finished operations each session keeps, the newest (a GET of an older one is a 404 saying so, a retry of its
    Idempotency-Key a 409): a session that kept every operation's record would keep ~40,000 for an RL run of 10,000
    steps, each ~3 KB or more (a sample's holds its tokens and logprobs). Pending and running ones are always kept."""
    max_kept_result_bytes: int = 64 << 20
    """Bytes of JSON the finished operations each session keeps may hold, the newest (older ones are let go as past
    ``max_kept_operations``; the newest is always kept, whatever its size): a count alone would let a 64 x 8 x 128-token
    sample (1.7 MB of JSON, ~5 MB of server memory as objects) be kept 10,000 times. Memory is ~3x the JSON kept
    (``bench/bench_kept_results.py``)."""
    result_offload_bytes: int | None = None
    """Offload operation results larger than this through ``payloads/{id}/download-url``, as the service
    may; None (default) keeps every result inline, which low-level clients need."""

    def kept(self) -> tuple[int, int]:
        """What a session keeps of its finished operations: ``max_kept_operations``, ``max_kept_result_bytes``."""
        return self.max_kept_operations, self.max_kept_result_bytes

    def pending_bytes(self) -> int:
        """``max_pending_bytes``, its default worked out: ``max_body_bytes`` + ``max_payload_bytes``, the most one
        request may send (a fixed default refused bodies a raised ``max_body_bytes`` let in)."""
        if self.max_pending_bytes is not None:
            return self.max_pending_bytes
        return self.max_body_bytes + self.max_payload_bytes

    def __post_init__(self) -> None:
        for name, high in LIMITS.items():
            set_int(self, name, 1, high, optional=name == "max_pending_bytes")  # None: ``pending_bytes``
        check_pending_bytes(self.max_body_bytes, self.max_pending_bytes)
        if not self.public_url.startswith(("http://", "https://")):
            raise ValueError(f"public_url must start with http:// or https://, got {self.public_url!r}")
        check_public_host(self.public_url)
        if not 0 <= self.fail_rate < 1:  # NaN fails this too
            raise ValueError(f"fail_rate must be in [0, 1), got {self.fail_rate}")
        object.__setattr__(self, "op_delay", check_seconds("op_delay", self.op_delay))
        interval = check_seconds("reap_interval", self.reap_interval, positive=True)  # 0 would spin the reaper
        object.__setattr__(self, "reap_interval", interval)
        set_int(self, "result_offload_bytes", 0, BYTES_MAX, optional=True)
        if not self.models:
            raise ValueError("models must name at least one served model")
        check_weight_dtype(self.dtype)
        if self.token is not None:  # "--token $TOKEN" with TOKEN unset: every request would get a 401
            if self.token == "":
                raise ValueError("token is empty (an unset variable?): give one, or leave --token out to turn auth off")
            redaction.check_key(self.token, "token")
        if self.state_dir is not None:  # a link to nothing was "cannot keep the server's state in L: File exists"
            refuse_dangling_link("state_dir", Path(self.state_dir))
        from rlnb.engine.model_setup import resolve_device  # torch: imported only when settings are made
        from rlnb.engine.options import checkpoint_folder
        from rlnb.engine.threads import check_threads
        from rlnb.server.owner import refuse_foreign_state_dir

        object.__setattr__(self, "threads", check_threads(self.threads))
        resolve_device(self.device)  # a device that is not there stops the server before it listens
        # nor does a model no loader finds (every session of it failed, supported-models 500)
        check_served(self.models, self.trust_remote_code)
        if self.checkpoint_dir is not None:  # nor does a folder that cannot hold checkpoints
            object.__setattr__(self, "checkpoint_dir", checkpoint_folder(self.checkpoint_dir))
            refuse_foreign_state_dir(self.checkpoint_dir, self.state_dir)


COUNT_MAX, BYTES_MAX, SECONDS_MAX, TTL_MAX = 2**31 - 1, 2**63 - 1, 86_400, 7 * 86_400
"""Upper bounds of the limits: a count (an int32), a size in bytes (an int64: a file's size), a timeout (a day), a
URL's lifetime (a week, as S3's presigned URLs): else ``body_timeout=1e300`` would pass, a wait no timer can hold."""
_SECONDS = ("body_timeout", "body_idle_timeout", "header_timeout")
_TTLS = ("download_ttl", "payload_ttl")
_BYTES = ("max_body_bytes", "max_payload_bytes", "max_session_payload_bytes", "max_total_payload_bytes",
          "max_label_bytes", "max_kept_result_bytes", "max_pending_bytes")  # fmt: skip
_COUNTS = ("full_session_cap", "lora_session_cap", "max_lora_rank", "max_batch_size", "max_live_resources",
           "max_live_sessions", "max_connections", "max_session_uploads", "max_sample_tokens",
           "max_sample_prompt_tokens", "max_prompt_logprobs",
           "max_stop_strings", "max_stop_chars", "max_pending_operations", "max_kept_operations")  # fmt: skip
LIMITS: dict[str, int] = (
    dict.fromkeys(_COUNTS, COUNT_MAX) | dict.fromkeys(_BYTES, BYTES_MAX)
    | dict.fromkeys(_SECONDS, SECONDS_MAX) | dict.fromkeys(_TTLS, TTL_MAX)
)  # fmt: skip
"""The integer limits (``rlnb serve --limit NAME=VALUE``), each in [1, its upper bound]."""


def check_pending_bytes(max_body_bytes: int, max_pending_bytes: int | None, said: str = "") -> None:
    """A ``ValueError`` naming both fields and the range (``said``: what precedes the field's name, ``--limit `` on
    the CLI) unless ``max_pending_bytes`` (None: its default, which is larger) queues one body ``max_body_bytes``
    lets in: such a body was taken by its size, then a 400 at every send."""
    if max_pending_bytes is not None and max_pending_bytes < max_body_bytes:
        raise ValueError(f"{said}max_pending_bytes must be an integer in [{max_body_bytes}, {BYTES_MAX}] (at least "
                         f"max_body_bytes, {max_body_bytes}), got {max_pending_bytes}: a body max_body_bytes lets in "
                         "could never be queued (a 400 at every send); raise it, or lower max_body_bytes")  # fmt: skip


def parse_limits(items: list[str]) -> dict[str, int]:
    """``["max_body_bytes=1e8", ...]`` (``rlnb serve --limit``) as settings fields; ``ValueError`` naming
    what is wrong, and the limit's range, before the server starts."""
    limits = {}
    for item in items:
        name, _, value = item.partition("=")
        said = shown(item, 100)  # 500 digits would fill the terminal
        if name not in LIMITS:
            raise ValueError(f"--limit {said}: the limits are {', '.join(LIMITS)}")
        if not value.isascii():  # int and float read other scripts' digits too: '１e8' was 1e8
            raise ValueError(f"--limit {said}: {name} must be an integer in [1, {LIMITS[name]}], in ASCII digits 0-9")
        try:
            number: float = int(value)  # exactly, past a float's 53 bits
        except ValueError:
            try:
                number = float(value)
            except ValueError:
                raise ValueError(f"--limit {said}: {shown(value)} is not a number") from None
        if not (1 <= number <= LIMITS[name] and float(number).is_integer()):  # NaN: no comparison holds
            raise ValueError(f"--limit {said}: {name} must be an integer in [1, {LIMITS[name]}]")
        limits[name] = int(number)
    return limits


def check_public_host(url: str) -> None:
    """A ``ValueError`` naming ``public_url`` unless it has a host and a valid port, and no query, fragment or user:
    a server started with ``http://`` (or ``http://:8000``, ``http://h:99999``) would answer every presigned link as
    ``http:///v1/...``, a link no client can follow."""
    if "@" in _authority(url):  # it would go into every presigned link the API answers with (checked first: not shown)
        raise ValueError("public_url cannot hold a user or password (user@host): every presigned link shows it")
    if any(c.isspace() or not c.isprintable() for c in url):  # urlsplit drops a newline: http://h\n:8000 would pass
        raise ValueError(f"public_url cannot hold whitespace or a control character: got {shown(url)} (every "
                         "presigned link holds it: no URL a client follows)")  # fmt: skip
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises for a port out of range or not a number
    except ValueError as exc:
        raise ValueError(f"public_url {url!r} is not a valid URL: {exc}") from None
    if not parts.hostname:
        raise ValueError(f"public_url must name a host, such as http://rl.example:8000, got {url!r}")
    if "?" in url or "#" in url:  # each link is public_url + its path: http://h/?a#f/v1/rl/... went to http://h/?a
        shown_part = re.split(r"[?#]", url, maxsplit=1)[0]  # not the query: a presigned signature typed in
        raise ValueError(
            f"public_url cannot hold a query or fragment ('?', '#'): links append their path, got {shown_part} and more"
        )


def _authority(url: str) -> str:
    """The ``user@host:port`` part of ``url``: after its ``//``, up to the path, query or fragment."""
    return re.split(r"[/?#]", url.partition("//")[2], maxsplit=1)[0]
