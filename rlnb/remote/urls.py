"""``check_base_url``: the one check of a base URL, shared by ``APIClient`` (``base_url``, ``$TOGETHER_BASE_URL``) and
``rlnb.connect`` / ``sweep`` (their ``target``, before anything quotes it). Apart from ``calls`` so that a local
session's check does not import httpx.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from rlnb import _secrets


def check_base_url(url: str, name: str) -> str:
    """``url`` as a base URL: no credentials (``_secrets.check_url``); no query or fragment, which the API's paths
    would be appended to (``https://host/?api_key=sk-...`` sent every call to ``/`` with the key in its query, and
    failed "404" naming neither); an http(s) scheme and a host (``"http://"``, an unset variable in an f-string, was
    sent 6 times over 14 s, then failed "missing an 'http://' protocol", which it had). The ``ValueError`` names
    ``name`` and never shows the query."""
    _secrets.check_url(url, name)
    parts = urlsplit(url)
    if parts.query or parts.fragment or url.rstrip().endswith(("?", "#")):
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
