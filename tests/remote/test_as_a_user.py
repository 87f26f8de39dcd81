"""What a user meets with the remote client: base URLs as they are pasted or read, proxies from the environment."""

import httpx
import pytest

import rlnb
from rlnb.remote.client import APIClient
from tests.support.fake_api import KEY


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        (" http://rl.test", "holds whitespace at position 0"),  # went to the relative URL "/ http://rl.test/v1/rl/..."
        ("http://rl.test\n", "holds whitespace at position 14"),  # httpx.InvalidURL, naming no field
        ("http://rl.test\u00a0", "holds whitespace"),  # a no-break space copied from a web page
        ("http://rl.test\u200b", r"holds an unprintable character \(U\+200B\)"),
        ("http://[::1:8000", r"is no URL \(Invalid IPv6 URL\)"),  # a bare ValueError("Invalid IPv6 URL")
        ("http://rl.test:99999", r"is no URL \(Port out of range"),
    ],
)
def test_a_base_url_with_whitespace_or_that_no_url_parser_takes_is_refused_naming_it(url, problem, monkeypatch):
    """``" http://host"`` passed the check (urlsplit strips the ends) and every call went to a relative URL, failed
    "missing an 'http://' protocol" after 6 tries, its create taken for one that may have acted; a trailing newline
    (a URL read from a file, or ``$TOGETHER_BASE_URL`` so set) raised httpx's ``InvalidURL`` naming no field."""
    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda request: sent.append(request) or httpx.Response(500))
    with pytest.raises(ValueError, match=rf"^the target \(the base_url\) {problem}"):
        rlnb.connect(url, api_key=KEY, transport=transport, record=False, max_retries=0)
    with pytest.raises(ValueError, match=rf"^base_url {problem}"):
        APIClient(url, api_key=KEY, transport=transport)
    monkeypatch.setenv("TOGETHER_BASE_URL", url)
    with pytest.raises(ValueError, match=rf"^TOGETHER_BASE_URL {problem}"):
        APIClient(api_key=KEY, transport=transport)
    assert not sent


@pytest.mark.parametrize(
    ("url", "sent_to"),
    [
        ("http://rl.test/", "http://rl.test/v1/rl/supported-models"),
        ("http://rl.test/proxy/", "http://rl.test/proxy/v1/rl/supported-models"),
        ("http://[::1]:8000", "http://[::1]:8000/v1/rl/supported-models"),
        ("HTTPS://RL.test", "https://rl.test/v1/rl/supported-models"),
    ],
)
def test_base_urls_as_users_write_them_reach_the_api_with_the_key(url, sent_to):
    """A trailing slash, a path prefix (a gateway), an IPv6 literal and an upper-case scheme are URLs all the same."""
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"data": []})

    with APIClient(url, api_key=KEY, transport=httpx.MockTransport(answer)) as client:
        client.supported_models()
    assert [str(r.url) for r in sent] == [sent_to]
    assert sent[0].headers["Authorization"] == f"Bearer {KEY}"
