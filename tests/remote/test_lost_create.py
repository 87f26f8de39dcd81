"""Creating a model resource or a session takes no Idempotency-Key: a create whose answer is lost after the
server acted is not sent again (that made a second, orphaned resource, or a 429 for the session slot the
first one took), and ``connect`` finds what it created by listing. Against the real app, in process."""

import json
import re

import httpx
import pytest

import rlnb
from rlnb import wire
from rlnb.remote import recover
from rlnb.remote.client import APIClient
from tests.support.fake_api import BASE, FAST_POLL, KEY, FakeAPI, error, quick
from tests.support.lost_answers import RESOURCES, SESSIONS, LoseAnswer, listed
from tests.support.server import app_client

LOST = {
    "disconnect": httpx.RemoteProtocolError("Server disconnected without sending a response."),
    "read timeout": httpx.ReadTimeout("timed out"),
    "502 from a proxy": error(502, "bad gateway"),
}


@pytest.mark.parametrize("path", [RESOURCES, SESSIONS], ids=["resource", "session"])
@pytest.mark.parametrize("failure", LOST.values(), ids=LOST.keys())
def test_a_lost_answer_to_a_create_is_not_resent_and_connect_finds_what_it_made(tmp_path, path, failure):
    with app_client(tmp_path) as c:
        lossy = LoseAnswer(c, path, failure)
        with lossy.client() as http:
            s = rlnb.connect("http://testserver", base_model="rlnb/tiny", http_client=http, record=False, max_retries=3)
            with s:
                assert s.info().status == wire.SessionStatus.RUNNING
                resource = s.info().model_resources_id
        assert lossy.posts == 1  # sent once: a second POST made a second resource, or a 429
        resources, sessions = listed(c, RESOURCES), listed(c, SESSIONS)
        assert [r["id"] for r in resources] == [resource]
        assert [x["model_resources_id"] for x in sessions] == [resource]
        assert {r["status"] for r in resources} == {wire.ModelResourcesStatus.STOPPED}  # close stopped it: no orphan
        assert {x["status"] for x in sessions} == {wire.SessionStatus.STOPPED}


def test_two_matching_resources_created_meanwhile_are_named_not_adopted(tmp_path):
    with app_client(tmp_path) as c:

        class AndAnother(LoseAnswer):
            def __call__(self, request: httpx.Request) -> httpx.Response:
                if request.method == "POST" and request.url.path == RESOURCES and not self.posts:
                    c.post("/model-resources", json={"base_model": "rlnb/tiny", "lora_enabled": False})
                return super().__call__(request)

        lossy = AndAnother(c, RESOURCES, httpx.ReadTimeout("timed out"))
        with (
            lossy.client() as http,
            pytest.raises(rlnb.RlnbError, match=r"2 matching ones were created since it was sent: mr-.*, mr-") as info,
        ):
            rlnb.connect("http://testserver", base_model="rlnb/tiny", http_client=http, record=False)
        assert isinstance(info.value.__cause__, rlnb.APITimeoutError) and lossy.posts == 1


def test_a_create_is_resent_only_when_the_server_surely_did_not_act():
    """No connection made, or a status that refuses it (429): sent again. A 503 or a read timeout: not."""
    calls = []

    def handler(script):
        def answer(request: httpx.Request) -> httpx.Response:
            calls.append(request)
            step = script.pop(0) if script else httpx.Response(200, json={"data": []})
            if isinstance(step, Exception):
                raise step
            return step

        return answer

    request = wire.CreateModelResourcesRequest(base_model="m")
    for script, sent in (
        ([httpx.ConnectError("refused"), error(429, "slow down"), error(400, "done")], 3),
        ([error(503, "acted, maybe")], 1),
        ([httpx.ReadTimeout("slow")], 1),
    ):
        calls.clear()
        transport = httpx.MockTransport(handler(script))
        with APIClient(BASE, KEY, transport=transport, **quick({})) as client, pytest.raises(rlnb.APIError):
            client.create_model_resources(request)
        assert len(calls) == sent, script


@pytest.mark.slow  # over half a second of deadlines or training: the fast tier stays under a minute
def test_a_create_whose_connection_was_refused_is_not_looked_for_as_lost(caplog):
    """A wrong port or a server not started: every attempt's connection was refused, so nothing was sent. rlnb
    still said "the answer to creating a model resource was lost (... Connection refused)" and listed the user's
    resources to find it (that failed too, and was said as well)."""
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with caplog.at_level("INFO", logger="rlnb"), pytest.raises(rlnb.APIConnectionError) as refused:
        rlnb.connect(f"http://127.0.0.1:{port}", base_model="rlnb/tiny", record=False, max_retries=1)
    assert refused.value.sent is False and "Connect" in str(refused.value)
    assert not [r for r in caplog.records if "was lost" in r.getMessage()]


def test_a_create_the_server_acts_on_after_the_deadline_is_raised_with_how_to_find_what_it_made(tmp_path):
    """A server slower than the call's deadline creates the resource after rlnb gave up on the POST and listed
    nothing: ``connect`` raised a bare ``APITimeoutError``, and the resource (reserved GPUs) ran on, named nowhere. The
    error now says it may exist, and which call finds it; that call does."""
    with app_client(tmp_path) as c:
        late: list[httpx.Request] = []

        def slow(request: httpx.Request) -> httpx.Response:
            if request.method == "POST" and request.url.path == RESOURCES and not late:
                late.append(request)  # the server acts on it after the client's deadline
                raise httpx.ReadTimeout("timed out")
            answer = c.request(request.method, str(request.url), content=request.read(), headers=request.headers)
            return httpx.Response(answer.status_code, headers=answer.headers.multi_items(), content=answer.content)

        with httpx.Client(transport=httpx.MockTransport(slow)) as http:
            with pytest.raises(rlnb.APITimeoutError) as info:
                rlnb.connect("http://testserver", base_model="rlnb/tiny", http_client=http, record=False)
            c.post("/model-resources", content=late[0].read(), headers={"Content-Type": "application/json"})
            notes = " ".join(getattr(info.value, "__notes__", []))
            assert "may have created a model resource all the same, or may still" in notes
            call = re.search(r"APIClient\('http://testserver'\)\.(\w+)\(created_by='me'\)", notes)
            assert call is not None
            found = getattr(APIClient("http://testserver", http_client=http), call[1])(created_by="me").data
            assert [r.status for r in found] == [wire.ModelResourcesStatus.READY]  # the orphan the note points to


def test_a_scheme_the_transport_cannot_send_is_raised_at_once_as_unsent(caplog):
    """A transport that cannot send the URL's scheme (httpx's ``UnsupportedProtocol``: a transport of your own that
    takes http only, say) fails the same way every time, before a byte leaves: it was retried 6 times over 14 s,
    and a create's error said ``sent=True`` (it may have acted), so ``connect`` went looking for a lost one."""
    calls: list[httpx.Request] = []

    def http_only(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        raise httpx.UnsupportedProtocol(f"Request URL has an unsupported protocol '{request.url.scheme}://'.")

    transport = httpx.MockTransport(http_only)
    with APIClient(BASE, KEY, transport=transport, **quick({"max_retries": 3})) as client:
        for call in (client.supported_models, lambda: client.create_model_resources(wire.CreateModelResourcesRequest(
                base_model="m"))):  # fmt: skip
            calls.clear()
            with pytest.raises(rlnb.APIConnectionError, match=r"scheme is 'https': the transport cannot") as info:
                call()
            assert len(calls) == 1 and info.value.sent is False and type(info.value) is rlnb.APIConnectionError
    with caplog.at_level("INFO", logger="rlnb"), pytest.raises(rlnb.APIConnectionError) as info:
        rlnb.connect(BASE, api_key=KEY, transport=transport, base_model="m", record=False)
    assert info.value.sent is False and not [r for r in caplog.records if "was lost" in r.getMessage()]


@pytest.mark.parametrize("asked", [None, ""])
@pytest.mark.parametrize(
    "listed", [{}, {"display_name": None}, {"display_name": ""}, {"resume_from_checkpoint_id": ""}]
)
def test_a_lost_session_create_is_found_whichever_way_the_service_spells_no_name(listed, asked):
    """A service that writes "no display name" (or no resume checkpoint) as ``""`` (proto3 JSON with its defaults
    written) lists the session it made: matched as None (an unnamed create was not found, and left running)."""
    made = {"id": "s1", "status": "TRAINING_SESSION_STATUS_CREATING", "base_model": "m", "model_resources_id": "r",
            "created_by": "u", "created_at": "2026-01-01T00:00:10Z", "updated_at": "2026-01-01T00:00:10Z"}  # fmt: skip
    made.update(listed)
    page = {"data": [made], "meta": {"limit": 100, "has_more": False, "next_cursor": ""}}
    client = APIClient(BASE, api_key=KEY, transport=httpx.MockTransport(lambda r: httpx.Response(200, json=page)))
    request = wire.StartTrainingSessionRequest(model_resources_id="r", display_name=asked)
    assert [s.id for s in recover.sessions_since(client, request)(0.0)] == ["s1"]
    named = wire.StartTrainingSessionRequest(model_resources_id="r", display_name="run 7")
    assert recover.sessions_since(client, named)(0.0) == []  # a name still tells sessions apart


def test_a_create_answered_unreadably_names_what_the_server_made():
    """A 200 whose body has the resource's id but fails validation: the server made it, and nothing can list it
    either (the list fails the same way). The error said only that it "may have" been created."""
    fake = FakeAPI(ready_after=1)

    def handler(request: httpx.Request) -> httpx.Response:
        response = fake(request)
        if request.url.path.endswith("/model-resources"):
            data = json.loads(response.content)
            for each in data.get("data", [data]):
                each["created_at"] = "not a time"
            return httpx.Response(response.status_code, json=data)
        return response

    with pytest.raises(rlnb.APIError, match="not a valid ModelResources") as info:
        rlnb.connect(BASE, api_key=KEY, base_model="org/model-a", transport=httpx.MockTransport(handler),
                     record=False, ready_timeout=5, **FAST_POLL, **quick({}))  # fmt: skip
    (rid,) = fake.resources
    assert info.value.answer_id == rid
    assert any(f"created a model resource {rid}" in note for note in info.value.__notes__)


HOSTILE = "mr-1\x1b[2J\x1b]0;owned\x07\u202e"
"""An id a hostile server may send: ANSI escapes that clear the terminal and retitle it, a right-to-left override."""
SHOWN = "mr-1\\x1b[2J\\x1b]0;owned\\x07\\u202e"


def lost_create(found: list[str], failure: BaseException, caplog: pytest.LogCaptureFixture) -> tuple[str, str]:
    """``recover.create_once`` of a create that fails with ``failure`` while listing finds resources ``found``: the
    text of what it raised (its message and notes; "" where it returned what it found) and of its log lines."""
    client = APIClient(BASE, api_key=KEY, transport=httpx.MockTransport(lambda r: error(500, "unused")))
    made = [wire.ModelResources.model_construct(id=i) for i in found]

    def create() -> wire.ModelResources:
        raise failure

    raised = ""
    with caplog.at_level("WARNING", logger="rlnb"):
        try:
            recover.create_once(create, lambda since: made, client, "a model resource", "list_model_resources",
                                lambda r: None)  # fmt: skip
        except BaseException as exc:  # noqa: BLE001 - the KeyboardInterrupt too: its note is what is checked
            raised = " ".join([str(exc), *getattr(exc, "__notes__", [])])
    return raised, " ".join(r.getMessage() for r in caplog.records)


def hostile_error() -> rlnb.APIError:
    """An unreadable answer's error: its message quotes the server's words, ``answer_id`` the id it sent."""
    error = rlnb.APIError(f"200 response is not a valid ModelResources: {HOSTILE}", method="POST", url=BASE)
    error.answer_id = HOSTILE
    return error


@pytest.mark.parametrize("found", [[], [HOSTILE], [HOSTILE, HOSTILE + "2"]], ids=["none", "one", "two"])
def test_what_a_hostile_server_named_is_said_with_its_control_characters_escaped(caplog, found):
    """``APIError.answer_id`` in the note, the listed ids and the lost answer's message in the error and the log were
    quoted raw: a hostile server's ANSI escapes acted on the terminal that showed them."""
    raised, logged = lost_create(found, hostile_error(), caplog)
    said = raised if len(found) != 1 else logged  # the error's own message (not rlnb's words) aside, with no note
    said = said.removeprefix(str(hostile_error())) if not found else said
    assert SHOWN in said and all(c.isprintable() for c in said + logged), said


@pytest.mark.parametrize("found", [[HOSTILE], [HOSTILE, HOSTILE + "2"]], ids=["one", "two"])
def test_an_interrupted_create_names_what_it_found_escaped(caplog, found):
    raised, logged = lost_create(found, KeyboardInterrupt(), caplog)
    assert SHOWN in raised + logged and all(c.isprintable() for c in raised + logged), raised + logged
