"""The engine's own bounds on stop strings: every new token is searched for every stop string, in every row, so
10,000 of them (or one of a megabyte) slowed the sampler to a crawl. The session and ``rlnb serve`` refused them
before sending, but a caller of the engine itself (``LocalBackend.submit``) was not held to any bound."""

from __future__ import annotations

import pytest

from rlnb import wire
from rlnb.engine.backend import LocalBackend
from tests.support.server import app_client, new_session, submit, wait


@pytest.fixture(scope="module")
def backend():
    b = LocalBackend(model="tiny", device="cpu")
    yield b
    b.close()


def sample(backend: LocalBackend, stop: list[str]) -> wire.Operation:
    """A sample of one prompt with these stop strings, submitted to the engine as it is; its last envelope."""
    body = wire.SampleBody(
        model_inputs=[wire.ModelInput.from_tokens(list(b"n="))],
        sampling_params=wire.SamplingParams(max_tokens=4, stop=stop),
    )
    got: list[wire.Operation] = []
    backend.submit(wire.OperationKind.SAMPLE, body, got.append)
    assert backend.wait_idle(60)
    return got[-1]


@pytest.mark.parametrize(
    ("stop", "said"),
    [
        (["x"] * (wire.MAX_STOP_STRINGS + 1), f"sampling_params.stop has {wire.MAX_STOP_STRINGS + 1} strings; the "
                                              f"limit is {wire.MAX_STOP_STRINGS}"),
        (["x", "y" * (wire.MAX_STOP_CHARS + 1)], f"sampling_params.stop[1] has {wire.MAX_STOP_CHARS + 1} characters; "
                                                 f"the limit is {wire.MAX_STOP_CHARS} per stop string"),
    ],
    ids=["too many", "too long"],
)  # fmt: skip
def test_stop_strings_past_the_engines_bounds_fail_invalid_input_naming_them(backend, stop, said):
    err = sample(backend, stop).error
    assert err is not None and err.code == wire.OperationErrorCode.INVALID_INPUT, err
    assert said in err.message


def test_stop_strings_at_the_engines_bounds_are_taken(backend):
    stop = ["x"] * (wire.MAX_STOP_STRINGS - 1) + ["z" * wire.MAX_STOP_CHARS]
    done = sample(backend, stop)
    assert done.status == wire.OperationStatus.COMPLETED, done


def test_a_server_with_raised_stop_limits_hands_its_own_bounds_to_its_engines(tmp_path):
    """``rlnb serve --limit max_stop_strings=...`` checks its own limit: its engines take what it took."""
    many = wire.MAX_STOP_STRINGS + 4
    with app_client(tmp_path, max_stop_strings=many, max_stop_chars=wire.MAX_STOP_CHARS * 2) as c:
        _, sid = new_session(c)
        stop = ["x"] * (many - 1) + ["z" * (wire.MAX_STOP_CHARS * 2)]
        body = {"model_inputs": [wire.ModelInput.from_tokens(list(b"n=")).to_json_dict()],
                "sampling_params": {"max_tokens": 4, "stop": stop}}  # fmt: skip
        env = wait(c, sid, "sample", submit(c, sid, "sample", body)["id"])
        assert env["status"] == wire.OperationStatus.COMPLETED, env
