"""``CleartextKeyWarning``: a key sent over plain http:// to another machine crosses the network readable by anyone on
the path (``rlnb.connect("http://colleague-box:8000", api_key=...)`` said nothing). Warned once per client, naming the
host, never the key; https, this machine's loopback and a client without a key are quiet."""

import warnings

import httpx
import pytest

import rlnb
from rlnb.remote.client import APIClient
from tests.support.fake_api import FAST_POLL, KEY, FakeAPI


def answering(sent: list[httpx.Request]) -> httpx.MockTransport:
    return httpx.MockTransport(lambda request: sent.append(request) or httpx.Response(200, json={"data": []}))


@pytest.mark.parametrize("url", ["http://10.1.2.3:8000", "http://gpu-box.lan", "HTTP://Colleague.example:8000/rl"])
def test_a_key_sent_over_plain_http_to_another_host_warns_once_naming_the_host_not_the_key(url):
    sent: list[httpx.Request] = []
    with pytest.warns(rlnb.CleartextKeyWarning) as caught:
        client = APIClient(url, api_key=KEY, transport=answering(sent))
    with client, warnings.catch_warnings():
        warnings.simplefilter("error")  # once per client: its calls say nothing more
        client.supported_models()
        client.supported_models()
    assert len(caught) == 1 and caught[0].filename == __file__  # the user's line
    said = str(caught[0].message)
    assert httpx.URL(url).netloc.decode() in said.lower() and "unencrypted" in said and "https://" in said
    assert KEY not in said and KEY[3:] not in said
    assert [r.headers["Authorization"] for r in sent] == [f"Bearer {KEY}"] * 2  # warned, and still sent as asked


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("https://rl.test", KEY),
        ("http://127.0.0.1:8000", KEY),  # a local rlnb serve, or an SSH tunnel's end
        ("http://127.9.8.7:8000", KEY),  # all of 127.0.0.0/8
        ("http://[::1]:8000", KEY),
        ("http://LocalHost:8000", KEY),
        ("http://[::ffff:127.0.0.1]:8000", KEY),
        ("http://0.0.0.0:8000", KEY),  # what a server bound to every interface prints; the kernel routes it here
        ("http://[::]:8000", KEY),
        ("http://10.1.2.3:8000", None),  # no key: nothing secret goes over the wire
    ],
)
def test_https_loopback_or_no_key_is_quiet(url, key):
    sent: list[httpx.Request] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with APIClient(url, api_key=key, transport=answering(sent)) as client:
            client.supported_models()
    assert len(sent) == 1


def test_a_key_from_the_environment_warns_too(monkeypatch):
    monkeypatch.setenv("TOGETHER_API_KEY", KEY)
    monkeypatch.setenv("TOGETHER_BASE_URL", "http://gpu-box.lan:8000")
    with pytest.warns(rlnb.CleartextKeyWarning, match=r"gpu-box\.lan:8000") as caught:
        APIClient(transport=answering([])).close()
    assert len(caught) == 1 and KEY not in str(caught[0].message)


def test_connect_over_plain_http_warns_once_at_the_users_line():
    """Through ``rlnb.connect``, the warning points at the notebook's line, and the session works as before."""
    fake = FakeAPI(ready_after=1)
    rid = fake.add_resource({"adam": {}})
    with pytest.warns(rlnb.CleartextKeyWarning, match="rl.test") as caught:
        s = rlnb.connect("http://rl.test", api_key=KEY, transport=httpx.MockTransport(fake), model_resources_id=rid,
                         ready_timeout=5, record=False, **FAST_POLL)  # fmt: skip
    with s:
        s.forward_backward([rlnb.samples.cross_entropy([1, 2, 3])]).result(timeout=10)
    assert len(caught) == 1 and caught[0].filename == __file__


@pytest.mark.parametrize("given", [{"headers": {"X-Api-Key": "k" * 20}}, {"auth": ("alice", "p" * 20)}])
def test_an_http_clients_credential_sent_over_plain_http_warns(given):
    http = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200)), **given)
    with pytest.warns(rlnb.CleartextKeyWarning, match="10.1.2.3"):
        APIClient("http://10.1.2.3:8000", http_client=http).close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        APIClient("http://10.1.2.3:8000", http_client=httpx.Client(headers={"Accept": "application/json"})).close()
    http.close()
