"""The credentials of each request rlnb sends to the API, masked from the moment it goes out.

An ``http_client`` of the user's own may gain credentials after rlnb's client is made (a header or a cookie set on it,
a cookie the server sets), and an ``auth=`` flow (Digest, a custom ``httpx.Auth``) writes its own only as the request
goes out: read once from the client's configuration, none of them was masked, and a server that echoed the request put
them in an error, a log line or the run folder. ``install`` puts ``see_request`` among the client's request hooks,
which httpx calls with each request as it goes to the transport (after each round of the auth flow), and
``see_answer`` among its response hooks, called before an answer's body is read (its ``Set-Cookie``; a hook of the
user's after rlnb's may have added to the request). They read rlnb's requests to the API only (``MARK``; a presigned
URL's query is its signature, and a storage host gets no credential) and remember what they find
(``redaction.remember``). httpcore logs an answer's headers (DEBUG) before any hook sees them: ``HeaderLogFilter``
masks the credentials (a ``Set-Cookie``) among the headers an HTTP logger's record lists. What an ``http_client``
adds as configured (``configured``) and what its proxies add past every hook (``proxied``) are read when rlnb's
client is made.
"""

from __future__ import annotations

import ast
import base64
import contextlib
import logging
import re
from collections.abc import Iterable
from typing import Any

import httpx

from rlnb.secrets import redaction

MARK = "rlnb_built_headers"
"""The request extension ``Caller._build`` sets on a request to the API: the names of the headers it was built with.
A header not among them that ``see_request``, the first request hook, finds was written by an ``auth=`` flow (httpx
runs the flow, then the hooks in order), and is taken for a credential (a custom signer's ``X-Sig``) unless its name
says it is no secret (``NOT_SECRET_WORDS``); one a user's request hook writes only where its name says so."""
HOOKED = "rlnb_hooked_headers"
"""The request extension ``see_answer`` sets: the headers request hooks added (not the auth flow's, in a next round)."""

CREDENTIAL_WORDS = frozenset(
    {"authorization", "auth", "token", "key", "apikey", "secret", "password", "cookie", "signature", "credential"}
)
"""Words of a header's, a cookie's or a query parameter's name (``_words``; or a word ending in one of ``ENDINGS``)
that make its value a credential (``Authorization``, ``X-Api-Key``, ``X-Auth-Token``, ``Helicone-Auth``,
``X-Api-Key-V2``, ``X-Ms-Authorization-Auxiliary``, ``Cookie``, ``X-Signature``, ``?api_key=``, ``accessToken``),
unless a word after the last of them says the value is about the credential (``ABOUT_WORDS``)."""
ABOUT_WORDS = frozenset({"id", "scheme", "type", "name", "provider", "expires", "expiry", "expiration", "issuer"})
"""Words that, after a credential word, name what the value says of it, not the credential: ``X-Api-Key-Id``,
``X-Auth-Scheme``, ``X-Auth-Token-Expires`` (masking those hid harmless words in every later message)."""
OTHER_KEYS = frozenset({"idempotency", "cache"})
"""Words that, before a credential word, say the value keys something else: ``Idempotency-Key``, which rlnb writes on
every operation (masked, a server's "duplicate idempotency key ..." hid it), ``X-Cache-Key``."""
NOT_SECRET_WORDS = frozenset(
    {"id", "date", "time", "timestamp", "expires", "traceparent", "tracestate", "baggage", "trace", "span",
     "sha256", "digest", "route", "routing", "model", "region", "version", "content", "accept", "host", "agent"}
)  # fmt: skip
"""Words of the name of a header an ``auth=`` flow writes that say it is no secret: an id, a date, a trace, a digest
of the body, a route (SigV4's ``X-Amz-Date`` and ``X-Amz-Content-Sha256``): masked, API Gateway's clock-skew answer
read ``Signature expired: *** is now ...`` and the digest of an empty body was masked everywhere."""
PROOFS = frozenset({"response", "signature", "credential"})
"""The parameters of an ``Authorization`` value that prove the secret: Digest's ``response``, AWS's ``Signature`` and
``Credential``."""
CREDENTIAL_LENGTH = 16
"""The shortest value of a cookie whose name says nothing of a credential that is taken for one (a session cookie is
longer; ``consent=accepted`` or ``theme=training`` would mask a word in every message). A value named as a credential
is one from ``redaction.MIN_LENGTH`` characters, as rlnb's own key."""


def says_credential(name: str) -> bool:
    """Whether ``name`` (a header's, cookie's or query parameter's) names a credential (``CREDENTIAL_WORDS``, not
    ``ABOUT_WORDS`` after them nor ``OTHER_KEYS``)."""
    words = _words(name)
    at = [i for i, word in enumerate(words) if word in CREDENTIAL_WORDS or word.endswith(ENDINGS)]
    return bool(at) and not ABOUT_WORDS.intersection(words[at[-1] + 1 :]) and not OTHER_KEYS.intersection(words)


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
"""Where a camelCase name's words meet: ``accessToken``, ``X-AuthToken``, ``APIKey``."""
ENDINGS = ("token", "secret", "password", "apikey")
"""How a word run together with another that names a credential ends (``xapikey``, ``authtoken``); ``key`` is not
one (``hotkey``)."""


def _words(name: str) -> list[str]:
    """The words of a header's, cookie's or query parameter's name, lowercase: split at ``-``, ``_``, ``.`` and
    camelCase boundaries (``accessToken`` was one word, no credential word, and its value was shown whole)."""
    return re.split(r"[-_.]", _CAMEL.sub("-", name.strip()).lower())


def credentials(headers: Iterable[tuple[str, str]], added: frozenset[str] = frozenset()) -> list[str]:
    """The credentials among ``headers``: the key each header named as one (or among ``added``, those an ``auth=``
    flow wrote) carries (``_parts``), and a cookie's values (``cookie_values``)."""
    found: list[str] = []
    for name, value in headers:
        if name.lower() in ("cookie", "set-cookie"):
            found += cookie_values(value.split(";") if name.lower() == "cookie" else value.split(";")[:1])
        elif says_credential(name) or name.lower() in added:
            found += [v for v in _parts(value) if len(v) >= redaction.MIN_LENGTH]
    return list(dict.fromkeys(found))


def cookie_values(pairs: Iterable[str]) -> list[str]:
    """The values of cookies (``name=value`` pairs) that are credentials: one whose name says so or names a session
    (``sessionid``, ``JSESSIONID``, ``connect.sid``) from ``redaction.MIN_LENGTH`` characters, any from
    ``CREDENTIAL_LENGTH``."""
    found = []
    for pair in pairs:
        name, _, value = pair.partition("=")
        value = value.strip().strip('"')
        words = _words(name)
        named = says_credential(name) or any("sess" in word or word == "sid" for word in words)
        if len(value) >= (redaction.MIN_LENGTH if named else CREDENTIAL_LENGTH):
            found.append(value)
    return found


_PARAM = re.compile(r'([\w-]+)\s*=\s*(?:"([^"]*)"|([^\s,]+))')


def _parts(value: str) -> list[str]:
    """A credential header's key: the value after its scheme (``Bearer sk-...``'s, so that an echo reads
    ``Bearer ***``), a Basic one's password too; of a scheme with parameters (Digest, AWS), the ``PROOFS`` among them,
    else the value whole."""
    words = value.split()
    proofs = [
        quoted or bare
        for name, quoted, bare in _PARAM.findall(value)
        if name.lower() in PROOFS or says_credential(name)
    ]
    if len(words) > 2:
        return proofs or [value.strip()]
    found = [*words[-1:], *proofs]
    if len(words) == 2 and words[0].lower() == "basic":
        with contextlib.suppress(ValueError):  # not base64, or not UTF-8: the value is masked as sent
            found.append(base64.b64decode(words[1], validate=True).decode().partition(":")[2])
    return found


def see_request(request: Any) -> None:
    """The first request hook: remember the credentials of a request to the API (an ``httpx`` or ``httpx2`` one) as
    it goes to the transport, the headers its ``auth=`` flow wrote included (``MARK``)."""
    built = request.extensions.get(MARK)
    if built is not None:
        hooked = request.extensions.get(HOOKED, frozenset())
        request.extensions[AUTHED] = frozenset(request.headers.keys()) - built - hooked
        _remember(request)


AUTHED = "rlnb_auth_headers"
"""The request extension ``see_request`` sets: the headers the ``auth=`` flow wrote."""


def _authed(request: Any) -> frozenset[str]:
    """The headers ``request``'s ``auth=`` flow wrote whose names do not say they are no secret."""
    return frozenset(
        name for name in request.extensions.get(AUTHED, ()) if not NOT_SECRET_WORDS.intersection(_words(name))
    )


def _remember(request: Any) -> None:
    """Remember the credentials of ``request``: its headers (``credentials``, ``_authed``) and its query."""
    found = credentials(request.headers.multi_items(), _authed(request))
    found += [v for k, v in request.url.params.multi_items() if says_credential(k) and len(v) >= redaction.MIN_LENGTH]
    for value in found:
        redaction.remember(value)


def see_answer(response: Any) -> None:
    """A response hook: remember the credentials of the request it answers (again) and the cookies it sets, before
    its body is read."""
    request = response.request
    built = request.extensions.get(MARK)
    if built is None:
        return
    request.extensions[HOOKED] = frozenset(request.headers.keys()) - built - request.extensions.get(AUTHED, set())
    _remember(request)
    for value in credentials(("set-cookie", line) for line in response.headers.get_list("set-cookie")):
        redaction.remember(value)


def install(http: Any) -> None:
    """``see_request`` first among ``http``'s request hooks (before a user's writes to the request), ``see_answer``
    among its response hooks, once: cheap enough for each request (hooks that ``event_hooks = ...`` replaced)."""
    hooks = http.event_hooks["request"]
    if not hooks or hooks[0] is not see_request:
        with contextlib.suppress(ValueError):
            hooks.remove(see_request)
        hooks.insert(0, see_request)
    if see_answer not in http.event_hooks["response"]:
        http.event_hooks["response"].append(see_answer)


def configured(http: httpx.Client, url: str) -> list[tuple[str, str]]:
    """What an ``http_client`` adds to rlnb's requests to ``url`` as configured: its default headers, its cookies as
    ``Cookie`` headers, and the ``Authorization`` its ``auth=`` (user, password) writes."""
    sent = [*http.headers.items(), *(("cookie", f"{c.name}={c.value or ''}") for c in http.cookies.jar)]
    if isinstance(http.auth, httpx.BasicAuth):  # a tuple given as auth= is one; its flow only adds the header
        request = next(http.auth.sync_auth_flow(httpx.Request("GET", url)))
        sent.append(("authorization", request.headers["authorization"]))
    return sent


def proxied(http: Any) -> list[tuple[str, str]]:
    """The headers the proxies of ``http`` (an ``httpx.Client``: its ``proxy=``, ``mounts=``, a transport's) add to
    each request they carry: the ``Proxy-Authorization`` httpcore makes of a proxy URL's user info, an
    ``httpx.Proxy``'s ``headers``. httpcore writes them past every hook of httpx's, where ``see_request`` never sees
    them; httpx keeps them only in its transports' pools (no public way to them), read where they are found."""
    transports = [getattr(http, "_transport", None), *getattr(http, "_mounts", {}).values()]
    pools = [getattr(transport, "_pool", None) for transport in transports]
    return [
        (name.decode("latin-1"), value.decode("latin-1"))
        for pool in pools
        for name, value in getattr(pool, "_proxy_headers", None) or ()
    ]


_LISTED = re.compile(r"""\(b(['"])((?:(?!\1)[^\\]|\\.)*)\1, b(['"])((?:(?!\3)[^\\]|\\.)*)\3\)""")
"""A header as httpcore lists one in a log line: ``(b'set-cookie', b'session=...; Path=/')``, or ``b"..."`` where
the value holds a ``'``."""


def _listed(message: str) -> list[tuple[str, str]]:
    """The headers ``message`` lists, unescaped (``\\'``, ``\\x..``) as ``credentials`` reads them."""
    return [(_unescaped(q, name), _unescaped(r, value)) for q, name, r, value in _LISTED.findall(message)]


def _unescaped(quote: str, text: str) -> str:
    """``text`` as the bytes literal ``b<quote>text<quote>`` holds it; as it is where it is none (a line that only
    looks like httpcore's)."""
    try:
        return str(ast.literal_eval(f"b{quote}{text}{quote}").decode("latin-1"))
    except (ValueError, SyntaxError):
        return text


class HeaderLogFilter(logging.Filter):
    """Masks, in a record that lists headers, the credentials among them (``credentials``): httpcore's DEBUG line
    of an answer's headers is logged before ``see_answer`` has remembered its ``Set-Cookie``."""

    def filter(self, record: logging.LogRecord) -> bool:
        """The record, its listed credentials masked; never dropped, and never raising: a record whose message cannot
        be formatted goes on to the handler's ``handleError``, not into the caller's log call."""
        if not record.args and "(b" not in str(record.msg):  # httpcore's lines come formatted: most are read once
            return True
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - the handler reports it (logging's handleError), as without this filter
            return True
        found = credentials(_listed(message)) if "(b" in message else []
        if found:
            record.msg, record.args = redaction.redact_keys(message, found), None
        return True


_FILTER = HeaderLogFilter()
for _name in redaction.HTTP_LOGGERS:
    logging.getLogger(_name).addFilter(_FILTER)
