"""``extend_expiry``'s ``seconds``: the reference gives the endpoint no range (``{"seconds": int}``), so the client
refuses only what is certainly wrong — no positive integer — and sends the rest for the service to judge by its own
limits (it refused outside 60..86400, a range rlnb made up; ``rlnb serve`` keeps that one as its own)."""

import json

import httpx
import pytest

from rlnb.remote.client import APIClient

RESOURCE = {"id": "mr", "base_model": "m", "compute_config": {"num_generator_replicas": 1},
            "created_at": "2026-01-01T00:00:00Z", "created_by": "u", "inactive_timeout": 3600, "lora_enabled": True,
            "optimizer_config": {"adam": {}}, "status": "MODEL_RESOURCES_STATUS_READY", "status_details": {},
            "updated_at": "2026-01-01T00:00:00Z"}  # fmt: skip


def _client(sent):
    def handler(request):
        sent.append(json.loads(request.content))
        return httpx.Response(200, json=RESOURCE)

    return APIClient("https://rl.test", api_key="sk-test-12345678", transport=httpx.MockTransport(handler))


@pytest.mark.parametrize("seconds", [1, 30, 86401, 7 * 86400])
def test_a_positive_integer_is_sent_for_the_service_to_judge(seconds):
    sent = []
    with _client(sent) as c:
        assert c.extend_expiry("mr", seconds).id == "mr"
    assert sent == [{"seconds": seconds}]


@pytest.mark.parametrize("seconds", [0, -60, True, 60.0, 1.5, "600", None])
def test_no_positive_integer_is_refused_naming_seconds(seconds):
    sent = []
    with _client(sent) as c, pytest.raises(ValueError, match="seconds must be an integer >= 1"):
        c.extend_expiry("mr", seconds)
    assert sent == []
