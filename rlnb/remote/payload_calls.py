"""``APIClient``'s payload side channel: a large body uploaded, or a large result downloaded, through presigned URLs
the API hands out, without the API key, as the official SDK does (``payloads`` encodes and splits them)."""

from __future__ import annotations

from typing import Any

from rlnb import wire
from rlnb.errors import APIConnectionError, APIError
from rlnb.remote import payloads
from rlnb.remote.call_spec import Call
from rlnb.remote.endpoints import Endpoints, at
from rlnb.wire import paths


class PayloadGone(APIError):
    """A result's payload the server would not hand over, or that could not be read (``get_operation`` asks for the
    operation once more); ``status`` is the operation's, as its envelope said."""

    def __init__(self, message: str, status: object = None) -> None:
        super().__init__(message)
        self.status = status


class PayloadCalls(Endpoints):
    """The side channel's calls (see ``APIClient`` for the client's arguments)."""

    def upload_payload(self, session_id: str, content: bytes) -> str:
        """The side channel's upload: a presigned URL from the API, then a PUT without the key."""
        path = at(paths.PAYLOAD_UPLOAD_URL, session_id=session_id)
        url = self._parse(self._send(Call("POST", path)), wire.PayloadUploadUrl)
        self._send(Call("PUT", payloads.presigned(url.upload_url, self.base_url, "upload_url"), content, auth=False))
        return url.payload_id

    def download_payload(self, session_id: str, payload_id: str) -> dict[str, Any]:
        """The side channel's download: a presigned URL from the API, then a GET without the key."""
        path = at(paths.PAYLOAD_DOWNLOAD_URL, session_id=session_id, payload_id=payload_id)
        url = self._parse(self._send(Call("POST", path)), wire.PayloadDownloadUrl)
        where = payloads.presigned(url.download_url, self.base_url, "download_url")
        data = self._bodies.decode(self._send(Call("GET", where, auth=False)), "payload")
        if not isinstance(data, dict):
            raise APIError(f"payload {payload_id} must be a JSON object, got {type(data).__name__}")
        return data

    def result_payload(self, session_id: str, kind: wire.OperationKind, env: dict[str, Any], payload_id: str) -> Any:
        """The offloaded members of a result. A refusal to hand them over (a 404: the payload expired, or its
        session stopped meanwhile), or a payload that cannot be read, is no word on the operation, so it is raised as
        ``PayloadGone`` naming the payload: a status error here would pass for the operation's own (a 404: "no longer
        known"). No answer is the ``APIConnectionError`` it is (the poller's failure window counts it)."""
        try:
            return self.download_payload(session_id, payload_id)
        except APIConnectionError:
            raise
        except APIError as exc:
            why = f"{kind} {env.get('id')} is {env.get('status')}, but its result's payload {payload_id} could not "
            raise PayloadGone(f"{why}be fetched: {exc}", env.get("status")) from None
