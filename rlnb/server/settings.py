"""Every tunable of ``rlnb serve`` in one frozen object: what is served, on what, and every limit.

Limits live here and nowhere else, so hardening the server means changing this file's defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_LIST_LIMIT = 100
"""Largest ``limit`` of a list request (the API's bound)."""
DEFAULT_LIST_LIMIT = 20
MAX_WAIT = 30.0
"""Longest long-poll (``GET .../operations/{kind}/{id}?wait=S``) a client may ask for; advertised in the
``rlnb-long-poll-max-wait`` header of every answer."""

DEFAULT_MODELS: dict[str, Any] = {"rlnb/tiny": "tiny", "rlnb/small": "small"}
"""Served base models: API name → model spec, passed unchanged to ``LocalBackend(model=spec)``."""


@dataclass(frozen=True)
class ServerSettings:
    """What ``create_app`` serves and the limits it enforces."""

    token: str | None = None
    """Bearer token every ``/v1`` route requires; None turns auth off."""
    device: str = "auto"
    op_delay: float = 0.0
    """Extra seconds each operation takes (simulated remote compute)."""
    checkpoint_dir: Path | None = None
    models: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_MODELS))
    dtype: str = "auto"
    """Weights dtype of served Hugging Face models ("auto": the checkpoint's; "float32"; "bfloat16")."""
    fail_rate: float = 0.0
    """Fraction of ``/v1`` answers replaced by a 503 *after* the server acted (fault injection)."""
    fail_seed: int = 0

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
    """Samples per forward-backward (supported-models' ``max_batch_size``)."""
    reap_interval: float = 5.0
    """Seconds between two checks for resources idle past their ``expires_at``."""

    # -- requests
    max_payload_bytes: int = 1 << 30
    """Largest body uploaded through the payload side channel (the service allows ~5 GiB)."""
    result_offload_bytes: int | None = None
    """Offload operation results larger than this through ``payloads/{id}/download-url``, as the service
    may; None (default) keeps every result inline, which low-level clients need."""

    def __post_init__(self) -> None:
        if not 0 <= self.fail_rate < 1:
            raise ValueError(f"fail_rate must be in [0, 1), got {self.fail_rate}")
        if self.op_delay < 0:
            raise ValueError(f"op_delay must be >= 0, got {self.op_delay}")
        if not self.models:
            raise ValueError("models must name at least one served model")
