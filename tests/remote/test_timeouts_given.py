"""An ``httpx.Timeout`` given as ``timeout=`` is checked field by field, as a plain number of seconds is."""

import math

import httpx
import pytest

import rlnb
from rlnb.remote.client import APIClient
from tests.support.fake_api import BASE, KEY


@pytest.mark.parametrize(
    ("timeout", "field"),
    [
        (httpx.Timeout(-1), "connect"),  # every request: the socket's bare "Timeout value out of range"
        (httpx.Timeout(math.nan), "connect"),
        (httpx.Timeout(0), "connect"),  # every connect failed, retried, as "Operation now in progress"
        (httpx.Timeout(5, read=-3), "read"),
        (httpx.Timeout(5, pool=math.inf), "pool"),
    ],
)
def test_a_timeout_group_out_of_range_is_refused_naming_its_field_before_anything_is_sent(timeout, field):
    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda request: sent.append(request) or httpx.Response(200, json={"data": []}))
    with pytest.raises(ValueError, match=rf"^timeout\.{field} must be a finite number of seconds .*None: no limit"):
        APIClient(BASE, KEY, timeout=timeout, transport=transport)
    with pytest.raises(ValueError, match=rf"^timeout\.{field} must be"):
        rlnb.connect(BASE, api_key=KEY, timeout=timeout, transport=transport, record=False)
    assert sent == []


def test_a_timeout_group_of_none_or_positive_seconds_is_taken():
    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda request: sent.append(request) or httpx.Response(200, json={"data": []}))
    for timeout in (httpx.Timeout(None), httpx.Timeout(5, read=None), httpx.Timeout(0.5, connect=2.0)):
        with APIClient(BASE, KEY, timeout=timeout, transport=transport) as client:
            client.supported_models()
    assert len(sent) == 3
