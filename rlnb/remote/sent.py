"""The credentials of each request rlnb sends to the API, masked from the moment it goes out.

An ``http_client`` of the user's own may gain credentials after rlnb's client is made (a header or a cookie set on it,
a cookie the server sets), and an ``auth=`` flow (Digest, a custom ``httpx.Auth``) writes its own only as the request
goes out: read once from the client's configuration, none of them was masked, and a server that echoed the request put
them in an error, a log line or the run folder. ``install`` puts ``see_request`` among the client's request hooks,
which httpx calls with each request as it goes to the transport (after each round of the auth flow), and
``see_answer`` among its response hooks, called before an answer's body is read (its ``Set-Cookie``; a hook of the
user's after rlnb's may have added to the request). They read rlnb's requests to the API only (``MARK``; a presigned
URL's query is its signature, and a storage host gets no credential) and remember what they find
(``_secrets.remember``). httpcore logs an answer's headers (DEBUG) before any hook sees them: ``HeaderLogFilter``
masks the credentials (a ``Set-Cookie``) among the headers an HTTP logger's record lists.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import re
from collections.abc import Iterable
from typing import Any

from rlnb import _secrets

MARK = "rlnb_built_headers"
"""The request extension ``Caller._build`` sets on a request to the API: the names of the headers it was built with.
A header the request carries that is not among them was written by an ``auth=`` flow (or a request hook), and is
taken for a credential whatever its name (a custom signer's ``X-Sig``)."""

CREDENTIAL_WORDS = frozenset(
    {"authorization", "auth", "token", "key", "apikey", "secret", "password", "cookie", "signature", "credential"}
)
"""Words of a header's, a cookie's or a query parameter's name (split at ``-``, ``_`` and ``.``) that make its value a
credential (``Authorization``, ``X-Api-Key``, ``X-Auth-Token``, ``Helicone-Auth``, ``X-Api-Key-V2``,
``X-Ms-Authorization-Auxiliary``, ``Cookie``, ``X-Signature``, ``?api_key=``), unless a word after the last of them
says the value is about the credential (``ABOUT_WORDS``)."""
ABOUT_WORDS = frozenset({"id", "scheme", "type", "name", "provider", "expires", "expiry", "expiration", "issuer"})
"""Words that, after a credential word, name what the value says of it, not the credential: ``X-Api-Key-Id``,
``X-Auth-Scheme``, ``X-Auth-Token-Expires`` (masking those hid harmless words in every later message)."""
OTHER_KEYS = frozenset({"idempotency", "cache"})
"""Words that, before a credential word, say the value keys something else: ``Idempotency-Key``, which rlnb writes on
every operation (masked, a server's "duplicate idempotency key ..." hid it), ``X-Cache-Key``."""
PROOFS = frozenset({"response", "signature", "credential"})
"""The parameters of an ``Authorization`` value that prove the secret: Digest's ``response``, AWS's ``Signature`` and
``Credential``."""
CREDENTIAL_LENGTH = 16
"""The shortest value of a cookie whose name says nothing of a credential that is taken for one (a session cookie is
longer; ``consent=accepted`` or ``theme=training`` would mask a word in every message). A value named as a credential
is one from ``_secrets.MIN_LENGTH`` characters, as rlnb's own key."""


def says_credential(name: str) -> bool:
    """Whether ``name`` (a header's, cookie's or query parameter's) names a credential (``CREDENTIAL_WORDS``, not
    ``ABOUT_WORDS`` after them nor ``OTHER_KEYS``)."""
    words = re.split(r"[-_.]", name.strip().lower())
    at = [i for i, word in enumerate(words) if word in CREDENTIAL_WORDS]
    return bool(at) and not ABOUT_WORDS.intersection(words[at[-1] + 1 :]) and not OTHER_KEYS.intersection(words)


def credentials(headers: Iterable[tuple[str, str]], added: frozenset[str] = frozenset()) -> list[str]:
    """The credentials among ``headers``: the key each header named as one (or among ``added``) carries (``_parts``),
    and a cookie's values (``cookie_values``)."""
    found: list[str] = []
    for name, value in headers:
        if name.lower() in ("cookie", "set-cookie"):
            found += cookie_values(value.split(";") if name.lower() == "cookie" else value.split(";")[:1])
        elif says_credential(name) or name.lower() in added:
            found += [v for v in _parts(value) if len(v) >= _secrets.MIN_LENGTH]
    return list(dict.fromkeys(found))


def cookie_values(pairs: Iterable[str]) -> list[str]:
    """The values of cookies (``name=value`` pairs) that are credentials: one whose name says so or names a session
    (``sessionid``, ``JSESSIONID``, ``connect.sid``) from ``_secrets.MIN_LENGTH`` characters, any from
    ``CREDENTIAL_LENGTH``."""
    found = []
    for pair in pairs:
        name, _, value = pair.partition("=")
        value = value.strip().strip('"')
        words = re.split(r"[-_.]", name.strip().lower())
        named = says_credential(name) or any("sess" in word or word == "sid" for word in words)
        if len(value) >= (_secrets.MIN_LENGTH if named else CREDENTIAL_LENGTH):
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
    """A request hook: remember the credentials of a request to the API (an ``httpx`` or ``httpx2`` one) as it goes
    to the transport: its headers (those written since ``Caller._build``, whatever their names) and its query."""
    built = request.extensions.get(MARK)
    if built is None:
        return
    added = frozenset(request.headers.keys()) - built
    found = credentials(request.headers.multi_items(), added)
    found += [v for k, v in request.url.params.multi_items() if says_credential(k) and len(v) >= _secrets.MIN_LENGTH]
    for value in found:
        _secrets.remember(value)


def see_answer(response: Any) -> None:
    """A response hook: remember the credentials of the request it answers (again) and the cookies it sets, before
    its body is read."""
    if response.request.extensions.get(MARK) is None:
        return
    see_request(response.request)
    for value in credentials(("set-cookie", line) for line in response.headers.get_list("set-cookie")):
        _secrets.remember(value)


def install(http: Any) -> None:
    """``see_request`` and ``see_answer`` among ``http``'s event hooks, once."""
    for kind, hook in (("request", see_request), ("response", see_answer)):
        hooks = http.event_hooks[kind]
        if hook not in hooks:
            hooks.append(hook)


_LISTED = re.compile(r"\(b'([^'\\]*)', b'((?:[^'\\]|\\.)*)'\)")
"""A header as httpcore lists one in a log line: ``(b'set-cookie', b'session=...; Path=/')``."""


class HeaderLogFilter(logging.Filter):
    """Masks, in a record that lists headers, the credentials among them (``credentials``): httpcore's DEBUG line
    of an answer's headers is logged before ``see_answer`` has remembered its ``Set-Cookie``."""

    def filter(self, record: logging.LogRecord) -> bool:
        """The record, its listed credentials masked; never dropped."""
        message = record.getMessage()
        found = credentials(_LISTED.findall(message)) if "(b'" in message else []
        if found:
            record.msg, record.args = _secrets.redact_keys(message, found), None
        return True


_FILTER = HeaderLogFilter()
for _name in _secrets.HTTP_LOGGERS:
    logging.getLogger(_name).addFilter(_FILTER)
