"""A create whose answer is lost while this process's other creates (a sweep's concurrent trials) make matching
objects: those others' objects, named by their own creates' answers, are not candidates. The lost one listed all of
them as "matching", failed, and told the user to stop resources the other trials were using. Against the real app."""

import threading

import httpx
import pytest

import rlnb
from rlnb import wire
from rlnb.remote import recover
from rlnb.remote.client import APIClient
from tests.support.lost_answers import RESOURCES, LoseAnswer, listed
from tests.support.server import app_client

TRIALS = 3


class Together(LoseAnswer):
    """Loses the first resource create's answer; each of the ``TRIALS`` resource creates is answered only once all
    have acted, so that the lost one's listing finds its siblings' resources."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.acted = threading.Barrier(TRIALS, timeout=60)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path == RESOURCES:
            answer = self.c.request(request.method, str(request.url), content=request.read(), headers=request.headers)
            self.acted.wait()
            self.posts += 1
            if self.posts == 1:
                raise self.failure
            return httpx.Response(answer.status_code, headers=answer.headers.multi_items(), content=answer.content)
        return super().__call__(request)


def test_a_lost_create_among_concurrent_ones_adopts_its_own_not_a_siblings(tmp_path):
    with app_client(tmp_path) as c:
        lossy = Together(c, RESOURCES, httpx.ReadTimeout("timed out"))
        opened: list[rlnb.Session] = []
        failed: list[BaseException] = []

        def trial() -> None:
            try:  # one http_client for the three (a session uses it until it closes: closed at the end)
                opened.append(rlnb.connect("http://testserver", base_model="rlnb/tiny", http_client=http,
                                           record=False, max_retries=0))  # fmt: skip
            except BaseException as exc:  # noqa: BLE001 - said by the assertion below
                failed.append(exc)

        http = lossy.client()
        threads = [threading.Thread(target=trial) for _ in range(TRIALS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert failed == [] and len(opened) == TRIALS
        mine = [s.info().model_resources_id for s in opened]
        assert sorted(mine) == sorted(r["id"] for r in listed(c, RESOURCES))  # each its own: none shared, no orphan
        for s in opened:
            s.close()
        http.close()
        assert {r["status"] for r in listed(c, RESOURCES)} == {wire.ModelResourcesStatus.STOPPED}


def resource(rid: str) -> wire.ModelResources:
    return wire.ModelResources.model_construct(id=rid)


def test_when_still_ambiguous_the_error_names_the_ids_this_processs_other_creates_got():
    """Two unknown matches stay ambiguous; the sibling's, which its create's answer named, is said to be another's."""
    client = APIClient("http://rl.test", transport=httpx.MockTransport(lambda request: httpx.Response(404)))
    recover.create_once(lambda: resource("mr-sibling"), lambda since: [], client, "a model resource",
                        "list_model_resources", lambda made: None)  # fmt: skip

    def lost() -> wire.ModelResources:
        raise rlnb.APITimeoutError("POST /model-resources: timed out", sent=True)

    found = [resource(i) for i in ("mr-a", "mr-sibling", "mr-b")]
    with pytest.raises(rlnb.RlnbError) as info:
        recover.create_once(lost, lambda since: found, client, "a model resource", "list_model_resources",
                            lambda made: None)  # fmt: skip
    said = str(info.value)
    assert "2 matching ones were created since it was sent: mr-a, mr-b" in said, said
    assert "mr-sibling, which another create of this process got (a sweep's other trial), is not one" in said, said
