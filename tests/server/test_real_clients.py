"""What real clients make of ``rlnb serve`` (a real uvicorn process): the SDK 3.1.1's ``ModelResourcesClient.stop`` of
a stopped resource reads the 400 as "already stopped" (the low-level ``stop`` raises it as ``BadRequestError``), and a
HEAD of ``/health`` (``wget --spider``, a common container health check) answers 200 without a body."""

import shutil
import subprocess

import httpx
import pytest

together = pytest.importorskip("together")

from together import BadRequestError, Together  # noqa: E402
from together.post_training import ModelResourcesClient  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]  # a server process; the SDK retries with backoff


@pytest.fixture(autouse=True)
def _sdk_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ambient Together configuration may leak in (and nothing may reach api.together.ai)."""
    for var in ("TOGETHER_API_KEY", "TOGETHER_BASE_URL", "TOGETHER_PROJECT_ID", "TOGETHER_CUSTOM_HEADERS"):
        monkeypatch.delenv(var, raising=False)


def test_the_sdks_stop_of_a_stopped_resource_reads_it_instead_of_raising(server: str):
    with Together(api_key="k", base_url=server, max_retries=0) as client:
        res = client.post_training.model_resources.create(base_model="rlnb/tiny")
        assert client.post_training.model_resources.stop(res.id).status == "MODEL_RESOURCES_STATUS_STOPPED"
        with pytest.raises(BadRequestError, match="already MODEL_RESOURCES_STATUS_STOPPED"):
            client.post_training.model_resources.stop(res.id)
    again = ModelResourcesClient.attach(model_resources_id=res.id, api_key="k", base_url=server).stop()
    assert again is not None and again.status == "MODEL_RESOURCES_STATUS_STOPPED"


def test_a_head_of_health_is_a_200_without_a_body(server: str):
    r = httpx.head(f"{server}/health", timeout=60)
    assert r.status_code == 200 and r.content == b""
    assert int(r.headers["content-length"]) == len(httpx.get(f"{server}/health", timeout=60).content)


@pytest.mark.skipif(shutil.which("wget") is None, reason="no wget here")
def test_wget_spider_reads_health_as_up(server: str):
    """GNU wget's ``--spider`` asks with HEAD: 405 made it exit 8 (a server error), as for a server that is down."""
    spider = ["wget", "--spider", "--no-proxy", "-q", "--timeout=60", "--tries=1", f"{server}/health"]
    done = subprocess.run(spider, timeout=90)
    assert done.returncode == 0
