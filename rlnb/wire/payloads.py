"""The payload side channel: where a large request body is uploaded and a large result's members are fetched.

Forward-backward, custom-forward-backward and sample bodies may carry ``payload_id``: the real body was
uploaded through ``.../payloads/upload-url`` (SDK 3.1.1 does so above 0.5 MiB) and the inline one is a
small stand-in that only passes validation. A result may carry ``payload_id`` too: its large members are
then fetched through ``.../payloads/{payload_id}/download-url`` and merged over the inline ones.
"""

from __future__ import annotations

from typing import Final

from rlnb.wire.base import _Model
from rlnb.wire.operations import OperationKind

__all__ = [
    "LARGE_PAYLOAD_BYTES",
    "OFFLOADED_KINDS",
    "OFFLOADED_RESULT_MEMBERS",
    "UPLOADED_MEMBERS",
    "PayloadDownloadUrl",
    "PayloadUploadUrl",
]

LARGE_PAYLOAD_BYTES: Final = 512 * 1024
"""Bodies above this (compact JSON) go through the payload side channel (SDK 3.1.1's threshold)."""
UPLOADED_MEMBERS: Final[dict[OperationKind, tuple[str, ...] | None]] = {
    OperationKind.FORWARD_BACKWARD: ("loss", "samples"),
    OperationKind.CUSTOM_FORWARD_BACKWARD: ("samples", "gradients"),
    OperationKind.SAMPLE: None,
}
"""The kinds whose large request bodies the SDK uploads, and what it uploads (None: the whole body;
``forward_only`` and ``return_loss_fn_outputs`` stay inline). The other kinds are always sent inline."""
OFFLOADED_KINDS: Final = frozenset(UPLOADED_MEMBERS)
"""The kinds whose large bodies the SDK uploads; the others are always sent inline."""
OFFLOADED_RESULT_MEMBERS: Final[dict[OperationKind, tuple[str, ...]]] = {
    OperationKind.FORWARD_BACKWARD: ("loss_fn_outputs",),
    OperationKind.SAMPLE: ("results",),
}
"""What a too-large result moves to the side channel; ``loss`` and ``metrics`` always stay inline."""


class PayloadUploadUrl(_Model):
    """Where to PUT a large request body; the operation then carries ``payload_id``."""

    payload_id: str
    upload_url: str
    """Absolute and presigned: PUT the compact JSON body there without the Authorization header."""


class PayloadDownloadUrl(_Model):
    """Where to GET the large members of a result that carries ``payload_id``."""

    download_url: str
    """Absolute and presigned: GET it without the Authorization header; the body is a JSON object."""
