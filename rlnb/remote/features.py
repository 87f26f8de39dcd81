"""What the API's server says of itself in the headers of its answers: its clock (``Date``) and what it offers beyond
Together's API (rlnb serve's ``rlnb-*`` headers: long-poll, in-order execution). Learned from ``base_url``'s origin
only: a presigned storage host (payloads, checkpoints) is another server, whose headers said the API server
long-polled, or did not."""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx

from rlnb.remote.retry import delay_seconds, http_date

MIN_LONG_POLL = 1.0
"""The shortest advertised long-poll wait taken: a GET of a shorter one, answered at once, would have waited half of
it, and be asked again at once (``poller``), a GET per round trip for as long as the operation runs."""


@dataclass
class ServerFeatures:
    """What the server offers beyond Together's API, learned from its ``rlnb-*`` response headers."""

    long_poll_max_wait: float | None = None
    """``GET .../operations/{kind}/{id}?wait=S`` is served, for S up to this (rlnb serve)."""
    in_order: bool = False
    """A session's operations run one at a time in submission order (rlnb serve)."""


class ServerInfo:
    """The clock and ``features`` of the server at ``origin`` (scheme, host, port), from its answers; its features
    only when ``extensions`` (``server_extensions=False``: the client behaves as against Together)."""

    def __init__(self, origin: tuple[str, str, int | None], extensions: bool) -> None:
        self.features = ServerFeatures()
        self._origin, self._extensions = origin, extensions
        self._date: tuple[str, float] | None = None
        """The latest ``Date`` header and our ``time.time()`` when it came; parsed only when asked
        (``server_time``), not on every answer."""

    def server_time(self, local: float) -> float:
        """A ``time.time()`` of this machine on the server's clock (as its last ``Date`` header told)."""
        if self._date is None:
            return local
        date, when = self._date
        server = http_date(date)
        return local if server is None else local + server + 0.5 - when  # Date has whole seconds: its middle

    def learn(self, url: httpx.URL, response: httpx.Response) -> None:
        """The server's clock and features from ``response`` to a request to ``url``, when ``url`` is its origin."""
        if (url.scheme, url.host, url.port) != self._origin:
            return
        date = response.headers.get("date")
        if date is not None:
            self._date = (date, time.time())
        if not self._extensions:
            return
        wait = delay_seconds(response.headers.get("rlnb-long-poll-max-wait", ""))  # as Retry-After: no nan, -3, 1_0
        if wait is not None and wait >= MIN_LONG_POLL:  # else no long-poll
            self.features.long_poll_max_wait = wait
        if response.headers.get("rlnb-in-order") == "session":
            self.features.in_order = True
