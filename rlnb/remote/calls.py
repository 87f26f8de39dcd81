"""``Caller``: how one call of the API is sent — ``APIClient``'s base, which adds one method per endpoint.

Every request goes through ``_send``, which applies the one ``RetryPolicy`` (no response, 408, 409, 429,
>= 500, or whatever ``x-should-retry`` says; jittered exponential backoff honouring ``Retry-After``) and
turns every failure into an ``rlnb.errors`` error (``_after_failure``, the one place failures are
judged). What the server offers beyond the API (rlnb serve's long-poll and in-order execution, from its ``rlnb-*``
response headers) and its clock are learned from its answers (``features``). No redirect of the API is followed; a
presigned URL's, which carries no credential, are, a few (``redirects.follow``).

Every call ends by ``deadline`` seconds, all attempts and backoff included: each socket operation is bounded by the
time left (``transport.DeadlineTransport``), so a server that drips its answer cannot hold a call for ever.

The API key lives in a ``SecretStr`` from where rlnb first receives it (``redaction.hide``: no traceback's locals
show it), unwrapped only into the ``Authorization`` header: it is in no repr, log line or exception message (the
header of a request inside an exception rlnb raises reads ``Bearer ***``), and every body a server sends back,
successful or not, is read under a size cap and scrubbed of it after JSON decoding (``bodies``).

Apart from ``client`` so that the endpoints read as the API's list, and the send path as one piece; what a call is
(``Call``), its defaults and which failures may be sent again are ``call_spec``'s.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TypeVar

import httpx
from pydantic import BaseModel, SecretStr

from rlnb.errors import APIConnectionError, APIError, APITimeoutError
from rlnb.remote import bodies, cookies, masking, redirects, sent
from rlnb.remote.call_spec import (
    DEFAULT_BASE_URL,
    DEFAULT_DEADLINE,
    DEFAULT_TIMEOUT,
    ENV_API_KEY,
    ENV_BASE_URL,
    HOPELESS,
    REFUSED,
    UNSENT,
    USER_AGENT,
    Call,
    check_settings,
    doubled_prefix,
)
from rlnb.remote.features import ServerFeatures as ServerFeatures  # importable from here too, for callers that do
from rlnb.remote.features import ServerInfo
from rlnb.remote.retry import RetryPolicy
from rlnb.remote.silence import CALLED_OFF, Silence
from rlnb.remote.transport import DeadlineTransport, Proxies, deadline
from rlnb.remote.urls import check_base_url, warn_cleartext
from rlnb.secrets import redaction
from rlnb.wire.paths import API_PREFIX

log = logging.getLogger("rlnb")

M = TypeVar("M", bound=BaseModel)


class Caller:
    """The send path of ``APIClient`` (see there for the arguments)."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | SecretStr | None = None,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        deadline: float = DEFAULT_DEADLINE,
        max_retries: int | None = None,
        retry: RetryPolicy | None = None,
        http_client: httpx.Client | None = None,
        transport: httpx.BaseTransport | None = None,
        server_extensions: bool = True,
        max_response_bytes: int | None = None,
    ):
        api_key = redaction.hide(api_key)  # first: no traceback's locals show it from here on
        checked = check_settings(deadline, timeout, max_retries, server_extensions, max_response_bytes)  # as the group
        deadline, timeout, max_retries, server_extensions, most = checked
        if http_client is not None and transport is not None:
            raise ValueError("pass http_client or transport, not both")
        if retry is not None and max_retries is not None:
            raise ValueError("pass retry or max_retries, not both")
        self.retry = retry or (RetryPolicy() if max_retries is None else RetryPolicy(max_retries=max_retries))
        url = base_url or os.environ.get(ENV_BASE_URL) or DEFAULT_BASE_URL
        self.base_url = check_base_url(url, "base_url" if base_url else ENV_BASE_URL).rstrip("/")
        own = httpx.URL(self.base_url)
        self._origin = (own.scheme, own.host, own.port)
        self._api_key = redaction.take_key(api_key, ENV_API_KEY)
        given = sent.credentials(sent.configured(http_client, self.base_url)) if http_client is not None else []
        for credential in given:  # the user's own, sent as rlnb's key is: masked as it is
            redaction.register(credential)
        if self._api_key is not None or given:
            warn_cleartext(self.base_url)  # once per client, at its making: each call would repeat it
        self._bodies = bodies.Scrubber(self._api_key)
        self.max_response_bytes = bodies.MAX_RESPONSE_BYTES if most is None else most
        self.deadline = deadline
        self._owns_http = http_client is None
        self._proxies = Proxies(http_client is None and transport is None)  # as httpx takes them for its own transport
        if http_client is None:
            transport = self._proxies.route(transport or DeadlineTransport(), self.base_url)
            http_client = httpx.Client(transport=transport, timeout=timeout)
        self._http = http_client
        for credential in sent.credentials(sent.proxied(http_client)):  # a proxy's, which no hook sees: masked too
            redaction.register(credential)
        self._server = ServerInfo(self._origin, server_extensions)
        self.features = self._server.features
        self.silence = Silence()
        """How long the server has not answered, from the first failed attempt (``RemoteBackend.outage``)."""

    @property
    def max_retries(self) -> int:
        return self.retry.max_retries

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def _send(self, call: Call) -> httpx.Response:
        """Send with the retry policy, within the call's deadline; a 2xx response, or the mapped exception."""
        request = self._build(call)
        trusted = self._trusted(call, request.url)
        if self._http.is_closed:  # closed by its owner: httpx's RuntimeError escaped close(), which left all running
            url = self.redact(str(request.url.copy_with(query=None)))
            closed = "this APIClient was closed (its close(), or the end of its with block)" if self._owns_http else (
                "the http_client given to rlnb was closed")  # fmt: skip
            raise APIError(closed, method=request.method, url=url, sent=False)
        end = time.monotonic() + self.deadline + call.wait
        limit = f"the call's deadline ({self.deadline:g} s)"
        if call.until is not None and call.until < end:
            end, limit = call.until, "the caller's time for it"
        attempt, answered, acted = 0, None, False  # the latest error answer; whether an earlier try may have acted
        while True:
            started = time.monotonic()
            failure: httpx.RequestError | None = None
            unmasked = ""  # the text of a transport's own error whose key could not be masked in it
            try:
                with deadline(end, call.reconnect_until if attempt else None):  # the first try connects in full
                    response = self._open(request, trusted)
                    try:
                        bodies.read(response, self.max_response_bytes)
                    finally:
                        response.close()
            except httpx.RequestError as exc:
                failure = exc  # judged outside ``except``: an error raised there would keep it as __context__
            except BaseException as exc:  # a transport's own error, Ctrl-C: raised as it is, without httpcore's locals,
                masking.forget_locals(exc)  # its text quoting no key (a custom transport's listing the headers)
                if self._bodies.mask(exc) or not isinstance(exc, Exception):  # Ctrl-C stays Ctrl-C
                    raise
                unmasked = f"{type(exc).__name__}: {self.redact(masking.said(exc))}"
            if unmasked:  # raised outside ``except``: no __context__ keeps the error
                url = self.redact(str(request.url.copy_with(query=None)))
                raise APIError(f"{unmasked} (the transport's error holds the API key, in its text or an attribute, "
                               "where rlnb could not mask it)", method=request.method, url=url)  # fmt: skip
            if isinstance(failure, redirects.BadLocation):  # the server's answer: not retried
                redirected = self._bodies.status_error(request, failure.answer(), self.base_url)
                redirected.earlier_may_have_acted = acted
                raise redirected
            if failure is not None:  # a retry cut short by the end: the error answer before it says more
                cut = answered is not None and time.monotonic() >= end
                said, error = (answered, None) if cut else (None, failure)
                acted |= not isinstance(failure, UNSENT)  # sent, and no answer: it may have acted
                self._after_failure(request, attempt, said, error, end, limit, call, acted)
            else:
                ms = (time.monotonic() - started) * 1000
                shown = request.url if trusted else request.url.copy_with(query=None)  # a presigned query signs
                log.debug("%s %s -> %d in %.0f ms", request.method, shown, response.status_code, ms)
                self._server.learn(request.url, response)
                self.silence.answered()
                if response.is_success:
                    return response
                answered = response
                self._after_failure(request, attempt, response, None, end, limit, call, acted)
                acted |= response.status_code >= 500
            attempt += 1

    def _build(self, call: Call) -> httpx.Request:
        sent.install(self._http)  # rlnb's hooks, at each request (an ``event_hooks = ...`` of the user's drops them):
        redirects.install(self._http)  # what it carries masked as it goes out; a Location that is no URL one error
        headers = {"Accept": "application/json", "Accept-Encoding": bodies.ACCEPT_ENCODING, "User-Agent": USER_AGENT}
        url = call.url if call.url.startswith(("http://", "https://")) else f"{self.base_url}{API_PREFIX}{call.url}"
        if call.idempotency_key is not None:
            headers["Idempotency-Key"] = call.idempotency_key
        if call.content is not None:
            headers["Content-Type"] = "application/json"
        timeout = self._http.timeout
        if call.wait and timeout.read is not None:  # the server may hold a long-poll that long: the read deadline
            # starts after it (a read of None has no limit to move)
            timeout = httpx.Timeout(
                connect=timeout.connect, read=timeout.read + call.wait, write=timeout.write, pool=timeout.pool
            )
        request = self._http.build_request(
            call.method, url, content=call.content, params=call.params, headers=headers, timeout=timeout
        )
        request.extensions[redirects.MARK] = True  # before the copy below, which keeps the extensions
        if not self._trusted(call, request.url):  # as rlnb built it: none of an http_client's default headers,
            # cookies or query parameters (credentials for the API, maybe) goes to a presigned host
            extensions = {**request.extensions, redirects.PRESIGNED: True}
            return type(request)(call.method, url, params=call.params, content=call.content, headers=headers,
                                 extensions=extensions)  # fmt: skip
        if self._api_key is not None:
            request.headers["Authorization"] = f"Bearer {self._api_key.get_secret_value()}"  # the one unwrapping
        request.extensions[sent.MARK] = frozenset(request.headers.keys())
        return request

    def _open(self, request: httpx.Request, trusted: bool) -> httpx.Response:
        """``request`` sent, its answer streamed; off the API by ``cookies.send_apart`` (which follows a few redirects);
        to it, with the client's own ``auth`` (httpx's sentinel for it is refused by Starlette's TestClient, built on
        httpx2), following no redirect (an http_client's ``follow_redirects=True`` would take another host's answer
        for the API's)."""
        if trusted:
            return self._http.send(request, stream=True, follow_redirects=False)
        return cookies.send_apart(self._http, request)

    def _trusted(self, call: Call, url: httpx.URL) -> bool:
        """Whether ``call`` gets credentials (rlnb's key, an http_client's): it asks (``auth``) of base_url's origin."""
        return call.auth and (url.scheme, url.host, url.port) == self._origin

    def server_time(self, local: float) -> float:
        """A ``time.time()`` of this machine on the server's clock (as its last ``Date`` header told)."""
        return self._server.server_time(local)

    def redact(self, text: str) -> str:
        """``text`` without any API key (a server or proxy may echo the header back)."""
        return self._bodies.redact(text)

    def _after_failure(
        self,
        request: httpx.Request,
        attempt: int,
        response: httpx.Response | None,
        error: Exception | None,
        end: float,
        limit: str,
        call: Call,
        acted: bool = False,
    ) -> None:
        """The one place failures are judged: the wait before the next attempt, or the final error raised.

        ``error`` is the httpx exception when no response came; it becomes ``APITimeoutError`` or
        ``APIConnectionError`` (``from`` it, with the request's Authorization header masked). An error
        status becomes ``status_error_class(status)``, marked ``earlier_may_have_acted`` when ``acted`` (a try before
        it got no answer, or a 5xx). No retry starts past the call's ``end`` (``limit`` says what set it). A ``call``
        that is not ``idempotent`` is retried only when it surely did not act: no connection was made, or the server
        refused it (408, 409, 429); when no connection was made, one with a ``reconnect_until`` is retried only before
        it, at most ``RetryPolicy.reconnect_max_delay`` apart. The wait is ``RetryPolicy.pause``'s (the stops that
        clean up: ``time.sleep``; none: ``silence``'s, which a Stop may end), which may call the retry off. An attempt
        that got no answer is ``silence``'s.
        """
        method, url = request.method, self.redact(str(request.url.copy_with(query=None)))
        delay = self.retry.delay(attempt, response.headers if response is not None else None)
        reconnect_until = None  # no connection was made: its retries end then
        if response is not None:
            retry = self.retry.should_retry(response) and (call.idempotent or response.status_code in REFUSED)
            what = f"{response.status_code} {response.reason_phrase}"
        else:
            unsent = isinstance(error, UNSENT)
            retry = not isinstance(error, HOPELESS) and (unsent or call.idempotent)
            what = f"{type(error).__name__}: {self.redact(str(error)) or 'no response'}"
            if isinstance(error, httpx.UnsupportedProtocol):
                what += f" (the URL's scheme is {request.url.scheme!r}: the transport cannot send it; nothing was sent)"
            what += self._proxies.said(request.url)
            self.silence.failed(what)
            if unsent and call.reconnect_until is not None:
                delay, reconnect_until = min(delay, self.retry.reconnect_max_delay), call.reconnect_until
        now, more = time.monotonic(), retry and attempt < self.retry.max_retries
        # a wait that would pass the end passes it only when it is to be waited (retries spent: none is)
        shut = more and reconnect_until is not None and now + delay >= reconnect_until
        late = not shut and (now >= end or (more and now + delay >= end))
        off = ""  # why a retry the policy allowed was called off
        if more and not late and not shut:
            log.info("%s %s: %s; retry %d of %d in %.2f s", method, url, what, attempt + 1, self.retry.max_retries,
                     delay)  # fmt: skip
            if call.reconnect_until is not None:  # the stops that clean up always sleep
                time.sleep(delay)
                return
            if self.retry.pause is None:
                if not self.silence.wait(delay):
                    return
                off = CALLED_OFF
            elif not self.retry.called_off(delay, response.status_code if response is not None else None):
                return
            else:
                off = f"; the retry after attempt {attempt + 1} was called off (RetryPolicy.pause)"
        if "Authorization" in request.headers:  # the cause of what we raise keeps this request
            request.headers["Authorization"] = f"Bearer {redaction.MASK}"
        if response is not None:
            note = self.retry.unheeded(response.headers) + off
            if late and more:  # else it fails at once, saying only "429 ..."
                note += f"; not retried: the wait before a retry ({delay:.3g} s) would pass {limit}"
            if response.status_code == 404 and call.auth:  # a call of the API (not a presigned URL's)
                note += doubled_prefix(self.base_url)
            note += self._proxies.answered(request.url, response.status_code)  # a 407 is a proxy's, never the API's
            refused = self._bodies.status_error(request, response, self.base_url, note)
            refused.earlier_may_have_acted = acted
            raise refused
        cls = APITimeoutError if late or isinstance(error, httpx.TimeoutException) else APIConnectionError
        tries = f" (after {attempt + 1} attempts)" if attempt else ""
        if late or shut:
            tries += f"; {limit} passed" if late else "; its time to reconnect passed"
        cause = self._bodies.cause(error)  # None for one that quotes a key, which is then masked in place: the
        if error is not None:  # frames this passes through hold it (a traceback with locals would print it)
            self._bodies.mask(error)
        raise cls(what + tries + off, method=method, url=url, sent=not isinstance(error, UNSENT)) from cause

    def _parse(self, response: httpx.Response, model: type[M]) -> M:
        return self._bodies.parse(response, model)
