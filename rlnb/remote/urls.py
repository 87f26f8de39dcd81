"""``check_base_url``: the one check of a base URL, shared by ``APIClient`` (``base_url``, ``$TOGETHER_BASE_URL``) and
``rlnb.connect`` / ``sweep`` (their ``target``, before anything quotes it), and ``warn_cleartext``, the client's
warning that its key would cross the network unencrypted. Apart from ``calls`` so that a local session's check does not
import httpx.
"""

from __future__ import annotations

import warnings
from urllib.parse import urlsplit

from rlnb._hosts import stays_here
from rlnb.errors import CleartextKeyWarning, user_stacklevel
from rlnb.secrets import redaction


def check_base_url(url: str, name: str) -> str:
    """``url`` as a base URL: no credentials (``redaction.check_url``); no query or fragment, which the API's paths
    would be appended to (``https://host/?api_key=sk-...`` would send every call to ``/`` with the key in its query,
    and fail "404" naming neither); no whitespace or unprintable character (``" http://host"`` would go to a relative
    URL, ``"http://host\\n"`` raise httpx's ``InvalidURL`` naming no field); a port in range and brackets that close;
    an http(s) scheme and a host (``"http://"``, an unset variable in an f-string, would be sent 6 times over 14 s,
    then fail "missing an 'http://' protocol", which it has). The ``ValueError`` names ``name`` and never shows the
    query."""
    for i, char in enumerate(url):  # urlsplit strips them at the ends, so the checks below would pass; httpx does not
        if char.isspace() or not char.isprintable():  # a zero-width space pasted from a page too
            what = "whitespace" if char.isspace() else f"an unprintable character (U+{ord(char):04X})"
            raise ValueError(
                f"{name} holds {what} at position {i} of its {len(url)} characters (a URL read from a file or pasted "
                "keeps its newline or spaces: strip it)"
            )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port past 65535 or not a number
    except ValueError as exc:  # "Invalid IPv6 URL", "Port out of range 0-65535": named, not bare
        raise ValueError(f"{name} is no URL ({exc}): use an http(s)://host[:port] URL") from None
    redaction.check_url(url, name)
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        shown = parts._replace(query="", fragment="").geturl()
        raise ValueError(
            f"{name} must have no query (?...) or fragment (#...): rlnb appends the API's paths to it (got {shown} "
            "and more); pass the API key as api_key"
        )
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{name} must be an http(s)://host[:port] URL, got {url!r}")
    if not parts.hostname:
        raise ValueError(f"{name} {url!r} names no host: use an http(s)://host[:port] URL")
    return url


def warn_cleartext(url: str) -> None:
    """A ``CleartextKeyWarning`` when ``url`` (a checked base URL, which a key is sent to) is plain http:// to another
    machine: the Authorization header crosses the network readable by anyone on the path (a colleague's ``rlnb serve``
    over the office network, a hotel Wi-Fi). It names the host, never the key; https and this machine's loopback (a
    local ``rlnb serve``, an SSH tunnel's end) are quiet."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "http" or stays_here(parts.hostname or ""):
        return
    warnings.warn(
        CleartextKeyWarning(
            f"rlnb: the API key is sent to {parts.netloc} over plain http://, unencrypted: anyone on the network "
            "between here and there can read it and use it. Use an https:// URL, or reach the server through an SSH "
            f"tunnel (ssh -L 8000:127.0.0.1:8000 {parts.hostname}, then http://127.0.0.1:8000); on a network you "
            "trust, silence it with warnings.filterwarnings('ignore', category=rlnb.CleartextKeyWarning)"
        ),
        stacklevel=user_stacklevel(),
    )
