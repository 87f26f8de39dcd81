"""A remote session's options: flat keywords (``rlnb.connect(url, poll_max=...)``) and the groups they fill
(``SessionOptions``, ``ClientOptions``, ``PollOptions``) are the same settings, checked before anything is sent."""

import importlib
import json
import math
import re
from pathlib import Path

import httpx
import numpy as np
import pytest

import rlnb
from rlnb.remote.backend import RemoteBackend
from rlnb.remote.client import ClientOptions
from rlnb.remote.start import SessionOptions
from rlnb.remote.waiting import PollOptions
from tests.support.fake_api import BASE, KEY, FakeAPI


def recording() -> tuple[FakeAPI, list[httpx.Request], httpx.MockTransport]:
    fake, sent = FakeAPI(), []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return fake(request)

    return fake, sent, httpx.MockTransport(handler)


@pytest.mark.parametrize(
    "options, error, match",
    [
        ({"poll_min": 0.5, "poll_max": 0.1}, ValueError, r"need 0 < poll_min <= poll_max, got 0\.5, 0\.1"),
        ({"operation_timeout": 0}, ValueError, r"operation_timeout must be .* seconds in \(0, 86400\], got 0"),
        ({"poll_failure_window": -1.0}, ValueError, r"poll_failure_window must be .* in \(0, 86400\], got -1\.0"),
        # a bare TypeError ("'<=' not supported between ...") naming no field, or True taken as 1 s
        ({"poll_max": "30"}, ValueError, r"poll_max must be a finite number of seconds in \(0, 86400\], got '30'"),
        ({"ready_timeout": "60"}, ValueError, r"ready_timeout must be a finite number of seconds in \(0, 86400\]"),
        ({"poll_min": True}, ValueError, r"poll_min must be a finite number of seconds in \(0, 86400\], got True"),
        ({"operation_timeout": None}, ValueError, r"operation_timeout must be .* in \(0, 86400\], got None"),
        ({"optimizer": "sgd"}, ValueError, "optimizer must be one of adam, muon"),
        ({"lora": "yes"}, ValueError, "lora"),
        ({"muon_scaling": "original"}, ValueError, "muon_scaling applies to optimizer='muon' only"),
        ({"poll_maxx": 1.0}, TypeError, "unexpected keyword argument.*poll_maxx"),
        # the local spelling of a resume: a TypeError that named no remote option
        ({"resume_from": "ckpt-1"}, TypeError, r": resume_from \(.* checkpoint with resume_from_checkpoint_id=\)$"),
        ({"max_response_bytes": 0}, ValueError, "max_response_bytes must be None or an integer >= 1"),
        # each of these reached the server (after a resource was created), or raised Python's own TypeError
        ({"display_name": 5}, ValueError, "display_name must be None or a non-empty str, got 5"),
        ({"display_name": "run \udcff"}, ValueError, "display_name holds a lone surrogate at character 4"),
        ({"load_optimizer": "no"}, ValueError, "load_optimizer must be None, True or False, got 'no'"),
        ({"resume_from_checkpoint_id": ""}, ValueError, "resume_from_checkpoint_id must be None or a non-empty"),
        ({"num_generator_replicas": -1}, ValueError, r"num_generator_replicas must be .*2147483647\], got -1"),
        # echoed back past int64 by a server that took it; the API's field is an int32
        ({"num_generator_replicas": 2**31}, ValueError, r"replicas must be an integer in \[0, 2147483647\], got \d+"),
        # ignored without a resume: the user expected a checkpoint's optimizer state
        ({"load_optimizer": True}, ValueError, "load_optimizer applies only with resume_from_checkpoint_id"),
        ({"timeout": 0}, ValueError, r"timeout must be a finite number of seconds in \(0, 86400\], got 0"),
        ({"timeout": "10"}, ValueError, r"timeout must be a finite number of seconds in \(0, 86400\], got '10'"),
        ({"deadline": "30"}, ValueError, r"deadline must be a finite number of seconds in \(0, 86400\], got '30'"),
        ({"deadline": float("nan")}, ValueError, r"deadline must be .* seconds in \(0, 86400\], got nan"),
        ({"max_retries": 1.5}, ValueError, "max_retries must be None or an integer >= 0, got 1.5"),
    ],
)
def test_bad_options_are_refused_before_anything_is_sent(options, error, match):
    _, sent, transport = recording()
    with pytest.raises(error, match=match):
        rlnb.connect(BASE, api_key=KEY, transport=transport, record=False, **options)
    assert sent == []  # no model resource was created (and paid for) before the refusal


@pytest.mark.parametrize("field", ["poll_max", "ready_timeout", "operation_timeout", "poll_failure_window"])
@pytest.mark.parametrize("seconds", [math.inf, 1e300, 10**5000], ids=["inf", "1e300", "10**5000"])
def test_a_poll_wait_past_a_day_is_refused_naming_its_field(field, seconds):
    """As every seconds option of rlnb: infinity and 1e300 were taken (a wait with no end, or a timer's own
    ``OverflowError``), and 10**5000 raised int's own "Exceeds the limit (4300 digits)", naming no field."""
    with pytest.raises(ValueError, match=rf"^{field} must be a finite number of seconds in \(0, 86400\], got "):
        PollOptions(**{field: seconds})


@pytest.mark.parametrize(
    "field, value, match",
    [
        *[
            ("deadline", v, r"^deadline must be a finite number of seconds in \(0, 86400\], got ")
            for v in (0, -1, math.nan, "30", True, math.inf)
        ],
        *[
            ("timeout", v, r"^timeout must be a finite number of seconds in \(0, 86400\], got ")
            for v in (0, -1, math.nan, "30", True)
        ],
        ("timeout", httpx.Timeout(5, read=-1), r"^timeout\.read must be a finite number of seconds"),
        ("server_extensions", "no", r"^server_extensions must be True or False, got 'no'"),  # truthy: left on
        ("server_extensions", None, r"^server_extensions must be True or False, got None"),
    ],
)
def test_a_client_group_checks_its_seconds_and_flag_when_it_is_built(field, value, match):
    """The docs' "each group checks its fields when it is built": ``ClientOptions(deadline=0)`` was built, and a
    group kept for reuse carried it to each connect; ``server_extensions="no"`` was taken as yes everywhere. The same
    message from the group, ``APIClient`` and ``connect``, before anything is sent."""
    from rlnb.remote.client import APIClient

    with pytest.raises(ValueError, match=match):
        ClientOptions(**{field: value})
    _, sent, transport = recording()
    with pytest.raises(ValueError, match=match):
        APIClient(BASE, KEY, transport=transport, **{field: value})
    with pytest.raises(ValueError, match=match):
        rlnb.connect(BASE, api_key=KEY, transport=transport, record=False, **{field: value})
    assert sent == []


def test_a_client_group_keeps_what_it_checked_as_plain_values():
    options = ClientOptions(deadline=np.float64(30), timeout=np.int64(5), server_extensions=np.False_)
    assert (options.deadline, options.timeout, options.server_extensions) == (30.0, 5.0, False)
    assert type(options.deadline) is float and type(options.timeout) is float and options.server_extensions is False


@pytest.mark.parametrize("deadline", ["x" * 100_000, 10**5000, 1e10], ids=["long_str", "10**5000", "1e10"])
def test_a_deadline_out_of_range_is_refused_naming_it_in_a_short_message(deadline):
    """A 100,000-character string came back whole in a 100,055-character message; 10**5000 raised int's own "Exceeds
    the limit (4300 digits)", naming no option; 1e10 was taken, and with ``timeout=httpx.Timeout(None)`` every request
    then failed in the socket with a bare ``OverflowError: timestamp out of range``."""
    from rlnb.remote.client import APIClient

    _, sent, transport = recording()
    with pytest.raises(ValueError, match=r"^deadline must be a finite number of seconds in \(0, 86400\], got ") as got:
        APIClient(BASE, KEY, transport=transport, deadline=deadline, timeout=httpx.Timeout(None))
    assert len(str(got.value)) < 200
    assert sent == []


def test_groups_and_flat_keywords_are_the_same_settings():
    """A flat keyword overrides its group's field; the groups reach the client, the poller and the request."""
    fake, _, transport = recording()
    backend = RemoteBackend.connect(
        BASE,
        KEY,
        session=SessionOptions(base_model="org/model-b", optimizer="muon", muon_scaling="match_adam"),
        client=ClientOptions(transport=transport, deadline=30.0, max_response_bytes=1 << 20),
        poll=PollOptions(poll_min=0.002, poll_max=0.02, ready_timeout=5),
        poll_max=0.05,
        display_name="grouped",
    )
    try:
        assert backend.optimizer == "muon" and backend.client.deadline == 30.0
        assert backend.client.max_response_bytes == 1 << 20
        assert (backend._poller.poll_min, backend._poller.poll_max) == (0.002, 0.05)
        [create] = fake.calls("POST", r"/model-resources$")
        body = json.loads(create.content)
        assert body["base_model"] == "org/model-b"
        assert body["optimizer_config"] == {"muon": {"scaling_strategy": "MUON_SCALING_STRATEGY_MATCH_ADAM"}}
        [start] = fake.calls("POST", r"/training-sessions$")
        assert json.loads(start.content)["display_name"] == "grouped"
    finally:
        backend.close()


def test_an_attached_session_takes_no_new_session_options():
    fake, sent, transport = recording()
    sid = fake.add_session(fake.add_resource({"adam": {}}))
    with pytest.raises(ValueError, match="base_model, display_name describe a new session"):
        RemoteBackend.connect(BASE, KEY, session_id=sid, transport=transport, base_model="x", display_name="y")
    assert sent == []
    with pytest.raises(ValueError, match="uses adam, not muon"):
        RemoteBackend.connect(BASE, KEY, session_id=sid, transport=transport, optimizer="muon", ready_timeout=5)
    assert not fake.calls("POST")  # attaching creates nothing


@pytest.mark.parametrize("target", [None, 8000, b"http://x"])
def test_a_target_that_is_no_str_is_a_type_error_naming_it(target):
    with pytest.raises(TypeError, match="target must be 'local' or an http"):
        rlnb.connect(target, record=False)


def test_the_operation_timeout_default_is_a_shared_default_lr_find_reads_without_the_remote_client():
    """lr_find imported its wait from ``rlnb.remote.poller`` (the remote client, httpx with it) for local sessions too;
    the default lives with the other operation constants in ``rlnb.wire``, and both read that one value."""
    find_lr = importlib.import_module("rlnb.sweep.lr.find")

    assert PollOptions().operation_timeout == rlnb.wire.OPERATION_TIMEOUT == find_lr.OPERATION_TIMEOUT == 3600.0
    imports = [
        line for line in Path(find_lr.__file__).read_text().splitlines() if line.startswith(("from ", "import "))
    ]
    assert not [line for line in imports if "rlnb.remote" in line]


def test_the_docs_name_the_module_each_option_group_is_defined_in():
    """``docs/remote.md``'s table says where to import each group from: the module that defines it (``PollOptions``
    moved to ``rlnb.remote.waiting`` when ``poller`` was split), so the import the docs show works."""
    table = (Path(__file__).resolve().parents[2] / "docs" / "remote.md").read_text()
    named = dict(re.findall(r"^\| `(\w+Options)` \(`([\w.]+)`", table, re.M))
    groups = {group.__name__: group.__module__ for group in (SessionOptions, ClientOptions, PollOptions)}
    assert named == groups
    shown = re.findall(r"^from (rlnb[\w.]*) import (\w+Options)$", table, re.M)
    assert shown and all(getattr(importlib.import_module(m), name).__module__ == m for m, name in shown)


def test_numpy_seconds_are_taken_as_the_numbers_they_hold():
    """``timeout=np.int64(30)`` (a value read from an array or a config) was refused as "must be a finite number of
    seconds > 0", while every other seconds option of rlnb takes numpy scalars."""
    import numpy as np

    from rlnb.remote.client import APIClient

    _, _, transport = recording()
    client = APIClient(BASE, KEY, transport=transport, timeout=np.int64(30), deadline=np.float32(45.0))
    assert (client.deadline, type(client.deadline)) == (45.0, float)
    assert client._http.timeout == httpx.Timeout(30.0)


def test_a_session_says_whether_a_service_runs_it():
    """``lr_find`` reads it (its copy of a remote session is opened on the service), as config.json's ``backend``."""
    from rlnb.testing import FakeBackend

    _, _, transport = recording()
    remote = rlnb.connect(BASE, api_key=KEY, transport=transport, record=False, poll_min=0.002, poll_max=0.02)
    here = rlnb.Session(FakeBackend(), record=False)
    try:
        assert (remote.is_remote, here.is_remote) == (True, False)
        assert (remote.history.config["backend"], here.history.config["backend"]) == ("remote", "fake")
    finally:
        remote.close()
        here.close()
